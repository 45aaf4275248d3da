//! Block volumes through the agent: `volume claim -target PATH` of a
//! `block-device` volume makes PATH an empty file (0600) and binds the
//! published device node onto it; I/O goes through it with O_DIRECT;
//! `volume status` names the device; release unmounts the target, removes
//! the file the agent made, and the plugin detaches its loop device.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::util::{loop_devices_under, mount_state, require_root};
use crate::volume_util::*;

const BLOCK: usize = 4096;

fn block_spec(id: &str, access_mode: &str) -> String {
    format!(
        "id        = {id:?}\nname      = {id:?}\ntype      = \"csi\"\nplugin_id = {PLUGIN:?}\n\
         capacity_min = \"16MiB\"\n\
         capability {{\n  access_mode     = {access_mode:?}\n  attachment_mode = \"block-device\"\n}}\n"
    )
}

/// One 4 KiB block aligned for O_DIRECT, filled with `byte`.
fn aligned(storage: &mut Vec<u8>, byte: u8) -> &mut [u8] {
    storage.resize(2 * BLOCK, 0);
    let offset = storage.as_ptr().align_offset(BLOCK);
    let buf = &mut storage[offset..offset + BLOCK];
    buf.fill(byte);
    buf
}

fn open_direct(path: &Path, write: bool) -> std::io::Result<fs::File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

#[test]
fn a_block_volume_claimed_at_a_target_is_a_device_file_with_direct_io_through_it() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    connect(&rig.agent)
        .volume_create("blk.hcl", &block_spec("blk", "multi-node-multi-writer"))
        .unwrap_or_else(|err| panic!("volume create: {err}"));
    let target = rig.agent.dir.join("dev/blk");
    claimed(&rig.agent, &claim_at("blk", "w1", &target));

    let meta = fs::metadata(&target).unwrap();
    assert!(meta.file_type().is_block_device(), "{meta:?}");
    assert_eq!(mount_state(&target), Some(false));
    let v = volume(&rig.agent, "blk");
    let device = &claim_of(&v, "w1").unwrap().device;
    assert!(device.starts_with("/dev/loop"), "{v:#?}");

    let mut storage = Vec::new();
    let file = open_direct(&target, true).unwrap();
    file.write_all_at(aligned(&mut storage, 0xab), BLOCK as u64)
        .unwrap();
    drop(file);
    let mut read = Vec::new();
    let buf = aligned(&mut read, 0);
    open_direct(&target, false)
        .unwrap()
        .read_exact_at(buf, BLOCK as u64)
        .unwrap();
    assert!(buf.iter().all(|b| *b == 0xab));

    // A reader's target refuses writes.
    let ro_target = rig.agent.dir.join("dev/blk-ro");
    let mut reader = claim_at("blk", "r1", &ro_target);
    reader.read_only = true;
    claimed(&rig.agent, &reader);
    let mut zeros = Vec::new();
    let err = open_direct(&ro_target, true)
        .and_then(|f| f.write_all_at(aligned(&mut zeros, 0), BLOCK as u64))
        .unwrap_err();
    assert!(
        matches!(
            err.raw_os_error(),
            Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM)
        ),
        "{err}"
    );
    let mut again = Vec::new();
    let buf = aligned(&mut again, 0);
    open_direct(&ro_target, false)
        .unwrap()
        .read_exact_at(buf, BLOCK as u64)
        .unwrap();
    assert!(buf.iter().all(|b| *b == 0xab), "the reader sees the data");

    released(&rig.agent, "blk", "r1");
    released(&rig.agent, "blk", "w1");
    assert!(
        !target.exists(),
        "the target file the agent made is removed"
    );
    assert!(!ro_target.exists());
    assert!(
        loop_devices_under(rig.plugin.dir()).is_empty(),
        "the plugin detached its loop devices"
    );
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn an_existing_target_file_is_kept_and_a_directory_target_of_a_block_volume_is_refused() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    connect(&rig.agent)
        .volume_create("blk.hcl", &block_spec("blk", "single-node-writer"))
        .unwrap_or_else(|err| panic!("volume create: {err}"));
    let dir_target = rig.agent.dir.join("a-dir");
    fs::create_dir_all(&dir_target).unwrap();
    let err = claim(&rig.agent, &claim_at("blk", "w1", &dir_target)).unwrap_err();
    assert!(
        err.to_string().contains("of a block volume is a directory"),
        "{err}"
    );
    wait_volume(&rig.agent, "blk", "the claim rolled back", unclaimed, LONG);

    let file_target = rig.agent.dir.join("mine");
    fs::write(&file_target, "").unwrap();
    fs::set_permissions(&file_target, fs::Permissions::from_mode(0o640)).unwrap();
    claimed(&rig.agent, &claim_at("blk", "w2", &file_target));
    assert!(fs::metadata(&file_target)
        .unwrap()
        .file_type()
        .is_block_device());
    released(&rig.agent, "blk", "w2");
    let meta = fs::metadata(&file_target).unwrap();
    assert!(meta.is_file(), "the user's file stays");
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    rig.assert_nothing_left();
}
