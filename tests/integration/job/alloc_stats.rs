//! `alloc status`'s resource usage from real tasks: a raw_exec task's
//! memory, as its control group's file has it, growing when the task
//! allocates; a busy task's CPU; a docker task's figures from the engine;
//! and a task that is not running said to have none.

use std::fs;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::proto::agent::TaskUsage;

use super::Rig;
use crate::harness::WAIT;
use crate::util::require_root;

const MIB: u64 = 1024 * 1024;

/// A service job of one raw_exec task running `script` under `sh -c`.
fn job(name: &str, script: &str) -> String {
    format!(
        r#"job "{name}" {{
  group "g" {{
    network {{
      port "http" {{}}
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
      }}
      resources {{
        cpu    = 500
        memory = 256
      }}
    }}
  }}
}}
"#
    )
}

fn usage(rig: &Rig, alloc: &str) -> TaskUsage {
    let stats = rig.client().alloc_stats(&alloc[..8]).unwrap();
    assert_eq!(stats.alloc_id, alloc);
    stats.tasks.into_iter().next().unwrap()
}

fn measured(u: &TaskUsage, name: &str) -> bool {
    u.memory
        .measured
        .iter()
        .chain(&u.cpu.measured)
        .any(|n| n == name)
}

/// The task's memory group dir, wherever the host mounts the controller.
fn memory_dir(alloc: &str) -> PathBuf {
    let name = format!("{alloc}.t");
    for root in [
        "/sys/fs/cgroup/memory/csi-agent",
        "/sys/fs/cgroup/csi-agent",
    ] {
        let dir = PathBuf::from(root).join(&name);
        if dir.exists() {
            return dir;
        }
    }
    panic!("no memory group {name}");
}

fn file_usage(alloc: &str) -> u64 {
    let dir = memory_dir(alloc);
    let file = ["memory.usage_in_bytes", "memory.current"]
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.exists())
        .unwrap();
    fs::read_to_string(file).unwrap().trim().parse().unwrap()
}

#[test]
fn a_raw_exec_task_s_memory_is_its_group_s_and_grows_when_it_allocates() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let script = "while [ ! -e $NOMAD_ALLOC_DIR/go ]; do sleep 0.05; done; x=$(head -c 50000000 /dev/zero | tr '\\0' a); touch $NOMAD_ALLOC_DIR/grown; sleep 600";
    let alloc = rig.run_job("mem.hcl", &job("mem", script)).remove(0);
    rig.wait_running("mem", &alloc);
    let before = usage(&rig, &alloc);
    assert!(before.note.is_empty(), "{before:#?}");
    assert!(before.source.starts_with("cgroup v"), "{before:#?}");
    assert!(
        measured(&before, "Usage") && measured(&before, "RSS"),
        "{before:#?}"
    );
    assert!(before.memory.usage < 30 * MIB, "{before:#?}");

    let alloc_dir = rig.agent.data_dir.join("alloc").join(&alloc).join("alloc");
    fs::write(alloc_dir.join("go"), "").unwrap();
    let start = Instant::now();
    while !alloc_dir.join("grown").exists() {
        assert!(start.elapsed() < WAIT, "the task did not allocate");
        thread::sleep(Duration::from_millis(20));
    }
    let after = usage(&rig, &alloc);
    let file = file_usage(&alloc);
    assert!(
        after.memory.usage > before.memory.usage + 40 * MIB,
        "{before:#?} {after:#?}"
    );
    assert!(after.memory.rss > 40 * MIB, "{after:#?}");
    // The group's own file, read just after: the same figure, give or
    // take what the shell frees or touches meanwhile.
    assert!(
        after.memory.usage.abs_diff(file) < 8 * MIB,
        "{} vs {file}",
        after.memory.usage
    );

    let said = rig.ok(&["alloc", "status", "-stats", &alloc]);
    for line in [
        "Task Resources:",
        "/500 MHz",
        "MiB/256 MiB",
        "Memory Stats",
        "CPU Stats",
        "Percent",
        "http: ",
    ] {
        assert!(said.contains(line), "{line:?} not in:\n{said}");
    }
    let json = rig.ok(&["alloc", "status", "-stats", "-json", &alloc]);
    assert!(
        json.contains("\"stats\": {") && json.contains("\"max_usage\""),
        "{json}"
    );
    rig.ok(&["job", "stop", "mem"]);
}

