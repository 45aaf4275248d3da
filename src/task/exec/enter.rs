//! `alloc exec`'s command, started in a running task: for a `raw_exec`
//! task on the host, with the task's environment and working dir; for an
//! `exec` task through the enter helper (`csi-agent __exec-in-task`, this
//! binary run afresh, single-threaded as setns(2) into a mount namespace
//! needs), which joins the task's control groups, its IPC, PID and mount
//! namespaces and its root, enters its working dir, becomes the task's
//! user, and runs the command
//! as its child (a PID namespace takes only children), passing back its
//! exit code.
//!
//! The command's stdio is a pseudo-terminal the agent holds the master of
//! (`-t`), or three pipes. The command leads a session of its own, whose
//! controlling terminal is the pty.

use std::ffi::CString;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use super::syscall::{decimal, Kernel, Open, Syscall};
use crate::sys::tty;
use crate::task::exec_target::ExecTarget;

/// The enter helper's first argument.
pub const ARG: &str = "__exec-in-task";

/// The exit code of a command that is not found, as a shell's.
pub const NOT_FOUND: i32 = 127;
/// The exit code of a command that cannot be run (not executable).
pub const CANNOT_RUN: i32 = 126;

/// A started command: its process and the agent's ends of its stdio.
pub struct Started {
    pub child: Child,
    /// Where its stdin goes (the pty's master with a TTY).
    pub stdin: File,
    /// Its stdout (the pty's master with a TTY, stdout and stderr in one).
    pub stdout: File,
    /// Its stderr; `None` with a TTY.
    pub stderr: Option<File>,
    /// The pty's master, to resize; `None` without a TTY.
    pub pty: Option<File>,
}

/// The task's own process: the start helper's child, or the helper's pid
/// itself when it has none.
pub fn task_pid(helper: u32) -> u32 {
    fs::read_to_string(format!("/proc/{helper}/task/{helper}/children"))
        .ok()
        .and_then(|c| c.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(helper)
}

/// The environment of process `pid`.
fn environ(pid: u32) -> io::Result<Vec<(String, String)>> {
    let raw = fs::read(format!("/proc/{pid}/environ"))?;
    Ok(raw
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            let (key, value) = entry.split_once('=')?;
            Some((key.to_string(), value.to_string()))
        })
        .collect())
}

/// Starts `argv` in the task `target`, with a TTY of `tty` rows and
/// columns or pipes.
pub fn start(target: &ExecTarget, argv: &[String], tty: Option<(u16, u16)>) -> io::Result<Started> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command to run"))?;
    let pid = task_pid(target.pid);
    let env = environ(pid)?;
    let mut command = if target.own_root {
        let mut command = Command::new("/proc/self/exe");
        command
            .arg0("csi-agent")
            .arg(ARG)
            .arg(pid.to_string())
            .arg("--")
            .arg(program)
            .args(args)
            .current_dir("/");
        command
    } else {
        let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or(target.task_dir.clone());
        let mut command = Command::new(program);
        command.args(args).current_dir(cwd);
        command
    };
    command.env_clear().envs(env);
    let started = match tty {
        Some((rows, cols)) => {
            // An exec task has a devpts of its own: the pty comes from
            // it, so that the command's terminal is a /dev/pts/N there.
            let pty = if target.own_root {
                tty::openpty_at(
                    &PathBuf::from(format!("/proc/{pid}/root/dev/pts/ptmx")),
                    rows,
                    cols,
                )?
            } else {
                tty::openpty(rows, cols)?
            };
            let slave =
                |pty: &tty::Pty| -> io::Result<Stdio> { Ok(Stdio::from(pty.slave.try_clone()?)) };
            command
                .stdin(slave(&pty)?)
                .stdout(slave(&pty)?)
                .stderr(slave(&pty)?);
            // SAFETY: between fork and exec only setsid(2) and ioctl(2),
            // both async-signal-safe, touching no memory of the parent's.
            unsafe {
                command.pre_exec(|| {
                    crate::sys::process::setsid()?;
                    tty::take_controlling_terminal()
                });
            }
            let child = command.spawn()?;
            drop(command);
            let master = File::from(pty.master);
            Started {
                child,
                stdin: master.try_clone()?,
                stdout: master.try_clone()?,
                stderr: None,
                pty: Some(master),
            }
        }
        None => {
            command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            crate::sys::process::in_new_session(&mut command);
            let mut child = command.spawn()?;
            let pipe = |fd: Option<OwnedFd>| {
                fd.map(File::from)
                    .ok_or_else(|| io::Error::other("the command's pipe is missing"))
            };
            let stdin = pipe(child.stdin.take().map(OwnedFd::from))?;
            let stdout = pipe(child.stdout.take().map(OwnedFd::from))?;
            let stderr = pipe(child.stderr.take().map(OwnedFd::from))?;
            Started {
                child,
                stdin,
                stdout,
                stderr: Some(stderr),
                pty: None,
            }
        }
    };
    tty::set_nonblocking(started.stdout.as_fd())?;
    if let Some(stderr) = &started.stderr {
        tty::set_nonblocking(stderr.as_fd())?;
    }
    Ok(started)
}

