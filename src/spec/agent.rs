//! The agent configuration, `agent.hcl`: where the agent keeps its state,
//! its node name and log level, how often it checks plugins, the CSI
//! plugins that run outside the agent, and host volumes.
//!
//! ```hcl
//! data_dir         = "/var/lib/csi-agent"
//! plugin_heartbeat = "30s"
//! rpc_timeout      = "2m"
//!
//! plugin "hostpath" {
//!   socket         = "/run/csi/hostpath.sock"
//!   type           = "monolith"
//!   health_timeout = "30s"
//! }
//!
//! # A plugin split into a controller and a node process: one ID, two
//! # blocks (at most one of each type; a monolith stands alone).
//! plugin "ebs" {
//!   socket = "/run/csi/ebs-controller.sock"
//!   type   = "controller"
//! }
//! plugin "ebs" {
//!   socket = "/run/csi/ebs-node.sock"
//!   type   = "node"
//! }
//!
//! host_volume "certs" {
//!   path      = "/etc/ssl/certs"
//!   read_only = true
//! }
//! ```

use std::path::PathBuf;
use std::time::Duration;

use log::LevelFilter;

use crate::csi::Endpoint;
use crate::hcl::{Body, Pos};

use super::decode::{Decoder, Fields};
use super::encode::Writer;
use super::{Decoded, Invalid, PluginType};

/// Where the agent keeps its state unless `data_dir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/csi-agent";

/// How often plugins are fingerprinted unless `plugin_heartbeat` says
/// otherwise, as in Nomad.
const DEFAULT_PLUGIN_HEARTBEAT: Duration = Duration::from_secs(30);

/// The agent's configuration, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// The agent's state, plugin sockets, staging and task directories.
    pub data_dir: PathBuf,
    /// The node's name; `None` means the host name, resolved at start.
    pub node_name: Option<String>,
    pub log_level: LevelFilter,
    /// How often each plugin is fingerprinted and probed.
    pub plugin_heartbeat: Duration,
    /// The deadline of each volume RPC (stage, publish, ...): a call that
    /// takes longer is uncertain and retried.
    pub rpc_timeout: Duration,
    /// Plugins that run outside the agent, in file order; an ID appears
    /// at most twice, as a controller and a node.
    pub plugins: Vec<PluginConfig>,
    /// Host directories that jobs mount with `type = "host"` volumes.
    pub host_volumes: Vec<HostVolume>,
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            node_name: None,
            log_level: LevelFilter::Info,
            plugin_heartbeat: DEFAULT_PLUGIN_HEARTBEAT,
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            plugins: Vec::new(),
            host_volumes: Vec::new(),
        }
    }
}

/// How long a plugin may take to become healthy unless `health_timeout`
/// says otherwise, as in Nomad's `csi_plugin`.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(30);

/// The deadline of a volume RPC unless `rpc_timeout` says otherwise: Nomad's
/// and kubelet's 2 minutes.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(120);

/// `plugin "<id>" { socket, type, health_timeout }`: a CSI plugin the agent
/// connects to but does not start; one process of it, when a controller
/// block and a node block share the ID.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    pub id: String,
    pub socket: Endpoint,
    pub plugin_type: PluginType,
    /// How long the plugin may take to become healthy before it is marked
    /// unhealthy (probing goes on).
    pub health_timeout: Duration,
}

/// `host_volume "<name>" { path, read_only }`: a host directory that jobs
/// may mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostVolume {
    pub name: String,
    pub path: PathBuf,
    pub read_only: bool,
}

impl AgentConfig {
    /// Decodes and validates an agent configuration; `file` names it in
    /// messages.
    pub fn decode(src: &str, file: &str) -> Result<Decoded<AgentConfig>, Invalid> {
        Decoder::run(src, file, decode_agent)
    }

    /// The configuration as HCL that decodes to it.
    pub fn to_hcl(&self) -> String {
        let mut w = Writer::new();
        w.string("data_dir", &self.data_dir.to_string_lossy());
        w.opt_string("node_name", self.node_name.as_deref());
        w.string("log_level", &self.log_level.as_str().to_lowercase());
        w.duration("plugin_heartbeat", self.plugin_heartbeat);
        w.duration("rpc_timeout", self.rpc_timeout);
        for plugin in &self.plugins {
            w.open("plugin", Some(&plugin.id));
            w.string("socket", &plugin.socket.path().to_string_lossy());
            w.string("type", plugin.plugin_type.as_str());
            w.duration("health_timeout", plugin.health_timeout);
            w.close();
        }
        for volume in &self.host_volumes {
            w.open("host_volume", Some(&volume.name));
            w.string("path", &volume.path.to_string_lossy());
            w.plain("read_only", volume.read_only);
            w.close();
        }
        w.finish()
    }
}

