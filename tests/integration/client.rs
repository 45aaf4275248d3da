//! Every CSI RPC the agent uses, through the typed client, against the real
//! hostpath plugin on a real socket, with the mounts checked in mountinfo.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use csi_agent::csi::backoff::{self, Backoff};
use csi_agent::csi::types::*;
use csi_agent::csi::{
    check_validation, AccessMode, AttachmentMode, Capability, Class, Client, Code, Endpoint,
    Secrets, Validation,
};
use csi_agent::hostpath::PUBLISH_CONTEXT_KEY;

use crate::util::{mount_state, mounts_under, require_root, Plugin, NODE};

fn rw() -> Capability {
    Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::FileSystem)
}

fn create(client: &Client, name: &str) -> Volume {
    client
        .create_volume(&CreateVolume {
            name: name.into(),
            capacity: CapacityRange {
                required_bytes: 1 << 20,
                limit_bytes: 0,
            },
            capabilities: vec![rw()],
            ..CreateVolume::default()
        })
        .unwrap()
}

fn attach(client: &Client, volume: &str) -> StringMap {
    client
        .controller_publish(&ControllerPublish {
            volume_id: volume.into(),
            node_id: NODE.into(),
            capability: rw(),
            read_only: false,
            secrets: Secrets::new(),
            volume_context: StringMap::new(),
        })
        .unwrap()
}

fn stage_req(volume: &str, staging: &Path, ctx: &StringMap) -> NodeStage {
    NodeStage {
        volume_id: volume.into(),
        publish_context: ctx.clone(),
        staging_target_path: staging.to_path_buf(),
        capability: rw(),
        secrets: Secrets::new(),
        volume_context: StringMap::new(),
    }
}

fn publish_req(
    volume: &str,
    staging: &Path,
    target: &Path,
    ctx: &StringMap,
    read_only: bool,
) -> NodePublish {
    NodePublish {
        volume_id: volume.into(),
        publish_context: ctx.clone(),
        staging_target_path: Some(staging.to_path_buf()),
        target_path: target.to_path_buf(),
        capability: rw(),
        read_only,
        secrets: Secrets::new(),
        volume_context: StringMap::new(),
    }
}

/// Creates, attaches and stages a volume; returns (publish context, staging).
fn staged(plugin: &Plugin, client: &Client, volume: &str) -> (StringMap, PathBuf) {
    create(client, volume);
    let ctx = attach(client, volume);
    let staging = plugin.dir.mkdir(&format!("staging/{volume}"));
    client
        .node_stage(&stage_req(volume, &staging, &ctx))
        .unwrap();
    (ctx, staging)
}

#[test]
fn identity_rpcs_describe_the_plugin() {
    let plugin = Plugin::start();
    let client = plugin.client();
    let info = client.plugin_info().unwrap();
    assert_eq!(info.name, "hostpath.csi-agent");
    assert_eq!(info.vendor_version, env!("CARGO_PKG_VERSION"));
    let caps = client.plugin_capabilities().unwrap();
    assert!(caps.contains(&PluginCapability::ControllerService));
    assert!(caps.contains(&PluginCapability::VolumeAccessibilityConstraints));
    assert!(caps.contains(&PluginCapability::OnlineExpansion));
    assert_eq!(client.probe(), Ok(true));
}

#[test]
fn node_info_and_capabilities() {
    let plugin = Plugin::start();
    let client = plugin.client();
    let info = client.node_info().unwrap();
    assert_eq!(info.node_id, NODE);
    assert_eq!(info.max_volumes_per_node, 0);
    let topology = info.accessible_topology.unwrap();
    assert_eq!(
        topology
            .get(csi_agent::hostpath::TOPOLOGY_KEY)
            .map(String::as_str),
        Some(NODE)
    );
    let caps = client.node_capabilities().unwrap();
    for cap in [
        NodeCapability::StageUnstageVolume,
        NodeCapability::GetVolumeStats,
        NodeCapability::ExpandVolume,
    ] {
        assert!(caps.contains(&cap), "{cap}");
    }
    let ctrl = client.controller_capabilities().unwrap();
    for cap in [
        ControllerCapability::CreateDeleteVolume,
        ControllerCapability::PublishUnpublishVolume,
        ControllerCapability::ListVolumes,
        ControllerCapability::GetCapacity,
    ] {
        assert!(ctrl.contains(&cap), "{cap}");
    }
}

