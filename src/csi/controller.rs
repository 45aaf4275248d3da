//! The controller service's RPCs of [`Client`]: create, delete, publish,
//! validate, list, capacity, expand, snapshots. Each builds the request as
//! on the wire, sends it to the plugin's controller, or through the relay
//! when the client has one ([`super::relay`]), and reads the answer into
//! our types.

use grpcio::CallOption;

use super::client::Client;
use super::compare::Validation;
use super::convert::{self, ConvertError};
use super::error::{Error, Rpc};
use super::model::{Capability, Secrets};
use super::proto::csi as pb;
use super::proto::csi_grpc::ControllerClient;
use super::rpc::{call, invalid, send, Sent};
use super::types::*;

impl Client {
    /// Controller RPC `rpc` with `wire`: through the relay if this client
    /// has one, else `direct` on the plugin's own controller.
    fn controller_call<Req: protobuf::Message, Resp: protobuf::Message>(
        &self,
        rpc: Rpc,
        wire: &Req,
        direct: impl FnOnce(&ControllerClient, &Req, CallOption) -> grpcio::Result<Resp>,
    ) -> Result<Resp, Error> {
        let result = match &self.relay {
            Some(relay) => super::relay::call(relay.as_ref(), rpc, wire, self.timeout()),
            None => direct(&self.controller, wire, self.opt()),
        };
        call(rpc, result)
    }

