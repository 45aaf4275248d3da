//! The system calls of a task's start, behind one trait, [`Syscall`], so
//! that what a start asks of the kernel, and in which order, is tested
//! in-process, without root and without forking.
//!
//! Everything the start helper ([`super::helper`]) does between reading
//! its start and the task's exec goes through it: its stdin, its session,
//! the files it writes by descriptor (its control groups' `cgroup.procs`,
//! the pid file, the exit record), the namespaces it unshares, the fork
//! of the task's process and the waiter's wait, the mounts of the task's
//! root and the pivot into it, the task's user, its capabilities and
//! `no_new_privs`, its `work_dir`, and the exec; and all that the enter
//! helper of `alloc exec` does to join a running task (`enter.rs`: its
//! control groups, namespaces, root, working dir and user). [`Kernel`] makes the
//! calls, each over a wrapper of [`crate::sys`] or [`crate::mount`] that
//! holds its `unsafe`; `RecordingSyscall` (`recording.rs`, tests only)
//! records each call with its arguments, in order, and fails the one it
//! is told to. How the helper's process ends once it has failed or the
//! task has ended (`_exit`, or the signal the task died of) is not a
//! call of the start: nothing follows it, and a test could not go on
//! after it.
//!
//! The arguments are typed: paths are the C strings the agent made, so
//! that the calls allocate nothing; mount flags are [`MountFlags`],
//! namespaces [`Namespaces`], the way a file is opened an [`Open`], exec's
//! vectors a [`CStrArray`].

mod kernel;
#[cfg(test)]
mod recording;

use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::io;
use std::ops::BitOr;
use std::os::fd::RawFd;
use std::ptr;

use libc::{c_int, c_uint, c_ulong, gid_t, mode_t, pid_t, uid_t};

pub(super) use kernel::Kernel;
#[cfg(test)]
pub(super) use recording::{Call, RecordingSyscall};

/// The system calls of a start, one method each, as the kernel takes them;
/// [`Kernel`] makes them.
pub(super) trait Syscall {
    /// setsid(2): the caller leads a session and process group of its own.
    fn setsid(&self) -> io::Result<()>;

    /// getpid(2).
    fn getpid(&self) -> u32;

    /// unshare(2) of `namespaces`.
    fn unshare(&self, namespaces: Namespaces) -> io::Result<()>;

    /// fork(2): which side of it the caller is on.
    ///
    /// # Safety
    ///
    /// The caller is single-threaded, or the child makes only
    /// async-signal-safe calls until it execs or exits.
    unsafe fn fork(&self) -> io::Result<Fork>;

    /// prctl(2) `PR_SET_PDEATHSIG`: `signal` when the parent dies.
    fn set_parent_death_signal(&self, signal: c_int) -> io::Result<()>;

    /// signal(2): what `signal` does to the caller from now on.
    fn set_signal(&self, signal: c_int, action: SignalAction);

    /// waitpid(2) for the child `pid`, again after `EINTR`: its wait
    /// status.
    fn wait(&self, pid: pid_t) -> io::Result<c_int>;

    /// open(2) of `path`, closed on exec.
    fn open(&self, path: &CStr, how: Open) -> io::Result<RawFd>;

    /// openat(2) of `name` beneath the open directory `dir`, closed on
    /// exec.
    fn openat(&self, dir: RawFd, name: &CStr, how: Open) -> io::Result<RawFd>;

    /// write(2) once: how many bytes of `bytes` went out.
    fn write(&self, fd: RawFd, bytes: &[u8]) -> io::Result<usize>;

    /// fsync(2).
    fn fsync(&self, fd: RawFd) -> io::Result<()>;

    /// close(2) of a descriptor the caller opened.
    fn close(&self, fd: RawFd);

    /// close_range(2) from `first` to `last` (one close(2) each on kernels
    /// before 5.9).
    fn close_range(&self, first: c_uint, last: c_uint);

    /// fcntl(2) `F_DUPFD_CLOEXEC`: a copy of `fd` at the lowest free
    /// descriptor from `lowest` on, closed on exec.
    fn dup_cloexec(&self, fd: RawFd, lowest: RawFd) -> io::Result<RawFd>;

