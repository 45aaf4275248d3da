//! Keys of Nomad's job files that csi-agent once accepted and ignored and
//! now acts on: an exec or raw_exec task's `work_dir`; a docker task's
//! `pids_limit`, `cpu_hard_limit`, `cpuset_cpus`, `runtime` and `logging`
//! (against the private engine, [`Dockerd`]); a template's `once` and
//! `wait`.

use std::fs;

use super::containers::{job_text, rig, script_job, wait_done, BUSYBOX};
use super::root::{shell_job, wait_for_log};
use super::templates::{log_of, reloading, wait_for_log_end};
use super::Rig;
use crate::dockerd::{require_docker, Dockerd};
use crate::harness::text;
use crate::util::require_root;

/// `shell_job` with `config { work_dir = dir }`.
fn in_work_dir(name: &str, driver: &str, dir: &str, script: &str) -> String {
    shell_job(name, script, "", "")
        .replace(
            "args    =",
            &format!("work_dir = {dir:?}\n        args    ="),
        )
        .replace("driver = \"exec\"", &format!("driver = {driver:?}"))
}

#[test]
fn an_exec_task_starts_in_its_work_dir_inside_its_root() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = in_work_dir(
        "wd",
        "exec",
        "${NOMAD_ALLOC_DIR}/data",
        "pwd; echo here > f; echo ready; exec sleep 600",
    );
    let alloc = rig.run_job("wd.hcl", &hcl).remove(0);
    assert_eq!(wait_for_log(&rig, &alloc, "ready"), "/alloc/data\nready\n");
    let shared = rig
        .agent
        .data_dir
        .join("alloc")
        .join(&alloc)
        .join("alloc/data/f");
    assert_eq!(fs::read_to_string(shared).unwrap(), "here\n");
    // `alloc exec` starts where the task is, as Nomad's does.
    assert_eq!(rig.ok(&["alloc", "exec", &alloc, "pwd"]), "/alloc/data\n");
    rig.stop("wd");
}

#[test]
fn a_raw_exec_task_starts_in_its_work_dir_on_the_host() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let dir = rig.agent.dir.join("work");
    fs::create_dir(&dir).unwrap();
    let hcl = in_work_dir("rawwd", "raw_exec", &dir.display().to_string(), "pwd");
    let alloc = rig.run_job("rawwd.hcl", &hcl).remove(0);
    rig.wait_job("rawwd", "the task to finish", |j| {
        j.allocs[0].status == "complete"
    });
    assert_eq!(
        rig.ok(&["alloc", "logs", &alloc, "t"]),
        format!("{}\n", dir.display())
    );
}

#[test]
fn a_work_dir_that_is_missing_fails_the_start_and_a_relative_one_is_refused() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = in_work_dir("nowd", "exec", "/no/such/dir", "pwd");
    let alloc = rig.run_job("nowd.hcl", &hcl).remove(0);
    rig.wait_job("nowd", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    let err = rig.ok(&["alloc", "logs", "-stderr", &alloc, "t"]);
    assert!(
        err.contains("cannot enter the working directory /no/such/dir"),
        "{err}"
    );

    let hcl = in_work_dir("relwd", "raw_exec", "local", "pwd");
    let out = rig.run_job_output("relwd.hcl", &hcl);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("relwd.hcl:14:20: \"work_dir\" in config in task \"t\" must be an absolute path, found \"local\""),
        "{err}"
    );
}

/// The container's limits as its cgroup shows them, on either cgroup
/// version: `pids <max>`, `cpu <quota> <period>`, `cpus <list>`.
const LIMITS: &str = r#"if [ -f /sys/fs/cgroup/cpu.max ]; then
  echo pids $(cat /sys/fs/cgroup/pids.max); echo cpu $(cat /sys/fs/cgroup/cpu.max); echo cpus $(cat /sys/fs/cgroup/cpuset.cpus.effective)
else
  echo pids $(cat /sys/fs/cgroup/pids/pids.max); echo cpu $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us); echo cpus $(cat /sys/fs/cgroup/cpuset/cpuset.cpus)
fi"#;

#[test]
fn a_container_gets_its_pids_limit_cfs_quota_cpuset_runtime_and_log_driver() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = Rig::bare_with_config(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n}}\nclient {{\n  cpu_total_compute = 4000\n}}\n",
        dockerd.socket.display()
    ));
    let job = script_job(
        "limits",
        "batch",
        LIMITS,
        "      resources {\n        cpu = 1000\n      }\n",
    )
    .replace(
        "        command = \"sh\"\n",
        "        command = \"sh\"\n        pids_limit = 64\n        cpu_hard_limit = true\n        cpu_cfs_period = 50000\n        cpuset_cpus = \"0\"\n        runtime = \"runc\"\n        logging {\n          type = \"local\"\n          config {\n            max-size = \"1m\"\n          }\n        }\n",
    );
    let allocs = rig.run_job("limits.hcl", &job);
    let status = wait_done(&rig, "limits", "the task to finish");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    // Nomad's quota: the task's share of the node's MHz, times its cores,
    // of each period.
    let log = rig.agent.log();
    let cores: u64 = log
        .split("Node: 4000 MHz (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no node line in the agent log:\n{log}"));
    let quota = 50_000 * 1000 * cores / 4000;
    // The `local` driver's output, read back through the engine.
    let out = rig.ok(&["alloc", "logs", &allocs[0], "t"]);
    assert_eq!(
        out,
        format!("pids 64\ncpu {quota} 50000\ncpus 0\n"),
        "{out}"
    );
}

