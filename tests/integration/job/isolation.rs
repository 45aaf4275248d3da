//! Isolation and limits of `exec` tasks, as Nomad's exec driver gives
//! them: a control group per task with its `resources` (memory, CPU
//! shares, cores), OOM kills told as such.

use std::fs;
use std::path::PathBuf;

use super::root::shell_job;
use super::Rig;
use crate::util::require_root;

/// The v1 dir of a task's group for `controller` on this host, when it is
/// a v1 host (None on a v2 one, which these tests then skip).
fn v1_group(controller: &str, alloc: &str, task: &str) -> Option<PathBuf> {
    let root = PathBuf::from("/sys/fs/cgroup").join(controller);
    fs::metadata(root.join("cgroup.procs")).ok()?;
    Some(root.join("csi-agent").join(format!("{alloc}.{task}")))
}

#[test]
fn a_task_over_its_memory_is_oom_killed_and_follows_its_restart_policy() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = shell_job(
        "hog",
        "x=a; while :; do x=$x$x; done",
        "",
        "resources {\n        memory = 16\n      }",
    )
    .replace("attempts = 0", "attempts = 1\n      delay    = \"100ms\"");
    rig.run_job("hog.hcl", &hcl);
    let job = rig.wait_job("hog", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    let task = &job.allocs[0].tasks[0];
    assert_eq!(task.restarts, 1, "{task:#?}");
    let oom: Vec<&str> = task
        .events
        .iter()
        .filter(|e| e.kind == "terminated")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(oom.len(), 2, "{task:#?}");
    for message in oom {
        assert!(message.starts_with("OOM Killed"), "{message}");
    }
    assert!(job.allocs[0].message.contains("OOM Killed"), "{job:#?}");
}

#[test]
fn a_task_s_group_holds_its_limits_while_it_runs_and_goes_with_it() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = shell_job(
        "limited",
        "echo ready; exec sleep 600",
        "",
        "resources {\n        cpu        = 500\n        memory     = 32\n        memory_max = 64\n        cores      = 1\n      }",
    );
    let allocs = rig.run_job("limited.hcl", &hcl);
    let alloc = &allocs[0];
    let pid = rig.wait_running("limited", alloc);
    let Some(memory) = v1_group("memory", alloc, "t") else {
        return;
    };
    let cpu = v1_group("cpu", alloc, "t").unwrap();
    let cpuset = v1_group("cpuset", alloc, "t").unwrap();
    let read = |p: PathBuf| fs::read_to_string(&p).unwrap().trim().to_string();
    assert_eq!(
        read(memory.join("memory.limit_in_bytes")),
        (64u64 << 20).to_string()
    );
    assert_eq!(
        read(memory.join("memory.soft_limit_in_bytes")),
        (32u64 << 20).to_string()
    );
    assert_eq!(read(cpu.join("cpu.shares")), "500");
    assert_eq!(read(cpuset.join("cpuset.cpus")).split(',').count(), 1);
    for dir in [&memory, &cpu, &cpuset] {
        let procs = read(dir.join("cgroup.procs"));
        assert!(
            procs.lines().any(|l| l == pid.to_string()),
            "pid {pid} in {}: {procs}",
            dir.display()
        );
    }
    rig.stop("limited");
    for dir in [&memory, &cpu, &cpuset] {
        assert!(!dir.exists(), "{} is removed", dir.display());
    }
}
