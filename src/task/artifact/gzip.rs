//! gzip streams, and the raw deflate data of zip entries, read through
//! zlib's `inflate`, which the build already links (libz-sys, under
//! grpcio-sys), by way of the C shim (`ffi`): a [`GzipReader`] turns a
//! `.tar.gz` or `.gz` download into its plain bytes. Concatenated gzip
//! members are read one after another, as gzip(1) and Go's reader do.
//! [`crc32_update`] is zlib's too.

use std::io::{self, Read};

use super::ffi::{self, Inflate, CSI_INFLATE_END, CSI_INFLATE_OK, CSI_INFLATE_STALLED};

/// `crc` (start at 0) carried over `data`, as zip's CRC-32.
pub fn crc32_update(crc: u32, data: &[u8]) -> u32 {
    ffi::crc32(crc, data)
}

/// Reads the plain bytes of the gzip stream `inner` holds.
pub struct GzipReader<R> {
    inner: R,
    inflate: Inflate,
    input: Box<[u8]>,
    /// The unread part of `input` is `input[pos..len]`.
    pos: usize,
    len: usize,
    /// A member ended; another may follow.
    member_ended: bool,
    /// Whether another member may follow one that ended (gzip).
    members: bool,
}

impl<R: Read> GzipReader<R> {
    /// A reader of the gzip stream `inner`.
    pub fn new(inner: R) -> io::Result<GzipReader<R>> {
        GzipReader::with_format(inner, true)
    }

    /// A reader of the raw deflate data `inner` (a zip entry's).
    pub fn raw(inner: R) -> io::Result<GzipReader<R>> {
        GzipReader::with_format(inner, false)
    }

    fn with_format(inner: R, gzip: bool) -> io::Result<GzipReader<R>> {
        let inflate = Inflate::new(gzip).ok_or_else(|| io::Error::other("inflateInit2 failed"))?;
        Ok(GzipReader {
            inner,
            inflate,
            input: vec![0; 64 * 1024].into_boxed_slice(),
            pos: 0,
            len: 0,
            member_ended: false,
            members: gzip,
        })
    }

    /// Refills the input when it is used up; whether any is left.
    fn fill(&mut self) -> io::Result<bool> {
        if self.pos == self.len {
            self.len = self.inner.read(&mut self.input)?;
            self.pos = 0;
        }
        Ok(self.pos < self.len)
    }

    fn zlib_error(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("gzip: {}", self.inflate.message()),
        )
    }
}

impl<R: Read> Read for GzipReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.member_ended && !self.members {
                return Ok(0);
            }
            let more = self.fill()?;
            if self.member_ended {
                if !more {
                    return Ok(0);
                }
                if !self.inflate.reset() {
                    return Err(self.zlib_error());
                }
                self.member_ended = false;
            }
            if !more {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "gzip: the stream is cut short",
                ));
            }
            let done = self.inflate.run(&self.input[self.pos..self.len], buf);
            self.pos += done.consumed;
            match done.status {
                CSI_INFLATE_END => self.member_ended = true,
                CSI_INFLATE_OK => {}
                CSI_INFLATE_STALLED if done.produced > 0 || done.consumed > 0 => {}
                _ => return Err(self.zlib_error()),
            }
            if done.produced > 0 {
                return Ok(done.produced);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// `data` compressed by gzip(1).
    pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut child = Command::new("gzip")
            .arg("-c")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let data = data.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&data).unwrap());
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out.stdout
    }

    fn gunzip(data: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        GzipReader::new(data)?.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn gzip_members_inflate_to_their_bytes() {
        let plain: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(gunzip(&gzip(&plain)).unwrap(), plain);
        let mut two = gzip(b"one ");
        two.extend(gzip(b"two"));
        assert_eq!(gunzip(&two).unwrap(), b"one two");
    }

    #[test]
    fn a_cut_or_corrupt_stream_is_an_error() {
        let packed = gzip(&[7u8; 10_000]);
        assert!(gunzip(&packed[..packed.len() - 10]).is_err());
        assert!(gunzip(b"not gzip at all").is_err());
        let mut bad = packed.clone();
        let n = bad.len();
        bad[n - 6] ^= 0xff; // the CRC
        assert!(gunzip(&bad).is_err());
    }
}
