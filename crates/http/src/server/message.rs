//! Requests and answers: a request's head parsed from its bytes, and an
//! answer written as HTTP/1.1 bytes that close the connection.

use std::fmt;

use crate::syntax::is_token;

/// A complete request: its head and its whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method as sent (`GET`, `POST`, ...).
    pub method: String,
    /// The request target, an absolute path with its query if any.
    pub target: String,
    /// The header fields in the order sent, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body, `Content-Length` bytes (empty without one).
    pub body: Vec<u8>,
    /// The process that connected, for a unix socket's client the kernel
    /// can name (`SO_PEERCRED`); none over TCP.
    pub peer_pid: Option<u32>,
}

impl Request {
    /// The target's path, without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or(&self.target)
    }

    /// The first header field named `name` (any case), trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An answer; every answer has a `Content-Length` and closes its
/// connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    /// An answer of `status` with `body` of type `content_type`.
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
        }
    }

    /// A plain-text answer.
    pub fn text(status: u16, body: &str) -> Response {
        Response::new(status, "text/plain; charset=utf-8", body)
    }

    /// The same answer with one more header field.
    pub fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The bytes sent: the head, and the body unless `head_only` (the
    /// answer to a `HEAD`, which keeps the body's length).
    pub(super) fn into_bytes(self, head_only: bool) -> Vec<u8> {
        let mut out = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str(&format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.body.len()
        ));
        let mut out = out.into_bytes();
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// The reason phrase of the status codes servers commonly send; any other
/// is sent with a generic one, which clients do not read (RFC 9112, 4).
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// Why a request's head is refused, with the status that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Not an HTTP/1.x request head: 400.
    Malformed,
    /// A version other than 1.0 and 1.1: 505.
    Version,
    /// A transfer coding (chunked bodies are not read): 501.
    TransferCoding,
    /// A body longer than the server's `max_body`: 413.
    BodyTooLarge,
    /// A head longer than the server's `max_head`: 431.
    HeadTooLarge,
}

impl Refusal {
    pub(super) fn response(self) -> Response {
        let (status, text) = match self {
            Refusal::Malformed => (400, "bad request\n"),
            Refusal::Version => (505, "HTTP/1.0 and HTTP/1.1 only\n"),
            Refusal::TransferCoding => (501, "transfer codings are not supported\n"),
            Refusal::BodyTooLarge => (413, "the body is longer than max_body\n"),
            Refusal::HeadTooLarge => (431, "the request head is longer than max_head\n"),
        };
        Response::text(status, text)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Refusal::Malformed => "a malformed request head",
            Refusal::Version => "an HTTP version other than 1.0 and 1.1",
            Refusal::TransferCoding => "a transfer coding",
            Refusal::BodyTooLarge => "a body longer than max_body",
            Refusal::HeadTooLarge => "a head longer than max_head",
        };
        f.write_str(text)
    }
}

/// A parsed head: the request without its body, and how long the body is.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub request: Request,
    pub body_len: usize,
    /// The client waits for `100 Continue` before sending the body.
    pub expects_continue: bool,
}

/// Where a head ends in `buf`: the index of its blank line's start and
/// the index after it. Only the bytes from `from` on are new, so the
/// search starts a few bytes before them: each byte is looked at a
/// bounded number of times however the head arrives.
pub(super) fn head_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let start = from.saturating_sub(3);
    let mut i = start;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}

