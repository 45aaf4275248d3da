//! Signals to child processes, and sessions of their own.

use std::io;

use super::cvt;

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
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
