//! A destination in a task: a path of the task's view, where it is in the
//! task dir on the host (the task dir is an `exec` task's root), and its
//! mount point made there without leaving the task dir. The root's mount
//! points ([`super::root`]) and the volumes' ([`super::mounts`]) are made
//! so.
//!
//! A relative destination is relative to the root. `..` is refused, and
//! so is a mount point whose existing part resolves, through a symlink
//! the task may have left, outside the task dir.

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

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

/// `path` (absolute, in the task's view) inside the task dir `dir`.
pub fn in_root(dir: &Path, path: &Path) -> PathBuf {
    let relative: PathBuf = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    dir.join(relative)
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
    Ok(in_root(task_dir, path))
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

    #[test]
    fn view_paths_live_in_the_task_dir() {
        let dir = Path::new("/d/alloc/a/t");
        assert_eq!(in_root(dir, Path::new("/data")), dir.join("data"));
        assert_eq!(in_root(dir, Path::new("local/x")), dir.join("local/x"));
        assert_eq!(in_root(dir, Path::new("/")), dir.to_path_buf());
        assert_eq!(
            in_root(dir, Path::new("/d/csi/p")),
            dir.join("d/csi/p"),
            "a host path bound at its own path"
        );
    }
}
