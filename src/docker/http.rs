//! HTTP/1.1 over a unix socket, as much as the engine's API needs: one
//! request per connection (`Connection: close`), a body of known length,
//! and a response whose body is framed by `Content-Length`, by the chunked
//! transfer coding, or by the end of the connection.
//!
//! The response's body is a reader ([`Body`]) that yields bytes as they
//! arrive, for the streams of `wait`, a pull's progress and logs; calls
//! that expect a document read it whole with [`Response::read_all`], which
//! bounds it, so a hostile engine cannot exhaust our memory. The head
//! (status line and headers) is bounded too.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The most bytes of a status line or one header line.
const MAX_LINE: usize = 16 * 1024;

/// The most header lines of a response (or trailer lines of a chunked
/// body).
const MAX_HEADERS: usize = 100;

/// What HTTP goes wrong with: the connection, or an answer that is not
/// HTTP as we speak it.
#[derive(Debug)]
pub enum HttpError {
    Io(io::Error),
    Protocol(String),
}

impl From<io::Error> for HttpError {
    fn from(err: io::Error) -> HttpError {
        HttpError::Io(err)
    }
}

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

/// A response's status and headers, and its body still on the wire.
pub struct Response<S> {
    pub status: u16,
    /// Header names in lower case, values trimmed.
    pub headers: Vec<(String, String)>,
    pub body: Body<S>,
}

impl<S: Read> Response<S> {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The whole body, if it has at most `limit` bytes.
    pub fn read_all(mut self, limit: usize) -> Result<Vec<u8>, HttpError> {
        let mut out = Vec::new();
        let read = (&mut self.body)
            .take(limit as u64 + 1)
            .read_to_end(&mut out)?;
        if read > limit {
            return Err(HttpError::Protocol(format!(
                "the answer's body is longer than {limit} bytes"
            )));
        }
        Ok(out)
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
    write_request(&mut stream, request, "close")?;
    read_response(BufReader::new(stream), request.method == "HEAD")
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
    write_request(&mut stream, request, "Upgrade\r\nUpgrade: tcp")?;
    let mut reader = BufReader::new(stream);
    let status_line = read_line(&mut reader)?;
    if parse_status(&status_line)? == 101 {
        read_headers(&mut reader)?;
        return Ok(Hijack::Upgraded(reader));
    }
    let response = response_after(status_line, reader, false)?;
    let raw = response.header("content-type").is_some_and(|t| {
        t.starts_with("application/vnd.docker.raw-stream")
            || t.starts_with("application/vnd.docker.multiplexed-stream")
    });
    if response.status == 200 && raw {
        return Ok(Hijack::Upgraded(response.body.reader));
    }
    Ok(Hijack::Refused(response))
}

fn write_request<S: Write>(stream: &mut S, request: &Request, connection: &str) -> io::Result<()> {
    stream.write_all(&head_of(request, connection))?;
    if let Some((_, body)) = &request.body {
        stream.write_all(body)?;
    }
    stream.flush()
}

/// The request line and headers, with `connection` as its `Connection`
/// header.
fn head_of(request: &Request, connection: &str) -> Vec<u8> {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: docker\r\nUser-Agent: csi-agent\r\nConnection: {connection}\r\n",
        request.method, request.target
    );
    for (name, value) in &request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match &request.body {
        Some((content_type, body)) => head.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        )),
        None if matches!(request.method, "POST" | "PUT") => head.push_str("Content-Length: 0\r\n"),
        None => {}
    }
    head.push_str("\r\n");
    head.into_bytes()
}

fn read_response<S: Read>(
    mut reader: BufReader<S>,
    head_only: bool,
) -> Result<Response<S>, HttpError> {
    let mut status_line = read_line(&mut reader)?;
    // An interim answer (`100 Continue`) comes before the real one.
    while status_line.starts_with("HTTP/1.1 1") || status_line.starts_with("HTTP/1.0 1") {
        read_headers(&mut reader)?;
        status_line = read_line(&mut reader)?;
    }
    response_after(status_line, reader, head_only)
}

/// The response whose status line is `status_line`: its headers, and its
/// body's framing.
fn response_after<S: Read>(
    status_line: String,
    mut reader: BufReader<S>,
    head_only: bool,
) -> Result<Response<S>, HttpError> {
    let status = parse_status(&status_line)?;
    let headers = read_headers(&mut reader)?;
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let chunked = find("transfer-encoding").is_some_and(|v| {
        v.to_ascii_lowercase()
            .split(',')
            .any(|c| c.trim() == "chunked")
    });
    let framing = if head_only || status == 204 || status == 304 {
        Framing::Length(0)
    } else if chunked {
        Framing::Chunked {
            left: 0,
            started: false,
            done: false,
        }
    } else if let Some(length) = find("content-length") {
        let length = length.parse::<u64>().map_err(|_| {
            HttpError::Protocol(format!("a Content-Length that is not a number: {length:?}"))
        })?;
        Framing::Length(length)
    } else {
        Framing::Eof
    };
    Ok(Response {
        status,
        headers,
        body: Body { reader, framing },
    })
}

