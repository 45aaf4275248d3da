//! The `exec` driver: a task is a child process in its own session and
//! mount namespace.
//!
//! Everything the child needs is computed before `fork` (paths as C
//! strings, mount flags, the user's ids): between `fork` and `exec` a child
//! of a multi-threaded process may only make system calls, so the
//! `pre_exec` hook (`ChildSetup::run`) allocates nothing, takes no lock
//! and logs nothing. When a step fails it writes one line naming the step
//! to the task's stderr log (already in place) and returns the error, which
//! `spawn` reports; [`spawn`] adds that line to its error.
//!
//! The child writes its own pid to a file before exec, so an agent killed
//! between `fork` and persisting the pid still finds the task on restart
//! and never starts a second one.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use libc::c_ulong;

use super::mounts::NamespacePlan;
use crate::mount::{self, Propagation};

/// A user to run as, resolved before fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct User {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// Everything one start of a task needs.
#[derive(Clone, Debug)]
pub struct Launch {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    pub pid_file: PathBuf,
    pub user: Option<User>,
    pub namespace: NamespacePlan,
}

#[derive(Debug)]
pub enum Error {
    Log {
        path: PathBuf,
        err: io::Error,
    },
    Mount(mount::Error),
    Spawn {
        command: String,
        step: Option<String>,
        err: io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Log { path, .. } => write!(f, "cannot open the log {}", path.display()),
            Error::Mount(_) => f.write_str("cannot prepare the task's mounts"),
            Error::Spawn {
                command,
                step: Some(step),
                ..
            } => {
                write!(f, "cannot start {command:?}: {step}")
            }
            Error::Spawn {
                command,
                step: None,
                ..
            } => write!(f, "cannot start {command:?}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Log { err, .. } | Error::Spawn { err, .. } => Some(err),
            Error::Mount(err) => Some(err),
        }
    }
}

/// The prefix of the line a failing child writes to its stderr log.
const CHILD_ERROR: &str = "csi-agent: ";

/// Starts the task. The child runs in its own session (its pid is its
/// process group, which [`signal_group`] signals) and mount namespace.
pub fn spawn(launch: &Launch) -> Result<Child, Error> {
    let stdout = open_log(&launch.stdout)?;
    let stderr = open_log(&launch.stderr)?;
    let stderr_start = stderr.metadata().map(|m| m.len()).unwrap_or(0);
    let setup = ChildSetup::new(launch).map_err(Error::Mount)?;
    let mut command = Command::new(&launch.command);
    command
        .args(&launch.args)
        .env_clear()
        .envs(&launch.env)
        .current_dir(&launch.cwd)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    // SAFETY: the hook only makes system calls on data prepared before
    // fork (see `ChildSetup::run`), which is what a child of a
    // multi-threaded process may do.
    unsafe {
        command.pre_exec(move || setup.run());
    }
    command.spawn().map_err(|err| Error::Spawn {
        command: launch.command.clone(),
        step: child_error_line(&launch.stderr, stderr_start),
        err,
    })
}

fn open_log(path: &Path) -> Result<File, Error> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|err| Error::Log {
            path: path.to_path_buf(),
            err,
        })
}

/// The step a child reported failing in its stderr log after `start`.
fn child_error_line(log: &Path, start: u64) -> Option<String> {
    let mut file = File::open(log).ok()?;
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut text = String::new();
    file.take(64 * 1024).read_to_string(&mut text).ok()?;
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(CHILD_ERROR))
        .map(str::to_string)
}

/// One mount call of the child, with the words that name it on failure.
struct MountCall {
    source: Option<CString>,
    target: CString,
    flags: c_ulong,
    /// Ignore "not a mount point" and "no such path": the mount went away
    /// after the plan was made.
    tolerate_gone: bool,
    what: &'static [u8],
}

/// The child's side, prepared in the parent.
struct ChildSetup {
    calls: Vec<MountCall>,
    pid_file: CString,
    user: Option<User>,
}

