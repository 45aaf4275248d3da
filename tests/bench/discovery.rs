//! P6, discovery: how soon after a plugin creates its socket `plugin
//! status` shows it healthy. The agent's config names the socket; the
//! plugin is started and stopped once per run. The clock starts when the
//! benchmark's own inotify watch sees the socket appear (the hostpath
//! plugin binds a temporary name and renames it into place once serving),
//! and stops at the first `plugin status` that says healthy, polled every
//! millisecond. Process start-up before the socket exists is not counted.
//! Between runs the plugin is stopped with SIGTERM (it removes its
//! socket) and the benchmark waits for the agent to stop calling it
//! healthy.
//!
//! Meanwhile `--discovery-plugins` other plugins are registered and
//! healthy, as on a host with many: the measured plugin's way through the
//! agent is shared with theirs. Only the measured plugin's status is
//! polled.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use csi_agent::sys::inotify::{poll_readable, Inotify};

use crate::rig::{agent_config, is_healthy, wait_until, Agent, BenchDir, Delay, Plugin};
use crate::stats::Samples;
use crate::Options;

/// Runs before measuring: the first start of a process pays for cold
/// caches.
const WARMUP: usize = 2;

pub fn run(opts: &Options, root: &Path) -> Samples {
    let dir = BenchDir::new(root, "p6", opts.keep);
    let socket = dir.join("p.sock");
    let mut plugin = Plugin::new(&opts.bin, &dir.join("plugin"), &socket, Delay::None);
    let mut others: Vec<Plugin> = (0..opts.discovery_plugins)
        .map(|p| {
            Plugin::new(
                &opts.bin,
                &dir.join(&format!("other{p}")),
                &dir.join(&format!("o{p}.sock")),
                Delay::None,
            )
        })
        .collect();
    for other in &mut others {
        other.start();
    }
    let mut blocks: Vec<(String, PathBuf)> = others
        .iter()
        .enumerate()
        .map(|(p, other)| (format!("o{p}"), other.socket.clone()))
        .collect();
    blocks.push(("hp".to_string(), socket.clone()));
    let mut agent = Agent::new(&opts.agent_bin, &dir.join("agent"), |data| {
        agent_config(data, opts.heartbeat, &blocks)
    });
    agent.start();
    agent.wait_healthy(others.len());

    let inotify = Inotify::new().expect("inotify");
    inotify
        .add_watch(&dir.path, libc::IN_CREATE | libc::IN_MOVED_TO)
        .expect("watch the socket dir");
    let name: OsString = socket.file_name().expect("a socket name").to_owned();
    let client = agent.client();
    let healthy = || {
        client
            .plugin_status("hp")
            .is_ok_and(|r| r.plugins.first().is_some_and(is_healthy))
    };

    let mut samples = Samples::default();
    for run in 0..WARMUP + opts.discovery_runs {
        plugin.spawn();
        wait_for_name(&inotify, &name);
        let start = Instant::now();
        while !healthy() {
            assert!(
                start.elapsed() < crate::rig::SETUP_LIMIT,
                "the plugin never turned healthy\n{}",
                agent.log_text()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        if run >= WARMUP {
            samples.push(start.elapsed());
        }
        plugin.stop();
        wait_until(
            "the agent to see the plugin go",
            Duration::from_millis(2),
            || !healthy(),
        );
    }
    samples
}

/// Blocks until an event names `name`.
fn wait_for_name(inotify: &Inotify, name: &OsString) {
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < crate::rig::SETUP_LIMIT,
            "the plugin socket never appeared"
        );
        poll_readable([inotify.as_fd()], Some(Duration::from_secs(1))).expect("poll inotify");
        let events = inotify.read_events().expect("read inotify events");
        if events.iter().any(|e| e.name.as_ref() == Some(name)) {
            return;
        }
    }
}
