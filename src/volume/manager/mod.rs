//! The volume manager: the volume registry and its claims, owned by the
//! main loop.
//!
//! Requests (register, claim, release, ...) change the records; then
//! [`VolumeManager::plan`] asks the [planner](super::plan) for each idle
//! volume's next steps, as many as follow each other on one plugin
//! instance (a claim's ControllerPublish to its host bind, or a release),
//! marks every forward one `Pending`, and hands back one job of steps
//! for the plugins' worker pools. The main loop commits the journal (every
//! volume record changed this turn, one sync) *before* it submits those
//! jobs and sends the replies this turn produced, so no RPC is sent on a
//! state that is not durable. Each step comes back as an [`OpDone`]; a
//! step's outcome is journalled with the next sync, which the job waits
//! for before its next RPC, and the last step's before the claim's or
//! release's answer.
//!
//! At most one job per volume is in flight, whichever of its plugin's
//! instances runs it: a split plugin's controller and node have their own
//! worker pools, and the volume's `busy` mark serialises them. A failed
//! step stays `Pending` and is retried with [`RETRY`] backoff (the
//! watcher); a terminal error on the claim path fails the claims it
//! concerns and releases them. A step whose instance is not healthy waits
//! for it, and a plugin that turns healthy gets its waiting retries at
//! once.
//!
//! The manager's files go by concern: `intake/` checks and admits
//! requests into the records; `engine/` drives the protocol from the
//! records (jobs, reports, retries, the mount table at start, the
//! cluster's side); `status.rs` only reads. A turn's outcome leaves in
//! one [`Effects`] value.
//!
//! A volume's plugin is seen through `PluginView`: its instances taken
//! together, the controller's features from the controller's fingerprint
//! and the node's from the node's. Each job names its [`Service`], and the
//! main loop submits it to the instance serving that service.

#[cfg(test)]
mod answers_tests;
mod engine;
mod entry;
#[cfg(test)]
mod freed_tests;
mod gauges;
mod intake;
mod signals;
mod status;

pub use engine::lost::LostClaim;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;

use super::calls::{self, Answer};
use super::layout::Paths;
use super::model::{Step, Volume};
use super::ops::{self, Job, OpDone, OpResult, Verdict};
use super::plan::Protocol;
use crate::call::{CallError, ErrorKind};
use crate::csi::backoff::SplitMix64;
use crate::csi::types::{ControllerCapability, NodeCapability, PluginCapability};
use crate::csi::{topology, Backoff};
use crate::plugin::{Health, PluginRecord, Registry, Service};
use crate::proto::state as pb;
use crate::spec::PluginType;
use crate::spec::VolumeSpec;

/// The watcher's retry policy for failed steps: 1 s doubling to 1 min,
/// full jitter, forever.
pub const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// How long a claim may keep failing with retryable errors before it is
/// given up (and released).
pub const CLAIM_DEADLINE: Duration = Duration::from_secs(120);

pub use super::calls::ReplyTo;

/// A reply to send once this turn's journal is durable.
pub type Reply = (ReplyTo, crate::call::Answer<Answer>);