    /// Like [`Client::controller_call`], but without waiting for the
    /// answer when the plugin's own controller makes it.
    fn controller_send<Req: protobuf::Message, Resp: protobuf::Message + Unpin, T: 'static>(
        &self,
        rpc: Rpc,
        wire: &Req,
        direct: impl FnOnce(
            &ControllerClient,
            &Req,
            CallOption,
        ) -> grpcio::Result<grpcio::ClientUnaryReceiver<Resp>>,
        convert: impl FnOnce(Resp) -> T + 'static,
    ) -> Sent<T> {
        match &self.relay {
            Some(relay) => Sent::known(
                call(
                    rpc,
                    super::relay::call(relay.as_ref(), rpc, wire, self.timeout()),
                )
                .map(convert),
            ),
            None => send(rpc, direct(&self.controller, wire, self.opt()), convert),
        }
    }

    // ---- Controller ----

    pub fn controller_capabilities(&self) -> Result<CapabilitySet<ControllerCapability>, Error> {
        let req = pb::ControllerGetCapabilitiesRequest::new();
        let resp = self.controller_call(Rpc::ControllerGetCapabilities, &req, |c, w, o| {
            c.controller_get_capabilities_opt(w, o)
        })?;
        Ok(convert::controller_capabilities_from_proto(
            &resp.capabilities,
        ))
    }

    pub fn create_volume(&self, req: &CreateVolume) -> Result<Volume, Error> {
        let rpc = Rpc::CreateVolume;
        let mut wire = pb::CreateVolumeRequest::new();
        wire.name = req.name.clone();
        wire.capacity_range = convert::capacity_to_field(req.capacity);
        wire.volume_capabilities = req
            .capabilities
            .iter()
            .map(pb::VolumeCapability::from)
            .collect();
        wire.parameters = convert::to_hash_map(&req.parameters);
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        if let Some(topology) = &req.accessibility {
            wire.accessibility_requirements = protobuf::MessageField::some(topology.into());
        }
        if let Some(source) = &req.content_source {
            wire.volume_content_source = protobuf::MessageField::some(source.into());
        }
        let resp = self.controller_call(rpc, &wire, |c, w, o| c.create_volume_opt(w, o))?;
        let volume = resp
            .volume
            .as_ref()
            .ok_or_else(|| invalid(rpc, ConvertError::new("volume", "is required")))?;
        Volume::try_from(volume).map_err(|e| invalid(rpc, e))
    }

    pub fn delete_volume(&self, volume_id: &str, secrets: &Secrets) -> Result<(), Error> {
        let mut wire = pb::DeleteVolumeRequest::new();
        wire.volume_id = volume_id.to_string();
        wire.secrets = convert::secrets_to_proto(secrets);
        self.controller_call(Rpc::DeleteVolume, &wire, |c, w, o| {
            c.delete_volume_opt(w, o)
        })
        .map(drop)
    }

    /// ControllerPublishVolume; answers the publish context, which the
    /// caller must pass to NodeStage and NodePublish.
    pub fn controller_publish(&self, req: &ControllerPublish) -> Result<StringMap, Error> {
        self.send_controller_publish(req).wait()
    }

    /// ControllerPublishVolume, sent (through the relay, answered);
    /// [`Sent::wait`] takes its answer.
    pub fn send_controller_publish(&self, req: &ControllerPublish) -> Sent<StringMap> {
        let mut wire = pb::ControllerPublishVolumeRequest::new();
        wire.volume_id = req.volume_id.clone();
        wire.node_id = req.node_id.clone();
        wire.volume_capability = convert::capability_to_field(&req.capability);
        wire.readonly = req.read_only;
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        wire.volume_context = convert::to_hash_map(&req.volume_context);
        self.controller_send(
            Rpc::ControllerPublishVolume,
            &wire,
            |c, w, o| c.controller_publish_volume_async_opt(w, o),
            |resp| convert::from_hash_map(&resp.publish_context),
        )
    }

    pub fn controller_unpublish(
        &self,
        volume_id: &str,
        node_id: &str,
        secrets: &Secrets,
    ) -> Result<(), Error> {
        self.send_controller_unpublish(volume_id, node_id, secrets)
            .wait()
    }

    /// ControllerUnpublishVolume, sent (through the relay, answered);
    /// [`Sent::wait`] takes its answer.
    pub fn send_controller_unpublish(
        &self,
        volume_id: &str,
        node_id: &str,
        secrets: &Secrets,
    ) -> Sent<()> {
        let mut wire = pb::ControllerUnpublishVolumeRequest::new();
        wire.volume_id = volume_id.to_string();
        wire.node_id = node_id.to_string();
        wire.secrets = convert::secrets_to_proto(secrets);
        self.controller_send(
            Rpc::ControllerUnpublishVolume,
            &wire,
            |c, w, o| c.controller_unpublish_volume_async_opt(w, o),
            drop,
        )
    }

    /// ValidateVolumeCapabilities, answered as a [`Validation`]; check it
    /// with [`super::compare::check_validation`].
    pub fn validate_volume(&self, req: &ValidateVolume) -> Result<Validation, Error> {
        let rpc = Rpc::ValidateVolumeCapabilities;
        let mut wire = pb::ValidateVolumeCapabilitiesRequest::new();
        wire.volume_id = req.volume_id.clone();
        wire.volume_context = convert::to_hash_map(&req.volume_context);
        wire.volume_capabilities = req
            .capabilities
            .iter()
            .map(pb::VolumeCapability::from)
            .collect();
        wire.parameters = convert::to_hash_map(&req.parameters);
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        let resp = self.controller_call(rpc, &wire, |c, w, o| {
            c.validate_volume_capabilities_opt(w, o)
        })?;
        match resp.confirmed.as_ref() {
            None => {
                log::debug!("{rpc}: plugin did not confirm: {}", resp.message);
                Ok(Validation::NotConfirmed {
                    message: resp.message,
                })
            }
            Some(confirmed) => convert::capabilities_from_proto(&confirmed.volume_capabilities)
                .map(Validation::Confirmed)
                .map_err(|e| invalid(rpc, e)),
        }
    }

    /// One page of ListVolumes; pass the answer's `next_token` for the next.
    pub fn list_volumes(
        &self,
        max_entries: i32,
        starting_token: &str,
    ) -> Result<VolumePage, Error> {
        let rpc = Rpc::ListVolumes;
        let mut wire = pb::ListVolumesRequest::new();
        wire.max_entries = max_entries;
        wire.starting_token = starting_token.to_string();
        let resp = self.controller_call(rpc, &wire, |c, w, o| c.list_volumes_opt(w, o))?;
        let mut entries = Vec::with_capacity(resp.entries.len());
        for entry in &resp.entries {
            let status = entry.status.as_ref();
            entries.push(listed_volume(
                rpc,
                "entries.volume",
                entry.volume.as_ref(),
                status.map(|s| s.published_node_ids.as_slice()),
                status.and_then(|s| s.volume_condition.as_ref()),
            )?);
        }
        Ok(VolumePage {
            entries,
            next_token: resp.next_token,
        })
    }

    pub fn capacity(
        &self,
        capabilities: &[Capability],
        parameters: &StringMap,
        topology: Option<&Topology>,
    ) -> Result<Capacity, Error> {
        let mut wire = pb::GetCapacityRequest::new();
        wire.volume_capabilities = capabilities
            .iter()
            .map(pb::VolumeCapability::from)
            .collect();
        wire.parameters = convert::to_hash_map(parameters);
        if let Some(topology) = topology {
            wire.accessible_topology =
                protobuf::MessageField::some(convert::topology_to_proto(topology));
        }
        let resp =
            self.controller_call(Rpc::GetCapacity, &wire, |c, w, o| c.get_capacity_opt(w, o))?;
        Ok(Capacity {
            available_capacity: resp.available_capacity,
            maximum_volume_size: resp.maximum_volume_size.as_ref().map(|v| v.value),
            minimum_volume_size: resp.minimum_volume_size.as_ref().map(|v| v.value),
        })
    }

    pub fn controller_expand(&self, req: &ControllerExpand) -> Result<Expanded, Error> {
        let mut wire = pb::ControllerExpandVolumeRequest::new();
        wire.volume_id = req.volume_id.clone();
        wire.capacity_range = convert::capacity_to_field(req.capacity);
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        if let Some(cap) = &req.capability {
            wire.volume_capability = convert::capability_to_field(cap);
        }
        let resp = self.controller_call(Rpc::ControllerExpandVolume, &wire, |c, w, o| {
            c.controller_expand_volume_opt(w, o)
        })?;
        Ok(Expanded {
            capacity_bytes: resp.capacity_bytes,
            node_expansion_required: resp.node_expansion_required,
        })
    }
}

