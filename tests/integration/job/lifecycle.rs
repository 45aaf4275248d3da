//! Task lifecycles and job types with real tasks: prestart tasks before
//! the main tasks (and sidecars alongside them), poststart after they
//! start, poststop after they stop and before the claims are released;
//! batch tasks that complete, and restart policies per task.

use std::fs;
use std::path::PathBuf;

use csi_agent::proto::agent::{AllocStatus, TaskStatus};

use super::Rig;
use crate::util::require_root;

/// The task named `name` of an alloc.
#[track_caller]
pub(super) fn task<'a>(alloc: &'a AllocStatus, name: &str) -> &'a TaskStatus {
    alloc
        .tasks
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no task {name} in {alloc:#?}"))
}

/// When the task's first event of `kind` happened, Unix milliseconds.
#[track_caller]
pub(super) fn first(task: &TaskStatus, kind: &str) -> i64 {
    task.events
        .iter()
        .find(|e| e.kind == kind)
        .unwrap_or_else(|| panic!("task {} has no {kind:?} event: {task:#?}", task.name))
        .unix_ms
}

/// The dir the alloc's tasks share as `/alloc/data`, on the host.
pub(super) fn shared_data(rig: &Rig, alloc: &str) -> PathBuf {
    rig.agent
        .data_dir
        .join("alloc")
        .join(alloc)
        .join("alloc/data")
}

/// An exec task running `script` under `sh -c`, with `extra` in its body.
pub(super) fn sh_task(name: &str, script: &str, extra: &str) -> String {
    format!(
        r#"
    task "{name}" {{
      driver = "exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
      }}
{extra}
    }}"#
    )
}

pub(super) fn lifecycle(hook: &str, sidecar: bool) -> String {
    format!(
        "      lifecycle {{\n        hook    = \"{hook}\"\n        sidecar = {sidecar}\n      }}"
    )
}

/// A job of type `job_type` with one group holding `body`.
pub(super) fn job(name: &str, job_type: &str, body: &str) -> String {
    format!("job \"{name}\" {{\n  type = \"{job_type}\"\n  group \"g\" {{\n{body}\n  }}\n}}\n")
}

pub(super) const NO_RESTARTS: &str =
    "    restart {\n      attempts = 0\n      mode     = \"fail\"\n    }";

#[test]
fn prestart_prepares_the_volume_poststart_follows_and_poststop_runs_before_the_release() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let mount = "      volume_mount {\n        volume      = \"data\"\n        destination = \"/data\"\n      }";
    let volume = "    volume \"data\" {\n      type            = \"csi\"\n      source          = \"v1\"\n      access_mode     = \"single-node-writer\"\n      attachment_mode = \"file-system\"\n    }";
    // The usual preparation of a fresh CSI volume: a root prestart task
    // gives it to the user the main task runs as.
    let body = [
        NO_RESTARTS.to_string(),
        volume.to_string(),
        sh_task(
            "prep",
            "sleep 1; chown nobody /data",
            &format!("{}\n{mount}", lifecycle("prestart", false)),
        ),
        sh_task(
            "main",
            "echo hi > /data/out && exec sleep 600",
            &format!("      user = \"nobody\"\n{mount}"),
        ),
        sh_task("after", "exec sleep 600", &lifecycle("poststart", true)),
        sh_task(
            "cleanup",
            "cat /data/out > /alloc/data/poststop-saw",
            &format!("{}\n{mount}", lifecycle("poststop", false)),
        ),
    ]
    .join("\n");
    let allocs = rig.run_job("app.hcl", &job("app", "service", &body));
    let alloc = &allocs[0];
    let running = rig.wait_job("app", "main and poststart to run", |j| {
        let a = &j.allocs[0];
        task(a, "main").state == "running" && task(a, "after").state == "running"
    });
    let a = &running.allocs[0];
    let prep = task(a, "prep");
    assert_eq!(
        (prep.state.as_str(), prep.failed),
        ("dead", false),
        "{a:#?}"
    );
    assert_eq!(prep.restarts, 0);
    assert!(first(prep, "terminated") <= first(task(a, "main"), "started"));
    assert!(first(task(a, "main"), "started") <= first(task(a, "after"), "started"));
    assert_eq!(task(a, "cleanup").state, "pending", "poststop waits");
    let out = rig.backing.join("volumes/v1/out");
    super::wait_for_file(&out);
    assert_eq!(fs::read_to_string(&out).unwrap(), "hi\n", "nobody wrote");

    // Stopping: main and its sidecar stop, then the poststop task runs
    // with the volume still mounted, then the claim goes.
    rig.stop("app");
    let a = rig.alloc("app", alloc);
    assert_eq!(a.status, "complete", "{a:#?}");
    let cleanup = task(&a, "cleanup");
    assert_eq!((cleanup.state.as_str(), cleanup.failed), ("dead", false));
    assert!(first(task(&a, "main"), "terminated") <= first(cleanup, "started"));
    assert!(first(task(&a, "after"), "terminated") <= first(cleanup, "started"));
    assert_eq!(
        fs::read_to_string(shared_data(&rig, alloc).join("poststop-saw")).unwrap(),
        "hi\n"
    );
    assert_eq!(a.volumes[0].state, "released");
    rig.wait_no_mounts_left();
    rig.stop("plugin");
}