/// What the manager's turn asks of the loop, handed over in one value
/// ([`VolumeManager::take_effects`]): the loop journals the records, and
/// carries out the rest only once they are durable (`replies`, `cluster`)
/// or written (`acks`, `resumes`: see [`Effects::acks`]).
#[derive(Default)]
pub struct Effects {
    /// The record of every volume changed this turn, encoded for the
    /// journal.
    pub journal: Vec<Vec<u8>>,
    /// Replies to send once the journal is durable.
    pub replies: Vec<Reply>,
    /// Replies to send once this turn's records are written, synced or
    /// not: answers whose outcome records made durable before decide. A
    /// claim answered as taken when its job's last step is reported (the
    /// claim's admission was synced before its job was submitted), and a
    /// claim answered as freed after a job carried out its release (the
    /// release was synced before that job). If the records after those
    /// are lost with the page cache (a power cut; a SIGKILL keeps them),
    /// the next start finds the claim admitted, or its release under way,
    /// and does again the steps it finds `Pending`: the same outcome.
    pub acks: Vec<Reply>,
    /// Jobs of steps waiting for this turn's records to be written before
    /// their next RPC (see [`crate::volume::steps`]).
    pub resumes: Vec<Sender<Verdict>>,
    /// Ops for the cluster's etcd (see `cluster.rs`).
    pub cluster: Vec<crate::cluster::ops::Op>,
    /// Events for plugins' health histories, `(plugin, note)`: a plugin
    /// that left a mount behind (see [`Registry::note`]).
    pub plugin_notes: Vec<(String, String)>,
    /// Volumes that lost a claim this turn: released and forgotten here,
    /// or gone from the cluster's claim set. A claim refused because of
    /// the claim that left may be taken now; the loop tells those waiting
    /// (the task runner's volume hook) at once, rather than leave them to
    /// their backoff.
    pub freed: Vec<String>,
}

/// A job for the workers of the instance of plugin `plugin_id` that serves
/// `service`.
pub struct Dispatch {
    pub plugin_id: String,
    pub service: Service,
    pub job: Job,
}

struct Retry {
    at: Instant,
    attempt: u32,
    error: String,
    wall: SystemTime,
    /// How many times in a row the plugin said it released a path and
    /// left it mounted.
    left_mount: u32,
}

struct ClaimWaiter {
    alloc: String,
    reply: ReplyTo,
    deadline: Instant,
}

#[derive(Default)]
struct Waiters {
    claims: Vec<ClaimWaiter>,
    releases: Vec<(String, ReplyTo)>,
    /// `deregister -force`: answered once the claims are gone.
    deregister: Vec<ReplyTo>,
}

struct Entry {
    volume: Volume,
    /// The token of the job of steps (or queued request) in flight.
    busy: Option<u64>,
    /// The steps of the job in flight not reported yet, with what each
    /// one's record was before the job marked it `Pending`.
    chain: std::collections::VecDeque<(super::plan::Action, engine::protocol::Before)>,
    /// Requests that call the plugin about this volume (a snapshot, usage,
    /// an expansion), each sent when no other call for the volume is in
    /// flight: the CO serialises calls per volume.
    queued: std::collections::VecDeque<Queued>,
    retry: Option<Retry>,
    /// Why the next step waits for its plugin (an instance that is not
    /// healthy), for `volume status` and a claim that gives up.
    waiting: Option<String>,
    waiters: Waiters,
    /// Deregister once every claim is gone.
    deregistering: bool,
    /// Allocs whose release a job of steps is carrying out: the record
    /// of the release was durable before that job went out (a job is
    /// submitted only after a sync), so the answer that the claim is
    /// freed is an acknowledgement (see [`Effects::acks`]).
    releasing_durably: BTreeSet<String>,
}

impl Entry {
    fn new(volume: Volume) -> Entry {
        Entry {
            volume,
            busy: None,
            chain: Default::default(),
            queued: Default::default(),
            retry: None,
            waiting: None,
            waiters: Waiters::default(),
            deregistering: false,
            releasing_durably: BTreeSet::new(),
        }
    }
}

/// A request waiting for its volume to be idle.
struct Queued {
    token: u64,
    op: PendingOp,
    service: Service,
    job: Job,
}

/// A request that waits for one plugin call other than a step.
enum PendingOp {
    Register {
        volume: Box<Volume>,
        reply: ReplyTo,
    },
    /// `reply` is `None` for a CreateVolume sent again with nobody waiting.
    Create {
        id: String,
        reply: Option<ReplyTo>,
    },
    Delete {
        reply: ReplyTo,
    },
    /// NodeGetVolumeStats: `reply` is `None` for a poll of the agent's
    /// own schedule ([`signals`]).
    Stats {
        reply: Option<ReplyTo>,
    },
    /// GetCapacity of plugin `plugin_id`'s controller, a poll.
    Capacity {
        plugin_id: String,
    },
    SnapshotCreate {
        plugin_id: String,
        reply: ReplyTo,
    },
    SnapshotDelete {
        reply: ReplyTo,
    },
    SnapshotList {
        plugin_id: String,
        reply: ReplyTo,
    },
    /// ControllerExpandVolume, then NodeExpandVolume, each queued on the
    /// volume in turn: `node` is what the node's call needs, while the
    /// controller's is in flight.
    Expand {
        reply: ReplyTo,
        required: i64,
        node: Option<Box<intake::expand::NodeExpansion>>,
    },
    /// `volume status -plugin`: the registered volumes' status, waiting
    /// for the plugin's own list.
    External {
        response: calls::Status,
        reply: ReplyTo,
    },
}

