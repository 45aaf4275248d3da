//! The hostpath plugin's Controller service: volumes are directories or,
//! for block capabilities, sparse files (see [`super::block`]), and
//! "attaching" to a node is a record that NodeStage checks.

use std::fs;

use grpcio::{RpcContext, UnarySink};
use protobuf::MessageField;

use super::block;
use super::faults::Action;
use super::state::{VolumeKind, VolumeRecord};
use super::strict::{Call, ContentSource};
use super::{
    internal, required, status, trace_fields, volume_id, Plugin, Received, RpcResult, Service,
};
use crate::csi::convert::{self, capabilities_from_proto};
use crate::csi::error::Code;
use crate::csi::model::{AccessMode, Capability};
use crate::csi::proto::csi as pb;
use crate::csi::proto::csi_grpc;
use crate::csi::types::ControllerCapability;
use crate::mount;

const CAPABILITIES: &[ControllerCapability] = &[
    ControllerCapability::CreateDeleteVolume,
    ControllerCapability::PublishUnpublishVolume,
    ControllerCapability::ListVolumes,
    ControllerCapability::GetCapacity,
    ControllerCapability::ExpandVolume,
    ControllerCapability::ListVolumesPublishedNodes,
    ControllerCapability::PublishReadonly,
    ControllerCapability::SingleNodeMultiWriter,
];