    /// dup2(2): `onto` becomes a copy of `fd`.
    fn dup2(&self, fd: RawFd, onto: RawFd) -> io::Result<()>;

    /// mkdir(2).
    fn mkdir(&self, path: &CStr, mode: mode_t) -> io::Result<()>;

    /// symlink(2): `link` pointing at `target`.
    fn symlink(&self, target: &CStr, link: &CStr) -> io::Result<()>;

    /// chdir(2).
    fn chdir(&self, path: &CStr) -> io::Result<()>;

    /// fchdir(2).
    fn fchdir(&self, fd: RawFd) -> io::Result<()>;

    /// mount(2): a new file system of type `fstype` with the options
    /// `data`, or without either a bind, a remount or a propagation
    /// change.
    fn mount(
        &self,
        source: &CStr,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: MountFlags,
        data: Option<&CStr>,
    ) -> io::Result<()>;

    /// mount_setattr(2) making the mount at `target` read-only, and with
    /// `recursive` every mount below it; `ENOSYS` before Linux 5.12.
    fn mount_setattr_read_only(&self, target: &CStr, recursive: bool) -> io::Result<()>;

    /// umount2(2) with `MNT_DETACH`.
    fn umount_detach(&self, target: &CStr) -> io::Result<()>;

    /// pivot_root(2).
    fn pivot_root(&self, new_root: &CStr, put_old: &CStr) -> io::Result<()>;

    /// setgroups(2).
    fn setgroups(&self, groups: &[gid_t]) -> io::Result<()>;

    /// setgid(2).
    fn setgid(&self, gid: gid_t) -> io::Result<()>;

    /// setuid(2).
    fn setuid(&self, uid: uid_t) -> io::Result<()>;

    /// prctl(2) `PR_CAPBSET_DROP` of capability `cap`.
    fn drop_bounding(&self, cap: u32) -> io::Result<()>;

    /// capset(2): `caps` (bit N is capability N) as the effective,
    /// permitted and inheritable sets.
    fn capset(&self, caps: u64) -> io::Result<()>;

    /// prctl(2) `PR_CAP_AMBIENT_RAISE` of capability `cap`.
    fn raise_ambient(&self, cap: u32) -> io::Result<()>;

    /// prctl(2) `PR_SET_NO_NEW_PRIVS`.
    fn set_no_new_privs(&self) -> io::Result<()>;

    /// setns(2) into the namespace `fd` refers to, of whatever type.
    fn setns(&self, fd: RawFd) -> io::Result<()>;

    /// chroot(2): `path` becomes the caller's root.
    fn chroot(&self, path: &CStr) -> io::Result<()>;

    /// execvp(3) of `command` with `argv`, with `env` as the environment:
    /// returns only when it failed, with why.
    ///
    /// # Safety
    ///
    /// The caller is single-threaded: the C library's `environ`, which
    /// other threads may read, becomes `env`.
    unsafe fn exec(&self, command: &CStr, argv: &CStrArray<'_>, env: &CStrArray<'_>) -> io::Error;
}

/// The side of a fork the caller is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fork {
    /// The new process.
    Child,
    /// The process that forked, with its child's pid.
    Parent(pid_t),
}

/// What a signal does to a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SignalAction {
    /// Nothing (`SIG_IGN`).
    Ignore,
    /// Its default action (`SIG_DFL`).
    Default,
}

/// How a file is opened; every way closes it on exec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Open {
    /// For reading.
    Read,
    /// A directory, to come back to or to open names beneath.
    Directory,
    /// An existing file, for writing.
    Write,
    /// For writing, made with this mode when missing.
    Create(mode_t),
    /// For writing, made with this mode when missing, emptied when not.
    Truncate(mode_t),
    /// As [`Open::Truncate`], but a symlink at the name is refused.
    TruncateNoFollow(mode_t),
}

