//! P2, the boot storm: every claim of a host arrives at once, as after a
//! reboot. `--storm` volumes spread over `--storm-plugins` hostpath
//! plugins, each RPC slowed by `--storm-delay`; one claim each (no host
//! target), all sent together through the control API; the wall time from
//! the first send to the last answer.
//!
//! Compared with:
//! - the *ideal* for the parallelism the agent allows: one RPC in flight
//!   per volume and [`WORKERS`] per plugin, so each plugin's claims take
//!   `ceil(claims / WORKERS) × RPCs per claim × delay`, counting nothing
//!   but the injected delay;
//! - the *bare storm*: a bare client with the same parallelism (a queue
//!   per plugin, [`WORKERS`] threads each with its own connection, one
//!   fsynced record per claim) against the same plugins and volumes, which
//!   also pays what the plugins really cost;
//! - *fully serial*: every RPC one after another, delay only.
//!
//! P2 runs [`ROUNDS`] rounds on one rig, each the bare storm and then the
//! agent's (released through the agent before the next round), and
//! reports the median of each: a single run of either moves by more than
//! the 10% the comparison is about (the plugins' fsyncs under 20
//! concurrent writers).
//!
//! The rig stays up afterwards with every claim taken, for P4.
//!
//! P2L, the storm at scale: the same storm, without the bare client, at
//! `--scale` claims and `--scale-delay` per RPC, and at a tenth of that
//! with the same delay; the wall times' ratio says how the agent grows
//! with the number of claims (linear growth is 10x). The tenth runs
//! [`ROUNDS`] times, each on a rig of its own, and its median is the one
//! compared: it takes 2-3 s, and a run of it moved by 2x. The agent's
//! resident memory once every claim is answered is reported too. Its rig
//! is P4L's.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::plugin::workers::WORKERS;
use csi_agent::proto::agent::{
    VolumeClaimRequest, VolumeReleaseRequest, VolumeSpecRequest, VolumeStatus,
};
use csi_agent::proto::agent_grpc::AgentClient;

use crate::calls::{self, all_at_once};
use crate::claim::volume_spec;
use crate::floor::{self, ClaimPaths, Floor};
use crate::idle::ProcStatus;
use crate::rig::{agent_config, mounts_under, Agent, BenchDir, Plugin};
use crate::stats::Samples;
use crate::Options;

/// RPCs per claim with the hostpath plugin: ControllerPublish, NodeStage,
/// NodePublish.
pub const RPCS_PER_CLAIM: u32 = 3;

/// Rounds of P2's storms, and runs of P2L's tenth.
pub const ROUNDS: usize = 3;

/// How big a storm is and how slow its plugins.
#[derive(Clone, Copy, Debug)]
pub struct StormSize {
    pub claims: usize,
    pub delay: Duration,
}

pub struct StormResult {
    pub claims: usize,
    pub plugins: usize,
    pub delay: Duration,
    /// The median over the rounds.
    pub agent_wall: Duration,
    /// Each claim's latency, send to answer, in the last round.
    pub agent_latency: Samples,
    /// The median over the rounds.
    pub bare_wall: Option<Duration>,
    /// Each round's agent and bare client walls, in order.
    pub rounds: Vec<(Duration, Option<Duration>)>,
    pub ideal: Duration,
    pub serial: Duration,
    /// The agent's VmRSS once every claim was answered, bytes.
    pub agent_rss: u64,
}

/// The storm's processes, left with every claim taken.
pub struct StormRig {
    pub agent: Agent,
    pub plugins: Vec<Plugin>,
    pub claims: usize,
    /// Dropped last: unmounts what the processes left.
    _dir: BenchDir,
}

/// The plugin of volume `n`.
fn plugin_of(n: usize, plugins: usize) -> usize {
    n % plugins
}

/// The ideal wall time: the busiest plugin's claims, [`WORKERS`] at a
/// time, each [`RPCS_PER_CLAIM`] delays long.
pub fn ideal(claims: usize, plugins: usize, delay: Duration) -> Duration {
    let busiest = claims.div_ceil(plugins);
    let rounds = busiest.div_ceil(WORKERS) as u32;
    delay * RPCS_PER_CLAIM * rounds
}

