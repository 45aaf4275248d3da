//! The artifact fetcher's HTTP/1.1 client: one `GET` per connection over a
//! `TcpStream` (through TLS, `tls.rs`, for `https://`), redirects followed
//! up to [`MAX_REDIRECTS`], and a bound on the body's size
//! (`http_max_size`). The request and the answer are the `http` crate's
//! client codec's, with its bounds on the head, its lines and fields, and
//! on chunks' size lines and trailers; bodies by `Content-Length`,
//! `chunked` or the connection's end. What is the fetcher's own is
//! connecting, the deadline, TLS, the URLs and the credentials.
//!
//! As Go's HTTP client (go-getter's, so Nomad's) does:
//! - one deadline bounds the whole fetch (connecting, every redirect hop,
//!   the TLS handshake, the heads and the whole body): a server that
//!   trickles a byte now and then cannot hold a start for longer;
//! - the user's headers go with every hop, except the credentials
//!   ([`SENSITIVE_HEADERS`]), which go only to the first URL's host and its
//!   subdomains: once a redirect leaves them, they are dropped for the rest
//!   of the fetch.
//!
//! Messages name URLs without their query, where tokens live, and never the
//! request's headers.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use ::http::client;

use super::tls::TlsStream;
use crate::spec::redacted;

/// A connection, plain or through TLS, whose every read and write ends
/// by the fetch's deadline.
struct Conn {
    stream: Stream,
    /// The socket under `stream` (a second descriptor of it), whose
    /// timeouts are set to what is left of the deadline.
    socket: TcpStream,
    deadline: Deadline,
    /// When the socket's timeouts were last set: a read that starts later
    /// may end that much past the deadline.
    timeouts_set: Option<Instant>,
}

/// How stale the socket's timeouts may grow before they are set again:
/// the most a read or write may overrun the deadline, and what keeps a
/// fast download from two more system calls for every read.
const TIMEOUT_SLACK: Duration = Duration::from_millis(100);

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl Conn {
    /// Runs `io` on the stream with the socket's timeouts set to what is
    /// left of the deadline; an error once it has passed names it.
    fn timed<T>(&mut self, io: impl FnOnce(&mut Stream) -> io::Result<T>) -> io::Result<T> {
        let left = self.deadline.left()?;
        if self
            .timeouts_set
            .map_or(true, |set| set.elapsed() >= TIMEOUT_SLACK)
        {
            self.socket.set_read_timeout(Some(left))?;
            self.socket.set_write_timeout(Some(left))?;
            self.timeouts_set = Some(Instant::now());
        }
        io(&mut self.stream).map_err(|err| match self.deadline.left() {
            Err(passed) => passed,
            Ok(_) => err,
        })
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.timed(|s| match s {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        })
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.timed(|s| match s {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.timed(|s| match s {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        })
    }
}

/// When a fetch must be done by, and the limit it came from.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    end: Instant,
    limit: Duration,
}

impl Deadline {
    fn after(limit: Duration) -> Deadline {
        Deadline {
            // A limit too far to add is no limit: a year stands in.
            end: Instant::now()
                .checked_add(limit)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 24 * 3600)),
            limit,
        }
    }

    /// What is left, or the error that names the limit once none is.
    fn left(&self) -> io::Result<Duration> {
        let left = self.end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the fetch took longer than {} (http_read_timeout)",
                    crate::units::format_duration(self.limit)
                ),
            ));
        }
        Ok(left)
    }
}

/// Redirects followed before giving up, as Go's HTTP client (go-getter's).
pub const MAX_REDIRECTS: usize = 10;

/// Connection attempts while the server refuses: a file server a prestart
/// sidecar starts may not listen yet when the main task's start fetches
/// from it. Bounded, and only for a refused connection.
const CONNECT_ATTEMPTS: u32 = 20;

/// The wait between refused attempts (20 × 250 ms: 5 s in all).
const CONNECT_RETRY: Duration = Duration::from_millis(250);

/// The headers that carry credentials, which a redirect to another host
/// drops: Go's list (`net/http`'s `makeHeadersCopier`), compared without
/// regard to case.
pub const SENSITIVE_HEADERS: &[&str] = &[
    "Authorization",
    "WWW-Authenticate",
    "Cookie",
    "Cookie2",
    "Proxy-Authorization",
    "Proxy-Authenticate",
];

fn is_sensitive(name: &str) -> bool {
    SENSITIVE_HEADERS
        .iter()
        .any(|s| s.eq_ignore_ascii_case(name))
}