/// One instance of a volume's plugin, as the manager sees it.
struct Side {
    plugin_type: PluginType,
    healthy: bool,
}

/// What the manager needs to know about a volume's plugin: its instances
/// taken together. The controller's features come from the instance that
/// serves the controller service, the node's (node ID, topology, staging)
/// from the one that serves the node service; for a monolith they are one.
/// A feature is read from the last fingerprint even while its instance is
/// not healthy, so that the protocol a volume needs does not change when
/// an instance dies: a claim that needs ControllerPublishVolume waits for
/// the controller rather than skip it.
#[derive(Default)]
struct PluginView {
    /// The instance serving the controller service, unless none is
    /// registered or the monolith's fingerprint says it has none.
    controller: Option<Side>,
    /// The instance serving the node service.
    node: Option<Side>,
    protocol: Protocol,
    node_id: String,
    create_delete: bool,
    snapshots: bool,
    list_snapshots: bool,
    clone: bool,
    list_volumes: bool,
    controller_expand: bool,
    node_expand: bool,
    online_expansion: bool,
    stats: bool,
    /// The node reports volumes' conditions (VOLUME_CONDITION).
    condition: bool,
    /// The controller answers GetCapacity (GET_CAPACITY).
    get_capacity: bool,
    accessibility: bool,
    topology: Option<BTreeMap<String, String>>,
    provider: String,
    /// Where the plugin sees the agent's `csi/<plugin>` dir, when not at
    /// its host path (a plugin task in a root of its own).
    base_dir: Option<std::path::PathBuf>,
    /// In a cluster, the plugin's controller runs on other hosts only, and
    /// its leader makes the controller calls (attachments through their
    /// intents, the rest relayed): they need no instance here, and run on
    /// the node's workers.
    remote_controller: bool,
}

impl PluginView {
    /// Whether the plugin has a controller at all: without one, volumes
    /// are registered as written and never attached.
    fn has_controller(&self) -> bool {
        self.controller.is_some() || self.remote_controller
    }

    /// What the plugin's controller does, from its capabilities (`has`).
    fn set_controller_features(&mut self, has: impl Fn(ControllerCapability) -> bool) {
        self.protocol.controller_publish = has(ControllerCapability::PublishUnpublishVolume);
        self.create_delete = has(ControllerCapability::CreateDeleteVolume);
        self.snapshots = has(ControllerCapability::CreateDeleteSnapshot);
        self.list_snapshots = has(ControllerCapability::ListSnapshots);
        self.clone = has(ControllerCapability::CloneVolume);
        self.list_volumes = has(ControllerCapability::ListVolumes);
        self.get_capacity = has(ControllerCapability::GetCapacity);
        self.controller_expand = has(ControllerCapability::ExpandVolume);
    }

    /// The service whose instance runs the jobs of `service`: in a
    /// cluster, the node's workers carry the controller steps that the
    /// leader elsewhere makes.
    fn service_for(&self, service: Service) -> Service {
        match service {
            Service::Controller if self.remote_controller => Service::Node,
            other => other,
        }
    }

