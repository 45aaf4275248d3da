//! The scrape endpoint: `GET /metrics` over HTTP/1.x on a TCP address or a
//! unix socket, answered by one thread (`metrics-http`) that the agent
//! owns and joins at its end.
//!
//! One request at a time, each bounded: the request's head must arrive
//! whole within [`REQUEST_TIMEOUT`] and in at most [`MAX_REQUEST`] bytes,
//! and the answer is written within the same time, else the connection is
//! closed. So a client that connects and sends nothing, or trickles, delays
//! the next scraper by [`REQUEST_TIMEOUT`] at most, and never the main
//! loop, which neither touches the listener nor waits for the thread: the
//! answer is rendered from the metrics registry alone. Every answer closes
//! its connection (`Connection: close`).
//!
//! `GET /metrics` (or `HEAD`) answers 200 in the text format, version
//! 0.0.4; any other path 404, any other method 405, a request that is not
//! HTTP or too long 400.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a client has to send its request's head, and again to take
/// the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest request head read; a longer one is answered 400.
pub const MAX_REQUEST: usize = 8 * 1024;

/// The content type of the text format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Where the endpoint listens: `host:port`, or a unix socket's path.
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
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// The running endpoint; [`Server::stop`] ends and joins its thread.
pub struct Server {
    bound: Listen,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `listen` (a stale unix socket at its path is replaced) and
    /// starts answering; `render` writes the metrics of each scrape.
    pub fn start(
        listen: &Listen,
        render: impl Fn(&mut dyn Write) -> io::Result<()> + Send + 'static,
    ) -> io::Result<Server> {
        let (listener, bound) = match listen {
            Listen::Tcp(addr) => {
                let listener = TcpListener::bind(addr)?;
                let bound = Listen::Tcp(listener.local_addr()?);
                (Listener::Tcp(listener), bound)
            }
            Listen::Unix(path) => {
                if UnixStream::connect(path).is_err() {
                    match std::fs::remove_file(path) {
                        Ok(()) => {}
                        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                        Err(err) => return Err(err),
                    }
                }
                (Listener::Unix(UnixListener::bind(path)?), listen.clone())
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || serve(listener, &stopping, &render))?;
        Ok(Server {
            bound,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens (a TCP port 0 resolved to the port bound).
    pub fn bound(&self) -> &Listen {
        &self.bound
    }

    /// Stops accepting and joins the thread, after the request in hand
    /// (at most twice [`REQUEST_TIMEOUT`]).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept with a connection of our own.
        let woken = match &self.bound {
            Listen::Tcp(addr) => TcpStream::connect_timeout(addr, REQUEST_TIMEOUT).is_ok(),
            Listen::Unix(path) => UnixStream::connect(path).is_ok(),
        };
        if !woken {
            log::warn!("Cannot wake the metrics endpoint at {}", self.bound);
        }
        if thread.join().is_err() {
            log::error!("The metrics-http thread panicked");
        }
        if let Listen::Unix(path) = &self.bound {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.halt();
    }
}

/// What writes a scrape's body.
type Render = dyn Fn(&mut dyn Write) -> io::Result<()>;

/// A connection written within one deadline for the whole answer, however
/// many writes it takes.
struct Timed<'a> {
    conn: &'a mut dyn Conn,
    until: Instant,
}

impl Write for Timed<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the answer was not taken in time",
            ));
        }
        self.conn.timeouts(Some(left))?;
        self.conn.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.conn.flush()
    }
}

/// A connection, whichever the socket.
trait Conn: Read + Write {
    fn timeouts(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn shutdown_write(&self) -> io::Result<()>;
}

impl Conn for TcpStream {
    fn timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)?;
        self.set_write_timeout(timeout)
    }

    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

impl Conn for UnixStream {
    fn timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)?;
        self.set_write_timeout(timeout)
    }

    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

fn serve(listener: Listener, stop: &AtomicBool, render: &Render) {
    loop {
        let conn: io::Result<Box<dyn Conn>> = match &listener {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Box::new(s) as Box<dyn Conn>),
            Listener::Unix(l) => l.accept().map(|(s, _)| Box::new(s) as Box<dyn Conn>),
        };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match conn {
            Ok(mut conn) => {
                if let Err(err) = answer(conn.as_mut(), render) {
                    log::debug!("Metrics scrape: {err}");
                }
            }
            Err(err) => {
                log::warn!("Metrics endpoint: cannot accept: {err}");
                // EMFILE and the like: do not spin.
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// What a request's head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    Metrics { head_only: bool },
    NotFound,
    BadMethod,
    Bad,
}

/// Reads one request's head, bounded in time and size, and answers it.
fn answer(conn: &mut dyn Conn, render: &Render) -> io::Result<()> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let asked = loop {
        if let Some(end) = find(&head, b"\r\n\r\n").or_else(|| find(&head, b"\n\n")) {
            break parse(&head[..end]);
        }
        if head.len() > MAX_REQUEST {
            break Asked::Bad;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "request too slow"));
        }
        conn.timeouts(Some(left))?;
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no request"));
        }
        head.extend_from_slice(&buf[..n]);
    };
    conn.timeouts(Some(REQUEST_TIMEOUT))?;
    let reply = match asked {
        Asked::Metrics { head_only } => {
            // The body goes out as it is rendered, ended by the close:
            // no length up front.
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nConnection: close\r\n\r\n"
            );
            let timed = Timed {
                conn: &mut *conn,
                until: Instant::now() + REQUEST_TIMEOUT,
            };
            let mut out = io::BufWriter::with_capacity(16 << 10, timed);
            out.write_all(head.as_bytes())?;
            if !head_only {
                render(&mut out)?;
            }
            out.flush()?;
            String::new()
        }
        Asked::NotFound => response(
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: the metrics are at /metrics\n",
            false,
            "",
        ),
        Asked::BadMethod => response(
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "method not allowed\n",
            false,
            "Allow: GET, HEAD\r\n",
        ),
        Asked::Bad => response(
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "bad request\n",
            false,
            "",
        ),
    };
    conn.write_all(reply.as_bytes())?;
    conn.flush()?;
    // Closing with unread bytes would reset the connection, and the client
    // could lose the answer: end our side, then read what is left of a
    // request that was too long, briefly and bounded.
    conn.shutdown_write()?;
    conn.timeouts(Some(DRAIN_TIMEOUT))?;
    let mut drained = 0;
    while drained < MAX_REQUEST * 8 {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    Ok(())
}

