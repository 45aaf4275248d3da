//! P4, recovery: with every claim of the storm (P2) taken, SIGKILL the
//! agent, start it again on the same data dir, and time how long until it
//! is reconciled.
//!
//! *Reconciled* means, observed from outside: the restarted agent's
//! control socket answers `volume status`, and that status lists every
//! volume with its one claim in state `taken` and no claim being released.
//! The agent answers its first call only after it loaded the snapshot and
//! journal and compared every claim's mounts with `/proc/self/mountinfo`
//! (the loop starts after that), so the first status that lists every
//! claim taken is the reconciled state; a claim whose mount was missing
//! would show `claiming` until it was published again. The clock runs
//! from just before the new process is spawned (exec, loading and
//! reconciling all count) to that answer.
//!
//! Checked, not timed: the mount table still has a staging and a publish
//! per claim (the restart neither lost nor duplicated a mount), and the
//! agent logged no re-publish or stray unmount. Also reported: when every
//! plugin is healthy again, so that new claims are served.

use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;

use crate::rig::{is_healthy, mounts_under, wait_until};
use crate::storm::StormRig;

pub struct RecoveryResult {
    pub claims: usize,
    pub reconciled: Duration,
    pub healthy: Duration,
    /// Lines of the restarted agent's log that say it re-staged,
    /// re-published or unmounted something.
    pub repairs: usize,
}

pub fn run(rig: &mut StormRig) -> RecoveryResult {
    let n = rig.claims;
    let mounts = mounts_under(&rig.agent.data_dir);
    let log_before = rig.agent.log_text().len();
    rig.agent.kill();

    let start = Instant::now();
    rig.agent.spawn();
    let socket = rig.agent.socket.clone();
    let all_taken = || {
        let Ok(client) = AgentClient::connect(&socket) else {
            return false;
        };
        let Ok(status) = client.volume_status("", false) else {
            return false;
        };
        status.volumes.len() == n
            && status.volumes.iter().all(|v| {
                v.past_claims.is_empty() && v.claims.len() == 1 && v.claims[0].state == "taken"
            })
    };
    wait_until("a reconciled agent", Duration::from_micros(500), all_taken);
    let reconciled = start.elapsed();
    wait_until(
        "healthy plugins after the restart",
        Duration::from_millis(1),
        || {
            let plugins = rig.agent.plugins();
            plugins.len() == rig.plugins.len() && plugins.iter().all(is_healthy)
        },
    );
    let healthy = start.elapsed();

    let after = mounts_under(&rig.agent.data_dir);
    assert_eq!(after, mounts, "the restart changed the mount table");
    let log = rig.agent.log_text();
    let repairs = log[log_before..]
        .lines()
        .filter(|l| {
            l.contains("again") || l.contains("Unmounting") || l.contains("no claim owns it")
        })
        .count();
    RecoveryResult {
        claims: n,
        reconciled,
        healthy,
        repairs,
    }
}
