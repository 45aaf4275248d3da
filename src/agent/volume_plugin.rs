//! The `volume_plugin` block at work: Docker's Volume Plugin protocol
//! ([`crate::volume_plugin`]), started beside the control API and sending
//! its calls on the same channel. It is stopped last, once the loop's
//! state, and so every answer a handler still waits for, is gone.
//!
//! A SIGHUP does not move it: a changed block takes effect at the next
//! start, and the reload says so.

use std::os::unix::net::UnixListener;

use crossbeam_channel::Sender;

use crate::api::Call;
use crate::spec::AgentConfig;
use crate::volume_plugin::Server;

use super::Error;

/// The endpoint, when the config has the block: on `handed`, the socket
/// a service manager handed over, if it did.
pub(super) fn start(
    config: &AgentConfig,
    handed: Option<UnixListener>,
    calls: &Sender<Call>,
) -> Result<Option<Server>, Error> {
    let Some(block) = &config.volume_plugin else {
        return Ok(None);
    };
    let server = Server::start(block, handed, calls.clone(), config.cluster.is_some())
        .map_err(Error::VolumePlugin)?;
    log::info!(
        "Serving the volume plugin {:?} at {}",
        block.name,
        server.socket().display()
    );
    Ok(Some(server))
}

/// Says at a reload that a changed block waits for the next start.
pub(super) fn reloaded(running: &AgentConfig, read: &AgentConfig) {
    if running.volume_plugin != read.volume_plugin {
        log::warn!("SIGHUP: the volume_plugin block changed; it takes effect at the next start");
    }
}