/// How long the rest of a refused request is read before closing.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(100);

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse(head: &[u8]) -> Asked {
    let Ok(head) = std::str::from_utf8(head) else {
        return Asked::Bad;
    };
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Asked::Bad;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Asked::Bad;
    }
    let path = target.split('?').next().unwrap_or(target);
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ if method.bytes().all(|b| b.is_ascii_uppercase()) && !method.is_empty() => {
            return Asked::BadMethod
        }
        _ => return Asked::Bad,
    };
    if path == "/metrics" {
        Asked::Metrics { head_only }
    } else {
        Asked::NotFound
    }
}

fn response(status: &str, content_type: &str, body: &str, head_only: bool, extra: &str) -> String {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        out.push_str(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: &SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn server() -> (Server, SocketAddr) {
        let server = Server::start(&Listen::Tcp("127.0.0.1:0".parse().unwrap()), |out| {
            out.write_all(b"# TYPE x counter\nx 1\n")
        })
        .unwrap();
        let Listen::Tcp(addr) = *server.bound() else {
            unreachable!()
        };
        (server, addr)
    }

    #[test]
    fn requests_are_parsed_by_method_and_path() {
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x"),
            Asked::Metrics { head_only: false }
        );
        assert_eq!(
            parse(b"GET /metrics?x=1 HTTP/1.0"),
            Asked::Metrics { head_only: false }
        );
        assert_eq!(
            parse(b"HEAD /metrics HTTP/1.1"),
            Asked::Metrics { head_only: true }
        );
        assert_eq!(parse(b"GET / HTTP/1.1"), Asked::NotFound);
        assert_eq!(parse(b"GET /metrics/x HTTP/1.1"), Asked::NotFound);
        assert_eq!(parse(b"POST /metrics HTTP/1.1"), Asked::BadMethod);
        assert_eq!(parse(b"GET /metrics"), Asked::Bad);
        assert_eq!(parse(b"\x16\x03\x01 tls"), Asked::Bad);
        assert_eq!(parse(b"GET metrics HTTP/1.1"), Asked::Bad);
    }

    #[test]
    fn listen_addresses_are_tcp_or_an_absolute_path() {
        assert_eq!(
            Listen::parse("127.0.0.1:9108"),
            Ok(Listen::Tcp("127.0.0.1:9108".parse().unwrap()))
        );
        assert_eq!(
            Listen::parse("/run/m.sock"),
            Ok(Listen::Unix("/run/m.sock".into()))
        );
        assert!(Listen::parse("localhost:9108").is_err());
        assert!(Listen::parse("m.sock").is_err());
    }

    #[test]
    fn the_server_answers_metrics_404_405_and_400() {
        let (server, addr) = server();
        let ok = get(&addr, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")),
            "{ok}"
        );
        assert!(ok.contains("Connection: close\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\n# TYPE x counter\nx 1\n"), "{ok}");
        let other = get(&addr, "GET /other HTTP/1.1\r\n\r\n");
        assert!(other.starts_with("HTTP/1.1 404 "), "{other}");
        let post = get(&addr, "POST /metrics HTTP/1.1\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_REQUEST + 10));
        let long = get(&addr, &long);
        assert!(long.starts_with("HTTP/1.1 400 "), "{long}");
        server.stop();
    }

    #[test]
    fn a_silent_client_delays_the_next_by_the_timeout_at_most() {
        let (server, addr) = server();
        let _silent = TcpStream::connect(addr).unwrap();
        let started = Instant::now();
        let ok = get(&addr, "GET /metrics HTTP/1.1\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(
            started.elapsed() < REQUEST_TIMEOUT + Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        server.stop();
    }

    #[test]
    fn a_unix_socket_is_served_and_removed_at_the_end() {
        let dir = std::env::temp_dir().join(format!("metrics-http-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.sock");
        std::fs::write(&path, "stale").unwrap();
        let server =
            Server::start(&Listen::Unix(path.clone()), |out| out.write_all(b"x 1\n")).unwrap();
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(
            out.starts_with("HTTP/1.1 200 OK") && out.ends_with("x 1\n"),
            "{out}"
        );
        server.stop();
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
