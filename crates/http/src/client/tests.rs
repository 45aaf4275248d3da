//! The client's codec: answers split every way, each bound hit by an
//! answer built to pass it, and requests written or refused.

use std::io::{self, BufReader, Read};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::*;
use crate::testing::{pieces, serve};

/// Sends `GET target` on `stream` and reads the answer's head.
fn exchange(
    mut stream: UnixStream,
    target: &str,
) -> Result<Response<BufReader<UnixStream>>, Error> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write_request(&mut stream, "GET", target, &[("Host", "test")], None)?;
    read_response(BufReader::new(stream), "GET")
}

fn at_once(parts: &[&str]) -> Response<BufReader<UnixStream>> {
    let (stream, _, go) = serve(pieces(parts));
    drop(go);
    exchange(stream, "/x").unwrap()
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
        matches!(&err, Error::Protocol(_) if err.to_string().contains("longer than its size")),
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
        matches!(&err, Error::Protocol(_) if err.to_string().contains("longer than 10")),
        "{err:?}"
    );
    let long = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(MAX_LINE));
    let (stream, _, go) = serve(vec![long.into_bytes()]);
    drop(go);
    let err = exchange(stream, "/").err().unwrap();
    assert!(
        matches!(&err, Error::Protocol(_) if err.to_string().contains("longer than")),
        "{err:?}"
    );
}

