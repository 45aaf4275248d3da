//! Claims and releases: admission against the volume's access mode and
//! its other claims, the waiters that get their answer once a claim is
//! taken or released, and the deadline of claims that keep failing.

use std::path::Path;
use std::time::Instant;

use crate::call::{CallError, ErrorKind};
use crate::csi::AccessMode;
use crate::mount::Propagation;
use crate::plugin::Registry;
use crate::volume::calls::{self, Answer};
use crate::volume::manager::{
    claim_event, error, ClaimWaiter, ReplyTo, VolumeManager, CLAIM_DEADLINE,
};
use crate::volume::model::{Admission, Claim, Step};
use crate::volume::target;

impl VolumeManager {
    pub fn claim(
        &mut self,
        req: &calls::ClaimRequest,
        reply: ReplyTo,
        registry: &Registry,
        now: Instant,
    ) {
        if self.entries.contains_key(&req.volume_id) {
            self.touch(&req.volume_id);
        }
        match self.admit(req, registry) {
            Ok(None) => {}
            Ok(Some(claim)) => {
                log::info!(
                    "Volume {}: alloc {} claims it ({})",
                    req.volume_id,
                    claim.alloc_id,
                    if claim.read_only { "read" } else { "write" }
                );
                claim_event(
                    "ClaimAsked",
                    &req.volume_id,
                    format!(
                        "alloc {} ({}, {})",
                        claim.alloc_id,
                        if claim.read_only { "read" } else { "write" },
                        claim.capability.access_mode.as_str()
                    ),
                );
                let entry = self.entries.get_mut(&req.volume_id).expect("admitted");
                entry.volume.claims.insert(claim.alloc_id.clone(), claim);
                self.changed.insert(req.volume_id.clone());
                self.admit_in_cluster(&req.volume_id, &req.alloc_id);
            }
            Err(err) => return self.outbox.push((reply, Err(err))),
        }
        let entry = self.entries.get_mut(&req.volume_id).expect("admitted");
        entry.waiters.claims.push(ClaimWaiter {
            alloc: req.alloc_id.clone(),
            reply,
            deadline: now + CLAIM_DEADLINE,
        });
        self.claim_deadlines
            .push(std::cmp::Reverse(now + CLAIM_DEADLINE));
        // An idempotent repeat of a taken claim is answered at once, once
        // this turn is durable.
        self.answer_claims(&req.volume_id, false);
    }