/// The controller capabilities the plugin advertises: without attachments,
/// none of ControllerPublishVolume's.
pub(super) fn capabilities(no_attach: bool) -> impl Iterator<Item = ControllerCapability> {
    CAPABILITIES.iter().copied().filter(move |c| {
        !(no_attach
            && matches!(
                c,
                ControllerCapability::PublishUnpublishVolume
                    | ControllerCapability::PublishReadonly
                    | ControllerCapability::ListVolumesPublishedNodes
            ))
    })
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
    fn create_volume(&self, req: &pb::CreateVolumeRequest) -> RpcResult<pb::CreateVolumeResponse> {
        let id = volume_id("name", &req.name)?;
        let caps = request_capabilities("volume_capabilities", &req.volume_capabilities)?;
        let kind =
            VolumeKind::for_capabilities(&caps).map_err(|m| status(Code::InvalidArgument, m))?;
        if req.volume_content_source.is_some() {
            return Err(status(
                Code::InvalidArgument,
                "volume_content_source is not supported",
            ));
        }
        let range = req
            .capacity_range
            .as_ref()
            .map(crate::csi::types::CapacityRange::from)
            .unwrap_or_default();
        if range.required_bytes < 0 || range.limit_bytes < 0 {
            return Err(status(
                Code::InvalidArgument,
                "capacity_range must not be negative",
            ));
        }
        if range.limit_bytes > 0 && range.required_bytes > range.limit_bytes {
            return Err(status(
                Code::OutOfRange,
                "capacity_range: required_bytes exceeds limit_bytes",
            ));
        }
        if let Some(req_topology) = req.accessibility_requirements.as_ref() {
            let ours = self.topology();
            if !req_topology.requisite.is_empty() && !req_topology.requisite.contains(&ours) {
                return Err(status(
                    Code::ResourceExhausted,
                    "no requisite topology includes this node",
                ));
            }
        }
        let mut state = self.lock()?;
        let capacity_bytes = if let Some(existing) = state.volumes.get(id) {
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
            let fits =
                cap >= range.required_bytes && (range.limit_bytes == 0 || cap <= range.limit_bytes);
            if !fits {
                return Err(status(
                    Code::AlreadyExists,
                    format!("volume {id} exists with capacity {cap}, incompatible with the requested range"),
                ));
            }
            cap
        } else {
            let cap = match kind {
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
                    let size = block::capacity_for(&range)?;
                    block::create_backing_file(&self.backing_file(id), size)?;
                    size
                }
            };
            state.volumes.insert(
                id.to_string(),
                VolumeRecord {
                    capacity_bytes: cap,
                    attached: None,
                    kind,
                },
            );
            state.save().map_err(|e| internal("cannot save state", e))?;
            cap
        };
        let mut volume = pb::Volume::new();
        volume.volume_id = id.to_string();
        volume.capacity_bytes = capacity_bytes;
        volume.accessible_topology = vec![self.topology()];
        let mut resp = pb::CreateVolumeResponse::new();
        resp.volume = MessageField::some(volume);
        Ok(resp)
    }

    fn delete_volume(&self, req: &pb::DeleteVolumeRequest) -> RpcResult<pb::DeleteVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let mut state = self.lock()?;
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

    fn controller_publish(
        &self,
        req: &pb::ControllerPublishVolumeRequest,
    ) -> RpcResult<pb::ControllerPublishVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let node = required("node_id", &req.node_id)?;
        convert::capability_from_field(&req.volume_capability)
            .map_err(|e| status(Code::InvalidArgument, e.to_string()))?;
        let mut state = self.lock()?;
        let volume = state
            .volumes
            .get_mut(id)
            .ok_or_else(|| status(Code::NotFound, format!("volume {id} does not exist")))?;
        if node != self.config.node_id {
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

    fn controller_unpublish(
        &self,
        req: &pb::ControllerUnpublishVolumeRequest,
    ) -> RpcResult<pb::ControllerUnpublishVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let mut state = self.lock()?;
        if let Some(path) = state.in_use_on_node(id) {
            return Err(status(
                Code::FailedPrecondition,
                format!(
                    "volume {id} is still staged or published at {}",
                    path.display()
                ),
            ));
        }
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
        if detach {
            state.save().map_err(|e| internal("cannot save state", e))?;
        }
        Ok(pb::ControllerUnpublishVolumeResponse::new())
    }

    fn validate(
        &self,
        req: &pb::ValidateVolumeCapabilitiesRequest,
        fault: Option<Action>,
    ) -> RpcResult<pb::ValidateVolumeCapabilitiesResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let caps = request_capabilities("volume_capabilities", &req.volume_capabilities)?;
        let kind = self
            .lock()?
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

    fn list_volumes(&self, req: &pb::ListVolumesRequest) -> RpcResult<pb::ListVolumesResponse> {
        if req.max_entries < 0 {
            return Err(status(
                Code::InvalidArgument,
                "max_entries must not be negative",
            ));
        }
        let start: usize = if req.starting_token.is_empty() {
            0
        } else {
            req.starting_token.parse().map_err(|_| {
                status(
                    Code::Aborted,
                    format!("invalid starting_token {:?}", req.starting_token),
                )
            })?
        };
        let state = self.lock()?;
        if start > state.volumes.len() {
            return Err(status(
                Code::Aborted,
                format!("starting_token {start} is past the end"),
            ));
        }
        let page = if req.max_entries == 0 {
            usize::MAX
        } else {
            req.max_entries as usize
        };
        let mut resp = pb::ListVolumesResponse::new();
        for (id, record) in state.volumes.iter().skip(start).take(page) {
            let mut volume = pb::Volume::new();
            volume.volume_id = id.clone();
            volume.capacity_bytes = record.capacity_bytes;
            volume.accessible_topology = vec![self.topology()];
            let mut entry = pb::list_volumes_response::Entry::new();
            entry.volume = MessageField::some(volume);
            let mut status = pb::list_volumes_response::VolumeStatus::new();
            status.published_node_ids = record.attached.iter().map(|(n, _)| n.clone()).collect();
            entry.status = MessageField::some(status);
            resp.entries.push(entry);
        }
        let next = start + resp.entries.len();
        if next < state.volumes.len() {
            resp.next_token = next.to_string();
        }
        Ok(resp)
    }

    fn get_capacity(&self, req: &pb::GetCapacityRequest) -> RpcResult<pb::GetCapacityResponse> {
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

    fn controller_expand(
        &self,
        req: &pb::ControllerExpandVolumeRequest,
    ) -> RpcResult<pb::ControllerExpandVolumeResponse> {
        let id = required("volume_id", &req.volume_id)?;
        let range = req
            .capacity_range
            .as_ref()
            .map(crate::csi::types::CapacityRange::from)
            .ok_or_else(|| status(Code::InvalidArgument, "capacity_range is required"))?;
        let mut state = self.lock()?;
        let volume = state
            .volumes
            .get_mut(id)
            .ok_or_else(|| status(Code::NotFound, format!("volume {id} does not exist")))?;
        if range.limit_bytes > 0 && volume.capacity_bytes > range.limit_bytes {
            return Err(status(
                Code::OutOfRange,
                "the volume is already larger than limit_bytes",
            ));
        }
        if range.required_bytes > volume.capacity_bytes {
            volume.capacity_bytes = match volume.kind {
                VolumeKind::Directory => range.required_bytes,
                VolumeKind::Block => {
                    let size = block::capacity_for(&range)?;
                    block::grow_backing_file(&self.backing_file(id), size)?;
                    size
                }
            };
        }
        let capacity_bytes = volume.capacity_bytes;
        state.save().map_err(|e| internal("cannot save state", e))?;
        let mut resp = pb::ControllerExpandVolumeResponse::new();
        resp.capacity_bytes = capacity_bytes;
        resp.node_expansion_required = false;
        Ok(resp)
    }
}

