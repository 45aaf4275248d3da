//! The prepare helper: a task's artifacts are fetched and unpacked, and
//! its templates rendered, in a process of their own, so that input
//! someone else wrote (a server's answer, an archive, a template) can
//! crash, hang or exhaust only that process: the start it serves fails,
//! and the agent, its claims and its other tasks carry on.
//!
//! [`run`] spawns this same binary (`/proc/self/exe`) with the hidden
//! argument [`ARG`], the alloc and the task (so `ps` and tests tell which
//! start a helper serves), without a `pre_exec` hook, so that std spawns
//! it with `posix_spawn` as it does the start helper
//! ([`super::exec::helper`]), copying none of the agent's page tables.
//! The helper reads its [`Input`] from a socket pair on its stdin, in the
//! start helper's encoding (`wire.rs`), and answers on the same socket:
//! the phase it begins (fetching, rendering) and then its outcome, the
//! environment of `env = true` templates or the failure's message. The
//! agent's side waits on a starter thread (`task-fetch-<n>` for a start
//! with artifacts, `task-start-<n>` otherwise, and for a re-render) up to
//! a deadline ([`deadline`]), kills the helper past it, and takes a
//! helper that ended without answering (a signal, an abort such as a
//! stack overflow, an exit) or answered what it cannot read as that
//! start's failure, naming the phase and the cause: "template render
//! crashed: killed by signal 6 (SIGABRT)". A failure while fetching is
//! the task's "Failed Artifact Download", any other its start failing;
//! its restart policy decides what follows, and an agent restarted with
//! the job fails the same start the same way, in a helper again.
//!
//! Why a helper of its own rather than the start helper: the start helper
//! becomes the task's process (the agent tracks it, it writes the pid
//! file), while the templates' environment decides what that process is
//! (its arguments, its env, a volume's destination) and docker tasks,
//! whose templates render too, have no start helper at all. So the
//! prepare helper runs first, for every driver, and ends before the rest
//! of the start.
//!
//! The helper bounds itself before it reads anything: its address space
//! to `ADDRESS_SPACE` (`child.rs`, `RLIMIT_AS`), so that a memory bomb fails an
//! allocation in the helper, which aborts it, rather than making the host
//! swap or the OOM killer choose; no core dump (its memory holds headers
//! and secrets); and it is killed when the thread that started it ends
//! (`PR_SET_PDEATHSIG`). `RLIMIT_AS` rather than the task's control group:
//! the group is made later in the start, cgroups may be missing or not
//! delegated (a start then goes without), and what a template costs to
//! render is not what the task asked to run with. Its stderr is the
//! task's stderr log, where a crash's own words (Rust's "has overflowed
//! its stack") land for the task's owner; the agent logs and reports only
//! what the helper answered or how it ended, so the secrets rule holds.
//!
//! A task with neither artifacts nor templates starts without a helper.

mod child;
mod wire;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use self::child::{main, ARG};
use self::wire::{Answer, Input, Phase, Work};
use super::artifact::ArtifactLimits;
use super::user::User;
use crate::nomad_template::NomadService;
use crate::spec::{Task, TaskTemplate};
use crate::units::format_duration;

/// The agent's own binary, as the kernel still holds it.
const SELF_EXE: &str = "/proc/self/exe";

/// How long the templates of one start (or re-render) may take to render
/// in the helper before it is killed. A template renders in milliseconds;
/// this bounds one that loops, whatever the engine's own bounds let by.
pub const TEMPLATE_DEADLINE: Duration = Duration::from_secs(60);

/// The largest answer the agent reads from the helper (the environment of
/// `env = true` templates is the large part): more is a bad answer.
pub const ANSWER_LIMIT: usize = 16 << 20;

/// Why the helper's work did not succeed, and in which phase.
#[derive(Debug)]
pub(super) struct Failure {
    phase: Phase,
    pub message: String,
}

