//! A big job: its tasks start on the starter's threads, off the main
//! loop, so status calls answer while it starts; a stop that comes while
//! starts are under way leaves no process behind; and an agent killed in
//! the middle of a big start, once restarted, runs each task exactly once.

use std::collections::BTreeMap;
use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::proto::agent::JobStatus;

use super::{sleepers, task_processes_under, Rig};
use crate::util::require_root;

/// How long a big job may take to start or stop on a slow machine.
const BIG_WAIT: Duration = Duration::from_secs(180);

/// An agent that takes jobs of up to 1,000 allocs.
fn rig() -> Rig {
    Rig::bare_with_config("client {\n  max_allocs_per_job = 1000\n}\n")
}

/// How many of the job's allocs have their task in `state`.
fn tasks_in(job: &JobStatus, state: &str) -> usize {
    job.allocs
        .iter()
        .filter(|a| a.tasks.iter().any(|t| t.state == state))
        .count()
}

/// The rig's task processes, counted by the alloc in their environment.
fn processes_by_alloc(rig: &Rig) -> BTreeMap<String, usize> {
    let mut by_alloc = BTreeMap::new();
    for pid in task_processes_under(&rig.agent.dir.path) {
        let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let alloc = environ
            .split(|b| *b == 0)
            .find_map(|e| e.strip_prefix(b"CSI_AGENT_ALLOC_ID="))
            .map(|a| String::from_utf8_lossy(a).into_owned());
        if let Some(alloc) = alloc {
            *by_alloc.entry(alloc).or_insert(0) += 1;
        }
    }
    by_alloc
}

/// Waits until the rig has no task process left.
#[track_caller]
fn wait_no_process(rig: &Rig) {
    let start = Instant::now();
    loop {
        let left = task_processes_under(&rig.agent.dir.path);
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < BIG_WAIT,
            "{} task processes are left: {left:?}",
            left.len()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until every alloc of `job` runs; its status then.
#[track_caller]
fn wait_all_running(rig: &Rig, job: &str, count: usize) -> JobStatus {
    let start = Instant::now();
    loop {
        let status = rig.job(job);
        if tasks_in(&status, "running") == count {
            return status;
        }
        assert!(
            start.elapsed() < BIG_WAIT,
            "job {job}: {} of {count} tasks run",
            tasks_in(&status, "running")
        );
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn status_calls_answer_while_a_big_job_starts_and_every_task_stops_with_it() {
    if !require_root() {
        return;
    }
    let rig = rig();
    let count = 300;
    let allocs = rig.run_job("big.hcl", &sleepers("big", count as u32, 1, 16));
    assert_eq!(allocs.len(), count);
    // The loop answers while the starts go on: some answer sees the job
    // part started (a loop that started every task in its turn would
    // answer only once all run).
    let mut seen_midway = false;
    let start = Instant::now();
    loop {
        rig.ok(&["plugin", "status"]);
        let status = rig.job("big");
        let running = tasks_in(&status, "running");
        seen_midway |= running > 0 && running < count;
        if running == count {
            break;
        }
        assert!(start.elapsed() < BIG_WAIT, "{running} of {count} tasks run");
    }
    assert!(
        seen_midway,
        "no status call answered while the tasks started"
    );
    let by_alloc = processes_by_alloc(&rig);
    assert_eq!(by_alloc.len(), count, "{by_alloc:?}");
    assert!(by_alloc.values().all(|n| *n == 1), "{by_alloc:?}");

    rig.ok(&["job", "stop", "big"]);
    let start = Instant::now();
    while rig.job("big").status != "dead" {
        rig.ok(&["plugin", "status"]);
        assert!(start.elapsed() < BIG_WAIT, "the job did not stop");
    }
    wait_no_process(&rig);
}

#[test]
fn a_job_stopped_while_its_tasks_start_leaves_no_process() {
    if !require_root() {
        return;
    }
    let rig = rig();
    let count = 200;
    rig.run_job("big.hcl", &sleepers("big", count as u32, 1, 16));
    // Stopped as soon as some tasks are on their way.
    rig.wait_job("big", "a task to start", |j| {
        tasks_in(j, "starting") + tasks_in(j, "running") > 0
    });
    rig.ok(&["job", "stop", "big"]);
    let start = Instant::now();
    let status = loop {
        let status = rig.job("big");
        if status.status == "dead" {
            break status;
        }
        assert!(start.elapsed() < BIG_WAIT, "the job did not stop");
        thread::sleep(Duration::from_millis(100));
    };
    assert!(
        tasks_in(&status, "running") + tasks_in(&status, "starting") == 0,
        "{status:#?}"
    );
    wait_no_process(&rig);
    // And none comes later from a start that was under way.
    thread::sleep(Duration::from_secs(1));
    assert_eq!(task_processes_under(&rig.agent.dir.path), Vec::<u32>::new());
}

#[test]
fn an_agent_killed_during_a_big_start_runs_each_task_once_after_its_restart() {
    if !require_root() {
        return;
    }
    let mut rig = rig();
    let count = 300;
    let allocs = rig.run_job("big.hcl", &sleepers("big", count as u32, 1, 16));
    rig.wait_job("big", "some tasks to run", |j| tasks_in(j, "running") >= 20);
    rig.agent.sigkill();
    rig.agent.restart();
    let status = wait_all_running(&rig, "big", count);
    // Every task runs once: one process per alloc, the one the agent
    // tracks.
    let by_alloc = processes_by_alloc(&rig);
    for alloc in &allocs {
        assert_eq!(by_alloc.get(alloc), Some(&1), "alloc {alloc}: {by_alloc:?}");
    }
    assert_eq!(by_alloc.len(), count, "{by_alloc:?}");
    let pids: std::collections::BTreeSet<u32> =
        status.allocs.iter().map(|a| a.tasks[0].pid).collect();
    assert_eq!(pids.len(), count);
    rig.ok(&["job", "stop", "big"]);
    let start = Instant::now();
    while rig.job("big").status != "dead" {
        assert!(start.elapsed() < BIG_WAIT, "the job did not stop");
        thread::sleep(Duration::from_millis(100));
    }
    wait_no_process(&rig);
}
