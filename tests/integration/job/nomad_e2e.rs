//! Nomad's own e2e job files (`e2e/isolation/`, `e2e/taskevents/`,
//! `e2e/lifecycle/` of hashicorp/nomad, copied unchanged into
//! `tests/fixtures/nomad/e2e/`), run with `job run` as they are, and held
//! to what Nomad's Go tests assert on them: the files a chroot holds, the
//! pid a task sees in its namespace, the order of task events, and the
//! files lifecycle tasks leave in the alloc dir. Only the files Nomad
//! published under the Mozilla Public License are copied; where the only
//! version of a job is under the Business Source License, a job of our
//! own does what it does and the same assertions hold it.
//!
//! csi-agent's event kinds are its own words for Nomad's (`received` for
//! "Received", `started` for "Started", `terminated` for "Terminated",
//! `failed` for "Driver Failure" and "Not Restarting", `killing` for
//! "Killing", `leader dead` for "Leader Task Dead", `sibling failed` for
//! "Sibling Task Failed"); it has no "Task Setup" event.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::proto::agent::{JobStatus, TaskStatus};

use super::lifecycle::task;
use super::Rig;
use crate::dockerd::{require_docker, Dockerd};
use crate::harness::text;
use crate::util::require_root;

/// Nomad's chroot_exec job is under BUSL-1.1 (see the fixtures' README):
/// the same check with a job of our own, a batch exec task printing the
/// dirs Nomad's test looks for, and its PATH.
const CHROOT_EXEC: &str = r#"job "chroot_exec" {
  type = "batch"
  group "print" {
    task "env" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "printf '%s\n' \"$NOMAD_ALLOC_DIR\" \"$NOMAD_TASK_DIR\" \"$NOMAD_SECRETS_DIR\" \"$PATH\""]
      }
    }
  }
}
"#;
const EXEC: &str = include_str!("../../fixtures/nomad/e2e/isolation/exec.nomad");
const EXEC_HOST: &str = include_str!("../../fixtures/nomad/e2e/isolation/exec_host.nomad");
const ECHO_PID: &str = include_str!("../../fixtures/nomad/e2e/isolation/echo_pid.nomad");
/// A raw_exec task saying its pid, as Nomad's raw_exec.hcl (BUSL-1.1) does
/// through a template.
const RAW_EXEC: &str = r#"job "raw_exec" {
  type = "batch"
  group "group" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "bash" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["local/say-pid.sh"]
      }
      template {
        destination = "local/say-pid.sh"
        data        = "echo my pid is $$\n"
      }
    }
  }
}
"#;
/// A raw_exec task reading its own OOM score adjustment, as Nomad's
/// oomadj.hcl (BUSL-1.1) does.
const OOMADJ: &str = r#"job "oomadj" {
  type = "batch"
  group "group" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "cat" {
      driver = "raw_exec"
      config {
        command = "/bin/cat"
        args    = ["/proc/self/oom_score_adj"]
      }
    }
  }
}
"#;
const EXEC_CORES: &str = include_str!("../../fixtures/nomad/e2e/isolation/exec_cores.nomad");
/// A job-level batch task that sleeps a second, as Nomad's
/// simple_batch.nomad (BUSL-1.1).
const SIMPLE_BATCH: &str = r#"job "simple_batch" {
  type = "batch"
  task "simple_batch" {
    driver = "raw_exec"
    config {
      command = "/bin/sleep"
      args    = ["1"]
    }
  }
}
"#;
const FAILED_BATCH: &str = include_str!("../../fixtures/nomad/e2e/taskevents/failed_batch.nomad");
/// A long task beside one that fails after a second, with no restarts, as
/// Nomad's failed_sibling.nomad (BUSL-1.1).
const FAILED_SIBLING: &str = r#"job "failed_sibling" {
  group "failed_sibling" {
    restart {
      attempts = 0
    }
    task "failed_sibling" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
    task "failure" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 1; exit 3"]
      }
    }
  }
}
"#;
const COMPLETED_LEADER: &str =
    include_str!("../../fixtures/nomad/e2e/taskevents/completed_leader.nomad");
const LIFECYCLE_BATCH: &str = include_str!("../../fixtures/nomad/e2e/lifecycle/batch.nomad");

/// Runs `hcl` (a fixture, unchanged) as `file`, waits until its job is
/// dead, and returns its one alloc's ID with the stdout of `task`.
#[track_caller]
fn run_to_end(rig: &Rig, file: &str, hcl: &str, job: &str, task: &str) -> (String, String) {
    let allocs = rig.run_job(file, hcl);
    assert_eq!(allocs.len(), 1, "{allocs:?}");
    rig.wait_job(job, "the job to finish", |j| j.status == "dead");
    let logs = rig.ok(&["alloc", "logs", &allocs[0], task]);
    (allocs[0].clone(), logs)
}

/// The pid in the line `my pid is N` that Nomad's pid jobs print.
#[track_caller]
fn pid_said(logs: &str) -> u32 {
    logs.lines()
        .find_map(|l| l.strip_prefix("my pid is "))
        .unwrap_or_else(|| panic!("no `my pid is` in {logs:?}"))
        .trim()
        .parse()
        .unwrap()
}

