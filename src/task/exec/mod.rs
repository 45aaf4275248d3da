//! The `exec` and `raw_exec` drivers: a task is a child process in its own
//! session and mount namespace; an `exec` task also in its own root
//! ([`super::root`]), a `raw_exec` task on the host's.
//!
//! The agent never forks itself: [`spawn`] computes every step of the
//! child's side (`child.rs`: paths as C strings, mount flags, the user's
//! ids) and hands them to the start helper ([`helper`]), this binary run
//! afresh, which performs them (`perform.rs`) and execs the task, every
//! system call through one trait (`syscall/`), so that the tests
//! (`perform_tests.rs`) record a start's calls. When a step fails it
//! writes one line naming the step to the task's stderr log (already in
//! place) and the helper reports the error, which [`spawn`] returns with
//! that line.
//!
//! The helper writes its own pid to a file before exec, so an agent killed
//! between the start and persisting the pid still finds the task on
//! restart and never starts a second one. The task is the helper's child
//! ([`pid_ns`], in a PID namespace of its own when it has one): the
//! helper, which the agent tracks, records the task's exit status
//! ([`exit_record`]) and ends as the task ends.

pub mod caps;
mod child;
pub(super) mod encoding;
pub mod enter;
pub mod exit_record;
pub mod helper;
mod perform;
#[cfg(test)]
mod perform_tests;
mod pid_ns;
mod syscall;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;

use super::mounts::NamespacePlan;
use super::root::RootPlan;
use super::user::User;
use crate::mount;
use child::ChildSetup;

/// Everything one start of a task needs.
#[derive(Clone, Debug)]
pub struct Launch {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// The task's `work_dir`, entered as the last step before exec (in an
    /// `exec` task's root, after it became its user).
    pub work_dir: Option<PathBuf>,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    pub pid_file: PathBuf,
    /// Where the task's exit status is recorded ([`exit_record`]).
    pub exit_record: PathBuf,
    pub user: Option<User>,
    pub namespace: NamespacePlan,
    /// The root of an `exec` task; `None` keeps the host's (`raw_exec`).
    pub root: Option<RootPlan>,
    /// The `cgroup.procs` files of the task's control groups, which the
    /// child joins first (empty: the agent's own).
    pub cgroup_procs: Vec<PathBuf>,
    /// A PID namespace of its own, where the task is PID 1 (an `exec`
    /// task's `pid_mode`), and an IPC namespace (`ipc_mode`).
    pub pid_ns: bool,
    pub ipc_ns: bool,
    /// An `exec` task's capabilities ([`caps`]); `None` keeps the agent's.
    pub caps: Option<u64>,
    /// Sets `no_new_privs` before exec.
    pub no_new_privs: bool,
}

#[derive(Debug)]
pub enum Error {
    Log {
        path: PathBuf,
        err: io::Error,
    },
    Mount(mount::Error),
    ExitRecord {
        path: PathBuf,
        err: io::Error,
    },
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
            Error::ExitRecord { path, .. } => {
                write!(f, "cannot remove the old exit record {}", path.display())
            }
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
            Error::Log { err, .. } | Error::ExitRecord { err, .. } | Error::Spawn { err, .. } => {
                Some(err)
            }
            Error::Mount(err) => Some(err),
        }
    }
}

/// The prefix of the line a failing start writes to its stderr log.
const CHILD_ERROR: &str = "csi-agent: ";

/// Starts the task through the start helper, which runs in its own
/// session (its pid is its process group, which [`signal_group`] signals)
/// and mount namespace.
pub fn spawn(launch: &Launch) -> Result<Child, Error> {
    exit_record::clear(&launch.exit_record).map_err(|err| Error::ExitRecord {
        path: launch.exit_record.clone(),
        err,
    })?;
    let stdout = open_log(&launch.stdout)?;
    let stderr = open_log(&launch.stderr)?;
    let stderr_start = stderr.metadata().map(|m| m.len()).unwrap_or(0);
    let setup = ChildSetup::new(launch, caps::last_cap()).map_err(Error::Mount)?;
    let failed = |err| Error::Spawn {
        command: launch.command.clone(),
        step: child_error_line(&launch.stderr, stderr_start),
        err,
    };
    let input = helper::prepare(launch, setup).map_err(failed)?;
    helper::start(launch, &input, stdout, stderr).map_err(failed)
}

/// Opens a log for appending; a symlink there (a task's doing) is refused.
fn open_log(path: &Path) -> Result<File, Error> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
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

/// Sends `signal` to the task's process group (its session).
pub fn signal_group(pid: u32, signal: libc::c_int) -> io::Result<()> {
    crate::sys::process::kill_group(pid, signal)
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

/// Whether process `pid` is a task with `KEY=value` in its environment,
/// or the process that waits for such a task in its PID namespace (its
/// child).
pub fn task_has_env(pid: u32, key: &str, value: &str) -> bool {
    if has_env(pid, key, value) {
        return true;
    }
    let children =
        fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .any(|child| has_env(child, key, value))
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
}
