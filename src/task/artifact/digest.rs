//! Checksums of fetched files (md5, sha1, sha256, sha512) through the
//! `EVP_Digest*` functions of the TLS library the build already links for
//! gRPC (BoringSSL, or the system's OpenSSL in the development build), by
//! way of the C shim (`ffi`): a [`Hasher`] is a `Write` the downloaded
//! bytes are copied into.

use std::ffi::CStr;
use std::io::{self, Write};

use super::ffi::{Digest, CSI_DIGEST_MAX_SIZE};
use crate::spec::DigestKind;

/// A digest being computed.
pub struct Hasher {
    digest: Digest,
    kind: DigestKind,
}

impl Hasher {
    pub fn new(kind: DigestKind) -> Hasher {
        let algorithm: &CStr = match kind {
            DigestKind::Md5 => c"md5",
            DigestKind::Sha1 => c"sha1",
            DigestKind::Sha256 => c"sha256",
            DigestKind::Sha512 => c"sha512",
        };
        // Fails only out of memory: BoringSSL and OpenSSL know all four algorithms.
        let digest = Digest::new(algorithm).expect("cannot start a digest");
        Hasher { digest, kind }
    }

    /// The digest, as lower-case hex.
    pub fn finish_hex(mut self) -> String {
        let mut out = [0u8; CSI_DIGEST_MAX_SIZE];
        let len = self
            .digest
            .finish(&mut out)
            .expect("cannot finish a digest");
        let len = len.min(self.kind.digest_len());
        out[..len].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl Write for Hasher {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        assert!(self.digest.update(buf), "cannot update a digest");
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
