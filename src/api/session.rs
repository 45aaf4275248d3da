//! The control API's sessions: each `alloc exec` and each `alloc fs` call
//! runs on a thread of its own ("api-session"), at most [`MAX_SESSIONS`]
//! at once. The main loop only looks up what the call names (the running
//! task, the alloc's dir: [`Request::Session`]); the bytes never pass
//! through it.
//!
//! An exec session's thread starts the command
//! ([`crate::task::exec::enter`]), hands the call's input stream to a
//! second thread that writes stdin and applies window sizes, and itself
//! polls the command's stdout and stderr (or its pty) and sends them, then
//! the exit code. A caller that goes away has the command's process group
//! killed. A docker task's command is an exec of its container instead
//! (`session_docker.rs`), with the same limits; both send their output
//! through the same sink, in messages of the same size
//! (`session_output.rs`).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::thread;

use crossbeam_channel::Sender;
use futures_util::{FutureExt as _, StreamExt as _};
use grpcio::{DuplexSink, RequestStream, RpcContext, UnarySink};

use super::outbound::Outbound;
use super::session_output::{ExecSink, CHUNK, EXIT_CHECK};
use super::{wire, wire_session, Call, CallError, ErrorKind, ReplyTo, Request, Response};
use crate::grpc::block_on;
use crate::proto::agent as pb;
use crate::sys::poll::{poll_many, Want};
use crate::task::exec::enter;
use crate::task::exec_target::{SessionLookup, SessionTarget};

/// The most `alloc exec` and `alloc fs` calls served at once; one more is
/// refused (`Unavailable`) with an error naming this bound.
pub const MAX_SESSIONS: usize = 8;

/// The sessions of one server: how many run, and where lookups go.
#[derive(Clone)]
pub(super) struct Sessions {
    live: Arc<AtomicUsize>,
    calls: Sender<Call>,
}

