//! A client of the Docker Engine API, small and ours, for the `docker` task
//! driver.
//!
//! It speaks API version **1.41** (every path is `/v1.41/...`): what
//! Debian's `docker.io` 20.10 serves, and what newer engines still accept.
//! Only unix sockets are reached (`unix:///var/run/docker.sock` or a bare
//! absolute path); the engine's TCP endpoints are refused at
//! [`Engine::new`]. HTTP is our own, the `http` crate's client codec
//! over the socket ([`http`]), one request per connection, and so is JSON
//! ([`json`]): the design card allows neither an HTTP nor a JSON crate
//! from a registry nor an async runtime.
//!
//! Every call is blocking; the driver runs each on a thread of its own.
//! Plain calls have a [`CALL_TIMEOUT`] on every read and write; [`Engine::wait`]
//! and [`Engine::logs`] wait as long as the container runs; a pull or an
//! import may take long but must make progress: [`PROGRESS_TIMEOUT`] is
//! the longest the engine may stay silent in between.
//!
//! Docker's JSON stays in this module: the driver asks with a
//! [`ContainerSpec`] and reads a [`Container`]; `spec.rs` writes the
//! create body and `containers.rs` reads the engine's answers.
//!
//! The files split by concern: `images.rs` (presence, pull, import, the
//! registry's credentials), `pull_progress.rs` (a pull's bytes and
//! layers), `containers.rs` (create, start, inspect, list,
//! wait, kill, remove), `spec.rs` (what a container is asked to be),
//! `logs.rs` (the multiplexed log stream), `volume_mounts.rs` (which
//! containers mount which named volumes, for the volume plugin's
//! reconciler), `exec.rs` (commands run in a running container), `http.rs`
//! (the engine's side of the wire: its fields, the socket's timeouts,
//! connections handed over to a stream).

mod containers;
mod exec;
pub mod http;
mod images;
mod logs;
mod pull_progress;
mod spec;
mod stats;
mod volume_mounts;

pub use containers::Container;
pub use exec::{ExecState, ExecStream};
pub use images::Auth;
pub use logs::{demultiplex, Demux, MAX_FRAME};
pub use pull_progress::{PullProgress, MAX_PULL_LAYERS};
pub use spec::{ContainerSpec, Device, Mount, PortBinding};
pub use stats::ContainerStats;
pub use volume_mounts::{ContainerVolumes, VolumeMount};

use std::fmt;
use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{HttpError, Request, Response};
use json::Value;

/// The API version of every path.
pub const API_VERSION: &str = "1.41";

/// The longest a plain call waits on any one read or write.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest a pull or an import may go without the engine saying
/// anything.
pub const PROGRESS_TIMEOUT: Duration = Duration::from_secs(300);

/// The largest answer a call that expects one document reads.
pub const MAX_ANSWER: usize = 16 << 20;