fn parse_status(line: &str) -> Result<u16, HttpError> {
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(HttpError::Protocol(format!(
            "not an HTTP/1.x status line: {:?}",
            shorten(line)
        )));
    }
    code.parse::<u16>().map_err(|_| {
        HttpError::Protocol(format!(
            "a status that is not a number: {:?}",
            shorten(line)
        ))
    })
}

fn read_headers<S: Read>(reader: &mut BufReader<S>) -> Result<Vec<(String, String)>, HttpError> {
    let mut headers = Vec::new();
    loop {
        let line = read_line(reader)?;
        if line.is_empty() {
            return Ok(headers);
        }
        if headers.len() == MAX_HEADERS {
            return Err(HttpError::Protocol(format!(
                "more than {MAX_HEADERS} header lines"
            )));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(HttpError::Protocol(format!(
                "a header line without ':': {:?}",
                shorten(&line)
            )));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
}

/// One line without its CRLF (or bare LF), at most [`MAX_LINE`] bytes.
fn read_line<S: Read>(reader: &mut BufReader<S>) -> Result<String, HttpError> {
    let mut line = Vec::new();
    let read = reader
        .by_ref()
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut line)?;
    if read == 0 {
        return Err(HttpError::Protocol(
            "the connection closed before the answer was complete".to_string(),
        ));
    }
    if line.last() != Some(&b'\n') {
        return Err(match read > MAX_LINE {
            true => HttpError::Protocol(format!("a line longer than {MAX_LINE} bytes")),
            false => {
                HttpError::Protocol("the connection closed in the middle of a line".to_string())
            }
        });
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line)
        .map_err(|_| HttpError::Protocol("a header line that is not UTF-8".to_string()))
}

fn shorten(text: &str) -> &str {
    match text.char_indices().nth(80) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// How the body's end is known.
#[derive(Debug)]
enum Framing {
    /// This many bytes are left.
    Length(u64),
    /// Chunks: `left` bytes of the current one are left; `started` once
    /// the first size line is read (each later one follows a CRLF);
    /// `done` after the last (empty) chunk and its trailers.
    Chunked {
        left: u64,
        started: bool,
        done: bool,
    },
    /// Until the connection closes.
    Eof,
}

/// A response's body as it arrives: each read returns what the engine has
/// sent so far (at least one byte), 0 at the body's end.
pub struct Body<S> {
    reader: BufReader<S>,
    framing: Framing,
}

impl<S: Read> Body<S> {
    /// Starts the next chunk: reads its size line (after the CRLF that
    /// ends the chunk before); after the last chunk reads the trailers.
    /// Returns the new chunk's size, 0 at the end.
    fn next_chunk(&mut self, first: bool) -> io::Result<u64> {
        let protocol = |err: HttpError| match err {
            HttpError::Io(err) => err,
            HttpError::Protocol(message) => io::Error::new(io::ErrorKind::InvalidData, message),
        };
        if !first {
            let end = read_line(&mut self.reader).map_err(protocol)?;
            if !end.is_empty() {
                return Err(protocol(HttpError::Protocol(
                    "a chunk longer than its size".to_string(),
                )));
            }
        }
        let line = read_line(&mut self.reader).map_err(protocol)?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(size, 16).map_err(|_| {
            protocol(HttpError::Protocol(format!(
                "a chunk size that is not hex: {:?}",
                shorten(&line)
            )))
        })?;
        if size == 0 {
            read_headers(&mut self.reader).map_err(protocol)?;
        }
        Ok(size)
    }
}

impl<S: Read> Read for Body<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match &mut self.framing {
            Framing::Length(0) => Ok(0),
            Framing::Length(left) => {
                let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let read = self.reader.read(&mut buf[..want])?;
                if read == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the connection closed with {left} bytes of the body to come"),
                    ));
                }
                *left -= read as u64;
                Ok(read)
            }
            Framing::Eof => self.reader.read(buf),
            Framing::Chunked { done: true, .. } => Ok(0),
            &mut Framing::Chunked { left, started, .. } => {
                let mut left = left;
                if left == 0 {
                    left = self.next_chunk(!started)?;
                    if left == 0 {
                        self.framing = Framing::Chunked {
                            left: 0,
                            started: true,
                            done: true,
                        };
                        return Ok(0);
                    }
                }
                let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                let read = self.reader.read(&mut buf[..want])?;
                if read == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the connection closed in the middle of a chunk",
                    ));
                }
                self.framing = Framing::Chunked {
                    left: left - read as u64,
                    started: true,
                    done: false,
                };
                Ok(read)
            }
        }
    }
}

