//! `job run`'s watch of a docker task's image pull: the engine pulls the
//! image from a registry the test serves ([`Registry`]), and the watch
//! shows the pull start, its progress and its end.

use std::fs;

use super::Rig;
use crate::dockerd::{busybox_rootfs, require_docker, Dockerd};
use crate::harness::text;
use crate::registry::Registry;

#[test]
fn job_run_shows_a_docker_image_pull_its_progress_and_its_end() {
    if !require_docker() {
        return;
    }
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
    let out = rig
        .agent
        .cli_watch(&["job", "run", &path.display().to_string()]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
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