/// The longest socket path the kernel accepts (`sun_path` with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// What a call to the engine fails with.
#[derive(Debug)]
pub enum Error {
    /// The endpoint is not a unix socket we can reach.
    Endpoint(String),
    /// The socket could not be connected.
    Connect { endpoint: String, err: io::Error },
    /// Reading or writing the connection failed.
    Io { endpoint: String, err: io::Error },
    /// The engine said nothing for as long as the call waits
    /// ([`CALL_TIMEOUT`], or [`PROGRESS_TIMEOUT`] for a pull or import).
    Timeout { endpoint: String },
    /// The engine answered with an error status; `message` is its own.
    Api { status: u16, message: String },
    /// 404: no such container or image (the engine's message).
    NotFound(String),
    /// 409: e.g. a container name already in use (the engine's message).
    Conflict(String),
    /// An image is not present and could not be pulled.
    Pull { image: String, message: String },
    /// The engine's answer is not what API 1.41 promises.
    Protocol(String),
    /// Writing a container's logs where the caller wants them failed.
    WriteLogs(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Endpoint(endpoint) => write!(
                f,
                "container engine endpoint {endpoint:?} is not a unix socket \
                 (expected unix:///path/to/docker.sock or an absolute path)"
            ),
            Error::Connect { endpoint, .. } => {
                write!(f, "cannot reach the container engine at {endpoint}")
            }
            Error::Io { endpoint, .. } => {
                write!(
                    f,
                    "the connection to the container engine at {endpoint} failed"
                )
            }
            Error::Timeout { endpoint } => {
                write!(
                    f,
                    "the container engine at {endpoint} did not answer in time"
                )
            }
            Error::Api { status, message } => {
                write!(f, "the container engine answered {status}: {message}")
            }
            Error::NotFound(message) => write!(f, "the container engine: {message}"),
            Error::Conflict(message) => write!(f, "the container engine refused: {message}"),
            Error::Pull { image, message } => {
                write!(
                    f,
                    "image {image} is not present and cannot be pulled: {message}"
                )
            }
            Error::Protocol(message) => {
                write!(
                    f,
                    "the container engine's answer is not understood: {message}"
                )
            }
            Error::WriteLogs(_) => f.write_str("cannot write the container's logs"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connect { err, .. } | Error::Io { err, .. } | Error::WriteLogs(err) => Some(err),
            _ => None,
        }
    }
}

/// The engine's version, from `GET /version`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// The engine's own version, e.g. `20.10.24+dfsg1`.
    pub version: String,
    /// The newest API version it serves, e.g. `1.41`.
    pub api_version: String,
}

/// A container engine behind a unix socket.
#[derive(Clone, Debug)]
pub struct Engine {
    socket: PathBuf,
    endpoint: String,
}

impl Engine {
    /// An engine at `unix:///path` or at a bare absolute path; anything
    /// else (`tcp://`, a relative path) is [`Error::Endpoint`]. Nothing is
    /// connected yet.
    pub fn new(endpoint: &str) -> Result<Engine, Error> {
        let path = match endpoint.strip_prefix("unix://") {
            Some(path) => path,
            None if endpoint.contains("://") => return Err(Error::Endpoint(endpoint.to_string())),
            None => endpoint,
        };
        if !path.starts_with('/') || path.len() > MAX_SOCKET_PATH {
            return Err(Error::Endpoint(endpoint.to_string()));
        }
        Ok(Engine {
            socket: PathBuf::from(path),
            endpoint: format!("unix://{path}"),
        })
    }

    /// The endpoint as `unix:///path`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `GET /_ping`: whether the engine answers at all.
    pub fn ping(&self) -> Result<(), Error> {
        let request = Request::new("GET", "/_ping".to_string());
        let response = self.send(&request, Some(CALL_TIMEOUT))?;
        self.body_if(response, &[200]).map(drop)
    }

    /// `GET /version`.
    pub fn version(&self) -> Result<Version, Error> {
        self.version_within(CALL_TIMEOUT)
    }

