//! Block volumes of the hostpath plugin over real gRPC: a sparse backing
//! file, a real loop device per staging, the device node bind-mounted on a
//! target file, and O_DIRECT I/O through it. Every test runs the plugin
//! strict and ends with its verdict; loop devices and mounts are cleaned up
//! by the test dir's `Drop` even when an assertion fails.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use csi_agent::csi::types::*;
use csi_agent::csi::{Client, Code, Secrets, Validation};

use crate::requests::{attach, block_cap, create_req, detach, mount_cap, publish_req, stage_req};
use crate::util::{mount_state, mounts_under, require_root, Plugin};

pub(crate) const BLOCK: usize = 4096;

/// The loop devices (`loopN`) whose `backing_file` in sysfs names `file`,
/// read straight from sysfs.
pub(crate) fn devices_showing(file: &Path) -> Vec<String> {
    let file = fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let mut found = Vec::new();
    for entry in fs::read_dir("/sys/block").unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.starts_with("loop") {
            continue;
        }
        if let Ok(shown) = fs::read_to_string(entry.path().join("loop/backing_file")) {
            if Path::new(shown.trim_end()) == file {
                found.push(name);
            }
        }
    }
    found.sort();
    found
}

/// Whether sysfs says the loop device `name` is read-only.
fn device_read_only(name: &str) -> bool {
    fs::read_to_string(format!("/sys/block/{name}/ro"))
        .unwrap()
        .trim()
        == "1"
}

pub(crate) fn backing_file(plugin: &Plugin, volume: &str) -> PathBuf {
    plugin.dir.join(&format!("base/block/{volume}.img"))
}

/// A 4 KiB buffer aligned for O_DIRECT, filled with `byte`, inside `storage`.
fn aligned(storage: &mut Vec<u8>, byte: u8) -> &mut [u8] {
    storage.resize(2 * BLOCK, 0);
    let offset = storage.as_ptr().align_offset(BLOCK);
    let buf = &mut storage[offset..offset + BLOCK];
    buf.fill(byte);
    buf
}