fn decode_agent(dec: &Decoder<'_>, body: &Body) -> AgentConfig {
    let mut f = dec.top(body, "the agent config");
    let mut config = AgentConfig::default();
    if let Some((dir, _)) = absolute_path(&mut f, "data_dir") {
        config.data_dir = dir;
    }
    if let Some((name, pos)) = f.string_at("node_name") {
        if name.is_empty() {
            f.error(
                pos,
                "\"node_name\" must not be empty (leave it out to use the host name)",
            );
        }
        config.node_name = Some(name);
    }
    if let Some((text, pos)) = f.string_at("log_level") {
        match text.parse::<LevelFilter>() {
            Ok(level) => config.log_level = level,
            // `LevelFilter`'s own error does not name the choices.
            Err(_) => f.error(
                pos,
                format!(
                    "unknown log level {text:?} (expected one of: off, error, warn, info, debug, trace)"
                ),
            ),
        }
    }
    if let Some(heartbeat) = f.duration("plugin_heartbeat") {
        config.plugin_heartbeat = heartbeat;
    }
    if let Some(timeout) = f.duration("rpc_timeout") {
        config.rpc_timeout = timeout;
    }
    // Each ID's blocks so far: their types and where they are.
    let mut seen: Vec<(String, PluginType, Pos)> = Vec::new();
    for (block, id) in f.repeated_labeled_blocks("plugin") {
        let mut p = f.labeled(block, &id);
        let at = block.labels[0].span.start;
        dec.check_id(at, "plugin ID", &id);
        let plugin_type = p.parsed("type");
        let plugin_type = p.require("type", plugin_type);
        let socket = p.parsed::<Endpoint>("socket");
        let socket = p.require("socket", socket);
        let health_timeout = p.duration("health_timeout");
        p.finish();
        if let Some(plugin_type) = plugin_type {
            let earlier = seen
                .iter()
                .find(|(other, t, _)| *other == id && t.conflicts(plugin_type));
            if let Some((_, first, first_at)) = earlier {
                let clash = if *first == plugin_type {
                    format!(
                        "plugin {id:?} of type {:?} is declared twice (first at {first_at})",
                        plugin_type.as_str()
                    )
                } else {
                    format!(
                        "plugin {id:?} of type {:?} overlaps its {:?} block at {first_at}",
                        plugin_type.as_str(),
                        first.as_str()
                    )
                };
                p.error(
                    at,
                    format!(
                        "{clash}: one ID has at most one controller and one node, as blocks of type \"controller\" and \"node\" or a single \"monolith\""
                    ),
                );
                continue;
            }
            seen.push((id.clone(), plugin_type, at));
        }
        if let (Some(socket), Some(plugin_type)) = (socket, plugin_type) {
            config.plugins.push(PluginConfig {
                id,
                socket,
                plugin_type,
                health_timeout: health_timeout.unwrap_or(DEFAULT_HEALTH_TIMEOUT),
            });
        }
    }
    for (block, name) in f.labeled_blocks("host_volume") {
        let mut v = f.labeled(block, &name);
        dec.check_id(block.labels[0].span.start, "host volume name", &name);
        let path = absolute_path(&mut v, "path").map(|(path, _)| path);
        let path = v.require("path", path);
        let read_only = v.bool("read_only").unwrap_or(false);
        v.finish();
        config.host_volumes.push(HostVolume {
            name,
            path: path.unwrap_or_default(),
            read_only,
        });
    }
    f.finish();
    config
}

/// A string attribute that must be an absolute path, with its position.
pub(crate) fn absolute_path(f: &mut Fields<'_>, key: &'static str) -> Option<(PathBuf, Pos)> {
    let (text, pos) = f.string_at(key)?;
    if !text.starts_with('/') {
        f.error(
            pos,
            format!(
                "{key:?} in {} must be an absolute path, found {text:?}",
                f.what()
            ),
        );
        return None;
    }
    Some((PathBuf::from(text), pos))
}
