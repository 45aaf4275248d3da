//! A bounded HTTP/1.1 server: it answers many clients at once, and no
//! client, idle, trickling or flooding, holds anything another one needs.
//!
//! # Design
//!
//! One thread (`<name>`) owns the listener and every connection, all
//! non-blocking, and waits in poll(2) on them, on a waker and on the
//! earliest deadline. It reads each request's head and body as they
//! arrive, into the connection's own buffer, and hands a complete request
//! to a pool of worker threads (`<name>-w<n>`), which run the handler
//! (`Fn(&Request) -> Response`, shared by all) and hand the answer's bytes
//! back; the poll thread writes them as the client takes them. So a slow
//! or silent client holds one connection slot and its buffer, never a
//! thread, and a worker is held only by the handler itself. Threads per
//! connection would bound the same things only with as many threads as
//! connections; this way there are `1 + workers` whatever the clients do.
//!
//! The bounds, each a field of [`Limits`] with its default a named
//! constant:
//! - at most [`MAX_CONNECTIONS`] open connections; one more closes the
//!   oldest idle one (connected but without a complete request head), or
//!   is refused with 503 when none is idle;
//! - the request's head and body must arrive within [`REQUEST_TIMEOUT`]
//!   of the connection's accept, however the bytes trickle in;
//! - a head of at most [`MAX_HEAD`] bytes (else 431) and a body of at most
//!   [`MAX_BODY`] bytes, from its `Content-Length` (else 413); a body sent
//!   chunked is refused (501), a head that is not HTTP/1.x too (400, 505);
//! - the answer must be taken within [`WRITE_TIMEOUT`];
//! - [`WORKERS`] threads run handlers. A handler that waits holds its
//!   worker meanwhile: a server whose handlers wait (for a resource the
//!   request claims, say) sets more, so that quick calls still find one.
//!
//! A connection thus holds about `max_head` plus `max_body` bytes (and
//! its answer) and lives at most `request_timeout` plus the handler's time
//! plus `write_timeout`, plus [`DRAIN_TIMEOUT`] to read what the client
//! sent past its request before closing. Every answer closes its
//! connection (`Connection: close`); a `HEAD` is answered without the
//! body. A handler that panics is answered 500 and the server carries on.
//!
//! A server binds its address itself ([`Server::start`]), or serves a unix
//! socket its caller bound ([`Server::serve_unix`]: one made private
//! before it is reachable, say).
//!
//! The crate makes no system call of its own: the two the standard
//! library lacks, poll(2) and the peer's process of a unix socket
//! (`SO_PEERCRED`), come from the program, which implements [`System`]
//! with its own wrappers of them. The waker is a socket pair.
//!
//! [`Server::stop`] wakes the poll thread, which reads and accepts
//! nothing more; the workers finish the handler they run and skip the
//! requests queued, and the poll thread writes those handlers' answers
//! for at most [`STOP_DRAIN`], then closes every connection; every thread
//! is joined.

mod conns;
mod message;
mod waker;

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use waker::Waker;

pub use message::{Request, Response};

/// The most connections open at once.
pub const MAX_CONNECTIONS: usize = 128;

/// How long a client has, from its connection's accept, to send the whole
/// request, head and body.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a client has to take the whole answer, from when it is ready.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest request head (request line and header fields).
pub const MAX_HEAD: usize = 8 * 1024;

/// The longest request body.
pub const MAX_BODY: usize = 64 * 1024;

/// The threads that run the handler.
pub const WORKERS: usize = 4;

/// How long, and for how many bytes, what a client sends past its request
/// is read after the answer, so that closing does not reset the connection
/// before the client has read the answer.
pub const DRAIN_TIMEOUT: Duration = Duration::from_millis(100);

/// How long a stopping server still writes the answers of the handlers
/// running when it was stopped, before it closes their connections.
pub const STOP_DRAIN: Duration = Duration::from_secs(1);

/// The bounds of one server; [`Limits::default`] holds the constants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub request_timeout: Duration,
    pub write_timeout: Duration,
    pub max_head: usize,
    pub max_body: usize,
    pub workers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: MAX_CONNECTIONS,
            request_timeout: REQUEST_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            max_head: MAX_HEAD,
            max_body: MAX_BODY,
            workers: WORKERS,
        }
    }
}

