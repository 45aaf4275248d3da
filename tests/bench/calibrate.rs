//! What the building blocks of a claim cost on this machine, so that the
//! floors and ideals of the other rows can be read: a plugin RPC round
//! trip, the same RPC through the `-test-faults` hook that injects the
//! delays (once with a rule that matches nothing, which is the hook's own
//! cost, once with the storm's delay), one fsynced journal record, one
//! atomic snapshot write (write, fsync, rename, directory fsync), one
//! bind mount with its unmount, and one round trip of the agent's control
//! API (`plugin status` of an agent with no plugins), the hop a claim
//! through the agent has and the floor has not. Two more the agent has
//! and the floor has not: the directories a claim makes and its release
//! removes (the CO makes the staging path and the publish path's parent,
//! CSI says; the floor's exist before its clock starts), and one hand-off
//! to a parked thread and back (a crossbeam channel each way), which a
//! claim's job has between two RPCs while the loop records the first.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::thread;
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
    /// A claim's directories: the staging path (0700) and the per-alloc
    /// publish parent (two levels). P1's host target exists before its
    /// claim, as the floor's does.
    pub claim_dirs: Samples,
    /// Its release's: the same removed.
    pub release_dirs: Samples,
    /// A message to a parked thread and its answer.
    pub hand_off: Samples,
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
    let (claim_dirs, release_dirs) = directories(&dir);
    let hand_off = hand_offs();
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
        claim_dirs,
        release_dirs,
        hand_off,
    }
}

/// What the agent's steps do to directories for one claim of volume `v`
/// by a new alloc, and for its release, as `volume/steps.rs` does them
/// (the `staging` and `per-alloc` skeleton kept).
fn directories(dir: &BenchDir) -> (Samples, Samples) {
    let staging = dir.mkdir("dirs/staging");
    let per_alloc = dir.mkdir("dirs/per-alloc");
    let (mut claims, mut releases) = (Samples::default(), Samples::default());
    for i in 0..RUNS {
        let alloc = format!("a{i}");
        let stage = staging.join("v");
        let publish_parent = per_alloc.join(&alloc).join("v");
        let start = Instant::now();
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&stage)
            .expect("mkdir staging");
        fs::set_permissions(&stage, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod staging");
        fs::create_dir_all(&publish_parent).expect("mkdir per-alloc");
        claims.push(start.elapsed());
        let start = Instant::now();
        fs::remove_dir(&publish_parent).expect("rmdir per-alloc/v");
        fs::remove_dir(per_alloc.join(&alloc)).expect("rmdir per-alloc");
        fs::remove_dir(&stage).expect("rmdir staging");
        releases.push(start.elapsed());
    }
    (claims, releases)
}

/// A message to a thread parked on a channel, and its answer: the
/// thread has been idle 1 ms each time, as the agent's loop is while a
/// plugin works on an RPC.
fn hand_offs() -> Samples {
    let (to_loop, inbox) = crossbeam_channel::bounded::<()>(1);
    let (to_worker, answers) = crossbeam_channel::bounded::<()>(1);
    let echo = thread::spawn(move || {
        for () in inbox {
            if to_worker.send(()).is_err() {
                return;
            }
        }
    });
    let mut samples = Samples::default();
    for _ in 0..RUNS {
        thread::sleep(Duration::from_millis(1));
        let start = Instant::now();
        to_loop.send(()).expect("the echo thread runs");
        answers.recv().expect("the echo thread answers");
        samples.push(start.elapsed());
    }
    drop(to_loop);
    echo.join().expect("the echo thread ends");
    samples
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
