//! The volume registry's records: a volume, its claims and stagings, and
//! how sure the agent is of each step, as kept in the state.
//!
//! There is no separate usage tracker to drift: who uses a staging or the
//! attachment is computed from the claims (see [`Volume::staging_in_use`]
//! and [`Volume::attachment_needed`]), so rebuilding it after a restart is
//! loading the claims.
//!
//! A volume is staged once per node (the CSI spec: "only one
//! staging_target_path per volume"), with the volume's widest capability,
//! and every claim publishes through that staging with its own access mode
//! and `readonly`. The first releases staged once per *usage*, as Nomad
//! does; a record of theirs loads with those stagings as
//! [`StagingKey::Usage`], its published claims keep going through them, and
//! each is unstaged once no publish uses it (see [`Volume::from_proto`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::csi::types::{
    CapacityRange, ContentSource, ControllerPublish, StringMap, Topology, TopologyRequirement,
};
use crate::csi::{AccessMode, AttachmentMode, Capability, MountFlags, MountOptions, Secrets};
use crate::mount::Propagation;
use crate::proto::state as pb;

/// How sure the agent is that a step (attach, stage, publish, bind) took
/// effect. Made durable before the RPC that changes it is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Absent,
    /// The RPC may have been sent: the effect is uncertain until an RPC in
    /// either direction succeeds (both are idempotent).
    Pending,
    Done,
}

/// Where a claim stands with the cluster's claim set
/// (`volumes/<id>/claims` in etcd; see `cluster::claims`). The local
/// record leads: a claim is journalled [`Admission::Admitting`] before etcd
/// is asked, and [`Admission::Freeing`] before etcd is told it is gone, so
/// that after a crash the agent asks again and etcd never keeps a claim
/// that this node has forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Admission {
    /// An agent without a cluster: the claim is this node's alone.
    #[default]
    Local,
    /// Journalled; etcd is being asked. The planner leaves the claim alone
    /// until etcd has answered.
    Admitting,
    /// In the cluster's claim set.
    Admitted,
    /// Released on this node; etcd is being told to forget it. The claim
    /// still counts against others until etcd has.
    Freeing,
}

impl Admission {
    fn to_proto(self) -> pb::ClusterAdmission {
        match self {
            Admission::Local => pb::ClusterAdmission::LOCAL,
            Admission::Admitting => pb::ClusterAdmission::ADMITTING,
            Admission::Admitted => pb::ClusterAdmission::ADMITTED,
            Admission::Freeing => pb::ClusterAdmission::FREEING,
        }
    }

    fn from_proto(p: protobuf::EnumOrUnknown<pb::ClusterAdmission>) -> Admission {
        match p.enum_value() {
            Ok(pb::ClusterAdmission::LOCAL) => Admission::Local,
            Ok(pb::ClusterAdmission::ADMITTED) => Admission::Admitted,
            Ok(pb::ClusterAdmission::FREEING) => Admission::Freeing,
            // Unknown is uncertain: etcd is asked (again), which is
            // idempotent.
            _ => Admission::Admitting,
        }
    }
}

/// Which staging of a volume: its one staging, or one of the per-usage
/// layout of the first releases, kept until no publish uses it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StagingKey {
    /// `staging/<volume>`.
    Volume,
    /// `staging/<volume>/<usage>`.
    Usage(String),
}

impl StagingKey {
    fn to_proto(&self) -> String {
        match self {
            StagingKey::Volume => String::new(),
            StagingKey::Usage(usage) => usage.clone(),
        }
    }

    fn from_proto(usage: &str) -> StagingKey {
        if usage.is_empty() {
            StagingKey::Volume
        } else {
            StagingKey::Usage(usage.to_string())
        }
    }
}

impl std::fmt::Display for StagingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StagingKey::Volume => f.write_str("the volume's staging"),
            StagingKey::Usage(usage) => write!(f, "the staging of usage {usage}"),
        }
    }
}

