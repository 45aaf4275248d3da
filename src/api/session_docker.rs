//! `alloc exec` into a `docker` task: the command runs as an exec of the
//! task's container, through the engine's exec API
//! ([`crate::docker::Engine::exec_create`]), on the session's thread; the
//! main loop only named the container.
//!
//! The engine hands the exec's stdio over on the connection that started
//! it. This thread reads its output (a TTY's bytes as they are, or stdout
//! and stderr demultiplexed from the engine's frames) and sends it; a
//! second thread writes the caller's stdin to it (shutting its write side
//! at stdin's end, which ends the command's stdin) and applies window
//! sizes with the engine's resize. Once the output ends, the exit code
//! comes from the exec's inspect, which may lag the output's end by a
//! moment: it is asked every [`EXIT_CHECK`] for at most [`EXIT_WAIT`].
//!
//! The engine has no call that ends an exec, and one whose caller went
//! away runs on: a session whose caller is gone kills the exec's process
//! (and its group, when it leads one, as a TTY's command does). The
//! process is pinned with a pidfd as soon as the engine's inspect gives
//! its pid, while the caller is still there ([`Exec::pin`]), so the kill
//! asks the engine nothing when the caller leaves: an engine slow to
//! answer under load (the kill once waited on its inspect past the
//! caller's patience) or a pid taken by another process since cannot
//! make the kill late or wrong. Only an exec never pinned is killed by
//! the pid a fresh inspect gives, while it says the exec runs.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use grpcio::RequestStream;

use super::session_output::{ExecSink, CHUNK, EXIT_CHECK};
use super::{wire, wire_session, CallError, ErrorKind};
use crate::docker::{demultiplex, Demux, Engine, Error as EngineError};
use crate::grpc::block_on;
use crate::proto::agent as pb;
use crate::sys::process::{self, Pidfd};
use crate::task::exec_target::DockerTarget;

/// The longest the exit code of an exec whose output ended is waited for
/// in its inspect; past it the session ends with [`NO_EXIT_CODE`].
pub const EXIT_WAIT: Duration = Duration::from_secs(10);

/// The exit code passed back when the engine never told the exec's.
pub const NO_EXIT_CODE: i32 = 255;

/// How often the inspect is asked for a started exec's pid until it has
/// one: until then a caller's leaving needs the engine to answer.
const PIN_CHECK: Duration = Duration::from_millis(20);

/// Runs `start`'s command in `target`'s container and streams its stdio
/// over the call until it ends.
pub(super) fn run(
    target: &DockerTarget,
    start: &pb::AllocExecStart,
    stdin_closed: bool,
    stream: RequestStream<pb::AllocExecInput>,
    mut sink: ExecSink,
) {
    let started = Engine::new(&target.endpoint)
        .map_err(|err| engine_failure(target, &err))
        .and_then(|engine| {
            let id = engine
                .exec_create(&target.container, &start.command, start.tty)
                .map_err(|err| engine_failure(target, &err))?;
            let exec = engine
                .exec_start(&id, start.tty)
                .map_err(|err| engine_failure(target, &err))?;
            Ok((engine, id, exec))
        });
    let (engine, id, exec) = match started {
        Ok(started) => started,
        Err(err) => {
            sink.fail(wire::status(&err));
            return;
        }
    };
    let exec_id = Exec {
        engine,
        id,
        tty: start.tty,
        pinned: Arc::new(OnceLock::new()),
    };
    let size = start
        .tty
        .then(|| wire_session::terminal_size(start.size.as_ref()));
    // Without -i (or a caller's stdin already empty), a pipe's end closes
    // at once; a TTY stays open, as a terminal does.
    let input = match (stdin_closed && !start.tty, exec.input.try_clone()) {
        (false, Ok(input)) => Some(input),
        (true, _) => {
            let _ = exec.input.shutdown(Shutdown::Write);
            None
        }
        (false, Err(err)) => {
            log::debug!("An alloc exec's stdin is lost: {err}");
            None
        }
    };
    let ended = Arc::new(AtomicBool::new(false));
    let pump = {
        let (exec_id, ended) = (exec_id.clone(), ended.clone());
        let connection = exec.input.try_clone().ok();
        thread::Builder::new()
            .name("api-session-in".into())
            .spawn(move || pump_input(stream, input, connection, size, &exec_id, &ended))
    };
    if pump.is_err() {
        exec_id.kill();
    }
    let mut output = exec.output;
    let sent = if start.tty {
        pump_raw(&mut sink, &mut output)
    } else {
        pump_frames(&mut sink, &mut output)
    };
    ended.store(true, Ordering::SeqCst);
    let sent = match sent {
        Ok(sent) => sent,
        Err(message) => {
            let message = format!("alloc exec: {message}\n");
            sink.send(wire_session::exec_output(b"", message.as_bytes()))
        }
    };
    if !sent {
        // The caller is gone: so is its command.
        exec_id.kill();
        let _ = exec.input.shutdown(Shutdown::Both);
        return;
    }
    let code = exec_id.exit_code().unwrap_or_else(|message| {
        let message = format!("alloc exec: {message}\n");
        sink.send(wire_session::exec_output(b"", message.as_bytes()));
        NO_EXIT_CODE
    });
    if sink.send(wire_session::exec_exited(code)) {
        sink.close();
    }
    // The input thread ends with the call's stream, which the caller
    // closes once it has the exit code; it is not waited for.
    drop(pump);
}

