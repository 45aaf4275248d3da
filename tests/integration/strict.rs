//! The hostpath plugin's strict mode over real gRPC: what a conforming CO
//! never sends is refused with FAILED_PRECONDITION `strict: <rule>: ...`
//! and recorded in the verdict file, and a conforming lifecycle leaves the
//! verdict empty.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::csi::proto::{csi as pb, csi_grpc};
use csi_agent::csi::types::StringMap;
use csi_agent::csi::{Client, Code, Secrets};
use grpcio::{CallOption, ChannelBuilder, RpcStatusCode};
use protobuf::Message;

use crate::requests::{attach, create_req, detach, mount_cap, publish_req, stage_req};
use crate::util::{mounts_under, require_root, Plugin, NODE};

/// Asserts that `result` is a strict refusal of `rule`.
fn assert_refused<T: std::fmt::Debug>(result: Result<T, csi_agent::csi::Error>, rule: &str) {
    let err = result.unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    assert!(
        err.message.starts_with(&format!("strict: {rule}: ")),
        "{err}"
    );
}

fn create(client: &Client, name: &str) {
    client
        .create_volume(&create_req(name, &mount_cap(), 1 << 20))
        .unwrap();
}

/// A raw channel to the plugin, for requests our client never builds.
fn channel(plugin: &Plugin) -> grpcio::Channel {
    ChannelBuilder::new(csi_agent::grpc::grpc_environment())
        .connect(&plugin.endpoint().grpc_target())
}

fn opt() -> CallOption {
    CallOption::default().timeout(Duration::from_secs(10))
}

#[test]
fn a_conforming_lifecycle_leaves_an_empty_verdict() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    assert_eq!(plugin.violations(), Vec::<String>::new(), "created empty");
    let client = plugin.client();
    let cap = mount_cap();
    create(&client, "v");
    let ctx = attach(&client, "v", &cap);
    let staging = plugin.dir.mkdir("staging/v");
    let stage = stage_req("v", &staging, &ctx, &cap);
    client.node_stage(&stage).unwrap();
    client.node_stage(&stage).unwrap();
    let target = plugin.dir.mkdir("per-alloc/a1").join("v");
    let reader = plugin.dir.mkdir("per-alloc/a2").join("v");
    client
        .node_publish(&publish_req("v", &staging, &target, &ctx, &cap, false))
        .unwrap();
    client
        .node_publish(&publish_req("v", &staging, &reader, &ctx, &cap, true))
        .unwrap();
    client.node_volume_stats("v", &target, None).unwrap();
    client.node_unpublish("v", &target).unwrap();
    client.node_unpublish("v", &reader).unwrap();
    client.node_unpublish("v", &reader).unwrap();
    client.node_unstage("v", &staging).unwrap();
    client.node_unstage("v", &staging).unwrap();
    detach(&client, "v").unwrap();
    detach(&client, "v").unwrap();
    client.delete_volume("v", &Secrets::new()).unwrap();
    client.list_volumes(0, "").unwrap();
    client.node_info().unwrap();
    assert!(mounts_under(&plugin.dir.path).is_empty());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_second_staging_path_is_refused_and_recorded() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let cap = mount_cap();
    create(&client, "v");
    let ctx = attach(&client, "v", &cap);
    let first = plugin.dir.mkdir("staging/v/rw");
    let second = plugin.dir.mkdir("staging/v/ro");
    client
        .node_stage(&stage_req("v", &first, &ctx, &cap))
        .unwrap();
    assert_refused(
        client.node_stage(&stage_req("v", &second, &ctx, &cap)),
        "only one staging_target_path per volume",
    );
    assert!(mounts_under(&second).is_empty(), "nothing was mounted");
    assert_eq!(
        plugin.violations(),
        vec!["NodeStageVolume v: only one staging_target_path per volume"]
    );
}

