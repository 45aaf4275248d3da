//! Strict mode's checker: the CO's side of the CSI spec, as the plugin sees
//! it.
//!
//! A conforming CO never sends some requests: a second staging path for a
//! volume, a publish before the stage, a stage without the publish context
//! ControllerPublishVolume answered, an unstage while published, a detach
//! while staged, two calls at once for one volume, an RPC of a capability
//! the plugin did not advertise, or secrets on an RPC that takes none. With
//! `-strict` the hostpath plugin refuses each of them, so a test of the
//! agent ends with the plugin's verdict on the agent.
//!
//! [`Strict`] is pure: it is told each call's facts ([`Call`]) before the
//! plugin serves it ([`Strict::admit`]) and each success after
//! ([`Strict::completed`]), and keeps its own model of what the CO has done
//! to each volume on this node. [`super::in_flight`] tracks the volumes
//! that have a call in flight, with a guard per call. Writing the verdict file and
//! answering gRPC is the plugin's business.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use crate::csi::types::{CapabilitySet, ControllerCapability, NodeCapability, StringMap};
use crate::spec::PluginType;

/// A rule of the CSI spec that binds the CO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// NodeStageVolumeRequest.staging_target_path: "The CO SHALL ensure
    /// that there is only one staging_target_path per volume."
    OneStagingPath,
    /// With STAGE_UNSTAGE_VOLUME, NodePublishVolume follows
    /// NodeStageVolume and names the staging_target_path.
    StageBeforePublish,
    /// publish_context: the CO passes what ControllerPublishVolume answered
    /// to NodeStageVolume and NodePublishVolume.
    PublishContext,
    /// NodeUnstageVolume only after every NodeUnpublishVolume of the
    /// staging.
    UnpublishBeforeUnstage,
    /// ControllerUnpublishVolume only after NodeUnstageVolume (and every
    /// NodeUnpublishVolume) on that node.
    UnstageBeforeDetach,
    /// Concurrency: at most one call in flight per volume.
    OneCallPerVolume,
    /// A CO calls an RPC only if the plugin advertised its capability.
    AdvertisedCapability,
    /// Secrets go only to the RPCs whose request has a secrets field.
    SecretsOnlyWhereTaken,
}

impl Rule {
    pub const ALL: [Rule; 8] = [
        Rule::OneStagingPath,
        Rule::StageBeforePublish,
        Rule::PublishContext,
        Rule::UnpublishBeforeUnstage,
        Rule::UnstageBeforeDetach,
        Rule::OneCallPerVolume,
        Rule::AdvertisedCapability,
        Rule::SecretsOnlyWhereTaken,
    ];

    /// The rule as one line of the verdict file names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::OneStagingPath => "only one staging_target_path per volume",
            Rule::StageBeforePublish => {
                "NodePublishVolume only after NodeStageVolume at its staging_target_path"
            }
            Rule::PublishContext => {
                "NodeStageVolume and NodePublishVolume pass ControllerPublishVolume's publish_context"
            }
            Rule::UnpublishBeforeUnstage => {
                "NodeUnstageVolume only after every NodeUnpublishVolume of the staging"
            }
            Rule::UnstageBeforeDetach => {
                "ControllerUnpublishVolume only after NodeUnstageVolume on that node"
            }
            Rule::OneCallPerVolume => "at most one call in flight per volume",
            Rule::AdvertisedCapability => "only RPCs of capabilities the plugin advertised",
            Rule::SecretsOnlyWhereTaken => "secrets only on RPCs that take them",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request a conforming CO would not have sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub rpc: &'static str,
    /// The volume the call is about, if any.
    pub volume: Option<String>,
    pub rule: Rule,
    /// What this call did, e.g. "volume v1 is staged at /a, not /b".
    pub detail: String,
}

impl Violation {
    /// The verdict file's line: `<RPC> <volume>: <rule>`, with `-` for an
    /// RPC without a volume.
    pub fn verdict_line(&self) -> String {
        format!(
            "{} {}: {}",
            self.rpc,
            self.volume.as_deref().unwrap_or("-"),
            self.rule
        )
    }
}

impl fmt::Display for Violation {
    /// The gRPC status message: `strict: <rule>: <detail>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "strict: {}: {}", self.rule, self.detail)
    }
}

/// Where CreateVolume is asked to copy a new volume from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentSource {
    Snapshot,
    Volume,
}

