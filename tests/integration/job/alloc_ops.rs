//! `alloc status`, `alloc signal`, `alloc restart`, `alloc stop` and `job
//! inspect` on real raw_exec tasks: what each does to the task, and the
//! event the agent records for it.

use std::fs;

use super::Rig;
use crate::harness::text;
use crate::util::require_root;

/// A service job of one raw_exec task running `script`, never restarted
/// by its policy (a restart the policy counted would fail the alloc).
fn job(name: &str, job_type: &str, script: &str) -> String {
    format!(
        r#"job "{name}" {{
  type = "{job_type}"
  group "g" {{
    network {{
      port "http" {{}}
    }}
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
      }}
      resources {{
        cpu    = 150
        memory = 64
      }}
    }}
  }}
}}
"#
    )
}

/// Counts its starts in the alloc dir, records SIGUSR1 there, and runs.
const COUNTING: &str = "echo start >> $NOMAD_ALLOC_DIR/starts; trap 'echo usr1 >> $NOMAD_ALLOC_DIR/signals' USR1; while true; do sleep 0.1; done";

fn alloc_file(rig: &Rig, alloc: &str, name: &str) -> String {
    fs::read_to_string(
        rig.agent
            .data_dir
            .join("alloc")
            .join(alloc)
            .join("alloc")
            .join(name),
    )
    .unwrap_or_default()
}

#[test]
fn alloc_status_shows_the_alloc_its_ports_and_each_tasks_resources_and_events() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = rig
        .run_job("s.hcl", &job("s", "service", COUNTING))
        .remove(0);
    rig.wait_running("s", &alloc);
    let said = rig.ok(&["alloc", "status", &alloc[..4]]);
    let status = rig.alloc("s", &alloc);
    for line in [
        format!("ID                 = {alloc}"),
        "Name               = s.g[0]".to_string(),
        "Client Status      = running".to_string(),
        "Task \"t\" is \"running\"".to_string(),
        format!("http   {}", status.ports[0].host),
        "/150 MHz".to_string(),
        "/64 MiB".to_string(),
        format!("http: {}", status.ports[0].host),
        "Time ".to_string(),
        "Started ".to_string(),
        "Received ".to_string(),
    ] {
        assert!(said.contains(&line), "{line:?} not in:\n{said}");
    }
    // Newest event first, as Nomad's table.
    assert!(
        said.find("Started ").unwrap() < said.find("Received ").unwrap(),
        "{said}"
    );
    let json = rig.ok(&["alloc", "status", "-json", &alloc]);
    assert!(json.contains(&format!("\"id\": \"{alloc}\"")), "{json}");
    let out = rig.agent.cli(&["alloc", "status", "zzzz"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("error: no alloc \"zzzz\""),
        "{}",
        text(&out)
    );
}

#[test]
fn alloc_signal_sends_the_signal_to_the_task_and_records_signaling() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = rig
        .run_job("sig.hcl", &job("sig", "service", COUNTING))
        .remove(0);
    rig.wait_running("sig", &alloc);
    let said = rig.ok(&["alloc", "signal", "-s", "SIGUSR1", &alloc, "t"]);
    assert!(said.contains("sent SIGUSR1 to task \"t\""), "{said}");
    rig.wait_job("sig", "the signal to be recorded", |_| {
        alloc_file(&rig, &alloc, "signals") == "usr1\n"
    });
    let task = rig.task("sig", &alloc);
    assert!(
        task.events
            .iter()
            .any(|e| e.kind == "signaling" && e.message == "sent SIGUSR1: asked by alloc signal"),
        "{task:#?}"
    );
    assert_eq!(task.state, "running");
    let out = rig.agent.cli(&["alloc", "signal", "-s", "SIGNOPE", &alloc]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("unknown signal \"SIGNOPE\""),
        "{}",
        text(&out)
    );
    let out = rig.agent.cli(&["alloc", "signal", &alloc, "nope"]);
    assert!(
        text(&out).contains("has no task \"nope\""),
        "{}",
        text(&out)
    );
}