/// One staging of a volume on this node: NodeStageVolume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staging {
    pub step: Step,
    pub capability: Capability,
}

/// The layout [`Volume::to_proto`] writes: one staging per volume.
const STAGING_LAYOUT: u32 = 1;

/// One alloc's claim on a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub alloc_id: String,
    pub read_only: bool,
    /// False once released: the claim is then a past claim until the
    /// release protocol has run.
    pub wanted: bool,
    /// Nomad's usage name, e.g. `rw-file-system-single-node-writer`.
    pub usage: String,
    pub capability: Capability,
    /// NodePublishVolume.
    pub published: Step,
    /// The host bind mount of `volume claim -target`.
    pub target: Option<PathBuf>,
    pub propagation: Propagation,
    pub target_mounted: Step,
    /// The mount ID of the bind the agent made at `target`, once made.
    pub target_mount_id: Option<u64>,
    /// The target did not exist when the claim was admitted: the agent
    /// makes it, and removes it on release once empty.
    pub target_created: bool,
    /// The staging this claim's publish goes through.
    pub staging: StagingKey,
    /// Why a step of this claim failed for good; the planner leaves the
    /// claim as it is until it is released again.
    pub failure: Option<String>,
    /// Its admission by the cluster, for an agent in one.
    pub admission: Admission,
}

impl Claim {
    /// Whether anything of this claim may be on the node: its publish or
    /// its target bind (done, or maybe done).
    pub fn is_on_node(&self) -> bool {
        self.published != Step::Absent || self.target_mounted != Step::Absent
    }

    /// Everything on the node for this claim is done.
    pub fn is_taken(&self, needs_target: bool) -> bool {
        self.published == Step::Done && (!needs_target || self.target_mounted == Step::Done)
    }
}

/// A CreateVolume sent, or about to be: recorded before it is sent, so
/// that a crash before its answer is recorded sends the same request again
/// (the volume's name makes it idempotent) instead of forgetting a volume
/// the plugin may have made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateIntent {
    pub capacity: CapacityRange,
    pub accessibility: Option<TopologyRequirement>,
    /// What the volume is made from (a snapshot, or a clone of a volume).
    pub content_source: Option<ContentSource>,
}

/// A registered volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    pub id: String,
    pub name: String,
    pub plugin_id: String,
    /// The plugin's ID for the volume.
    pub external_id: String,
    pub capabilities: Vec<Capability>,
    pub mount_options: MountOptions,
    pub secrets: Secrets,
    pub parameters: StringMap,
    pub context: StringMap,
    pub capacity_bytes: i64,
    /// Created by the agent: `volume delete` may delete it.
    pub created: bool,
    /// ControllerPublishVolume to this node.
    pub attachment: Step,
    pub publish_context: StringMap,
    /// One ([`StagingKey::Volume`]), or more while stagings of the
    /// per-usage layout are still in use.
    pub stagings: BTreeMap<StagingKey, Staging>,
    /// By alloc ID.
    pub claims: BTreeMap<String, Claim>,
    /// Being created: CreateVolume has not answered yet. No claim is
    /// admitted until it has.
    pub creating: Option<CreateIntent>,
    /// In a cluster: the ID of the etcd cluster that has held its record,
    /// 0 if none (see `in_cluster` in state.proto).
    pub in_cluster: u64,
    /// What a volume made through the volume plugin keeps of its Create's
    /// options; the default for every other volume.
    pub plugin_settings: PluginSettings,
    /// The topologies the volume is accessible from (see
    /// [`crate::csi::topology`]); none: usable on every node.
    pub topologies: Vec<Topology>,
}

/// What `docker volume create -o` sets beyond the volume spec's fields,
/// kept with the volume (and shared with it in a cluster).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginSettings {
    /// `read_only=true`: every Mount through the volume plugin is a reader
    /// claim, published read-only (Docker never tells a driver a `:ro`).
    pub read_only: bool,
    /// `mount_group=GID`: sent as `volume_mount_group` in NodeStage and
    /// NodePublish when the node has VOLUME_MOUNT_GROUP; empty for none.
    pub mount_group: String,
}