#[test]
fn a_runtime_the_engine_lacks_fails_the_task_and_a_log_driver_without_reads_says_so() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    let job = script_job("rt", "batch", "true", "").replace(
        "        command = \"sh\"\n",
        "        command = \"sh\"\n        runtime = \"no-such-runtime\"\n",
    );
    rig.run_job("rt.hcl", &job);
    let status = wait_done(&rig, "rt", "the task to fail");
    let events = job_text(&rig, "rt");
    assert_eq!(status.allocs[0].status, "failed", "{events}");
    assert!(
        events.contains("has no runtime \"no-such-runtime\" (it has ") && events.contains("runc"),
        "{events}"
    );

    let job = script_job("quiet", "batch", "echo unseen", "").replace(
        "        command = \"sh\"\n",
        "        command = \"sh\"\n        logging {\n          type = \"none\"\n        }\n",
    );
    let allocs = rig.run_job("quiet.hcl", &job);
    let status = wait_done(&rig, "quiet", "the task to finish");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    let events = job_text(&rig, "quiet");
    assert!(
        events.contains("logging driver \"none\": the engine cannot read the container's output back, so alloc logs shows none of it"),
        "{events}"
    );
    assert_eq!(rig.ok(&["alloc", "logs", &allocs[0], "t"]), "");
}

/// Waits until task "t" of `alloc` of job "reloading" has an event whose
/// message starts with `start`; how many it has.
#[track_caller]
fn wait_for_event(rig: &Rig, alloc: &str, start: &str) -> usize {
    let count = |j: &csi_agent::proto::agent::JobStatus| {
        j.allocs
            .iter()
            .filter(|a| a.id == alloc)
            .flat_map(|a| a.tasks[0].events.iter())
            .filter(|e| e.message.starts_with(start))
            .count()
    };
    count(&rig.wait_job("reloading", start, |j| count(j) > 0))
}

#[test]
fn a_template_rendered_once_is_not_rendered_again_while_its_task_runs() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let mode = "change_mode = \"signal\"\n        change_signal = \"SIGHUP\"\n        once = true";
    let alloc = rig.run_job("once.hcl", &reloading("one", mode)).remove(0);
    wait_for_log_end(&rig, &alloc, "start\none\n");
    rig.run_job("once.hcl", &reloading("two", mode));
    wait_for_event(
        &rig,
        &alloc,
        "1 template(s) with once = true kept as first rendered",
    );
    let conf = rig.task_dir(&alloc, "t").join("local/app.conf");
    assert_eq!(fs::read_to_string(conf).unwrap(), "one\n");
    assert_eq!(log_of(&rig, &alloc), "start\none\n");
}

#[test]
fn a_template_wait_renders_changes_in_a_row_once() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let mode = "change_mode = \"signal\"\n        change_signal = \"SIGHUP\"\n        wait {\n          min = \"2s\"\n          max = \"20s\"\n        }";
    let alloc = rig.run_job("wait.hcl", &reloading("one", mode)).remove(0);
    wait_for_log_end(&rig, &alloc, "start\none\n");
    rig.run_job("wait.hcl", &reloading("two", mode));
    rig.run_job("wait.hcl", &reloading("three", mode));
    // Held back: the file is still the first one.
    let conf = rig.task_dir(&alloc, "t").join("local/app.conf");
    assert_eq!(fs::read_to_string(&conf).unwrap(), "one\n");
    // Then one render of the last text, one signal.
    wait_for_log_end(&rig, &alloc, "start\none\nhup\nthree\n");
    assert_eq!(fs::read_to_string(&conf).unwrap(), "three\n");
    assert_eq!(wait_for_event(&rig, &alloc, "1 template(s) changed"), 1);
    assert_eq!(
        wait_for_event(&rig, &alloc, "templates changed; rendering in"),
        2
    );
}

#[test]
fn keys_a_job_relies_on_that_csi_agent_cannot_honour_are_refused_at_their_lines() {
    let dir = tempfile_dir();
    let path = dir.join("refused.hcl");
    fs::write(
        &path,
        r#"job "refused" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command        = "/bin/true"
        denied_envvars = ["SECRET_*"]
      }
      schedule {
        cron {
          start = "0 9 * * *"
        }
      }
      resources {
        device "nvidia/gpu" {}
      }
    }
  }
}
"#,
    )
    .unwrap();
    let out = std::process::Command::new(crate::util::bin())
        .args(["validate", &path.display().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "refused.hcl:7:9: \"denied_envvars\" in config in task \"t\" is not supported by csi-agent",
        "refused.hcl:9:7: \"schedule\" in task \"t\" is not supported by csi-agent",
        "refused.hcl:15:9: \"device\" in resources in task \"t\" is not supported by csi-agent",
    ] {
        assert!(err.contains(want), "{want}\n{err}");
    }
    fs::remove_dir_all(dir).unwrap();
}

/// A fresh directory of this test's own.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("csi-agent-keys-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}
