//! A task's `csi_plugin` block: the task is a CSI plugin, which the agent
//! registers once its socket answers. The socket's directory and the
//! staging and publish directories are paths in the task's root, neither
//! inside the other.

use std::path::{Component, PathBuf};
use std::time::Duration;

use hcl::Pos;

use super::decode::Fields;
use super::encode::Writer;
use super::PluginType;

/// `csi_plugin { ... }`: the task is a CSI plugin, which the agent
/// registers once its socket answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiPlugin {
    pub id: String,
    pub plugin_type: PluginType,
    /// Where an exec task finds the directory of its socket, in its root
    /// (default `/csi`): `CSI_ENDPOINT` is `unix://<mount_dir>/csi.sock`.
    pub mount_dir: PathBuf,
    /// Where an exec task finds the staging and publish directories, in its
    /// root (default `/local/csi`), and the paths of its RPCs are; neither
    /// inside `mount_dir` nor holding it.
    pub stage_publish_base_dir: PathBuf,
    /// How long the plugin has to become healthy after it starts.
    pub health_timeout: Duration,
}

pub(super) fn decode_csi_plugin(f: &mut Fields<'_>) -> Option<CsiPlugin> {
    let id = f.string_at("id");
    if let Some((id, pos)) = &id {
        f.dec().check_id(*pos, "plugin ID", id);
    }
    let id = f.require("id", id);
    let plugin_type = f.parsed("type");
    let plugin_type = f.require("type", plugin_type);
    let mount_dir = plain_path(f, "mount_dir");
    let mount_dir_valid = mount_dir.is_some() || !f.has("mount_dir");
    let (mount_dir, mount_dir_pos) = mount_dir.unwrap_or_else(|| (PathBuf::from("/csi"), f.pos()));
    let base = plain_path(f, "stage_publish_base_dir");
    let base_valid = base.is_some() || !f.has("stage_publish_base_dir");
    let (base, base_pos) = base.unwrap_or_else(|| (PathBuf::from("/local/csi"), f.pos()));
    if mount_dir_valid && base_valid && base.starts_with(&mount_dir) {
        f.error(
            base_pos,
            format!(
                "stage_publish_base_dir {:?} in {} must not be inside mount_dir {:?}: the plugin's socket directory would hide the volumes' mounts",
                base.display().to_string(),
                f.what(),
                mount_dir.display().to_string()
            ),
        );
    } else if mount_dir_valid && base_valid && mount_dir.starts_with(&base) {
        f.error(
            mount_dir_pos,
            format!(
                "mount_dir {:?} in {} must not be inside stage_publish_base_dir {:?}: the volumes' directory would hide the plugin's socket directory",
                mount_dir.display().to_string(),
                f.what(),
                base.display().to_string()
            ),
        );
    }
    let health_timeout = f
        .duration("health_timeout")
        .unwrap_or(Duration::from_secs(30));
    f.finish();
    Some(CsiPlugin {
        id: id?.0,
        plugin_type: plugin_type?,
        mount_dir,
        stage_publish_base_dir: base,
        health_timeout,
    })
}

/// An absolute path without `..` components, with its position.
fn plain_path(f: &mut Fields<'_>, key: &'static str) -> Option<(PathBuf, Pos)> {
    let (path, pos) = f.absolute_path(key)?;
    if path.components().any(|c| c == Component::ParentDir) {
        f.error(
            pos,
            format!("{key:?} in {} must not contain \"..\"", f.what()),
        );
        return None;
    }
    Some((path, pos))
}

pub(super) fn write_csi_plugin(w: &mut Writer, plugin: &CsiPlugin) {
    w.open("csi_plugin", None);
    w.string("id", &plugin.id);
    w.string("type", plugin.plugin_type.as_str());
    w.string("mount_dir", &plugin.mount_dir.to_string_lossy());
    w.string(
        "stage_publish_base_dir",
        &plugin.stage_publish_base_dir.to_string_lossy(),
    );
    w.duration("health_timeout", plugin.health_timeout);
    w.close();
}
