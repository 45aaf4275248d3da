//! `csi-agent events`: the agent's events through the real
//! CLI and control API, with a real hostpath plugin, claims, a plugin
//! restart and a job's task. A claim's steps and its plugin's health
//! changes are told in the order they happened, each with the next
//! index; `-topic` and `-since` select; `-follow` prints new events as
//! they happen and ends, with the agent, when the agent stops; and the
//! task events of `job status` are the stream's (one source).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client;
use json::Value;

use crate::harness::{healthy, text, unhealthy, Agent, WAIT};
use crate::util::{bin, require_root, TestDir};
use crate::volume_util::*;

const SNW: &str = "single-node-writer";

/// One event of `events -json`.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    index: u64,
    topic: String,
    kind: String,
    key: String,
    message: String,
}

fn parse(line: &str) -> Event {
    let v = json::parse(line).unwrap_or_else(|err| panic!("{line:?}: {err}"));
    let s = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Event {
        index: v.get("index").and_then(Value::as_u64).expect("an index"),
        topic: s("topic"),
        kind: s("type"),
        key: s("key"),
        message: s("message"),
    }
}

/// `csi-agent events -json ARGS`, which must succeed.
#[track_caller]
fn events(agent: &Agent, args: &[&str]) -> Vec<Event> {
    let mut argv = vec!["events", "-json"];
    argv.extend_from_slice(args);
    let out = agent.cli(&argv);
    assert!(out.status.success(), "events {args:?}: {}", text(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(parse)
        .collect()
}

/// The types of `events`' events about `key`, in order.
fn kinds_of<'a>(events: &'a [Event], key: &str) -> Vec<&'a str> {
    events
        .iter()
        .filter(|e| e.key == key)
        .map(|e| e.kind.as_str())
        .collect()
}

/// Waits until `events ARGS` has an event that `found` accepts.
#[track_caller]
fn wait_for_event(agent: &Agent, args: &[&str], found: impl Fn(&Event) -> bool) -> Vec<Event> {
    let start = Instant::now();
    loop {
        let all = events(agent, args);
        if all.iter().any(&found) {
            return all;
        }
        assert!(start.elapsed() < WAIT, "no such event in {all:#?}");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_claim_s_steps_and_its_plugin_s_health_are_told_in_order() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));
    released(&rig.agent, "vol", "a1");
    rig.plugin.kill();
    rig.agent.wait_for(PLUGIN, unhealthy, WAIT);
    rig.plugin.restart();
    rig.agent.wait_for(PLUGIN, healthy, WAIT);

    let all = wait_for_event(&rig.agent, &[], |e| {
        e.kind == "HealthChanged" && e.message.starts_with("healthy") && e.index > 3
    });
    for pair in all.windows(2) {
        assert_eq!(pair[1].index, pair[0].index + 1, "{all:#?}");
    }
    assert_eq!(all[0].index, 1, "{all:#?}");
    // The volume: created, then claimed step by step, then released.
    assert_eq!(
        kinds_of(&all, "vol"),
        [
            "Created",
            "ClaimAsked",
            "StepDone",
            "StepDone",
            "StepDone",
            "ClaimTaken",
            "ReleaseAsked",
            "StepDone",
            "StepDone",
            "StepDone",
            "ClaimReleased",
        ],
        "{all:#?}"
    );
    let steps: Vec<&str> = all
        .iter()
        .filter(|e| e.kind == "StepDone")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        steps,
        [
            "ControllerPublishVolume",
            "NodeStageVolume",
            "NodePublishVolume for alloc a1",
            "NodeUnpublishVolume for alloc a1",
            "NodeUnstageVolume",
            "ControllerUnpublishVolume",
        ]
    );
    // The plugin: registered, fingerprinted, healthy; down, then back.
    let health: Vec<&str> = all
        .iter()
        .filter(|e| e.topic == "plugin" && e.kind == "HealthChanged")
        .map(|e| e.message.split(' ').next().unwrap())
        .collect();
    assert_eq!(health, ["healthy", "unhealthy", "healthy"], "{all:#?}");
    assert_eq!(kinds_of(&all, PLUGIN)[0], "Registered");

    // -topic selects; -since resumes after an index.
    let claims = events(&rig.agent, &["-topic", "claim"]);
    assert!(claims.iter().all(|e| e.topic == "claim"), "{claims:#?}");
    assert_eq!(claims.len(), 10);
    let taken = claims.iter().find(|e| e.kind == "ClaimTaken").unwrap();
    let after = events(
        &rig.agent,
        &["-topic", "claim,volume", "-since", &taken.index.to_string()],
    );
    assert_eq!(
        kinds_of(&after, "vol"),
        [
            "ReleaseAsked",
            "StepDone",
            "StepDone",
            "StepDone",
            "ClaimReleased"
        ]
    );
    // The text form: one line an event.
    let out = rig.agent.cli(&["events", "-topic", "volume"]);
    let lines = String::from_utf8(out.stdout).unwrap();
    assert!(
        lines.contains("  volume  Created         vol: on plugin hp as "),
        "{lines}"
    );
}

