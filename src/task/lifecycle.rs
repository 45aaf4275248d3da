//! The order of a group's tasks, Nomad's task lifecycle, for every driver.
//!
//! A group's tasks run in phases: `prestart` tasks first (the main tasks
//! wait until every non-sidecar one has exited 0 and every sidecar one
//! runs), then the main tasks (those without `lifecycle`), `poststart`
//! tasks once every main task has started, and `poststop` tasks once every
//! other task is dead (so also after a failed prestart task, or a stop
//! that came while prestart tasks ran, as in Nomad's coordinator). When
//! every main task is dead, the sidecars and poststart tasks still
//! running are stopped; poststop tasks are never stopped, and follow
//! their restart policy even while the alloc stops. Whether an exit 0
//! ends a task or restarts it also depends on its place and on the job
//! type.
//!
//! This module only decides, from the tasks' roles and progress; the alloc
//! runner (`runner.rs`) acts on its answers, the same way for each driver.

use crate::spec::{Group, JobType, Lifecycle, LifecycleHook};

/// A task's place in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Runs to completion before the main tasks.
    Prestart,
    /// Starts before the main tasks and runs alongside them.
    PrestartSidecar,
    Main,
    /// Starts once the main tasks run; `sidecar` keeps it running.
    Poststart {
        sidecar: bool,
    },
    /// Runs once every other task has stopped.
    Poststop,
}

impl Role {
    pub fn of(lifecycle: Option<Lifecycle>) -> Role {
        match lifecycle {
            None => Role::Main,
            Some(Lifecycle {
                hook: LifecycleHook::Prestart,
                sidecar: false,
            }) => Role::Prestart,
            Some(Lifecycle {
                hook: LifecycleHook::Prestart,
                sidecar: true,
            }) => Role::PrestartSidecar,
            Some(Lifecycle {
                hook: LifecycleHook::Poststart,
                sidecar,
            }) => Role::Poststart { sidecar },
            Some(Lifecycle {
                hook: LifecycleHook::Poststop,
                ..
            }) => Role::Poststop,
        }
    }

    /// The place of task `i` (of `group.tasks`) in its group.
    pub fn in_group(group: &Group, i: usize) -> Role {
        Role::of(group.tasks[i].lifecycle)
    }

    /// Whether an exit 0 restarts the task (per its policy) rather than
    /// completing it: as in Nomad, a lifecycle task's hook decides (only
    /// sidecars keep running); a main task follows the job type.
    pub fn restarts_on_success(self, job_type: JobType) -> bool {
        match self {
            Role::Main => !job_type.runs_to_completion(),
            Role::PrestartSidecar | Role::Poststart { sidecar: true } => true,
            Role::Prestart | Role::Poststart { sidecar: false } | Role::Poststop => false,
        }
    }
}

/// How far a task has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Not started yet, or its first start is under way: what waits for
    /// it to run waits on.
    Waiting,
    /// Running, or waiting to restart.
    Live,
    /// Exited for good: `ok` unless it failed.
    Dead { ok: bool },
}

/// Whether task `i` may start now, given every task's role and progress.
pub fn may_start(tasks: &[(Role, Progress)], i: usize) -> bool {
    let all = |role: fn(Role) -> bool, progress: fn(Progress) -> bool| {
        tasks
            .iter()
            .filter(|(r, _)| role(*r))
            .all(|(_, p)| progress(*p))
    };
    match tasks[i].0 {
        Role::Prestart | Role::PrestartSidecar => true,
        Role::Main => {
            all(
                |r| r == Role::Prestart,
                |p| p == Progress::Dead { ok: true },
            ) && all(|r| r == Role::PrestartSidecar, |p| p != Progress::Waiting)
        }
        Role::Poststart { .. } => main_started(tasks) && !main_done(tasks),
        Role::Poststop => all(
            |r| r != Role::Poststop,
            |p| matches!(p, Progress::Dead { .. }),
        ),
    }
}

/// Whether every main task is dead, so the tasks that run alongside them
/// (sidecars, poststart tasks) stop, and a sidecar's exit is final.
pub fn main_done(tasks: &[(Role, Progress)]) -> bool {
    tasks.iter().any(|(r, _)| *r == Role::Main)
        && tasks
            .iter()
            .filter(|(r, _)| *r == Role::Main)
            .all(|(_, p)| matches!(p, Progress::Dead { .. }))
}

