//! A client's side of HTTP/1.1, as a codec over the program's own
//! connection (a unix socket, TCP, TLS: anything `Read` and `Write`): a
//! request written ([`write_request`]), and an answer read
//! ([`read_response`]): its head parsed, and its body ([`Body`]) read as
//! it arrives, by `Content-Length`, by the chunked transfer coding, or to
//! the connection's end (RFC 9112, 6.3).
//!
//! The answer is someone else's, so each part of it is bounded, by a
//! named constant that its error names:
//! - the head, interim answers (`100 Continue`) included, at most
//!   [`MAX_HEAD`] bytes, each of its lines at most [`MAX_LINE`] bytes, and
//!   at most [`MAX_FIELDS`] fields;
//! - a chunk's size line at most [`MAX_LINE`] bytes, whatever extensions
//!   it carries, and the trailers after the last chunk as the head is;
//! - the body, by the caller: [`Body::read_all`] and [`Body::copy_to`]
//!   take at most a limit they are given, and refuse an announced length
//!   (a `Content-Length`, a chunk's size) past it before reading it.
//!
//! What a request carries is checked before anything is written: a method
//! and field names that are tokens, a target and field values without a
//! space (the target) or a control character, so that nothing a caller
//! passes on can end a line early and add one of its own.

mod body;
mod head;
mod lines;
mod request;

use std::fmt;
use std::io;

use crate::syntax::shorten;

pub use body::Body;
pub use head::read_response;
pub use request::{check_field, write_request, BadField};

/// The most bytes of an answer's head: its status line and fields, and
/// those of the interim answers before it; and of a chunked body's
/// trailers.
pub const MAX_HEAD: usize = 64 * 1024;

/// The most bytes of one line of a head, or of a chunk's size line.
pub const MAX_LINE: usize = 16 * 1024;

/// The most fields of one head, or of the trailers.
pub const MAX_FIELDS: usize = 100;

/// An answer's status and fields, and its body still on the wire.
pub struct Response<R> {
    pub status: u16,
    /// The reason phrase, which says nothing the status does not.
    pub reason: String,
    /// The fields in the order received, names in lower case, values
    /// without the whitespace around them.
    pub headers: Vec<(String, String)>,
    pub body: Body<R>,
}

impl<R> Response<R> {
    /// The first field named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl<R: io::BufRead> Response<R> {
    /// The whole body, if it has at most `limit` bytes.
    pub fn read_all(self, limit: usize) -> Result<Vec<u8>, Error> {
        self.body.read_all(limit)
    }
}

/// What a client's exchange fails with.
#[derive(Debug)]
pub enum Error {
    /// Reading or writing the connection failed, a timeout included.
    Io(io::Error),
    /// A request this codec does not write.
    Request(BadRequest),
    /// An answer that is not HTTP/1.x as RFC 9112 writes it, or that
    /// passes one of the bounds.
    Protocol(Protocol),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The connection's error is the whole story (a deadline's,
            // say), so it is told as it is.
            Error::Io(err) => err.fmt(f),
            Error::Request(bad) => bad.fmt(f),
            Error::Protocol(protocol) => protocol.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    /// A body's reads fail with `io::Error`s; those that carry a
    /// [`Protocol`] are one again.
    fn from(err: io::Error) -> Error {
        if err.get_ref().is_some_and(|inner| inner.is::<Protocol>()) {
            let inner = err.into_inner().expect("checked above");
            return Error::Protocol(*inner.downcast::<Protocol>().expect("checked above"));
        }
        Error::Io(err)
    }
}

impl From<Protocol> for Error {
    fn from(protocol: Protocol) -> Error {
        Error::Protocol(protocol)
    }
}

/// A request this codec refuses to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadRequest {
    /// A method that is not a token.
    Method(String),
    /// A target that is empty or holds a space or a control character
    /// (shown without its query).
    Target(String),
    /// A field of this name, and why.
    Field(String, BadField),
}

impl fmt::Display for BadRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRequest::Method(method) => write!(f, "a method that is not a token: {method:?}"),
            // Without its query, where tokens live.
            BadRequest::Target(target) => write!(
                f,
                "a request target that is empty or holds a space or a control character: {:?}",
                shorten(target.split('?').next().unwrap_or(""))
            ),
            BadRequest::Field(name, why) => write!(f, "field {name:?}: {why}"),
        }
    }
}

