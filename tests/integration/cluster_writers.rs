//! One writer at a time across hosts, whatever happens to the writer's
//! host: two agents in network namespaces of their own, each with a
//! hostpath plugin on one shared base dir (one storage system seen from
//! two hosts), and a 3-member etcd on the bridge. Host A runs a task that
//! appends time-stamped lines to a single-writer volume; then A's link is
//! cut, or its agent is SIGKILLed. Host B claims the volume as soon as the
//! cluster lets it and appends lines of its own. The figure is the overlap:
//! lines of A's writer, in the data other hosts see, stamped after B's
//! first line. It is zero in every case, at every accepted setting:
//!
//! - with `stop_after_disconnect` (A promises to stop its writers, and the
//!   fencer waits for that promise), on a plugin that cannot fence
//!   (`-no-attach`): at the default lease, and at the shortest and a long
//!   stop the config accepts;
//! - without it, on a plugin whose detach is a real fence (`-fence`): A's
//!   task writes on, into data nobody else sees;
//! - with A's agent SIGKILLed: its guard stops the task (no fence), or the
//!   storage fence cuts it off.
//!
//! Each case also bounds how long the volume had no writer, and, where A
//! comes back, checks that A gives up what the cluster took, nothing left
//! mounted.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use csi_agent::api::client::AgentClient;
use csi_agent::proto::agent::JobStatus;

use crate::cluster_agents::{lists, node_status_until};
use crate::etcd::{require_etcd, Cluster};
use crate::harness::{block, healthy, text, Agent, WAIT};
use crate::netns::Net;
use crate::util::{mounts_under, require_root, Plugin};
use crate::volume_util::{claim_at, connect, spec, wait_volume, PLUGIN};

/// The hosts' node names, as many as a case uses.
pub const NODES: [&str; 3] = ["host-a", "host-b", "host-c"];

/// A cluster's settings as a test varies them.
pub struct Settings {
    /// The plugin's flags: `-fence` (a detach cuts the node off) or
    /// `-no-attach` (no controller: nothing can fence).
    pub flags: &'static str,
    /// The plugins judge the agents (`-strict`).
    pub strict: bool,
    /// `None`: the default.
    pub lease_ttl: Option<&'static str>,
    pub stop_after_disconnect: Option<&'static str>,
}

/// The hosts; fields drop in order: agents, plugins (the base dir's owner
/// last), etcd, the namespaces.
pub struct Hosts {
    pub agents: Vec<Agent>,
    pub plugins: Vec<Plugin>,
    pub etcd: Cluster,
    pub net: Net,
}

impl Hosts {
    /// Every agent's log, one after the other, for a failure's message.
    pub fn logs(&self) -> String {
        self.agents
            .iter()
            .map(|a| a.log())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Two hosts, A and B.
    fn start(settings: &Settings) -> Hosts {
        Hosts::start_n(2, settings)
    }

    /// `n` hosts (at most three), the last one's plugin owning the base
    /// dir.
    pub fn start_n(n: usize, settings: &Settings) -> Hosts {
        let nodes = &NODES[..n];
        let net = Net::new(n);
        let etcd = Cluster::start_on(3, net.bridge_addr().into());
        // One base dir for every host (`-shared`): one storage system.
        let with_node = |i: usize| [settings.flags, "-shared", "-node-id", nodes[i]];
        let owner = if settings.strict {
            Plugin::start_with(&[], &with_node(n - 1))
        } else {
            Plugin::start_lenient_with(&[], &with_node(n - 1))
        };
        let mut plugins: Vec<Plugin> = (0..n - 1)
            .map(|i| match settings.strict {
                true => Plugin::start_sharing(&owner, &[], &with_node(i)),
                false => Plugin::start_sharing_lenient(&owner, &with_node(i)),
            })
            .collect();
        plugins.push(owner);
        let endpoints: Vec<String> = etcd.clients.iter().map(|e| format!("{e:?}")).collect();
        let mut cluster = format!("  etcd = [{}]\n", endpoints.join(", "));
        if let Some(ttl) = settings.lease_ttl {
            cluster.push_str(&format!("  lease_ttl = {ttl:?}\n"));
        }
        if let Some(after) = settings.stop_after_disconnect {
            cluster.push_str(&format!("  stop_after_disconnect = {after:?}\n"));
        }
        let agents: Vec<Agent> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let extra = format!(
                    "\nnode_name = {node:?}\nmax_kill_timeout = \"2s\"\n\ncluster {{\n{cluster}}}\n"
                );
                let plugins = [block(PLUGIN, &plugins[i].socket)];
                let agent = Agent::start_in_netns(&net.netns_path(i), &plugins, &extra);
                agent.wait_for(PLUGIN, healthy, WAIT);
                agent
            })
            .collect();
        for agent in &agents {
            node_status_until(agent, "every node", |s| nodes.iter().all(|n| lists(s, n)));
        }
        Hosts {
            agents,
            plugins,
            etcd,
            net,
        }
    }

    /// The volume's data as every host sees it now (a fenced node's
    /// writes are not in it).
    pub fn data(&self, volume: &str) -> PathBuf {
        self.plugins[0].base.join("volumes").join(volume)
    }
}