/// The exit code a shell would give for `status`: the code, or 128 plus
/// the signal that ended it.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

/// The exit code and message for a command that could not be started.
pub fn start_failure(program: &str, err: &io::Error) -> (i32, String) {
    match err.kind() {
        io::ErrorKind::NotFound => (
            NOT_FOUND,
            format!("csi-agent: {program}: command not found\n"),
        ),
        io::ErrorKind::PermissionDenied => (
            CANNOT_RUN,
            format!("csi-agent: {program}: permission denied\n"),
        ),
        _ => (
            CANNOT_RUN,
            format!("csi-agent: cannot run {program}: {err}\n"),
        ),
    }
}

/// The enter helper's `main`: `ARG <pid> -- <command> [args...]`.
pub fn main(args: &[String]) -> ! {
    let (pid, argv) = match args {
        [_, pid, dash, argv @ ..] if dash == "--" && !argv.is_empty() => match pid.parse::<u32>() {
            Ok(pid) => (pid, argv),
            Err(_) => usage(),
        },
        _ => usage(),
    };
    if let Err((what, err)) = enter(&Kernel, &Places::host(), pid) {
        eprintln!("csi-agent: cannot enter the task (pid {pid}): {what}: {err}");
        std::process::exit(CANNOT_RUN);
    }
    let status = Command::new(&argv[0]).args(&argv[1..]).status();
    match status {
        Ok(status) => std::process::exit(exit_code(status)),
        Err(err) => {
            let (code, message) = start_failure(&argv[0], &err);
            eprint!("{message}");
            std::process::exit(code);
        }
    }
}

fn usage() -> ! {
    eprintln!(
        "csi-agent: {ARG} is how the agent runs alloc exec's command in a task and is not run by hand"
    );
    std::process::exit(2);
}

/// Where the enter helper reads a task's process and its control groups:
/// `/proc` and `/sys/fs/cgroup` ([`Places::host`]), or a test's
/// stand-ins.
struct Places {
    proc: PathBuf,
    cgroups: PathBuf,
}

impl Places {
    fn host() -> Places {
        Places {
            proc: PathBuf::from("/proc"),
            cgroups: PathBuf::from("/sys/fs/cgroup"),
        }
    }
}

/// Joins task `pid`'s control groups, namespaces, root and user, each
/// system call made through `sys`: what it reads of the task (its
/// `/proc` entry's owner, its control groups) is read as files.
fn enter(sys: &dyn Syscall, at: &Places, pid: u32) -> Result<(), (&'static str, io::Error)> {
    let proc_dir = at.proc.join(pid.to_string());
    let owner = fs::metadata(&proc_dir).map_err(|e| ("its /proc entry", e))?;
    join_cgroups(sys, at, &proc_dir).map_err(|e| ("its control groups", e))?;
    let mut opened = Vec::new();
    let result = enter_opened(sys, &proc_dir, (owner.uid(), owner.gid()), &mut opened);
    for fd in opened {
        sys.close(fd);
    }
    result
}