impl Open {
    /// The open(2) flags.
    fn flags(self) -> c_int {
        let access = match self {
            Open::Read => libc::O_RDONLY,
            Open::Directory => libc::O_RDONLY | libc::O_DIRECTORY,
            Open::Write => libc::O_WRONLY,
            Open::Create(_) => libc::O_WRONLY | libc::O_CREAT,
            Open::Truncate(_) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            Open::TruncateNoFollow(_) => {
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW
            }
        };
        access | libc::O_CLOEXEC
    }

    /// The mode of a file it makes (0 when it makes none).
    fn mode(self) -> c_uint {
        match self {
            Open::Create(mode) | Open::Truncate(mode) | Open::TruncateNoFollow(mode) => {
                c_uint::from(mode)
            }
            Open::Read | Open::Directory | Open::Write => 0,
        }
    }
}

impl fmt::Display for Open {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Open::Read => f.write_str("read"),
            Open::Directory => f.write_str("directory"),
            Open::Write => f.write_str("write"),
            Open::Create(mode) => write!(f, "create {mode:04o}"),
            Open::Truncate(mode) => write!(f, "truncate {mode:04o}"),
            Open::TruncateNoFollow(mode) => write!(f, "truncate nofollow {mode:04o}"),
        }
    }
}

/// Writes the names of the bits of `bits` in `names`, `|` between them,
/// and the bits no name covers in hex; `none` for no bit.
fn write_bits(f: &mut fmt::Formatter<'_>, bits: u64, names: &[(u64, &str)]) -> fmt::Result {
    let mut rest = bits;
    let mut first = true;
    let mut separator = |f: &mut fmt::Formatter<'_>| {
        let text = if first { "" } else { "|" };
        first = false;
        f.write_str(text)
    };
    for &(bit, name) in names {
        if rest & bit != 0 {
            separator(f)?;
            f.write_str(name)?;
            rest &= !bit;
        }
    }
    if rest != 0 {
        separator(f)?;
        write!(f, "{rest:#x}")?;
    }
    if bits == 0 {
        f.write_str("none")?;
    }
    Ok(())
}

/// The namespaces of an unshare(2) (its `CLONE_NEW*` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Namespaces(c_int);

impl Namespaces {
    pub(super) const NONE: Namespaces = Namespaces(0);
    pub(super) const MOUNT: Namespaces = Namespaces(libc::CLONE_NEWNS);
    pub(super) const IPC: Namespaces = Namespaces(libc::CLONE_NEWIPC);
    pub(super) const PID: Namespaces = Namespaces(libc::CLONE_NEWPID);

    pub(super) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flags as unshare(2) takes them.
    fn bits(self) -> c_int {
        self.0
    }
}

impl BitOr for Namespaces {
    type Output = Namespaces;

    fn bitor(self, other: Namespaces) -> Namespaces {
        Namespaces(self.0 | other.0)
    }
}

impl fmt::Display for Namespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (libc::CLONE_NEWNS as u64, "mount"),
            (libc::CLONE_NEWIPC as u64, "ipc"),
            (libc::CLONE_NEWPID as u64, "pid"),
        ];
        write_bits(f, self.0 as u64, &names)
    }
}

/// The flags of a mount(2) call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MountFlags(c_ulong);

impl MountFlags {
    pub(super) const BIND: MountFlags = MountFlags(libc::MS_BIND);
    pub(super) const REC: MountFlags = MountFlags(libc::MS_REC);
    pub(super) const PRIVATE: MountFlags = MountFlags(libc::MS_PRIVATE);
    pub(super) const SLAVE: MountFlags = MountFlags(libc::MS_SLAVE);
    pub(super) const NOSUID: MountFlags = MountFlags(libc::MS_NOSUID);
    pub(super) const NODEV: MountFlags = MountFlags(libc::MS_NODEV);
    pub(super) const NOEXEC: MountFlags = MountFlags(libc::MS_NOEXEC);
    pub(super) const STRICTATIME: MountFlags = MountFlags(libc::MS_STRICTATIME);

    /// The flags of `bits`, as [`crate::mount`] computes them (a
    /// propagation's, a read-only remount's) or the start's encoding
    /// carries them.
    pub(super) const fn from_bits(bits: c_ulong) -> MountFlags {
        MountFlags(bits)
    }

