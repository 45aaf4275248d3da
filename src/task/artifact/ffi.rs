//! The artifact fetcher's C functions: TLS sessions and digests through the
//! TLS library that gRPC links (BoringSSL, or the system's OpenSSL in the
//! development build), inflate and CRC-32 through zlib, each behind a safe
//! handle.
//!
//! Rust declares none of the libraries' functions, only those of our own
//! shim, `ffi.h` (mirrored by the `extern` block below). The shim, `ffi.c`,
//! is compiled by `build.rs` against the linked TLS library's and zlib's
//! own headers, so
//! the C compiler checks each call into them: a library whose declarations
//! change fails the build instead of misbehaving at run time. The shim's
//! API is narrow and ours (opaque handles, integers, byte buffers with
//! their lengths) and changes only with this file.
//!
//! Each method makes one call and holds the only `unsafe` block for it.
//! The handles are non-null and owned, and the shim refuses calls made out
//! of order (a read before a session is started, say), so no sequence of
//! safe calls is unsound.

use std::ffi::{c_char, c_int, CStr};
use std::marker::{PhantomData, PhantomPinned};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

// The constants of ffi.h that Rust tells apart (a test checks them against
// it); any other value is an error.
pub const CSI_TLS_ERROR_ZERO_RETURN: c_int = 1;
pub const CSI_TLS_ERROR_SYSCALL: c_int = 2;
pub const CSI_DIGEST_MAX_SIZE: usize = 64;
pub const CSI_INFLATE_OK: c_int = 0;
pub const CSI_INFLATE_END: c_int = 1;
pub const CSI_INFLATE_STALLED: c_int = 2;

/// An opaque C type of the shim, only ever behind a pointer.
macro_rules! opaque {
    ($name:ident) => {
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    };
}
opaque!(CsiTls);
opaque!(CsiDigest);
opaque!(CsiInflate);

// ffi.h, function for function.
extern "C" {
    fn csi_tls_new() -> *mut CsiTls;
    fn csi_tls_free(tls: *mut CsiTls);
    fn csi_tls_trust_cas(tls: *mut CsiTls, ca_file: *const c_char) -> c_int;
    fn csi_tls_new_session(tls: *mut CsiTls) -> c_int;
    fn csi_tls_set_fd(tls: *mut CsiTls, fd: c_int) -> c_int;
    fn csi_tls_expect_host(tls: *mut CsiTls, host: *const c_char) -> c_int;
    fn csi_tls_expect_ip(tls: *mut CsiTls, ip: *const c_char) -> c_int;
    fn csi_tls_handshake(tls: *mut CsiTls) -> c_int;
    fn csi_tls_verify_failure(tls: *const CsiTls) -> *const c_char;
    fn csi_tls_read(tls: *mut CsiTls, buf: *mut u8, len: usize) -> c_int;
    fn csi_tls_write(tls: *mut CsiTls, buf: *const u8, len: usize) -> c_int;
    fn csi_tls_error_kind(tls: *const CsiTls, ret: c_int) -> c_int;
    fn csi_tls_pop_error(buf: *mut c_char, len: usize);

    fn csi_digest_new(algorithm: *const c_char) -> *mut CsiDigest;
    fn csi_digest_free(digest: *mut CsiDigest);
    fn csi_digest_update(digest: *mut CsiDigest, data: *const u8, len: usize) -> c_int;
    fn csi_digest_finish(
        digest: *mut CsiDigest,
        out: *mut u8,
        cap: usize,
        len: *mut usize,
    ) -> c_int;

    fn csi_inflate_new(gzip: c_int) -> *mut CsiInflate;
    fn csi_inflate_free(inflate: *mut CsiInflate);
    fn csi_inflate_run(
        inflate: *mut CsiInflate,
        input: *const u8,
        in_len: *mut usize,
        out: *mut u8,
        out_len: *mut usize,
    ) -> c_int;
    fn csi_inflate_reset(inflate: *mut CsiInflate) -> c_int;
    fn csi_inflate_message(inflate: *const CsiInflate) -> *const c_char;
    fn csi_crc32(crc: u32, data: *const u8, len: usize) -> u32;
}

/// A TLS client context and, once started, its session over a socket the
/// handle owns (so the socket outlives the session that uses its fd).
pub struct Tls {
    raw: NonNull<CsiTls>,
    socket: Option<TcpStream>,
}

// SAFETY: the handle moves between threads but is never shared (every call
// that changes it takes `&mut self`); BoringSSL's and OpenSSL's objects
// have no thread affinity.
unsafe impl Send for Tls {}

impl Tls {
    /// A client context; `None` when the TLS library cannot make one (see
    /// [`tls_pop_error`]).
    pub fn new() -> Option<Tls> {
        // SAFETY: no arguments; the result is null or a handle that `Drop`
        // frees.
        let raw = NonNull::new(unsafe { csi_tls_new() })?;
        Some(Tls { raw, socket: None })
    }

