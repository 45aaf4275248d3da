//! The gRPC glue of the hostpath plugin's Controller service: each RPC's
//! facts for strict mode and the call trace, and the plugin method that
//! serves it (in [`super::controller`] and its siblings). RPCs of
//! capabilities the plugin does not advertise answer UNIMPLEMENTED.

use grpcio::RpcContext;

use super::service::Sink;

use super::controller::capabilities;
use super::faults::Action;
use super::strict::{Call, ContentSource};
use super::{status, trace_fields, Received, RpcResult, Service};
use crate::csi::convert;
use crate::csi::error::Code;
use crate::csi::proto::csi as pb;

impl Service {
    pub(super) fn create_volume(&self, ctx: &RpcContext, req: pb::CreateVolumeRequest, sink: Sink) {
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
        self.serve(ctx, received, sink, move |p, _| p.create_volume(&req));
    }

    pub(super) fn delete_volume(&self, ctx: &RpcContext, req: pb::DeleteVolumeRequest, sink: Sink) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let call = Call::DeleteVolume {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, _| p.delete_volume(&req));
    }

    pub(super) fn controller_publish_volume(
        &self,
        ctx: &RpcContext,
        req: pb::ControllerPublishVolumeRequest,
        sink: Sink,
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
        self.serve(ctx, received, sink, move |p, _| p.controller_publish(&req));
    }

    pub(super) fn controller_unpublish_volume(
        &self,
        ctx: &RpcContext,
        req: pb::ControllerUnpublishVolumeRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id), ("node", &req.node_id)]);
        let call = Call::ControllerUnpublishVolume {
            volume: req.volume_id.clone(),
            node: req.node_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, _| {
            p.controller_unpublish(&req)
        });
    }

    pub(super) fn validate_volume_capabilities(
        &self,
        ctx: &RpcContext,
        req: pb::ValidateVolumeCapabilitiesRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let call = Call::ValidateVolumeCapabilities {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, fault| p.validate(&req, fault));
    }

    pub(super) fn list_volumes(&self, ctx: &RpcContext, req: pb::ListVolumesRequest, sink: Sink) {
        let received = Received::new(Call::ListVolumes, &req, String::new());
        self.serve(ctx, received, sink, move |p, _| p.list_volumes(&req));
    }

    pub(super) fn get_capacity(&self, ctx: &RpcContext, req: pb::GetCapacityRequest, sink: Sink) {
        let received = Received::new(Call::GetCapacity, &req, String::new());
        self.serve(ctx, received, sink, move |p, _| p.get_capacity(&req));
    }

    pub(super) fn controller_get_capabilities(
        &self,
        ctx: &RpcContext,
        req: pb::ControllerGetCapabilitiesRequest,
        sink: Sink,
    ) {
        let received = Received::new(Call::ControllerGetCapabilities, &req, String::new());
        self.serve(ctx, received, sink, |plugin, _| {
            let mut resp = pb::ControllerGetCapabilitiesResponse::new();
            resp.capabilities = capabilities(&plugin.config)
                .map(convert::controller_capability_to_proto)
                .collect();
            Ok(resp)
        });
    }

    pub(super) fn controller_expand_volume(
        &self,
        ctx: &RpcContext,
        req: pb::ControllerExpandVolumeRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let call = Call::ControllerExpandVolume {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, fault| {
            let mut resp = p.controller_expand(&req)?;
            // A plugin whose file systems grow on the node asks for its
            // expansion every time; the fault makes this one do so too.
            resp.node_expansion_required |= fault == Some(Action::NodeExpansionRequired);
            Ok(resp)
        });
    }

    pub(super) fn create_snapshot(
        &self,
        ctx: &RpcContext,
        req: pb::CreateSnapshotRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[("volume", &req.source_volume_id)]);
        let call = Call::CreateSnapshot {
            source_volume: req.source_volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, _| p.create_snapshot(&req));
    }

    pub(super) fn delete_snapshot(
        &self,
        ctx: &RpcContext,
        req: pb::DeleteSnapshotRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[("snapshot", &req.snapshot_id)]);
        let received = Received::new(Call::DeleteSnapshot, &req, fields);
        self.serve(ctx, received, sink, move |p, _| p.delete_snapshot(&req));
    }

    pub(super) fn list_snapshots(
        &self,
        ctx: &RpcContext,
        req: pb::ListSnapshotsRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[
            ("snapshot", &req.snapshot_id),
            ("volume", &req.source_volume_id),
        ]);
        let received = Received::new(Call::ListSnapshots, &req, fields);
        self.serve(ctx, received, sink, move |p, _| p.list_snapshots(&req));
    }

    pub(super) fn controller_get_volume(
        &self,
        ctx: &RpcContext,
        req: pb::ControllerGetVolumeRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let call = Call::ControllerGetVolume {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(ctx, received, sink, move |p, _| {
            p.controller_get_volume(&req)
        });
    }

    // The RPCs of capabilities the plugin does not advertise: UNIMPLEMENTED,
    // unless strict mode refuses them first as a CO's mistake.

    pub(super) fn get_snapshot(&self, ctx: &RpcContext, req: pb::GetSnapshotRequest, sink: Sink) {
        let received = Received::new(Call::GetSnapshot, &req, String::new());
        self.unimplemented::<pb::GetSnapshotResponse>(ctx, received, sink);
    }

    pub(super) fn controller_modify_volume(
        &self,
        ctx: &RpcContext,
        req: pb::ControllerModifyVolumeRequest,
        sink: Sink,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let volume = req.volume_id.clone();
        let call = Call::ControllerModifyVolume { volume };
        let received = Received::new(call, &req, fields);
        self.unimplemented::<pb::ControllerModifyVolumeResponse>(ctx, received, sink);
    }
}

impl Service {
    /// Serves an RPC the plugin does not implement.
    fn unimplemented<Resp: protobuf::Message>(
        &self,
        ctx: &RpcContext,
        received: Received,
        sink: Sink,
    ) {
        let rpc = received.rpc();
        self.serve(ctx, received, sink, move |_, _| -> RpcResult<Resp> {
            Err(status(
                Code::Unimplemented,
                format!("{rpc} is not implemented"),
            ))
        });
    }
}