/// P2's storm, of `--storm` claims at `--storm-delay`.
pub fn run(opts: &Options, root: &Path, bare: bool) -> (StormResult, StormRig) {
    let size = StormSize {
        claims: opts.storm_claims,
        delay: opts.storm_delay,
    };
    // Rounds are for the comparison with the bare client: P4 alone needs
    // one storm.
    let rounds = if bare { ROUNDS } else { 1 };
    run_sized(opts, root, "p2", size, bare, rounds)
}

/// A storm of `size` in the directory `name`, `rounds` times, with the
/// bare client's storm first in each when `bare`.
pub fn run_sized(
    opts: &Options,
    root: &Path,
    name: &str,
    size: StormSize,
    bare: bool,
    rounds: usize,
) -> (StormResult, StormRig) {
    let dir = BenchDir::new(root, name, opts.keep);
    let n = size.claims;
    let mut plugins: Vec<Plugin> = (0..opts.storm_plugins)
        .map(|p| {
            Plugin::new(
                &opts.bin,
                &dir.join(&format!("plugin{p}")),
                &dir.join(&format!("p{p}.sock")),
                opts.delay(size.delay),
            )
        })
        .collect();
    for plugin in &mut plugins {
        plugin.start();
    }
    let blocks: Vec<(String, PathBuf)> = plugins
        .iter()
        .enumerate()
        .map(|(p, plugin)| (format!("p{p}"), plugin.socket.clone()))
        .collect();
    let mut agent = Agent::new(&opts.agent_bin, &dir.join("agent"), |data| {
        agent_config(data, opts.heartbeat, &blocks)
    });
    agent.start();
    agent.wait_healthy(plugins.len());
    let clients = calls::clients(&agent.socket, n);
    let volumes = create_volumes(&agent, &clients, n, plugins.len());

    let mut walls = Vec::new();
    let mut latency = Samples::default();
    for round in 0..rounds.max(1) {
        if round > 0 {
            release_all(&agent, &clients, n);
        }
        let bare_wall = bare.then(|| bare_storm(&dir, &plugins, &volumes));
        let (wall, claims) = agent_storm(&agent, &clients, n);
        walls.push((wall, bare_wall));
        latency = claims;
    }
    let median = |walls: Vec<Duration>| Samples::from(walls).p50();
    let agent_wall = median(walls.iter().map(|(a, _)| *a).collect());
    let bare_wall = bare.then(|| median(walls.iter().filter_map(|(_, b)| *b).collect()));
    let agent_rss = ProcStatus::read(agent.pid()).rss;
    let taken = count_taken(&agent);
    assert_eq!(
        taken, n,
        "every claim answered, but {taken} of {n} are taken"
    );
    let mounted = mounts_under(&agent.data_dir);
    assert_eq!(mounted, 2 * n, "a staging and a publish per claim");

    let result = StormResult {
        claims: n,
        plugins: plugins.len(),
        delay: size.delay,
        agent_wall,
        agent_latency: latency,
        bare_wall,
        rounds: walls,
        ideal: ideal(n, plugins.len(), size.delay),
        serial: size.delay * RPCS_PER_CLAIM * n as u32,
        agent_rss,
    };
    let rig = StormRig {
        agent,
        plugins,
        claims: n,
        _dir: dir,
    };
    (result, rig)
}

/// Claims volumes `s0`..`s{n-1}` through the agent, all at once: the wall
/// time to the last answer, and each claim's latency.
fn agent_storm(agent: &Agent, clients: &[AgentClient], n: usize) -> (Duration, Samples) {
    let start = Instant::now();
    let answers = all_at_once(clients, n, |client, i| {
        let req = VolumeClaimRequest {
            volume_id: format!("s{i}"),
            alloc_id: format!("b{i}"),
            ..Default::default()
        };
        client.volume_claim_async_opt(&req, calls::option())
    });
    let mut latency = Samples::default();
    let mut last = start;
    for (i, (answer, at)) in answers.into_iter().enumerate() {
        if let Err(err) = answer {
            panic!("claim of s{i} failed: {err}\n{}", agent.log_text());
        }
        latency.push(at - start);
        last = last.max(at);
    }
    (last - start, latency)
}

/// Releases every claim of [`agent_storm`] through the agent, all at once,
/// and waits until each is gone.
fn release_all(agent: &Agent, clients: &[AgentClient], n: usize) {
    let answers = all_at_once(clients, n, |client, i| {
        let req = VolumeReleaseRequest {
            volume_id: format!("s{i}"),
            alloc_id: format!("b{i}"),
            ..Default::default()
        };
        client.volume_release_async_opt(&req, calls::option())
    });
    for (i, (answer, _)) in answers.into_iter().enumerate() {
        match answer {
            Ok(r) if r.released => {}
            other => panic!("release of s{i}: {other:?}\n{}", agent.log_text()),
        }
    }
}

