//! Driving the claim and release protocol: each idle volume's next steps
//! from the planner, as one job (see [`crate::volume::steps`]), its
//! forward steps marked `Pending` together before it is handed out, and
//! each step's result applied as it comes back: done, retried with
//! [`RETRY`](crate::volume::manager::RETRY) backoff, or, for a terminal
//! error on the claim path, the claims it concerns failed and released.
//! The steps a job did not get to, after one failed, get back the records
//! they had.

use std::time::Instant;

use crate::plugin::Service;
use crate::volume::manager::intake::claims::{claim_failed, count_claim, released};
use crate::volume::manager::{claim_event, volume_event, Dispatch, Entry, VolumeManager};

/// How many times a plugin may answer NodeUnpublish or NodeUnstage with
/// success and leave the mount behind before the agent unmounts its own
/// path itself: a few, in case the plugin's unmount is merely slow.
pub const CONTAIN_AFTER: u32 = 3;
use crate::call::ErrorKind;
use crate::plugin::Registry;
use crate::volume::calls::Answer;
use crate::volume::model::{Staging, Step, Volume};
use crate::volume::ops::{OpDone, OpResult, StepDone, StepError, Verdict};
use crate::volume::plan::{self, Action, Protocol};
use crate::volume::steps::{self, StepContext};

impl VolumeManager {
    /// Plans the next step of every idle volume and returns the jobs to
    /// submit after the journal is committed.
    ///
    /// Only the volumes whose plan may have changed are planned: those
    /// whose record changed this turn, those touched (a call came back, a
    /// request, their plugin turned healthy) and those whose retry fell
    /// due. Planning every volume every turn cost a storm of 1,000 claims
    /// a thousand plans per step.
    pub fn plan(&mut self, registry: &Registry, now: Instant) -> Vec<Dispatch> {
        let mut ids = std::mem::take(&mut self.to_plan);
        ids.extend(self.changed.iter().cloned());
        while let Some(std::cmp::Reverse((at, _))) = self.retries.peek() {
            if *at > now {
                break;
            }
            if let Some(std::cmp::Reverse((_, id))) = self.retries.pop() {
                ids.insert(id);
            }
        }
        let mut dispatches = Vec::new();
        for id in ids {
            if let Some(dispatch) = self.plan_volume(&id, registry, now) {
                dispatches.push(dispatch);
            }
        }
        dispatches
    }

    pub(in crate::volume::manager) fn plan_volume(
        &mut self,
        id: &str,
        registry: &Registry,
        now: Instant,
    ) -> Option<Dispatch> {
        if let Some(queued) = self.take_queued(id) {
            // A request about the volume (snapshot, usage) waited for it
            // to be idle; the protocol's next step waits for it in turn.
            return Some(queued);
        }
        loop {
            let entry = self.entries.get(id)?;
            if entry.busy.is_some() || entry.retry.as_ref().is_some_and(|r| r.at > now) {
                return None;
            }
            let view = self.plugin_view(registry, &entry.volume.plugin_id);
            let protocol = view.as_ref().map(|v| v.protocol).unwrap_or(Protocol {
                controller_publish: false,
                stage: false,
                mount_group: false,
            });
            let Some(action) = plan::next(&entry.volume, protocol) else {
                if let Some(entry) = self.entries.get_mut(id) {
                    entry.waiting = None;
                }
                self.finish_deregister(id);
                return None;
            };
            if let Action::Free { alloc } = &action {
                self.free(id, alloc);
                continue;
            }
            let service = service_of(&action);
            let plugin_id = &entry.volume.plugin_id;
            let why_not = match &view {
                None => Some(format!("plugin {plugin_id:?} is not registered")),
                Some(view) => view.unavailable(plugin_id, service).or_else(|| {
                    // ControllerPublishVolume names the node it attaches to.
                    (action == Action::ControllerPublish && view.node_id.is_empty())
                        .then(|| format!("plugin {plugin_id:?} has no node ID yet"))
                }),
            };
            if let Some(why) = why_not {
                // Resumed when an instance of the plugin turns healthy.
                let why = format!("{} waits: {why}", action.name());
                let entry = self.entries.get_mut(id)?;
                entry.wait(&why);
                if action.is_release() {
                    // Nobody should wait for an instance that may never
                    // come back: they hear why, and the release goes on.
                    for (_, reply) in entry.take_release_waiters(|_| true) {
                        let text = format!("{why} (the agent goes on once it is healthy)");
                        self.outbox.push((reply, Ok(released(false, text))));
                    }
                }
                return None;
            }
            // Unavailable unless the plugin is registered: checked above.
            let view = view?;
            let actions = self.run_of_steps(id, action, &view, registry, protocol);
            let token = self.token();
            let attacher = self.attacher();
            let entry = self.entries.get_mut(id)?;
            entry.start_job(&actions, token);
            if actions.iter().any(|a| !a.is_release()) {
                self.changed.insert(id.to_string());
            }
            let names: Vec<&str> = actions.iter().map(Action::name).collect();
            log::debug!("Volume {id}: {}", names.join(", "));
            let ctx = StepContext {
                volume: entry.volume.clone(),
                actions,
                node_id: view.node_id.clone(),
                protocol,
                paths: self.paths.clone(),
                contain: entry
                    .retry
                    .as_ref()
                    .is_some_and(|r| r.left_mount >= CONTAIN_AFTER),
                plugin_base_dir: view.base_dir.clone(),
                attacher,
            };
            return Some(Dispatch {
                plugin_id: entry.volume.plugin_id.clone(),
                service: view.service_for(service),
                job: steps::steps_job(ctx, token, self.done.clone()),
            });
        }
    }

