//! A blocking CSI client with a deadline on every call.
//!
//! One [`Client`] holds one grpcio channel to one plugin socket and the three
//! service stubs over it. Every method sends one RPC with the client's
//! deadline, converts the answer to our types, and maps any failure to a
//! classified [`Error`]. The client does not retry: callers wrap calls in
//! [`super::backoff::retry`] or their own schedule, because only they know
//! whether the operation is worth waiting for.

use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder, EnvBuilder, Environment};

use super::compare::Validation;
use super::convert::{self, ConvertError};
use super::endpoint::Endpoint;
use super::error::{Code, Error, Rpc};
use super::model::{Capability, Secrets};
use super::proto::csi as pb;
use super::proto::csi_grpc::{ControllerClient, IdentityClient, NodeClient};
use super::relay::Relay;
use super::types::*;

/// The deadline of an ordinary RPC when the caller sets none (Nomad's and
/// kubelet's is 2 minutes; plugins doing real attach work need it).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Probe's deadline: a probe that takes longer than this is a failed probe.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The process-wide gRPC environment: two completion-queue threads serve
/// every channel the process opens.
pub fn grpc_environment() -> Arc<Environment> {
    static ENV: OnceLock<Arc<Environment>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(EnvBuilder::new().cq_count(2).name_prefix("grpc-cq").build()))
        .clone()
}

/// Runs a future to completion on this thread: enough for the one future a
/// unary answer (of a grpcio server) returns, without an async runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}

/// A connection to one CSI plugin.
#[derive(Clone)]
pub struct Client {
    endpoint: Endpoint,
    timeout: Duration,
    probe_timeout: Duration,
    identity: IdentityClient,
    node: NodeClient,
    pub(super) controller: ControllerClient,
    /// Where the controller RPCs go instead of `controller`, when another
    /// host makes them ([`super::relay`]).
    relay: Option<Arc<dyn Relay>>,
}

impl Client {
    /// A client for `endpoint`. Connecting is lazy: an absent socket shows up
    /// as UNAVAILABLE on the first call.
    pub fn new(endpoint: &Endpoint) -> Client {
        let channel = ChannelBuilder::new(grpc_environment())
            // Plugins answer large ListVolumes pages; don't cap at 4 MiB.
            .max_receive_message_len(64 << 20)
            // A local plugin that restarts is back within milliseconds:
            // reconnect quickly, and on a channel of our own, so a new
            // client never inherits another one's reconnect backoff.
            .initial_reconnect_backoff(Duration::from_millis(100))
            .max_reconnect_backoff(Duration::from_secs(1))
            .use_local_subchannel_pool(true)
            .connect(&endpoint.grpc_target());
        Client {
            endpoint: endpoint.clone(),
            timeout: DEFAULT_TIMEOUT,
            probe_timeout: PROBE_TIMEOUT,
            identity: IdentityClient::new(channel.clone()),
            node: NodeClient::new(channel.clone()),
            controller: ControllerClient::new(channel),
            relay: None,
        }
    }

    /// The same client with its controller RPCs made by a controller
    /// elsewhere, through `relay`.
    pub fn relayed(&self, relay: Arc<dyn Relay>) -> Client {
        Client {
            relay: Some(relay),
            ..self.clone()
        }
    }

    /// The same connection with another deadline for every call (Probe
    /// included, but never longer than [`PROBE_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self.probe_timeout = timeout.min(PROBE_TIMEOUT);
        self
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(super) fn opt(&self) -> CallOption {
        CallOption::default().timeout(self.timeout)
    }