/// What a descriptor is waited on for, in [`System::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Read,
    Write,
}

/// The system calls a server makes that the standard library does not
/// offer, supplied by the program that runs it, which owns its system
/// calls: the poll thread calls them, and no other.
pub trait System: Send + 'static {
    /// Blocks until at least one of `fds` is ready for what it is watched
    /// for, or `timeout` passes (`None`: no limit), and tells which are, in
    /// the order of `fds`. An error or a hang-up must count as ready for
    /// either, so that the read or write reports it; a signal interrupting
    /// the wait may return early with none ready, as a timeout does.
    fn poll(
        &self,
        fds: &[(BorrowedFd<'_>, Want)],
        timeout: Option<Duration>,
    ) -> io::Result<Vec<bool>>;

    /// The process at the other end of a unix socket's connection
    /// ([`Request::peer_pid`]), when the system can name it.
    fn peer_pid(&self, stream: &UnixStream) -> Option<u32>;
}

/// Where a server listens: `host:port`, or a unix socket's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

impl Listen {
    /// An absolute path is a unix socket; anything else must be
    /// `ip:port` (an IPv6 address in brackets).
    pub fn parse(text: &str) -> Result<Listen, String> {
        if text.starts_with('/') {
            return Ok(Listen::Unix(PathBuf::from(text)));
        }
        text.parse::<SocketAddr>().map(Listen::Tcp).map_err(|_| {
            format!(
                "{text:?} is neither ip:port (\"127.0.0.1:9108\") nor an absolute unix socket path"
            )
        })
    }

    /// Binds the address; a stale unix socket at the path (one nobody
    /// answers on) is replaced.
    fn bind(&self) -> io::Result<(Listener, Listen)> {
        match self {
            Listen::Tcp(addr) => {
                let listener = TcpListener::bind(addr)?;
                let bound = Listen::Tcp(listener.local_addr()?);
                Ok((Listener::Tcp(listener), bound))
            }
            Listen::Unix(path) => {
                if UnixStream::connect(path).is_err() {
                    match std::fs::remove_file(path) {
                        Ok(()) => {}
                        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                        Err(err) => return Err(err),
                    }
                }
                Ok((Listener::Unix(UnixListener::bind(path)?), self.clone()))
            }
        }
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l) => l.set_nonblocking(true),
        }
    }

    /// The next connection, non-blocking.
    fn accept(&self) -> io::Result<conns::Stream> {
        let stream = match self {
            Listener::Tcp(l) => conns::Stream::Tcp(l.accept()?.0),
            Listener::Unix(l) => conns::Stream::Unix(l.accept()?.0),
        };
        stream.set_nonblocking()?;
        Ok(stream)
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Listener::Tcp(l) => l.as_fd(),
            Listener::Unix(l) => l.as_fd(),
        }
    }
}

/// What answers each request; shared by the workers.
pub type Handler = dyn Fn(&Request) -> Response + Send + Sync;

/// A complete request on its way to a worker.
struct Job {
    conn: u64,
    request: Request,
}

/// A worker's answer on its way back to the connection.
struct Done {
    conn: u64,
    bytes: Vec<u8>,
}

/// What becomes of a unix socket's file when its server stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketFile {
    /// Removed: the server's caller bound it.
    Removed,
    /// Left in place: a service manager bound it and handed it over.
    Kept,
}

/// What a server serves: the listener, where it is bound, and what
/// becomes of a unix socket's file at the end.
struct Socket {
    listener: Listener,
    bound: Listen,
    file: SocketFile,
}

