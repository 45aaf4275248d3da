//! Plugin supervision: the registry, the per-plugin instance manager,
//! fingerprinting and health.
//!
//! A plugin ID is a set of *instances*, as in Nomad: one `monolith`, or a
//! `controller` and a `node` run as separate processes (a config `plugin`
//! block each, or a task's `csi_plugin` each). An ID never has two
//! instances serving one service (the config refuses it, and a plugin
//! task's instance replaces those it conflicts with), so the instance's
//! type names it: [`InstanceKey`] is the ID and the type. Controller RPCs
//! go to the instance that serves the [`Service::Controller`], node RPCs
//! to the one that serves the [`Service::Node`].
//!
//! Every instance, whether a `plugin` block of the agent config, the
//! built-in plugin of `agent -dev` or a task with a `csi_plugin` stanza, is
//! a [`PluginSpec`] in the [`Registry`], which the main loop owns, and gets
//! one [`Instance`] thread that owns its gRPC connection: it waits for the
//! socket with inotify ([`watch`]), probes until the plugin is ready,
//! [fingerprints](fingerprint) it, and heartbeats, sending each outcome to
//! the main loop as a [`Report`]. The registry turns reports into health
//! changes, events and subscriber notifications.

pub mod fingerprint;
pub mod instance;
pub mod registry;
pub mod watch;
pub mod workers;

use std::fmt;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::csi::Endpoint;
use crate::spec::PluginType;

pub use fingerprint::Fingerprint;
pub use instance::{Instance, InstanceSettings};
pub use registry::{
    CapacityStatus, HealthEvent, PluginRecord, PluginStatus, Registry, RegistryEvent, StatusReport,
};

/// Who registered a plugin, so that the right party removes it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// A `plugin` block of the agent config; SIGHUP removes it.
    Config,
    /// The built-in hostpath plugin of `agent -dev`.
    Dev,
    /// A task with a `csi_plugin` stanza.
    Task { alloc: String, task: String },
}

impl Source {
    /// The form kept in the state and shown by `plugin status`.
    pub fn as_string(&self) -> String {
        match self {
            Source::Config => "config".to_string(),
            Source::Dev => "dev".to_string(),
            Source::Task { alloc, task } => format!("task {alloc}/{task}"),
        }
    }

    pub fn parse(text: &str) -> Option<Source> {
        match text {
            "config" => Some(Source::Config),
            "dev" => Some(Source::Dev),
            _ => {
                let (alloc, task) = text.strip_prefix("task ")?.split_once('/')?;
                Some(Source::Task {
                    alloc: alloc.to_string(),
                    task: task.to_string(),
                })
            }
        }
    }
}

/// What the agent needs to know to supervise a plugin instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginSpec {
    pub id: String,
    /// The socket, as the agent reaches it.
    pub endpoint: Endpoint,
    pub plugin_type: PluginType,
    pub source: Source,
    /// For a plugin task in a root of its own: where it sees the agent's
    /// `csi/<plugin>` dir, its `stage_publish_base_dir`. The staging and
    /// publish paths of its RPCs are given under it; `None` means host
    /// paths.
    pub stage_publish_base_dir: Option<PathBuf>,
}

impl PluginSpec {
    pub fn key(&self) -> InstanceKey {
        InstanceKey::new(&self.id, self.plugin_type)
    }
}

/// Which instance of a plugin: its ID and its type, which tells the
/// instances of one ID apart (see the module docs). Ordered by ID, then
/// type name: a plugin's controller comes before its node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InstanceKey {
    pub plugin_id: String,
    pub plugin_type: PluginType,
}

impl InstanceKey {
    pub fn new(plugin_id: &str, plugin_type: PluginType) -> InstanceKey {
        InstanceKey {
            plugin_id: plugin_id.to_string(),
            plugin_type,
        }
    }

    /// The name of its thread: `plugin-<id>` for a monolith,
    /// `plugin-<id>-<type>` for a part of a split plugin.
    pub fn thread_name(&self) -> String {
        match self.plugin_type {
            PluginType::Monolith => format!("plugin-{}", self.plugin_id),
            other => format!("plugin-{}-{other}", self.plugin_id),
        }
    }
}

impl Ord for InstanceKey {
    fn cmp(&self, other: &InstanceKey) -> std::cmp::Ordering {
        (&self.plugin_id, self.plugin_type.as_str())
            .cmp(&(&other.plugin_id, other.plugin_type.as_str()))
    }
}

impl PartialOrd for InstanceKey {
    fn partial_cmp(&self, other: &InstanceKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for InstanceKey {
    /// `hp` for a monolith, as the plugin has one instance; `hp
    /// (controller)` for a part of a split plugin.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.plugin_type {
            PluginType::Monolith => f.write_str(&self.plugin_id),
            other => write!(f, "{} ({other})", self.plugin_id),
        }
    }
}

/// The CSI service a volume RPC belongs to, which picks the instance of
/// the volume's plugin that gets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// CreateVolume, DeleteVolume, ValidateVolumeCapabilities,
    /// ControllerPublish/Unpublish, ControllerExpandVolume, snapshots,
    /// ListVolumes.
    Controller,
    /// NodeStage/Unstage, NodePublish/Unpublish, NodeGetVolumeStats,
    /// NodeExpandVolume; and the agent's own host binds, which go with the
    /// node's calls.
    Node,
}

impl Service {
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Controller => "controller",
            Service::Node => "node",
        }
    }

    /// Whether an instance of `plugin_type` serves it.
    pub fn served_by(self, plugin_type: PluginType) -> bool {
        match self {
            Service::Controller => plugin_type.has_controller(),
            Service::Node => plugin_type.has_node(),
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a plugin's health stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Registered, not healthy yet: waiting for the socket or for `ready`.
    Pending,
    Healthy,
    Unhealthy,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Pending => "pending",
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
        }
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an instance tells the main loop.
// A fingerprint makes `Status` large, but reports are few (one per
// heartbeat) and moved once, so boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Report {
    /// The plugin's health now. `fingerprint` is set when one was just
    /// taken, `heartbeat` when the plugin just answered a probe.
    Status {
        health: Health,
        reason: String,
        fingerprint: Option<Fingerprint>,
        heartbeat: Option<SystemTime>,
    },
    /// The thread has ended, after a stop or shutdown command.
    Stopped,
}