    /// Checks a claim against the volume's access mode and claims: the new
    /// claim, `None` for a repeat of an existing one, or why not.
    pub(in crate::volume::manager) fn admit(
        &self,
        req: &calls::ClaimRequest,
        registry: &Registry,
    ) -> Result<Option<Claim>, CallError> {
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
            let same_target = match &existing.target {
                None => req.target.is_empty(),
                Some(t) => {
                    Path::new(&req.target) == t.as_path()
                        || target::check_against(Path::new(&req.target), &self.paths)
                            .is_ok_and(|c| c.path == *t)
                }
            };
            if existing.read_only != req.read_only
                || !same_target
                || existing.propagation != propagation
            {
                return Err(refused(format!(
                    "alloc {} already claims volume {:?} differently (release it first)",
                    req.alloc_id, v.id
                )));
            }
            return Ok(None);
        }
        let target = if req.target.is_empty() {
            None
        } else {
            let checked = target::check_against(Path::new(&req.target), &self.paths)
                .map_err(|e| invalid(e.to_string()))?;
            self.check_target_unused(&checked.path)?;
            Some(checked)
        };
        let view = self
            .plugin_view(registry, &v.plugin_id)
            .ok_or_else(|| refused(format!("plugin {:?} is not registered", v.plugin_id)))?;
        if let Some(why) = view.unschedulable(v) {
            return Err(refused(format!(
                "volume {:?} is not schedulable: {why}",
                v.id
            )));
        }
        // Every claim passes here (the CLI's, a job's, the volume
        // plugin's, and in a cluster before etcd admits it), so a volume
        // on another node is refused before any RPC, as Nomad's scheduler
        // never places such a claim.
        if let Some(why) = view.topology_misfit(v) {
            return Err(refused(why));
        }
        if !v.plugin_settings.mount_group.is_empty() && !view.protocol.mount_group {
            // Made where the node had it (a Create is refused otherwise);
            // its plugin changed since. Mounted without the group, the
            // volume would refuse the writes the group was set for.
            return Err(refused(format!(
                "volume {:?} gives its mounts group {} (mount_group), and plugin {:?}'s node does not have VOLUME_MOUNT_GROUP",
                v.id, v.plugin_settings.mount_group, v.plugin_id
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
        let staging = v.staging_for_new_claim(req.read_only).map_err(|old| {
            refused(format!(
                "volume {:?} is still staged per usage by an earlier release of csi-agent \
                 ({old}), which a writer cannot use; claim it once the claims using it are \
                 released",
                v.id
            ))
        })?;
        Ok(Some(Claim {
            alloc_id: req.alloc_id.clone(),
            read_only: req.read_only,
            wanted: true,
            usage: capability.usage_name(req.read_only),
            capability: capability.clone(),
            published: Step::Absent,
            target_created: target.as_ref().is_some_and(|t| !t.exists),
            target: target.map(|t| t.path),
            propagation,
            target_mounted: Step::Absent,
            target_mount_id: None,
            staging,
            failure: None,
            admission: Admission::Local,
        }))
    }

    /// Refuses a target that another claim binds (or may still have
    /// bound), or that is inside or around one.
    pub(in crate::volume::manager) fn check_target_unused(
        &self,
        path: &Path,
    ) -> Result<(), CallError> {
        for entry in self.entries.values() {
            for claim in entry.volume.claims.values() {
                let Some(other) = &claim.target else { continue };
                if !claim.wanted && claim.target_mounted == Step::Absent {
                    continue;
                }
                if other.starts_with(path) || path.starts_with(other) {
                    return Err(error(
                        ErrorKind::FailedPrecondition,
                        format!(
                            "the target {} {} the target {} of alloc {}'s claim of volume {:?}",
                            path.display(),
                            if other == path {
                                "is already"
                            } else {
                                "overlaps"
                            },
                            other.display(),
                            claim.alloc_id,
                            entry.volume.id
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn release(&mut self, volume_id: &str, alloc: &str, reply: ReplyTo) {
        if self.entries.contains_key(volume_id) {
            self.touch(volume_id);
        }
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
                    claim_event("ReleaseAsked", volume_id, format!("alloc {alloc}"));
                    claim.wanted = false;
                    self.changed.insert(volume_id.to_string());
                    // Not durable until a job for it goes out.
                    entry.releasing_durably.remove(alloc);
                }
                // A release asked for again tries again what failed for
                // good before (the user may have mended it).
                if let Some(failure) = claim.failure.take() {
                    log::info!(
                        "Volume {volume_id}: releasing alloc {alloc}'s claim again after: {failure}"
                    );
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
    /// Answers the claim waiters whose claims are now taken; whether it
    /// answered any. `by_job`: a job's step took them, so their admission
    /// is durable (see [`Effects::acks`]).
    pub(in crate::volume::manager) fn answer_claims(&mut self, id: &str, by_job: bool) -> bool {
        let paths = self.paths.clone();
        let Some(entry) = self.entries.get_mut(id) else {
            return false;
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
        let answered = !ready.is_empty();
        for waiter in ready {
            let claim = &v.claims[&waiter.alloc];
            count_claim(id, "claim", "ok", claim, "");
            let resp = calls::Claimed {
                publish_path: paths
                    .publish(v, &claim.alloc_id, &claim.usage)
                    .to_string_lossy()
                    .into_owned(),
                target: claim
                    .target
                    .as_ref()
                    .map(|t| t.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            };
            let answers = if by_job {
                &mut self.acks
            } else {
                &mut self.outbox
            };
            answers.push((waiter.reply, Ok(Answer::Claimed(resp))));
        }
        answered
    }

    /// Answers the claims of `alloc` on volume `id` with an error: `Aborted`
    /// when a step failed terminally and the claim was rolled back,
    /// `DeadlineExceeded` when retryable failures lasted too long.
    pub(in crate::volume::manager) fn fail_claim_waiters(
        &mut self,
        id: &str,
        alloc: &str,
        kind: ErrorKind,
        reason: &str,
    ) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        let waiters = entry.take_claim_waiters(alloc);
        if let (false, Some(claim)) = (waiters.is_empty(), entry.volume.claims.get(alloc)) {
            count_claim(id, "claim", "failed", claim, reason);
        }
        for waiter in waiters {
            let err = claim_failed(id, alloc, kind, reason);
            self.outbox.push((waiter.reply, Err(err)));
        }
    }

    /// Gives up claims that kept failing past [`CLAIM_DEADLINE`].
    pub fn tick(&mut self, now: Instant) {
        let mut expired = Vec::new();
        for (id, entry) in &self.entries {
            for waiter in &entry.waiters.claims {
                if waiter.deadline <= now {
                    let reason = match (&entry.retry, &entry.waiting) {
                        (Some(retry), _) => retry.error.clone(),
                        (None, Some(waiting)) => waiting.clone(),
                        (None, None) => "it took too long".to_string(),
                    };
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
            crate::metrics::STEP_GIVE_UPS.inc(&[]);
            let reason = format!(
                "gave up after {}: {reason}",
                crate::units::format_duration(CLAIM_DEADLINE)
            );
            self.fail_claim_waiters(&id, &alloc, ErrorKind::DeadlineExceeded, &reason);
        }
    }
}

/// Counts a claim's or a release's outcome in `csi_agent_claims_total`
/// and tells it in the event stream.
pub(in crate::volume::manager) fn count_claim(
    id: &str,
    operation: &str,
    outcome: &str,
    claim: &Claim,
    why: &str,
) {
    crate::metrics::CLAIMS.inc(&[operation, outcome, claim.capability.access_mode.as_str()]);
    let kind = match (operation, outcome) {
        ("claim", "ok") => "ClaimTaken",
        ("claim", _) => "ClaimFailed",
        (_, "ok") => "ClaimReleased",
        _ => "ReleaseFailed",
    };
    let message = if why.is_empty() {
        format!("alloc {}", claim.alloc_id)
    } else {
        format!("alloc {}: {why}", claim.alloc_id)
    };
    claim_event(kind, id, message);
}

/// The error a claim's waiter hears when the claim failed.
pub(in crate::volume::manager) fn claim_failed(
    id: &str,
    alloc: &str,
    kind: ErrorKind,
    reason: &str,
) -> CallError {
    error(
        kind,
        format!("claim of volume {id:?} for alloc {alloc} failed: {reason}"),
    )
}

pub(in crate::volume::manager) fn released(done: bool, message: String) -> Answer {
    Answer::Released(calls::Released {
        released: done,
        message,
    })
}
