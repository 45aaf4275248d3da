//! An `exec` task's PID and IPC namespaces, in the child between `fork`
//! and `exec`: system calls only, like the rest of the child's side.
//!
//! `unshare(CLONE_NEWPID)` puts only the caller's *children* in the new
//! namespace, so the child forks once more: the grandchild is PID 1 of the
//! new namespace, builds the task's root in the mount
//! namespace the child made (its `/proc` is then the new PID namespace's)
//! and execs the task; the child stays behind, in the host's
//! namespace, waits for it and exits as it did (the same status, or the
//! same signal). The agent tracks the child: its end is the task's end.
//! Both are in the task's session and process group, which the agent
//! signals, so the child ignores the signals a task is stopped with (the
//! task gets them; as PID 1 it gets only those it handles, and SIGKILL),
//! and the grandchild dies with the child (`PR_SET_PDEATHSIG`). The child
//! closes every descriptor but its stdio, the spawn's status pipe among
//! them, so that the agent's `spawn` returns once the grandchild execs.

use std::io;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

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

/// Unshares the IPC namespace (when `ipc`) and, when `pid`, the PID
/// namespace, forking into it: returns in the grandchild (PID 1 there);
/// the child never returns.
pub(super) fn enter(pid: bool, ipc: bool) -> io::Result<()> {
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
    cvt(unsafe { libc::unshare(flags) })?;
    if !pid {
        return Ok(());
    }
    // SAFETY: fork(2) in a single-threaded child of the agent; both sides
    // go on with system calls only.
    let child = cvt(unsafe { libc::fork() })?;
    if child == 0 {
        // SAFETY: prctl(2) with integer arguments.
        cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
        return Ok(());
    }
    wait_and_exit(child)
}

/// The child's side: waits for the task and ends as it did.
fn wait_and_exit(task: libc::pid_t) -> ! {
    close_from(3);
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

/// Closes every descriptor from `first` on.
fn close_from(first: libc::c_uint) {
    // SAFETY: close_range(2) with integer arguments; closes descriptors
    // only.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) };
    if ret == 0 {
        return;
    }
    for fd in first..4096 {
        // SAFETY: closing a descriptor that may not be open is harmless.
        unsafe { libc::close(fd as libc::c_int) };
    }
}
