//! The hostpath plugin split in two processes on one base dir, as real
//! deployments run a CSI plugin: `-mode controller` serves Identity and
//! Controller, `-mode node` Identity and Node, and each sees what the other
//! did through the shared state. Strict mode judges each process with what
//! it can see and what the other recorded.

use std::fs::{self, File};
use std::path::PathBuf;

use csi_agent::csi::types::PluginCapability;
use csi_agent::csi::{Code, Secrets};
use csi_agent::sys::flock;

use crate::requests::{attach, create_req, detach, mount_cap, publish_req, stage_req};
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