/// [`enter`] past the control groups, for a task whose process `owner`
/// (uid, gid) runs; the descriptors it opens are put in `opened`, for the
/// caller to close.
fn enter_opened(
    sys: &dyn Syscall,
    proc_dir: &Path,
    (uid, gid): (u32, u32),
    opened: &mut Vec<RawFd>,
) -> Result<(), (&'static str, io::Error)> {
    let mut open = |name: &str, how: Open| -> io::Result<RawFd> {
        let fd = sys.open(&c_path(&proc_dir.join(name))?, how)?;
        opened.push(fd);
        Ok(fd)
    };
    let ipc = open("ns/ipc", Open::Read).map_err(|e| ("its IPC namespace", e))?;
    let pid_ns = open("ns/pid", Open::Read).map_err(|e| ("its PID namespace", e))?;
    let mnt = open("ns/mnt", Open::Read).map_err(|e| ("its mount namespace", e))?;
    let root = open("root", Open::Directory).map_err(|e| ("its root", e))?;
    // Its working dir (its `work_dir`), entered once in its root; one
    // that cannot be opened leaves the command at `/`.
    let cwd = open("cwd", Open::Directory).ok();
    sys.setns(ipc)
        .map_err(|e| ("setns into its IPC namespace", e))?;
    sys.setns(pid_ns)
        .map_err(|e| ("setns into its PID namespace", e))?;
    sys.setns(mnt)
        .map_err(|e| ("setns into its mount namespace", e))?;
    sys.fchdir(root).map_err(|e| ("chdir into its root", e))?;
    sys.chroot(c".").map_err(|e| ("chroot into its root", e))?;
    sys.chdir(c"/").map_err(|e| ("chdir to /", e))?;
    if let Some(cwd) = cwd {
        sys.fchdir(cwd)
            .map_err(|e| ("chdir to its working dir", e))?;
    }
    if uid != 0 {
        let become_user = || {
            sys.setgroups(&[gid])?;
            sys.setgid(gid)?;
            sys.setuid(uid)
        };
        become_user().map_err(|e| ("become its user", e))?;
    }
    Ok(())
}

/// Moves this process into the control groups of the task whose `/proc`
/// entry is `proc_dir`: each hierarchy of its `cgroup` file found under
/// the cgroup root (the unified one at the root, a v1 controller's at its
/// name).
fn join_cgroups(sys: &dyn Syscall, at: &Places, proc_dir: &Path) -> io::Result<()> {
    let text = fs::read_to_string(proc_dir.join("cgroup"))?;
    let mut digits = [0; 12];
    let pid = decimal(sys.getpid(), &mut digits);
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let base = if controllers.is_empty() {
            at.cgroups.clone()
        } else {
            at.cgroups.join(controllers.trim_start_matches("name="))
        };
        let procs = base.join(path.trim_start_matches('/')).join("cgroup.procs");
        if !procs.exists() {
            continue;
        }
        let fd = sys.open(&c_path(&procs)?, Open::Write)?;
        let written = sys.write(fd, pid);
        sys.close(fd);
        written?;
    }
    Ok(())
}

/// `path` as the C string a system call takes.
fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

#[cfg(test)]
mod tests {
    use super::super::syscall::{Call, RecordingSyscall};
    use super::*;

