//! The volume manager: the volume registry and its claims, owned by the
//! main loop.
//!
//! Requests (register, claim, release, ...) change the records; then
//! [`VolumeManager::plan`] asks the [planner](super::plan) for each idle
//! volume's next step, marks a forward step `Pending`, and hands back jobs
//! for the plugins' worker pools. The main loop commits the journal (every
//! volume record changed this turn, one sync) *before* it submits those
//! jobs and sends the replies this turn produced, so no RPC is sent on a
//! state that is not durable. Results come back as [`OpDone`]s.
//!
//! At most one job per volume is in flight. A failed step stays `Pending`
//! and is retried with [`RETRY`] backoff (the watcher); a terminal error
//! on the claim path fails the claims it concerns and releases them. A
//! plugin that turns healthy gets its waiting retries at once.

mod claims;
mod expand;
mod protocol;
mod reconcile;
mod requests;
mod snapshots;
mod status;

pub use expand::Expansion;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use protobuf::Message;

use super::model::{Step, Volume};
use super::ops::{self, OpDone, OpResult, Paths};
use super::plan::Protocol;
use crate::api::{ApiError, ErrorKind, Response};
use crate::csi::backoff::SplitMix64;
use crate::csi::types::{ControllerCapability, NodeCapability, PluginCapability};
use crate::csi::Backoff;
use crate::plugin::workers::Job;
use crate::plugin::{Health, Registry};
use crate::proto::{agent as api, state as pb};
use crate::spec::VolumeSpec;

/// The watcher's retry policy for failed steps: 1 s doubling to 1 min,
/// full jitter, forever.
pub const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// How long a claim may keep failing with retryable errors before it is
/// given up (and released).
pub const CLAIM_DEADLINE: Duration = Duration::from_secs(120);

pub type ReplyTo = Sender<Result<Response, ApiError>>;

/// A reply to send once this turn's journal is durable.
pub type Reply = (ReplyTo, Result<Response, ApiError>);

/// A job for one plugin's workers.
pub struct Dispatch {
    pub plugin_id: String,
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
    /// The token of the step (or queued request) in flight.
    busy: Option<u64>,
    /// Requests that call the plugin about this volume (a snapshot, usage,
    /// an expansion), each sent when no other call for the volume is in
    /// flight: the CO serialises calls per volume.
    queued: std::collections::VecDeque<Queued>,
    retry: Option<Retry>,
    waiters: Waiters,
    /// Deregister once every claim is gone.
    deregistering: bool,
}

impl Entry {
    fn new(volume: Volume) -> Entry {
        Entry {
            volume,
            busy: None,
            queued: Default::default(),
            retry: None,
            waiters: Waiters::default(),
            deregistering: false,
        }
    }
}

