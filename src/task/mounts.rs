//! Driver mounts: where a task's volumes appear, and the plan of the
//! mount calls its namespace gets before exec.
//!
//! A destination is a path of the task's view: the task dir is the task's
//! root ([`super::root`]), so `/srv` is `<task dir>/srv` on the host, and
//! `${NOMAD_TASK_DIR}/data` is `/local/data`, `<task dir>/local/data`. A
//! relative destination is relative to the root. `..` is refused, and so is
//! a path whose existing part resolves, through a symlink, outside the task
//! dir ([`super::destination`]), and one where the root has no room for
//! it ([`super::root::check_destination`]).
//!
//! The namespace plan ([`NamespacePlan`]) is computed in the agent from the
//! host's mount table and carried out in the child between `fork` and
//! `exec` (see `exec.rs`):
//!
//! 1. `unshare(CLONE_NEWNS)`: the child's mounts are copies of the host's,
//!    and shared ones are still peers of the host's.
//! 2. Every shared mount becomes a slave, so host mounts still flow in but
//!    nothing the task mounts flows out, except under the *kept* paths: a
//!    `bidirectional` volume's publish path, and for a CSI plugin task the
//!    agent's `csi/` root (so the staging and publish mounts the plugin
//!    makes, and unmakes, happen on the host). With nothing kept this is
//!    one recursive `MS_SLAVE` of `/`.
//! 3. Each volume is bind-mounted (recursively) at its destination, made
//!    read-only if asked, and given its propagation: `private` → rprivate,
//!    `host-to-task` → rslave, `bidirectional` → rshared. A bidirectional
//!    bind of a kept (shared) publish mount joins the host's peer group, so
//!    mounts the task makes inside it appear on the host.
//! 4. For a `raw_exec` task, which keeps the host's root, the control
//!    socket is covered with `/dev/null`: tasks never reach the agent's
//!    API (an `exec` task's root does not hold it).

use std::path::PathBuf;

use crate::mount::{MountInfo, Propagation};

/// One volume bind-mounted into a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverMount {
    /// The host path: a publish path or a host volume's directory.
    pub source: PathBuf,
    /// Where it appears, inside the task dir.
    pub target: PathBuf,
    pub read_only: bool,
    pub propagation: Propagation,
}

/// Everything the child does to its mount namespace, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespacePlan {
    /// Make `/` recursively a slave (nothing is kept).
    pub slave_root: bool,
    /// Otherwise: the shared mount points to make slaves, one by one.
    pub slave: Vec<PathBuf>,
    pub mounts: Vec<DriverMount>,
    /// Paths covered by a bind of `/dev/null`.
    pub hide: Vec<PathBuf>,
}

impl NamespacePlan {
    /// The plan for `mounts`, keeping the peers of the host's mounts at
    /// `keep` (and below) and every bidirectional source.
    pub fn new(
        host: &MountInfo,
        mut keep: Vec<PathBuf>,
        mounts: Vec<DriverMount>,
        hide: Vec<PathBuf>,
    ) -> NamespacePlan {
        keep.extend(
            mounts
                .iter()
                .filter(|m| m.propagation == Propagation::Bidirectional)
                .map(|m| m.source.clone()),
        );
        let (slave_root, slave) = if keep.is_empty() {
            (true, Vec::new())
        } else {
            let mut slave: Vec<PathBuf> = host
                .entries()
                .iter()
                .filter(|e| e.shared_peer_group().is_some())
                .map(|e| e.mount_point.clone())
                .filter(|p| !keep.iter().any(|k| p.starts_with(k)))
                .collect();
            slave.dedup();
            (false, slave)
        };
        NamespacePlan {
            slave_root,
            slave,
            mounts,
            hide,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> MountInfo {
        MountInfo::parse(
            "1 0 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n\
             2 1 0:5 / /proc rw - proc proc rw\n\
             3 1 8:1 /d/csi /d/csi rw shared:7 - ext4 /dev/sda1 rw\n\
             4 3 8:1 /b/v1 /d/csi/p/staging/v1/u rw shared:8 - ext4 /dev/sda1 rw\n\
             5 1 0:6 / /run rw shared:2 - tmpfs tmpfs rw\n",
        )
        .unwrap()
    }

    #[test]
    fn without_kept_paths_the_root_is_slaved_recursively() {
        let plan = NamespacePlan::new(&host(), Vec::new(), Vec::new(), Vec::new());
        assert!(plan.slave_root);
        assert!(plan.slave.is_empty());
    }

    #[test]
    fn kept_paths_stay_peers_of_the_host() {
        let plan = NamespacePlan::new(
            &host(),
            vec![PathBuf::from("/d/csi")],
            Vec::new(),
            Vec::new(),
        );
        assert!(!plan.slave_root);
        assert_eq!(plan.slave, vec![PathBuf::from("/"), PathBuf::from("/run")]);
    }

    #[test]
    fn bidirectional_sources_are_kept() {
        let mount = |p| DriverMount {
            source: PathBuf::from("/d/csi/p/staging/v1/u"),
            target: PathBuf::from("/d/alloc/a/t/data"),
            read_only: false,
            propagation: p,
        };
        let plan = NamespacePlan::new(
            &host(),
            Vec::new(),
            vec![mount(Propagation::HostToTask)],
            Vec::new(),
        );
        assert!(plan.slave_root);
        let plan = NamespacePlan::new(
            &host(),
            Vec::new(),
            vec![mount(Propagation::Bidirectional)],
            Vec::new(),
        );
        assert!(!plan.slave_root);
        assert_eq!(
            plan.slave,
            vec![
                PathBuf::from("/"),
                PathBuf::from("/d/csi"),
                PathBuf::from("/run")
            ]
        );
    }
}
