//! Poststop tasks in the edge cases Nomad's alloc runner defines: an
//! agent killed while one runs or after it ran, a prestart that failed
//! for good, a `job stop` while prestart tasks run, and a poststop task
//! that fails. In each, the claims are released only once the last
//! poststop task is dead.

use std::fs;
use std::thread;
use std::time::Duration;

use super::lifecycle::{
    end_tasks_while_the_agent_is_down, first, gated_task, job, lifecycle, sh_task, shared_data,
    task, NO_RESTARTS,
};
use super::Rig;
use crate::util::require_root;

const VOLUME: &str = "    volume \"data\" {\n      type            = \"csi\"\n      source          = \"v1\"\n      access_mode     = \"single-node-writer\"\n      attachment_mode = \"file-system\"\n    }";
const MOUNT: &str =
    "      volume_mount {\n        volume      = \"data\"\n        destination = \"/data\"\n      }";

/// Whether a volume holds a claim of `alloc`.
fn claimed(rig: &Rig, alloc: &str) -> bool {
    rig.client()
        .volume_status("", false)
        .unwrap()
        .volumes
        .iter()
        .any(|v| v.claims.iter().any(|c| c.alloc_id == alloc))
}

/// A poststop task that mounts the volume, counts its runs and waits for
/// `/alloc/data/go`.
fn gated_poststop() -> String {
    gated_task(
        "cleanup",
        "exec",
        "",
        0,
        &format!("{}\n{MOUNT}", lifecycle("poststop", false)),
    )
}

/// A group of a prestart task `prep` running `script`, a main task that
/// marks that it ran, and the gated poststop task, all on the volume.
fn prep_main_poststop(script: &str) -> String {
    [
        NO_RESTARTS.to_string(),
        VOLUME.to_string(),
        sh_task("prep", script, &lifecycle("prestart", false)),
        sh_task("main", "touch /alloc/data/main-ran; exec sleep 600", MOUNT),
        gated_poststop(),
    ]
    .join("\n")
}

/// Waits until the alloc's poststop task runs, and checks that the
/// volume is still claimed meanwhile.
#[track_caller]
fn wait_poststop_running(rig: &Rig, job_name: &str, alloc: &str) {
    rig.wait_job(job_name, "the poststop task to run", |j| {
        task(&j.allocs[0], "cleanup").state == "running"
    });
    assert!(claimed(rig, alloc), "released while the poststop task runs");
}

/// Lets the gated poststop task end, then waits for the alloc to be done
/// and its claims released.
fn release_poststop(rig: &Rig, job_name: &str, alloc: &str) {
    fs::write(shared_data(rig, alloc).join("go"), "").unwrap();
    rig.wait_job(job_name, "the alloc to be done", |j| j.status == "dead");
    rig.wait_released(alloc);
}

fn runs(rig: &Rig, alloc: &str, task_name: &str) -> String {
    fs::read_to_string(shared_data(rig, alloc).join(format!("runs-{task_name}")))
        .unwrap_or_default()
}

#[test]
fn a_poststop_task_is_adopted_across_agent_kills_and_never_runs_twice() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    let body = [
        NO_RESTARTS.to_string(),
        VOLUME.to_string(),
        sh_task("main", "exec sleep 600", MOUNT),
        gated_poststop(),
    ]
    .join("\n");
    let allocs = rig.run_job("app.hcl", &job("app", "service", &body));
    let alloc = &allocs[0];
    rig.wait_job("app", "main to run", |j| {
        task(&j.allocs[0], "main").state == "running"
    });
    rig.ok(&["job", "stop", "app"]);
    wait_poststop_running(&rig, "app", alloc);
    let pid = task(&rig.alloc("app", alloc), "cleanup").pid;

    // Killed while it runs: adopted, not started again, the claim held.
    rig.agent.sigkill();
    rig.agent.restart();
    let j = rig.wait_job("app", "the poststop task's adoption", |j| {
        task(&j.allocs[0], "cleanup")
            .events
            .iter()
            .any(|e| e.kind == "adopted")
    });
    assert_eq!(task(&j.allocs[0], "cleanup").pid, pid);
    assert!(
        claimed(&rig, alloc),
        "released while the poststop task runs"
    );

    // Killed again, and it ends meanwhile: its exit 0 completes it.
    end_tasks_while_the_agent_is_down(&mut rig, alloc, &["cleanup"]);
    rig.wait_job("app", "the alloc to be done", |j| j.status == "dead");
    rig.wait_released(alloc);
    let a = rig.alloc("app", alloc);
    assert_eq!(a.status, "complete", "{a:#?}");
    let cleanup = task(&a, "cleanup");
    assert_eq!(
        (cleanup.state.as_str(), cleanup.failed, cleanup.restarts),
        ("dead", false, 0)
    );

    // Killed after it completed: not run again.
    rig.agent.sigkill();
    rig.agent.restart();
    thread::sleep(Duration::from_millis(500));
    assert_eq!(rig.alloc("app", alloc).status, "complete");
    assert_eq!(runs(&rig, alloc, "cleanup"), "run\n");
    rig.wait_no_mounts_left();
    rig.stop("plugin");
}

