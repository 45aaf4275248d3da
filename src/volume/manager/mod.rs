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

mod requests;
mod status;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use protobuf::Message;

use super::model::{Claim, Staging, Step, Volume};
use super::ops::{self, OpDone, OpResult, Paths, StepContext, StepError};
use super::plan::{self, Action, Protocol};
use crate::api::{ApiError, ErrorKind, Response};
use crate::csi::backoff::{Jitter, SplitMix64};
use crate::csi::types::{ControllerCapability, NodeCapability, PluginCapability};
use crate::csi::{AccessMode, Backoff, Class};
use crate::mount::Propagation;
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
    /// The token of the step in flight.
    busy: Option<u64>,
    retry: Option<Retry>,
    waiters: Waiters,
    /// Deregister once every claim is gone.
    deregistering: bool,
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
}

/// What the manager needs to know about a volume's plugin.
struct PluginView {
    healthy: bool,
    protocol: Protocol,
    node_id: String,
    has_controller: bool,
    create_delete: bool,
    stats: bool,
    accessibility: bool,
    topology: Option<BTreeMap<String, String>>,
    provider: String,
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
        stats: node(NodeCapability::GetVolumeStats),
        accessibility: fp.is_some_and(|f| {
            f.plugin_capabilities
                .contains(&PluginCapability::VolumeAccessibilityConstraints)
        }),
        topology: fp
            .and_then(|f| f.node.as_ref())
            .and_then(|n| n.accessible_topology.clone()),
        provider: fp.map(|f| f.info.name.clone()).unwrap_or_default(),
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
        }
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    fn insert(&mut self, volume: Volume) {
        let id = volume.id.clone();
        self.entries.insert(
            id.clone(),
            Entry {
                volume,
                busy: None,
                retry: None,
                waiters: Waiters::default(),
                deregistering: false,
            },
        );
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

    /// Startup: a step recorded done whose mount is gone is uncertain
    /// again (it is re-sent), and mounts under `csi/` that no record owns
    /// are unmounted.
    pub fn reconcile(&mut self, mounts: &crate::mount::MountInfo) {
        let paths = self.paths.clone();
        // One set of the mount points, rather than a scan of the whole
        // table per path: with 1,000 claims that is 2,000 scans of 2,000
        // entries, which made a restart take half a second.
        let mount_points: std::collections::HashSet<&std::path::Path> = mounts
            .entries()
            .iter()
            .map(|m| m.mount_point.as_path())
            .collect();
        let mounted = |p: &std::path::Path| mount_points.contains(p);
        let mut owned = BTreeSet::new();
        for entry in self.entries.values_mut() {
            let v = &mut entry.volume;
            let mut changed = false;
            let snapshot = v.clone();
            for (usage, staging) in v.stagings.iter_mut() {
                let path = paths.staging(&snapshot, usage);
                if staging.step == Step::Done && !mounted(&path) {
                    log::warn!(
                        "Volume {}: staging {usage} is not mounted; staging again",
                        v.id
                    );
                    staging.step = Step::Pending;
                    changed = true;
                }
                if staging.step != Step::Absent {
                    owned.insert(path);
                }
            }
            for claim in v.claims.values_mut() {
                let path = paths.publish(&snapshot, &claim.alloc_id, &claim.usage);
                if claim.published == Step::Done && !mounted(&path) {
                    log::warn!(
                        "Volume {}: the publish of alloc {} is not mounted; publishing again",
                        v.id,
                        claim.alloc_id
                    );
                    claim.published = Step::Pending;
                    changed = true;
                }
                if claim.published != Step::Absent {
                    owned.insert(path);
                }
                if let Some(target) = &claim.target {
                    if claim.target_mounted == Step::Done && !mounted(target) {
                        claim.target_mounted = Step::Pending;
                        changed = true;
                    }
                }
            }
            if changed {
                self.changed.insert(v.id.clone());
            }
        }
        let root = paths.csi_root();
        let strays: Vec<_> = mounts
            .under(&root)
            .map(|m| m.mount_point.clone())
            // The root itself is the jobs' shared bind (see `task`).
            .filter(|p| *p != root)
            // Owned if the mount or one of its parents is an owned path: a
            // set lookup per ancestor, not a scan of every owned path per
            // mount (2,000 by 2,000 with 1,000 claims: over half a second).
            .filter(|p| !p.ancestors().any(|a| owned.contains(a)))
            .collect();
        // Deepest first, so nested mounts come off before their parents.
        for path in strays.iter().rev() {
            log::warn!("Unmounting {}: no claim owns it", path.display());
            if let Err(err) = ops::unbind_target(path) {
                log::error!("Cannot unmount {}: {err}", path.display());
            }
        }
    }

    pub fn claim(
        &mut self,
        req: &api::VolumeClaimRequest,
        reply: ReplyTo,
        registry: &Registry,
        now: Instant,
    ) {
        match self.admit(req, registry) {
            Ok(None) => {}
            Ok(Some(claim)) => {
                log::info!(
                    "Volume {}: alloc {} claims it ({})",
                    req.volume_id,
                    claim.alloc_id,
                    if claim.read_only { "read" } else { "write" }
                );
                let entry = self.entries.get_mut(&req.volume_id).expect("admitted");
                entry.volume.claims.insert(claim.alloc_id.clone(), claim);
                self.changed.insert(req.volume_id.clone());
            }
            Err(err) => return self.outbox.push((reply, Err(err))),
        }
        let entry = self.entries.get_mut(&req.volume_id).expect("admitted");
        entry.waiters.claims.push(ClaimWaiter {
            alloc: req.alloc_id.clone(),
            reply,
            deadline: now + CLAIM_DEADLINE,
        });
        // An idempotent repeat of a taken claim is answered at once.
        self.answer_claims(&req.volume_id);
    }

    /// Checks a claim against the volume's access mode and claims: the new
    /// claim, `None` for a repeat of an existing one, or why not.
    fn admit(
        &self,
        req: &api::VolumeClaimRequest,
        registry: &Registry,
    ) -> Result<Option<Claim>, ApiError> {
        let invalid = |m: String| error(ErrorKind::InvalidArgument, m);
        let refused = |m: String| error(ErrorKind::FailedPrecondition, m);
        crate::id::validate("alloc ID", &req.alloc_id).map_err(|e| invalid(e.to_string()))?;
        let propagation: Propagation = if req.propagation.is_empty() {
            Propagation::Private
        } else {
            req.propagation
                .parse()
                .map_err(|e: crate::mount::Error| invalid(e.to_string()))?
        };
        let target = (!req.target.is_empty()).then(|| std::path::PathBuf::from(&req.target));
        if target.as_ref().is_some_and(|t| !t.is_absolute()) {
            return Err(invalid(format!(
                "the target {:?} must be an absolute path",
                req.target
            )));
        }
        let entry = self.entry(&req.volume_id)?;
        let v = &entry.volume;
        if entry.deregistering {
            return Err(refused(format!("volume {:?} is being deregistered", v.id)));
        }
        if v.creating.is_some() {
            return Err(refused(format!("volume {:?} is being created", v.id)));
        }
        if let Some(existing) = v.claims.get(&req.alloc_id) {
            if !existing.wanted {
                return Err(refused(format!(
                    "alloc {} is still releasing volume {:?}; claim it again once released",
                    req.alloc_id, v.id
                )));
            }
            if existing.read_only != req.read_only
                || existing.target != target
                || existing.propagation != propagation
            {
                return Err(refused(format!(
                    "alloc {} already claims volume {:?} differently (release it first)",
                    req.alloc_id, v.id
                )));
            }
            return Ok(None);
        }
        let view = plugin_view(registry, &v.plugin_id)
            .ok_or_else(|| refused(format!("plugin {:?} is not registered", v.plugin_id)))?;
        if !view.healthy {
            return Err(refused(format!(
                "volume {:?} is not schedulable: plugin {:?} is not healthy",
                v.id, v.plugin_id
            )));
        }
        let capability = v.capability_for(req.read_only).ok_or_else(|| {
            let modes: Vec<&str> = v
                .capabilities
                .iter()
                .map(|c| c.access_mode.as_str())
                .collect();
            invalid(format!(
                "volume {:?} is read-only ({}): it refuses write claims",
                v.id,
                modes.join(", ")
            ))
        })?;
        if !req.read_only
            && matches!(
                capability.access_mode,
                AccessMode::SingleNodeWriter
                    | AccessMode::SingleNodeSingleWriter
                    | AccessMode::MultiNodeSingleWriter
            )
        {
            let writer = v
                .claims
                .values()
                .find(|c| !c.read_only && (c.wanted || c.published != Step::Absent));
            if let Some(writer) = writer {
                return Err(refused(format!(
                    "volume {:?} ({}) already has a writer: alloc {}",
                    v.id, capability.access_mode, writer.alloc_id
                )));
            }
        }
        Ok(Some(Claim {
            alloc_id: req.alloc_id.clone(),
            read_only: req.read_only,
            wanted: true,
            usage: capability.usage_name(req.read_only),
            capability: capability.clone(),
            published: Step::Absent,
            target,
            propagation,
            target_mounted: Step::Absent,
        }))
    }

    pub fn release(&mut self, volume_id: &str, alloc: &str, reply: ReplyTo) {
        let Some(entry) = self.entries.get_mut(volume_id) else {
            let err = error(
                ErrorKind::NotFound,
                format!("no volume {volume_id:?} is registered"),
            );
            return self.outbox.push((reply, Err(err)));
        };
        match entry.volume.claims.get_mut(alloc) {
            None => self.outbox.push((reply, Ok(released(true, String::new())))),
            Some(claim) => {
                if claim.wanted {
                    log::info!("Volume {volume_id}: alloc {alloc} releases it");
                    claim.wanted = false;
                    self.changed.insert(volume_id.to_string());
                }
                // A retry may be waiting: release right away instead.
                entry.retry = None;
                entry.waiters.releases.push((alloc.to_string(), reply));
                self.fail_claim_waiters(
                    volume_id,
                    alloc,
                    ErrorKind::FailedPrecondition,
                    "the claim was released",
                );
            }
        }
    }

    // ---- the protocol ----

    /// Plans the next step of every idle volume and returns the jobs to
    /// submit after the journal is committed.
    pub fn plan(&mut self, registry: &Registry, now: Instant) -> Vec<Dispatch> {
        let ids: Vec<String> = self.entries.keys().cloned().collect();
        let mut dispatches = Vec::new();
        for id in ids {
            if let Some(dispatch) = self.plan_volume(&id, registry, now) {
                dispatches.push(dispatch);
            }
        }
        dispatches
    }

    fn plan_volume(&mut self, id: &str, registry: &Registry, now: Instant) -> Option<Dispatch> {
        loop {
            let entry = self.entries.get(id)?;
            if entry.busy.is_some() || entry.retry.as_ref().is_some_and(|r| r.at > now) {
                return None;
            }
            let view = plugin_view(registry, &entry.volume.plugin_id);
            let protocol = view.as_ref().map(|v| v.protocol).unwrap_or(Protocol {
                controller_publish: false,
                stage: false,
            });
            let Some(action) = plan::next(&entry.volume, protocol) else {
                self.finish_deregister(id);
                return None;
            };
            if let Action::Free { alloc } = &action {
                self.free(id, alloc);
                continue;
            }
            let Some(view) = view.filter(|v| v.healthy) else {
                // Resumed when the plugin turns healthy.
                return None;
            };
            let token = self.token();
            let entry = self.entries.get_mut(id).expect("present");
            mark_pending(&mut entry.volume, &action);
            if !action.is_release() {
                self.changed.insert(id.to_string());
            }
            entry.busy = Some(token);
            log::debug!("Volume {id}: {}", action.name());
            let ctx = StepContext {
                volume: entry.volume.clone(),
                action,
                node_id: view.node_id.clone(),
                protocol,
                paths: self.paths.clone(),
            };
            return Some(Dispatch {
                plugin_id: entry.volume.plugin_id.clone(),
                job: ops::step_job(ctx, token, self.done.clone()),
            });
        }
    }

    fn free(&mut self, id: &str, alloc: &str) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        entry.volume.claims.remove(alloc);
        log::info!("Volume {id}: the claim of alloc {alloc} is released");
        self.changed.insert(id.to_string());
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut entry.waiters.releases)
            .into_iter()
            .partition(|(a, _)| a == alloc);
        entry.waiters.releases = waiting;
        for (_, reply) in done {
            self.outbox.push((reply, Ok(released(true, String::new()))));
        }
    }

    fn finish_deregister(&mut self, id: &str) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        if entry.deregistering && entry.volume.claims.is_empty() {
            let replies = std::mem::take(&mut entry.waiters.deregister);
            log::info!("Volume {id} deregistered");
            self.remove(id);
            for reply in replies {
                self.outbox
                    .push((reply, Ok(Response::VolumeDeregister(Default::default()))));
            }
        }
    }

    /// Applies a job's result.
    pub fn completed(&mut self, done: OpDone, registry: &Registry, now: Instant) {
        if let Some(op) = self.pending.remove(&done.token) {
            return self.completed_request(op, done, registry);
        }
        let OpResult::Step(action, result) = done.result else {
            return;
        };
        let id = done.volume_id;
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        if entry.busy != Some(done.token) {
            return;
        }
        entry.busy = None;
        let outcome = match result {
            Ok(context) => Ok(context),
            Err(StepError::Rpc(err)) if action.is_release() && err.class == Class::Ignorable => {
                log::debug!("Volume {id}: {err}: already done");
                Ok(None)
            }
            Err(err) => Err(err),
        };
        match outcome {
            Ok(context) => {
                entry.retry = None;
                mark_done(&mut entry.volume, &action, context);
                self.changed.insert(id.clone());
                self.answer_claims(&id);
            }
            Err(err) => self.step_failed(&id, &action, err, now),
        }
    }

    fn step_failed(&mut self, id: &str, action: &Action, err: StepError, now: Instant) {
        let terminal = match &err {
            StepError::Rpc(e) => e.class == Class::Terminal,
            StepError::Local(_) => true,
        };
        // An RPC error names its RPC already.
        let message = match &err {
            StepError::Rpc(e) => e.to_string(),
            StepError::Local(m) => format!("{}: {m}", action.name()),
        };
        if terminal && !action.is_release() {
            log::warn!("Volume {id}: {message}; failing the claims it concerns");
            let entry = self.entries.get_mut(id).expect("present");
            let allocs: Vec<String> = entry
                .volume
                .claims
                .values()
                .filter(|c| c.wanted && !c.is_taken(c.target.is_some()))
                .filter(|c| match action {
                    Action::NodeStage { usage } => c.usage == *usage,
                    Action::NodePublish { alloc } | Action::BindTarget { alloc } => {
                        c.alloc_id == *alloc
                    }
                    _ => true,
                })
                .map(|c| c.alloc_id.clone())
                .collect();
            for alloc in &allocs {
                entry.volume.claims.get_mut(alloc).expect("listed").wanted = false;
            }
            for alloc in &allocs {
                self.fail_claim_waiters(id, alloc, ErrorKind::Aborted, &message);
            }
            self.changed.insert(id.to_string());
            return;
        }
        let entry = self.entries.get_mut(id).expect("present");
        let attempt = entry.retry.as_ref().map_or(0, |r| r.attempt);
        let delay = RETRY.delay(attempt, self.jitter.unit());
        log::warn!(
            "Volume {id}: {message}; retrying in {}",
            crate::units::format_duration(delay)
        );
        entry.retry = Some(Retry {
            at: now + delay,
            attempt: attempt.saturating_add(1),
            error: message.clone(),
            wall: SystemTime::now() + delay,
        });
        if action.is_release() {
            let replies = std::mem::take(&mut entry.waiters.releases);
            for (_, reply) in replies {
                let text = format!("{message} (the agent keeps retrying)");
                self.outbox.push((reply, Ok(released(false, text))));
            }
        }
    }

    /// Answers the claim waiters whose claims are now taken.
    fn answer_claims(&mut self, id: &str) {
        let paths = self.paths.clone();
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        let v = &entry.volume;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut entry.waiters.claims)
            .into_iter()
            .partition(|w| {
                v.claims
                    .get(&w.alloc)
                    .is_some_and(|c| c.wanted && c.is_taken(c.target.is_some()))
            });
        entry.waiters.claims = waiting;
        for waiter in ready {
            let claim = &v.claims[&waiter.alloc];
            let resp = api::VolumeClaimResponse {
                publish_path: paths
                    .publish(v, &claim.alloc_id, &claim.usage)
                    .to_string_lossy()
                    .into_owned(),
                target: claim
                    .target
                    .as_ref()
                    .map(|t| t.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                ..Default::default()
            };
            self.outbox
                .push((waiter.reply, Ok(Response::VolumeClaim(resp))));
        }
    }

    /// Answers the claims of `alloc` on volume `id` with an error: `Aborted`
    /// when a step failed terminally and the claim was rolled back,
    /// `Unavailable` when retryable failures lasted too long.
    fn fail_claim_waiters(&mut self, id: &str, alloc: &str, kind: ErrorKind, reason: &str) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        let (failed, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut entry.waiters.claims)
            .into_iter()
            .partition(|w| w.alloc == alloc);
        entry.waiters.claims = waiting;
        for waiter in failed {
            let err = error(
                kind,
                format!("claim of volume {id:?} for alloc {alloc} failed: {reason}"),
            );
            self.outbox.push((waiter.reply, Err(err)));
        }
    }

    /// Gives up claims that kept failing past [`CLAIM_DEADLINE`].
    pub fn tick(&mut self, now: Instant) {
        let mut expired = Vec::new();
        for (id, entry) in &self.entries {
            for waiter in &entry.waiters.claims {
                if waiter.deadline <= now {
                    let reason = entry
                        .retry
                        .as_ref()
                        .map_or("it took too long".to_string(), |r| r.error.clone());
                    expired.push((id.clone(), waiter.alloc.clone(), reason));
                }
            }
        }
        for (id, alloc, reason) in expired {
            if let Some(claim) = self
                .entries
                .get_mut(&id)
                .and_then(|e| e.volume.claims.get_mut(&alloc))
            {
                claim.wanted = false;
                self.changed.insert(id.clone());
            }
            if let Some(entry) = self.entries.get_mut(&id) {
                entry.retry = None;
            }
            let reason = format!(
                "gave up after {}: {reason}",
                crate::units::format_duration(CLAIM_DEADLINE)
            );
            self.fail_claim_waiters(&id, &alloc, ErrorKind::Unavailable, &reason);
        }
    }

    /// The next time a retry is due, so the loop can wake up for it.
    pub fn next_retry(&self) -> Option<Instant> {
        self.entries
            .values()
            .filter(|e| e.busy.is_none())
            .filter_map(|e| e.retry.as_ref().map(|r| r.at))
            .min()
    }

    /// A plugin turned healthy: its volumes' waiting retries are due now.
    pub fn plugin_healthy(&mut self, plugin_id: &str, now: Instant) {
        for entry in self.entries.values_mut() {
            if entry.volume.plugin_id == plugin_id {
                if let Some(retry) = &mut entry.retry {
                    retry.at = now;
                }
            }
        }
    }
}

