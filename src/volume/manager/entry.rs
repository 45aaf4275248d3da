//! A volume's entry acting on itself: what a step's failure, a claim's
//! failure or a waiting plugin changes in one volume's record and
//! waiters. The manager looks an entry up once and hands what these
//! return (replies, allocs) to its own queues.

use std::time::{Instant, SystemTime};

use super::{ClaimWaiter, Entry, ReplyTo, Retry, RETRY};
use crate::csi::backoff::Jitter;
use crate::volume::ops::StepError;
use crate::volume::plan::Action;

impl Entry {
    /// The waiters of `alloc`'s claim, taken out of the entry.
    pub(super) fn take_claim_waiters(&mut self, alloc: &str) -> Vec<ClaimWaiter> {
        let (taken, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters.claims)
            .into_iter()
            .partition(|w| w.alloc == alloc);
        self.waiters.claims = waiting;
        taken
    }

    /// The waiters of the releases `which` picks, taken out of the entry.
    pub(super) fn take_release_waiters(
        &mut self,
        which: impl Fn(&str) -> bool,
    ) -> Vec<(String, ReplyTo)> {
        let (taken, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters.releases)
            .into_iter()
            .partition(|(alloc, _)| which(alloc));
        self.waiters.releases = waiting;
        taken
    }

    /// A claim-path step failed for good: the claims it concerns (wanted,
    /// not taken yet, through the step's staging or of its alloc) are no
    /// longer wanted. Their allocs.
    pub(super) fn fail_claims_at(&mut self, action: &Action) -> Vec<String> {
        let allocs: Vec<String> = self
            .volume
            .claims
            .values()
            .filter(|c| c.wanted && !c.is_taken(c.target.is_some()))
            .filter(|c| match action {
                Action::NodeStage { staging } => c.staging == *staging,
                Action::NodePublish { alloc } | Action::BindTarget { alloc } => {
                    c.alloc_id == *alloc
                }
                _ => true,
            })
            .map(|c| c.alloc_id.clone())
            .collect();
        for claim in self.volume.claims.values_mut() {
            if allocs.contains(&claim.alloc_id) {
                claim.wanted = false;
            }
        }
        allocs
    }

    /// A release step failed for good: the past claims it concerns keep
    /// `message` as their failure. Their allocs; none when no claim is
    /// there to keep it.
    pub(super) fn fail_releases_at(&mut self, action: &Action, message: &str) -> Vec<String> {
        let allocs: Vec<String> = self
            .volume
            .claims
            .values()
            .filter(|c| !c.wanted && c.failure.is_none())
            .filter(|c| match action {
                Action::UnbindTarget { alloc } | Action::NodeUnpublish { alloc } => {
                    c.alloc_id == *alloc
                }
                Action::NodeUnstage { staging } => c.staging == *staging,
                _ => true,
            })
            .map(|c| c.alloc_id.clone())
            .collect();
        for claim in self.volume.claims.values_mut() {
            if allocs.contains(&claim.alloc_id) {
                claim.failure = Some(message.to_string());
            }
        }
        allocs
    }

    /// The next step waits for its plugin, `why`: told once, and shown by
    /// `volume status` until it goes on.
    pub(super) fn wait(&mut self, why: &str) {
        if self.waiting.as_deref() != Some(why) {
            log::info!("Volume {}: {why}", self.volume.id);
            self.waiting = Some(why.to_string());
        }
    }

    /// A job of `actions` goes out as `token`: one record makes each of
    /// its forward steps `Pending` before the first RPC, and what each
    /// was before is kept, for the steps the job does not get to.
    pub(super) fn start_job(&mut self, actions: &[Action], token: u64) {
        self.waiting = None;
        for action in actions {
            let before = super::engine::protocol::mark_pending(&mut self.volume, action);
            self.chain.push_back((action.clone(), before));
        }
        self.busy = Some(token);
    }

    /// The next step is retried after [`RETRY`]'s backoff from the last
    /// attempt: when it falls due.
    pub(super) fn schedule_retry(
        &mut self,
        err: &StepError,
        message: &str,
        now: Instant,
        jitter: &mut impl Jitter,
    ) -> Instant {
        let previous = self.retry.take();
        let attempt = previous.as_ref().map_or(0, |r| r.attempt);
        let left_mount = match err {
            StepError::LeftMount { .. } => previous.as_ref().map_or(0, |r| r.left_mount) + 1,
            _ => 0,
        };
        let delay = RETRY.delay(attempt, jitter.unit());
        crate::metrics::STEP_RETRIES.inc(&[]);
        log::warn!(
            "Volume {}: {message}; retrying in {}",
            self.volume.id,
            crate::units::format_duration(std::time::Duration::from_millis(
                delay.as_millis() as u64
            ))
        );
        self.retry = Some(Retry {
            at: now + delay,
            attempt: attempt.saturating_add(1),
            error: message.to_string(),
            wall: SystemTime::now() + delay,
            left_mount,
        });
        now + delay
    }
}