/// A running server; [`Server::stop`] (or dropping it) ends and joins its
/// threads.
pub struct Server {
    name: String,
    bound: Listen,
    /// Whether stopping removes the unix socket's file: not when a
    /// service manager owns it ([`SocketFile::Kept`]).
    remove_file: bool,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    open: Arc<AtomicUsize>,
    poller: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Server {
    /// Binds `listen` and serves it with `handler` within `limits`, its
    /// poll thread waiting through `system`; the threads are named after
    /// `name`.
    pub fn start(
        name: &str,
        listen: &Listen,
        limits: Limits,
        system: impl System,
        handler: impl Fn(&Request) -> Response + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let (listener, bound) = listen.bind()?;
        let socket = Socket {
            listener,
            bound,
            file: SocketFile::Removed,
        };
        Server::serve(name, socket, limits, Box::new(system), handler)
    }

    /// Serves `listener`, a unix socket the caller bound at `path` itself
    /// (under the name and with the permissions it chose), as
    /// [`Server::start`] serves what it binds; `path` is removed when the
    /// server stops if `file` says so.
    pub fn serve_unix(
        name: &str,
        listener: UnixListener,
        path: PathBuf,
        file: SocketFile,
        limits: Limits,
        system: impl System,
        handler: impl Fn(&Request) -> Response + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let socket = Socket {
            listener: Listener::Unix(listener),
            bound: Listen::Unix(path),
            file,
        };
        Server::serve(name, socket, limits, Box::new(system), handler)
    }

    fn serve(
        name: &str,
        socket: Socket,
        limits: Limits,
        system: Box<dyn System>,
        handler: impl Fn(&Request) -> Response + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let Socket {
            listener,
            bound,
            file,
        } = socket;
        listener.set_nonblocking()?;
        let mut server = Server {
            name: name.to_string(),
            bound,
            remove_file: file == SocketFile::Removed,
            stop: Arc::new(AtomicBool::new(false)),
            waker: Arc::new(Waker::new()?),
            open: Arc::new(AtomicUsize::new(0)),
            poller: None,
            workers: Vec::new(),
        };
        // Every request in flight belongs to an open connection, so the
        // queue never holds more than `max_connections`.
        let (jobs, queued) = crossbeam_channel::bounded(limits.max_connections.max(1));
        let (done, answers) = crossbeam_channel::unbounded();
        let handler: Arc<Handler> = Arc::new(handler);
        // On an error, dropping `server` (and `jobs`) ends and joins the
        // threads started so far.
        for n in 0..limits.workers.max(1) {
            let worker = Worker {
                queued: queued.clone(),
                done: done.clone(),
                waker: server.waker.clone(),
                stop: server.stop.clone(),
                handler: handler.clone(),
            };
            let thread = thread::Builder::new()
                .name(format!("{name}-w{n}"))
                .spawn(move || worker.run())?;
            server.workers.push(thread);
        }
        let poller = conns::Poller::new(&server, listener, limits, system, jobs, answers);
        server.poller = Some(
            thread::Builder::new()
                .name(name.to_string())
                .spawn(move || poller.run())?,
        );
        Ok(server)
    }

    /// Where it listens (a TCP port 0 resolved to the port bound).
    pub fn bound(&self) -> &Listen {
        &self.bound
    }

    /// The connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Closes every connection, ends the threads and joins them: at once
    /// but for the handlers running.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Err(err) = self.waker.wake() {
            log::error!("Cannot wake the {} thread: {err}", self.name);
        }
        // The poller ends first and drops the queue's sender, which ends
        // the workers waiting on it.
        if let Some(poller) = self.poller.take() {
            if poller.join().is_err() {
                log::error!("The {} thread panicked", self.name);
            }
        }
        for worker in self.workers.drain(..) {
            if worker.join().is_err() {
                log::error!("A {} worker panicked", self.name);
            }
        }
        if let (Listen::Unix(path), true) = (&self.bound, self.remove_file) {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.poller.is_some() || !self.workers.is_empty() {
            self.halt();
        }
    }
}

/// A thread running the handler on the requests queued.
struct Worker {
    queued: Receiver<Job>,
    done: Sender<Done>,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
    handler: Arc<Handler>,
}

impl Worker {
    fn run(self) {
        for job in self.queued.iter() {
            if self.stop.load(Ordering::SeqCst) {
                continue;
            }
            let head_only = job.request.method == "HEAD";
            let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (self.handler)(&job.request)
            }));
            let response = handled.unwrap_or_else(|_| {
                log::error!(
                    "The handler of {} {} panicked",
                    job.request.method,
                    job.request.path()
                );
                Response::text(500, "internal error\n")
            });
            let done = Done {
                conn: job.conn,
                bytes: response.into_bytes(head_only),
            };
            // The poller is gone only when the server stops.
            if self.done.send(done).is_err() {
                return;
            }
            if let Err(err) = self.waker.wake() {
                log::error!("Cannot wake the HTTP poll thread: {err}");
            }
        }
    }
}

#[cfg(test)]
mod tests;
