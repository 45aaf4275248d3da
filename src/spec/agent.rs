//! The agent configuration, `agent.hcl`: where the agent keeps its state,
//! its node name and log level, how often it checks plugins, the CSI
//! plugins that run outside the agent, host volumes, docker's settings, and
//! the host directories every `exec` task's root is built from (`chroot_env`,
//! Nomad's client option of that name, with Nomad's default).
//!
//! ```hcl
//! data_dir         = "/var/lib/csi-agent"
//! plugin_heartbeat = "30s"
//! rpc_timeout      = "2m"
//! max_kill_timeout = "30s"
//!
//! # NodeGetVolumeStats of each staged volume, GetCapacity of each plugin.
//! volume_stats_interval = "60s"
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
//!
//! chroot_env {
//!   "/bin/busybox" = "/bin/busybox"
//!   "/etc/ssl"     = "/etc/ssl"
//! }
//! ```

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use log::LevelFilter;

use crate::csi::Endpoint;
use hcl::{Body, Pos};

use super::cluster::{decode_cluster, ClusterConfig};
use super::decode::{Decoder, Fields, MapEntry};
use super::docker::{decode_docker_settings, DockerSettings};
use super::encode::Writer;
use super::exec_settings::{ExecSettings, TASK_ROOT_DIRS};
use super::telemetry::{decode_telemetry, TelemetryConfig};
use super::volume_plugin::{decode_volume_plugin, VolumePluginConfig};
use super::{ClientConfig, Decoded, Invalid, PluginType};

/// Where the agent keeps its state unless `data_dir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/csi-agent";

/// How often plugins are fingerprinted unless `plugin_heartbeat` says
/// otherwise, as in Nomad.
const DEFAULT_PLUGIN_HEARTBEAT: Duration = Duration::from_secs(30);

/// How often each staged volume's usage and condition are asked for
/// (NodeGetVolumeStats) and each plugin's capacity (GetCapacity) unless
/// `volume_stats_interval` says otherwise: kubelet's `volumeStatsAggPeriod`.
pub const DEFAULT_VOLUME_STATS_INTERVAL: Duration = Duration::from_secs(60);

/// The bounds of `volume_stats_interval` (`0s` turns the polls off): a
/// shorter period would make the polls a load of their own, a longer one
/// would make the gauges useless to an alert.
pub const VOLUME_STATS_INTERVAL_BOUNDS: (Duration, Duration) =
    (Duration::from_secs(5), Duration::from_secs(3600));

/// The agent's configuration, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// The agent's state, plugin sockets, staging and task directories.
    pub data_dir: PathBuf,
    /// `csi_dir`: where volumes are staged and published, when not
    /// `data_dir/csi` ([`AgentConfig::csi_dir`]). A managed Docker plugin
    /// sets its propagated mount here, so that every mount the agent makes
    /// for a container reaches the host.
    pub csi_dir: Option<PathBuf>,
    /// The node's name; `None` means the host name, resolved at start.
    pub node_name: Option<String>,
    pub log_level: LevelFilter,
    /// How often each plugin is fingerprinted and probed.
    pub plugin_heartbeat: Duration,
    /// The deadline of each volume RPC (stage, publish, ...): a call that
    /// takes longer is uncertain and retried.
    pub rpc_timeout: Duration,
    /// How often each staged volume's NodeGetVolumeStats and each
    /// plugin's GetCapacity are polled, jittered; zero: never.
    pub volume_stats_interval: Duration,
    /// Nomad's client option: the longest `kill_timeout` a task gets
    /// between its kill signal and SIGKILL, whatever its job says. A
    /// cluster node's promise to stop its writers when cut off counts it.
    pub max_kill_timeout: Duration,
    /// Plugins that run outside the agent, in file order; an ID appears
    /// at most twice, as a controller and a node.
    pub plugins: Vec<PluginConfig>,
    /// Host directories that jobs mount with `type = "host"` volumes.
    pub host_volumes: Vec<HostVolume>,
    /// `cluster { ... }`: the etcd cluster this agent shares volumes and
    /// claims through; `None` for a self-contained agent.
    pub cluster: Option<ClusterConfig>,
    /// What an exec task's root is built from; `None` is Nomad's default
    /// ([`DEFAULT_CHROOT_ENV`]).
    pub chroot_env: Option<Vec<ChrootEntry>>,
    /// Nomad's client `datacenter`, `${node.datacenter}` in job files.
    pub datacenter: String,
    /// Nomad's `region`, `${node.region}` in job files.
    pub region: String,
    /// Nomad's client `meta`: the node's own key/value pairs, `${meta.KEY}`
    /// in job files.
    pub meta: BTreeMap<String, String>,
    /// How docker tasks run: `docker { ... }` or `plugin "docker"`.
    pub docker: DockerSettings,
    /// What exec tasks may ask for: `plugin "exec" { config { allow_caps } }`.
    pub exec: ExecSettings,
    /// `telemetry { ... }`: the Prometheus metrics endpoint, off by default.
    pub telemetry: TelemetryConfig,
    /// `client { reserved { cpu memory } ... }`: placement ([`ClientConfig`]).
    pub client: ClientConfig,
    /// `volume_plugin { ... }`: Docker's volume plugin protocol, off
    /// unless the block is present.
    pub volume_plugin: Option<VolumePluginConfig>,
}

