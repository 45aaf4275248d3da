//! Which answers the manager hands out as acknowledgements (sent once the
//! turn's records are written) and which as replies (sent once they are
//! synced). An acknowledgement is only right when a record synced before
//! already decides the answer: the claim's admission before its job, the
//! release before its job. Everything else must wait for a sync, or a
//! power cut could undo what was answered. The jobs do not run here: the
//! tests feed the manager the reports a job would send.

use std::path::Path;
use std::time::{Instant, SystemTime};

use crossbeam_channel::{unbounded, Receiver};

use super::*;
use crate::csi::types::{NodeCapability, NodeInfo, PluginInfo};
use crate::csi::{AccessMode, AttachmentMode, Capability};
use crate::plugin::{Fingerprint, Health, PluginSpec, Report, Source};
use crate::spec::PluginType;
use crate::volume::model::StagingKey;
use crate::volume::ops::{StepDone, StepError, StepReport};
use crate::volume::plan::Action;

/// A manager with volume `v` of a healthy node-only plugin `p` that
/// stages (so a claim is NodeStage then NodePublish, a release
/// NodeUnpublish then NodeUnstage). `freed_tests.rs` uses it too.
pub(super) struct Rig {
    manager: VolumeManager,
    registry: Registry,
    _done: Receiver<OpDone>,
}

impl Rig {
    fn new() -> Rig {
        Rig::with(Capability::new(
            AccessMode::MultiNodeMultiWriter,
            AttachmentMode::FileSystem,
        ))
    }

    /// The rig with volume `v` of `capability`.
    pub(super) fn with(capability: Capability) -> Rig {
        let (tx, done) = unbounded();
        let mut manager =
            VolumeManager::new(Paths::new(Path::new("/nonexistent/csi-agent-test")), tx);
        let mut registry = Registry::new();
        let spec = PluginSpec {
            id: "p".into(),
            endpoint: "/run/csi/p.sock".parse().unwrap(),
            plugin_type: PluginType::Node,
            source: Source::Config,
            stage_publish_base_dir: None,
        };
        let key = spec.key();
        registry.register(spec);
        registry.apply(
            &key,
            Report::Status {
                health: Health::Healthy,
                reason: "ok".into(),
                fingerprint: Some(Fingerprint {
                    info: PluginInfo {
                        name: "p".into(),
                        vendor_version: "1".into(),
                        manifest: Default::default(),
                    },
                    plugin_capabilities: Default::default(),
                    controller_capabilities: Default::default(),
                    node_capabilities: [NodeCapability::StageUnstageVolume].into(),
                    node: Some(NodeInfo {
                        node_id: "n1".into(),
                        max_volumes_per_node: 0,
                        accessible_topology: None,
                    }),
                    taken: SystemTime::now(),
                }),
                heartbeat: None,
            },
        );
        manager.insert(crate::volume::model::test_volume(capability));
        let mut rig = Rig {
            manager,
            registry,
            _done: done,
        };
        rig.turn();
        rig
    }

    /// Claims `v` for `alloc`, without a host target; the answer's
    /// receiver.
    pub(super) fn claim(&mut self, alloc: &str) -> Receiver<crate::call::Answer<Answer>> {
        let (tx, rx) = unbounded();
        let req = calls::ClaimRequest {
            volume_id: "v".into(),
            alloc_id: alloc.into(),
            ..Default::default()
        };
        self.manager
            .claim(&req, tx.into(), &self.registry, Instant::now());
        rx
    }

    pub(super) fn release(&mut self, alloc: &str) -> Receiver<crate::call::Answer<Answer>> {
        let (tx, rx) = unbounded();
        self.manager.release("v", alloc, tx.into());
        rx
    }

    /// Ends a loop turn: plans, and answers what it holds as the loop
    /// would (acknowledgements and replies apart). The names of the
    /// steps of the job planned, if one was.
    pub(super) fn turn(&mut self) -> Turn {
        let jobs = self.manager.plan(&self.registry, Instant::now());
        let effects = self.manager.take_effects();
        Turn {
            jobs: jobs.len(),
            acks: effects.acks,
            replies: effects.replies,
            freed: effects.freed,
        }
    }

