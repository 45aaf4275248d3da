//! The hostpath plugin's snapshots, and the volumes it makes from a
//! snapshot or from another volume (clones).
//!
//! A snapshot is a copy of its source volume at one moment, made by
//! [`super::content`]: `<base-dir>/snapshots/<id>/files/` holds the copy of
//! a file-system volume's directory, `<base-dir>/snapshots/<id>/block.img`
//! the copy of a block volume's backing file, after what the volume's loop
//! devices hold was flushed into it. A copy is made in `<base-dir>/tmp/`
//! and renamed into place once synced, so a snapshot is whole or absent
//! and always `ready_to_use`. A volume made from a snapshot or a volume is
//! such a copy too, at the new volume's place, at least as large as its
//! source.
//!
//! A snapshot's ID is derived from the CO's name ([`snapshot_id`]), so the
//! name is the idempotency key and the ID is always a safe path component.
//! Copies are made while holding the records of the snapshot or volume
//! being made and of its source: other calls for them wait, which suits
//! the small volumes of a test and dev plugin. A copy also holds the base
//! dir shared (see [`super::records`]), so that a process of a split
//! plugin that starts does not empty the scratch space under it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use protobuf::MessageField;

use super::content;
use super::record_key::Key;
use super::records::{BaseDirHold, Hold};
use super::state::{SnapshotRecord, State, VolumeKind, VolumeRecord};
use super::{internal, page, required, status, Plugin, RpcResult};
use crate::csi::error::Code;
use crate::csi::proto::csi as pb;
use crate::csi::types::{CapacityRange, ContentSource, Snapshot};

/// The directory of snapshots in the base dir.
const SNAPSHOTS: &str = "snapshots";

/// The copy of a file-system volume, in a snapshot's directory.
const FILES: &str = "files";

/// The copy of a block volume's backing file, in a snapshot's directory.
const BLOCK_IMAGE: &str = "block.img";

/// The snapshot ID for the CO's snapshot name `name` (not empty): the name
/// itself when it is made of `[A-Za-z0-9._-]`; otherwise every other byte
/// is written `[xx]` (lower-case hex), and `.` and `..` have their dots
/// written so. That is one-to-one: distinct names never share an ID. An
/// escaped name longer than [`crate::id::MAX_LEN`] becomes `[h]` and 32 hex
/// digits of its 128-bit FNV-1a hash, a form no escaped name has. Every ID
/// passes [`crate::id::validate`].
pub fn snapshot_id(name: &str) -> String {
    if name == "." || name == ".." {
        return "[2e]".repeat(name.len());
    }
    let mut id = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            id.push(char::from(byte));
        } else {
            id.push_str(&format!("[{byte:02x}]"));
        }
    }
    if id.len() <= crate::id::MAX_LEN {
        return id;
    }
    format!("[h]{}", crate::id::digest_hex(name))
}

/// Copies the data of a volume or snapshot of `kind` at `from` to the new
/// `to`; a block copy is made `len` bytes long when that is larger.
/// Answers the copy's length (0 for a directory).
fn copy(kind: VolumeKind, from: &Path, to: &Path, len: Option<u64>) -> Result<u64, content::Error> {
    match kind {
        VolumeKind::Directory => content::copy_tree(from, to).map(|()| 0),
        VolumeKind::Block => content::copy_file(from, to, len),
    }
}

/// The name of the copy in a snapshot's directory.
fn data_name(kind: VolumeKind) -> &'static str {
    match kind {
        VolumeKind::Directory => FILES,
        VolumeKind::Block => BLOCK_IMAGE,
    }
}

/// Runs `make`, which builds a copy at `scratch` and puts it in place,
/// on a fresh `scratch`; removes what a failed attempt left there.
fn in_scratch<T>(scratch: &Path, make: impl FnOnce() -> Result<T, content::Error>) -> RpcResult<T> {
    let made = content::remove(scratch).and_then(|()| make());
    if made.is_err() {
        if let Err(err) = content::remove(scratch) {
            log::warn!("{}", crate::error_chain(&err));
        }
    }
    made.map_err(|err| internal("cannot copy", crate::error_chain(&err)))
}

fn snapshot_message(id: &str, record: &SnapshotRecord) -> MessageField<pb::Snapshot> {
    MessageField::some(pb::Snapshot::from(&Snapshot {
        snapshot_id: id.to_string(),
        source_volume_id: record.source_volume_id.clone(),
        size_bytes: record.size_bytes,
        creation_time: Some(record.creation_time),
        ready_to_use: true,
    }))
}

impl Plugin {
    fn snapshot_dir(&self, id: &str) -> PathBuf {
        self.config.base_dir.join(SNAPSHOTS).join(id)
    }

