//! The hostpath plugin's Node service: stage bind-mounts the volume
//! directory at the staging path, publish bind-mounts the staging path at
//! the target (remounted read-only when asked).
//!
//! Whether a path already holds a volume is read from the kernel (a mount
//! point whose inode is the volume directory's), not only from our records,
//! so repeats are answered correctly even after a plugin restart. Block
//! volumes take their own paths in [`super::block`].

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use grpcio::RpcContext;

use super::service::Sink;
use protobuf::MessageField;

use super::checks::{check_no_shrink, is_mount_point};
use super::faults::Action;
use super::state::{Staged, VolumeKind};
use super::strict::Call;
use super::{
    capacity_range, internal, required, status, trace_fields, volume_id, Plugin, Received,
    RpcResult, Service,
};
use crate::csi::convert::{self, from_hash_map};
use crate::csi::error::Code;
use crate::csi::model::Capability;
use crate::csi::proto::csi as pb;
use crate::csi::types::{NodeCapability, Usage, UsageUnit};
use crate::mount::{self, Mounter, SysMounter, UnmountMode};

pub(super) const CAPABILITIES: &[NodeCapability] = &[
    NodeCapability::StageUnstageVolume,
    NodeCapability::GetVolumeStats,
    NodeCapability::ExpandVolume,
    NodeCapability::VolumeCondition,
    NodeCapability::SingleNodeMultiWriter,
    NodeCapability::VolumeMountGroup,
];

/// True if `path` is a mount point showing the directory `dir`.
fn holds(path: &Path, dir: &Path) -> RpcResult<bool> {
    let (Ok(a), Ok(b)) = (fs::metadata(path), fs::metadata(dir)) else {
        return Ok(false);
    };
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return Ok(false);
    }
    mount::is_mount_point(path)
        .map_err(|e| internal("cannot read the mount table", crate::error_chain(&e)))
}

/// The capability as recorded for staging idempotency (no flags): a
/// mount group, when given, is part of it.
fn capability_key(cap: &Capability) -> String {
    let key = format!(
        "{}/{}/{}",
        cap.access_mode, cap.attachment_mode, cap.mount_options.fs_type
    );
    match cap.mount_options.volume_mount_group.as_str() {
        "" => key,
        group => format!("{key}/group={group}"),
    }
}

/// VOLUME_MOUNT_GROUP: the volume directory `dir` made the group's
/// (`volume_mount_group`, a GID), group-writable and setgid, so that a
/// process of that group writes it and what it makes stays the group's.
/// Nothing for an empty group.
fn give_to_group(dir: &Path, group: &str) -> RpcResult<()> {
    if group.is_empty() {
        return Ok(());
    }
    let gid = match group.parse::<u32>() {
        Ok(gid) if gid != u32::MAX && group.bytes().all(|b| b.is_ascii_digit()) => gid,
        _ => {
            return Err(status(
                Code::InvalidArgument,
                format!("volume_mount_group {group:?} is not a numeric group ID"),
            ))
        }
    };
    std::os::unix::fs::chown(dir, None, Some(gid))
        .map_err(|e| internal("cannot give the volume directory its mount group", e))?;
    let mode = fs::metadata(dir)
        .map_err(|e| internal("cannot read the volume directory", e))?
        .permissions()
        .mode();
    fs::set_permissions(
        dir,
        fs::Permissions::from_mode(mode | GROUP_WRITABLE_SETGID),
    )
    .map_err(|e| internal("cannot make the volume directory group-writable", e))
}

/// `g+rwxs`: the group reads, writes and enters; new files take the
/// directory's group.
const GROUP_WRITABLE_SETGID: u32 = 0o2070;

fn mount_error(e: mount::Error) -> grpcio::RpcStatus {
    internal("mount failed", crate::error_chain(&e))
}

impl Plugin {
    /// Checks that the volume exists and is attached to this node, and that
    /// the CO passed back the publish context ControllerPublish answered.
    fn check_attached(
        &self,
        id: &str,
        publish_context: &std::collections::HashMap<String, String>,
    ) -> RpcResult<()> {
        let state = self.lock(id)?;
        let volume = state
            .volumes
            .get(id)
            .ok_or_else(|| status(Code::NotFound, format!("volume {id} does not exist")))?;
        if self.config.no_attach {
            return Ok(());
        }
        match &volume.attached {
            Some((node, _)) if *node == self.config.node_id => {}
            _ => {
                return Err(status(
                    Code::FailedPrecondition,
                    format!(
                    "volume {id} is not attached to node {} (call ControllerPublishVolume first)",
                    self.config.node_id
                ),
                ))
            }
        }
        if publish_context.get(super::PUBLISH_CONTEXT_KEY) != Some(&self.config.node_id) {
            return Err(status(
                Code::InvalidArgument,
                "publish_context from ControllerPublishVolume is missing",
            ));
        }
        Ok(())
    }