/// Parses a request head (without its blank line) for a server whose
/// bodies are at most `max_body` bytes.
pub(super) fn parse_head(head: &[u8], max_body: usize) -> Result<Head, Refusal> {
    let head = std::str::from_utf8(head).map_err(|_| Refusal::Malformed)?;
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed);
    };
    if !is_token(method) || !target.starts_with('/') {
        return Err(Refusal::Malformed);
    }
    if !version.starts_with("HTTP/") {
        return Err(Refusal::Malformed);
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(Refusal::Version);
    }
    let mut headers = Vec::new();
    for line in lines {
        // A folded line (obsolete) or a field without a name.
        let (name, value) = line.split_once(':').ok_or(Refusal::Malformed)?;
        if !is_token(name) {
            return Err(Refusal::Malformed);
        }
        headers.push((
            name.to_string(),
            value.trim_matches([' ', '\t']).to_string(),
        ));
    }
    let request = Request {
        method: method.to_string(),
        target: target.to_string(),
        headers,
        body: Vec::new(),
        peer_pid: None,
    };
    if request.header("Transfer-Encoding").is_some() {
        return Err(Refusal::TransferCoding);
    }
    let mut body_len = None;
    for (_, value) in request
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Content-Length"))
    {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Refusal::Malformed);
        }
        // Too many digits for a usize is too long for any bound.
        let len = value.parse::<usize>().unwrap_or(usize::MAX);
        if body_len.is_some_and(|other| other != len) {
            return Err(Refusal::Malformed);
        }
        body_len = Some(len);
    }
    let body_len = body_len.unwrap_or(0);
    if body_len > max_body {
        return Err(Refusal::BodyTooLarge);
    }
    let expects_continue = body_len > 0
        && request
            .header("Expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    Ok(Head {
        request,
        body_len,
        expects_continue,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(head: &str) -> Result<Head, Refusal> {
        parse_head(head.as_bytes(), 100)
    }

    #[test]
    fn a_head_gives_method_target_headers_and_body_length() {
        let head = parsed(
            "POST /VolumeDriver.Mount?x=1 HTTP/1.1\r\nHost: a\r\ncontent-length:  12 \r\nX-Empty:",
        )
        .unwrap();
        assert_eq!(head.request.method, "POST");
        assert_eq!(head.request.path(), "/VolumeDriver.Mount");
        assert_eq!(head.request.target, "/VolumeDriver.Mount?x=1");
        assert_eq!(head.request.header("CONTENT-LENGTH"), Some("12"));
        assert_eq!(head.request.header("x-empty"), Some(""));
        assert_eq!(head.body_len, 12);
        assert!(!head.expects_continue);
        let get = parsed("GET /metrics HTTP/1.0").unwrap();
        assert_eq!((get.request.path(), get.body_len), ("/metrics", 0));
    }

    #[test]
    fn heads_that_are_not_http_1_are_refused() {
        for bad in [
            "GET /metrics",
            "\x16\x03\x01 tls",
            "GET metrics HTTP/1.1",
            "GET  /metrics HTTP/1.1",
            "G(T /metrics HTTP/1.1",
            "GET /metrics HTTP/1.1\r\n folded",
            "GET /metrics HTTP/1.1\r\n: no name",
            "GET /metrics HTTP/1.1\r\nContent-Length: -1",
            "GET /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2",
            "GET /metrics SPDY/3",
        ] {
            assert_eq!(parsed(bad).unwrap_err(), Refusal::Malformed, "{bad:?}");
        }
        assert_eq!(parsed("GET / HTTP/2.0").unwrap_err(), Refusal::Version);
        assert_eq!(
            parsed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked").unwrap_err(),
            Refusal::TransferCoding
        );
    }

    #[test]
    fn a_body_longer_than_max_body_is_refused_from_its_length() {
        assert_eq!(
            parsed("POST / HTTP/1.1\r\nContent-Length: 100")
                .unwrap()
                .body_len,
            100
        );
        assert_eq!(
            parsed("POST / HTTP/1.1\r\nContent-Length: 101").unwrap_err(),
            Refusal::BodyTooLarge
        );
        assert_eq!(
            parsed("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999").unwrap_err(),
            Refusal::BodyTooLarge
        );
        let head = parsed("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5").unwrap();
        assert!(head.expects_continue);
    }

    #[test]
    fn the_end_of_a_head_is_found_in_new_bytes_only() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody", 0), Some((15, 18)));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody", 0), Some((14, 16)));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r", 0), None);
        // The blank line split across two reads.
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\n", 17), Some((15, 18)));
    }

    #[test]
    fn an_answer_has_its_length_and_closes() {
        let bytes = Response::text(404, "nope\n")
            .with_header("Allow", "GET")
            .into_bytes(false);
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nAllow: GET\r\nContent-Length: 5\r\nConnection: close\r\n\r\nnope\n"
        );
        let head = Response::text(200, "body").into_bytes(true);
        assert!(String::from_utf8(head)
            .unwrap()
            .ends_with("Content-Length: 4\r\nConnection: close\r\n\r\n"));
    }
}
