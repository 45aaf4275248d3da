//! What the volume manager is asked and what it answers, in its own
//! terms. The control API (`api/`) maps these to and from its protobuf
//! messages; a task claims its volumes with the same types, in-process.
//!
//! A request holds what its caller said, unparsed where the manager's own
//! checks name the field (a propagation mode, a target), so that a bad
//! value gets the same error whoever sent it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::call;
use crate::csi::Secrets;

/// A volume spec to register or create: a file's path as the caller
/// named it, and its text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecRequest {
    pub file: String,
    pub hcl: String,
    /// What the volume plugin's Create sets beyond the spec (the default
    /// for the CLI and the control API, which have no such options).
    pub settings: PluginSettings,
}

pub use super::model::PluginSettings;

/// `volume deregister` and `volume delete`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeregisterRequest {
    pub id: String,
    /// Release the volume's claims first.
    pub force: bool,
}

/// `volume status`: one volume (with its usage if `stats`), every
/// volume, or a plugin's volumes (with those its controller lists).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusRequest {
    pub id: String,
    pub stats: bool,
    pub plugin_id: String,
}

/// A claim of a volume for an alloc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimRequest {
    pub volume_id: String,
    pub alloc_id: String,
    pub read_only: bool,
    /// A path to bind the volume at, or empty.
    pub target: String,
    /// The target's propagation (`private`, `host-to-task`,
    /// `bidirectional`), or empty for the default.
    pub propagation: String,
}

/// The release of an alloc's claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseRequest {
    pub volume_id: String,
    pub alloc_id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotCreateRequest {
    pub volume_id: String,
    pub name: String,
    pub parameters: BTreeMap<String, String>,
    /// Added to the volume's own secrets for this call.
    pub secrets: Secrets,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotDeleteRequest {
    pub plugin_id: String,
    pub snapshot_id: String,
    pub secrets: Secrets,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotListRequest {
    pub plugin_id: String,
    pub secrets: Secrets,
}

/// The volume manager's answer to a call.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// `volume status`, and a registered or created volume.
    Status(Status),
    Claimed(Claimed),
    Released(Released),
    Deregistered,
    SnapshotCreated(Snapshot),
    SnapshotDeleted,
    Snapshots(Vec<Snapshot>),
}

/// Where the volume manager's answer goes.
pub type ReplyTo = call::ReplyTo<Answer>;

/// Volumes as `volume status` shows them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    pub volumes: Vec<VolumeStatus>,
    /// A plugin's volumes that are not registered (`volume status
    /// -plugin`).
    pub external: Vec<ExternalVolume>,
    /// Why the plugin's volumes could not be listed.
    pub external_error: String,
}

/// A volume the plugin's controller lists and the agent has not
/// registered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExternalVolume {
    pub external_id: String,
    pub capacity_bytes: i64,
    pub published_node_ids: Vec<String>,
    pub abnormal: bool,
    pub condition_message: String,
}

/// One volume, with no secret values and no mount flags (their count
/// only).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VolumeStatus {
    pub id: String,
    pub name: String,
    pub plugin_id: String,
    pub provider: String,
    pub external_id: String,
    /// `access-mode/attachment-mode` each.
    pub capabilities: Vec<String>,
    pub fs_type: String,
    pub mount_flags: u32,
    pub secret_keys: Vec<String>,
    pub parameters: BTreeMap<String, String>,
    pub context: BTreeMap<String, String>,
    pub schedulable: bool,
    pub claims: Vec<ClaimStatus>,
    pub past_claims: Vec<ClaimStatus>,
    pub stats: Option<VolumeStats>,
    pub capacity_bytes: i64,
    pub created: bool,
    pub stagings: Vec<StagingStatus>,
    pub creating: bool,
    pub create_error: String,
    /// The volume plugin's settings of the volume (see [`PluginSettings`]).
    pub mounts_read_only: bool,
    pub mount_group: String,
    /// Where the volume can be used; none: everywhere.
    pub topologies: Vec<crate::csi::types::Topology>,
    /// The volume's condition as its plugin last said it.
    pub health: Option<Health>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StagingStatus {
    pub path: String,
    pub state: String,
    pub capability: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimStatus {
    pub alloc_id: String,
    /// `read` or `write`.
    pub mode: String,
    pub state: String,
    pub target: String,
    pub propagation: String,
    pub publish_path: String,
    pub usage: String,
    pub last_error: String,
    pub next_retry: Option<SystemTime>,
    pub attempts: u32,
    pub failure: String,
    pub device: String,
    /// The node the claim is on, in a cluster.
    pub node: String,
}

/// A volume's condition as its plugin last said it, and since when it
/// has said so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    pub abnormal: bool,
    pub message: String,
    /// When the plugin first said this (abnormal or not) after saying the
    /// other, or after the agent started watching the volume.
    pub since: SystemTime,
    /// The last answer that said it.
    pub checked: SystemTime,
}

/// NodeGetVolumeStats, or why there is none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeStats {
    pub available: bool,
    pub error: String,
    pub bytes_total: i64,
    pub bytes_used: i64,
    pub bytes_available: i64,
    pub inodes_total: i64,
    pub inodes_used: i64,
    pub inodes_available: i64,
    pub abnormal: bool,
    pub condition_message: String,
}

/// A claim taken: where the volume is published, and where it is bound
/// if the claim named a target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claimed {
    pub publish_path: String,
    pub target: String,
}

/// A release: whether the claim is gone, or why it is not yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released {
    pub released: bool,
    pub message: String,
}

/// A snapshot, with the registered volume it was taken of when the agent
/// knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub id: String,
    pub source_volume_id: String,
    pub volume_id: String,
    pub size_bytes: i64,
    pub created: Option<SystemTime>,
    pub ready: bool,
}
