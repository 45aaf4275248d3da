//! Volumes and claims through a real agent and a real hostpath plugin:
//! register, claim (attach, stage, publish, bind), release (in the spec's
//! order), admission, failures the watcher retries, uncertain calls, a
//! plugin and an agent killed mid-protocol, and the startup reconciliation
//! with the mount table.
//!
//! Every test checks the spec's ordering rules on the plugin's call trace,
//! and the mounts in /proc/self/mountinfo. No test asserts how fast
//! anything happens: each waits, with a generous limit, for the state it
//! expects.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use csi_agent::api::client::{self, AgentClient};
use csi_agent::csi::types::{CapacityRange, CreateVolume};
use csi_agent::csi::{AccessMode, AttachmentMode, Capability};
use csi_agent::mount::{Mounter, SysMounter, UnmountMode};
use csi_agent::proto::agent::VolumeClaimRequest;
use grpcio::RpcStatusCode;

use crate::harness::{healthy, Agent, WAIT};
use crate::util::{mount_state, mounts_under, require_root, Plugin};
use crate::volume_util::*;

const SNW: &str = "single-node-writer";
const MNMW: &str = "multi-node-multi-writer";

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The one line a failed command printed on stderr, after checking it
/// exited 1 with nothing on stdout.
#[track_caller]
fn failure_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", text(out));
    assert!(out.stdout.is_empty(), "{}", text(out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", text(out));
    lines[0].to_string()
}

/// `volume claim` with `-target`: the publish path it printed.
#[track_caller]
fn cli_claim_at(agent: &Agent, volume: &str, alloc: &str, target: &Path) -> PathBuf {
    let target_arg = target.display().to_string();
    let out = agent.cli(&[
        "volume",
        "claim",
        "-alloc",
        alloc,
        "-target",
        &target_arg,
        volume,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let expected_start = format!("Volume {volume:?} claimed for alloc {alloc:?}: published at ");
    let rest = stdout
        .trim_end()
        .strip_prefix(&expected_start)
        .unwrap_or_else(|| panic!("{}", text(&out)));
    let (publish, mounted) = rest
        .split_once(", mounted at ")
        .unwrap_or_else(|| panic!("{}", text(&out)));
    assert_eq!(mounted, target_arg, "{}", text(&out));
    PathBuf::from(publish)
}

#[track_caller]
fn cli_release(agent: &Agent, volume: &str, alloc: &str) {
    let out = agent.cli(&["volume", "release", "-alloc", alloc, volume]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        format!("Volume {volume:?}: the claim of alloc {alloc:?} is released")
    );
}

fn set(paths: impl IntoIterator<Item = PathBuf>) -> BTreeSet<PathBuf> {
    paths.into_iter().collect()
}

/// Creates volume `id` on the plugin itself, as an operator would before
/// registering it.
fn create_on_plugin<P: Hostpath>(rig: &Rig<P>, id: &str) {
    rig.plugin
        .csi_client()
        .create_volume(&CreateVolume {
            name: id.into(),
            capacity: CapacityRange {
                required_bytes: 1 << 20,
                limit_bytes: 0,
            },
            capabilities: vec![Capability::new(
                AccessMode::SingleNodeWriter,
                AttachmentMode::FileSystem,
            )],
            ..CreateVolume::default()
        })
        .unwrap();
}

/// A spec with mount options, to register.
fn spec_with_fs_type(id: &str, access_mode: &str, fs_type: &str) -> String {
    format!(
        "{}\nmount_options {{\n  fs_type = {fs_type:?}\n}}\n",
        spec(id, &[access_mode], Some(id))
    )
}

fn methods_of(names: &[&str]) -> Vec<String> {
    names.iter().map(|m| m.to_string()).collect()
}

// ---- claim and release ----

#[test]
fn a_claim_with_a_target_attaches_stages_publishes_and_binds_and_its_release_undoes_it_in_order() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    let target = rig.agent.dir.join("mnt/vol");

    let publish = cli_claim_at(&rig.agent, "vol", "a1", &target);
    let usage = rw_usage(SNW);
    assert_eq!(publish, rig.publish_path("vol", "a1", &usage));
    let staging = rig.staging_path("vol");
    assert_eq!(
        set(mounts_under(&rig.agent.data_dir)),
        set([staging.clone(), publish.clone()])
    );
    assert_eq!(
        mount_state(&target),
        Some(false),
        "the target is mounted rw"
    );
    assert_eq!(
        protocol_methods(&rig.plugin),
        methods_of(&[
            "ControllerPublishVolume",
            "NodeStageVolume",
            "NodePublishVolume"
        ])
    );
    let v = volume(&rig.agent, "vol");
    let claim = claim_of(&v, "a1").expect("the claim");
    assert_eq!(claim.state, "taken");
    assert_eq!(claim.mode, "write");
    assert_eq!(claim.target, target.display().to_string());
    assert_eq!(claim.publish_path, publish.display().to_string());

    // A file written through the target is in the published volume, and
    // in the plugin's volume directory.
    fs::write(target.join("hello.txt"), "through the target\n").unwrap();
    assert_eq!(
        fs::read_to_string(publish.join("hello.txt")).unwrap(),
        "through the target\n"
    );

    cli_release(&rig.agent, "vol", "a1");
    assert_eq!(mount_state(&target), None, "the target is unmounted");
    assert_eq!(
        protocol_methods(&rig.plugin),
        methods_of(&[
            "ControllerPublishVolume",
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume",
            "ControllerUnpublishVolume"
        ])
    );
    assert!(unclaimed(&volume(&rig.agent, "vol")));
    assert_eq!(
        fs::read_to_string(rig.plugin.dir.join("base/volumes/vol/hello.txt")).unwrap(),
        "through the target\n",
        "the data stays on the volume"
    );
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn the_staging_dir_is_created_mode_0700() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));
    let staging = rig.staging_path("vol");
    // The staging mount hides the directory's own mode; a bind mount of its
    // parent without submounts shows the directory beneath.
    let peek = rig.agent.dir.mkdir("peek");
    SysMounter
        .bind(staging.parent().unwrap(), &peek, false)
        .unwrap();
    let mode = fs::metadata(peek.join("vol")).map(|m| m.permissions().mode() & 0o777);
    SysMounter.unmount(&peek, UnmountMode::Normal).unwrap();
    assert_eq!(mode.unwrap(), 0o700);

    released(&rig.agent, "vol", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_node_plugin_is_claimed_and_released_without_any_controller_call() {
    if !require_root() {
        return;
    }
    let rig = Rig::attachless(PluginType::Node);
    create_on_plugin(&rig, "vol");
    connect(&rig.agent)
        .volume_register("vol.hcl", &spec("vol", &[SNW], Some("vol")))
        .expect("register on a node plugin, without validation");

    let resp = claimed(&rig.agent, &claim_req("vol", "a1"));
    let usage = rw_usage(SNW);
    assert_eq!(
        PathBuf::from(&resp.publish_path),
        rig.publish_path("vol", "a1", &usage)
    );
    assert_eq!(
        set(mounts_under(&rig.agent.data_dir)),
        set([
            rig.staging_path("vol"),
            rig.publish_path("vol", "a1", &usage)
        ])
    );
    released(&rig.agent, "vol", "a1");
    let controller_calls: Vec<String> = rig
        .plugin
        .calls()
        .into_iter()
        .filter(|l| l.starts_with("Controller") || l.starts_with("ValidateVolume"))
        .collect();
    assert_eq!(controller_calls, Vec::<String>::new());
    assert_eq!(
        protocol_methods(&rig.plugin),
        methods_of(&[
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ])
    );
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_controller_without_publish_unpublish_is_never_asked_to_attach() {
    if !require_root() {
        return;
    }
    let rig = Rig::attachless(PluginType::Monolith);
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));
    released(&rig.agent, "vol", "a1");
    assert_eq!(
        protocol_methods(&rig.plugin),
        methods_of(&[
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ])
    );
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn two_claims_share_one_staging_and_unstage_waits_for_the_second_release() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", MNMW);
    let a = claimed(&rig.agent, &claim_req("vol", "a1"));
    let b = claimed(&rig.agent, &claim_req("vol", "a2"));
    assert_ne!(a.publish_path, b.publish_path);
    let staging = rig.staging_path("vol");
    assert_eq!(
        set(mounts_under(&rig.agent.data_dir)),
        set([
            staging.clone(),
            PathBuf::from(&a.publish_path),
            PathBuf::from(&b.publish_path)
        ])
    );
    assert_eq!(count(&rig.plugin, "NodeStageVolume"), 1, "one staging");
    assert_eq!(count(&rig.plugin, "NodePublishVolume"), 2);

    released(&rig.agent, "vol", "a1");
    assert_eq!(
        count(&rig.plugin, "NodeUnstageVolume"),
        0,
        "a2 still uses the staging"
    );
    assert_eq!(count(&rig.plugin, "ControllerUnpublishVolume"), 0);
    assert_eq!(
        set(mounts_under(&rig.agent.data_dir)),
        set([staging, PathBuf::from(&b.publish_path)])
    );
    let v = volume(&rig.agent, "vol");
    assert_eq!(v.claims.len(), 1);
    assert!(taken(&v, "a2"));

    released(&rig.agent, "vol", "a2");
    assert_eq!(
        protocol_methods(&rig.plugin),
        methods_of(&[
            "ControllerPublishVolume",
            "NodeStageVolume",
            "NodePublishVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume",
            "ControllerUnpublishVolume"
        ])
    );
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

// ---- admission ----

#[test]
fn a_second_writer_on_a_single_node_writer_volume_is_refused_with_the_writer_named() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));

    let out = rig.agent.cli(&["volume", "claim", "-alloc", "a2", "vol"]);
    let line = failure_line(&out);
    assert_eq!(
        line,
        "error: volume \"vol\" (single-node-writer) already has a writer: alloc a1"
    );
    let v = volume(&rig.agent, "vol");
    assert_eq!(v.claims.len(), 1, "{v:#?}");
    assert_eq!(count(&rig.plugin, "NodePublishVolume"), 1);

    released(&rig.agent, "vol", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_reader_only_volume_refuses_a_write_claim_and_publishes_a_read_claim_read_only() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("ro", "single-node-reader-only");

    let out = rig.agent.cli(&["volume", "claim", "-alloc", "a1", "ro"]);
    let line = failure_line(&out);
    assert_eq!(
        line,
        "error: volume \"ro\" is read-only (single-node-reader-only): it refuses write claims"
    );
    assert!(unclaimed(&volume(&rig.agent, "ro")));
    assert_eq!(protocol_methods(&rig.plugin), Vec::<String>::new());

    let resp = claimed(
        &rig.agent,
        &VolumeClaimRequest {
            read_only: true,
            ..claim_req("ro", "a1")
        },
    );
    let publish = PathBuf::from(&resp.publish_path);
    assert_eq!(
        publish,
        rig.publish_path("ro", "a1", &ro_usage("single-node-reader-only"))
    );
    assert_eq!(mount_state(&publish), Some(true), "published read-only");
    assert_eq!(
        claim_of(&volume(&rig.agent, "ro"), "a1").unwrap().mode,
        "read"
    );

    released(&rig.agent, "ro", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn the_same_alloc_claiming_twice_is_idempotent() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    let first = claimed(&rig.agent, &claim_req("vol", "a1"));
    let second = claimed(&rig.agent, &claim_req("vol", "a1"));
    assert_eq!(first, second);
    assert_eq!(count(&rig.plugin, "NodePublishVolume"), 1);
    assert_eq!(volume(&rig.agent, "vol").claims.len(), 1);
    assert_eq!(
        mounts_under(
            &rig.agent
                .data_dir
                .join("csi")
                .join(PLUGIN)
                .join("per-alloc")
        ),
        [PathBuf::from(&first.publish_path)]
    );

    // One release ends it.
    released(&rig.agent, "vol", "a1");
    assert_eq!(count(&rig.plugin, "NodeUnpublishVolume"), 1);
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_writer_after_a_reader_is_never_published_writable_on_a_read_only_attachment() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    connect(&rig.agent)
        .volume_create(
            "vol.hcl",
            &spec("vol", &["single-node-reader-only", SNW], None),
        )
        .unwrap();
    claimed(
        &rig.agent,
        &VolumeClaimRequest {
            read_only: true,
            ..claim_req("vol", "reader")
        },
    );
    // The writer may be refused, or get a writable attachment; it must not
    // be published writable on the reader's read-only attachment.
    let writer = claim(&rig.agent, &claim_req("vol", "writer"));
    rig.assert_spec_order();

    // How two usages of one volume release is the next test's concern:
    // here they only have to be gone in the end.
    if writer.is_ok() {
        release(&rig.agent, "vol", "writer");
    }
    release(&rig.agent, "vol", "reader");
    wait_volume(&rig.agent, "vol", "no claim", unclaimed, LONG);
    rig.assert_nothing_left();
}

#[test]
fn a_reader_then_a_writer_share_the_one_staging_and_release_independently() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", MNMW);
    let reader = claimed(
        &rig.agent,
        &VolumeClaimRequest {
            read_only: true,
            ..claim_req("vol", "reader")
        },
    );
    let writer = claimed(&rig.agent, &claim_req("vol", "writer"));
    assert_eq!(
        count(&rig.plugin, "NodeStageVolume"),
        1,
        "one staging per volume, staged for the reader with the capability a writer needs"
    );
    assert_eq!(mount_state(Path::new(&reader.publish_path)), Some(true));
    assert_eq!(mount_state(Path::new(&writer.publish_path)), Some(false));

    // The reader's publish goes; the staging stays for the writer.
    released(&rig.agent, "vol", "reader");
    assert_eq!(
        set(mounts_under(&rig.agent.data_dir)),
        set([rig.staging_path("vol"), PathBuf::from(&writer.publish_path)])
    );
    released(&rig.agent, "vol", "writer");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_claim_on_an_unhealthy_plugin_is_refused_as_not_schedulable() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    rig.create("vol", SNW);
    rig.plugin.kill();
    rig.agent.wait_for(PLUGIN, crate::harness::unhealthy, LONG);
    assert!(!volume(&rig.agent, "vol").schedulable);

    let out = rig.agent.cli(&["volume", "claim", "-alloc", "a1", "vol"]);
    assert_eq!(
        failure_line(&out),
        "error: volume \"vol\" is not schedulable: plugin \"hp\" is not healthy"
    );
    assert!(unclaimed(&volume(&rig.agent, "vol")));
    assert_eq!(protocol_methods(&rig.plugin), Vec::<String>::new());
    rig.assert_spec_order();
}

