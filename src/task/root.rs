//! The root an `exec` task runs in, as Nomad's exec driver builds it.
//!
//! The task dir (`data_dir/alloc/<alloc>/<task>/`) becomes the task's `/`.
//! Its own `local/` and `tmp/` are there already; the child, in its mount
//! namespace and before exec, adds (see `exec/child.rs`):
//!
//! - each `chroot_env` entry whose host path exists, as a recursive bind
//!   made read-only (with everything below it), at its destination: Nomad's
//!   default gives the task the host's `/bin`, `/etc`, `/lib`, `/lib32`,
//!   `/lib64`, `/run/resolvconf`, `/sbin` and `/usr`, with no disk or
//!   start-up cost, and nothing the task can change;
//! - a private `/dev`: a tmpfs holding the host's `null`, `zero`, `full`,
//!   `random`, `urandom` and `tty` (bound, as files), a new `/dev/shm` and
//!   a new instance of `/dev/pts`;
//! - a new `/proc`;
//! - `/secrets`, a tmpfs of mode 0700 owned by the task's user, as Nomad's;
//! - `/alloc`, the alloc dir every task of the group shares;
//! - for a plugin task, Nomad's directory contract ([`PluginDir`]): its
//!   socket dir at `mount_dir` (default `/csi`) and the agent's
//!   `csi/<plugin>` dir at `stage_publish_base_dir` (default `/local/csi`),
//!   both bidirectional, so that the mounts it makes there reach the host;
//!
//! then every `volume_mount` at its destination, and `pivot_root`s into it,
//! detaching the old root. All of it lives in the task's mount namespace:
//! the host's mount table never shows it, and it goes away with the task.
//!
//! Everything that touches the file system happens here, in the agent,
//! before fork: which sources exist, whether each is a file or a
//! directory, and the mount points in the task dir (a part of which that
//! resolves outside the task dir through a symlink is refused, as the task
//! may have left one there).

use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::destination::{in_root, prepare_target, DestinationError};
use super::user::User;
use crate::mount::Propagation;
use crate::spec::{ChrootEntry, TASK_ROOT_DIRS};

/// The host's device nodes a task's `/dev` holds, when the host has them.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// A host path bound read-only into the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootBind {
    pub source: PathBuf,
    /// Inside the task dir.
    pub target: PathBuf,
}

/// A host directory of the agent bound into a plugin task's root: its
/// socket dir at `mount_dir`, the plugin's `csi/<plugin>` dir at
/// `stage_publish_base_dir`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginDir {
    pub source: PathBuf,
    /// In the task's view.
    pub destination: PathBuf,
    pub propagation: Propagation,
}

/// Everything the child needs to build a task's root, prepared in the
/// agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootPlan {
    /// The task dir: the new `/`.
    pub dir: PathBuf,
    /// `chroot_env`, the entries whose source exists, parents first.
    pub binds: Vec<RootBind>,
    /// The names under `/dev` to bind from the host.
    pub devices: Vec<&'static str>,
    /// The alloc's shared dir, `data_dir/alloc/<alloc>/alloc`.
    pub alloc_dir: PathBuf,
    /// Who owns `/secrets`.
    pub owner: User,
    pub plugin_dirs: Vec<PluginDir>,
}

/// Why a task's root cannot be prepared.
#[derive(Debug)]
pub enum RootError {
    MountPoint { what: String, err: DestinationError },
    Source { path: PathBuf, err: io::Error },
}

impl fmt::Display for RootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootError::MountPoint { what, .. } => {
                write!(f, "cannot make the mount point of {what} in the task dir")
            }
            RootError::Source { path, .. } => {
                write!(f, "cannot look at {}", path.display())
            }
        }
    }
}

impl std::error::Error for RootError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RootError::MountPoint { err, .. } => Some(err),
            RootError::Source { err, .. } => Some(err),
        }
    }
}

impl RootPlan {
    /// The plan for the task dir `dir`, looking at which sources exist.
    pub fn new(
        dir: &Path,
        alloc_dir: &Path,
        chroot_env: &[ChrootEntry],
        owner: User,
        plugin_dirs: Vec<PluginDir>,
    ) -> RootPlan {
        let mut entries: Vec<&ChrootEntry> =
            chroot_env.iter().filter(|e| e.source.exists()).collect();
        // A parent's bind first, so that a nested destination lands on it.
        order::sort_by_key(&mut entries, |e| e.destination.components().count());
        RootPlan {
            dir: dir.to_path_buf(),
            binds: entries
                .into_iter()
                .map(|e| RootBind {
                    source: e.source.clone(),
                    target: in_root(dir, &e.destination),
                })
                .collect(),
            devices: DEVICES
                .iter()
                .copied()
                .filter(|d| Path::new("/dev").join(d).exists())
                .collect(),
            alloc_dir: alloc_dir.to_path_buf(),
            owner,
            plugin_dirs,
        }
    }

