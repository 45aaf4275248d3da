//! Mounting: bind mounts, read-only remounts, propagation changes and
//! unmounts, and a parser for `/proc/self/mountinfo`.
//!
//! Every libc mount call of the agent lives in this module, behind the
//! [`Mounter`] trait. [`SysMounter`] makes the real system calls;
//! [`RecordingMounter`] records the exact flags of each call instead, so
//! that the layers above can test their sequence of mount operations
//! without root. The unsafe code is confined to `sys.rs`, one small function
//! per system call.
//!
//! The kernel's mount table, read with [`MountInfo::read`], is the source of
//! truth when the agent reconciles its state: a path is mounted if and only
//! if mountinfo says so, whatever the agent remembers.
//!
//! A bind mount inherits the propagation of its source: a bind of a
//! directory on a shared mount (`/` is shared on systemd hosts) joins the
//! source's peer group, so that mounts made below the target also appear
//! below the source and in every namespace that receives from it. Callers
//! therefore set the propagation explicitly right after a bind.

#[cfg(test)]
mod kernel_tests;
mod mountinfo;
mod recording;
mod sys;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use libc::{c_int, c_ulong};

pub use mountinfo::{MountInfo, MountInfoEntry, PropagationTag};
pub use recording::{MountCall, RecordingMounter};
pub(crate) use sys::{
    c_path, mount_fs, mount_setattr_read_only, pivot_root, read_only_remount_flags, umount_raw,
};
pub use sys::{fs_usage, SysMounter};

/// The result type of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// An error from one step of mounting or of reading the mount table.
#[derive(Debug)]
pub enum Error {
    /// A path contains a NUL byte, so the kernel cannot be given it.
    InvalidPath { path: PathBuf },
    /// The bind mount of `source` onto `target` failed.
    Bind {
        source: PathBuf,
        target: PathBuf,
        err: io::Error,
    },
    /// The per-mount flags of `target` could not be read before a remount.
    ReadMountFlags { target: PathBuf, err: io::Error },
    /// The read-only remount of `target` failed.
    RemountReadOnly { target: PathBuf, err: io::Error },
    /// The propagation of `target` could not be changed.
    SetPropagation {
        target: PathBuf,
        propagation: Propagation,
        err: io::Error,
    },
    /// The unmount of `target` failed.
    Unmount { target: PathBuf, err: io::Error },
    /// `/proc/self/mountinfo` could not be read.
    ReadMountInfo { err: io::Error },
    /// Line `line` (counted from 1) of the mount table is malformed.
    ParseMountInfo { line: usize, reason: String },
    /// A path could not be made canonical to look it up in the mount table.
    Canonicalize { path: PathBuf, err: io::Error },
    /// A propagation given by the user is not one of the accepted values.
    UnknownPropagation { value: String },
    /// statvfs(3) of `path` failed.
    Statvfs { path: PathBuf, err: io::Error },
    /// statx(2) could not tell which mount `path` is on.
    MountId { path: PathBuf, err: io::Error },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidPath { path } => {
                write!(f, "path {} contains a NUL byte", path.display())
            }
            Self::Bind { source, target, .. } => write!(
                f,
                "failed to bind mount {} onto {}",
                source.display(),
                target.display()
            ),
            Self::ReadMountFlags { target, .. } => {
                write!(f, "failed to read the mount flags of {}", target.display())
            }
            Self::RemountReadOnly { target, .. } => {
                write!(f, "failed to remount {} read-only", target.display())
            }
            Self::SetPropagation {
                target,
                propagation,
                ..
            } => write!(
                f,
                "failed to set the propagation of {} to {propagation}",
                target.display()
            ),
            Self::Unmount { target, .. } => write!(f, "failed to unmount {}", target.display()),
            Self::ReadMountInfo { .. } => write!(f, "failed to read {}", mountinfo::PATH),
            Self::ParseMountInfo { line, reason } => {
                write!(f, "malformed line {line} in {}: {reason}", mountinfo::PATH)
            }
            Self::Canonicalize { path, .. } => {
                write!(f, "failed to resolve the path {}", path.display())
            }
            Self::Statvfs { path, .. } => {
                write!(
                    f,
                    "failed to read the file system usage of {}",
                    path.display()
                )
            }
            Self::MountId { path, .. } => {
                write!(f, "failed to read the mount ID of {}", path.display())
            }
            Self::UnknownPropagation { value } => {
                write!(f, "unknown propagation {value:?}, expected one of ")?;
                for (i, propagation) in Propagation::ALL.iter().enumerate() {
                    let separator = if i == 0 { "" } else { ", " };
                    write!(f, "{separator}{propagation}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Bind { err, .. }
            | Self::ReadMountFlags { err, .. }
            | Self::RemountReadOnly { err, .. }
            | Self::SetPropagation { err, .. }
            | Self::Unmount { err, .. }
            | Self::ReadMountInfo { err }
            | Self::Canonicalize { err, .. }
            | Self::Statvfs { err, .. }
            | Self::MountId { err, .. } => Some(err),
            Self::InvalidPath { .. }
            | Self::ParseMountInfo { .. }
            | Self::UnknownPropagation { .. } => None,
        }
    }
}

/// How mount and unmount events propagate between a volume's mount on the
/// host and its mount in the task.
///
/// Every change is recursive (`MS_REC`): it applies to the mounts below the
/// target too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Propagation {
    /// No events propagate in either direction (`MS_PRIVATE`).
    Private,
    /// Events on the host reach the task, but not the other way round
    /// (`MS_SLAVE`). A slave of a mount that is not shared receives nothing,
    /// so the host side must be shared for this to have an effect.
    HostToTask,
    /// Events propagate both ways (`MS_SHARED`).
    Bidirectional,
}