    /// The checks NodeStage and NodePublish share: a valid volume ID, a
    /// capability of the volume's kind, and the volume attached here with
    /// its publish context passed back.
    fn check_mountable<'a>(
        &self,
        volume: &'a str,
        capability: &protobuf::MessageField<pb::VolumeCapability>,
        publish_context: &std::collections::HashMap<String, String>,
    ) -> RpcResult<(&'a str, Capability, VolumeKind)> {
        let id = volume_id("volume_id", volume)?;
        let cap = convert::capability_from_field(capability)
            .map_err(|e| status(Code::InvalidArgument, e.to_string()))?;
        self.check_attached(id, publish_context)?;
        let kind = self
            .lock(id)?
            .volumes
            .get(id)
            .map(|v| v.kind)
            .unwrap_or_default();
        kind.check_serves(id, std::slice::from_ref(&cap))
            .map_err(|m| status(Code::InvalidArgument, m))?;
        Ok((id, cap, kind))
    }

    fn node_stage(
        &self,
        req: &pb::NodeStageVolumeRequest,
    ) -> RpcResult<pb::NodeStageVolumeResponse> {
        let staging = Path::new(required("staging_target_path", &req.staging_target_path)?);
        let (id, cap, kind) =
            self.check_mountable(&req.volume_id, &req.volume_capability, &req.publish_context)?;
        self.check_secrets(&req.secrets)?;
        if !staging.is_dir() {
            return Err(status(
                Code::FailedPrecondition,
                format!(
                    "staging_target_path {} does not exist (the CO creates it)",
                    staging.display()
                ),
            ));
        }
        let dir = self.volume_dir(id);
        let key = capability_key(&cap);
        let mut state = self.lock(id)?;
        if kind == VolumeKind::Block {
            self.stage_block(&mut state, id, staging, key)?;
            return Ok(pb::NodeStageVolumeResponse::new());
        }
        if is_mount_point(staging)? {
            if !holds(staging, &dir)? {
                return Err(status(
                    Code::AlreadyExists,
                    format!("{} holds another mount", staging.display()),
                ));
            }
            return match state.staged.get(staging) {
                Some(s) if s.volume_id != id || s.capability != key => Err(status(
                    Code::AlreadyExists,
                    format!(
                        "volume {id} is staged at {} with another capability",
                        staging.display()
                    ),
                )),
                _ => Ok(pb::NodeStageVolumeResponse::new()),
            };
        }
        give_to_group(&dir, &cap.mount_options.volume_mount_group)?;
        SysMounter.bind(&dir, staging, false).map_err(mount_error)?;
        if cap
            .mount_options
            .mount_flags
            .expose()
            .iter()
            .any(|f| f == "ro")
        {
            SysMounter.remount_read_only(staging).map_err(mount_error)?;
        }
        state.staged.insert(
            staging.to_path_buf(),
            Staged {
                volume_id: id.to_string(),
                capability: key,
            },
        );
        state.save().map_err(|e| internal("cannot save state", e))?;
        Ok(pb::NodeStageVolumeResponse::new())
    }

    /// The `skip` fault of a release: forget the record, leave the mount,
    /// answer success.
    fn forget<Resp: Default>(
        &self,
        id: &str,
        change: impl FnOnce(&mut super::state::State),
    ) -> RpcResult<Resp> {
        let mut state = self.lock(id)?;
        change(&mut state);
        state.save().map_err(|e| internal("cannot save state", e))?;
        Ok(Resp::default())
    }

    fn node_unstage(
        &self,
        req: &pb::NodeUnstageVolumeRequest,
    ) -> RpcResult<pb::NodeUnstageVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let staging = Path::new(required("staging_target_path", &req.staging_target_path)?);
        let mut state = self.lock(id)?;
        // A CO that stages once per usage (as Nomad does) has several
        // stagings of one volume: only the last one must outlive every
        // publish.
        let other_staging = state
            .staged
            .iter()
            .any(|(path, s)| s.volume_id == id && path != staging);
        let live = state.published.iter().find(|(_, (v, _))| v == id);
        if let (Some((target, _)), false) = (live, other_staging) {
            return Err(status(
                Code::FailedPrecondition,
                format!("volume {id} is still published at {}", target.display()),
            ));
        }
        let block = state
            .volumes
            .get(id)
            .is_some_and(|v| v.kind == VolumeKind::Block);
        if block && !other_staging {
            self.unstage_block(&state, id)?;
        }
        if is_mount_point(staging)? {
            SysMounter
                .unmount(staging, UnmountMode::Normal)
                .map_err(mount_error)?;
        }
        if state.staged.remove(staging).is_some() {
            state.save().map_err(|e| internal("cannot save state", e))?;
        }
        Ok(pb::NodeUnstageVolumeResponse::new())
    }

    fn node_publish(
        &self,
        req: &pb::NodePublishVolumeRequest,
    ) -> RpcResult<pb::NodePublishVolumeResponse> {
        let target = Path::new(required("target_path", &req.target_path)?);
        let staging = Path::new(required("staging_target_path", &req.staging_target_path)?);
        let (id, cap, kind) =
            self.check_mountable(&req.volume_id, &req.volume_capability, &req.publish_context)?;
        self.check_secrets(&req.secrets)?;
        let dir = self.volume_dir(id);
        let mut state = self.lock(id)?;
        let staged = match kind {
            VolumeKind::Directory => holds(staging, &dir)?,
            VolumeKind::Block => state.staged.get(staging).is_some_and(|s| s.volume_id == id),
        };
        if !staged {
            return Err(status(
                Code::FailedPrecondition,
                format!("volume {id} is not staged at {}", staging.display()),
            ));
        }
        match target.parent() {
            Some(parent) if parent.is_dir() => {}
            _ => {
                return Err(status(
                    Code::InvalidArgument,
                    format!(
                        "the parent of target_path {} does not exist (the CO creates it)",
                        target.display()
                    ),
                ))
            }
        }
        if kind == VolumeKind::Block {
            self.publish_block(&mut state, id, target, req.readonly)?;
            return Ok(pb::NodePublishVolumeResponse::new());
        }
        if is_mount_point(target)? {
            if !holds(target, &dir)? {
                return Err(status(
                    Code::AlreadyExists,
                    format!("{} holds another mount", target.display()),
                ));
            }
            let read_only = mount::MountInfo::read()
                .map_err(mount_error)?
                .get(
                    &target
                        .canonicalize()
                        .map_err(|e| internal("canonicalize", e))?,
                )
                .is_some_and(|m| m.is_read_only());
            if read_only != req.readonly {
                return Err(status(
                    Code::AlreadyExists,
                    format!(
                        "volume {id} is published at {} with another read-only flag",
                        target.display()
                    ),
                ));
            }
            return Ok(pb::NodePublishVolumeResponse::new());
        }
        match fs::create_dir(target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(internal("cannot create target_path", e)),
        }
        // The staging has it already; a publish that names it makes sure.
        give_to_group(&dir, &cap.mount_options.volume_mount_group)?;
        SysMounter
            .bind(staging, target, false)
            .map_err(mount_error)?;
        if req.readonly {
            if let Err(e) = SysMounter.remount_read_only(target) {
                let _ = SysMounter.unmount(target, UnmountMode::Detach);
                return Err(mount_error(e));
            }
        }
        state
            .published
            .insert(target.to_path_buf(), (id.to_string(), req.readonly));
        state.save().map_err(|e| internal("cannot save state", e))?;
        Ok(pb::NodePublishVolumeResponse::new())
    }

    fn node_unpublish(
        &self,
        req: &pb::NodeUnpublishVolumeRequest,
    ) -> RpcResult<pb::NodeUnpublishVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let target = Path::new(required("target_path", &req.target_path)?);
        let mut state = self.lock(id)?;
        if is_mount_point(target)? {
            SysMounter
                .unmount(target, UnmountMode::Normal)
                .map_err(mount_error)?;
        }
        // A directory for a file-system volume, a file for a block volume.
        let removed = match fs::symlink_metadata(target) {
            Ok(m) if m.is_dir() => fs::remove_dir(target),
            Ok(_) => fs::remove_file(target),
            Err(e) => Err(e),
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(internal("cannot remove target_path", e)),
        }
        if let Some((_, read_only)) = state.published.get(target).filter(|(v, _)| v == id) {
            let read_only = *read_only;
            state.published.remove(target);
            state.save().map_err(|e| internal("cannot save state", e))?;
            let block = state
                .volumes
                .get(id)
                .is_some_and(|v| v.kind == VolumeKind::Block);
            if block && read_only {
                self.unpublished_block(&state, id)?;
            }
        }
        Ok(pb::NodeUnpublishVolumeResponse::new())
    }

    fn node_stats(
        &self,
        req: &pb::NodeGetVolumeStatsRequest,
    ) -> RpcResult<pb::NodeGetVolumeStatsResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let path = Path::new(required("volume_path", &req.volume_path)?);
        let kind = self
            .lock(id)?
            .volumes
            .get(id)
            .map(|v| v.kind)
            .ok_or_else(|| status(Code::NotFound, format!("volume {id} does not exist")))?;
        if kind == VolumeKind::Block {
            return self.block_stats(id, path);
        }
        let dir = self.volume_dir(id);
        let mut resp = pb::NodeGetVolumeStatsResponse::new();
        if !dir.is_dir() {
            resp.volume_condition = MessageField::some(pb::VolumeCondition::from(
                &crate::csi::types::VolumeCondition {
                    abnormal: true,
                    message: format!("the volume directory {} is missing", dir.display()),
                },
            ));
            return Ok(resp);
        }
        if !holds(path, &dir)? {
            return Err(status(
                Code::NotFound,
                format!("volume {id} is not mounted at {}", path.display()),
            ));
        }
        let usage = mount::fs_usage(path).map_err(mount_error)?;
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        resp.usage = vec![
            pb::VolumeUsage::from(&Usage {
                unit: UsageUnit::Bytes,
                available: clamp(usage.available_bytes),
                total: clamp(usage.total_bytes),
                used: clamp(usage.used_bytes),
            }),
            pb::VolumeUsage::from(&Usage {
                unit: UsageUnit::Inodes,
                available: clamp(usage.available_inodes),
                total: clamp(usage.total_inodes),
                used: clamp(usage.used_inodes),
            }),
        ];
        resp.volume_condition = MessageField::some(pb::VolumeCondition::from(
            &crate::csi::types::VolumeCondition {
                abnormal: false,
                message: "volume is healthy".to_string(),
            },
        ));
        Ok(resp)
    }

    /// NodeExpandVolume at `volume_path` (a staging path or a target):
    /// a block volume's devices learn its new size; a directory has no
    /// size to grow, so a larger size asked for is recorded as its
    /// capacity. Either way the capacity is answered.
    fn node_expand(
        &self,
        req: &pb::NodeExpandVolumeRequest,
    ) -> RpcResult<pb::NodeExpandVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let path = Path::new(required("volume_path", &req.volume_path)?);
        let range = capacity_range(req.capacity_range.as_ref())?;
        let capability = req
            .volume_capability
            .as_ref()
            .map(Capability::try_from)
            .transpose()
            .map_err(|e| status(Code::InvalidArgument, e.to_string()))?;
        let mut state = self.lock(id)?;
        let volume = state
            .volumes
            .get(id)
            .ok_or_else(|| status(Code::NotFound, format!("volume {id} does not exist")))?;
        let (kind, capacity) = (volume.kind, volume.capacity_bytes);
        if let Some(capability) = capability {
            kind.check_serves(id, &[capability])
                .map_err(|m| status(Code::InvalidArgument, m))?;
        }
        let mut resp = pb::NodeExpandVolumeResponse::new();
        if kind == VolumeKind::Block {
            resp.capacity_bytes = self.expand_block_on_node(&state, id, path, &range)?;
            return Ok(resp);
        }
        if !holds(path, &self.volume_dir(id))? {
            return Err(status(
                Code::NotFound,
                format!("volume {id} is not mounted at {}", path.display()),
            ));
        }
        check_no_shrink(id, capacity, &range)?;
        if range.required_bytes > capacity {
            if let Some(volume) = state.volumes.get_mut(id) {
                volume.capacity_bytes = range.required_bytes;
            }
            state.save().map_err(|e| internal("cannot save state", e))?;
        }
        resp.capacity_bytes = capacity.max(range.required_bytes);
        Ok(resp)
    }

    fn node_info(&self) -> pb::NodeGetInfoResponse {
        let mut resp = pb::NodeGetInfoResponse::new();
        resp.node_id = self.config.node_id.clone();
        resp.accessible_topology = MessageField::some(self.topology());
        resp
    }
}

