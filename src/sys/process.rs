//! Signals to child processes, and sessions of their own; what a helper
//! process asks of the kernel for itself (its parent's death, a bound on its
//! address space).

use std::io;

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) takes plain integers and has no memory effects; a
    // stale pid is an error (ESRCH), not undefined behaviour.
    if unsafe { libc::kill(pid, signal) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Asks the kernel to send this process `signal` when the thread that
/// started it ends (`PR_SET_PDEATHSIG`).
pub fn die_with_parent(signal: libc::c_int) -> io::Result<()> {
    let signal = libc::c_ulong::try_from(signal)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "signal out of range"))?;
    // SAFETY: prctl(2) with PR_SET_PDEATHSIG takes a plain integer and
    // touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes this process leave no core dump when it crashes (`RLIMIT_CORE`
/// 0): its memory may hold secrets.
pub fn no_core_dumps() -> io::Result<()> {
    let limit = rlimit(0);
    // SAFETY: setrlimit(2) reads the live `limit` for the call's length.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &limit) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A limit of `value`, soft and hard.
fn rlimit(value: u64) -> libc::rlimit {
    libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    }
}
