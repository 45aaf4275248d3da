//! The gRPC glue of the hostpath plugin's Controller service: each RPC's
//! facts for strict mode and the call trace, and the plugin method that
//! serves it (in [`super::controller`] and its siblings). RPCs of
//! capabilities the plugin does not advertise answer UNIMPLEMENTED.

use grpcio::{RpcContext, UnarySink};

use super::controller::capabilities;
use super::faults::Action;
use super::strict::{Call, ContentSource};
use super::{status, trace_fields, Received, Service};
use crate::csi::convert;
use crate::csi::error::Code;
use crate::csi::proto::csi as pb;
use crate::csi::proto::csi_grpc;

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
            resp.capabilities = capabilities(&plugin.config)
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
            // A plugin whose file systems grow on the node asks for its
            // expansion every time; the fault makes this one do so too.
            resp.node_expansion_required |= fault == Some(Action::NodeExpansionRequired);
            Ok(resp)
        });
    }

    fn create_snapshot(
        &mut self,
        ctx: RpcContext,
        req: pb::CreateSnapshotRequest,
        sink: UnarySink<pb::CreateSnapshotResponse>,
    ) {
        let fields = trace_fields(&[("volume", &req.source_volume_id)]);
        let call = Call::CreateSnapshot {
            source_volume: req.source_volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(&ctx, received, sink, move |p, _| p.create_snapshot(&req));
    }

    fn delete_snapshot(
        &mut self,
        ctx: RpcContext,
        req: pb::DeleteSnapshotRequest,
        sink: UnarySink<pb::DeleteSnapshotResponse>,
    ) {
        let fields = trace_fields(&[("snapshot", &req.snapshot_id)]);
        let received = Received::new(Call::DeleteSnapshot, &req, fields);
        self.serve(&ctx, received, sink, move |p, _| p.delete_snapshot(&req));
    }

    fn list_snapshots(
        &mut self,
        ctx: RpcContext,
        req: pb::ListSnapshotsRequest,
        sink: UnarySink<pb::ListSnapshotsResponse>,
    ) {
        let fields = trace_fields(&[
            ("snapshot", &req.snapshot_id),
            ("volume", &req.source_volume_id),
        ]);
        let received = Received::new(Call::ListSnapshots, &req, fields);
        self.serve(&ctx, received, sink, move |p, _| p.list_snapshots(&req));
    }

    fn controller_get_volume(
        &mut self,
        ctx: RpcContext,
        req: pb::ControllerGetVolumeRequest,
        sink: UnarySink<pb::ControllerGetVolumeResponse>,
    ) {
        let fields = trace_fields(&[("volume", &req.volume_id)]);
        let call = Call::ControllerGetVolume {
            volume: req.volume_id.clone(),
        };
        let received = Received::new(call, &req, fields);
        self.serve(&ctx, received, sink, move |p, _| {
            p.controller_get_volume(&req)
        });
    }

    // The RPCs of capabilities the plugin does not advertise: UNIMPLEMENTED,
    // unless strict mode refuses them first as a CO's mistake.

    fn get_snapshot(
        &mut self,
        ctx: RpcContext,
        req: pb::GetSnapshotRequest,
        sink: UnarySink<pb::GetSnapshotResponse>,
    ) {
        let received = Received::new(Call::GetSnapshot, &req, String::new());
        self.unimplemented(&ctx, received, sink);
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
