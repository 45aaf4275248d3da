//! Our own request and answer types for the CSI RPCs the agent calls.
//!
//! The client takes and returns these, never generated protobuf, so the rest
//! of the agent depends on CSI's meaning rather than on one code generator's
//! naming. Conversions live in `convert.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use super::model::{Capability, Secrets};

/// Opaque string maps: parameters, volume and publish contexts.
pub type StringMap = BTreeMap<String, String>;

/// One topology segment map, e.g. `{"topology.hostpath.csi-agent/node": "n1"}`.
pub type Topology = BTreeMap<String, String>;

/// Declares a capability enum with its CSI wire number and user string.
macro_rules! capability_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $number:literal, $text:literal;)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            pub fn number(self) -> i32 {
                match self { $($name::$variant => $number),* }
            }

            /// `None` for UNKNOWN and numbers newer than this spec version.
            pub fn from_number(n: i32) -> Option<$name> {
                match n { $($number => Some($name::$variant),)* _ => None }
            }

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

capability_enum! {
    /// `PluginCapability.Service.Type` and `VolumeExpansion.Type`, flattened.
    PluginCapability {
        ControllerService = 1, "controller-service";
        VolumeAccessibilityConstraints = 2, "volume-accessibility-constraints";
        GroupControllerService = 3, "group-controller-service";
        SnapshotMetadataService = 4, "snapshot-metadata-service";
        OnlineExpansion = 101, "online-expansion";
        OfflineExpansion = 102, "offline-expansion";
    }
}

impl PluginCapability {
    /// The wire number inside `VolumeExpansion.Type` for the expansion
    /// variants (they share the enum with the services in our model).
    pub(crate) const EXPANSION_OFFSET: i32 = 100;
}

capability_enum! {
    /// `ControllerServiceCapability.RPC.Type`.
    ControllerCapability {
        CreateDeleteVolume = 1, "create-delete-volume";
        PublishUnpublishVolume = 2, "publish-unpublish-volume";
        ListVolumes = 3, "list-volumes";
        GetCapacity = 4, "get-capacity";
        CreateDeleteSnapshot = 5, "create-delete-snapshot";
        ListSnapshots = 6, "list-snapshots";
        CloneVolume = 7, "clone-volume";
        PublishReadonly = 8, "publish-readonly";
        ExpandVolume = 9, "expand-volume";
        ListVolumesPublishedNodes = 10, "list-volumes-published-nodes";
        VolumeCondition = 11, "volume-condition";
        GetVolume = 12, "get-volume";
        SingleNodeMultiWriter = 13, "single-node-multi-writer";
        ModifyVolume = 14, "modify-volume";
        GetSnapshot = 15, "get-snapshot";
    }
}

capability_enum! {
    /// `NodeServiceCapability.RPC.Type`.
    NodeCapability {
        StageUnstageVolume = 1, "stage-unstage-volume";
        GetVolumeStats = 2, "get-volume-stats";
        ExpandVolume = 3, "expand-volume";
        VolumeCondition = 4, "volume-condition";
        SingleNodeMultiWriter = 5, "single-node-multi-writer";
        VolumeMountGroup = 6, "volume-mount-group";
    }
}

/// A set of advertised capabilities.
pub type CapabilitySet<T> = BTreeSet<T>;

/// Answer of GetPluginInfo.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginInfo {
    pub name: String,
    pub vendor_version: String,
    pub manifest: StringMap,
}

/// Answer of NodeGetInfo.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub node_id: String,
    /// 0 means unlimited.
    pub max_volumes_per_node: i64,
    pub accessible_topology: Option<Topology>,
}

/// The capacity a volume must have: 0 means unset for either bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapacityRange {
    pub required_bytes: i64,
    pub limit_bytes: i64,
}

impl CapacityRange {
    pub fn is_unset(&self) -> bool {
        self.required_bytes == 0 && self.limit_bytes == 0
    }
}

/// `TopologyRequirement`: where a new volume must (requisite) or should
/// (preferred) be accessible from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopologyRequirement {
    pub requisite: Vec<Topology>,
    pub preferred: Vec<Topology>,
}

/// A volume as the plugin describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Volume {
    pub volume_id: String,
    pub capacity_bytes: i64,
    pub volume_context: StringMap,
    pub accessible_topology: Vec<Topology>,
}

/// The health a plugin reports for a volume (CSI 1.3 VolumeCondition).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeCondition {
    pub abnormal: bool,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateVolume {
    pub name: String,
    pub capacity: CapacityRange,
    pub capabilities: Vec<Capability>,
    pub parameters: StringMap,
    pub secrets: Secrets,
    pub accessibility: Option<TopologyRequirement>,
    /// Pre-populate the new volume from a snapshot or another volume.
    pub content_source: Option<ContentSource>,
}

