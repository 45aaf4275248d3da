//! The hostpath plugin split in two processes on one base dir, as real
//! deployments run a CSI plugin: `-mode controller` serves Identity and
//! Controller, `-mode node` Identity and Node, and each sees what the other
//! did through the shared state. Strict mode judges each process with what
//! it can see and what the other recorded. Snapshots, clones and the
//! controller's half of an expansion are the controller process's,
//! NodeExpandVolume and stats the node's.

use std::fs::{self, File};
use std::path::PathBuf;

use csi_agent::csi::types::{
    CapacityRange, ContentSource, ControllerExpand, ListSnapshots, NodeExpand, PluginCapability,
};
use csi_agent::csi::{Code, Secrets};
use csi_agent::sys::flock;

use crate::requests::{
    attach, create_from, create_req, detach, mount_cap, publish_req, snapshot_req, stage_req,
};
use crate::util::{mounts_under, require_root, Plugin};

/// A strict controller process and a strict node process on one base dir.
fn split() -> (Plugin, Plugin) {
    let controller = Plugin::start_strict_with(&["-mode", "controller"]);
    let node = Plugin::start_sharing(&controller, &[], &["-mode", "node"]);
    (controller, node)
}

#[test]
fn only_the_controller_process_advertises_the_controller_service() {
    let (controller, node) = split();
    let caps = controller.client().plugin_capabilities().unwrap();
    assert!(caps.contains(&PluginCapability::ControllerService));
    let caps = node.client().plugin_capabilities().unwrap();
    assert!(!caps.contains(&PluginCapability::ControllerService));
    assert!(caps.contains(&PluginCapability::VolumeAccessibilityConstraints));
    assert!(node.client().node_info().is_ok());
    assert!(controller.client().controller_capabilities().is_ok());
}

#[test]
fn a_volume_lives_through_both_processes_with_each_rpc_on_its_own_service() {
    if !require_root() {
        return;
    }
    let (controller, node) = split();
    let (c, n) = (controller.client(), node.client());
    let cap = mount_cap();
    c.create_volume(&create_req("v", &cap, 1 << 20)).unwrap();
    let ctx = attach(&c, "v", &cap);
    // The node process sees the controller's attachment in the shared state.
    let staging = node.dir.mkdir("staging/v");
    n.node_stage(&stage_req("v", &staging, &ctx, &cap)).unwrap();
    let target = node.dir.mkdir("per-alloc/a1").join("v");
    n.node_publish(&publish_req("v", &staging, &target, &ctx, &cap, false))
        .unwrap();
    fs::write(target.join("hello.txt"), "hello").unwrap();
    assert_eq!(
        fs::read_to_string(controller.base.join("volumes/v/hello.txt")).unwrap(),
        "hello"
    );
    n.node_unpublish("v", &target).unwrap();
    n.node_unstage("v", &staging).unwrap();
    detach(&c, "v").unwrap();
    c.delete_volume("v", &Secrets::new()).unwrap();
    assert_eq!(mounts_under(&node.dir.path), Vec::<PathBuf>::new());
    let methods = |p: &Plugin| -> Vec<String> {
        p.trace_methods()
            .into_iter()
            .filter(|m| m.starts_with("Node") || m.starts_with("Controller"))
            .filter(|m| !m.ends_with("Capabilities") && m != "NodeGetInfo")
            .collect()
    };
    assert_eq!(
        methods(&controller),
        ["ControllerPublishVolume", "ControllerUnpublishVolume"]
    );
    assert_eq!(
        methods(&node),
        [
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ]
    );
}

#[test]
fn each_process_refuses_the_rpcs_of_the_service_it_does_not_serve() {
    let (controller, node) = split();
    let err = controller.client().node_info().unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    assert!(
        err.message
            .contains("runs in controller mode: it does not serve the node service"),
        "{err}"
    );
    let err = node.client().controller_capabilities().unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    let expected = [
        "NodeGetInfo -: only RPCs of capabilities the plugin advertised",
        "ControllerGetCapabilities -: only RPCs of capabilities the plugin advertised",
    ];
    // One verdict for both processes.
    assert_eq!(controller.violations(), expected);
    assert_eq!(node.violations(), expected);
}

