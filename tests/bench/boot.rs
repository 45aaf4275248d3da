//! P11, a boot's worth of work for the volume plugin: a private dockerd
//! restarted with `--boot-containers` (50) `--restart always` containers,
//! each on a volume of its own, restores them all; timed from the
//! engine's start to the last of them running. Once with csi-agent
//! volumes, once with docker `local` volumes, alternating, each set
//! alone (the other set's restart policy off and its containers
//! stopped), a run of each per `--boot-runs`.
//!
//! The agent runs as the systemd install runs it (socket-activated, its
//! sockets bound by `systemd-socket-activate`) and stays up across the
//! engine's restarts: what is timed is the engine asking the driver for
//! fifty volumes at once (Get, then Mount for each container as it
//! starts) and the agent's claims, against the engine's own volumes.
//! dockerd stops its containers before it exits, so each restart starts
//! every container again, Mount and all.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::containers::Dockerd;
use crate::rig::{agent_config, wait_until, Agent, BenchDir, Delay, Plugin};
use crate::stats::Samples;
use crate::volumes::Cli;
use crate::Options;

const BUSYBOX: &str = "csi-bench/busybox:1";
const PLUGIN_ID: &str = "hp";

/// The kinds of volume compared, as the containers' name prefixes.
const KINDS: [&str; 2] = ["csi", "local"];

pub struct BootResult {
    pub csi: Samples,
    pub local: Samples,
    pub containers: usize,
}

/// Whether P11 can run: `systemd-socket-activate` answers `--version`
/// (the docker CLI and dockerd are P10's).
pub fn available() -> bool {
    std::process::Command::new("systemd-socket-activate")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn run(opts: &Options, root: &Path) -> BootResult {
    let dir = BenchDir::new(root, "p11", opts.keep);
    let mut dockerd = Dockerd::start(&dir.join("engine"));
    dockerd.import_busybox(BUSYBOX, None);
    let mut plugin = Plugin::new(
        &opts.bin,
        &dir.join("plugin"),
        &dir.join("plugin/csi.sock"),
        Delay::None,
    );
    plugin.start();
    let driver = format!("csi-bench-boot-{}", std::process::id());
    let socket = Path::new("/run/docker/plugins").join(format!("{driver}.sock"));
    let mut agent = Agent::new(&opts.agent_bin, &dir.join("agent"), |data| {
        format!(
            "{}\nvolume_plugin {{\n  name      = {driver:?}\n  plugin_id = {PLUGIN_ID:?}\n}}\n",
            agent_config(
                data,
                opts.heartbeat,
                &[(PLUGIN_ID.to_string(), plugin.socket.clone())]
            ),
        )
    });
    agent.socket_activated(&[(socket.clone(), "volume-plugin")]);
    agent.start();
    agent.wait_healthy(1);
    let cli = Cli {
        engine: dockerd.socket.clone(),
        config: dir.mkdir("docker-cli"),
    };
    let n = opts.boot_containers;
    let names = |kind: &str| -> Vec<String> { (0..n).map(|i| format!("{kind}-{i}")).collect() };
    for kind in KINDS {
        let volume_driver = if kind == "csi" {
            driver.as_str()
        } else {
            "local"
        };
        for name in names(kind) {
            cli.ok(&["volume", "create", "-d", volume_driver, &name]);
            let mount = format!("{name}:/data");
            // SIGKILL at the engine's stop: busybox's sleep as PID 1 ignores
            // SIGTERM, and the stop is not what is timed.
            cli.ok(&[
                "create",
                "--name",
                &name,
                "--stop-signal",
                "SIGKILL",
                "-v",
                &mount,
                BUSYBOX,
                "sleep",
                "1000000",
            ]);
        }
    }

    let mut result = BootResult {
        csi: Samples::default(),
        local: Samples::default(),
        containers: n,
    };
    for _ in 0..opts.boot_runs {
        for kind in KINDS {
            let other = KINDS.iter().find(|k| **k != kind).unwrap();
            let (ours, theirs) = (names(kind), names(other));
            let args = |verb: &[&str], which: &[String]| -> Vec<String> {
                verb.iter()
                    .map(|s| s.to_string())
                    .chain(which.iter().cloned())
                    .collect()
            };
            for command in [
                args(&["update", "--restart", "no"], &theirs),
                args(&["stop"], &theirs),
                args(&["update", "--restart", "always"], &ours),
                args(&["start"], &ours),
            ] {
                let command: Vec<&str> = command.iter().map(String::as_str).collect();
                cli.ok(&command);
            }
            dockerd.stop();
            let start = Instant::now();
            dockerd.launch();
            wait_until(
                &format!("{n} {kind} containers running"),
                Duration::from_millis(20),
                || running(&cli, kind) == n,
            );
            let took = start.elapsed();
            match kind {
                "csi" => result.csi.push(took),
                _ => result.local.push(took),
            }
        }
    }

    for kind in KINDS {
        let all = names(kind);
        let mut rm: Vec<&str> = vec!["rm", "-f"];
        rm.extend(all.iter().map(String::as_str));
        cli.ok(&rm);
        let mut rm: Vec<&str> = vec!["volume", "rm"];
        rm.extend(all.iter().map(String::as_str));
        cli.ok(&rm);
    }
    agent.stop();
    plugin.stop();
    drop(dockerd);
    let _ = std::fs::remove_file(&socket);
    result
}

/// How many containers whose name starts with `kind-` run.
fn running(cli: &Cli, kind: &str) -> usize {
    let filter = format!("name=^/?{kind}-");
    let out = cli
        .command(&[
            "ps",
            "-q",
            "--filter",
            "status=running",
            "--filter",
            &filter,
        ])
        .output()
        .expect("run docker ps");
    String::from_utf8_lossy(&out.stdout).lines().count()
}
