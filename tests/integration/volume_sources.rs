//! Volumes made from a snapshot or from another volume (clones) in the
//! hostpath plugin over real gRPC, against a strict plugin: their contents,
//! read through real mounts and loop devices, and the spec's rules for
//! CreateVolume with a content source (NOT_FOUND, ALREADY_EXISTS,
//! INVALID_ARGUMENT, OUT_OF_RANGE, the source named in the answer), one
//! rule a test.

use std::fs;

use csi_agent::csi::proto::csi as pb;
use csi_agent::csi::types::*;
use csi_agent::csi::Code;

use crate::block::{backing_file, read_direct, write_direct, BLOCK};
use crate::requests::{block_cap, create_from, create_req, mount_cap, use_volume};
use crate::snapshots::{filled, snapshot, snapshot_source, volume_source, MIB};
use crate::util::{call_opt, require_root, Plugin};

#[test]
fn a_volume_restored_from_a_snapshot_has_the_snapshots_contents() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("src", &mount_cap(), MIB))
        .unwrap();
    let source = use_volume(&client, &plugin.dir, "src", &mount_cap()).target;
    fs::write(source.join("data"), "v1").unwrap();
    snapshot(&client, "snap", "src");
    fs::write(source.join("data"), "v2").unwrap();

    let restored = client
        .create_volume(&create_from(
            "restored",
            &mount_cap(),
            MIB,
            snapshot_source("snap"),
        ))
        .unwrap();
    assert_eq!(restored.capacity_bytes, MIB);
    let target = use_volume(&client, &plugin.dir, "restored", &mount_cap()).target;
    assert_eq!(fs::read_to_string(target.join("data")).unwrap(), "v1");
    fs::write(target.join("data"), "v3").unwrap();
    assert_eq!(fs::read_to_string(source.join("data")).unwrap(), "v2");
    let kept = plugin.dir.join("base/snapshots/snap/files/data");
    assert_eq!(
        fs::read_to_string(kept).unwrap(),
        "v1",
        "the snapshot stays"
    );
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_clone_has_its_source_volumes_contents() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("src", &mount_cap(), MIB))
        .unwrap();
    let source = use_volume(&client, &plugin.dir, "src", &mount_cap()).target;
    fs::write(source.join("data"), "original").unwrap();

    let clone = client
        .create_volume(&create_from(
            "copy",
            &mount_cap(),
            MIB,
            volume_source("src"),
        ))
        .unwrap();
    assert_eq!(clone.capacity_bytes, MIB);
    let target = use_volume(&client, &plugin.dir, "copy", &mount_cap()).target;
    assert_eq!(fs::read_to_string(target.join("data")).unwrap(), "original");
    fs::write(target.join("data"), "changed").unwrap();
    assert_eq!(fs::read_to_string(source.join("data")).unwrap(), "original");
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_block_clone_reads_as_its_source_through_its_own_device() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    let source = use_volume(&client, &plugin.dir, "b", &block_cap()).target;
    write_direct(&source, 3 * BLOCK as u64, 0x3c).unwrap();

    client
        .create_volume(&create_from("bc", &block_cap(), 0, volume_source("b")))
        .unwrap();
    let clone = use_volume(&client, &plugin.dir, "bc", &block_cap()).target;
    assert!(filled(&read_direct(&clone, 3 * BLOCK as u64), 0x3c));
    write_direct(&clone, 3 * BLOCK as u64, 0x77).unwrap();
    assert!(filled(&read_direct(&source, 3 * BLOCK as u64), 0x3c));
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn create_volume_from_a_missing_source_is_not_found() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    for source in [snapshot_source("nope"), volume_source("nope")] {
        let err = client
            .create_volume(&create_from("v", &mount_cap(), MIB, source.clone()))
            .unwrap_err();
        assert_eq!(err.code, Code::NotFound, "{source:?}: {err}");
    }
    assert!(!plugin.dir.join("base/volumes/v").exists());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn create_volume_with_the_same_name_and_another_source_already_exists() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("src", &mount_cap(), MIB))
        .unwrap();
    snapshot(&client, "s1", "src");
    snapshot(&client, "s2", "src");
    let from_s1 = create_from("c", &mount_cap(), MIB, snapshot_source("s1"));
    let made = client.create_volume(&from_s1).unwrap();
    assert_eq!(client.create_volume(&from_s1).unwrap(), made, "a repeat");
    for other in [
        create_from("c", &mount_cap(), MIB, snapshot_source("s2")),
        create_from("c", &mount_cap(), MIB, volume_source("src")),
        create_req("c", &mount_cap(), MIB),
        // An empty volume asked for again with a source.
        create_from("src", &mount_cap(), MIB, snapshot_source("s1")),
    ] {
        let err = client.create_volume(&other).unwrap_err();
        assert_eq!(err.code, Code::AlreadyExists, "{other:?}: {err}");
    }
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_source_of_the_other_access_type_is_invalid() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    client
        .create_volume(&create_req("f", &mount_cap(), MIB))
        .unwrap();
    snapshot(&client, "bsnap", "b");
    snapshot(&client, "fsnap", "f");
    for (cap, source) in [
        (mount_cap(), snapshot_source("bsnap")),
        (mount_cap(), volume_source("b")),
        (block_cap(), snapshot_source("fsnap")),
        (block_cap(), volume_source("f")),
    ] {
        let err = client
            .create_volume(&create_from("x", &cap, MIB, source.clone()))
            .unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument, "{source:?}: {err}");
    }
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_volume_smaller_than_its_source_is_out_of_range() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    for (volume, cap) in [("f", mount_cap()), ("b", block_cap())] {
        client
            .create_volume(&create_req(volume, &cap, 2 * MIB))
            .unwrap();
        let name = format!("{volume}-snap");
        snapshot(&client, &name, volume);
        for source in [snapshot_source(&name), volume_source(volume)] {
            let mut smaller = create_from("small", &cap, 0, source.clone());
            smaller.capacity.limit_bytes = MIB;
            let err = client.create_volume(&smaller).unwrap_err();
            assert_eq!(err.code, Code::OutOfRange, "{source:?}: {err}");
            // Without a limit, the volume is as large as its source.
            let name = format!("{volume}-{}", matches!(source, ContentSource::Volume(_)));
            let made = client
                .create_volume(&create_from(&name, &cap, MIB, source))
                .unwrap();
            assert_eq!(made.capacity_bytes, 2 * MIB);
        }
    }
    assert_eq!(
        fs::metadata(backing_file(&plugin, "b-true")).unwrap().len(),
        2 << 20
    );
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_volume_made_from_a_source_names_it_in_every_answer() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("src", &mount_cap(), MIB))
        .unwrap();
    snapshot(&client, "snap", "src");
    let stub = plugin.controller_stub();
    let create = |name: &str, source: &ContentSource| {
        let mut req = pb::CreateVolumeRequest::new();
        req.name = name.into();
        req.volume_capabilities = vec![pb::VolumeCapability::from(&mount_cap())];
        req.volume_content_source = protobuf::MessageField::some(source.into());
        stub.create_volume_opt(&req, call_opt())
            .unwrap()
            .volume
            .unwrap()
    };
    let from_snapshot = create("r", &snapshot_source("snap"));
    let from_volume = create("c", &volume_source("src"));
    let source_of = |volume: &pb::Volume| {
        ContentSource::try_from(volume.content_source.as_ref().unwrap()).unwrap()
    };
    assert_eq!(source_of(&from_snapshot), snapshot_source("snap"));
    assert_eq!(source_of(&from_volume), volume_source("src"));
    assert_eq!(
        source_of(&create("r", &snapshot_source("snap"))),
        snapshot_source("snap"),
        "a repeat answers it too"
    );
    let listed = stub
        .list_volumes_opt(&pb::ListVolumesRequest::new(), call_opt())
        .unwrap();
    let sources: Vec<(String, Option<ContentSource>)> = listed
        .entries
        .iter()
        .map(|e| {
            let volume = e.volume.as_ref().unwrap();
            let source = volume
                .content_source
                .as_ref()
                .map(|s| s.try_into().unwrap());
            (volume.volume_id.clone(), source)
        })
        .collect();
    assert_eq!(
        sources,
        vec![
            ("c".to_string(), Some(volume_source("src"))),
            ("r".to_string(), Some(snapshot_source("snap"))),
            ("src".to_string(), None),
        ]
    );
    assert_eq!(plugin.violations(), Vec::<String>::new());
}
