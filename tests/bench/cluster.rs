//! P7, claims across hosts: three agents on this machine, each a host of
//! one cluster on a 3-member etcd (Debian's `etcd-server`, started here on
//! loopback ports), each with a hostpath plugin of its own node ID, all
//! plugins on one base dir (one storage system seen from three hosts), as
//! the cluster tests run them.
//!
//! - Throughput: every host claims and releases volumes of its own, several
//!   at once, until `--cluster-claims` claims are done: claims per second
//!   over the wall time, and each claim's latency meanwhile. Every claim
//!   goes through etcd (a transaction on the volume's claim set) and the
//!   controller leader (one of the agents) for ControllerPublish.
//! - Latency: one claim at a time on one host of the cluster, next to the
//!   same claim on an agent without a `cluster` block (local journal only),
//!   alternating, so that noise falls on both alike.
//! - The floor, on the same members: an etcd Txn round trip, and the delay
//!   of a watch's notification. A claim through etcd needs, beyond the
//!   local claim, three writes (the admission, the attach intent, the
//!   leader's answer) and one notification: that is its floor.
//!
//! Without etcd installed the row says so and measures nothing.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;
use csi_agent::proto::agent::VolumeClaimRequest;
use csi_agent::trace::anatomy::{calls, Point};
use csi_agent::trace::now_us;

use crate::claim::volume_spec;
use crate::rig::{agent_config, wait_until, Agent, BenchDir, Plugin};
use crate::stats::Samples;
use crate::Options;

/// Hosts (agents) of the cluster, and etcd members.
pub const HOSTS: usize = 3;

/// Claims and releases each latency side makes before measuring.
const WARMUP: usize = 5;

/// One throughput run: claims in flight at once on each host, how many
/// were made, in what wall time, and each one's latency meanwhile.
pub struct Throughput {
    pub at_once: usize,
    pub claims: usize,
    pub wall: Duration,
    pub latency: Samples,
}

impl Throughput {
    pub fn per_second(&self) -> f64 {
        self.claims as f64 / self.wall.as_secs_f64()
    }
}

pub struct ClusterResult {
    /// With 1, 2 and 4 claims in flight on each host.
    pub runs: Vec<Throughput>,
    /// The floor, on the same members: one Txn round trip, and how long
    /// after a put a watch in step with etcd hears of it.
    pub txn: Samples,
    pub notify: Samples,
    /// The median of each of [`PHASES`] of a claim one at a time.
    pub anatomy: Option<Vec<u64>>,
    pub lost: Lost,
    /// One claim at a time: on a host of the cluster, and on an agent
    /// without one.
    pub etcd_claim: Samples,
    pub local_claim: Samples,
    /// A freed volume taken by the host waiting for it.
    pub freed: crate::freed::Freed,
}

