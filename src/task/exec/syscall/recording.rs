//! A [`Syscall`] that records calls instead of making them, for the tests
//! of a start: each call with its arguments, in order, every one of them
//! succeeding unless the double was told to fail it.
//!
//! It answers as a kernel would, so that a start runs through as it does
//! for real: descriptors are the lowest free from 3 on (0 to 2 are
//! open), [`RecordingSyscall::PID`] is the caller's pid, a fork returns
//! on the child's side unless told otherwise ([`RecordingSyscall::fork_as_parent`]),
//! and a wait gives the status it was told (0 unless told otherwise).

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::os::fd::RawFd;

use libc::{c_int, c_uint, gid_t, mode_t, pid_t, uid_t};

use super::{CStrArray, Fork, MountFlags, Namespaces, Open, SignalAction, Syscall};

/// One recorded call, with its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::task::exec) enum Call {
    Setsid,
    Getpid,
    Unshare(Namespaces),
    Fork,
    SetParentDeathSignal(c_int),
    SetSignal(c_int, SignalAction),
    Wait(pid_t),
    Open {
        path: CString,
        how: Open,
    },
    Openat {
        dir: RawFd,
        name: CString,
        how: Open,
    },
    Write {
        fd: RawFd,
        bytes: Vec<u8>,
    },
    Fsync(RawFd),
    Close(RawFd),
    CloseRange(c_uint, c_uint),
    DupCloexec {
        fd: RawFd,
        lowest: RawFd,
    },
    Dup2 {
        fd: RawFd,
        onto: RawFd,
    },
    Mkdir {
        path: CString,
        mode: mode_t,
    },
    Symlink {
        target: CString,
        link: CString,
    },
    Chdir(CString),
    Fchdir(RawFd),
    Mount {
        source: CString,
        target: CString,
        fstype: Option<CString>,
        flags: MountFlags,
        data: Option<CString>,
    },
    MountSetattrReadOnly {
        target: CString,
        recursive: bool,
    },
    UmountDetach(CString),
    PivotRoot {
        new_root: CString,
        put_old: CString,
    },
    Setgroups(Vec<gid_t>),
    Setgid(gid_t),
    Setuid(uid_t),
    DropBounding(u32),
    Capset(u64),
    RaiseAmbient(u32),
    SetNoNewPrivs,
    Setns(RawFd),
    Chroot(CString),
    Exec {
        command: CString,
        argv: Vec<CString>,
        env: Vec<CString>,
    },
}

impl Call {
    /// Whether this is a mount(2) at `target`.
    pub(in crate::task::exec) fn mounts_at(&self, at: &str) -> bool {
        matches!(self, Call::Mount { target, .. } if target.as_bytes() == at.as_bytes())
    }
}

/// A signal by its name without `SIG`, for the few a start handles.
fn signal_name(signal: c_int) -> String {
    let names = [
        (libc::SIGTERM, "TERM"),
        (libc::SIGINT, "INT"),
        (libc::SIGHUP, "HUP"),
        (libc::SIGQUIT, "QUIT"),
        (libc::SIGUSR1, "USR1"),
        (libc::SIGUSR2, "USR2"),
        (libc::SIGPIPE, "PIPE"),
        (libc::SIGALRM, "ALRM"),
        (libc::SIGKILL, "KILL"),
    ];
    names
        .iter()
        .find(|(number, _)| *number == signal)
        .map_or_else(|| signal.to_string(), |(_, name)| name.to_string())
}