    /// `path` of the task's view, on the host.
    pub fn target(&self, path: &Path) -> PathBuf {
        in_root(&self.dir, path)
    }

    /// Creates every mount point the root needs in the task dir: a
    /// directory, or an empty file for a source that is not one.
    pub fn prepare(&self) -> Result<(), RootError> {
        let point = |what: String, target: &Path, is_dir: bool| {
            let shown = format!(
                "/{}",
                target.strip_prefix(&self.dir).unwrap_or(target).display()
            );
            prepare_target(&self.dir, &shown, target, is_dir)
                .map_err(|err| RootError::MountPoint { what, err })
        };
        for bind in &self.binds {
            // A source that is a symlink (`/bin` → `usr/bin`) is bound as
            // what it points to.
            let meta = std::fs::metadata(&bind.source).map_err(|err| RootError::Source {
                path: bind.source.clone(),
                err,
            })?;
            point(
                format!("chroot_env {}", bind.source.display()),
                &bind.target,
                meta.is_dir(),
            )?;
        }
        for (dir, what) in TASK_ROOT_DIRS {
            point(what.to_string(), &self.target(Path::new(dir)), true)?;
        }
        for dir in &self.plugin_dirs {
            point(
                dir.destination.display().to_string(),
                &self.target(&dir.destination),
                true,
            )?;
        }
        Ok(())
    }
}

/// Checks a `volume_mount` destination (interpolated) of an exec task: not
/// the root itself, not in or at a dir the agent makes (`/local` and `/tmp`
/// may hold volumes, and be covered by one), and not inside a `chroot_env`
/// destination, which is read-only and has no room for a mount point (a
/// volume may cover one whole). Pure.
pub fn check_destination(
    destination: &str,
    chroot_env: &[ChrootEntry],
) -> Result<(), DestinationError> {
    let path = Path::new("/").join(destination);
    let reserved = |place: String| DestinationError::Reserved {
        destination: destination.to_string(),
        place,
    };
    if path
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::CurDir))
    {
        return Err(reserved("is the task's root itself".to_string()));
    }
    for (dir, what) in TASK_ROOT_DIRS {
        let may_hold_volumes = matches!(*dir, "/local" | "/tmp");
        if path.starts_with(dir) && !may_hold_volumes {
            let at = if path == Path::new(dir) {
                "is"
            } else {
                "is inside"
            };
            return Err(reserved(format!("{at} {dir}, {what}")));
        }
    }
    for entry in chroot_env {
        if path.starts_with(&entry.destination) && path != entry.destination {
            return Err(reserved(format!(
                "is inside {}, which chroot_env binds read-only from the host's {}",
                entry.destination.display(),
                entry.source.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> ChrootEntry {
        ChrootEntry {
            source: PathBuf::from(path),
            destination: PathBuf::from(path),
        }
    }

    #[test]
    fn only_existing_sources_are_bound_parents_first() {
        let chroot = [
            entry("/etc/ssl"),
            entry("/no/such/csi-agent/dir"),
            entry("/etc"),
            ChrootEntry {
                source: PathBuf::from("/usr/bin"),
                destination: PathBuf::from("/opt/bin"),
            },
        ];
        let owner = User { uid: 0, gid: 0 };
        let plan = RootPlan::new(
            Path::new("/t"),
            Path::new("/a/alloc"),
            &chroot,
            owner,
            Vec::new(),
        );
        let binds: Vec<(&str, &str)> = plan
            .binds
            .iter()
            .map(|b| (b.source.to_str().unwrap(), b.target.to_str().unwrap()))
            .collect();
        assert_eq!(
            binds,
            [
                ("/etc", "/t/etc"),
                ("/etc/ssl", "/t/etc/ssl"),
                ("/usr/bin", "/t/opt/bin")
            ]
        );
        assert!(plan.devices.contains(&"null"));
    }

    #[test]
    fn destinations_stay_out_of_what_the_root_is_built_from() {
        let chroot = [entry("/etc"), entry("/usr")];
        let ok = |d: &str| check_destination(d, &chroot).is_ok();
        for fine in [
            "/data",
            "/srv/db",
            "/local/cache",
            "/tmp",
            "/tmp/x",
            "/usr",
            "local/x",
            "/var/lib/db",
        ] {
            assert!(ok(fine), "{fine}");
        }
        for refused in [
            "/",
            ".",
            "/dev",
            "/dev/xvdf",
            "/proc/x",
            "/alloc",
            "/alloc/data",
            "/secrets/k",
            "/etc/app",
            "/usr/local/data",
        ] {
            assert!(!ok(refused), "{refused}");
        }
        let err = check_destination("/etc/app", &chroot).unwrap_err();
        assert_eq!(
            err.to_string(),
            "destination \"/etc/app\" is inside /etc, which chroot_env binds read-only from the host's /etc"
        );
        let err = check_destination("/dev/xvdf", &chroot).unwrap_err();
        assert_eq!(
            err.to_string(),
            "destination \"/dev/xvdf\" is inside /dev, the task's private /dev"
        );
    }
}