/// Whether `sub` is `parent` or a subdomain of it, as Go's
/// `isDomainOrSubdomain` decides (ports play no part; an IPv6 address is
/// only itself).
fn is_domain_or_subdomain(sub: &str, parent: &str) -> bool {
    let (sub, parent) = (sub.to_ascii_lowercase(), parent.to_ascii_lowercase());
    if sub == parent {
        return true;
    }
    if sub.contains([':', '%']) {
        return false;
    }
    sub.strip_suffix(&parent)
        .is_some_and(|rest| rest.ends_with('.'))
}

/// What fetching bounds.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// The longest a whole fetch may take, redirects and body included.
    pub deadline: Duration,
    /// The largest body taken.
    pub max_size: u64,
}

/// Fetches `url` with `headers` into `out`; the bytes written. An
/// `https://` server's certificate is checked against the CAs of the file
/// `ca`.
pub fn get(
    url: &str,
    headers: &BTreeMap<String, String>,
    limits: HttpLimits,
    ca: &str,
    out: &mut dyn Write,
) -> Result<u64, String> {
    // Checked before anything is sent; the value is never shown.
    for (key, value) in headers {
        client::check_field(key, value)
            .map_err(|why| format!("header {:?}: {why}", key.replace(['\r', '\n'], " ")))?;
    }
    let deadline = Deadline::after(limits.deadline);
    let mut url = url.to_string();
    let mut previous_tls = false;
    let first_host = Target::parse(&url)?.host;
    // Set once a hop leaves the first host's domain, and kept, as Go does:
    // a later redirect back does not bring the credentials back.
    let mut strip_sensitive = false;
    for _ in 0..=MAX_REDIRECTS {
        let target = Target::parse(&url)?;
        if previous_tls && !target.tls {
            return Err(format!(
                "GET {}: a redirect from https to http is refused",
                redacted(&url)
            ));
        }
        previous_tls = target.tls;
        strip_sensitive |= !is_domain_or_subdomain(&target.host, &first_host);
        let mut stream =
            open(&target, deadline, ca).map_err(|e| format!("GET {}: {e}", redacted(&url)))?;
        let mut fields = vec![
            ("Host", target.host_header.as_str()),
            ("User-Agent", "csi-agent"),
            ("Accept-Encoding", "identity"),
            ("Connection", "close"),
        ];
        fields.extend(
            headers
                .iter()
                .filter(|(key, _)| !(strip_sensitive && is_sensitive(key)))
                .map(|(key, value)| (key.as_str(), value.as_str())),
        );
        client::write_request(&mut stream, "GET", &target.path, &fields, None)
            .map_err(|e| format!("GET {}: {e}", redacted(&url)))?;
        let response = client::read_response(BufReader::new(stream), "GET")
            .map_err(|e| format!("GET {}: {e}", redacted(&url)))?;
        match response.status {
            200 => {
                return read_body(response, limits.max_size, out)
                    .map_err(|e| format!("GET {}: {e}", redacted(&url)));
            }
            301 | 302 | 303 | 307 | 308 => {
                let Some(location) = response.header("location") else {
                    return Err(format!(
                        "GET {}: {} without a Location",
                        redacted(&url),
                        response.status
                    ));
                };
                url = resolve(&target, location);
            }
            status => {
                return Err(format!(
                    "GET {}: bad response code: {status} {}",
                    redacted(&url),
                    response.reason
                ))
            }
        }
    }
    Err(format!(
        "GET {}: more than {MAX_REDIRECTS} redirects",
        redacted(&url)
    ))
}

/// Connects to `target`, through TLS for `https://`, by `deadline`.
fn open(target: &Target, deadline: Deadline, ca: &str) -> io::Result<Conn> {
    let tcp = connect(target, deadline)?;
    let socket = tcp.try_clone()?;
    let stream = if target.tls {
        // The handshake reads and writes the socket too.
        let left = deadline.left()?;
        tcp.set_read_timeout(Some(left))?;
        tcp.set_write_timeout(Some(left))?;
        let tls =
            TlsStream::connect(tcp, &target.host, ca).map_err(|err| match deadline.left() {
                Err(passed) => passed,
                Ok(_) => err,
            })?;
        Stream::Tls(Box::new(tls))
    } else {
        Stream::Plain(tcp)
    };
    Ok(Conn {
        stream,
        socket,
        deadline,
        timeouts_set: None,
    })
}

