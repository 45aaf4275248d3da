//! Periodic and parameterized jobs with a real agent and raw_exec tasks:
//! launches on the schedule (a seven-field expression, whose first field is
//! the second), `job periodic force`, `prohibit_overlap`, a launch missed
//! while the agent was down made once and never again, and `job dispatch`
//! with a payload file and meta, and its refusals.

use std::fs;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use csi_agent::api::client;
use csi_agent::proto::agent::JobDispatchRequest;
use csi_agent::task::MAX_DISPATCH_PAYLOAD;

use super::Rig;
use crate::harness::{text, WAIT};
use crate::util::{bin, require_root};

/// A periodic batch job whose task writes its job name and parent into the
/// shared alloc dir, then runs `then`.
fn periodic_job(name: &str, periodic: &str, then: &str) -> String {
    format!(
        r#"job "{name}" {{
  type = "batch"
  periodic {{
{periodic}
  }}
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "echo \"$NOMAD_JOB_NAME $NOMAD_JOB_PARENT_ID\" > $NOMAD_ALLOC_DIR/data/who; {then}"]
      }}
    }}
  }}
}}
"#
    )
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The children of `parent`, by name.
fn children(rig: &Rig, parent: &str) -> Vec<String> {
    rig.job(parent)
        .children
        .into_iter()
        .map(|c| c.name)
        .collect()
}

/// The second of a child's name `<parent>/periodic-<second>`, or
/// `<parent>/periodic-<second>-<n>` for a later launch of that second.
fn launch_second(parent: &str, child: &str) -> i64 {
    let rest = child
        .strip_prefix(&format!("{parent}/periodic-"))
        .unwrap_or_else(|| panic!("{child} is not a periodic child of {parent}"));
    let second = match rest.split_once('-') {
        Some((second, n)) => {
            assert!(n.parse::<u32>().is_ok_and(|n| n >= 2), "{child}");
            second
        }
        None => rest,
    };
    second.parse().unwrap()
}

/// The child `job periodic force` says it launched.
fn forced_child(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("Job \"")?.strip_suffix("\" launched"))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string()
}

/// A seven-field expression that matches the one second `at` (UTC).
fn only_at(at: i64) -> String {
    let t = csi_agent::spec::format_utc(at);
    let num = |range: std::ops::Range<usize>| t[range].parse::<u32>().unwrap();
    format!(
        "{} {} {} {} {} * {}",
        num(17..19),
        num(14..16),
        num(11..13),
        num(8..10),
        num(5..7),
        num(0..4)
    )
}

#[test]
fn a_periodic_job_launches_children_on_its_schedule_and_never_runs_itself() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let start = now_secs();
    let allocs = rig.run_job(
        "tick.hcl",
        &periodic_job("tick", "    cron = \"* * * * * * *\"", "true"),
    );
    assert!(allocs.is_empty(), "the parent itself ran: {allocs:?}");
    let parent = rig.job("tick");
    assert_eq!(parent.parent_kind, "periodic");
    assert!(parent.allocs.is_empty());
    assert!(parent.next_launch_unix > start, "{parent:#?}");
    let status = rig.wait_job("tick", "two launches", |j| j.children.len() >= 2);
    let first = &status.children[0].name;
    let second = launch_second("tick", first);
    assert!(second > start && second <= now_secs(), "{first}");
    // A child is a job of its own, with the parent's group, that ran.
    let child = rig.wait_job(first, "the child to finish", |j| j.status == "dead");
    assert_eq!(child.parent, "tick");
    assert_eq!(child.allocs[0].status, "complete", "{child:#?}");
    let who = fs::read_to_string(
        rig.agent
            .data_dir
            .join("alloc")
            .join(&child.allocs[0].id)
            .join("alloc/data/who"),
    )
    .unwrap();
    assert_eq!(who, format!("{first} tick\n"));
    // The CLI shows the next launch and the children.
    let shown = rig.ok(&["job", "status", "tick"]);
    assert!(shown.contains("Next Periodic Launch = 20"), "{shown}");
    assert!(shown.contains(first.as_str()), "{shown}");
    // Stopping the parent ends its launches; its children are Nomad's to
    // leave alone.
    rig.ok(&["job", "stop", "tick"]);
    let stopped = rig.job("tick");
    assert_eq!(stopped.status, "dead");
    assert_eq!(stopped.next_launch_unix, 0);
    let out = rig.agent.cli(&["job", "periodic", "force", "tick"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("is stopped"), "{}", text(&out));
}

#[test]
fn job_run_of_a_periodic_job_says_when_it_launches_rather_than_watching() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let path = rig.agent.dir.join("watched.hcl");
    std::fs::write(
        &path,
        periodic_job("watched", "    cron = \"@yearly\"", "true"),
    )
    .unwrap();
    // Without -detach: the CLI would watch a job that runs nothing.
    let out = rig
        .agent
        .cli_watch(&["job", "run", &path.display().to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Approximate next launch time: "),
        "{stdout}"
    );
    assert!(!stdout.contains("is up"), "{stdout}");
}

