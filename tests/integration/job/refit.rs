//! Placement again after a SIGHUP changes the node's `client { meta }`:
//! an instance the node did not fit is placed once it fits; a running
//! alloc that no longer fits runs on for a service job and is stopped for
//! a system job, whose instance comes back when the node fits again.

use super::Rig;
use crate::harness::{config_text, text, WAIT};
use crate::util::require_root;

const RACK: &str = "client {\n  meta {\n    rack = \"r7\"\n  }\n}\n";

/// A job `name` of type `job_type` whose raw_exec task sleeps, bound to
/// nodes whose `meta.rack` is `r7`.
fn on_rack(name: &str, job_type: &str) -> String {
    format!(
        r#"job "{name}" {{
  type = "{job_type}"
  constraint {{
    attribute = "${{meta.rack}}"
    value     = "r7"
  }}
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["600"]
      }}
    }}
  }}
}}
"#
    )
}

/// Writes the agent config with `extra` and has the agent read it, waiting
/// for its `n`th reload line.
fn reload(rig: &Rig, extra: &str, n: usize) {
    let mut config = config_text(&rig.agent.data_dir, &[]);
    config.push_str(extra);
    rig.agent.write_config(&config);
    rig.agent.sighup();
    let start = std::time::Instant::now();
    while rig.agent.log().matches("SIGHUP: reloaded").count() < n {
        assert!(
            start.elapsed() < WAIT,
            "no reload {n}:\n{}",
            rig.agent.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn running(rig: &Rig, name: &str) -> String {
    rig.wait_job(name, "one running alloc", |j| {
        j.allocs.iter().filter(|a| a.status == "running").count() == 1
    })
    .allocs
    .into_iter()
    .find(|a| a.status == "running")
    .unwrap()
    .id
}

#[test]
fn an_unplaced_group_is_placed_when_sighup_gives_the_node_its_meta() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let run = rig.run_job_output("later.hcl", &on_rack("later", "service"));
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let status = rig.ok(&["job", "status", "later"]);
    assert!(status.contains("Status    = pending"), "{status}");
    assert!(status.contains("Placement Failure"), "{status}");
    assert!(
        status.contains("Constraint \"${meta.rack} = r7\": 1 nodes excluded by filter"),
        "{status}"
    );

    reload(&rig, RACK, 1);
    running(&rig, "later");
    let status = rig.ok(&["job", "status", "later"]);
    assert!(!status.contains("Placement Failure"), "{status}");
    assert!(status.contains("Status    = running"), "{status}");
}

#[test]
fn a_misfit_system_alloc_stops_and_returns_while_a_service_alloc_runs_on() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare_with_config(RACK);
    rig.run_job("sys.hcl", &on_rack("sys", "system"));
    rig.run_job("svc.hcl", &on_rack("svc", "service"));
    let first = running(&rig, "sys");
    let service = running(&rig, "svc");

    // Reload 1 was the rig's; 2 takes the meta away.
    reload(&rig, "", 2);
    let sys = rig.wait_job("sys", "the alloc to stop", |j| {
        j.allocs.len() == 1 && j.allocs[0].status == "complete"
    });
    assert!(
        sys.allocs[0].message.starts_with(
            "the node no longer meets the job's constraints: Constraint \"${meta.rack} = r7\""
        ),
        "{sys:#?}"
    );
    let status = rig.ok(&["job", "status", "sys"]);
    assert!(status.contains("Placement Failure"), "{status}");
    // The service's alloc runs on, and is no placement failure.
    let svc = rig.job("svc");
    assert_eq!(svc.allocs.len(), 1, "{svc:#?}");
    assert_eq!(
        (svc.allocs[0].id.as_str(), svc.allocs[0].status.as_str()),
        (service.as_str(), "running")
    );
    assert!(svc.unplaced.is_empty(), "{svc:#?}");

    // 3 gives it back: a new alloc of the system job.
    reload(&rig, RACK, 3);
    let again = running(&rig, "sys");
    assert_ne!(again, first);
    assert_eq!(rig.job("svc").allocs.len(), 1);
    rig.ok(&["job", "stop", "sys"]);
    rig.ok(&["job", "stop", "svc"]);
}