    /// The job in flight on `v`.
    fn token(&self) -> u64 {
        self.manager.entries["v"].busy.expect("a job in flight")
    }

    /// Reports `action` of the job in flight as a job would.
    fn report(&mut self, action: Action, result: Result<StepDone, StepError>) {
        let done = OpDone {
            volume_id: "v".into(),
            token: self.token(),
            result: OpResult::Step(StepReport {
                action,
                result,
                resume: None,
                leftover: Default::default(),
            }),
        };
        self.manager.completed(done, &self.registry, Instant::now());
    }

    /// Runs a claim of `alloc` through its job; the turn that answers it.
    pub(super) fn claimed(&mut self, alloc: &str) -> (Receiver<crate::call::Answer<Answer>>, Turn) {
        let answer = self.claim(alloc);
        assert_eq!(self.turn().jobs, 1, "the claim's job");
        let staging = StagingKey::Volume;
        self.report(Action::NodeStage { staging }, Ok(StepDone::default()));
        self.report(
            Action::NodePublish {
                alloc: alloc.into(),
            },
            Ok(StepDone::default()),
        );
        (answer, self.turn())
    }

    /// Reports a release's two steps done: NodeUnpublish of `alloc`, then
    /// NodeUnstage.
    pub(super) fn release_steps_done(&mut self, alloc: &str) {
        self.report(
            Action::NodeUnpublish {
                alloc: alloc.into(),
            },
            Ok(StepDone::default()),
        );
        self.report(
            Action::NodeUnstage {
                staging: StagingKey::Volume,
            },
            Ok(StepDone::default()),
        );
    }
}

pub(super) struct Turn {
    pub(super) jobs: usize,
    acks: Vec<Reply>,
    replies: Vec<Reply>,
    /// The volumes that lost a claim in the turn.
    pub(super) freed: Vec<String>,
}

impl Turn {
    /// Sends every answer it holds; how many of each kind.
    pub(super) fn send(self) -> (usize, usize) {
        let counts = (self.acks.len(), self.replies.len());
        for (reply, answer) in self.acks.into_iter().chain(self.replies) {
            reply.send(answer);
        }
        counts
    }
}

pub(super) fn answered(rx: &Receiver<crate::call::Answer<Answer>>) -> crate::call::Answer<Answer> {
    rx.try_recv().expect("answered")
}