/// What an engine's failure to start the exec is for the caller: a
/// container that is not running (or gone) is the task's state, anything
/// else the engine's.
fn engine_failure(target: &DockerTarget, err: &EngineError) -> CallError {
    match err {
        EngineError::Conflict(message) | EngineError::NotFound(message) => CallError::new(
            ErrorKind::FailedPrecondition,
            format!("container {} is not running: {message}", target.container),
        ),
        err => CallError::new(
            ErrorKind::Unavailable,
            format!(
                "cannot run a command in container {}: {}",
                target.container,
                crate::error_chain(err)
            ),
        ),
    }
}

/// One exec on its engine.
#[derive(Clone)]
struct Exec {
    engine: Engine,
    id: String,
    tty: bool,
    /// Its process and pid, once [`Exec::pin`] found them.
    pinned: Arc<OnceLock<(Pidfd, u32)>>,
}

impl Exec {
    /// Pins the exec's process with a pidfd, asking the inspect for its
    /// pid until the engine gives one ([`EXIT_WAIT`] at most: the engine
    /// says the exec runs before its process has started). The pidfd is
    /// taken only between two inspects that give the same pid of a
    /// running exec, so it is that process and no other. Gives up,
    /// pinning nothing, once the exec ended (`ended`, its output closed).
    fn pin(&self, ended: &AtomicBool) {
        let deadline = Instant::now() + EXIT_WAIT;
        let running_pid = || match self.engine.exec_inspect(&self.id) {
            Ok(state) if state.running && state.pid != 0 => Some(state.pid),
            Ok(_) => None,
            Err(err) => {
                log::debug!("Cannot inspect exec {}: {err}", self.id);
                None
            }
        };
        while !ended.load(Ordering::SeqCst) && Instant::now() < deadline {
            if let Some(pid) = running_pid() {
                match Pidfd::open(pid) {
                    Ok(pidfd) if running_pid() == Some(pid) => {
                        log::debug!("Exec {}: pinned its process {pid}", self.id);
                        let _ = self.pinned.set((pidfd, pid));
                        return;
                    }
                    Ok(_) => {}
                    Err(err) => log::debug!("Cannot pin exec {}'s pid {pid}: {err}", self.id),
                }
            }
            thread::sleep(PIN_CHECK);
        }
        log::debug!("Exec {}: its process was not pinned", self.id);
    }

    /// Kills the exec's process (and its group with a TTY): through its
    /// pidfd once pinned, asking the engine nothing; otherwise by the
    /// pid the inspect gives, if the engine says it still runs.
    fn kill(&self) {
        if let Some((pidfd, pid)) = self.pinned.get() {
            // A TTY's command leads its own session and group, whose ID
            // is its pid while it lives: the group goes first.
            if self.tty && pidfd.signal(0).is_ok() {
                let _ = process::kill_group(*pid, libc::SIGKILL);
            }
            match pidfd.signal(libc::SIGKILL) {
                Ok(()) => log::debug!("Exec {}: killed its process {pid}", self.id),
                Err(err) if err.raw_os_error() == Some(libc::ESRCH) => {}
                Err(err) => log::warn!("Exec {}: cannot kill its process {pid}: {err}", self.id),
            }
            return;
        }
        match self.engine.exec_inspect(&self.id) {
            Ok(state) if state.running && state.pid != 0 => {
                // A pid that leads no group has no group of its number.
                if self.tty {
                    let _ = process::kill_group(state.pid, libc::SIGKILL);
                }
                let _ = process::kill(state.pid, libc::SIGKILL);
            }
            Ok(_) => {}
            Err(err) => log::warn!(
                "Exec {}: cannot inspect it to kill what its caller left: {err}",
                self.id
            ),
        }
    }

