//! The agent config's `volume_plugin` block: the agent serves Docker's
//! Volume Plugin protocol, so that `docker`, `docker compose` and `podman`
//! use CSI volumes.
//!
//! ```hcl
//! volume_plugin {
//!   name            = "csi"     # docker volume create -d csi
//!   socket          = ""        # default /run/docker/plugins/<name>.sock
//!   plugin_id       = ""        # the CSI plugin of a Create without -o plugin_id
//!   mount_timeout   = "25s"     # how long Mount and Create wait
//!   unmount_grace   = "30s"     # before a lost unmount's claim is released
//!   podman_endpoint = ""        # Podman's API socket, for lost unmounts
//!   secrets_dir     = ""        # named secrets for -o secrets=NAME
//! }
//! ```
//!
//! Off unless the block is present.

use std::path::PathBuf;
use std::time::Duration;

use super::decode::Fields;
use super::encode::Writer;

/// The driver name unless `name` says otherwise.
pub const DEFAULT_VOLUME_PLUGIN_NAME: &str = "csi";

/// Where dockerd looks for plugin sockets: `<dir>/<name>.sock`.
pub const DOCKER_PLUGIN_DIR: &str = "/run/docker/plugins";

/// dockerd's timeout of a call to a volume plugin: `defaultTimeOut`, 30
/// (seconds), in moby's `pkg/plugins/client.go`. `mount_timeout` must be
/// shorter, so that dockerd reads the agent's answer (an error that says
/// what happened, after which the claim is released) rather than giving
/// up on its own.
pub const DOCKERD_PLUGIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a Mount or Create waits for its claim or volume unless
/// `mount_timeout` says otherwise: under [`DOCKERD_PLUGIN_TIMEOUT`], with
/// room for the answer to travel.
pub const DEFAULT_MOUNT_TIMEOUT: Duration = Duration::from_secs(25);

/// How long a plugin claim whose mount no container uses any more is kept
/// before it is released, unless `unmount_grace` says otherwise.
pub const DEFAULT_UNMOUNT_GRACE: Duration = Duration::from_secs(30);

/// `volume_plugin { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumePluginConfig {
    /// The driver name clients use (`-d NAME`, `--driver NAME`).
    pub name: String,
    /// The socket served; [`VolumePluginConfig::socket_path`] applies the
    /// default.
    pub socket: Option<PathBuf>,
    /// The CSI plugin of a Create that names none.
    pub plugin_id: Option<String>,
    pub mount_timeout: Duration,
    pub unmount_grace: Duration,
    /// Podman's API socket, where the lost-unmount reconciliation asks
    /// for Podman's containers.
    pub podman_endpoint: Option<PathBuf>,
    /// The root-only directory of named secrets (`<dir>/<NAME>/<KEY>`)
    /// that a Create's `-o secrets=NAME` chooses.
    pub secrets_dir: Option<PathBuf>,
}

impl Default for VolumePluginConfig {
    fn default() -> VolumePluginConfig {
        VolumePluginConfig {
            name: DEFAULT_VOLUME_PLUGIN_NAME.to_string(),
            socket: None,
            plugin_id: None,
            mount_timeout: DEFAULT_MOUNT_TIMEOUT,
            unmount_grace: DEFAULT_UNMOUNT_GRACE,
            podman_endpoint: None,
            secrets_dir: None,
        }
    }
}

impl VolumePluginConfig {
    /// The socket served: `socket`, or `/run/docker/plugins/<name>.sock`.
    pub fn socket_path(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(DOCKER_PLUGIN_DIR).join(format!("{}.sock", self.name)))
    }

    pub(super) fn write(&self, w: &mut Writer) {
        w.open("volume_plugin", None);
        w.string("name", &self.name);
        if let Some(socket) = &self.socket {
            w.string("socket", &socket.to_string_lossy());
        }
        w.opt_string("plugin_id", self.plugin_id.as_deref());
        w.duration("mount_timeout", self.mount_timeout);
        w.duration("unmount_grace", self.unmount_grace);
        if let Some(endpoint) = &self.podman_endpoint {
            w.string("podman_endpoint", &endpoint.to_string_lossy());
        }
        if let Some(dir) = &self.secrets_dir {
            w.string("secrets_dir", &dir.to_string_lossy());
        }
        w.close();
    }
}