#[track_caller]
fn assert_released(rx: &Receiver<crate::call::Answer<Answer>>) {
    match answered(rx) {
        Ok(Answer::Released(r)) => assert!(r.released, "{r:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_claim_answered_at_the_end_of_its_job_is_an_acknowledgement() {
    let mut rig = Rig::new();
    let (answer, turn) = rig.claimed("a1");
    assert_eq!(turn.send(), (1, 0));
    assert!(matches!(answered(&answer), Ok(Answer::Claimed(_))));
}

#[test]
fn a_claim_asked_again_once_taken_waits_for_a_sync() {
    let mut rig = Rig::new();
    let (_, turn) = rig.claimed("a1");
    turn.send();
    // Answered from the record alone, in a turn of its own: nothing
    // synced before it says so.
    let again = rig.claim("a1");
    let turn = rig.turn();
    assert_eq!(turn.jobs, 0);
    assert_eq!(turn.send(), (0, 1));
    assert!(matches!(answered(&again), Ok(Answer::Claimed(_))));
}

#[test]
fn a_release_answered_after_its_job_is_an_acknowledgement() {
    let mut rig = Rig::new();
    rig.claimed("a1").1.send();
    let answer = rig.release("a1");
    let turn = rig.turn();
    assert_eq!((turn.jobs, turn.send()), (1, (0, 0)), "the release's job");
    rig.release_steps_done("a1");
    assert_eq!(rig.turn().send(), (1, 0));
    assert_released(&answer);
}

#[test]
fn a_release_with_no_job_waits_for_a_sync() {
    let mut rig = Rig::new();
    // Released in the turn it was claimed: no step was sent, and the
    // claim is freed without a job.
    let claim = rig.claim("a1");
    let release = rig.release("a1");
    let turn = rig.turn();
    assert_eq!(turn.jobs, 0);
    assert_eq!(turn.send(), (0, 2));
    assert!(answered(&claim).is_err(), "the claim was released");
    assert_released(&release);
}

#[test]
fn a_claim_whose_step_fails_for_good_is_answered_after_a_sync() {
    let mut rig = Rig::new();
    let answer = rig.claim("a1");
    assert_eq!(rig.turn().jobs, 1);
    rig.report(
        Action::NodeStage {
            staging: StagingKey::Volume,
        },
        Err(StepError::Local {
            message: "cannot ever".into(),
            terminal: true,
        }),
    );
    assert_eq!(rig.turn().send(), (0, 1));
    assert!(answered(&answer).is_err());
}

#[test]
fn claims_releases_retries_and_give_ups_are_counted() {
    use crate::metrics::{CLAIMS, STEP_GIVE_UPS, STEP_RETRIES};
    let mode = AccessMode::MultiNodeMultiWriter.as_str();
    let claims = |op, outcome| CLAIMS.value(&[op, outcome, mode]);
    let before = (
        claims("claim", "ok"),
        claims("release", "ok"),
        claims("claim", "failed"),
        STEP_RETRIES.value(&[]),
        STEP_GIVE_UPS.value(&[]),
    );
    let mut rig = Rig::new();
    let (answer, turn) = rig.claimed("a1");
    turn.send();
    assert!(matches!(answered(&answer), Ok(Answer::Claimed(_))));
    assert!(claims("claim", "ok") > before.0);
    let answer = rig.release("a1");
    rig.turn().send();
    rig.release_steps_done("a1");
    rig.turn().send();
    assert_released(&answer);
    assert!(claims("release", "ok") > before.1);

    let answer = rig.claim("a2");
    rig.turn();
    let stage = Action::NodeStage {
        staging: StagingKey::Volume,
    };
    rig.report(
        stage.clone(),
        Err(StepError::Local {
            message: "not now".into(),
            terminal: false,
        }),
    );
    assert!(STEP_RETRIES.value(&[]) > before.3);
    drop(answer);
    let mut rig = Rig::new();
    let answer = rig.claim("a3");
    rig.turn();
    rig.report(
        stage,
        Err(StepError::Local {
            message: "cannot ever".into(),
            terminal: true,
        }),
    );
    rig.turn().send();
    assert!(answered(&answer).is_err());
    assert!(claims("claim", "failed") > before.2);
    assert!(STEP_GIVE_UPS.value(&[]) > before.4);
}

#[test]
fn the_claims_gauge_follows_a_claim_from_claiming_to_taken_to_gone() {
    use crate::metrics::CLAIMS_NOW;
    let mode = AccessMode::MultiNodeMultiWriter.as_str();
    let counted = |rig: &Rig| rig.manager.claim_gauge.counted.get("v").cloned();
    let mut rig = Rig::new();
    let answer = rig.claim("a1");
    rig.turn();
    assert_eq!(counted(&rig), Some(vec![("claiming", mode)]));
    assert!(CLAIMS_NOW.value(&["claiming", mode]) >= 1.0);
    let staging = StagingKey::Volume;
    rig.report(Action::NodeStage { staging }, Ok(StepDone::default()));
    rig.report(
        Action::NodePublish { alloc: "a1".into() },
        Ok(StepDone::default()),
    );
    rig.turn().send();
    assert!(matches!(answered(&answer), Ok(Answer::Claimed(_))));
    assert_eq!(counted(&rig), Some(vec![("taken", mode)]));
    assert!(CLAIMS_NOW.value(&["taken", mode]) >= 1.0);
    let answer = rig.release("a1");
    rig.turn();
    assert_eq!(counted(&rig), Some(vec![("releasing", mode)]));
    rig.release_steps_done("a1");
    rig.turn().send();
    assert_released(&answer);
    assert_eq!(counted(&rig), Some(vec![]));
}
