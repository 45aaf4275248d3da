//! The hostpath plugin's block volumes: a sparse file per volume,
//! `<base-dir>/block/<id>.img`, seen through loop devices.
//!
//! - CreateVolume makes the file (the capacity asked for, rounded up to
//!   4 KiB; [`DEFAULT_BYTES`] when none is asked), DeleteVolume detaches its
//!   devices and removes it, ControllerExpandVolume grows it, and
//!   NodeExpandVolume makes its devices show the new size
//!   (`LOOP_SET_CAPACITY`).
//! - NodeStageVolume attaches it to a read-write loop device; the staging
//!   path stays the directory the CO made. NodeUnstageVolume detaches it.
//! - NodePublishVolume creates the target as an empty file and bind-mounts
//!   the device node onto it. A read-only publish gets a device of its own,
//!   attached read-only (shared by the volume's read-only publishes and
//!   detached with the last of them): a read-only mount does not stop
//!   writes through a device node, a read-only loop device does.
//!
//! Which devices show a volume is read from the kernel each time
//! ([`loop_dev::find`]: the rw one is the staging's, the ro one the
//! read-only publishes'), so repeats are idempotent across plugin restarts.
//! Other directories under `block/` are not used; the directory is separate
//! from `volumes/` so that a block volume `a` and a directory volume
//! `a.img` cannot meet.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use protobuf::MessageField;

use super::records::StateGuard;
use super::state::{Staged, State};
use super::{internal, status, Plugin, RpcResult};
use crate::csi::error::Code;
use crate::csi::proto::csi as pb;
use crate::csi::types::{CapacityRange, Usage, UsageUnit, VolumeCondition};
use crate::mount::{self, Mounter, SysMounter, UnmountMode};
use crate::sys::loop_dev::{self, LoopDevice};

/// The size of a block volume created without a capacity.
pub const DEFAULT_BYTES: i64 = 16 << 20;

/// Block volume sizes are multiples of this, so that the device has whole
/// 4 KiB blocks for O_DIRECT.
const ALIGN: i64 = 4096;

/// The size of a new block volume for `range`: the required bytes rounded
/// up to [`ALIGN`], else the limit rounded down, else [`DEFAULT_BYTES`].
pub fn capacity_for(range: &CapacityRange) -> RpcResult<i64> {
    let out_of_range = || {
        status(
            Code::OutOfRange,
            format!(
                "no multiple of {ALIGN} bytes lies in the capacity_range {}..{}",
                range.required_bytes, range.limit_bytes
            ),
        )
    };
    let limit = (range.limit_bytes > 0).then_some(range.limit_bytes / ALIGN * ALIGN);
    let size = if range.required_bytes > 0 {
        range
            .required_bytes
            .checked_add(ALIGN - 1)
            .ok_or_else(out_of_range)?
            / ALIGN
            * ALIGN
    } else {
        limit.map_or(DEFAULT_BYTES, |l| l.min(DEFAULT_BYTES))
    };
    match limit {
        Some(l) if size > l => Err(out_of_range()),
        _ if size <= 0 => Err(out_of_range()),
        _ => Ok(size),
    }
}

fn loop_error(what: &str, err: loop_dev::Error) -> grpcio::RpcStatus {
    internal(what, crate::error_chain(&err))
}

fn mount_error(e: mount::Error) -> grpcio::RpcStatus {
    internal("mount failed", crate::error_chain(&e))
}

/// Creates the sparse backing file at `path` with `size` bytes; a file
/// left by an earlier attempt is reused.
pub fn create_backing_file(path: &Path, size: i64) -> RpcResult<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| internal("cannot create the block dir", e))?;
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| internal("cannot create the backing file", e))?;
    file.set_len(size as u64)
        .and_then(|()| file.sync_all())
        .map_err(|e| internal("cannot size the backing file", e))
}

/// Detaches every device of the backing file at `path` and removes it; a
/// missing file is fine.
pub fn delete_backing_file(path: &Path) -> RpcResult<()> {
    for device in devices(path)? {
        loop_dev::detach(&device).map_err(|e| loop_error("cannot detach", e))?;
    }
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(internal("cannot remove the backing file", e))
        }
        _ => Ok(()),
    }
}

