//! Volume expansion in the hostpath plugin over real gRPC, against a strict
//! plugin: ControllerExpandVolume grows a block volume's backing file and
//! NodeExpandVolume makes its loop devices show the new size (in sysfs and
//! through the published device file), online; a directory's capacity is
//! recorded. The spec's idempotency and error codes, one rule a test.

use std::fs::{self, File};
use std::io::{Seek, SeekFrom};
use std::path::Path;

use csi_agent::csi::types::*;
use csi_agent::csi::{Capability, Client, Code, Secrets};

use crate::block::{backing_file, devices_showing, read_direct, write_direct, BLOCK};
use crate::requests::{block_cap, create_req, mount_cap, publish_req, use_volume};
use crate::util::{call_opt, require_root, Plugin};

const MIB: i64 = 1 << 20;

fn range(required_bytes: i64, limit_bytes: i64) -> CapacityRange {
    CapacityRange {
        required_bytes,
        limit_bytes,
    }
}

fn controller_expand(
    client: &Client,
    volume: &str,
    capacity: CapacityRange,
) -> Result<Expanded, csi_agent::csi::Error> {
    client.controller_expand(&ControllerExpand {
        volume_id: volume.into(),
        capacity,
        secrets: Secrets::new(),
        capability: None,
    })
}

fn node_expand(
    client: &Client,
    volume: &str,
    path: &Path,
    capacity: CapacityRange,
    capability: Option<Capability>,
) -> Result<i64, csi_agent::csi::Error> {
    client.node_expand(&NodeExpand {
        volume_id: volume.into(),
        volume_path: path.to_path_buf(),
        capacity,
        staging_target_path: None,
        capability,
        secrets: Secrets::new(),
    })
}

/// The size of the device `/sys/block/<name>` in bytes, as sysfs says.
fn sysfs_bytes(name: &str) -> i64 {
    let sectors = fs::read_to_string(format!("/sys/block/{name}/size")).unwrap();
    sectors.trim().parse::<i64>().unwrap() * 512
}

/// The size of the block device a path shows, as a reader of it sees it.
fn device_bytes(path: &Path) -> i64 {
    let mut device = File::open(path).unwrap();
    device.seek(SeekFrom::End(0)).unwrap() as i64
}

/// The capacity ListVolumes reports for `volume`.
fn listed_capacity(client: &Client, volume: &str) -> i64 {
    let page = client.list_volumes(0, "").unwrap();
    let entry = page.entries.iter().find(|e| e.volume.volume_id == volume);
    entry.unwrap().volume.capacity_bytes
}