    /// The steps one job runs from `first` on: those the planner would
    /// plan next if each one before succeeded, in the same direction, on
    /// the same plugin instance (a split plugin's ControllerPublish is a
    /// job of its own) and available now; a claim's end with the step
    /// that makes it taken, so that its answer does not wait for another
    /// claim's steps.
    fn run_of_steps(
        &self,
        id: &str,
        first: Action,
        view: &crate::volume::manager::PluginView,
        registry: &Registry,
        protocol: Protocol,
    ) -> Vec<Action> {
        let entry = &self.entries[id];
        let plugin_id = &entry.volume.plugin_id;
        let instance = |action: &Action| {
            registry
                .serving(plugin_id, view.service_for(service_of(action)))
                .map(|r| r.key())
        };
        let (release, first_instance) = (first.is_release(), instance(&first));
        let joins = |action: &Action| {
            action.is_release() == release
                && !matches!(action, Action::Free { .. })
                && instance(action) == first_instance
                && view.unavailable(plugin_id, service_of(action)).is_none()
                && (*action != Action::ControllerPublish || !view.node_id.is_empty())
        };
        run_from(&entry.volume, first, protocol, joins)
    }

    /// A released claim with nothing left on this node: forgotten, once
    /// the cluster (if any) has dropped it.
    pub(in crate::volume::manager) fn free(&mut self, id: &str, alloc: &str) {
        if !self.free_in_cluster(id, alloc) {
            self.forget_claim(id, alloc);
        }
    }