    /// Controller RPC `rpc` with `wire`: through the relay if this client
    /// has one, else `direct` on the plugin's own controller.
    fn controller_call<Req: protobuf::Message, Resp: protobuf::Message>(
        &self,
        rpc: Rpc,
        wire: &Req,
        direct: impl FnOnce(&ControllerClient, &Req, CallOption) -> grpcio::Result<Resp>,
    ) -> Result<Resp, Error> {
        let result = match &self.relay {
            Some(relay) => super::relay::call(relay.as_ref(), rpc, wire, self.timeout),
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
                    super::relay::call(relay.as_ref(), rpc, wire, self.timeout),
                )
                .map(convert),
            ),
            None => send(rpc, direct(&self.controller, wire, self.opt()), convert),
        }
    }

    // ---- Identity ----

    pub fn plugin_info(&self) -> Result<PluginInfo, Error> {
        let rpc = Rpc::GetPluginInfo;
        let resp = call(
            rpc,
            self.identity
                .get_plugin_info_opt(&pb::GetPluginInfoRequest::new(), self.opt()),
        )?;
        if resp.name.is_empty() {
            return Err(invalid(rpc, ConvertError::new("name", "is required")));
        }
        Ok(PluginInfo {
            name: resp.name,
            vendor_version: resp.vendor_version,
            manifest: convert::from_hash_map(&resp.manifest),
        })
    }

    pub fn plugin_capabilities(&self) -> Result<CapabilitySet<PluginCapability>, Error> {
        let req = pb::GetPluginCapabilitiesRequest::new();
        let resp = call(
            Rpc::GetPluginCapabilities,
            self.identity.get_plugin_capabilities_opt(&req, self.opt()),
        )?;
        Ok(convert::plugin_capabilities_from_proto(&resp.capabilities))
    }

    /// Probe: `Ok(true)` ready, `Ok(false)` still starting (CSI: an unset
    /// `ready` means ready), `Err` unhealthy. Always bounded by
    /// [`PROBE_TIMEOUT`] at most.
    pub fn probe(&self) -> Result<bool, Error> {
        let opt = CallOption::default().timeout(self.probe_timeout);
        let resp = call(
            Rpc::Probe,
            self.identity.probe_opt(&pb::ProbeRequest::new(), opt),
        )?;
        Ok(resp.ready.as_ref().map_or(true, |ready| ready.value))
    }

    // ---- Node ----

    pub fn node_info(&self) -> Result<NodeInfo, Error> {
        let rpc = Rpc::NodeGetInfo;
        let resp = call(
            rpc,
            self.node
                .node_get_info_opt(&pb::NodeGetInfoRequest::new(), self.opt()),
        )?;
        if resp.node_id.is_empty() {
            return Err(invalid(rpc, ConvertError::new("node_id", "is required")));
        }
        Ok(NodeInfo {
            node_id: resp.node_id,
            max_volumes_per_node: resp.max_volumes_per_node,
            accessible_topology: resp
                .accessible_topology
                .as_ref()
                .map(convert::topology_from_proto),
        })
    }

    pub fn node_capabilities(&self) -> Result<CapabilitySet<NodeCapability>, Error> {
        let req = pb::NodeGetCapabilitiesRequest::new();
        let resp = call(
            Rpc::NodeGetCapabilities,
            self.node.node_get_capabilities_opt(&req, self.opt()),
        )?;
        Ok(convert::node_capabilities_from_proto(&resp.capabilities))
    }

    pub fn node_stage(&self, req: &NodeStage) -> Result<(), Error> {
        self.send_node_stage(req).wait()
    }

    /// NodeStageVolume, sent; [`Sent::wait`] takes its answer.
    pub fn send_node_stage(&self, req: &NodeStage) -> Sent<()> {
        let mut wire = pb::NodeStageVolumeRequest::new();
        wire.volume_id = req.volume_id.clone();
        wire.publish_context = convert::to_hash_map(&req.publish_context);
        wire.staging_target_path = path_string(&req.staging_target_path);
        wire.volume_capability = convert::capability_to_field(&req.capability);
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        wire.volume_context = convert::to_hash_map(&req.volume_context);
        send(
            Rpc::NodeStageVolume,
            self.node.node_stage_volume_async_opt(&wire, self.opt()),
            drop,
        )
    }

    pub fn node_unstage(&self, volume_id: &str, staging_target_path: &Path) -> Result<(), Error> {
        self.send_node_unstage(volume_id, staging_target_path)
            .wait()
    }

    /// NodeUnstageVolume, sent; [`Sent::wait`] takes its answer.
    pub fn send_node_unstage(&self, volume_id: &str, staging_target_path: &Path) -> Sent<()> {
        let mut wire = pb::NodeUnstageVolumeRequest::new();
        wire.volume_id = volume_id.to_string();
        wire.staging_target_path = path_string(staging_target_path);
        send(
            Rpc::NodeUnstageVolume,
            self.node.node_unstage_volume_async_opt(&wire, self.opt()),
            drop,
        )
    }

    pub fn node_publish(&self, req: &NodePublish) -> Result<(), Error> {
        self.send_node_publish(req).wait()
    }

    /// NodePublishVolume, sent; [`Sent::wait`] takes its answer.
    pub fn send_node_publish(&self, req: &NodePublish) -> Sent<()> {
        let mut wire = pb::NodePublishVolumeRequest::new();
        wire.volume_id = req.volume_id.clone();
        wire.publish_context = convert::to_hash_map(&req.publish_context);
        wire.staging_target_path = req
            .staging_target_path
            .as_deref()
            .map(path_string)
            .unwrap_or_default();
        wire.target_path = path_string(&req.target_path);
        wire.volume_capability = convert::capability_to_field(&req.capability);
        wire.readonly = req.read_only;
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        wire.volume_context = convert::to_hash_map(&req.volume_context);
        send(
            Rpc::NodePublishVolume,
            self.node.node_publish_volume_async_opt(&wire, self.opt()),
            drop,
        )
    }

    pub fn node_unpublish(&self, volume_id: &str, target_path: &Path) -> Result<(), Error> {
        self.send_node_unpublish(volume_id, target_path).wait()
    }

    /// NodeUnpublishVolume, sent; [`Sent::wait`] takes its answer.
    pub fn send_node_unpublish(&self, volume_id: &str, target_path: &Path) -> Sent<()> {
        let mut wire = pb::NodeUnpublishVolumeRequest::new();
        wire.volume_id = volume_id.to_string();
        wire.target_path = path_string(target_path);
        send(
            Rpc::NodeUnpublishVolume,
            self.node.node_unpublish_volume_async_opt(&wire, self.opt()),
            drop,
        )
    }

    pub fn node_volume_stats(
        &self,
        volume_id: &str,
        volume_path: &Path,
        staging_target_path: Option<&Path>,
    ) -> Result<VolumeStats, Error> {
        let rpc = Rpc::NodeGetVolumeStats;
        let mut wire = pb::NodeGetVolumeStatsRequest::new();
        wire.volume_id = volume_id.to_string();
        wire.volume_path = path_string(volume_path);
        wire.staging_target_path = staging_target_path.map(path_string).unwrap_or_default();
        let resp = call(rpc, self.node.node_get_volume_stats_opt(&wire, self.opt()))?;
        let usage = resp
            .usage
            .iter()
            .map(Usage::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(rpc, e))?;
        Ok(VolumeStats {
            usage,
            condition: resp.volume_condition.as_ref().map(VolumeCondition::from),
        })
    }

    /// NodeExpandVolume; answers the new capacity (0 if the plugin did not
    /// say).
    pub fn node_expand(&self, req: &NodeExpand) -> Result<i64, Error> {
        let mut wire = pb::NodeExpandVolumeRequest::new();
        wire.volume_id = req.volume_id.clone();
        wire.volume_path = path_string(&req.volume_path);
        wire.capacity_range = convert::capacity_to_field(req.capacity);
        wire.staging_target_path = req
            .staging_target_path
            .as_deref()
            .map(path_string)
            .unwrap_or_default();
        if let Some(cap) = &req.capability {
            wire.volume_capability = convert::capability_to_field(cap);
        }
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        let resp = call(
            Rpc::NodeExpandVolume,
            self.node.node_expand_volume_opt(&wire, self.opt()),
        )?;
        Ok(resp.capacity_bytes)
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

/// An RPC sent whose answer is not taken yet: whatever its caller does
/// before [`Sent::wait`] runs while the plugin works on the call.
#[must_use = "an RPC's answer is waited for"]
pub struct Sent<T> {
    answer: Box<dyn FnOnce() -> Result<T, Error>>,
}

impl<T: 'static> Sent<T> {
    /// Waits for the answer (within the client's deadline).
    pub fn wait(self) -> Result<T, Error> {
        (self.answer)()
    }

    /// An RPC made already (through a relay).
    fn known(result: Result<T, Error>) -> Sent<T> {
        Sent {
            answer: Box::new(move || result),
        }
    }
}