#[test]
fn a_published_block_volume_grows_online_controller_then_node() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    let in_use = use_volume(&client, &plugin.dir, "b", &block_cap());
    write_direct(&in_use.target, 0, 0x5e).unwrap();
    let devices = devices_showing(&backing_file(&plugin, "b"));
    assert_eq!(devices.len(), 1);

    let expanded = controller_expand(&client, "b", range(3 * MIB, 0)).unwrap();
    assert_eq!(
        expanded,
        Expanded {
            capacity_bytes: 3 * MIB,
            node_expansion_required: true,
        }
    );
    let backing = fs::metadata(backing_file(&plugin, "b")).unwrap();
    assert_eq!(backing.len(), 3 << 20, "the backing file grew");
    assert_eq!(
        sysfs_bytes(&devices[0]),
        MIB,
        "the device waits for the node"
    );

    let grown = node_expand(
        &client,
        "b",
        &in_use.target,
        range(3 * MIB, 0),
        Some(block_cap()),
    );
    assert_eq!(grown.unwrap(), 3 * MIB);
    assert_eq!(sysfs_bytes(&devices[0]), 3 * MIB);
    assert_eq!(
        device_bytes(&in_use.target),
        3 * MIB,
        "the published device"
    );
    write_direct(&in_use.target, 5 * MIB as u64 / 2, 0x6f).unwrap();
    assert!(read_direct(&in_use.target, 5 * MIB as u64 / 2)
        .iter()
        .all(|b| *b == 0x6f));
    assert!(
        read_direct(&in_use.target, 0).iter().all(|b| *b == 0x5e),
        "the data stays"
    );
    assert_eq!(listed_capacity(&client, "b"), 3 * MIB);
    assert_eq!(devices_showing(&backing_file(&plugin, "b")), devices);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_block_volume_on_no_device_needs_no_node_expansion() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    let expanded = controller_expand(&client, "b", range(2 * MIB, 0)).unwrap();
    assert_eq!(
        expanded,
        Expanded {
            capacity_bytes: 2 * MIB,
            node_expansion_required: false,
        }
    );
    // Its first device shows the new size from the start.
    let in_use = use_volume(&client, &plugin.dir, "b", &block_cap());
    let devices = devices_showing(&backing_file(&plugin, "b"));
    assert_eq!(sysfs_bytes(&devices[0]), 2 * MIB);
    assert_eq!(device_bytes(&in_use.target), 2 * MIB);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_file_system_volume_needs_no_node_expansion() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("f", &mount_cap(), MIB))
        .unwrap();
    let expanded = controller_expand(&client, "f", range(5 * MIB, 0)).unwrap();
    assert_eq!(
        expanded,
        Expanded {
            capacity_bytes: 5 * MIB,
            node_expansion_required: false,
        }
    );
    assert_eq!(listed_capacity(&client, "f"), 5 * MIB);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn node_expansion_of_a_file_system_volume_records_its_size() {
    if !require_root() {
        return;
    }
    let mut plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("f", &mount_cap(), MIB))
        .unwrap();
    let in_use = use_volume(&client, &plugin.dir, "f", &mount_cap());
    for path in [&in_use.staging, &in_use.target] {
        let capacity = node_expand(&client, "f", path, range(0, 0), None).unwrap();
        assert_eq!(capacity, MIB, "nothing asked: the recorded size");
    }
    let capacity = node_expand(
        &client,
        "f",
        &in_use.target,
        range(4 * MIB, 0),
        Some(mount_cap()),
    );
    assert_eq!(capacity.unwrap(), 4 * MIB);
    plugin.kill();
    plugin.restart();
    let client = plugin.client();
    assert_eq!(listed_capacity(&client, "f"), 4 * MIB, "recorded");
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn expansion_repeats_answer_the_same() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    let in_use = use_volume(&client, &plugin.dir, "b", &block_cap());
    let first = controller_expand(&client, "b", range(2 * MIB, 0)).unwrap();
    assert_eq!(
        controller_expand(&client, "b", range(2 * MIB, 0)).unwrap(),
        first
    );
    for _ in 0..2 {
        let grown = node_expand(&client, "b", &in_use.staging, range(2 * MIB, 0), None);
        assert_eq!(grown.unwrap(), 2 * MIB);
    }
    assert_eq!(device_bytes(&in_use.target), 2 * MIB);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn expansion_never_shrinks_a_volume() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    for (volume, cap) in [("f", mount_cap()), ("b", block_cap())] {
        client
            .create_volume(&create_req(volume, &cap, 2 * MIB))
            .unwrap();
        // A smaller size asked for is already there.
        let expanded = controller_expand(&client, volume, range(MIB, 0)).unwrap();
        assert_eq!(expanded.capacity_bytes, 2 * MIB, "{volume}");
        // A limit below the size would shrink it.
        let err = controller_expand(&client, volume, range(MIB, MIB)).unwrap_err();
        assert_eq!(err.code, Code::OutOfRange, "{volume}: {err}");
        let err = controller_expand(&client, volume, range(3 * MIB, 2 * MIB)).unwrap_err();
        assert_eq!(err.code, Code::OutOfRange, "{volume}: {err}");
        assert_eq!(listed_capacity(&client, volume), 2 * MIB);
    }
    assert_eq!(
        fs::metadata(backing_file(&plugin, "b")).unwrap().len(),
        2 << 20
    );
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn node_expansion_below_the_size_or_past_the_controllers_is_out_of_range() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), 2 * MIB))
        .unwrap();
    client
        .create_volume(&create_req("f", &mount_cap(), 2 * MIB))
        .unwrap();
    let block = use_volume(&client, &plugin.dir, "b", &block_cap());
    let dir = use_volume(&client, &plugin.dir, "f", &mount_cap());
    for (volume, path) in [("b", &block.target), ("f", &dir.target)] {
        let err = node_expand(&client, volume, path, range(0, MIB), None).unwrap_err();
        assert_eq!(err.code, Code::OutOfRange, "{volume}: {err}");
    }
    // Only the controller grows a block volume's storage.
    let err = node_expand(&client, "b", &block.target, range(4 * MIB, 0), None).unwrap_err();
    assert_eq!(err.code, Code::OutOfRange, "{err}");
    assert!(err.message.contains("ControllerExpandVolume"), "{err}");
    assert_eq!(device_bytes(&block.target), 2 * MIB);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn expanding_an_unknown_volume_is_not_found() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let err = controller_expand(&client, "ghost", range(MIB, 0)).unwrap_err();
    assert_eq!(err.code, Code::NotFound, "{err}");
    let path = plugin.dir.mkdir("somewhere");
    let err = node_expand(&client, "ghost", &path, range(MIB, 0), None).unwrap_err();
    assert_eq!(err.code, Code::NotFound, "{err}");
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn node_expansion_at_a_path_that_does_not_show_the_volume_is_not_found() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    client
        .create_volume(&create_req("f", &mount_cap(), MIB))
        .unwrap();
    let elsewhere = plugin.dir.mkdir("elsewhere");
    for volume in ["b", "f"] {
        let err = node_expand(&client, volume, &elsewhere, range(MIB, 0), None).unwrap_err();
        assert_eq!(err.code, Code::NotFound, "{volume}: {err}");
    }
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn expansion_requests_the_volume_cannot_serve_are_invalid() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    let in_use = use_volume(&client, &plugin.dir, "b", &block_cap());
    let err = client
        .controller_expand(&ControllerExpand {
            volume_id: "b".into(),
            capacity: range(2 * MIB, 0),
            secrets: Secrets::new(),
            capability: Some(mount_cap()),
        })
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument, "{err}");
    let err = node_expand(
        &client,
        "b",
        &in_use.target,
        range(MIB, 0),
        Some(mount_cap()),
    )
    .unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument, "{err}");
    let err = controller_expand(&client, "b", range(-1, 0)).unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument, "{err}");
    assert_eq!(listed_capacity(&client, "b"), MIB);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn controller_expansion_without_a_capacity_range_is_invalid() {
    use csi_agent::csi::proto::csi as pb;
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("f", &mount_cap(), MIB))
        .unwrap();
    let mut req = pb::ControllerExpandVolumeRequest::new();
    req.volume_id = "f".into();
    let err = plugin
        .controller_stub()
        .controller_expand_volume_opt(&req, call_opt())
        .unwrap_err();
    assert!(
        matches!(&err, grpcio::Error::RpcFailure(s)
            if s.code() == grpcio::RpcStatusCode::INVALID_ARGUMENT
                && s.message() == "capacity_range is required"),
        "{err:?}"
    );
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn the_read_only_device_of_a_block_volume_grows_too() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    let in_use = use_volume(&client, &plugin.dir, "b", &block_cap());
    let reader = plugin.dir.mkdir("per-alloc/reader").join("b");
    client
        .node_publish(&publish_req(
            "b",
            &in_use.staging,
            &reader,
            &in_use.publish_context,
            &block_cap(),
            true,
        ))
        .unwrap();
    assert_eq!(devices_showing(&backing_file(&plugin, "b")).len(), 2);
    controller_expand(&client, "b", range(2 * MIB, 0)).unwrap();
    node_expand(&client, "b", &in_use.staging, range(2 * MIB, 0), None).unwrap();
    for device in devices_showing(&backing_file(&plugin, "b")) {
        assert_eq!(sysfs_bytes(&device), 2 * MIB, "{device}");
    }
    assert_eq!(device_bytes(&reader), 2 * MIB);
    assert_eq!(read_direct(&reader, MIB as u64).len(), BLOCK, "readable");
    assert_eq!(plugin.violations(), Vec::<String>::new());
}