    pub(in crate::volume::manager) fn forget_claim(&mut self, id: &str, alloc: &str) {
        self.forget_lost(id, alloc);
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        if let Some(claim) = entry.volume.claims.remove(alloc) {
            count_claim(id, "release", "ok", &claim, "");
            // Whoever waits for the volume may take it now.
            self.freed.insert(id.to_string());
        }
        log::info!("Volume {id}: the claim of alloc {alloc} is released");
        self.changed.insert(id.to_string());
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut entry.waiters.releases)
            .into_iter()
            .partition(|(a, _)| a == alloc);
        entry.waiters.releases = waiting;
        let answers = if entry.releasing_durably.remove(alloc) {
            &mut self.acks
        } else {
            &mut self.outbox
        };
        for (_, reply) in done {
            answers.push((reply, Ok(released(true, String::new()))));
        }
    }

    pub(in crate::volume::manager) fn finish_deregister(&mut self, id: &str) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        if entry.deregistering && entry.volume.claims.is_empty() {
            let replies = std::mem::take(&mut entry.waiters.deregister);
            log::info!("Volume {id} deregistered");
            volume_event("Deregistered", id, "");
            self.remove(id);
            for reply in replies {
                self.outbox.push((reply, Ok(Answer::Deregistered)));
            }
        }
    }

    /// Applies a job's result.
    pub fn completed(&mut self, done: OpDone, registry: &Registry, now: Instant) {
        // Whatever came back, the volume's next step may follow.
        if !done.volume_id.is_empty() {
            self.touch(&done.volume_id);
        }
        if let Some(op) = self.pending.remove(&done.token) {
            return self.completed_request(op, done, registry);
        }
        let OpResult::Step(report) = done.result else {
            return;
        };
        let id = done.volume_id;
        let view = match self.entries.get(&id) {
            Some(entry) => self.plugin_view(registry, &entry.volume.plugin_id),
            None => return,
        };
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        if entry.busy != Some(done.token) {
            // Not the job in flight: dropping its `resume` ends it (and the
            // job does what it left itself).
            return;
        }
        if entry
            .chain
            .front()
            .is_some_and(|(a, _)| *a == report.action)
        {
            entry.chain.pop_front();
        }
        let action = report.action;
        let done = match report.result {
            Ok(done) => done,
            Err(err) => {
                end_job(entry);
                return self.step_failed(&id, &action, err, now);
            }
        };
        entry.retry = None;
        if let Some(note) = &done.contained {
            log::warn!("Plugin {}: {note}", entry.volume.plugin_id);
            self.plugin_notes
                .push((entry.volume.plugin_id.clone(), note.clone()));
        }
        claim_event("StepDone", &id, action.describe());
        mark_done(&mut entry.volume, &action, done);
        if let Action::UnbindTarget { alloc } | Action::NodeUnpublish { alloc } = &action {
            if entry.volume.claims.get(alloc).is_some_and(|c| !c.wanted) {
                entry.releasing_durably.insert(alloc.clone());
            }
        }
        let waits = report.resume.is_some();
        let mut resume = report.resume;
        let mut stopped = false;
        if waits {
            // The job asks before each RPC whether to go on: the record
            // may have changed under it (a release, a new claim), and
            // then the planner's next step is no longer the job's; or the
            // instance of that step is no longer healthy.
            let plugin_id = &entry.volume.plugin_id;
            let next = view.and_then(|view| {
                plan::next(&entry.volume, view.protocol)
                    .filter(|a| view.unavailable(plugin_id, service_of(a)).is_none())
            });
            if next.is_none() || next.as_ref() != entry.chain.front().map(|(a, _)| a) {
                log::debug!(
                    "Volume {id}: the steps planned after {} changed",
                    action.name()
                );
                // Before the volume's next job: the directories the job
                // would have made or removed while its next RPC was in
                // flight.
                report.leftover.clean();
                if let Some(resume) = resume.take() {
                    let _ = resume.send(Verdict::Stop);
                }
                stopped = true;
            }
        }
        let last = entry.chain.is_empty() || stopped;
        if last {
            end_job(entry);
        }
        // A step in the middle of its job is journalled with the next
        // record, unless the job waits for it before its next RPC (then it
        // is written now, and synced with the next sync); the job's last
        // step now, synced before the answer.
        if last || resume.is_some() {
            self.changed.insert(id.clone());
        }
        self.resumes.extend(resume);
        if self.answer_claims(&id, true) {
            self.changed.insert(id.clone());
        }
    }

    pub(in crate::volume::manager) fn step_failed(
        &mut self,
        id: &str,
        action: &Action,
        err: StepError,
        now: Instant,
    ) {
        // An RPC error names its RPC already.
        let message = match &err {
            StepError::Rpc(e) => e.to_string(),
            StepError::Local { message, .. } => format!("{}: {message}", action.name()),
            StepError::LeftMount { .. } => err.to_string(),
        };
        claim_event(
            "StepFailed",
            id,
            format!("{}: {message}", action.describe()),
        );
        if err.is_terminal() {
            let message = format!("{message} (not retried: it cannot succeed as it is)");
            if action.is_release() {
                if self.fail_release(id, action, &message) {
                    return;
                }
            } else {
                return self.fail_claims(id, action, &message);
            }
        }
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        // A stage or publish refused for want of an attachment this node
        // had (a fence detached the volume meanwhile) goes back to that
        // step: ControllerPublish again, then the rest.
        let unattached = matches!(
            &err,
            StepError::Rpc(e) if e.code == crate::csi::error::Code::FailedPrecondition
        ) && matches!(
            action,
            Action::NodeStage { .. } | Action::NodePublish { .. }
        ) && entry.volume.attachment == Step::Done;
        if unattached {
            log::warn!("Volume {id}: {message}; attaching it again first");
            entry.volume.attachment = Step::Absent;
            entry.volume.publish_context.clear();
            self.changed.insert(id.to_string());
        }
        let due = entry.schedule_retry(&err, &message, now, &mut self.jitter);
        self.retries.push(std::cmp::Reverse((due, id.to_string())));
        if action.is_release() {
            for (_, reply) in entry.take_release_waiters(|_| true) {
                let text = format!("{message} (the agent keeps retrying)");
                self.outbox.push((reply, Ok(released(false, text))));
            }
        }
    }

    /// A claim-path step failed for good: the claims it concerns are
    /// failed and released (their waiters hear why).
    pub(in crate::volume::manager) fn fail_claims(
        &mut self,
        id: &str,
        action: &Action,
        message: &str,
    ) {
        log::warn!("Volume {id}: {message}; failing the claims it concerns");
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        crate::metrics::STEP_GIVE_UPS.inc(&[]);
        for alloc in entry.fail_claims_at(action) {
            if let Some(claim) = entry.volume.claims.get(&alloc) {
                count_claim(id, "claim", "failed", claim, message);
            }
            for waiter in entry.take_claim_waiters(&alloc) {
                let err = claim_failed(id, &alloc, ErrorKind::Aborted, message);
                self.outbox.push((waiter.reply, Err(err)));
            }
        }
        self.changed.insert(id.to_string());
    }

    /// A release step failed for good: the past claims it concerns keep
    /// the reason and are left alone until released again, rather than
    /// retried forever. False when no claim is there to keep it (the step
    /// is then retried with backoff).
    pub(in crate::volume::manager) fn fail_release(
        &mut self,
        id: &str,
        action: &Action,
        message: &str,
    ) -> bool {
        log::error!("Volume {id}: {message}");
        let Some(entry) = self.entries.get_mut(id) else {
            return false;
        };
        let allocs = entry.fail_releases_at(action, message);
        if allocs.is_empty() {
            return false;
        }
        crate::metrics::STEP_GIVE_UPS.inc(&[]);
        for claim in allocs.iter().filter_map(|a| entry.volume.claims.get(a)) {
            count_claim(id, "release", "failed", claim, message);
        }
        let failed = entry.take_release_waiters(|a| allocs.iter().any(|f| f == a));
        for (_, reply) in failed {
            let text = format!("{message}; release it again once mended");
            self.outbox.push((reply, Ok(released(false, text))));
        }
        self.changed.insert(id.to_string());
        true
    }

    /// The next time the loop must wake up for the volumes: a retry falls
    /// due, a claim waiter's deadline passes, or a poll falls due.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let retry = self.retries.peek().map(|std::cmp::Reverse((at, _))| *at);
        let deadline = self.claim_deadlines.peek().map(|std::cmp::Reverse(at)| *at);
        let poll = self.signals.next_due();
        retry.into_iter().chain(deadline).chain(poll).min()
    }

    /// Gives up the claims whose deadline passed (see
    /// [`VolumeManager::tick`]); looks at the waiters only when a deadline
    /// did pass.
    pub fn expire_claims(&mut self, now: Instant) {
        let mut passed = false;
        while self
            .claim_deadlines
            .peek()
            .is_some_and(|std::cmp::Reverse(at)| *at <= now)
        {
            self.claim_deadlines.pop();
            passed = true;
        }
        if passed {
            self.tick(now);
        }
    }

    /// A plugin turned healthy: its volumes' waiting retries are due now.
    pub fn plugin_healthy(&mut self, plugin_id: &str, now: Instant) {
        self.signals.plugin_seen(plugin_id, now);
        for (id, entry) in self.entries.iter_mut() {
            if entry.volume.plugin_id == plugin_id {
                if let Some(retry) = &mut entry.retry {
                    retry.at = now;
                }
                self.to_plan.insert(id.clone());
            }
        }
    }
}

