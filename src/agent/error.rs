//! The agent's error: what stops it from starting or running.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::api;

#[derive(Debug)]
pub enum Error {
    DataDir {
        path: PathBuf,
        err: io::Error,
    },
    /// `csi_dir` cannot be made or read.
    CsiDir {
        path: PathBuf,
        err: io::Error,
    },
    /// `csi_dir` would cover the data dir (once `-data-dir` had its say).
    CsiDirConflict(String),
    AlreadyRunning {
        socket: PathBuf,
    },
    State(crate::state::Error),
    Api(api::server::Error),
    Watcher(io::Error),
    Signals(io::Error),
    DevPlugin(io::Error),
    /// The metrics endpoint of the `telemetry` block cannot listen.
    Telemetry {
        listen: String,
        err: io::Error,
    },
    /// The cluster membership cannot start, or the node name is taken.
    Cluster(String),
    /// The `volume_plugin` block's endpoint cannot start.
    VolumePlugin(crate::volume_plugin::Error),
    /// The sockets a service manager handed over cannot be used.
    Activation(super::activation::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::DataDir { path, .. } => {
                write!(f, "cannot create the data dir {}", path.display())
            }
            Error::CsiDir { path, .. } => {
                write!(f, "cannot create the csi_dir {}", path.display())
            }
            Error::CsiDirConflict(conflict) => f.write_str(conflict),
            Error::AlreadyRunning { socket } => write!(
                f,
                "another agent is already running with this data dir (it answers on {})",
                socket.display()
            ),
            Error::State(_) => f.write_str("cannot load the agent state"),
            Error::Api(_) => f.write_str("cannot serve the control API"),
            Error::Watcher(_) => f.write_str("cannot watch plugin sockets"),
            Error::Signals(_) => f.write_str("cannot install signal handlers"),
            Error::DevPlugin(_) => f.write_str("cannot start the dev hostpath plugin"),
            Error::Telemetry { listen, .. } => {
                write!(f, "cannot serve the metrics at {listen} (telemetry)")
            }
            Error::Cluster(message) => write!(f, "cluster: {message}"),
            Error::VolumePlugin(_) => f.write_str("cannot serve the volume plugin (volume_plugin)"),
            Error::Activation(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::DataDir { err, .. }
            | Error::CsiDir { err, .. }
            | Error::Watcher(err)
            | Error::Signals(err)
            | Error::DevPlugin(err)
            | Error::Telemetry { err, .. } => Some(err),
            Error::AlreadyRunning { .. } | Error::CsiDirConflict(_) | Error::Cluster(_) => None,
            Error::State(err) => Some(err),
            Error::Api(err) => Some(err),
            Error::VolumePlugin(err) => Some(err),
            Error::Activation(err) => err.source(),
        }
    }
}
