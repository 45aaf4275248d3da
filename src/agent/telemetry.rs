//! The `telemetry` block at work: the metrics endpoint (`metrics-http`),
//! started with the agent and stopped at its end. The loop never touches
//! it: a scrape reads the metrics registry alone.
//!
//! A SIGHUP does not move it: a changed `telemetry` block takes effect at
//! the next start, and the reload says so.

use crate::metrics::http::Server;
use crate::spec::TelemetryConfig;

use super::Error;

/// The endpoint, when the config turns it on.
pub(super) fn start(config: &TelemetryConfig) -> Result<Option<Server>, Error> {
    let Some(listen) = config.metrics_listen() else {
        return Ok(None);
    };
    let server =
        Server::start(listen, crate::metrics::render_into).map_err(|err| Error::Telemetry {
            listen: listen.to_string(),
            err,
        })?;
    log::info!("Serving metrics at {}/metrics", server.bound());
    Ok(Some(server))
}

/// Says at a reload that a changed block waits for the next start.
pub(super) fn reloaded(running: &TelemetryConfig, read: &TelemetryConfig) {
    if running.metrics_listen() != read.metrics_listen() {
        log::warn!("SIGHUP: the telemetry block changed; it takes effect at the next start");
    }
}
