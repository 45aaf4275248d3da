//! An upgrade in place, as a package manager and systemd make it: five
//! containers write a numbered line through their csi-agent volumes
//! every 50 ms, the agent is stopped (SIGTERM, `systemctl stop`), a newer
//! binary at another path is started on the same sockets and data dir,
//! and dockerd's calls made meanwhile wait in the sockets' backlog. No
//! claim is released, no mount is dropped or made again (the mount IDs
//! stay, watched all along), no line is lost, and the new agent releases
//! each claim once when its container stops.
//!
//! The "newer binary" is a copy of the binary under test at another
//! path: a test run has one build, and what an upgrade tests is the stop
//! and the start (the state the old process leaves, the mounts and claims
//! the new one adopts from it), not a difference in code. A copy is a file
//! of its own, as a package's new binary is, so nothing of the old
//! process's executable is shared.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use super::require_socket_activate;
use super::writers::{assert_consecutive, Host, MountWatch};
use crate::dockerd::require_docker;
use crate::harness::text;

/// The writing containers.
const CONTAINERS: usize = 5;

/// How long no agent runs: a package manager's unpack, at least.
const GAP: Duration = Duration::from_secs(1);

/// How long the writers write on after the new agent is ready.
const AFTER: Duration = Duration::from_secs(2);

#[test]
fn an_upgrade_in_place_keeps_every_claim_mount_and_line() {
    if !require_docker() || !require_socket_activate() {
        return;
    }
    let mut host = Host::start(&[]);
    host.run_writers(CONTAINERS, &[]);
    let claims = host.wait_claims(1);
    let mounts = host.mounts();
    // A staging and a publish per volume, each mounted once.
    assert_eq!(mounts.len(), 2 * CONTAINERS, "{mounts:#?}");
    assert!(mounts.values().all(|ids| ids.len() == 1), "{mounts:#?}");
    let watch = MountWatch::start(&host.data_dir, mounts.clone());
    let traced = host.plugin.trace().len();
    let written: Vec<usize> = (0..CONTAINERS).map(|i| host.lines(i).len()).collect();

    host.stop_agent();
    // The package's new binary.
    let newer = host.dir.join("csi-agent-newer");
    fs::copy(crate::util::bin(), &newer).unwrap();
    // dockerd's call while no agent runs: it connects and waits.
    let engine = host.dockerd.socket.clone();
    let cli_config = host.dir.join("docker-cli");
    let waiting = thread::spawn(move || {
        let dockerd_cli = std::process::Command::new("docker")
            .arg("-H")
            .arg(format!("unix://{}", engine.display()))
            .args(["volume", "inspect", "-f", "{{.Driver}}", "v0"])
            .env("DOCKER_CONFIG", cli_config)
            .output()
            .unwrap();
        (Instant::now(), dockerd_cli)
    });
    thread::sleep(GAP);
    host.start_agent(&newer);
    let started = host.agent.as_ref().unwrap().started();
    thread::sleep(AFTER);

    let (answered, inspect) = waiting.join().unwrap();
    assert!(
        inspect.status.success(),
        "{}\n{}",
        text(&inspect),
        host.logs()
    );
    assert_eq!(String::from_utf8_lossy(&inspect.stdout).trim(), host.name);
    assert!(
        answered > started,
        "the inspect was answered before the new agent started: it did not wait for the driver"
    );
    assert_eq!(host.claims(), claims, "{}", host.logs());
    let (looks, changed) = watch.finish();
    if let Some(changed) = changed {
        panic!(
            "the mounts changed during the upgrade: {changed}\n{}",
            host.logs()
        );
    }
    assert!(looks > 100, "the watch looked only {looks} times");
    let released: Vec<String> = host
        .trace_since(traced)
        .into_iter()
        .filter(|call| call.contains("Unpublish") || call.contains("Unstage"))
        .collect();
    assert_eq!(released, Vec::<String>::new(), "{}", host.logs());
    // Every line, through the gap: 50 ms each, so at least half of the
    // gap's and the time after's worth beyond what was there before.
    let more = ((GAP + AFTER).as_millis() / 50 / 2) as usize;
    for (i, before) in written.iter().enumerate() {
        assert_consecutive(&format!("v{i}"), &host.lines(i), before + more);
    }

    // The new agent owns the claims it adopted: each is released once,
    // cleanly, when its container goes.
    let traced = host.plugin.trace().len();
    let mut rm = vec!["rm", "-f"];
    let writers = host.writers.clone();
    rm.extend(writers.iter().map(String::as_str));
    host.docker_ok(&rm);
    host.wait_claims(0);
    for i in 0..CONTAINERS {
        for rpc in ["NodeUnpublishVolume", "NodeUnstageVolume"] {
            let sent = host.calls_for(traced, rpc, &format!("v{i}"));
            assert_eq!(sent.len(), 1, "{rpc} of v{i}: {sent:#?}\n{}", host.logs());
        }
    }
    assert_eq!(host.mounts().len(), 0, "{:#?}", host.mounts());
}