fn open_direct(path: &Path, write: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// Writes a block of `byte` at `offset` through `path` with O_DIRECT.
pub(crate) fn write_direct(path: &Path, offset: u64, byte: u8) -> std::io::Result<()> {
    let mut storage = Vec::new();
    let buf = aligned(&mut storage, byte);
    let file = open_direct(path, true)?;
    let written = file.write_at(buf, offset)?;
    assert_eq!(written, BLOCK);
    file.sync_all()
}

/// Reads the block at `offset` through `path` with O_DIRECT.
pub(crate) fn read_direct(path: &Path, offset: u64) -> Vec<u8> {
    let mut storage = Vec::new();
    let buf = aligned(&mut storage, 0);
    let file = open_direct(path, false).unwrap();
    file.read_exact_at(buf, offset).unwrap();
    buf.to_vec()
}

/// Creates, attaches and stages block volume `volume`; its publish context
/// and staging path.
fn staged(plugin: &Plugin, client: &Client, volume: &str) -> (StringMap, PathBuf) {
    client
        .create_volume(&create_req(volume, &block_cap(), 1 << 20))
        .unwrap();
    let ctx = attach(client, volume, &block_cap());
    let staging = plugin.dir.mkdir(&format!("staging/{volume}"));
    client
        .node_stage(&stage_req(volume, &staging, &ctx, &block_cap()))
        .unwrap();
    (ctx, staging)
}

#[test]
fn block_volume_lifecycle_with_direct_io_through_the_target_file() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let volume = client
        .create_volume(&create_req("b", &block_cap(), 1 << 20))
        .unwrap();
    assert_eq!(volume.capacity_bytes, 1 << 20);
    let backing = backing_file(&plugin, "b");
    let meta = fs::metadata(&backing).unwrap();
    assert_eq!(meta.len(), 1 << 20);
    assert!(meta.blocks() * 512 < 1 << 20, "the backing file is sparse");

    let ctx = attach(&client, "b", &block_cap());
    let staging = plugin.dir.mkdir("staging/b");
    client
        .node_stage(&stage_req("b", &staging, &ctx, &block_cap()))
        .unwrap();
    let devices = devices_showing(&backing);
    assert_eq!(devices.len(), 1, "one loop device after NodeStage");
    assert!(!device_read_only(&devices[0]));
    assert!(staging.is_dir() && mount_state(&staging).is_none());

    let target = plugin.dir.mkdir("per-alloc/a1").join("b");
    client
        .node_publish(&publish_req(
            "b",
            &staging,
            &target,
            &ctx,
            &block_cap(),
            false,
        ))
        .unwrap();
    let shown = fs::metadata(&target).unwrap();
    assert!(
        shown.file_type().is_block_device(),
        "the target shows the device"
    );
    let device = fs::metadata(format!("/dev/{}", devices[0])).unwrap();
    assert_eq!(shown.rdev(), device.rdev());
    assert_eq!(mount_state(&target), Some(false));

    write_direct(&target, 8 * BLOCK as u64, 0xa5).unwrap();
    assert_eq!(read_direct(&target, 8 * BLOCK as u64), vec![0xa5; BLOCK]);
    let mut on_disk = vec![0; BLOCK];
    File::open(&backing)
        .unwrap()
        .read_exact_at(&mut on_disk, 8 * BLOCK as u64)
        .unwrap();
    assert_eq!(
        on_disk,
        vec![0xa5; BLOCK],
        "the write reached the backing file"
    );

    for path in [&target, &staging] {
        let stats = client.node_volume_stats("b", path, None).unwrap();
        assert_eq!(stats.usage.len(), 1);
        assert_eq!(stats.usage[0].unit, UsageUnit::Bytes);
        assert_eq!(stats.usage[0].total, 1 << 20);
        assert_eq!(stats.condition.map(|c| c.abnormal), Some(false));
    }
    let err = client
        .node_volume_stats("b", &plugin.dir.join("elsewhere"), None)
        .unwrap_err();
    assert_eq!(err.code, Code::NotFound);

    let expanded = client
        .controller_expand(&ControllerExpand {
            volume_id: "b".into(),
            capacity: CapacityRange {
                required_bytes: 2 << 20,
                limit_bytes: 0,
            },
            secrets: Secrets::new(),
            capability: Some(block_cap()),
        })
        .unwrap();
    assert_eq!(expanded.capacity_bytes, 2 << 20);
    assert!(
        expanded.node_expansion_required,
        "the device shows the old size"
    );
    let grown = client
        .node_expand(&NodeExpand {
            volume_id: "b".into(),
            volume_path: target.clone(),
            capacity: CapacityRange {
                required_bytes: 2 << 20,
                limit_bytes: 0,
            },
            staging_target_path: Some(staging.clone()),
            capability: Some(block_cap()),
            secrets: Secrets::new(),
        })
        .unwrap();
    assert_eq!(grown, 2 << 20);
    let sectors = fs::read_to_string(format!("/sys/block/{}/size", devices[0])).unwrap();
    assert_eq!(
        sectors.trim(),
        ((2 << 20) / 512).to_string(),
        "the device grew"
    );

    client.node_unpublish("b", &target).unwrap();
    assert!(!target.exists(), "the plugin removes the target file");
    client.node_unstage("b", &staging).unwrap();
    assert_eq!(devices_showing(&backing), Vec::<String>::new(), "detached");
    assert!(staging.is_dir(), "the staging dir belongs to the CO");
    detach(&client, "b").unwrap();
    client.delete_volume("b", &Secrets::new()).unwrap();
    assert!(!backing.exists());
    assert!(mounts_under(&plugin.dir.path).is_empty());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn read_only_block_publish_refuses_writes() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let (ctx, staging) = staged(&plugin, &client, "ro");
    let writer = plugin.dir.mkdir("per-alloc/a1").join("ro");
    let reader = plugin.dir.mkdir("per-alloc/a2").join("ro");
    client
        .node_publish(&publish_req(
            "ro",
            &staging,
            &writer,
            &ctx,
            &block_cap(),
            false,
        ))
        .unwrap();
    write_direct(&writer, 0, 0x5a).unwrap();
    client
        .node_publish(&publish_req(
            "ro",
            &staging,
            &reader,
            &ctx,
            &block_cap(),
            true,
        ))
        .unwrap();
    assert_eq!(mount_state(&reader), Some(true));

    // The kernel refuses either the open for writing or the write itself.
    let refused = write_direct(&reader, 0, 0xff).unwrap_err();
    assert!(
        matches!(
            refused.raw_os_error(),
            Some(libc::EACCES | libc::EROFS | libc::EPERM)
        ),
        "{refused}"
    );
    assert_eq!(read_direct(&reader, 0), vec![0x5a; BLOCK]);
    assert_eq!(
        read_direct(&writer, 0),
        vec![0x5a; BLOCK],
        "nothing was written"
    );

    let backing = backing_file(&plugin, "ro");
    let devices = devices_showing(&backing);
    let read_only: Vec<bool> = devices.iter().map(|d| device_read_only(d)).collect();
    assert_eq!(read_only.iter().filter(|ro| **ro).count(), 1, "{devices:?}");
    assert_eq!(devices.len(), 2, "the staging's device and a read-only one");

    client.node_unpublish("ro", &reader).unwrap();
    let left = devices_showing(&backing);
    assert_eq!(left.len(), 1, "the read-only device goes with its publish");
    assert!(!device_read_only(&left[0]));
    client.node_unpublish("ro", &writer).unwrap();
    client.node_unstage("ro", &staging).unwrap();
    assert_eq!(devices_showing(&backing), Vec::<String>::new());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn block_repeats_are_idempotent_across_a_plugin_restart() {
    if !require_root() {
        return;
    }
    let mut plugin = Plugin::start_strict();
    let client = plugin.client();
    let (ctx, staging) = staged(&plugin, &client, "idem");
    let backing = backing_file(&plugin, "idem");
    assert_eq!(
        client
            .create_volume(&create_req("idem", &block_cap(), 1 << 20))
            .unwrap()
            .capacity_bytes,
        1 << 20
    );
    client
        .node_stage(&stage_req("idem", &staging, &ctx, &block_cap()))
        .unwrap();
    let devices = devices_showing(&backing);
    assert_eq!(devices.len(), 1, "a repeated stage attaches once");
    let target = plugin.dir.mkdir("per-alloc/a1").join("idem");
    let publish = publish_req("idem", &staging, &target, &ctx, &block_cap(), false);
    client.node_publish(&publish).unwrap();
    client.node_publish(&publish).unwrap();
    assert_eq!(
        mounts_under(&target).len(),
        1,
        "a repeated publish mounts once"
    );

    plugin.kill();
    plugin.restart();
    let client = plugin.client();
    client
        .node_stage(&stage_req("idem", &staging, &ctx, &block_cap()))
        .unwrap();
    assert_eq!(
        devices_showing(&backing),
        devices,
        "the same device after a restart"
    );
    client.node_publish(&publish).unwrap();
    assert_eq!(mounts_under(&target).len(), 1);
    let mut read_only = publish.clone();
    read_only.read_only = true;
    let err = client.node_publish(&read_only).unwrap_err();
    assert_eq!(err.code, Code::AlreadyExists, "{err}");
    let mut file_system = publish.clone();
    file_system.capability = mount_cap();
    let err = client.node_publish(&file_system).unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument, "{err}");

    for _ in 0..2 {
        client.node_unpublish("idem", &target).unwrap();
    }
    for _ in 0..2 {
        client.node_unstage("idem", &staging).unwrap();
    }
    assert_eq!(devices_showing(&backing), Vec::<String>::new());
    for _ in 0..2 {
        detach(&client, "idem").unwrap();
    }
    for _ in 0..2 {
        client.delete_volume("idem", &Secrets::new()).unwrap();
    }
    assert!(!backing.exists());
    assert!(mounts_under(&plugin.dir.path).is_empty());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn block_and_file_system_capabilities_do_not_mix() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let mut mixed = create_req("mixed", &block_cap(), 1 << 20);
    mixed.capabilities.push(mount_cap());
    let err = client.create_volume(&mixed).unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument, "{err}");

    let volume = client
        .create_volume(&create_req("b", &block_cap(), 0))
        .unwrap();
    assert_eq!(volume.capacity_bytes, 16 << 20, "the default size");
    let err = client
        .create_volume(&create_req("b", &mount_cap(), 0))
        .unwrap_err();
    assert_eq!(err.code, Code::AlreadyExists, "{err}");

    let validate = |cap| {
        client
            .validate_volume(&ValidateVolume {
                volume_id: "b".into(),
                capabilities: vec![cap],
                ..Default::default()
            })
            .unwrap()
    };
    assert_eq!(
        validate(block_cap()),
        Validation::Confirmed(vec![block_cap()])
    );
    assert!(matches!(
        validate(mount_cap()),
        Validation::NotConfirmed { message } if message.contains("block-device volume")
    ));

    let ctx = attach(&client, "b", &block_cap());
    let staging = plugin.dir.mkdir("staging/b");
    let err = client
        .node_stage(&stage_req("b", &staging, &ctx, &mount_cap()))
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument, "{err}");
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn strict_rules_hold_for_block_volumes() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let (ctx, staging) = staged(&plugin, &client, "b");
    let second = plugin.dir.mkdir("staging/b-again");
    let err = client
        .node_stage(&stage_req("b", &second, &ctx, &block_cap()))
        .unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition);
    assert_eq!(devices_showing(&backing_file(&plugin, "b")).len(), 1);
    let target = plugin.dir.mkdir("per-alloc/a1").join("b");
    client
        .node_publish(&publish_req(
            "b",
            &staging,
            &target,
            &ctx,
            &block_cap(),
            false,
        ))
        .unwrap();
    let err = client.node_unstage("b", &staging).unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition);
    assert_eq!(devices_showing(&backing_file(&plugin, "b")).len(), 1);
    assert_eq!(
        plugin.violations(),
        vec![
            "NodeStageVolume b: only one staging_target_path per volume",
            "NodeUnstageVolume b: NodeUnstageVolume only after every NodeUnpublishVolume of \
             the staging",
        ]
    );
}

#[test]
fn a_staged_block_volume_is_not_deleted() {
    if !require_root() {
        return;
    }
    // Without attachments, only the plugin's own check stands between
    // DeleteVolume and a staged volume's device.
    let plugin = Plugin::start_strict_with(&["-no-attach"]);
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), 1 << 20))
        .unwrap();
    let staging = plugin.dir.mkdir("staging/b");
    client
        .node_stage(&stage_req("b", &staging, &StringMap::new(), &block_cap()))
        .unwrap();
    let err = client.delete_volume("b", &Secrets::new()).unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    let backing = backing_file(&plugin, "b");
    assert!(backing.exists());
    assert_eq!(devices_showing(&backing).len(), 1);
    client.node_unstage("b", &staging).unwrap();
    client.delete_volume("b", &Secrets::new()).unwrap();
    assert!(!backing.exists());
    assert_eq!(devices_showing(&backing), Vec::<String>::new());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}