/// The call on one line, as a test lists it: its name and arguments,
/// strings as they are, bytes written with `\n` and the like escaped.
impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = |c: &CStr| c.to_string_lossy().into_owned();
        let list = |l: &[CString]| l.iter().map(|c| s(c)).collect::<Vec<_>>().join(" ");
        match self {
            Call::Setsid => f.write_str("setsid"),
            Call::Getpid => f.write_str("getpid"),
            Call::Unshare(namespaces) => write!(f, "unshare {namespaces}"),
            Call::Fork => f.write_str("fork"),
            Call::SetParentDeathSignal(signal) => {
                write!(f, "parent death signal {}", signal_name(*signal))
            }
            Call::SetSignal(signal, action) => {
                let action = match action {
                    SignalAction::Ignore => "ignore",
                    SignalAction::Default => "default",
                };
                write!(f, "signal {} {action}", signal_name(*signal))
            }
            Call::Wait(pid) => write!(f, "wait {pid}"),
            Call::Open { path, how } => write!(f, "open {} {how}", s(path)),
            Call::Openat { dir, name, how } => write!(f, "openat {dir} {} {how}", s(name)),
            Call::Write { fd, bytes } => write!(f, "write {fd} {}", bytes.escape_ascii()),
            Call::Fsync(fd) => write!(f, "fsync {fd}"),
            Call::Close(fd) => write!(f, "close {fd}"),
            Call::CloseRange(first, last) => write!(f, "close_range {first} {last}"),
            Call::DupCloexec { fd, lowest } => write!(f, "dup_cloexec {fd} {lowest}"),
            Call::Dup2 { fd, onto } => write!(f, "dup2 {fd} {onto}"),
            Call::Mkdir { path, mode } => write!(f, "mkdir {} {mode:04o}", s(path)),
            Call::Symlink { target, link } => write!(f, "symlink {} -> {}", s(link), s(target)),
            Call::Chdir(path) => write!(f, "chdir {}", s(path)),
            Call::Fchdir(fd) => write!(f, "fchdir {fd}"),
            Call::Mount {
                source,
                target,
                fstype,
                flags,
                data,
            } => {
                write!(f, "mount {} {}", s(source), s(target))?;
                if let Some(fstype) = fstype {
                    write!(f, " {}", s(fstype))?;
                }
                write!(f, " {flags}")?;
                if let Some(data) = data {
                    write!(f, " {}", s(data))?;
                }
                Ok(())
            }
            Call::MountSetattrReadOnly { target, recursive } => {
                let rec = if *recursive { " rec" } else { "" };
                write!(f, "mount_setattr {} rdonly{rec}", s(target))
            }
            Call::UmountDetach(target) => write!(f, "umount {} detach", s(target)),
            Call::PivotRoot { new_root, put_old } => {
                write!(f, "pivot_root {} {}", s(new_root), s(put_old))
            }
            Call::Setgroups(groups) => {
                let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
                write!(f, "setgroups {}", groups.join(" "))
            }
            Call::Setgid(gid) => write!(f, "setgid {gid}"),
            Call::Setuid(uid) => write!(f, "setuid {uid}"),
            Call::DropBounding(cap) => write!(f, "drop bounding {cap}"),
            Call::Capset(caps) => write!(f, "capset {caps:#x}"),
            Call::RaiseAmbient(cap) => write!(f, "raise ambient {cap}"),
            Call::SetNoNewPrivs => f.write_str("no_new_privs"),
            Call::Setns(fd) => write!(f, "setns {fd}"),
            Call::Chroot(path) => write!(f, "chroot {}", s(path)),
            Call::Exec { command, argv, env } => {
                write!(f, "exec {} [{}] [{}]", s(command), list(argv), list(env))
            }
        }
    }
}

/// Whether a call, given its index and itself, is the one to fail.
type Matcher = Box<dyn Fn(usize, &Call) -> bool>;

/// A failure the double was told to give: the first call from now on
/// that `matches` fails with `errno`.
struct Planned {
    matches: Matcher,
    errno: c_int,
}

/// A [`Syscall`] that records each call and succeeds, unless told to fail
/// it.
pub(in crate::task::exec) struct RecordingSyscall {
    calls: RefCell<Vec<Call>>,
    planned: RefCell<Vec<Planned>>,
    open_fds: RefCell<BTreeSet<RawFd>>,
    fork: Cell<Fork>,
    wait_status: Cell<c_int>,
}

impl Default for RecordingSyscall {
    fn default() -> Self {
        RecordingSyscall {
            calls: RefCell::default(),
            planned: RefCell::default(),
            open_fds: RefCell::new((0..=2).collect()),
            fork: Cell::new(Fork::Child),
            wait_status: Cell::new(0),
        }
    }
}

impl RecordingSyscall {
    /// The pid the double gives its caller.
    pub(in crate::task::exec) const PID: u32 = 4242;

    /// A double with no calls recorded and no failures planned.
    pub(in crate::task::exec) fn new() -> Self {
        Self::default()
    }

    /// The calls recorded so far, in order.
    pub(in crate::task::exec) fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    /// The calls recorded so far, one line each ([`Call`]'s `Display`).
    pub(in crate::task::exec) fn lines(&self) -> Vec<String> {
        self.calls.borrow().iter().map(Call::to_string).collect()
    }

    /// Makes the call with index `index` (counted from 0 over all calls)
    /// fail with `errno`; the call is still recorded.
    pub(in crate::task::exec) fn fail_call(&self, index: usize, errno: c_int) {
        self.plan(errno, move |at, _| at == index);
    }

    /// Makes the first call from now on that `matches` fail with `errno`;
    /// the call is still recorded.
    pub(in crate::task::exec) fn fail_first(
        &self,
        errno: c_int,
        matches: impl Fn(&Call) -> bool + 'static,
    ) {
        self.plan(errno, move |_, call| matches(call));
    }

    fn plan(&self, errno: c_int, matches: impl Fn(usize, &Call) -> bool + 'static) {
        self.planned.borrow_mut().push(Planned {
            matches: Box::new(matches),
            errno,
        });
    }

