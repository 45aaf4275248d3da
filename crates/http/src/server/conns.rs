//! The poll thread: the listener and every connection, each read and
//! written as its socket allows, within the server's [`Limits`].

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::message::{head_end, parse_head, Head, Refusal, Response};
use super::waker::Waker;
use super::{Done, Job, Limits, Listener, Server, System, Want, DRAIN_TIMEOUT, STOP_DRAIN};

/// The most bytes read from a socket at once.
const READ_CHUNK: usize = 4096;

/// The most connections taken from the listener in one turn, so that a
/// flood of them does not starve the connections open.
const ACCEPTS_PER_TURN: usize = 64;

/// How long accepting pauses when the process is out of descriptors or
/// memory (or accept(2) fails otherwise but for the client), rather than
/// spinning on a listener that stays readable.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// An accepted connection, whichever the socket.
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub(super) fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(true),
            Stream::Unix(s) => s.set_nonblocking(true),
        }
    }

    fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

/// Where a connection is in its one exchange.
enum State {
    /// Reading the request's head: the connection is idle.
    Head { buf: Vec<u8> },
    /// Reading the body the head announced.
    Body { head: Head, body: Vec<u8> },
    /// A worker has the request.
    Handling,
    /// Writing the answer, by `until`.
    Writing {
        out: Vec<u8>,
        sent: usize,
        until: Instant,
    },
    /// Answered, the write side shut: reading what is left until the
    /// client closes, or `until`.
    Draining { until: Instant, read: usize },
    /// To be dropped at the end of the turn.
    Closed,
}

struct Conn {
    id: u64,
    stream: Stream,
    /// Who connected, for a unix socket ([`super::Request::peer_pid`]).
    peer_pid: Option<u32>,
    accepted: Instant,
    state: State,
}

