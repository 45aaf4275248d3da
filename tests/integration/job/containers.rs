//! The docker driver against a private engine ([`Dockerd`]): containers
//! started from images made offline, their output in `alloc logs`, their
//! exits through the restart policy, their volumes, plugins run from an
//! image, and re-adoption after the agent is killed.

use super::Rig;
use crate::dockerd::{require_docker, Dockerd};

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