impl Volume {
    /// Whether staging `key` is still needed: a wanted claim, or a past
    /// claim still published, goes through it.
    pub fn staging_in_use(&self, key: &StagingKey) -> bool {
        self.claims
            .values()
            .any(|c| c.staging == *key && (c.wanted || c.published != Step::Absent))
    }

    /// The capability the volume is staged (and attached) with: the first
    /// one a writer could use, read-only only when the volume admits no
    /// writer at all, so that a writer after a reader never meets a
    /// read-only staging or attachment.
    pub fn node_capability(&self) -> Option<&Capability> {
        self.capability_for(false)
            .or_else(|| self.capabilities.first())
    }

    /// The staging a new claim publishes through, so that the volume keeps
    /// one staging path on the node: a staging of the per-usage layout
    /// that is still there and can serve the claim (a reader goes through
    /// any, a writer through a writable one), else the volume's one
    /// staging. `Err` names a staging of the old layout that is in the way:
    /// the volume's own staging directory holds it, so staging there would
    /// cover it.
    pub fn staging_for_new_claim(&self, read_only: bool) -> Result<StagingKey, &StagingKey> {
        let live = || {
            self.stagings
                .iter()
                .filter(|(key, s)| matches!(key, StagingKey::Usage(_)) && s.step != Step::Absent)
        };
        if let Some((key, _)) =
            live().find(|(_, s)| read_only || !s.capability.access_mode.is_read_only())
        {
            return Ok(key.clone());
        }
        match live().next() {
            Some((key, _)) => Err(key),
            None => Ok(StagingKey::Volume),
        }
    }

    /// Whether a staging of the per-usage layout is still there.
    pub fn has_old_staging(&self) -> bool {
        self.stagings
            .iter()
            .any(|(key, s)| matches!(key, StagingKey::Usage(_)) && s.step != Step::Absent)
    }

    /// Whether the attachment is still needed by anything on the node.
    pub fn attachment_needed(&self) -> bool {
        self.claims
            .values()
            .any(|c| c.wanted || c.published != Step::Absent)
            || self.stagings.values().any(|s| s.step != Step::Absent)
    }

    pub fn wanted_claims(&self) -> impl Iterator<Item = &Claim> {
        self.claims.values().filter(|c| c.wanted)
    }

    /// The capability a new claim uses: the first one a writer may write
    /// with, or for a reader the first one.
    pub fn capability_for(&self, read_only: bool) -> Option<&Capability> {
        if read_only {
            self.capabilities.first()
        } else {
            self.capabilities
                .iter()
                .find(|c| !c.access_mode.is_read_only())
        }
    }

    /// ControllerPublishVolume of this volume to the node the plugin knows
    /// as `node_id`: one attachment serves every claim on the node, so it
    /// carries the volume's widest capability ([`Volume::node_capability`]).
    /// `None` for a volume without capabilities.
    pub fn controller_publish(&self, node_id: &str) -> Option<ControllerPublish> {
        let capability = self.node_capability()?;
        Some(ControllerPublish {
            volume_id: self.external_id.clone(),
            node_id: node_id.to_string(),
            read_only: capability.access_mode.is_read_only(),
            capability: self.with_mount_options(capability),
            secrets: self.secrets.clone(),
            volume_context: self.context.clone(),
        })
    }

    /// The capability with the volume's mount options, as RPCs carry it.
    pub fn with_mount_options(&self, capability: &Capability) -> Capability {
        match capability.attachment_mode {
            AttachmentMode::FileSystem => capability
                .clone()
                .with_mount_options(self.mount_options.clone()),
            AttachmentMode::BlockDevice => capability.clone(),
        }
    }

