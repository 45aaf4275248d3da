//! The child's side of a start performed: [`run`] makes the system calls
//! of each step of a [`ChildSetup`] (`child.rs` prepares them in the
//! agent), in order, through [`Syscall`], in the start helper before the
//! task's exec. Nothing here allocates, takes a lock or logs: only
//! system calls on data prepared before.
//!
//! A step that fails stops the start: [`Failed`] names it and the path it
//! was about, which the helper writes to the task's stderr log
//! ([`Failed::report`]) before it tells the agent the errno.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::fd::RawFd;

use super::child::{ChildSetup, Step};
use super::pid_ns::{self, Role};
use super::syscall::{decimal, MountFlags, Namespaces, Open, Syscall};
use super::CHILD_ERROR;

/// A step of the start that failed: what it was, the path it was about
/// (empty for none), and the error.
#[derive(Debug)]
pub(super) struct Failed<'a> {
    pub(super) what: &'a [u8],
    pub(super) path: &'a [u8],
    pub(super) err: io::Error,
}

impl<'a> Failed<'a> {
    pub(super) fn new(what: &'a [u8], path: &'a [u8], err: io::Error) -> Failed<'a> {
        Failed { what, path, err }
    }

    /// Writes `csi-agent: <what><path>` to stderr (the task's log) and
    /// gives back the error.
    pub(super) fn report(self, sys: &dyn Syscall) -> io::Error {
        for part in [CHILD_ERROR.as_bytes(), self.what, self.path, b"\n"] {
            write_all(sys, 2, part);
        }
        self.err
    }
}

/// The step and its path, as [`Failed::report`] writes them (the error is
/// the source).
impl fmt::Display for Failed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = String::from_utf8_lossy(self.what);
        write!(f, "{what}{}", String::from_utf8_lossy(self.path))
    }
}

impl std::error::Error for Failed<'_> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.err)
    }
}

/// Performs `setup` in the start helper: returns in the task's process
/// ([`Role::Task`]), ready for the task's exec, and in the process the
/// agent tracks once the task has ended ([`Role::Waiter`]).
///
/// # Safety
///
/// The caller is single-threaded, as [`Syscall::fork`] needs.
pub(super) unsafe fn run<'a>(setup: &'a ChildSetup, sys: &dyn Syscall) -> Result<Role, Failed<'a>> {
    sys.setsid()
        .map_err(|e| Failed::new(b"cannot start a session", b"", e))?;
    for step in &setup.early {
        perform(step, sys)?;
    }
    // Before the PID namespace's fork, so that the process the agent
    // tracks shares the task's mounts and root (its /proc/<pid>/root).
    sys.unshare(Namespaces::MOUNT)
        .map_err(|e| Failed::new(b"cannot create a mount namespace", b"", e))?;
    pid_ns::unshare(sys, setup.pid_ns, setup.ipc_ns)
        .map_err(|e| Failed::new(b"cannot create the PID and IPC namespaces", b"", e))?;
    // SAFETY: the caller is single-threaded.
    let role = unsafe { pid_ns::fork_waiter(sys, &setup.exit_record) }.map_err(|e| {
        Failed::new(
            b"cannot fork the task's process to record its exit in ",
            setup.exit_record.dir.as_bytes(),
            e,
        )
    })?;
    if let Role::Waiter(_) = role {
        return Ok(role);
    }
    for step in &setup.steps {
        perform(step, sys)?;
    }
    Ok(Role::Task)
}