#[test]
fn a_failed_prestart_fails_the_alloc_with_its_reason_and_main_never_starts() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let body = [
        NO_RESTARTS.to_string(),
        sh_task("prep", "exit 7", &lifecycle("prestart", false)),
        sh_task("main", "touch /alloc/data/main-ran; exec sleep 600", ""),
    ]
    .join("\n");
    let allocs = rig.run_job("prep.hcl", &job("prep", "service", &body));
    let j = rig.wait_job("prep", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    let a = &j.allocs[0];
    assert!(
        a.message
            .starts_with("task \"prep\" failed: exited with status 7; restart policy exhausted"),
        "{a:#?}"
    );
    let main = task(a, "main");
    assert_eq!((main.state.as_str(), main.pid), ("dead", 0));
    assert!(
        !main.events.iter().any(|e| e.kind == "started"),
        "{main:#?}"
    );
    assert!(!shared_data(&rig, &allocs[0]).join("main-ran").exists());
    assert_eq!(j.status, "dead");
}

#[test]
fn a_sidecar_prestart_runs_alongside_the_main_task_and_stops_with_it() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let body = [
        NO_RESTARTS.to_string(),
        sh_task(
            "side",
            "echo up > /alloc/data/side; exec sleep 600",
            &lifecycle("prestart", true),
        ),
        // The main task sees its sidecar at work, then finishes.
        sh_task(
            "main",
            "while ! test -s /alloc/data/side; do sleep 0.05; done; sleep 2; echo done",
            "",
        ),
    ]
    .join("\n");
    let allocs = rig.run_job("side.hcl", &job("side", "batch", &body));
    let both = rig.wait_job("side", "the sidecar and main to run together", |j| {
        let a = &j.allocs[0];
        task(a, "side").state == "running" && task(a, "main").state == "running"
    });
    assert_ne!(task(&both.allocs[0], "side").pid, 0);
    let j = rig.wait_job("side", "the alloc to complete", |j| {
        j.allocs[0].status == "complete"
    });
    let a = &j.allocs[0];
    assert_eq!(rig.ok(&["alloc", "logs", &allocs[0], "main"]), "done\n");
    let side = task(a, "side");
    assert_eq!(
        (side.state.as_str(), side.failed, side.restarts),
        ("dead", false, 0)
    );
    assert!(side.events.iter().any(|e| e.kind == "killing"), "{side:#?}");
    assert!(
        super::alloc_processes(&allocs[0]).is_empty(),
        "no process of the alloc is left"
    );
}

