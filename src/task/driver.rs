//! What runs a task, whatever its driver: a [`Handle`] the runner holds
//! while the task runs, how it is signalled, and how its end is told
//! ([`Exit`]).
//!
//! Every driver does the same four things, and the runner, the lifecycle
//! and the hooks (volumes, `csi_plugin`) see only these:
//!
//! | | `exec`, `raw_exec` | `docker` |
//! |---|---|---|
//! | start | fork and exec in the agent's turn ([`super::exec::spawn`]) | the engine's calls on a thread of their own; the task runs from then |
//! | signal | `kill(2)` to the task's process group | the engine's kill, on a thread |
//! | end | SIGCHLD and `waitpid`; an adopted process by its start time going away | the engine's wait, on the task's thread, reported to the loop |
//! | after a restart | the pid and start time, or the pid file the child wrote | the container, by the name the agent gave it |
//!
//! The setup before a start (task dir, environment, claimed volumes,
//! plugin dirs) is one path for every driver (`launch.rs`).

use std::io;
use std::process::{Child, ExitStatus};

use super::exec;

/// What runs a task now.
pub(super) enum Handle {
    /// A process of the `exec` or `raw_exec` driver, in its own session.
    Process {
        pid: u32,
        /// Its start time, which tells it from a later process with its pid.
        start_ticks: u64,
        /// `None` for a process adopted after an agent restart: not the
        /// agent's child, so its exit is noticed by its start time going
        /// away.
        child: Option<Child>,
    },
}

impl Handle {
    /// A process the agent just spawned.
    pub(super) fn spawned(child: Child) -> Handle {
        let pid = child.id();
        Handle::Process {
            pid,
            start_ticks: exec::start_ticks(pid).unwrap_or(0),
            child: Some(child),
        }
    }

    /// A process that outlived the agent, found again after its restart.
    pub(super) fn adopted(pid: u32, start_ticks: u64) -> Handle {
        Handle::Process {
            pid,
            start_ticks,
            child: None,
        }
    }

    /// The task's pid on the host (0 while it has none yet).
    pub(super) fn pid(&self) -> u32 {
        match self {
            Handle::Process { pid, .. } => *pid,
        }
    }

    /// The start time of [`Handle::pid`] (0 while it has none yet).
    pub(super) fn start_ticks(&self) -> u64 {
        match self {
            Handle::Process { start_ticks, .. } => *start_ticks,
        }
    }

    /// How the task is named in events and logs: `pid 42`.
    pub(super) fn describe(&self) -> String {
        match self {
            Handle::Process { pid, .. } => format!("pid {pid}"),
        }
    }

    /// Whether the loop must look now and then for the task's end: no
    /// SIGCHLD and no report tells of it.
    pub(super) fn needs_polling(&self) -> bool {
        matches!(self, Handle::Process { child: None, .. })
    }

    /// Sends `signal` to the task.
    pub(super) fn signal(&self, signal: libc::c_int) -> io::Result<()> {
        match self {
            Handle::Process { pid, .. } => exec::signal_group(*pid, signal),
        }
    }

    /// The task's end, if it has ended: a child by `waitpid`, an adopted
    /// process by its start time going away.
    pub(super) fn poll(&mut self) -> Option<Exit> {
        match self {
            Handle::Process {
                child: Some(child), ..
            } => match child.try_wait() {
                Ok(Some(status)) => Some(Exit::Status(status)),
                Ok(None) => None,
                Err(_) => Some(Exit::Vanished),
            },
            Handle::Process {
                pid,
                start_ticks,
                child: None,
            } => (exec::start_ticks(*pid) != Some(*start_ticks)).then_some(Exit::Vanished),
        }
    }
}

/// How a task ended.
#[derive(Debug)]
pub(super) enum Exit {
    Status(ExitStatus),
    /// An adopted process went away; its status is unknown.
    Vanished,
    /// It could not be started.
    StartFailed(String),
}

impl Exit {
    pub(super) fn success(&self) -> bool {
        matches!(self, Exit::Status(s) if s.success())
    }

    pub(super) fn describe(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Exit::Status(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                _ => "exited".to_string(),
            },
            Exit::Vanished => "exited while the agent was not watching".to_string(),
            Exit::StartFailed(why) => format!("failed to start: {why}"),
        }
    }
}