fn released(done: bool, message: String) -> Response {
    Response::VolumeRelease(api::VolumeReleaseResponse {
        released: done,
        message,
        ..Default::default()
    })
}

/// Before a forward step's RPC: its effect becomes uncertain.
fn mark_pending(v: &mut Volume, action: &Action) {
    match action {
        Action::ControllerPublish => v.attachment = Step::Pending,
        Action::NodeStage { usage } => {
            let claim = v
                .wanted_claims()
                .find(|c| c.usage == *usage)
                .expect("the planner stages only a wanted usage");
            let staging = Staging {
                step: Step::Pending,
                capability: claim.capability.clone(),
                read_only: claim.read_only,
            };
            v.stagings.insert(usage.clone(), staging);
        }
        Action::NodePublish { alloc } => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.published = Step::Pending;
            }
        }
        Action::BindTarget { alloc } => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.target_mounted = Step::Pending;
            }
        }
        // A release step needs no mark: a step not yet absent is re-sent
        // anyway.
        _ => {}
    }
}

/// After a step succeeded.
fn mark_done(v: &mut Volume, action: &Action, context: Option<crate::csi::types::StringMap>) {
    match action {
        Action::ControllerPublish => {
            v.attachment = Step::Done;
            v.publish_context = context.unwrap_or_default();
        }
        Action::NodeStage { usage } => {
            if let Some(s) = v.stagings.get_mut(usage) {
                s.step = Step::Done;
            }
        }
        Action::NodePublish { alloc } => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.published = Step::Done;
            }
        }
        Action::BindTarget { alloc } => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.target_mounted = Step::Done;
            }
        }
        Action::UnbindTarget { alloc } => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.target_mounted = Step::Absent;
            }
        }
        Action::NodeUnpublish { alloc } => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.published = Step::Absent;
            }
        }
        Action::NodeUnstage { usage } => {
            v.stagings.remove(usage);
        }
        Action::ControllerUnpublish => {
            v.attachment = Step::Absent;
            v.publish_context.clear();
        }
        Action::Free { .. } => {}
    }
}
