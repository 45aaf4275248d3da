//! Host targets: where `volume claim -target PATH` binds a volume, and the
//! rules that keep the agent from covering, remounting or unmounting what
//! it did not make.
//!
//! A target is checked when the claim is admitted ([`check`]): it must be
//! an absolute path without `.` or `..`, not a symlink, not `/`, not the
//! data dir, inside it or one of its ancestors, not inside `/proc`, `/sys`
//! or `/dev`, and not already a mount point. The bind step and the release
//! then act on a mount at the target only when it is provably the agent's
//! ([`owner`]): its mount ID is the one recorded when the agent made it,
//! or it shows the same tree as the claim's publish path.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::layout::Paths;
use crate::mount::{self, MountInfo};

/// Trees the agent never mounts into.
const SYSTEM_TREES: &[&str] = &["/proc", "/sys", "/dev"];

/// Why a target is refused.
#[derive(Debug)]
pub struct Refused {
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the target {} {}", self.path.display(), self.reason)
    }
}

impl std::error::Error for Refused {}

fn refuse(path: &Path, reason: impl Into<String>) -> Refused {
    Refused {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// A target that passed [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The path with its existing part made canonical, as mountinfo lists
    /// it.
    pub path: PathBuf,
    /// Whether it exists already; a target the agent creates is removed on
    /// release once empty.
    pub exists: bool,
}

/// [`check`], and the same rule for where the agent mounts volumes when it
/// lies outside the data dir (the config's `csi_dir`): a target in it or
/// above it would cover the agent's own mounts. Both paths are canonical.
pub fn check_against(target: &Path, paths: &Paths) -> Result<Checked, Refused> {
    let checked = check(target, &paths.data_dir)?;
    let root = &paths.csi_root;
    if checked.path.starts_with(root) || root.starts_with(&checked.path) {
        return Err(refuse(
            target,
            format!(
                "is the agent's csi_dir {}, inside it or above it",
                root.display()
            ),
        ));
    }
    Ok(checked)
}

/// Checks a claim's target against the rules above. `data_dir` is
/// canonical.
pub fn check(target: &Path, data_dir: &Path) -> Result<Checked, Refused> {
    if !target.is_absolute() {
        return Err(refuse(target, "must be an absolute path"));
    }
    if target
        .components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err(refuse(target, "must not contain `.` or `..`"));
    }
    let exists = match fs::symlink_metadata(target) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(refuse(target, "is a symlink"));
        }
        Ok(_) => true,
        Err(err) if err.kind() == io::ErrorKind::NotFound => false,
        Err(err) => return Err(refuse(target, format!("cannot be read: {err}"))),
    };
    let path =
        resolve(target).map_err(|err| refuse(target, format!("cannot be resolved: {err}")))?;
    if path == Path::new("/") {
        return Err(refuse(target, "is the root file system"));
    }
    if let Some(tree) = SYSTEM_TREES.iter().find(|t| path.starts_with(t)) {
        return Err(refuse(target, format!("is inside {tree}")));
    }
    if path == data_dir {
        return Err(refuse(target, "is the agent's data dir"));
    }
    if path.starts_with(data_dir) {
        return Err(refuse(
            target,
            format!("is inside the agent's data dir {}", data_dir.display()),
        ));
    }
    if data_dir.starts_with(&path) {
        return Err(refuse(
            target,
            format!("contains the agent's data dir {}", data_dir.display()),
        ));
    }
    if exists {
        let mounted = mount::is_mount_point(&path)
            .map_err(|err| refuse(target, format!("cannot be checked: {err}")))?;
        if mounted {
            let what = MountInfo::read()
                .map(|info| mount::describe(&info, &path))
                .unwrap_or_else(|_| "a file system".to_string());
            return Err(refuse(
                target,
                format!(
                    "is already a mount point of {what}; csi-agent binds volumes only onto \
                     paths that are not mount points"
                ),
            ));
        }
    }
    Ok(Checked { path, exists })
}

/// `path` with its longest existing ancestor made canonical and the rest
/// appended (the rest has no `.`, `..` or symlinks, as it does not exist).
fn resolve(path: &Path) -> io::Result<PathBuf> {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        match fs::canonicalize(existing) {
            Ok(canonical) => {
                return Ok(rest.iter().rev().fold(canonical, |p, c| p.join(c)));
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    return Err(err);
                };
                rest.push(name.to_os_string());
                existing = parent;
            }
            Err(err) => return Err(err),
        }
    }
}

/// Who made the top mount at a claim's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Nothing is mounted there.
    Nobody,
    /// The bind the agent made for the claim.
    Agent,
    /// Someone else's mount, described for an error (`tmpfs (tmpfs, mount
    /// 123)`).
    Other(String),
}