/// The facts of one request that the rules look at: one variant per CSI
/// RPC, with the volume it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    GetPluginInfo,
    GetPluginCapabilities,
    Probe,
    CreateVolume {
        name: String,
        content_source: Option<ContentSource>,
    },
    DeleteVolume {
        volume: String,
    },
    ControllerPublishVolume {
        volume: String,
        node: String,
        read_only: bool,
        /// What the plugin answers when it succeeds.
        answer: StringMap,
    },
    ControllerUnpublishVolume {
        volume: String,
        /// Empty: every node.
        node: String,
    },
    ValidateVolumeCapabilities {
        volume: String,
    },
    ListVolumes,
    GetCapacity,
    ControllerGetCapabilities,
    CreateSnapshot {
        /// The volume it copies, whose calls it must not overlap.
        source_volume: String,
    },
    DeleteSnapshot,
    ListSnapshots,
    GetSnapshot,
    ControllerExpandVolume {
        volume: String,
    },
    ControllerGetVolume {
        volume: String,
    },
    ControllerModifyVolume {
        volume: String,
    },
    NodeStageVolume {
        volume: String,
        staging: PathBuf,
        publish_context: StringMap,
    },
    NodeUnstageVolume {
        volume: String,
        staging: PathBuf,
    },
    NodePublishVolume {
        volume: String,
        /// Empty when the request has none.
        staging: PathBuf,
        target: PathBuf,
        publish_context: StringMap,
    },
    NodeUnpublishVolume {
        volume: String,
        target: PathBuf,
    },
    NodeGetVolumeStats {
        volume: String,
    },
    NodeExpandVolume {
        volume: String,
    },
    NodeGetCapabilities,
    NodeGetInfo,
}

/// The CSI service an RPC belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Identity,
    Controller,
    Node,
}

/// A capability an RPC needs the plugin to have advertised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needed {
    Controller(ControllerCapability),
    Node(NodeCapability),
}

impl fmt::Display for Needed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Needed::Controller(c) => write!(f, "controller capability {c}"),
            Needed::Node(c) => write!(f, "node capability {c}"),
        }
    }
}