    /// A temporary dir, removed when dropped.
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A task's `/proc` entry and the control groups it is in, as files
    /// under a temporary dir named for `test`: pid 42, in the unified
    /// hierarchy's `/job.slice/t` and in a v1 `cpu,cpuacct` one that this
    /// host lacks.
    fn fake_task(test: &str) -> (TempDir, Places) {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-enter-{}-{test}", std::process::id()));
        let dir = TempDir(dir);
        let task = dir.0.join("proc/42");
        fs::create_dir_all(task.join("ns")).unwrap();
        for ns in ["ipc", "pid", "mnt"] {
            fs::write(task.join("ns").join(ns), "").unwrap();
        }
        fs::create_dir_all(task.join("root")).unwrap();
        fs::create_dir_all(task.join("cwd")).unwrap();
        fs::write(task.join("cgroup"), "0::/job.slice/t\n4:cpu,cpuacct:/t\n").unwrap();
        let group = dir.0.join("cgroup/job.slice/t");
        fs::create_dir_all(&group).unwrap();
        fs::write(group.join("cgroup.procs"), "").unwrap();
        let places = Places {
            proc: dir.0.join("proc"),
            cgroups: dir.0.join("cgroup"),
        };
        (dir, places)
    }

    #[test]
    fn entering_a_task_joins_its_groups_then_its_namespaces_then_its_root_then_its_user() {
        let (dir, at) = fake_task("order");
        let sys = RecordingSyscall::new();
        let task = format!("{}/42", at.proc.display());
        enter(&sys, &at, 42).unwrap();
        // The fake entry is this test's, owned by whoever runs it: its
        // user is taken only when that is not root.
        let user: Vec<String> = match fs::metadata(&task).unwrap().uid() {
            0 => Vec::new(),
            uid => {
                let gid = fs::metadata(&task).unwrap().gid();
                vec![
                    format!("setgroups {gid}"),
                    format!("setgid {gid}"),
                    format!("setuid {uid}"),
                ]
            }
        };
        let mut want = vec![
            "getpid".to_string(),
            format!(
                "open {}/cgroup/job.slice/t/cgroup.procs write",
                dir.0.display()
            ),
            format!("write 3 {}", RecordingSyscall::PID),
            "close 3".into(),
            format!("open {task}/ns/ipc read"),
            format!("open {task}/ns/pid read"),
            format!("open {task}/ns/mnt read"),
            format!("open {task}/root directory"),
            format!("open {task}/cwd directory"),
            "setns 3".into(),
            "setns 4".into(),
            "setns 5".into(),
            "fchdir 6".into(),
            "chroot .".into(),
            "chdir /".into(),
            "fchdir 7".into(),
        ];
        want.extend(user);
        want.extend((3..=7).map(|fd| format!("close {fd}")));
        assert_eq!(sys.lines(), want);
    }

    #[test]
    fn a_task_s_user_is_taken_last_and_a_failed_call_names_its_step_and_closes_what_it_opened() {
        let (_dir, at) = fake_task("user");
        let task = at.proc.join("42");
        let sys = RecordingSyscall::new();
        let mut opened = Vec::new();
        enter_opened(&sys, &task, (1000, 100), &mut opened).unwrap();
        let lines = sys.lines();
        assert_eq!(
            lines[lines.len() - 3..],
            ["setgroups 100", "setgid 100", "setuid 1000"]
        );

        // The mount namespace's setns fails: nothing after it is made,
        // and every descriptor opened is closed.
        let sys = RecordingSyscall::new();
        sys.fail_first(libc::EPERM, |call| *call == Call::Setns(5));
        let (what, err) = enter(&sys, &at, 42).unwrap_err();
        assert_eq!(what, "setns into its mount namespace");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
        let lines = sys.lines();
        assert!(!lines.iter().any(|l| l.starts_with("chroot")), "{lines:#?}");
        assert_eq!(
            lines[lines.len() - 5..],
            ["close 3", "close 4", "close 5", "close 6", "close 7"]
        );
    }

    #[test]
    fn exit_codes_are_a_shells() {
        let status = |raw| ExitStatus::from_raw(raw);
        assert_eq!(exit_code(status(3 << 8)), 3);
        assert_eq!(exit_code(status(libc::SIGKILL)), 128 + libc::SIGKILL);
        let missing = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(start_failure("nope", &missing).0, NOT_FOUND);
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(start_failure("nope", &denied).0, CANNOT_RUN);
    }
}
