//! A batch or sysbatch group's `max_run_duration`, as Nomad enforces it:
//! the bound counts from the moment the alloc is placed on the node
//! (claiming its volumes and starting its tasks count against it), and
//! when it runs out every task that still runs is killed per its own
//! `kill_signal` and `kill_timeout` (the kill is outside the bound), a
//! poststop task that has not started never does, and the alloc settles
//! as `complete` with Nomad's description, "allocation exceeded
//! max_run_duration". An alloc whose tasks end first is not touched.
//!
//! The moment the bound counts from is kept in the snapshot, so an agent
//! restart neither resets nor extends it: after a restart the deadline is
//! that moment plus the bound, by the wall clock, and an alloc whose
//! deadline passed while the agent was down is stopped at once.

use std::time::{Duration, Instant, SystemTime};

use super::lifecycle::Role;
use super::{Alloc, Allocs, TaskState};
use crate::units::format_duration;

/// What the alloc says once its bound ran out: Nomad's
/// `AllocTimeoutReasonMaxRunDuration`.
pub const EXCEEDED: &str = "allocation exceeded max_run_duration";

/// When an alloc's bound counts from, and its deadline on this agent's
/// monotonic clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Bound {
    /// When the alloc was placed; `None` until then, or if its group has
    /// no bound.
    pub since: Option<SystemTime>,
    deadline: Option<Instant>,
}

impl Bound {
    /// The bound of an alloc restored from the snapshot, which counts from
    /// `since` by the wall clock.
    pub fn restored(since: Option<SystemTime>, bound: Option<Duration>, now: Instant) -> Bound {
        let deadline = since.zip(bound).map(|(since, bound)| {
            let elapsed = SystemTime::now()
                .duration_since(since)
                .unwrap_or(Duration::ZERO);
            now + bound.saturating_sub(elapsed)
        });
        Bound { since, deadline }
    }
}

impl Allocs {
    /// Starts the alloc's bound once it is placed, and stops the alloc
    /// when the bound runs out. Returns whether anything changed.
    pub(super) fn enforce_max_run(&mut self, alloc: &mut Alloc, now: Instant) -> bool {
        let Some(bound) = alloc.group.max_run_duration else {
            return false;
        };
        if alloc.status.is_terminal() || alloc.stop_wanted {
            return false;
        }
        let Some(deadline) = alloc.max_run.deadline else {
            if !alloc.placed {
                return false;
            }
            alloc.max_run = Bound {
                since: Some(SystemTime::now()),
                deadline: Some(now + bound),
            };
            return true;
        };
        if now < deadline {
            return false;
        }
        log::info!(
            "Alloc {}: {EXCEEDED} ({}); stopping it",
            alloc.id,
            format_duration(bound)
        );
        alloc.stop_wanted = true;
        alloc.message = EXCEEDED.to_string();
        let message = format!("{EXCEEDED} ({})", format_duration(bound));
        for i in 0..alloc.tasks.len() {
            let poststop = Role::in_group(&alloc.group, i) == Role::Poststop;
            let task = &mut alloc.tasks[i];
            match task.state {
                TaskState::Dead => continue,
                TaskState::Pending if poststop => {
                    task.state = TaskState::Dead;
                    task.event("skipped", format!("not started: {message}"));
                    continue;
                }
                _ => task.event("killing", message.clone()),
            }
            // Poststop tasks are not killed when an alloc stops: one the
            // bound catches running is.
            if poststop {
                self.kill_task(alloc, i, now);
            }
        }
        true
    }

    /// The earliest timer of `alloc` besides its tasks': a changed
    /// template's `change_mode`, or its `max_run_duration` running out.
    pub(super) fn next_alloc_timer(alloc: &Alloc) -> Option<Instant> {
        let bound = alloc.max_run.deadline.filter(|_| !alloc.stop_wanted);
        Allocs::next_template_change(alloc)
            .into_iter()
            .chain(bound)
            .min()
    }
}
