//! A freed single-writer volume goes to the host that waits for it at
//! once: three agents in network namespaces of their own, each with a
//! hostpath plugin on one shared base dir that cannot fence (`-no-attach`),
//! the nodes promising to stop their writers (`stop_after_disconnect`),
//! and a 3-member etcd on the bridge. One host runs a job writing a
//! single-writer volume; the next host runs a job on the same volume,
//! whose claim the cluster refuses, so its volume hook waits. The writer's
//! host is cut off; once the fencer has freed its claim (the budget of its
//! promise spent), the waiting host's claim must be taken within
//! [`WITHIN`], whatever the waiting claim's backoff had reached. The cut
//! host is then healed, gives up what the cluster took, and the next round
//! cuts the new writer, a third host waiting.
//!
//! Both instants are read from a watch of the volume's claim set in etcd,
//! kept by the test: the revision at which the cut host's claim is gone,
//! and the one at which the waiting host's claim is there. Each setting
//! runs [`CUTS`] rounds (`FREED_CUTS=N` runs N, e.g. ten in a row).

use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;
use csi_agent::cluster::etcd::{Event, Watch};
use csi_agent::proto::cluster as pb;

use crate::cluster_writers::{lines, volume, writer_job_as, Hosts, Settings, NODES};
use crate::etcd::require_etcd;
use crate::harness::{text, Agent, WAIT};
use crate::util::{mounts_under, require_root};

/// The longest a waiting claim may take after the claim in its way left
/// etcd.
const WITHIN: Duration = Duration::from_secs(2);

/// Rounds per setting, unless `FREED_CUTS` says otherwise.
const CUTS: usize = 2;

const VOLUME: &str = "fr";