    /// `GET /version`, answered within `timeout` (each read and write).
    pub fn version_within(&self, timeout: Duration) -> Result<Version, Error> {
        let response = self.send(&Engine::request("GET", "/version"), Some(timeout))?;
        let answer = parse("/version", &self.body_if(response, &[200])?)?;
        let text = |key: &str| {
            answer
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| Error::Protocol(format!("GET /version has no {key}")))
        };
        Ok(Version {
            version: text("Version")?,
            api_version: text("ApiVersion")?,
        })
    }

    /// The names of the engine's runtimes (`GET /info`'s `Runtimes`).
    pub fn runtimes(&self) -> Result<Vec<String>, Error> {
        let answer = self.get_json("/info")?;
        let runtimes = answer
            .get("Runtimes")
            .and_then(Value::as_object)
            .ok_or_else(|| Error::Protocol("GET /info has no Runtimes".to_string()))?;
        Ok(runtimes.iter().map(|(name, _)| name.clone()).collect())
    }

    /// Connects and sends `request` (its target without the version
    /// prefix, which is added here) with `timeout` on every read and write.
    fn send(
        &self,
        request: &Request,
        timeout: Option<Duration>,
    ) -> Result<Response<UnixStream>, Error> {
        let stream = UnixStream::connect(&self.socket).map_err(|err| Error::Connect {
            endpoint: self.endpoint.clone(),
            err,
        })?;
        http::exchange(stream, request, timeout).map_err(|err| self.http_error(err))
    }

    /// A request to a versioned path.
    fn request<'a>(method: &'a str, target: &str) -> Request<'a> {
        Request::new(method, format!("/v{API_VERSION}{target}"))
    }

    fn http_error(&self, err: HttpError) -> Error {
        match err {
            HttpError::Io(err) if err.kind() == io::ErrorKind::InvalidData => {
                Error::Protocol(err.to_string())
            }
            HttpError::Io(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Error::Timeout {
                    endpoint: self.endpoint.clone(),
                }
            }
            HttpError::Io(err) => Error::Io {
                endpoint: self.endpoint.clone(),
                err,
            },
            HttpError::Protocol(protocol) => Error::Protocol(protocol.to_string()),
            HttpError::Request(bad) => Error::Protocol(bad.to_string()),
        }
    }

    /// The whole body of an answer whose status is one of `ok`; any other
    /// status is the engine's error.
    fn body_if(&self, response: Response<UnixStream>, ok: &[u16]) -> Result<Vec<u8>, Error> {
        let status = response.status;
        let body = response
            .read_all(MAX_ANSWER)
            .map_err(|err| self.http_error(err))?;
        if ok.contains(&status) {
            Ok(body)
        } else {
            Err(api_error(status, &body))
        }
    }

    /// The body of a streaming answer: `GET target` with no timeout; a
    /// status other than 200 is the engine's error.
    fn stream(&self, target: &str) -> Result<http::Body<UnixStream>, Error> {
        let response = self.send(&Engine::request("GET", target), None)?;
        if response.status == 200 {
            return Ok(response.body);
        }
        let status = response.status;
        let body = response
            .read_all(MAX_ANSWER)
            .map_err(|err| self.http_error(err))?;
        Err(api_error(status, &body))
    }

    /// `GET target` of a JSON document.
    fn get_json(&self, target: &str) -> Result<Value, Error> {
        let response = self.send(&Engine::request("GET", target), Some(CALL_TIMEOUT))?;
        let body = self.body_if(response, &[200])?;
        parse(target, &body)
    }
}

/// Parses the JSON answer to `what`.
fn parse(what: &str, body: &[u8]) -> Result<Value, Error> {
    json::parse_bytes(body).map_err(|err| Error::Protocol(format!("{what}: {err}")))
}

