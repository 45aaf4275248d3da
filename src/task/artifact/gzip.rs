//! gzip streams, and the raw deflate data of zip entries, read through
//! zlib's `inflate`, which the build already links (libz-sys, under
//! grpcio-sys): a [`GzipReader`] turns a `.tar.gz` or `.gz` download into
//! its plain bytes. Concatenated gzip members are read one after another,
//! as gzip(1) and Go's reader do. [`crc32`] is zlib's too.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use std::io::{self, Read};

/// zlib's `z_stream` (`zlib.h`), as laid out on LP64 Linux.
#[repr(C)]
struct ZStream {
    next_in: *const u8,
    avail_in: c_uint,
    total_in: c_ulong,
    next_out: *mut u8,
    avail_out: c_uint,
    total_out: c_ulong,
    msg: *const c_char,
    state: *mut c_void,
    zalloc: *mut c_void,
    zfree: *mut c_void,
    opaque: *mut c_void,
    data_type: c_int,
    adler: c_ulong,
    reserved: c_ulong,
}

const Z_OK: c_int = 0;
const Z_STREAM_END: c_int = 1;
const Z_BUF_ERROR: c_int = -5;
const Z_NO_FLUSH: c_int = 0;
/// 15 bits of window, plus 16: a gzip header and trailer, not zlib's.
const GZIP_WINDOW_BITS: c_int = 15 + 16;
/// 15 bits of window, negated: raw deflate data, without a header.
const RAW_WINDOW_BITS: c_int = -15;

extern "C" {
    fn zlibVersion() -> *const c_char;
    fn inflateInit2_(
        strm: *mut ZStream,
        window_bits: c_int,
        version: *const c_char,
        stream_size: c_int,
    ) -> c_int;
    fn inflate(strm: *mut ZStream, flush: c_int) -> c_int;
    fn inflateReset(strm: *mut ZStream) -> c_int;
    fn inflateEnd(strm: *mut ZStream) -> c_int;
    fn crc32(crc: c_ulong, buf: *const u8, len: c_uint) -> c_ulong;
}

/// `crc` (start at 0) carried over `data`, as zip's CRC-32.
pub fn crc32_update(mut crc: u32, data: &[u8]) -> u32 {
    for chunk in data.chunks(c_uint::MAX as usize) {
        // SAFETY: `chunk` is live for its length, which fits a c_uint.
        crc = unsafe { crc32(crc as c_ulong, chunk.as_ptr(), chunk.len() as c_uint) } as u32;
    }
    crc
}

/// Reads the plain bytes of the gzip stream `inner` holds.
pub struct GzipReader<R> {
    inner: R,
    /// Boxed: zlib's state points back at the stream, which must not move.
    stream: Box<ZStream>,
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
        GzipReader::with_window(inner, GZIP_WINDOW_BITS)
    }

    /// A reader of the raw deflate data `inner` (a zip entry's).
    pub fn raw(inner: R) -> io::Result<GzipReader<R>> {
        GzipReader::with_window(inner, RAW_WINDOW_BITS)
    }

    fn with_window(inner: R, window_bits: c_int) -> io::Result<GzipReader<R>> {
        let mut stream = Box::new(ZStream {
            next_in: std::ptr::null(),
            avail_in: 0,
            total_in: 0,
            next_out: std::ptr::null_mut(),
            avail_out: 0,
            total_out: 0,
            msg: std::ptr::null(),
            state: std::ptr::null_mut(),
            zalloc: std::ptr::null_mut(),
            zfree: std::ptr::null_mut(),
            opaque: std::ptr::null_mut(),
            data_type: 0,
            adler: 0,
            reserved: 0,
        });
        // SAFETY: `stream` is a zeroed z_stream of the size passed (null
        // allocators select zlib's own); the version string is zlib's.
        let ret = unsafe {
            inflateInit2_(
                &mut *stream,
                window_bits,
                zlibVersion(),
                std::mem::size_of::<ZStream>() as c_int,
            )
        };
        if ret != Z_OK {
            return Err(io::Error::other(format!("inflateInit2 failed ({ret})")));
        }
        Ok(GzipReader {
            inner,
            stream,
            input: vec![0; 64 * 1024].into_boxed_slice(),
            pos: 0,
            len: 0,
            member_ended: false,
            members: window_bits == GZIP_WINDOW_BITS,
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

    fn zlib_error(&self, ret: c_int) -> io::Error {
        let msg = if self.stream.msg.is_null() {
            format!("zlib error {ret}")
        } else {
            // SAFETY: zlib's messages are static NUL-terminated strings.
            unsafe { std::ffi::CStr::from_ptr(self.stream.msg) }
                .to_string_lossy()
                .into_owned()
        };
        io::Error::new(io::ErrorKind::InvalidData, format!("gzip: {msg}"))
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
                // SAFETY: the stream was initialised in `new`.
                let ret = unsafe { inflateReset(&mut *self.stream) };
                if ret != Z_OK {
                    return Err(self.zlib_error(ret));
                }
                self.member_ended = false;
            }
            if !more {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "gzip: the stream is cut short",
                ));
            }
            let avail_in = (self.len - self.pos) as c_uint;
            let avail_out = buf.len().min(c_uint::MAX as usize) as c_uint;
            self.stream.next_in = self.input[self.pos..].as_ptr();
            self.stream.avail_in = avail_in;
            self.stream.next_out = buf.as_mut_ptr();
            self.stream.avail_out = avail_out;
            // SAFETY: `next_in` and `next_out` point into live buffers of
            // at least `avail_in` and `avail_out` bytes, which zlib reads
            // and writes only within; the stream was initialised in `new`.
            let ret = unsafe { inflate(&mut *self.stream, Z_NO_FLUSH) };
            self.pos += (avail_in - self.stream.avail_in) as usize;
            let produced = (avail_out - self.stream.avail_out) as usize;
            match ret {
                Z_STREAM_END => self.member_ended = true,
                Z_OK => {}
                Z_BUF_ERROR if produced > 0 || self.stream.avail_in < avail_in => {}
                _ => return Err(self.zlib_error(ret)),
            }
            if produced > 0 {
                return Ok(produced);
            }
        }
    }
}

impl<R> Drop for GzipReader<R> {
    fn drop(&mut self) {
        // SAFETY: the stream was initialised in `new` and is ended once.
        unsafe { inflateEnd(&mut *self.stream) };
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