/// Where in an answer a line is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The status line and fields (an interim answer's too).
    Head,
    /// A chunk's size line.
    ChunkSize,
    /// The fields after the last chunk.
    Trailers,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Head => "the answer's head",
            Part::ChunkSize => "a chunk's size line",
            Part::Trailers => "the trailers",
        })
    }
}

/// How an answer breaks RFC 9112's syntax, or one of the bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// The connection closed before the first byte of an answer.
    NoAnswer,
    /// The connection closed in the middle of this part.
    Cut(Part),
    /// A line of this part longer than [`MAX_LINE`].
    LineTooLong(Part),
    /// A head or trailers longer than [`MAX_HEAD`].
    HeadTooLong(Part),
    /// A head or trailers of more than [`MAX_FIELDS`] fields.
    TooManyFields(Part),
    /// A line of this part that is not UTF-8.
    NotText(Part),
    /// A first line that is not an HTTP/1.x status line (shortened).
    NotHttp(String),
    /// A status that is not three digits (the status line, shortened).
    BadStatus(String),
    /// A field line without a name that is a token, a colon, or a value
    /// free of control characters (its name, or the line, shortened).
    BadField(String),
    /// A `Content-Length` that is not one number (its values).
    BadLength(String),
    /// A transfer coding other than `chunked` alone.
    TransferCoding(String),
    /// A chunk size that is not hexadecimal (the line, shortened).
    BadChunkSize(String),
    /// A chunk size past 64 bits (the line, shortened).
    ChunkSizeTooLarge(String),
    /// A chunk's data not followed by CRLF where its size says it ends.
    ChunkOverrun,
    /// The connection closed inside a chunk's data, or before its CRLF.
    CutChunk,
    /// The connection closed after `read` of the `length` bytes that
    /// `Content-Length` announced.
    CutBody { read: u64, length: u64 },
    /// A body longer than the `limit` its reader was given.
    BodyTooLong { limit: u64 },
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protocol::NoAnswer => f.write_str("the server closed the connection before answering"),
            Protocol::Cut(part) => write!(f, "the connection closed in the middle of {part}"),
            Protocol::LineTooLong(part) => {
                write!(f, "a line of {part} longer than {MAX_LINE} bytes")
            }
            Protocol::HeadTooLong(part) => write!(f, "more than {MAX_HEAD} bytes in {part}"),
            Protocol::TooManyFields(part) => write!(f, "more than {MAX_FIELDS} fields in {part}"),
            Protocol::NotText(part) => write!(f, "a line of {part} that is not UTF-8"),
            Protocol::NotHttp(line) => write!(f, "not an HTTP/1.x status line: {line:?}"),
            Protocol::BadStatus(line) => {
                write!(f, "a status line whose status is not 3 digits: {line:?}")
            }
            Protocol::BadField(line) => {
                write!(f, "a field line that is not \"token: value\": {line:?}")
            }
            Protocol::BadLength(values) => {
                write!(f, "a Content-Length that is not one number: {values:?}")
            }
            Protocol::TransferCoding(codings) => {
                write!(f, "a transfer coding other than chunked: {codings:?}")
            }
            Protocol::BadChunkSize(line) => write!(f, "a chunk size that is not hex: {line:?}"),
            Protocol::ChunkSizeTooLarge(line) => {
                write!(f, "a chunk size past 64 bits: {line:?}")
            }
            Protocol::ChunkOverrun => {
                f.write_str("a chunk longer than its size (no CRLF where its data ends)")
            }
            Protocol::CutChunk => f.write_str("the connection closed inside a chunk"),
            Protocol::CutBody { read, length } => {
                write!(f, "the body ended after {read} of {length} bytes")
            }
            Protocol::BodyTooLong { limit } => write!(f, "the body is longer than {limit} bytes"),
        }
    }
}

impl std::error::Error for Protocol {}

impl Protocol {
    /// The `io::Error` a body's read fails with: [`Error`]'s `From` makes
    /// it this again.
    fn into_io(self) -> io::Error {
        let kind = match self {
            Protocol::Cut(_) | Protocol::CutChunk | Protocol::CutBody { .. } => {
                io::ErrorKind::UnexpectedEof
            }
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, self)
    }
}

#[cfg(test)]
mod tests;