    /// Makes a fork return on the parent's side, with `child` as its
    /// child's pid: the side of the waiter.
    pub(in crate::task::exec) fn fork_as_parent(&self, child: pid_t) {
        self.fork.set(Fork::Parent(child));
    }

    /// Makes a wait give `status`.
    pub(in crate::task::exec) fn wait_gives(&self, status: c_int) {
        self.wait_status.set(status);
    }

    /// Records `call`, which cannot fail.
    fn note(&self, call: Call) {
        self.calls.borrow_mut().push(call);
    }

    /// Records `call` and gives the failure planned for it, if any.
    fn record(&self, call: Call) -> io::Result<()> {
        let index = self.calls.borrow().len();
        let mut planned = self.planned.borrow_mut();
        let failure = planned.iter().position(|p| (p.matches)(index, &call));
        self.note(call);
        match failure {
            Some(at) => Err(io::Error::from_raw_os_error(planned.remove(at).errno)),
            None => Ok(()),
        }
    }

    /// The lowest free descriptor from `lowest` on, now open.
    fn take_fd(&self, lowest: RawFd) -> RawFd {
        let mut open = self.open_fds.borrow_mut();
        let fd = (lowest..).find(|fd| !open.contains(fd)).expect("a free fd");
        open.insert(fd);
        fd
    }
}

impl Syscall for RecordingSyscall {
    fn setsid(&self) -> io::Result<()> {
        self.record(Call::Setsid)
    }

    fn getpid(&self) -> u32 {
        self.note(Call::Getpid);
        Self::PID
    }

    fn unshare(&self, namespaces: Namespaces) -> io::Result<()> {
        self.record(Call::Unshare(namespaces))
    }

    unsafe fn fork(&self) -> io::Result<Fork> {
        self.record(Call::Fork)?;
        Ok(self.fork.get())
    }

    fn set_parent_death_signal(&self, signal: c_int) -> io::Result<()> {
        self.record(Call::SetParentDeathSignal(signal))
    }

    fn set_signal(&self, signal: c_int, action: SignalAction) {
        self.note(Call::SetSignal(signal, action));
    }

    fn wait(&self, pid: pid_t) -> io::Result<c_int> {
        self.record(Call::Wait(pid))?;
        Ok(self.wait_status.get())
    }

    fn open(&self, path: &CStr, how: Open) -> io::Result<RawFd> {
        self.record(Call::Open {
            path: path.to_owned(),
            how,
        })?;
        Ok(self.take_fd(3))
    }

    fn openat(&self, dir: RawFd, name: &CStr, how: Open) -> io::Result<RawFd> {
        self.record(Call::Openat {
            dir,
            name: name.to_owned(),
            how,
        })?;
        Ok(self.take_fd(3))
    }

    fn write(&self, fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
        self.record(Call::Write {
            fd,
            bytes: bytes.to_vec(),
        })?;
        Ok(bytes.len())
    }

    fn fsync(&self, fd: RawFd) -> io::Result<()> {
        self.record(Call::Fsync(fd))
    }

    fn close(&self, fd: RawFd) {
        self.open_fds.borrow_mut().remove(&fd);
        self.note(Call::Close(fd));
    }

    fn close_range(&self, first: c_uint, last: c_uint) {
        self.open_fds
            .borrow_mut()
            .retain(|&fd| !(first..=last).contains(&(fd as c_uint)));
        self.note(Call::CloseRange(first, last));
    }

    fn dup_cloexec(&self, fd: RawFd, lowest: RawFd) -> io::Result<RawFd> {
        self.record(Call::DupCloexec { fd, lowest })?;
        Ok(self.take_fd(lowest))
    }

    fn dup2(&self, fd: RawFd, onto: RawFd) -> io::Result<()> {
        self.record(Call::Dup2 { fd, onto })?;
        self.open_fds.borrow_mut().insert(onto);
        Ok(())
    }

    fn mkdir(&self, path: &CStr, mode: mode_t) -> io::Result<()> {
        self.record(Call::Mkdir {
            path: path.to_owned(),
            mode,
        })
    }

    fn symlink(&self, target: &CStr, link: &CStr) -> io::Result<()> {
        self.record(Call::Symlink {
            target: target.to_owned(),
            link: link.to_owned(),
        })
    }

    fn chdir(&self, path: &CStr) -> io::Result<()> {
        self.record(Call::Chdir(path.to_owned()))
    }

    fn fchdir(&self, fd: RawFd) -> io::Result<()> {
        self.record(Call::Fchdir(fd))
    }

    fn mount(
        &self,
        source: &CStr,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: MountFlags,
        data: Option<&CStr>,
    ) -> io::Result<()> {
        self.record(Call::Mount {
            source: source.to_owned(),
            target: target.to_owned(),
            fstype: fstype.map(CStr::to_owned),
            flags,
            data: data.map(CStr::to_owned),
        })
    }