impl Propagation {
    /// Every propagation, in the order the user documentation lists them.
    pub const ALL: [Propagation; 3] = [Self::Private, Self::HostToTask, Self::Bidirectional];

    /// The user-facing name, as accepted by [`FromStr`].
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::HostToTask => "host-to-task",
            Self::Bidirectional => "bidirectional",
        }
    }

    /// The mount(2) flags that set this propagation.
    /// `MS_REC` with `MS_PRIVATE`, `MS_SLAVE` or `MS_SHARED`.
    pub(crate) const fn mount_flags(self) -> c_ulong {
        let kind = match self {
            Self::Private => libc::MS_PRIVATE,
            Self::HostToTask => libc::MS_SLAVE,
            Self::Bidirectional => libc::MS_SHARED,
        };
        kind | libc::MS_REC
    }
}

impl fmt::Display for Propagation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Propagation {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|propagation| propagation.as_str() == value)
            .ok_or_else(|| Error::UnknownPropagation {
                value: value.to_owned(),
            })
    }
}

/// How an unmount treats a mount that is still in use.
///
/// Every unmount also passes `UMOUNT_NOFOLLOW`: if the last component of the
/// target is a symlink, the symlink itself is the target and the unmount
/// fails, so a task that swaps a mount point for a symlink cannot make the
/// agent unmount something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnmountMode {
    /// Fail with `EBUSY` if the mount is in use.
    Normal,
    /// Detach the mount now and free it once it is no longer in use
    /// (`MNT_DETACH`).
    Detach,
    /// Ask the file system to abort pending requests (`MNT_FORCE`); only
    /// some file systems, such as NFS, support it.
    Force,
}

impl UnmountMode {
    /// The umount2(2) flags of this mode.
    const fn flags(self) -> c_int {
        let mode = match self {
            Self::Normal => 0,
            Self::Detach => libc::MNT_DETACH,
            Self::Force => libc::MNT_FORCE,
        };
        mode | libc::UMOUNT_NOFOLLOW
    }
}

/// The mount(2) flags of a bind mount.
const fn bind_flags(recursive: bool) -> c_ulong {
    if recursive {
        libc::MS_BIND | libc::MS_REC
    } else {
        libc::MS_BIND
    }
}

/// The mount(2) flags of a read-only remount of a bind mount. The real
/// mounter adds the locked per-mount flags the mount already has, see
/// [`Mounter::remount_read_only`].
const REMOUNT_READ_ONLY_FLAGS: c_ulong = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;

/// Size and use of a file system, as statvfs(3) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsUsage {
    pub total_bytes: u64,
    /// Available to unprivileged users (`f_bavail`).
    pub available_bytes: u64,
    pub used_bytes: u64,
    pub total_inodes: u64,
    pub available_inodes: u64,
    pub used_inodes: u64,
}

/// The mount operations of the agent.
///
/// [`SysMounter`] performs them; [`RecordingMounter`] records them for
/// tests.
pub trait Mounter {
    /// Bind mounts `source` onto `target` (`MS_BIND`). With `recursive`, the
    /// mounts below `source` are bound too (`MS_REC`); without it, `target`
    /// shows the directories under them.
    ///
    /// A bind mount keeps the per-mount flags of `source`, so a read-only
    /// bind mount takes a separate [`Mounter::remount_read_only`].
    fn bind(&self, source: &Path, target: &Path, recursive: bool) -> Result<()>;

    /// Makes the bind mount at `target` read-only
    /// (`MS_REMOUNT | MS_BIND | MS_RDONLY`).
    ///
    /// Such a remount replaces all per-mount flags, so the real mounter also
    /// passes the `nosuid`, `nodev`, `noexec` and `nosymfollow` flags the
    /// mount already has; the kernel keeps its atime flags by itself. Only
    /// the mount at `target` changes: the mounts below a recursive bind stay
    /// writable.
    fn remount_read_only(&self, target: &Path) -> Result<()>;