/// What a new volume is made from (CreateVolume's `volume_content_source`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContentSource {
    Snapshot(String),
    Volume(String),
}

/// A snapshot, as CreateSnapshot and ListSnapshots answer it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub snapshot_id: String,
    pub source_volume_id: String,
    /// 0 when the plugin does not say.
    pub size_bytes: i64,
    pub creation_time: Option<std::time::SystemTime>,
    pub ready_to_use: bool,
}

/// CreateSnapshot's request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateSnapshot {
    pub name: String,
    pub source_volume_id: String,
    pub parameters: StringMap,
    pub secrets: Secrets,
}

/// ListSnapshots' filters; empty strings filter nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListSnapshots {
    pub max_entries: i32,
    pub starting_token: String,
    pub source_volume_id: String,
    pub snapshot_id: String,
    pub secrets: Secrets,
}

/// One page of ListSnapshots; `next_token` is empty on the last page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotPage {
    pub entries: Vec<Snapshot>,
    pub next_token: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerPublish {
    pub volume_id: String,
    pub node_id: String,
    pub capability: Capability,
    pub read_only: bool,
    pub secrets: Secrets,
    pub volume_context: StringMap,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidateVolume {
    pub volume_id: String,
    pub volume_context: StringMap,
    pub capabilities: Vec<Capability>,
    pub parameters: StringMap,
    pub secrets: Secrets,
}

/// One entry of ListVolumes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedVolume {
    pub volume: Volume,
    pub published_node_ids: Vec<String>,
    pub condition: Option<VolumeCondition>,
}

/// One page of ListVolumes; `next_token` is empty on the last page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumePage {
    pub entries: Vec<ListedVolume>,
    pub next_token: String,
}

/// Answer of GetCapacity; the bounds are unset when the plugin omits them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    pub available_capacity: i64,
    pub maximum_volume_size: Option<i64>,
    pub minimum_volume_size: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerExpand {
    pub volume_id: String,
    pub capacity: CapacityRange,
    pub secrets: Secrets,
    pub capability: Option<Capability>,
}

/// Answer of ControllerExpandVolume.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expanded {
    pub capacity_bytes: i64,
    pub node_expansion_required: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStage {
    pub volume_id: String,
    pub publish_context: StringMap,
    pub staging_target_path: PathBuf,
    pub capability: Capability,
    pub secrets: Secrets,
    pub volume_context: StringMap,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePublish {
    pub volume_id: String,
    pub publish_context: StringMap,
    /// Set when the node has STAGE_UNSTAGE_VOLUME.
    pub staging_target_path: Option<PathBuf>,
    pub target_path: PathBuf,
    pub capability: Capability,
    pub read_only: bool,
    pub secrets: Secrets,
    pub volume_context: StringMap,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeExpand {
    pub volume_id: String,
    pub volume_path: PathBuf,
    pub capacity: CapacityRange,
    pub staging_target_path: Option<PathBuf>,
    pub capability: Option<Capability>,
    pub secrets: Secrets,
}

/// What a usage figure counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageUnit {
    Bytes,
    Inodes,
}

impl fmt::Display for UsageUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UsageUnit::Bytes => "bytes",
            UsageUnit::Inodes => "inodes",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub unit: UsageUnit,
    pub available: i64,
    pub total: i64,
    pub used: i64,
}

/// Answer of NodeGetVolumeStats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeStats {
    pub usage: Vec<Usage>,
    pub condition: Option<VolumeCondition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_numbers_round_trip() {
        for cap in ControllerCapability::ALL {
            assert_eq!(ControllerCapability::from_number(cap.number()), Some(*cap));
        }
        for cap in NodeCapability::ALL {
            assert_eq!(NodeCapability::from_number(cap.number()), Some(*cap));
        }
        for cap in PluginCapability::ALL {
            assert_eq!(PluginCapability::from_number(cap.number()), Some(*cap));
        }
        assert_eq!(ControllerCapability::from_number(0), None);
        assert_eq!(NodeCapability::from_number(99), None);
    }

    #[test]
    fn capability_strings_are_kebab_case() {
        assert_eq!(
            NodeCapability::StageUnstageVolume.to_string(),
            "stage-unstage-volume"
        );
        assert_eq!(
            ControllerCapability::PublishReadonly.to_string(),
            "publish-readonly"
        );
    }
}
