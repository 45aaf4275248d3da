//! `job plan` with real tasks: the diff in Nomad's layout for a new job,
//! the running job unchanged, a changed task config and a changed
//! template; the dry run's placement failure in `job run`'s words; Nomad's
//! exit codes; the job modify index that `job run -check-index` checks,
//! kept across a restart; and that a plan changes nothing (job status,
//! allocs, the state file, the task's process).

use std::fs;
use std::process::Output;

use protobuf::Message as _;

use super::Rig;
use crate::harness::text;
use crate::util::require_root;
use csi_agent::proto::state::State;

/// A service job `web` whose raw_exec task sleeps `secs` seconds; `extra`
/// goes into the group block, `task` into the task's.
fn web(secs: &str, extra: &str, task: &str) -> String {
    format!(
        r#"job "web" {{
  group "g" {{
{extra}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = [{secs:?}]
      }}
{task}
    }}
  }}
}}
"#
    )
}

fn template(data: &str) -> String {
    format!("      template {{\n        data        = {data:?}\n        destination = \"local/a.txt\"\n      }}\n")
}

impl Rig {
    /// `job plan` of `hcl`, written to `file`, with `flags` before it.
    fn plan(&self, file: &str, hcl: &str, flags: &[&str]) -> Output {
        let path = self.agent.dir.join(file);
        fs::write(&path, hcl).unwrap();
        let path = path.display().to_string();
        let mut args = vec!["job", "plan"];
        args.extend_from_slice(flags);
        args.push(&path);
        self.agent.cli(&args)
    }

    /// The snapshot's bytes (`None` before the first).
    fn state_bytes(&self) -> Option<Vec<u8>> {
        fs::read(self.agent.data_dir.join("state.pb")).ok()
    }