    fn mount_setattr_read_only(&self, target: &CStr, recursive: bool) -> io::Result<()> {
        self.record(Call::MountSetattrReadOnly {
            target: target.to_owned(),
            recursive,
        })
    }

    fn umount_detach(&self, target: &CStr) -> io::Result<()> {
        self.record(Call::UmountDetach(target.to_owned()))
    }

    fn pivot_root(&self, new_root: &CStr, put_old: &CStr) -> io::Result<()> {
        self.record(Call::PivotRoot {
            new_root: new_root.to_owned(),
            put_old: put_old.to_owned(),
        })
    }

    fn setgroups(&self, groups: &[gid_t]) -> io::Result<()> {
        self.record(Call::Setgroups(groups.to_vec()))
    }

    fn setgid(&self, gid: gid_t) -> io::Result<()> {
        self.record(Call::Setgid(gid))
    }

    fn setuid(&self, uid: uid_t) -> io::Result<()> {
        self.record(Call::Setuid(uid))
    }

    fn drop_bounding(&self, cap: u32) -> io::Result<()> {
        self.record(Call::DropBounding(cap))
    }

    fn capset(&self, caps: u64) -> io::Result<()> {
        self.record(Call::Capset(caps))
    }

    fn raise_ambient(&self, cap: u32) -> io::Result<()> {
        self.record(Call::RaiseAmbient(cap))
    }

    fn set_no_new_privs(&self) -> io::Result<()> {
        self.record(Call::SetNoNewPrivs)
    }

    fn setns(&self, fd: RawFd) -> io::Result<()> {
        self.record(Call::Setns(fd))
    }

    fn chroot(&self, path: &CStr) -> io::Result<()> {
        self.record(Call::Chroot(path.to_owned()))
    }

    /// Records the exec and gives the error it was told to, or
    /// `ECANCELED`: a double execs nothing, and an exec that returns has
    /// failed.
    unsafe fn exec(&self, command: &CStr, argv: &CStrArray<'_>, env: &CStrArray<'_>) -> io::Error {
        let call = Call::Exec {
            command: command.to_owned(),
            argv: argv.strings().to_vec(),
            env: env.strings().to_vec(),
        };
        match self.record(call) {
            Err(err) => err,
            Ok(()) => io::Error::from_raw_os_error(libc::ECANCELED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_recorded_in_order_with_kernel_like_answers() {
        let sys = RecordingSyscall::new();
        let a = sys.open(c"/a", Open::Write).unwrap();
        let b = sys.open(c"/b", Open::Directory).unwrap();
        assert_eq!((a, b), (3, 4));
        sys.close(a);
        assert_eq!(sys.dup_cloexec(0, 3).unwrap(), 3, "the lowest free one");
        sys.close_range(3, c_uint::MAX);
        assert_eq!(sys.open(c"/c", Open::Read).unwrap(), 3);
        assert_eq!(sys.getpid(), RecordingSyscall::PID);
        assert_eq!(
            sys.lines(),
            [
                "open /a write",
                "open /b directory",
                "close 3",
                "dup_cloexec 0 3",
                "close_range 3 4294967295",
                "open /c read",
                "getpid",
            ]
        );
    }

    #[test]
    fn a_planned_failure_is_recorded_and_given_once() {
        let sys = RecordingSyscall::new();
        sys.fail_first(libc::EBUSY, |call| call.mounts_at("/t"));
        sys.fail_call(2, libc::EPERM);
        let bind = |target: &CStr| sys.mount(c"/s", target, None, MountFlags::BIND, None);
        bind(c"/u").unwrap();
        let err = bind(c"/t").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBUSY));
        let err = sys.setuid(1).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
        bind(c"/t").unwrap();
        sys.setuid(1).unwrap();
        assert_eq!(sys.calls().len(), 5);
        assert_eq!(sys.lines()[1], "mount /s /t bind");
    }

    #[test]
    fn forks_and_waits_answer_as_told() {
        let sys = RecordingSyscall::new();
        // SAFETY: the double forks nothing.
        assert_eq!(unsafe { sys.fork() }.unwrap(), Fork::Child);
        sys.fork_as_parent(77);
        sys.wait_gives(3 << 8);
        // SAFETY: the double forks nothing.
        assert_eq!(unsafe { sys.fork() }.unwrap(), Fork::Parent(77));
        assert_eq!(sys.wait(77).unwrap(), 3 << 8);
        let argv = [CString::new("sh").unwrap()];
        // SAFETY: the double execs nothing and touches no `environ`.
        let err = unsafe { sys.exec(c"sh", &CStrArray::new(&argv), &CStrArray::new(&[])) };
        assert_eq!(err.raw_os_error(), Some(libc::ECANCELED));
        assert_eq!(sys.lines().last().unwrap(), "exec sh [sh] []");
    }
}
