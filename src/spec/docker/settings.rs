//! The agent's docker settings, in Nomad's form
//! `plugin "docker" { config { endpoint allow_privileged volumes { enabled }
//! gc { image } } }` or the short form `docker { endpoint allow_privileged
//! volumes { enabled } gc { image } }`; one of the two at most.
//!
//! A `plugin` block with a `config` block configures one of Nomad's task
//! drivers, not a CSI plugin: `docker`'s is decoded here, `exec`'s in
//! [`crate::spec::exec_settings`], any other driver's (`raw_exec`) is
//! accepted with a warning.

use crate::spec::decode::Fields;
use crate::spec::encode::Writer;
use hcl::Block;

use super::DEFAULT_DOCKER_ENDPOINT;
use crate::spec::exec_settings::{decode_exec_settings, ExecSettings};

/// Keys of the docker driver's plugin `config` that csi-agent ignores.
const SETTINGS_IGNORED: &[&str] = &[
    "allow_caps",
    "allow_runtimes",
    "auth",
    "container_exists_attempts",
    "disable_log_collection",
    "extra_labels",
    "infra_image",
    "infra_image_pull_timeout",
    "logging",
    "nvidia_runtime",
    "pids_limit",
    "pull_activity_timeout",
    "tls",
    "windows_allow_insecure_container_admin",
];

const GC_IGNORED: &[&str] = &["container", "dangling_containers", "image_delay"];

const VOLUMES_IGNORED: &[&str] = &["selinuxlabel"];

/// How docker tasks run on this agent, Nomad's defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerSettings {
    /// The engine's socket, `unix:///...`.
    pub endpoint: String,
    /// Whether tasks may set `privileged = true` (Nomad: false).
    pub allow_privileged: bool,
    /// Whether tasks may bind host paths with `volumes` (Nomad: false).
    pub volumes_enabled: bool,
    /// Whether an image no task uses any more is removed (here: false).
    pub image_gc: bool,
}

impl Default for DockerSettings {
    fn default() -> DockerSettings {
        DockerSettings {
            endpoint: DEFAULT_DOCKER_ENDPOINT.to_string(),
            allow_privileged: false,
            volumes_enabled: false,
            image_gc: false,
        }
    }
}

impl DockerSettings {
    /// Writes the settings in the short form, unless they are the defaults.
    pub(crate) fn write(&self, w: &mut Writer) {
        if *self == DockerSettings::default() {
            return;
        }
        w.open("docker", None);
        w.string("endpoint", &self.endpoint);
        w.plain("allow_privileged", self.allow_privileged);
        w.open("volumes", None);
        w.plain("enabled", self.volumes_enabled);
        w.close();
        w.open("gc", None);
        w.plain("image", self.image_gc);
        w.close();
        w.close();
    }
}

/// Decodes the docker settings from the `plugin "docker"` block among
/// `plugins` or from the top-level `docker` block of the agent config `f`;
/// returns them and the `plugin` blocks that are CSI plugins.
pub(crate) fn decode_docker_settings<'d>(
    f: &mut Fields<'d>,
    plugins: Vec<(&'d Block, String)>,
) -> (DockerSettings, ExecSettings, Vec<(&'d Block, String)>) {
    let mut settings = DockerSettings::default();
    let mut exec = ExecSettings::default();
    let mut from_plugin = None;
    let mut csi = Vec::new();
    for (block, id) in plugins {
        let is_driver = block.body.blocks_named("config").next().is_some()
            || block.body.attribute("config").is_some();
        if !is_driver {
            csi.push((block, id));
            continue;
        }
        let mut p = f.labeled(block, &id);
        if id == "docker" {
            if let Some(config) = p.block("config") {
                decode_settings(&mut p.nested(config), &mut settings);
            }
            p.ignore(&["args"]);
            from_plugin.get_or_insert(block.kind.span.start);
        } else if id == "exec" {
            if let Some(config) = p.block("config") {
                exec = decode_exec_settings(&mut p.nested(config));
            }
            p.ignore(&["args"]);
        } else {
            p.dec().warn(
                block.kind.span.start,
                format!(
                    "plugin {id:?} configures Nomad's {id:?} task driver, which csi-agent configures itself: ignored"
                ),
            );
            p.keep_silently(&["args", "config"]);
        }
        p.finish();
    }
    if let Some(block) = f.block("docker") {
        match from_plugin {
            Some(at) => f.error(
                block.kind.span.start,
                format!(
                    "the docker settings are given twice: as a docker block here and as plugin \"docker\" at {at}; keep one"
                ),
            ),
            None => decode_settings(&mut f.nested(block), &mut settings),
        }
    }
    (settings, exec, csi)
}

fn decode_settings(f: &mut Fields<'_>, settings: &mut DockerSettings) {
    if let Some((endpoint, pos)) = f.string_at("endpoint") {
        let path = endpoint.strip_prefix("unix://").unwrap_or(&endpoint);
        if path.starts_with('/') {
            settings.endpoint = format!("unix://{path}");
        } else {
            f.error(
                pos,
                format!(
                    "\"endpoint\" in {} must be unix:///path/to/docker.sock or an absolute path, found {endpoint:?}",
                    f.what()
                ),
            );
        }
    }
    if let Some(allow) = f.bool("allow_privileged") {
        settings.allow_privileged = allow;
    }
    if let Some(block) = f.block("volumes") {
        let mut v = f.nested(block);
        if let Some(enabled) = v.bool("enabled") {
            settings.volumes_enabled = enabled;
        }
        v.ignore(VOLUMES_IGNORED);
        v.finish();
    }
    if let Some(block) = f.block("gc") {
        let mut g = f.nested(block);
        if let Some(image) = g.bool("image") {
            settings.image_gc = image;
        }
        g.ignore(GC_IGNORED);
        g.finish();
    }
    f.ignore(SETTINGS_IGNORED);
    f.finish();
}