/// Nomad's client defaults for `datacenter` and `region`.
pub const DEFAULT_DATACENTER: &str = "dc1";
pub const DEFAULT_REGION: &str = "global";

/// Nomad's default `chroot_env`: each of these host paths, if it exists,
/// is bound read-only at the same path in an exec task's root.
pub const DEFAULT_CHROOT_ENV: &[&str] = &[
    "/bin",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/run/resolvconf",
    "/sbin",
    "/usr",
];

/// One `chroot_env` entry: the host path `source`, bound read-only at
/// `destination` in every exec task's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChrootEntry {
    pub source: PathBuf,
    pub destination: PathBuf,
}

impl AgentConfig {
    /// Where volumes are staged and published: `csi_dir`, or the data
    /// dir's `csi/`.
    pub fn csi_dir(&self) -> PathBuf {
        self.csi_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("csi"))
    }

    /// Why `csi_dir` cannot serve beside `data_dir`, if it cannot: a mount
    /// on the data dir or above it would cover the agent's own state.
    /// Checked at load and again once `-data-dir` has had its say.
    pub fn csi_dir_conflict(&self) -> Option<String> {
        let csi_dir = self.csi_dir.as_ref()?;
        if self.data_dir.starts_with(csi_dir) {
            return Some(format!(
                "csi_dir {} is the data dir {} or contains it: the volumes mounted there would cover the agent's state",
                csi_dir.display(),
                self.data_dir.display()
            ));
        }
        None
    }

    /// The `chroot_env` in force: the config's, or Nomad's default.
    pub fn chroot_env(&self) -> Vec<ChrootEntry> {
        match &self.chroot_env {
            Some(entries) => entries.clone(),
            None => DEFAULT_CHROOT_ENV
                .iter()
                .map(|path| ChrootEntry {
                    source: PathBuf::from(path),
                    destination: PathBuf::from(path),
                })
                .collect(),
        }
    }
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            csi_dir: None,
            node_name: None,
            log_level: LevelFilter::Info,
            plugin_heartbeat: DEFAULT_PLUGIN_HEARTBEAT,
            volume_stats_interval: DEFAULT_VOLUME_STATS_INTERVAL,
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            max_kill_timeout: DEFAULT_MAX_KILL_TIMEOUT,
            plugins: Vec::new(),
            host_volumes: Vec::new(),
            chroot_env: None,
            cluster: None,
            datacenter: DEFAULT_DATACENTER.to_string(),
            region: DEFAULT_REGION.to_string(),
            meta: BTreeMap::new(),
            docker: DockerSettings::default(),
            exec: ExecSettings::default(),
            telemetry: TelemetryConfig::default(),
            client: ClientConfig::default(),
            volume_plugin: None,
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

