//! An answer's head: the status line and the fields (RFC 9112, 4 and 5),
//! within [`MAX_HEAD`] in all; interim answers skipped; and from the
//! head, how the body is framed (6.3).

use std::io::BufRead;

use super::body::{Body, Framing};
use super::lines::{read_fields, read_line};
use super::{Error, Part, Protocol, Response, MAX_HEAD};
use crate::syntax::{is_field_value, shorten};

/// Reads an answer's head from `reader`, the connection on which a
/// request with `method` was sent, and leaves its body on the wire.
///
/// Interim answers (`1xx` but `101`) are skipped; a `101 Switching
/// Protocols` is the answer, with an empty body: what follows its head is
/// another protocol's, [`Body::into_inner`]. The answer to a `HEAD`, and a
/// `1xx`, `204` or `304`, has no body whatever its fields say.
pub fn read_response<R: BufRead>(mut reader: R, method: &str) -> Result<Response<R>, Error> {
    // Shared by the interim answers and the final one.
    let mut budget = MAX_HEAD;
    loop {
        let line = read_line(&mut reader, Part::Head, &mut budget)?;
        let (status, reason) = parse_status(&line)?;
        let headers = read_fields(&mut reader, Part::Head, &mut budget)?;
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let no_body = method == "HEAD" || status < 200 || status == 204 || status == 304;
        let framing = if no_body {
            Framing::Length(0)
        } else {
            framing(&headers)?
        };
        return Ok(Response {
            status,
            reason: reason.to_string(),
            headers,
            body: Body::new(reader, framing),
        });
    }
}

/// The status and reason phrase of a status line: `HTTP/1.x`, a space,
/// three digits, and a space before the reason if there is one, which
/// holds no control character.
fn parse_status(line: &str) -> Result<(u16, &str), Protocol> {
    let (version, rest) = line.split_once(' ').unwrap_or((line, ""));
    let is_http_1 = version.len() == 8
        && version.starts_with("HTTP/1.")
        && version.as_bytes()[7].is_ascii_digit();
    if !is_http_1 {
        return Err(Protocol::NotHttp(shorten(line).to_string()));
    }
    let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    let digits = code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit());
    match code.parse::<u16>() {
        Ok(status) if digits && status >= 100 && is_field_value(reason) => Ok((status, reason)),
        _ => Err(Protocol::BadStatus(shorten(line).to_string())),
    }
}

/// How the body of an answer that may have one is framed, from its
/// fields: chunked when `Transfer-Encoding` says so (the only coding
/// read; it overrides any `Content-Length`), else by `Content-Length`,
/// else to the connection's end.
fn framing(headers: &[(String, String)]) -> Result<Framing, Protocol> {
    let values = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .map(|v| v.trim_matches([' ', '\t']))
            .collect()
    };
    let codings = values("transfer-encoding");
    if !codings.is_empty() {
        return match codings[..] {
            [coding] if coding.eq_ignore_ascii_case("chunked") => Ok(Framing::chunked()),
            _ => Err(Protocol::TransferCoding(
                shorten(&codings.join(", ")).to_string(),
            )),
        };
    }
    let lengths = values("content-length");
    let Some(&first) = lengths.first() else {
        return Ok(Framing::Close);
    };
    // Repeated, a length must be the same number each time (RFC 9112, 6.3).
    let bad = || Protocol::BadLength(shorten(&lengths.join(", ")).to_string());
    if lengths.iter().any(|&l| l != first) || !first.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    first.parse::<u64>().map(Framing::Length).map_err(|_| bad())
}