impl Failure {
    /// Whether it failed fetching the artifacts (the task's "Failed
    /// Artifact Download"), not in another phase.
    pub(super) fn fetching(&self) -> bool {
        self.phase == Phase::Artifacts
    }

    /// The helper ended, or was ended, in `phase` without its answer.
    fn crashed(phase: Phase, how: &str) -> Failure {
        Failure {
            phase,
            message: format!("{} crashed: {how}", phase.describe()),
        }
    }
}

/// How long the helper may take for `input`: each artifact's fetch bound
/// ([`fetch_bound`]), then [`TEMPLATE_DEADLINE`].
fn deadline(input: &Input) -> Duration {
    let fetches = u32::try_from(input.artifacts.len()).unwrap_or(u32::MAX);
    fetch_bound(&input.limits)
        .saturating_mul(fetches)
        .saturating_add(TEMPLATE_DEADLINE)
}

/// How long one artifact may take: its download's deadline
/// (`http_read_timeout`, which bounds a whole fetch as in Nomad), and as
/// long again to check and unpack what it brought (bounded in size, not
/// in time, by the artifact limits).
fn fetch_bound(limits: &ArtifactLimits) -> Duration {
    limits.http.deadline.saturating_mul(2)
}

/// What a start's templates read besides the task's environment: the
/// node's attributes and the service registry's snapshot.
pub(super) struct Reads<'a>(pub &'a BTreeMap<String, String>, pub &'a [NomadService]);

/// Fetches the artifacts of task `spec` of `alloc` into `task_dir`, then
/// renders its templates there, in the helper: the task's environment,
/// `env` (the one before the templates) with the `env = true` templates'
/// variables over it. Without either, no helper runs.
pub(super) fn for_start(
    alloc: &str,
    spec: &Task,
    task_dir: &Path,
    user: Option<User>,
    env: BTreeMap<String, String>,
    reads: Reads<'_>,
    limits: ArtifactLimits,
) -> Result<BTreeMap<String, String>, Failure> {
    let Reads(node, services) = reads;
    if spec.artifacts.is_empty() && spec.templates.is_empty() {
        return Ok(env);
    }
    let input = Input {
        work: Work::Start,
        agent: std::process::id(),
        task_dir: task_dir.to_path_buf(),
        user,
        limits,
        artifacts: spec.artifacts.clone(),
        env,
        node: node.clone(),
        services: services.to_vec(),
        templates: spec.templates.clone(),
    };
    match run(&input, alloc, &spec.name, deadline(&input))? {
        Answer::Started { env, sizes } => {
            for (t, size) in spec.templates.iter().zip(sizes) {
                log::info!(
                    "Task dir {}: template {:?} rendered ({size} bytes)",
                    task_dir.display(),
                    t.destination
                );
            }
            Ok(env)
        }
        other => Err(Failure::crashed(
            Phase::Templates,
            &format!("it answered a start with {}", other.kind()),
        )),
    }
}

/// Renders `templates` again into the running task `task` of `alloc`
/// (its dir `task_dir`, its environment `env`), in the helper: the
/// indexes of those whose text changed, which were written.
pub(super) fn rerender(
    alloc: &str,
    task: &str,
    templates: &[TaskTemplate],
    task_dir: &Path,
    env: BTreeMap<String, String>,
    node: &BTreeMap<String, String>,
    services: &[NomadService],
) -> Result<Vec<usize>, String> {
    let input = Input {
        work: Work::Rerender,
        agent: std::process::id(),
        task_dir: task_dir.to_path_buf(),
        user: None,
        limits: ArtifactLimits::default(),
        artifacts: Vec::new(),
        env,
        node: node.clone(),
        services: services.to_vec(),
        templates: templates.to_vec(),
    };
    match run(&input, alloc, task, deadline(&input)).map_err(|f| f.message)? {
        Answer::Rerendered { changed } => Ok(changed.into_iter().map(|i| i as usize).collect()),
        other => Err(Failure::crashed(
            Phase::Templates,
            &format!("it answered a re-render with {}", other.kind()),
        )
        .message),
    }
}

