//! One agent, two jobs writing one single-writer volume: the second job's
//! claim is refused while the first holds the volume, and its volume hook
//! waits on its backoff. Once the first job's claim is released, the
//! second's must be taken within [`WITHIN`], however long its backoff had
//! grown: the release wakes it, not the end of the backoff.

use std::thread;
use std::time::{Duration, Instant};

use csi_agent::proto::agent::JobStatus;
use csi_agent::units::parse_duration;

use super::{consumer, Rig};
use crate::util::require_root;

/// The longest the waiting claim may take after the release.
const WITHIN: Duration = Duration::from_secs(2);

/// The holder is stopped only once the waiting claim's backoff is at
/// least this long, so that a claim that waited for its backoff to end
/// would take well over [`WITHIN`].
const LONG_BACKOFF: Duration = Duration::from_secs(4);

/// How long the refusals may take to reach [`LONG_BACKOFF`]: backoffs are
/// drawn from 0 up to 1 s, 2 s, 4 s, 8 s, ... (full jitter).
const REFUSALS_WITHIN: Duration = Duration::from_secs(120);

/// The backoff the last refusal of the job's claim announced, if its last
/// volume event is a refusal.
fn last_backoff(job: &JobStatus) -> Option<Duration> {
    let events = &job.allocs.first()?.tasks.first()?.events;
    let last = events.iter().rev().find(|e| e.kind == "volumes")?;
    let (_, delay) = last.message.rsplit_once("; retrying in ")?;
    parse_duration(delay).ok()
}

#[test]
fn a_job_waiting_for_a_single_writer_volume_claims_it_as_soon_as_the_holder_releases_it() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let holder = rig.run_job("a.hcl", &consumer("a", "sleep 600", "", false));
    rig.wait_running("a", &holder[0]);
    let waiter = rig.run_job("b.hcl", &consumer("b", "sleep 600", "", false));
    let start = Instant::now();
    let backoff = loop {
        let job = rig.job("b");
        if let Some(backoff) = last_backoff(&job).filter(|b| *b >= LONG_BACKOFF) {
            break backoff;
        }
        assert!(
            start.elapsed() < REFUSALS_WITHIN,
            "no refusal of b's claim backed off {LONG_BACKOFF:?}: {job:#?}"
        );
        thread::sleep(Duration::from_millis(20));
    };
    rig.ok(&["job", "stop", "a"]);
    let client = rig.client();
    let (mut released, mut taken) = (None, None);
    let start = Instant::now();
    while taken.is_none() {
        let status = client.volume_status("v1", false).unwrap();
        let holds = status
            .volumes
            .iter()
            .flat_map(|v| &v.claims)
            .any(|c| c.alloc_id == holder[0]);
        if released.is_none() && !holds {
            released = Some(Instant::now());
        }
        let volume = rig.alloc("b", &waiter[0]).volumes.remove(0);
        if volume.state == "claimed" {
            taken = Some(Instant::now());
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "b never claimed the volume a released: {:#?}\n{}",
            rig.job("b"),
            rig.agent.log()
        );
        thread::sleep(Duration::from_millis(20));
    }
    let released = released.expect("a's claim released before b's was taken");
    let took = taken.unwrap() - released;
    eprintln!(
        "b's claim, refused with a backoff of {backoff:?}, was taken {took:?} after a's release"
    );
    assert!(
        took <= WITHIN,
        "b's claim was taken {took:?} after a's release (backoff {backoff:?}; bound {WITHIN:?})"
    );
    rig.wait_running("b", &waiter[0]);
    rig.stop("b");
    rig.stop("plugin");
    rig.wait_no_mounts_left();
}
