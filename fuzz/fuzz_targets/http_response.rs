//! Fuzzes the HTTP client codec's reading of an answer (`crates/http`):
//! the response-head parser and the body's framing, the chunked decoder
//! above all. The first byte picks how the answer arrives (at most 1 to 16
//! bytes a read) and the request's method (`GET` or `HEAD`); the rest is
//! the answer. No answer may panic the codec or take more than the body's
//! limit, and however it is split it must read the same as read whole.

#![no_main]

use std::io::{self, BufReader, Read};

use http::client::{self, Protocol};
use libfuzzer_sys::fuzz_target;

/// The body's limit: small, so that bodies past it are found.
const LIMIT: usize = 64 * 1024;

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

type Answer = (u16, Vec<(String, String)>, Vec<u8>);

fn read(answer: &[u8], most: usize, method: &str) -> Result<Answer, Protocol> {
    let protocol = |err: client::Error| match err {
        client::Error::Protocol(protocol) => protocol,
        // Memory neither fails nor times out, and nothing is written.
        err => panic!("not a protocol error: {err:?}"),
    };
    let reader = BufReader::new(Trickle {
        bytes: answer,
        most,
    });
    let response = client::read_response(reader, method).map_err(protocol)?;
    let status = response.status;
    let headers = response.headers.clone();
    let body = response.read_all(LIMIT).map_err(protocol)?;
    Ok((status, headers, body))
}

fuzz_target!(|data: &[u8]| {
    let Some((&how, answer)) = data.split_first() else {
        return;
    };
    let most = usize::from(how & 0x0f) + 1;
    let method = if how & 0x10 != 0 { "HEAD" } else { "GET" };
    let whole = read(answer, usize::MAX, method);
    if let Ok((status, headers, body)) = &whole {
        assert!((100..1000).contains(status), "status {status}");
        assert!(body.len() <= LIMIT, "a body of {} bytes", body.len());
        for (name, _) in headers {
            assert!(!name.is_empty() && !name.bytes().any(|b| b.is_ascii_uppercase()));
        }
    }
    assert_eq!(
        read(answer, most, method),
        whole,
        "split into reads of {most}"
    );
});