/// Whether `etcd` can be run here.
pub fn etcd_installed() -> bool {
    Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn run(opts: &Options, root: &Path) -> ClusterResult {
    let dir = BenchDir::new(root, "p7", opts.keep);
    let etcd = EtcdMembers::start(&dir, HOSTS);
    let base = dir.mkdir("base");
    let hosts: Vec<(Plugin, Agent)> = (0..HOSTS)
        .map(|i| {
            let node = format!("host-{i}");
            let host_dir = dir.join(&node);
            let mut plugin = Plugin::new(
                &opts.bin,
                &host_dir.join("plugin"),
                &host_dir.join("p.sock"),
                opts.delay(Duration::ZERO),
            )
            .on_host(&base, &node)
            .fencing();
            plugin.start();
            let plugins = [("hp".to_string(), plugin.socket.clone())];
            let mut agent = Agent::new(&opts.agent_bin, &host_dir.join("agent"), |data| {
                agent_config(data, opts.heartbeat, &plugins) + &cluster_block(&node, &etcd.clients)
            });
            if i == 0 {
                // The latency runs' anatomy: host 0's trace points.
                agent.trace_to(&dir.join("trace"));
            }
            agent.start();
            agent.wait_healthy(1);
            (plugin, agent)
        })
        .collect();
    let agents: Vec<&Agent> = hosts.iter().map(|(_, agent)| agent).collect();

    let at_once = 4;
    let volumes: Vec<Vec<String>> = (0..HOSTS)
        .map(|h| (0..at_once).map(|j| format!("h{h}-{j}")).collect())
        .collect();
    for id in volumes
        .iter()
        .flatten()
        .chain([&"lat".to_string(), &"lost".to_string()])
    {
        create_everywhere(&agents, id);
    }
    let runs: Vec<Throughput> = [1, 2, at_once]
        .into_iter()
        .map(|n| {
            let some: Vec<Vec<String>> = volumes.iter().map(|v| v[..n].to_vec()).collect();
            let (wall, latency, claims) = throughput(&agents, &some, opts.cluster_claims);
            Throughput {
                at_once: n,
                claims,
                wall,
                latency,
            }
        })
        .collect();
    let (txn, notify) = etcd_floor(&etcd.clients, opts.cluster_runs);

    // The same claim without a cluster: an agent with a plugin of its own.
    let mut solo_plugin = Plugin::new(
        &opts.bin,
        &dir.join("solo/plugin"),
        &dir.join("solo/p.sock"),
        opts.delay(Duration::ZERO),
    );
    solo_plugin.start();
    let plugins = [("hp".to_string(), solo_plugin.socket.clone())];
    let mut solo = Agent::new(&opts.agent_bin, &dir.join("solo/agent"), |data| {
        agent_config(data, opts.heartbeat, &plugins)
    });
    solo.start();
    solo.wait_healthy(1);
    create_everywhere(&[&solo], "lat");

    let (in_cluster, alone) = (agents[0].client(), solo.client());
    let mut etcd_claim = Samples::default();
    let mut local_claim = Samples::default();
    let mut marks: Vec<Point> = Vec::new();
    let mark = |marks: &mut Vec<Point>, label: &str| {
        marks.push(Point {
            at: now_us(),
            label: label.to_string(),
            detail: String::new(),
        })
    };
    for i in 0..WARMUP + opts.cluster_runs {
        let alloc = format!("l{i}");
        mark(&mut marks, "claim");
        let cluster_took = claim_and_release(&in_cluster, "lat", &alloc);
        mark(&mut marks, "released");
        let local_took = claim_and_release(&alone, "lat", &alloc);
        if i >= WARMUP {
            etcd_claim.push(cluster_took);
            local_claim.push(local_took);
        }
    }
    let mut hosts = hosts;
    hosts[0].1.stop();
    let anatomy = anatomy(&dir.join("trace"), marks);
    let lost = lost_host(&hosts[1].1, &hosts[2].1);
    let freed = crate::freed::run_cuts(
        [(&hosts[1].1, "host-1"), (&hosts[2].1, "host-2")],
        &etcd.clients,
        opts.freed_cuts,
    );
    drop(hosts);
    ClusterResult {
        runs,
        txn,
        notify,
        etcd_claim,
        local_claim,
        anatomy,
        lost,
        freed,
    }
}

/// A host lost while it holds a claim, and back: how long until another
/// host can claim the volume, and how long the host, once back, takes to
/// give up what the cluster took.
pub struct Lost {
    pub usable_elsewhere: Duration,
    pub rejoined: Duration,
}

/// Host `lost` claims volume `lost` and is frozen (SIGSTOP: no keep-alive
/// leaves it, as when its link is cut), at the default lease TTL and
/// without `stop_after_disconnect`: the cluster fences it through the
/// controller leader's detach (the plugins run with `-fence`) and `other`
/// claims the volume; then `lost` is thawed and gives its claim up.
fn lost_host(lost: &Agent, other: &Agent) -> Lost {
    let claim = |alloc: &str| VolumeClaimRequest {
        volume_id: "lost".into(),
        alloc_id: alloc.into(),
        ..Default::default()
    };
    lost.client()
        .volume_claim(&claim("x"))
        .expect("the claim of the host to lose");
    lost.signal(libc::SIGSTOP);
    let cut = Instant::now();
    let elsewhere = other.client();
    wait_until(
        "the volume to be usable on another host",
        Duration::from_millis(100),
        || elsewhere.volume_claim(&claim("y")).is_ok(),
    );
    let usable_elsewhere = cut.elapsed();
    elsewhere
        .volume_release("lost", "y")
        .expect("release on the other host");
    lost.signal(libc::SIGCONT);
    let back = Instant::now();
    let client = lost.client();
    wait_until(
        "the host to give up its fenced claim",
        Duration::from_millis(50),
        || {
            client.volume_status("lost", false).is_ok_and(|s| {
                s.volumes
                    .iter()
                    .all(|v| v.claims.is_empty() && v.past_claims.is_empty())
            })
        },
    );
    Lost {
        usable_elsewhere,
        rejoined: back.elapsed(),
    }
}

/// The phases of a claim through etcd, in order: each ends at the trace
/// point named, and starts where the one before ended (the first at the
/// benchmark's `claim` mark).
pub const PHASES: [(&str, &str); 7] = [
    (
        "to the admission (control API, record synced)",
        "etcd-admit",
    ),
    ("admission (claim set read + Txn)", "etcd-admitted"),
    (
        "to the attach (answer to the loop, planned, to a worker)",
        "etcd-watch",
    ),
    ("answer's watch opened", "etcd-intent"),
    ("attach intent written", "etcd-intent-written"),
    (
        "controller leader (sees it, ControllerPublish, answers; notified)",
        "etcd-answered",
    ),
    ("stage, publish, answer sent", "api-sent"),
];

/// The median of each of [`PHASES`] over the traced claims (the warm-up
/// left out), in microseconds; `None` without a trace.
fn anatomy(trace: &Path, marks: Vec<Point>) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(trace).ok()?;
    let mut points: Vec<Point> = text.lines().filter_map(Point::parse).collect();
    points.extend(marks);
    points.sort_by_key(|p| p.at);
    let mut phases: Vec<Vec<u64>> = vec![Vec::new(); PHASES.len()];
    for call in calls(&points, "claim", "released", WARMUP) {
        let mut from = call[0].at;
        let mut each = Vec::new();
        for (_, label) in PHASES {
            let Some(p) = call.iter().find(|p| p.label == label && p.at >= from) else {
                break;
            };
            each.push(p.at - from);
            from = p.at;
        }
        if each.len() == PHASES.len() {
            for (all, us) in phases.iter_mut().zip(each) {
                all.push(us);
            }
        }
    }
    Some(
        phases
            .into_iter()
            .map(|mut v| {
                v.sort_unstable();
                v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
            })
            .collect(),
    )
}