#[test]
fn job_periodic_force_launches_now_whatever_the_schedule() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    rig.run_job(
        "yearly.hcl",
        &periodic_job("yearly", "    cron = \"@yearly\"", "true"),
    );
    let before = now_secs();
    let child = forced_child(&rig.ok(&["job", "periodic", "force", "yearly"]));
    let second = launch_second("yearly", &child);
    assert!(second >= before && second <= now_secs(), "{child}");
    let status = rig.wait_job(&child, "the forced child to finish", |j| j.status == "dead");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    assert_eq!(children(&rig, "yearly"), [child]);
    // Not periodic: refused with the reason.
    let out = rig.agent.cli(&["job", "periodic", "force", "nosuch"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("no job \"nosuch\""), "{}", text(&out));
}

#[test]
fn job_periodic_force_in_the_second_of_another_launch_makes_a_child_of_its_own() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    rig.run_job(
        "busy.hcl",
        &periodic_job("busy", "    cron = \"* * * * * * *\"", "true"),
    );
    rig.wait_job("busy", "a scheduled launch", |j| !j.children.is_empty());
    // Every second has a scheduled launch, and three forces back to back
    // share a second with one another too.
    let forced: Vec<String> = (0..3)
        .map(|_| forced_child(&rig.ok(&["job", "periodic", "force", "busy"])))
        .collect();
    let launched = children(&rig, "busy");
    for child in &forced {
        assert!(launched.contains(child), "{child} not in {launched:?}");
    }
    // What this test is about happened: a launch took a second's name
    // another launch had.
    let seconds: Vec<i64> = launched.iter().map(|c| launch_second("busy", c)).collect();
    assert!(
        (1..seconds.len()).any(|i| seconds[..i].contains(&seconds[i])),
        "no two launches shared a second: {launched:?}"
    );
    rig.ok(&["job", "stop", "busy"]);
}

#[test]
fn prohibit_overlap_skips_launches_while_a_child_runs() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    rig.run_job(
        "slow.hcl",
        &periodic_job(
            "slow",
            "    cron = \"* * * * * * *\"\n    prohibit_overlap = true",
            "exec sleep 600",
        ),
    );
    let status = rig.wait_job("slow", "a launch", |j| !j.children.is_empty());
    let first = status.children[0].name.clone();
    rig.wait_job(&first, "the child to run", |j| {
        j.allocs[0].tasks[0].state == "running"
    });
    // Two launches due since then were skipped, and said so.
    let skipped = |log: &str| {
        log.matches("skipped: a child still runs (prohibit_overlap)")
            .count()
    };
    let start = Instant::now();
    while skipped(&rig.agent.log()) < 2 {
        assert!(start.elapsed() < WAIT, "{}", rig.agent.log());
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(children(&rig, "slow"), std::slice::from_ref(&first));
    rig.ok(&["job", "stop", "slow"]);
    rig.ok(&["job", "stop", &first]);
    rig.wait_job(&first, "the child to stop", |j| j.status == "dead");
}

#[test]
fn a_launch_missed_while_the_agent_was_down_is_made_once_at_start() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    // One launch, a few seconds from now, which the agent is down for.
    let due = now_secs() + 6;
    rig.run_job(
        "once.hcl",
        &periodic_job("once", &format!("    cron = \"{}\"", only_at(due)), "true"),
    );
    assert_eq!(rig.job("once").next_launch_unix, due);
    assert_eq!(rig.agent.sigterm(), 0);
    assert!(
        now_secs() < due,
        "the agent stopped after the launch was due"
    );
    while now_secs() <= due {
        thread::sleep(Duration::from_millis(100));
    }
    let restarted = now_secs();
    rig.agent.restart();
    let status = rig.wait_job("once", "the launch missed", |j| !j.children.is_empty());
    let child = status.children[0].name.clone();
    assert!(launch_second("once", &child) >= restarted, "{child}");
    rig.wait_job(&child, "the child to finish", |j| j.status == "dead");
    // Nothing further is due, and a restart makes nothing twice.
    assert_eq!(rig.job("once").next_launch_unix, 0);
    assert_eq!(rig.agent.sigterm(), 0);
    rig.agent.restart();
    assert_eq!(children(&rig, "once"), std::slice::from_ref(&child));
    assert_eq!(rig.job(&child).allocs.len(), 1);
    assert_eq!(rig.job(&child).allocs[0].status, "complete");
}

/// A parameterized job whose task copies its payload and meta into the
/// shared alloc dir.
const REPORT: &str = r#"job "report" {
  type = "batch"
  parameterized {
    payload       = "required"
    meta_required = ["who"]
    meta_optional = ["extra"]
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      dispatch_payload {
        file = "in/payload.txt"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "cp $NOMAD_TASK_DIR/in/payload.txt $NOMAD_ALLOC_DIR/data/payload; echo \"${NOMAD_META_who} $NOMAD_META_WHO $NOMAD_JOB_PARENT_ID [${NOMAD_META_extra}]\" > $NOMAD_ALLOC_DIR/data/meta"]
      }
    }
  }
}
"#;