impl Conn {
    fn want(&self) -> Option<Want> {
        match self.state {
            State::Head { .. } | State::Body { .. } | State::Draining { .. } => Some(Want::Read),
            State::Writing { .. } => Some(Want::Write),
            State::Handling | State::Closed => None,
        }
    }

    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        match self.state {
            State::Head { .. } | State::Body { .. } => Some(self.accepted + limits.request_timeout),
            State::Writing { until, .. } | State::Draining { until, .. } => Some(until),
            State::Handling | State::Closed => None,
        }
    }

    fn is_idle(&self) -> bool {
        matches!(self.state, State::Head { .. })
    }

    fn answer(&mut self, out: Vec<u8>, limits: &Limits) {
        self.state = State::Writing {
            out,
            sent: 0,
            until: Instant::now() + limits.write_timeout,
        };
    }

    fn refuse(&mut self, refusal: Refusal, limits: &Limits) {
        log::debug!("HTTP connection {}: {refusal}", self.id);
        self.answer(refusal.response().into_bytes(false), limits);
    }

    /// Does what the socket is ready for.
    fn advance(&mut self, limits: &Limits, jobs: &Sender<Job>) {
        match self.state {
            State::Head { .. } => self.read_head(limits, jobs),
            State::Body { .. } => self.read_body(limits, jobs),
            State::Writing { .. } => self.write_answer(),
            State::Draining { .. } => self.drain(limits),
            State::Handling | State::Closed => {}
        }
    }

    fn read_head(&mut self, limits: &Limits, jobs: &Sender<Job>) {
        let mut chunk = [0u8; READ_CHUNK];
        let Some(n) = read(&mut self.stream, &mut chunk) else {
            return;
        };
        let State::Head { buf } = &mut self.state else {
            return;
        };
        if n == 0 {
            log::debug!("HTTP connection {}: closed before a request", self.id);
            self.state = State::Closed;
            return;
        }
        let from = buf.len();
        buf.extend_from_slice(&chunk[..n]);
        let parsed = match head_end(buf, from) {
            Some((end, _)) if end > limits.max_head => Err(Refusal::HeadTooLarge),
            Some((end, body_start)) => parse_head(&buf[..end], limits.max_body)
                .map(|head| Some((head, buf.split_off(body_start)))),
            None if buf.len() > limits.max_head => Err(Refusal::HeadTooLarge),
            None => Ok(None),
        };
        match parsed {
            Err(refusal) => self.refuse(refusal, limits),
            Ok(None) => {}
            Ok(Some((head, mut body))) => {
                // Bytes past the body (a pipelined request) are not
                // served: every answer closes the connection.
                body.truncate(head.body_len);
                if head.expects_continue && body.is_empty() {
                    // Best effort: a client that gets no 100 sends its
                    // body after a while anyway.
                    let _ = self.stream.write(b"HTTP/1.1 100 Continue\r\n\r\n");
                }
                self.state = State::Body { head, body };
                self.dispatch_if_complete(limits, jobs);
            }
        }
    }

    fn read_body(&mut self, limits: &Limits, jobs: &Sender<Job>) {
        let State::Body { head, body } = &mut self.state else {
            return;
        };
        let mut chunk = [0u8; READ_CHUNK];
        let want = (head.body_len - body.len()).min(READ_CHUNK);
        let Some(n) = read(&mut self.stream, &mut chunk[..want]) else {
            return;
        };
        if n == 0 {
            log::debug!("HTTP connection {}: closed before its body", self.id);
            self.state = State::Closed;
            return;
        }
        body.extend_from_slice(&chunk[..n]);
        self.dispatch_if_complete(limits, jobs);
    }

    fn write_answer(&mut self) {
        let State::Writing { out, sent, .. } = &mut self.state else {
            return;
        };
        match self.stream.write(&out[*sent..]) {
            Ok(n) => {
                *sent += n;
                if *sent == out.len() {
                    // The client reads the answer to the end of the
                    // stream; what it sent beyond the request is read and
                    // dropped before closing.
                    let _ = self.stream.shutdown_write();
                    self.state = State::Draining {
                        until: Instant::now() + DRAIN_TIMEOUT,
                        read: 0,
                    };
                }
            }
            Err(err) if is_transient(&err) => {}
            Err(err) => {
                log::debug!("HTTP connection {}: writing the answer: {err}", self.id);
                self.state = State::Closed;
            }
        }
    }

    fn drain(&mut self, limits: &Limits) {
        let mut chunk = [0u8; READ_CHUNK];
        let Some(n) = read(&mut self.stream, &mut chunk) else {
            return;
        };
        let State::Draining { read: total, .. } = &mut self.state else {
            return;
        };
        *total += n;
        if n == 0 || *total > limits.max_head + limits.max_body {
            self.state = State::Closed;
        }
    }

    /// Hands the request to a worker once its body is whole.
    fn dispatch_if_complete(&mut self, limits: &Limits, jobs: &Sender<Job>) {
        let State::Body { head, body } = &self.state else {
            return;
        };
        if body.len() < head.body_len {
            return;
        }
        let State::Body { head, body } = std::mem::replace(&mut self.state, State::Handling) else {
            unreachable!("the state was just matched")
        };
        let mut request = head.request;
        request.body = body;
        request.peer_pid = self.peer_pid;
        match jobs.try_send(Job {
            conn: self.id,
            request,
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                // Cannot happen: one job per open connection at most.
                self.answer(
                    Response::text(503, "too many requests queued\n").into_bytes(false),
                    limits,
                );
            }
            Err(TrySendError::Disconnected(_)) => self.state = State::Closed,
        }
    }
}

/// Reads what the socket has: `None` when nothing is there yet, 0 at the
/// end of the stream or when the connection failed.
fn read(stream: &mut Stream, buf: &mut [u8]) -> Option<usize> {
    match stream.read(buf) {
        Ok(n) => Some(n),
        Err(err) if is_transient(&err) => None,
        // A reset: as good as an end of stream.
        Err(_) => Some(0),
    }
}