    /// Why an RPC of `service` of plugin `id` cannot go out now, if it
    /// cannot: its instance is missing or not healthy.
    fn unavailable(&self, id: &str, service: Service) -> Option<String> {
        let side = match service {
            Service::Controller if self.remote_controller => return None,
            Service::Controller => &self.controller,
            Service::Node => &self.node,
        };
        match side {
            Some(side) if side.healthy => None,
            // One instance serves both: it is the plugin.
            Some(side) if side.plugin_type == PluginType::Monolith => {
                Some(format!("plugin {id:?} is not healthy"))
            }
            Some(_) => Some(format!("plugin {id:?} has no healthy {service}")),
            None if service == Service::Controller => {
                Some(format!("plugin {id:?} has no controller"))
            }
            None => Some(format!("plugin {id:?} has no node on this host")),
        }
    }

    /// Why volume `v` cannot be used on this node, if it cannot: the
    /// node's topology for its plugin is in none of the volume's.
    fn topology_misfit(&self, v: &Volume) -> Option<String> {
        if topology::accessible(&v.topologies, self.topology.as_ref()) {
            return None;
        }
        Some(format!(
            "volume {:?} is not accessible from this node: the volume's topologies are {}, the node's (plugin {:?}) is {}",
            v.id,
            topology::describe_all(&v.topologies),
            v.plugin_id,
            self.topology
                .as_ref()
                .map_or_else(|| "none".to_string(), topology::describe)
        ))
    }

    /// Why volume `v` cannot be claimed now, if it cannot: its plugin's
    /// node is not healthy, or the volume needs attaching and the
    /// controller that attaches is not.
    fn unschedulable(&self, v: &Volume) -> Option<String> {
        let id = &v.plugin_id;
        if let Some(why) = self.unavailable(id, Service::Node) {
            return Some(why);
        }
        if self.protocol.controller_publish && v.attachment != Step::Done {
            return self
                .unavailable(id, Service::Controller)
                .map(|why| format!("{why}, which attaches its volumes (ControllerPublishVolume)"));
        }
        None
    }
}

/// Plugin `plugin_id` from this host's instances alone; everything else
/// asks [`VolumeManager::plugin_view`], which in a cluster adds the
/// controller leader elsewhere.
fn local_plugin_view(registry: &Registry, plugin_id: &str) -> Option<PluginView> {
    let controller = registry
        .serving(plugin_id, Service::Controller)
        .filter(|r| r.is_controller());
    let node = registry.serving(plugin_id, Service::Node);
    if controller.is_none() && node.is_none() {
        return None;
    }
    let cfp = controller.and_then(|r| r.fingerprint.as_ref());
    let nfp = node.and_then(|r| r.fingerprint.as_ref());
    let controller_has = |c| cfp.is_some_and(|f| f.controller_capabilities.contains(&c));
    let node_has = |c| nfp.is_some_and(|f| f.node_capabilities.contains(&c));
    // Plugin capabilities are the plugin's: either fingerprint says them.
    let plugin_has = |c| {
        cfp.into_iter()
            .chain(nfp)
            .any(|f| f.plugin_capabilities.contains(&c))
    };
    let side = |r: &PluginRecord, healthy: bool| Side {
        plugin_type: r.spec.plugin_type,
        healthy: r.health == Health::Healthy && healthy,
    };
    let mut view = PluginView {
        controller: controller.map(|r| side(r, r.controller_healthy())),
        node: node.map(|r| side(r, r.node_healthy())),
        protocol: Protocol {
            controller_publish: false,
            stage: node_has(NodeCapability::StageUnstageVolume),
            mount_group: node_has(NodeCapability::VolumeMountGroup),
        },
        node_id: nfp
            .and_then(|f| f.node.as_ref())
            .map(|n| n.node_id.clone())
            .unwrap_or_default(),
        create_delete: false,
        snapshots: false,
        list_snapshots: false,
        clone: false,
        list_volumes: false,
        controller_expand: false,
        node_expand: node_has(NodeCapability::ExpandVolume),
        online_expansion: plugin_has(PluginCapability::OnlineExpansion),
        stats: node_has(NodeCapability::GetVolumeStats),
        condition: node_has(NodeCapability::VolumeCondition),
        get_capacity: false,
        accessibility: plugin_has(PluginCapability::VolumeAccessibilityConstraints),
        topology: nfp
            .and_then(|f| f.node.as_ref())
            .and_then(|n| n.accessible_topology.clone()),
        provider: cfp.or(nfp).map(|f| f.info.name.clone()).unwrap_or_default(),
        // Paths go to the node's RPCs only: the node instance's view.
        base_dir: node.and_then(|r| r.spec.stage_publish_base_dir.clone()),
        remote_controller: false,
    };
    view.set_controller_features(controller_has);
    Some(view)
}

