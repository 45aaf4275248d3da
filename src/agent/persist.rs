//! Persisting each loop turn: plan, commit, then act; and what happens
//! when the state cannot be written.
//!
//! Every loop turn ends in [`Agent::end_turn`]: the volumes' next steps are
//! planned, the turn's changes are made durable (the changed volume records
//! in one journal sync, or a whole new snapshot when something outside the
//! journal changed or the journal has grown large), and only then are the
//! planned plugin jobs submitted, the jobs waiting for a step's outcome to
//! be recorded resumed, and the turn's replies sent.
//!
//! A turn whose only effects are such resumes writes its records without
//! a sync ([`crate::state::Store::append_unsynced`]): a resumed job needs
//! the outcomes of its RPCs so far to survive the agent being killed, so
//! that the next agent does not send them again, and the page cache keeps
//! them through that. Their sync is the next one. So do acknowledgements:
//! a claim answered as taken at the end of its job, a claim answered as
//! freed after a job released it. What they tell was decided by a record
//! synced before the job went out (the admission, the release); should a
//! power cut take the records after it, the next start finds the steps
//! `Pending` and does them again, to the same end (see
//! [`crate::volume::manager::Effects::acks`]). So a claim and
//! a release each cost one sync, as the record a bare CSI client would
//! keep. Whatever else a turn does (an answer that decides something, a
//! job submitted, an op for etcd, or nothing but records) waits for a
//! sync, as before; a turn with neither effects nor records syncs nothing.
//!
//! # When the state cannot be written
//!
//! A write can fail (`ENOSPC`, `EDQUOT`, `EIO`, ...). Nothing may then be
//! acknowledged, nor any plugin job submitted, that depends on a state
//! that is not on disk: a SIGKILL would lose it, and with it the records
//! of volumes created in the plugin or of mounts made for claims. So the
//! turn's [`Effect`]s stay in the [`Gate`], and the agent is in the
//! *cannot persist* state:
//!
//! ```text
//!            write fails                      retry fails (100 ms doubling to 5 s)
//! persisted ─────────────► cannot persist ─────────────────┐
//!     ▲                      │    ▲                         │
//!     │   a write succeeds:  │    └─────────────────────────┘
//!     └──────────────────────┘
//!         held effects are carried out, in order
//! ```
//!
//! While it cannot persist, the agent:
//! - refuses every call that would change the state (see
//!   [`crate::api::Access`]) at once, naming the data dir and the errno,
//!   and changes nothing;
//! - answers reads (`plugin status`, `volume status`, `job status`,
//!   `alloc logs`) from memory, as always;
//! - goes on applying what it already started (plugin results, health,
//!   task exits), but holds every reply and plugin job that follows from
//!   them;
//! - writes a whole snapshot again when the [`PERSIST_RETRY`] backoff is
//!   due, waking up for it by itself. The first write that succeeds makes
//!   everything durable at once, and the held effects go out.
//!
//! A call held when its turn could not be written is answered once space
//! returns, or, if the agent is killed before, never: then it did not
//! happen, as far as the state on disk knows, and no plugin call or mount
//! that depends on it was made.

use std::path::Path;
use std::time::{Duration, Instant};

use super::Agent;
use crate::call::Reply;
use crate::call::{CallError, ErrorKind};
use crate::csi::{Backoff, Client, Endpoint};
use crate::plugin::PluginRecord;
use crate::proto::state as statepb;
use crate::volume::manager::Dispatch;

/// Fold the journal into a new snapshot once it is half as large as the
/// snapshot, and at least this large. A snapshot costs in proportion to
/// the whole state: at a fixed size, a storm of claims on 10,000 volumes
/// (a 7 MB state) would write the whole state again for every 1 MiB of
/// records, which grows with the square of the volumes. Relative to the
/// snapshot, writing snapshots costs at most twice what writing the
/// records does, and a start reads at most one and a half times the
/// state (P4L: a start with 10,000 claims is to take under a second).
const COMPACT_JOURNAL_BYTES: u64 = 1 << 20;