#[test]
fn without_strict_a_split_process_answers_the_other_service_unimplemented() {
    let controller = Plugin::start_lenient_with(&[], &["-mode", "controller"]);
    let err = controller.client().node_info().unwrap_err();
    assert_eq!(err.code, Code::Unimplemented, "{err}");
    assert_eq!(
        err.message,
        "NodeGetInfo is not served: this process of the plugin runs in controller mode"
    );
}

#[test]
fn the_controller_process_refuses_a_detach_while_the_node_process_has_the_volume_staged() {
    if !require_root() {
        return;
    }
    let (controller, node) = split();
    let (c, n) = (controller.client(), node.client());
    let cap = mount_cap();
    c.create_volume(&create_req("v", &cap, 1 << 20)).unwrap();
    let ctx = attach(&c, "v", &cap);
    let staging = node.dir.mkdir("staging/v");
    n.node_stage(&stage_req("v", &staging, &ctx, &cap)).unwrap();
    let err = detach(&c, "v").unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    assert!(
        err.message.starts_with(
            "strict: ControllerUnpublishVolume only after NodeUnstageVolume on that node: "
        ),
        "{err}"
    );
    assert_eq!(
        controller.violations(),
        ["ControllerUnpublishVolume v: ControllerUnpublishVolume only after NodeUnstageVolume on that node"]
    );
    n.node_unstage("v", &staging).unwrap();
    detach(&c, "v").unwrap();
    node.violations();
}

#[test]
fn a_call_for_a_volume_the_other_process_has_in_flight_is_refused() {
    let (controller, node) = split();
    let c = controller.client();
    let cap = mount_cap();
    c.create_volume(&create_req("v", &cap, 1 << 20)).unwrap();
    // The test holds the volume's lock as the node process does while it
    // has a call for it in flight.
    let lock = File::create(controller.base.join("in-flight/v")).unwrap();
    assert!(flock::try_lock_exclusive(&lock).unwrap());
    let err = c.validate_volume(&csi_agent::csi::types::ValidateVolume {
        volume_id: "v".into(),
        capabilities: vec![cap.clone()],
        ..Default::default()
    });
    let err = err.unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    assert_eq!(
        err.message,
        "strict: at most one call in flight per volume: a call for volume v is in flight in another process of the plugin"
    );
    drop(lock);
    attach(&c, "v", &cap);
    detach(&c, "v").unwrap();
    assert_eq!(
        controller.violations(),
        ["ValidateVolumeCapabilities v: at most one call in flight per volume"]
    );
    node.violations();
}