/// The RPC `rpc`, started as `started`, its answer converted by `convert`.
fn send<R: Unpin + 'static, T: 'static>(
    rpc: Rpc,
    started: grpcio::Result<grpcio::ClientUnaryReceiver<R>>,
    convert: impl FnOnce(R) -> T + 'static,
) -> Sent<T> {
    Sent {
        answer: Box::new(move || call(rpc, started.and_then(block_on)).map(convert)),
    }
}

/// Maps a grpcio result to ours, logging the call (never its payload).
fn call<T>(rpc: Rpc, result: grpcio::Result<T>) -> Result<T, Error> {
    match result {
        Ok(resp) => {
            log::trace!("{rpc}: ok");
            Ok(resp)
        }
        Err(err) => {
            let err = from_grpc(rpc, err);
            log::debug!("{err}");
            Err(err)
        }
    }
}

fn from_grpc(rpc: Rpc, err: grpcio::Error) -> Error {
    match err {
        grpcio::Error::RpcFailure(status) => Error::new(
            rpc,
            Code::from_number(i32::from(status.code())),
            status.message().to_string(),
        ),
        // The call never produced a status: the transport failed, so the
        // outcome is unknown.
        other => Error::new(rpc, Code::Unavailable, other.to_string()),
    }
}

/// A reply that breaks the spec: nothing to retry, the plugin is wrong.
fn invalid(rpc: Rpc, err: ConvertError) -> Error {
    Error::new(
        rpc,
        Code::Internal,
        format!("plugin sent an invalid reply: {err}"),
    )
}

fn path_string(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}