/// Whether a journal of `journal` bytes is folded into a new snapshot,
/// the last one `snapshot` bytes (see [`COMPACT_JOURNAL_BYTES`]).
fn compaction_due(journal: u64, snapshot: u64) -> bool {
    journal > COMPACT_JOURNAL_BYTES.max(snapshot / 2)
}

/// How soon a failed write is tried again: 100 ms doubling to 5 s. The
/// ceiling of each step, without jitter: there is one writer, and nobody
/// to spread out from.
pub const PERSIST_RETRY: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

/// Something a turn does that depends on the turn's state being durable.
pub(super) enum Effect {
    /// A job for a plugin's workers.
    Submit(Dispatch),
    /// An answer to a control API call.
    Reply(Reply),
    /// An answer whose outcome earlier durable records decide (see
    /// [`crate::volume::manager::Effects::acks`]): it needs
    /// this turn's records written, not synced.
    Acknowledge(Reply),
    /// An op for the cluster's etcd (see `volume::manager::cluster`).
    Cluster(Box<crate::cluster::ops::Op>),
    /// A job of protocol steps waiting for a step's outcome to be durable
    /// before its next RPC (see `volume::steps`).
    Resume(crossbeam_channel::Sender<crate::volume::ops::Verdict>),
    /// Events of the turn, told once what they tell is durable.
    Publish(Vec<crate::events::Draft>),
}

impl Effect {
    /// Whether the effect needs the turn's records only written: a job
    /// resumed between two RPCs, an acknowledgement, the turn's events
    /// (they tell what happened once an agent crash cannot lose it; a step
    /// in the middle of a job must not cost a sync for its event).
    pub(super) fn written_suffices(&self) -> bool {
        matches!(
            self,
            Effect::Resume(_) | Effect::Acknowledge(_) | Effect::Publish(_)
        )
    }
}

/// Why the state cannot be persisted, and when to try again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Failing {
    /// What the write ran into, as an operator reads it: the errno's text
    /// when there is one, e.g. `No space left on device (os error 28)`.
    pub(super) cause: String,
    /// Failed writes so far.
    pub(super) failures: u32,
    /// When the next write is due.
    pub(super) retry_at: Instant,
}

/// The effects of the turns whose state is not durable yet, in the order
/// they were made, and whether the agent can persist at all.
#[derive(Debug)]
pub(super) struct Gate<E> {
    held: Vec<E>,
    failing: Option<Failing>,
}

impl<E> Gate<E> {
    pub(super) fn new() -> Gate<E> {
        Gate {
            held: Vec::new(),
            failing: None,
        }
    }

    /// Holds an effect of this turn, behind those held before.
    pub(super) fn hold(&mut self, effect: E) {
        self.held.push(effect);
    }

    /// Whether some effect is held, and every one held is `only`'s.
    pub(super) fn holds_only(&self, only: impl Fn(&E) -> bool) -> bool {
        !self.held.is_empty() && self.held.iter().all(only)
    }

    /// Whether the turn's write must be synced: when it holds an effect
    /// that needs more than a write, or records and no effect (a record
    /// nobody waits for is still made durable, with everything written
    /// unsynced before it). A turn with neither syncs nothing.
    pub(super) fn needs_sync(
        &self,
        has_records: bool,
        written_suffices: impl Fn(&E) -> bool,
    ) -> bool {
        if self.held.is_empty() {
            return has_records;
        }
        !self.holds_only(written_suffices)
    }

    /// Whether the turn ending now should write: always while the agent
    /// can persist; while it cannot, only once the retry is due, so that a
    /// full disk is not hit at every turn.
    pub(super) fn should_write(&self, now: Instant) -> bool {
        self.failing.as_ref().map_or(true, |f| f.retry_at <= now)
    }

    /// Every turn so far is durable: the agent can persist again, and the
    /// held effects are carried out, in order.
    pub(super) fn persisted(&mut self) -> Vec<E> {
        self.failing = None;
        std::mem::take(&mut self.held)
    }

