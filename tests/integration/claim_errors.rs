//! Errors that tell the truth: a claim the plugin refuses for good stops
//! at once and the CLI prints why (never a hint about the control
//! socket's permissions), and a claim the plugin refuses for now shows its
//! attempts and next retry in `volume status` while the CLI waits.

use std::process::{Command, Stdio};

use csi_agent::api::client;

use crate::harness::text;
use crate::util::{bin, require_root};
use crate::volume_util::*;

const SNW: &str = "single-node-writer";

#[test]
fn a_claim_the_plugin_refuses_for_good_fails_at_once_with_the_plugin_s_reason() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    let out = refused_claim(&rig, "vol", "a1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("wrong credentials"), "{stderr}");
    assert!(stderr.contains("not retried"), "{stderr}");
    assert!(!stderr.contains("control API is for root"), "{stderr}");
    assert_eq!(count(&rig.plugin, "NodePublishVolume"), 1, "not retried");
    wait_volume(&rig.agent, "vol", "the claim rolled back", unclaimed, LONG);
    rig.plugin.set_faults("");
    rig.assert_nothing_left();
}

#[test]
fn a_claim_refused_for_now_shows_its_attempts_and_next_retry_while_the_cli_waits() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    rig.plugin.set_faults(
        "NodeStageVolume code=RESOURCE_EXHAUSTED count=2 message=too many attachments\n",
    );
    let cli = Command::new(bin())
        .args(["volume", "claim", "-alloc", "a1", "vol"])
        .env(
            client::ADDRESS_ENV,
            format!("unix://{}", rig.agent.socket.display()),
        )
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let v = wait_volume(
        &rig.agent,
        "vol",
        "a failed attempt",
        |v| claim_of(v, "a1").is_some_and(|c| c.attempts >= 1 && c.next_retry_unix_ms > 0),
        LONG,
    );
    let claim = claim_of(&v, "a1").unwrap();
    assert!(claim.last_error.contains("too many attachments"), "{v:#?}");
    assert_eq!(claim.state, "claiming");
    let status = rig.agent.cli(&["volume", "status", "vol"]);
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status.contains("alloc a1: attempt ") && status.contains("next retry"),
        "{status}"
    );
    // The retries succeed once the plugin relents; the CLI was waiting.
    let out = cli.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(taken(&volume(&rig.agent, "vol"), "a1"));
    released(&rig.agent, "vol", "a1");
    rig.assert_nothing_left();
}

#[test]
fn a_stage_refused_for_want_of_an_attachment_attaches_again_first() {
    if !require_root() {
        return;
    }
    // As after a fence detached the volume from this node behind its back:
    // the plugin refuses the stage until ControllerPublish is sent again.
    let rig = Rig::start();
    rig.create("vol", SNW);
    rig.plugin.set_faults(
        "NodeStageVolume code=FAILED_PRECONDITION count=1 message=not attached to node\n",
    );
    let out = rig.agent.cli(&["volume", "claim", "-alloc", "a1", "vol"]);
    assert!(out.status.success(), "{}", text(&out));
    let calls: Vec<String> = rig
        .plugin
        .calls()
        .into_iter()
        .filter(|c| c.contains("ControllerPublishVolume") || c.contains("NodeStageVolume"))
        .collect();
    let order: Vec<&str> = calls
        .iter()
        .map(|c| {
            if c.contains("ControllerPublishVolume") {
                "publish"
            } else {
                "stage"
            }
        })
        .collect();
    assert_eq!(
        order,
        ["publish", "stage", "publish", "stage"],
        "{calls:#?}"
    );
    rig.plugin.set_faults("");
}