/// One admitted session; dropping it frees its place.
pub(super) struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Sessions {
    pub(super) fn new(calls: Sender<Call>) -> Sessions {
        Sessions {
            live: Arc::new(AtomicUsize::new(0)),
            calls,
        }
    }

    fn admit(&self) -> Result<Admitted, CallError> {
        let admitted = self
            .live
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_SESSIONS).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            Ok(Admitted(self.live.clone()))
        } else {
            Err(CallError::new(
                ErrorKind::Unavailable,
                format!(
                    "the agent already serves MAX_SESSIONS ({MAX_SESSIONS}) alloc exec and alloc fs calls"
                ),
            ))
        }
    }

    /// Asks the main loop and waits for its answer.
    pub(super) fn ask(&self, request: Request) -> Result<Response, CallError> {
        let (answered, answer) = crossbeam_channel::bounded(1);
        let reply = ReplyTo::sink(move |result| {
            let _ = answered.send(result);
        });
        let gone = || CallError::new(ErrorKind::Unavailable, "the agent is shutting down");
        self.calls
            .send(Call { request, reply })
            .map_err(|_| gone())?;
        answer.recv().unwrap_or_else(|_| Err(gone()))
    }

    /// Runs `work` with `call` (what it answers on) on a session thread
    /// of its own. A session that cannot start (every place taken, or no
    /// thread) hands `call` back with why, for the caller's refusal.
    pub(super) fn start<C: Send + 'static>(
        &self,
        call: C,
        work: impl FnOnce(Admitted, C) + Send + 'static,
    ) -> Result<(), (C, CallError)> {
        let admitted = match self.admit() {
            Ok(admitted) => admitted,
            Err(err) => return Err((call, err)),
        };
        // A thread that cannot start drops its closure: the call waits
        // outside it, to be taken back.
        let call = Arc::new(Mutex::new(Some(call)));
        let held = call.clone();
        let spawned = thread::Builder::new()
            .name("api-session".into())
            .spawn(move || {
                if let Some(call) = held.lock().ok().and_then(|mut c| c.take()) {
                    work(admitted, call);
                }
            });
        match spawned {
            Ok(_) => Ok(()),
            Err(err) => {
                let err = CallError::new(
                    ErrorKind::Unavailable,
                    format!("cannot start a session thread: {err}"),
                );
                match call.lock().ok().and_then(|mut c| c.take()) {
                    Some(call) => Err((call, err)),
                    // Taken by a thread that did start after all.
                    None => Ok(()),
                }
            }
        }
    }

    /// A unary call served on a session thread: `work`'s answer, or its
    /// error, goes to `sink`. The place is free before the answer is
    /// sent, so that the caller's next call (`alloc fs -f` follows its
    /// first read) is never refused for this one; a session that cannot
    /// start is refused on `sink`.
    pub(super) fn unary<T: 'static>(
        &self,
        ctx: &RpcContext,
        sink: UnarySink<T>,
        what: &'static str,
        work: impl FnOnce(&Sessions) -> Result<T, CallError> + Send + 'static,
    ) where
        UnarySink<T>: Send,
    {
        let sessions = self.clone();
        let started = self.start(sink, move |admitted, sink| {
            let answer = work(&sessions);
            // Freed before the answer starts out: `success` and `fail`
            // hand it to gRPC at once, and a caller that has it may call
            // again before this thread runs on.
            drop(admitted);
            let sending = match answer {
                Ok(answer) => sink.success(answer),
                Err(err) => sink.fail(wire::status(&err)),
            };
            if let Err(err) = block_on(sending) {
                log::debug!("An {what} answer was not delivered: {err}");
            }
        });
        if let Err((sink, err)) = started {
            ctx.spawn(sink.fail(wire::status(&err)).map(drop));
        }
    }

    pub(super) fn fs(
        &self,
        ctx: &RpcContext,
        req: pb::AllocFsRequest,
        sink: UnarySink<pb::AllocFsResponse>,
    ) {
        crate::trace::point("api-call", "AllocFs");
        self.unary(ctx, sink, "alloc fs", move |sessions| {
            let lookup = SessionLookup::Fs {
                alloc_id: req.alloc_id.clone(),
            };
            match sessions.ask(Request::Session(lookup))? {
                Response::Session(SessionTarget::Fs(root)) => {
                    crate::task::alloc_fs::read(&root, &wire_session::fs_request(&req))
                        .map(wire_session::fs_answer)
                }
                _ => Err(other_response()),
            }
        });
    }

    pub(super) fn exec(
        &self,
        ctx: &RpcContext,
        stream: RequestStream<pb::AllocExecInput>,
        sink: DuplexSink<pb::AllocExecOutput>,
    ) {
        crate::trace::point("api-call", "AllocExec");
        let sessions = self.clone();
        let started = self.start((stream, sink), move |_admitted, (stream, sink)| {
            sessions.exec_session(stream, sink);
        });
        if let Err(((stream, sink), err)) = started {
            // gRPC cancels a call whose request stream is dropped
            // unfinished: the stream lives until the refusal is sent, or
            // the caller would hear CANCELLED rather than why.
            ctx.spawn(sink.fail(wire::status(&err)).map(move |_| drop(stream)));
        }
    }

    fn exec_session(
        &self,
        mut stream: RequestStream<pb::AllocExecInput>,
        sink: DuplexSink<pb::AllocExecOutput>,
    ) {
        let mut sink = Outbound::new(sink);
        let (start, stdin_closed) = match block_on(stream.next()) {
            Some(Ok(input)) if input.start.is_some() => {
                (input.start.clone().unwrap_or_default(), input.stdin_closed)
            }
            Some(Err(err)) => {
                log::debug!("An alloc exec call ended before its start: {err}");
                return;
            }
            _ => {
                let err = CallError::new(
                    ErrorKind::InvalidArgument,
                    "the first input of alloc exec must carry its start",
                );
                sink.fail(wire::status(&err));
                return;
            }
        };
        if start.command.is_empty() {
            let err = CallError::new(ErrorKind::InvalidArgument, "alloc exec needs a command");
            sink.fail(wire::status(&err));
            return;
        }
        let lookup = SessionLookup::Exec(wire_session::exec_lookup(&start));
        let target = match self.ask(Request::Session(lookup)) {
            Ok(Response::Session(SessionTarget::Exec(target))) => target,
            Ok(Response::Session(SessionTarget::Docker(target))) => {
                super::session_docker::run(&target, &start, stdin_closed, stream, sink);
                return;
            }
            Ok(_) => {
                sink.fail(wire::status(&other_response()));
                return;
            }
            Err(err) => {
                sink.fail(wire::status(&err));
                return;
            }
        };
        let tty = start
            .tty
            .then(|| wire_session::terminal_size(start.size.as_ref()));
        let started = match enter::start(&target, &start.command, tty) {
            Ok(started) => started,
            Err(err) => {
                let (code, message) = enter::start_failure(&start.command[0], &err);
                sink.send(wire_session::exec_output(b"", message.as_bytes()));
                sink.send(wire_session::exec_exited(code));
                sink.close();
                return;
            }
        };
        let enter::Started {
            mut child,
            stdin,
            stdout,
            stderr,
            pty,
        } = started;
        let group = child.id();
        // Without -i (or a caller's stdin already empty), a pipe's end
        // closes at once; a TTY stays open, as a terminal does.
        let stdin = (!stdin_closed || pty.is_some()).then_some(stdin);
        let finished = Arc::new(Reaped::default());
        let input = {
            let finished = finished.clone();
            thread::Builder::new()
                .name("api-session-in".into())
                .spawn(move || pump_input(stream, stdin, pty, group, &finished))
        };
        if input.is_err() {
            let _ = crate::sys::process::kill_group(group, libc::SIGKILL);
        }
        let sent = pump_output(&mut sink, &mut child, stdout, stderr, &finished);
        if !sent {
            // The caller is gone: so is its command.
            finished.kill_unless_reaped(group);
        }
        let code = match finished.wait(&mut child) {
            Ok(status) => enter::exit_code(status),
            Err(_) => 1,
        };
        if sent {
            sink.send(wire_session::exec_exited(code));
            sink.close();
        }
        // The input thread ends with the call's stream, which the caller
        // closes once it has the exit code; it is not waited for.
        drop(input);
    }
}

