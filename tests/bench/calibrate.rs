//! What the building blocks of a claim cost on this machine, so that the
//! floors and ideals of the other rows can be read: a plugin RPC round
//! trip, the same RPC through the `-test-faults` hook that injects the
//! delays (once with a rule that matches nothing, which is the hook's own
//! cost, once with the storm's delay), one fsynced journal record, one
//! atomic snapshot write (write, fsync, rename, directory fsync), one
//! bind mount with its unmount, and one round trip of the agent's control
//! API (`plugin status` of an agent with no plugins), the hop a claim
//! through the agent has and the floor has not.

use std::path::Path;
use std::time::{Duration, Instant};

use csi_agent::csi::Client;
use csi_agent::mount::{Mounter, SysMounter, UnmountMode};
use csi_agent::state::store::write_atomic;

use crate::floor::Floor;
use crate::rig::{agent_config, Agent, BenchDir, Delay, Plugin};
use crate::stats::Samples;
use crate::Options;

const RUNS: usize = 300;

pub struct Calibration {
    /// NodeGetCapabilities, a plugin call that does no work.
    pub rpc: Samples,
    /// The same through `-test-faults` with a rule that matches nothing:
    /// the cost of the hook itself.
    pub rpc_faults_hook: Samples,
    /// With `--storm-delay` injected.
    pub delay: Duration,
    pub rpc_delayed: Samples,
    pub journal_record: Samples,
    pub atomic_write: Samples,
    pub bind_mount: Samples,
    pub control_api: Samples,
}

pub fn run(opts: &Options, root: &Path) -> Calibration {
    let dir = BenchDir::new(root, "calibrate", opts.keep);
    let delay = opts.storm_delay;
    let rpc = rpc_samples(opts, &dir, "plain", Delay::None, None);
    let rpc_faults_hook = rpc_samples(
        opts,
        &dir,
        "hook",
        Delay::Faults(Duration::from_secs(1)),
        Some("NoSuchMethod sleep=1s\n"),
    );
    let rpc_delayed = rpc_samples(opts, &dir, "delayed", Delay::Faults(delay), None);

    let mut floor = Floor::new(&dir.join("journal"));
    let journal_record = time(RUNS, || floor.record("a claim record of about this size"));
    let snapshot = vec![7u8; 4096];
    let atomic_write = time(RUNS, || {
        write_atomic(&dir.join("state.pb"), &snapshot).expect("write a snapshot")
    });
    let source = dir.mkdir("source");
    let target = dir.mkdir("target");
    let bind_mount = time(RUNS, || {
        SysMounter.bind(&source, &target, true).expect("bind");
        SysMounter
            .unmount(&target, UnmountMode::Normal)
            .expect("unmount");
    });
    let mut agent = Agent::new(&opts.agent_bin, &dir.join("agent"), |data| {
        agent_config(data, opts.heartbeat, &[])
    });
    agent.start();
    let control = agent.client();
    for _ in 0..10 {
        control.plugin_status("").expect("warm up");
    }
    let control_api = time(RUNS, || {
        control.plugin_status("").expect("plugin status");
    });
    Calibration {
        rpc,
        rpc_faults_hook,
        delay,
        rpc_delayed,
        journal_record,
        atomic_write,
        bind_mount,
        control_api,
    }
}

/// NodeGetCapabilities round trips against a plugin started with `delay`;
/// `faults` replaces the rules file the delay wrote.
fn rpc_samples(
    opts: &Options,
    dir: &BenchDir,
    name: &str,
    delay: Delay,
    faults: Option<&str>,
) -> Samples {
    let plugin_dir = dir.join(name);
    let mut plugin = Plugin::new(
        &opts.bin,
        &plugin_dir,
        &dir.join(&format!("{name}.sock")),
        delay,
    );
    plugin.start();
    if let Some(rules) = faults {
        std::fs::write(plugin_dir.join("faults"), rules).expect("write the faults file");
    }
    let client: Client = plugin.client();
    for _ in 0..10 {
        client.node_capabilities().expect("warm up");
    }
    time(RUNS, || {
        client.node_capabilities().expect("NodeGetCapabilities");
    })
}

fn time(runs: usize, mut f: impl FnMut()) -> Samples {
    let mut samples = Samples::default();
    for _ in 0..runs {
        let start = Instant::now();
        f();
        samples.push(start.elapsed());
    }
    samples
}