impl Call {
    /// The RPC's name, as the spec and the call trace spell it.
    pub fn rpc(&self) -> &'static str {
        match self {
            Call::GetPluginInfo => "GetPluginInfo",
            Call::GetPluginCapabilities => "GetPluginCapabilities",
            Call::Probe => "Probe",
            Call::CreateVolume { .. } => "CreateVolume",
            Call::DeleteVolume { .. } => "DeleteVolume",
            Call::ControllerPublishVolume { .. } => "ControllerPublishVolume",
            Call::ControllerUnpublishVolume { .. } => "ControllerUnpublishVolume",
            Call::ValidateVolumeCapabilities { .. } => "ValidateVolumeCapabilities",
            Call::ListVolumes => "ListVolumes",
            Call::GetCapacity => "GetCapacity",
            Call::ControllerGetCapabilities => "ControllerGetCapabilities",
            Call::CreateSnapshot { .. } => "CreateSnapshot",
            Call::DeleteSnapshot => "DeleteSnapshot",
            Call::ListSnapshots => "ListSnapshots",
            Call::GetSnapshot => "GetSnapshot",
            Call::ControllerExpandVolume { .. } => "ControllerExpandVolume",
            Call::ControllerGetVolume { .. } => "ControllerGetVolume",
            Call::ControllerModifyVolume { .. } => "ControllerModifyVolume",
            Call::NodeStageVolume { .. } => "NodeStageVolume",
            Call::NodeUnstageVolume { .. } => "NodeUnstageVolume",
            Call::NodePublishVolume { .. } => "NodePublishVolume",
            Call::NodeUnpublishVolume { .. } => "NodeUnpublishVolume",
            Call::NodeGetVolumeStats { .. } => "NodeGetVolumeStats",
            Call::NodeExpandVolume { .. } => "NodeExpandVolume",
            Call::NodeGetCapabilities => "NodeGetCapabilities",
            Call::NodeGetInfo => "NodeGetInfo",
        }
    }

    /// The service whose RPC it is.
    pub fn service(&self) -> Service {
        match self {
            Call::GetPluginInfo | Call::GetPluginCapabilities | Call::Probe => Service::Identity,
            Call::NodeStageVolume { .. }
            | Call::NodeUnstageVolume { .. }
            | Call::NodePublishVolume { .. }
            | Call::NodeUnpublishVolume { .. }
            | Call::NodeGetVolumeStats { .. }
            | Call::NodeExpandVolume { .. }
            | Call::NodeGetCapabilities
            | Call::NodeGetInfo => Service::Node,
            _ => Service::Controller,
        }
    }

    /// The volume the call is about (CreateVolume's is its name,
    /// CreateSnapshot's its source); empty IDs count as none.
    pub fn volume(&self) -> Option<&str> {
        let volume = match self {
            Call::CreateVolume { name, .. } => name,
            Call::CreateSnapshot { source_volume } => source_volume,
            Call::DeleteVolume { volume }
            | Call::ControllerPublishVolume { volume, .. }
            | Call::ControllerUnpublishVolume { volume, .. }
            | Call::ValidateVolumeCapabilities { volume }
            | Call::ControllerExpandVolume { volume }
            | Call::ControllerGetVolume { volume }
            | Call::ControllerModifyVolume { volume }
            | Call::NodeStageVolume { volume, .. }
            | Call::NodeUnstageVolume { volume, .. }
            | Call::NodePublishVolume { volume, .. }
            | Call::NodeUnpublishVolume { volume, .. }
            | Call::NodeGetVolumeStats { volume }
            | Call::NodeExpandVolume { volume } => volume,
            _ => return None,
        };
        (!volume.is_empty()).then_some(volume.as_str())
    }

    /// Whether the request message has a `secrets` field (CSI v1.12).
    pub fn takes_secrets(&self) -> bool {
        matches!(
            self,
            Call::CreateVolume { .. }
                | Call::DeleteVolume { .. }
                | Call::ControllerPublishVolume { .. }
                | Call::ControllerUnpublishVolume { .. }
                | Call::ValidateVolumeCapabilities { .. }
                | Call::ControllerModifyVolume { .. }
                | Call::CreateSnapshot { .. }
                | Call::DeleteSnapshot
                | Call::ListSnapshots
                | Call::GetSnapshot
                | Call::ControllerExpandVolume { .. }
                | Call::NodeStageVolume { .. }
                | Call::NodePublishVolume { .. }
                | Call::NodeExpandVolume { .. }
        )
    }

    /// The capabilities the plugin must have advertised for a CO to make
    /// this call.
    pub fn needs(&self) -> Vec<Needed> {
        use ControllerCapability as C;
        use NodeCapability as N;
        match self {
            Call::CreateVolume { content_source, .. } => {
                let mut needs = vec![Needed::Controller(C::CreateDeleteVolume)];
                match content_source {
                    Some(ContentSource::Snapshot) => {
                        needs.push(Needed::Controller(C::CreateDeleteSnapshot))
                    }
                    Some(ContentSource::Volume) => needs.push(Needed::Controller(C::CloneVolume)),
                    None => {}
                }
                needs
            }
            Call::DeleteVolume { .. } => vec![Needed::Controller(C::CreateDeleteVolume)],
            Call::ControllerPublishVolume { read_only, .. } => {
                let mut needs = vec![Needed::Controller(C::PublishUnpublishVolume)];
                if *read_only {
                    needs.push(Needed::Controller(C::PublishReadonly));
                }
                needs
            }
            Call::ControllerUnpublishVolume { .. } => {
                vec![Needed::Controller(C::PublishUnpublishVolume)]
            }
            Call::ListVolumes => vec![Needed::Controller(C::ListVolumes)],
            Call::GetCapacity => vec![Needed::Controller(C::GetCapacity)],
            Call::CreateSnapshot { .. } | Call::DeleteSnapshot => {
                vec![Needed::Controller(C::CreateDeleteSnapshot)]
            }
            Call::ListSnapshots => vec![Needed::Controller(C::ListSnapshots)],
            Call::GetSnapshot => vec![Needed::Controller(C::GetSnapshot)],
            Call::ControllerExpandVolume { .. } => vec![Needed::Controller(C::ExpandVolume)],
            Call::ControllerGetVolume { .. } => vec![Needed::Controller(C::GetVolume)],
            Call::ControllerModifyVolume { .. } => vec![Needed::Controller(C::ModifyVolume)],
            Call::NodeStageVolume { .. } | Call::NodeUnstageVolume { .. } => {
                vec![Needed::Node(N::StageUnstageVolume)]
            }
            Call::NodeGetVolumeStats { .. } => vec![Needed::Node(N::GetVolumeStats)],
            Call::NodeExpandVolume { .. } => vec![Needed::Node(N::ExpandVolume)],
            Call::GetPluginInfo
            | Call::GetPluginCapabilities
            | Call::Probe
            | Call::ValidateVolumeCapabilities { .. }
            | Call::ControllerGetCapabilities
            | Call::NodePublishVolume { .. }
            | Call::NodeUnpublishVolume { .. }
            | Call::NodeGetCapabilities
            | Call::NodeGetInfo => Vec::new(),
        }
    }
}

/// The capabilities the plugin advertises.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advertised {
    pub controller: CapabilitySet<ControllerCapability>,
    pub node: CapabilitySet<NodeCapability>,
}