    /// The capability NodeStage and NodePublish carry: the volume's mount
    /// options, and its mount group when the node has VOLUME_MOUNT_GROUP
    /// (`mount_group`); no other RPC carries the group.
    pub fn node_rpc_capability(&self, capability: &Capability, mount_group: bool) -> Capability {
        let mut out = self.with_mount_options(capability);
        if mount_group && out.attachment_mode == AttachmentMode::FileSystem {
            out.mount_options.volume_mount_group = self.plugin_settings.mount_group.clone();
        }
        out
    }
}

// ---- state conversions ----

fn step_to_proto(step: Step) -> pb::Step {
    match step {
        Step::Absent => pb::Step::ABSENT,
        Step::Pending => pb::Step::PENDING,
        Step::Done => pb::Step::DONE,
    }
}

fn step_from_proto(step: protobuf::EnumOrUnknown<pb::Step>) -> Step {
    match step.enum_value() {
        Ok(pb::Step::DONE) => Step::Done,
        Ok(pb::Step::ABSENT) => Step::Absent,
        // Unknown is treated as uncertain: the planner re-sends the RPC.
        _ => Step::Pending,
    }
}

fn segments(t: &Topology) -> pb::TopologySegments {
    pb::TopologySegments {
        segments: t.clone().into_iter().collect(),
        ..Default::default()
    }
}

fn intent_to_proto(intent: &CreateIntent) -> pb::CreateIntent {
    pb::CreateIntent {
        required_bytes: intent.capacity.required_bytes,
        limit_bytes: intent.capacity.limit_bytes,
        accessibility: intent
            .accessibility
            .as_ref()
            .map(|a| pb::TopologyRequirement {
                requisite: a.requisite.iter().map(segments).collect(),
                preferred: a.preferred.iter().map(segments).collect(),
                ..Default::default()
            })
            .into(),
        snapshot_id: match &intent.content_source {
            Some(ContentSource::Snapshot(id)) => id.clone(),
            _ => String::new(),
        },
        clone_of: match &intent.content_source {
            Some(ContentSource::Volume(id)) => id.clone(),
            _ => String::new(),
        },
        ..Default::default()
    }
}

fn intent_from_proto(p: &pb::CreateIntent) -> CreateIntent {
    let segments = |t: &pb::TopologySegments| t.segments.clone().into_iter().collect();
    CreateIntent {
        capacity: CapacityRange {
            required_bytes: p.required_bytes,
            limit_bytes: p.limit_bytes,
        },
        accessibility: p.accessibility.as_ref().map(|a| TopologyRequirement {
            requisite: a.requisite.iter().map(segments).collect(),
            preferred: a.preferred.iter().map(segments).collect(),
        }),
        content_source: if !p.snapshot_id.is_empty() {
            Some(ContentSource::Snapshot(p.snapshot_id.clone()))
        } else if !p.clone_of.is_empty() {
            Some(ContentSource::Volume(p.clone_of.clone()))
        } else {
            None
        },
    }
}

fn capability_to_proto(c: &Capability) -> pb::Capability {
    pb::Capability {
        access_mode: c.access_mode.number(),
        attachment_mode: match c.attachment_mode {
            AttachmentMode::BlockDevice => 1,
            AttachmentMode::FileSystem => 2,
        },
        ..Default::default()
    }
}

fn capability_from_proto(c: &pb::Capability) -> Result<Capability, String> {
    let access_mode = AccessMode::from_number(c.access_mode)
        .ok_or_else(|| format!("unknown access mode {}", c.access_mode))?;
    let attachment_mode = match c.attachment_mode {
        1 => AttachmentMode::BlockDevice,
        2 => AttachmentMode::FileSystem,
        n => return Err(format!("unknown attachment mode {n}")),
    };
    Ok(Capability::new(access_mode, attachment_mode))
}