/// Whether a session's command is reaped: its pid is signalled only
/// before, under the same lock as the reaping, so never a later process's.
#[derive(Default)]
struct Reaped(Mutex<bool>);

impl Reaped {
    fn try_reap(&self, child: &mut std::process::Child) -> bool {
        let mut reaped = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *reaped = *reaped || matches!(child.try_wait(), Ok(Some(_)));
        *reaped
    }

    /// Waits for the command to end, looking every [`EXIT_CHECK`] with
    /// the lock let go between looks, so that a caller gone meanwhile
    /// still kills it.
    fn wait(&self, child: &mut std::process::Child) -> io::Result<std::process::ExitStatus> {
        loop {
            {
                let mut reaped = self.0.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(status) = child.try_wait()? {
                    *reaped = true;
                    return Ok(status);
                }
            }
            thread::sleep(EXIT_CHECK);
        }
    }

    /// Kills the process group `group` unless its leader is reaped;
    /// whether it did.
    fn kill_unless_reaped(&self, group: u32) -> bool {
        let reaped = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !*reaped {
            let _ = crate::sys::process::kill_group(group, libc::SIGKILL);
        }
        !*reaped
    }
}

pub(super) fn other_response() -> CallError {
    CallError::new(
        ErrorKind::Internal,
        "the agent answered a session's lookup with another response",
    )
}

/// Writes the caller's stdin to the command and applies its window sizes
/// until the caller's stream ends; a stream that ends or fails while the
/// command runs (the caller went away) kills the command's process group.
fn pump_input(
    mut stream: RequestStream<pb::AllocExecInput>,
    mut stdin: Option<File>,
    pty: Option<File>,
    group: u32,
    finished: &Reaped,
) {
    loop {
        match block_on(stream.next()) {
            Some(Ok(input)) => {
                if let (Some(size), Some(pty)) = (input.resize.as_ref(), &pty) {
                    let (rows, cols) = wire_session::terminal_size(Some(size));
                    let _ = crate::sys::tty::set_window_size(pty.as_fd(), rows, cols);
                }
                if !input.stdin.is_empty() {
                    if let Some(file) = &mut stdin {
                        if write_all(file, &input.stdin).is_err() {
                            stdin = None;
                        }
                    }
                }
                // A pipe is closed; a TTY stays, as a terminal does.
                if input.stdin_closed && pty.is_none() {
                    stdin = None;
                }
            }
            // A call cancelled may end as an error or as the stream's end:
            // either way, while the command runs, the caller is gone (a
            // caller keeps its side open until it has the exit code).
            ended => {
                let why = ended.and_then(Result::err).map(|e| e.to_string());
                if finished.kill_unless_reaped(group) {
                    log::debug!("An alloc exec caller went away: {why:?}");
                }
                return;
            }
        }
    }
}

/// Writes all of `bytes` to `file`, which may be non-blocking (a pty's
/// master shares its flags with the output's end).
fn write_all(file: &mut File, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match file.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                poll_many(&[(file.as_fd(), Want::Write)], None)?;
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// Sends the command's output until it is closed, or until the command
/// ended and nothing more is there to read; whether the caller took it all.
fn pump_output(
    sink: &mut ExecSink,
    child: &mut std::process::Child,
    stdout: File,
    stderr: Option<File>,
    finished: &Reaped,
) -> bool {
    let mut outputs: Vec<(File, bool)> = vec![(stdout, false)];
    if let Some(stderr) = stderr {
        outputs.push((stderr, true));
    }
    let mut buf = vec![0u8; CHUNK];
    let mut exited = false;
    while !outputs.is_empty() {
        let ready = {
            let fds: Vec<_> = outputs
                .iter()
                .map(|(f, _)| (f.as_fd(), Want::Read))
                .collect();
            match poll_many(&fds, Some(EXIT_CHECK)) {
                Ok(ready) => ready,
                Err(_) => vec![true; outputs.len()],
            }
        };
        let mut closed = Vec::new();
        for (i, (file, is_stderr)) in outputs.iter_mut().enumerate() {
            if !ready[i] && !exited {
                continue;
            }
            loop {
                match file.read(&mut buf) {
                    Ok(0) => {
                        closed.push(i);
                        break;
                    }
                    Ok(n) => {
                        let msg = if *is_stderr {
                            wire_session::exec_output(b"", &buf[..n])
                        } else {
                            wire_session::exec_output(&buf[..n], b"")
                        };
                        if !sink.send(msg) {
                            return false;
                        }
                        if !exited {
                            break;
                        }
                    }
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                        if exited {
                            closed.push(i);
                        }
                        break;
                    }
                    // A pty's master reads EIO once no one holds its slave.
                    Err(_) => {
                        closed.push(i);
                        break;
                    }
                }
            }
        }
        for i in closed.into_iter().rev() {
            outputs.remove(i);
        }
        if exited {
            break;
        }
        // Once the command ends, one more pass drains what it left. Once
        // it is reaped, its pid is no longer ours to signal, and the call's
        // end is no caller gone.
        exited = finished.try_reap(child);
    }
    true
}