#[test]
fn without_strict_a_second_staging_path_is_served_and_nothing_is_recorded() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_lenient_with(&[], &[]);
    let client = plugin.client();
    let cap = mount_cap();
    create(&client, "v");
    let ctx = attach(&client, "v", &cap);
    for usage in ["rw", "ro"] {
        let staging = plugin.dir.mkdir(&format!("staging/v/{usage}"));
        client
            .node_stage(&stage_req("v", &staging, &ctx, &cap))
            .unwrap();
    }
    assert!(!plugin.dir.join("base/strict-violations").exists());
}

#[test]
fn publish_before_stage_and_stage_without_publish_context_are_refused() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let cap = mount_cap();
    create(&client, "v");
    let staging = plugin.dir.mkdir("staging/v");
    assert_refused(
        client.node_stage(&stage_req("v", &staging, &StringMap::new(), &cap)),
        "NodeStageVolume and NodePublishVolume pass ControllerPublishVolume's publish_context",
    );
    let ctx = attach(&client, "v", &cap);
    assert_refused(
        client.node_stage(&stage_req("v", &staging, &StringMap::new(), &cap)),
        "NodeStageVolume and NodePublishVolume pass ControllerPublishVolume's publish_context",
    );
    let target = plugin.dir.mkdir("per-alloc/a1").join("v");
    assert_refused(
        client.node_publish(&publish_req("v", &staging, &target, &ctx, &cap, false)),
        "NodePublishVolume only after NodeStageVolume at its staging_target_path",
    );
    let mut unstaged = publish_req("v", &staging, &target, &ctx, &cap, false);
    unstaged.staging_target_path = None;
    assert_refused(
        client.node_publish(&unstaged),
        "NodePublishVolume only after NodeStageVolume at its staging_target_path",
    );
    assert!(!target.exists(), "the refused publish made no target");
    let context = "NodeStageVolume and NodePublishVolume pass ControllerPublishVolume's \
                   publish_context";
    let order = "NodePublishVolume only after NodeStageVolume at its staging_target_path";
    assert_eq!(
        plugin.violations(),
        vec![
            format!("NodeStageVolume v: {context}"),
            format!("NodeStageVolume v: {context}"),
            format!("NodePublishVolume v: {order}"),
            format!("NodePublishVolume v: {order}"),
        ]
    );
}

#[test]
fn unstage_while_published_and_detach_while_staged_are_refused() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let cap = mount_cap();
    create(&client, "v");
    let ctx = attach(&client, "v", &cap);
    let staging = plugin.dir.mkdir("staging/v");
    client
        .node_stage(&stage_req("v", &staging, &ctx, &cap))
        .unwrap();
    assert_refused(
        detach(&client, "v"),
        "ControllerUnpublishVolume only after NodeUnstageVolume on that node",
    );
    let target = plugin.dir.mkdir("per-alloc/a1").join("v");
    client
        .node_publish(&publish_req("v", &staging, &target, &ctx, &cap, false))
        .unwrap();
    assert_refused(
        client.node_unstage("v", &staging),
        "NodeUnstageVolume only after every NodeUnpublishVolume of the staging",
    );
    assert_eq!(mounts_under(&plugin.dir.path).len(), 2, "both mounts stay");
    assert_eq!(
        plugin.violations(),
        vec![
            "ControllerUnpublishVolume v: ControllerUnpublishVolume only after \
             NodeUnstageVolume on that node",
            "NodeUnstageVolume v: NodeUnstageVolume only after every NodeUnpublishVolume of \
             the staging",
        ]
    );
}