/// Connects by `deadline`, retrying a refused connection a bounded number
/// of times.
fn connect(target: &Target, deadline: Deadline) -> io::Result<TcpStream> {
    let mut attempt = 0;
    loop {
        // Name resolution is the system resolver's, bounded by its own
        // timeouts (resolv.conf's), not by the deadline.
        let addrs = (target.host.as_str(), target.port).to_socket_addrs()?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the host has no address");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, deadline.left()?) {
                Ok(stream) => return Ok(stream),
                Err(err) => last = err,
            }
        }
        attempt += 1;
        if last.kind() != io::ErrorKind::ConnectionRefused || attempt >= CONNECT_ATTEMPTS {
            return Err(deadline.left().err().unwrap_or(last));
        }
        thread::sleep(CONNECT_RETRY.min(deadline.left()?));
    }
}

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    /// `https://`.
    tls: bool,
    host: String,
    port: u16,
    /// `host` or `host:port`, as the Host header carries it.
    host_header: String,
    /// The path and query.
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, String> {
        let (tls, rest) = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (false, rest),
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (true, rest),
            _ => {
                return Err(format!(
                    "{}: csi-agent fetches http:// and https:// URLs only",
                    redacted(url)
                ))
            }
        };
        let rest = rest.split('#').next().unwrap_or("");
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if authority.contains('@') {
            return Err(format!(
                "{}: user info in the URL is not supported; use headers",
                redacted(url)
            ));
        }
        let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
            let (host, after) = inner
                .split_once(']')
                .ok_or_else(|| format!("{}: bad IPv6 host", redacted(url)))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("{}: no host", redacted(url)));
        }
        let port = match port {
            Some(p) => p
                .parse()
                .map_err(|_| format!("{}: bad port {p:?}", redacted(url)))?,
            None if tls => 443,
            None => 80,
        };
        Ok(Target {
            tls,
            host: host.to_string(),
            port,
            host_header: authority.to_string(),
            path,
        })
    }
}

/// The URL a redirect's `location` names, from `target`.
fn resolve(target: &Target, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let scheme = if target.tls { "https" } else { "http" };
    if location.starts_with('/') {
        return format!("{scheme}://{}{location}", target.host_header);
    }
    let base = target.path.split('?').next().unwrap_or("/");
    let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
    format!("{scheme}://{}{dir}{location}", target.host_header)
}