    /// A write failed with `cause`: everything stays held, and the next
    /// write is due after the [`PERSIST_RETRY`] backoff.
    pub(super) fn failed(&mut self, cause: String, now: Instant) {
        let failures = self.failing.as_ref().map_or(0, |f| f.failures) + 1;
        self.failing = Some(Failing {
            cause,
            failures,
            retry_at: now + PERSIST_RETRY.ceiling(failures - 1),
        });
    }

    /// Why the agent cannot persist, if it cannot.
    pub(super) fn failing(&self) -> Option<&Failing> {
        self.failing.as_ref()
    }

    /// When the loop must wake up to write again, if it cannot persist.
    pub(super) fn next_retry(&self) -> Option<Instant> {
        self.failing.as_ref().map(|f| f.retry_at)
    }

    pub(super) fn held(&self) -> usize {
        self.held.len()
    }
}

/// The answer to a call that would change the state while the state in
/// `data_dir` cannot be persisted because of `cause`.
pub(super) fn refusal(data_dir: &Path, cause: &str) -> CallError {
    CallError::new(
        ErrorKind::FailedPrecondition,
        format!(
            "cannot persist the state in {}: {cause}; nothing was changed",
            data_dir.display()
        ),
    )
}

/// What an operator must fix: the errno underneath, else the whole chain.
fn cause(err: &crate::state::Error) -> String {
    match err.io_error() {
        Some(io) => io.to_string(),
        None => crate::error_chain(err),
    }
}

impl Agent {
    /// The end of every loop turn: plan the volumes' next steps, make this
    /// turn's changes durable (one journal sync, or a new snapshot), then
    /// submit the planned jobs and send the replies.
    pub(super) fn end_turn(&mut self) {
        // The turn's start reports: a snapshot this turn writes has their
        // pids (and clears the due time); else one within the bound does.
        // The writers' guard, though, learns of them this turn: a task
        // holding a write claim must be stopped by the guard if this agent
        // dies a moment from now, snapshot or not.
        if self.allocs.take_unsaved_starts() {
            self.writers_may_have_changed();
            if self.starts_due.is_none() {
                self.starts_due = Some(Instant::now() + crate::task::STARTS_SAVED_WITHIN);
            }
        }
        // Their processes run already: the guard's file goes first,
        // before the turn's journal sync, which a loaded disk makes slow.
        self.sync_guard();
        self.sync_services();
        // Tasks may claim or release volumes, which plans and journals
        // again; each round makes progress, and a few always suffice.
        for _ in 0..8 {
            self.give_up_lost_claims();
            self.commit_turn();
            let progressed = self
                .allocs
                .step(&mut self.volumes, &self.registry, Instant::now());
            self.plugin_effects();
            if self.allocs.take_dirty() {
                self.dirty = true;
            }
            // While the state cannot be persisted it stays dirty; another
            // round would not write it.
            let to_write = self.dirty && self.gate.failing().is_none();
            if !progressed && !to_write {
                break;
            }
        }
        if self.dirty {
            self.writers_may_have_changed();
        }
        self.sync_guard();
        // Events told after the turn's last write (a task event that
        // changed nothing to persist): out now, unless writes fail, and
        // then after the turns held before them.
        let late = crate::events::take();
        if late.is_empty() {
        } else if self.gate.failing().is_some() {
            self.gate.hold(Effect::Publish(late));
        } else {
            self.events.publish(late);
        }
    }