#[test]
fn a_restarted_strict_plugin_remembers_what_is_staged_and_its_verdict() {
    if !require_root() {
        return;
    }
    let mut plugin = Plugin::start_strict();
    let client = plugin.client();
    let cap = mount_cap();
    create(&client, "v");
    let ctx = attach(&client, "v", &cap);
    let staging = plugin.dir.mkdir("staging/v");
    client
        .node_stage(&stage_req("v", &staging, &ctx, &cap))
        .unwrap();
    let target = plugin.dir.mkdir("per-alloc/a1").join("v");
    client
        .node_publish(&publish_req("v", &staging, &target, &ctx, &cap, false))
        .unwrap();
    assert!(detach(&client, "v").is_err());
    plugin.kill();
    plugin.restart();
    let client = plugin.client();
    assert_refused(
        client.node_unstage("v", &staging),
        "NodeUnstageVolume only after every NodeUnpublishVolume of the staging",
    );
    let other = plugin.dir.mkdir("staging/other");
    assert_refused(
        client.node_stage(&stage_req("v", &other, &ctx, &cap)),
        "only one staging_target_path per volume",
    );
    client.node_unpublish("v", &target).unwrap();
    client.node_unstage("v", &staging).unwrap();
    detach(&client, "v").unwrap();
    assert_eq!(plugin.violations().len(), 3, "{:?}", plugin.violations());
    assert!(plugin.violations()[0].starts_with("ControllerUnpublishVolume v: "));
}

#[test]
fn two_calls_in_flight_for_one_volume_are_refused() {
    let plugin = Plugin::start_strict();
    plugin.set_faults("CreateVolume sleep=3s count=1\n");
    let client = plugin.client();
    let slow = {
        let client = client.clone();
        thread::spawn(move || client.create_volume(&create_req("v", &mount_cap(), 1 << 20)))
    };
    // Wait until the slow call has arrived (it is traced before it runs).
    let start = Instant::now();
    while !plugin.trace_methods().contains(&"CreateVolume".to_string()) {
        assert!(start.elapsed() < Duration::from_secs(5), "never arrived");
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(300));
    assert_refused(
        client.create_volume(&create_req("v", &mount_cap(), 1 << 20)),
        "at most one call in flight per volume",
    );
    // Another volume is not held up.
    create(&client, "w");
    slow.join().unwrap().unwrap();
    create(&client, "v");
    assert_eq!(
        plugin.violations(),
        vec!["CreateVolume v: at most one call in flight per volume"]
    );
}