/// Which instance of the plugin runs a step: the controller's RPCs go to
/// the controller, the node's and the agent's host binds to the node.
fn service_of(action: &Action) -> Service {
    match action {
        Action::ControllerPublish | Action::ControllerUnpublish => Service::Controller,
        _ => Service::Node,
    }
}

/// The steps the planner would plan for `volume` from `first` on, if each
/// one before succeeded, while `joins` admits them; a forward run ends
/// with the step that makes a claim taken.
fn run_from(
    volume: &Volume,
    first: Action,
    protocol: Protocol,
    joins: impl Fn(&Action) -> bool,
) -> Vec<Action> {
    let mut volume = volume.clone();
    let mut actions = vec![first];
    // Bounded: each step changes the record, but a planner that asked for
    // one again must not make a job of it.
    while actions.len() < 8 {
        let last = actions.last().expect("one at least");
        mark_pending(&mut volume, last);
        mark_done(&mut volume, last, StepDone::default());
        let taken = match last {
            Action::NodePublish { alloc } | Action::BindTarget { alloc } => volume
                .claims
                .get(alloc)
                .is_some_and(|c| c.is_taken(c.target.is_some())),
            _ => false,
        };
        match plan::next(&volume, protocol) {
            Some(next) if !taken && joins(&next) && !actions.contains(&next) => actions.push(next),
            _ => break,
        }
    }
    actions
}

