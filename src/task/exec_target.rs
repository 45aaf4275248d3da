//! What `alloc exec` joins and what `alloc fs` reads, looked up on the
//! main loop: the running task's process (or container) and the alloc's
//! dir. The loop only looks them up; the session's own thread
//! (`api::session`) does the rest.

use std::path::PathBuf;

use super::driver::Handle;
use super::{invalid, Allocs, TaskState};
use crate::call::{CallError, ErrorKind};
use crate::spec::Driver;

/// `alloc exec`'s lookup: an alloc ID or prefix, and a task (may be empty
/// when the alloc has one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecLookup {
    pub alloc_id: String,
    pub task: String,
}

/// What a session (`alloc exec`, `alloc fs`) asks the main loop for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionLookup {
    Exec(ExecLookup),
    /// The dir of alloc `alloc_id` (an ID or a prefix of one).
    Fs {
        alloc_id: String,
    },
    /// Where the figures of alloc `alloc_id`'s tasks are (`alloc_stats.rs`).
    Stats {
        alloc_id: String,
    },
    /// Whether alloc `alloc_id` is done (`alloc fs -f` ends then).
    Done {
        alloc_id: String,
    },
}

/// The main loop's answer to a [`SessionLookup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionTarget {
    Exec(ExecTarget),
    Docker(DockerTarget),
    /// The alloc's dir.
    Fs(PathBuf),
    Stats(super::alloc_stats::StatsTarget),
    /// Whether the alloc is done: terminal, or no longer known.
    Done(bool),
}

/// A running `exec` (`own_root`) or `raw_exec` task to run a command in:
/// the process the agent tracks (the start helper, whose child is the
/// task, in its PID namespace when it has one) and the task's dir on the
/// host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecTarget {
    pub pid: u32,
    pub own_root: bool,
    pub task_dir: PathBuf,
}

/// A running `docker` task to run a command in: its container, on the
/// engine at `endpoint`. The session's thread makes the engine's calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerTarget {
    pub endpoint: String,
    pub container: String,
}

impl Allocs {
    /// Answers a session's lookup, from the loop's state only.
    pub fn session(&self, lookup: &SessionLookup) -> Result<SessionTarget, CallError> {
        match lookup {
            SessionLookup::Exec(req) => self.exec_target(req),
            SessionLookup::Fs { alloc_id } => self.fs_root(alloc_id).map(SessionTarget::Fs),
            SessionLookup::Stats { alloc_id } => {
                self.stats_target(alloc_id).map(SessionTarget::Stats)
            }
            SessionLookup::Done { alloc_id } => Ok(SessionTarget::Done(
                self.allocs
                    .get(alloc_id)
                    .map_or(true, |a| a.status.is_terminal()),
            )),
        }
    }

    /// `alloc exec`: the running task a command joins.
    fn exec_target(&self, req: &ExecLookup) -> Result<SessionTarget, CallError> {
        let alloc = &self.allocs[&self.alloc_by_prefix(&req.alloc_id)?];
        let names: Vec<&str> = alloc.tasks.iter().map(|t| t.name.as_str()).collect();
        let task = if req.task.is_empty() {
            match alloc.tasks.as_slice() {
                [one] => one,
                _ => {
                    return Err(invalid(format!(
                        "alloc {} has {} tasks: name one with -task ({})",
                        alloc.id,
                        names.len(),
                        names.join(", ")
                    )))
                }
            }
        } else {
            alloc
                .tasks
                .iter()
                .find(|t| t.name == req.task)
                .ok_or_else(|| {
                    CallError::not_found(format!(
                        "alloc {} has no task {:?} (tasks: {})",
                        alloc.id,
                        req.task,
                        names.join(", ")
                    ))
                })?
        };
        let not_running = || {
            CallError::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "task {:?} of alloc {} is not running ({})",
                    task.name,
                    alloc.id,
                    task.state.as_str()
                ),
            )
        };
        if task.state != TaskState::Running {
            return Err(not_running());
        }
        let process = task.process.as_ref().ok_or_else(not_running)?;
        let pid = process.handle.pid();
        if pid == 0 {
            return Err(not_running());
        }
        let spec = alloc
            .group
            .tasks
            .iter()
            .find(|t| t.name == task.name)
            .ok_or_else(not_running)?;
        if spec.driver == Driver::Docker {
            let Handle::Container { name, .. } = &process.handle else {
                return Err(not_running());
            };
            return Ok(SessionTarget::Docker(DockerTarget {
                endpoint: self.docker_settings.endpoint.clone(),
                container: name.clone(),
            }));
        }
        Ok(SessionTarget::Exec(ExecTarget {
            pid,
            own_root: spec.driver == Driver::Exec,
            task_dir: self.alloc_dir(&alloc.id).join(&task.name),
        }))
    }

    /// `alloc fs`: the alloc's dir.
    fn fs_root(&self, alloc_id: &str) -> Result<PathBuf, CallError> {
        Ok(self.alloc_dir(&self.alloc_by_prefix(alloc_id)?))
    }
}
