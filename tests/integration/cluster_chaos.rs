//! Chaos on three hosts: every host runs a writer job on each of two
//! single-writer volumes (a task appending `<host> <unix ns>` lines), so
//! that whenever a volume is free some host takes it. Meanwhile, at random
//! (a seeded generator; `CHAOS_SEED` replays a run): a host's link is cut
//! for 3 to 12 seconds, an agent is SIGKILLed and started again, a host's
//! plugin is SIGKILLed and started again, an etcd member is killed and
//! started again. The plugin cannot fence
//! (`-no-attach`): the nodes' promises (`stop_after_disconnect`) and their
//! guards are all that keep one writer at a time. The plugins are not
//! strict: a node whose agent is killed when its promise runs out has its
//! writers stopped by its guard, but its mounts stay until the agent is
//! back, so another node may stage the volume while a stale, writer-less
//! staging of it remains elsewhere, which the strict plugin's cross-node
//! rule (one staging path per volume on the whole base dir) would count.
//!
//! The figures: the overlap between any two hosts' writing (zero), claims
//! lost or stuck (zero: once the chaos ends every volume has a writer
//! again), leaks (zero: once every job is stopped, nothing is mounted and
//! etcd holds no claim), and the longest time a volume had no writer.

use std::collections::BTreeMap;
use std::fs;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cluster_writers::{lines, volume, writer_job_as, Hosts, Settings, NODES};
use crate::etcd::require_etcd;
use crate::harness::text;
use crate::util::{mounts_under, require_root};

const VOLUMES: [&str; 2] = ["c1", "c2"];

/// How long the chaos lasts.
const CHAOS: Duration = Duration::from_secs(60);

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn secs(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from * 1000 + self.below((to - from) * 1000))
    }
}

/// Something to undo later.
enum Undo {
    Heal(usize),
    StartAgent(usize),
    StartPlugin(usize),
    StartMember(usize),
}

/// Runs (or keeps) every host's writer jobs; a host whose agent is down
/// is skipped.
fn run_writers(hosts: &Hosts, down: &[bool]) {
    for (i, agent) in hosts.agents.iter().enumerate() {
        if down[i] {
            continue;
        }
        for v in VOLUMES {
            let path = agent.dir.join(&format!("w-{v}.hcl"));
            fs::write(&path, writer_job_as(&format!("w-{v}"), NODES[i], v)).unwrap();
            // A host cut off may not answer in time; it is asked again.
            let _ = agent.cli(&["job", "run", &path.display().to_string()]);
        }
    }
}

/// Each host's writing sessions on a volume: runs of its lines no more
/// than 500 ms apart, as (first, last) stamps.
fn sessions(stamps: &[u128]) -> Vec<(u128, u128)> {
    let mut out: Vec<(u128, u128)> = Vec::new();
    for &t in stamps {
        match out.last_mut() {
            Some((_, last)) if t - *last <= 500_000_000 => *last = t,
            _ => out.push((t, t)),
        }
    }
    out
}

/// How long two hosts wrote `volume` at once, in all.
fn overlap(by_host: &BTreeMap<&str, Vec<(u128, u128)>>) -> Duration {
    let mut total = 0u128;
    let hosts: Vec<&&str> = by_host.keys().collect();
    for (i, a) in hosts.iter().enumerate() {
        for b in &hosts[i + 1..] {
            for (s1, e1) in &by_host[**a] {
                for (s2, e2) in &by_host[**b] {
                    let (start, end) = ((*s1).max(*s2), (*e1).min(*e2));
                    if end >= start {
                        // Lines at the same instant count as 1 ns.
                        total += end - start + 1;
                    }
                }
            }
        }
    }
    Duration::from_nanos(total as u64)
}

/// The longest gap between two lines of any host, within `from..to`.
fn longest_gap(mut all: Vec<u128>, from: u128, to: u128) -> Duration {
    all.retain(|t| (from..to).contains(t));
    all.sort_unstable();
    let gap = all.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    Duration::from_nanos(gap as u64)
}