/// Creates volumes `s0`..`s{n-1}` through the agent, all at once; their
/// statuses (for the external IDs).
fn create_volumes(
    agent: &Agent,
    clients: &[AgentClient],
    n: usize,
    plugins: usize,
) -> Vec<VolumeStatus> {
    let answers = all_at_once(clients, n, |client, i| {
        let req = VolumeSpecRequest {
            file: format!("s{i}.hcl"),
            hcl: volume_spec(&format!("s{i}"), &format!("p{}", plugin_of(i, plugins))),
            ..Default::default()
        };
        client.volume_create_async_opt(&req, calls::option())
    });
    answers
        .into_iter()
        .enumerate()
        .map(|(i, (answer, _))| {
            let resp =
                answer.unwrap_or_else(|err| panic!("create s{i}: {err}\n{}", agent.log_text()));
            resp.volumes.into_iter().next().expect("the created volume")
        })
        .collect()
}

/// How many volumes have exactly one claim, taken, and nothing being
/// released.
pub fn count_taken(agent: &Agent) -> usize {
    let status = agent
        .client()
        .volume_status("", false)
        .expect("volume status");
    status
        .volumes
        .iter()
        .filter(|v| v.past_claims.is_empty())
        .filter(|v| v.claims.len() == 1 && v.claims[0].state == "taken")
        .count()
}

/// The bare storm: claims every volume with a bare client, [`WORKERS`]
/// threads per plugin, and returns the wall time; then releases them all
/// (not timed), so the agent's storm meets the plugins as this one did.
fn bare_storm(dir: &BenchDir, plugins: &[Plugin], volumes: &[VolumeStatus]) -> Duration {
    let root = dir.mkdir("bare");
    let mut queues: Vec<VecDeque<(String, ClaimPaths)>> = vec![VecDeque::new(); plugins.len()];
    for (i, v) in volumes.iter().enumerate() {
        let paths = ClaimPaths::prepare(&root, &v.external_id, &format!("b{i}"), false);
        queues[plugin_of(i, plugins.len())].push_back((v.external_id.clone(), paths));
    }
    let claimed: Vec<Vec<(String, ClaimPaths)>> =
        queues.iter().map(|q| q.iter().cloned().collect()).collect();
    let wall = run_pools(&root, plugins, queues, |floor, client, volume, paths| {
        floor::claim_rpcs(client, volume, paths);
        floor.record(volume);
    });
    let queues = claimed.into_iter().map(VecDeque::from).collect();
    run_pools(&root, plugins, queues, |_, client, volume, paths| {
        floor::release_rpcs(client, volume, paths);
    });
    wall
}

type Work = fn(&mut Floor, &csi_agent::csi::Client, &str, &ClaimPaths);

/// Runs `work` on every queued volume, [`WORKERS`] threads per plugin each
/// with its own connection and journal; the wall time from the moment all
/// threads are ready.
fn run_pools(
    root: &Path,
    plugins: &[Plugin],
    queues: Vec<VecDeque<(String, ClaimPaths)>>,
    work: Work,
) -> Duration {
    let barrier = Arc::new(Barrier::new(plugins.len() * WORKERS + 1));
    let mut threads = Vec::new();
    for (p, queue) in queues.into_iter().enumerate() {
        let queue = Arc::new(Mutex::new(queue));
        for w in 0..WORKERS {
            let queue = queue.clone();
            let barrier = barrier.clone();
            let client = plugins[p].client();
            let journal = root.join(format!("journal-{p}-{w}"));
            threads.push(thread::spawn(move || {
                let mut floor = Floor::new(&journal);
                // The connection is made before the start.
                client.probe().expect("probe before the bare storm");
                barrier.wait();
                loop {
                    let next = queue.lock().unwrap().pop_front();
                    let Some((volume, paths)) = next else { break };
                    work(&mut floor, &client, &volume, &paths);
                }
            }));
        }
    }
    barrier.wait();
    let start = Instant::now();
    for t in threads {
        t.join().expect("a bare storm thread panicked");
    }
    start.elapsed()
}