#[test]
fn a_batch_job_that_exits_0_completes_and_is_not_restarted() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let body = sh_task("t", "echo run >> /alloc/data/runs", "");
    let allocs = rig.run_job("once.hcl", &job("once", "batch", &body));
    let j = rig.wait_job("once", "the alloc to complete", |j| {
        j.allocs[0].status == "complete"
    });
    let t = task(&j.allocs[0], "t");
    assert_eq!((t.state.as_str(), t.failed, t.restarts), ("dead", false, 0));
    assert!(t.events.iter().any(|e| e.kind == "completed"), "{t:#?}");
    assert_eq!(
        j.status, "dead",
        "a job whose allocs are all done is dead, as in Nomad"
    );
    let status = rig.ok(&["job", "status", "once"]);
    assert!(status.contains(": complete"), "{status}");
    // Nomad's summary: the group's one alloc is complete.
    let summary: Vec<Vec<&str>> = status
        .lines()
        .skip_while(|l| *l != "Summary")
        .skip(1)
        .take(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        summary,
        [
            vec!["Task", "Group", "Starting", "Running", "Failed", "Complete"],
            vec!["g", "0", "0", "0", "1"]
        ],
        "{status}"
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let runs = fs::read_to_string(shared_data(&rig, &allocs[0]).join("runs")).unwrap();
    assert_eq!(runs, "run\n");
}

#[test]
fn a_service_task_that_exits_0_is_restarted_per_its_policy() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let body = [
        "    restart {\n      attempts = 1\n      delay    = \"100ms\"\n      mode     = \"fail\"\n    }"
            .to_string(),
        sh_task("t", "echo run >> /alloc/data/runs", ""),
    ]
    .join("\n");
    let allocs = rig.run_job("svc.hcl", &job("svc", "service", &body));
    let j = rig.wait_job("svc", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    assert_eq!(task(&j.allocs[0], "t").restarts, 1);
    let runs = fs::read_to_string(shared_data(&rig, &allocs[0]).join("runs")).unwrap();
    assert_eq!(runs, "run\nrun\n");
}

#[test]
fn a_failing_batch_task_follows_its_restart_policy() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let body = [
        "    restart {\n      attempts = 2\n      delay    = \"100ms\"\n      mode     = \"fail\"\n    }"
            .to_string(),
        sh_task("t", "echo run >> /alloc/data/runs; exit 2", ""),
    ]
    .join("\n");
    let allocs = rig.run_job("flaky.hcl", &job("flaky", "batch", &body));
    let j = rig.wait_job("flaky", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    let t = task(&j.allocs[0], "t");
    assert_eq!((t.restarts, t.failed), (2, true));
    let runs = fs::read_to_string(shared_data(&rig, &allocs[0]).join("runs")).unwrap();
    assert_eq!(runs.lines().count(), 3);
}

#[test]
fn a_task_restart_block_overrides_the_groups() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let own = "      restart {\n        attempts = 2\n        delay    = \"100ms\"\n      }";
    let body = [
        NO_RESTARTS.to_string(),
        sh_task("t", "echo run >> /alloc/data/runs; exit 3", own),
    ]
    .join("\n");
    let allocs = rig.run_job("own.hcl", &job("own", "batch", &body));
    let j = rig.wait_job("own", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    // The group allows no restart; the task's block allows two.
    assert_eq!(task(&j.allocs[0], "t").restarts, 2);
    let runs = fs::read_to_string(shared_data(&rig, &allocs[0]).join("runs")).unwrap();
    assert_eq!(runs.lines().count(), 3);
}

