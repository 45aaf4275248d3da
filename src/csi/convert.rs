//! Conversions between our CSI types and the generated protobuf messages.
//!
//! Building requests is infallible; reading messages is not, because a plugin
//! (or, in the hostpath plugin, a CO) may send an UNKNOWN enum or leave a
//! required oneof unset. Those errors name the field.

use std::collections::HashMap;
use std::fmt;

use protobuf::{EnumOrUnknown, MessageField};

use super::model::{AccessMode, AttachmentMode, Capability, MountFlags, MountOptions, Secrets};
use super::proto::csi as pb;
use super::types::{CapabilitySet, ContentSource, ControllerCapability, Snapshot};
use super::types::{
    CapacityRange, NodeCapability, PluginCapability, StringMap, Topology, TopologyRequirement,
    Usage, UsageUnit, Volume, VolumeCondition,
};

/// A message that does not hold what CSI requires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertError {
    pub field: &'static str,
    pub reason: String,
}

impl ConvertError {
    pub(crate) fn new(field: &'static str, reason: impl Into<String>) -> ConvertError {
        ConvertError {
            field,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for ConvertError {}

pub(crate) fn to_hash_map(map: &StringMap) -> HashMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

pub(crate) fn from_hash_map(map: &HashMap<String, String>) -> StringMap {
    order::map(map.iter().map(|(k, v)| (k.clone(), v.clone())))
}

pub(crate) fn secrets_to_proto(secrets: &Secrets) -> HashMap<String, String> {
    secrets
        .expose()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl From<&Capability> for pb::VolumeCapability {
    fn from(cap: &Capability) -> pb::VolumeCapability {
        let mut out = pb::VolumeCapability::new();
        match cap.attachment_mode {
            AttachmentMode::BlockDevice => out.set_block(pb::volume_capability::BlockVolume::new()),
            AttachmentMode::FileSystem => {
                let mut mount = pb::volume_capability::MountVolume::new();
                mount.fs_type = cap.mount_options.fs_type.clone();
                mount.mount_flags = cap.mount_options.mount_flags.expose().to_vec();
                mount.volume_mount_group = cap.mount_options.volume_mount_group.clone();
                out.set_mount(mount);
            }
        }
        out.access_mode.mut_or_insert_default().mode =
            EnumOrUnknown::from_i32(cap.access_mode.number());
        out
    }
}

impl TryFrom<&pb::VolumeCapability> for Capability {
    type Error = ConvertError;

    fn try_from(cap: &pb::VolumeCapability) -> Result<Capability, ConvertError> {
        let number = cap
            .access_mode
            .as_ref()
            .ok_or_else(|| ConvertError::new("access_mode", "is required"))?
            .mode
            .value();
        let access_mode = AccessMode::from_number(number).ok_or_else(|| {
            ConvertError::new("access_mode.mode", format!("unknown access mode {number}"))
        })?;
        if cap.has_block() {
            Ok(Capability::new(access_mode, AttachmentMode::BlockDevice))
        } else if cap.has_mount() {
            let mount = cap.mount();
            Ok(
                Capability::new(access_mode, AttachmentMode::FileSystem).with_mount_options(
                    MountOptions {
                        fs_type: mount.fs_type.clone(),
                        mount_flags: MountFlags::new(mount.mount_flags.clone()),
                        volume_mount_group: mount.volume_mount_group.clone(),
                    },
                ),
            )
        } else {
            Err(ConvertError::new(
                "access_type",
                "one of block or mount is required",
            ))
        }
    }
}

pub(crate) fn capabilities_from_proto(
    caps: &[pb::VolumeCapability],
) -> Result<Vec<Capability>, ConvertError> {
    caps.iter().map(Capability::try_from).collect()
}

pub(crate) fn capability_to_field(cap: &Capability) -> MessageField<pb::VolumeCapability> {
    MessageField::some(pb::VolumeCapability::from(cap))
}

pub(crate) fn capability_from_field(
    cap: &MessageField<pb::VolumeCapability>,
) -> Result<Capability, ConvertError> {
    let cap = cap
        .as_ref()
        .ok_or_else(|| ConvertError::new("volume_capability", "is required"))?;
    Capability::try_from(cap)
}

impl From<CapacityRange> for pb::CapacityRange {
    fn from(range: CapacityRange) -> pb::CapacityRange {
        let mut out = pb::CapacityRange::new();
        out.required_bytes = range.required_bytes;
        out.limit_bytes = range.limit_bytes;
        out
    }
}

impl From<&pb::CapacityRange> for CapacityRange {
    fn from(range: &pb::CapacityRange) -> CapacityRange {
        CapacityRange {
            required_bytes: range.required_bytes,
            limit_bytes: range.limit_bytes,
        }
    }
}

pub(crate) fn capacity_to_field(range: CapacityRange) -> MessageField<pb::CapacityRange> {
    if range.is_unset() {
        MessageField::none()
    } else {
        MessageField::some(range.into())
    }
}

pub(crate) fn topology_to_proto(topology: &Topology) -> pb::Topology {
    let mut out = pb::Topology::new();
    out.segments = to_hash_map(topology);
    out
}

pub(crate) fn topology_from_proto(topology: &pb::Topology) -> Topology {
    from_hash_map(&topology.segments)
}

impl From<&TopologyRequirement> for pb::TopologyRequirement {
    fn from(req: &TopologyRequirement) -> pb::TopologyRequirement {
        let mut out = pb::TopologyRequirement::new();
        out.requisite = req.requisite.iter().map(topology_to_proto).collect();
        out.preferred = req.preferred.iter().map(topology_to_proto).collect();
        out
    }
}

impl From<&pb::TopologyRequirement> for TopologyRequirement {
    fn from(req: &pb::TopologyRequirement) -> TopologyRequirement {
        TopologyRequirement {
            requisite: req.requisite.iter().map(topology_from_proto).collect(),
            preferred: req.preferred.iter().map(topology_from_proto).collect(),
        }
    }
}

impl From<&Volume> for pb::Volume {
    fn from(volume: &Volume) -> pb::Volume {
        let mut out = pb::Volume::new();
        out.volume_id = volume.volume_id.clone();
        out.capacity_bytes = volume.capacity_bytes;
        out.volume_context = to_hash_map(&volume.volume_context);
        out.accessible_topology = volume
            .accessible_topology
            .iter()
            .map(topology_to_proto)
            .collect();
        out
    }
}

impl TryFrom<&pb::Volume> for Volume {
    type Error = ConvertError;

    fn try_from(volume: &pb::Volume) -> Result<Volume, ConvertError> {
        if volume.volume_id.is_empty() {
            return Err(ConvertError::new("volume.volume_id", "is required"));
        }
        let accessible_topology: Vec<Topology> = volume
            .accessible_topology
            .iter()
            .map(topology_from_proto)
            .collect();
        super::topology::check_all(&accessible_topology)
            .map_err(|e| ConvertError::new("volume.accessible_topology", e))?;
        Ok(Volume {
            volume_id: volume.volume_id.clone(),
            capacity_bytes: volume.capacity_bytes,
            volume_context: from_hash_map(&volume.volume_context),
            accessible_topology,
        })
    }
}

impl From<&ContentSource> for pb::VolumeContentSource {
    fn from(source: &ContentSource) -> pb::VolumeContentSource {
        use pb::volume_content_source::{SnapshotSource, Type, VolumeSource};
        let mut out = pb::VolumeContentSource::new();
        out.type_ = Some(match source {
            ContentSource::Snapshot(id) => Type::Snapshot(SnapshotSource {
                snapshot_id: id.clone(),
                ..Default::default()
            }),
            ContentSource::Volume(id) => Type::Volume(VolumeSource {
                volume_id: id.clone(),
                ..Default::default()
            }),
        });
        out
    }
}

impl TryFrom<&pb::VolumeContentSource> for ContentSource {
    type Error = ConvertError;

    fn try_from(source: &pb::VolumeContentSource) -> Result<ContentSource, ConvertError> {
        use pb::volume_content_source::Type;
        match &source.type_ {
            Some(Type::Snapshot(s)) if !s.snapshot_id.is_empty() => {
                Ok(ContentSource::Snapshot(s.snapshot_id.clone()))
            }
            Some(Type::Volume(v)) if !v.volume_id.is_empty() => {
                Ok(ContentSource::Volume(v.volume_id.clone()))
            }
            Some(Type::Snapshot(_)) => Err(ConvertError::new(
                "volume_content_source.snapshot.snapshot_id",
                "is required",
            )),
            Some(Type::Volume(_)) => Err(ConvertError::new(
                "volume_content_source.volume.volume_id",
                "is required",
            )),
            None => Err(ConvertError::new("volume_content_source", "has no source")),
        }
    }
}

impl From<&Snapshot> for pb::Snapshot {
    fn from(snapshot: &Snapshot) -> pb::Snapshot {
        let mut out = pb::Snapshot::new();
        out.snapshot_id = snapshot.snapshot_id.clone();
        out.source_volume_id = snapshot.source_volume_id.clone();
        out.size_bytes = snapshot.size_bytes;
        out.ready_to_use = snapshot.ready_to_use;
        if let Some(time) = snapshot.creation_time {
            let since = time
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let mut ts = protobuf::well_known_types::timestamp::Timestamp::new();
            ts.seconds = since.as_secs() as i64;
            ts.nanos = since.subsec_nanos() as i32;
            out.creation_time = MessageField::some(ts);
        }
        out
    }
}

impl TryFrom<&pb::Snapshot> for Snapshot {
    type Error = ConvertError;

    fn try_from(snapshot: &pb::Snapshot) -> Result<Snapshot, ConvertError> {
        if snapshot.snapshot_id.is_empty() {
            return Err(ConvertError::new("snapshot.snapshot_id", "is required"));
        }
        if snapshot.source_volume_id.is_empty() {
            return Err(ConvertError::new(
                "snapshot.source_volume_id",
                "is required",
            ));
        }
        let creation_time = snapshot.creation_time.as_ref().and_then(|ts| {
            let seconds = u64::try_from(ts.seconds).ok()?;
            let nanos = u32::try_from(ts.nanos).ok()?;
            Some(std::time::UNIX_EPOCH + std::time::Duration::new(seconds, nanos))
        });
        Ok(Snapshot {
            snapshot_id: snapshot.snapshot_id.clone(),
            source_volume_id: snapshot.source_volume_id.clone(),
            size_bytes: snapshot.size_bytes,
            creation_time,
            ready_to_use: snapshot.ready_to_use,
        })
    }
}

impl From<&VolumeCondition> for pb::VolumeCondition {
    fn from(condition: &VolumeCondition) -> pb::VolumeCondition {
        let mut out = pb::VolumeCondition::new();
        out.abnormal = condition.abnormal;
        out.message = condition.message.clone();
        out
    }
}

impl From<&pb::VolumeCondition> for VolumeCondition {
    fn from(condition: &pb::VolumeCondition) -> VolumeCondition {
        VolumeCondition {
            abnormal: condition.abnormal,
            message: condition.message.clone(),
        }
    }
}

impl From<&Usage> for pb::VolumeUsage {
    fn from(usage: &Usage) -> pb::VolumeUsage {
        let mut out = pb::VolumeUsage::new();
        out.available = usage.available;
        out.total = usage.total;
        out.used = usage.used;
        out.unit = EnumOrUnknown::from_i32(match usage.unit {
            UsageUnit::Bytes => 1,
            UsageUnit::Inodes => 2,
        });
        out
    }
}

impl TryFrom<&pb::VolumeUsage> for Usage {
    type Error = ConvertError;

    fn try_from(usage: &pb::VolumeUsage) -> Result<Usage, ConvertError> {
        let unit = match usage.unit.value() {
            1 => UsageUnit::Bytes,
            2 => UsageUnit::Inodes,
            n => return Err(ConvertError::new("usage.unit", format!("unknown unit {n}"))),
        };
        Ok(Usage {
            unit,
            available: usage.available,
            total: usage.total,
            used: usage.used,
        })
    }
}

/// Reads GetPluginCapabilities; capabilities newer than this spec are
/// skipped, as the spec asks of COs.
pub(crate) fn plugin_capabilities_from_proto(
    caps: &[pb::PluginCapability],
) -> CapabilitySet<PluginCapability> {
    let mut out = CapabilitySet::new();
    for cap in caps {
        let number = if cap.has_service() {
            cap.service().type_.value()
        } else if cap.has_volume_expansion() {
            PluginCapability::EXPANSION_OFFSET + cap.volume_expansion().type_.value()
        } else {
            continue;
        };
        match PluginCapability::from_number(number) {
            Some(known) => {
                out.insert(known);
            }
            None => log::debug!("ignoring unknown plugin capability {number}"),
        }
    }
    out
}

pub(crate) fn plugin_capability_to_proto(cap: PluginCapability) -> pb::PluginCapability {
    let mut out = pb::PluginCapability::new();
    let number = cap.number();
    if number > PluginCapability::EXPANSION_OFFSET {
        let mut expansion = pb::plugin_capability::VolumeExpansion::new();
        expansion.type_ = EnumOrUnknown::from_i32(number - PluginCapability::EXPANSION_OFFSET);
        out.set_volume_expansion(expansion);
    } else {
        let mut service = pb::plugin_capability::Service::new();
        service.type_ = EnumOrUnknown::from_i32(number);
        out.set_service(service);
    }
    out
}

pub(crate) fn controller_capabilities_from_proto(
    caps: &[pb::ControllerServiceCapability],
) -> CapabilitySet<ControllerCapability> {
    order::set(
        caps.iter()
            .filter(|c| c.has_rpc())
            .filter_map(|c| ControllerCapability::from_number(c.rpc().type_.value())),
    )
}

pub(crate) fn controller_capability_to_proto(
    cap: ControllerCapability,
) -> pb::ControllerServiceCapability {
    let mut rpc = pb::controller_service_capability::RPC::new();
    rpc.type_ = EnumOrUnknown::from_i32(cap.number());
    let mut out = pb::ControllerServiceCapability::new();
    out.set_rpc(rpc);
    out
}

pub(crate) fn node_capabilities_from_proto(
    caps: &[pb::NodeServiceCapability],
) -> CapabilitySet<NodeCapability> {
    order::set(
        caps.iter()
            .filter(|c| c.has_rpc())
            .filter_map(|c| NodeCapability::from_number(c.rpc().type_.value())),
    )
}

pub(crate) fn node_capability_to_proto(cap: NodeCapability) -> pb::NodeServiceCapability {
    let mut rpc = pb::node_service_capability::RPC::new();
    rpc.type_ = EnumOrUnknown::from_i32(cap.number());
    let mut out = pb::NodeServiceCapability::new();
    out.set_rpc(rpc);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_capabilities() -> Vec<Capability> {
        let mut caps = Vec::new();
        for mode in AccessMode::ALL {
            caps.push(Capability::new(mode, AttachmentMode::BlockDevice));
            caps.push(Capability::new(mode, AttachmentMode::FileSystem));
            caps.push(
                Capability::new(mode, AttachmentMode::FileSystem).with_mount_options(
                    MountOptions {
                        fs_type: "ext4".into(),
                        mount_flags: MountFlags::new(vec!["noatime".into(), "password=x".into()]),
                        volume_mount_group: String::new(),
                    },
                ),
            );
        }
        caps
    }

    #[test]
    fn capabilities_round_trip_through_protobuf() {
        for cap in all_capabilities() {
            let wire = pb::VolumeCapability::from(&cap);
            assert_eq!(Capability::try_from(&wire), Ok(cap.clone()), "{cap}");
        }
    }

    #[test]
    fn protobuf_capabilities_round_trip_through_ours() {
        let mut wire = pb::VolumeCapability::new();
        let mut mount = pb::volume_capability::MountVolume::new();
        mount.fs_type = "xfs".into();
        mount.mount_flags = vec!["discard".into()];
        wire.set_mount(mount);
        wire.access_mode.mut_or_insert_default().mode =
            EnumOrUnknown::new(pb::volume_capability::access_mode::Mode::MULTI_NODE_MULTI_WRITER);
        let ours = Capability::try_from(&wire).unwrap();
        assert_eq!(ours.access_mode, AccessMode::MultiNodeMultiWriter);
        assert_eq!(ours.mount_options.fs_type, "xfs");
        assert_eq!(pb::VolumeCapability::from(&ours), wire);
    }

    #[test]
    fn access_mode_numbers_match_the_generated_enum() {
        use pb::volume_capability::access_mode::Mode;
        let pairs = [
            (AccessMode::SingleNodeWriter, Mode::SINGLE_NODE_WRITER),
            (
                AccessMode::SingleNodeReaderOnly,
                Mode::SINGLE_NODE_READER_ONLY,
            ),
            (
                AccessMode::MultiNodeReaderOnly,
                Mode::MULTI_NODE_READER_ONLY,
            ),
            (
                AccessMode::MultiNodeSingleWriter,
                Mode::MULTI_NODE_SINGLE_WRITER,
            ),
            (
                AccessMode::MultiNodeMultiWriter,
                Mode::MULTI_NODE_MULTI_WRITER,
            ),
            (
                AccessMode::SingleNodeSingleWriter,
                Mode::SINGLE_NODE_SINGLE_WRITER,
            ),
            (
                AccessMode::SingleNodeMultiWriter,
                Mode::SINGLE_NODE_MULTI_WRITER,
            ),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours.number(), theirs as i32, "{ours}");
        }
    }

    #[test]
    fn capability_enum_numbers_match_the_generated_enums() {
        use pb::controller_service_capability::rpc::Type as C;
        use pb::node_service_capability::rpc::Type as N;
        assert_eq!(
            ControllerCapability::PublishUnpublishVolume.number(),
            C::PUBLISH_UNPUBLISH_VOLUME as i32
        );
        assert_eq!(
            ControllerCapability::ModifyVolume.number(),
            C::MODIFY_VOLUME as i32
        );
        assert_eq!(
            ControllerCapability::SingleNodeMultiWriter.number(),
            C::SINGLE_NODE_MULTI_WRITER as i32
        );
        assert_eq!(
            NodeCapability::StageUnstageVolume.number(),
            N::STAGE_UNSTAGE_VOLUME as i32
        );
        assert_eq!(
            NodeCapability::VolumeMountGroup.number(),
            N::VOLUME_MOUNT_GROUP as i32
        );
        for cap in PluginCapability::ALL {
            let wire = plugin_capability_to_proto(*cap);
            let back = plugin_capabilities_from_proto(&[wire]);
            assert_eq!(back.into_iter().collect::<Vec<_>>(), vec![*cap]);
        }
        for cap in ControllerCapability::ALL {
            let back = controller_capabilities_from_proto(&[controller_capability_to_proto(*cap)]);
            assert!(back.contains(cap));
        }
        for cap in NodeCapability::ALL {
            let back = node_capabilities_from_proto(&[node_capability_to_proto(*cap)]);
            assert!(back.contains(cap));
        }
    }

    #[test]
    fn unknown_access_mode_names_the_field() {
        let mut wire = pb::VolumeCapability::new();
        wire.set_block(pb::volume_capability::BlockVolume::new());
        wire.access_mode.mut_or_insert_default().mode = EnumOrUnknown::from_i32(0);
        let err = Capability::try_from(&wire).unwrap_err();
        assert_eq!(err.field, "access_mode.mode");
    }

    #[test]
    fn missing_access_type_names_the_field() {
        let mut wire = pb::VolumeCapability::new();
        wire.access_mode.mut_or_insert_default().mode = EnumOrUnknown::from_i32(1);
        assert_eq!(
            Capability::try_from(&wire).unwrap_err().field,
            "access_type"
        );
        let empty = pb::VolumeCapability::new();
        assert_eq!(
            Capability::try_from(&empty).unwrap_err().field,
            "access_mode"
        );
    }

    #[test]
    fn volumes_topology_and_usage_round_trip() {
        let volume = Volume {
            volume_id: "v1".into(),
            capacity_bytes: 1 << 30,
            volume_context: [("k".to_string(), "v".to_string())].into(),
            accessible_topology: vec![[("zone".to_string(), "a".to_string())].into()],
        };
        assert_eq!(Volume::try_from(&pb::Volume::from(&volume)), Ok(volume));
        assert_eq!(
            Volume::try_from(&pb::Volume::new()).unwrap_err().field,
            "volume.volume_id"
        );

        let req = TopologyRequirement {
            requisite: vec![[("zone".to_string(), "a".to_string())].into()],
            preferred: vec![],
        };
        assert_eq!(
            TopologyRequirement::from(&pb::TopologyRequirement::from(&req)),
            req
        );

        let usage = Usage {
            unit: UsageUnit::Inodes,
            available: 1,
            total: 3,
            used: 2,
        };
        assert_eq!(Usage::try_from(&pb::VolumeUsage::from(&usage)), Ok(usage));
        let range = CapacityRange {
            required_bytes: 5,
            limit_bytes: 10,
        };
        assert_eq!(CapacityRange::from(&pb::CapacityRange::from(range)), range);
        let condition = VolumeCondition {
            abnormal: true,
            message: "gone".into(),
        };
        assert_eq!(
            VolumeCondition::from(&pb::VolumeCondition::from(&condition)),
            condition
        );
    }

    #[test]
    fn snapshots_and_content_sources_round_trip() {
        let snapshot = Snapshot {
            snapshot_id: "snap-1".into(),
            source_volume_id: "vol-1".into(),
            size_bytes: 4096,
            creation_time: Some(std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 5)),
            ready_to_use: true,
        };
        assert_eq!(
            Snapshot::try_from(&pb::Snapshot::from(&snapshot)).unwrap(),
            snapshot
        );
        let mut wire = pb::Snapshot::from(&snapshot);
        wire.source_volume_id.clear();
        assert!(Snapshot::try_from(&wire).is_err());
        for source in [
            ContentSource::Snapshot("snap-1".into()),
            ContentSource::Volume("vol-1".into()),
        ] {
            let wire = pb::VolumeContentSource::from(&source);
            assert_eq!(ContentSource::try_from(&wire).unwrap(), source);
        }
        assert!(ContentSource::try_from(&pb::VolumeContentSource::new()).is_err());
    }
}