#[test]
fn a_prestart_failed_for_good_still_runs_the_poststop_tasks_as_nomad_does() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let body = prep_main_poststop("exit 7");
    let allocs = rig.run_job("p.hcl", &job("p", "service", &body));
    let alloc = &allocs[0];
    wait_poststop_running(&rig, "p", alloc);
    release_poststop(&rig, "p", alloc);
    let a = rig.alloc("p", alloc);
    assert_eq!(a.status, "failed", "{a:#?}");
    assert!(
        a.message
            .starts_with("task \"prep\" failed: exited with status 7; restart policy exhausted"),
        "{a:#?}"
    );
    let cleanup = task(&a, "cleanup");
    assert_eq!((cleanup.state.as_str(), cleanup.failed), ("dead", false));
    assert_eq!(runs(&rig, alloc, "cleanup"), "run\n");
    assert!(!shared_data(&rig, alloc).join("main-ran").exists());
    rig.wait_no_mounts_left();
    rig.stop("plugin");
}

#[test]
fn job_stop_while_a_prestart_runs_kills_it_and_then_runs_the_poststop_tasks() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let body = prep_main_poststop("exec sleep 600");
    let allocs = rig.run_job("s.hcl", &job("s", "service", &body));
    let alloc = &allocs[0];
    rig.wait_job("s", "prep to run", |j| {
        task(&j.allocs[0], "prep").state == "running"
    });
    rig.ok(&["job", "stop", "s"]);
    wait_poststop_running(&rig, "s", alloc);
    release_poststop(&rig, "s", alloc);
    let a = rig.alloc("s", alloc);
    assert_eq!(a.status, "complete", "{a:#?}");
    let prep = task(&a, "prep");
    assert!(first(prep, "killing") <= first(task(&a, "cleanup"), "started"));
    let main = task(&a, "main");
    assert_eq!((main.state.as_str(), main.pid), ("dead", 0));
    assert!(
        !main.events.iter().any(|e| e.kind == "started"),
        "{main:#?}"
    );
    assert!(!shared_data(&rig, alloc).join("main-ran").exists());
    assert_eq!(runs(&rig, alloc, "cleanup"), "run\n");
    rig.wait_no_mounts_left();
    rig.stop("plugin");
}

#[test]
fn a_failing_poststop_task_follows_its_restart_policy_and_fails_the_stopped_alloc() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let policy = "      restart {\n        attempts = 1\n        delay    = \"100ms\"\n      }";
    let body = [
        NO_RESTARTS.to_string(),
        sh_task("main", "exec sleep 600", ""),
        sh_task(
            "cleanup",
            "echo run >> /alloc/data/runs-cleanup; exit 3",
            &format!("{}\n{policy}", lifecycle("poststop", false)),
        ),
    ]
    .join("\n");
    let allocs = rig.run_job("f.hcl", &job("f", "service", &body));
    let alloc = &allocs[0];
    rig.wait_job("f", "main to run", |j| {
        task(&j.allocs[0], "main").state == "running"
    });
    rig.ok(&["job", "stop", "f"]);
    let j = rig.wait_job("f", "the alloc to be done", |j| j.status == "dead");
    let a = &j.allocs[0];
    assert_eq!(a.status, "failed", "{a:#?}");
    let cleanup = task(a, "cleanup");
    assert_eq!(
        (cleanup.restarts, cleanup.failed),
        (1, true),
        "{cleanup:#?}"
    );
    // A stopped alloc's message names the failed task; its event says why.
    assert_eq!(a.message, "task \"cleanup\" failed", "{a:#?}");
    let failed = cleanup.events.iter().rev().find(|e| e.kind == "failed");
    assert!(
        failed.is_some_and(|e| e
            .message
            .starts_with("exited with status 3; restart policy exhausted")),
        "{cleanup:#?}"
    );
    assert_eq!(runs(&rig, alloc, "cleanup"), "run\nrun\n");
}
