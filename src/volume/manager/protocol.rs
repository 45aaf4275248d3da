//! Driving the claim and release protocol: each idle volume's next step
//! from the planner, marked `Pending` before its job is handed out, and
//! the job's result applied when it comes back: done, retried with
//! [`RETRY`](super::RETRY) backoff, or, for a terminal error on the claim
//! path, the claims it concerns failed and released.

use std::time::{Instant, SystemTime};

use super::claims::released;
use super::{plugin_view, Dispatch, Retry, VolumeManager, RETRY};
use crate::api::{ErrorKind, Response};
use crate::csi::backoff::Jitter;
use crate::csi::Class;
use crate::plugin::Registry;
use crate::volume::model::{Staging, Step, Volume};
use crate::volume::ops::{self, OpDone, OpResult, StepContext, StepError};
use crate::volume::plan::{self, Action, Protocol};

impl VolumeManager {
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

    pub(super) fn plan_volume(
        &mut self,
        id: &str,
        registry: &Registry,
        now: Instant,
    ) -> Option<Dispatch> {
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

    pub(super) fn free(&mut self, id: &str, alloc: &str) {
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

    pub(super) fn finish_deregister(&mut self, id: &str) {
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

    pub(super) fn step_failed(&mut self, id: &str, action: &Action, err: StepError, now: Instant) {
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
