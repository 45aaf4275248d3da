//! Why the control API's server cannot start: its socket cannot be bound
//! (`listen.rs`), gRPC or its thread cannot start (`server.rs`). Both
//! return it; `server.rs` names it as the server's public error.

use std::fmt;
use std::io;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    Bind { path: PathBuf, err: io::Error },
    Permissions { path: PathBuf, err: io::Error },
    Rename { path: PathBuf, err: io::Error },
    Grpc(grpcio::Error),
    Thread(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Bind { path, .. } => write!(f, "cannot listen on {}", path.display()),
            Error::Permissions { path, .. } => {
                write!(f, "cannot restrict {} to mode 0600", path.display())
            }
            Error::Rename { path, .. } => write!(f, "cannot put the socket at {}", path.display()),
            Error::Grpc(_) => f.write_str("cannot start the gRPC server"),
            Error::Thread(_) => f.write_str("cannot start the control API thread"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Bind { err, .. }
            | Error::Permissions { err, .. }
            | Error::Rename { err, .. }
            | Error::Thread(err) => Some(err),
            Error::Grpc(err) => Some(err),
        }
    }
}
