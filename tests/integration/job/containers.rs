//! The docker driver against a private engine ([`Dockerd`]): containers
//! started from images made offline, their output in `alloc logs`, their
//! exits through the restart policy, their volumes, plugins run from an
//! image, and re-adoption after the agent is killed.

use std::fs;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::{Rig, PLUGIN_ID, VOLUME};
use crate::dockerd::{busybox_rootfs, require_docker, Dockerd};
use crate::harness::{healthy, WAIT};
use crate::util::{bin, NODE};

/// The image of the test's busybox.
const BUSYBOX: &str = "csi-test/busybox:1";

/// A rig whose agent uses `dockerd`, with `extra` in its docker block.
fn rig(dockerd: &Dockerd, extra: &str) -> Rig {
    Rig::bare_with_config(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n{extra}}}\n",
        dockerd.socket.display()
    ))
}

/// A job of one docker task running `script` under `sh -c` in the
/// busybox image; `task_extra` goes in the task block.
fn script_job(name: &str, job_type: &str, script: &str, task_extra: &str) -> String {
    format!(
        r#"
job "{name}" {{
  type = "{job_type}"
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "docker"
      config {{
        image   = "{BUSYBOX}"
        command = "sh"
        args    = ["-c", {script:?}]
      }}
{task_extra}    }}
  }}
}}
"#
    )
}

/// The containers of the agent of `rig` that the engine has.
fn containers_of(dockerd: &Dockerd, rig: &Rig) -> Vec<String> {
    let label = format!("csi-agent.data_dir={}", rig.agent.data_dir.display());
    dockerd
        .engine()
        .list(&label)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect()
}

#[test]
fn a_container_task_runs_sees_nomads_dirs_and_its_output_reaches_alloc_logs() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    let script = "echo out-$NOMAD_TASK_NAME; echo err >&2; test -d /local && test -d /alloc/data && test -d /secrets && echo dirs-ok";
    let allocs = rig.run_job("b.hcl", &script_job("b", "batch", script, ""));
    let status = rig.wait_job("b", "the batch task to finish", |j| {
        j.allocs
            .iter()
            .all(|a| a.status == "complete" || a.status == "failed")
    });
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    let stdout = rig.ok(&["alloc", "logs", &allocs[0], "t"]);
    assert!(stdout.contains("out-t"), "{stdout}");
    assert!(stdout.contains("dirs-ok"), "{stdout}");
    let stderr = rig.ok(&["alloc", "logs", "-stderr", &allocs[0], "t"]);
    assert!(stderr.contains("err"), "{stderr}");
    // The finished container is removed.
    assert!(
        containers_of(&dockerd, &rig).is_empty(),
        "{:?}",
        containers_of(&dockerd, &rig)
    );
}

/// The image of the built-in hostpath plugin: the binary under test at
/// `/bin/csi-agent` with the shared libraries it links, on the busybox
/// root; made offline as a plugin vendor's image would be.
const HOSTPATH: &str = "csi-test/hostpath:1";

fn hostpath_image(dockerd: &Dockerd) {
    let rootfs = busybox_rootfs(&dockerd.dir.mkdir("rootfs-hostpath"));
    fs::copy(bin(), rootfs.join("bin/csi-agent")).unwrap();
    let ldd = Command::new("ldd").arg(bin()).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, or the
        // loader's `/lib64/ld-linux-x86-64.so.2 (0x...)`.
        let path = line
            .split("=>")
            .last()
            .and_then(|rest| rest.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        if let Some(path) = path {
            let to = rootfs.join(path.trim_start_matches('/'));
            fs::create_dir_all(to.parent().unwrap()).unwrap();
            fs::copy(path, &to).unwrap();
        }
    }
    dockerd.import_image(HOSTPATH, &rootfs);
}