#[test]
fn an_exec_task_s_memory_and_cpu_come_from_its_group() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = super::root::shell_job(
        "ex",
        "x=$(head -c 30000000 /dev/zero | tr '\\0' a); echo ready; while :; do :; done",
        "",
        "resources {\n        memory = 256\n      }",
    );
    let alloc = rig.run_job("ex.hcl", &hcl).remove(0);
    super::root::wait_for_log(&rig, &alloc, "ready");
    let u = usage(&rig, &alloc);
    assert!(u.source.starts_with("cgroup v"), "{u:#?}");
    assert!(u.memory.usage > 25 * MIB, "{u:#?}");
    assert!(
        u.memory.usage.abs_diff(file_usage(&alloc)) < 8 * MIB,
        "{u:#?}"
    );
    assert!(u.cpu.percent > 5.0, "{u:#?}");
    rig.ok(&["job", "stop", "ex"]);
}

#[test]
fn a_busy_task_uses_cpu_and_an_idle_one_hardly_any() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let busy = rig
        .run_job("busy.hcl", &job("busy", "while :; do :; done"))
        .remove(0);
    let idle = rig.run_job("idle.hcl", &job("idle", "sleep 600")).remove(0);
    rig.wait_running("busy", &busy);
    rig.wait_running("idle", &idle);
    let busy_usage = usage(&rig, &busy);
    let idle_usage = usage(&rig, &idle);
    assert!(measured(&busy_usage, "Percent"), "{busy_usage:#?}");
    // Two cores shared by whatever else runs: a busy loop still gets a
    // good share of one.
    assert!(busy_usage.cpu.percent > 5.0, "{busy_usage:#?}");
    assert!(busy_usage.cpu.total_mhz > 0, "{busy_usage:#?}");
    assert!(
        idle_usage.cpu.percent < busy_usage.cpu.percent,
        "{idle_usage:#?}"
    );
    rig.ok(&["job", "stop", "busy"]);
    rig.ok(&["job", "stop", "idle"]);
}

#[test]
fn a_task_that_is_not_running_has_no_figures_and_says_so() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = job("done", "true").replace("job \"done\" {", "job \"done\" {\n  type = \"batch\"");
    let alloc = rig.run_job("done.hcl", &hcl).remove(0);
    rig.wait_job("done", "the task to finish", |j| {
        j.allocs[0].status == "complete"
    });
    let u = usage(&rig, &alloc);
    assert_eq!(u.note, "the task is not running (dead)", "{u:#?}");
    assert!(
        u.memory.measured.is_empty() && u.cpu.measured.is_empty(),
        "{u:#?}"
    );
    let said = rig.ok(&["alloc", "status", &alloc]);
    assert!(
        said.contains("Usage not available: the task is not running (dead)"),
        "{said}"
    );
}

#[test]
fn a_docker_task_s_figures_come_from_the_engine() {
    if !crate::dockerd::require_docker() {
        return;
    }
    use super::containers::{rig, script_job, BUSYBOX};
    let dockerd = crate::dockerd::Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    let alloc = rig
        .run_job(
            "d.hcl",
            &script_job("d", "service", "while :; do :; done", ""),
        )
        .remove(0);
    rig.wait_running("d", &alloc);
    // The engine's stats collector may not know a container it has just
    // started: until it does, the answer says so.
    let start = Instant::now();
    let u = loop {
        let u = usage(&rig, &alloc);
        if u.source == "docker" {
            break u;
        }
        assert!(
            u.note.starts_with("the container engine's stats: "),
            "{u:#?}"
        );
        assert!(start.elapsed() < WAIT, "{u:#?}");
        thread::sleep(Duration::from_millis(100));
    };
    assert!(measured(&u, "Usage") && measured(&u, "Percent"), "{u:#?}");
    assert!(u.memory.usage > 0, "{u:#?}");
    assert!(u.cpu.percent > 5.0, "{u:#?}");
    let said = rig.ok(&["alloc", "status", "-stats", &alloc]);
    assert!(
        said.contains("CPU Stats") && said.contains("Memory Stats"),
        "{said}"
    );
    rig.ok(&["job", "stop", "d"]);
}