/// Makes the system calls of `step`.
fn perform<'a>(step: &'a Step, sys: &dyn Syscall) -> Result<(), Failed<'a>> {
    match step {
        Step::Mount {
            source,
            target,
            fstype,
            flags,
            data,
            tolerate_gone,
            what,
        } => {
            let source = source.as_deref().unwrap_or(c"none");
            let result = sys.mount(source, target, fstype.as_deref(), *flags, data.as_deref());
            if let Err(err) = result {
                let gone = matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOENT));
                if !(*tolerate_gone && gone) {
                    return Err(Failed::new(what, target.as_bytes(), err));
                }
            }
            Ok(())
        }
        Step::ReadOnly {
            target,
            recursive,
            remount_flags,
            what,
        } => read_only(sys, target, *recursive, *remount_flags)
            .map_err(|e| Failed::new(what, target.as_bytes(), e)),
        Step::Mkdir { path } => sys
            .mkdir(path, 0o755)
            .map_err(|e| Failed::new(b"cannot create the directory ", path.as_bytes(), e)),
        Step::CreateFile { path } => create_file(sys, path)
            .map_err(|e| Failed::new(b"cannot create the file ", path.as_bytes(), e)),
        Step::Symlink { target, link } => sys
            .symlink(target, link)
            .map_err(|e| Failed::new(b"cannot create the symlink ", link.as_bytes(), e)),
        Step::Chdir { path } => sys
            .chdir(path)
            .map_err(|e| Failed::new(b"cannot enter the working directory ", path.as_bytes(), e)),
        Step::WritePid { path } => write_pid(sys, path)
            .map_err(|e| Failed::new(b"cannot write the pid file ", path.as_bytes(), e)),
        Step::PivotRoot { root } => enter_root(sys, root)
            .map_err(|e| Failed::new(b"cannot pivot_root into ", root.as_bytes(), e)),
        Step::BecomeUser(user) => become_user(sys, user.uid, user.gid)
            .map_err(|e| Failed::new(b"cannot switch user", b"", e)),
        Step::DropBounding { keep, last } => super::caps::drop_bounding(sys, *keep, *last)
            .map_err(|e| Failed::new(b"cannot drop capabilities", b"", e)),
        Step::SetCaps { caps, last } => super::caps::set(sys, *caps, *last)
            .map_err(|e| Failed::new(b"cannot set the capabilities", b"", e)),
        Step::NoNewPrivs => sys
            .set_no_new_privs()
            .map_err(|e| Failed::new(b"cannot set no_new_privs", b"", e)),
        Step::JoinCgroup { procs } => write_zero(sys, procs)
            .map_err(|e| Failed::new(b"cannot join the cgroup ", procs.as_bytes(), e)),
        // Lowering it needs CAP_SYS_RESOURCE when a privileged parent
        // raised the agent's; without it the task runs with the agent's
        // adjustment rather than not at all.
        Step::ResetOomScoreAdj => {
            let _ = write_zero(sys, c"/proc/self/oom_score_adj");
            Ok(())
        }
    }
}

/// Makes the mount at `target` read-only: with `recursive`, it and every
/// mount below with mount_setattr(2), or the top one with a bind remount
/// (`remount_flags`) on a kernel without it.
fn read_only(
    sys: &dyn Syscall,
    target: &CStr,
    recursive: bool,
    remount_flags: MountFlags,
) -> io::Result<()> {
    if recursive {
        match sys.mount_setattr_read_only(target, true) {
            Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {}
            other => return other,
        }
    }
    sys.mount(c"none", target, None, remount_flags, None)
}

/// Writes all of `bytes`, stopping quietly at the first error or write of
/// nothing: for messages that have nowhere else to go.
fn write_all(sys: &dyn Syscall, fd: RawFd, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match sys.write(fd, bytes) {
            Ok(n) if n > 0 => bytes = &bytes[n..],
            _ => return,
        }
    }
}

/// Writes this process's pid and a newline to the file `path`, made or
/// emptied.
fn write_pid(sys: &dyn Syscall, path: &CStr) -> io::Result<()> {
    let fd = sys.open(path, Open::Truncate(0o600))?;
    let mut digits = [0u8; 12];
    write_all(sys, fd, decimal(sys.getpid(), &mut digits));
    write_all(sys, fd, b"\n");
    sys.close(fd);
    Ok(())
}

/// Writes the one byte `0` to the existing file `path`: to a
/// `cgroup.procs`, the writer joins the group.
fn write_zero(sys: &dyn Syscall, path: &CStr) -> io::Result<()> {
    let fd = sys.open(path, Open::Write)?;
    let result = match sys.write(fd, b"0") {
        Ok(1) => Ok(()),
        Ok(_) => Err(io::ErrorKind::WriteZero.into()),
        Err(err) => Err(err),
    };
    sys.close(fd);
    result
}

/// Makes the empty file `path`, to bind a device node onto.
fn create_file(sys: &dyn Syscall, path: &CStr) -> io::Result<()> {
    let fd = sys.open(path, Open::Create(0o644))?;
    sys.close(fd);
    Ok(())
}

/// Makes `root` the root of the mount namespace, as runc does: pivot with
/// the old root stacked on the new one, go back to the old root to make
/// it (and all below it) a slave, so that detaching it propagates no
/// unmount to the host, detach it, and settle at `/`.
fn enter_root(sys: &dyn Syscall, root: &CStr) -> io::Result<()> {
    let old = sys.open(c"/", Open::Directory)?;
    let result = (|| {
        sys.chdir(root)?;
        sys.pivot_root(c".", c".")?;
        sys.fchdir(old)?;
        sys.mount(
            c"none",
            c".",
            None,
            MountFlags::SLAVE | MountFlags::REC,
            None,
        )?;
        sys.umount_detach(c".")
    })();
    sys.close(old);
    result?;
    sys.chdir(c"/")
}

/// Becomes the user `uid` with `gid` as its only group: the groups, then
/// the group, then the user, after which it could change neither.
fn become_user(sys: &dyn Syscall, uid: libc::uid_t, gid: libc::gid_t) -> io::Result<()> {
    sys.setgroups(&[gid])?;
    sys.setgid(gid)?;
    sys.setuid(uid)
}