/// The job in flight ended: the steps it did not get to were never sent,
/// and their records are what they were before it.
fn end_job(entry: &mut Entry) {
    entry.busy = None;
    for (action, before) in std::mem::take(&mut entry.chain).into_iter().rev() {
        restore(&mut entry.volume, &action, before);
    }
}

/// What a forward step's record was before it was marked `Pending`.
pub(in crate::volume::manager) enum Before {
    Attachment(Step),
    Staging(Option<Staging>),
    Published(Step),
    TargetMounted(Step),
    /// A release step: no mark.
    Nothing,
}

/// Before a forward step's RPC: its effect becomes uncertain.
pub(in crate::volume::manager) fn mark_pending(v: &mut Volume, action: &Action) -> Before {
    match action {
        Action::ControllerPublish => {
            Before::Attachment(std::mem::replace(&mut v.attachment, Step::Pending))
        }
        Action::NodeStage { staging: key } => {
            // A staging of the per-usage layout staged again (after a
            // restart found it gone) keeps its capability; the volume's
            // one staging has the volume's widest.
            let capability = match v.stagings.get(key) {
                Some(s) => s.capability.clone(),
                None => v
                    .node_capability()
                    .cloned()
                    .expect("a volume with a claim has a capability"),
            };
            let staging = Staging {
                step: Step::Pending,
                capability,
            };
            Before::Staging(v.stagings.insert(key.clone(), staging))
        }
        Action::NodePublish { alloc } => match v.claims.get_mut(alloc) {
            Some(c) => Before::Published(std::mem::replace(&mut c.published, Step::Pending)),
            None => Before::Nothing,
        },
        Action::BindTarget { alloc } => match v.claims.get_mut(alloc) {
            Some(c) => {
                Before::TargetMounted(std::mem::replace(&mut c.target_mounted, Step::Pending))
            }
            None => Before::Nothing,
        },
        // A release step needs no mark: a step not yet absent is re-sent
        // anyway.
        _ => Before::Nothing,
    }
}

/// A step marked `Pending` that was never sent gets its record back.
fn restore(v: &mut Volume, action: &Action, before: Before) {
    match (action, before) {
        (Action::ControllerPublish, Before::Attachment(step)) => v.attachment = step,
        (Action::NodeStage { staging: key }, Before::Staging(staging)) => match staging {
            Some(staging) => {
                v.stagings.insert(key.clone(), staging);
            }
            None => {
                v.stagings.remove(key);
            }
        },
        (Action::NodePublish { alloc }, Before::Published(step)) => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.published = step;
            }
        }
        (Action::BindTarget { alloc }, Before::TargetMounted(step)) => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.target_mounted = step;
            }
        }
        _ => {}
    }
}

