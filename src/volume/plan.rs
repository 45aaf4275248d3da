//! The planner: from a volume's record, the one next step that brings its
//! actual state (attachment, stagings, publishes, host binds) closer to
//! what its claims want. A pure function, so the spec's ordering rules are
//! tested here exhaustively, and the same rules drive a fresh claim, a
//! release, a retry and the recovery after a crash: a step left `Pending`
//! is simply re-sent in whichever direction is wanted now.
//!
//! Release comes before claiming, in the spec's order: unbind and
//! NodeUnpublish each released claim; NodeUnstage a staging only when no
//! claim goes through it; ControllerUnpublish only when nothing on the
//! node needs the attachment; then free the claim. Claiming:
//! ControllerPublish, NodeStage of the claim's staging (the volume's one
//! staging), NodePublish, then the host bind.
//!
//! A claim with a [`failure`](super::model::Claim::failure) (a step that
//! can never succeed) is left alone, and so is everything it still needs,
//! until it is released again.

use super::model::{Admission, Claim, StagingKey, Step, Volume};

/// What the plugin advertises that changes the protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Protocol {
    /// The controller has PUBLISH_UNPUBLISH_VOLUME.
    pub controller_publish: bool,
    /// The node has STAGE_UNSTAGE_VOLUME.
    pub stage: bool,
    /// The node has VOLUME_MOUNT_GROUP: NodeStage and NodePublish carry
    /// the volume's mount group.
    pub mount_group: bool,
}

/// One step of the claim or release protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    UnbindTarget {
        alloc: String,
    },
    NodeUnpublish {
        alloc: String,
    },
    NodeUnstage {
        staging: StagingKey,
    },
    ControllerUnpublish,
    /// The released claim is fully detached: forget it.
    Free {
        alloc: String,
    },
    ControllerPublish,
    NodeStage {
        staging: StagingKey,
    },
    NodePublish {
        alloc: String,
    },
    BindTarget {
        alloc: String,
    },
}

impl Action {
    /// The step as an event tells it: its name, and the alloc it is for.
    pub fn describe(&self) -> String {
        match self {
            Action::UnbindTarget { alloc }
            | Action::NodeUnpublish { alloc }
            | Action::Free { alloc }
            | Action::NodePublish { alloc }
            | Action::BindTarget { alloc } => format!("{} for alloc {alloc}", self.name()),
            _ => self.name().to_string(),
        }
    }

    /// Whether the step undoes something (the release direction).
    pub fn is_release(&self) -> bool {
        matches!(
            self,
            Action::UnbindTarget { .. }
                | Action::NodeUnpublish { .. }
                | Action::NodeUnstage { .. }
                | Action::ControllerUnpublish
                | Action::Free { .. }
        )
    }

    /// Whether it is a plugin RPC (the others are local mounts or
    /// bookkeeping).
    pub fn is_rpc(&self) -> bool {
        !matches!(
            self,
            Action::UnbindTarget { .. } | Action::BindTarget { .. } | Action::Free { .. }
        )
    }

    pub fn name(&self) -> &'static str {
        match self {
            Action::UnbindTarget { .. } => "unmount the target",
            Action::NodeUnpublish { .. } => "NodeUnpublishVolume",
            Action::NodeUnstage { .. } => "NodeUnstageVolume",
            Action::ControllerUnpublish => "ControllerUnpublishVolume",
            Action::Free { .. } => "free the claim",
            Action::ControllerPublish => "ControllerPublishVolume",
            Action::NodeStage { .. } => "NodeStageVolume",
            Action::NodePublish { .. } => "NodePublishVolume",
            Action::BindTarget { .. } => "bind-mount the target",
        }
    }
}

impl Volume {
    /// The released claims the planner acts on: not failed for good, and
    /// not waiting for the cluster's answer to their admission (a claim
    /// released before etcd answered is freed once it has).
    fn released_claims(&self) -> impl Iterator<Item = &Claim> {
        self.claims
            .values()
            .filter(|c| !c.wanted && c.failure.is_none() && c.admission != Admission::Admitting)
    }
}