/// The job of host A: one exec task appending `A <unix ns>` lines to the
/// volume, mounted at /data, every 20 ms.
fn writer_job(volume: &str) -> String {
    writer_job_as("writer", "A", volume)
}

/// A job `name` whose one exec task appends `<who> <unix ns>` lines to
/// `volume`, mounted at /data, every 20 ms.
pub fn writer_job_as(name: &str, who: &str, volume: &str) -> String {
    let script = format!("while :; do echo \"{who} $(date +%s%N)\" >> /data/log; sleep 0.02; done");
    let claim = format!(
        "volume \"data\" {{\n      type            = \"csi\"\n      source          = {volume:?}\n      access_mode     = \"single-node-writer\"\n      attachment_mode = \"file-system\"\n    }}"
    );
    let mount = "kill_timeout = \"1s\"\n      volume_mount {\n        volume      = \"data\"\n        destination = \"/data\"\n      }";
    crate::job::root::shell_job(name, &script, &claim, mount)
}

fn writer(agent: &Agent) -> JobStatus {
    let client = AgentClient::connect(&agent.socket).unwrap();
    client.job_status("writer").unwrap().jobs.remove(0)
}

/// The writer task's pid, once it runs.
fn writer_pid(agent: &Agent) -> u32 {
    let start = Instant::now();
    loop {
        let job = writer(agent);
        let running = job.allocs.iter().find(|a| a.status == "running");
        if let Some(task) = running.and_then(|a| a.tasks.iter().find(|t| t.state == "running")) {
            if task.pid != 0 {
                return task.pid;
            }
        }
        assert!(
            start.elapsed() < WAIT * 3,
            "the writer never ran: {job:#?}\n{}",
            agent.log()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

/// Kills the writer's process group when the test ends, however it ends:
/// a task outlives its agent.
struct Reaper(u32);

impl Drop for Reaper {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a negative pid signals a process group;
        // plain integers, no memory effects.
        unsafe { libc::kill(-(self.0 as libc::pid_t), libc::SIGKILL) };
    }
}

/// Runs A's writer on `volume` and waits until its lines land.
/// Runs the writer job on `a`; `guarded`: the node promised to stop its
/// writers (`stop_after_disconnect`), so its guard must know this one.
fn start_writer(a: &Agent, data: &Path, volume: &str, guarded: bool) -> Reaper {
    let path = a.dir.join("writer.hcl");
    fs::write(&path, writer_job(volume)).unwrap();
    let out = a.cli(&["job", "run", &path.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let pid = writer_pid(a);
    let reaper = Reaper(pid);
    // The guard must know the writer from the turn that saw it run, not
    // from a later snapshot: the agent may die the moment after. The
    // `job status` that gave the pid may have been answered in that very
    // turn, before its end wrote the guard's file (a read joins the turn's
    // batch), so the file is looked at until it lists the writer, for less
    // than the snapshot that would otherwise carry it is due in.
    if guarded {
        let start = Instant::now();
        let listed = |writers: &str| {
            writers
                .lines()
                .any(|l| l.starts_with(&format!("task {pid} ")))
        };
        loop {
            let writers =
                fs::read_to_string(a.data_dir.join("cluster-writers")).unwrap_or_default();
            if listed(&writers) {
                break;
            }
            assert!(
                start.elapsed() < csi_agent::task::STARTS_SAVED_WITHIN,
                "the writer {pid} runs, but the guard's file does not list it:\n{writers}"
            );
            thread::sleep(Duration::from_millis(5));
        }
    }
    let start = Instant::now();
    while lines(data, "A").len() < 5 {
        assert!(
            start.elapsed() < WAIT,
            "A's writer never wrote\n{}",
            a.log()
        );
        thread::sleep(Duration::from_millis(50));
    }
    reaper
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The stamps of `who`'s lines in the volume's `log`.
pub fn lines(data: &Path, who: &str) -> Vec<u128> {
    fs::read_to_string(data.join("log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(who)?.trim().parse().ok())
        .collect()
}

/// Claims `volume` on B, again and again until the cluster admits it, at
/// a target of the test's; answers the target once admitted.
fn claim_on_b(b: &Agent, volume: &str, timeout: Duration) -> PathBuf {
    let target = b.dir.join("b-target");
    let start = Instant::now();
    loop {
        match connect(b).volume_claim(&claim_at(volume, "b-1", &target)) {
            Ok(_) => return target,
            Err(err) if start.elapsed() < timeout => {
                let _ = err;
                thread::sleep(Duration::from_millis(100));
            }
            Err(err) => panic!("{volume} was never given to B: {err}\n{}", b.log()),
        }
    }
}

/// B's writer: `B <unix ns>` lines for `how_long`, each appended by path.
fn write_as_b(target: &Path, how_long: Duration) {
    let start = Instant::now();
    while start.elapsed() < how_long {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(target.join("log"))
            .unwrap();
        writeln!(log, "B {}", unix_ns()).unwrap();
        thread::sleep(Duration::from_millis(20));
    }
}

/// What a case measured.
struct Figures {
    /// A's lines, in the data every host sees, stamped at or after B's
    /// first line.
    overlap: usize,
    /// From the cut (or kill) to B's first line.
    unavailable: Duration,
}

/// Cuts A off with `cut`, has B claim and write, and measures.
fn run_case(
    hosts: &mut Hosts,
    volume: &str,
    cut: impl FnOnce(&mut Hosts),
    bound: Duration,
) -> Figures {
    let data = hosts.data(volume);
    let cut_at = unix_ns();
    cut(hosts);
    let target = claim_on_b(&hosts.agents[1], volume, bound);
    write_as_b(&target, Duration::from_secs(2));
    let b = lines(&data, "B");
    let a = lines(&data, "A");
    let first_b = *b.first().expect("B wrote");
    let figures = Figures {
        overlap: a.iter().filter(|t| **t >= first_b).count(),
        unavailable: Duration::from_nanos((first_b - cut_at) as u64),
    };
    eprintln!(
        "{volume}: overlap {} lines; the volume had no writer for {:?} after the cut; A's last line {:?} before B's first",
        figures.overlap,
        figures.unavailable,
        a.last()
            .map(|t| Duration::from_nanos(first_b.saturating_sub(*t) as u64))
    );
    assert_eq!(
        figures.overlap,
        0,
        "A wrote after B began:\nA: {a:?}\nB's first: {first_b}\n{}\n{}",
        hosts.agents[0].log(),
        hosts.agents[1].log()
    );
    assert!(
        figures.unavailable <= bound,
        "the volume had no writer for {:?} (bound {bound:?})",
        figures.unavailable
    );
    // B releases; its writes stay.
    connect(&hosts.agents[1])
        .volume_release(volume, "b-1")
        .unwrap();
    figures
}

/// Creates a single-writer volume from A, seen by every host.
pub fn volume(hosts: &Hosts, id: &str) {
    connect(&hosts.agents[0])
        .volume_create(
            &format!("{id}.hcl"),
            &spec(id, &["single-node-writer"], None),
        )
        .unwrap();
    for agent in &hosts.agents[1..] {
        wait_volume(agent, id, "registered", |_| true, WAIT);
    }
}

/// A heals, and gives up what the cluster took: its task is not running,
/// nothing of it is mounted.
fn heal_and_give_up(hosts: &Hosts, pid: u32) {
    hosts.net.heal(0);
    let a = &hosts.agents[0];
    let start = Instant::now();
    loop {
        let job = writer(a);
        let stopped = job.allocs.iter().all(|al| al.status != "running");
        if stopped && !alive(pid) && mounts_under(&a.data_dir).is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "A kept its task or its mounts: {job:#?}\n{:?}\n{}",
            mounts_under(&a.data_dir),
            a.log()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// A partition of the writer's host with `settings`; `bound`: the
/// longest the volume may go without a writer.
fn partition_case(settings: Settings, bound: Duration) {
    if !require_root() || !require_etcd() {
        return;
    }
    let mut hosts = Hosts::start(&settings);
    volume(&hosts, "w");
    let reaper = start_writer(
        &hosts.agents[0],
        &hosts.data("w"),
        "w",
        settings.stop_after_disconnect.is_some(),
    );
    let pid = reaper.0;
    run_case(&mut hosts, "w", |h| h.net.partition(0), bound);
    if settings.stop_after_disconnect.is_some() {
        assert!(!alive(pid), "A's writer still runs while A is cut off");
    }
    heal_and_give_up(&hosts, pid);
}

#[test]
fn a_cut_off_writer_stops_before_another_host_writes_at_the_default_lease() {
    // The default lease (10s) and the shortest stop it accepts.
    partition_case(
        Settings {
            strict: true,
            flags: "-no-attach",
            lease_ttl: None,
            stop_after_disconnect: Some("7s"),
        },
        Duration::from_secs(45),
    );
}

#[test]
fn a_cut_off_writer_stops_before_another_host_writes_at_the_shortest_accepted_stop() {
    // stop_after_disconnect at its floor: two keep-alive periods.
    partition_case(
        Settings {
            strict: true,
            flags: "-no-attach",
            lease_ttl: Some("3s"),
            stop_after_disconnect: Some("2s"),
        },
        Duration::from_secs(30),
    );
}

#[test]
fn a_cut_off_writer_stops_before_another_host_writes_with_a_stop_longer_than_the_lease() {
    partition_case(
        Settings {
            strict: true,
            flags: "-no-attach",
            lease_ttl: Some("2s"),
            stop_after_disconnect: Some("8s"),
        },
        Duration::from_secs(40),
    );
}

#[test]
fn without_stop_after_disconnect_the_storage_fence_cuts_a_cut_off_writer_off() {
    partition_case(
        Settings {
            strict: true,
            flags: "-fence",
            lease_ttl: Some("2s"),
            stop_after_disconnect: None,
        },
        Duration::from_secs(30),
    );
}

/// A's agent SIGKILLed while its task writes, A's link up.
fn killed_agent_case(settings: Settings, bound: Duration) {
    if !require_root() || !require_etcd() {
        return;
    }
    let mut hosts = Hosts::start(&settings);
    volume(&hosts, "k");
    let reaper = start_writer(
        &hosts.agents[0],
        &hosts.data("k"),
        "k",
        settings.stop_after_disconnect.is_some(),
    );
    let pid = reaper.0;
    run_case(&mut hosts, "k", |h| h.agents[0].sigkill(), bound);
    if settings.stop_after_disconnect.is_some() {
        assert!(!alive(pid), "the guard did not stop A's writer");
    }
    // Back, A's agent gives up what the cluster took.
    hosts.agents[0].restart();
    let a = &hosts.agents[0];
    let start = Instant::now();
    while !mounts_under(&a.data_dir).is_empty() || alive(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "A kept its writer or mounts after its restart: {:?}\n{}",
            mounts_under(&a.data_dir),
            a.log()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_killed_agent_s_guard_stops_its_writer_before_another_host_writes() {
    killed_agent_case(
        Settings {
            strict: true,
            flags: "-no-attach",
            lease_ttl: Some("3s"),
            stop_after_disconnect: Some("2s"),
        },
        Duration::from_secs(30),
    );
}

#[test]
fn a_killed_agent_s_writer_is_cut_off_by_the_storage_fence() {
    killed_agent_case(
        Settings {
            strict: true,
            flags: "-fence",
            lease_ttl: Some("2s"),
            stop_after_disconnect: None,
        },
        Duration::from_secs(30),
    );
}
