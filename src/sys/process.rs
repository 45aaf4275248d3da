//! Processes: signals to children and to groups, sessions, namespaces,
//! the start helper's fork, wait and exit, and what a helper process asks
//! of the kernel for itself (its parent's death, bounds on its address
//! space and its core dumps).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::cvt;

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: libc::c_int) -> io::Result<()> {
    raw_kill(pid_t(pid)?, signal)
}

/// Sends `signal` to every process of the process group `pgid` (a
/// session's leader's pid is its group's).
pub fn kill_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
    raw_kill(-pid_t(pgid)?, signal)
}

/// `pid` as kill(2) takes it: 0, which kill(2) reads as the caller's own
/// process group, is no process of ours to signal.
fn pid_t(pid: u32) -> io::Result<libc::pid_t> {
    match libc::pid_t::try_from(pid) {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "pid out of range",
        )),
    }
}

/// Calls kill(2): a positive `pid` is a process, a negative one a group.
fn raw_kill(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes plain integers and has no memory effects; a
    // stale pid is an error (ESRCH), not undefined behaviour.
    cvt(unsafe { libc::kill(pid, signal) })?;
    Ok(())
}

/// A process pinned by a pidfd (pidfd_open(2), Linux 5.3): a signal sent
/// through it reaches that process or fails, never another that took its
/// pid after it ended.
#[derive(Debug)]
pub struct Pidfd(OwnedFd);

impl Pidfd {
    /// Pins process `pid`, as it is now.
    pub fn open(pid: u32) -> io::Result<Pidfd> {
        let pid = pid_t(pid)?;
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new
        // descriptor or -1; no memory is passed.
        let fd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
        let fd = libc::c_int::try_from(fd)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "pidfd out of range"))?;
        // SAFETY: the kernel just returned `fd`, a descriptor nothing else
        // owns.
        Ok(Pidfd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Sends `signal` to the pinned process; ESRCH once it has ended.
    pub fn signal(&self, signal: libc::c_int) -> io::Result<()> {
        // SAFETY: pidfd_send_signal(2) with a null siginfo and no flags
        // reads no memory of ours; the descriptor is open while `self` is.
        cvt(unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        })?;
        Ok(())
    }
}

/// Makes `cmd`'s process the leader of a session of its own when it
/// starts, so that it outlives this process and its process group.
pub fn in_new_session(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec, where only
    // async-signal-safe calls are allowed: setsid(2) is one, and the
    // closure touches no memory but its own.
    unsafe {
        cmd.pre_exec(|| {
            cvt(libc::setsid())?;
            Ok(())
        })
    }
}

/// Calls setsid(2): the caller leads a new session and process group.
pub fn setsid() -> io::Result<()> {
    // SAFETY: setsid(2) takes no arguments.
    cvt(unsafe { libc::setsid() }).map(drop)
}

/// The caller's pid (getpid(2), which cannot fail).
pub fn getpid() -> u32 {
    // SAFETY: getpid(2) takes no arguments.
    unsafe { libc::getpid() as u32 }
}

/// Calls unshare(2) with the `CLONE_NEW*` namespaces in `flags`.
pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare(2) takes a flag word.
    cvt(unsafe { libc::unshare(flags) }).map(drop)
}

/// Calls fork(2): the child's pid in the parent, 0 in the child.
///
/// # Safety
///
/// The caller is single-threaded, or the child calls only
/// async-signal-safe functions until it execs or exits.
pub unsafe fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: the caller upholds the function's contract.
    cvt(unsafe { libc::fork() })
}

/// Asks for `signal` when the parent dies (`PR_SET_PDEATHSIG`).
pub fn set_parent_death_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl(2) with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) }).map(drop)
}

/// Ignores `signal` (`SIG_IGN`), which must be catchable.
pub fn ignore_signal(signal: libc::c_int) {
    // SAFETY: SIG_IGN installs no handler, so no code of ours runs.
    unsafe { libc::signal(signal, libc::SIG_IGN) };
}