#[test]
fn a_volume_whose_step_hangs_does_not_hold_up_another_volume() {
    if !require_root() {
        return;
    }
    let rig = Rig::start_with(PluginType::Monolith, Some("10s"));
    rig.create("slow", SNW);
    rig.create("fast", SNW);
    rig.plugin.set_faults("NodeStageVolume hang count=1\n");

    let socket = rig.agent.socket.clone();
    let req = claim_req("slow", "a1");
    let slow = spawn_call(move || AgentClient::connect(&socket)?.volume_claim(&req));
    wait_for_calls(&rig.plugin, "NodeStageVolume", 1);
    claimed(&rig.agent, &claim_req("fast", "a2"));
    // The slow volume's stage hangs until its 10 s deadline; the fast one
    // was staged and published meanwhile.
    assert!(slow.try_recv().is_err(), "the slow claim is still waiting");
    assert!(taken(&volume(&rig.agent, "fast"), "a2"));

    slow.recv_timeout(LONG)
        .expect("the slow claim answers")
        .expect("its stage is sent again after the deadline");
    released(&rig.agent, "fast", "a2");
    released(&rig.agent, "slow", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

// ---- register ----

#[test]
fn register_validates_the_capabilities_and_stores_the_volume() {
    let rig = Rig::start();
    create_on_plugin(&rig, "vol");
    let resp = connect(&rig.agent)
        .volume_register("vol.hcl", &spec("vol", &[SNW], Some("vol")))
        .expect("register");
    assert_eq!(resp.volumes[0].id, "vol");
    assert_eq!(count(&rig.plugin, "ValidateVolumeCapabilities"), 1);
    let v = volume(&rig.agent, "vol");
    assert_eq!(v.external_id, "vol");
    assert_eq!(v.capabilities, ["single-node-writer/file-system"]);
    assert!(v.schedulable);
    rig.assert_spec_order();
}

#[test]
fn register_fails_when_the_plugin_leaves_confirmed_unset_and_registers_nothing() {
    let rig = Rig::start();
    create_on_plugin(&rig, "vol");
    rig.plugin
        .set_faults("ValidateVolumeCapabilities omit-confirmed\n");
    let err = connect(&rig.agent)
        .volume_register("vol.hcl", &spec("vol", &[SNW], Some("vol")))
        .expect_err("the plugin confirmed nothing");
    let client::Error::Refused { code, message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*code, RpcStatusCode::FAILED_PRECONDITION);
    assert!(message.contains("did not confirm"), "{message}");
    assert!(
        message.contains("injected: confirmed omitted"),
        "the plugin's message is passed on: {message}"
    );
    assert_eq!(try_volume(&rig.agent, "vol").unwrap(), None);
    assert_eq!(count(&rig.plugin, "ValidateVolumeCapabilities"), 1);
    rig.assert_spec_order();
}

#[test]
fn register_fails_when_the_plugin_confirms_other_capabilities_and_registers_nothing() {
    let rig = Rig::start();
    create_on_plugin(&rig, "vol");
    rig.plugin
        .set_faults("ValidateVolumeCapabilities confirm=multi-node-reader-only,xfs\n");
    let err = connect(&rig.agent)
        .volume_register("vol.hcl", &spec_with_fs_type("vol", SNW, "ext4"))
        .expect_err("the plugin confirmed other capabilities");
    let client::Error::Refused { code, message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*code, RpcStatusCode::FAILED_PRECONDITION);
    assert!(
        message.contains("requested access mode single-node-writer, got multi-node-reader-only"),
        "{message}"
    );
    assert_eq!(try_volume(&rig.agent, "vol").unwrap(), None);
    rig.assert_spec_order();
}

// ---- failures, retries and uncertainty ----

#[test]
fn node_unpublish_failing_unavailable_three_times_is_retried_by_the_watcher_until_released() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));
    rig.plugin
        .set_faults("NodeUnpublishVolume code=UNAVAILABLE count=3\n");

    let (released, message) = release(&rig.agent, "vol", "a1");
    assert!(!released, "the first NodeUnpublishVolume failed");
    assert!(message.contains("NodeUnpublishVolume"), "{message}");
    assert!(message.contains("keeps retrying"), "{message}");
    let v = volume(&rig.agent, "vol");
    assert!(v.claims.is_empty(), "{v:#?}");
    // The watcher retries after up to 1 s, 2 s and 4 s (full jitter): the
    // claim is a past claim for a while, and says what failed and when it
    // is tried again.
    assert_eq!(v.past_claims.len(), 1, "{v:#?}");
    let past = &v.past_claims[0];
    assert_eq!(past.alloc_id, "a1");
    assert_eq!(past.state, "unpublishing");
    assert!(past.last_error.contains("NodeUnpublishVolume"), "{past:#?}");
    assert!(past.last_error.contains("injected"), "{past:#?}");
    assert!(past.next_retry_unix_ms > 0, "{past:#?}");
    let out = rig.agent.cli(&["volume", "status", "vol"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (_, past_rows) = stdout.split_once("\nPast Claims\n").expect(&stdout);
    let row = past_rows.lines().nth(1).expect(&stdout);
    assert!(row.starts_with("a1 "), "{stdout}");
    assert!(row.contains("NodeUnpublishVolume"), "{stdout}");

    wait_volume(&rig.agent, "vol", "no claim", unclaimed, LONG);
    assert_eq!(count(&rig.plugin, "NodeUnpublishVolume"), 4);
    assert_eq!(count(&rig.plugin, "NodeUnstageVolume"), 1);
    assert_eq!(count(&rig.plugin, "ControllerUnpublishVolume"), 1);
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn controller_unpublish_not_found_counts_as_success() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));
    rig.plugin
        .set_faults("ControllerUnpublishVolume code=NOT_FOUND count=1\n");

    released(&rig.agent, "vol", "a1");
    assert_eq!(
        count(&rig.plugin, "ControllerUnpublishVolume"),
        1,
        "not retried"
    );
    assert!(unclaimed(&volume(&rig.agent, "vol")));
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_node_stage_hanging_past_the_rpc_timeout_is_uncertain_and_sent_again() {
    if !require_root() {
        return;
    }
    let rig = Rig::start_with(PluginType::Monolith, Some("1s"));
    rig.create("vol", SNW);
    rig.plugin.set_faults("NodeStageVolume hang count=1\n");

    let resp = claimed(&rig.agent, &claim_req("vol", "a1"));
    assert_eq!(count(&rig.plugin, "NodeStageVolume"), 2);
    assert_eq!(count(&rig.plugin, "NodePublishVolume"), 1);
    assert!(taken(&volume(&rig.agent, "vol"), "a1"));
    assert_eq!(
        mount_state(Path::new(&resp.publish_path)),
        Some(false),
        "published"
    );

    released(&rig.agent, "vol", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_plugin_killed_mid_stage_and_restarted_lets_the_claim_complete() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    rig.create("vol", SNW);
    rig.plugin.set_faults("NodeStageVolume exit count=1\n");

    let socket = rig.agent.socket.clone();
    let req = claim_req("vol", "a1");
    let answer = spawn_call(move || AgentClient::connect(&socket)?.volume_claim(&req));
    assert_eq!(
        rig.plugin.wait_exit(WAIT),
        Some(3),
        "the plugin exits on NodeStageVolume"
    );
    // A restarted plugin reads the rules afresh, counts included.
    rig.plugin.set_faults("");
    rig.plugin.restart();

    let resp = answer
        .recv_timeout(LONG)
        .expect("the claim answers once the plugin is back")
        .expect("the claim completes");
    assert_eq!(count(&rig.plugin, "NodeStageVolume"), 2);
    assert!(taken(&volume(&rig.agent, "vol"), "a1"));
    assert_eq!(mount_state(Path::new(&resp.publish_path)), Some(false));

    released(&rig.agent, "vol", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_claim_failing_terminally_is_refused_and_rolled_back_in_order() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    rig.plugin
        .set_faults("NodePublishVolume code=INVALID_ARGUMENT count=1 message=bad target\n");

    let err = claim(&rig.agent, &claim_req("vol", "a1")).expect_err("a terminal error");
    let message = err.to_string();
    assert!(message.contains("NodePublishVolume"), "{message}");
    assert!(message.contains("bad target"), "{message}");
    wait_volume(&rig.agent, "vol", "no claim", unclaimed, LONG);
    let methods = protocol_methods(&rig.plugin);
    assert_eq!(count(&rig.plugin, "NodePublishVolume"), 1, "not retried");
    assert!(
        methods.ends_with(&methods_of(&[
            "NodeUnstageVolume",
            "ControllerUnpublishVolume"
        ])),
        "{methods:?}"
    );
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_claim_released_while_its_stage_hangs_is_refused_and_driven_back() {
    if !require_root() {
        return;
    }
    let rig = Rig::start_with(PluginType::Monolith, Some("1s"));
    rig.create("vol", SNW);
    rig.plugin.set_faults("NodeStageVolume hang count=1\n");

    let socket = rig.agent.socket.clone();
    let req = claim_req("vol", "a1");
    let answer = spawn_call(move || AgentClient::connect(&socket)?.volume_claim(&req));
    wait_for_calls(&rig.plugin, "NodeStageVolume", 1);
    let (released, message) = release(&rig.agent, "vol", "a1");
    let err = answer
        .recv_timeout(LONG)
        .expect("the claim answers")
        .expect_err("the claim was released before it was taken");
    assert!(err.to_string().contains("released"), "{err}");
    if !released {
        // The uncertain stage's timeout answered the release; the watcher
        // finishes it.
        assert!(message.contains("keeps retrying"), "{message}");
    }
    wait_volume(&rig.agent, "vol", "no claim", unclaimed, LONG);
    assert_eq!(count(&rig.plugin, "NodePublishVolume"), 0);
    assert_eq!(
        count(&rig.plugin, "NodeUnstageVolume"),
        1,
        "the uncertain stage is undone"
    );
    assert_eq!(count(&rig.plugin, "ControllerUnpublishVolume"), 1);
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn after_a_reboot_took_every_mount_the_agent_stages_publishes_and_binds_again() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    rig.create("vol", SNW);
    let target = rig.agent.dir.join("mnt/vol");
    let resp = claimed(&rig.agent, &claim_at("vol", "a1", &target));
    fs::write(target.join("kept.txt"), "kept\n").unwrap();
    rig.agent.sigkill();
    let staging = rig.staging_path("vol");
    let publish = PathBuf::from(&resp.publish_path);
    for path in [&target, &publish, &staging] {
        SysMounter.unmount(path, UnmountMode::Normal).unwrap();
    }
    assert_nothing_mounted(&rig.agent.dir.path);

    rig.agent.restart();
    wait_volume(
        &rig.agent,
        "vol",
        "the claim taken",
        |v| taken(v, "a1"),
        LONG,
    );
    assert_eq!(
        set(mounts_under(&rig.agent.data_dir)),
        set([staging, publish.clone()])
    );
    assert_eq!(mount_state(&target), Some(false));
    assert_eq!(
        fs::read_to_string(target.join("kept.txt")).unwrap(),
        "kept\n"
    );
    assert_eq!(count(&rig.plugin, "ControllerPublishVolume"), 1);
    assert_eq!(count(&rig.plugin, "NodeStageVolume"), 2);
    assert_eq!(count(&rig.plugin, "NodePublishVolume"), 2);

    released(&rig.agent, "vol", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn deregister_refuses_a_claimed_volume_and_with_force_releases_it_first() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));

    let out = rig.agent.cli(&["volume", "deregister", "vol"]);
    assert_eq!(
        failure_line(&out),
        "error: volume \"vol\" is claimed by a1 (release the claims, or use -force)"
    );
    assert!(taken(&volume(&rig.agent, "vol"), "a1"));

    let out = rig.agent.cli(&["volume", "deregister", "-force", "vol"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(try_volume(&rig.agent, "vol").unwrap(), None);
    assert_eq!(
        protocol_methods(&rig.plugin),
        methods_of(&[
            "ControllerPublishVolume",
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume",
            "ControllerUnpublishVolume"
        ])
    );
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

// ---- the agent killed mid-protocol ----

/// The claim steps that are plugin RPCs, in order.
const CLAIM_STEPS: &[&str] = &[
    "ControllerPublishVolume",
    "NodeStageVolume",
    "NodePublishVolume",
];

/// The release steps that are plugin RPCs, in order.
const RELEASE_STEPS: &[&str] = &[
    "NodeUnpublishVolume",
    "NodeUnstageVolume",
    "ControllerUnpublishVolume",
];

/// Holds `step` of a claim (with a target) in the plugin, SIGKILLs the
/// agent while the step is in flight (its `Pending` mark is durable by
/// then), restarts it without the fault, and checks that it drives the
/// claim to `taken` on its own, sending `step` once more and nothing else
/// twice; then releases it and checks nothing is left.
fn agent_killed_during_claim_step(step: &str) {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    rig.create("vol", SNW);
    let target = rig.agent.dir.join("mnt/vol");
    rig.plugin.set_faults(&format!("{step} hang count=1\n"));

    let socket = rig.agent.socket.clone();
    let req = claim_at("vol", "a1", &target);
    let answer = spawn_call(move || AgentClient::connect(&socket)?.volume_claim(&req));
    wait_for_calls(&rig.plugin, step, 1);
    rig.agent.sigkill();
    rig.plugin.set_faults("");
    let lost = answer
        .recv_timeout(WAIT)
        .expect("the claim's call ends with the agent");
    assert!(lost.is_err(), "{lost:?}");

    rig.agent.restart();
    let v = wait_volume(
        &rig.agent,
        "vol",
        "the claim taken",
        |v| taken(v, "a1"),
        LONG,
    );
    assert_eq!(v.claims.len(), 1, "no duplicated claim: {v:#?}");
    assert!(v.past_claims.is_empty(), "{v:#?}");
    let usage = rw_usage(SNW);
    assert_eq!(
        set(mounts_under(&rig.agent.data_dir)),
        set([
            rig.staging_path("vol"),
            rig.publish_path("vol", "a1", &usage)
        ]),
        "one staging, one publish"
    );
    assert_eq!(mount_state(&target), Some(false), "the target is bound");
    for m in CLAIM_STEPS {
        let expected = if *m == step { 2 } else { 1 };
        assert_eq!(
            count(&rig.plugin, m),
            expected,
            "{m}; trace:\n{}",
            rig.plugin.trace().join("\n")
        );
    }

    released(&rig.agent, "vol", "a1");
    assert_eq!(mount_state(&target), None);
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

/// Holds `step` of a release in the plugin, SIGKILLs the agent while the
/// step is in flight, restarts it without the fault, and checks that it
/// finishes the release on its own, sending `step` once more and nothing
/// else twice, and leaves no mount.
fn agent_killed_during_release_step(step: &str) {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    rig.create("vol", SNW);
    let target = rig.agent.dir.join("mnt/vol");
    claimed(&rig.agent, &claim_at("vol", "a1", &target));
    rig.plugin.set_faults(&format!("{step} hang count=1\n"));

    let socket = rig.agent.socket.clone();
    let answer = spawn_call(move || AgentClient::connect(&socket)?.volume_release("vol", "a1"));
    wait_for_calls(&rig.plugin, step, 1);
    rig.agent.sigkill();
    rig.plugin.set_faults("");
    let lost = answer
        .recv_timeout(WAIT)
        .expect("the release's call ends with the agent");
    assert!(lost.is_err(), "{lost:?}");

    rig.agent.restart();
    wait_volume(&rig.agent, "vol", "no claim", unclaimed, LONG);
    assert_eq!(mount_state(&target), None);
    for m in CLAIM_STEPS {
        assert_eq!(count(&rig.plugin, m), 1, "{m}");
    }
    for m in RELEASE_STEPS {
        let expected = if *m == step { 2 } else { 1 };
        assert_eq!(
            count(&rig.plugin, m),
            expected,
            "{m}; trace:\n{}",
            rig.plugin.trace().join("\n")
        );
    }
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn an_agent_killed_during_controller_publish_finishes_the_claim_after_restart() {
    agent_killed_during_claim_step("ControllerPublishVolume");
}

#[test]
fn an_agent_killed_during_node_stage_finishes_the_claim_after_restart() {
    agent_killed_during_claim_step("NodeStageVolume");
}

#[test]
fn an_agent_killed_during_node_publish_finishes_the_claim_after_restart() {
    agent_killed_during_claim_step("NodePublishVolume");
}

#[test]
fn an_agent_killed_during_node_unpublish_finishes_the_release_after_restart() {
    agent_killed_during_release_step("NodeUnpublishVolume");
}

#[test]
fn an_agent_killed_during_node_unstage_finishes_the_release_after_restart() {
    agent_killed_during_release_step("NodeUnstageVolume");
}

#[test]
fn an_agent_killed_during_controller_unpublish_finishes_the_release_after_restart() {
    agent_killed_during_release_step("ControllerUnpublishVolume");
}

/// A claim's steps run as one job, which asks before each RPC whether to
/// go on: a release that comes meanwhile stops it there, as it stopped the
/// step-by-step protocol, instead of waiting for the claim to finish.
#[test]
fn a_release_during_a_claim_stops_its_steps_before_the_next_rpc() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    let target = rig.agent.dir.join("mnt/vol");
    rig.plugin.set_faults("NodeStageVolume sleep=1s count=1\n");

    let socket = rig.agent.socket.clone();
    let req = claim_at("vol", "a1", &target);
    let answer = spawn_call(move || AgentClient::connect(&socket)?.volume_claim(&req));
    wait_for_calls(&rig.plugin, "NodeStageVolume", 1);
    released(&rig.agent, "vol", "a1");
    let claim = answer.recv_timeout(WAIT).expect("the claim is answered");
    assert!(claim.is_err(), "{claim:?}");

    assert_eq!(
        count(&rig.plugin, "NodePublishVolume"),
        0,
        "trace:\n{}",
        rig.plugin.trace().join("\n")
    );
    assert_eq!(mount_state(&target), None);
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

// ---- reconciliation ----

#[test]
fn at_start_a_stray_mount_of_a_known_volume_is_unmounted_an_unknown_one_left_and_a_claims_mounts_stay(
) {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    rig.create("vol", SNW);
    let resp = claimed(&rig.agent, &claim_req("vol", "a1"));
    rig.agent.sigkill();

    // A bind mount where a publish would be, that no claim owns.
    let stray = rig.publish_path("vol", "ghost", &rw_usage(SNW));
    fs::create_dir_all(&stray).unwrap();
    let source = rig.agent.dir.mkdir("stray-source");
    SysMounter.bind(&source, &stray, false).unwrap();
    assert_eq!(mount_state(&stray), Some(false));
    // And one no volume the agent knows explains: not the agent's to undo.
    let foreign = rig.publish_path("unknown", "ghost", &rw_usage(SNW));
    fs::create_dir_all(&foreign).unwrap();
    SysMounter.bind(&source, &foreign, false).unwrap();
    let before = protocol_methods(&rig.plugin);

    rig.agent.restart();
    wait_for_unmount(&stray);
    rig.agent
        .wait_for_log(&format!("Unmounting {} (", stray.display()), WAIT);
    rig.agent
        .wait_for_log(&format!("Leaving {} (", foreign.display()), WAIT);
    assert_eq!(mount_state(&foreign), Some(false), "left alone");
    SysMounter.unmount(&foreign, UnmountMode::Normal).unwrap();
    let _ = fs::remove_dir_all(
        rig.agent
            .data_dir
            .join("csi")
            .join(PLUGIN)
            .join("per-alloc/ghost"),
    );
    let v = volume(&rig.agent, "vol");
    assert!(taken(&v, "a1"), "{v:#?}");
    assert_eq!(
        set(mounts_under(&rig.agent.data_dir)),
        set([rig.staging_path("vol"), PathBuf::from(&resp.publish_path)]),
        "the claim's mounts stay"
    );
    assert_eq!(
        protocol_methods(&rig.plugin),
        before,
        "no re-stage, no re-publish"
    );

    released(&rig.agent, "vol", "a1");
    rig.assert_spec_order();
    assert_nothing_mounted(&rig.agent.dir.path);
}

#[test]
fn a_restart_keeps_mounted_claims_as_they_are_when_the_data_dir_is_reached_through_a_symlink() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_with_env(&[("RUST_LOG", "csi_agent=debug")]);
    let mut agent = Agent::start(&[]);
    assert_eq!(agent.sigterm(), 0);
    // As on hosts where /var/lib is a symlink: mountinfo names the real
    // path, the config the link.
    let link = agent.dir.join("data-link");
    std::os::unix::fs::symlink(&agent.data_dir, &link).unwrap();
    agent.write_config(&config_text(
        &link,
        &plugin.socket,
        PluginType::Monolith,
        None,
    ));
    agent.restart();
    agent.wait_for(PLUGIN, healthy, WAIT);
    let mut rig = Rig { agent, plugin };
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));

    rig.agent.sigkill();
    rig.agent.restart();
    wait_volume(
        &rig.agent,
        "vol",
        "the claim taken",
        |v| taken(v, "a1"),
        LONG,
    );
    assert_eq!(
        mounts_under(&rig.agent.data_dir).len(),
        2,
        "staging and publish"
    );
    assert_eq!(
        count(&rig.plugin, "NodeStageVolume"),
        1,
        "no re-stage of a mounted staging; trace:\n{}",
        rig.plugin.trace().join("\n")
    );
    assert_eq!(count(&rig.plugin, "NodePublishVolume"), 1, "no re-publish");

    released(&rig.agent, "vol", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

/// Waits until `path` is no mount point.
#[track_caller]
fn wait_for_unmount(path: &Path) {
    let start = std::time::Instant::now();
    while mount_state(path).is_some() {
        assert!(
            start.elapsed() < WAIT,
            "{} is still mounted",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

// ---- dev mode ----

#[test]
fn agent_dev_demo_volume_is_claimed_with_a_target_written_and_released() {
    if !require_root() {
        return;
    }
    let agent = Agent::start_dev();
    agent.wait_for("hostpath", healthy, WAIT);
    // Listed from the moment it is being created; claimable once created.
    let v = wait_volume(&agent, "demo", "created", |v| v.created, WAIT);
    assert_eq!(v.capabilities, ["single-node-writer/file-system"]);
    assert!(v.schedulable);

    let target = agent.dir.join("mnt/demo");
    let publish = cli_claim_at(&agent, "demo", "newcomer", &target);
    fs::write(target.join("hello.txt"), "hello from the newcomer\n").unwrap();
    assert_eq!(
        fs::read_to_string(publish.join("hello.txt")).unwrap(),
        "hello from the newcomer\n"
    );
    cli_release(&agent, "demo", "newcomer");
    assert_eq!(mount_state(&target), None);
    assert_nothing_mounted(&agent.dir.path);
    assert!(unclaimed(&volume(&agent, "demo")));
}