/// Has the helper do `input`'s work for task `task` of `alloc`, and waits
/// for its answer until `deadline` has passed (then kills it).
fn run(input: &Input, alloc: &str, task: &str, deadline: Duration) -> Result<Answer, Failure> {
    let until = Instant::now() + deadline;
    let spawn_failed = |err: io::Error| Failure {
        phase: Phase::Setup,
        message: format!("cannot start the task preparation helper: {err}"),
    };
    let (mut ours, theirs) = UnixStream::pair().map_err(spawn_failed)?;
    let mut command = Command::new(SELF_EXE);
    command
        .arg0("csi-agent")
        .args([ARG, alloc, task])
        .current_dir("/")
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(stderr_log(&input.task_dir));
    let mut child = command.spawn().map_err(spawn_failed)?;
    // The helper's end, which `command` holds: once the helper exits, the
    // socket ends.
    drop(command);
    let answer = exchange(&mut ours, input, until, deadline);
    if answer.is_err() {
        // Stuck, or its answer unreadable: make sure it ends.
        let _ = child.kill();
    }
    // It holds its end of the socket until it exits, so once the socket
    // has ended (or it was killed) this wait is short.
    let status = child.wait();
    let (phase, last) = answer?;
    match (last, status) {
        (Some(Answer::Failed { phase, message }), Ok(s)) if s.success() => {
            Err(Failure { phase, message })
        }
        (Some(answer), Ok(s)) if s.success() => Ok(answer),
        (None, Ok(s)) if s.success() => Err(Failure::crashed(phase, "it exited without answering")),
        (_, Ok(s)) => Err(Failure::crashed(phase, &describe_status(s))),
        (_, Err(err)) => Err(Failure::crashed(
            phase,
            &format!("cannot wait for it: {err}"),
        )),
    }
}

/// Sends the input and reads the answers to their end: the last phase the
/// helper began, and its outcome if it gave one.
fn exchange(
    socket: &mut UnixStream,
    input: &Input,
    until: Instant,
    deadline: Duration,
) -> Result<(Phase, Option<Answer>), Failure> {
    let mut phase = Phase::Setup;
    let timed_out = |phase: Phase| Failure {
        phase,
        message: format!(
            "{} did not finish within {}: killed",
            phase.describe(),
            format_duration(deadline)
        ),
    };
    let sent = socket
        .set_write_timeout(Some(deadline))
        .and_then(|()| socket.write_all(&wire::encode_input(input)))
        .and_then(|()| socket.shutdown(Shutdown::Write));
    match sent {
        Ok(()) => {}
        Err(err) if is_timeout(&err) => return Err(timed_out(phase)),
        // The helper is gone: its status tells why.
        Err(_) => return Ok((phase, None)),
    }
    let mut last = None;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out(phase));
        }
        socket
            .set_read_timeout(Some(left))
            .map_err(|err| Failure::crashed(phase, &format!("cannot read its answer: {err}")))?;
        let message = match read_message(socket) {
            Ok(Some(message)) => message,
            Ok(None) => return Ok((phase, last)),
            Err(err) if is_timeout(&err) => return Err(timed_out(phase)),
            Err(err) => {
                return Err(Failure::crashed(
                    phase,
                    &format!("its answer is unreadable: {err}"),
                ))
            }
        };
        let answer = wire::decode_answer(&message)
            .map_err(|err| Failure::crashed(phase, &format!("its answer is unreadable: {err}")))?;
        match answer {
            Answer::Phase(next) => phase = next,
            outcome if last.is_none() => last = Some(outcome),
            _ => {
                return Err(Failure::crashed(
                    phase,
                    "its answer is unreadable: a second outcome",
                ))
            }
        }
    }
}