#[test]
fn snapshots_clones_and_expansion_go_through_the_process_of_their_service() {
    if !require_root() {
        return;
    }
    let (controller, node) = split();
    let (c, n) = (controller.client(), node.client());
    let cap = mount_cap();
    c.create_volume(&create_req("v", &cap, 1 << 20)).unwrap();
    let ctx = attach(&c, "v", &cap);
    let staging = node.dir.mkdir("staging/v");
    n.node_stage(&stage_req("v", &staging, &ctx, &cap)).unwrap();
    let target = node.dir.mkdir("per-alloc/a1").join("v");
    n.node_publish(&publish_req("v", &staging, &target, &ctx, &cap, false))
        .unwrap();
    fs::write(target.join("hello.txt"), "hello").unwrap();

    // The controller copies what the node's publish wrote: one base dir.
    let snap = c.create_snapshot(&snapshot_req("snap", "v")).unwrap();
    assert_eq!(snap.source_volume_id, "v");
    c.create_volume(&create_from(
        "restored",
        &cap,
        1 << 20,
        ContentSource::Snapshot(snap.snapshot_id.clone()),
    ))
    .unwrap();
    c.create_volume(&create_from(
        "clone",
        &cap,
        1 << 20,
        ContentSource::Volume("v".into()),
    ))
    .unwrap();
    for copy in ["restored", "clone"] {
        let file = controller.base.join("volumes").join(copy).join("hello.txt");
        assert_eq!(fs::read_to_string(&file).unwrap(), "hello", "{copy}");
    }
    // The controller reads the node's staging and its own attachment.
    let listed = c.controller_get_volume("v").unwrap();
    assert_eq!(listed.published_node_ids, [crate::util::NODE]);
    assert!(!listed.condition.unwrap().abnormal);

    // Expansion: the controller records the capacity, the node answers it.
    let bigger = CapacityRange {
        required_bytes: 2 << 20,
        limit_bytes: 0,
    };
    let expanded = c
        .controller_expand(&ControllerExpand {
            volume_id: "v".into(),
            capacity: bigger,
            secrets: Secrets::new(),
            capability: None,
        })
        .unwrap();
    assert_eq!(expanded.capacity_bytes, 2 << 20);
    let answered = n
        .node_expand(&NodeExpand {
            volume_id: "v".into(),
            volume_path: target.clone(),
            capacity: bigger,
            staging_target_path: Some(staging.clone()),
            capability: Some(cap.clone()),
            secrets: Secrets::new(),
        })
        .unwrap();
    assert_eq!(answered, 2 << 20);
    assert!(n.node_volume_stats("v", &target, Some(&staging)).is_ok());

    n.node_unpublish("v", &target).unwrap();
    n.node_unstage("v", &staging).unwrap();
    detach(&c, "v").unwrap();
    c.delete_snapshot(&snap.snapshot_id, &Secrets::new())
        .unwrap();
    for volume in ["v", "restored", "clone"] {
        c.delete_volume(volume, &Secrets::new()).unwrap();
    }
    assert_eq!(mounts_under(&node.dir.path), Vec::<PathBuf>::new());
    let methods = |p: &Plugin| -> Vec<String> {
        p.trace_methods()
            .into_iter()
            .filter(|m| m.contains("Snapshot") || m.contains("Expand") || m.contains("GetVolume"))
            .collect()
    };
    assert_eq!(
        methods(&controller),
        [
            "CreateSnapshot",
            "ControllerGetVolume",
            "ControllerExpandVolume",
            "DeleteSnapshot"
        ]
    );
    assert_eq!(methods(&node), ["NodeExpandVolume", "NodeGetVolumeStats"]);
}

#[test]
fn a_node_process_refuses_snapshots_and_volume_reads_and_a_controller_one_node_expansion() {
    let (controller, node) = split();
    let (c, n) = (controller.client(), node.client());
    let cap = mount_cap();
    c.create_volume(&create_req("v", &cap, 1 << 20)).unwrap();
    let refused = [
        n.create_snapshot(&snapshot_req("snap", "v")).map(drop),
        n.list_snapshots(&ListSnapshots::default()).map(drop),
        n.controller_get_volume("v").map(drop),
        c.node_expand(&NodeExpand {
            volume_id: "v".into(),
            volume_path: controller.dir.join("target"),
            capacity: CapacityRange {
                required_bytes: 2 << 20,
                limit_bytes: 0,
            },
            staging_target_path: None,
            capability: None,
            secrets: Secrets::new(),
        })
        .map(drop),
        c.node_volume_stats("v", &controller.dir.join("target"), None)
            .map(drop),
    ];
    for result in refused {
        let err = result.unwrap_err();
        assert_eq!(err.code, Code::FailedPrecondition, "{err}");
        assert!(
            err.message.contains(" mode: it does not serve the "),
            "{err}"
        );
    }
    let rule = "only RPCs of capabilities the plugin advertised";
    assert_eq!(
        controller.violations(),
        [
            format!("CreateSnapshot v: {rule}"),
            format!("ListSnapshots -: {rule}"),
            format!("ControllerGetVolume v: {rule}"),
            format!("NodeExpandVolume v: {rule}"),
            format!("NodeGetVolumeStats v: {rule}"),
        ]
    );
    node.violations();
    // Without strict, the other service's RPCs are UNIMPLEMENTED.
    let lenient = Plugin::start_lenient_with(&[], &["-mode", "node"]);
    let err = lenient
        .client()
        .create_snapshot(&snapshot_req("snap", "v"))
        .unwrap_err();
    assert_eq!(err.code, Code::Unimplemented, "{err}");
    assert_eq!(
        err.message,
        "CreateSnapshot is not served: this process of the plugin runs in node mode"
    );
}
