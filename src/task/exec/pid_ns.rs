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

use crate::sys::cvt;

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
    // SAFETY: unshare(2) takes a flag word; the child is single-threaded.
    cvt(unsafe { libc::unshare(flags) }).map(drop)
}

/// Forks the task's process: returns in the grandchild, which goes on to
/// exec the task; the child waits for it, records its exit in `record`
/// and ends as it did, never returning.
pub(super) fn fork_waiter(record: &ExitRecord) -> io::Result<()> {
    // SAFETY: `dir` is NUL-terminated; the flags are plain integers.
    let dir = cvt(unsafe {
        libc::open(
            record.dir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: fork(2) in the single-threaded start helper; both sides
    // go on with system calls only.
    let child = match cvt(unsafe { libc::fork() }) {
        Ok(child) => child,
        Err(err) => {
            // SAFETY: `dir` was opened above and is closed once.
            unsafe { libc::close(dir) };
            return Err(err);
        }
    };
    if child == 0 {
        // SAFETY: `dir` is this process's copy, closed once.
        unsafe { libc::close(dir) };
        // SAFETY: prctl(2) with integer arguments.
        cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
        return Ok(());
    }
    wait_and_exit(child, dir, &record.name)
}

/// The child's side: waits for the task, records its status in `name`
/// under the directory `dir`, and ends as the task did.
fn wait_and_exit(task: libc::pid_t, dir: libc::c_int, name: &CStr) -> ! {
    close_all_but(dir);
    for signal in IGNORED {
        // SAFETY: SIG_IGN for a catchable signal; no handler runs.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let mut status = 0;
    loop {
        // SAFETY: `status` is a live c_int.
        let ret = unsafe { libc::waitpid(task, &mut status, 0) };
        if ret == task {
            break;
        }
        if ret == -1 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // SAFETY: _exit(2) ends the process at once.
            unsafe { libc::_exit(127) };
        }
    }
    record_exit(dir, name, status);
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a live rlimit; the default action of `signal` then ends
        // this process as it ended the task, without a core file.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
        }
        // SAFETY: _exit(2) ends the process at once.
        unsafe { libc::_exit(128 + signal) };
    }
    // SAFETY: _exit(2) ends the process at once.
    unsafe { libc::_exit(libc::WEXITSTATUS(status)) }
}

/// Writes `<pid> <wait status>\n` (this process's pid, the one the agent
/// tracks) to `name` under `dir`, and makes it durable: the file, then
/// its directory entry. Best effort: an agent that finds no record falls
/// back to an unknown status.
fn record_exit(dir: libc::c_int, name: &CStr, status: libc::c_int) {
    // SAFETY: `name` is NUL-terminated; `dir` is an open directory.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd == -1 {
        return;
    }
    // SAFETY: getpid(2) cannot fail.
    let pid = unsafe { libc::getpid() } as u32;
    let mut line = [0u8; 32];
    let mut len = 0;
    let (mut pid_digits, mut status_digits) = ([0u8; 12], [0u8; 12]);
    for part in [
        super::child::sys::decimal(pid, &mut pid_digits),
        b" ",
        super::child::sys::decimal(status as u32, &mut status_digits),
        b"\n",
    ] {
        line[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    // SAFETY: `line` is a live buffer of at least `len` bytes; `fd` and
    // `dir` are open descriptors of this process.
    unsafe {
        if libc::write(fd, line.as_ptr().cast(), len) == len as isize {
            libc::fsync(fd);
            libc::fsync(dir);
        }
        libc::close(fd);
    }
}

/// Closes every descriptor from 3 on but `keep`.
fn close_all_but(keep: libc::c_int) {
    let keep = keep as libc::c_uint;
    for (first, last) in [(3, keep.wrapping_sub(1)), (keep + 1, libc::c_uint::MAX)] {
        if first > last {
            continue;
        }
        // SAFETY: close_range(2) with integer arguments; closes
        // descriptors only.
        let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
        if ret == 0 {
            continue;
        }
        for fd in first..=last.min(4095) {
            // SAFETY: closing a descriptor that may not be open is
            // harmless.
            unsafe { libc::close(fd as libc::c_int) };
        }
    }
}
