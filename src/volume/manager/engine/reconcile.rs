//! Startup reconciliation of the volume records with the kernel's mount
//! table: what the records say is mounted but is not is re-sent, and what
//! is mounted under the agent's `csi/` root but owned by no record is
//! unmounted.

use std::collections::BTreeSet;
use std::path::Path;

use crate::mount::{Mounter, SysMounter, UnmountMode};
use crate::volume::manager::VolumeManager;
use crate::volume::model::Step;

impl VolumeManager {
    /// Startup: a step recorded done whose mount is gone is uncertain
    /// again (it is re-sent). A mount under `csi/` that no record owns is
    /// unmounted only when it is at a staging or publish path of a volume
    /// the agent knows (a plugin's leftover); anything else there is left
    /// alone, and both are logged with what they were.
    pub fn reconcile(&mut self, mounts: &crate::mount::MountInfo) {
        let paths = self.paths.clone();
        // One set of the mount points, rather than a scan of the whole
        // table per path: with 1,000 claims that is 2,000 scans of 2,000
        // entries, which made a restart take half a second.
        let mount_points: std::collections::HashSet<&std::path::Path> = mounts
            .entries()
            .iter()
            .map(|m| m.mount_point.as_path())
            .collect();
        let mounted = |p: &std::path::Path| mount_points.contains(p);
        let mut owned = BTreeSet::new();
        for entry in self.entries.values_mut() {
            let v = &mut entry.volume;
            let mut changed = false;
            let snapshot = v.clone();
            for (key, staging) in v.stagings.iter_mut() {
                let path = paths.staging(&snapshot, key);
                if staging.step == Step::Done && !mounted(&path) {
                    log::warn!("Volume {}: {key} is not mounted; staging again", v.id);
                    staging.step = Step::Pending;
                    changed = true;
                }
                if staging.step != Step::Absent {
                    owned.insert(path);
                }
            }
            for claim in v.claims.values_mut() {
                let path = paths.publish(&snapshot, &claim.alloc_id, &claim.usage);
                if claim.published == Step::Done && !mounted(&path) {
                    log::warn!(
                        "Volume {}: the publish of alloc {} is not mounted; publishing again",
                        v.id,
                        claim.alloc_id
                    );
                    claim.published = Step::Pending;
                    changed = true;
                }
                if claim.published != Step::Absent {
                    owned.insert(path);
                }
                if let Some(target) = &claim.target {
                    if claim.target_mounted == Step::Done && !mounted(target) {
                        claim.target_mounted = Step::Pending;
                        changed = true;
                    }
                }
            }
            if changed {
                self.changed.insert(v.id.clone());
            }
        }
        let root = paths.csi_root();
        let strays: Vec<_> = mounts
            .under(&root)
            .map(|m| m.mount_point.clone())
            // The root itself is the jobs' shared bind (see `task`).
            .filter(|p| *p != root)
            // Owned if the mount or one of its parents is an owned path: a
            // set lookup per ancestor, not a scan of every owned path per
            // mount (2,000 by 2,000 with 1,000 claims: over half a second).
            .filter(|p| !p.ancestors().any(|a| owned.contains(a)))
            .collect();
        // Deepest first, so nested mounts come off before their parents.
        for path in strays.iter().rev() {
            let what = crate::mount::describe(mounts, path);
            if !self.is_layout_path(&root, path) {
                log::warn!(
                    "Leaving {} ({what}) alone: it is not a staging or publish path of a \
                     volume csi-agent knows",
                    path.display()
                );
                continue;
            }
            log::warn!(
                "Unmounting {} ({what}): a path of the agent's that no claim owns",
                path.display()
            );
            if let Err(err) = SysMounter.unmount(path, UnmountMode::Normal) {
                log::error!(
                    "Cannot unmount {}: {}",
                    path.display(),
                    crate::error_chain(&err)
                );
            }
        }
    }

    /// Whether `path` (under `root`, the `csi/` dir) is where the agent
    /// stages or publishes a volume it knows:
    /// `<plugin>/staging/<volume>[/<usage>]` or
    /// `<plugin>/per-alloc/<alloc>/<volume>/<usage>`.
    pub(in crate::volume::manager) fn is_layout_path(&self, root: &Path, path: &Path) -> bool {
        let Ok(rest) = path.strip_prefix(root) else {
            return false;
        };
        let parts: Vec<&str> = rest.iter().filter_map(|c| c.to_str()).collect();
        let known = |plugin: &str, volume: &str| {
            self.entries
                .get(volume)
                .is_some_and(|e| e.volume.plugin_id == plugin)
        };
        match parts.as_slice() {
            [plugin, "staging", volume] | [plugin, "staging", volume, _] => known(plugin, volume),
            [plugin, "per-alloc", _, volume, _] => known(plugin, volume),
            _ => false,
        }
    }
}
