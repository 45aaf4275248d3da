//! A boot as dockerd and systemd make it: dockerd starts first and
//! restores five `--restart always` containers whose volumes are the
//! agent's, and the agent starts 5 s later on the sockets
//! `systemd-socket-activate` bound before either (as `csi-agent.socket`
//! does at boot). dockerd's calls wait in the socket's backlog; every
//! container runs again, with its volume and the data it wrote before.
//!
//! (Without the socket, dockerd finds no plugin, retries for about 15 s
//! and leaves the containers exited for good: docs/docker-volumes.md.)

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::{config, docker, docker_ok, Listen, NotifySocket, Service};
use crate::dockerd::{require_docker, Dockerd};
use crate::harness::text;
use crate::util::{Plugin, TestDir};
use crate::volume_clients::{driver_name, IMAGE};

/// The containers of the boot.
const CONTAINERS: usize = 5;

/// How long the agent starts after dockerd.
const AGENT_DELAY: u32 = 5;

/// How long the whole boot may take, from dockerd's start to every
/// container running again (about 12 s here; dockerd gives a plugin call
/// 30 s).
const BOOT_LIMIT: Duration = Duration::from_secs(25);

/// How long the restored containers may take to run again.
const RESTORE_LIMIT: Duration = Duration::from_secs(90);

/// Removes the plugin socket from dockerd's shared directory at the end:
/// the agent leaves a socket it was handed.
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Each container's command: the data written once, and a line per start.
const SCRIPT: &str =
    "[ -f /data/data ] || echo \"data of $NAME\" > /data/data; echo start >> /data/starts; exec sleep 100000";

#[test]
fn containers_restored_by_a_dockerd_that_starts_first_run_with_their_volumes() {
    if !require_docker() || !super::require_socket_activate() {
        return;
    }
    let dir = TestDir::new();
    let name = driver_name(&dir);
    let vp = Path::new("/run/docker/plugins").join(format!("{name}.sock"));
    let _socket_file = SocketFile(vp.clone());
    let plugin = Plugin::start();
    let data_dir = dir.mkdir("data");
    let control = data_dir.join("control.sock");
    let cli_config = dir.mkdir("docker-cli");
    let mut dockerd = Dockerd::start();
    dockerd.busybox_image(IMAGE);
    let mut text = config(&data_dir, Some(&plugin.socket), &name, &vp);
    text.push_str(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n}}\n",
        dockerd.socket.display()
    ));
    fs::write(dir.join("agent.hcl"), text).unwrap();
    let config_path = dir.join("agent.hcl").display().to_string();
    let sockets = || {
        [
            Listen::stream(&control, "control"),
            Listen::stream(&vp, "volume-plugin"),
        ]
    };
    let args = ["agent", "-config", config_path.as_str()];

    // The boot before: volumes made, containers started and writing.
    let notify = NotifySocket::abstract_for(&dir);
    let mut agent = Service::start(&dir, &sockets(), Some(&notify), None, &args);
    let names: Vec<String> = (0..CONTAINERS).map(|n| format!("c{n}")).collect();
    for (n, container) in names.iter().enumerate() {
        let volume = format!("vol{n}");
        docker_ok(
            &dockerd,
            &cli_config,
            &["volume", "create", "-d", &name, &volume],
        );
        let mount = format!("{volume}:/data");
        let env = format!("NAME={container}");
        docker_ok(
            &dockerd,
            &cli_config,
            &[
                "run",
                "-d",
                "--restart",
                "always",
                "--name",
                container,
                "-e",
                &env,
                "-v",
                &mount,
                IMAGE,
                "sh",
                "-c",
                SCRIPT,
            ],
        );
    }
    for container in &names {
        wait_for_starts(&dockerd, &cli_config, container, 1);
    }
    // The host goes down: dockerd first (its containers stop and their
    // Unmounts reach the agent), then the agent.
    dockerd.stop();
    notify.expect("READY=1", || agent.log());
    agent.signal(libc::SIGTERM);
    assert_eq!(agent.wait().code(), Some(0), "{}", agent.log());
    drop(agent);

    // The boot: the sockets are bound (csi-agent.socket), dockerd starts
    // and restores its containers, the agent starts 5 s later.
    let notify = NotifySocket::abstract_for(&dir);
    let agent = Service::start(&dir, &sockets(), Some(&notify), Some(AGENT_DELAY), &args);
    let engine_start = Instant::now();
    dockerd.launch();
    notify.expect("READY=1", || agent.log());
    let ready_after = engine_start.elapsed();
    for (n, container) in names.iter().enumerate() {
        wait_for_starts(&dockerd, &cli_config, container, 2);
        let state = docker_ok(
            &dockerd,
            &cli_config,
            &[
                "inspect",
                "-f",
                "{{.State.Running}} {{.State.Error}}",
                container,
            ],
        );
        assert_eq!(state.trim(), "true", "{container}: {state}");
        let data = docker_ok(
            &dockerd,
            &cli_config,
            &["exec", container, "cat", "/data/data"],
        );
        assert_eq!(data, format!("data of {container}\n"), "vol{n}");
        let volumes = docker_ok(
            &dockerd,
            &cli_config,
            &[
                "inspect",
                "-f",
                "{{range .Mounts}}{{.Name}} {{.Driver}}{{end}}",
                container,
            ],
        );
        assert_eq!(volumes.trim(), format!("vol{n} {name}"));
    }
    assert!(
        ready_after >= Duration::from_secs(AGENT_DELAY as u64),
        "the agent was ready {ready_after:?} after dockerd's start: not the boot under test"
    );
    let back_after = engine_start.elapsed();
    eprintln!(
        "agent ready {ready_after:?} after dockerd's start; all {CONTAINERS} containers back after {back_after:?}"
    );
    // Neither waits on the other: the agent's start once waited out the
    // engine's 30 s call timeout on a dockerd that was itself waiting on
    // the agent's socket (the containers came back after 40 s).
    assert!(
        back_after < BOOT_LIMIT,
        "the containers came back {back_after:?} after dockerd's start\n{}",
        agent.log()
    );
    drop(dockerd);
    drop(agent);
    drop(plugin);
}

/// Waits until `container` has started `n` times (lines in /data/starts).
#[track_caller]
fn wait_for_starts(dockerd: &Dockerd, cli_config: &Path, container: &str, n: usize) {
    let start = Instant::now();
    loop {
        let out = docker(
            dockerd,
            cli_config,
            &["exec", container, "cat", "/data/starts"],
        );
        let starts = String::from_utf8_lossy(&out.stdout).lines().count();
        if out.status.success() && starts == n {
            return;
        }
        if start.elapsed() > RESTORE_LIMIT {
            let state = docker(
                dockerd,
                cli_config,
                &["inspect", "-f", "{{json .State}}", container],
            );
            panic!(
                "{container} has not started {n} times within {RESTORE_LIMIT:?}: {}\nits state: {}\n--- engine log ---\n{}",
                text(&out),
                String::from_utf8_lossy(&state.stdout),
                dockerd.log()
            );
        }
        thread::sleep(Duration::from_millis(200));
    }
}