/// One message from the helper, whole (its header too); `None` at the
/// socket's end between messages.
fn read_message(socket: &mut UnixStream) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; 8];
    let mut got = 0;
    while got < header.len() {
        match socket.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::other("the socket ends inside a header")),
            Ok(n) => got += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    let len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
    if len > ANSWER_LIMIT {
        return Err(io::Error::other(format!(
            "a message of {len} bytes is over ANSWER_LIMIT ({ANSWER_LIMIT} bytes)"
        )));
    }
    let mut message = header.to_vec();
    message.resize(8 + len, 0);
    socket.read_exact(&mut message[8..])?;
    Ok(Some(message))
}

fn is_timeout(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// How a helper that did not answer ended.
fn describe_status(status: ExitStatus) -> String {
    match (status.signal(), status.code()) {
        (Some(signal), _) => format!("killed by signal {signal} ({})", signal_name(signal)),
        (None, Some(code)) => format!("it exited with status {code}"),
        (None, None) => format!("it ended with {status}"),
    }
}

/// The name of the signals a crashed or killed process ends by.
fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        libc::SIGPIPE => "SIGPIPE",
        _ => "another signal",
    }
}

/// The task's stderr log, for the helper's own last words; nowhere when
/// it cannot be opened (a symlink there is refused).
fn stderr_log(task_dir: &Path) -> Stdio {
    OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(task_dir.join("logs/stderr"))
        .map_or_else(|_| Stdio::null(), Stdio::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn input() -> Input {
        Input {
            work: Work::Start,
            agent: std::process::id(),
            task_dir: PathBuf::from("/nonexistent"),
            user: None,
            limits: ArtifactLimits::default(),
            artifacts: Vec::new(),
            env: BTreeMap::new(),
            node: BTreeMap::new(),
            services: Vec::new(),
            templates: Vec::new(),
        }
    }

    #[test]
    fn a_helper_silent_past_its_deadline_is_given_up_on_in_its_phase() {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let deadline = Duration::from_millis(200);
        let (given_up, wait) = std::sync::mpsc::channel::<()>();
        let helper = std::thread::spawn(move || {
            let mut theirs = theirs;
            let mut input = Vec::new();
            theirs.read_to_end(&mut input).unwrap();
            assert!(wire::decode_input(&input).is_ok());
            let begun = wire::encode_answer(&Answer::Phase(Phase::Templates));
            theirs.write_all(&begun).unwrap();
            // Then nothing, until the agent's side has given up.
            let _ = wait.recv();
        });
        let started = Instant::now();
        let err = exchange(&mut ours, &input(), started + deadline, deadline).unwrap_err();
        assert!(started.elapsed() >= deadline);
        assert_eq!(err.phase, Phase::Templates);
        assert_eq!(
            err.message,
            "template render did not finish within 200ms: killed"
        );
        drop(given_up);
        helper.join().unwrap();
    }

    #[test]
    fn an_answer_over_the_limit_is_refused_unread() {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        let mut header = wire::ANSWER_MAGIC.to_vec();
        header.extend_from_slice(&(ANSWER_LIMIT as u32 + 1).to_le_bytes());
        theirs.write_all(&header).unwrap();
        let err = read_message(&mut ours).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "a message of {} bytes is over ANSWER_LIMIT ({ANSWER_LIMIT} bytes)",
                ANSWER_LIMIT + 1
            )
        );
        // A socket that ends between messages ends the answers.
        drop(theirs);
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        assert!(read_message(&mut ours).unwrap().is_none());
    }

    #[test]
    fn a_crash_names_its_phase_and_signal() {
        let status = ExitStatus::from_raw(libc::SIGSEGV);
        assert_eq!(
            Failure::crashed(Phase::Templates, &describe_status(status)).message,
            "template render crashed: killed by signal 11 (SIGSEGV)"
        );
        let status = ExitStatus::from_raw(3 << 8);
        assert_eq!(
            Failure::crashed(Phase::Artifacts, &describe_status(status)).message,
            "artifact fetch crashed: it exited with status 3"
        );
    }
}
