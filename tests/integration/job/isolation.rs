//! Isolation and limits of `exec` tasks, as Nomad's exec driver gives
//! them: a control group per task with its `resources` (memory, CPU
//! shares, cores), OOM kills told as such.

use std::fs;
use std::path::PathBuf;

use super::root::shell_job;
use super::Rig;
use crate::harness::WAIT;
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

/// The namespace `kind` of process `pid`, as `ipc:[4026531839]`.
fn namespace(pid: &str, kind: &str) -> String {
    fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .unwrap()
        .display()
        .to_string()
}

/// The task's output once it says `ready`, and the host pid of the task
/// (the child of the tracked pid in a PID namespace of its own).
fn run_ns_task(rig: &Rig, name: &str, config: &str) -> (String, String) {
    let script =
        "echo pid=$$; echo procs=$(ls -d /proc/[0-9]* | wc -l); echo ready; exec sleep 600";
    let hcl = shell_job(name, script, "", "kill_timeout = \"1s\"")
        .replace("args    = [", &format!("{config}\n        args    = ["));
    let allocs = rig.run_job(&format!("{name}.hcl"), &hcl);
    let pid = rig.wait_running(name, &allocs[0]);
    let log = super::root::wait_for_log(rig, &allocs[0], "ready");
    let task = super::task_process(pid).to_string();
    (log, task)
}

#[test]
fn an_exec_task_is_pid_1_of_its_own_pid_and_ipc_namespaces() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let (log, task) = run_ns_task(&rig, "private", "");
    assert!(log.starts_with("pid=1\n"), "{log}");
    let procs: usize = log
        .lines()
        .find_map(|l| l.strip_prefix("procs="))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // sh, the command substitution's shell, ls and wc at most.
    assert!(procs <= 4, "{log}");
    let me = std::process::id().to_string();
    assert_ne!(namespace(&task, "pid"), namespace(&me, "pid"));
    assert_ne!(namespace(&task, "ipc"), namespace(&me, "ipc"));
    // The task handles no SIGTERM: as PID 1 it ignores it, and its
    // kill_timeout's SIGKILL ends it.
    rig.stop("private");
    // Gone (a zombie a moment, until the host's init reaps it).
    let start = std::time::Instant::now();
    let gone = || {
        fs::read_to_string(format!("/proc/{task}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    };
    while !gone() {
        assert!(start.elapsed() < WAIT, "task {task} outlived its job");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn pid_mode_and_ipc_mode_host_keep_the_host_s_namespaces() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let config = "pid_mode = \"host\"\n        ipc_mode = \"host\"";
    let (log, task) = run_ns_task(&rig, "shared", config);
    assert!(!log.starts_with("pid=1\n"), "{log}");
    let me = std::process::id().to_string();
    assert_eq!(namespace(&task, "pid"), namespace(&me, "pid"));
    assert_eq!(namespace(&task, "ipc"), namespace(&me, "ipc"));
    rig.stop("shared");
}

/// What an exec task as root sees of its capabilities, with `config`
/// added to its config block.
fn caps_of(rig: &Rig, name: &str, config: &str) -> String {
    let script = "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; echo ready";
    let hcl = shell_job(name, script, "", "")
        .replace("args    = [", &format!("{config}\n        args    = ["));
    let allocs = rig.run_job(&format!("{name}.hcl"), &hcl);
    super::root::wait_for_log(rig, &allocs[0], "ready")
}

#[test]
fn an_exec_task_has_nomads_capabilities_and_no_new_privileges() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare_with_config("plugin \"exec\" {\n  config {\n    allow_caps = [\"chown\", \"kill\", \"CAP_SYS_ADMIN\"]\n  }\n}\n");
    // Nomad's defaults within allow_caps: CHOWN and KILL.
    assert_eq!(
        caps_of(&rig, "plain", ""),
        "CapEff:\t0000000000000021\nCapBnd:\t0000000000000021\nNoNewPrivs:\t1\nready\n"
    );
    assert_eq!(
        caps_of(&rig, "none", "cap_drop = [\"all\"]"),
        "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\nready\n"
    );
    assert_eq!(
        caps_of(
            &rig,
            "admin",
            "cap_add = [\"sys_admin\"]\n        cap_drop = [\"kill\"]"
        ),
        "CapEff:\t0000000000200001\nCapBnd:\t0000000000200001\nNoNewPrivs:\t1\nready\n"
    );
    let hcl = shell_job("raw", "true", "", "").replace(
        "args    = [",
        "cap_add = [\"NET_ADMIN\"]\n        args    = [",
    );
    let out = rig.run_job_output("raw.hcl", &hcl);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("task \"t\"")
            && err.contains("cap_add \"NET_ADMIN\" is not allowed by the agent's allow_caps"),
        "{err}"
    );
}

#[test]
fn by_default_an_exec_task_has_nomads_default_set() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    assert_eq!(
        caps_of(&rig, "plain", ""),
        "CapEff:\t00000000a80405fb\nCapBnd:\t00000000a80405fb\nNoNewPrivs:\t1\nready\n"
    );
}

#[test]
fn an_adopted_task_keeps_its_group_across_an_agent_restart() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let script =
        "echo ready; while [ ! -e /alloc/go ]; do sleep 0.1; done; x=a; while :; do x=$x$x; done";
    let hcl = shell_job(
        "later",
        script,
        "",
        "resources {\n        memory = 16\n      }",
    );
    let allocs = rig.run_job("later.hcl", &hcl);
    let alloc = &allocs[0];
    let pid = rig.wait_running("later", alloc);
    super::root::wait_for_log(&rig, alloc, "ready");

    rig.agent.sigkill();
    rig.agent.restart();
    let job = rig.wait_job("later", "re-adoption", |j| {
        j.allocs[0].tasks[0]
            .events
            .iter()
            .any(|e| e.kind == "adopted")
    });
    assert_eq!(job.allocs[0].tasks[0].pid, pid);
    if let Some(memory) = v1_group("memory", alloc, "t") {
        let procs = fs::read_to_string(memory.join("cgroup.procs")).unwrap();
        assert!(procs.lines().any(|l| l == pid.to_string()), "{procs}");
    }

    // Now it grows: the adopted task's end is told as an OOM kill.
    fs::write(
        rig.agent
            .data_dir
            .join("alloc")
            .join(alloc)
            .join("alloc/go"),
        "",
    )
    .unwrap();
    let job = rig.wait_job("later", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    let task = &job.allocs[0].tasks[0];
    assert!(
        task.events
            .iter()
            .any(|e| e.kind == "terminated" && e.message.starts_with("OOM Killed")),
        "{task:#?}"
    );
    if let Some(memory) = v1_group("memory", alloc, "t") {
        assert!(!memory.exists(), "{} is removed", memory.display());
    }
}
