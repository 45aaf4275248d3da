//! dockerd restarted with `--live-restore` while its containers run on
//! csi-agent volumes: the containers run and write on, through the
//! engine's absence and its return, and the agent keeps every claim and
//! every mount. With dockerd back, `docker volume ls` and `inspect`
//! answer and a new container shares a volume; when the containers stop,
//! each claim is released once, cleanly.
//!
//! Debian's dockerd (20.10) sends the driver nothing when it restores a
//! live container; newer engines send each live container's Mount again,
//! with the mount ID it had (moby's `prepareMountPoints`). The test sends
//! those too, as such an engine would, and they must be answered with the
//! mount each claim has, making nothing new.

use std::path::Path;
use std::thread;
use std::time::Duration;

use super::require_socket_activate;
use super::writers::{assert_consecutive, Host, MountWatch};
use crate::dockerd::require_docker;
use crate::volume_clients::IMAGE;
use crate::volume_plugin::Docker;

/// The writing containers.
const CONTAINERS: usize = 5;

/// How long the writers write on after dockerd is back, for the agent's
/// lost-unmount reconciler to look at least once at the engine's
/// containers (every 2 s by default).
const AFTER: Duration = Duration::from_secs(3);

#[test]
fn a_live_restore_of_dockerd_keeps_every_claim_and_mount() {
    if !require_docker() || !require_socket_activate() {
        return;
    }
    let mut host = Host::start(&["--live-restore"]);
    // Multi-writer volumes: a second container may share one.
    host.run_writers(CONTAINERS, &["access_mode=single-node-multi-writer"]);
    let claims = host.wait_claims(1);
    let mounts = host.mounts();
    assert_eq!(mounts.len(), 2 * CONTAINERS, "{mounts:#?}");
    let started: Vec<String> = host
        .writers
        .iter()
        .map(|w| host.docker_ok(&["inspect", "-f", "{{.State.StartedAt}}", w]))
        .collect();
    let watch = MountWatch::start(&host.data_dir, mounts.clone());
    let traced = host.plugin.trace().len();
    let written: Vec<usize> = (0..CONTAINERS).map(|i| host.lines(i).len()).collect();

    host.dockerd.stop();
    // The containers write on with no engine.
    for (i, before) in written.iter().enumerate() {
        host.wait_lines(i, before + 10);
    }
    host.dockerd.launch();
    // A newer engine's Mounts at its restore.
    let restore = Docker::dockerd(&host.vp);
    for (volume, held) in &claims {
        let (alloc_id, _, _, publish_path) = &held[0];
        let mount_id = alloc_id.strip_prefix("docker-").expect("a dockerd claim");
        let mountpoint = restore.mount(volume, mount_id);
        assert_eq!(mountpoint, Path::new(publish_path), "{volume}");
    }
    thread::sleep(AFTER);

    for (writer, started) in host.writers.iter().zip(&started) {
        let state = host.docker_ok(&[
            "inspect",
            "-f",
            "{{.State.Running}} {{.RestartCount}} {{.State.StartedAt}}",
            writer,
        ]);
        assert_eq!(
            state.trim(),
            format!("true 0 {}", started.trim()),
            "{writer} did not run on through the restart"
        );
    }
    assert_eq!(host.claims(), claims, "{}", host.logs());
    let (looks, changed) = watch.finish();
    if let Some(changed) = changed {
        panic!(
            "the mounts changed during the restart: {changed}\n{}",
            host.logs()
        );
    }
    assert!(looks > 100, "the watch looked only {looks} times");
    let calls = host.trace_since(traced);
    let released: Vec<&String> = calls
        .iter()
        .filter(|call| call.contains("Unpublish") || call.contains("Unstage"))
        .collect();
    assert!(released.is_empty(), "{released:#?}\n{}", host.logs());
    let more = (AFTER.as_millis() / 50 / 2) as usize + 10;
    for (i, before) in written.iter().enumerate() {
        assert_consecutive(&format!("v{i}"), &host.lines(i), before + more);
    }

    // dockerd back: its volume commands answer, and a new container
    // shares a volume with its writer.
    let listed = host.docker_ok(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("driver={}", host.name),
    ]);
    let expected: Vec<String> = (0..CONTAINERS).map(|i| format!("v{i}")).collect();
    assert_eq!(listed.lines().collect::<Vec<_>>(), expected);
    let driver = host.docker_ok(&["volume", "inspect", "-f", "{{.Driver}}", "v0"]);
    assert_eq!(driver.trim(), host.name);
    let last = host.docker_ok(&[
        "run",
        "--rm",
        "-v",
        "v0:/data",
        IMAGE,
        "sh",
        "-c",
        "tail -n 1 /data/lines",
    ]);
    let last: usize = last.trim().parse().unwrap_or_else(|_| panic!("{last:?}"));
    assert!(last > written[0] + more, "the reader saw line {last}");
    // Its claim came and went; the writer's stays.
    assert_eq!(host.wait_claims(1), claims, "{}", host.logs());

    // The containers stop: each claim is released once, cleanly.
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
