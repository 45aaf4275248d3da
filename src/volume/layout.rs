//! Where the agent keeps what it mounts: every volume's stagings and
//! publishes, under `<csi root>/<plugin>` (the data dir's `csi/` unless the
//! config's `csi_dir` says otherwise), and those paths as a plugin in a
//! root of its own names them.

use std::path::{Path, PathBuf};

use super::model::{StagingKey, Volume};

/// Where a volume's stagings and publishes live.
#[derive(Clone, Debug)]
pub struct Paths {
    /// The agent's data dir, which no claim's target may touch.
    pub data_dir: PathBuf,
    /// Everything the agent mounts lives under here: the data dir's `csi/`,
    /// or the config's `csi_dir` (a managed Docker plugin's propagated
    /// mount).
    pub csi_root: PathBuf,
}

impl Paths {
    /// The default layout: everything under `data_dir/csi`.
    pub fn new(data_dir: &Path) -> Paths {
        Paths {
            data_dir: data_dir.to_path_buf(),
            csi_root: data_dir.join("csi"),
        }
    }

    /// `csi/<plugin>/staging/<volume>`: the NodeStage target, one per
    /// volume; `.../<volume>/<usage>` for a staging of the per-usage
    /// layout of the first releases.
    pub fn staging(&self, volume: &Volume, key: &StagingKey) -> PathBuf {
        let path = self.staging_root(&volume.plugin_id).join(&volume.id);
        match key {
            StagingKey::Volume => path,
            StagingKey::Usage(usage) => path.join(usage),
        }
    }

    /// `csi/<plugin>/per-alloc/<alloc>/<volume>/<usage>`: the NodePublish
    /// target.
    pub fn publish(&self, volume: &Volume, alloc: &str, usage: &str) -> PathBuf {
        self.publish_root(&volume.plugin_id)
            .join(alloc)
            .join(&volume.id)
            .join(usage)
    }

    /// `csi/<plugin>/staging`, of the skeleton: made once and kept.
    pub fn staging_root(&self, plugin_id: &str) -> PathBuf {
        self.csi_root().join(plugin_id).join("staging")
    }

    /// `csi/<plugin>/per-alloc`, of the skeleton: made once and kept.
    pub fn publish_root(&self, plugin_id: &str) -> PathBuf {
        self.csi_root().join(plugin_id).join("per-alloc")
    }

    /// Everything the agent mounts lives under here.
    pub fn csi_root(&self) -> PathBuf {
        self.csi_root.clone()
    }

    /// `path`, one of the host paths of `plugin_id`'s volumes, as the plugin
    /// names it: under `base_dir` (where a plugin task in a root of its own
    /// sees `csi/<plugin>`, its `stage_publish_base_dir`), or as it is.
    pub fn for_plugin(&self, plugin_id: &str, path: &Path, base_dir: Option<&Path>) -> PathBuf {
        let dir = self.csi_root().join(plugin_id);
        match (base_dir, path.strip_prefix(&dir)) {
            (Some(base), Ok(rest)) => base.join(rest),
            _ => path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_task_is_given_its_paths_under_its_base_dir() {
        let paths = Paths::new(Path::new("/var/lib/csi-agent"));
        let staging = Path::new("/var/lib/csi-agent/csi/hp/staging/v1");
        let publish = Path::new("/var/lib/csi-agent/csi/hp/per-alloc/a1/v1/rw-file-system-x");
        let base = Some(Path::new("/local/csi"));
        assert_eq!(
            paths.for_plugin("hp", staging, base),
            Path::new("/local/csi/staging/v1")
        );
        assert_eq!(
            paths.for_plugin("hp", publish, base),
            Path::new("/local/csi/per-alloc/a1/v1/rw-file-system-x")
        );
        // Other plugins, and plugins that see host paths, get them as they are.
        assert_eq!(paths.for_plugin("hp", staging, None), staging);
        assert_eq!(paths.for_plugin("other", staging, base), staging);
    }
}
