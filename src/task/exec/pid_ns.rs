//! The process the agent tracks for an `exec` or `raw_exec` task, in the
//! start helper ([`super::helper`]) before the task's `exec`: system
//! calls only, through [`Syscall`] like the rest of the child's side.
//!
//! The helper (the child) forks: the grandchild goes on to exec the task;
//! the child stays behind, waits for it, records its exit status and
//! exits as it did (the same status, or the same signal). The agent
//! tracks the child: its end is the task's end, and the record
//! ([`super::exit_record`]) tells the task's status to an agent that was
//! not there to reap it (it was killed and restarted meanwhile), as
//! Nomad's executor, which outlives its client, does.
//!
//! For an `exec` task in a PID namespace of its own (`pid_mode`),
//! `unshare(CLONE_NEWPID)` puts only the caller's *children* in the new
//! namespace: the grandchild is PID 1 there, builds the task's root in
//! the mount namespace the child made (its `/proc` is then the new PID
//! namespace's) and execs the task, while the child stays in the host's.
//! With `pid_mode = "host"`, and for `raw_exec`, the grandchild is the
//! task in the host's namespace. The child opens the record's directory
//! before the fork: the task's `pivot_root` changes the root of every
//! process of the mount namespace, the child's too.
//!
//! Both are in the task's session and process group, which the agent
//! signals, so the child ignores the signals a task is stopped with (the
//! task gets them; as PID 1 it gets only those it handles, and SIGKILL),
//! and the grandchild dies with the child (`PR_SET_PDEATHSIG`). The child
//! closes every descriptor but its stdio and the record's directory, the
//! helper's status socket among them, so that the agent's `spawn` returns
//! once the grandchild execs.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;

use super::syscall::{decimal, Fork, Namespaces, Open, SignalAction, Syscall};
use crate::sys::process;

/// The signals the child ignores while it waits: those a task is stopped
/// with, and those a terminal or a closed pipe would send.
const IGNORED: [libc::c_int; 8] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
];

/// The exit code of a waiter that lost its task (its wait failed).
const LOST: libc::c_int = 127;

/// Where the child records the task's exit: the file `name` in the
/// directory `dir`, prepared before fork.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ExitRecord {
    pub(super) dir: CString,
    pub(super) name: CString,
}

/// Which process [`fork_waiter`] returns in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// The task's process, which goes on to exec the task.
    Task,
    /// The waiter, once the task has ended and its exit is recorded: it
    /// ends as the task did.
    Waiter(End),
}

/// How a task ended, as its waiter ends too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// It exited with this code.
    Exited(libc::c_int),
    /// This signal killed it.
    Signalled(libc::c_int),
}

impl End {
    /// How the wait status `status` ended a process.
    fn of(status: libc::c_int) -> End {
        if libc::WIFSIGNALED(status) {
            End::Signalled(libc::WTERMSIG(status))
        } else {
            End::Exited(libc::WEXITSTATUS(status))
        }
    }

    /// Ends this process the same way.
    pub(super) fn exit(self) -> ! {
        match self {
            End::Exited(code) => process::exit_now(code),
            End::Signalled(signal) => process::exit_as_signalled(signal),
        }
    }
}

/// Unshares the IPC namespace (when `ipc`) and the PID namespace (when
/// `pid`): the task, forked next, is PID 1 of the new one.
pub(super) fn unshare(sys: &dyn Syscall, pid: bool, ipc: bool) -> io::Result<()> {
    let mut namespaces = Namespaces::NONE;
    if ipc {
        namespaces = namespaces | Namespaces::IPC;
    }
    if pid {
        namespaces = namespaces | Namespaces::PID;
    }
    if namespaces.is_empty() {
        return Ok(());
    }
    sys.unshare(namespaces)
}

/// Forks the task's process: returns [`Role::Task`] in the grandchild,
/// which goes on to exec the task; the child waits for it, records its
/// exit in `record` and returns [`Role::Waiter`], to end as it did.
///
/// # Safety
///
/// The caller is single-threaded (the start helper): see
/// [`Syscall::fork`].
pub(super) unsafe fn fork_waiter(sys: &dyn Syscall, record: &ExitRecord) -> io::Result<Role> {
    let dir = sys.open(&record.dir, Open::Directory)?;
    // SAFETY: the caller is single-threaded; both sides go on with system
    // calls only.
    let child = match unsafe { sys.fork() } {
        Ok(Fork::Parent(child)) => child,
        Ok(Fork::Child) => {
            sys.close(dir);
            sys.set_parent_death_signal(libc::SIGKILL)?;
            return Ok(Role::Task);
        }
        Err(err) => {
            sys.close(dir);
            return Err(err);
        }
    };
    Ok(Role::Waiter(wait_for(sys, child, dir, &record.name)))
}

/// The child's side: waits for the task, records its status in `name`
/// under the directory `dir`, and tells how the task ended.
fn wait_for(sys: &dyn Syscall, task: libc::pid_t, dir: RawFd, name: &CStr) -> End {
    close_all_but(sys, dir);
    for signal in IGNORED {
        sys.set_signal(signal, SignalAction::Ignore);
    }
    let Ok(status) = sys.wait(task) else {
        return End::Exited(LOST);
    };
    record_exit(sys, dir, name, status);
    End::of(status)
}

/// Writes `<pid> <wait status>\n` (this process's pid, the one the agent
/// tracks) to `name` under `dir`, and makes it durable: the file, then
/// its directory entry. Best effort: an agent that finds no record falls
/// back to an unknown status.
fn record_exit(sys: &dyn Syscall, dir: RawFd, name: &CStr, status: libc::c_int) {
    let Ok(fd) = sys.openat(dir, name, Open::TruncateNoFollow(0o600)) else {
        return;
    };
    let mut line = [0u8; 32];
    let mut len = 0;
    let (mut pid_digits, mut status_digits) = ([0u8; 12], [0u8; 12]);
    for part in [
        decimal(sys.getpid(), &mut pid_digits),
        b" ",
        decimal(status as u32, &mut status_digits),
        b"\n",
    ] {
        line[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    if sys.write(fd, &line[..len]).ok() == Some(len) {
        let _ = sys.fsync(fd);
        let _ = sys.fsync(dir);
    }
    sys.close(fd);
}

/// Closes every descriptor from 3 on but `keep`.
fn close_all_but(sys: &dyn Syscall, keep: RawFd) {
    let keep = keep as libc::c_uint;
    for (first, last) in [(3, keep.wrapping_sub(1)), (keep + 1, libc::c_uint::MAX)] {
        if first <= last {
            sys.close_range(first, last);
        }
    }
}