    /// The flags as mount(2) takes them.
    pub(super) const fn bits(self) -> c_ulong {
        self.0
    }
}

impl BitOr for MountFlags {
    type Output = MountFlags;

    fn bitor(self, other: MountFlags) -> MountFlags {
        MountFlags(self.0 | other.0)
    }
}

impl fmt::Display for MountFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (libc::MS_REMOUNT, "remount"),
            (libc::MS_BIND, "bind"),
            (libc::MS_REC, "rec"),
            (libc::MS_PRIVATE, "private"),
            (libc::MS_SLAVE, "slave"),
            (libc::MS_SHARED, "shared"),
            (libc::MS_RDONLY, "rdonly"),
            (libc::MS_NOSUID, "nosuid"),
            (libc::MS_NODEV, "nodev"),
            (libc::MS_NOEXEC, "noexec"),
            (libc::MS_NOSYMFOLLOW, "nosymfollow"),
            (libc::MS_STRICTATIME, "strictatime"),
        ];
        write_bits(f, self.0, &names)
    }
}

/// A null-terminated vector of C strings, as exec takes `argv` and the
/// environment: made before the start's steps, so that the exec
/// allocates nothing.
pub(super) struct CStrArray<'a> {
    strings: &'a [CString],
    pointers: Vec<*const c_char>,
}

impl<'a> CStrArray<'a> {
    pub(super) fn new(strings: &'a [CString]) -> CStrArray<'a> {
        let mut pointers: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        pointers.push(ptr::null());
        CStrArray { strings, pointers }
    }

    /// The strings, without the null pointer.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) fn strings(&self) -> &'a [CString] {
        self.strings
    }

    /// The vector, valid while the strings are.
    fn as_ptr(&self) -> *const *const c_char {
        self.pointers.as_ptr()
    }
}

/// The decimal digits of `n` in `buf`, without allocating: how the child
/// writes numbers to files.
pub(super) fn decimal(mut n: u32, buf: &mut [u8; 12]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits_without_allocation() {
        let mut buf = [0u8; 12];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(4_194_304, &mut buf), b"4194304");
        assert_eq!(decimal(u32::MAX, &mut buf), b"4294967295");
    }

    #[test]
    fn flags_read_by_name_and_unnamed_bits_in_hex() {
        let slave = MountFlags::REC | MountFlags::SLAVE;
        assert_eq!(slave.to_string(), "rec|slave");
        assert_eq!(MountFlags::from_bits(0).to_string(), "none");
        assert_eq!(
            MountFlags::from_bits(libc::MS_BIND | libc::MS_SYNCHRONOUS).to_string(),
            "bind|0x10"
        );
        assert_eq!((Namespaces::IPC | Namespaces::PID).to_string(), "ipc|pid");
        assert!(Namespaces::NONE.is_empty());
        assert_eq!(
            Open::TruncateNoFollow(0o600).to_string(),
            "truncate nofollow 0600"
        );
    }

    #[test]
    fn every_way_to_open_closes_on_exec_and_only_makers_have_a_mode() {
        for how in [
            Open::Read,
            Open::Directory,
            Open::Write,
            Open::Create(0o644),
            Open::Truncate(0o600),
            Open::TruncateNoFollow(0o600),
        ] {
            assert_ne!(how.flags() & libc::O_CLOEXEC, 0, "{how}");
            let makes = how.flags() & libc::O_CREAT != 0;
            assert_eq!(how.mode() != 0, makes, "{how}");
        }
    }

    #[test]
    fn a_cstr_array_ends_with_a_null_pointer() {
        let strings = [CString::new("a").unwrap(), CString::new("b").unwrap()];
        let array = CStrArray::new(&strings);
        assert_eq!(array.strings(), &strings);
        // SAFETY: the vector holds the two strings' pointers and a null,
        // alive while `strings` is.
        let third = unsafe { *array.as_ptr().add(2) };
        assert!(third.is_null());
    }
}
