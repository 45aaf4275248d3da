//! What runs a task, whatever its driver: a [`Handle`] the runner holds
//! while the task runs, how it is signalled, and how its end is told
//! ([`Exit`]).
//!
//! Every driver does the same four things, and the runner, the lifecycle
//! and the hooks (volumes, `csi_plugin`) see only these:
//!
//! | | `exec`, `raw_exec` | `docker` |
//! |---|---|---|
//! | start | the start helper on a starter thread ([`super::exec::spawn`]) | the container's spec on a starter thread, then the engine's calls on a thread of their own |
//! | signal | `kill(2)` to the task's process group | the engine's kill, on a thread |
//! | end | SIGCHLD and `waitpid`; an adopted process by its start time going away, its status from its exit record | the engine's wait, on the task's thread, reported to the loop |
//! | after a restart | the pid and start time, or the pid file the child wrote | the container, by the name the agent gave it |
//!
//! The setup before a start (task dir, environment, claimed volumes,
//! plugin dirs) is one path for every driver (`launch.rs`), off the loop
//! on the starter's threads (`starter.rs`).

use std::io;
use std::process::Child;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::docker::Docker;
use super::exec;
use super::exit::Exit;

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
    /// A container of the `docker` driver, which a thread of the driver
    /// starts and watches ([`super::docker`]).
    Container {
        /// Its name, `<task>-<alloc>`, by which it is signalled.
        name: String,
        /// Which start of the task it is: reports of an earlier one are
        /// stale.
        run: u64,
        /// Its init's pid on the host and that pid's start time, once it
        /// runs (0 until then).
        pid: u32,
        start_ticks: u64,
        /// Set when it is to stop: a start on its way gives up.
        stopping: Arc<AtomicBool>,
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
            Handle::Process { pid, .. } | Handle::Container { pid, .. } => *pid,
        }
    }

    /// The start time of [`Handle::pid`] (0 while it has none yet).
    pub(super) fn start_ticks(&self) -> u64 {
        match self {
            Handle::Process { start_ticks, .. } | Handle::Container { start_ticks, .. } => {
                *start_ticks
            }
        }
    }

    /// How the task is named in events and logs: `pid 42`.
    pub(super) fn describe(&self) -> String {
        match self {
            Handle::Process { pid, .. } => format!("pid {pid}"),
            Handle::Container { name, .. } => format!("container {name}"),
        }
    }

    /// Whether the loop must look now and then for the task's end: no
    /// SIGCHLD and no report tells of it.
    pub(super) fn needs_polling(&self) -> bool {
        matches!(self, Handle::Process { child: None, .. })
    }

    /// Sends `signal` to the task, which is to stop.
    pub(super) fn signal(&self, signal: libc::c_int, docker: &mut Docker) -> io::Result<()> {
        match self {
            Handle::Process { pid, .. } => exec::signal_group(*pid, signal),
            Handle::Container { name, stopping, .. } => {
                docker.signal(name, signal, stopping);
                Ok(())
            }
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
            // Its driver's thread reports its end.
            Handle::Container { .. } => None,
        }
    }
}