impl ChildSetup {
    fn new(launch: &Launch) -> mount::Result<ChildSetup> {
        let plan = &launch.namespace;
        let c = |p: &Path| mount::c_path(p);
        let mut calls = Vec::new();
        if plan.slave_root {
            calls.push(MountCall {
                source: None,
                target: c(Path::new("/"))?,
                flags: libc::MS_REC | libc::MS_SLAVE,
                tolerate_gone: false,
                what: b"cannot make / a slave mount: ",
            });
        }
        for path in &plan.slave {
            calls.push(MountCall {
                source: None,
                target: c(path)?,
                flags: libc::MS_SLAVE,
                tolerate_gone: true,
                what: b"cannot make a host mount a slave: ",
            });
        }
        for m in &plan.mounts {
            let target = c(&m.target)?;
            calls.push(MountCall {
                source: Some(c(&m.source)?),
                target: target.clone(),
                flags: libc::MS_BIND | libc::MS_REC,
                tolerate_gone: false,
                what: b"cannot bind-mount a volume at ",
            });
            if m.read_only {
                calls.push(MountCall {
                    source: None,
                    target: target.clone(),
                    flags: mount::read_only_remount_flags(&m.source)?,
                    tolerate_gone: false,
                    what: b"cannot make a volume read-only at ",
                });
            }
            calls.push(MountCall {
                source: None,
                target,
                flags: propagation_flags(m.propagation),
                tolerate_gone: false,
                what: b"cannot set the propagation of a volume at ",
            });
        }
        for path in &plan.hide {
            calls.push(MountCall {
                source: Some(c(Path::new("/dev/null"))?),
                target: c(path)?,
                flags: libc::MS_BIND,
                tolerate_gone: true,
                what: b"cannot hide ",
            });
        }
        Ok(ChildSetup {
            calls,
            pid_file: c(&launch.pid_file)?,
            user: launch.user,
        })
    }

    /// Runs in the child between fork and exec: system calls only.
    fn run(&self) -> io::Result<()> {
        child::setsid().map_err(|e| child::report(b"cannot start a session", b"", e))?;
        child::unshare_mounts()
            .map_err(|e| child::report(b"cannot create a mount namespace", b"", e))?;
        for call in &self.calls {
            let source = call.source.as_deref().unwrap_or(c"none");
            if let Err(err) = mount::mount_raw(source, &call.target, call.flags) {
                let gone = matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOENT));
                if !(call.tolerate_gone && gone) {
                    return Err(child::report(call.what, call.target.as_bytes(), err));
                }
            }
        }
        child::write_pid(&self.pid_file).map_err(|e| {
            child::report(b"cannot write the pid file ", self.pid_file.as_bytes(), e)
        })?;
        if let Some(user) = self.user {
            child::become_user(user).map_err(|e| child::report(b"cannot switch user", b"", e))?;
        }
        Ok(())
    }
}

const fn propagation_flags(p: Propagation) -> c_ulong {
    p.mount_flags()
}

/// The system calls of the child; nothing here allocates.
mod child {
    use std::ffi::CStr;
    use std::io;

    use super::User;

    fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
        if ret == -1 {
            Err(io::Error::last_os_error())
        } else {
            Ok(ret)
        }
    }

    pub fn setsid() -> io::Result<()> {
        // SAFETY: setsid(2) takes no arguments.
        cvt(unsafe { libc::setsid() }).map(drop)
    }

    pub fn unshare_mounts() -> io::Result<()> {
        // SAFETY: unshare(2) takes a flag word; the child is single-threaded.
        cvt(unsafe { libc::unshare(libc::CLONE_NEWNS) }).map(drop)
    }

    fn write_all(fd: libc::c_int, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            // SAFETY: `bytes` is a live slice of the given length.
            let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
            if n <= 0 {
                return;
            }
            bytes = &bytes[n as usize..];
        }
    }

    /// Writes `csi-agent: <what><path>` to stderr (the task's log) and
    /// gives back the error.
    pub fn report(what: &[u8], path: &[u8], err: io::Error) -> io::Error {
        write_all(2, super::CHILD_ERROR.as_bytes());
        write_all(2, what);
        write_all(2, path);
        write_all(2, b"\n");
        err
    }

    /// The decimal digits of `n` in `buf`, without allocating.
    pub fn decimal(mut n: u32, buf: &mut [u8; 12]) -> &[u8] {
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

    pub fn write_pid(path: &CStr) -> io::Result<()> {
        // SAFETY: `path` is NUL-terminated; the flags and mode are plain
        // integers.
        let fd = cvt(unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        })?;
        // SAFETY: getpid(2) cannot fail.
        let pid = unsafe { libc::getpid() } as u32;
        let mut buf = [0u8; 12];
        write_all(fd, decimal(pid, &mut buf));
        write_all(fd, b"\n");
        // SAFETY: `fd` was opened above and is closed once.
        unsafe { libc::close(fd) };
        Ok(())
    }

    pub fn become_user(user: User) -> io::Result<()> {
        let groups = [user.gid];
        // SAFETY: `groups` is a live array of one gid.
        cvt(unsafe { libc::setgroups(1, groups.as_ptr()) })?;
        // SAFETY: plain integers.
        cvt(unsafe { libc::setgid(user.gid) })?;
        // SAFETY: plain integers; after this the child is the user.
        cvt(unsafe { libc::setuid(user.uid) })?;
        Ok(())
    }
}

/// Looks up a user by name (or numeric uid) in the user database.
pub fn lookup_user(name: &str) -> io::Result<User> {
    let c_name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut pwd = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0u8; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to live memory of the stated size; the
    // function fills `pwd` (pointing into `buf`) and sets `result`.
    let rc = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            pwd.as_mut_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    if result.is_null() {
        if let Ok(uid) = name.parse::<u32>() {
            return Ok(User { uid, gid: uid });
        }
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no user {name:?}"),
        ));
    }
    // SAFETY: getpwnam_r returned success with a non-null result, so `pwd`
    // is initialised.
    let pwd = unsafe { pwd.assume_init() };
    Ok(User {
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    })
}

/// Sends `signal` to the task's process group (its session).
pub fn signal_group(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) with a negative pid signals a process group; plain
    // integers, no memory effects.
    if unsafe { libc::kill(-pgid, signal) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`, in
/// clock ticks since boot), which tells a process from a later one that
/// reuses its pid. `None` when there is no such process (or it is a
/// zombie, which is as good as gone).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after
    // the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // `rest` starts at field 3 (state); field 22 is 19 further.
    fields.nth(18)?.parse().ok()
}

/// The pid a child wrote to its pid file.
pub fn read_pid_file(path: &Path) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `/proc/<pid>/environ` holds `KEY=value`.
pub fn has_env(pid: u32, key: &str, value: &str) -> bool {
    let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let wanted = format!("{key}={value}");
    environ
        .split(|b| *b == 0)
        .any(|entry| entry == wanted.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits_without_allocation() {
        let mut buf = [0u8; 12];
        assert_eq!(child::decimal(0, &mut buf), b"0");
        assert_eq!(child::decimal(4_194_304, &mut buf), b"4194304");
        assert_eq!(child::decimal(u32::MAX, &mut buf), b"4294967295");
    }

    #[test]
    fn start_ticks_tell_this_process() {
        let me = std::process::id();
        let ticks = start_ticks(me).expect("this process has a start time");
        assert_eq!(start_ticks(me), Some(ticks));
        assert_eq!(start_ticks(u32::MAX), None);
        assert!(
            has_env(me, "PATH", &std::env::var("PATH").unwrap_or_default())
                || std::env::var("PATH").is_err()
        );
    }

    #[test]
    fn users_resolve_by_name_and_number() {
        assert_eq!(lookup_user("root").unwrap(), User { uid: 0, gid: 0 });
        assert_eq!(
            lookup_user("4242").unwrap(),
            User {
                uid: 4242,
                gid: 4242
            }
        );
        assert!(lookup_user("no-such-user-csi").is_err());
    }
}
