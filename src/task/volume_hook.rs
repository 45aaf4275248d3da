//! The volume hook: claims an alloc's `csi` volumes through the volume
//! manager, retries refused claims with backoff, and fails the alloc on a
//! terminal refusal; and, on release, unmounts what a task left inside a
//! volume it shared with the host.
//!
//! A claim refused because another claim holds the volume (a writer of a
//! single-writer volume, here or on another host) waits for an event, not
//! for its backoff: when the volume manager reports that the volume lost
//! a claim (released here, or gone from the cluster's claim set), the
//! uses waiting for it are claimed again at once
//! ([`Allocs::volumes_freed`]). The backoff still spaces out the retries
//! of the other refusals (a plugin down, etcd out of reach), and bounds a
//! claim that keeps losing the race for a freed volume. A claim the
//! cluster would not admit because this node was not registered waits
//! for the node's registration the same way ([`Allocs::cluster_registered`]).

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
            v.freed_meanwhile = false;
            changed = true;
        }
        changed
    }

    /// Volumes that lost a claim: the uses waiting to claim them again
    /// are due now, and a claim of them on its way, if refused, is made
    /// again at once (the refusal may have been decided before the claim
    /// in its way left). Their backoff is kept, for a claim that loses
    /// the freed volume to another.
    pub fn volumes_freed(&mut self, volumes: &[String], now: Instant) {
        if volumes.is_empty() {
            return;
        }
        self.wake_waiting_uses(now, |volume| {
            volumes
                .iter()
                .any(|v| v == volume)
                .then(|| format!("volume {volume:?} lost a claim: claiming it again"))
        });
    }

    /// This node registered in the cluster (at start, or again after its
    /// lease expired): the claims the cluster would not admit meanwhile
    /// are made again at once, as for a freed volume.
    pub fn cluster_registered(&mut self, now: Instant) {
        self.wake_waiting_uses(now, |volume| {
            Some(format!(
                "this node registered in the cluster: claiming volume {volume:?} again"
            ))
        });
    }

    /// Makes the uses of the volumes `event` names (with the event their
    /// tasks get) due now, or retried at once if refused on their way.
    fn wake_waiting_uses(&mut self, now: Instant, event: impl Fn(&str) -> Option<String>) {
        for alloc in self.allocs.values_mut() {
            if alloc.status.is_terminal() || alloc.stop_wanted {
                continue;
            }
            let mut events = Vec::new();
            for v in &mut alloc.volumes {
                if v.source != VolumeSource::Csi {
                    continue;
                }
                let Some(message) = event(&v.volume_id) else {
                    continue;
                };
                match v.state {
                    UseState::Unclaimed if v.retry_at.is_some_and(|at| at > now) => {
                        v.retry_at = Some(now);
                        events.push(message);
                    }
                    UseState::Claiming => v.freed_meanwhile = true,
                    _ => {}
                }
            }
            for message in events {
                for task in &mut alloc.tasks {
                    task.event("volumes", message.clone());
                }
            }
        }
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
                        let (delay, when) = if std::mem::take(&mut v.freed_meanwhile) {
                            (
                                Duration::ZERO,
                                "it lost a claim meanwhile: retrying now".into(),
                            )
                        } else {
                            let delay = CLAIM_RETRY.delay(v.failures, self.jitter.unit());
                            (delay, format!("retrying in {}", format_duration(delay)))
                        };
                        v.failures += 1;
                        v.state = UseState::Unclaimed;
                        v.retry_at = Some(now + delay);
                        events.push(format!(
                            "claim of volume {:?} refused: {}; {when}",
                            v.volume_id, err.message,
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
    let below: BTreeSet<PathBuf> = order::set(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Job;
    use crate::task::calls::JobFile;

    const JOB: &str = r#"job "j" {
  group "g" {
    volume "data" {
      type            = "csi"
      source          = "v"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    volume "other" {
      type            = "csi"
      source          = "w"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
"#;

    /// Allocs holding alloc `a1` of a job with the volumes `v` and `w`,
    /// neither claimed yet.
    fn allocs() -> Allocs {
        let dir = std::env::temp_dir().join(format!("csi-agent-hook-{}", std::process::id()));
        let mut allocs = Allocs::new(&dir, &dir.join("control.sock"));
        let spec = Job::decode_with(JOB, "j.hcl", &Default::default())
            .expect("valid job")
            .spec;
        let req = JobFile {
            file: "j.hcl".to_string(),
            hcl: JOB.to_string(),
            inputs: Default::default(),
            check_index: None,
        };
        let now = std::time::SystemTime::now();
        let alloc = allocs.new_alloc("a1", &spec, &spec.groups[0], 0, &req, now, None);
        allocs.allocs.insert("a1".to_string(), alloc);
        allocs
    }

    fn uses(allocs: &mut Allocs) -> &mut Vec<crate::task::VolumeUse> {
        &mut allocs.allocs.get_mut("a1").unwrap().volumes
    }

    /// Use `i`'s claim is on its way: the sender of its answer.
    fn claiming(
        allocs: &mut Allocs,
        i: usize,
    ) -> crossbeam_channel::Sender<crate::call::Answer<Answer>> {
        let (tx, rx) = bounded(1);
        let v = &mut uses(allocs)[i];
        v.state = UseState::Claiming;
        v.answer = Some(rx);
        tx
    }

    fn refusal() -> crate::call::Answer<Answer> {
        Err(CallError::new(
            ErrorKind::FailedPrecondition,
            "volume \"v\" is claimed on node host-a by alloc 1234abcd",
        ))
    }

    /// Reads the answers of alloc `a1`'s claims, as a step does.
    fn poll(allocs: &mut Allocs, now: Instant) {
        let mut alloc = allocs.allocs.remove("a1").unwrap();
        allocs.poll_claims(&mut alloc, now);
        allocs.allocs.insert("a1".to_string(), alloc);
    }

    #[test]
    fn a_claim_waiting_on_its_backoff_is_due_once_its_volume_lost_a_claim() {
        let mut allocs = allocs();
        let now = Instant::now();
        let later = now + Duration::from_secs(20);
        for v in uses(&mut allocs).iter_mut() {
            v.retry_at = Some(later);
            v.failures = 4;
        }
        assert_eq!(allocs.next_wakeup(), Some(later));
        allocs.volumes_freed(&["v".to_string()], now);
        let v = &uses(&mut allocs)[0];
        assert_eq!(v.retry_at, Some(now), "due now");
        assert_eq!(v.failures, 4, "its backoff kept for a lost race");
        assert_eq!(uses(&mut allocs)[1].retry_at, Some(later), "w kept waiting");
        assert_eq!(allocs.next_wakeup(), Some(now));
    }

    #[test]
    fn a_claim_refused_after_its_volume_lost_a_claim_is_asked_again_at_once() {
        let mut allocs = allocs();
        let now = Instant::now();
        // The claim left while the claim of `v` was on its way: its
        // refusal may have been decided before.
        let answer = claiming(&mut allocs, 0);
        allocs.volumes_freed(&["v".to_string()], now);
        answer.send(refusal()).unwrap();
        poll(&mut allocs, now);
        let v = &uses(&mut allocs)[0];
        assert_eq!(
            (v.state.clone(), v.retry_at),
            (UseState::Unclaimed, Some(now))
        );
        assert!(!v.freed_meanwhile);
        // Sent again, and refused again with nothing freed meanwhile: the
        // backoff again.
        let answer = claiming(&mut allocs, 0);
        answer.send(refusal()).unwrap();
        poll(&mut allocs, now);
        let v = &uses(&mut allocs)[0];
        let due = v.retry_at.expect("a retry");
        assert!(due >= now && due <= now + CLAIM_RETRY.ceiling(1));
        assert_eq!(v.failures, 2);
    }

    #[test]
    fn a_refusal_with_nothing_freed_waits_for_its_backoff() {
        let mut allocs = allocs();
        let now = Instant::now();
        let answer = claiming(&mut allocs, 0);
        // Another volume lost a claim: not this one's business.
        allocs.volumes_freed(&["w".to_string()], now);
        answer.send(refusal()).unwrap();
        poll(&mut allocs, now);
        let alloc = &allocs.allocs["a1"];
        let events: Vec<&str> = alloc.tasks[0]
            .events
            .iter()
            .map(|e| e.message.as_str())
            .collect();
        assert!(
            events.iter().any(|e| e.contains("; retrying in ")),
            "{events:?}"
        );
        assert_eq!(alloc.volumes[0].failures, 1);
    }

    #[test]
    fn a_stopping_alloc_is_not_woken_by_a_freed_volume() {
        let mut allocs = allocs();
        let now = Instant::now();
        let later = now + Duration::from_secs(20);
        uses(&mut allocs)[0].retry_at = Some(later);
        allocs.allocs.get_mut("a1").unwrap().stop_wanted = true;
        allocs.volumes_freed(&["v".to_string()], now);
        assert_eq!(uses(&mut allocs)[0].retry_at, Some(later));
    }
}