impl Client {
    /// ControllerGetVolume: the volume as the plugin sees it now, with the
    /// nodes it is published to and its condition.
    pub fn controller_get_volume(&self, volume_id: &str) -> Result<ListedVolume, Error> {
        let rpc = Rpc::ControllerGetVolume;
        let mut wire = pb::ControllerGetVolumeRequest::new();
        wire.volume_id = volume_id.to_string();
        let resp = self.controller_call(rpc, &wire, |c, w, o| c.controller_get_volume_opt(w, o))?;
        let status = resp.status.as_ref();
        listed_volume(
            rpc,
            "volume",
            resp.volume.as_ref(),
            status.map(|s| s.published_node_ids.as_slice()),
            status.and_then(|s| s.volume_condition.as_ref()),
        )
    }

    /// CreateSnapshot; the same name and source answers the same snapshot.
    pub fn create_snapshot(&self, req: &CreateSnapshot) -> Result<Snapshot, Error> {
        let rpc = Rpc::CreateSnapshot;
        let mut wire = pb::CreateSnapshotRequest::new();
        wire.name = req.name.clone();
        wire.source_volume_id = req.source_volume_id.clone();
        wire.parameters = convert::to_hash_map(&req.parameters);
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        let resp = self.controller_call(rpc, &wire, |c, w, o| c.create_snapshot_opt(w, o))?;
        let snapshot = resp
            .snapshot
            .as_ref()
            .ok_or_else(|| invalid(rpc, ConvertError::new("snapshot", "is required")))?;
        Snapshot::try_from(snapshot).map_err(|e| invalid(rpc, e))
    }

    pub fn delete_snapshot(&self, snapshot_id: &str, secrets: &Secrets) -> Result<(), Error> {
        let mut wire = pb::DeleteSnapshotRequest::new();
        wire.snapshot_id = snapshot_id.to_string();
        wire.secrets = convert::secrets_to_proto(secrets);
        self.controller_call(Rpc::DeleteSnapshot, &wire, |c, w, o| {
            c.delete_snapshot_opt(w, o)
        })
        .map(drop)
    }

    /// One page of ListSnapshots; pass the answer's `next_token` for the
    /// next.
    pub fn list_snapshots(&self, req: &ListSnapshots) -> Result<SnapshotPage, Error> {
        let rpc = Rpc::ListSnapshots;
        let mut wire = pb::ListSnapshotsRequest::new();
        wire.max_entries = req.max_entries;
        wire.starting_token = req.starting_token.clone();
        wire.source_volume_id = req.source_volume_id.clone();
        wire.snapshot_id = req.snapshot_id.clone();
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        let resp = self.controller_call(rpc, &wire, |c, w, o| c.list_snapshots_opt(w, o))?;
        let mut entries = Vec::with_capacity(resp.entries.len());
        for entry in &resp.entries {
            let snapshot = entry.snapshot.as_ref().ok_or_else(|| {
                invalid(rpc, ConvertError::new("entries.snapshot", "is required"))
            })?;
            entries.push(Snapshot::try_from(snapshot).map_err(|e| invalid(rpc, e))?);
        }
        Ok(SnapshotPage {
            entries,
            next_token: resp.next_token,
        })
    }
}

/// A volume with its status, as ListVolumes and ControllerGetVolume
/// answer it; `field` names the volume in an invalid reply.
fn listed_volume(
    rpc: Rpc,
    field: &'static str,
    volume: Option<&pb::Volume>,
    published: Option<&[String]>,
    condition: Option<&pb::VolumeCondition>,
) -> Result<ListedVolume, Error> {
    let volume = volume.ok_or_else(|| invalid(rpc, ConvertError::new(field, "is required")))?;
    Ok(ListedVolume {
        volume: Volume::try_from(volume).map_err(|e| invalid(rpc, e))?,
        published_node_ids: published.map(<[String]>::to_vec).unwrap_or_default(),
        condition: condition.map(VolumeCondition::from),
    })
}