fn path_fields(volume: &str, staging: &str, target: &str, readonly: bool) -> String {
    trace_fields(&[
        ("volume", volume),
        ("staging", staging),
        ("target", target),
        ("readonly", if readonly { "true" } else { "" }),
    ])
}

impl Service {
    pub(super) fn node_stage_volume(
        &self,
        ctx: &RpcContext,
        req: pb::NodeStageVolumeRequest,
        sink: Sink,
    ) {
        let fields = path_fields(&req.volume_id, &req.staging_target_path, "", false);
        let call = Call::NodeStageVolume {
            volume: req.volume_id.clone(),
            staging: PathBuf::from(&req.staging_target_path),
            publish_context: from_hash_map(&req.publish_context),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, _| p.node_stage(&req));
    }

    pub(super) fn node_unstage_volume(
        &self,
        ctx: &RpcContext,
        req: pb::NodeUnstageVolumeRequest,
        sink: Sink,
    ) {
        let fields = path_fields(&req.volume_id, &req.staging_target_path, "", false);
        let call = Call::NodeUnstageVolume {
            volume: req.volume_id.clone(),
            staging: PathBuf::from(&req.staging_target_path),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, fault| {
            if fault == Some(Action::Skip) {
                return p.forget(&req.volume_id, |state| {
                    state.staged.remove(Path::new(&req.staging_target_path));
                });
            }
            p.node_unstage(&req)
        });
    }

