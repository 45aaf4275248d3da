//! The engine's HTTP/1.1 over its unix socket: one request per connection
//! (`Connection: close`), a body of known length, and a response whose
//! body is framed by `Content-Length`, by the chunked transfer coding, or
//! by the end of the connection; the `http` crate's client codec reads and
//! writes it, within its bounds on the head (its lines, its fields) and on
//! chunks' size lines and trailers.
//!
//! The response's body is a reader ([`Body`]) that yields bytes as they
//! arrive, for the streams of `wait`, a pull's progress and logs; calls
//! that expect a document read it whole with [`Response::read_all`], which
//! bounds it, so a hostile engine cannot exhaust our memory. What is ours
//! here is the engine's side: the request's fields (`Host: docker`), the
//! socket's timeouts, and the connections handed over to a stream.

use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use ::http::client;

pub use ::http::client::Error as HttpError;

/// An answer read from a connection of type `S`.
pub type Response<S> = client::Response<BufReader<S>>;

/// An answer's body, still on a connection of type `S`.
pub type Body<S> = client::Body<BufReader<S>>;

/// A request: method, path with its query (already encoded, see
/// [`encode`]), extra headers, and a body with its content type.
#[derive(Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    pub target: String,
    pub headers: Vec<(&'a str, String)>,
    pub body: Option<(&'a str, Vec<u8>)>,
}

impl<'a> Request<'a> {
    pub fn new(method: &'a str, target: String) -> Request<'a> {
        Request {
            method,
            target,
            headers: Vec::new(),
            body: None,
        }
    }
}

/// Sends `request` on a connected socket and reads the response's head,
/// with `timeout` on every read and write (`None`: wait as long as it
/// takes).
pub fn exchange(
    stream: UnixStream,
    request: &Request,
    timeout: Option<Duration>,
) -> Result<Response<UnixStream>, HttpError> {
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    exchange_on(stream, request)
}

/// [`exchange`] on any stream (the tests use one end of a socket pair).
pub fn exchange_on<S: Read + Write>(
    mut stream: S,
    request: &Request,
) -> Result<Response<S>, HttpError> {
    write_request(&mut stream, request, &[("Connection", "close")])?;
    client::read_response(BufReader::new(stream), request.method)
}

/// What a request to take over its connection gets: the connection, now a
/// raw stream both ways (with what the engine sent past its head already
/// in the reader's buffer), or an ordinary answer (an error).
pub enum Hijack<S> {
    Upgraded(BufReader<S>),
    Refused(Response<S>),
}

/// Sends `request` asking to take over the connection (`Upgrade: tcp`, as
/// the engine's attach and exec start take it) and reads the answer's
/// head: `101 Switching Protocols`, or a `200` whose content type is one
/// of the engine's raw streams (an engine that switches without saying
/// so), is the connection handed over.
pub fn hijack_on<S: Read + Write>(
    mut stream: S,
    request: &Request,
) -> Result<Hijack<S>, HttpError> {
    let upgrade = [("Connection", "Upgrade"), ("Upgrade", "tcp")];
    write_request(&mut stream, request, &upgrade)?;
    let response = client::read_response(BufReader::new(stream), request.method)?;
    let raw = response.header("content-type").is_some_and(|t| {
        t.starts_with("application/vnd.docker.raw-stream")
            || t.starts_with("application/vnd.docker.multiplexed-stream")
    });
    if response.status == 101 || (response.status == 200 && raw) {
        return Ok(Hijack::Upgraded(response.body.into_inner()));
    }
    Ok(Hijack::Refused(response))
}

/// Writes `request` with the engine's fields, `connection`'s (how the
/// connection ends), the request's own, and its body's type.
fn write_request<S: Write>(
    stream: &mut S,
    request: &Request,
    connection: &[(&str, &str)],
) -> Result<(), HttpError> {
    let mut fields = vec![("Host", "docker"), ("User-Agent", "csi-agent")];
    fields.extend_from_slice(connection);
    fields.extend(request.headers.iter().map(|(n, v)| (*n, v.as_str())));
    if let Some((content_type, _)) = &request.body {
        fields.push(("Content-Type", content_type));
    }
    let body = request.body.as_ref().map(|(_, body)| body.as_slice());
    client::write_request(stream, request.method, &request.target, &fields, body)
}

/// Percent-encodes `text` for a query value or a path segment: every byte
/// but RFC 3986's unreserved characters, a space as `%20`.
pub fn encode(text: &str) -> String {
    encode::percent(text, encode::Space::Percent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::testing::{pieces, serve};
    use std::io;

    #[test]
    fn sends_the_request_line_headers_and_body() {
        let (stream, request, go) = serve(pieces(&["HTTP/1.1 204 No Content\r\n\r\n"]));
        drop(go);
        let mut req = Request::new("POST", "/v1.41/containers/create?name=a%20b".into());
        req.headers.push(("X-Registry-Auth", "abc".into()));
        req.body = Some(("application/json", b"{\"a\":1}".to_vec()));
        let response = exchange(stream, &req, Some(Duration::from_secs(5))).unwrap();
        assert_eq!(response.status, 204);
        assert_eq!(response.read_all(10).unwrap(), b"");
        assert_eq!(
            request.recv().unwrap(),
            "POST /v1.41/containers/create?name=a%20b HTTP/1.1\nHost: docker\n\
             User-Agent: csi-agent\nConnection: close\nX-Registry-Auth: abc\n\
             Content-Type: application/json\nContent-Length: 7\n\n{\"a\":1}"
        );
    }

    #[test]
    fn a_timeout_ends_a_read() {
        let (stream, _, go) = serve(pieces(&["HTTP/1.1 200 OK\r\n\r\n"]));
        let result = exchange(
            stream,
            &Request::new("GET", "/".into()),
            Some(Duration::from_millis(50)),
        );
        let err = result.err().unwrap();
        assert!(
            matches!(&err, HttpError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)),
            "{err:?}"
        );
        drop(go);
    }

    #[test]
    fn a_hijack_hands_over_the_connection_with_what_came_past_the_head() {
        let (stream, request, go) = serve(pieces(&[
            "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\nfirst bytes",
        ]));
        drop(go);
        let req = Request::new("POST", "/v1.41/exec/x/start".into());
        let Hijack::Upgraded(mut reader) = hijack_on(stream, &req).unwrap() else {
            panic!("not handed over");
        };
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"first bytes");
        let head = request.recv().unwrap();
        assert!(
            head.contains("Connection: Upgrade\nUpgrade: tcp\n"),
            "{head}"
        );
        // An engine that switches with a 200 of its raw stream.
        let (stream, _, go) = serve(pieces(&[
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\nraw",
        ]));
        drop(go);
        let Hijack::Upgraded(mut reader) = hijack_on(stream, &req).unwrap() else {
            panic!("not handed over");
        };
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"raw");
    }

    #[test]
    fn a_refused_hijack_is_an_answer_with_its_body() {
        let (stream, _, go) = serve(pieces(&[
            "HTTP/1.1 409 Conflict\r\nContent-Length: 13\r\n\r\n{\"message\":1}",
        ]));
        drop(go);
        let req = Request::new("POST", "/v1.41/exec/x/start".into());
        let Hijack::Refused(response) = hijack_on(stream, &req).unwrap() else {
            panic!("handed over");
        };
        assert_eq!(response.status, 409);
        assert_eq!(response.read_all(100).unwrap(), b"{\"message\":1}");
    }
}