    /// Sets the propagation of the mount at `target` and of the mounts below
    /// it.
    fn set_propagation(&self, target: &Path, propagation: Propagation) -> Result<()>;

    /// Unmounts the top mount at `target`.
    fn unmount(&self, target: &Path, mode: UnmountMode) -> Result<()>;
}

/// Tells whether `path` is a mount point, according to the kernel.
///
/// The path is made canonical first; a path that does not exist is an
/// error. statx(2) then says whether it is the root of a mount (Linux 5.8
/// and later): one system call, where reading mountinfo costs time in
/// proportion to the number of mounts (about 5 ms with 2,000 of them, and
/// every claim adds two). When statx cannot tell, the kernel's mount table
/// decides, as mountinfo lists canonical paths.
pub fn is_mount_point(path: &Path) -> Result<bool> {
    let canonical = std::fs::canonicalize(path).map_err(|err| Error::Canonicalize {
        path: path.to_path_buf(),
        err,
    })?;
    if let Ok(Some(root)) = sys::statx_mount_root(&sys::c_path(&canonical)?) {
        return Ok(root);
    }
    is_listed_mount_point(&canonical)
}

/// Like [`is_mount_point`], but a path that does not exist (or dangles) is
/// no mount point rather than an error: what a caller asks after an
/// unmount that may also have removed the path.
pub fn is_mount_point_if_present(path: &Path) -> Result<bool> {
    match is_mount_point(path) {
        Err(Error::Canonicalize { err, .. }) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        other => other,
    }
}

/// Whether mountinfo lists the canonical path `canonical` as a mount point.
fn is_listed_mount_point(canonical: &Path) -> Result<bool> {
    Ok(MountInfo::read()?.get(canonical).is_some())
}

/// The ID of the mount `path` is on (for a mount point: the top mount
/// there), from statx(2): what the agent records when it makes a mount, so
/// that it later unmounts only that mount. A final symlink is not
/// followed. `None` on a kernel that cannot tell (before 5.8).
pub fn mount_id(path: &Path) -> Result<Option<u64>> {
    sys::statx_mount_id(&sys::c_path(path)?).map_err(|err| Error::MountId {
        path: path.to_path_buf(),
        err,
    })
}

/// Whether the top mounts at `a` and `b` show the same tree: the same
/// file system (device `major:minor`) and the same root within it, as a
/// bind of one onto the other does. False when either is not a mount
/// point. Paths are compared as mountinfo lists them (canonical).
pub fn same_source(info: &MountInfo, a: &Path, b: &Path) -> bool {
    match (info.get(a), info.get(b)) {
        (Some(a), Some(b)) => (a.major, a.minor, &a.root) == (b.major, b.minor, &b.root),
        _ => false,
    }
}