    /// Verifies servers against the CAs of the PEM file `ca_file`.
    pub fn trust_cas(&mut self, ca_file: &CStr) -> bool {
        // SAFETY: the handle is live; the string is NUL-terminated and
        // read during the call only.
        unsafe { csi_tls_trust_cas(self.raw.as_ptr(), ca_file.as_ptr()) == 1 }
    }

    /// Starts the session.
    pub fn new_session(&mut self) -> bool {
        // SAFETY: the handle is live.
        unsafe { csi_tls_new_session(self.raw.as_ptr()) == 1 }
    }

    /// Has the session speak over `socket`, which the handle keeps.
    pub fn set_socket(&mut self, socket: TcpStream) -> bool {
        let fd = socket.as_raw_fd();
        self.socket = Some(socket);
        // SAFETY: the handle is live; the fd stays open as long as the
        // handle, which holds the socket and frees the session in `Drop`
        // before the socket is closed.
        unsafe { csi_tls_set_fd(self.raw.as_ptr(), fd) == 1 }
    }

    /// Sends `host` as the server name and requires the certificate to
    /// name it.
    pub fn expect_host(&mut self, host: &CStr) -> bool {
        // SAFETY: the handle is live; the string is NUL-terminated and
        // copied by the TLS library.
        unsafe { csi_tls_expect_host(self.raw.as_ptr(), host.as_ptr()) == 1 }
    }

    /// Requires the certificate to name the IP address `ip`.
    pub fn expect_ip(&mut self, ip: &CStr) -> bool {
        // SAFETY: the handle is live; the string is NUL-terminated and
        // copied by the TLS library.
        unsafe { csi_tls_expect_ip(self.raw.as_ptr(), ip.as_ptr()) == 1 }
    }

    /// The client handshake: 1 on success, else a value for
    /// [`Tls::error_kind`].
    pub fn handshake(&mut self) -> c_int {
        // SAFETY: the handle is live; the call blocks on the socket it
        // owns.
        unsafe { csi_tls_handshake(self.raw.as_ptr()) }
    }