    /// The exit code, once the engine has it ([`EXIT_WAIT`] at most).
    fn exit_code(&self) -> Result<i32, String> {
        let deadline = Instant::now() + EXIT_WAIT;
        loop {
            let state = self
                .engine
                .exec_inspect(&self.id)
                .map_err(|err| crate::error_chain(&err))?;
            if let (false, Some(code)) = (state.running, state.exit_code) {
                return Ok(i32::try_from(code).unwrap_or(NO_EXIT_CODE));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the engine did not tell the command's exit code within EXIT_WAIT ({}s)",
                    EXIT_WAIT.as_secs()
                ));
            }
            thread::sleep(EXIT_CHECK);
        }
    }
}

/// Sends a TTY's output as it comes until it ends: `Ok(false)` if the
/// caller is gone.
fn pump_raw(sink: &mut ExecSink, output: &mut impl Read) -> Result<bool, String> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match output.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                if !sink.send(wire_session::exec_output(&buf[..n], b"")) {
                    return Ok(false);
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(format!("reading the command's output failed: {err}")),
        }
    }
}

/// Sends stdout's and stderr's frames as they come until the stream ends:
/// `Ok(false)` if the caller is gone.
fn pump_frames(sink: &mut ExecSink, output: &mut impl Read) -> Result<bool, String> {
    let sink = RefCell::new(sink);
    let mut out = ToCaller(&sink, false);
    let mut err = ToCaller(&sink, true);
    match demultiplex(output, &mut out, &mut err) {
        Ok(()) => Ok(true),
        Err(Demux::Write(_)) => Ok(false),
        Err(Demux::Read(err)) => Err(format!("reading the command's output failed: {err}")),
        Err(Demux::Frame(message)) => Err(format!("the engine's output stream: {message}")),
    }
}

/// stdout (`false`) or stderr (`true`) of the command, sent to the caller.
struct ToCaller<'a, 'b>(&'a RefCell<&'b mut ExecSink>, bool);

impl Write for ToCaller<'_, '_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut sink = self.0.borrow_mut();
        for chunk in bytes.chunks(CHUNK) {
            let msg = match self.1 {
                true => wire_session::exec_output(b"", chunk),
                false => wire_session::exec_output(chunk, b""),
            };
            if !sink.send(msg) {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the caller's stdin to the exec and applies its window sizes
/// (`size` first, once the engine has started it) until the caller's
/// stream ends; a stream that ends or fails while the exec's output still
/// flows (the caller went away) kills it and closes `connection`.
fn pump_input(
    mut stream: RequestStream<pb::AllocExecInput>,
    mut stdin: Option<UnixStream>,
    connection: Option<UnixStream>,
    size: Option<(u16, u16)>,
    exec: &Exec,
    ended: &AtomicBool,
) {
    let resize = |(rows, cols): (u16, u16)| {
        if let Err(err) = exec.engine.exec_resize(&exec.id, rows, cols) {
            log::debug!("Cannot resize exec {}: {err}", exec.id);
        }
    };
    if let Some(size) = size {
        resize(size);
    }
    exec.pin(ended);
    loop {
        match block_on(stream.next()) {
            Some(Ok(input)) => {
                if let (Some(size), true) = (input.resize.as_ref(), exec.tty) {
                    resize(wire_session::terminal_size(Some(size)));
                }
                if !input.stdin.is_empty() {
                    if let Some(to) = &mut stdin {
                        if to.write_all(&input.stdin).is_err() {
                            stdin = None;
                        }
                    }
                }
                // A pipe is closed; a TTY stays, as a terminal does.
                if input.stdin_closed && !exec.tty {
                    if let Some(to) = stdin.take() {
                        let _ = to.shutdown(Shutdown::Write);
                    }
                }
            }
            ended_with => {
                if !ended.load(Ordering::SeqCst) {
                    let why = ended_with.and_then(Result::err).map(|e| e.to_string());
                    log::debug!("An alloc exec caller went away: {why:?}");
                    exec.kill();
                    if let Some(connection) = &connection {
                        let _ = connection.shutdown(Shutdown::Both);
                    }
                }
                return;
            }
        }
    }
}