    pub(super) fn commit_turn(&mut self) {
        let now = Instant::now();
        if self.allocs.take_dirty() {
            self.dirty = true;
        }
        let planned = self.volumes.plan(&self.registry, now);
        let creates = self.volumes.resume_creates(&self.registry, now);
        for dispatch in planned.into_iter().chain(creates) {
            self.gate.hold(Effect::Submit(dispatch));
        }
        let effects = self.volumes.take_effects();
        self.note_plugins(effects.plugin_notes);
        // A claim that waits for a volume another claim held is asked
        // again by the task runner's next step, in this turn.
        self.allocs.volumes_freed(&effects.freed, now);
        let records = effects.journal;
        if self.dirty || !records.is_empty() {
            // Claims or tasks changed: so may have the guard's writers.
            self.writers_may_have_changed();
        }
        for (to, answer) in effects.replies {
            self.gate.hold(Effect::Reply(Reply::new(to, answer)));
        }
        for (to, answer) in effects.acks {
            self.gate.hold(Effect::Acknowledge(Reply::new(to, answer)));
        }
        for resume in effects.resumes {
            self.gate.hold(Effect::Resume(resume));
        }
        for op in effects.cluster {
            self.gate.hold(Effect::Cluster(Box::new(op)));
        }
        let events = crate::events::take();
        if !events.is_empty() {
            self.gate.hold(Effect::Publish(events));
        }
        if !self.gate.should_write(now) {
            // The snapshot of the next write covers this turn's records.
            return;
        }
        // Resumed jobs and acknowledgements need the turn's records
        // written, not synced (see the module docs); anything else needs
        // them durable. A turn with neither effects nor records (a step
        // reported in the middle of a job that does not wait for it)
        // leaves the unsynced records to the sync of the turn that needs
        // them.
        let sync = self
            .gate
            .needs_sync(!records.is_empty(), Effect::written_suffices);
        crate::trace::point(if sync { "write-sync" } else { "write" }, "");
        let written = self.write(&records, sync);
        crate::trace::point("written", "");
        match written {
            Ok(()) => {
                if let Some(failing) = self.gate.failing() {
                    log::info!(
                        "The state is persisted again in {} (after {} failed writes); sending the {} held answers and plugin jobs",
                        self.options.config.data_dir.display(),
                        failing.failures,
                        self.gate.held()
                    );
                }
                for effect in self.gate.persisted() {
                    self.carry_out(effect);
                }
            }
            Err(err) => {
                // A snapshot covers what the journal could not take.
                self.dirty = true;
                let cause = cause(&err);
                let before = self.gate.failing().map(|f| f.cause.clone());
                self.gate.failed(cause.clone(), now);
                let delay = self.gate.next_retry().unwrap_or(now) - now;
                let data_dir = self.options.config.data_dir.display();
                if before.as_deref() == Some(cause.as_str()) {
                    log::debug!(
                        "Still cannot persist the state: {}; retrying in {}",
                        crate::error_chain(&err),
                        crate::units::format_duration(delay)
                    );
                } else {
                    log::error!(
                        "Cannot persist the state in {data_dir}: {}; refusing changes and holding {} answers and plugin jobs until a write succeeds (retrying in {})",
                        crate::error_chain(&err),
                        self.gate.held(),
                        crate::units::format_duration(delay)
                    );
                }
            }
        }
    }

    /// Makes the state durable: the turn's journal `records`, or a whole
    /// snapshot when something outside the journal changed, the journal is
    /// large, or an earlier write failed. Without `sync`, the records are
    /// only written, and durable with the next sync; with it, the records
    /// earlier turns wrote without one are made durable too, also in a turn
    /// with no records of its own.
    fn write(&mut self, records: &[Vec<u8>], sync: bool) -> Result<(), crate::state::Error> {
        if self.dirty || compaction_due(self.store.journal_bytes(), self.store.snapshot_bytes()) {
            self.store.save(&self.state())?;
            self.dirty = false;
            // It has every pid so far.
            self.starts_due = None;
        } else if sync {
            self.store.append(records)?;
        } else {
            self.store.append_unsynced(records)?;
        }
        Ok(())
    }

    /// Submits a job or sends a reply whose state is durable.
    fn carry_out(&mut self, effect: Effect) {
        match effect {
            Effect::Submit(dispatch) => self.submit(dispatch),
            Effect::Publish(events) => self.events.publish(events),
            // The caller may have given up; that is not the loop's problem.
            Effect::Reply(reply) | Effect::Acknowledge(reply) => {
                crate::trace::point("reply", "");
                reply.send();
            }
            Effect::Cluster(mut op) => {
                // A claim carries the node's promise to stop its writers
                // only if its alloc's tasks are this agent's to stop: a
                // `volume claim` from the command line has no task here.
                if let crate::cluster::ops::Op::Admit { request, .. } = &mut *op {
                    if !self.allocs.runs(&request.alloc_id) {
                        request.promise = None;
                    }
                }
                if let Some(cluster) = &self.cluster {
                    cluster.ops.submit(*op);
                }
            }
            // A job that gave up waiting is not the loop's problem either.
            Effect::Resume(resume) => {
                crate::trace::point("resume", "");
                let _ = resume.send(crate::volume::ops::Verdict::GoOn);
            }
        }
    }

