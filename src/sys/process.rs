//! Signals to child processes, and sessions of their own.

use std::io;

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

fn pid_t(pid: u32) -> io::Result<libc::pid_t> {
    libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))
}

/// Calls kill(2): a positive `pid` is a process, a negative one a group.
fn raw_kill(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes plain integers and has no memory effects; a
    // stale pid is an error (ESRCH), not undefined behaviour.
    cvt(unsafe { libc::kill(pid, signal) })?;
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
            cvt(libc::setsid())?;
            Ok(())
        })
    }
}