/// etcd's own floor on `endpoints`, `runs` times each: a Txn that puts a
/// key if its revision is as read (what an admission is), and the delay
/// from a put to its event on a watch opened before it (what a node waits
/// for the leader's answer with).
fn etcd_floor(endpoints: &[String], runs: usize) -> (Samples, Samples) {
    use csi_agent::cluster::etcd::{Etcd, Event};
    let etcd = Etcd::new(endpoints, None).expect("an etcd client");
    let key = b"/bench/floor";
    let mut txn = Samples::default();
    let mut notify = Samples::default();
    let mut revision = 0;
    for i in 0..WARMUP + runs {
        let value = format!("{i}");
        let start = Instant::now();
        let written = etcd
            .put_if(key, revision, value.as_bytes(), 0)
            .expect("an etcd txn")
            .expect("the key as read");
        let took = start.elapsed();
        revision = written;
        let watch = etcd.watch_prefix(b"/bench/notify", 0).expect("a watch");
        let start = Instant::now();
        etcd.put(b"/bench/notify", value.as_bytes(), 0)
            .expect("an etcd put");
        loop {
            let batch = watch.next(Duration::from_secs(5)).expect("the event");
            if batch.events.iter().any(|e| matches!(e, Event::Put(_))) {
                break;
            }
        }
        let heard = start.elapsed();
        if i >= WARMUP {
            txn.push(took);
            notify.push(heard);
        }
    }
    (txn, notify)
}