    /// Submits a job now to the workers of the instance of its plugin that
    /// serves its service: a split plugin's controller or node.
    pub(super) fn submit(&mut self, dispatch: Dispatch) {
        let Some(dispatch) = self.relayed(dispatch) else {
            return;
        };
        let key = self
            .registry
            .serving(&dispatch.plugin_id, dispatch.service)
            .map(|r| r.key());
        let job = dispatch.job;
        match key.and_then(|key| self.instances.get_mut(&key)) {
            // The instance's own controller, if the job calls one.
            Some(running) => running.instance.submit(Box::new(move |client: &Client| {
                job(client, client.controller())
            })),
            None => {
                log::warn!(
                    "No running {} of plugin {} for a volume operation: its calls fail as unavailable",
                    dispatch.service,
                    dispatch.plugin_id
                );
                let name = format!("unserved-{}", dispatch.plugin_id);
                self.run_unattached(name, move |client: &Client| {
                    job(client, client.controller())
                });
            }
        }
    }

    /// Runs a volume job that no instance's worker can take on a thread of
    /// its own, with a client to nowhere (nothing listens on `/dev/null`):
    /// every call it makes to it fails with UNAVAILABLE, which a claim's
    /// protocol retries and a request's caller hears, and the job reports
    /// as any job does. Dropped instead, it would never report, and its
    /// volume would stay busy with it for good.
    pub(super) fn run_unattached(
        &mut self,
        name: String,
        job: impl FnOnce(&Client) + Send + 'static,
    ) {
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            let nowhere = Endpoint::from_path("/dev/null").expect("an absolute, short path");
            job(&Client::new(&nowhere))
        });
        match spawned {
            Ok(thread) => self.errands.keep(thread),
            Err(err) => log::error!("Cannot start a thread for a volume job: {err}"),
        }
    }

    pub(super) fn state(&self) -> statepb::State {
        statepb::State {
            plugins: self.registry.list().map(PluginRecord::to_proto).collect(),
            volumes: self.volumes.to_proto(),
            jobs: self.allocs.jobs_to_proto(),
            allocs: self.allocs.allocs_to_proto(),
            job_index: self.allocs.job_index(),
            ..Default::default()
        }
    }

    /// Shutdown's last snapshot. The answers it made durable are sent;
    /// held plugin jobs are not, nor resumed (the instances are stopping):
    /// their steps are `Pending` in the state, and the next start sends
    /// them again.
    pub(super) fn persist_at_shutdown(&mut self) {
        match self.store.save(&self.state()) {
            Ok(()) => {
                self.dirty = false;
                for effect in self.gate.persisted() {
                    if let Effect::Reply(reply) | Effect::Acknowledge(reply) = effect {
                        reply.send();
                    }
                }
            }
            Err(err) => log::error!(
                "Cannot persist the state in {} at shutdown: {}; the next start has the state of the last write that succeeded, and {} answers were never sent",
                self.options.config.data_dir.display(),
                crate::error_chain(&err),
                self.gate.held()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn effects_of_a_durable_turn_go_out_in_order() {
        let mut gate = Gate::new();
        let now = Instant::now();
        assert!(gate.should_write(now));
        gate.hold(1);
        gate.hold(2);
        assert_eq!(gate.persisted(), [1, 2]);
        assert_eq!(gate.persisted(), Vec::<i32>::new());
        assert_eq!(gate.failing(), None);
    }

    #[test]
    fn effects_of_a_failed_write_are_held_until_a_write_succeeds() {
        let mut gate = Gate::new();
        let now = Instant::now();
        gate.hold("create v1");
        gate.failed("No space left on device (os error 28)".into(), now);
        // Later turns' effects depend on the state that was not written:
        // they wait behind the first.
        gate.hold("claim v0");
        assert_eq!(gate.held(), 2);
        let failing = gate.failing().unwrap();
        assert_eq!(failing.cause, "No space left on device (os error 28)");
        assert_eq!(failing.failures, 1);
        gate.failed("No space left on device (os error 28)".into(), now);
        assert_eq!(gate.held(), 2);
        assert_eq!(gate.persisted(), ["create v1", "claim v0"]);
        assert_eq!(gate.failing(), None);
        assert!(gate.should_write(now));
    }

    #[test]
    fn the_journal_is_folded_once_it_outgrows_half_the_snapshot_and_1_mib() {
        const MIB: u64 = 1 << 20;
        assert!(!compaction_due(MIB, 0));
        assert!(compaction_due(MIB + 1, 0));
        assert!(compaction_due(MIB + 1, 1000), "a small state: 1 MiB");
        assert!(!compaction_due(3 * MIB, 8 * MIB), "a large state: half");
        assert!(compaction_due(4 * MIB + 1, 8 * MIB));
    }

    #[test]
    fn a_turn_holding_only_resumes_is_told_apart() {
        let mut gate = Gate::new();
        assert!(!gate.holds_only(|_: &&str| true), "no effect: no exception");
        gate.hold("resume");
        assert!(gate.holds_only(|e| *e == "resume"));
        gate.hold("reply");
        assert!(!gate.holds_only(|e| *e == "resume"));
    }

    #[test]
    fn a_turn_syncs_unless_its_effects_need_only_a_write() {
        let written_suffices = |e: &&str| *e == "resume" || *e == "ack";
        let mut gate = Gate::new();
        assert!(!gate.needs_sync(false, written_suffices), "nothing to do");
        assert!(gate.needs_sync(true, written_suffices), "records alone");
        gate.hold("resume");
        gate.hold("ack");
        assert!(!gate.needs_sync(true, written_suffices));
        gate.hold("reply");
        assert!(gate.needs_sync(true, written_suffices));
        gate.persisted();
        gate.hold("submit");
        assert!(gate.needs_sync(false, written_suffices));
    }

    #[test]
    fn only_resumes_and_acknowledgements_need_a_write_alone() {
        let (reply, _) = crossbeam_channel::bounded(1);
        let (resume, _) = crossbeam_channel::bounded(1);
        let ack = |reply: crossbeam_channel::Sender<crate::call::Answer<()>>| {
            Reply::new(reply.into(), Err(CallError::new(ErrorKind::Internal, "x")))
        };
        assert!(Effect::Resume(resume).written_suffices());
        assert!(Effect::Acknowledge(ack(reply.clone())).written_suffices());
        assert!(!Effect::Reply(ack(reply)).written_suffices());
    }

    #[test]
    fn a_failed_write_is_retried_with_backoff_from_100ms_to_5s() {
        let mut gate: Gate<()> = Gate::new();
        let now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..9 {
            gate.failed("Input/output error (os error 5)".into(), now);
            delays.push(gate.next_retry().unwrap() - now);
        }
        let expected = [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000].map(ms);
        assert_eq!(delays, expected);
        assert!(!gate.should_write(now));
        assert!(!gate.should_write(now + ms(4999)));
        assert!(gate.should_write(now + ms(5000)));
    }

    #[test]
    fn a_gate_that_can_persist_needs_no_wake_up() {
        let mut gate: Gate<()> = Gate::new();
        assert_eq!(gate.next_retry(), None);
        gate.failed("Disk quota exceeded (os error 122)".into(), Instant::now());
        assert!(gate.next_retry().is_some());
        gate.persisted();
        assert_eq!(gate.next_retry(), None);
    }

    #[test]
    fn a_refusal_names_the_data_dir_and_the_errno() {
        let err = refusal(
            Path::new("/var/lib/csi-agent"),
            "No space left on device (os error 28)",
        );
        assert_eq!(err.kind, ErrorKind::FailedPrecondition);
        assert_eq!(
            err.message,
            "cannot persist the state in /var/lib/csi-agent: No space left on device (os error 28); nothing was changed"
        );
    }
}