/// What is mounted at `path`, for an error or a log line:
/// `tmpfs (tmpfs, mount 123)` or `/dev/vda1[/srv] (ext4, mount 45)`.
pub fn describe(info: &MountInfo, path: &Path) -> String {
    match info.get(path) {
        None => "nothing".to_string(),
        Some(m) => {
            let root = if m.root == Path::new("/") {
                String::new()
            } else {
                format!("[{}]", m.root.display())
            };
            format!("{}{root} ({}, mount {})", m.source, m.fs_type, m.mount_id)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn propagation_round_trips_through_its_user_string() {
        for (text, propagation) in [
            ("private", Propagation::Private),
            ("host-to-task", Propagation::HostToTask),
            ("bidirectional", Propagation::Bidirectional),
        ] {
            assert_eq!(text.parse::<Propagation>().unwrap(), propagation);
            assert_eq!(propagation.to_string(), text);
        }
    }

    #[test]
    fn unknown_propagation_is_an_error_naming_the_accepted_values() {
        for value in ["", "shared", "Private", "slave", "host_to_task", " private"] {
            let err = value.parse::<Propagation>().unwrap_err();
            assert!(
                matches!(&err, Error::UnknownPropagation { value: v } if v == value),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!(
                    "unknown propagation {value:?}, expected one of private, host-to-task, \
                     bidirectional"
                )
            );
        }
    }

    #[test]
    fn propagation_flags_are_recursive() {
        assert_eq!(
            Propagation::Private.mount_flags(),
            libc::MS_PRIVATE | libc::MS_REC
        );
        assert_eq!(
            Propagation::HostToTask.mount_flags(),
            libc::MS_SLAVE | libc::MS_REC
        );
        assert_eq!(
            Propagation::Bidirectional.mount_flags(),
            libc::MS_SHARED | libc::MS_REC
        );
    }

    #[test]
    fn error_display_names_the_paths_and_leaves_the_cause_to_source() {
        let err = Error::Bind {
            source: PathBuf::from("/var/lib/volumes/a"),
            target: PathBuf::from("/run/task/a b"),
            err: io::Error::from_raw_os_error(libc::ENOENT),
        };
        let text = err.to_string();
        assert_eq!(
            text,
            "failed to bind mount /var/lib/volumes/a onto /run/task/a b"
        );
        let cause = err.source().expect("a bind error has a source");
        assert!(!text.contains(&cause.to_string()));
        let cause = cause.downcast_ref::<io::Error>().unwrap();
        assert_eq!(cause.raw_os_error(), Some(libc::ENOENT));

        let err = Error::SetPropagation {
            target: PathBuf::from("/run/task/a"),
            propagation: Propagation::HostToTask,
            err: io::Error::from_raw_os_error(libc::EINVAL),
        };
        assert_eq!(
            err.to_string(),
            "failed to set the propagation of /run/task/a to host-to-task"
        );

        let err = Error::ParseMountInfo {
            line: 7,
            reason: "missing field \"mount point\"".to_owned(),
        };
        assert_eq!(
            err.to_string(),
            "malformed line 7 in /proc/self/mountinfo: missing field \"mount point\""
        );
        assert!(err.source().is_none());
    }

    #[test]
    fn no_error_message_ends_with_a_period() {
        let io_err = || io::Error::from_raw_os_error(libc::EPERM);
        let path = || PathBuf::from("/p");
        let errors = [
            Error::InvalidPath { path: path() },
            Error::Bind {
                source: path(),
                target: path(),
                err: io_err(),
            },
            Error::ReadMountFlags {
                target: path(),
                err: io_err(),
            },
            Error::RemountReadOnly {
                target: path(),
                err: io_err(),
            },
            Error::SetPropagation {
                target: path(),
                propagation: Propagation::Private,
                err: io_err(),
            },
            Error::Unmount {
                target: path(),
                err: io_err(),
            },
            Error::ReadMountInfo { err: io_err() },
            Error::ParseMountInfo {
                line: 1,
                reason: "bad".to_owned(),
            },
            Error::Canonicalize {
                path: path(),
                err: io_err(),
            },
            Error::UnknownPropagation {
                value: "x".to_owned(),
            },
        ];
        for err in errors {
            let text = err.to_string();
            assert!(!text.ends_with('.'), "{text}");
            assert!(!text.is_empty());
        }
    }

    #[test]
    fn unmount_flags_never_follow_symlinks() {
        assert_eq!(UnmountMode::Normal.flags(), libc::UMOUNT_NOFOLLOW);
        assert_eq!(
            UnmountMode::Detach.flags(),
            libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW
        );
        assert_eq!(
            UnmountMode::Force.flags(),
            libc::MNT_FORCE | libc::UMOUNT_NOFOLLOW
        );
    }

    #[test]
    fn is_mount_point_reads_the_kernel_mount_table() {
        assert!(is_mount_point(Path::new("/")).unwrap());
        assert!(is_mount_point(Path::new("/proc")).unwrap());
        // `/proc/self` is a symlink to `/proc/<pid>`, which is no mount
        // point; `/proc/self/..` is `/proc` again once made canonical.
        assert!(!is_mount_point(Path::new("/proc/self")).unwrap());
        assert!(is_mount_point(Path::new("/proc/self/..")).unwrap());
    }

    #[test]
    fn statx_and_mountinfo_agree_on_mount_points() {
        for path in [
            "/",
            "/proc",
            "/proc/self/..",
            "/proc/self",
            "/proc/1",
            "/tmp",
            "/usr/bin",
        ] {
            let Ok(canonical) = std::fs::canonicalize(path) else {
                continue;
            };
            let Some(root) = sys::statx_mount_root(&sys::c_path(&canonical).unwrap()).unwrap()
            else {
                // A kernel before 5.8 does not say; mountinfo decides.
                return;
            };
            assert_eq!(root, is_listed_mount_point(&canonical).unwrap(), "{path}");
        }
    }

    #[test]
    fn a_missing_path_is_present_as_no_mount_point() {
        let path = Path::new("/nonexistent/csi-agent/mount/test");
        assert!(!is_mount_point_if_present(path).unwrap());
        assert!(is_mount_point_if_present(Path::new("/proc")).unwrap());
    }

    #[test]
    fn is_mount_point_of_a_missing_path_is_an_error() {
        let path = Path::new("/nonexistent/csi-agent/mount/test");
        let err = is_mount_point(path).unwrap_err();
        match err {
            Error::Canonicalize { path: p, err } => {
                assert_eq!(p, path);
                assert_eq!(err.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("unexpected error {other:?}"),
        }
    }
}