#[test]
fn full_volume_lifecycle_with_real_mounts() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start();
    let client = plugin.client();
    let volume = create(&client, "vol1");
    assert_eq!(volume.volume_id, "vol1");
    assert_eq!(volume.capacity_bytes, 1 << 20);
    let ctx = attach(&client, "vol1");
    assert_eq!(ctx.get(PUBLISH_CONTEXT_KEY).map(String::as_str), Some(NODE));

    let staging = plugin.dir.mkdir("staging/vol1");
    client
        .node_stage(&stage_req("vol1", &staging, &ctx))
        .unwrap();
    assert_eq!(mount_state(&staging), Some(false), "staging is a rw mount");

    let target = plugin.dir.mkdir("per-alloc/a1").join("vol1");
    client
        .node_publish(&publish_req("vol1", &staging, &target, &ctx, false))
        .unwrap();
    assert_eq!(mount_state(&target), Some(false), "target is a rw mount");

    fs::write(target.join("hello.txt"), "hello").unwrap();
    let on_disk = plugin.dir.join("base/volumes/vol1/hello.txt");
    assert_eq!(fs::read_to_string(on_disk).unwrap(), "hello");

    let stats = client.node_volume_stats("vol1", &target, None).unwrap();
    let units: Vec<UsageUnit> = stats.usage.iter().map(|u| u.unit).collect();
    assert_eq!(units, vec![UsageUnit::Bytes, UsageUnit::Inodes]);
    assert!(stats.usage[0].total > 0 && stats.usage[0].used > 0);
    assert_eq!(stats.condition.map(|c| c.abnormal), Some(false));

    let expanded = client
        .controller_expand(&ControllerExpand {
            volume_id: "vol1".into(),
            capacity: CapacityRange {
                required_bytes: 2 << 20,
                limit_bytes: 0,
            },
            secrets: Secrets::new(),
            capability: None,
        })
        .unwrap();
    assert_eq!(
        expanded,
        Expanded {
            capacity_bytes: 2 << 20,
            node_expansion_required: false
        }
    );
    let node_capacity = client
        .node_expand(&NodeExpand {
            volume_id: "vol1".into(),
            volume_path: target.clone(),
            capacity: CapacityRange {
                required_bytes: 2 << 20,
                limit_bytes: 0,
            },
            staging_target_path: Some(staging.clone()),
            capability: Some(rw()),
            secrets: Secrets::new(),
        })
        .unwrap();
    assert_eq!(node_capacity, 2 << 20);

    let page = client.list_volumes(0, "").unwrap();
    assert_eq!(page.entries.len(), 1);
    assert_eq!(page.entries[0].published_node_ids, vec![NODE.to_string()]);
    assert!(
        client
            .capacity(&[rw()], &StringMap::new(), None)
            .unwrap()
            .available_capacity
            > 0
    );

    client.node_unpublish("vol1", &target).unwrap();
    assert_eq!(mount_state(&target), None);
    assert!(!target.exists(), "the plugin removes the target it created");
    client.node_unstage("vol1", &staging).unwrap();
    assert_eq!(mount_state(&staging), None);
    assert!(staging.exists(), "the staging dir belongs to the CO");
    client
        .controller_unpublish("vol1", NODE, &Secrets::new())
        .unwrap();
    client.delete_volume("vol1", &Secrets::new()).unwrap();
    assert!(!plugin.dir.join("base/volumes/vol1").exists());
    assert_eq!(mounts_under(&plugin.dir.path), Vec::<PathBuf>::new());

    let methods = plugin.trace_methods();
    let order = [
        "CreateVolume",
        "ControllerPublishVolume",
        "NodeStageVolume",
        "NodePublishVolume",
        "NodeUnpublishVolume",
        "NodeUnstageVolume",
        "ControllerUnpublishVolume",
        "DeleteVolume",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|m| methods.iter().position(|x| x == m).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{methods:?}");
}

#[test]
fn read_only_publish_refuses_writes() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start();
    let client = plugin.client();
    let (ctx, staging) = staged(&plugin, &client, "ro1");
    let target = plugin.dir.mkdir("per-alloc/a1").join("ro1");
    client
        .node_publish(&publish_req("ro1", &staging, &target, &ctx, true))
        .unwrap();
    assert_eq!(mount_state(&target), Some(true));
    let err = fs::write(target.join("x"), "x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    fs::write(staging.join("through-staging"), "y").unwrap();
    assert_eq!(
        fs::read_to_string(target.join("through-staging")).unwrap(),
        "y"
    );
}