/// Percent-encodes `text` for a query value or a path segment: every byte
/// but RFC 3986's unreserved characters, a space as `%20`.
pub fn encode(text: &str) -> String {
    encode::percent(text, encode::Space::Percent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread;

    /// A fake engine on the other end of a socket pair: reads the request
    /// head and body, sends it back on a channel, then writes `pieces` one
    /// at a time, each after the test says so on `go` (or at once when
    /// the test drops its sender).
    fn serve(pieces: Vec<Vec<u8>>) -> (UnixStream, mpsc::Receiver<String>, mpsc::Sender<()>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (request_tx, request_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        thread::spawn(move || {
            let mut theirs = theirs;
            let mut reader = BufReader::new(theirs.try_clone().unwrap());
            let mut request = String::new();
            let mut length = 0;
            loop {
                let line = read_line(&mut reader).unwrap();
                if let Some(n) = line.strip_prefix("Content-Length: ") {
                    length = n.parse().unwrap();
                }
                request.push_str(&line);
                request.push('\n');
                if line.is_empty() {
                    break;
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            request.push_str(&String::from_utf8(body).unwrap());
            let _ = request_tx.send(request);
            for piece in pieces {
                let _ = go_rx.recv();
                theirs.write_all(&piece).unwrap();
                theirs.flush().unwrap();
            }
        });
        (ours, request_rx, go_tx)
    }

    fn pieces(parts: &[&str]) -> Vec<Vec<u8>> {
        parts.iter().map(|p| p.as_bytes().to_vec()).collect()
    }

    fn at_once(parts: &[&str]) -> Response<UnixStream> {
        let (stream, _, go) = serve(pieces(parts));
        drop(go);
        exchange(
            stream,
            &Request::new("GET", "/x".into()),
            Some(Duration::from_secs(5)),
        )
        .unwrap()
    }

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
    fn reads_a_body_by_its_content_length_split_across_reads() {
        let response = at_once(&[
            "HTTP/1.1 200 OK\r\nContent-Le",
            "ngth: 11\r\nContent-Type: application/json\r",
            "\n\r\nhello",
            " world and more that is not the body",
        ]);
        assert_eq!(response.status, 200);
        assert_eq!(response.header("content-type"), Some("application/json"));
        assert_eq!(response.read_all(100).unwrap(), b"hello world");
    }

    #[test]
    fn decodes_chunks_with_extensions_and_trailers() {
        let response = at_once(&[
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "5;ext=1\r\nhel",
            "lo\r\n",
            "6\r\n world\r\n1",
            "0\r\n0123456789abcdef\r\n0\r\nTrailer: x\r\n\r\n",
        ]);
        assert_eq!(
            response.read_all(100).unwrap(),
            b"hello world0123456789abcdef"
        );
    }

    #[test]
    fn a_chunk_longer_than_its_size_is_an_error() {
        let response = at_once(&[
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "2\r\nabc\r\n0\r\n\r\n",
        ]);
        let err = response.read_all(100).unwrap_err();
        assert!(
            matches!(&err, HttpError::Io(e) if e.to_string().contains("longer than its size")),
            "{err:?}"
        );
    }

    #[test]
    fn reads_until_the_end_without_a_length() {
        let response = at_once(&["HTTP/1.0 200 OK\r\n\r\nall ", "of it"]);
        assert_eq!(response.read_all(100).unwrap(), b"all of it");
    }

    #[test]
    fn bounds_the_body_and_the_head() {
        let response = at_once(&["HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"]);
        let err = response.read_all(10).unwrap_err();
        assert!(
            matches!(&err, HttpError::Protocol(m) if m.contains("longer than 10")),
            "{err:?}"
        );
        let long = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(MAX_LINE));
        let (stream, _, go) = serve(vec![long.into_bytes()]);
        drop(go);
        let err = exchange(stream, &Request::new("GET", "/".into()), None)
            .err()
            .unwrap();
        assert!(
            matches!(&err, HttpError::Protocol(m) if m.contains("longer than")),
            "{err:?}"
        );
    }

    #[test]
    fn refuses_what_is_not_http() {
        for text in ["SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 abc OK\r\n\r\n", ""] {
            let (stream, _, go) = serve(vec![text.as_bytes().to_vec()]);
            drop(go);
            let result = exchange(stream, &Request::new("GET", "/".into()), None);
            assert!(matches!(result, Err(HttpError::Protocol(_))), "{text:?}");
        }
    }

    #[test]
    fn streams_each_chunk_as_it_arrives() {
        let (stream, _, go) = serve(pieces(&[
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "5\r\nfirst\r\n",
            "6\r\nsecond\r\n0\r\n\r\n",
        ]));
        go.send(()).unwrap();
        let mut response = exchange(stream, &Request::new("GET", "/".into()), None).unwrap();
        go.send(()).unwrap();
        let mut buf = [0u8; 64];
        // The second chunk is not sent until after this read returns.
        let read = response.body.read(&mut buf).unwrap();
        assert_eq!(&buf[..read], b"first");
        go.send(()).unwrap();
        let mut rest = Vec::new();
        response.body.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"second");
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