fn cuts() -> usize {
    std::env::var("FREED_CUTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CUTS)
}

/// Runs job `name` on `agent`: a writer of the volume, as host `who`.
fn run_writer(agent: &Agent, name: &str, who: &str) {
    let path = agent.dir.join(&format!("{name}.hcl"));
    std::fs::write(&path, writer_job_as(name, who, VOLUME)).unwrap();
    let out = agent.cli(&["job", "run", &path.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
}

/// The alloc of job `name` on `agent`: its status, and its volume's
/// state and message (why its claim was refused).
fn alloc_of(agent: &Agent, name: &str) -> Option<(String, String, String)> {
    let client = AgentClient::connect(&agent.socket).ok()?;
    let job = client.job_status(name).ok()?.jobs.into_iter().next()?;
    let alloc = job.allocs.into_iter().next()?;
    let volume = alloc.volumes.into_iter().next()?;
    Some((alloc.status, volume.state, volume.message))
}

/// Waits until `who`'s lines land in the volume: its job writes it.
fn wait_writing(hosts: &Hosts, who: &str, timeout: Duration) {
    let data = hosts.data(VOLUME);
    let start = Instant::now();
    let before = lines(&data, who).len();
    while lines(&data, who).len() < before + 5 {
        assert!(
            start.elapsed() < timeout,
            "{who} never wrote the volume\n{}",
            hosts.logs()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the waiting job's claim has been refused: it waits on its
/// backoff.
fn wait_refused(agent: &Agent, name: &str) {
    let start = Instant::now();
    loop {
        let alloc = alloc_of(agent, name);
        let refused = alloc.as_ref().is_some_and(|(status, state, message)| {
            status == "pending" && state == "claiming" && !message.is_empty()
        });
        if refused {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "job {name}'s claim was never refused: {alloc:?}\n{}",
            agent.log()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// The nodes of the claims in each claim set the watch reports, with when
/// the test heard of it.
fn next_sets(watch: &Watch, until: Instant) -> Vec<(Instant, Vec<String>)> {
    use protobuf::Message;
    let left = until.saturating_duration_since(Instant::now());
    let Ok(batch) = watch.next(left.min(Duration::from_secs(1))) else {
        return Vec::new();
    };
    let heard = Instant::now();
    batch
        .events
        .into_iter()
        .map(|event| {
            let nodes = match event {
                Event::Put(kv) => pb::ClaimSet::parse_from_bytes(&kv.value)
                    .unwrap()
                    .claims
                    .into_iter()
                    .map(|c| c.node)
                    .collect(),
                Event::Delete { .. } => Vec::new(),
            };
            (heard, nodes)
        })
        .collect()
}

/// One round: `cut` holds the volume, `waiter` waits for it. Cuts `cut`
/// off and answers (from the cut to the claim leaving etcd, from there to
/// the waiter's claim in etcd).
fn round(hosts: &Hosts, cut: usize, waiter: usize, bound: Duration) -> (Duration, Duration) {
    let key = format!("/csi-agent/volumes/{VOLUME}/claims");
    let etcd = hosts.etcd.client();
    let (_, revision) = etcd.get_prefix(key.as_bytes()).unwrap();
    let watch = etcd.watch_prefix(key.as_bytes(), revision + 1).unwrap();
    let cut_at = Instant::now();
    hosts.net.partition(cut);
    let until = cut_at + bound;
    let (mut freed, mut taken) = (None, None);
    while taken.is_none() {
        assert!(
            Instant::now() < until,
            "{} never took the volume {} cut off (freed after {:?})\n{}",
            NODES[waiter],
            NODES[cut],
            freed.map(|f: Instant| f - cut_at),
            hosts.logs()
        );
        for (heard, nodes) in next_sets(&watch, until) {
            if freed.is_none() && !nodes.iter().any(|n| n == NODES[cut]) {
                freed = Some(heard);
            }
            if nodes.iter().any(|n| n == NODES[waiter]) {
                assert!(
                    freed.is_some(),
                    "{} was admitted next to {}'s claim: {nodes:?}",
                    NODES[waiter],
                    NODES[cut]
                );
                taken = Some(heard);
                break;
            }
        }
    }
    let (freed, taken) = (freed.unwrap(), taken.unwrap());
    (freed - cut_at, taken - freed)
}

/// The cut host heals and gives up what the cluster took: job `name`'s
/// alloc is not running, nothing of it is mounted.
fn heal_and_give_up(hosts: &Hosts, i: usize, name: &str) {
    hosts.net.heal(i);
    let agent = &hosts.agents[i];
    let start = Instant::now();
    loop {
        let alloc = alloc_of(agent, name);
        let stopped = alloc.as_ref().is_some_and(|(status, _, _)| {
            status != "running" && status != "pending" && status != "stopping"
        });
        if stopped && mounts_under(&agent.data_dir).is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} kept its alloc or its mounts: {alloc:?} {:?}\n{}",
            NODES[i],
            mounts_under(&agent.data_dir),
            agent.log()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

fn freed_volume_case(settings: Settings, bound: Duration) {
    if !require_root() || !require_etcd() {
        return;
    }
    let hosts = Hosts::start_n(3, &settings);
    volume(&hosts, VOLUME);
    run_writer(&hosts.agents[0], "r0", NODES[0]);
    wait_writing(&hosts, NODES[0], WAIT);
    let mut waits = Vec::new();
    for k in 0..cuts() {
        let (cut, waiter) = (k % 3, (k + 1) % 3);
        let name = format!("r{}", k + 1);
        run_writer(&hosts.agents[waiter], &name, NODES[waiter]);
        wait_refused(&hosts.agents[waiter], &name);
        let (to_free, to_take) = round(&hosts, cut, waiter, bound);
        eprintln!(
            "cut {k}: {} cut off; its claim left etcd after {to_free:?}, {}'s waiting claim was taken {to_take:?} later",
            NODES[cut], NODES[waiter]
        );
        waits.push(to_take);
        wait_writing(&hosts, NODES[waiter], WAIT);
        heal_and_give_up(&hosts, cut, &format!("r{k}"));
    }
    let worst = waits.iter().max().copied().unwrap_or_default();
    assert!(
        worst <= WITHIN,
        "a waiting claim was taken {worst:?} after the claim in its way left etcd (bound {WITHIN:?}): {waits:?}"
    );
}

#[test]
fn a_freed_volume_is_taken_by_the_waiting_host_at_once_with_short_leases() {
    freed_volume_case(
        Settings {
            flags: "-no-attach",
            strict: true,
            lease_ttl: Some("4s"),
            stop_after_disconnect: Some("3s"),
        },
        Duration::from_secs(40),
    );
}

#[test]
fn a_freed_volume_is_taken_by_the_waiting_host_at_once_at_the_default_lease() {
    freed_volume_case(
        Settings {
            flags: "-no-attach",
            strict: true,
            lease_ttl: None,
            stop_after_disconnect: Some("7s"),
        },
        Duration::from_secs(60),
    );
}
