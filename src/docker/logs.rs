//! A container's logs as they are written: `GET /containers/{id}/logs`
//! with `follow=1`, and the demultiplexing of its stream.
//!
//! A container without a TTY (the only kind [`super::ContainerSpec`]
//! makes) has its stdout and stderr multiplexed on one stream of frames:
//! an 8-byte header (the stream, 1 for stdout and 2 for stderr, three zero
//! bytes, and the payload's length as a big-endian `u32`, at most
//! [`MAX_FRAME`]) and the payload. An exec without a TTY has the same.

use std::io::{self, Read, Write};

use super::http::encode;
use super::{Engine, Error};

/// The most payload copied at a time: a frame's length comes from the
/// engine and is not allocated.
const COPY_BUFFER: usize = 32 * 1024;

/// The longest frame a stream may have: the engine writes a frame per
/// write of the container's (a log line, a pipe's read), far below this;
/// one that says it is longer is not the engine's.
pub const MAX_FRAME: usize = 16 << 20;

impl Engine {
    /// Follows the logs of container `id` from `since` (Unix seconds; 0:
    /// from the start), its stdout into `out` and its stderr into `err`,
    /// and returns when the stream ends: when the container has stopped
    /// (at once if it had already). No timeout: the call lasts as long as
    /// the container runs.
    pub fn logs(
        &self,
        id: &str,
        since: i64,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<(), Error> {
        let target = format!(
            "/containers/{}/logs?follow=1&stdout=1&stderr=1&since={since}",
            encode(id)
        );
        let mut stream = self.stream(&target)?;
        demultiplex(&mut stream, out, err).map_err(|failure| match failure {
            Demux::Read(err) if err.kind() == io::ErrorKind::InvalidData => {
                Error::Protocol(format!("the log stream of {id}: {err}"))
            }
            Demux::Read(err) => Error::Io {
                endpoint: self.endpoint().to_string(),
                err,
            },
            Demux::Frame(message) => Error::Protocol(format!("the log stream of {id}: {message}")),
            Demux::Write(err) => Error::WriteLogs(err),
        })
    }
}

/// What demultiplexing fails with: reading the stream, a frame that is not
/// one, or writing the payload.
#[derive(Debug)]
pub enum Demux {
    Read(io::Error),
    Frame(String),
    Write(io::Error),
}

/// Copies each frame of `stream` to `out` (stdout, and stdin's echo) or
/// `err` (stderr) as it arrives, flushing after each, until the stream
/// ends between two frames.
pub fn demultiplex(
    stream: &mut dyn Read,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), Demux> {
    let mut buffer = vec![0u8; COPY_BUFFER];
    loop {
        let mut header = [0u8; 8];
        if !read_header(stream, &mut header)? {
            return Ok(());
        }
        let sink: &mut dyn Write = match header[0] {
            0 | 1 => &mut *out,
            2 => &mut *err,
            other => return Err(Demux::Frame(format!("a frame of unknown stream {other}"))),
        };
        let mut left = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
        if left > MAX_FRAME {
            return Err(Demux::Frame(format!(
                "a frame of {left} bytes, more than MAX_FRAME ({MAX_FRAME})"
            )));
        }
        while left > 0 {
            let want = left.min(buffer.len());
            let read = match stream.read(&mut buffer[..want]) {
                Ok(0) => {
                    return Err(Demux::Frame(format!(
                        "the stream ended with {left} bytes of a frame to come"
                    )))
                }
                Ok(read) => read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Demux::Read(e)),
            };
            sink.write_all(&buffer[..read]).map_err(Demux::Write)?;
            left -= read;
        }
        sink.flush().map_err(Demux::Write)?;
    }
}

/// Reads a frame's header: false if the stream ends before its first byte.
fn read_header(stream: &mut dyn Read, header: &mut [u8; 8]) -> Result<bool, Demux> {
    let mut filled = 0;
    while filled < header.len() {
        match stream.read(&mut header[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => {
                return Err(Demux::Frame(format!(
                    "the stream ended {filled} bytes into a frame's header"
                )))
            }
            Ok(read) => filled += read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Demux::Read(e)),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(stream: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![stream, 0, 0, 0];
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// A reader that hands out one byte per read, as a slow engine might.
    struct Trickle(Vec<u8>, usize);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.1 == self.0.len() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[self.1];
            self.1 += 1;
            Ok(1)
        }
    }

    #[test]
    fn frames_go_to_their_stream() {
        let mut input = frame(1, b"out 1\n");
        input.extend(frame(2, b"err 1\n"));
        input.extend(frame(1, b""));
        input.extend(frame(1, &vec![b'x'; 100_000]));
        input.extend(frame(2, b"err 2\n"));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        demultiplex(&mut Trickle(input.clone(), 0), &mut out, &mut err).unwrap();
        assert_eq!(&out[..6], b"out 1\n");
        assert_eq!(out.len(), 6 + 100_000);
        assert_eq!(err, b"err 1\nerr 2\n");
        let (mut out2, mut err2) = (Vec::new(), Vec::new());
        demultiplex(&mut input.as_slice(), &mut out2, &mut err2).unwrap();
        assert_eq!((out2, err2), (out, err));
    }

    #[test]
    fn a_cut_frame_or_an_unknown_stream_is_an_error() {
        let input = frame(1, b"hello");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let cut = demultiplex(&mut &input[..9], &mut out, &mut err).unwrap_err();
        assert!(
            matches!(&cut, Demux::Frame(m) if m.contains("4 bytes of a frame")),
            "{cut:?}"
        );
        let cut = demultiplex(&mut &input[..3], &mut out, &mut err).unwrap_err();
        assert!(
            matches!(&cut, Demux::Frame(m) if m.contains("header")),
            "{cut:?}"
        );
        let mut huge = vec![1, 0, 0, 0];
        huge.extend_from_slice(&(MAX_FRAME as u32 + 1).to_be_bytes());
        let huge = demultiplex(&mut huge.as_slice(), &mut out, &mut err).unwrap_err();
        assert!(
            matches!(&huge, Demux::Frame(m) if m.contains("MAX_FRAME")),
            "{huge:?}"
        );
        let unknown = demultiplex(&mut frame(7, b"x").as_slice(), &mut out, &mut err);
        assert!(matches!(unknown, Err(Demux::Frame(_))));
        assert!(demultiplex(&mut &b""[..], &mut out, &mut err).is_ok());
    }
}