/// Every host claims and releases its own volumes, one thread per volume,
/// until `total` claims are made: the wall time, each claim's latency, and
/// the claims made (`total` rounded up to whole rounds).
fn throughput(
    agents: &[&Agent],
    volumes: &[Vec<String>],
    total: usize,
) -> (Duration, Samples, usize) {
    let threads = volumes.iter().map(Vec::len).sum::<usize>();
    let rounds = total.div_ceil(threads);
    let barrier = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = agents
        .iter()
        .zip(volumes)
        .flat_map(|(agent, ids)| {
            let socket = agent.socket.clone();
            let barrier = barrier.clone();
            ids.iter()
                .map(move |id| (socket.clone(), id.clone(), barrier.clone()))
                .collect::<Vec<_>>()
        })
        .map(|(socket, id, barrier)| {
            thread::spawn(move || {
                let client = AgentClient::connect(&socket).expect("connect to the agent");
                barrier.wait();
                (0..rounds)
                    .map(|r| claim_and_release(&client, &id, &format!("t{r}")))
                    .collect::<Vec<Duration>>()
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut samples = Samples::default();
    for worker in workers {
        for took in worker.join().expect("a claiming thread panicked") {
            samples.push(took);
        }
    }
    (start.elapsed(), samples, rounds * threads)
}

/// Claims `volume` for `alloc` (no target: the agent's publish path) and
/// releases it: how long the claim took to answer.
fn claim_and_release(client: &AgentClient, volume: &str, alloc: &str) -> Duration {
    let req = VolumeClaimRequest {
        volume_id: volume.into(),
        alloc_id: alloc.into(),
        ..Default::default()
    };
    let start = Instant::now();
    client
        .volume_claim(&req)
        .unwrap_or_else(|err| panic!("claim of {volume} by {alloc}: {err}"));
    let took = start.elapsed();
    let released = client
        .volume_release(volume, alloc)
        .unwrap_or_else(|err| panic!("release of {volume} by {alloc}: {err}"));
    assert!(released.released, "release: {}", released.message);
    took
}

/// Creates single-node-writer volume `id` on the first agent and waits
/// until every agent knows it.
pub fn create_everywhere(agents: &[&Agent], id: &str) {
    agents[0]
        .client()
        .volume_create(&format!("{id}.hcl"), &volume_spec(id, "hp"))
        .unwrap_or_else(|err| panic!("create volume {id}: {err}"));
    for agent in agents {
        let client = agent.client();
        wait_until(
            &format!("volume {id} on every host"),
            Duration::from_millis(5),
            || client.volume_status(id, false).is_ok(),
        );
    }
}

/// The `cluster` block of host `node` on `endpoints`.
fn cluster_block(node: &str, endpoints: &[String]) -> String {
    let endpoints: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
    format!(
        "\nnode_name = {node:?}\n\ncluster {{\n  etcd = [{}]\n}}\n",
        endpoints.join(", ")
    )
}

/// etcd members on loopback, each in a directory of the row, killed on
/// drop.
struct EtcdMembers {
    members: Vec<Child>,
    clients: Vec<String>,
}

impl EtcdMembers {
    fn start(dir: &BenchDir, n: usize) -> EtcdMembers {
        let url = |port: u16| format!("http://127.0.0.1:{port}");
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let cluster: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (peer, _))| format!("m{i}={}", url(*peer)))
            .collect();
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, &(peer, client))| {
                let data = dir.join(&format!("etcd/m{i}"));
                let log = std::fs::File::create(dir.join(&format!("etcd-m{i}.log")))
                    .expect("create an etcd log");
                Command::new("etcd")
                    .arg("--name")
                    .arg(format!("m{i}"))
                    .arg("--data-dir")
                    .arg(&data)
                    .args(["--listen-client-urls", &url(client)])
                    .args(["--advertise-client-urls", &url(client)])
                    .args(["--listen-peer-urls", &url(peer)])
                    .args(["--initial-advertise-peer-urls", &url(peer)])
                    .args(["--initial-cluster", &cluster.join(",")])
                    .args(["--initial-cluster-state", "new"])
                    .args(["--initial-cluster-token", "csi-agent-bench"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("start etcd")
            })
            .collect();
        let etcd = EtcdMembers {
            members,
            clients: ports.iter().map(|&(_, client)| url(client)).collect(),
        };
        let client = csi_agent::cluster::etcd::Etcd::new(&etcd.clients, None)
            .expect("etcd endpoints")
            .with_timeout(Duration::from_secs(1));
        wait_until("an etcd leader", Duration::from_millis(50), || {
            client.put(b"/ready", b"", 0).is_ok()
        });
        etcd
    }
}

impl Drop for EtcdMembers {
    fn drop(&mut self) {
        for member in &mut self.members {
            let _ = member.kill();
            let _ = member.wait();
        }
    }
}

/// A loopback port nobody listens on now, from below the kernel's
/// ephemeral range so no outgoing connection takes it before etcd binds it.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id() * 61;
    for _ in 0..12_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + ((base + n) % 12_000) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000-31999");
}