/// The next step for `volume`, or `None` when it is where its claims want
/// it.
pub fn next(volume: &Volume, protocol: Protocol) -> Option<Action> {
    // Release: each released claim's node side first.
    for claim in volume.released_claims() {
        let alloc = claim.alloc_id.clone();
        if claim.target_mounted != Step::Absent {
            return Some(Action::UnbindTarget { alloc });
        }
        if claim.published != Step::Absent {
            return Some(Action::NodeUnpublish { alloc });
        }
    }
    for (key, staging) in &volume.stagings {
        if staging.step != Step::Absent && !volume.staging_in_use(key) {
            return Some(Action::NodeUnstage {
                staging: key.clone(),
            });
        }
    }
    if volume.attachment != Step::Absent && !volume.attachment_needed() {
        return Some(Action::ControllerUnpublish);
    }
    if let Some(claim) = volume
        .released_claims()
        .find(|c| c.admission != Admission::Freeing)
    {
        return Some(Action::Free {
            alloc: claim.alloc_id.clone(),
        });
    }
    // Claim: in alloc order, each wanted claim to the end.
    for claim in volume
        .wanted_claims()
        .filter(|c| c.failure.is_none() && c.admission != Admission::Admitting)
    {
        if protocol.controller_publish && volume.attachment != Step::Done {
            return Some(Action::ControllerPublish);
        }
        let staged = volume
            .stagings
            .get(&claim.staging)
            .is_some_and(|s| s.step == Step::Done);
        if protocol.stage && !staged {
            if claim.staging == StagingKey::Volume && volume.has_old_staging() {
                // The volume's staging directory holds a staging of the
                // per-usage layout: wait until it is gone.
                continue;
            }
            return Some(Action::NodeStage {
                staging: claim.staging.clone(),
            });
        }
        let alloc = claim.alloc_id.clone();
        if claim.published != Step::Done {
            return Some(Action::NodePublish { alloc });
        }
        if claim.target.is_some() && claim.target_mounted != Step::Done {
            return Some(Action::BindTarget { alloc });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::{AccessMode, AttachmentMode, Capability};
    use crate::mount::Propagation;
    use crate::volume::model::{Claim, Staging, StagingKey};

    const FULL: Protocol = Protocol {
        controller_publish: true,
        stage: true,
        mount_group: true,
    };

    fn capability() -> Capability {
        Capability::new(AccessMode::MultiNodeMultiWriter, AttachmentMode::FileSystem)
    }

    fn volume() -> Volume {
        crate::volume::model::test_volume(capability())
    }

    fn claim(alloc: &str, usage: &str, target: bool) -> Claim {
        Claim {
            alloc_id: alloc.into(),
            read_only: false,
            wanted: true,
            usage: usage.into(),
            capability: capability(),
            published: Step::Absent,
            target: target.then(|| format!("/mnt/{alloc}").into()),
            propagation: Propagation::Private,
            target_mounted: Step::Absent,
            target_mount_id: None,
            target_created: false,
            staging: StagingKey::Volume,
            failure: None,
            admission: Admission::Local,
        }
    }

    /// Runs the planner to the end, applying each step as if it succeeded,
    /// and returns the steps.
    fn drive(volume: &mut Volume, protocol: Protocol) -> Vec<Action> {
        let mut steps = Vec::new();
        while let Some(action) = next(volume, protocol) {
            apply(volume, &action);
            steps.push(action);
            assert!(steps.len() < 100, "the planner loops: {steps:?}");
        }
        steps
    }

    fn apply(volume: &mut Volume, action: &Action) {
        match action {
            Action::UnbindTarget { alloc } => {
                volume.claims.get_mut(alloc).unwrap().target_mounted = Step::Absent
            }
            Action::NodeUnpublish { alloc } => {
                volume.claims.get_mut(alloc).unwrap().published = Step::Absent
            }
            Action::NodeUnstage { staging } => {
                volume.stagings.remove(staging);
            }
            Action::ControllerUnpublish => volume.attachment = Step::Absent,
            Action::Free { alloc } => {
                volume.claims.remove(alloc);
            }
            Action::ControllerPublish => volume.attachment = Step::Done,
            Action::NodeStage { staging } => {
                volume.stagings.insert(
                    staging.clone(),
                    Staging {
                        step: Step::Done,
                        capability: capability(),
                    },
                );
            }
            Action::NodePublish { alloc } => {
                volume.claims.get_mut(alloc).unwrap().published = Step::Done
            }
            Action::BindTarget { alloc } => {
                volume.claims.get_mut(alloc).unwrap().target_mounted = Step::Done
            }
        }
    }

    fn names(steps: &[Action]) -> Vec<&'static str> {
        steps.iter().map(Action::name).collect()
    }

    fn release(volume: &mut Volume, alloc: &str) {
        volume.claims.get_mut(alloc).unwrap().wanted = false;
    }

    #[test]
    fn a_claim_attaches_stages_publishes_and_binds_in_order() {
        let mut v = volume();
        v.claims.insert("a".into(), claim("a", "rw", true));
        assert_eq!(
            names(&drive(&mut v, FULL)),
            [
                "ControllerPublishVolume",
                "NodeStageVolume",
                "NodePublishVolume",
                "bind-mount the target"
            ]
        );
    }

    #[test]
    fn a_release_unbinds_unpublishes_unstages_detaches_and_frees_in_order() {
        let mut v = volume();
        v.claims.insert("a".into(), claim("a", "rw", true));
        drive(&mut v, FULL);
        release(&mut v, "a");
        assert_eq!(
            names(&drive(&mut v, FULL)),
            [
                "unmount the target",
                "NodeUnpublishVolume",
                "NodeUnstageVolume",
                "ControllerUnpublishVolume",
                "free the claim"
            ]
        );
        assert!(v.claims.is_empty());
    }

    #[test]
    fn without_controller_publish_or_staging_only_publish_is_called() {
        let mut v = volume();
        v.claims.insert("a".into(), claim("a", "rw", false));
        let none = Protocol {
            controller_publish: false,
            stage: false,
            mount_group: false,
        };
        assert_eq!(names(&drive(&mut v, none)), ["NodePublishVolume"]);
        release(&mut v, "a");
        assert_eq!(
            names(&drive(&mut v, none)),
            ["NodeUnpublishVolume", "free the claim"]
        );
    }

    #[test]
    fn two_claims_share_one_staging_and_unstage_waits_for_the_last() {
        let mut v = volume();
        v.claims.insert("a".into(), claim("a", "rw", false));
        v.claims.insert("b".into(), claim("b", "rw", false));
        assert_eq!(
            names(&drive(&mut v, FULL)),
            [
                "ControllerPublishVolume",
                "NodeStageVolume",
                "NodePublishVolume",
                "NodePublishVolume"
            ]
        );
        release(&mut v, "a");
        assert_eq!(
            names(&drive(&mut v, FULL)),
            ["NodeUnpublishVolume", "free the claim"]
        );
        release(&mut v, "b");
        assert_eq!(
            names(&drive(&mut v, FULL)),
            [
                "NodeUnpublishVolume",
                "NodeUnstageVolume",
                "ControllerUnpublishVolume",
                "free the claim"
            ]
        );
    }

    #[test]
    fn a_writer_and_a_reader_share_the_volume_s_one_staging() {
        let mut v = volume();
        v.claims.insert("a".into(), claim("a", "rw", false));
        v.claims.insert("b".into(), claim("b", "ro", false));
        assert_eq!(
            names(&drive(&mut v, FULL)),
            [
                "ControllerPublishVolume",
                "NodeStageVolume",
                "NodePublishVolume",
                "NodePublishVolume"
            ]
        );
        assert_eq!(v.stagings.keys().collect::<Vec<_>>(), [&StagingKey::Volume]);
        release(&mut v, "b");
        assert_eq!(
            drive(&mut v, FULL),
            [
                Action::NodeUnpublish { alloc: "b".into() },
                Action::Free { alloc: "b".into() }
            ]
        );
        assert_eq!(v.attachment, Step::Done);
    }

    #[test]
    fn a_per_usage_staging_is_unstaged_once_no_publish_goes_through_it() {
        // A record of the per-usage layout: alloc a published through the
        // staging of usage "rw"; alloc b, new, uses the volume's staging.
        let mut v = volume();
        v.attachment = Step::Done;
        let old = StagingKey::Usage("rw".into());
        v.stagings.insert(
            old.clone(),
            Staging {
                step: Step::Done,
                capability: capability(),
            },
        );
        let mut a = claim("a", "rw", false);
        a.published = Step::Done;
        a.staging = old.clone();
        v.claims.insert("a".into(), a);
        release(&mut v, "a");
        v.claims.insert("b".into(), claim("b", "rw", false));
        assert_eq!(
            drive(&mut v, FULL),
            [
                Action::NodeUnpublish { alloc: "a".into() },
                Action::NodeUnstage { staging: old },
                Action::Free { alloc: "a".into() },
                Action::NodeStage {
                    staging: StagingKey::Volume
                },
                Action::NodePublish { alloc: "b".into() },
            ]
        );
    }

    #[test]
    fn a_claim_that_failed_for_good_is_left_alone_with_what_it_needs() {
        let mut v = volume();
        v.claims.insert("a".into(), claim("a", "rw", true));
        drive(&mut v, FULL);
        release(&mut v, "a");
        v.claims.get_mut("a").unwrap().failure = Some("not ours".into());
        assert_eq!(next(&v, FULL), None);
        // Released again: the failure is cleared and the release goes on.
        v.claims.get_mut("a").unwrap().failure = None;
        assert_eq!(
            next(&v, FULL),
            Some(Action::UnbindTarget { alloc: "a".into() })
        );
    }

    #[test]
    fn a_pending_publish_of_a_released_claim_is_unpublished_before_anything_else() {
        let mut v = volume();
        let mut c = claim("a", "rw", false);
        c.wanted = false;
        c.published = Step::Pending;
        v.claims.insert("a".into(), c);
        v.attachment = Step::Done;
        assert_eq!(
            next(&v, FULL),
            Some(Action::NodeUnpublish { alloc: "a".into() })
        );
    }

    #[test]
    fn nothing_is_unstaged_or_detached_while_a_new_claim_wants_it() {
        let mut v = volume();
        v.claims.insert("a".into(), claim("a", "rw", false));
        drive(&mut v, FULL);
        release(&mut v, "a");
        v.claims.insert("b".into(), claim("b", "rw", false));
        assert_eq!(
            names(&drive(&mut v, FULL)),
            ["NodeUnpublishVolume", "free the claim", "NodePublishVolume"]
        );
    }

    /// Every order of claims and releases of three allocs, two writers and
    /// a reader, keeps the spec's rules at every step.
    #[test]
    fn the_ordering_rules_hold_for_every_interleaving() {
        let allocs = [("a", "rw"), ("b", "rw"), ("c", "ro")];
        // Each alloc is claimed then released; interleavings of 6 events
        // where each claim precedes its release.
        let mut events: Vec<Vec<(usize, bool)>> = vec![vec![]];
        for _ in 0..6 {
            let mut longer = Vec::new();
            for seq in &events {
                for (i, _) in allocs.iter().enumerate() {
                    let claimed = seq.contains(&(i, true));
                    let released = seq.contains(&(i, false));
                    if !claimed {
                        longer.push([seq.clone(), vec![(i, true)]].concat());
                    } else if !released {
                        longer.push([seq.clone(), vec![(i, false)]].concat());
                    }
                }
            }
            events = longer;
        }
        assert_eq!(events.len(), 90);
        for seq in events {
            let mut v = volume();
            for (i, claim_it) in seq {
                let (alloc, usage) = allocs[i];
                if claim_it {
                    v.claims.insert(alloc.into(), claim(alloc, usage, true));
                } else {
                    release(&mut v, alloc);
                }
                while let Some(action) = next(&v, FULL) {
                    check_rules(&v, &action);
                    apply(&mut v, &action);
                }
            }
            assert!(v.claims.is_empty());
            assert!(v.stagings.is_empty());
            assert_eq!(v.attachment, Step::Absent);
        }
    }

    #[test]
    fn a_claim_waits_for_the_cluster_s_admission_in_either_direction() {
        let mut v = volume();
        let mut c = claim("a1", "rw", false);
        c.admission = Admission::Admitting;
        v.claims.insert("a1".into(), c);
        assert_eq!(next(&v, FULL), None);
        // Released before etcd answered: it is freed once it has.
        v.claims.get_mut("a1").unwrap().wanted = false;
        assert_eq!(next(&v, FULL), None);
        v.claims.get_mut("a1").unwrap().admission = Admission::Admitted;
        assert_eq!(next(&v, FULL), Some(Action::Free { alloc: "a1".into() }));
    }

    #[test]
    fn a_claim_the_cluster_is_forgetting_is_not_freed_again() {
        let mut v = volume();
        let mut c = claim("a1", "rw", false);
        c.wanted = false;
        c.admission = Admission::Freeing;
        v.claims.insert("a1".into(), c);
        assert_eq!(next(&v, FULL), None);
        // An admitted claim next to it goes ahead.
        let mut c = claim("a2", "rw", false);
        c.admission = Admission::Admitted;
        v.claims.insert("a2".into(), c);
        assert_eq!(next(&v, FULL), Some(Action::ControllerPublish));
    }

    fn check_rules(v: &Volume, action: &Action) {
        match action {
            Action::NodeUnstage { staging } => assert!(
                v.claims
                    .values()
                    .all(|c| c.staging != *staging || (!c.wanted && c.published == Step::Absent)),
                "unstage while in use: {v:?}"
            ),
            Action::ControllerUnpublish => {
                assert!(v.stagings.values().all(|s| s.step == Step::Absent));
                assert!(v.claims.values().all(|c| c.published == Step::Absent));
            }
            Action::NodeStage { staging } => {
                assert_eq!(v.attachment, Step::Done);
                // The spec: one staging path per volume.
                assert!(
                    v.stagings
                        .iter()
                        .all(|(k, s)| k == staging || s.step == Step::Absent),
                    "a second staging: {v:?}"
                );
            }
            Action::NodePublish { alloc } => {
                let staging = &v.claims[alloc].staging;
                assert_eq!(v.stagings[staging].step, Step::Done);
            }
            Action::NodeUnpublish { alloc } => {
                assert_eq!(v.claims[alloc].target_mounted, Step::Absent)
            }
            _ => {}
        }
    }
}
