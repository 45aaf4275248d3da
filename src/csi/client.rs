//! A blocking CSI client with a deadline on every call.
//!
//! One [`Client`] holds one grpcio channel to one plugin socket, over which
//! every RPC goes as a byte method of `rpc.rs`'s `Stub` (one copy of
//! grpcio's client code for all of them). Every method sends one RPC with the client's
//! deadline, converts the answer to our types, and maps any failure to a
//! classified [`Error`]. The client does not retry: callers wrap calls in
//! [`super::backoff::retry`] or their own schedule, because only they know
//! whether the operation is worth waiting for.
//!
//! This file holds the connection and the identity and node services; the
//! controller service over the same connection is a [`Controller`]
//! (`controller.rs`), whose calls the client makes under the same names,
//! and what every call shares (blocking on an answer, [`Sent`], error
//! mapping) is `rpc.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder};

use super::compare::Validation;
use super::controller::Controller;
use super::convert::{self, ConvertError};
use super::endpoint::Endpoint;
use super::error::{Error, Rpc};
use super::model::{Capability, Secrets};
use super::proto::csi as pb;
use super::rpc::{call, invalid, send, Sent, Stub};
use super::types::*;
use crate::grpc::grpc_environment;

/// The deadline of an ordinary RPC when the caller sets none (Nomad's and
/// kubelet's is 2 minutes; plugins doing real attach work need it).
/// The largest answer read from a plugin: gRPC refuses a longer one
/// before it is decoded, and the call fails.
pub const MAX_ANSWER: usize = 64 << 20;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Probe's deadline: a probe that takes longer than this is a failed probe.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to one CSI plugin.
#[derive(Clone)]
pub struct Client {
    endpoint: Endpoint,
    timeout: Duration,
    probe_timeout: Duration,
    /// The identity and node services.
    stub: Stub,
    controller: Controller,
    /// The plugin's ID, which the metrics of its calls name
    /// (`driver_name`); empty for a client of no plugin of the agent's.
    driver: Arc<str>,
}

