//! Plugin endpoints: the unix socket a CSI plugin serves on.
//!
//! CSI plugins are reached over unix sockets only (`CSI_ENDPOINT`). We accept
//! the three spellings seen in the wild (`unix:///abs`, `unix:/abs`, `/abs`)
//! and reject everything else at parse time, including a path too long for
//! `sockaddr_un.sun_path`, which would otherwise fail later with an obscure
//! connect error.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The longest socket path the kernel accepts: `sun_path` is 108 bytes and
/// needs a trailing NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// A plugin's unix socket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    path: PathBuf,
}

impl Endpoint {
    /// An endpoint for an absolute socket path.
    pub fn from_path(path: impl Into<PathBuf>) -> Result<Endpoint, EndpointError> {
        let path = path.into();
        let text = path.to_string_lossy().into_owned();
        if !path.is_absolute() {
            return Err(EndpointError::Relative(text));
        }
        let len = path.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(EndpointError::TooLong { path: text, len });
        }
        Ok(Endpoint { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The target string grpcio (gRPC core) dials: `unix:/abs/path`.
    pub fn grpc_target(&self) -> String {
        format!("unix:{}", self.path.display())
    }
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(s: &str) -> Result<Endpoint, EndpointError> {
        let path = if let Some(rest) = s.strip_prefix("unix://") {
            // `unix:///abs` has an empty authority; `unix://host/x` is not a
            // local socket.
            if !rest.starts_with('/') {
                return Err(EndpointError::Relative(s.to_string()));
            }
            rest
        } else if let Some(rest) = s.strip_prefix("unix:") {
            rest
        } else if let Some((scheme, _)) = s.split_once("://") {
            return Err(EndpointError::Scheme {
                endpoint: s.to_string(),
                scheme: scheme.to_string(),
            });
        } else {
            s
        };
        if path.is_empty() {
            return Err(EndpointError::Empty);
        }
        Endpoint::from_path(path).map_err(|err| match err {
            EndpointError::Relative(_) => EndpointError::Relative(s.to_string()),
            other => other,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unix://{}", self.path.display())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointError {
    Empty,
    Scheme { endpoint: String, scheme: String },
    Relative(String),
    TooLong { path: String, len: usize },
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointError::Empty => f.write_str("empty endpoint (expected unix:///path/to/csi.sock)"),
            EndpointError::Scheme { endpoint, scheme } => write!(
                f,
                "unsupported endpoint {endpoint:?}: scheme {scheme:?} is not supported, CSI plugins are reached over unix sockets (unix:///path/to/csi.sock)"
            ),
            EndpointError::Relative(endpoint) => write!(
                f,
                "endpoint {endpoint:?} is not an absolute unix socket path (expected unix:///path/to/csi.sock)"
            ),
            EndpointError::TooLong { path, len } => write!(
                f,
                "socket path {path:?} is {len} bytes, longer than the {MAX_SOCKET_PATH}-byte limit of a unix socket address"
            ),
        }
    }
}

impl std::error::Error for EndpointError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_three_unix_spellings() {
        for s in [
            "unix:///run/csi/csi.sock",
            "unix:/run/csi/csi.sock",
            "/run/csi/csi.sock",
        ] {
            let ep: Endpoint = s.parse().unwrap();
            assert_eq!(ep.path(), Path::new("/run/csi/csi.sock"), "{s}");
            assert_eq!(ep.grpc_target(), "unix:/run/csi/csi.sock");
            assert_eq!(ep.to_string(), "unix:///run/csi/csi.sock");
        }
    }

    #[test]
    fn rejects_tcp_with_a_clear_error() {
        let err = "tcp://127.0.0.1:10000".parse::<Endpoint>().unwrap_err();
        assert!(matches!(err, EndpointError::Scheme { ref scheme, .. } if scheme == "tcp"));
        assert!(err.to_string().contains("unix sockets"), "{err}");
    }

    #[test]
    fn rejects_relative_paths() {
        for s in ["csi.sock", "unix://csi.sock", "unix:csi.sock", "./csi.sock"] {
            let err = s.parse::<Endpoint>().unwrap_err();
            assert_eq!(err, EndpointError::Relative(s.to_string()), "{s}");
        }
    }

    #[test]
    fn rejects_empty() {
        assert_eq!("".parse::<Endpoint>(), Err(EndpointError::Empty));
        assert_eq!("unix:".parse::<Endpoint>(), Err(EndpointError::Empty));
    }

    #[test]
    fn socket_path_limit_is_107_bytes() {
        let ok = format!("/{}", "a".repeat(106));
        assert_eq!(ok.len(), 107);
        assert!(ok.parse::<Endpoint>().is_ok());
        let long = format!("/{}", "a".repeat(107));
        let err = long.parse::<Endpoint>().unwrap_err();
        assert_eq!(
            err,
            EndpointError::TooLong {
                path: long.clone(),
                len: 108
            }
        );
        assert!(err.to_string().contains("107-byte limit"), "{err}");
    }
}
