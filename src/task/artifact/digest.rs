//! Checksums of fetched files (md5, sha1, sha256, sha512) through
//! BoringSSL's `EVP_Digest*` functions, which the build already links for
//! gRPC: a [`Hasher`] is a `Write` the downloaded bytes are copied into.

use std::ffi::{c_int, c_uint, c_void};
use std::io::{self, Write};

use crate::spec::DigestKind;

// BoringSSL's digest API (`openssl/digest.h`), linked through grpcio-sys.
extern "C" {
    fn EVP_md5() -> *const c_void;
    fn EVP_sha1() -> *const c_void;
    fn EVP_sha256() -> *const c_void;
    fn EVP_sha512() -> *const c_void;
    fn EVP_MD_CTX_new() -> *mut c_void;
    fn EVP_MD_CTX_free(ctx: *mut c_void);
    fn EVP_DigestInit_ex(ctx: *mut c_void, md: *const c_void, engine: *mut c_void) -> c_int;
    fn EVP_DigestUpdate(ctx: *mut c_void, data: *const c_void, len: usize) -> c_int;
    fn EVP_DigestFinal_ex(ctx: *mut c_void, out: *mut u8, out_len: *mut c_uint) -> c_int;
}

/// A digest being computed.
pub struct Hasher {
    ctx: *mut c_void,
    kind: DigestKind,
}

impl Hasher {
    pub fn new(kind: DigestKind) -> Hasher {
        // SAFETY: these return pointers to static method tables.
        let md = unsafe {
            match kind {
                DigestKind::Md5 => EVP_md5(),
                DigestKind::Sha1 => EVP_sha1(),
                DigestKind::Sha256 => EVP_sha256(),
                DigestKind::Sha512 => EVP_sha512(),
            }
        };
        // SAFETY: allocates a context, which `Drop` frees; BoringSSL aborts
        // on allocation failure rather than returning null here.
        let ctx = unsafe { EVP_MD_CTX_new() };
        assert!(!ctx.is_null(), "EVP_MD_CTX_new failed");
        // SAFETY: `ctx` is a live context and `md` a static method table;
        // with no engine, init cannot fail for these digests.
        let ok = unsafe { EVP_DigestInit_ex(ctx, md, std::ptr::null_mut()) };
        assert_eq!(ok, 1, "EVP_DigestInit_ex failed");
        Hasher { ctx, kind }
    }

    /// The digest, as lower-case hex.
    pub fn finish_hex(self) -> String {
        let mut out = [0u8; 64];
        let mut len: c_uint = 0;
        // SAFETY: `out` holds the largest digest (SHA-512's 64 bytes) and
        // `ctx` is live until `Drop`.
        let ok = unsafe { EVP_DigestFinal_ex(self.ctx, out.as_mut_ptr(), &mut len) };
        assert_eq!(ok, 1, "EVP_DigestFinal_ex failed");
        let len = (len as usize).min(self.kind.digest_len());
        out[..len].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl Write for Hasher {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is live for its length and `ctx` until `Drop`.
        let ok = unsafe { EVP_DigestUpdate(self.ctx, buf.as_ptr().cast(), buf.len()) };
        assert_eq!(ok, 1, "EVP_DigestUpdate failed");
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Hasher {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from `EVP_MD_CTX_new` and is freed once.
        unsafe { EVP_MD_CTX_free(self.ctx) };
    }
}

/// The digest of a whole file.
pub fn file_hex(kind: DigestKind, path: &std::path::Path) -> io::Result<String> {
    let mut hasher = Hasher::new(kind);
    io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(hasher.finish_hex())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(kind: DigestKind, data: &[u8]) -> String {
        let mut h = Hasher::new(kind);
        // In two parts, as a download comes.
        h.write_all(&data[..1]).unwrap();
        h.write_all(&data[1..]).unwrap();
        h.finish_hex()
    }

    #[test]
    fn digests_match_the_published_vectors() {
        assert_eq!(
            hex(DigestKind::Md5, b"abc"),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(
            hex(DigestKind::Sha1, b"abc"),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(DigestKind::Sha256, b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(DigestKind::Sha512, b"abc"),
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
        );
    }
}
