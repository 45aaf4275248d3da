//! Which turns report a volume as having lost a claim ([`Effects::freed`]):
//! the turn that forgets a released claim, so that a claim refused while
//! that one held the volume is asked again at once; no turn that only
//! takes or refuses claims. The jobs do not run here: the tests feed the
//! manager the reports a job would send, as `answers_tests.rs` does.

use super::answers_tests::{answered, Rig};
use super::*;
use crate::csi::{AccessMode, AttachmentMode, Capability};

fn single_writer() -> Rig {
    Rig::with(Capability::new(
        AccessMode::SingleNodeWriter,
        AttachmentMode::FileSystem,
    ))
}

#[test]
fn the_turn_that_forgets_a_released_claim_reports_its_volume_freed() {
    let mut rig = single_writer();
    let (_, turn) = rig.claimed("a1");
    assert!(turn.freed.is_empty(), "a claim taken frees nothing");
    rig.release("a1");
    let turn = rig.turn();
    assert_eq!(turn.jobs, 1, "the release's job");
    assert!(turn.freed.is_empty(), "the claim is still published");
    rig.release_steps_done("a1");
    assert_eq!(rig.turn().freed, ["v"]);
    assert!(rig.turn().freed.is_empty(), "reported once");
}

#[test]
fn a_writer_refused_for_another_writer_may_claim_once_the_volume_is_reported_freed() {
    let mut rig = single_writer();
    rig.claimed("a1").1.send();
    let refused = rig.claim("a2");
    let turn = rig.turn();
    assert!(turn.freed.is_empty(), "a refusal frees nothing");
    turn.send();
    match answered(&refused) {
        Err(err) => {
            assert_eq!(err.kind, ErrorKind::FailedPrecondition);
            assert!(err.message.contains("already has a writer"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    rig.release("a1");
    rig.turn().send();
    rig.release_steps_done("a1");
    let turn = rig.turn();
    assert_eq!(turn.freed, ["v"]);
    turn.send();
    // What the volume hook then does at once: claim again, admitted.
    let again = rig.claim("a2");
    assert_eq!(rig.turn().jobs, 1, "the claim's job");
    assert!(again.try_recv().is_err(), "not refused");
}

#[test]
fn a_claim_released_before_any_step_reports_its_volume_freed() {
    let mut rig = single_writer();
    let _claim = rig.claim("a1");
    let _release = rig.release("a1");
    assert_eq!(rig.turn().freed, ["v"]);
}