    /// A hold of the base dir while a copy is made in the scratch space.
    fn copying(&self) -> RpcResult<BaseDirHold> {
        self.state
            .hold(Hold::Shared)
            .map_err(|e| internal("cannot hold the base dir", e))
    }

    /// Where a copy named `name` is made before it is put in place.
    fn scratch(&self, name: &str) -> PathBuf {
        self.config.base_dir.join(super::SCRATCH).join(name)
    }

    /// The data of a volume of `kind`: its directory or its backing file.
    pub(super) fn volume_data(&self, id: &str, kind: VolumeKind) -> PathBuf {
        match kind {
            VolumeKind::Directory => self.volume_dir(id),
            VolumeKind::Block => self.backing_file(id),
        }
    }

    /// The data of a snapshot of a volume of `kind`.
    fn snapshot_data(&self, id: &str, kind: VolumeKind) -> PathBuf {
        self.snapshot_dir(id).join(data_name(kind))
    }

    pub(super) fn create_snapshot(
        &self,
        req: &pb::CreateSnapshotRequest,
    ) -> RpcResult<pb::CreateSnapshotResponse> {
        let name = required("name", &req.name)?;
        let source = required("source_volume_id", &req.source_volume_id)?;
        let id = snapshot_id(name);
        let keys = [Key::Snapshot(id.clone()), Key::Volume(source.to_string())];
        let mut state = self.lock_records(&keys)?;
        let mut resp = pb::CreateSnapshotResponse::new();
        if let Some(existing) = state.snapshots.get(&id) {
            if existing.name != name {
                return Err(status(
                    Code::AlreadyExists,
                    format!("snapshot ID {id} is taken by another snapshot name"),
                ));
            }
            if existing.source_volume_id != source {
                return Err(status(
                    Code::AlreadyExists,
                    format!(
                        "snapshot {name:?} exists as a snapshot of volume {}",
                        existing.source_volume_id
                    ),
                ));
            }
            resp.snapshot = snapshot_message(&id, existing);
            return Ok(resp);
        }
        let (kind, capacity_bytes) = state
            .volumes
            .get(source)
            .map(|v| (v.kind, v.capacity_bytes))
            .ok_or_else(|| status(Code::NotFound, format!("volume {source} does not exist")))?;
        let creation_time = SystemTime::now();
        if kind == VolumeKind::Block {
            self.flush_devices(source)?;
        }
        // The snapshot's directory is made whole aside, with its copy
        // inside, and renamed into place.
        let scratch = self.scratch(&format!("snapshot-{id}"));
        let take = || -> Result<u64, content::Error> {
            content::make_dir(&scratch)?;
            let from = self.volume_data(source, kind);
            let copied = copy(kind, &from, &scratch.join(data_name(kind)), None)?;
            content::sync_dir(&scratch)?;
            content::put_in_place(&scratch, &self.snapshot_dir(&id))?;
            Ok(copied)
        };
        let copying = self.copying()?;
        let copied = in_scratch(&scratch, take)?;
        drop(copying);
        let record = SnapshotRecord {
            name: name.to_string(),
            source_volume_id: source.to_string(),
            size_bytes: match kind {
                VolumeKind::Directory => capacity_bytes,
                VolumeKind::Block => i64::try_from(copied).unwrap_or(i64::MAX),
            },
            creation_time,
            kind,
        };
        resp.snapshot = snapshot_message(&id, &record);
        state.snapshots.insert(id, record);
        state.save().map_err(|e| internal("cannot save state", e))?;
        Ok(resp)
    }

    pub(super) fn delete_snapshot(
        &self,
        req: &pb::DeleteSnapshotRequest,
    ) -> RpcResult<pb::DeleteSnapshotResponse> {
        let id = required("snapshot_id", &req.snapshot_id)?;
        let mut state = self.lock_records(&[Key::Snapshot(id.to_string())])?;
        // An unknown ID names nothing on disk, whatever its bytes: only
        // recorded IDs become paths.
        if state.snapshots.contains_key(id) {
            content::remove(&self.snapshot_dir(id))
                .map_err(|e| internal("cannot remove the snapshot", crate::error_chain(&e)))?;
            state.snapshots.remove(id);
            state.save().map_err(|e| internal("cannot save state", e))?;
        }
        Ok(pb::DeleteSnapshotResponse::new())
    }

    pub(super) fn list_snapshots(
        &self,
        req: &pb::ListSnapshotsRequest,
    ) -> RpcResult<pb::ListSnapshotsResponse> {
        let state = self.read_all()?;
        let matching: Vec<(&String, &SnapshotRecord)> = state
            .snapshots
            .iter()
            .filter(|(id, _)| req.snapshot_id.is_empty() || **id == req.snapshot_id)
            .filter(|(_, s)| {
                req.source_volume_id.is_empty() || s.source_volume_id == req.source_volume_id
            })
            .collect();
        let (range, next_token) = page(matching.len(), req.max_entries, &req.starting_token)?;
        let mut resp = pb::ListSnapshotsResponse::new();
        resp.entries = matching[range]
            .iter()
            .map(|(id, record)| {
                let mut entry = pb::list_snapshots_response::Entry::new();
                entry.snapshot = snapshot_message(id, record);
                entry
            })
            .collect();
        resp.next_token = next_token;
        Ok(resp)
    }

