//! The volume hook: claims an alloc's `csi` volumes through the volume
//! manager, retries refused claims with backoff, and fails the alloc on a
//! terminal refusal; and, on release, unmounts what a task left inside a
//! volume it shared with the host.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, TryRecvError};

use super::{Alloc, Allocs, TaskState, UseState, VolumeSource};
use crate::call::{CallError, ErrorKind};
use crate::csi::backoff::Jitter;
use crate::csi::Backoff;
use crate::mount::{MountInfo, Mounter, SysMounter, UnmountMode};
use crate::units::format_duration;
use crate::volume::calls::{Answer, ClaimRequest};
use crate::volume::manager::VolumeManager;

/// The volume hook's retry policy for refused claims.
const CLAIM_RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

impl Allocs {
    /// The volume hook: claims what is not claimed yet, when its retry is
    /// due.
    pub(super) fn claim_volumes(
        &mut self,
        alloc: &mut Alloc,
        volumes: &mut VolumeManager,
        registry: &crate::plugin::Registry,
        now: Instant,
    ) -> bool {
        let mut changed = false;
        for v in &mut alloc.volumes {
            if v.source != VolumeSource::Csi || v.state != UseState::Unclaimed {
                continue;
            }
            if v.retry_at.is_some_and(|at| at > now) {
                continue;
            }
            let (reply, answer) = bounded(1);
            let req = ClaimRequest {
                volume_id: v.volume_id.clone(),
                alloc_id: alloc.id.clone(),
                read_only: v.read_only,
                ..Default::default()
            };
            volumes.claim(&req, reply.into(), registry, now);
            v.state = UseState::Claiming;
            v.answer = Some(answer);
            v.retry_at = None;
            changed = true;
        }
        changed
    }

    /// Reads the answers to the claims in flight.
    pub(super) fn poll_claims(&mut self, alloc: &mut Alloc, now: Instant) -> bool {
        let mut changed = false;
        let mut events = Vec::new();
        let mut fatal = None;
        for v in &mut alloc.volumes {
            let Some(answer) = &v.answer else { continue };
            let result = match answer.try_recv() {
                Err(TryRecvError::Empty) => continue,
                Ok(result) => result,
                Err(TryRecvError::Disconnected) => Err(CallError::new(
                    ErrorKind::Unavailable,
                    "the claim was dropped",
                )),
            };
            v.answer = None;
            changed = true;
            match result {
                Ok(Answer::Claimed(resp)) => {
                    v.state = UseState::Claimed {
                        publish_path: PathBuf::from(resp.publish_path),
                    };
                    v.failures = 0;
                    v.message.clear();
                    events.push(format!("claimed volume {:?}", v.volume_id));
                }
                Ok(_) => unreachable!("a claim is answered with a claim"),
                Err(err) => {
                    let retryable = matches!(
                        err.kind,
                        ErrorKind::FailedPrecondition
                            | ErrorKind::Unavailable
                            | ErrorKind::DeadlineExceeded
                            | ErrorKind::Internal
                    );
                    v.message = err.message.clone();
                    if retryable && !alloc.stop_wanted {
                        let delay = CLAIM_RETRY.delay(v.failures, self.jitter.unit());
                        v.failures += 1;
                        v.state = UseState::Unclaimed;
                        v.retry_at = Some(now + delay);
                        events.push(format!(
                            "claim of volume {:?} refused: {}; retrying in {}",
                            v.volume_id,
                            err.message,
                            format_duration(delay)
                        ));
                    } else {
                        v.state = UseState::Released;
                        if !alloc.stop_wanted {
                            fatal = Some(format!(
                                "claim of volume {:?} failed: {}",
                                v.volume_id, err.message
                            ));
                        }
                    }
                }
            }
        }
        for message in events {
            for task in &mut alloc.tasks {
                task.event("volumes", message.clone());
            }
        }
        if let Some(message) = fatal {
            log::warn!("Alloc {}: {message}", alloc.id);
            alloc.message = message.clone();
            for task in &mut alloc.tasks {
                task.event("failed", message.clone());
                if !matches!(task.state, TaskState::Running | TaskState::Starting) {
                    task.state = TaskState::Dead;
                }
                task.failed = true;
            }
        }
        changed
    }
}

/// Unmounts, deepest first, whatever a task mounted inside a volume it
/// shared with the host (`bidirectional`): the volume's own unpublish
/// would fail on them.
pub(super) fn unmount_below(mounts: &MountInfo, publish_path: &Path) {
    let below: BTreeSet<PathBuf> = crate::order::set(
        mounts
            .under(publish_path)
            .map(|m| m.mount_point.clone())
            .filter(|p| p != publish_path),
    );
    for path in below.iter().rev() {
        log::info!(
            "Unmounting {}: a task mounted it inside its volume",
            path.display()
        );
        if let Err(err) = SysMounter.unmount(path, UnmountMode::Detach) {
            log::warn!("Cannot unmount {}: {err}", path.display());
        }
    }
}
