//! Keys of Nomad's job files that csi-agent once accepted and ignored and
//! now acts on: an exec or raw_exec task's `work_dir`.

use std::fs;

use super::root::{shell_job, wait_for_log};
use super::Rig;
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