    /// A new volume `id` of `kind` with the contents of `source`, as
    /// CreateVolume makes it: NOT_FOUND without the source,
    /// INVALID_ARGUMENT for a source of the other kind, OUT_OF_RANGE when
    /// `range` does not admit the source's size.
    pub(super) fn provision_from(
        &self,
        state: &State,
        id: &str,
        kind: VolumeKind,
        range: &CapacityRange,
        source: &ContentSource,
    ) -> RpcResult<VolumeRecord> {
        let (described, from, source_kind, size) = match source {
            ContentSource::Snapshot(snapshot) => {
                let record = state.snapshots.get(snapshot).ok_or_else(|| {
                    status(
                        Code::NotFound,
                        format!("snapshot {snapshot} does not exist"),
                    )
                })?;
                let data = self.snapshot_data(snapshot, record.kind);
                (
                    format!("snapshot {snapshot}"),
                    data,
                    record.kind,
                    record.size_bytes,
                )
            }
            ContentSource::Volume(volume) => {
                let record = state.volumes.get(volume).ok_or_else(|| {
                    status(Code::NotFound, format!("volume {volume} does not exist"))
                })?;
                let data = self.volume_data(volume, record.kind);
                (
                    format!("volume {volume}"),
                    data,
                    record.kind,
                    record.capacity_bytes,
                )
            }
        };
        if source_kind != kind {
            return Err(status(
                Code::InvalidArgument,
                format!(
                    "{described} holds a {} volume: a {} volume cannot be made from it",
                    source_kind.attachment(),
                    kind.attachment()
                ),
            ));
        }
        if range.limit_bytes > 0 && size > range.limit_bytes {
            return Err(status(
                Code::OutOfRange,
                format!(
                    "{described} has {size} bytes, more than limit_bytes {}",
                    range.limit_bytes
                ),
            ));
        }
        let wanted = CapacityRange {
            required_bytes: range.required_bytes.max(size),
            limit_bytes: range.limit_bytes,
        };
        let capacity = match kind {
            VolumeKind::Directory if wanted.required_bytes > 0 => wanted.required_bytes,
            VolumeKind::Directory => wanted.limit_bytes,
            VolumeKind::Block => super::block::capacity_for(&wanted)?,
        };
        if let (ContentSource::Volume(volume), VolumeKind::Block) = (source, kind) {
            self.flush_devices(volume)?;
        }
        let scratch = self.scratch(&format!("volume-{id}"));
        let copying = self.copying()?;
        in_scratch(&scratch, || {
            copy(kind, &from, &scratch, u64::try_from(capacity).ok())?;
            content::put_in_place(&scratch, &self.volume_data(id, kind))
        })?;
        drop(copying);
        Ok(VolumeRecord {
            capacity_bytes: capacity,
            attached: None,
            kind,
            content_source: Some(source.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_are_their_own_ids() {
        for name in ["snap-1", "snapshot-6f1e.2", "A_b", "...", &"x".repeat(128)] {
            assert_eq!(snapshot_id(name), name);
        }
    }

    #[test]
    fn other_names_are_escaped_one_to_one_into_valid_ids() {
        let cases = [
            ("a/b", "a[2f]b"),
            ("../etc", "..[2f]etc"),
            (".", "[2e]"),
            ("..", "[2e][2e]"),
            ("[2e]", "[5b]2e[5d]"),
            ("data[0]", "data[5b]0[5d]"),
            ("a b", "a[20]b"),
            ("é", "[c3][a9]"),
        ];
        for (name, id) in cases {
            assert_eq!(snapshot_id(name), id, "{name:?}");
            crate::id::validate("snapshot ID", id).unwrap();
        }
        let ids: std::collections::BTreeSet<String> =
            cases.iter().map(|(n, _)| snapshot_id(n)).collect();
        assert_eq!(ids.len(), cases.len());
    }

    #[test]
    fn names_too_long_once_escaped_are_hashed() {
        let long = "/".repeat(100);
        let id = snapshot_id(&long);
        assert!(id.starts_with("[h]") && id.len() == 35, "{id}");
        crate::id::validate("snapshot ID", &id).unwrap();
        assert_eq!(snapshot_id(&long), id, "stable");
        assert_ne!(snapshot_id(&"/".repeat(101)), id);
    }
}