#[test]
fn repeated_calls_are_idempotent_and_incompatible_repeats_already_exist() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start();
    let client = plugin.client();
    let first = create(&client, "idem");
    assert_eq!(create(&client, "idem"), first);
    let bigger = client
        .create_volume(&CreateVolume {
            name: "idem".into(),
            capacity: CapacityRange {
                required_bytes: 1 << 30,
                limit_bytes: 0,
            },
            capabilities: vec![rw()],
            ..CreateVolume::default()
        })
        .unwrap_err();
    assert_eq!(
        (bigger.code, bigger.class),
        (Code::AlreadyExists, Class::Terminal)
    );

    let ctx = attach(&client, "idem");
    assert_eq!(attach(&client, "idem"), ctx);
    let staging = plugin.dir.mkdir("staging/idem");
    client
        .node_stage(&stage_req("idem", &staging, &ctx))
        .unwrap();
    client
        .node_stage(&stage_req("idem", &staging, &ctx))
        .unwrap();
    assert_eq!(
        mounts_under(&staging).len(),
        1,
        "a repeated stage mounts once"
    );
    let mut other = stage_req("idem", &staging, &ctx);
    other.capability = Capability::new(AccessMode::MultiNodeReaderOnly, AttachmentMode::FileSystem);
    assert_eq!(
        client.node_stage(&other).unwrap_err().code,
        Code::AlreadyExists
    );

    let target = plugin.dir.mkdir("per-alloc/a1").join("idem");
    client
        .node_publish(&publish_req("idem", &staging, &target, &ctx, false))
        .unwrap();
    client
        .node_publish(&publish_req("idem", &staging, &target, &ctx, false))
        .unwrap();
    assert_eq!(
        mounts_under(&target).len(),
        1,
        "a repeated publish mounts once"
    );
    let err = client
        .node_publish(&publish_req("idem", &staging, &target, &ctx, true))
        .unwrap_err();
    assert_eq!(err.code, Code::AlreadyExists);

    for _ in 0..2 {
        client.node_unpublish("idem", &target).unwrap();
    }
    for _ in 0..2 {
        client.node_unstage("idem", &staging).unwrap();
    }
    for _ in 0..2 {
        client
            .controller_unpublish("idem", NODE, &Secrets::new())
            .unwrap();
    }
    for _ in 0..2 {
        client.delete_volume("idem", &Secrets::new()).unwrap();
    }
    assert!(mounts_under(&plugin.dir.path).is_empty());
}