fn is_transient(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// The poll thread's state: the listener, the open connections, and the
/// two queues to and from the workers.
pub(super) struct Poller {
    listener: Listener,
    limits: Limits,
    system: Box<dyn System>,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
    jobs: Sender<Job>,
    answers: Receiver<Done>,
    conns: Vec<Conn>,
    next_id: u64,
    accept_paused_until: Option<Instant>,
}

impl Poller {
    /// The poll thread of `server`, which shares its waker, its stop and
    /// its count of open connections.
    pub(super) fn new(
        server: &Server,
        listener: Listener,
        limits: Limits,
        system: Box<dyn System>,
        jobs: Sender<Job>,
        answers: Receiver<Done>,
    ) -> Poller {
        Poller {
            listener,
            limits,
            system,
            waker: server.waker.clone(),
            stop: server.stop.clone(),
            open: server.open.clone(),
            jobs,
            answers,
            conns: Vec::new(),
            next_id: 0,
            accept_paused_until: None,
        }
    }

    /// Serves until the server stops; then the answers of the handlers
    /// running are written ([`Poller::finish`]) and every connection is
    /// closed.
    pub(super) fn run(mut self) {
        while !self.stop.load(Ordering::SeqCst) {
            if let Err(err) = self.turn() {
                log::error!("HTTP poll: {err}");
                std::thread::sleep(ACCEPT_PAUSE);
            }
        }
        self.finish();
    }

    /// After a stop: no request is read or accepted any more, but a
    /// request a worker holds still gets its answer, and an answer being
    /// written is finished, all within [`STOP_DRAIN`]; a client told "the
    /// server is shutting down" hears it rather than a closed connection.
    fn finish(mut self) {
        let until = Instant::now() + STOP_DRAIN;
        loop {
            self.take_answers();
            self.conns.retain(|c| {
                matches!(
                    c.state,
                    State::Handling | State::Writing { .. } | State::Draining { .. }
                )
            });
            if self.conns.is_empty() || Instant::now() >= until {
                return;
            }
            let ready = match self.wait(false, Some(until)) {
                Ok(ready) => ready,
                Err(err) => {
                    log::error!("HTTP poll while stopping: {err}");
                    return;
                }
            };
            if ready.waker {
                let _ = self.waker.drain();
            }
            self.advance(&ready.conns);
        }
    }

    /// One wait and what it found ready.
    fn turn(&mut self) -> io::Result<()> {
        let now = Instant::now();
        if self.accept_paused_until.is_some_and(|until| now >= until) {
            self.accept_paused_until = None;
        }
        let listening = self.accept_paused_until.is_none();
        let ready = self.wait(listening, self.accept_paused_until)?;
        if ready.waker {
            self.waker.drain()?;
            self.take_answers();
        }
        if self.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.advance(&ready.conns);
        if ready.listener {
            self.accept();
        }
        self.conns.retain(|c| !matches!(c.state, State::Closed));
        self.open.store(self.conns.len(), Ordering::SeqCst);
        Ok(())
    }

    /// Waits on the waker, on the listener when `listening`, and on every
    /// connection that wants to read or write, until one is ready or the
    /// earliest of the connections' deadlines and `until` passes.
    fn wait(&self, listening: bool, until: Option<Instant>) -> io::Result<Ready> {
        let mut fds = vec![(self.waker.as_fd(), Want::Read)];
        if listening {
            fds.push((self.listener.as_fd(), Want::Read));
        }
        let mut polled = Vec::with_capacity(self.conns.len());
        let mut deadline = until;
        for (i, conn) in self.conns.iter().enumerate() {
            if let Some(want) = conn.want() {
                fds.push((conn.stream.as_fd(), want));
                polled.push(i);
            }
            deadline = earliest(deadline, conn.deadline(&self.limits));
        }
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let ready = self.system.poll(&fds, timeout)?;
        if ready.len() != fds.len() {
            return Err(io::Error::other(format!(
                "poll answered for {} descriptors of {}",
                ready.len(),
                fds.len()
            )));
        }
        let first = if listening { 2 } else { 1 };
        Ok(Ready {
            waker: ready[0],
            listener: listening && ready[1],
            conns: polled
                .into_iter()
                .enumerate()
                .filter(|&(k, _)| ready[first + k])
                .map(|(_, i)| i)
                .collect(),
        })
    }

    /// Moves each ready connection on, then closes those past their
    /// deadline.
    fn advance(&mut self, ready: &[usize]) {
        for &i in ready {
            self.conns[i].advance(&self.limits, &self.jobs);
        }
        let now = Instant::now();
        for conn in &mut self.conns {
            if conn.deadline(&self.limits).is_some_and(|d| d <= now) {
                log::debug!("HTTP connection {}: past its deadline", conn.id);
                conn.state = State::Closed;
            }
        }
    }

    /// The workers' answers, each to its connection's writing.
    fn take_answers(&mut self) {
        while let Ok(done) = self.answers.try_recv() {
            if let Some(conn) = self.conns.iter_mut().find(|c| c.id == done.conn) {
                conn.answer(done.bytes, &self.limits);
            }
        }
    }

    /// Takes the connections waiting, each within the bound on open ones.
    fn accept(&mut self) {
        for _ in 0..ACCEPTS_PER_TURN {
            let stream = match self.listener.accept() {
                Ok(stream) => stream,
                Err(err) if is_transient(&err) => return,
                // The client gave up before it was taken, and the like.
                Err(err) if is_the_clients(&err) => {
                    log::debug!("HTTP server: accept: {err}");
                    continue;
                }
                Err(err) => {
                    log::warn!("HTTP server: cannot accept: {err}");
                    self.accept_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                    return;
                }
            };
            self.next_id += 1;
            let peer_pid = match &stream {
                Stream::Unix(s) => self.system.peer_pid(s),
                Stream::Tcp(_) => None,
            };
            let mut conn = Conn {
                id: self.next_id,
                stream,
                peer_pid,
                accepted: Instant::now(),
                state: State::Head { buf: Vec::new() },
            };
            if !self.make_room() {
                log::debug!(
                    "HTTP connection {}: refused, max_connections ({}) busy",
                    conn.id,
                    self.limits.max_connections
                );
                // Best effort: a short answer fits a new socket's buffer.
                let _ = conn
                    .stream
                    .write(&Response::text(503, "max_connections reached\n").into_bytes(false));
                continue;
            }
            self.conns.push(conn);
        }
    }

    /// Whether there is room for one more connection, once the oldest idle
    /// one is closed if needed.
    fn make_room(&mut self) -> bool {
        let open = self
            .conns
            .iter()
            .filter(|c| !matches!(c.state, State::Closed))
            .count();
        if open < self.limits.max_connections {
            return true;
        }
        let oldest = self
            .conns
            .iter_mut()
            .filter(|c| c.is_idle())
            .min_by_key(|c| c.accepted);
        match oldest {
            Some(conn) => {
                log::debug!("HTTP connection {}: closed to make room", conn.id);
                conn.state = State::Closed;
                true
            }
            None => false,
        }
    }
}

/// Errors of accept(2) that are one connection's, or its network's: the
/// next connection may be taken at once. Any other, above all the process
/// out of descriptors or memory (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`,
/// which the standard library names no kind of but the last), pauses
/// accepting for [`ACCEPT_PAUSE`] rather than spin on a listener that
/// stays readable.
fn is_the_clients(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::TimedOut
    )
}

/// What one [`Poller::wait`] found ready: the indices in `conns` are of
/// the poller's connections.
struct Ready {
    waker: bool,
    listener: bool,
    conns: Vec<usize>,
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
