//! Driver mounts: where a task's volumes appear, and the plan of the
//! mount calls its namespace gets before exec.
//!
//! A destination is a path of the task's view: the task dir is the task's
//! root ([`super::root`]), so `/srv` is `<task dir>/srv` on the host, and
//! `${NOMAD_TASK_DIR}/data` is `/local/data`, `<task dir>/local/data`. A
//! relative destination is relative to the root. `..` is refused, and so is
//! a path whose existing part resolves, through a symlink, outside the task
//! dir, and one where the root has no room for it ([`super::root::check_destination`]).
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

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

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

/// Why a destination cannot be used.
#[derive(Debug)]
pub enum DestinationError {
    Escapes {
        destination: String,
    },
    /// Where the root has no room for a volume; `place` says why, as in
    /// `is inside /dev, the task's private /dev`.
    Reserved {
        destination: String,
        place: String,
    },
    Symlink {
        destination: String,
        path: PathBuf,
    },
    Create {
        path: PathBuf,
        err: io::Error,
    },
}

impl fmt::Display for DestinationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DestinationError::Escapes { destination } => write!(
                f,
                "destination {destination:?} leaves the task's root (\"..\" is not allowed)"
            ),
            DestinationError::Reserved { destination, place } => {
                write!(f, "destination {destination:?} {place}")
            }
            DestinationError::Symlink { destination, path } => write!(
                f,
                "destination {destination:?} resolves through {} to outside the task dir",
                path.display()
            ),
            DestinationError::Create { path, .. } => {
                write!(f, "cannot create the mount point {}", path.display())
            }
        }
    }
}

impl std::error::Error for DestinationError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DestinationError::Create { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// Where `destination` (already interpolated, in the task's view) lives
/// inside `task_dir`, the task's root. Pure: it does not look at the file
/// system.
pub fn resolve_destination(
    task_dir: &Path,
    destination: &str,
) -> Result<PathBuf, DestinationError> {
    let path = Path::new(destination);
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(DestinationError::Escapes {
            destination: destination.to_string(),
        });
    }
    Ok(super::root::in_root(task_dir, path))
}

/// Creates the mount point `target` inside `task_dir` (a directory, or an
/// empty file when `source` is not a directory), refusing any existing
/// part that resolves outside the task dir.
pub fn prepare_target(
    task_dir: &Path,
    destination: &str,
    target: &Path,
    source_is_dir: bool,
) -> Result<(), DestinationError> {
    let create = |path: &Path, err| DestinationError::Create {
        path: path.to_path_buf(),
        err,
    };
    let root = fs::canonicalize(task_dir).map_err(|e| create(task_dir, e))?;
    let relative = target.strip_prefix(task_dir).unwrap_or(target);
    let mut at = task_dir.to_path_buf();
    let parts: Vec<Component> = relative.components().collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let last = i + 1 == parts.len();
        match fs::symlink_metadata(&at) {
            Ok(meta) => {
                if meta.file_type().is_symlink() {
                    let resolved = fs::canonicalize(&at).map_err(|e| create(&at, e))?;
                    if !resolved.starts_with(&root) {
                        return Err(DestinationError::Symlink {
                            destination: destination.to_string(),
                            path: at,
                        });
                    }
                }
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                if last && !source_is_dir {
                    fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .mode(0o600)
                        .open(&at)
                        .map_err(|e| create(&at, e))?;
                } else {
                    fs::create_dir(&at).map_err(|e| create(&at, e))?;
                }
            }
            Err(err) => return Err(create(&at, err)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK: &str = "/data/alloc/a1/web";

    #[test]
    fn destinations_live_in_the_task_dir() {
        let dir = Path::new(TASK);
        let at = |d| resolve_destination(dir, d).unwrap();
        assert_eq!(at("/srv"), dir.join("srv"));
        assert_eq!(at("/data/x"), dir.join("data/x"));
        assert_eq!(at("local/data"), dir.join("local/data"));
        // A host path is a path of the task's view like any other.
        assert_eq!(
            at("/data/alloc/a1/web/local/data"),
            dir.join("data/alloc/a1/web/local/data")
        );
        assert_eq!(at("/"), dir.to_path_buf());
    }

    #[test]
    fn parent_components_are_refused() {
        let dir = Path::new(TASK);
        for d in ["../x", "/srv/../../etc", "/data/alloc/a1/web/.."] {
            let err = resolve_destination(dir, d).unwrap_err();
            assert!(matches!(err, DestinationError::Escapes { .. }), "{d}");
        }
    }

    #[test]
    fn symlinks_out_of_the_task_dir_are_refused() {
        let tmp = std::env::temp_dir().join(format!("csi-agent-mounts-{}", std::process::id()));
        let task = tmp.join("task");
        fs::create_dir_all(task.join("inside")).unwrap();
        std::os::unix::fs::symlink("/etc", task.join("out")).unwrap();
        std::os::unix::fs::symlink(task.join("inside"), task.join("in")).unwrap();
        let target = task.join("out/x");
        let err = prepare_target(&task, "/out/x", &target, true).unwrap_err();
        assert!(matches!(err, DestinationError::Symlink { .. }), "{err}");
        assert!(!Path::new("/etc/x").exists());
        prepare_target(&task, "/in/x", &task.join("in/x"), true).unwrap();
        assert!(task.join("inside/x").is_dir());
        prepare_target(&task, "/file", &task.join("a/file"), false).unwrap();
        assert!(task.join("a/file").is_file());
        fs::remove_dir_all(&tmp).unwrap();
    }

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