/// After a step succeeded.
fn mark_done(v: &mut Volume, action: &Action, done: StepDone) {
    match action {
        Action::ControllerPublish => {
            v.attachment = Step::Done;
            v.publish_context = done.publish_context.unwrap_or_default();
        }
        Action::NodeStage { staging } => {
            if let Some(s) = v.stagings.get_mut(staging) {
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
                c.target_mount_id = done.mount_id;
            }
        }
        Action::UnbindTarget { alloc } => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.target_mounted = Step::Absent;
                c.target_mount_id = None;
            }
        }
        Action::NodeUnpublish { alloc } => {
            if let Some(c) = v.claims.get_mut(alloc) {
                c.published = Step::Absent;
            }
        }
        Action::NodeUnstage { staging } => {
            v.stagings.remove(staging);
        }
        Action::ControllerUnpublish => {
            v.attachment = Step::Absent;
            v.publish_context.clear();
        }
        Action::Free { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::{AccessMode, AttachmentMode, Capability};
    use crate::mount::Propagation;
    use crate::volume::model::{Admission, Claim, StagingKey};

    const FULL: Protocol = Protocol {
        controller_publish: true,
        stage: true,
        mount_group: true,
    };

    fn capability() -> Capability {
        Capability::new(AccessMode::MultiNodeMultiWriter, AttachmentMode::FileSystem)
    }

    fn volume(claims: &[&str]) -> Volume {
        Volume {
            claims: claims
                .iter()
                .map(|alloc| (alloc.to_string(), claim(alloc)))
                .collect(),
            ..crate::volume::model::test_volume(capability())
        }
    }

    fn claim(alloc: &str) -> Claim {
        Claim {
            alloc_id: alloc.into(),
            read_only: false,
            wanted: true,
            usage: "rw".into(),
            capability: capability(),
            published: Step::Absent,
            target: Some(format!("/mnt/{alloc}").into()),
            propagation: Propagation::Private,
            target_mounted: Step::Absent,
            target_mount_id: None,
            target_created: false,
            staging: StagingKey::Volume,
            failure: None,
            admission: Admission::Local,
        }
    }

    fn publish(alloc: &str) -> Action {
        Action::NodePublish {
            alloc: alloc.into(),
        }
    }

    fn bind(alloc: &str) -> Action {
        Action::BindTarget {
            alloc: alloc.into(),
        }
    }

    fn stage() -> Action {
        Action::NodeStage {
            staging: StagingKey::Volume,
        }
    }

    /// Runs the planner to the end, each step succeeding.
    fn taken(v: &mut Volume) {
        while let Some(action) = plan::next(v, FULL) {
            mark_pending(v, &action);
            mark_done(v, &action, StepDone::default());
        }
    }

    #[test]
    fn a_claim_runs_from_controller_publish_to_its_bind_and_stops_there() {
        let v = volume(&["a1", "a2"]);
        let first = plan::next(&v, FULL).unwrap();
        assert_eq!(
            run_from(&v, first, FULL, |_| true),
            [
                Action::ControllerPublish,
                stage(),
                publish("a1"),
                bind("a1")
            ],
            "a2's steps are a job of their own"
        );
    }

    #[test]
    fn a_claim_on_an_attached_and_staged_volume_runs_its_publish_and_bind() {
        let mut v = volume(&["a1"]);
        taken(&mut v);
        v.claims.insert("a2".into(), claim("a2"));
        let first = plan::next(&v, FULL).unwrap();
        assert_eq!(
            run_from(&v, first, FULL, |_| true),
            [publish("a2"), bind("a2")]
        );
    }

    #[test]
    fn a_release_runs_to_controller_unpublish_and_leaves_freeing_to_the_loop() {
        let mut v = volume(&["a1"]);
        taken(&mut v);
        v.claims.get_mut("a1").unwrap().wanted = false;
        let first = plan::next(&v, FULL).unwrap();
        let joins = |a: &Action| !matches!(a, Action::Free { .. });
        assert_eq!(
            run_from(&v, first, FULL, joins),
            [
                Action::UnbindTarget { alloc: "a1".into() },
                Action::NodeUnpublish { alloc: "a1".into() },
                Action::NodeUnstage {
                    staging: StagingKey::Volume
                },
                Action::ControllerUnpublish,
            ]
        );
    }

    #[test]
    fn a_step_that_does_not_join_ends_the_run() {
        // A split plugin: the controller's step is a job of its own.
        let v = volume(&["a1"]);
        let controller = |a: &Action| service_of(a) == Service::Controller;
        assert_eq!(
            run_from(&v, Action::ControllerPublish, FULL, controller),
            [Action::ControllerPublish]
        );
    }

    #[test]
    fn steps_never_sent_get_their_records_back() {
        let mut v = volume(&["a1"]);
        v.claims.get_mut("a1").unwrap().published = Step::Pending;
        let before = v.clone();
        let marked: Vec<(Action, Before)> = [Action::ControllerPublish, stage(), publish("a1")]
            .into_iter()
            .map(|a| {
                let b = mark_pending(&mut v, &a);
                (a, b)
            })
            .collect();
        assert_eq!(v.attachment, Step::Pending);
        assert_eq!(v.stagings[&StagingKey::Volume].step, Step::Pending);
        for (action, b) in marked.into_iter().rev() {
            restore(&mut v, &action, b);
        }
        assert_eq!(v, before, "a publish pending from before stays pending");
    }
}