impl csi_grpc::Controller for Service {
    fn create_volume(
        &mut self,
        ctx: RpcContext,
        req: pb::CreateVolumeRequest,
        sink: UnarySink<pb::CreateVolumeResponse>,
    ) {
        let fields = trace_fields(&[("name", &req.name)]);
        let content_source = req.volume_content_source.as_ref().and_then(|s| {
            if s.has_snapshot() {
                Some(ContentSource::Snapshot)
            } else if s.has_volume() {
                Some(ContentSource::Volume)
            } else {
                None
            }
        });
        let call = Call::CreateVolume {
            name: req.name.clone(),
            content_source,
        };
        let received = Received::new(call, &req, fields);
        self.serve(&ctx, received, sink, move |p, _| p.create_volume(&req));
    }

    fn delete_volume(
        &mut self,
        ctx: RpcContext,
        req: pb::DeleteVolumeRequest,
        sink: UnarySink<pb::DeleteVolumeResponse>,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let call = Call::DeleteVolume {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(&ctx, received, sink, move |p, _| p.delete_volume(&req));
    }

    fn controller_publish_volume(
        &mut self,
        ctx: RpcContext,
        req: pb::ControllerPublishVolumeRequest,
        sink: UnarySink<pb::ControllerPublishVolumeResponse>,
    ) {
        let ro = if req.readonly { "true" } else { "" };
        let fields = trace_fields(&[
            ("volume", &req.volume_id),
            ("node", &req.node_id),
            ("readonly", ro),
        ]);
        let call = Call::ControllerPublishVolume {
            volume: req.volume_id.clone(),
            node: req.node_id.clone(),
            read_only: req.readonly,
            answer: super::publish_context(&req.node_id),
        };
        let received = Received::new(call, &req, fields);
        self.serve(&ctx, received, sink, move |p, _| p.controller_publish(&req));
    }

    fn controller_unpublish_volume(
        &mut self,
        ctx: RpcContext,
        req: pb::ControllerUnpublishVolumeRequest,
        sink: UnarySink<pb::ControllerUnpublishVolumeResponse>,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id), ("node", &req.node_id)]);
        let call = Call::ControllerUnpublishVolume {
            volume: req.volume_id.clone(),
            node: req.node_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(&ctx, received, sink, move |p, _| {
            p.controller_unpublish(&req)
        });
    }

    fn validate_volume_capabilities(
        &mut self,
        ctx: RpcContext,
        req: pb::ValidateVolumeCapabilitiesRequest,
        sink: UnarySink<pb::ValidateVolumeCapabilitiesResponse>,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let call = Call::ValidateVolumeCapabilities {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(&ctx, received, sink, move |p, fault| {
            p.validate(&req, fault)
        });
    }

    fn list_volumes(
        &mut self,
        ctx: RpcContext,
        req: pb::ListVolumesRequest,
        sink: UnarySink<pb::ListVolumesResponse>,
    ) {
        let received = Received::new(Call::ListVolumes, &req, String::new());
        self.serve(&ctx, received, sink, move |p, _| p.list_volumes(&req));
    }

    fn get_capacity(
        &mut self,
        ctx: RpcContext,
        req: pb::GetCapacityRequest,
        sink: UnarySink<pb::GetCapacityResponse>,
    ) {
        let received = Received::new(Call::GetCapacity, &req, String::new());
        self.serve(&ctx, received, sink, move |p, _| p.get_capacity(&req));
    }

    fn controller_get_capabilities(
        &mut self,
        ctx: RpcContext,
        req: pb::ControllerGetCapabilitiesRequest,
        sink: UnarySink<pb::ControllerGetCapabilitiesResponse>,
    ) {
        let received = Received::new(Call::ControllerGetCapabilities, &req, String::new());
        self.serve(&ctx, received, sink, |plugin, _| {
            let mut resp = pb::ControllerGetCapabilitiesResponse::new();
            resp.capabilities = capabilities(plugin.config.no_attach)
                .map(convert::controller_capability_to_proto)
                .collect();
            Ok(resp)
        });
    }

    fn controller_expand_volume(
        &mut self,
        ctx: RpcContext,
        req: pb::ControllerExpandVolumeRequest,
        sink: UnarySink<pb::ControllerExpandVolumeResponse>,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let call = Call::ControllerExpandVolume {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(&ctx, received, sink, move |p, fault| {
            let mut resp = p.controller_expand(&req)?;
            resp.node_expansion_required = fault == Some(Action::NodeExpansionRequired);
            Ok(resp)
        });
    }

    // The RPCs of capabilities the plugin does not advertise: UNIMPLEMENTED,
    // unless strict mode refuses them first as a CO's mistake.

    fn create_snapshot(
        &mut self,
        ctx: RpcContext,
        req: pb::CreateSnapshotRequest,
        sink: UnarySink<pb::CreateSnapshotResponse>,
    ) {
        let fields = trace_fields(&[("volume", &req.source_volume_id)]);
        self.unimplemented(
            &ctx,
            Received::new(Call::CreateSnapshot, &req, fields),
            sink,
        );
    }

    fn delete_snapshot(
        &mut self,
        ctx: RpcContext,
        req: pb::DeleteSnapshotRequest,
        sink: UnarySink<pb::DeleteSnapshotResponse>,
    ) {
        let received = Received::new(Call::DeleteSnapshot, &req, String::new());
        self.unimplemented(&ctx, received, sink);
    }

    fn list_snapshots(
        &mut self,
        ctx: RpcContext,
        req: pb::ListSnapshotsRequest,
        sink: UnarySink<pb::ListSnapshotsResponse>,
    ) {
        let received = Received::new(Call::ListSnapshots, &req, String::new());
        self.unimplemented(&ctx, received, sink);
    }

    fn get_snapshot(
        &mut self,
        ctx: RpcContext,
        req: pb::GetSnapshotRequest,
        sink: UnarySink<pb::GetSnapshotResponse>,
    ) {
        let received = Received::new(Call::GetSnapshot, &req, String::new());
        self.unimplemented(&ctx, received, sink);
    }

    fn controller_get_volume(
        &mut self,
        ctx: RpcContext,
        req: pb::ControllerGetVolumeRequest,
        sink: UnarySink<pb::ControllerGetVolumeResponse>,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let volume = req.volume_id.clone();
        let call = Call::ControllerGetVolume { volume };
        self.unimplemented(&ctx, Received::new(call, &req, fields), sink);
    }

    fn controller_modify_volume(
        &mut self,
        ctx: RpcContext,
        req: pb::ControllerModifyVolumeRequest,
        sink: UnarySink<pb::ControllerModifyVolumeResponse>,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let volume = req.volume_id.clone();
        let call = Call::ControllerModifyVolume { volume };
        self.unimplemented(&ctx, Received::new(call, &req, fields), sink);
    }
}

impl Service {
    /// Serves an RPC the plugin does not implement.
    fn unimplemented<Resp: Default + Send + 'static>(
        &self,
        ctx: &RpcContext,
        received: Received,
        sink: UnarySink<Resp>,
    ) {
        let rpc = received.rpc();
        self.serve(ctx, received, sink, move |_, _| {
            Err(status(
                Code::Unimplemented,
                format!("{rpc} is not implemented"),
            ))
        });
    }
}