/// The kinds of a task's events, in order.
fn kinds(task: &TaskStatus) -> Vec<&str> {
    task.events.iter().map(|e| e.kind.as_str()).collect()
}

/// Whether `want` appears in `kinds` in this order (other kinds between).
fn in_order(kinds: &[&str], want: &[&str]) -> bool {
    let mut rest = kinds.iter();
    want.iter().all(|w| rest.any(|k| k == w))
}

// e2e/isolation/chroot_test.go, testExecUsesChroot: the task's view of
// its dirs is Nomad's chroot, and its PATH reaches `/bin`.
#[test]
fn nomads_chroot_exec_job_sees_alloc_local_and_secrets_at_the_root() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let (_, logs) = run_to_end(&rig, "chroot_exec.nomad", CHROOT_EXEC, "chroot_exec", "env");
    let lines: Vec<&str> = logs.lines().collect();
    for dir in ["/alloc", "/local", "/secrets"] {
        assert!(
            lines
                .iter()
                .any(|l| *l == dir || l.starts_with(&format!("{dir}/"))),
            "no line {dir} in {logs:?}"
        );
    }
    assert!(logs.contains("/bin"), "{logs:?}");
}

// e2e/isolation/pids_test.go, testExecNamespacePID (exec.nomad and the
// older echo_pid.nomad): an exec task is pid 1 of its own namespace.
#[test]
fn nomads_exec_pid_jobs_see_pid_1() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let (_, logs) = run_to_end(&rig, "exec.nomad", EXEC, "exec", "exec");
    assert_eq!(pid_said(&logs), 1, "{logs:?}");
    let (_, logs) = run_to_end(&rig, "echo_pid.nomad", ECHO_PID, "echo_pid", "echo_pid");
    assert_eq!(pid_said(&logs), 1, "{logs:?}");
}

// e2e/isolation/pids_test.go, testExecHostPID: `pid_mode = "host"` gives
// the host's pid.
#[test]
fn nomads_exec_host_job_sees_a_host_pid() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let (_, logs) = run_to_end(&rig, "exec_host.nomad", EXEC_HOST, "exec", "exec");
    assert_ne!(pid_said(&logs), 1, "{logs:?}");
}

// e2e/isolation/pids_test.go, testRawExecNoNamespacePID.
#[test]
fn nomads_raw_exec_job_sees_a_host_pid() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let (_, logs) = run_to_end(&rig, "raw_exec.hcl", RAW_EXEC, "raw_exec", "bash");
    assert_ne!(pid_said(&logs), 1, "{logs:?}");
}

// e2e/rawexec/rawexec_test.go, testOomAdj: a raw_exec task starts with
// an OOM score adjustment of 0, whatever the agent's (here 500, which
// raising needs no privilege for).
#[test]
fn nomads_oomadj_job_reads_an_oom_score_adjustment_of_0() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let agent_adj = format!("/proc/{}/oom_score_adj", rig.agent.pid());
    std::fs::write(&agent_adj, "500").unwrap();
    let (_, logs) = run_to_end(&rig, "oomadj.hcl", OOMADJ, "oomadj", "cat");
    assert_eq!(logs.trim(), "0", "{logs:?}");
}

// e2e/isolation/input/exec_cores.nomad writes `core`, a key Nomad's
// `resources` does not have (it has `cores`): Nomad's parser refuses it,
// and so does csi-agent, at its line.
#[test]
fn nomads_exec_cores_job_is_refused_at_its_core_key() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = rig.run_job_output("exec_cores.nomad", EXEC_CORES);
    assert!(!out.status.success(), "{}", text(&out));
    let err = text(&out);
    assert!(
        err.contains("exec_cores.nomad:36:9: unknown attribute \"core\" in resources"),
        "{err}"
    );
    assert!(err.contains("did you mean \"cores\"?"), "{err}");
}

// e2e/taskevents/taskevents.go, TestTaskEvents_SimpleBatch: a job-level
// task of a batch job runs, and its events say it was received, started,
// terminated, in that order, without failing.
#[test]
fn nomads_simple_batch_job_gives_received_started_terminated() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    run_to_end(
        &rig,
        "simple_batch.nomad",
        SIMPLE_BATCH,
        "simple_batch",
        "simple_batch",
    );
    let job = rig.job("simple_batch");
    let alloc = &job.allocs[0];
    assert_eq!(alloc.status, "complete", "{alloc:#?}");
    let t = task(alloc, "simple_batch");
    assert!(!t.failed, "{t:#?}");
    assert!(
        in_order(&kinds(t), &["received", "started", "terminated"]),
        "{t:#?}"
    );
}