impl Client {
    /// A client for `endpoint`. Connecting is lazy: an absent socket shows up
    /// as UNAVAILABLE on the first call.
    pub fn new(endpoint: &Endpoint) -> Client {
        let channel = ChannelBuilder::new(grpc_environment())
            // Plugins answer large ListVolumes pages; don't cap at 4 MiB.
            .max_receive_message_len(MAX_ANSWER as i32)
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
            stub: Stub::new(channel.clone()),
            controller: Controller::on_socket(channel, DEFAULT_TIMEOUT),
            driver: Arc::from(""),
        }
    }

    /// The same connection, its calls counted in the metrics as plugin
    /// `id`'s.
    pub fn for_plugin(mut self, id: &str) -> Client {
        self.driver = Arc::from(id);
        self.controller = self.controller.for_plugin(id);
        self
    }

    /// The same connection with another deadline for every call (Probe
    /// included, but never longer than [`PROBE_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self.probe_timeout = timeout.min(PROBE_TIMEOUT);
        self.controller = self.controller.with_timeout(timeout);
        self
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The plugin's controller service, over this connection.
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    fn opt(&self) -> CallOption {
        CallOption::default().timeout(self.timeout)
    }

    // ---- Identity ----

    pub fn plugin_info(&self) -> Result<PluginInfo, Error> {
        let rpc = Rpc::GetPluginInfo;
        let req = pb::GetPluginInfoRequest::new();
        let resp: pb::GetPluginInfoResponse =
            call(rpc, &self.driver, || self.stub.call(rpc, &req, self.opt()))?;
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
        let rpc = Rpc::GetPluginCapabilities;
        let req = pb::GetPluginCapabilitiesRequest::new();
        let resp: pb::GetPluginCapabilitiesResponse =
            call(rpc, &self.driver, || self.stub.call(rpc, &req, self.opt()))?;
        Ok(convert::plugin_capabilities_from_proto(&resp.capabilities))
    }

    /// Probe: `Ok(true)` ready, `Ok(false)` still starting (CSI: an unset
    /// `ready` means ready), `Err` unhealthy. Always bounded by
    /// [`PROBE_TIMEOUT`] at most.
    pub fn probe(&self) -> Result<bool, Error> {
        let opt = CallOption::default().timeout(self.probe_timeout);
        let req = pb::ProbeRequest::new();
        let resp: pb::ProbeResponse = call(Rpc::Probe, &self.driver, || {
            self.stub.call(Rpc::Probe, &req, opt)
        })?;
        Ok(resp.ready.as_ref().map_or(true, |ready| ready.value))
    }

    // ---- Node ----

    pub fn node_info(&self) -> Result<NodeInfo, Error> {
        let rpc = Rpc::NodeGetInfo;
        let req = pb::NodeGetInfoRequest::new();
        let resp: pb::NodeGetInfoResponse =
            call(rpc, &self.driver, || self.stub.call(rpc, &req, self.opt()))?;
        if resp.node_id.is_empty() {
            return Err(invalid(rpc, ConvertError::new("node_id", "is required")));
        }
        let accessible_topology = resp
            .accessible_topology
            .as_ref()
            .map(convert::topology_from_proto);
        if let Some(topology) = &accessible_topology {
            super::topology::check(topology)
                .map_err(|e| invalid(rpc, ConvertError::new("accessible_topology", e)))?;
        }
        Ok(NodeInfo {
            node_id: resp.node_id,
            max_volumes_per_node: resp.max_volumes_per_node,
            accessible_topology,
        })
    }

    pub fn node_capabilities(&self) -> Result<CapabilitySet<NodeCapability>, Error> {
        let rpc = Rpc::NodeGetCapabilities;
        let req = pb::NodeGetCapabilitiesRequest::new();
        let resp: pb::NodeGetCapabilitiesResponse =
            call(rpc, &self.driver, || self.stub.call(rpc, &req, self.opt()))?;
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
        let rpc = Rpc::NodeStageVolume;
        send(
            rpc,
            self.driver.clone(),
            self.stub.start(rpc, &wire, self.opt()),
            drop::<pb::NodeStageVolumeResponse>,
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
        let rpc = Rpc::NodeUnstageVolume;
        send(
            rpc,
            self.driver.clone(),
            self.stub.start(rpc, &wire, self.opt()),
            drop::<pb::NodeUnstageVolumeResponse>,
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
        let rpc = Rpc::NodePublishVolume;
        send(
            rpc,
            self.driver.clone(),
            self.stub.start(rpc, &wire, self.opt()),
            drop::<pb::NodePublishVolumeResponse>,
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
        let rpc = Rpc::NodeUnpublishVolume;
        send(
            rpc,
            self.driver.clone(),
            self.stub.start(rpc, &wire, self.opt()),
            drop::<pb::NodeUnpublishVolumeResponse>,
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
        let resp: pb::NodeGetVolumeStatsResponse =
            call(rpc, &self.driver, || self.stub.call(rpc, &wire, self.opt()))?;
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
        let rpc = Rpc::NodeExpandVolume;
        let resp: pb::NodeExpandVolumeResponse =
            call(rpc, &self.driver, || self.stub.call(rpc, &wire, self.opt()))?;
        Ok(resp.capacity_bytes)
    }
}

/// The controller service over this connection: each call is its
/// [`Controller`]'s of the same name.
impl Client {
    pub fn controller_capabilities(&self) -> Result<CapabilitySet<ControllerCapability>, Error> {
        self.controller.controller_capabilities()
    }

    pub fn create_volume(&self, req: &CreateVolume) -> Result<Volume, Error> {
        self.controller.create_volume(req)
    }

    pub fn delete_volume(&self, volume_id: &str, secrets: &Secrets) -> Result<(), Error> {
        self.controller.delete_volume(volume_id, secrets)
    }

    pub fn controller_publish(&self, req: &ControllerPublish) -> Result<StringMap, Error> {
        self.controller.controller_publish(req)
    }

    pub fn send_controller_publish(&self, req: &ControllerPublish) -> Sent<StringMap> {
        self.controller.send_controller_publish(req)
    }

    pub fn controller_unpublish(
        &self,
        volume_id: &str,
        node_id: &str,
        secrets: &Secrets,
    ) -> Result<(), Error> {
        self.controller
            .controller_unpublish(volume_id, node_id, secrets)
    }

    pub fn send_controller_unpublish(
        &self,
        volume_id: &str,
        node_id: &str,
        secrets: &Secrets,
    ) -> Sent<()> {
        self.controller
            .send_controller_unpublish(volume_id, node_id, secrets)
    }

    pub fn validate_volume(&self, req: &ValidateVolume) -> Result<Validation, Error> {
        self.controller.validate_volume(req)
    }

    pub fn list_volumes(
        &self,
        max_entries: i32,
        starting_token: &str,
    ) -> Result<VolumePage, Error> {
        self.controller.list_volumes(max_entries, starting_token)
    }

    pub fn capacity(
        &self,
        capabilities: &[Capability],
        parameters: &StringMap,
        topology: Option<&Topology>,
    ) -> Result<Capacity, Error> {
        self.controller.capacity(capabilities, parameters, topology)
    }

    pub fn controller_expand(&self, req: &ControllerExpand) -> Result<Expanded, Error> {
        self.controller.controller_expand(req)
    }

    pub fn controller_get_volume(&self, volume_id: &str) -> Result<ListedVolume, Error> {
        self.controller.controller_get_volume(volume_id)
    }

    pub fn create_snapshot(&self, req: &CreateSnapshot) -> Result<Snapshot, Error> {
        self.controller.create_snapshot(req)
    }

    pub fn delete_snapshot(&self, snapshot_id: &str, secrets: &Secrets) -> Result<(), Error> {
        self.controller.delete_snapshot(snapshot_id, secrets)
    }

    pub fn list_snapshots(&self, req: &ListSnapshots) -> Result<SnapshotPage, Error> {
        self.controller.list_snapshots(req)
    }
}

fn path_string(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}
