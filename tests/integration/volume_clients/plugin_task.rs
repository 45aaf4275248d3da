//! The CSI plugin itself in a container: the built-in hostpath plugin as
//! a privileged `docker` task (`csi_plugin`) of the same agent that serves
//! the volume plugin socket, and a plain `docker run` container, started
//! by nobody but the CLI, using a volume it serves.

use std::fs;
use std::time::Duration;

use super::{find_files, require_docker_cli, Host, IMAGE};
use crate::dockerd::Dockerd;
use crate::harness::{healthy, text};
use crate::job::containers::hostpath_rootfs;
use crate::util::NODE;
use crate::volume_util::PLUGIN;

/// The image of the hostpath plugin: the binary under test and the
/// libraries it links, on the busybox root.
const HOSTPATH: &str = "csi-test/hostpath:1";

/// How long the plugin container may take to be healthy: an image's
/// container start, then the plugin's socket.
const PLUGIN_START: Duration = Duration::from_secs(60);

/// The plugin job: hostpath in its image, its base dir `backing` bound
/// at `/backing`, its socket in the agent's mount dir.
fn plugin_job(backing: &std::path::Path) -> String {
    format!(
        r#"
job "plugin" {{
  group "nodes" {{
    task "plugin" {{
      driver = "docker"
      config {{
        image      = "{HOSTPATH}"
        command    = "/bin/csi-agent"
        args       = ["hostpath", "-strict", "-endpoint", "${{CSI_ENDPOINT}}", "-base-dir", "/backing", "-node-id", "{NODE}"]
        privileged = true
        volumes    = ["{backing}:/backing"]
      }}
      csi_plugin {{
        id             = "{PLUGIN}"
        type           = "monolith"
        mount_dir      = "/csi"
        health_timeout = "30s"
      }}
    }}
  }}
}}
"#,
        backing = backing.display(),
    )
}

#[test]
fn a_plugin_run_as_a_docker_task_serves_a_plain_docker_run_container() {
    if !require_docker_cli() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(IMAGE);
    let rootfs = hostpath_rootfs(&dockerd, "rootfs-hostpath");
    dockerd.import_image(HOSTPATH, &rootfs);
    let docker_block = format!(
        "\ndocker {{\n  endpoint         = \"unix://{}\"\n  allow_privileged = true\n  volumes {{\n    enabled = true\n  }}\n}}\n",
        dockerd.socket.display()
    );
    let host = Host::serving(Some(dockerd), None, &docker_block);
    let backing = host.agent.dir.mkdir("backing");
    let job = host.agent.dir.join("plugin.hcl");
    fs::write(&job, plugin_job(&backing)).unwrap();
    let out = host.agent.cli(&["job", "run", &job.display().to_string()]);
    assert!(
        out.status.success(),
        "job run: {}\n{}",
        text(&out),
        host.logs()
    );
    host.agent.wait_for(PLUGIN, healthy, PLUGIN_START);

    host.docker_ok(&["volume", "create", "-d", &host.name, "served"]);
    host.docker_ok(&[
        "run",
        "--rm",
        "-v",
        "served:/data",
        IMAGE,
        "sh",
        "-c",
        "echo through-the-plugin-container > /data/f",
    ]);
    // The file is in the plugin container's base dir, on the host.
    let written = find_files(&backing, "f");
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(
        fs::read_to_string(&written[0]).unwrap(),
        "through-the-plugin-container\n"
    );
    let read = host.docker_ok(&["run", "--rm", "-v", "served:/data", IMAGE, "cat", "/data/f"]);
    assert_eq!(read, "through-the-plugin-container\n");
    host.wait_claims("served", 0);
    host.assert_nothing_mounted();
    host.docker_ok(&["volume", "rm", "served"]);
    assert!(host.volume("served").is_none(), "{}", host.logs());
    // Deleted in the plugin (DeleteVolume), not only forgotten.
    assert!(find_files(&backing, "f").is_empty(), "{}", host.logs());
    let stop = host.agent.cli(&["job", "stop", "plugin"]);
    assert!(stop.status.success(), "job stop: {}", text(&stop));
}