/// The hostpath plugin as a privileged docker task of Nomad's form
/// (`csi_plugin` with `mount_dir = "/csi"`), in `mode`, its base dir the
/// rig's backing dir bound at `/backing`.
fn hostpath_container_job(rig: &Rig, name: &str, mode: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "nodes" {{
    restart {{
      attempts = 3
      interval = "5m"
      delay    = "1s"
      mode     = "fail"
    }}
    task "plugin" {{
      driver = "docker"
      config {{
        image      = "{HOSTPATH}"
        command    = "/bin/csi-agent"
        args       = ["hostpath", "-strict", "-mode", "{mode}", "-endpoint", "${{CSI_ENDPOINT}}", "-base-dir", "/backing", "-node-id", "{NODE}"]
        privileged = true
        volumes    = ["{backing}:/backing"]
      }}
      csi_plugin {{
        id             = "{PLUGIN_ID}"
        type           = "{mode}"
        mount_dir      = "/csi"
        health_timeout = "30s"
      }}
    }}
  }}
}}
"#,
        backing = rig.backing.display(),
    )
}

/// A docker consumer: busybox running `script` with volume `v1` at
/// `/data`.
fn container_consumer(name: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  type = "batch"
  group "app" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    volume "data" {{
      type            = "csi"
      source          = "v1"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "main" {{
      driver = "docker"
      config {{
        image   = "{BUSYBOX}"
        command = "sh"
        args    = ["-c", {script:?}]
      }}
      volume_mount {{
        volume      = "data"
        destination = "/data"
      }}
    }}
  }}
}}
"#
    )
}

/// A rig whose plugin `hp` runs from its image, with volume `v1`.
fn plugin_rig(dockerd: &Dockerd) -> Rig {
    dockerd.busybox_image(BUSYBOX);
    hostpath_image(dockerd);
    let rig = rig(
        dockerd,
        "  allow_privileged = true\n  volumes {\n    enabled = true\n  }\n",
    );
    fs::create_dir_all(&rig.backing).unwrap();
    let allocs = rig.run_job(
        "plugin.hcl",
        &hostpath_container_job(&rig, "plugin", "monolith"),
    );
    let start = Instant::now();
    while !rig.agent.try_plugin(PLUGIN_ID).is_ok_and(|p| healthy(&p)) {
        if start.elapsed() > WAIT {
            panic!(
                "plugin {PLUGIN_ID} is not healthy after {WAIT:?}\n{}\n--- its stderr ---\n{}\n--- the engine's log ---\n{}",
                rig.ok(&["job", "status", "plugin"]),
                rig.ok(&["alloc", "logs", "-stderr", &allocs[0], "plugin"]),
                dockerd.log(),
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
    let vol = rig.agent.dir.join("v1.hcl");
    fs::write(&vol, VOLUME).unwrap();
    rig.ok(&["volume", "create", &vol.display().to_string()]);
    rig
}

#[test]
fn a_plugin_from_an_image_serves_a_container_task_and_an_exec_task() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    let rig = plugin_rig(&dockerd);
    // A container writes through its volume_mount...
    rig.run_job(
        "c.hcl",
        &container_consumer("c", "echo from-container > /data/c.txt"),
    );
    let status = rig.wait_job("c", "the container consumer to finish", |j| {
        j.allocs
            .iter()
            .all(|a| a.status == "complete" || a.status == "failed")
    });
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    rig.wait_released(&status.allocs[0].id);
    let backing_file = rig.backing.join("volumes/v1/c.txt");
    assert_eq!(
        fs::read_to_string(&backing_file).unwrap(),
        "from-container\n"
    );
    // ...and an exec task reads it through its own.
    rig.run_job(
        "e.hcl",
        &super::consumer("e", "cat /data/c.txt > /data/e.txt", "", false),
    );
    let status = rig.wait_job("e", "the exec consumer to finish", |j| {
        j.allocs
            .iter()
            .all(|a| a.status == "complete" || a.status == "failed")
    });
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    rig.wait_released(&status.allocs[0].id);
    assert_eq!(
        fs::read_to_string(rig.backing.join("volumes/v1/e.txt")).unwrap(),
        "from-container\n"
    );
    rig.wait_no_mounts_left();
    rig.stop("plugin");
    assert!(containers_of(&dockerd, &rig).is_empty());
}
