//! A batch group's `max_run_duration`, as Nomad enforces it: a task that
//! runs past the bound is killed (its kill signal, then SIGKILL after its
//! `kill_timeout`) and the alloc settles as complete with Nomad's
//! description; one that ends first is not touched; a service job's bound
//! is refused; an agent restart neither resets nor extends the bound.

use std::thread;
use std::time::{Duration, Instant};

use super::Rig;
use crate::harness::{text, WAIT};
use crate::util::require_root;

const EXCEEDED: &str = "allocation exceeded max_run_duration";

/// A `job_type` job whose one raw_exec task runs `script`, its group
/// bounded by `bound`. The task ignores SIGTERM when `stubborn`, so only
/// the SIGKILL after its 1s `kill_timeout` ends it.
fn job(name: &str, job_type: &str, bound: &str, script: &str) -> String {
    format!(
        r#"job "{name}" {{
  type = "{job_type}"
  group "g" {{
    max_run_duration = "{bound}"
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver       = "raw_exec"
      kill_timeout = "1s"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
      }}
    }}
  }}
}}
"#
    )
}

#[test]
fn a_batch_task_past_max_run_duration_is_killed_and_the_alloc_says_why() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let started = Instant::now();
    // SIGTERM is ignored: the kill_timeout's SIGKILL ends it.
    let hcl = job(
        "slow",
        "batch",
        "2s",
        "trap '' TERM; while true; do sleep 0.1; done",
    );
    let allocs = rig.run_job("slow.hcl", &hcl);
    rig.wait_running("slow", &allocs[0]);
    let status = rig.wait_job("slow", "the bound to run out", |j| {
        j.allocs[0].status == "complete"
    });
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(3), "ended after {took:?}");
    let alloc = &status.allocs[0];
    assert_eq!(alloc.message, EXCEEDED);
    let task = &alloc.tasks[0];
    assert!(!task.failed);
    let events: Vec<(&str, &str)> = task
        .events
        .iter()
        .map(|e| (e.kind.as_str(), e.message.as_str()))
        .collect();
    assert!(
        events.contains(&("killing", "allocation exceeded max_run_duration (2s)")),
        "{events:?}"
    );
    assert!(
        events.iter().any(|(kind, _)| *kind == "killed"),
        "SIGKILL after the kill_timeout: {events:?}"
    );
}

#[test]
fn a_batch_task_that_ends_within_max_run_duration_completes_as_usual() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let allocs = rig.run_job("quick.hcl", &job("quick", "batch", "1m", "echo done"));
    let status = rig.wait_job("quick", "the task to end", |j| {
        j.allocs[0].status == "complete"
    });
    let alloc = &status.allocs[0];
    assert_eq!(alloc.id, allocs[0]);
    assert_eq!(alloc.message, "");
    assert!(alloc.tasks[0].events.iter().all(|e| e.kind != "killing"));
    assert_eq!(rig.ok(&["alloc", "logs", &allocs[0], "t"]), "done\n");
}

#[test]
fn max_run_duration_is_refused_in_a_service_job_with_its_line() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = rig.run_job_output("svc.hcl", &job("svc", "service", "10s", "sleep 600"));
    assert!(!out.status.success());
    let said = text(&out);
    assert!(
        said.contains("svc.hcl:4:") && said.contains(
            "max_run_duration in group \"g\" bounds batch and sysbatch jobs only, and this is a service job"
        ),
        "{said}"
    );
    let out = rig.run_job_output("zero.hcl", &job("zero", "sysbatch", "0s", "true"));
    assert!(!out.status.success());
    assert!(
        text(&out).contains("must be longer than zero"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_agent_restart_keeps_the_bound_counting_from_the_alloc_start() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let bound = Duration::from_secs(5);
    let started = Instant::now();
    let allocs = rig.run_job("kept.hcl", &job("kept", "batch", "5s", "exec sleep 600"));
    rig.wait_running("kept", &allocs[0]);
    // The agent is down past the deadline; the task runs on meanwhile.
    assert_eq!(rig.agent.sigterm(), 0);
    let past = bound + Duration::from_secs(1);
    // The passage of time is what the test is about: nothing to wait on.
    thread::sleep(past.saturating_sub(started.elapsed()));
    rig.agent.restart();
    let status = rig.wait_job("kept", "the bound to run out", |j| {
        j.allocs[0].status == "complete"
    });
    // A bound that restarted with the agent would end no earlier than
    // 5s after it: 11s from the start.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "ended after {took:?}");
    assert_eq!(status.allocs[0].message, EXCEEDED);
    assert!(took < WAIT);
}

#[test]
fn a_poststop_task_does_not_start_once_the_bound_ran_out() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = r#"job "cleanup" {
  type = "batch"
  group "g" {
    max_run_duration = "1s"
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
    task "after" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/true"
      }
    }
  }
}
"#;
    rig.run_job("cleanup.hcl", hcl);
    let status = rig.wait_job("cleanup", "the bound to run out", |j| {
        j.allocs[0].status == "complete"
    });
    let alloc = &status.allocs[0];
    assert_eq!(alloc.message, EXCEEDED);
    let after = alloc.tasks.iter().find(|t| t.name == "after").unwrap();
    assert_eq!(after.state, "dead");
    let kinds: Vec<&str> = after.events.iter().map(|e| e.kind.as_str()).collect();
    assert!(!kinds.contains(&"started"), "{kinds:?}");
    assert!(
        after
            .events
            .iter()
            .any(|e| e.kind == "skipped" && e.message.contains(EXCEEDED)),
        "{kinds:?}"
    );
}