/// The host whose line is the newest in `volume`'s log, if any.
fn current_writer(hosts: &Hosts, volume: &str) -> Option<usize> {
    let data = hosts.data(volume);
    (0..NODES.len()).max_by_key(|&i| lines(&data, NODES[i]).last().copied().unwrap_or(0))
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn under_random_cuts_and_kills_two_hosts_never_write_one_volume_at_once() {
    if !require_root() || !require_etcd() {
        return;
    }
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| unix_ns() as u64 | 1);
    eprintln!("chaos seed {seed} (CHAOS_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let mut hosts = Hosts::start_n(
        3,
        &Settings {
            flags: "-no-attach",
            strict: false,
            lease_ttl: Some("2s"),
            stop_after_disconnect: Some("2s"),
        },
    );
    for v in VOLUMES {
        volume(&hosts, v);
    }
    let mut down = vec![false; 3];
    run_writers(&hosts, &down);
    let began = unix_ns();
    let start = Instant::now();
    let mut undo: Vec<(Instant, Undo)> = Vec::new();
    let mut next_event = Instant::now() + rng.secs(2, 5);
    let mut next_run = Instant::now();
    let mut events = Vec::new();
    while start.elapsed() < CHAOS || !undo.is_empty() {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = undo.drain(..).partition(|(at, _)| *at <= now);
        undo = later;
        for (_, u) in due {
            match u {
                Undo::Heal(i) => hosts.net.heal(i),
                Undo::StartAgent(i) => {
                    hosts.agents[i].restart();
                    down[i] = false;
                }
                Undo::StartPlugin(i) => hosts.plugins[i].restart(),
                Undo::StartMember(m) => hosts.etcd.restart(m),
            }
        }
        if now >= next_event && start.elapsed() < CHAOS {
            next_event = now + rng.secs(3, 6);
            // Half the time, the host that writes a volume now: a cut or
            // a kill of a host that holds nothing proves little.
            let host = match rng.below(2) {
                0 => current_writer(&hosts, VOLUMES[rng.below(2) as usize])
                    .unwrap_or_else(|| rng.below(3) as usize),
                _ => rng.below(3) as usize,
            };
            // A host with something undone still pending takes no other
            // blow: a plugin killed twice would be started twice.
            let busy = undo.iter().any(|(_, u)| {
                matches!(u, Undo::Heal(i) | Undo::StartAgent(i) | Undo::StartPlugin(i) if *i == host)
            });
            match rng.below(3) {
                0 if !busy => {
                    let d = rng.secs(3, 12);
                    events.push(format!(
                        "{:?}: cut {} for {d:?}",
                        start.elapsed(),
                        NODES[host]
                    ));
                    hosts.net.partition(host);
                    undo.push((now + d, Undo::Heal(host)));
                }
                1 if !busy => {
                    let d = rng.secs(1, 4);
                    events.push(format!(
                        "{:?}: SIGKILL agent of {} for {d:?}",
                        start.elapsed(),
                        NODES[host]
                    ));
                    hosts.agents[host].sigkill();
                    down[host] = true;
                    undo.push((now + d, Undo::StartAgent(host)));
                }
                2 if !busy => {
                    let d = rng.secs(1, 4);
                    events.push(format!(
                        "{:?}: SIGKILL plugin of {} for {d:?}",
                        start.elapsed(),
                        NODES[host]
                    ));
                    hosts.plugins[host].kill();
                    undo.push((now + d, Undo::StartPlugin(host)));
                }
                3 if !undo.iter().any(|(_, u)| matches!(u, Undo::StartMember(_))) => {
                    let m = rng.below(3) as usize;
                    let d = rng.secs(2, 6);
                    events.push(format!(
                        "{:?}: kill etcd member {m} for {d:?}",
                        start.elapsed()
                    ));
                    hosts.etcd.kill(m);
                    undo.push((now + d, Undo::StartMember(m)));
                }
                _ => {}
            }
        }
        if now >= next_run {
            next_run = now + Duration::from_secs(2);
            run_writers(&hosts, &down);
        }
        thread::sleep(Duration::from_millis(100));
    }
    let calm = unix_ns();
    eprintln!("events:\n  {}", events.join("\n  "));

    // Stuck or lost: with the chaos over, every volume gets a writer
    // again within a minute (writers retry their claims with backoff).
    let deadline = Instant::now() + Duration::from_secs(90);
    for v in VOLUMES {
        let data = hosts.data(v);
        loop {
            run_writers(&hosts, &down);
            let newest = NODES
                .iter()
                .flat_map(|h| lines(&data, h))
                .max()
                .unwrap_or(0);
            if newest > calm + 2_000_000_000 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "volume {v} has no writer after the chaos ended (events: {events:#?})\n{}",
                hosts.logs()
            );
            thread::sleep(Duration::from_millis(500));
        }
    }

    // The figures, per volume.
    for v in VOLUMES {
        let data = hosts.data(v);
        let by_host: BTreeMap<&str, Vec<(u128, u128)>> = NODES
            .iter()
            .map(|h| (*h, sessions(&lines(&data, h))))
            .collect();
        let all: Vec<u128> = NODES.iter().flat_map(|h| lines(&data, h)).collect();
        let overlap = overlap(&by_host);
        let gap = longest_gap(all, began, calm);
        let handovers: usize = by_host.values().map(Vec::len).sum();
        eprintln!(
            "volume {v}: overlap {overlap:?}; {handovers} writing sessions; longest time without a writer during the chaos {gap:?}"
        );
        assert_eq!(
            overlap,
            Duration::ZERO,
            "two hosts wrote volume {v} at once: {by_host:#?}\nevents: {events:#?}"
        );
    }

    // Leaks: every job stopped, nothing is left mounted or claimed.
    for agent in &hosts.agents {
        for v in VOLUMES {
            let out = agent.cli(&["job", "stop", &format!("w-{v}")]);
            assert!(out.status.success(), "{}", text(&out));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mounted: Vec<_> = hosts
            .agents
            .iter()
            .flat_map(|a| mounts_under(&a.data_dir))
            .collect();
        let (claims, _) = hosts
            .etcd
            .client()
            .get_prefix(b"/csi-agent/volumes/")
            .unwrap();
        let claimed: Vec<String> = claims
            .iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
            .filter(|k| k.ends_with("/claims"))
            .collect();
        if mounted.is_empty() && claimed.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left after every job stopped: mounts {mounted:?}, claims {claimed:?}"
        );
        thread::sleep(Duration::from_millis(500));
    }
}