#[test]
fn refuses_what_is_not_http() {
    for text in ["SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 abc OK\r\n\r\n", ""] {
        let (stream, _, go) = serve(vec![text.as_bytes().to_vec()]);
        drop(go);
        let result = exchange(stream, "/");
        assert!(matches!(result, Err(Error::Protocol(_))), "{text:?}");
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
    let mut response = exchange(stream, "/").unwrap();
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

/// A connection that hands over at most `most` bytes a read.
struct Trickle<'a> {
    bytes: &'a [u8],
    most: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.most).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

/// The answer `bytes` read whole, at most `limit` bytes of body.
fn answer(bytes: &[u8], limit: usize) -> Result<(u16, Vec<u8>), Error> {
    let response = read_response(bytes, "GET")?;
    let status = response.status;
    Ok((status, response.read_all(limit)?))
}

fn refusal(bytes: &[u8], limit: usize) -> Protocol {
    match answer(bytes, limit) {
        Err(Error::Protocol(protocol)) => protocol,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn an_answer_split_anywhere_reads_the_same() {
    let text = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                 5;name=\"quoted; value\";x\r\nhello\r\n6 \r\n world\r\n0;last\r\nTrailer: t\r\n\r\n";
    for most in 1..=9 {
        for capacity in [1, 2, 3, 8, 64] {
            let reader = BufReader::with_capacity(capacity, Trickle { bytes: text, most });
            let response = read_response(reader, "GET").unwrap();
            assert_eq!(response.status, 200, "{most} {capacity}");
            assert_eq!(response.read_all(100).unwrap(), b"hello world");
        }
    }
}

#[test]
fn interim_answers_are_skipped_and_a_switch_hands_over_the_rest() {
    let text = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
                 HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    assert_eq!(answer(text, 10).unwrap(), (200, b"ok".to_vec()));
    let text: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\n\r\nraw bytes";
    let response = read_response(text, "POST").unwrap();
    assert_eq!(response.status, 101);
    let mut rest = Vec::new();
    response.body.into_inner().read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"raw bytes");
}

#[test]
fn answers_without_a_body_have_none_whatever_their_fields_say() {
    for (status, method) in [(200, "HEAD"), (204, "GET"), (304, "GET")] {
        let text = format!("HTTP/1.1 {status} X\r\nContent-Length: 10\r\n\r\nnot a body");
        let response = read_response(text.as_bytes(), method).unwrap();
        assert_eq!(response.read_all(100).unwrap(), b"", "{status} {method}");
    }
}

#[test]
fn the_framing_is_chunked_alone_or_one_length() {
    let both = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
    assert_eq!(answer(both, 10).unwrap().1, b"ok");
    let same = b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nok";
    assert_eq!(answer(same, 10).unwrap().1, b"ok");
    for fields in [
        "Content-Length: 2\r\nContent-Length: 3",
        "Content-Length: +2",
        "Content-Length: 0x2",
        "Content-Length: 99999999999999999999999",
    ] {
        let text = format!("HTTP/1.1 200 OK\r\n{fields}\r\n\r\nok");
        let err = refusal(text.as_bytes(), 10);
        assert!(matches!(err, Protocol::BadLength(_)), "{fields}: {err:?}");
    }
    for coding in ["gzip, chunked", "chunked, chunked", "identity", ""] {
        let text = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: {coding}\r\n\r\n0\r\n\r\n");
        let err = refusal(text.as_bytes(), 10);
        assert!(
            matches!(err, Protocol::TransferCoding(_)),
            "{coding}: {err:?}"
        );
    }
}

#[test]
fn status_lines_are_http_1_and_three_digits() {
    let (status, _) = answer(b"HTTP/1.1 204\r\n\r\n", 10).unwrap();
    assert_eq!(status, 204);
    let response = read_response(&b"HTTP/1.0 404 Not Found\r\n\r\n"[..], "GET").unwrap();
    assert_eq!(
        (response.status, response.reason.as_str()),
        (404, "Not Found")
    );
    for line in [
        "HTTP/2 200 OK",
        "HTTP/1.1x 200 OK",
        "SSH-2.0-OpenSSH",
        "http/1.1 200 OK",
    ] {
        let text = format!("{line}\r\n\r\n");
        let err = refusal(text.as_bytes(), 10);
        assert!(matches!(err, Protocol::NotHttp(_)), "{line}: {err:?}");
    }
    for line in [
        "HTTP/1.1 0200 OK",
        "HTTP/1.1 +20 OK",
        "HTTP/1.1 099 Low",
        "HTTP/1.1  200 OK",
        "HTTP/1.1 200 O\x1bK",
    ] {
        let text = format!("{line}\r\n\r\n");
        let err = refusal(text.as_bytes(), 10);
        assert!(matches!(err, Protocol::BadStatus(_)), "{line:?}: {err:?}");
    }
}

#[test]
fn field_lines_are_token_colon_value_and_a_bad_value_is_not_shown() {
    let response = read_response(
        &b"HTTP/1.1 200 OK\r\nX-A:\t spaced \t\r\nEmpty:\r\n\r\n"[..],
        "GET",
    )
    .unwrap();
    assert_eq!(
        response.headers[0],
        ("x-a".to_string(), "spaced".to_string())
    );
    assert_eq!(response.header("EMPTY"), Some(""));
    for line in [
        "no colon",
        "Bad Name: x",
        "Name : x",
        " folded",
        ": no name",
    ] {
        let text = format!("HTTP/1.1 200 OK\r\n{line}\r\n\r\n");
        let err = refusal(text.as_bytes(), 10);
        assert!(matches!(err, Protocol::BadField(_)), "{line:?}: {err:?}");
    }
    let err = refusal(b"HTTP/1.1 200 OK\r\nSet-Cookie: s3cret\x00\r\n\r\n", 10);
    assert_eq!(err, Protocol::BadField("Set-Cookie".to_string()));
    assert!(!err.to_string().contains("s3cret"), "{err}");
    let err = refusal(b"HTTP/1.1 200 OK\r\nX: \xff\r\n\r\n", 10);
    assert_eq!(err, Protocol::NotText(Part::Head));
}

#[test]
fn a_connection_closed_early_says_where() {
    assert_eq!(refusal(b"", 10), Protocol::NoAnswer);
    assert!(Protocol::NoAnswer.to_string().contains("before answering"));
    assert_eq!(refusal(b"HTTP/1.1 200", 10), Protocol::Cut(Part::Head));
    assert_eq!(
        refusal(b"HTTP/1.1 200 OK\r\nX: y\r\n", 10),
        Protocol::Cut(Part::Head)
    );
    let err = refusal(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello", 100);
    assert_eq!(err, Protocol::CutBody { read: 5, length: 9 });
    assert!(err.to_string().contains("after 5 of 9"), "{err}");
    let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (rest, cut) in [
        ("5\r\nhel", Protocol::CutChunk),
        ("5\r\nhello", Protocol::CutChunk),
        ("5\r\nhello\r", Protocol::CutChunk),
        ("5", Protocol::Cut(Part::ChunkSize)),
        ("0\r\nTrailer: x", Protocol::Cut(Part::Trailers)),
    ] {
        let text = format!("{chunked}{rest}");
        assert_eq!(refusal(text.as_bytes(), 100), cut, "{rest:?}");
    }
}

#[test]
fn chunk_sizes_are_hex_within_64_bits_and_their_data_ends_with_crlf() {
    let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    let text = format!("{chunked}00000000000000000002\r\nok\r\n0\r\n\r\n");
    assert_eq!(answer(text.as_bytes(), 10).unwrap().1, b"ok");
    for size in ["zz", "", " 2", "-2", "+2", "0x2", ";ext"] {
        let text = format!("{chunked}{size}\r\nok\r\n0\r\n\r\n");
        let err = refusal(text.as_bytes(), 10);
        assert!(
            matches!(err, Protocol::BadChunkSize(_)),
            "{size:?}: {err:?}"
        );
        assert!(err.to_string().contains("chunk size"), "{err}");
    }
    let text = format!("{chunked}10000000000000000\r\n");
    let err = refusal(text.as_bytes(), usize::MAX);
    assert!(matches!(err, Protocol::ChunkSizeTooLarge(_)), "{err:?}");
    for after in ["XX", "\n0", "x\r\n"] {
        let text = format!("{chunked}2\r\nok{after}\r\n0\r\n\r\n");
        assert_eq!(
            refusal(text.as_bytes(), 10),
            Protocol::ChunkOverrun,
            "{after:?}"
        );
    }
}

#[test]
fn a_body_past_its_limit_is_refused_before_its_announced_bytes_are_read() {
    // Announced, never sent: refused from the announcement alone.
    let err = refusal(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n", 10);
    assert_eq!(err, Protocol::BodyTooLong { limit: 10 });
    let chunked =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nffffffff\r\n";
    assert_eq!(refusal(chunked, 10), Protocol::BodyTooLong { limit: 10 });
    // Without a length, one byte past the limit.
    let endless = b"HTTP/1.0 200 OK\r\n\r\n".chain(io::repeat(b'x'));
    let endless = read_response(BufReader::new(endless), "GET").unwrap();
    let err = endless.read_all(1000).unwrap_err();
    assert!(err.to_string().contains("longer than 1000 bytes"), "{err}");
    // At the limit, whole.
    let text = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    assert_eq!(answer(text, 5).unwrap().1, b"hello");
    let mut out = Vec::new();
    let mut body = read_response(&b"HTTP/1.0 200 OK\r\n\r\nabcd"[..], "GET")
        .unwrap()
        .body;
    assert!(body.copy_to(&mut out, 3).is_err());
    let mut body = read_response(&b"HTTP/1.0 200 OK\r\n\r\nabc"[..], "GET")
        .unwrap()
        .body;
    assert_eq!(body.copy_to(&mut out, 3).unwrap(), 3);
}

#[test]
fn a_head_that_never_ends_is_refused_at_each_bound() {
    // One endless line: MAX_LINE.
    let endless = b"HTTP/1.1 200 OK\r\nX: ".chain(io::repeat(b'a'));
    let err = refusal_of(read_response(BufReader::new(endless), "GET"));
    assert_eq!(err, Protocol::LineTooLong(Part::Head));
    assert!(err.to_string().contains("longer than 16384 bytes"), "{err}");
    // Lines within MAX_LINE, more than MAX_HEAD in all, fewer than
    // MAX_FIELDS fields.
    let field = format!("X: {}\r\n", "a".repeat(1000));
    let endless = b"HTTP/1.1 200 OK\r\n".chain(Cycle(field.into_bytes(), 0));
    let err = refusal_of(read_response(BufReader::new(endless), "GET"));
    assert_eq!(err, Protocol::HeadTooLong(Part::Head));
    assert!(err.to_string().contains("more than 65536 bytes"), "{err}");
    // Short fields: MAX_FIELDS.
    let endless = b"HTTP/1.1 200 OK\r\n".chain(Cycle(b"X: y\r\n".to_vec(), 0));
    let err = refusal_of(read_response(BufReader::new(endless), "GET"));
    assert_eq!(err, Protocol::TooManyFields(Part::Head));
    assert!(err.to_string().contains("more than 100 fields"), "{err}");
    // Endless interim answers: MAX_HEAD, shared by them all.
    let endless = Cycle(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(), 0);
    let err = refusal_of(read_response(BufReader::new(endless), "GET"));
    assert_eq!(err, Protocol::HeadTooLong(Part::Head));
}

#[test]
fn chunked_bodies_that_never_end_their_lines_are_refused() {
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    // An endless extension: MAX_LINE.
    let endless = chunked.chain(&b"1;x="[..]).chain(io::repeat(b'a'));
    let response = read_response(BufReader::new(endless), "GET").unwrap();
    let err = refusal_of(response.read_all(usize::MAX).map(|_| ()));
    assert_eq!(err, Protocol::LineTooLong(Part::ChunkSize));
    // Endless trailers: MAX_FIELDS, then MAX_HEAD.
    let endless = chunked
        .chain(&b"0\r\n"[..])
        .chain(Cycle(b"T: t\r\n".to_vec(), 0));
    let response = read_response(BufReader::new(endless), "GET").unwrap();
    let err = refusal_of(response.read_all(10).map(|_| ()));
    assert_eq!(err, Protocol::TooManyFields(Part::Trailers));
    let trailer = format!("T: {}\r\n", "t".repeat(2000));
    let endless = chunked
        .chain(&b"0\r\n"[..])
        .chain(Cycle(trailer.into_bytes(), 0));
    let response = read_response(BufReader::new(endless), "GET").unwrap();
    let err = refusal_of(response.read_all(10).map(|_| ()));
    assert_eq!(err, Protocol::HeadTooLong(Part::Trailers));
    // Endless empty chunks are not a thing: a size of 0 is the last.
    let text = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n0\r\n\r\n";
    assert_eq!(answer(text, 10).unwrap().1, b"");
}

/// `bytes` over and over from `at`, without end.
struct Cycle(Vec<u8>, usize);

impl Read for Cycle {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        for byte in buf.iter_mut() {
            *byte = self.0[self.1];
            self.1 = (self.1 + 1) % self.0.len();
        }
        Ok(buf.len())
    }
}

fn refusal_of<T>(result: Result<T, Error>) -> Protocol {
    match result {
        Err(Error::Protocol(protocol)) => protocol,
        Err(err) => panic!("not a protocol error: {err:?}"),
        Ok(_) => panic!("not refused"),
    }
}

#[test]
fn a_request_is_its_line_its_fields_in_order_and_its_length() {
    let mut out = Vec::new();
    let fields = [("Host", "docker"), ("X-Registry-Auth", "abc")];
    write_request(&mut out, "POST", "/v1/x?a=%20", &fields, Some(b"{}")).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST /v1/x?a=%20 HTTP/1.1\r\nHost: docker\r\nX-Registry-Auth: abc\r\nContent-Length: 2\r\n\r\n{}"
    );
    let mut out = Vec::new();
    write_request(&mut out, "PUT", "/x", &[], None).unwrap();
    assert_eq!(out, b"PUT /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    let mut out = Vec::new();
    write_request(&mut out, "GET", "/x", &[], None).unwrap();
    assert_eq!(out, b"GET /x HTTP/1.1\r\n\r\n");
}

#[test]
fn a_request_that_would_break_its_lines_is_refused_before_a_byte_is_written() {
    type Fields<'a> = &'a [(&'a str, &'a str)];
    let mut out = Vec::new();
    let cases: [(&str, &str, Fields); 6] = [
        ("GE T", "/", &[]),
        ("", "/", &[]),
        ("GET", "/a b?token=s3cret", &[]),
        ("GET", "/a\r\nEvil: 1", &[]),
        ("GET", "/", &[("X", "a\r\nEvil: s3cret")]),
        ("GET", "/", &[("X\r\nEvil", "1")]),
    ];
    for (method, target, fields) in cases {
        let err = write_request(&mut out, method, target, fields, None).unwrap_err();
        assert!(matches!(err, Error::Request(_)), "{err:?}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }
    assert!(out.is_empty());
    assert_eq!(check_field("X", "a\nb"), Err(BadField::Value));
    assert!(BadField::Value.to_string().contains("line break"));
    assert_eq!(check_field("X:", "a"), Err(BadField::Name));
    assert_eq!(check_field("X-Token", "s3cret value"), Ok(()));
}