#[test]
fn an_agent_restart_reruns_neither_a_completed_prestart_nor_a_completed_batch_task() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let body = [
        NO_RESTARTS.to_string(),
        sh_task(
            "prep",
            "echo prep >> /alloc/data/prep-runs",
            &lifecycle("prestart", false),
        ),
        sh_task("main", "exec sleep 600", ""),
    ]
    .join("\n");
    let svc = rig.run_job("svc.hcl", &job("svc", "service", &body));
    let once = rig.run_job(
        "once.hcl",
        &job(
            "once",
            "batch",
            &sh_task("t", "echo run >> /alloc/data/runs", ""),
        ),
    );
    let main_pid = rig.wait_job("svc", "main to run", |j| {
        task(&j.allocs[0], "main").state == "running"
    });
    let main_pid = task(&main_pid.allocs[0], "main").pid;
    rig.wait_job("once", "the batch alloc to complete", |j| {
        j.allocs[0].status == "complete"
    });

    rig.agent.sigkill();
    rig.agent.restart();
    let j = rig.wait_job("svc", "re-adoption", |j| {
        task(&j.allocs[0], "main")
            .events
            .iter()
            .any(|e| e.kind == "adopted")
    });
    let a = &j.allocs[0];
    assert_eq!(task(a, "main").pid, main_pid);
    assert_eq!(task(a, "prep").state, "dead");
    let once_status = rig.job("once");
    assert_eq!(once_status.allocs[0].status, "complete");
    assert_eq!(task(&once_status.allocs[0], "t").restarts, 0);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(
        fs::read_to_string(shared_data(&rig, &svc[0]).join("prep-runs")).unwrap(),
        "prep\n"
    );
    assert_eq!(
        fs::read_to_string(shared_data(&rig, &once[0]).join("runs")).unwrap(),
        "run\n"
    );
    rig.stop("svc");
}

#[test]
fn job_run_refuses_a_misspelled_hook_at_its_position() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let body = sh_task("prep", "true", &lifecycle("prestrat", false));
    let out = rig.run_job_output("typo.hcl", &job("typo", "batch", &body));
    assert_eq!(out.status.code(), Some(1), "{}", crate::harness::text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("typo.hcl:12:19: \"hook\" in lifecycle in task \"prep\": unknown lifecycle hook \"prestrat\""),
        "{err}"
    );
    assert!(rig.client().job_status("").unwrap().jobs.is_empty());
}

#[test]
fn an_alloc_whose_claim_fails_runs_no_task_poststop_included() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let volume = "    volume \"data\" {\n      type            = \"csi\"\n      source          = \"nope\"\n      access_mode     = \"single-node-writer\"\n      attachment_mode = \"file-system\"\n    }";
    let body = [
        NO_RESTARTS.to_string(),
        volume.to_string(),
        sh_task("main", "exec sleep 600", ""),
        sh_task(
            "cleanup",
            "touch /alloc/data/poststop-ran",
            &lifecycle("poststop", false),
        ),
    ]
    .join("\n");
    let allocs = rig.run_job("nope.hcl", &job("nope", "service", &body));
    let j = rig.wait_job("nope", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    let cleanup = task(&j.allocs[0], "cleanup");
    assert_eq!((cleanup.state.as_str(), cleanup.pid), ("dead", 0));
    assert!(
        !cleanup.events.iter().any(|e| e.kind == "started"),
        "{cleanup:#?}"
    );
    assert!(!shared_data(&rig, &allocs[0]).join("poststop-ran").exists());
    rig.stop("plugin");
}