/// A request waiting for its volume to be idle.
struct Queued {
    token: u64,
    op: PendingOp,
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
    Stats {
        reply: ReplyTo,
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
    /// ControllerExpandVolume and NodeExpandVolume, queued on the volume.
    Expand {
        reply: ReplyTo,
    },
    /// `volume status -plugin`: the registered volumes' status, waiting
    /// for the plugin's own list.
    External {
        response: api::VolumeStatusResponse,
        reply: ReplyTo,
    },
}

/// What the manager needs to know about a volume's plugin.
struct PluginView {
    healthy: bool,
    protocol: Protocol,
    node_id: String,
    has_controller: bool,
    create_delete: bool,
    snapshots: bool,
    list_snapshots: bool,
    clone: bool,
    list_volumes: bool,
    controller_expand: bool,
    node_expand: bool,
    online_expansion: bool,
    stats: bool,
    accessibility: bool,
    topology: Option<BTreeMap<String, String>>,
    provider: String,
    /// Where the plugin sees the agent's `csi/<plugin>` dir, when not at
    /// its host path (a plugin task in a root of its own).
    base_dir: Option<std::path::PathBuf>,
}

fn plugin_view(registry: &Registry, plugin_id: &str) -> Option<PluginView> {
    let record = registry.get(plugin_id)?;
    let fp = record.fingerprint.as_ref();
    let controller = |c| {
        record.spec.plugin_type.has_controller()
            && fp.is_some_and(|f| f.has_controller() && f.controller_capabilities.contains(&c))
    };
    let node = |c| fp.is_some_and(|f| f.node_capabilities.contains(&c));
    Some(PluginView {
        healthy: record.health == Health::Healthy && fp.is_some(),
        protocol: Protocol {
            controller_publish: controller(ControllerCapability::PublishUnpublishVolume),
            stage: node(NodeCapability::StageUnstageVolume),
        },
        node_id: fp
            .and_then(|f| f.node.as_ref())
            .map(|n| n.node_id.clone())
            .unwrap_or_default(),
        has_controller: record.spec.plugin_type.has_controller()
            && fp.is_some_and(|f| f.has_controller()),
        create_delete: controller(ControllerCapability::CreateDeleteVolume),
        snapshots: controller(ControllerCapability::CreateDeleteSnapshot),
        list_snapshots: controller(ControllerCapability::ListSnapshots),
        clone: controller(ControllerCapability::CloneVolume),
        list_volumes: controller(ControllerCapability::ListVolumes),
        controller_expand: controller(ControllerCapability::ExpandVolume),
        node_expand: node(NodeCapability::ExpandVolume),
        online_expansion: fp.is_some_and(|f| {
            f.plugin_capabilities
                .contains(&PluginCapability::OnlineExpansion)
        }),
        stats: node(NodeCapability::GetVolumeStats),
        accessibility: fp.is_some_and(|f| {
            f.plugin_capabilities
                .contains(&PluginCapability::VolumeAccessibilityConstraints)
        }),
        topology: fp
            .and_then(|f| f.node.as_ref())
            .and_then(|n| n.accessible_topology.clone()),
        provider: fp.map(|f| f.info.name.clone()).unwrap_or_default(),
        base_dir: record.spec.stage_publish_base_dir.clone(),
    })
}

pub struct VolumeManager {
    entries: BTreeMap<String, Entry>,
    paths: Paths,
    done: Sender<OpDone>,
    next_token: u64,
    /// Volumes whose record changed this turn (`None` value: removed).
    changed: BTreeSet<String>,
    outbox: Vec<Reply>,
    pending: HashMap<u64, PendingOp>,
    /// IDs being registered (a volume being created has its entry).
    reserved: BTreeSet<String>,
    jitter: SplitMix64,
    /// Events to record on plugins' health histories (a plugin that left
    /// a mount behind), for the main loop to apply to the registry.
    plugin_notes: Vec<(String, String)>,
}

fn error(kind: ErrorKind, message: impl Into<String>) -> ApiError {
    ApiError::new(kind, message)
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
            pending: HashMap::new(),
            reserved: BTreeSet::new(),
            jitter: SplitMix64::from_entropy(),
            plugin_notes: Vec::new(),
        }
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    fn insert(&mut self, volume: Volume) {
        let id = volume.id.clone();
        self.entries.insert(id.clone(), Entry::new(volume));
        self.changed.insert(id);
    }

    fn remove(&mut self, id: &str) {
        self.entries.remove(id);
        self.changed.insert(id.to_string());
    }

    // ---- persistence ----

    /// Loads the snapshot's volumes, then the journal's records in order.
    pub fn restore(&mut self, snapshot: &[pb::Volume], journal: &[Vec<u8>]) {
        let mut records: BTreeMap<String, pb::Volume> =
            snapshot.iter().map(|v| (v.id.clone(), v.clone())).collect();
        for bytes in journal {
            match pb::JournalRecord::parse_from_bytes(bytes) {
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
        // Loading is not a change.
        self.changed.clear();
    }

    /// The records of every volume changed this turn, for the journal.
    pub fn take_journal(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.changed)
            .into_iter()
            .map(|id| {
                let change = match self.entries.get(&id) {
                    Some(entry) => pb::journal_record::Change::Volume(entry.volume.to_proto()),
                    None => pb::journal_record::Change::RemovedVolumeId(id),
                };
                pb::JournalRecord {
                    change: Some(change),
                    ..Default::default()
                }
                .write_to_bytes()
                .expect("encoding a journal record cannot fail")
            })
            .collect()
    }

    /// Notes for plugins' event histories, see [`Registry::note`].
    pub fn take_plugin_notes(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.plugin_notes)
    }

    /// Replies to send now that the journal is durable.
    pub fn take_outbox(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.outbox)
    }

    pub fn to_proto(&self) -> Vec<pb::Volume> {
        self.entries.values().map(|e| e.volume.to_proto()).collect()
    }

    pub fn volumes(&self) -> impl Iterator<Item = &Volume> {
        self.entries.values().map(|e| &e.volume)
    }
}
