//! The control API's socket: bound private to the agent's user, and its
//! connections accepted only from root or that user (peer credentials),
//! each handed to the gRPC server.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::server_error::Error;
use crate::sys::peercred;

/// Binds a temporary name next to `path`, makes it 0600, and renames it to
/// `path`, replacing a stale socket of an earlier run.
pub(super) fn bind_private(path: &Path) -> Result<UnixListener, Error> {
    let temp = path.with_file_name(format!(".control-{}.sock", std::process::id()));
    let _ = fs::remove_file(&temp);
    let listener = UnixListener::bind(&temp).map_err(|err| Error::Bind {
        path: temp.clone(),
        err,
    })?;
    let restricted = fs::set_permissions(&temp, fs::Permissions::from_mode(0o600));
    if let Err(err) = restricted {
        let _ = fs::remove_file(&temp);
        return Err(Error::Permissions { path: temp, err });
    }
    if let Err(err) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(Error::Rename {
            path: path.to_path_buf(),
            err,
        });
    }
    Ok(listener)
}

pub(super) fn accept_loop(
    listener: &UnixListener,
    server: &mut grpcio::Server,
    stopping: &AtomicBool,
) {
    let agent_uid = peercred::current_uid();
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => {
                log::error!("The control API cannot accept connections: {err}");
                return;
            }
        };
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        match peercred::peer_uid(stream.as_raw_fd()) {
            Ok(uid) if uid == 0 || uid == agent_uid => {}
            Ok(uid) => {
                log::warn!("Refused a control API connection from uid {uid}");
                continue;
            }
            Err(err) => {
                log::warn!("Refused a control API connection whose peer is unknown: {err}");
                continue;
            }
        }
        if let Err(err) = stream.set_nonblocking(true) {
            log::warn!("Dropped a control API connection: {err}");
            continue;
        }
        // SAFETY: the fd is a connected stream socket that we own, and
        // `into_raw_fd` gives up ownership: gRPC closes it.
        unsafe { server.add_channel_from_fd(stream.into_raw_fd()) };
    }
}