/// Who made the top mount at `target`: the agent when its mount ID is
/// `recorded`, or when it shows the same tree as `publish_path` (the
/// claim's NodePublish target, which the agent bound there). Two statx
/// calls answer the usual cases (nothing mounted; the agent's own bind);
/// the mount table is read only when the ID does not tell.
pub fn owner(target: &Path, recorded: Option<u64>, publish_path: &Path) -> mount::Result<Owner> {
    if !mount::is_mount_point(target)? {
        return Ok(Owner::Nobody);
    }
    if recorded.is_some() && mount::mount_id(target)? == recorded {
        return Ok(Owner::Agent);
    }
    let info = MountInfo::read()?;
    Ok(if mount::same_source(&info, target, publish_path) {
        Owner::Agent
    } else {
        Owner::Other(mount::describe(&info, target))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_dir() -> PathBuf {
        PathBuf::from("/var/lib/csi-agent-test-nonexistent")
    }

    fn reason(target: &str) -> String {
        check(Path::new(target), &data_dir()).unwrap_err().reason
    }

    #[test]
    fn the_root_the_data_dir_and_its_relatives_are_refused() {
        assert_eq!(reason("/"), "is the root file system");
        assert_eq!(
            reason("/var/lib/csi-agent-test-nonexistent"),
            "is the agent's data dir"
        );
        assert!(reason("/var/lib/csi-agent-test-nonexistent/csi/x").starts_with("is inside"));
        assert!(reason("/var/lib").starts_with("contains the agent's data dir"));
        assert!(reason("/var").starts_with("contains"));
    }

    #[test]
    fn a_csi_dir_outside_the_data_dir_and_its_relatives_are_refused() {
        let paths = Paths {
            data_dir: data_dir(),
            csi_root: PathBuf::from("/mnt/csi-agent-test-nonexistent"),
        };
        let reason = |target: &str| check_against(Path::new(target), &paths).unwrap_err().reason;
        let expected =
            "is the agent's csi_dir /mnt/csi-agent-test-nonexistent, inside it or above it";
        assert_eq!(reason("/mnt/csi-agent-test-nonexistent"), expected);
        assert_eq!(reason("/mnt/csi-agent-test-nonexistent/hp/x"), expected);
        assert_eq!(reason("/mnt"), expected);
        // The data dir's rules still come first.
        assert_eq!(
            reason("/var/lib/csi-agent-test-nonexistent"),
            "is the agent's data dir"
        );
    }

    #[test]
    fn system_trees_are_refused() {
        assert_eq!(reason("/proc/1"), "is inside /proc");
        assert_eq!(reason("/sys/fs/x"), "is inside /sys");
        assert_eq!(reason("/dev/shm/x"), "is inside /dev");
    }

    #[test]
    fn relative_paths_and_dot_components_are_refused() {
        assert_eq!(reason("mnt/x"), "must be an absolute path");
        assert_eq!(reason("/mnt/../etc"), "must not contain `.` or `..`");
    }

    #[test]
    fn a_symlink_is_refused_and_a_symlinked_ancestor_is_resolved() {
        let dir = std::env::temp_dir().join(format!("csi-agent-target-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        assert_eq!(
            check(&dir.join("link"), &data_dir()).unwrap_err().reason,
            "is a symlink"
        );
        let checked = check(&dir.join("link/new/leaf"), &data_dir()).unwrap();
        let real = fs::canonicalize(dir.join("real")).unwrap();
        assert_eq!(checked.path, real.join("new/leaf"));
        assert!(!checked.exists);
        // A symlink leading into the data dir is caught on the resolved path.
        let data = fs::canonicalize(dir.join("real")).unwrap();
        assert!(check(&dir.join("link/x"), &data)
            .unwrap_err()
            .reason
            .starts_with("is inside the agent's data dir"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_mount_point_is_refused_naming_what_is_mounted() {
        // /proc is a mount point everywhere; the tree rule would catch it
        // first, so use the check's own mount test on a mount point that
        // is outside the system trees when there is one.
        let info = MountInfo::read().unwrap();
        let Some(point) = info
            .entries()
            .iter()
            .map(|m| m.mount_point.clone())
            .find(|p| {
                p != Path::new("/")
                    && !SYSTEM_TREES.iter().any(|t| p.starts_with(t))
                    && !data_dir().starts_with(p)
                    && fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
            })
        else {
            return;
        };
        let err = check(&point, &data_dir()).unwrap_err();
        assert!(
            err.reason.starts_with("is already a mount point of "),
            "{err}"
        );
    }
}