impl Volume {
    pub fn to_proto(&self) -> pb::Volume {
        pb::Volume {
            id: self.id.clone(),
            name: self.name.clone(),
            plugin_id: self.plugin_id.clone(),
            external_id: self.external_id.clone(),
            capabilities: self.capabilities.iter().map(capability_to_proto).collect(),
            fs_type: self.mount_options.fs_type.clone(),
            mount_flags: self.mount_options.mount_flags.expose().to_vec(),
            secrets: self
                .secrets
                .expose()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            parameters: self.parameters.clone().into_iter().collect(),
            context: self.context.clone().into_iter().collect(),
            capacity_bytes: self.capacity_bytes,
            created: self.created,
            attachment: step_to_proto(self.attachment).into(),
            publish_context: self.publish_context.clone().into_iter().collect(),
            stagings: self
                .stagings
                .iter()
                .map(|(key, s)| pb::Staging {
                    usage: key.to_proto(),
                    step: step_to_proto(s.step).into(),
                    capability: Some(capability_to_proto(&s.capability)).into(),
                    read_only: s.capability.access_mode.is_read_only(),
                    ..Default::default()
                })
                .collect(),
            claims: self
                .claims
                .values()
                .map(|c| pb::VolumeClaim {
                    alloc_id: c.alloc_id.clone(),
                    read_only: c.read_only,
                    wanted: c.wanted,
                    usage: c.usage.clone(),
                    capability: Some(capability_to_proto(&c.capability)).into(),
                    published: step_to_proto(c.published).into(),
                    target: c
                        .target
                        .as_ref()
                        .map(|t| t.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    propagation: c.propagation.as_str().to_string(),
                    target_mounted: step_to_proto(c.target_mounted).into(),
                    staging: c.staging.to_proto(),
                    target_mount_id: c.target_mount_id.unwrap_or(0),
                    target_created: c.target_created,
                    failure: c.failure.clone().unwrap_or_default(),
                    cluster: c.admission.to_proto().into(),
                    ..Default::default()
                })
                .collect(),
            staging_layout: STAGING_LAYOUT,
            create_intent: self.creating.as_ref().map(intent_to_proto).into(),
            in_cluster: self.in_cluster,
            mounts_read_only: self.plugin_settings.read_only,
            mount_group: self.plugin_settings.mount_group.clone(),
            topologies: self.topologies.iter().map(segments).collect(),
            ..Default::default()
        }
    }

    /// Loads a record, migrating one of the per-usage staging layout: its
    /// stagings become [`StagingKey::Usage`], a claim published (or maybe
    /// published) through one of them keeps going through it, and a claim
    /// not published yet will use the volume's one staging.
    pub fn from_proto(p: &pb::Volume) -> Result<Volume, String> {
        let what = |e: String| format!("volume {:?}: {e}", p.id);
        let capabilities = p
            .capabilities
            .iter()
            .map(capability_from_proto)
            .collect::<Result<Vec<_>, _>>()
            .map_err(what)?;
        let mut secrets = Secrets::new();
        for (k, v) in &p.secrets {
            secrets.insert(k.clone(), v.clone());
        }
        let per_usage = p.staging_layout < STAGING_LAYOUT;
        let mut stagings = BTreeMap::new();
        for s in &p.stagings {
            let capability = capability_from_proto(s.capability.get_or_default()).map_err(what)?;
            let key = if per_usage {
                StagingKey::Usage(s.usage.clone())
            } else {
                StagingKey::from_proto(&s.usage)
            };
            stagings.insert(
                key,
                Staging {
                    step: step_from_proto(s.step),
                    capability,
                },
            );
        }
        let mut claims = BTreeMap::new();
        for c in &p.claims {
            let capability = capability_from_proto(c.capability.get_or_default()).map_err(what)?;
            let propagation = if c.propagation.is_empty() {
                Propagation::Private
            } else {
                c.propagation
                    .parse()
                    .map_err(|e: crate::mount::Error| what(e.to_string()))?
            };
            let published = step_from_proto(c.published);
            let staging = if !per_usage {
                StagingKey::from_proto(&c.staging)
            } else {
                // A claim not published yet is given its staging below,
                // as a new claim would be.
                StagingKey::Usage(c.usage.clone())
            };
            claims.insert(
                c.alloc_id.clone(),
                Claim {
                    alloc_id: c.alloc_id.clone(),
                    read_only: c.read_only,
                    wanted: c.wanted,
                    usage: c.usage.clone(),
                    capability,
                    published,
                    target: (!c.target.is_empty()).then(|| PathBuf::from(&c.target)),
                    propagation,
                    target_mounted: step_from_proto(c.target_mounted),
                    target_mount_id: (c.target_mount_id != 0).then_some(c.target_mount_id),
                    target_created: c.target_created,
                    staging,
                    failure: (!c.failure.is_empty()).then(|| c.failure.clone()),
                    admission: Admission::from_proto(c.cluster),
                },
            );
        }
        // Another host's record, in a cluster: bounded as a plugin's
        // answer is.
        let topologies: Vec<Topology> = p
            .topologies
            .iter()
            .map(|t| t.segments.clone().into_iter().collect())
            .collect();
        crate::csi::topology::check_all(&topologies).map_err(what)?;
        let mut volume = Volume {
            id: p.id.clone(),
            name: p.name.clone(),
            plugin_id: p.plugin_id.clone(),
            external_id: p.external_id.clone(),
            capabilities,
            mount_options: MountOptions {
                fs_type: p.fs_type.clone(),
                mount_flags: MountFlags::new(p.mount_flags.clone()),
                volume_mount_group: String::new(),
            },
            secrets,
            parameters: p.parameters.clone().into_iter().collect(),
            context: p.context.clone().into_iter().collect(),
            capacity_bytes: p.capacity_bytes,
            created: p.created,
            attachment: step_from_proto(p.attachment),
            publish_context: p.publish_context.clone().into_iter().collect(),
            stagings,
            claims,
            creating: p.create_intent.as_ref().map(intent_from_proto),
            in_cluster: p.in_cluster,
            plugin_settings: PluginSettings {
                read_only: p.mounts_read_only,
                mount_group: p.mount_group.clone(),
            },
            topologies,
        };
        if per_usage {
            let allocs: Vec<String> = volume
                .claims
                .values()
                .filter(|c| {
                    c.published == Step::Absent || !volume.stagings.contains_key(&c.staging)
                })
                .map(|c| c.alloc_id.clone())
                .collect();
            for alloc in allocs {
                let read_only = volume.claims[&alloc].read_only;
                // In the way of the volume's staging: the planner waits
                // until the old staging is gone.
                let staging = volume
                    .staging_for_new_claim(read_only)
                    .unwrap_or(StagingKey::Volume);
                volume.claims.get_mut(&alloc).expect("listed").staging = staging;
            }
        }
        Ok(volume)
    }
}

/// Volume `v` of plugin `p` with one capability and nothing done: the
/// volume the unit tests of the model, planner and protocol start from.
#[cfg(test)]
pub(crate) fn test_volume(capability: Capability) -> Volume {
    Volume {
        id: "v".into(),
        name: "v".into(),
        plugin_id: "p".into(),
        external_id: "x".into(),
        capabilities: vec![capability],
        mount_options: MountOptions::default(),
        secrets: Secrets::new(),
        parameters: BTreeMap::new(),
        context: BTreeMap::new(),
        capacity_bytes: 0,
        created: false,
        attachment: Step::Absent,
        publish_context: BTreeMap::new(),
        stagings: BTreeMap::new(),
        claims: BTreeMap::new(),
        creating: None,
        in_cluster: 0,
        plugin_settings: PluginSettings::default(),
        topologies: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::Message;

    fn volume(creating: Option<CreateIntent>) -> Volume {
        Volume {
            creating,
            ..test_volume(Capability::new(
                AccessMode::SingleNodeWriter,
                AttachmentMode::FileSystem,
            ))
        }
    }

    #[test]
    fn a_volume_being_created_keeps_its_request_through_the_state() {
        let node: crate::csi::types::Topology = [("zone".to_string(), "a".to_string())].into();
        for intent in [
            CreateIntent {
                capacity: CapacityRange {
                    required_bytes: 1 << 20,
                    limit_bytes: 1 << 30,
                },
                accessibility: Some(TopologyRequirement {
                    requisite: vec![node.clone()],
                    preferred: vec![node],
                }),
                content_source: Some(ContentSource::Snapshot("snap-1".into())),
            },
            CreateIntent {
                capacity: CapacityRange::default(),
                accessibility: None,
                content_source: Some(ContentSource::Volume("vol-1".into())),
            },
            CreateIntent {
                capacity: CapacityRange::default(),
                accessibility: None,
                content_source: None,
            },
        ] {
            let v = volume(Some(intent));
            let bytes = v.to_proto().write_to_bytes().unwrap();
            let back = Volume::from_proto(&pb::Volume::parse_from_bytes(&bytes).unwrap());
            assert_eq!(back.unwrap(), v);
        }
    }

    #[test]
    fn topologies_survive_the_state_and_another_host_s_are_bounded() {
        let v = Volume {
            topologies: vec![
                [("zone".to_string(), "a".to_string())].into(),
                [("zone".to_string(), "b".to_string())].into(),
            ],
            ..volume(None)
        };
        let bytes = v.to_proto().write_to_bytes().unwrap();
        let back = Volume::from_proto(&pb::Volume::parse_from_bytes(&bytes).unwrap()).unwrap();
        assert_eq!(back, v);
        // A record of an earlier release has none: usable everywhere.
        let mut old = v.to_proto();
        old.topologies.clear();
        assert!(Volume::from_proto(&old).unwrap().topologies.is_empty());
        // A record (another host's, through etcd) past the bounds.
        let mut wide = v.to_proto();
        wide.topologies[0]
            .segments
            .insert("k".into(), "v".repeat(crate::csi::topology::MAX_PART + 1));
        let err = Volume::from_proto(&wide).unwrap_err();
        assert!(
            err.starts_with("volume \"v\": a topology segment's value"),
            "{err}"
        );
    }

    #[test]
    fn plugin_settings_survive_the_state_and_only_node_rpcs_carry_the_group() {
        let v = Volume {
            plugin_settings: PluginSettings {
                read_only: true,
                mount_group: "1000".into(),
            },
            ..volume(None)
        };
        let bytes = v.to_proto().write_to_bytes().unwrap();
        let back = Volume::from_proto(&pb::Volume::parse_from_bytes(&bytes).unwrap()).unwrap();
        assert_eq!(back, v);
        // A record of an earlier release has neither field: the defaults.
        let mut old = v.to_proto();
        old.mounts_read_only = false;
        old.mount_group.clear();
        let earlier = Volume::from_proto(&old).unwrap();
        assert_eq!(earlier.plugin_settings, PluginSettings::default());
        let capability = &v.capabilities[0];
        let staged = v.node_rpc_capability(capability, true);
        assert_eq!(staged.mount_options.volume_mount_group, "1000");
        // A node without VOLUME_MOUNT_GROUP is not sent it, nor is any
        // controller RPC.
        let without = v.node_rpc_capability(capability, false);
        assert_eq!(without.mount_options.volume_mount_group, "");
        let attach = v.controller_publish("n").unwrap();
        assert_eq!(attach.capability.mount_options.volume_mount_group, "");
        // A block device has no mount to own.
        let block = Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::BlockDevice);
        let block = v.node_rpc_capability(&block, true);
        assert!(block.mount_options.is_empty());
    }

    #[test]
    fn a_record_written_before_create_intents_loads_as_not_being_created() {
        // A record as the previous release wrote it: no field 17.
        let mut old = volume(None).to_proto();
        old.create_intent = protobuf::MessageField::none();
        old.created = true;
        let bytes = old.write_to_bytes().unwrap();
        let v = Volume::from_proto(&pb::Volume::parse_from_bytes(&bytes).unwrap()).unwrap();
        assert_eq!(v.creating, None);
        assert!(v.created);
    }
}
