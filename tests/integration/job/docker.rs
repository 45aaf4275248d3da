//! What `job run` checks of a docker task against the agent: privileged
//! mode and host volumes need the agent config's leave, as in Nomad, and
//! every `${...}` of the config must name a variable.

use super::Rig;
use crate::harness::text;

/// Nomad's hostpath demo plugin: a privileged docker task.
const PRIVILEGED: &str = include_str!("../../fixtures/nomad/hostpath-plugin.nomad");

fn job(config: &str) -> String {
    format!(
        "job \"d\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"docker\"\n      config {{\n        {config}\n      }}\n    }}\n  }}\n}}\n"
    )
}

#[test]
fn job_run_refuses_a_privileged_docker_task_with_the_default_agent_config() {
    let rig = Rig::bare();
    let out = rig.run_job_output("plugin.nomad", PRIVILEGED);
    assert!(!out.status.success(), "{}", text(&out));
    let all = text(&out);
    assert!(
        all.contains("group \"csi\" task \"plugin\": Docker privileged mode is disabled on this agent: set allow_privileged = true in the agent config's docker block"),
        "{all}"
    );
}

#[test]
fn job_run_refuses_docker_host_volumes_unless_enabled() {
    let rig = Rig::bare();
    let out = rig.run_job_output(
        "vol.hcl",
        &job("image = \"busybox\"\n        volumes = [\"/srv:/srv:ro\"]"),
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("volumes are not enabled on this agent, so the task cannot mount host path \"/srv\": set volumes { enabled = true }"),
        "{}",
        text(&out)
    );
    // A path relative to the task dir needs no leave, as in Nomad; an
    // unknown variable is refused.
    let out = rig.run_job_output(
        "var.hcl",
        &job("image = \"busybox:${NOMAD_NO_SUCH}\"\n        volumes = [\"local/x:/x\"]"),
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("config.image"), "{}", text(&out));
    assert!(text(&out).contains("NOMAD_NO_SUCH"), "{}", text(&out));
}

#[test]
fn an_agent_that_allows_them_accepts_privileged_tasks_and_host_volumes() {
    let rig = Rig::bare_with_config(
        "docker {\n  allow_privileged = true\n  volumes {\n    enabled = true\n  }\n}\n",
    );
    let out = rig.run_job_output(
        "ok.hcl",
        &job(
            "image = \"busybox\"\n        privileged = true\n        volumes = [\"/srv:/srv:ro\"]",
        ),
    );
    assert!(out.status.success(), "{}", text(&out));
    rig.ok(&["job", "stop", "d"]);
}