#[test]
fn alloc_restart_restarts_the_task_in_place_outside_its_restart_policy() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = rig
        .run_job("r.hcl", &job("r", "service", COUNTING))
        .remove(0);
    let pid = rig.wait_running("r", &alloc);
    let said = rig.ok(&["alloc", "restart", &alloc]);
    assert!(said.contains("restarting task \"t\""), "{said}");
    // Running is said once the process is started, before its script
    // has written its line: wait for both.
    let status = rig.wait_job("r", "the task to start again", |j| {
        let t = &j.allocs[0].tasks[0];
        t.state == "running"
            && t.pid != pid
            && t.pid != 0
            && alloc_file(&rig, &alloc, "starts") == "start\nstart\n"
    });
    let a = &status.allocs[0];
    // The policy allows no restart: this one was not counted.
    assert_eq!(
        (a.id.as_str(), a.status.as_str()),
        (alloc.as_str(), "running")
    );
    assert_eq!(a.tasks[0].restarts, 0);
    let kinds: Vec<(&str, &str)> = a.tasks[0]
        .events
        .iter()
        .map(|e| (e.kind.as_str(), e.message.as_str()))
        .collect();
    assert!(
        kinds.contains(&("restart signaled", "asked by alloc restart")),
        "{kinds:?}"
    );
    assert!(kinds.iter().any(|(k, _)| *k == "killing"), "{kinds:?}");
    assert!(
        kinds
            .iter()
            .any(|(k, m)| *k == "restarting" && m.contains("outside its restart policy")),
        "{kinds:?}"
    );
}

#[test]
fn alloc_stop_replaces_a_service_alloc_and_ends_a_batch_one() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = rig
        .run_job("st.hcl", &job("st", "service", COUNTING))
        .remove(0);
    rig.wait_running("st", &alloc);
    let said = rig.ok(&["alloc", "stop", &alloc]);
    let new = said
        .split("alloc ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no replacement in {said}"))
        .to_string();
    assert_ne!(new, alloc);
    let status = rig.wait_job("st", "the old alloc to stop and the new one to run", |j| {
        j.allocs
            .iter()
            .any(|a| a.id == alloc && a.status == "complete")
            && j.allocs
                .iter()
                .any(|a| a.id == new && a.tasks[0].state == "running")
    });
    let old = status.allocs.iter().find(|a| a.id == alloc).unwrap();
    assert!(
        old.tasks[0].events.iter().any(|e| e.kind == "killing"),
        "{old:#?}"
    );

    let batch = rig.run_job("b.hcl", &job("b", "batch", COUNTING)).remove(0);
    rig.wait_running("b", &batch);
    let said = rig.ok(&["alloc", "stop", &batch]);
    assert_eq!(said.trim(), format!("Alloc {batch}: stopping"));
    let status = rig.wait_job("b", "the batch alloc to stop", |j| {
        j.allocs
            .iter()
            .all(|a| a.status == "complete" || a.status == "failed")
    });
    assert_eq!(status.allocs.len(), 1);
    let out = rig.agent.cli(&["alloc", "stop", &batch]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("nothing to stop"), "{}", text(&out));
}

#[test]
fn job_inspect_shows_the_job_file_as_submitted() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = job("ins", "service", COUNTING);
    rig.run_job("ins.hcl", &hcl);
    assert_eq!(rig.ok(&["job", "inspect", "ins"]), hcl);
    let json = rig.ok(&["job", "inspect", "-json", "ins"]);
    assert!(json.contains("\"type\": \"service\""), "{json}");
    assert!(json.contains("\"groups\": [\n    \"g\"\n  ]"), "{json}");
    let out = rig.agent.cli(&["job", "inspect", "nope"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no job \"nope\""), "{}", text(&out));
}