#[test]
fn unknown_volumes_are_not_found_and_missing_fields_invalid() {
    let plugin = Plugin::start_lenient_with(&[], &[]);
    let client = plugin.client();
    let staging = plugin.dir.mkdir("staging/none");
    let ctx: StringMap = [(PUBLISH_CONTEXT_KEY.to_string(), NODE.to_string())].into();
    let err = client
        .node_stage(&stage_req("ghost", &staging, &ctx))
        .unwrap_err();
    assert_eq!((err.code, err.class), (Code::NotFound, Class::Retry));
    let err = client
        .validate_volume(&ValidateVolume {
            volume_id: "ghost".into(),
            capabilities: vec![rw()],
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(err.code, Code::NotFound);

    let err = client
        .node_stage(&stage_req("", &staging, &ctx))
        .unwrap_err();
    assert_eq!(
        (err.code, err.class),
        (Code::InvalidArgument, Class::Terminal)
    );
    assert!(err.message.contains("volume_id is required"), "{err}");
    let err = client
        .create_volume(&CreateVolume {
            name: "x".into(),
            capabilities: vec![],
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        err.message.contains("volume_capabilities is required"),
        "{err}"
    );
    let err = client.create_volume(&CreateVolume {
        name: "../x".into(),
        capabilities: vec![rw()],
        ..Default::default()
    });
    assert_eq!(err.unwrap_err().code, Code::InvalidArgument);

    // NOT_FOUND on teardown is success for the CO.
    client
        .node_unpublish("ghost", &plugin.dir.join("nowhere"))
        .unwrap();
    client
        .controller_unpublish("ghost", NODE, &Secrets::new())
        .unwrap();
}

#[test]
fn out_of_order_calls_fail_precondition() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_lenient_with(&[], &[]);
    let client = plugin.client();
    create(&client, "order");
    let staging = plugin.dir.mkdir("staging/order");
    let ctx: StringMap = [(PUBLISH_CONTEXT_KEY.to_string(), NODE.to_string())].into();
    let err = client
        .node_stage(&stage_req("order", &staging, &ctx))
        .unwrap_err();
    assert_eq!(
        err.code,
        Code::FailedPrecondition,
        "stage before ControllerPublish: {err}"
    );

    let ctx = attach(&client, "order");
    let err = client
        .node_stage(&stage_req("order", &staging, &StringMap::new()))
        .unwrap_err();
    assert!(
        err.message.contains("publish_context"),
        "publish_context must be passed on: {err}"
    );
    client
        .node_stage(&stage_req("order", &staging, &ctx))
        .unwrap();
    let target = plugin.dir.mkdir("per-alloc/a1").join("order");
    client
        .node_publish(&publish_req("order", &staging, &target, &ctx, false))
        .unwrap();

    let err = client.node_unstage("order", &staging).unwrap_err();
    assert_eq!(
        err.code,
        Code::FailedPrecondition,
        "unstage while published: {err}"
    );
    let err = client
        .controller_unpublish("order", NODE, &Secrets::new())
        .unwrap_err();
    assert_eq!(
        err.code,
        Code::FailedPrecondition,
        "detach while staged: {err}"
    );
    let err = client.delete_volume("order", &Secrets::new()).unwrap_err();
    assert_eq!(
        err.code,
        Code::FailedPrecondition,
        "delete while attached: {err}"
    );
}

#[test]
fn validation_is_checked_against_the_request() {
    let plugin = Plugin::start();
    let client = plugin.client();
    create(&client, "val");
    let req = |caps: Vec<Capability>| ValidateVolume {
        volume_id: "val".into(),
        capabilities: caps,
        ..Default::default()
    };

    let answer = client.validate_volume(&req(vec![rw()])).unwrap();
    assert_eq!(answer, Validation::Confirmed(vec![rw()]));
    assert_eq!(check_validation(&[rw()], &answer), Ok(()));

    let block = Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::BlockDevice);
    let answer = client.validate_volume(&req(vec![block.clone()])).unwrap();
    assert!(
        matches!(&answer, Validation::NotConfirmed { message } if message.contains("block-device"))
    );
    assert!(check_validation(&[block], &answer).is_err());

    plugin.set_faults("ValidateVolumeCapabilities omit-confirmed count=1\n");
    let answer = client.validate_volume(&req(vec![rw()])).unwrap();
    assert!(matches!(answer, Validation::NotConfirmed { .. }));

    plugin.set_faults("ValidateVolumeCapabilities confirm=multi-node-reader-only,xfs\n");
    let answer = client.validate_volume(&req(vec![rw()])).unwrap();
    let err = check_validation(&[rw()], &answer).unwrap_err();
    assert_eq!(
        err.to_string(),
        "requested access mode single-node-writer, got multi-node-reader-only"
    );
}

#[test]
fn injected_unavailable_is_uncertain_and_retried_until_success() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start();
    let client = plugin.client();
    create(&client, "flaky");
    let ctx = attach(&client, "flaky");
    let staging = plugin.dir.mkdir("staging/flaky");
    plugin.set_faults("NodeStageVolume code=UNAVAILABLE count=2 message=backend busy\n");
    let err = client
        .node_stage(&stage_req("flaky", &staging, &ctx))
        .unwrap_err();
    assert_eq!((err.code, err.class), (Code::Unavailable, Class::Uncertain));
    assert_eq!(err.message, "backend busy");

    let policy =
        Backoff::new(Duration::from_millis(5), Duration::from_millis(20)).with_max_attempts(5);
    let mut attempts = 0;
    backoff::retry(&policy, |_| {
        attempts += 1;
        client.node_stage(&stage_req("flaky", &staging, &ctx))
    })
    .unwrap();
    assert_eq!(attempts, 2, "one more injected failure, then success");
    let stages = plugin
        .trace_methods()
        .iter()
        .filter(|m| *m == "NodeStageVolume")
        .count();
    assert_eq!(stages, 3);
    assert_eq!(mount_state(&staging), Some(false));
}

