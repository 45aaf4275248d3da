//! The process the agent tracks for an `exec` or `raw_exec` task, in the
//! start helper ([`super::helper`]) before the task's `exec`: system
//! calls only, like the rest of the child's side.
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

use crate::sys::{fd, process};

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

/// Where the child records the task's exit: the file `name` in the
/// directory `dir`, prepared before fork.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ExitRecord {
    pub(super) dir: CString,
    pub(super) name: CString,
}

/// Unshares the IPC namespace (when `ipc`) and the PID namespace (when
/// `pid`): the task, forked next, is PID 1 of the new one.
pub(super) fn unshare(pid: bool, ipc: bool) -> io::Result<()> {
    let mut flags = 0;
    if ipc {
        flags |= libc::CLONE_NEWIPC;
    }
    if pid {
        flags |= libc::CLONE_NEWPID;
    }
    if flags == 0 {
        return Ok(());
    }
    process::unshare(flags)
}

/// Forks the task's process: returns in the grandchild, which goes on to
/// exec the task; the child waits for it, records its exit in `record`
/// and ends as it did, never returning.
pub(super) fn fork_waiter(record: &ExitRecord) -> io::Result<()> {
    let dir = fd::open(
        &record.dir,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    )?;
    // SAFETY: the start helper is single-threaded; both sides go on with
    // system calls only.
    let child = match unsafe { process::fork() } {
        Ok(child) => child,
        Err(err) => {
            fd::close(dir);
            return Err(err);
        }
    };
    if child == 0 {
        fd::close(dir);
        process::set_parent_death_signal(libc::SIGKILL)?;
        return Ok(());
    }
    wait_and_exit(child, dir, &record.name)
}

/// The child's side: waits for the task, records its status in `name`
/// under the directory `dir`, and ends as the task did.
fn wait_and_exit(task: libc::pid_t, dir: libc::c_int, name: &CStr) -> ! {
    close_all_but(dir);
    for signal in IGNORED {
        process::ignore_signal(signal);
    }
    let Ok(status) = process::wait(task) else {
        process::exit_now(127)
    };
    record_exit(dir, name, status);
    if libc::WIFSIGNALED(status) {
        process::exit_as_signalled(libc::WTERMSIG(status))
    }
    process::exit_now(libc::WEXITSTATUS(status))
}

/// Writes `<pid> <wait status>\n` (this process's pid, the one the agent
/// tracks) to `name` under `dir`, and makes it durable: the file, then
/// its directory entry. Best effort: an agent that finds no record falls
/// back to an unknown status.
fn record_exit(dir: libc::c_int, name: &CStr, status: libc::c_int) {
    let Ok(fd) = fd::openat(
        dir,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        0o600,
    ) else {
        return;
    };
    let mut line = [0u8; 32];
    let mut len = 0;
    let (mut pid_digits, mut status_digits) = ([0u8; 12], [0u8; 12]);
    for part in [
        super::child::sys::decimal(process::getpid(), &mut pid_digits),
        b" ",
        super::child::sys::decimal(status as u32, &mut status_digits),
        b"\n",
    ] {
        line[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    if fd::write(fd, &line[..len]).ok() == Some(len) {
        let _ = fd::fsync(fd);
        let _ = fd::fsync(dir);
    }
    fd::close(fd);
}

/// Closes every descriptor from 3 on but `keep`.
fn close_all_but(keep: libc::c_int) {
    let keep = keep as libc::c_uint;
    for (first, last) in [(3, keep.wrapping_sub(1)), (keep + 1, libc::c_uint::MAX)] {
        if first <= last {
            fd::close_range(first, last);
        }
    }
}