#[test]
fn a_failed_claim_is_told_with_its_reason() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    refused_claim(&rig, "vol", "a2");
    let all = wait_for_event(&rig.agent, &["-topic", "claim"], |e| {
        e.kind == "ClaimFailed"
    });
    let failed = all
        .iter()
        .find(|e| e.kind == "StepFailed")
        .expect("a failed step");
    assert!(
        failed
            .message
            .starts_with("NodePublishVolume for alloc a2: ")
            && failed.message.contains("wrong credentials"),
        "{failed:?}"
    );
    let claim = all.iter().find(|e| e.kind == "ClaimFailed").unwrap();
    assert!(claim.message.starts_with("alloc a2: "), "{claim:?}");
    assert!(claim.message.contains("wrong credentials"), "{claim:?}");
}

#[test]
fn a_follower_prints_events_as_they_happen_and_ends_when_the_agent_stops() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    rig.create("vol", SNW);
    let last = events(&rig.agent, &[]).last().unwrap().index;
    let mut follower = Command::new(bin())
        .args(["events", "-follow", "-json", "-topic", "claim"])
        .args(["-since", &last.to_string()])
        .env(
            client::ADDRESS_ENV,
            format!("unix://{}", rig.agent.socket.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = follower.stdout.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(parse(&line.unwrap()));
        }
    });
    // Nothing yet: the follower waits.
    assert!(lines.recv_timeout(Duration::from_millis(300)).is_err());
    claimed(&rig.agent, &claim_req("vol", "a1"));
    let mut seen = Vec::new();
    while !seen.iter().any(|e: &Event| e.kind == "ClaimTaken") {
        let event = lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("the follower printed only {seen:#?}"));
        seen.push(event);
    }
    assert_eq!(seen[0].index, last + 1, "{seen:#?}");
    assert_eq!(seen[0].kind, "ClaimAsked");

    // The agent stops at once, with a follower waiting; the follower
    // hears it and ends.
    let started = Instant::now();
    assert_eq!(rig.agent.sigterm(), 0);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the agent took {:?} to stop",
        started.elapsed()
    );
    let out = follower.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Its waiting call is answered, or its next one finds the agent gone.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the agent is shutting down")
            || stderr.contains("it is stopping")
            || stderr.contains("the agent is not running"),
        "{stderr}"
    );
}

#[test]
fn an_index_the_agent_has_not_reached_is_refused_with_the_last_one() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let last = events(&rig.agent, &[]).last().unwrap().index;
    let out = rig
        .agent
        .cli(&["events", "-since", &(last + 100).to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("past the agent's last event ({last})")),
        "{}",
        text(&out)
    );
    let out = rig.agent.cli(&["events", "-topic", "claims"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("unknown topic \"claims\""),
        "{}",
        text(&out)
    );
}

const JOB: &str = r#"
job "ev" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exit 0"]
      }
    }
  }
}
"#;

#[test]
fn a_task_s_events_are_the_stream_s_and_job_status_s() {
    if !require_root() {
        return;
    }
    let agent = Agent::start(&[]);
    let dir = TestDir::new();
    let job = dir.path.join("ev.hcl");
    std::fs::write(&job, JOB).unwrap();
    let out = agent.cli(&["job", "run", job.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let all = wait_for_event(&agent, &["-topic", "job"], |e| e.kind == "Completed");
    let key = &all[0].key;
    assert!(key.starts_with("ev/") && key.ends_with("/t"), "{key}");
    assert_eq!(
        kinds_of(&all, key),
        ["Received", "Started", "Terminated", "Completed"],
        "{all:#?}"
    );
    // `job status` lists the same events, with the same messages.
    let status = agent.cli(&["job", "status", "-json", "ev"]);
    assert!(status.status.success(), "{}", text(&status));
    let status = String::from_utf8(status.stdout).unwrap();
    for event in all.iter().filter(|e| &e.key == key) {
        assert!(
            status.contains(&json::to_string(&Value::from(event.message.as_str()))),
            "{:?} is not in job status:\n{status}",
            event.message
        );
    }
}