impl Advertised {
    fn has(&self, needed: Needed) -> bool {
        match needed {
            Needed::Controller(c) => self.controller.contains(&c),
            Needed::Node(c) => self.node.contains(&c),
        }
    }
}

/// What the CO has done to one volume, as far as this node's plugin saw it
/// succeed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct VolumeProtocol {
    /// Node → the publish context ControllerPublishVolume answered.
    attachments: BTreeMap<String, StringMap>,
    staged: BTreeSet<PathBuf>,
    published: BTreeSet<PathBuf>,
}

impl VolumeProtocol {
    fn is_empty(&self) -> bool {
        self.attachments.is_empty() && self.staged.is_empty() && self.published.is_empty()
    }
}

/// The checker: the plugin's capabilities, its node, the services this
/// process serves, and the model of what the CO did.
#[derive(Clone, Debug)]
pub struct Strict {
    advertised: Advertised,
    node_id: String,
    /// A split plugin's process serves one service (`-mode controller` or
    /// `-mode node`); the capabilities stay the whole plugin's.
    serves: PluginType,
    volumes: BTreeMap<String, VolumeProtocol>,
}

impl Strict {
    pub fn new(advertised: Advertised, node_id: impl Into<String>) -> Strict {
        Strict {
            advertised,
            node_id: node_id.into(),
            serves: PluginType::Monolith,
            volumes: BTreeMap::new(),
        }
    }

    /// The checker of a process that serves `serves` only.
    pub fn serving(self, serves: PluginType) -> Strict {
        Strict { serves, ..self }
    }

    fn serves(&self, service: Service) -> bool {
        match service {
            Service::Identity => true,
            Service::Controller => self.serves.has_controller(),
            Service::Node => self.serves.has_node(),
        }
    }

    /// A process of a split plugin cannot see the other process's calls;
    /// it takes that side of its model from what the other process
    /// recorded in the shared state, given as the successful calls that
    /// made it (`recorded`): a controller process learns the node's
    /// stagings and publishes (for ControllerUnpublishVolume's rule), a
    /// node process the controller's attachments (for the publish context
    /// rule). A monolith sees both sides itself, except on a base dir shared
    /// with the monoliths of other hosts, where another process (the
    /// cluster's controller leader) may have made its node's attachments:
    /// it takes the attachments from the record.
    pub fn adopt_recorded(&mut self, recorded: &[Call]) {
        let (controller, node) = (self.serves.has_controller(), self.serves.has_node());
        if controller && node {
            for protocol in self.volumes.values_mut() {
                protocol.attachments.clear();
            }
            for call in recorded {
                if matches!(call, Call::ControllerPublishVolume { .. }) {
                    self.completed(call);
                }
            }
            return;
        }
        for protocol in self.volumes.values_mut() {
            if !controller {
                protocol.attachments.clear();
            }
            if !node {
                protocol.staged.clear();
                protocol.published.clear();
            }
        }
        self.volumes.retain(|_, p| !p.is_empty());
        for call in recorded {
            if !self.serves(call.service()) {
                self.completed(call);
            }
        }
    }

    fn attach_in_use(&self) -> bool {
        self.advertised
            .controller
            .contains(&ControllerCapability::PublishUnpublishVolume)
    }

    fn stage_in_use(&self) -> bool {
        self.advertised
            .node
            .contains(&NodeCapability::StageUnstageVolume)
    }

