//! Debian's `docker-compose` (Compose 1.29) with `DOCKER_HOST` at the
//! private engine: a compose file whose top-level `volumes:` names the
//! agent's driver and its `driver_opts`, two services sharing the volume
//! at once, `up -d`, `down` (the volume stays) and `down -v` (the volume
//! removed through the driver's Remove).

use std::fs;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{find_files, require_client, require_docker_cli, Host, IMAGE};
use crate::harness::{text, WAIT};

/// The project name: the volume is `<project>_shared`.
const PROJECT: &str = "clients";
const VOLUME: &str = "clients_shared";

/// Two services, each writing a file of its own to the shared volume,
/// then copying the other's into a file of its own, then sleeping. No
/// network: the private engine has no bridge.
fn compose_file(driver: &str) -> String {
    let service = |me: &str, other: &str| {
        format!(
            r#"  {me}:
    image: {IMAGE}
    network_mode: none
    command: ["sh", "-c", "echo from-{me} > /data/{me}; while ! test -f /data/{other}; do sleep 0.05; done; cp /data/{other} /data/{me}-saw-{other}; exec sleep 1000"]
    volumes:
      - shared:/data
"#
        )
    };
    format!(
        "version: \"2.4\"\nservices:\n{}{}volumes:\n  shared:\n    driver: {driver}\n    driver_opts:\n      access_mode: single-node-multi-writer\n      size: 32MiB\n",
        service("left", "right"),
        service("right", "left"),
    )
}

/// `docker-compose ARGS` in the project's dir, against the host's engine.
fn compose(host: &Host, dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new("docker-compose")
        .current_dir(dir)
        .args(["-p", PROJECT])
        .args(args)
        .env(
            "DOCKER_HOST",
            format!("unix://{}", host.dockerd().socket.display()),
        )
        .env("DOCKER_CONFIG", dir.join("docker-cli"))
        .env_remove("COMPOSE_FILE")
        .env_remove("COMPOSE_PROJECT_NAME")
        .stdin(Stdio::null())
        .output()
        .expect("run docker-compose")
}

#[track_caller]
fn compose_ok(host: &Host, dir: &std::path::Path, args: &[&str]) {
    let out = compose(host, dir, args);
    if !out.status.success() {
        panic!(
            "docker-compose {args:?} failed:\n{}\n{}",
            text(&out),
            host.logs()
        );
    }
}

/// Runs `sh -c script` in the project's service `service`; its stdout.
fn exec(host: &Host, service: &str, script: &str) -> Output {
    let container = format!("{PROJECT}_{service}_1");
    host.docker(&["exec", &container, "sh", "-c", script])
}

#[test]
fn a_compose_project_shares_a_driver_volume_and_down_v_removes_it() {
    if !(require_docker_cli() && require_client("docker-compose", "docker-compose")) {
        return;
    }
    let host = Host::start();
    let dir = host.agent.dir.mkdir("project");
    fs::write(dir.join("docker-compose.yml"), compose_file(&host.name)).unwrap();

    compose_ok(&host, &dir, &["up", "-d"]);
    // The volume is the driver's, with the file's options.
    let volume = host.volume(VOLUME).expect("compose created the volume");
    assert!(
        volume
            .capabilities
            .iter()
            .any(|c| c.starts_with("single-node-multi-writer")),
        "{volume:#?}"
    );
    // Both services run at once with one claim each...
    let claims = host.wait_claims(VOLUME, 2);
    assert!(
        claims.iter().all(|c| c.starts_with("docker-")),
        "{claims:?}"
    );
    // ...and each sees what the other wrote.
    let start = Instant::now();
    for (me, other) in [("left", "right"), ("right", "left")] {
        let script = format!("cat /data/{me}-saw-{other}");
        loop {
            let out = exec(&host, me, &script);
            if out.status.success() {
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    format!("from-{other}\n")
                );
                break;
            }
            assert!(
                start.elapsed() < WAIT,
                "{me} never saw {other}'s file: {}\n{}",
                text(&out),
                host.logs()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    // `down` removes the containers (their claims go) but keeps the volume.
    compose_ok(&host, &dir, &["down"]);
    host.wait_claims(VOLUME, 0);
    assert_eq!(host.docker_volumes(), [VOLUME]);
    host.assert_nothing_mounted();

    // `down -v` removes it through the driver.
    compose_ok(&host, &dir, &["down", "-v"]);
    assert_eq!(host.docker_volumes(), Vec::<String>::new());
    assert!(host.volume(VOLUME).is_none(), "{}", host.logs());
    // Deleted in the plugin (DeleteVolume), not only forgotten.
    let base = &host.plugin.as_ref().unwrap().base;
    assert!(find_files(base, "left").is_empty(), "{}", host.logs());
}
