//! A request as RFC 9112 writes it (3 and 5): the request line, the
//! fields in the caller's order, and the body with its length; each part
//! checked before a byte is written.

use std::fmt;
use std::io::Write;

use super::{BadRequest, Error};
use crate::syntax::{is_field_value, is_token};

/// Why a field is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadField {
    /// Its name is not a token (RFC 9110, 5.6.2): empty, or with a space,
    /// a colon, a line break or another character no name has.
    Name,
    /// Its value holds a line break or another control character.
    Value,
}

impl fmt::Display for BadField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BadField::Name => "its name is not a token (letters, digits and !#$%&'*+-.^_`|~)",
            BadField::Value => "its value holds a line break or another control character",
        })
    }
}

/// Whether `name: value` may be sent as a field: what [`write_request`]
/// checks, for a caller that would rather refuse its input up front.
pub fn check_field(name: &str, value: &str) -> Result<(), BadField> {
    if !is_token(name) {
        return Err(BadField::Name);
    }
    if !is_field_value(value) {
        return Err(BadField::Value);
    }
    Ok(())
}

/// Writes a request for `target` (its path and query, already encoded)
/// with `method` and `fields`, in their order, then `body`, announced by
/// a `Content-Length` after the fields. A `POST`, `PUT` or `PATCH`
/// without a body says `Content-Length: 0`, as RFC 9110 (8.6) asks of a
/// method that defines a body. Nothing is written when a part is refused.
pub fn write_request(
    out: &mut impl Write,
    method: &str,
    target: &str,
    fields: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<(), Error> {
    if !is_token(method) {
        return Err(Error::Request(BadRequest::Method(method.to_string())));
    }
    if target.is_empty() || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(Error::Request(BadRequest::Target(target.to_string())));
    }
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    for &(name, value) in fields {
        check_field(name, value).map_err(|why| {
            // The value is never shown: it may be a credential.
            Error::Request(BadRequest::Field(name.to_string(), why))
        })?;
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match body {
        Some(body) => head.push_str(&format!("Content-Length: {}\r\n", body.len())),
        None if matches!(method, "POST" | "PUT" | "PATCH") => {
            head.push_str("Content-Length: 0\r\n")
        }
        None => {}
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    if let Some(body) = body {
        out.write_all(body)?;
    }
    out.flush()?;
    Ok(())
}