    /// Why the server's certificate did not verify, if it did not.
    pub fn verify_failure(&self) -> Option<String> {
        // SAFETY: the handle is live; the result is null or a static
        // NUL-terminated string.
        let why = unsafe { csi_tls_verify_failure(self.raw.as_ptr()) };
        if why.is_null() {
            return None;
        }
        // SAFETY: non-null, so a static NUL-terminated string.
        Some(
            unsafe { CStr::from_ptr(why) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// Reads into `buf`: the count read, or <= 0 for [`Tls::error_kind`].
    pub fn read(&mut self, buf: &mut [u8]) -> c_int {
        // SAFETY: the handle is live; `buf` is writable for its length.
        unsafe { csi_tls_read(self.raw.as_ptr(), buf.as_mut_ptr(), buf.len()) }
    }

    /// Writes from `buf`: the count written, or <= 0 for
    /// [`Tls::error_kind`].
    pub fn write(&mut self, buf: &[u8]) -> c_int {
        // SAFETY: the handle is live; `buf` is readable for its length.
        unsafe { csi_tls_write(self.raw.as_ptr(), buf.as_ptr(), buf.len()) }
    }

    /// What the call that returned `ret` means: a `CSI_TLS_ERROR_*`. Leaves
    /// errno as the call left it.
    pub fn error_kind(&self, ret: c_int) -> c_int {
        // SAFETY: the handle is live.
        unsafe { csi_tls_error_kind(self.raw.as_ptr(), ret) }
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        // SAFETY: the handle came from `csi_tls_new` and is freed once,
        // before `socket` (a field) is closed.
        unsafe { csi_tls_free(self.raw.as_ptr()) };
    }
}

/// The oldest error of this thread's TLS error queue, as text (popped).
pub fn tls_pop_error() -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` is writable for its length, and the text written is
    // NUL-terminated within it.
    unsafe { csi_tls_pop_error(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: NUL-terminated within `buf` by the call above.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// A message digest being computed.
pub struct Digest(NonNull<CsiDigest>);

impl Digest {
    /// A digest of `algorithm` (`c"md5"`, `c"sha1"`, `c"sha256"` or
    /// `c"sha512"`); `None` for another name or when out of memory.
    pub fn new(algorithm: &CStr) -> Option<Digest> {
        // SAFETY: the string is NUL-terminated and read during the call
        // only; the result is null or a handle that `Drop` frees.
        NonNull::new(unsafe { csi_digest_new(algorithm.as_ptr()) }).map(Digest)
    }

    /// Adds `data`.
    pub fn update(&mut self, data: &[u8]) -> bool {
        // SAFETY: the handle is live; `data` is readable for its length.
        unsafe { csi_digest_update(self.0.as_ptr(), data.as_ptr(), data.len()) == 1 }
    }

    /// Writes the digest into `out`; its length.
    pub fn finish(&mut self, out: &mut [u8; CSI_DIGEST_MAX_SIZE]) -> Option<usize> {
        let mut len = 0;
        // SAFETY: the handle is live; `out` is writable for its length,
        // which is passed; `len` is a live usize.
        let ok =
            unsafe { csi_digest_finish(self.0.as_ptr(), out.as_mut_ptr(), out.len(), &mut len) };
        (ok == 1).then_some(len.min(out.len()))
    }
}

impl Drop for Digest {
    fn drop(&mut self) {
        // SAFETY: the handle came from `csi_digest_new` and is freed once.
        unsafe { csi_digest_free(self.0.as_ptr()) };
    }
}

/// What one [`Inflate::run`] did.
pub struct Inflated {
    /// A `CSI_INFLATE_*`.
    pub status: c_int,
    /// Input bytes used.
    pub consumed: usize,
    /// Output bytes written.
    pub produced: usize,
}

/// A deflate stream being inflated.
pub struct Inflate(NonNull<CsiInflate>);

impl Inflate {
    /// An inflater of a gzip stream (`gzip`) or of raw deflate data;
    /// `None` when zlib cannot make one.
    pub fn new(gzip: bool) -> Option<Inflate> {
        // SAFETY: the result is null or a handle that `Drop` frees.
        NonNull::new(unsafe { csi_inflate_new(c_int::from(gzip)) }).map(Inflate)
    }

    /// Inflates from `input` into `output`.
    pub fn run(&mut self, input: &[u8], output: &mut [u8]) -> Inflated {
        let mut consumed = input.len();
        let mut produced = output.len();
        // SAFETY: the handle is live; `input` is readable and `output`
        // writable for the lengths passed, and zlib keeps no pointer into
        // them after the call; the lengths are live usizes.
        let status = unsafe {
            csi_inflate_run(
                self.0.as_ptr(),
                input.as_ptr(),
                &mut consumed,
                output.as_mut_ptr(),
                &mut produced,
            )
        };
        Inflated {
            status,
            consumed: consumed.min(input.len()),
            produced: produced.min(output.len()),
        }
    }

    /// Gets ready for another stream (the next gzip member).
    pub fn reset(&mut self) -> bool {
        // SAFETY: the handle is live.
        unsafe { csi_inflate_reset(self.0.as_ptr()) == CSI_INFLATE_OK }
    }

    /// The last error, as text.
    pub fn message(&self) -> String {
        // SAFETY: the handle is live; the result is a static
        // NUL-terminated string (zlib's message, or its text for a code).
        let msg = unsafe { csi_inflate_message(self.0.as_ptr()) };
        if msg.is_null() {
            return "zlib error".to_string();
        }
        // SAFETY: non-null, so a static NUL-terminated string.
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Drop for Inflate {
    fn drop(&mut self) {
        // SAFETY: the handle came from `csi_inflate_new` and is freed once.
        unsafe { csi_inflate_free(self.0.as_ptr()) };
    }
}

/// `crc` (0 to start) carried over `data`, as zip's CRC-32.
pub fn crc32(crc: u32, data: &[u8]) -> u32 {
    // SAFETY: `data` is readable for its length.
    unsafe { csi_crc32(crc, data.as_ptr(), data.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `#define`s of ffi.h, by name.
    fn header_constants() -> Vec<(String, String)> {
        include_str!("ffi.h")
            .lines()
            .filter_map(|line| {
                let mut words = line.strip_prefix("#define ")?.split_whitespace();
                Some((words.next()?.to_string(), words.next()?.to_string()))
            })
            .filter(|(name, _)| name.starts_with("CSI_"))
            .collect()
    }

    #[test]
    fn constants_match_the_header() {
        let ours: &[(&str, i64)] = &[
            (
                "CSI_TLS_ERROR_ZERO_RETURN",
                CSI_TLS_ERROR_ZERO_RETURN.into(),
            ),
            ("CSI_TLS_ERROR_SYSCALL", CSI_TLS_ERROR_SYSCALL.into()),
            ("CSI_DIGEST_MAX_SIZE", CSI_DIGEST_MAX_SIZE as i64),
            ("CSI_INFLATE_OK", CSI_INFLATE_OK.into()),
            ("CSI_INFLATE_END", CSI_INFLATE_END.into()),
            ("CSI_INFLATE_STALLED", CSI_INFLATE_STALLED.into()),
        ];
        let header = header_constants();
        for (name, ours) in ours {
            let value = header.iter().find(|(n, _)| n == name);
            let value = value.unwrap_or_else(|| panic!("{name} is not in ffi.h"));
            assert_eq!(value.1.parse::<i64>().ok(), Some(*ours), "{name}");
        }
    }

    #[test]
    fn calls_out_of_order_fail_instead_of_crashing() {
        let mut tls = Tls::new().unwrap();
        assert_eq!(tls.read(&mut [0; 8]), -1);
        assert_eq!(tls.write(b"x"), -1);
        assert_eq!(tls.handshake(), -1);
        let kind = tls.error_kind(-1);
        assert!(kind != CSI_TLS_ERROR_SYSCALL && kind != CSI_TLS_ERROR_ZERO_RETURN);
        assert!(tls.verify_failure().is_none());
        assert!(!tls.expect_host(c"localhost"));
        assert!(tls.new_session());
        assert!(!tls.new_session(), "a second session");
        assert!(Digest::new(c"sha3").is_none());
    }
}