// TestTaskEvents_FailedBatch: a command that does not exist fails the
// start ("Driver Failure"), and with no attempts left the task fails
// ("Not Restarting", which fails the task).
#[test]
fn nomads_failed_batch_job_fails_at_the_driver_and_does_not_restart() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    run_to_end(
        &rig,
        "failed_batch.nomad",
        FAILED_BATCH,
        "failed_batch",
        "failed_batch",
    );
    let job = rig.job("failed_batch");
    let alloc = &job.allocs[0];
    assert_eq!(alloc.status, "failed", "{alloc:#?}");
    let t = task(alloc, "failed_batch");
    assert!(t.failed, "{t:#?}");
    let events = kinds(t);
    assert!(
        in_order(&events, &["received", "failed", "failed"]),
        "{t:#?}"
    );
    assert!(!events.contains(&"started"), "{t:#?}");
    assert!(!events.contains(&"restarting"), "{t:#?}");
    let last = t.events.last().unwrap();
    assert!(last.message.contains("SomeInvalidCommand"), "{t:#?}");
    assert!(last.message.contains("restart policy exhausted"), "{t:#?}");
}

// TestTaskEvents_FailedSibling: the sibling's failure kills the task,
// which does not fail itself; the alloc does.
#[test]
fn nomads_failed_sibling_job_kills_the_sibling_without_failing_it() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let allocs = rig.run_job("failed_sibling.nomad", FAILED_SIBLING);
    let job = rig.wait_job("failed_sibling", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    assert_eq!(job.allocs[0].id, allocs[0]);
    let alloc = &job.allocs[0];
    let t = task(alloc, "failed_sibling");
    assert!(!t.failed, "{t:#?}");
    assert!(task(alloc, "failure").failed, "{alloc:#?}");
    assert!(
        in_order(
            &kinds(t),
            &[
                "received",
                "started",
                "sibling failed",
                "killing",
                "terminated"
            ]
        ),
        "{t:#?}"
    );
}

// TestTaskEvents_CompletedLeader: when the `leader` task completes, the
// other task is killed, and nothing fails.
#[test]
fn nomads_completed_leader_job_kills_the_others_when_the_leader_is_done() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    rig.run_job("completed_leader.nomad", COMPLETED_LEADER);
    let job = rig.wait_job("completed_leader", "the job to finish", |j| {
        j.status == "dead"
    });
    let alloc = &job.allocs[0];
    assert_eq!(alloc.status, "complete", "{alloc:#?}");
    let t = task(alloc, "completed_leader");
    assert!(!t.failed, "{t:#?}");
    assert!(
        in_order(
            &kinds(t),
            &[
                "received",
                "started",
                "leader dead",
                "killing",
                "terminated"
            ]
        ),
        "{t:#?}"
    );
    assert!(!kinds(t).contains(&"restarting"), "{t:#?}");
}

/// An agent that runs docker tasks on a private engine holding the
/// `busybox:1` image Nomad's lifecycle jobs use (built offline).
fn docker_rig() -> (Dockerd, Rig) {
    let dockerd = Dockerd::start();
    dockerd.busybox_image("busybox:1");
    let rig = Rig::bare_with_config(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n}}\n",
        dockerd.socket.display()
    ));
    (dockerd, rig)
}

/// Nomad's lifecycle scripts sleep up to 17 s on purpose: a bound for
/// them, not for what they measure.
const LIFECYCLE_WAIT: Duration = Duration::from_secs(120);

/// Like [`Rig::wait_job`], within [`LIFECYCLE_WAIT`].
#[track_caller]
fn wait_long(rig: &Rig, name: &str, what: &str, check: impl Fn(&JobStatus) -> bool) -> JobStatus {
    let start = Instant::now();
    loop {
        let job = rig.job(name);
        if check(&job) {
            return job;
        }
        if start.elapsed() > LIFECYCLE_WAIT {
            panic!("job {name}: {what} did not happen within {LIFECYCLE_WAIT:?}: {job:#?}");
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Which of `names` are in the alloc's shared dir (`/alloc` in its tasks).
fn alloc_files(rig: &Rig, alloc: &str, names: &[&str]) -> Vec<String> {
    let dir = rig.agent.data_dir.join("alloc").join(alloc).join("alloc");
    names
        .iter()
        .filter(|n| Path::new(&dir.join(n)).exists())
        .map(|n| n.to_string())
        .collect()
}

// e2e/lifecycle/lifecycle.go, TestBatchJob: the tasks check each other's
// marker files (and exit non-zero when the order is wrong); the alloc
// completes with the `-ran` files and without the `-running` ones.
#[test]
fn nomads_batch_lifecycle_job_runs_its_hooks_in_order() {
    if !require_docker() {
        return;
    }
    let (_dockerd, rig) = docker_rig();
    let allocs = rig.run_job("batch.nomad", LIFECYCLE_BATCH);
    assert_eq!(allocs.len(), 1, "{allocs:?}");
    let job = wait_long(&rig, "batch-lifecycle", "the job to finish", |j| {
        j.status == "dead"
    });
    assert_eq!(job.allocs[0].status, "complete", "{job:#?}");
    let all = [
        "init-ran",
        "main-ran",
        "poststart-ran",
        "init-running",
        "main-running",
        "poststart-running",
    ];
    assert_eq!(
        alloc_files(&rig, &allocs[0], &all),
        ["init-ran", "main-ran", "poststart-ran"],
        "{job:#?}"
    );
}