    pub(super) fn node_publish_volume(
        &self,
        ctx: &RpcContext,
        req: pb::NodePublishVolumeRequest,
        sink: Sink,
    ) {
        let fields = path_fields(
            &req.volume_id,
            &req.staging_target_path,
            &req.target_path,
            req.readonly,
        );
        let call = Call::NodePublishVolume {
            volume: req.volume_id.clone(),
            staging: PathBuf::from(&req.staging_target_path),
            target: PathBuf::from(&req.target_path),
            publish_context: from_hash_map(&req.publish_context),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, _| p.node_publish(&req));
    }

    pub(super) fn node_unpublish_volume(
        &self,
        ctx: &RpcContext,
        req: pb::NodeUnpublishVolumeRequest,
        sink: Sink,
    ) {
        let fields = path_fields(&req.volume_id, "", &req.target_path, false);
        let call = Call::NodeUnpublishVolume {
            volume: req.volume_id.clone(),
            target: PathBuf::from(&req.target_path),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, fault| {
            if fault == Some(Action::Skip) {
                return p.forget(&req.volume_id, |state| {
                    state.published.remove(Path::new(&req.target_path));
                });
            }
            p.node_unpublish(&req)
        });
    }

    pub(super) fn node_get_volume_stats(
        &self,
        ctx: &RpcContext,
        req: pb::NodeGetVolumeStatsRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id), ("path", &req.volume_path)]);
        let call = Call::NodeGetVolumeStats {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, _| p.node_stats(&req));
    }

    pub(super) fn node_expand_volume(
        &self,
        ctx: &RpcContext,
        req: pb::NodeExpandVolumeRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id), ("path", &req.volume_path)]);
        let call = Call::NodeExpandVolume {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, _| p.node_expand(&req));
    }

    pub(super) fn node_get_capabilities(
        &self,
        ctx: &RpcContext,
        req: pb::NodeGetCapabilitiesRequest,
        sink: Sink,
    ) {
        let received = Received::new(Call::NodeGetCapabilities, &req, String::new());
        self.serve(ctx, received, sink, |p, _| {
            let mut resp = pb::NodeGetCapabilitiesResponse::new();
            resp.capabilities = CAPABILITIES
                .iter()
                .filter(|c| !p.config.without.iter().any(|w| *w == c.to_string()))
                .map(|c| convert::node_capability_to_proto(*c))
                .collect();
            Ok(resp)
        });
    }

    pub(super) fn node_get_info(&self, ctx: &RpcContext, req: pb::NodeGetInfoRequest, sink: Sink) {
        let received = Received::new(Call::NodeGetInfo, &req, String::new());
        self.serve(ctx, received, sink, |p, _| Ok(p.node_info()));
    }
}