#[test]
fn an_alloc_stopped_before_its_tasks_ran_runs_no_poststop() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let body = |version: &str| {
        [
            NO_RESTARTS.to_string(),
            // Slow to stop: its replacement waits for it.
            sh_task(
                "main",
                &format!("trap '' TERM; echo {version}; sleep 600"),
                "      kill_timeout = \"2s\"",
            ),
            sh_task(
                "cleanup",
                "touch /alloc/data/poststop-ran",
                &lifecycle("poststop", false),
            ),
        ]
        .join("\n")
    };
    let old = rig.run_job("r.hcl", &job("r", "service", &body("v1")));
    rig.wait_job("r", "v1 to run", |j| {
        task(&j.allocs[0], "main").state == "running"
    });
    let new = rig.run_job("r.hcl", &job("r", "service", &body("v2")));
    rig.wait_job("r", "v2 to wait for v1", |j| {
        j.allocs
            .iter()
            .any(|a| a.id == new[0] && a.message.contains("waiting for alloc"))
    });
    rig.ok(&["job", "stop", "r"]);
    let j = rig.wait_job("r", "both allocs to be done", |j| j.status == "dead");
    let cleanup_of = |id: &str| {
        let a = j.allocs.iter().find(|a| a.id == id).unwrap();
        task(a, "cleanup").clone()
    };
    assert!(
        cleanup_of(&old[0])
            .events
            .iter()
            .any(|e| e.kind == "started"),
        "v1 ran, so its poststop runs"
    );
    assert!(shared_data(&rig, &old[0]).join("poststop-ran").exists());
    assert!(
        !cleanup_of(&new[0])
            .events
            .iter()
            .any(|e| e.kind == "started"),
        "v2 never ran: {:#?}",
        cleanup_of(&new[0])
    );
    assert!(!shared_data(&rig, &new[0]).join("poststop-ran").exists());
}

/// A task of `driver` (with `config_extra` in its config) that counts its
/// runs in `/alloc/data/runs-<task>`, then waits for `/alloc/data/go` and
/// exits with `status`.
pub(super) fn gated_task(
    name: &str,
    driver: &str,
    config_extra: &str,
    status: u8,
    extra: &str,
) -> String {
    let script = format!(
        "d=$NOMAD_ALLOC_DIR/data; echo run >> $d/runs-$NOMAD_TASK_NAME; \
         while [ ! -e $d/go ]; do sleep 0.05; done; exit {status}"
    );
    format!(
        r#"
    task "{name}" {{
      driver = "{driver}"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
{config_extra}
      }}
{extra}
    }}"#
    )
}