    /// The snapshot a new agent writes once started, when it is written.
    fn first_snapshot(&self) -> Option<Vec<u8>> {
        let start = std::time::Instant::now();
        while self.state_bytes().is_none() {
            assert!(start.elapsed() < crate::harness::WAIT, "no snapshot");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.state_bytes()
    }

    /// Runs `web` and waits for its task to run, and for the snapshot to
    /// say so; its alloc and pid.
    fn run_web(&self, hcl: &str) -> (String, u32) {
        let ids = self.run_job("web.hcl", hcl);
        let pid = self.wait_running("web", &ids[0]);
        self.wait_snapshot_running(&ids[0]);
        (ids[0].clone(), pid)
    }

    /// Waits until the snapshot has alloc `id`'s task running, so that
    /// nothing of its start is left to write.
    fn wait_snapshot_running(&self, id: &str) {
        let start = std::time::Instant::now();
        loop {
            let running = self.state_bytes().is_some_and(|bytes| {
                State::parse_from_bytes(&bytes).is_ok_and(|s| {
                    s.allocs
                        .iter()
                        .any(|a| a.id == id && a.tasks.iter().all(|t| t.state == "running"))
                })
            });
            if running {
                return;
            }
            assert!(
                start.elapsed() < crate::harness::WAIT,
                "no snapshot of {id}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The job modify index `job plan` printed.
fn index_of(out: &Output) -> u64 {
    let stdout = stdout(out);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Job Modify Index: "))
        .unwrap_or_else(|| panic!("no index in:\n{}", text(out)));
    line.parse().unwrap()
}

#[test]
fn a_new_job_is_planned_added_with_its_creates_and_nothing_runs() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let before = rig.first_snapshot();
    let out = rig.plan("web.hcl", &web("1000", "", ""), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = stdout(&out);
    assert!(
        stdout.starts_with(
            "+ Job: \"web\"\n+ Task Group: \"g\" (1 create)\n  + Task: \"t\" (forces create)\n\n\
             Scheduler dry-run:\n- All tasks successfully allocated.\n\n\
             Job Modify Index: 0\n"
        ),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains("csi-agent job run -check-index 0 "),
        "{stdout}"
    );
    // -verbose shows what the task would be.
    let verbose = stdout_of(&rig.plan("web.hcl", &web("1000", "", ""), &["-verbose"]));
    assert!(
        verbose.contains("    + Driver:      \"raw_exec\"\n"),
        "{verbose}"
    );
    assert!(verbose.contains("      + args[0]: \"1000\"\n"), "{verbose}");

    // Nothing was submitted, placed or written.
    assert!(rig.client().job_status("web").is_err());
    assert_eq!(rig.ok(&["job", "status"]), "No jobs\n");
    assert_eq!(rig.state_bytes(), before);
    assert!(!rig.agent.log().contains("alloc "), "{}", rig.agent.log());
}

fn stdout_of(out: &Output) -> String {
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", text(out));
    stdout(out)
}

#[test]
fn the_running_job_unchanged_plans_nothing_and_exits_0() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = web("1000", "", "");
    let (id, pid) = rig.run_web(&hcl);
    let index = rig.job("web").job_modify_index;
    assert!(index > 0);
    let before = rig.state_bytes();
    let out = rig.plan("web.hcl", &hcl, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).starts_with(&format!(
            "Job: \"web\"\nTask Group: \"g\" (1 ignore)\n  Task: \"t\"\n\n\
             Scheduler dry-run:\n- All tasks successfully allocated.\n\n\
             Job Modify Index: {index}\n"
        )),
        "{}",
        text(&out)
    );
    // The same alloc and process, and the same snapshot.
    let status = rig.job("web");
    assert_eq!(status.allocs.len(), 1, "{status:#?}");
    assert_eq!(status.allocs[0].id, id);
    assert_eq!(status.allocs[0].tasks[0].pid, pid);
    assert_eq!(status.job_modify_index, index);
    assert_eq!(rig.state_bytes(), before);
}

#[test]
fn a_changed_task_config_plans_a_create_destroy_update_and_changes_nothing() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let (id, pid) = rig.run_web(&web("1000", "", ""));
    let before = rig.state_bytes();
    let out = rig.plan("web2.hcl", &web("2000", "", ""), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).starts_with(
            "+/- Job: \"web\"\n\
             +/- Task Group: \"g\" (1 create/destroy update)\n  \
             +/- Task: \"t\" (forces create/destroy update)\n    \
             +/- Config {\n      \
             +/- args[0]: \"1000\" => \"2000\"\n          \
             command: \"/bin/sleep\"\n        \
             }\n\n\
             Scheduler dry-run:\n"
        ),
        "{}",
        text(&out)
    );
    // -verbose adds the unchanged fields; -diff=false leaves the diff out.
    let verbose = stdout_of(&rig.plan("web2.hcl", &web("2000", "", ""), &["-verbose"]));
    assert!(
        verbose.contains("        Driver:      \"raw_exec\"\n"),
        "{verbose}"
    );
    let quiet = stdout_of(&rig.plan("web2.hcl", &web("2000", "", ""), &["-diff=false"]));
    assert!(quiet.starts_with("Scheduler dry-run:\n"), "{quiet}");

    let status = rig.job("web");
    assert_eq!(status.allocs.len(), 1, "{status:#?}");
    assert_eq!(
        (
            status.allocs[0].id.as_str(),
            status.allocs[0].status.as_str()
        ),
        (id.as_str(), "running")
    );
    assert_eq!(status.allocs[0].tasks[0].pid, pid);
    assert_eq!(rig.state_bytes(), before);
    assert!(
        rig.ok(&["job", "inspect", "web"]).contains("\"1000\""),
        "the agent's job is still the old one"
    );
}

#[test]
fn a_changed_template_plans_an_in_place_update_and_exits_0() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    rig.run_web(&web("1000", "", &template("one")));
    let out = rig.plan("web2.hcl", &web("1000", "", &template("two")), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = stdout(&out);
    assert!(
        stdout.contains(
            "+/- Task Group: \"g\" (1 in-place update)\n  +/- Task: \"t\" (forces in-place update)\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("      +/- EmbeddedTmpl:      \"one\" => \"two\"\n"),
        "{stdout}"
    );
}

#[test]
fn a_group_the_node_filters_is_a_placement_failure_in_job_runs_words() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let constraint = "    constraint {\n      attribute = \"${attr.kernel.name}\"\n      value     = \"windows\"\n    }\n";
    let out = rig.plan("win.hcl", &web("1000", constraint, ""), &[]);
    // Nothing would be created: exit 0, as Nomad's.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).contains(
            "Scheduler dry-run:\n- WARNING: Failed to place all allocations.\n  \
             Task Group \"g\" (failed to place 1 allocation):\n    \
             * Constraint \"${attr.kernel.name} = windows\": 1 nodes excluded by filter\n\n\
             Job Modify Index: 0\n"
        ),
        "{}",
        text(&out)
    );
    assert!(rig.client().job_status("web").is_err());
}

