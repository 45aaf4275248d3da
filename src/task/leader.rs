//! When one task of a group ends the others, as in Nomad's alloc runner:
//! a task marked `leader` that is dead (completed or failed) stops every
//! other task of the group but the poststop ones, and a task that failed
//! for good stops its siblings. The tasks stopped so are not failures:
//! they die without their restart policy, each with an event saying why
//! ("leader dead", "sibling failed") before its `killing`.

use std::time::Instant;

use super::lifecycle::Role;
use super::{Alloc, Allocs, TaskState};

/// The name of the group's leader task when it is dead.
pub(super) fn dead_leader(alloc: &Alloc) -> Option<&str> {
    alloc
        .group
        .tasks
        .iter()
        .zip(&alloc.tasks)
        .find(|(spec, run)| spec.leader && run.state == TaskState::Dead)
        .map(|(_, run)| run.name.as_str())
}

/// Whether another task's end ends task `i`: a task failed for good, or
/// the leader, if `i` is not the leader, is dead.
pub(super) fn ended_by_another(alloc: &Alloc, i: usize) -> bool {
    alloc.tasks.iter().any(|t| t.failed)
        || dead_leader(alloc).is_some_and(|leader| leader != alloc.tasks[i].name)
}

/// Whether task `i` runs and has not been sent its kill signal yet: the
/// one whose next `kill_task` is a kill it should be told the reason of.
fn about_to_be_killed(alloc: &Alloc, i: usize) -> bool {
    let task = &alloc.tasks[i];
    task.state == TaskState::Running
        && task
            .process
            .as_ref()
            .is_some_and(|p| p.signal_at.is_none() && p.kill_at.is_none() && !p.killed)
}

impl Allocs {
    /// The leader is dead: every other task but the poststop ones stops.
    pub(super) fn stop_for_leader(&mut self, alloc: &mut Alloc, now: Instant) -> bool {
        let Some(leader) = dead_leader(alloc).map(str::to_string) else {
            return false;
        };
        let mut changed = false;
        for i in 0..alloc.tasks.len() {
            if Role::in_group(&alloc.group, i) == Role::Poststop || alloc.tasks[i].name == leader {
                continue;
            }
            if about_to_be_killed(alloc, i) {
                alloc.tasks[i].event("leader dead", format!("leader task {leader:?} is dead"));
                log::info!(
                    "Alloc {}: task {} stops: its leader {leader} is dead",
                    alloc.id,
                    alloc.tasks[i].name
                );
            }
            changed |= self.kill_task(alloc, i, now);
        }
        changed
    }
}

/// A task of the alloc failed for good: each sibling about to be killed
/// for it is told which one.
pub(super) fn note_sibling_failed(alloc: &mut Alloc) {
    let Some(failed) = alloc
        .tasks
        .iter()
        .find(|t| t.failed)
        .map(|t| t.name.clone())
    else {
        return;
    };
    for i in 0..alloc.tasks.len() {
        if Role::in_group(&alloc.group, i) != Role::Poststop && about_to_be_killed(alloc, i) {
            alloc.tasks[i].event("sibling failed", format!("task {failed:?} failed"));
        }
    }
}
