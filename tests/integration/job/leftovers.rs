//! What an agent killed with cleanups queued leaves behind (empty task
//! control groups, the dirs of allocs it purged), removed by the next
//! one at start-up; never a live task's group, another agent's, or a dir
//! with a mount point under it.

use std::fs;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::sys::cgroup::{Controller, Group, Hierarchy, Limits};

use super::lifecycle::{job, sh_task, task, NO_RESTARTS};
use super::Rig;
use crate::harness::WAIT;
use crate::util::require_root;

/// The group `<alloc>.<task>` as the agent names it, made empty.
fn make_group(hierarchy: &Hierarchy, name: &str) -> Group {
    let group = hierarchy.group(name);
    group.create(&Limits::default()).unwrap();
    group
}

fn group_dir(group: &Group) -> PathBuf {
    group
        .dir(Controller::Memory)
        .or_else(|| group.dir(Controller::Cpu))
        .expect("a group dir")
        .to_path_buf()
}

#[test]
fn a_restarted_agent_removes_the_groups_and_dirs_a_killed_one_left_and_nothing_else() {
    if !require_root() {
        return;
    }
    let hierarchy = Hierarchy::detect().expect("this host has cgroup controllers");
    let mut rig = Rig::bare();
    let body = [NO_RESTARTS.to_string(), sh_task("t", "exec sleep 600", "")].join("\n");
    let allocs = rig.run_job("live.hcl", &job("live", "service", &body));
    let known = allocs[0].clone();
    let pid = rig.wait_running("live", &known);
    rig.agent.sigkill();

    // What queued cleanups would have removed: the empty group of a task
    // of a known alloc that is done, and a purged alloc's dir and group.
    let (forgotten, mounted, foreign) = ("0badf00d", "0ddba11a", "0f0f0f0f");
    assert!(![forgotten, mounted, foreign].contains(&known.as_str()));
    let done_group = make_group(&hierarchy, &format!("{known}.done"));
    let forgotten_group = make_group(&hierarchy, &format!("{forgotten}.t"));
    // Another agent's: its alloc has no dir under this data dir.
    let foreign_group = make_group(&hierarchy, &format!("{foreign}.t"));
    let alloc_root = rig.agent.data_dir.join("alloc");
    let forgotten_dir = alloc_root.join(forgotten);
    fs::create_dir_all(forgotten_dir.join("t/logs")).unwrap();
    fs::write(forgotten_dir.join("t/logs/stdout"), "old\n").unwrap();
    let mounted_dir = alloc_root.join(mounted);
    let mount_point = mounted_dir.join("t/data");
    fs::create_dir_all(&mount_point).unwrap();
    super::tmpfs(&mount_point);
    let live_group = hierarchy.group(&format!("{known}.t"));
    assert!(live_group.exists());

    rig.agent.restart();
    let start = Instant::now();
    while forgotten_dir.exists() {
        assert!(
            start.elapsed() < WAIT,
            "{} is still there",
            forgotten_dir.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
    let still = |g: &Group| group_dir(g).exists();
    assert!(!still(&done_group), "the done task's empty group is left");
    assert!(!still(&forgotten_group), "the purged alloc's group is left");
    assert!(still(&foreign_group), "another agent's group was removed");
    assert!(
        mount_point.is_dir(),
        "a dir with a mount under it was touched"
    );
    rig.agent.wait_for_log("is mounted under it", WAIT);
    // The live task runs on, in its group.
    assert!(live_group.exists());
    assert_eq!(task(&rig.alloc("live", &known), "t").pid, pid);
    assert!(live_group.pids().contains(&pid), "{:?}", live_group.pids());

    let _ = std::process::Command::new("umount")
        .arg(&mount_point)
        .status();
    let _ = fs::remove_dir_all(&mounted_dir);
    let _ = foreign_group.remove(Duration::ZERO);
    rig.stop("live");
}
