//! `job run`'s watch of a docker task's image pull: the engine pulls the
//! image from a registry the test serves ([`Registry`]), and the watch
//! shows the pull start, its progress and its end.

use std::fs;
use std::process::Command;

use super::Rig;
use crate::dockerd::{busybox_rootfs, require_docker, Dockerd};
use crate::harness::text;
use crate::registry::Registry;
use crate::util::bin;

/// Serves an image, and runs a batch job of it with `job run`, on a
/// terminal (`script`'s pty) or not: the registry's host, the image and
/// what `job run` said (its stdout, and its exit code).
fn run_pulled(tty: bool) -> (Registry, String, String) {
    let dockerd = Dockerd::start();
    let rootfs = busybox_rootfs(&dockerd.dir.mkdir("rootfs-pulled"));
    let registry = Registry::serve("csi-test/pulled", "1", &rootfs);
    let image = format!("{}/csi-test/pulled:1", registry.host);
    let rig = Rig::bare_with_config(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n}}\n",
        dockerd.socket.display()
    ));
    let hcl = format!(
        r#"
job "pull" {{
  type = "batch"
  group "g" {{
    task "t" {{
      driver = "docker"
      config {{
        image   = "{image}"
        command = "sh"
        args    = ["-c", "echo pulled-and-ran"]
      }}
    }}
  }}
}}
"#
    );
    let path = rig.agent.dir.join("pull.hcl");
    fs::write(&path, hcl).unwrap();
    let out = if tty {
        // util-linux's script runs the command on a pty of its own.
        let command = format!("{} job run {}", bin(), path.display());
        Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .env(
                csi_agent::api::client::ADDRESS_ENV,
                format!("unix://{}", rig.agent.socket.display()),
            )
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    } else {
        rig.agent
            .cli_watch(&["job", "run", &path.display().to_string()])
    };
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    drop(rig);
    drop(dockerd);
    (
        registry,
        image,
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn job_run_shows_a_docker_image_pull_its_progress_and_its_end() {
    if !require_docker() {
        return;
    }
    let (registry, image, said) = run_pulled(false);
    let at = |needle: &str| {
        said.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{said}"))
    };
    // Started, progress (bytes of the layer's size), done: in that order,
    // and the container running after them.
    let started = at(&format!("Driver: pulling image {image}"));
    let progress = at(&format!("Pulling: image {image}: "));
    let line = said[progress..].lines().next().unwrap_or_default();
    assert!(
        line.contains(" of ") && line.ends_with(" of 1 layers)"),
        "{said}"
    );
    let done = at(&format!("Driver: pulled image {image} ("));
    let ran = at("Running: container");
    assert!(
        started < progress && progress < done && done < ran,
        "{said}"
    );
    assert!(said.contains("in 1 layers)"), "{said}");
    // Not a line per chunk: the first progress at once, later ones at most
    // every PLAIN_PULL_EVERY, which this pull does not last.
    assert_eq!(said.matches("Pulling: ").count(), 1, "{said}");
    let requests = registry.requests.lock().unwrap().clone();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /v2/csi-test/pulled/blobs/")),
        "{requests:?}"
    );
}

#[test]
fn job_run_on_a_terminal_shows_a_pull_in_its_progress_line() {
    if !require_docker() {
        return;
    }
    let (_registry, image, said) = run_pulled(true);
    let pulls: Vec<usize> = said
        .match_indices(&format!("task \"t\": Pulling: image {image}: "))
        .map(|(at, _)| at)
        .collect();
    assert!(!pulls.is_empty(), "no pull progress in {said:?}");
    // Each in the progress line, after its summary, never a line of its
    // own with a time.
    for at in pulls {
        let cleared = said[..at].rfind("\r\x1b[K").map_or(0, |i| i + 4);
        let new_line = said[..at].rfind('\n').map_or(0, |i| i + 1);
        let line = &said[cleared.max(new_line)..at];
        assert!(line.starts_with("1 alloc 1 "), "{line:?} in {said:?}");
        assert!(
            line.contains(" to complete | alloc "),
            "{line:?} in {said:?}"
        );
    }
    assert!(
        said.contains(&format!("Driver: pulled image {image} (")),
        "{said:?}"
    );
}
