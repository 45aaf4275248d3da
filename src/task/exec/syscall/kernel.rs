//! The [`Syscall`] that asks the kernel: each method one wrapper of
//! [`crate::sys`] or [`crate::mount`], which holds the call's `unsafe`,
//! but the exec, whose `environ` is the helper's own. Nothing here
//! allocates.

use std::ffi::{c_char, CStr};
use std::io;
use std::os::fd::RawFd;

use libc::{c_int, c_uint, gid_t, mode_t, pid_t, uid_t};

use super::{CStrArray, Fork, MountFlags, Namespaces, Open, SignalAction, Syscall};
use crate::mount;
use crate::sys::{caps, fd, process, tty, user};

/// The [`Syscall`] that makes the calls; the start helper's.
#[derive(Clone, Copy, Debug, Default)]
pub(in crate::task::exec) struct Kernel;

extern "C" {
    /// The C library's environment, which `execvp` passes on and whose
    /// `PATH` it searches.
    static mut environ: *const *const c_char;
}

impl Syscall for Kernel {
    fn setsid(&self) -> io::Result<()> {
        process::setsid()
    }

    fn getpid(&self) -> u32 {
        process::getpid()
    }

    fn unshare(&self, namespaces: Namespaces) -> io::Result<()> {
        process::unshare(namespaces.bits())
    }

    unsafe fn fork(&self) -> io::Result<Fork> {
        // SAFETY: the caller upholds this method's contract, which is
        // `process::fork`'s.
        let pid = unsafe { process::fork() }?;
        Ok(if pid == 0 {
            Fork::Child
        } else {
            Fork::Parent(pid)
        })
    }

    fn set_parent_death_signal(&self, signal: c_int) -> io::Result<()> {
        process::set_parent_death_signal(signal)
    }

    fn set_signal(&self, signal: c_int, action: SignalAction) {
        match action {
            SignalAction::Ignore => process::ignore_signal(signal),
            SignalAction::Default => process::default_signal(signal),
        }
    }

    fn wait(&self, pid: pid_t) -> io::Result<c_int> {
        process::wait(pid)
    }

    fn open(&self, path: &CStr, how: Open) -> io::Result<RawFd> {
        fd::open(path, how.flags(), how.mode())
    }

    fn openat(&self, dir: RawFd, name: &CStr, how: Open) -> io::Result<RawFd> {
        fd::openat(dir, name, how.flags(), how.mode())
    }

    fn write(&self, fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
        fd::write(fd, bytes)
    }

    fn fsync(&self, fd: RawFd) -> io::Result<()> {
        fd::fsync(fd)
    }

    fn close(&self, fd: RawFd) {
        fd::close(fd)
    }

    fn close_range(&self, first: c_uint, last: c_uint) {
        fd::close_range(first, last)
    }

    fn dup_cloexec(&self, fd: RawFd, lowest: RawFd) -> io::Result<RawFd> {
        fd::dup_cloexec(fd, lowest)
    }

    fn dup2(&self, fd: RawFd, onto: RawFd) -> io::Result<()> {
        fd::dup2(fd, onto)
    }

    fn mkdir(&self, path: &CStr, mode: mode_t) -> io::Result<()> {
        fd::mkdir(path, mode)
    }

    fn symlink(&self, target: &CStr, link: &CStr) -> io::Result<()> {
        fd::symlink(target, link)
    }

    fn chdir(&self, path: &CStr) -> io::Result<()> {
        fd::chdir(path)
    }

    fn fchdir(&self, fd: RawFd) -> io::Result<()> {
        fd::fchdir(fd)
    }

    fn mount(
        &self,
        source: &CStr,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: MountFlags,
        data: Option<&CStr>,
    ) -> io::Result<()> {
        mount::mount_fs(source, target, fstype, flags.bits(), data)
    }

    fn mount_setattr_read_only(&self, target: &CStr, recursive: bool) -> io::Result<()> {
        mount::mount_setattr_read_only(target, recursive)
    }

    fn umount_detach(&self, target: &CStr) -> io::Result<()> {
        mount::umount_raw(target, libc::MNT_DETACH)
    }

    fn pivot_root(&self, new_root: &CStr, put_old: &CStr) -> io::Result<()> {
        mount::pivot_root(new_root, put_old)
    }

    fn setgroups(&self, groups: &[gid_t]) -> io::Result<()> {
        user::setgroups(groups)
    }

    fn setgid(&self, gid: gid_t) -> io::Result<()> {
        user::setgid(gid)
    }

    fn setuid(&self, uid: uid_t) -> io::Result<()> {
        user::setuid(uid)
    }

    fn drop_bounding(&self, cap: u32) -> io::Result<()> {
        caps::drop_bounding(cap)
    }

    fn capset(&self, caps: u64) -> io::Result<()> {
        caps::set_sets(caps)
    }

    fn raise_ambient(&self, cap: u32) -> io::Result<()> {
        caps::raise_ambient(cap)
    }

    fn set_no_new_privs(&self) -> io::Result<()> {
        caps::set_no_new_privs()
    }

    fn setns(&self, fd: RawFd) -> io::Result<()> {
        tty::setns(fd)
    }

    fn chroot(&self, path: &CStr) -> io::Result<()> {
        tty::chroot(path)
    }

    unsafe fn exec(&self, command: &CStr, argv: &CStrArray<'_>, env: &CStrArray<'_>) -> io::Error {
        // SAFETY: the caller is single-threaded, so nothing else reads
        // `environ` meanwhile; `env` and `argv` are null-terminated
        // vectors of strings alive until exec replaces the process, and
        // `command` is a NUL-terminated string.
        unsafe {
            environ = env.as_ptr();
            libc::execvp(command.as_ptr(), argv.as_ptr());
        }
        io::Error::last_os_error()
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    /// A directory of this test's own, removed at the end.
    struct TempDir(std::path::PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn c(path: &std::path::Path) -> CString {
        CString::new(path.as_os_str().as_bytes()).unwrap()
    }

    #[test]
    fn the_kernel_makes_the_file_calls_a_start_makes() {
        let dir =
            TempDir(std::env::temp_dir().join(format!("csi-agent-syscall-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).unwrap();
        let sys = Kernel;
        let sub = c(&dir.0.join("sub"));
        sys.mkdir(&sub, 0o755).unwrap();
        let dir_fd = sys.open(&sub, Open::Directory).unwrap();
        let file = sys
            .openat(dir_fd, c"record", Open::TruncateNoFollow(0o600))
            .unwrap();
        let mut digits = [0u8; 12];
        let line = super::super::decimal(sys.getpid(), &mut digits);
        assert_eq!(sys.write(file, line).unwrap(), line.len());
        sys.fsync(file).unwrap();
        sys.close(file);
        sys.close(dir_fd);
        let written = std::fs::read_to_string(dir.0.join("sub/record")).unwrap();
        assert_eq!(written, std::process::id().to_string());

        let link = c(&dir.0.join("link"));
        sys.symlink(c"sub/record", &link).unwrap();
        let err = sys
            .open(&link, Open::TruncateNoFollow(0o600))
            .expect_err("a symlink is refused");
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
        let err = sys.mkdir(&sub, 0o755).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    }
}