pub struct VolumeManager {
    entries: BTreeMap<String, Entry>,
    paths: Paths,
    done: Sender<OpDone>,
    next_token: u64,
    /// Volumes whose record changed this turn (`None` value: removed).
    changed: BTreeSet<String>,
    outbox: Vec<Reply>,
    /// Answers whose outcome the durable records already decide.
    acks: Vec<Reply>,
    /// Jobs of steps waiting for this turn's records to be durable before
    /// their next RPC (see [`crate::volume::steps`]).
    resumes: Vec<Sender<Verdict>>,
    pending: HashMap<u64, PendingOp>,
    /// IDs being registered (a volume being created has its entry).
    reserved: BTreeSet<String>,
    /// Volumes being created whose CreateVolume is not in flight: each
    /// one inserted with a create intent (restored after a restart), and
    /// each whose CreateVolume did not answer, until it is sent again.
    /// [`VolumeManager::resume_creates`] looks at these, not at every
    /// volume, each turn, and drops those given up meanwhile.
    being_created: BTreeSet<String>,
    jitter: SplitMix64,
    /// Volumes to plan this turn besides those whose record changed (see
    /// [`VolumeManager::plan`]): a call came back, a request touched one,
    /// its plugin turned healthy.
    to_plan: BTreeSet<String>,
    /// When retries fall due, earliest first; entries whose retry has
    /// since been cleared or replaced are stale and cost one empty plan.
    retries: std::collections::BinaryHeap<std::cmp::Reverse<(Instant, String)>>,
    /// When claim waiters' deadlines pass, earliest first; a waiter
    /// answered since leaves its deadline behind, which costs one look at
    /// the waiters when it passes.
    claim_deadlines: std::collections::BinaryHeap<std::cmp::Reverse<Instant>>,
    /// Events to record on plugins' health histories (a plugin that left
    /// a mount behind), for the main loop to apply to the registry.
    plugin_notes: Vec<(String, String)>,
    /// Claims and volumes shared through etcd, for an agent in a cluster.
    cluster: Option<engine::cluster::ClusterSide>,
    /// The claims now, as the metrics have them.
    claim_gauge: gauges::ClaimGauge,
    /// Volumes that lost a claim this turn (see [`Effects::freed`]).
    freed: BTreeSet<String>,
    /// Usage, health and capacity: what the polls watch and last heard.
    signals: signals::Signals,
}

fn error(kind: ErrorKind, message: impl Into<String>) -> CallError {
    CallError::new(kind, message)
}

