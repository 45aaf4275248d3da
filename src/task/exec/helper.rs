//! The start helper: the process that does the child's side of a start,
//! so that the agent never forks itself.
//!
//! A fork of the agent copies its page tables under its mmap lock and
//! makes every page of it copy-on-write, which stalls the agent's own
//! threads in page faults while the starters fork (BENCHMARKS.md, P9).
//! Instead, [`start`] spawns this same binary (`/proc/self/exe`, which
//! still runs if the file was replaced on disk) with the hidden argument
//! [`ARG`] and without a `pre_exec` hook, so that std spawns it with
//! `posix_spawn` (a `CLONE_VFORK` clone that copies no page tables).
//!
//! The helper starts with the task's working directory and logs, as the
//! forked child did, an empty environment (the task's is in the start:
//! only the task's process carries it, as before), and one end of a
//! socket pair on its stdin. It reads the start ([`super::encoding`]) to its end, moves
//! the socket to a descriptor closed on exec and puts `/dev/null` on its
//! stdin, then runs the same [`ChildSetup`](super::child::ChildSetup) the
//! forked child ran and execs the task ([`start_task`], every call of it
//! through [`Syscall`]). The process the agent tracks is
//! the helper: it becomes the task's waiter (`fork_waiter`), so its pid,
//! session, pid file, exit record and parent are what they were.
//!
//! The socket tells the agent how the start ended, as std's status pipe
//! did: nothing before its end (every copy closed: the waiter closes its
//! descriptors, the task's closes on exec) when the task runs, or the
//! errno of the failing step or exec (4 bytes, little-endian). A failing
//! step has also written its `csi-agent: ` line to the task's stderr log.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use super::encoding::{self, Start};
use super::perform::{self, Failed};
use super::pid_ns::{End, Role};
use super::syscall::{CStrArray, Kernel, Open, SignalAction, Syscall};
use super::Launch;
use crate::sys::{fd, process};

/// The helper's first argument; `csi-agent` lists it nowhere.
pub const ARG: &str = "__start-task";

/// The agent's own binary, as the kernel still holds it.
const SELF_EXE: &str = "/proc/self/exe";

/// The exit status of a helper whose start failed (std's for a failed
/// `pre_exec`, which the waiter records in the same way).
const FAILED: libc::c_int = 1;

/// The start as the helper runs it, from a launch and its child's side.
pub(super) fn prepare(launch: &Launch, setup: super::child::ChildSetup) -> io::Result<Vec<u8>> {
    let nul = |_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in the command line",
        )
    };
    let command = CString::new(launch.command.as_str()).map_err(nul)?;
    let mut argv = vec![command.clone()];
    for arg in &launch.args {
        argv.push(CString::new(arg.as_str()).map_err(nul)?);
    }
    let mut env = Vec::new();
    for (key, value) in &launch.env {
        env.push(CString::new(format!("{key}={value}")).map_err(nul)?);
    }
    Ok(encoding::encode(&Start {
        command,
        argv,
        env,
        setup,
    }))
}

/// Spawns the helper for `input` (from [`prepare`]) and waits until the
/// task runs or the start fails; a failed helper is reaped.
pub(super) fn start(
    launch: &Launch,
    input: &[u8],
    stdout: File,
    stderr: File,
) -> io::Result<Child> {
    let (mut ours, theirs) = UnixStream::pair()?;
    let mut command = Command::new(SELF_EXE);
    command
        .arg0("csi-agent")
        .arg(ARG)
        .env_clear()
        .current_dir(&launch.cwd)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(stdout)
        .stderr(stderr);
    let mut child = command.spawn()?;
    // The helper's end, which `command` holds: the agent keeps no copy, so
    // the socket's end is the helper's (and the task's) doing.
    drop(command);
    let outcome = (|| {
        ours.write_all(input)?;
        ours.shutdown(Shutdown::Write)?;
        let mut status = Vec::new();
        ours.take(16).read_to_end(&mut status)?;
        Ok::<_, io::Error>(status)
    })();
    let err = match outcome {
        Ok(status) if status.is_empty() => return Ok(child),
        Ok(status) => match <[u8; 4]>::try_from(status.as_slice()) {
            Ok(errno) => io::Error::from_raw_os_error(i32::from_le_bytes(errno)),
            Err(_) => io::Error::other("the start helper sent a malformed status"),
        },
        Err(err) => {
            // The helper is stuck or gone: make sure it ends.
            let _ = child.kill();
            err
        }
    };
    let _ = child.wait();
    Err(err)
}