/// Kills the agent, lets the gated tasks of `alloc` in `tasks` end while
/// it is away (waiting for each one's exit record), and starts it again.
pub(super) fn end_tasks_while_the_agent_is_down(rig: &mut Rig, alloc: &str, tasks: &[&str]) {
    // A status call is answered from memory, within the turn that took the
    // tasks' start reports and before that turn's snapshot is written: one
    // more call is taken in a later turn, so the pids are durable before
    // the agent is killed.
    rig.client().job_status("").unwrap();
    rig.agent.sigkill();
    fs::write(shared_data(rig, alloc).join("go"), "").unwrap();
    let alloc_dir = rig.agent.data_dir.join("alloc").join(alloc);
    let start = std::time::Instant::now();
    for t in tasks {
        let record = alloc_dir.join(format!("{t}.exit"));
        while !record.exists() {
            assert!(
                start.elapsed() < crate::harness::WAIT,
                "task {t} wrote no exit record at {}",
                record.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    rig.agent.restart();
}

#[test]
fn batch_tasks_that_exit_0_while_the_agent_is_killed_complete_and_run_once() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    // Every kind of process the agent tracks: exec in a PID namespace of
    // its own, exec in the host's, raw_exec.
    let body = [
        NO_RESTARTS.to_string(),
        gated_task("private", "exec", "", 0, ""),
        gated_task("host", "exec", "        pid_mode = \"host\"", 0, ""),
        gated_task("raw", "raw_exec", "", 0, ""),
    ]
    .join("\n");
    let allocs = rig.run_job("b.hcl", &job("b", "batch", &body));
    rig.wait_job("b", "the tasks to run", |j| {
        j.allocs[0].tasks.iter().all(|t| t.state == "running")
    });
    end_tasks_while_the_agent_is_down(&mut rig, &allocs[0], &["private", "host", "raw"]);
    let j = rig.wait_job("b", "the alloc to complete", |j| {
        j.allocs[0].status != "running"
    });
    let a = &j.allocs[0];
    assert_eq!(a.status, "complete", "{a:#?}");
    assert_eq!(j.status, "dead");
    for name in ["private", "host", "raw"] {
        let t = task(a, name);
        assert_eq!((t.state.as_str(), t.failed, t.restarts), ("dead", false, 0));
        let ended = t.events.iter().rev().find(|e| e.kind == "terminated");
        assert_eq!(
            ended.map(|e| e.message.as_str()),
            Some("exited with status 0"),
            "{t:#?}"
        );
        assert!(t.events.iter().any(|e| e.kind == "completed"), "{t:#?}");
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    for name in ["private", "host", "raw"] {
        let runs = shared_data(&rig, &allocs[0]).join(format!("runs-{name}"));
        assert_eq!(fs::read_to_string(runs).unwrap(), "run\n", "task {name}");
    }
}

#[test]
fn a_prestart_that_exits_0_while_the_agent_is_killed_is_not_rerun_and_main_starts() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let body = [
        NO_RESTARTS.to_string(),
        gated_task("prep", "exec", "", 0, &lifecycle("prestart", false)),
        sh_task("main", "touch /alloc/data/main-ran; exec sleep 600", ""),
    ]
    .join("\n");
    let allocs = rig.run_job("p.hcl", &job("p", "service", &body));
    rig.wait_job("p", "prep to run", |j| {
        task(&j.allocs[0], "prep").state == "running"
    });
    end_tasks_while_the_agent_is_down(&mut rig, &allocs[0], &["prep"]);
    let j = rig.wait_job("p", "main to run", |j| {
        task(&j.allocs[0], "main").state == "running"
    });
    let prep = task(&j.allocs[0], "prep");
    assert_eq!(
        (prep.state.as_str(), prep.failed, prep.restarts),
        ("dead", false, 0),
        "{prep:#?}"
    );
    super::wait_for_file(&shared_data(&rig, &allocs[0]).join("main-ran"));
    assert_eq!(
        fs::read_to_string(shared_data(&rig, &allocs[0]).join("runs-prep")).unwrap(),
        "run\n"
    );
    rig.stop("p");
}

#[test]
fn a_prestart_that_fails_while_the_agent_is_killed_follows_its_policy_with_its_status() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let policy = "      restart {\n        attempts = 1\n        delay    = \"100ms\"\n      }";
    let body = [
        NO_RESTARTS.to_string(),
        gated_task(
            "prep",
            "raw_exec",
            "",
            7,
            &format!("{}\n{policy}", lifecycle("prestart", false)),
        ),
        sh_task("main", "touch /alloc/data/main-ran; exec sleep 600", ""),
    ]
    .join("\n");
    let allocs = rig.run_job("f.hcl", &job("f", "service", &body));
    rig.wait_job("f", "prep to run", |j| {
        task(&j.allocs[0], "prep").state == "running"
    });
    end_tasks_while_the_agent_is_down(&mut rig, &allocs[0], &["prep"]);
    // Its one restart finds `go` and fails again: the policy is used up.
    let j = rig.wait_job("f", "the alloc to fail", |j| j.allocs[0].status == "failed");
    let a = &j.allocs[0];
    let prep = task(a, "prep");
    assert_eq!((prep.restarts, prep.failed), (1, true), "{prep:#?}");
    let ends: Vec<&str> = prep
        .events
        .iter()
        .filter(|e| e.kind == "terminated")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(ends, ["exited with status 7", "exited with status 7"]);
    assert!(
        a.message
            .starts_with("task \"prep\" failed: exited with status 7; restart policy exhausted"),
        "{a:#?}"
    );
    assert_eq!(
        fs::read_to_string(shared_data(&rig, &allocs[0]).join("runs-prep")).unwrap(),
        "run\nrun\n"
    );
    assert!(!shared_data(&rig, &allocs[0]).join("main-ran").exists());
}

/// The NUL-separated words of `/proc/<pid>/cmdline`.
fn cmdline(pid: u32) -> Vec<String> {
    fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap()
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

/// The agent starts a task through its start helper (a fresh exec of its
/// own binary), never a fork of itself: the process it tracks, the task's
/// waiter, is the helper, with the helper's command line rather than the
/// agent's and the agent as its parent; its child, the task, alone has
/// the task's environment.
#[test]
fn a_task_is_started_by_the_start_helper_not_a_fork_of_the_agent() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let body = "    task \"t\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"/bin/sleep\"\n        args    = [\"600\"]\n      }\n    }";
    let allocs = rig.run_job("helper.hcl", &job("helper", "service", body));
    let pid = rig.wait_running("helper", &allocs[0]);
    assert_eq!(
        cmdline(pid),
        ["csi-agent", "__start-task"],
        "the tracked process is not the start helper"
    );
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let ppid: u32 = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(ppid, rig.agent.pid(), "the agent is the helper's parent");
    let task = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let task: u32 = task.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(cmdline(task), ["/bin/sleep", "600"]);
    let wanted = format!("CSI_AGENT_ALLOC_ID={}", allocs[0]);
    let has_alloc = |pid: u32| {
        fs::read(format!("/proc/{pid}/environ"))
            .unwrap()
            .split(|&b| b == 0)
            .any(|e| e == wanted.as_bytes())
    };
    assert!(has_alloc(task), "the task has its environment");
    assert!(!has_alloc(pid), "the helper has none of it");
    rig.stop("helper");
}

/// The agent never forks itself to start a task: strace, attached to its
/// threads while tasks start, sees every clone they make share the
/// agent's memory (`CLONE_VM`: its threads, and the `posix_spawn` of the
/// start helper, `CLONE_VM|CLONE_VFORK`), none copy it.
#[test]
fn starting_tasks_never_forks_the_agent() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let agent = rig.agent.pid();
    let trace = rig.agent.dir.join("clones.trace");
    let mut strace = Command::new("strace")
        .args([
            "-f",
            "-e",
            "trace=clone,clone3,fork,vfork",
            "-e",
            "signal=none",
            "-o",
        ])
        .arg(&trace)
        .args(["-p", &agent.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace (make deps installs it)");
    let mut stderr = BufReader::new(strace.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("attached") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "strace ended before it attached"
        );
    }
    let body = "    count = 3\n    task \"t\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"/bin/sleep\"\n        args    = [\"600\"]\n      }\n    }";
    let allocs = rig.run_job("clones.hcl", &job("clones", "service", body));
    for alloc in &allocs {
        rig.wait_running("clones", alloc);
    }
    let threads: Vec<String> = fs::read_dir(format!("/proc/{agent}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // strace detaches on SIGINT.
    let strace_pid = strace.id() as libc::pid_t;
    // SAFETY: kill(2) with plain integers.
    assert_eq!(unsafe { libc::kill(strace_pid, libc::SIGINT) }, 0);
    strace.wait().unwrap();
    let trace = fs::read_to_string(&trace).unwrap();
    let calls: Vec<&str> = trace
        .lines()
        .filter(|l| {
            let mut words = l.splitn(2, ' ');
            let tid = words.next().unwrap_or("");
            // strace pads the tid to a width: one space or more.
            let call = words.next().unwrap_or("").trim_start();
            // Only the calls themselves: not their `<... resumed>` ends,
            // nor the signals (`--- SIGCHLD ...`) and exits (`+++`) strace
            // also prints for a traced thread.
            let is_call = ["clone(", "clone3(", "fork(", "vfork("]
                .iter()
                .any(|c| call.starts_with(c));
            threads.iter().any(|t| t == tid) && is_call
        })
        .collect();
    let copies: Vec<&&str> = calls.iter().filter(|c| !c.contains("CLONE_VM")).collect();
    assert!(copies.is_empty(), "the agent forked itself: {copies:#?}");
    let spawns = calls.iter().filter(|c| c.contains("CLONE_VFORK")).count();
    assert!(spawns >= 3, "no start helper spawned: {trace}");
    rig.stop("clones");
}
