//! The controller calls volume jobs make, behind a port this layer owns:
//! [`ControllerCalls`].
//!
//! A job about a volume (a claim's ControllerPublish, a CreateVolume, a
//! snapshot, an expansion, a listing) does not know where the plugin's
//! controller runs. It is handed one by whoever runs the job (the agent),
//! a [`Controller`] either way:
//!
//! - the plugin's controller on this host: the local implementation, the
//!   controller service of the worker's [`Client`](crate::csi::Client),
//!   over the plugin's socket;
//! - in a cluster, on a host without a controller of the plugin, the
//!   plugin's controller leader on another host: the relayed
//!   implementation, a [`Controller`] whose calls, encoded as on the wire,
//!   are carried through etcd by the cluster's relay
//!   (`cluster::relay::EtcdRelay`), which the agent builds
//!   (`agent/cluster.rs`), since the cluster layer sits below this one.
//!
//! Either way a call answers, and fails, with the CSI types and the
//! classified [`Error`] of a call to a controller of this host, so the
//! manager handles each answer the same way.
//!
//! ControllerPublish and ControllerUnpublish go through the port too, but
//! in a cluster the steps ask the controller leader for them through its
//! attachment records instead (`cluster::attachments`).

use crate::csi::rpc::Sent;
use crate::csi::types::{
    Capacity, ControllerExpand, ControllerPublish, CreateSnapshot, CreateVolume, Expanded,
    ListSnapshots, Snapshot, SnapshotPage, StringMap, Topology, ValidateVolume, Volume, VolumePage,
};
use crate::csi::{Capability, Controller, Error, Secrets, Validation};

/// The controller calls of volume jobs, wherever the plugin's controller
/// runs (see the module docs).
pub trait ControllerCalls {
    /// ControllerPublishVolume, sent; [`Sent::wait`] takes its answer, the
    /// publish context.
    fn send_controller_publish(&self, req: &ControllerPublish) -> Sent<StringMap>;

    /// ControllerUnpublishVolume, sent; [`Sent::wait`] takes its answer.
    fn send_controller_unpublish(
        &self,
        volume_id: &str,
        node_id: &str,
        secrets: &Secrets,
    ) -> Sent<()>;

    fn create_volume(&self, req: &CreateVolume) -> Result<Volume, Error>;

    fn delete_volume(&self, volume_id: &str, secrets: &Secrets) -> Result<(), Error>;

    /// ValidateVolumeCapabilities, answered as a [`Validation`].
    fn validate_volume(&self, req: &ValidateVolume) -> Result<Validation, Error>;

    fn controller_expand(&self, req: &ControllerExpand) -> Result<Expanded, Error>;

    fn create_snapshot(&self, req: &CreateSnapshot) -> Result<Snapshot, Error>;

    fn delete_snapshot(&self, snapshot_id: &str, secrets: &Secrets) -> Result<(), Error>;

    /// One page of ListSnapshots.
    fn list_snapshots(&self, req: &ListSnapshots) -> Result<SnapshotPage, Error>;

    /// One page of ListVolumes.
    fn list_volumes(&self, max_entries: i32, starting_token: &str) -> Result<VolumePage, Error>;

    /// GetCapacity for volumes with `capabilities` and `parameters` (none:
    /// any) accessible from `topology` (none: anywhere).
    fn capacity(
        &self,
        capabilities: &[Capability],
        parameters: &StringMap,
        topology: Option<&Topology>,
    ) -> Result<Capacity, Error>;
}

/// A plugin's controller, over its socket or carried (see the module
/// docs).
impl ControllerCalls for Controller {
    fn send_controller_publish(&self, req: &ControllerPublish) -> Sent<StringMap> {
        Controller::send_controller_publish(self, req)
    }

    fn send_controller_unpublish(
        &self,
        volume_id: &str,
        node_id: &str,
        secrets: &Secrets,
    ) -> Sent<()> {
        Controller::send_controller_unpublish(self, volume_id, node_id, secrets)
    }

    fn create_volume(&self, req: &CreateVolume) -> Result<Volume, Error> {
        Controller::create_volume(self, req)
    }

    fn delete_volume(&self, volume_id: &str, secrets: &Secrets) -> Result<(), Error> {
        Controller::delete_volume(self, volume_id, secrets)
    }

    fn validate_volume(&self, req: &ValidateVolume) -> Result<Validation, Error> {
        Controller::validate_volume(self, req)
    }

    fn controller_expand(&self, req: &ControllerExpand) -> Result<Expanded, Error> {
        Controller::controller_expand(self, req)
    }

    fn create_snapshot(&self, req: &CreateSnapshot) -> Result<Snapshot, Error> {
        Controller::create_snapshot(self, req)
    }

    fn delete_snapshot(&self, snapshot_id: &str, secrets: &Secrets) -> Result<(), Error> {
        Controller::delete_snapshot(self, snapshot_id, secrets)
    }

    fn list_snapshots(&self, req: &ListSnapshots) -> Result<SnapshotPage, Error> {
        Controller::list_snapshots(self, req)
    }

    fn list_volumes(&self, max_entries: i32, starting_token: &str) -> Result<VolumePage, Error> {
        Controller::list_volumes(self, max_entries, starting_token)
    }

    fn capacity(
        &self,
        capabilities: &[Capability],
        parameters: &StringMap,
        topology: Option<&Topology>,
    ) -> Result<Capacity, Error> {
        Controller::capacity(self, capabilities, parameters, topology)
    }
}