/// Grows the backing file at `path` to `size` bytes. Its devices keep
/// their size until [`Plugin::expand_block_on_node`] tells them.
pub fn grow_backing_file(path: &Path, size: i64) -> RpcResult<()> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| internal("cannot open the backing file", e))?;
    if file.metadata().map(|m| m.len()).unwrap_or(0) < size as u64 {
        file.set_len(size as u64)
            .and_then(|()| file.sync_all())
            .map_err(|e| internal("cannot grow the backing file", e))?;
    }
    Ok(())
}

/// The loop devices that show the backing file at `path` now (none if the
/// file is gone).
fn devices(path: &Path) -> RpcResult<Vec<LoopDevice>> {
    let canonical = match fs::canonicalize(path) {
        Ok(canonical) => canonical,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(internal("cannot resolve the backing file", e)),
    };
    loop_dev::find(&canonical).map_err(|e| loop_error("cannot list loop devices", e))
}

/// True if `path` is a mount point showing the device node of `device`.
fn holds_device(path: &Path, device: &LoopDevice) -> RpcResult<bool> {
    let (Ok(shown), Ok(node)) = (fs::metadata(path), fs::metadata(device.path())) else {
        return Ok(false);
    };
    if !shown.file_type().is_block_device() || shown.rdev() != node.rdev() {
        return Ok(false);
    }
    mount::is_mount_point(path)
        .map_err(|e| internal("cannot read the mount table", crate::error_chain(&e)))
}

impl Plugin {
    /// The backing file of block volume `id`.
    pub(super) fn backing_file(&self, id: &str) -> PathBuf {
        self.config.base_dir.join("block").join(format!("{id}.img"))
    }

    /// True if loop devices show block volume `id` now (it is staged, or
    /// published read-only, on this node).
    pub(super) fn shown_by_devices(&self, id: &str) -> RpcResult<bool> {
        Ok(!devices(&self.backing_file(id))?.is_empty())
    }

    /// Why block volume `id` is abnormal on this node, if it is: staged,
    /// but no read-write loop device shows it any more (detached behind
    /// the plugin's back).
    pub(super) fn lost_device(&self, state: &State, id: &str) -> RpcResult<Option<String>> {
        let Some((staging, _)) = state.staged.iter().find(|(_, s)| s.volume_id == id) else {
            return Ok(None);
        };
        let attached = devices(&self.backing_file(id))?
            .iter()
            .any(|d| !d.read_only);
        Ok((!attached).then(|| {
            format!(
                "volume {id} is staged at {} but no loop device shows it",
                staging.display()
            )
        }))
    }

