//! P1, claim latency: `volume claim -target` through the agent until the
//! answer (the agent answers once the volume is bind-mounted at the
//! target), and `volume release` until the claim is gone, next to the
//! floor (see [`crate::floor`]) doing the same work against the same
//! plugin. Agent and floor runs alternate, so that noise on the machine
//! falls on both alike.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use csi_agent::mount::MountInfo;
use csi_agent::proto::agent::VolumeClaimRequest;

use crate::floor::{self, ClaimPaths, Floor};
use crate::rig::{agent_config, Agent, BenchDir, Plugin};
use crate::stats::Samples;
use crate::Options;

/// Claims and releases each side makes before measuring: the first calls
/// open connections and warm caches.
pub const WARMUP: usize = 5;

pub struct ClaimResult {
    pub runs: usize,
    pub delay: Duration,
    /// The agent's `volume_stats_interval`, when the run set it.
    pub stats_interval: Option<Duration>,
    pub agent_claim: Samples,
    pub agent_release: Samples,
    pub floor_claim: Samples,
    pub floor_release: Samples,
    /// The agent's CPU time over the measured claims and releases (every
    /// thread's, see [`cpu_time`]): unlike the latencies, the host's
    /// speed of the moment barely moves it, so builds compare by it.
    pub agent_cpu: Duration,
}

/// A plugin, and an agent with volume `v` of it, in a dir of their own.
pub struct Setup {
    // Dropped in this order: the agent before its plugin.
    pub agent: Agent,
    pub plugin: Plugin,
    pub dir: BenchDir,
}

impl Setup {
    /// With `trace`, the agent records its trace points to
    /// [`crate::anatomy::trace_file`] of the dir.
    pub fn start(opts: &Options, root: &Path, name: &str, trace: bool) -> Setup {
        let dir = BenchDir::new(root, name, opts.keep);
        let delay = opts.delay(opts.claim_delay);
        let mut plugin = Plugin::new(&opts.bin, &dir.join("plugin"), &dir.join("p.sock"), delay);
        plugin.start();
        let plugins = [("hp".to_string(), plugin.socket.clone())];
        let mut agent = Agent::new(&opts.agent_bin, &dir.join("agent"), |data| {
            agent_config(data, opts.heartbeat, &plugins)
        });
        if trace {
            agent.trace_to(&crate::anatomy::trace_file(&dir));
        }
        if let Some(interval) = opts.stats_interval {
            agent.append_config(&format!(
                "\nvolume_stats_interval = \"{}ms\"\n",
                interval.as_millis()
            ));
        }
        agent.start();
        agent.wait_healthy(1);
        agent
            .client()
            .volume_create("v.hcl", &volume_spec("v", "hp"))
            .expect("create the agent's volume");
        Setup { agent, plugin, dir }
    }
}

pub fn run(opts: &Options, root: &Path) -> ClaimResult {
    let setup = Setup::start(opts, root, "p1", false);
    let Setup {
        ref agent,
        ref plugin,
        ref dir,
    } = setup;
    let client = plugin.client();
    let floor_volume = floor::create_volume(&client, "floor");
    let mut floor = Floor::new(&dir.join("floor-journal"));
    let floor_root = dir.mkdir("floor");
    let targets = dir.mkdir("targets");
    let control = agent.client();

    let mut result = ClaimResult {
        runs: opts.claim_runs,
        delay: opts.claim_delay,
        stats_interval: opts.stats_interval,
        agent_claim: Samples::default(),
        agent_release: Samples::default(),
        floor_claim: Samples::default(),
        floor_release: Samples::default(),
        agent_cpu: Duration::ZERO,
    };
    let mut cpu_before = Duration::ZERO;
    for i in 0..WARMUP + opts.claim_runs {
        let measured = i >= WARMUP;
        if i == WARMUP {
            cpu_before = cpu_time(agent.pid());
        }
        let alloc = format!("a{i}");

        let target = existing_target(&targets, &alloc);
        let req = VolumeClaimRequest {
            volume_id: "v".into(),
            alloc_id: alloc.clone(),
            target: target.display().to_string(),
            ..Default::default()
        };
        let start = Instant::now();
        control.volume_claim(&req).expect("claim through the agent");
        let claimed = start.elapsed();
        assert!(
            is_mounted(&target),
            "the claim answered, but {target:?} is not mounted"
        );
        let start = Instant::now();
        let released = control
            .volume_release("v", &alloc)
            .expect("release through the agent");
        let release = start.elapsed();
        assert!(released.released, "release: {}", released.message);
        remove_target(&target);

        let paths = ClaimPaths::prepare(&floor_root, &floor_volume, &alloc, true);
        let start = Instant::now();
        floor.claim(&client, &floor_volume, &paths);
        let floor_claimed = start.elapsed();
        let start = Instant::now();
        floor.release(&client, &floor_volume, &paths);
        let floor_release = start.elapsed();

        if measured {
            result.agent_claim.push(claimed);
            result.agent_release.push(release);
            result.floor_claim.push(floor_claimed);
            result.floor_release.push(floor_release);
        }
    }
    result.agent_cpu = cpu_time(agent.pid()).saturating_sub(cpu_before);
    result
}

/// The CPU time every live thread of process `pid` has run, from each
/// thread's `schedstat` (nanoseconds; a thread that has ended is not
/// counted, and the agent's threads live as long as it).
pub fn cpu_time(pid: u32) -> Duration {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).expect("the agent's threads");
    let nanos: u64 = tasks
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

/// The claim's host target, made before the clock starts as the floor's
/// is ([`ClaimPaths::prepare`]): both sides bind onto a directory the CO
/// provides. (Row C measures what making and removing one costs.)
pub fn existing_target(targets: &Path, alloc: &str) -> PathBuf {
    let target = targets.join(alloc);
    fs::create_dir(&target).expect("create the claim's target");
    target
}

/// Removes the target after its release, outside the clock: the agent did
/// not make it, so it leaves it.
pub fn remove_target(target: &Path) {
    fs::remove_dir(target).expect("the released target is left, empty and unmounted");
}

fn is_mounted(path: &Path) -> bool {
    MountInfo::read()
        .map(|info| info.get(path).is_some())
        .unwrap_or(false)
}

/// A volume spec for plugin `plugin` with one single-node-writer
/// file-system capability.
pub fn volume_spec(id: &str, plugin: &str) -> String {
    format!(
        "id        = {id:?}\nname      = {id:?}\ntype      = \"csi\"\nplugin_id = {plugin:?}\n\n\
         capability {{\n  access_mode     = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}}\n"
    )
}
