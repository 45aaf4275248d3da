//! The restart policy: what happens when a task's process ends.
//!
//! As in Nomad, a task may restart `attempts` times within `interval`.
//! Restart *n* of an interval waits the shared [`Backoff`]'s ceiling for
//! *n*: `delay`, doubling, capped at `interval` (no jitter: one task's
//! restarts do not herd). When the attempts are used up, `mode = "fail"`
//! fails the task, and `mode = "delay"` waits for the interval to end and
//! starts a new one. An exit with status 0 completes the task unless the
//! caller says it restarts on success (a service's main task, a sidecar:
//! see [`super::lifecycle::Role::restarts_on_success`]); then it counts as
//! an attempt like any other exit, as in Nomad.

use std::time::{Duration, SystemTime};

use crate::csi::Backoff;
use crate::spec::{Restart, RestartMode};

/// What to do after an exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start again after this long.
    Restart(Duration),
    /// The task is done: it succeeded.
    Complete,
    /// The task failed for good.
    Fail,
}

/// The restarts of the current interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub started: SystemTime,
    pub restarts: u32,
}

/// Decides what follows an exit at `now` with `success`, given the
/// current window and whether the task `restarts_on_success`; returns the
/// decision and the window to keep.
pub fn decide(
    policy: &Restart,
    window: Option<Window>,
    success: bool,
    restarts_on_success: bool,
    now: SystemTime,
) -> (Decision, Option<Window>) {
    if success && !restarts_on_success {
        return (Decision::Complete, window);
    }
    let window = match window {
        Some(w) if now.duration_since(w.started).unwrap_or_default() < policy.interval => w,
        _ => Window {
            started: now,
            restarts: 0,
        },
    };
    let attempts = u32::try_from(policy.attempts).unwrap_or(u32::MAX);
    let backoff = Backoff::new(policy.delay, policy.interval.max(policy.delay));
    if window.restarts < attempts {
        let delay = backoff.ceiling(window.restarts);
        let next = Window {
            restarts: window.restarts + 1,
            ..window
        };
        return (Decision::Restart(delay), Some(next));
    }
    match policy.mode {
        RestartMode::Fail => (Decision::Fail, Some(window)),
        RestartMode::Delay => {
            let end = window.started + policy.interval;
            let wait = end
                .duration_since(now)
                .unwrap_or_default()
                .max(policy.delay);
            let next = Window {
                started: now + wait,
                restarts: 0,
            };
            (Decision::Restart(wait), Some(next))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(attempts: u64, mode: RestartMode) -> Restart {
        Restart {
            attempts,
            interval: Duration::from_secs(60),
            delay: Duration::from_secs(1),
            mode,
            ignored: Vec::new(),
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn success_completes_without_restart() {
        let now = SystemTime::UNIX_EPOCH + secs(1000);
        let (d, w) = decide(&policy(3, RestartMode::Fail), None, true, false, now);
        assert_eq!(d, Decision::Complete);
        assert_eq!(w, None);
    }

    #[test]
    fn failures_restart_with_growing_delays_then_fail() {
        let p = policy(3, RestartMode::Fail);
        let t0 = SystemTime::UNIX_EPOCH + secs(1000);
        let (d, w) = decide(&p, None, false, false, t0);
        assert_eq!(d, Decision::Restart(secs(1)));
        let (d, w) = decide(&p, w, false, false, t0 + secs(2));
        assert_eq!(d, Decision::Restart(secs(2)));
        let (d, w) = decide(&p, w, false, false, t0 + secs(5));
        assert_eq!(d, Decision::Restart(secs(4)));
        let (d, _) = decide(&p, w, false, false, t0 + secs(10));
        assert_eq!(d, Decision::Fail);
    }

    #[test]
    fn a_new_interval_resets_the_attempts() {
        let p = policy(1, RestartMode::Fail);
        let t0 = SystemTime::UNIX_EPOCH + secs(1000);
        let (_, w) = decide(&p, None, false, false, t0);
        let (d, _) = decide(&p, w, false, false, t0 + secs(30));
        assert_eq!(d, Decision::Fail);
        let (d, _) = decide(&p, w, false, false, t0 + secs(61));
        assert_eq!(d, Decision::Restart(secs(1)));
    }

    #[test]
    fn delay_mode_waits_for_the_interval_to_end() {
        let p = policy(1, RestartMode::Delay);
        let t0 = SystemTime::UNIX_EPOCH + secs(1000);
        let (_, w) = decide(&p, None, false, false, t0);
        let (d, w) = decide(&p, w, false, false, t0 + secs(20));
        assert_eq!(d, Decision::Restart(secs(40)));
        assert_eq!(w.unwrap().restarts, 0);
        // After the wait, a new interval with fresh attempts.
        let (d, _) = decide(&p, w, false, false, t0 + secs(61));
        assert_eq!(d, Decision::Restart(secs(1)));
    }

    #[test]
    fn a_service_task_that_exits_0_uses_an_attempt() {
        let p = policy(1, RestartMode::Fail);
        let t0 = SystemTime::UNIX_EPOCH + secs(1000);
        let (d, w) = decide(&p, None, true, true, t0);
        assert_eq!(d, Decision::Restart(secs(1)));
        let (d, _) = decide(&p, w, true, true, t0 + secs(2));
        assert_eq!(d, Decision::Fail);
    }

    #[test]
    fn zero_attempts_fail_at_once() {
        let p = policy(0, RestartMode::Fail);
        let (d, _) = decide(&p, None, false, false, SystemTime::UNIX_EPOCH + secs(5));
        assert_eq!(d, Decision::Fail);
    }
}