/// The helper's `main`: runs the start read from stdin and execs the
/// task, or exits with the reason on stderr (the task's log).
pub fn main() -> ! {
    if !stdin_is_socket() {
        eprintln!(
            "csi-agent: {ARG} is how the agent starts a task: it reads the start from the agent \
             on its stdin and is not run by hand"
        );
        std::process::exit(2);
    }
    let mut input = Vec::new();
    // SAFETY: fd 0 is this process's stdin, open for its whole life; the
    // `File` is forgotten below rather than closing it.
    let mut stdin = unsafe { File::from_raw_fd(0) };
    let read = stdin.read_to_end(&mut input);
    std::mem::forget(stdin);
    let start = read
        .map_err(|e| format!("cannot read the start from the agent: {e}"))
        .and_then(|_| {
            encoding::decode(&input)
                .map_err(|e| format!("cannot read the start from the agent: {e}"))
        });
    let start = match start {
        Ok(start) => start,
        Err(line) => {
            eprintln!("{}{line}", super::CHILD_ERROR);
            fail(0, io::Error::from_raw_os_error(libc::EINVAL));
        }
    };
    let sys = Kernel;
    let status = match set_up_stdio(&sys) {
        Ok(status) => status,
        Err(err) => {
            let failed = Failed::new(b"cannot set up the start helper's stdin", b"", err);
            fail(0, failed.report(&sys))
        }
    };
    let argv = CStrArray::new(&start.argv);
    let env = CStrArray::new(&start.env);
    // SAFETY: the helper is single-threaded: it starts no thread, and
    // std's runtime starts none either.
    match unsafe { start_task(&sys, &start, &argv, &env) } {
        Returned::StepFailed(failed) => fail(status, failed.report(&sys)),
        Returned::ExecFailed(err) => fail(status, err),
        Returned::TaskEnded(end) => end.exit(),
    }
}

/// How [`start_task`] returned: never when the task's exec succeeded.
#[derive(Debug)]
pub(super) enum Returned<'a> {
    /// A step failed, in the process the agent tracks or the task's.
    StepFailed(Failed<'a>),
    /// The exec of the task failed, in the task's process.
    ExecFailed(io::Error),
    /// The task ended, in the process the agent tracks, which ends so
    /// too.
    TaskEnded(End),
}

/// The start, from the moment the helper's stdin is set up: the task
/// starts with SIGPIPE's default action, as std's spawn gives it (Rust's
/// runtime ignores it); the setup runs ([`perform::run`]); then the task's
/// process execs the task, and the process the agent tracks waits for it.
///
/// # Safety
///
/// The caller is single-threaded, as [`Syscall::fork`] and
/// [`Syscall::exec`] need.
pub(super) unsafe fn start_task<'a>(
    sys: &dyn Syscall,
    start: &'a Start,
    argv: &CStrArray<'_>,
    env: &CStrArray<'_>,
) -> Returned<'a> {
    sys.set_signal(libc::SIGPIPE, SignalAction::Default);
    // SAFETY: the caller is single-threaded.
    match unsafe { perform::run(&start.setup, sys) } {
        Err(failed) => Returned::StepFailed(failed),
        Ok(Role::Waiter(end)) => Returned::TaskEnded(end),
        // The task's process: only system calls from here, on data
        // prepared before its fork.
        // SAFETY: the caller is single-threaded.
        Ok(Role::Task) => Returned::ExecFailed(unsafe { sys.exec(&start.command, argv, env) }),
    }
}

/// Whether fd 0 is a socket (the agent's), not a terminal or a file.
pub(in crate::task) fn stdin_is_socket() -> bool {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat(2) fills the live buffer when it returns 0.
    if unsafe { libc::fstat(0, stat.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat returned 0, so the buffer is initialised.
    let stat = unsafe { stat.assume_init() };
    stat.st_mode & libc::S_IFMT == libc::S_IFSOCK
}

/// Moves the agent's socket from stdin to a descriptor closed on exec,
/// and gives stdin `/dev/null`; returns the socket's descriptor.
pub(super) fn set_up_stdio(sys: &dyn Syscall) -> io::Result<RawFd> {
    let status = sys.dup_cloexec(0, 3)?;
    let null = sys.open(c"/dev/null", Open::Read)?;
    let result = sys.dup2(null, 0);
    sys.close(null);
    result.map(|()| status)
}

/// Sends `err`'s errno on the socket `status` and exits [`FAILED`].
fn fail(status: RawFd, err: io::Error) -> ! {
    let errno = err.raw_os_error().unwrap_or(libc::EINVAL).to_le_bytes();
    let _ = fd::write(status, &errno);
    // At once, as a failed child did.
    process::exit_now(FAILED)
}
