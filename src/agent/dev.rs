//! `agent -dev` and `agent -hostpath`: the built-in hostpath plugin, run by
//! the agent as a child process (`csi-agent hostpath`) and registered as
//! plugin `hostpath`, so a newcomer can try csi-agent with nothing else
//! installed, and a managed Docker plugin has a plugin inside it, its
//! volumes under the data dir's `hostpath/`.
//!
//! The child is restarted with backoff if it exits, and stopped with
//! SIGTERM (then SIGKILL) when the agent stops. It runs `-strict`: what a
//! conforming CO never sends is refused and listed in
//! `data_dir/hostpath/strict-violations`, which stays empty.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::csi::{Backoff, Endpoint};
use crate::plugin::{PluginSpec, Source};
use crate::spec::PluginType;

/// The dev plugin's ID.
pub const PLUGIN_ID: &str = "hostpath";

/// The volume `-dev` creates on the built-in plugin.
pub const DEMO_VOLUME: &str = "demo";

pub const DEMO_VOLUME_HCL: &str = r#"
id        = "demo"
name      = "demo"
type      = "csi"
plugin_id = "hostpath"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
"#;

/// How long the child gets to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

const RESTART_BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

pub struct DevPlugin {
    endpoint: Endpoint,
    base_dir: PathBuf,
    node_id: String,
    child: Option<Child>,
    restart_at: Option<Instant>,
    restarts: u32,
}

impl DevPlugin {
    /// Starts the plugin with its socket and volumes under `data_dir`.
    pub fn start(data_dir: &Path, node_id: &str) -> io::Result<DevPlugin> {
        let socket_dir = data_dir.join("plugins").join(PLUGIN_ID);
        std::fs::create_dir_all(&socket_dir)?;
        let endpoint = Endpoint::from_path(socket_dir.join("csi.sock"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut plugin = DevPlugin {
            endpoint,
            base_dir: data_dir.join("hostpath"),
            node_id: node_id.to_string(),
            child: None,
            restart_at: None,
            restarts: 0,
        };
        plugin.spawn()?;
        Ok(plugin)
    }

    pub fn spec(&self) -> PluginSpec {
        PluginSpec {
            id: PLUGIN_ID.to_string(),
            endpoint: self.endpoint.clone(),
            plugin_type: PluginType::Monolith,
            source: Source::Dev,
            stage_publish_base_dir: None,
        }
    }

    fn spawn(&mut self) -> io::Result<()> {
        let exe = std::env::current_exe()?;
        let child = Command::new(exe)
            .arg("hostpath")
            .arg("-endpoint")
            .arg(self.endpoint.path())
            .arg("-base-dir")
            .arg(&self.base_dir)
            .arg("-node-id")
            .arg(&self.node_id)
            // The agent is a conforming CO: the dev plugin refuses, and
            // lists in its base dir, anything a conforming CO never sends.
            .arg("-strict")
            .spawn()?;
        log::info!(
            "Started the built-in hostpath plugin (pid {}) on {}",
            child.id(),
            self.endpoint.path().display()
        );
        self.child = Some(child);
        Ok(())
    }

    /// When the child, which exited, is to be started again.
    pub fn restart_at(&self) -> Option<Instant> {
        self.restart_at
    }

    /// Restarts the child if it exited and its restart is due; call it on
    /// SIGCHLD and at [`DevPlugin::restart_at`].
    pub fn supervise(&mut self) {
        if let Some(child) = &mut self.child {
            match child.try_wait() {
                Ok(None) => return,
                Ok(Some(status)) => {
                    let delay = RESTART_BACKOFF.ceiling(self.restarts);
                    log::warn!(
                        "The built-in hostpath plugin exited ({status}); restarting in {}",
                        crate::units::format_duration(delay)
                    );
                    self.child = None;
                    self.restart_at = Some(Instant::now() + delay);
                    self.restarts = self.restarts.saturating_add(1);
                }
                Err(err) => {
                    log::warn!("Cannot check the built-in hostpath plugin: {err}");
                    return;
                }
            }
        }
        if self.restart_at.is_some_and(|at| at <= Instant::now()) {
            self.restart_at = None;
            if let Err(err) = self.spawn() {
                log::error!("Cannot restart the built-in hostpath plugin: {err}");
                self.restart_at = Some(Instant::now() + RESTART_BACKOFF.cap);
            }
        }
    }

    /// Stops the child: SIGTERM, then SIGKILL after `STOP_TIMEOUT`.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Err(err) = crate::sys::process::kill(child.id(), libc::SIGTERM) {
            log::debug!("SIGTERM to the built-in hostpath plugin: {err}");
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    log::warn!("The built-in hostpath plugin ignored SIGTERM; killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                // A child's exit has no channel to wait on; poll briefly.
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        log::info!("Stopped the built-in hostpath plugin");
    }
}

impl Drop for DevPlugin {
    fn drop(&mut self) {
        self.stop();
    }
}