#[test]
fn run_check_index_runs_only_the_job_the_plan_saw() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let path = rig.agent.dir.join("web.hcl");
    fs::write(&path, web("1000", "", "")).unwrap();
    let path = path.display().to_string();
    let run = |rig: &Rig, index: &str| rig.agent.cli(&["job", "run", "-check-index", index, &path]);
    // A job that does not exist: only 0 runs it.
    let out = run(&rig, "5");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("Enforcing job modify index 5: job does not exist"),
        "{}",
        text(&out)
    );
    assert!(rig.client().job_status("web").is_err());
    let planned = index_of(&rig.plan("web.hcl", &web("1000", "", ""), &[]));
    assert_eq!(planned, 0);
    let out = run(&rig, "0");
    assert!(out.status.success(), "{}", text(&out));
    let index = rig.job("web").job_modify_index;
    assert!(index > 0);

    // Changed since: refused, naming both indexes; nothing replaced.
    let alloc = rig.job("web").allocs[0].id.clone();
    fs::write(&path, web("2000", "", "")).unwrap();
    let out = run(&rig, "0");
    assert!(
        text(&out).contains("Enforcing job modify index 0: job already exists"),
        "{}",
        text(&out)
    );
    let stale = (index + 7).to_string();
    let out = run(&rig, &stale);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "Enforcing job modify index {stale}: job exists with conflicting job modify index: {index}"
        )),
        "{}",
        text(&out)
    );
    let status = rig.job("web");
    assert_eq!(status.allocs.len(), 1);
    assert_eq!(status.allocs[0].id, alloc);
    assert_eq!(status.job_modify_index, index);

    // The plan's index runs it, and the change takes a new index, which
    // job status and inspect show and a restart keeps.
    let planned = index_of(&rig.plan("web.hcl", &web("2000", "", ""), &[]));
    assert_eq!(planned, index);
    let out = run(&rig, &planned.to_string());
    assert!(out.status.success(), "{}", text(&out));
    let changed = rig.job("web").job_modify_index;
    assert!(changed > index, "{changed} after {index}");
    assert!(
        rig.ok(&["job", "status", "web"])
            .contains(&format!("Job Modify Index = {changed}\n")),
        "{}",
        rig.ok(&["job", "status", "web"])
    );
    assert!(rig
        .ok(&["job", "inspect", "-json", "web"])
        .contains(&format!("\"job_modify_index\": {changed}")));
    assert_eq!(rig.agent.sigterm(), 0);
    rig.agent.restart();
    assert_eq!(rig.job("web").job_modify_index, changed);
    let out = run(&rig, &index.to_string());
    assert!(
        text(&out).contains("job exists with conflicting job modify index"),
        "{}",
        text(&out)
    );
    // A stop is a change of the job too.
    rig.ok(&["job", "stop", "web"]);
    assert!(rig.job("web").job_modify_index > changed);
}

#[test]
fn a_plan_that_cannot_be_made_exits_255_and_a_usage_error_2() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = rig.plan("bad.hcl", "job \"web\" {\n  group \"g\" {}\n}\n", &[]);
    assert_eq!(out.status.code(), Some(255), "{}", text(&out));
    assert!(
        text(&out).contains("needs at least one task"),
        "{}",
        text(&out)
    );
    let out = rig.agent.cli(&["job", "plan", "-diff=maybe", "x.hcl"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