    /// Checks `call` before the plugin serves it. `undeclared_fields` says
    /// the request carried fields its message does not define: on a
    /// request without a `secrets` field, that is how a CO's secrets would
    /// arrive.
    pub fn admit(&self, call: &Call, undeclared_fields: bool) -> Result<(), Violation> {
        let violation = |rule: Rule, detail: String| Violation {
            rpc: call.rpc(),
            volume: call.volume().map(str::to_string),
            rule,
            detail,
        };
        if undeclared_fields && !call.takes_secrets() {
            return Err(violation(
                Rule::SecretsOnlyWhereTaken,
                format!(
                    "the {}Request carries fields it does not define (secrets?)",
                    call.rpc()
                ),
            ));
        }
        let service = call.service();
        if !self.serves(service) {
            let other = if service == Service::Node {
                "node"
            } else {
                "controller"
            };
            return Err(violation(
                Rule::AdvertisedCapability,
                format!(
                    "this process of the plugin runs in {} mode: it does not serve the {other} service",
                    self.serves
                ),
            ));
        }
        if let Some(missing) = call.needs().into_iter().find(|n| !self.advertised.has(*n)) {
            return Err(violation(
                Rule::AdvertisedCapability,
                format!("the plugin does not advertise the {missing}"),
            ));
        }
        let empty = VolumeProtocol::default();
        let known = call.volume().and_then(|v| self.volumes.get(v));
        let protocol = known.unwrap_or(&empty);
        let volume = call.volume().unwrap_or("");
        match call {
            Call::NodeStageVolume {
                staging,
                publish_context,
                ..
            } => {
                self.check_publish_context(volume, protocol, publish_context)
                    .map_err(|d| violation(Rule::PublishContext, d))?;
                if let Some(other) = protocol.staged.iter().find(|p| *p != staging) {
                    return Err(violation(
                        Rule::OneStagingPath,
                        format!(
                            "volume {volume} is staged at {}, not {}",
                            other.display(),
                            staging.display()
                        ),
                    ));
                }
            }
            Call::NodePublishVolume {
                staging,
                publish_context,
                ..
            } => {
                self.check_publish_context(volume, protocol, publish_context)
                    .map_err(|d| violation(Rule::PublishContext, d))?;
                if self.stage_in_use() && !protocol.staged.contains(staging) {
                    let detail = if staging.as_os_str().is_empty() {
                        format!("volume {volume} is published without a staging_target_path")
                    } else {
                        format!("volume {volume} is not staged at {}", staging.display())
                    };
                    return Err(violation(Rule::StageBeforePublish, detail));
                }
            }
            Call::NodeUnstageVolume { staging, .. } => {
                let publish = protocol.published.iter().next();
                if let (true, Some(target)) = (protocol.staged.contains(staging), publish) {
                    return Err(violation(
                        Rule::UnpublishBeforeUnstage,
                        format!("volume {volume} is still published at {}", target.display()),
                    ));
                }
            }
            Call::ControllerUnpublishVolume { node, .. } => {
                let here = node.is_empty() || *node == self.node_id;
                let in_use = protocol.staged.iter().chain(&protocol.published).next();
                if let (true, Some(path)) = (here, in_use) {
                    return Err(violation(
                        Rule::UnstageBeforeDetach,
                        format!(
                            "volume {volume} is still staged or published on node {} at {}",
                            self.node_id,
                            path.display()
                        ),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Rule 3: with attachments in use, the publish context must be the one
    /// ControllerPublishVolume answered for this node.
    fn check_publish_context(
        &self,
        volume: &str,
        protocol: &VolumeProtocol,
        publish_context: &StringMap,
    ) -> Result<(), String> {
        if !self.attach_in_use() {
            return Ok(());
        }
        match protocol.attachments.get(&self.node_id) {
            None => Err(format!(
                "volume {volume} is not attached to node {} (no ControllerPublishVolume)",
                self.node_id
            )),
            Some(answered) if answered != publish_context => Err(format!(
                "the publish_context of volume {volume} is not the one ControllerPublishVolume \
                 answered"
            )),
            Some(_) => Ok(()),
        }
    }

    /// Records that the plugin served `call` successfully.
    pub fn completed(&mut self, call: &Call) {
        let Some(volume) = call.volume() else {
            return;
        };
        let protocol = self.volumes.entry(volume.to_string()).or_default();
        match call {
            Call::DeleteVolume { .. } => *protocol = VolumeProtocol::default(),
            Call::ControllerPublishVolume { node, answer, .. } => {
                protocol.attachments.insert(node.clone(), answer.clone());
            }
            Call::ControllerUnpublishVolume { node, .. } => {
                if node.is_empty() {
                    protocol.attachments.clear();
                } else {
                    protocol.attachments.remove(node);
                }
            }
            Call::NodeStageVolume { staging, .. } => {
                protocol.staged.insert(staging.clone());
            }
            Call::NodeUnstageVolume { staging, .. } => {
                protocol.staged.remove(staging);
            }
            Call::NodePublishVolume { target, .. } => {
                protocol.published.insert(target.clone());
            }
            Call::NodeUnpublishVolume { target, .. } => {
                protocol.published.remove(target);
            }
            _ => {}
        }
        if protocol.is_empty() {
            self.volumes.remove(volume);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "n1";

    fn advertised(attach: bool) -> Advertised {
        let mut controller: CapabilitySet<_> = [
            ControllerCapability::CreateDeleteVolume,
            ControllerCapability::ListVolumes,
            ControllerCapability::GetCapacity,
            ControllerCapability::ExpandVolume,
        ]
        .into();
        if attach {
            controller.insert(ControllerCapability::PublishUnpublishVolume);
            controller.insert(ControllerCapability::PublishReadonly);
        }
        Advertised {
            controller,
            node: [
                NodeCapability::StageUnstageVolume,
                NodeCapability::GetVolumeStats,
            ]
            .into(),
        }
    }

    fn context() -> StringMap {
        [("attached".to_string(), NODE.to_string())].into()
    }

    fn attach(volume: &str) -> Call {
        Call::ControllerPublishVolume {
            volume: volume.into(),
            node: NODE.into(),
            read_only: false,
            answer: context(),
        }
    }

    fn detach(volume: &str) -> Call {
        Call::ControllerUnpublishVolume {
            volume: volume.into(),
            node: NODE.into(),
        }
    }

    fn stage(volume: &str, staging: &str) -> Call {
        Call::NodeStageVolume {
            volume: volume.into(),
            staging: staging.into(),
            publish_context: context(),
        }
    }

    fn unstage(volume: &str, staging: &str) -> Call {
        Call::NodeUnstageVolume {
            volume: volume.into(),
            staging: staging.into(),
        }
    }

    fn publish(volume: &str, staging: &str, target: &str) -> Call {
        Call::NodePublishVolume {
            volume: volume.into(),
            staging: staging.into(),
            target: target.into(),
            publish_context: context(),
        }
    }

    fn unpublish(volume: &str, target: &str) -> Call {
        Call::NodeUnpublishVolume {
            volume: volume.into(),
            target: target.into(),
        }
    }

    /// Feeds `calls` in order, each admitted and completed; the first
    /// refusal, if any.
    fn run(strict: &mut Strict, calls: &[Call]) -> Result<(), Violation> {
        for call in calls {
            strict.admit(call, false)?;
            strict.completed(call);
        }
        Ok(())
    }

    fn strict() -> Strict {
        Strict::new(advertised(true), NODE)
    }

    fn rule_of(result: Result<(), Violation>) -> Option<Rule> {
        result.err().map(|v| v.rule)
    }

    #[test]
    fn the_whole_conforming_lifecycle_is_admitted() {
        let mut strict = strict();
        let calls = [
            Call::CreateVolume {
                name: "v".into(),
                content_source: None,
            },
            attach("v"),
            stage("v", "/s"),
            stage("v", "/s"),
            publish("v", "/s", "/t1"),
            publish("v", "/s", "/t2"),
            Call::NodeGetVolumeStats { volume: "v".into() },
            unpublish("v", "/t1"),
            unpublish("v", "/t2"),
            unstage("v", "/s"),
            detach("v"),
            Call::DeleteVolume { volume: "v".into() },
        ];
        assert_eq!(run(&mut strict, &calls), Ok(()));
        assert!(strict.volumes.is_empty(), "{:?}", strict.volumes);
    }

    #[test]
    fn a_second_staging_path_is_refused() {
        let mut strict = strict();
        run(&mut strict, &[attach("v"), stage("v", "/s1")]).unwrap();
        let err = strict.admit(&stage("v", "/s2"), false).unwrap_err();
        assert_eq!(err.rule, Rule::OneStagingPath);
        assert_eq!(
            err.to_string(),
            "strict: only one staging_target_path per volume: volume v is staged at /s1, not /s2"
        );
        assert_eq!(
            err.verdict_line(),
            "NodeStageVolume v: only one staging_target_path per volume"
        );
        // Conforming: the same path again, or another path once unstaged.
        assert_eq!(strict.admit(&stage("v", "/s1"), false), Ok(()));
        run(&mut strict, &[unstage("v", "/s1"), stage("v", "/s2")]).unwrap();
        // Another volume is not concerned.
        assert_eq!(run(&mut strict, &[attach("w"), stage("w", "/s1")]), Ok(()));
    }

    #[test]
    fn publish_before_stage_is_refused() {
        let mut strict = strict();
        run(&mut strict, &[attach("v")]).unwrap();
        let err = strict.admit(&publish("v", "/s", "/t"), false).unwrap_err();
        assert_eq!(err.rule, Rule::StageBeforePublish);
        assert!(err.detail.contains("not staged at /s"), "{err}");
        let err = strict.admit(&publish("v", "", "/t"), false).unwrap_err();
        assert_eq!(err.rule, Rule::StageBeforePublish);
        assert!(
            err.detail.contains("without a staging_target_path"),
            "{err}"
        );
        run(&mut strict, &[stage("v", "/s")]).unwrap();
        let err = strict.admit(&publish("v", "/other", "/t"), false);
        assert_eq!(rule_of(err), Some(Rule::StageBeforePublish));
        assert_eq!(strict.admit(&publish("v", "/s", "/t"), false), Ok(()));
    }

    #[test]
    fn stage_and_publish_need_the_answered_publish_context() {
        let mut strict = strict();
        let err = strict.admit(&stage("v", "/s"), false).unwrap_err();
        assert_eq!(err.rule, Rule::PublishContext);
        assert!(err.detail.contains("not attached to node n1"), "{err}");
        run(&mut strict, &[attach("v")]).unwrap();
        let bare = Call::NodeStageVolume {
            volume: "v".into(),
            staging: "/s".into(),
            publish_context: StringMap::new(),
        };
        assert_eq!(
            rule_of(strict.admit(&bare, false)),
            Some(Rule::PublishContext)
        );
        run(&mut strict, &[stage("v", "/s")]).unwrap();
        let bare = Call::NodePublishVolume {
            volume: "v".into(),
            staging: "/s".into(),
            target: "/t".into(),
            publish_context: [("attached".to_string(), "n2".to_string())].into(),
        };
        assert_eq!(
            rule_of(strict.admit(&bare, false)),
            Some(Rule::PublishContext)
        );
        assert_eq!(strict.admit(&publish("v", "/s", "/t"), false), Ok(()));

        // Without attachments there is no publish context to pass on.
        let mut strict = Strict::new(advertised(false), NODE);
        let bare = Call::NodeStageVolume {
            volume: "v".into(),
            staging: "/s".into(),
            publish_context: StringMap::new(),
        };
        assert_eq!(strict.admit(&bare, false), Ok(()));
        strict.completed(&bare);
        assert_eq!(
            strict.admit(
                &Call::NodePublishVolume {
                    volume: "v".into(),
                    staging: "/s".into(),
                    target: "/t".into(),
                    publish_context: StringMap::new(),
                },
                false
            ),
            Ok(())
        );
    }

    #[test]
    fn unstage_while_published_is_refused() {
        let mut strict = strict();
        run(
            &mut strict,
            &[attach("v"), stage("v", "/s"), publish("v", "/s", "/t")],
        )
        .unwrap();
        let err = strict.admit(&unstage("v", "/s"), false).unwrap_err();
        assert_eq!(err.rule, Rule::UnpublishBeforeUnstage);
        assert!(err.detail.contains("still published at /t"), "{err}");
        // An unstage of a path the volume is not staged at is a harmless
        // repeat.
        assert_eq!(strict.admit(&unstage("v", "/elsewhere"), false), Ok(()));
        run(&mut strict, &[unpublish("v", "/t")]).unwrap();
        assert_eq!(strict.admit(&unstage("v", "/s"), false), Ok(()));
    }

    #[test]
    fn detach_while_staged_is_refused() {
        let mut strict = strict();
        run(&mut strict, &[attach("v"), stage("v", "/s")]).unwrap();
        let err = strict.admit(&detach("v"), false).unwrap_err();
        assert_eq!(err.rule, Rule::UnstageBeforeDetach);
        let all_nodes = Call::ControllerUnpublishVolume {
            volume: "v".into(),
            node: String::new(),
        };
        assert_eq!(
            rule_of(strict.admit(&all_nodes, false)),
            Some(Rule::UnstageBeforeDetach)
        );
        // Another node's attachment is not this node's business.
        let elsewhere = Call::ControllerUnpublishVolume {
            volume: "v".into(),
            node: "n2".into(),
        };
        assert_eq!(strict.admit(&elsewhere, false), Ok(()));
        run(&mut strict, &[unstage("v", "/s")]).unwrap();
        assert_eq!(strict.admit(&detach("v"), false), Ok(()));
    }

    #[test]
    fn rpcs_of_unadvertised_capabilities_are_refused() {
        let no_attach = Strict::new(advertised(false), NODE);
        let err = no_attach.admit(&attach("v"), false).unwrap_err();
        assert_eq!(err.rule, Rule::AdvertisedCapability);
        assert_eq!(
            err.detail,
            "the plugin does not advertise the controller capability publish-unpublish-volume"
        );
        assert_eq!(
            rule_of(no_attach.admit(&detach("v"), false)),
            Some(Rule::AdvertisedCapability)
        );
        let strict = strict();
        for call in [
            Call::NodeExpandVolume { volume: "v".into() },
            Call::CreateSnapshot {
                source_volume: "v".into(),
            },
            Call::ControllerGetVolume { volume: "v".into() },
            Call::CreateVolume {
                name: "v".into(),
                content_source: Some(ContentSource::Volume),
            },
        ] {
            assert_eq!(
                rule_of(strict.admit(&call, false)),
                Some(Rule::AdvertisedCapability),
                "{call:?}"
            );
        }
        // What is advertised is admitted.
        for call in [
            attach("v"),
            Call::NodeGetVolumeStats { volume: "v".into() },
            Call::ListVolumes,
            Call::CreateVolume {
                name: "v".into(),
                content_source: None,
            },
        ] {
            assert_eq!(strict.admit(&call, false), Ok(()), "{call:?}");
        }
    }

    #[test]
    fn a_split_process_refuses_the_other_service_s_rpcs() {
        let node = strict().serving(PluginType::Node);
        let err = node.admit(&attach("v"), false).unwrap_err();
        assert_eq!(err.rule, Rule::AdvertisedCapability);
        assert_eq!(
            err.detail,
            "this process of the plugin runs in node mode: it does not serve the controller service"
        );
        assert_eq!(node.admit(&Call::NodeGetInfo, false), Ok(()));
        let controller = strict().serving(PluginType::Controller);
        assert_eq!(
            rule_of(controller.admit(&stage("v", "/s"), false)),
            Some(Rule::AdvertisedCapability)
        );
        for call in [Call::Probe, Call::GetPluginInfo, attach("v")] {
            assert_eq!(controller.admit(&call, false), Ok(()), "{call:?}");
        }
    }

    #[test]
    fn a_node_process_checks_the_publish_context_of_the_controller_s_recorded_attachment() {
        let mut node = strict().serving(PluginType::Node);
        assert_eq!(
            rule_of(node.admit(&stage("v", "/s"), false)),
            Some(Rule::PublishContext)
        );
        node.adopt_recorded(&[attach("v")]);
        assert_eq!(node.admit(&stage("v", "/s"), false), Ok(()));
        // The controller detached it meanwhile: the record says so.
        node.adopt_recorded(&[]);
        assert_eq!(
            rule_of(node.admit(&stage("v", "/s"), false)),
            Some(Rule::PublishContext)
        );
    }

    #[test]
    fn a_controller_process_refuses_a_detach_while_the_node_s_record_shows_a_staging() {
        let mut controller = strict().serving(PluginType::Controller);
        run(&mut controller, &[attach("v")]).unwrap();
        controller.adopt_recorded(&[attach("v"), stage("v", "/s")]);
        assert_eq!(
            rule_of(controller.admit(&detach("v"), false)),
            Some(Rule::UnstageBeforeDetach)
        );
        // Its own side stays its own: the attachment it saw is kept.
        controller.adopt_recorded(&[]);
        assert_eq!(controller.admit(&detach("v"), false), Ok(()));
        run(&mut controller, &[detach("v")]).unwrap();
        assert_eq!(
            rule_of(controller.admit(&stage("v", "/s"), false)),
            Some(Rule::AdvertisedCapability)
        );
    }

    #[test]
    fn a_snapshot_is_a_call_about_its_source_volume() {
        let call = Call::CreateSnapshot {
            source_volume: "v".into(),
        };
        assert_eq!(call.volume(), Some("v"));
        assert!(call.takes_secrets());
        assert_eq!(
            call.needs(),
            vec![Needed::Controller(
                ControllerCapability::CreateDeleteSnapshot
            )]
        );
        let call = Call::CreateSnapshot {
            source_volume: String::new(),
        };
        assert_eq!(call.volume(), None);
    }

    #[test]
    fn undeclared_fields_on_an_rpc_without_secrets_are_refused() {
        let mut strict = strict();
        run(&mut strict, &[attach("v"), stage("v", "/s")]).unwrap();
        let err = strict.admit(&unstage("v", "/s"), true).unwrap_err();
        assert_eq!(err.rule, Rule::SecretsOnlyWhereTaken);
        assert_eq!(
            err.verdict_line(),
            "NodeUnstageVolume v: secrets only on RPCs that take them"
        );
        assert_eq!(
            rule_of(strict.admit(&Call::NodeGetInfo, true)),
            Some(Rule::SecretsOnlyWhereTaken)
        );
        assert_eq!(
            strict
                .admit(&Call::NodeGetInfo, true)
                .unwrap_err()
                .verdict_line(),
            "NodeGetInfo -: secrets only on RPCs that take them"
        );
        // Requests with a secrets field may carry fields of a newer spec.
        assert_eq!(strict.admit(&stage("v", "/s"), true), Ok(()));
        assert_eq!(strict.admit(&unstage("v", "/s"), false), Ok(()));
    }

    #[test]
    fn every_rule_has_a_distinct_name_without_a_period() {
        let names: BTreeSet<&str> = Rule::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Rule::ALL.len());
        assert!(names.iter().all(|n| !n.ends_with('.') && !n.contains('\n')));
    }
}
