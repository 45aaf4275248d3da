//! The cluster's TLS settings as the etcd client uses them: the PEM files
//! of `cluster { tls { ca_file cert_file key_file } }`, read and checked
//! once when the agent starts, and made into gRPC channel credentials for
//! each member. TLS itself is BoringSSL inside gRPC's core, linked into
//! the binary (grpcio's `boringssl` feature), or, in the development build
//! that links the system's gRPC core (`GRPCIO_SYS_USE_PKG_CONFIG=1`), the
//! system's OpenSSL that core links.
//!
//! Apart from the client because it handles files and key material: the
//! private key is held only to be handed to gRPC, and never shown.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use grpcio::{ChannelCredentials, ChannelCredentialsBuilder};

/// Why a TLS file cannot be used; `field` is its name in the `tls` block.
#[derive(Debug)]
pub enum Error {
    /// The file cannot be read.
    Read {
        field: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The file holds no PEM block of the kind `field` needs.
    NotPem {
        field: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read { field, path, .. } => {
                write!(f, "cannot read {field} {}", path.display())
            }
            Error::NotPem {
                field,
                path,
                expected,
            } => write!(
                f,
                "{field} {} holds no PEM {expected} (a \"-----BEGIN ...\" block)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Read { source, .. } => Some(source),
            Error::NotPem { .. } => None,
        }
    }
}

/// What the client checks and proves over TLS: the CA certificates a
/// member's certificate must chain to, and optionally the client's own
/// certificate and private key, all PEM. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct Tls {
    ca: Vec<u8>,
    /// The certificate (chain) and its key.
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("ca_bytes", &self.ca.len())
            .field("client_certificate", &self.client.is_some())
            .finish()
    }
}

impl Tls {
    /// Reads the PEM files: `ca_file`, and `client` (`cert_file`,
    /// `key_file`) when the members ask for a client certificate. Each
    /// must hold a PEM block of its kind; whether they belong together is
    /// found out by the TLS handshake.
    pub fn load(ca_file: &Path, client: Option<(&Path, &Path)>) -> Result<Tls, Error> {
        let ca = read_pem("ca_file", ca_file, "CERTIFICATE", "certificate")?;
        let client = match client {
            Some((cert_file, key_file)) => Some((
                read_pem("cert_file", cert_file, "CERTIFICATE", "certificate")?,
                read_pem("key_file", key_file, "PRIVATE KEY", "private key")?,
            )),
            None => None,
        };
        Ok(Tls { ca, client })
    }

    /// Whether the client has a certificate to present.
    pub fn has_client_cert(&self) -> bool {
        self.client.is_some()
    }

    /// The credentials of one channel (gRPC takes them over).
    pub(super) fn credentials(&self) -> ChannelCredentials {
        let builder = ChannelCredentialsBuilder::new().root_cert(self.ca.clone());
        match &self.client {
            Some((cert, key)) => builder.cert(cert.clone(), key.clone()).build(),
            None => builder.build(),
        }
    }
}

/// The contents of `path`, which must hold a PEM block whose label ends
/// with `label` ("CERTIFICATE"; "PRIVATE KEY" also takes "RSA PRIVATE
/// KEY" and "EC PRIVATE KEY"). A DER file is refused here rather than by
/// gRPC, which cannot take a NUL byte.
fn read_pem(
    field: &'static str,
    path: &Path,
    label: &str,
    expected: &'static str,
) -> Result<Vec<u8>, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Read {
        field,
        path: path.to_path_buf(),
        source,
    })?;
    let text = std::str::from_utf8(&bytes).unwrap_or("");
    let has_block = text.lines().any(|line| {
        line.strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.strip_suffix("-----"))
            .is_some_and(|name| name.ends_with(label))
    });
    if !has_block || bytes.contains(&0) {
        return Err(Error::NotPem {
            field,
            path: path.to_path_buf(),
            expected,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn tls_files_must_exist_and_hold_pem_of_their_kind() {
        let dir = std::env::temp_dir().join(format!("csi-agent-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let key = b"-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n";
        let ca = write(&dir, "ca.pem", cert);
        let crt = write(&dir, "client.pem", cert);
        let k = write(&dir, "client.key", key);
        let tls = Tls::load(&ca, Some((&crt, &k))).unwrap();
        assert!(tls.has_client_cert());
        // The key is never shown.
        let shown = format!("{tls:?}");
        assert!(!shown.contains("MHc"), "{shown}");

        let missing = dir.join("missing.pem");
        let err = Tls::load(&missing, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("cannot read ca_file {}", missing.display())
        );
        assert!(std::error::Error::source(&err).is_some());

        // A key where the certificate belongs, and the other way round.
        let err = Tls::load(&ca, Some((&k, &k))).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cert_file {} holds no PEM certificate (a \"-----BEGIN ...\" block)",
                k.display()
            )
        );
        let err = Tls::load(&ca, Some((&crt, &crt))).unwrap_err();
        assert!(err.to_string().starts_with("key_file"), "{err}");
        // DER (binary, with NUL bytes) is not PEM.
        let der = write(&dir, "ca.der", b"\x30\x82\x01\x00\x00");
        let err = Tls::load(&der, None).unwrap_err();
        assert!(
            err.to_string().contains("holds no PEM certificate"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