/// Nomad's default `max_kill_timeout`.
pub const DEFAULT_MAX_KILL_TIMEOUT: Duration = Duration::from_secs(30);

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
        if let Some(dir) = &self.csi_dir {
            w.string("csi_dir", &dir.to_string_lossy());
        }
        w.opt_string("node_name", self.node_name.as_deref());
        w.string("log_level", &self.log_level.as_str().to_lowercase());
        w.duration("plugin_heartbeat", self.plugin_heartbeat);
        w.duration("rpc_timeout", self.rpc_timeout);
        w.duration("volume_stats_interval", self.volume_stats_interval);
        w.duration("max_kill_timeout", self.max_kill_timeout);
        w.string("datacenter", &self.datacenter);
        w.string("region", &self.region);
        if !self.meta.is_empty() {
            w.map("meta", &self.meta);
        }
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
        if let Some(entries) = &self.chroot_env {
            let pairs: Vec<(String, String)> = entries
                .iter()
                .map(|e| {
                    (
                        e.source.to_string_lossy().into_owned(),
                        e.destination.to_string_lossy().into_owned(),
                    )
                })
                .collect();
            if pairs.is_empty() {
                // Nothing from the host at all: an empty block, not none.
                w.open("chroot_env", None);
                w.close();
            }
            w.pairs(
                "chroot_env",
                pairs.iter().map(|(s, d)| (s.as_str(), d.as_str())),
            );
        }
        self.docker.write(&mut w);
        self.exec.write(&mut w);
        self.telemetry.write(&mut w);
        self.client.write(&mut w);
        if let Some(volume_plugin) = &self.volume_plugin {
            volume_plugin.write(&mut w);
        }
        if let Some(cluster) = &self.cluster {
            w.open("cluster", None);
            w.strings("etcd", &cluster.etcd);
            w.string("prefix", &cluster.prefix);
            w.duration("lease_ttl", cluster.lease_ttl);
            if let Some(after) = cluster.stop_after_disconnect {
                w.duration("stop_after_disconnect", after);
            }
            if let Some(tls) = &cluster.tls {
                w.open("tls", None);
                w.string("ca_file", &tls.ca_file.to_string_lossy());
                if let Some(client) = &tls.client_cert {
                    w.string("cert_file", &client.cert_file.to_string_lossy());
                    w.string("key_file", &client.key_file.to_string_lossy());
                }
                w.close();
            }
            w.close();
        }
        w.finish()
    }
}