/// Whether `name` may name a plugin: dockerd finds it as a file name, so
/// letters, digits, `.`, `_` and `-`, not `.` or `..`.
fn valid_plugin_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Decodes the block's fields.
pub(super) fn decode_volume_plugin(f: &mut Fields<'_>) -> VolumePluginConfig {
    let mut config = VolumePluginConfig::default();
    if let Some((name, pos)) = f.string_at("name") {
        if !valid_plugin_name(&name) {
            f.error(
                pos,
                format!(
                    "\"name\" in {} must be a plugin name of letters, digits, '.', '_' and '-', found {name:?}",
                    f.what()
                ),
            );
        }
        config.name = name;
    }
    for (key, out) in [
        ("socket", &mut config.socket),
        ("podman_endpoint", &mut config.podman_endpoint),
        ("secrets_dir", &mut config.secrets_dir),
    ] {
        if let Some((text, pos)) = f.string_at(key) {
            if text.is_empty() {
                // Empty is the default, as in the documented block.
            } else if !text.starts_with('/') {
                f.error(
                    pos,
                    format!(
                        "{key:?} in {} must be an absolute path, found {text:?}",
                        f.what()
                    ),
                );
            } else {
                *out = Some(PathBuf::from(text));
            }
        }
    }
    if let Some((id, pos)) = f.string_at("plugin_id") {
        if !id.is_empty() {
            f.dec().check_id(pos, "plugin ID", &id);
            config.plugin_id = Some(id);
        }
    }
    if let Some((text, pos)) = f.string_at("mount_timeout") {
        match crate::units::parse_duration(&text) {
            Ok(timeout) if !timeout.is_zero() && timeout < DOCKERD_PLUGIN_TIMEOUT => {
                config.mount_timeout = timeout;
            }
            Ok(_) => f.error(
                pos,
                format!(
                    "\"mount_timeout\" in {} must be more than 0 and under dockerd's plugin timeout ({}), found {text:?}",
                    f.what(),
                    crate::units::format_duration(DOCKERD_PLUGIN_TIMEOUT)
                ),
            ),
            Err(err) => f.error(pos, format!("\"mount_timeout\" in {}: {err}", f.what())),
        }
    }
    if let Some(grace) = f.duration("unmount_grace") {
        config.unmount_grace = grace;
    }
    f.finish();
    config
}

#[cfg(test)]
mod tests {
    use crate::spec::AgentConfig;

    use super::*;

    #[test]
    fn the_plugin_is_off_without_the_block() {
        let config = AgentConfig::decode("", "agent.hcl").unwrap().spec;
        assert_eq!(config.volume_plugin, None);
    }

    #[test]
    fn an_empty_block_takes_every_default() {
        let config = AgentConfig::decode("volume_plugin {}\n", "agent.hcl")
            .unwrap()
            .spec;
        let plugin = config.volume_plugin.clone().unwrap();
        assert_eq!(plugin, VolumePluginConfig::default());
        assert_eq!(
            plugin.socket_path(),
            PathBuf::from("/run/docker/plugins/csi.sock")
        );
        let again = AgentConfig::decode(&config.to_hcl(), "agent.hcl").unwrap();
        assert_eq!(again.spec, config);
    }

    #[test]
    fn every_field_is_read_and_written_back() {
        let src = "volume_plugin {\n  name = \"csi-test\"\n  socket = \"/tmp/p/csi.sock\"\n  plugin_id = \"hostpath\"\n  mount_timeout = \"5s\"\n  unmount_grace = \"1m\"\n  podman_endpoint = \"/run/podman/podman.sock\"\n  secrets_dir = \"/etc/csi-agent/volume-secrets\"\n}\n";
        let config = AgentConfig::decode(src, "agent.hcl").unwrap().spec;
        let plugin = config.volume_plugin.clone().unwrap();
        assert_eq!(plugin.name, "csi-test");
        assert_eq!(plugin.socket_path(), PathBuf::from("/tmp/p/csi.sock"));
        assert_eq!(plugin.plugin_id.as_deref(), Some("hostpath"));
        assert_eq!(plugin.mount_timeout, Duration::from_secs(5));
        assert_eq!(plugin.unmount_grace, Duration::from_secs(60));
        assert_eq!(
            plugin.podman_endpoint,
            Some(PathBuf::from("/run/podman/podman.sock"))
        );
        assert_eq!(
            plugin.secrets_dir,
            Some(PathBuf::from("/etc/csi-agent/volume-secrets"))
        );
        let again = AgentConfig::decode(&config.to_hcl(), "agent.hcl").unwrap();
        assert_eq!(again.spec, config);
    }

    #[test]
    fn bad_values_are_errors_naming_the_field_and_line() {
        for (src, field) in [
            ("volume_plugin {\n  name = \"a/b\"\n}\n", "\"name\""),
            ("volume_plugin {\n  name = \"..\"\n}\n", "\"name\""),
            (
                "volume_plugin {\n  socket = \"csi.sock\"\n}\n",
                "\"socket\"",
            ),
            (
                "volume_plugin {\n  mount_timeout = \"soon\"\n}\n",
                "\"mount_timeout\"",
            ),
            (
                "volume_plugin {\n  unmount_grace = \"1 day\"\n}\n",
                "\"unmount_grace\"",
            ),
            (
                "volume_plugin {\n  podman_endpoint = \"podman.sock\"\n}\n",
                "\"podman_endpoint\"",
            ),
            (
                "volume_plugin {\n  secrets_dir = \"secrets\"\n}\n",
                "\"secrets_dir\"",
            ),
            ("volume_plugin {\n  plugin_id = \"a/b\"\n}\n", "plugin ID"),
            (
                "volume_plugin {\n  mount_timeout = \"30s\"\n}\n",
                "under dockerd's plugin timeout (30s), found \"30s\"",
            ),
            (
                "volume_plugin {\n  mount_timeout = \"0s\"\n}\n",
                "must be more than 0",
            ),
            ("volume_plugin {\n  plugins = \"x\"\n}\n", "plugins"),
        ] {
            let err = AgentConfig::decode(src, "agent.hcl")
                .unwrap_err()
                .to_string();
            assert!(err.contains("agent.hcl:2:"), "{src}: {err}");
            assert!(err.contains(field), "{src}: {err}");
        }
    }
}
