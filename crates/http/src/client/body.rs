//! An answer's body as it arrives (RFC 9112, 6 and 7.1): `Content-Length`
//! bytes, chunks, or everything until the connection closes, with an
//! optional bound on how much is taken.

use std::io::{self, BufRead, Read, Write};

use super::lines::{read_fields, read_line};
use super::{Error, Part, Protocol, MAX_HEAD, MAX_LINE};
use crate::syntax::shorten;

/// How the body's end is known.
#[derive(Debug)]
pub(super) enum Framing {
    /// This many bytes in all (`Content-Length`, or 0 for no body).
    Length(u64),
    /// The chunked transfer coding.
    Chunked(Chunked),
    /// Until the connection closes.
    Close,
}

impl Framing {
    pub(super) fn chunked() -> Framing {
        Framing::Chunked(Chunked::Size { after_data: false })
    }
}

/// Where a chunked body's reader is.
#[derive(Debug, Clone, Copy)]
pub(super) enum Chunked {
    /// Before a chunk's size line; `after_data` once a chunk's data was
    /// read, whose CRLF comes first.
    Size { after_data: bool },
    /// Inside a chunk's data, `left` bytes of it to come.
    Data { left: u64 },
    /// After the last chunk and the trailers.
    Done,
}

/// An answer's body as it arrives: each read returns what the server has
/// sent so far (at least one byte, as the connection's reads do), and 0
/// at the body's end. A read that finds the body broken fails with an
/// `io::Error` carrying the [`Protocol`] error, which [`Error`]'s `From`
/// turns back into one.
pub struct Body<R> {
    reader: R,
    framing: Framing,
    /// The bytes of the body read so far.
    read: u64,
    /// The most bytes a read may take, once [`Body::read_all`] or
    /// [`Body::copy_to`] set it.
    limit: Option<u64>,
}

impl<R> Body<R> {
    pub(super) fn new(reader: R, framing: Framing) -> Body<R> {
        Body {
            reader,
            framing,
            read: 0,
            limit: None,
        }
    }

    /// The connection, with what was read past the head (or past what
    /// was read of the body) still in its buffer: where a switched
    /// protocol (`101`) goes on.
    pub fn into_inner(self) -> R {
        self.reader
    }

    /// Bounds what is read from now on to `limit` bytes of the body in
    /// all: a `Content-Length` past it is refused at once, a chunk's size
    /// past it before its data is read.
    fn bound(&mut self, limit: u64) -> Result<(), Protocol> {
        self.limit = Some(limit);
        match self.framing {
            Framing::Length(length) if length > limit => Err(Protocol::BodyTooLong { limit }),
            _ => Ok(()),
        }
    }
}

impl<R: BufRead> Body<R> {
    /// The whole body, if it has at most `limit` bytes.
    pub fn read_all(mut self, limit: usize) -> Result<Vec<u8>, Error> {
        self.bound(limit as u64)?;
        let mut out = Vec::new();
        self.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Copies the body into `out`, if it has at most `limit` bytes; the
    /// bytes copied. What is copied before a read fails stays copied.
    pub fn copy_to(&mut self, out: &mut dyn Write, limit: u64) -> Result<u64, Error> {
        self.bound(limit)?;
        Ok(io::copy(self, out)?)
    }

    /// Reads the next chunk's size line (after the CRLF that ends the
    /// chunk before it), and after the last chunk the trailers; the
    /// chunk's size, 0 at the end.
    fn next_chunk(&mut self, after_data: bool) -> Result<u64, Error> {
        if after_data {
            self.chunk_end()?;
        }
        let mut budget = MAX_LINE;
        let line = read_line(&mut self.reader, Part::ChunkSize, &mut budget)?;
        let size = chunk_size(&line)?;
        if size == 0 {
            let mut budget = MAX_HEAD;
            read_fields(&mut self.reader, Part::Trailers, &mut budget)?;
        }
        if let Some(limit) = self.limit {
            if self.read.saturating_add(size) > limit {
                return Err(Protocol::BodyTooLong { limit }.into());
            }
        }
        Ok(size)
    }

    /// The CRLF after a chunk's data.
    fn chunk_end(&mut self) -> Result<(), Error> {
        let mut crlf = [0u8; 2];
        let mut got = 0;
        while got < 2 {
            let n = match self.reader.read(&mut crlf[got..]) {
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err.into()),
            };
            if n == 0 {
                return Err(Protocol::CutChunk.into());
            }
            got += n;
        }
        match &crlf {
            b"\r\n" => Ok(()),
            _ => Err(Protocol::ChunkOverrun.into()),
        }
    }

    /// One read of chunked data into `buf` (not empty).
    fn read_chunked(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        loop {
            let Framing::Chunked(state) = self.framing else {
                unreachable!("only a chunked body's reads come here")
            };
            match state {
                Chunked::Done => return Ok(0),
                Chunked::Size { after_data } => {
                    let size = self.next_chunk(after_data)?;
                    self.framing = Framing::Chunked(match size {
                        0 => Chunked::Done,
                        left => Chunked::Data { left },
                    });
                }
                Chunked::Data { left } => {
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let n = self.reader.read(&mut buf[..want])?;
                    if n == 0 {
                        return Err(Protocol::CutChunk.into());
                    }
                    let left = left - n as u64;
                    self.framing = Framing::Chunked(match left {
                        0 => Chunked::Size { after_data: true },
                        left => Chunked::Data { left },
                    });
                    return Ok(n);
                }
            }
        }
    }

    /// One read into `buf` (not empty), within the framing and the limit.
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        let n = match self.framing {
            Framing::Length(length) => {
                let left = length - self.read;
                if left == 0 {
                    return Ok(0);
                }
                let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                let n = self.reader.read(&mut buf[..want])?;
                if n == 0 {
                    let read = self.read;
                    return Err(Protocol::CutBody { read, length }.into());
                }
                n
            }
            Framing::Close => {
                // One byte past the limit is enough to know it is passed.
                let want = match self.limit {
                    Some(limit) => {
                        let room = limit.saturating_sub(self.read).saturating_add(1);
                        buf.len().min(usize::try_from(room).unwrap_or(usize::MAX))
                    }
                    None => buf.len(),
                };
                self.reader.read(&mut buf[..want])?
            }
            Framing::Chunked(_) => self.read_chunked(buf)?,
        };
        self.read += n as u64;
        match self.limit {
            Some(limit) if self.read > limit => Err(Protocol::BodyTooLong { limit }.into()),
            _ => Ok(n),
        }
    }
}

impl<R: BufRead> Read for Body<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.read_some(buf).map_err(|err| match err {
            Error::Io(err) => err,
            Error::Protocol(protocol) => protocol.into_io(),
            Error::Request(bad) => io::Error::new(io::ErrorKind::InvalidInput, bad.to_string()),
        })
    }
}

/// The size of a chunk from its size line: hexadecimal digits, then
/// perhaps spaces and extensions (`;name=value`), which are skipped.
fn chunk_size(line: &str) -> Result<u64, Protocol> {
    let size = line.split(';').next().unwrap_or("");
    let size = size.trim_end_matches([' ', '\t']);
    if size.is_empty() || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Protocol::BadChunkSize(shorten(line).to_string()));
    }
    u64::from_str_radix(size, 16)
        .map_err(|_| Protocol::ChunkSizeTooLarge(shorten(line).to_string()))
}