#[test]
fn injected_errors_are_classified_per_rpc() {
    let plugin = Plugin::start();
    let client = plugin.client();
    plugin.set_faults("NodeUnpublishVolume code=NOT_FOUND\nNodeUnstageVolume code=INVALID_ARGUMENT\nGetCapacity code=RESOURCE_EXHAUSTED\n");
    let err = client
        .node_unpublish("v", &plugin.dir.join("t"))
        .unwrap_err();
    assert_eq!((err.code, err.class), (Code::NotFound, Class::Ignorable));
    let err = client.node_unstage("v", &plugin.dir.join("s")).unwrap_err();
    assert_eq!(
        (err.code, err.class),
        (Code::InvalidArgument, Class::Terminal)
    );
    let mut calls = 0;
    let policy =
        Backoff::new(Duration::from_millis(1), Duration::from_millis(1)).with_max_attempts(4);
    let result = backoff::retry(&policy, |_| {
        calls += 1;
        client.node_unstage("v", &plugin.dir.join("s"))
    });
    assert_eq!(result.unwrap_err().code, Code::InvalidArgument);
    assert_eq!(calls, 1, "terminal errors are never retried");
    let err = client.capacity(&[], &BTreeMap::new(), None).unwrap_err();
    assert_eq!(
        (err.code, err.class),
        (Code::ResourceExhausted, Class::Retry)
    );
}

#[test]
fn a_hung_plugin_hits_the_deadline() {
    let plugin = Plugin::start();
    plugin.set_faults("Probe hang\nNodeGetInfo sleep=2s\n");
    let client = plugin.client().with_timeout(Duration::from_millis(300));
    let err = client.probe().unwrap_err();
    assert_eq!(
        (err.code, err.class),
        (Code::DeadlineExceeded, Class::Uncertain)
    );
    let err = client.node_info().unwrap_err();
    assert_eq!(err.code, Code::DeadlineExceeded);
    // Other calls are not blocked by the hung one.
    assert_eq!(client.plugin_info().unwrap().name, "hostpath.csi-agent");
}

#[test]
fn a_plugin_that_dies_mid_call_is_uncertain() {
    let mut plugin = Plugin::start();
    plugin.set_faults("CreateVolume exit\n");
    let err = plugin.client().create_volume(&CreateVolume {
        name: "x".into(),
        capabilities: vec![rw()],
        ..Default::default()
    });
    let err = err.unwrap_err();
    assert_eq!(err.class, Class::Uncertain, "{err}");
    assert_eq!(plugin.wait_exit(Duration::from_secs(5)), Some(3));
}

#[test]
fn probe_reports_not_ready() {
    let plugin = Plugin::start();
    plugin.set_faults("Probe not-ready count=1\n");
    let client = plugin.client();
    assert_eq!(client.probe(), Ok(false));
    assert_eq!(client.probe(), Ok(true));
}

#[test]
fn list_volumes_pages_through_every_volume() {
    let plugin = Plugin::start();
    let client = plugin.client();
    for i in 0..5 {
        create(&client, &format!("page{i}"));
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = client.list_volumes(2, &token).unwrap();
        pages += 1;
        seen.extend(page.entries.into_iter().map(|e| e.volume.volume_id));
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, vec!["page0", "page1", "page2", "page3", "page4"]);
    let err = client.list_volumes(2, "bogus").unwrap_err();
    assert_eq!((err.code, err.class), (Code::Aborted, Class::Retry));
}

#[test]
fn a_missing_socket_is_unavailable() {
    let dir = crate::util::TestDir::new();
    let client = Client::new(&Endpoint::from_path(dir.join("absent.sock")).unwrap())
        .with_timeout(Duration::from_secs(2));
    let err = client.plugin_info().unwrap_err();
    assert_eq!((err.code, err.class), (Code::Unavailable, Class::Uncertain));
}

#[test]
fn sigterm_stops_the_plugin_and_removes_its_socket() {
    let mut plugin = Plugin::start();
    assert!(plugin.socket.exists());
    assert_eq!(plugin.stop(), Some(0));
    assert!(!plugin.socket.exists());
}

#[test]
fn volume_stats_report_a_missing_volume_directory_as_abnormal() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start();
    let client = plugin.client();
    let (_, staging) = staged(&plugin, &client, "sick");
    assert!(
        !client
            .node_volume_stats("sick", &staging, None)
            .unwrap()
            .condition
            .unwrap()
            .abnormal
    );
    let err = client
        .node_volume_stats("sick", &plugin.dir.join("elsewhere"), None)
        .unwrap_err();
    assert_eq!(err.code, Code::NotFound);
    client.node_unstage("sick", &staging).unwrap();
    fs::remove_dir_all(plugin.dir.join("base/volumes/sick")).unwrap();
    let condition = client
        .node_volume_stats("sick", &staging, None)
        .unwrap()
        .condition
        .unwrap();
    assert!(condition.abnormal, "{condition:?}");
}