    /// True if `path` shows block volume `id`: its recorded staging path,
    /// or a target holding one of its devices.
    fn shows_block(&self, state: &State, id: &str, path: &Path) -> RpcResult<bool> {
        if state.staged.get(path).is_some_and(|s| s.volume_id == id) {
            return Ok(true);
        }
        for device in devices(&self.backing_file(id))? {
            if holds_device(path, &device)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// NodeExpandVolume of block volume `id` at `path`: every device of
    /// the volume learns its backing file's size (`LOOP_SET_CAPACITY`),
    /// which is answered. The node cannot grow the file: a size above it
    /// is OUT_OF_RANGE until ControllerExpandVolume.
    pub(super) fn expand_block_on_node(
        &self,
        state: &State,
        id: &str,
        path: &Path,
        range: &CapacityRange,
    ) -> RpcResult<i64> {
        if !self.shows_block(state, id, path)? {
            return Err(status(
                Code::NotFound,
                format!(
                    "volume {id} is not staged or published at {}",
                    path.display()
                ),
            ));
        }
        let backing = self.backing_file(id);
        let len = fs::metadata(&backing)
            .map(|m| i64::try_from(m.len()).unwrap_or(i64::MAX))
            .map_err(|e| internal("cannot stat the backing file", e))?;
        if range.required_bytes > len {
            return Err(status(
                Code::OutOfRange,
                format!(
                    "volume {id} has {len} bytes; ControllerExpandVolume grows it to {}",
                    range.required_bytes
                ),
            ));
        }
        super::checks::check_no_shrink(id, len, range)?;
        for device in devices(&backing)? {
            loop_dev::refresh_capacity(&device).map_err(|e| loop_error("cannot grow", e))?;
            log::info!("{device} shows the {len} bytes of {}", backing.display());
        }
        Ok(len)
    }

    /// Makes the backing file of block volume `id` hold everything written
    /// through its loop devices: what sits in a device's page cache reaches
    /// the file only when the device is synced.
    pub(super) fn flush_devices(&self, id: &str) -> RpcResult<()> {
        for device in devices(&self.backing_file(id))? {
            File::open(device.path())
                .and_then(|node| node.sync_all())
                .map_err(|e| internal(&format!("cannot sync {device}"), e))?;
        }
        Ok(())
    }

    /// The device of volume `id` that is read-only or not, attached now if
    /// there is none.
    fn device(&self, id: &str, read_only: bool) -> RpcResult<LoopDevice> {
        let backing = self.backing_file(id);
        if let Some(device) = devices(&backing)?
            .into_iter()
            .find(|d| d.read_only == read_only)
        {
            return Ok(device);
        }
        if !backing.is_file() {
            return Err(status(
                Code::Internal,
                format!("the backing file {} is missing", backing.display()),
            ));
        }
        let device = loop_dev::attach(&backing, read_only)
            .map_err(|e| loop_error("cannot attach a loop device", e))?;
        log::info!("attached {} to {device}", backing.display());
        Ok(device)
    }

    /// Detaches the devices of volume `id` that are read-only or not.
    fn detach(&self, id: &str, read_only: bool) -> RpcResult<()> {
        for device in devices(&self.backing_file(id))? {
            if device.read_only == read_only {
                loop_dev::detach(&device).map_err(|e| loop_error("cannot detach", e))?;
                log::info!("detached {device}");
            }
        }
        Ok(())
    }

    /// NodeStageVolume of block volume `id` at `staging` with capability
    /// `key`: the staging's loop device is attached (again, if the kernel
    /// lost it) and the staging recorded. The staging path stays the CO's
    /// directory.
    pub(super) fn stage_block(
        &self,
        state: &mut StateGuard<'_>,
        id: &str,
        staging: &Path,
        key: String,
    ) -> RpcResult<()> {
        // A block staging is only a record: another volume's at this path
        // is in that volume's record (rare enough to read them all).
        let recorded = match state.staged.get(staging) {
            Some(s) => Some(s.clone()),
            None => self.read_all()?.staged.remove(staging),
        };
        match recorded {
            Some(s) if s.volume_id != id || s.capability != key => Err(status(
                Code::AlreadyExists,
                format!(
                    "{} is a staging of volume {} with capability {}",
                    staging.display(),
                    s.volume_id,
                    s.capability
                ),
            )),
            Some(_) => self.device(id, false).map(drop),
            None => {
                self.device(id, false)?;
                state.staged.insert(
                    staging.to_path_buf(),
                    Staged {
                        volume_id: id.to_string(),
                        capability: key,
                    },
                );
                state.save().map_err(|e| internal("cannot save state", e))
            }
        }
    }

    /// NodeUnstageVolume of a block volume whose last staging is going:
    /// detaches its devices (the read-only one too, when nothing is
    /// published any more).
    pub(super) fn unstage_block(&self, state: &State, id: &str) -> RpcResult<()> {
        self.detach(id, false)?;
        if !state.published.values().any(|(v, _)| v == id) {
            self.detach(id, true)?;
        }
        Ok(())
    }

    /// NodePublishVolume of a block volume staged at `staging`.
    pub(super) fn publish_block(
        &self,
        state: &mut StateGuard<'_>,
        id: &str,
        target: &Path,
        read_only: bool,
    ) -> RpcResult<()> {
        if super::checks::is_mount_point(target)? {
            for device in devices(&self.backing_file(id))? {
                if holds_device(target, &device)? {
                    return if device.read_only == read_only {
                        Ok(())
                    } else {
                        Err(status(
                            Code::AlreadyExists,
                            format!(
                                "volume {id} is published at {} with another read-only flag",
                                target.display()
                            ),
                        ))
                    };
                }
            }
            return Err(status(
                Code::AlreadyExists,
                format!("{} holds another mount", target.display()),
            ));
        }
        match fs::symlink_metadata(target) {
            Ok(m) if m.is_dir() => {
                return Err(status(
                    Code::InvalidArgument,
                    format!(
                        "target_path {} is a directory: a block volume is published on a file",
                        target.display()
                    ),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(target)
                    .map_err(|e| internal("cannot create target_path", e))?;
            }
            Err(e) => return Err(internal("cannot stat target_path", e)),
        }
        let device = self.device(id, read_only)?;
        SysMounter
            .bind(&device.path(), target, false)
            .map_err(mount_error)?;
        if read_only {
            if let Err(e) = SysMounter.remount_read_only(target) {
                let _ = SysMounter.unmount(target, UnmountMode::Detach);
                return Err(mount_error(e));
            }
        }
        state
            .published
            .insert(target.to_path_buf(), (id.to_string(), read_only));
        state.save().map_err(|e| internal("cannot save state", e))
    }

    /// After NodeUnpublishVolume of a read-only publish of block volume
    /// `id`: the read-only device goes with the last read-only publish.
    pub(super) fn unpublished_block(&self, state: &State, id: &str) -> RpcResult<()> {
        if state.published.values().any(|(v, ro)| v == id && *ro) {
            return Ok(());
        }
        self.detach(id, true)
    }

    /// NodeGetVolumeStats of block volume `id` at `path` (its staging path
    /// or one of its targets): the size in bytes, which is all a block
    /// device has to report.
    pub(super) fn block_stats(
        &self,
        id: &str,
        path: &Path,
    ) -> RpcResult<pb::NodeGetVolumeStatsResponse> {
        let state = self.lock(id)?;
        let backing = self.backing_file(id);
        let mut resp = pb::NodeGetVolumeStatsResponse::new();
        let Ok(meta) = fs::metadata(&backing) else {
            resp.volume_condition = condition(
                true,
                format!("the backing file {} is missing", backing.display()),
            );
            return Ok(resp);
        };
        if !self.shows_block(&state, id, path)? {
            return Err(status(
                Code::NotFound,
                format!(
                    "volume {id} is not staged or published at {}",
                    path.display()
                ),
            ));
        }
        resp.usage = vec![pb::VolumeUsage::from(&Usage {
            unit: UsageUnit::Bytes,
            available: 0,
            total: i64::try_from(meta.len()).unwrap_or(i64::MAX),
            used: 0,
        })];
        resp.volume_condition = condition(false, "volume is healthy".to_string());
        Ok(resp)
    }
}

fn condition(abnormal: bool, message: String) -> MessageField<pb::VolumeCondition> {
    MessageField::some(pb::VolumeCondition::from(&VolumeCondition {
        abnormal,
        message,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(required_bytes: i64, limit_bytes: i64) -> CapacityRange {
        CapacityRange {
            required_bytes,
            limit_bytes,
        }
    }

    #[test]
    fn capacity_is_the_required_size_rounded_up_to_whole_blocks() {
        assert_eq!(capacity_for(&range(0, 0)).ok(), Some(DEFAULT_BYTES));
        assert_eq!(capacity_for(&range(1 << 20, 0)).ok(), Some(1 << 20));
        assert_eq!(capacity_for(&range(1, 0)).ok(), Some(4096));
        assert_eq!(capacity_for(&range(4097, 1 << 20)).ok(), Some(8192));
        assert_eq!(capacity_for(&range(0, 1 << 20)).ok(), Some(1 << 20));
        assert_eq!(capacity_for(&range(0, 10_000)).ok(), Some(8192));
        assert_eq!(capacity_for(&range(0, 1 << 30)).ok(), Some(DEFAULT_BYTES));
    }

    #[test]
    fn capacity_without_a_whole_block_in_range_is_out_of_range() {
        for (required, limit) in [(4097, 5000), (0, 100), (i64::MAX, 0)] {
            let err = capacity_for(&range(required, limit)).unwrap_err();
            assert_eq!(
                err.code(),
                grpcio::RpcStatusCode::OUT_OF_RANGE,
                "{required}..{limit}"
            );
        }
    }
}
