//! The scrape endpoint: `GET /metrics` over HTTP/1.x on a TCP address or a
//! unix socket, served by [`crate::httpd`] within its default bounds
//! (connections, deadlines from accept, head and body sizes, workers):
//! idle or slow clients hold none of what a scraper needs. The threads are
//! `metrics-http` (the poll thread) and `metrics-http-w<n>` (workers),
//! which the agent owns and joins at its end.
//!
//! The answer is rendered from the metrics registry alone, never the main
//! loop, into memory first, so that a client slow to take it holds no
//! lock. `GET /metrics` (or `HEAD`) answers 200 in the text format,
//! version 0.0.4; any other path 404, any other method 405; what `httpd`
//! refuses it answers itself (400, 413, 431, ...).

use std::io::{self, Write};

use crate::httpd::{self, Limits, Request, Response};

pub use crate::httpd::Listen;

/// The content type of the text format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The name of the endpoint's threads.
const THREAD: &str = "metrics-http";

/// The running endpoint; [`Server::stop`] ends and joins its threads.
pub struct Server {
    server: httpd::Server,
}

impl Server {
    /// Binds `listen` (a stale unix socket at its path is replaced) and
    /// starts answering; `render` writes the metrics of each scrape.
    pub fn start(
        listen: &Listen,
        render: impl Fn(&mut dyn Write) -> io::Result<()> + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let server = httpd::start(THREAD, listen, Limits::default(), move |request| {
            answer(request, &render)
        })?;
        Ok(Server { server })
    }

    /// Where it listens (a TCP port 0 resolved to the port bound).
    pub fn bound(&self) -> &Listen {
        self.server.bound()
    }

    /// Closes every connection and joins the threads, after a scrape being
    /// rendered.
    pub fn stop(self) {
        self.server.stop();
    }
}

/// The answer to one request.
fn answer(request: &Request, render: &dyn Fn(&mut dyn Write) -> io::Result<()>) -> Response {
    if request.path() != "/metrics" {
        return Response::text(404, "not found: the metrics are at /metrics\n");
    }
    if request.method != "GET" && request.method != "HEAD" {
        return Response::text(405, "method not allowed\n").with_header("Allow", "GET, HEAD");
    }
    let mut body = Vec::with_capacity(16 << 10);
    match render(&mut body) {
        Ok(()) => Response::new(200, CONTENT_TYPE, body),
        Err(err) => {
            log::error!("Cannot render the metrics: {err}");
            Response::text(500, "cannot render the metrics\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{SocketAddr, TcpStream};
    use std::os::unix::net::UnixStream;
    use std::thread;
    use std::time::{Duration, Instant};

    use super::*;

    /// `request` sent over a fresh connection; the whole answer.
    fn get(addr: &SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
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
        let head = get(&addr, "HEAD /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.ends_with("Content-Length: 21\r\nConnection: close\r\n\r\n"),
            "{head}"
        );
        let other = get(&addr, "GET /other HTTP/1.1\r\n\r\n");
        assert!(other.starts_with("HTTP/1.1 404 "), "{other}");
        let post = get(&addr, "POST /metrics HTTP/1.1\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        assert!(post.contains("Allow: GET, HEAD\r\n"), "{post}");
        let tls = get(&addr, "\x16\x03\x01 tls\r\n\r\n");
        assert!(tls.starts_with("HTTP/1.1 400 "), "{tls}");
        server.stop();
    }

    /// Sends `bytes` one at a time, `every` apart, until a write fails
    /// because the server closed the connection; how long that took, and
    /// what came back.
    fn trickle(addr: SocketAddr, bytes: &'static [u8], every: Duration) -> (Duration, String) {
        let mut conn = TcpStream::connect(addr).unwrap();
        let started = Instant::now();
        for byte in bytes {
            if conn.write_all(&[*byte]).is_err() {
                break;
            }
            thread::sleep(every);
        }
        let took = started.elapsed();
        let mut answer = String::new();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let _ = conn.read_to_string(&mut answer);
        (took, answer)
    }

    #[test]
    fn a_scrape_is_answered_within_a_second_beside_idle_stalled_and_trickling_clients() {
        let server = Server::start(
            &Listen::Tcp("127.0.0.1:0".parse().unwrap()),
            crate::metrics::render_into,
        )
        .unwrap();
        let Listen::Tcp(addr) = *server.bound() else {
            unreachable!()
        };
        let idle: Vec<TcpStream> = (0..100)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let stalled: Vec<TcpStream> = (0..20)
            .map(|_| {
                let mut conn = TcpStream::connect(addr).unwrap();
                conn.write_all(b"GET /metr").unwrap();
                conn
            })
            .collect();
        let trickler = thread::spawn(move || {
            trickle(
                addr,
                b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                Duration::from_millis(100),
            )
        });
        let started = Instant::now();
        let answer = get(&addr, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        let took = started.elapsed();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(
            answer.contains("# TYPE csi_agent_claims gauge\n"),
            "{answer}"
        );
        assert!(took < Duration::from_secs(1), "the scrape took {took:?}");
        // The trickler's deadline counts from its accept, not from its
        // last byte: it is closed unanswered once the time is up, long
        // before its 45 bytes at 100 ms each are sent.
        let (open, unanswered) = trickler.join().unwrap();
        assert_eq!(unanswered, "");
        assert!(
            open >= httpd::REQUEST_TIMEOUT
                && open < httpd::REQUEST_TIMEOUT + Duration::from_secs(1),
            "the trickler was open for {open:?}"
        );
        drop((idle, stalled));
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
