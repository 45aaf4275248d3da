//! The hostpath plugin's Controller service: volumes are directories or,
//! for block capabilities, sparse files (see [`super::block`]), and
//! "attaching" to a node is a record that NodeStage checks. The gRPC glue
//! is [`super::controller_grpc`].

use std::fs;

use protobuf::MessageField;

use super::block;
use super::checks::check_no_shrink;
use super::faults::Action;
use super::record_key::Key;
use super::state::{State, VolumeKind, VolumeRecord};
use super::{capacity_range, internal, page, required, status, volume_id, Plugin, RpcResult};
use crate::csi::convert::{self, capabilities_from_proto};
use crate::csi::error::Code;
use crate::csi::model::{AccessMode, Capability};
use crate::csi::proto::csi as pb;
use crate::csi::types::{CapacityRange, ContentSource, ControllerCapability, VolumeCondition};
use crate::mount;

const CAPABILITIES: &[ControllerCapability] = &[
    ControllerCapability::CreateDeleteVolume,
    ControllerCapability::PublishUnpublishVolume,
    ControllerCapability::ListVolumes,
    ControllerCapability::GetCapacity,
    ControllerCapability::CreateDeleteSnapshot,
    ControllerCapability::ListSnapshots,
    ControllerCapability::CloneVolume,
    ControllerCapability::ExpandVolume,
    ControllerCapability::ListVolumesPublishedNodes,
    ControllerCapability::VolumeCondition,
    ControllerCapability::GetVolume,
    ControllerCapability::PublishReadonly,
    ControllerCapability::SingleNodeMultiWriter,
];

/// The controller capabilities the plugin advertises: without attachments,
/// none of ControllerPublishVolume's; never those `config.without` names
/// (test only).
pub(super) fn capabilities(
    config: &super::Config,
) -> impl Iterator<Item = ControllerCapability> + '_ {
    CAPABILITIES.iter().copied().filter(move |c| {
        let attach = matches!(
            c,
            ControllerCapability::PublishUnpublishVolume
                | ControllerCapability::PublishReadonly
                | ControllerCapability::ListVolumesPublishedNodes
        );
        let left_out = config.without.iter().any(|w| *w == c.to_string());
        !(left_out || config.no_attach && attach)
    })
}

/// Checks that a CreateVolume of the existing volume `id` is a repeat:
/// the same kind, a capacity in `range` and the same content source, or
/// ALREADY_EXISTS.
fn check_repeat(
    id: &str,
    existing: &VolumeRecord,
    kind: VolumeKind,
    range: &CapacityRange,
    source: Option<&ContentSource>,
) -> RpcResult<()> {
    if existing.kind != kind {
        return Err(status(
            Code::AlreadyExists,
            format!(
                "volume {id} exists as a {} volume",
                existing.kind.attachment()
            ),
        ));
    }
    let cap = existing.capacity_bytes;
    let fits = cap >= range.required_bytes && (range.limit_bytes == 0 || cap <= range.limit_bytes);
    if !fits {
        return Err(status(
            Code::AlreadyExists,
            format!(
                "volume {id} exists with capacity {cap}, incompatible with the requested range"
            ),
        ));
    }
    if existing.content_source.as_ref() != source {
        let made_from = match &existing.content_source {
            None => "empty".to_string(),
            Some(ContentSource::Snapshot(s)) => format!("from snapshot {s}"),
            Some(ContentSource::Volume(v)) => format!("from volume {v}"),
        };
        return Err(status(
            Code::AlreadyExists,
            format!("volume {id} exists, made {made_from}"),
        ));
    }
    Ok(())
}

fn request_capabilities(field: &str, caps: &[pb::VolumeCapability]) -> RpcResult<Vec<Capability>> {
    if caps.is_empty() {
        return Err(status(
            Code::InvalidArgument,
            format!("{field} is required"),
        ));
    }
    capabilities_from_proto(caps)
        .map_err(|e| status(Code::InvalidArgument, format!("{field}: {e}")))
}