/// The error of an answer with `status`: the engine's `{"message": ...}`,
/// or the body's text.
fn api_error(status: u16, body: &[u8]) -> Error {
    let message = json::parse_bytes(body)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            match text.is_empty() {
                true => format!("status {status} without a message"),
                false => text.chars().take(500).collect(),
            }
        });
    match status {
        404 => Error::NotFound(message),
        409 => Error::Conflict(message),
        _ => Error::Api { status, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_chain;

    #[test]
    fn accepts_unix_endpoints_and_refuses_the_rest() {
        for text in ["unix:///var/run/docker.sock", "/var/run/docker.sock"] {
            let engine = Engine::new(text).unwrap();
            assert_eq!(engine.endpoint(), "unix:///var/run/docker.sock");
            assert_eq!(engine.socket(), Path::new("/var/run/docker.sock"));
        }
        for text in ["tcp://127.0.0.1:2375", "docker.sock", "unix://relative", ""] {
            let err = Engine::new(text).unwrap_err();
            assert!(matches!(err, Error::Endpoint(_)), "{text}: {err:?}");
            assert!(err.to_string().contains("not a unix socket"), "{err}");
        }
        let long = format!("/{}", "a".repeat(MAX_SOCKET_PATH));
        assert!(Engine::new(&long).is_err());
    }

    #[test]
    fn a_missing_socket_names_the_endpoint() {
        let engine = Engine::new("/nonexistent/csi-agent-test/docker.sock").unwrap();
        let err = engine.version().unwrap_err();
        assert!(matches!(err, Error::Connect { .. }), "{err:?}");
        assert_eq!(
            error_chain(&err),
            "cannot reach the container engine at unix:///nonexistent/csi-agent-test/docker.sock: \
             No such file or directory (os error 2)"
        );
    }

    #[test]
    fn a_silent_engine_is_a_timeout_naming_it() {
        let engine = Engine::new("/run/x.sock").unwrap();
        for kind in [io::ErrorKind::WouldBlock, io::ErrorKind::TimedOut] {
            let err = engine.http_error(HttpError::Io(kind.into()));
            assert_eq!(
                err.to_string(),
                "the container engine at unix:///run/x.sock did not answer in time"
            );
        }
        let err = engine.http_error(HttpError::Io(io::ErrorKind::BrokenPipe.into()));
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        let err = engine.http_error(HttpError::Io(io::ErrorKind::InvalidData.into()));
        assert!(matches!(err, Error::Protocol(_)), "{err:?}");
    }

    #[test]
    fn api_errors_carry_the_engines_message() {
        let err = api_error(404, br#"{"message":"No such container: x"}"#);
        assert!(
            matches!(&err, Error::NotFound(m) if m == "No such container: x"),
            "{err:?}"
        );
        let err = api_error(409, br#"{"message":"name in use"}"#);
        assert!(
            matches!(&err, Error::Conflict(m) if m == "name in use"),
            "{err:?}"
        );
        let err = api_error(500, b"plain text\n");
        assert_eq!(
            err.to_string(),
            "the container engine answered 500: plain text"
        );
        let err = api_error(502, b"");
        assert_eq!(
            err.to_string(),
            "the container engine answered 502: status 502 without a message"
        );
    }
}

/// The engine's answers are input too: a fake engine sends each bomb, and
/// each is refused naming its bound, never read whole or parsed deep.
#[cfg(test)]
mod bound_tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    use std::thread;

    use super::*;

    /// An engine at a socket of its own that answers one request with
    /// `answer`, and `version()` asked of it.
    fn version_answered_with(answer: impl Fn(&mut dyn Write) + Send + 'static) -> Error {
        let dir = std::env::temp_dir().join(format!(
            "csi-agent-engine-bounds-{}-{:?}",
            std::process::id(),
            thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("engine.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).unwrap();
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            answer(&mut stream);
        });
        let engine = Engine::new(&socket.display().to_string()).unwrap();
        let err = engine.version().unwrap_err();
        let _ = server.join();
        std::fs::remove_dir_all(&dir).unwrap();
        err
    }

    #[test]
    fn an_endless_answer_is_refused_at_the_answer_bound() {
        let err = version_answered_with(|w| {
            let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[");
            let chunk = vec![b'1'; 1 << 20];
            for _ in 0..(MAX_ANSWER >> 20) + 2 {
                if w.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        let text = crate::error_chain(&err);
        assert!(
            text.contains(&MAX_ANSWER.to_string()) || text.contains("16 MiB"),
            "{text}"
        );
    }

    #[test]
    fn a_deeply_nested_answer_is_refused_at_the_json_nesting_limit() {
        let err = version_answered_with(|w| {
            let body = "[".repeat(100_000);
            let _ = write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        });
        let text = crate::error_chain(&err);
        assert!(
            text.contains(&format!("deeper than {} levels", json::MAX_DEPTH)),
            "{text}"
        );
    }

    #[test]
    fn an_endless_header_is_refused_at_the_line_bound() {
        let err = version_answered_with(|w| {
            let _ = w.write_all(b"HTTP/1.1 200 OK\r\nX-Long: ");
            let chunk = vec![b'a'; 64 << 10];
            for _ in 0..64 {
                if w.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        assert!(matches!(err, Error::Protocol(_)), "{err:?}");
    }
}