/// Copies the body of `response` into `out`, if it has at most `max`
/// bytes (`http_max_size`); the bytes copied.
fn read_body<R: BufRead>(
    mut response: client::Response<R>,
    max: u64,
    out: &mut dyn Write,
) -> Result<u64, String> {
    response.body.copy_to(out, max).map_err(|err| match err {
        client::Error::Protocol(client::Protocol::BodyTooLong { limit }) => {
            format!("the body is larger than {limit} bytes (http_max_size)")
        }
        err => err.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(response: &str, max: u64) -> Result<Vec<u8>, String> {
        let response =
            client::read_response(response.as_bytes(), "GET").map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        read_body(response, max, &mut out)?;
        Ok(out)
    }

    #[test]
    fn a_content_length_body_is_read_to_its_length() {
        let out = body(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello world",
            100,
        )
        .unwrap();
        assert_eq!(out, b"hello");
        let err = body("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello", 100).unwrap_err();
        assert!(err.to_string().contains("after 5 of 9"), "{err}");
        let err = body("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 4).unwrap_err();
        assert!(err.to_string().contains("larger than 4"), "{err}");
    }

    #[test]
    fn a_chunked_body_is_joined_and_its_trailers_skipped() {
        let response = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: t\r\n\r\n";
        assert_eq!(body(response, 100).unwrap(), b"hello world");
        assert!(body(response, 10).is_err());
        let cut = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel";
        assert!(body(cut, 100).is_err());
        let bad_size = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert!(body(bad_size, 100)
            .unwrap_err()
            .to_string()
            .contains("chunk size"));
    }

    #[test]
    fn a_body_without_length_runs_to_the_end_within_the_bound() {
        assert_eq!(body("HTTP/1.0 200 OK\r\n\r\nabc", 3).unwrap(), b"abc");
        assert!(body("HTTP/1.0 200 OK\r\n\r\nabcd", 3).is_err());
    }

    #[test]
    fn heads_are_parsed_and_bad_ones_refused() {
        let reader: &[u8] = b"HTTP/1.1 404 Not Found\r\nLocation: /x\r\n\r\n";
        let head = client::read_response(reader, "GET").unwrap();
        assert_eq!(head.status, 404);
        assert_eq!(head.reason, "Not Found");
        assert_eq!(head.header("location"), Some("/x"));
        for bad in [
            "SSH-2.0\r\n\r\n",
            "HTTP/1.1 abc\r\n\r\n",
            "",
            "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        ] {
            let reader = bad.as_bytes();
            assert!(client::read_response(reader, "GET").is_err(), "{bad:?}");
        }
        let long = format!(
            "HTTP/1.1 200 OK\r\nX: {}\r\n\r\n",
            "a".repeat(client::MAX_HEAD)
        );
        let reader = long.as_bytes();
        assert!(client::read_response(reader, "GET").is_err());
    }

    #[test]
    fn urls_and_redirects_resolve() {
        let t = Target::parse("http://h:8080/a/b.tgz?x=1").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("h", 8080));
        assert_eq!(t.path, "/a/b.tgz?x=1");
        let t = Target::parse("http://[::1]/").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 80));
        let t = Target::parse("https://h/x").unwrap();
        assert!(t.tls && t.port == 443);
        assert_eq!(resolve(&t, "/y"), "https://h/y");
        assert!(Target::parse("ftp://h/").is_err());
        assert!(Target::parse("http://u:p@h/").is_err());
        let t = Target::parse("http://h:1/a/b").unwrap();
        assert_eq!(resolve(&t, "/c"), "http://h:1/c");
        assert_eq!(resolve(&t, "c"), "http://h:1/a/c");
        assert_eq!(resolve(&t, "http://o/d"), "http://o/d");
    }

    #[test]
    fn redirects_stop_at_the_bound() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let mut served = 0;
            for stream in listener.incoming().take(MAX_REDIRECTS + 1) {
                let mut stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 2 {
                    line.clear();
                }
                served += 1;
                stream
                    .write_all(b"HTTP/1.1 302 Found\r\nLocation: /again?token=s\r\nContent-Length: 0\r\n\r\n")
                    .unwrap();
            }
            served
        });
        let limits = HttpLimits {
            deadline: Duration::from_secs(60),
            max_size: 100,
        };
        let err = get(
            &format!("http://127.0.0.1:{port}/start"),
            &BTreeMap::new(),
            limits,
            "/nonexistent",
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(err.contains("more than 10 redirects"), "{err}");
        assert!(!err.contains("token"), "{err}");
        assert_eq!(server.join().unwrap(), MAX_REDIRECTS + 1);
    }

    /// A server that answers each of its connections in turn with the next
    /// of `answers`; the request heads it read.
    fn serve(
        listener: std::net::TcpListener,
        answers: Vec<String>,
    ) -> thread::JoinHandle<Vec<String>> {
        thread::spawn(move || {
            let mut heads = Vec::new();
            for answer in answers {
                let (mut stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 2 {
                    head.push_str(&line);
                    line.clear();
                }
                heads.push(head);
                stream.write_all(answer.as_bytes()).unwrap();
            }
            heads
        })
    }

    fn listen(ip: &str) -> (std::net::TcpListener, u16) {
        let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        (listener, port)
    }

    fn redirect(to: &str) -> String {
        format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n")
    }

    const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

    fn user_headers() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("Authorization".to_string(), "Bearer s3cret".to_string()),
            ("cookie".to_string(), "session=s3cret".to_string()),
            ("X-Trace".to_string(), "t-1".to_string()),
        ])
    }

    fn fetch_ok(url: &str) {
        let limits = HttpLimits {
            deadline: Duration::from_secs(60),
            max_size: 100,
        };
        let mut out = Vec::new();
        get(url, &user_headers(), limits, "/nonexistent", &mut out).unwrap();
        assert_eq!(out, b"ok");
    }

    fn has_credentials(head: &str) -> bool {
        let has = head.contains("\r\nAuthorization: Bearer s3cret\r\n");
        assert_eq!(
            has,
            head.contains("\r\ncookie: session=s3cret\r\n"),
            "{head}"
        );
        has
    }

    #[test]
    fn credentials_are_not_sent_to_the_host_a_redirect_names() {
        let (first, first_port) = listen("127.0.0.1");
        let (other, other_port) = listen("127.0.0.2");
        let first = serve(
            first,
            vec![redirect(&format!("http://127.0.0.2:{other_port}/b"))],
        );
        let other = serve(other, vec![OK.to_string()]);
        fetch_ok(&format!("http://127.0.0.1:{first_port}/a"));
        let first = first.join().unwrap();
        let other = other.join().unwrap();
        assert!(has_credentials(&first[0]), "{first:?}");
        assert!(!has_credentials(&other[0]), "{other:?}");
        assert!(!other[0].contains("s3cret"), "{other:?}");
        assert!(other[0].contains("\r\nX-Trace: t-1\r\n"), "{other:?}");
    }

    #[test]
    fn credentials_follow_a_redirect_to_the_same_host_on_any_port() {
        let (first, first_port) = listen("127.0.0.1");
        let (same, same_port) = listen("127.0.0.1");
        let first = serve(
            first,
            vec![
                redirect("/b"),
                redirect(&format!("http://127.0.0.1:{same_port}/c")),
            ],
        );
        let same = serve(same, vec![OK.to_string()]);
        fetch_ok(&format!("http://127.0.0.1:{first_port}/a"));
        let first = first.join().unwrap();
        let same = same.join().unwrap();
        assert!(first[1].starts_with("GET /b "), "{first:?}");
        assert!(first.iter().all(|h| has_credentials(h)), "{first:?}");
        assert!(has_credentials(&same[0]), "{same:?}");
    }

    #[test]
    fn credentials_once_dropped_stay_dropped_when_a_redirect_comes_back() {
        let (first, first_port) = listen("127.0.0.1");
        let (other, other_port) = listen("127.0.0.2");
        let first = serve(
            first,
            vec![
                redirect(&format!("http://127.0.0.2:{other_port}/b")),
                OK.to_string(),
            ],
        );
        let other = serve(
            other,
            vec![redirect(&format!("http://127.0.0.1:{first_port}/c"))],
        );
        fetch_ok(&format!("http://127.0.0.1:{first_port}/a"));
        let first = first.join().unwrap();
        other.join().unwrap();
        assert!(first[1].starts_with("GET /c "), "{first:?}");
        assert!(!has_credentials(&first[1]), "{first:?}");
        assert!(first[1].contains("\r\nX-Trace: t-1\r\n"), "{first:?}");
    }

    #[test]
    fn subdomains_keep_credentials_as_go_decides() {
        assert!(is_domain_or_subdomain("example.com", "example.com"));
        assert!(is_domain_or_subdomain("files.Example.com", "example.COM"));
        assert!(!is_domain_or_subdomain("example.com", "files.example.com"));
        assert!(!is_domain_or_subdomain("badexample.com", "example.com"));
        assert!(!is_domain_or_subdomain("127.0.0.2", "127.0.0.1"));
        assert!(!is_domain_or_subdomain("::1%.example.com", "example.com"));
        assert!(is_sensitive("www-authenticate") && is_sensitive("COOKIE2"));
        assert!(!is_sensitive("X-Trace"));
    }

    #[test]
    fn a_server_that_trickles_is_stopped_by_the_deadline() {
        // A byte every 100 ms: inside the status line, then inside a body.
        for prefix in ["", "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n"] {
            let (listener, port) = listen("127.0.0.1");
            let server = thread::spawn(move || {
                let (mut stream, _) = listener.accept().unwrap();
                stream.write_all(prefix.as_bytes()).unwrap();
                // Until the client hangs up.
                while stream.write_all(b"H").is_ok() {
                    thread::sleep(Duration::from_millis(100));
                }
            });
            let limits = HttpLimits {
                deadline: Duration::from_secs(1),
                max_size: 1 << 20,
            };
            let started = Instant::now();
            let err = get(
                &format!("http://127.0.0.1:{port}/slow"),
                &BTreeMap::new(),
                limits,
                "/nonexistent",
                &mut Vec::new(),
            )
            .unwrap_err();
            let took = started.elapsed();
            assert!(
                err.contains("the fetch took longer than 1s (http_read_timeout)"),
                "{err}"
            );
            assert!(took < Duration::from_secs(3), "{took:?}");
            server.join().unwrap();
        }
    }

    #[test]
    fn headers_are_sent_and_line_breaks_in_them_refused() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 2 {
                head.push_str(&line);
                line.clear();
            }
            let body = "ok";
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            head
        });
        let limits = HttpLimits {
            deadline: Duration::from_secs(60),
            max_size: 100,
        };
        let headers = BTreeMap::from([("X-Token".to_string(), "s3cret".to_string())]);
        let mut out = Vec::new();
        let url = format!("http://127.0.0.1:{port}/a");
        get(&url, &headers, limits, "/nonexistent", &mut out).unwrap();
        assert_eq!(out, b"ok");
        let head = server.join().unwrap();
        assert!(head.starts_with("GET /a HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("\r\nX-Token: s3cret\r\n"), "{head}");
        assert!(
            head.contains(&format!("\r\nHost: 127.0.0.1:{port}\r\n")),
            "{head}"
        );
        let injected = BTreeMap::from([("X".to_string(), "a\r\nEvil: 1".to_string())]);
        let err = get(&url, &injected, limits, "/nonexistent", &mut Vec::new()).unwrap_err();
        assert!(err.contains("line break") && !err.contains("Evil"), "{err}");
    }
}