impl Plugin {
    pub(super) fn create_volume(
        &self,
        req: &pb::CreateVolumeRequest,
    ) -> RpcResult<pb::CreateVolumeResponse> {
        let id = volume_id("name", &req.name)?;
        self.check_secrets(&req.secrets)?;
        let caps = request_capabilities("volume_capabilities", &req.volume_capabilities)?;
        let kind =
            VolumeKind::for_capabilities(&caps).map_err(|m| status(Code::InvalidArgument, m))?;
        let source = req
            .volume_content_source
            .as_ref()
            .map(ContentSource::try_from)
            .transpose()
            .map_err(|e| status(Code::InvalidArgument, e.to_string()))?;
        let range = capacity_range(req.capacity_range.as_ref())?;
        if let Some(req_topology) = req.accessibility_requirements.as_ref() {
            let ours = self.topology();
            if !req_topology.requisite.is_empty() && !req_topology.requisite.contains(&ours) {
                return Err(status(
                    Code::ResourceExhausted,
                    "no requisite topology includes this node",
                ));
            }
        }
        // The source's record is read under its lock too: it stays while it
        // is copied.
        let mut keys = vec![Key::Volume(id.to_string())];
        keys.extend(source.as_ref().map(|source| match source {
            ContentSource::Snapshot(snapshot) => Key::Snapshot(snapshot.clone()),
            ContentSource::Volume(volume) => Key::Volume(volume.clone()),
        }));
        let mut state = self.lock_records(&keys)?;
        let record = if let Some(existing) = state.volumes.get(id) {
            check_repeat(id, existing, kind, &range, source.as_ref())?;
            existing.clone()
        } else {
            let record = match &source {
                None => self.provision_empty(id, kind, &range)?,
                Some(source) => self.provision_from(&state, id, kind, &range, source)?,
            };
            state.volumes.insert(id.to_string(), record.clone());
            state.save().map_err(|e| internal("cannot save state", e))?;
            record
        };
        let mut resp = pb::CreateVolumeResponse::new();
        resp.volume = MessageField::some(self.volume_message(id, &record));
        Ok(resp)
    }

    /// A new empty volume `id` of `kind` for `range`.
    fn provision_empty(
        &self,
        id: &str,
        kind: VolumeKind,
        range: &CapacityRange,
    ) -> RpcResult<VolumeRecord> {
        let capacity_bytes = match kind {
            VolumeKind::Directory => {
                let dir = self.volume_dir(id);
                fs::create_dir_all(&dir)
                    .map_err(|e| internal("cannot create the volume directory", e))?;
                if range.required_bytes > 0 {
                    range.required_bytes
                } else {
                    range.limit_bytes
                }
            }
            VolumeKind::Block => {
                let size = block::capacity_for(range)?;
                block::create_backing_file(&self.backing_file(id), size)?;
                size
            }
        };
        Ok(VolumeRecord {
            capacity_bytes,
            attached: None,
            kind,
            content_source: None,
        })
    }

    /// The Volume message of volume `id`.
    pub(super) fn volume_message(&self, id: &str, record: &VolumeRecord) -> pb::Volume {
        let mut volume = pb::Volume::new();
        volume.volume_id = id.to_string();
        volume.capacity_bytes = record.capacity_bytes;
        volume.accessible_topology = vec![self.topology()];
        if let Some(source) = &record.content_source {
            volume.content_source = MessageField::some(source.into());
        }
        volume
    }