/// Gives `signal` its default action (`SIG_DFL`).
pub fn default_signal(signal: libc::c_int) {
    // SAFETY: SIG_DFL installs no handler, so no code of ours runs.
    unsafe { libc::signal(signal, libc::SIG_DFL) };
}

/// Waits for the child `pid` to end (waitpid(2), again after `EINTR`):
/// its wait status.
pub fn wait(pid: libc::pid_t) -> io::Result<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a live c_int.
        match cvt(unsafe { libc::waitpid(pid, &mut status, 0) }) {
            Ok(_) => return Ok(status),
            Err(err) if err.raw_os_error() == Some(libc::EINTR) => continue,
            Err(err) => return Err(err),
        }
    }
}

/// Ends the process at once with `code` (_exit(2)): no destructors, no
/// atexit handlers, no flushing.
pub fn exit_now(code: libc::c_int) -> ! {
    // SAFETY: _exit(2) ends the process; nothing of ours runs after it.
    unsafe { libc::_exit(code) }
}

/// Ends the process by `signal`, as a process killed by it ends, without
/// a core file; with `128 + signal` should the signal not end it.
pub fn exit_as_signalled(signal: libc::c_int) -> ! {
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a live rlimit; the default action of `signal` then ends
    // this process, without a core file.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(signal, libc::SIG_DFL);
        libc::kill(libc::getpid(), signal);
    }
    exit_now(128 + signal)
}

/// The monotonic clock (`CLOCK_MONOTONIC`, clock_gettime(2)) in
/// microseconds: the same clock in every process of the host.
pub fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC exists
    // on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// This process's parent.
pub fn parent_pid() -> u32 {
    // SAFETY: getppid(2) cannot fail and touches no memory.
    let pid = unsafe { libc::getppid() };
    u32::try_from(pid).unwrap_or(0)
}

/// Bounds this process's address space to `bytes` (`RLIMIT_AS`, soft and
/// hard): past it, an allocation fails, which ends a Rust process.
pub fn limit_address_space(bytes: u64) -> io::Result<()> {
    let limit = rlimit(bytes);
    // SAFETY: setrlimit(2) reads the live `limit` for the call's length.
    cvt(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }).map(drop)
}

/// Makes this process leave no core dump when it crashes (`RLIMIT_CORE`
/// 0): its memory may hold secrets.
pub fn no_core_dumps() -> io::Result<()> {
    let limit = rlimit(0);
    // SAFETY: setrlimit(2) reads the live `limit` for the call's length.
    cvt(unsafe { libc::setrlimit(libc::RLIMIT_CORE, &limit) }).map(drop)
}

/// A limit of `value`, soft and hard.
fn rlimit(value: u64) -> libc::rlimit {
    libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_zero_and_pids_beyond_pid_t_are_refused_not_read_as_our_own_group() {
        for pid in [0, u32::MAX] {
            assert_eq!(
                kill(pid, 0).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
            assert_eq!(
                kill_group(pid, 0).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
        }
        kill(getpid(), 0).unwrap();
    }

    #[test]
    // The child is reaped by `wait`, which clippy does not see.
    #[allow(clippy::zombie_processes)]
    fn a_pidfd_signals_its_process_and_none_after_it_ended() {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pinned = Pidfd::open(child.id()).unwrap();
        pinned.signal(0).unwrap();
        pinned.signal(libc::SIGKILL).unwrap();
        let status = wait(child.id() as libc::pid_t).unwrap();
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
        // Reaped: its pid may be anyone's now, the pidfd still names it.
        let err = pinned.signal(libc::SIGKILL).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ESRCH));
        assert!(Pidfd::open(0).is_err());
    }

    #[test]
    // The child is reaped by `wait`, which clippy does not see.
    #[allow(clippy::zombie_processes)]
    fn wait_gives_a_child_s_wait_status() {
        let child = std::process::Command::new("sh")
            .args(["-c", "exit 7"])
            .spawn()
            .unwrap();
        let status = wait(child.id() as libc::pid_t).unwrap();
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 7);
    }
}