fn decode_agent(dec: &Decoder<'_>, body: &Body) -> AgentConfig {
    let mut f = dec.top(body, "the agent config");
    let mut config = AgentConfig::default();
    if let Some((dir, _)) = f.absolute_path("data_dir") {
        config.data_dir = dir;
    }
    if let Some((dir, pos)) = f.absolute_path("csi_dir") {
        let system = ["/proc", "/sys", "/dev"]
            .into_iter()
            .find(|tree| dir.starts_with(tree));
        if let Some(tree) = system {
            f.error(pos, format!("\"csi_dir\" must not be inside {tree}"));
        }
        if dir
            .components()
            .any(|c| !matches!(c, Component::RootDir | Component::Normal(_)))
        {
            f.error(pos, "\"csi_dir\" must not contain `.` or `..`");
        }
        config.csi_dir = Some(dir);
        if let Some(conflict) = config.csi_dir_conflict() {
            f.error(pos, conflict);
        }
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
    if let Some((interval, pos)) = f.duration_at("volume_stats_interval") {
        let (min, max) = VOLUME_STATS_INTERVAL_BOUNDS;
        if !interval.is_zero() && !(min..=max).contains(&interval) {
            f.error(
                pos,
                format!(
                    "\"volume_stats_interval\" must be from {} to {}, or 0s to poll no volume",
                    crate::units::format_duration(min),
                    crate::units::format_duration(max)
                ),
            );
        }
        config.volume_stats_interval = interval;
    }
    if let Some(timeout) = f.duration("max_kill_timeout") {
        config.max_kill_timeout = timeout;
    }
    for (key, value) in [
        ("datacenter", &mut config.datacenter),
        ("region", &mut config.region),
    ] {
        if let Some((text, pos)) = f.string_at(key) {
            if text.is_empty() {
                f.error(
                    pos,
                    format!("{key:?} must not be empty (leave it out for Nomad's default)"),
                );
            }
            *value = text;
        }
    }
    if let Some(meta) = f.map("meta") {
        config.meta = meta;
    }
    // Each ID's blocks so far: their types and where they are.
    let mut seen: Vec<(String, PluginType, Pos)> = Vec::new();
    let plugins = f.repeated_labeled_blocks("plugin");
    let (docker, exec, plugins) = decode_docker_settings(&mut f, plugins);
    config.docker = docker;
    config.exec = exec;
    for (block, id) in plugins {
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
        let path = v.absolute_path("path").map(|(path, _)| path);
        let path = v.require("path", path);
        let read_only = v.bool("read_only").unwrap_or(false);
        v.finish();
        config.host_volumes.push(HostVolume {
            name,
            path: path.unwrap_or_default(),
            read_only,
        });
    }
    if let Some(entries) = f.map_entries("chroot_env") {
        config.chroot_env = Some(decode_chroot_env(&f, entries));
    }
    config.client = super::placement::decode_client(&mut f);
    if let Some(block) = f.block("cluster") {
        config.cluster = decode_cluster(&mut f.nested(block));
    }
    if let Some(block) = f.block("telemetry") {
        config.telemetry = decode_telemetry(&mut f.nested(block));
    }
    if let Some(block) = f.block("volume_plugin") {
        config.volume_plugin = Some(decode_volume_plugin(&mut f.nested(block)));
    }
    f.finish();
    config
}

/// Checks each `"source" = "destination"` of `chroot_env`: absolute paths
/// without `..`, a destination that is not `/` nor one the agent makes,
/// and no destination given twice.
fn decode_chroot_env(f: &Fields<'_>, entries: Vec<MapEntry>) -> Vec<ChrootEntry> {
    let mut out: Vec<ChrootEntry> = Vec::new();
    let mut first_at: Vec<(PathBuf, Pos)> = Vec::new();
    for entry in entries {
        let source = chroot_path(f, "source", &entry.key, entry.key_pos);
        let destination = chroot_path(f, "destination", &entry.value, entry.value_pos);
        let (Some(source), Some(destination)) = (source, destination) else {
            continue;
        };
        if destination == Path::new("/") {
            f.error(
                entry.value_pos,
                format!(
                    "chroot_env destination \"/\" of {:?} would replace the task's whole root; bind it at a path inside the root",
                    entry.key
                ),
            );
            continue;
        }
        if let Some((dir, what)) = TASK_ROOT_DIRS
            .iter()
            .find(|(dir, _)| destination.starts_with(dir))
        {
            f.error(
                entry.value_pos,
                format!(
                    "chroot_env destination {:?} is inside {dir}, {what}, which the agent makes for every exec task; leave it out",
                    entry.value
                ),
            );
            continue;
        }
        if let Some((_, at)) = first_at.iter().find(|(d, _)| *d == destination) {
            f.error(
                entry.value_pos,
                format!(
                    "chroot_env destination {:?} is given twice (first at {at})",
                    entry.value
                ),
            );
            continue;
        }
        first_at.push((destination.clone(), entry.value_pos));
        out.push(ChrootEntry {
            source,
            destination,
        });
    }
    out
}

/// A `chroot_env` path: absolute, without `..`. A relative one suggests
/// itself made absolute.
fn chroot_path(f: &Fields<'_>, side: &str, text: &str, pos: Pos) -> Option<PathBuf> {
    let path = Path::new(text);
    if !path.is_absolute() {
        let hint = if text.is_empty() {
            String::new()
        } else {
            format!(" (did you mean \"/{}\"?)", text.trim_start_matches("./"))
        };
        f.error(
            pos,
            format!("chroot_env {side} {text:?} must be an absolute path{hint}"),
        );
        return None;
    }
    if path.components().any(|c| c == Component::ParentDir) {
        f.error(
            pos,
            format!("chroot_env {side} {text:?} must not contain \"..\""),
        );
        return None;
    }
    Some(path.to_path_buf())
}