#[test]
fn a_call_the_co_gave_up_on_is_no_longer_in_flight() {
    let plugin = Plugin::start_strict();
    plugin.set_faults("CreateVolume sleep=2s count=1\n");
    let impatient = plugin.client().with_timeout(Duration::from_millis(300));
    let err = impatient
        .create_volume(&create_req("v", &mount_cap(), 1 << 20))
        .unwrap_err();
    assert_eq!(err.code, Code::DeadlineExceeded);
    // The plugin's deadline for the call runs from when it received it, a
    // moment after the client sent it: under load, a retry sent the
    // instant the client gave up can reach the plugin before its own
    // deadline passes. The agent's retries come after a backoff; so does
    // this one.
    thread::sleep(Duration::from_millis(200));
    // The plugin still works on the first call: the retry overlaps it, as
    // the spec allows once the CO has seen the call time out.
    create(&plugin.client(), "v");
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn rpcs_of_capabilities_not_advertised_are_refused() {
    let plugin = Plugin::start_strict_with(&["-no-attach"]);
    let client = plugin.client();
    let cap = mount_cap();
    create(&client, "v");
    let err = client
        .controller_publish(&csi_agent::csi::types::ControllerPublish {
            volume_id: "v".into(),
            node_id: NODE.into(),
            capability: cap.clone(),
            read_only: false,
            secrets: Secrets::new(),
            volume_context: StringMap::new(),
        })
        .map(drop);
    assert_refused(err, "only RPCs of capabilities the plugin advertised");
    let controller = csi_grpc::ControllerClient::new(channel(&plugin));
    let mut modify = pb::ControllerModifyVolumeRequest::new();
    modify.volume_id = "v".into();
    let err = controller
        .controller_modify_volume_opt(&modify, opt())
        .unwrap_err();
    match err {
        grpcio::Error::RpcFailure(status) => {
            assert_eq!(status.code(), RpcStatusCode::FAILED_PRECONDITION);
            assert!(
                status.message().contains(
                    "the plugin does not advertise the controller capability modify-volume"
                ),
                "{}",
                status.message()
            );
        }
        other => panic!("{other:?}"),
    }
    let err = controller
        .get_snapshot_opt(&pb::GetSnapshotRequest::new(), opt())
        .unwrap_err();
    assert!(
        matches!(&err, grpcio::Error::RpcFailure(s) if s.code() == RpcStatusCode::FAILED_PRECONDITION),
        "{err:?}"
    );
    assert_eq!(
        plugin.violations(),
        vec![
            "ControllerPublishVolume v: only RPCs of capabilities the plugin advertised",
            "ControllerModifyVolume v: only RPCs of capabilities the plugin advertised",
            "GetSnapshot -: only RPCs of capabilities the plugin advertised",
        ]
    );
}

#[test]
fn without_strict_an_unadvertised_rpc_is_unimplemented() {
    let plugin = Plugin::start_lenient_with(&[], &[]);
    let controller = csi_grpc::ControllerClient::new(channel(&plugin));
    let err = controller
        .controller_modify_volume_opt(&pb::ControllerModifyVolumeRequest::new(), opt())
        .unwrap_err();
    assert!(
        matches!(&err, grpcio::Error::RpcFailure(s) if s.code() == RpcStatusCode::UNIMPLEMENTED),
        "{err:?}"
    );
}

#[test]
fn secrets_on_an_rpc_that_takes_none_are_refused() {
    let plugin = Plugin::start_strict();
    let node = csi_grpc::NodeClient::new(channel(&plugin));
    let mut unstage = pb::NodeUnstageVolumeRequest::new();
    unstage.volume_id = "v".into();
    unstage.staging_target_path = plugin.dir.join("staging/v").display().to_string();
    // A map<string, string> entry {"user": "s3cret"} under a field number
    // NodeUnstageVolumeRequest does not define, as a CO that sends secrets
    // to every RPC would encode it.
    let mut entry = vec![0x0a, 4];
    entry.extend_from_slice(b"user");
    entry.extend_from_slice(&[0x12, 6]);
    entry.extend_from_slice(b"s3cret");
    unstage.mut_unknown_fields().add_length_delimited(3, entry);
    let err = node.node_unstage_volume_opt(&unstage, opt()).unwrap_err();
    match err {
        grpcio::Error::RpcFailure(status) => {
            assert_eq!(status.code(), RpcStatusCode::FAILED_PRECONDITION);
            assert!(
                status
                    .message()
                    .starts_with("strict: secrets only on RPCs that take them: "),
                "{}",
                status.message()
            );
        }
        other => panic!("{other:?}"),
    }
    // The same request without them is fine (a harmless repeat).
    unstage.mut_unknown_fields().clear();
    node.node_unstage_volume_opt(&unstage, opt()).unwrap();
    assert_eq!(
        plugin.violations(),
        vec!["NodeUnstageVolume v: secrets only on RPCs that take them"]
    );
    let log = fs::read_to_string(plugin.dir.join("plugin.log")).unwrap();
    assert!(!log.contains("s3cret"), "secrets never reach the log");
}

#[test]
fn a_request_that_does_not_decode_is_refused_naming_its_rpc_and_the_plugin_serves_on() {
    let plugin = Plugin::start_lenient_with(&[], &[]);
    let raw = grpcio::Client::new(channel(&plugin));
    let stage = csi_agent::grpc::bytes_method(csi_grpc::METHOD_NODE_NODE_STAGE_VOLUME.name);
    // Field 31 with wire type 7, which protobuf does not have.
    let err = raw.unary_call(&stage, &vec![0xff], opt()).unwrap_err();
    match err {
        grpcio::Error::RpcFailure(status) => {
            assert_eq!(status.code(), RpcStatusCode::INVALID_ARGUMENT);
            assert!(
                status
                    .message()
                    .starts_with("/csi.v1.Node/NodeStageVolume: the request does not decode: "),
                "{}",
                status.message()
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(plugin.client().probe().is_ok(), "the plugin serves on");
}