impl VolumeManager {
    pub fn new(paths: Paths, done: Sender<OpDone>) -> VolumeManager {
        VolumeManager {
            entries: BTreeMap::new(),
            paths,
            done,
            next_token: 0,
            changed: BTreeSet::new(),
            outbox: Vec::new(),
            acks: Vec::new(),
            resumes: Vec::new(),
            pending: HashMap::new(),
            reserved: BTreeSet::new(),
            being_created: BTreeSet::new(),
            jitter: SplitMix64::from_entropy(),
            plugin_notes: Vec::new(),
            to_plan: BTreeSet::new(),
            retries: Default::default(),
            cluster: None,
            claim_deadlines: Default::default(),
            claim_gauge: Default::default(),
            freed: BTreeSet::new(),
            signals: signals::Signals::new(crate::spec::DEFAULT_VOLUME_STATS_INTERVAL),
        }
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    fn insert(&mut self, volume: Volume) {
        let id = volume.id.clone();
        if volume.creating.is_some() {
            self.being_created.insert(id.clone());
        }
        self.entries.insert(id.clone(), Entry::new(volume));
        self.changed.insert(id);
    }

    /// Volume `id` is to be planned this turn.
    pub(super) fn touch(&mut self, id: &str) {
        self.to_plan.insert(id.to_string());
    }

    fn remove(&mut self, id: &str) {
        self.entries.remove(id);
        self.changed.insert(id.to_string());
    }

    // ---- persistence ----

    /// Loads the snapshot's volumes, then the journal's records in order.
    pub fn restore(&mut self, snapshot: &[pb::Volume], journal: &[Vec<u8>]) {
        let mut records: BTreeMap<String, pb::Volume> =
            order::map(snapshot.iter().map(|v| (v.id.clone(), v.clone())));
        for bytes in journal {
            match crate::message::decode::<pb::JournalRecord>(bytes) {
                Ok(record) => match record.change {
                    Some(pb::journal_record::Change::Volume(v)) => {
                        records.insert(v.id.clone(), v);
                    }
                    Some(pb::journal_record::Change::RemovedVolumeId(id)) => {
                        records.remove(&id);
                    }
                    None => {}
                },
                Err(err) => log::warn!("Skipping an unreadable journal record: {err}"),
            }
        }
        for record in records.values() {
            match Volume::from_proto(record) {
                Ok(volume) => self.insert(volume),
                Err(err) => log::error!("Dropping a volume record of the state: {err}"),
            }
        }
        // Loading is not a change; every volume is planned once.
        self.changed.clear();
        let now = Instant::now();
        for (id, entry) in &self.entries {
            self.claim_gauge.recount(id, Some(&entry.volume));
            self.signals.volume_changed(id, Some(&entry.volume), now);
        }
        self.to_plan = self.entries.keys().cloned().collect();
    }

    /// Everything this turn asks of the loop.
    pub fn take_effects(&mut self) -> Effects {
        Effects {
            journal: self.take_journal(),
            replies: std::mem::take(&mut self.outbox),
            acks: std::mem::take(&mut self.acks),
            resumes: std::mem::take(&mut self.resumes),
            cluster: self.take_cluster_ops(),
            plugin_notes: std::mem::take(&mut self.plugin_notes),
            freed: std::mem::take(&mut self.freed).into_iter().collect(),
        }
    }

    /// The records of every volume changed this turn, for the journal.
    fn take_journal(&mut self) -> Vec<Vec<u8>> {
        let now = Instant::now();
        let changed: Vec<String> = self.changed.iter().cloned().collect();
        for id in &changed {
            self.share_change(id);
        }
        std::mem::take(&mut self.changed)
            .into_iter()
            .map(|id| {
                let volume = self.entries.get(&id).map(|e| &e.volume);
                self.claim_gauge.recount(&id, volume);
                self.signals.volume_changed(&id, volume, now);
                let change = match self.entries.get(&id) {
                    Some(entry) => pb::journal_record::Change::Volume(entry.volume.to_proto()),
                    None => pb::journal_record::Change::RemovedVolumeId(id),
                };
                let record = pb::JournalRecord {
                    change: Some(change),
                    ..Default::default()
                };
                crate::message::encode(&record).expect("encoding a journal record cannot fail")
            })
            .collect()
    }

    pub fn to_proto(&self) -> Vec<pb::Volume> {
        self.entries.values().map(|e| e.volume.to_proto()).collect()
    }

    pub fn volumes(&self) -> impl Iterator<Item = &Volume> {
        self.entries.values().map(|e| &e.volume)
    }
}

/// An event of the `volume` topic about volume `id`.
pub(in crate::volume::manager) fn volume_event(kind: &str, id: &str, message: impl Into<String>) {
    crate::events::emit(crate::events::Topic::Volume, kind, id, message);
}

/// An event of the `claim` topic about volume `id`.
pub(in crate::volume::manager) fn claim_event(kind: &str, id: &str, message: impl Into<String>) {
    crate::events::emit(crate::events::Topic::Claim, kind, id, message);
}