/// Whether the main tasks got to start (none is waiting on prestart).
fn main_started(tasks: &[(Role, Progress)]) -> bool {
    tasks
        .iter()
        .filter(|(r, _)| *r == Role::Main)
        .all(|(_, p)| *p != Progress::Waiting)
}

/// Whether a task of this role is stopped once the main tasks are done.
pub fn stops_with_main(role: Role) -> bool {
    matches!(
        role,
        Role::Prestart | Role::PrestartSidecar | Role::Poststart { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use Progress::{Dead, Live, Waiting};

    const OK: Progress = Dead { ok: true };

    #[test]
    fn main_tasks_wait_for_prestart_to_complete() {
        let tasks = [(Role::Prestart, Live), (Role::Main, Waiting)];
        assert!(may_start(&tasks, 0));
        assert!(!may_start(&tasks, 1));
        let tasks = [(Role::Prestart, OK), (Role::Main, Waiting)];
        assert!(may_start(&tasks, 1));
    }

    #[test]
    fn a_failed_prestart_never_lets_main_tasks_start() {
        let tasks = [(Role::Prestart, Dead { ok: false }), (Role::Main, Waiting)];
        assert!(!may_start(&tasks, 1));
    }

    #[test]
    fn main_tasks_wait_for_prestart_sidecars_to_run_not_to_exit() {
        let tasks = [(Role::PrestartSidecar, Waiting), (Role::Main, Waiting)];
        assert!(!may_start(&tasks, 1));
        let tasks = [(Role::PrestartSidecar, Live), (Role::Main, Waiting)];
        assert!(may_start(&tasks, 1));
    }

    #[test]
    fn poststart_waits_for_every_main_task_to_run() {
        let post = (Role::Poststart { sidecar: false }, Waiting);
        let tasks = [(Role::Main, Live), (Role::Main, Waiting), post];
        assert!(!may_start(&tasks, 2));
        let tasks = [(Role::Main, Live), (Role::Main, Live), post];
        assert!(may_start(&tasks, 2));
        // Too late once the main tasks are done.
        let tasks = [(Role::Main, OK), (Role::Main, OK), post];
        assert!(!may_start(&tasks, 2));
    }

    #[test]
    fn poststop_waits_for_every_other_task_to_be_dead() {
        let tasks = [
            (Role::PrestartSidecar, Live),
            (Role::Main, OK),
            (Role::Poststop, Waiting),
        ];
        assert!(!may_start(&tasks, 2));
        assert!(main_done(&tasks));
        let tasks = [
            (Role::PrestartSidecar, Dead { ok: true }),
            (Role::Main, Dead { ok: false }),
            (Role::Poststop, Waiting),
        ];
        assert!(may_start(&tasks, 2));
    }

    #[test]
    fn sidecars_and_poststart_tasks_stop_with_the_main_tasks() {
        assert!(stops_with_main(Role::PrestartSidecar));
        assert!(stops_with_main(Role::Poststart { sidecar: true }));
        assert!(!stops_with_main(Role::Main));
        assert!(!stops_with_main(Role::Poststop));
        let tasks = [(Role::PrestartSidecar, Live), (Role::Main, Live)];
        assert!(!main_done(&tasks));
    }

    #[test]
    fn an_exit_0_ends_batch_and_hook_tasks_but_restarts_services_and_sidecars() {
        assert!(Role::Main.restarts_on_success(JobType::Service));
        assert!(Role::Main.restarts_on_success(JobType::System));
        assert!(!Role::Main.restarts_on_success(JobType::Batch));
        assert!(!Role::Main.restarts_on_success(JobType::Sysbatch));
        assert!(!Role::Prestart.restarts_on_success(JobType::Service));
        assert!(Role::PrestartSidecar.restarts_on_success(JobType::Batch));
        assert!(Role::Poststart { sidecar: true }.restarts_on_success(JobType::Batch));
        assert!(!Role::Poststart { sidecar: false }.restarts_on_success(JobType::Service));
        assert!(!Role::Poststop.restarts_on_success(JobType::Service));
    }
}