/// `job dispatch ARGS` with `stdin` on its standard input.
fn dispatch(rig: &Rig, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(bin())
        .arg("job")
        .arg("dispatch")
        .args(args)
        .env(
            client::ADDRESS_ENV,
            format!("unix://{}", rig.agent.socket.display()),
        )
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    // The CLI may stop reading past its bound: a broken pipe is its answer.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}

#[test]
fn a_dispatched_child_gets_its_payload_file_and_meta() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    assert!(rig.run_job("report.hcl", REPORT).is_empty());
    let out = dispatch(
        &rig,
        &["-meta", "who=ops", "-meta", "extra=1", "report", "-"],
        b"the payload\n",
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let child = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Job \"")?.strip_suffix("\" launched"))
        .unwrap_or_else(|| panic!("{stdout}"))
        .to_string();
    // Nomad's name: <parent>/dispatch-<unix>-<8 hex digits>.
    let (time, suffix) = child
        .strip_prefix("report/dispatch-")
        .and_then(|rest| rest.split_once('-'))
        .unwrap_or_else(|| panic!("{child}"));
    assert!(time.parse::<i64>().is_ok(), "{child}");
    assert!(
        suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_hexdigit()),
        "{child}"
    );
    let status = rig.wait_job(&child, "the child to finish", |j| j.status == "dead");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    let data = rig
        .agent
        .data_dir
        .join("alloc")
        .join(&status.allocs[0].id)
        .join("alloc/data");
    assert_eq!(fs::read(data.join("payload")).unwrap(), b"the payload\n");
    assert_eq!(
        fs::read_to_string(data.join("meta")).unwrap(),
        "ops ops report [1]\n"
    );
    assert_eq!(children(&rig, "report"), std::slice::from_ref(&child));
    // A prefix template goes before the time.
    let file = rig.agent.dir.join("payload");
    fs::write(&file, "from a file").unwrap();
    let out = rig.ok(&[
        "job",
        "dispatch",
        "-meta",
        "who=x",
        "-id-prefix-template",
        "nightly",
        "report",
        &file.display().to_string(),
    ]);
    assert!(out.contains("\"report/dispatch-nightly-"), "{out}");
    // An optional key not given is empty, so its ${...} still resolves.
    let child = rig.job("report").children[1].name.clone();
    let status = rig.wait_job(&child, "the child to finish", |j| j.status == "dead");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    let data = rig
        .agent
        .data_dir
        .join("alloc")
        .join(&status.allocs[0].id)
        .join("alloc/data");
    assert_eq!(fs::read(data.join("payload")).unwrap(), b"from a file");
    assert_eq!(
        fs::read_to_string(data.join("meta")).unwrap(),
        "x x report []\n"
    );
}

#[test]
fn a_dispatch_is_refused_for_missing_or_unknown_meta_and_payload_rules() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    rig.run_job("report.hcl", REPORT);
    let refused = |args: &[&str], stdin: &[u8], needle: &str| {
        let out = dispatch(&rig, args, stdin);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(text(&out).contains(needle), "{args:?}: {}", text(&out));
    };
    refused(
        &["report", "-"],
        b"x",
        "requires meta keys missing from the dispatch: who",
    );
    refused(
        &["-meta", "who=a", "-meta", "nope=1", "report", "-"],
        b"x",
        "does not take meta keys nope",
    );
    refused(&["-meta", "who=a", "report"], b"", "requires a payload");
    // A payload past the bound is refused by the CLI before it is sent,
    // however much there is.
    let bomb = vec![b'x'; 4 * MAX_DISPATCH_PAYLOAD];
    refused(
        &["-meta", "who=a", "report", "-"],
        &bomb,
        "MAX_DISPATCH_PAYLOAD",
    );
    refused(
        &["-meta", "who=a", "report", "/dev/zero"],
        b"",
        "MAX_DISPATCH_PAYLOAD",
    );
    // And by the agent, for a client that sends it anyway; the bound
    // itself is accepted.
    let client = rig.client();
    let mut req = JobDispatchRequest {
        name: "report".into(),
        payload: vec![b'x'; MAX_DISPATCH_PAYLOAD + 1],
        ..Default::default()
    };
    req.meta.insert("who".into(), "a".into());
    let err = client.job_dispatch(&req).unwrap_err().to_string();
    assert!(err.contains("MAX_DISPATCH_PAYLOAD"), "{err}");
    req.payload.pop();
    let run = client.job_dispatch(&req).unwrap();
    assert!(run.job.starts_with("report/dispatch-"), "{run:?}");
    // Not parameterized; and a stopped parent dispatches nothing.
    rig.run_job(
        "plain.hcl",
        &periodic_job("plain", "    cron = \"@yearly\"", "true"),
    );
    refused(&["plain"], b"", "is not parameterized");
    rig.ok(&["job", "stop", "report"]);
    refused(&["-meta", "who=a", "report", "-"], b"x", "is stopped");
    // The child dispatched before goes on: Nomad leaves children alone.
    assert_eq!(rig.job(&run.job).parent, "report");
}