    pub(super) fn delete_volume(
        &self,
        req: &pb::DeleteVolumeRequest,
    ) -> RpcResult<pb::DeleteVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let mut state = self.lock(id)?;
        let kind = match state.volumes.get(id) {
            None => return Ok(pb::DeleteVolumeResponse::new()),
            Some(VolumeRecord {
                attached: Some((node, _)),
                ..
            }) => {
                return Err(status(
                    Code::FailedPrecondition,
                    format!("volume {id} is attached to node {node}"),
                ));
            }
            Some(record) => record.kind,
        };
        match kind {
            VolumeKind::Directory => match fs::remove_dir_all(self.volume_dir(id)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(internal("cannot remove the volume directory", e)),
            },
            VolumeKind::Block => {
                // A target bound to a detached device would show the next
                // volume that gets its number.
                if let Some(path) = state.in_use_on_node(id) {
                    return Err(status(
                        Code::FailedPrecondition,
                        format!(
                            "volume {id} is still staged or published at {}",
                            path.display()
                        ),
                    ));
                }
                block::delete_backing_file(&self.backing_file(id))?;
            }
        }
        state.volumes.remove(id);
        state.save().map_err(|e| internal("cannot save state", e))?;
        Ok(pb::DeleteVolumeResponse::new())
    }

    pub(super) fn controller_publish(
        &self,
        req: &pb::ControllerPublishVolumeRequest,
    ) -> RpcResult<pb::ControllerPublishVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let node = required("node_id", &req.node_id)?;
        convert::capability_from_field(&req.volume_capability)
            .map_err(|e| status(Code::InvalidArgument, e.to_string()))?;
        let mut state = self.lock(id)?;
        let volume = state
            .volumes
            .get_mut(id)
            .ok_or_else(|| status(Code::NotFound, format!("volume {id} does not exist")))?;
        if !self.knows_node(node) {
            return Err(status(
                Code::NotFound,
                format!("node {node} does not exist"),
            ));
        }
        match &volume.attached {
            Some((n, ro)) if n == node && *ro == req.readonly => {}
            Some((n, _)) if n == node => {
                return Err(status(
                    Code::AlreadyExists,
                    format!("volume {id} is attached to {node} with another read-only flag"),
                ));
            }
            Some((other, _)) => {
                return Err(status(
                    Code::FailedPrecondition,
                    format!("volume {id} is attached to node {other}"),
                ));
            }
            None => {
                volume.attached = Some((node.to_string(), req.readonly));
                state.save().map_err(|e| internal("cannot save state", e))?;
            }
        }
        let mut resp = pb::ControllerPublishVolumeResponse::new();
        resp.publish_context = convert::to_hash_map(&super::publish_context(node));
        Ok(resp)
    }

    pub(super) fn controller_unpublish(
        &self,
        req: &pb::ControllerUnpublishVolumeRequest,
    ) -> RpcResult<pb::ControllerUnpublishVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let mut state = self.lock(id)?;
        if let Some(path) = state.in_use_on_node(id) {
            if !self.config.fence {
                return Err(status(
                    Code::FailedPrecondition,
                    format!(
                        "volume {id} is still staged or published at {}",
                        path.display()
                    ),
                ));
            }
            log::warn!(
                "ControllerUnpublishVolume: fencing node {:?} off volume {id}, still staged or published at {}",
                req.node_id,
                path.display()
            );
        }
        let fencing = state.in_use_on_node(id).is_some();
        let detach = match state.volumes.get_mut(id) {
            Some(volume) => match &volume.attached {
                Some((n, _)) if req.node_id.is_empty() || *n == req.node_id => {
                    volume.attached = None;
                    true
                }
                _ => false,
            },
            None => false,
        };
        let kind = state.volumes.get(id).map(|v| v.kind);
        if detach && fencing && kind == Some(VolumeKind::Directory) {
            self.fence_off(id)?;
        }
        if detach {
            state.save().map_err(|e| internal("cannot save state", e))?;
        }
        Ok(pb::ControllerUnpublishVolumeResponse::new())
    }

    /// Fences the node that still has directory volume `id` mounted off
    /// its data, as a storage system cuts a lost node's path to a volume:
    /// the volume's directory moves to `volumes/<id>@fenced.<n>`, where the
    /// node's mounts keep it (a bind mount follows the directory, not its
    /// name), and a copy of it becomes the volume's directory. What the
    /// fenced node writes from now on lands in the detached generation,
    /// which no other node ever sees. Both stay in `volumes/`, which may
    /// be a file system of its own; '@' is in no volume ID. Called under
    /// the volume's lock.
    fn fence_off(&self, id: &str) -> RpcResult<()> {
        let dir = self.volume_dir(id);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let old = dir.with_file_name(format!("{id}@fenced.{stamp}"));
        fs::rename(&dir, &old).map_err(|e| {
            internal(
                &format!("cannot move {} away to fence it", dir.display()),
                e,
            )
        })?;
        let copy = dir.with_file_name(format!("{id}@copy.{stamp}"));
        let made = super::content::copy_tree(&old, &copy)
            .map_err(|e| internal("cannot copy the fenced volume", crate::error_chain(&e)))
            .and_then(|()| {
                fs::rename(&copy, &dir)
                    .map_err(|e| internal(&format!("cannot move the copy to {}", dir.display()), e))
            });
        if let Err(err) = made {
            // The volume stays as it was, fenced node and all.
            let _ = fs::remove_dir_all(&copy);
            let _ = fs::rename(&old, &dir);
            return Err(err);
        }
        log::warn!(
            "ControllerUnpublishVolume: volume {id}'s data is a new generation; the fenced node's mounts keep {}",
            old.display()
        );
        Ok(())
    }

    pub(super) fn validate(
        &self,
        req: &pb::ValidateVolumeCapabilitiesRequest,
        fault: Option<Action>,
    ) -> RpcResult<pb::ValidateVolumeCapabilitiesResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let caps = request_capabilities("volume_capabilities", &req.volume_capabilities)?;
        let kind = self
            .lock(id)?
            .volumes
            .get(id)
            .map(|v| v.kind)
            .ok_or_else(|| status(Code::NotFound, format!("volume {id} does not exist")))?;
        let mut resp = pb::ValidateVolumeCapabilitiesResponse::new();
        if let Err(message) = kind.check_serves(id, &caps) {
            resp.message = message;
            return Ok(resp);
        }
        let mut confirmed = pb::validate_volume_capabilities_response::Confirmed::new();
        confirmed.volume_context = req.volume_context.clone();
        confirmed.parameters = req.parameters.clone();
        confirmed.volume_capabilities = req.volume_capabilities.clone();
        match fault {
            Some(Action::OmitConfirmed) => {
                resp.message = "injected: confirmed omitted".to_string();
                return Ok(resp);
            }
            Some(Action::Confirm {
                access_mode,
                fs_type,
            }) => {
                let mode: AccessMode = access_mode
                    .parse()
                    .map_err(|e| internal("bad injected confirm rule", e))?;
                confirmed.volume_capabilities = caps
                    .iter()
                    .map(|c| {
                        let mut c = c.clone();
                        c.access_mode = mode;
                        c.mount_options.fs_type = fs_type.clone();
                        pb::VolumeCapability::from(&c)
                    })
                    .collect();
            }
            _ => {}
        }
        resp.confirmed = MessageField::some(confirmed);
        Ok(resp)
    }

    pub(super) fn list_volumes(
        &self,
        req: &pb::ListVolumesRequest,
    ) -> RpcResult<pb::ListVolumesResponse> {
        let state = self.read_all()?;
        let (range, next_token) = page(state.volumes.len(), req.max_entries, &req.starting_token)?;
        let mut resp = pb::ListVolumesResponse::new();
        for (id, record) in state.volumes.iter().skip(range.start).take(range.len()) {
            let mut entry = pb::list_volumes_response::Entry::new();
            entry.volume = MessageField::some(self.volume_message(id, record));
            let mut status = pb::list_volumes_response::VolumeStatus::new();
            status.published_node_ids = published_nodes(record);
            status.volume_condition = MessageField::some(self.condition(&state, id, record)?);
            entry.status = MessageField::some(status);
            resp.entries.push(entry);
        }
        resp.next_token = next_token;
        Ok(resp)
    }

    pub(super) fn controller_get_volume(
        &self,
        req: &pb::ControllerGetVolumeRequest,
    ) -> RpcResult<pb::ControllerGetVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let state = self.lock(id)?;
        let record = state
            .volumes
            .get(id)
            .ok_or_else(|| status(Code::NotFound, format!("volume {id} does not exist")))?;
        let mut status = pb::controller_get_volume_response::VolumeStatus::new();
        status.published_node_ids = published_nodes(record);
        status.volume_condition = MessageField::some(self.condition(&state, id, record)?);
        let mut resp = pb::ControllerGetVolumeResponse::new();
        resp.volume = MessageField::some(self.volume_message(id, record));
        resp.status = MessageField::some(status);
        Ok(resp)
    }

    /// The condition of volume `id`: abnormal when its directory or
    /// backing file is gone, or when a staged block volume has lost its
    /// loop device.
    fn condition(
        &self,
        state: &State,
        id: &str,
        record: &VolumeRecord,
    ) -> RpcResult<pb::VolumeCondition> {
        let data = self.volume_data(id, record.kind);
        let problem = match record.kind {
            VolumeKind::Directory if !data.is_dir() => Some(format!(
                "the volume directory {} is missing",
                data.display()
            )),
            VolumeKind::Block if !data.is_file() => {
                Some(format!("the backing file {} is missing", data.display()))
            }
            VolumeKind::Block => self.lost_device(state, id)?,
            VolumeKind::Directory => None,
        };
        Ok(pb::VolumeCondition::from(&VolumeCondition {
            abnormal: problem.is_some(),
            message: problem.unwrap_or_else(|| "volume is healthy".to_string()),
        }))
    }

    pub(super) fn get_capacity(
        &self,
        req: &pb::GetCapacityRequest,
    ) -> RpcResult<pb::GetCapacityResponse> {
        if !req.volume_capabilities.is_empty() {
            let caps = request_capabilities("volume_capabilities", &req.volume_capabilities)?;
            if VolumeKind::for_capabilities(&caps).is_err() {
                // The spec: capacity for unsupported capabilities is 0.
                return Ok(pb::GetCapacityResponse::new());
            }
        }
        let usage = mount::fs_usage(&self.config.base_dir).map_err(|e| internal("statvfs", e))?;
        let mut resp = pb::GetCapacityResponse::new();
        resp.available_capacity = i64::try_from(usage.available_bytes).unwrap_or(i64::MAX);
        Ok(resp)
    }

    /// ControllerExpandVolume: a directory's capacity is recorded, a block
    /// volume's backing file grows. The devices a node shows it through
    /// learn the new size in NodeExpandVolume, so that is required while
    /// the volume has any. A volume never shrinks: a smaller size is a
    /// repeat, a limit below its size OUT_OF_RANGE.
    pub(super) fn controller_expand(
        &self,
        req: &pb::ControllerExpandVolumeRequest,
    ) -> RpcResult<pb::ControllerExpandVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        if req.capacity_range.is_none() {
            return Err(status(Code::InvalidArgument, "capacity_range is required"));
        }
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
            .get_mut(id)
            .ok_or_else(|| status(Code::NotFound, format!("volume {id} does not exist")))?;
        if let Some(capability) = capability {
            volume
                .kind
                .check_serves(id, &[capability])
                .map_err(|m| status(Code::InvalidArgument, m))?;
        }
        check_no_shrink(id, volume.capacity_bytes, &range)?;
        if range.required_bytes > volume.capacity_bytes {
            volume.capacity_bytes = match volume.kind {
                VolumeKind::Directory => range.required_bytes,
                VolumeKind::Block => {
                    let size = block::capacity_for(&range)?;
                    block::grow_backing_file(&self.backing_file(id), size)?;
                    size
                }
            };
            state.save().map_err(|e| internal("cannot save state", e))?;
        }
        let volume = &state.volumes[id];
        let mut resp = pb::ControllerExpandVolumeResponse::new();
        resp.capacity_bytes = volume.capacity_bytes;
        resp.node_expansion_required =
            volume.kind == VolumeKind::Block && self.shown_by_devices(id)?;
        Ok(resp)
    }
}

/// The nodes volume `record` is attached to.
fn published_nodes(record: &VolumeRecord) -> Vec<String> {
    record.attached.iter().map(|(n, _)| n.clone()).collect()
}
