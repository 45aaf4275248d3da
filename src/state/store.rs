//! The snapshot file `state.pb`, replaced atomically.
//!
//! The agent's state is one protobuf message that the caller encodes; this
//! module only moves its bytes to and from the disk. [`write_atomic`] writes
//! a snapshot to a temporary file next to its destination, syncs it, renames
//! it over the destination and syncs the directory. After a crash the path
//! therefore holds the old snapshot or the new one in full, never a mixture,
//! and a snapshot for which [`write_atomic`] returned survives a power loss.
//! The journal relies on that last point: it is truncated only after the
//! snapshot that covers it is durable.
//!
//! The snapshot holds secrets (publish and stage secrets of volumes), so the
//! file is readable by its owner only (mode 0600).

use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The mode of the snapshot file: it holds secrets.
const MODE: u32 = 0o600;

/// An error from one step of writing or reading a snapshot.
#[derive(Debug)]
pub enum Error {
    /// The temporary file `path` could not be created.
    CreateTemp { path: PathBuf, err: io::Error },
    /// Writing the temporary file `path` failed.
    Write { path: PathBuf, err: io::Error },
    /// Syncing the temporary file `path` to disk failed.
    Sync { path: PathBuf, err: io::Error },
    /// The temporary file could not be renamed over `path`.
    Rename { path: PathBuf, err: io::Error },
    /// Syncing the directory `path` after the rename failed.
    SyncDir { path: PathBuf, err: io::Error },
    /// The snapshot `path` exists but could not be read.
    Read { path: PathBuf, err: io::Error },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CreateTemp { path, .. } => {
                write!(f, "failed to create the temporary file {}", path.display())
            }
            Self::Write { path, .. } => write!(f, "failed to write {}", path.display()),
            Self::Sync { path, .. } => write!(f, "failed to sync {}", path.display()),
            Self::Rename { path, .. } => write!(
                f,
                "failed to rename the temporary file over {}",
                path.display()
            ),
            Self::SyncDir { path, .. } => {
                write!(f, "failed to sync the directory {}", path.display())
            }
            Self::Read { path, .. } => write!(f, "failed to read {}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::CreateTemp { err, .. }
            | Self::Write { err, .. }
            | Self::Sync { err, .. }
            | Self::Rename { err, .. }
            | Self::SyncDir { err, .. }
            | Self::Read { err, .. } => Some(err),
        }
    }
}

/// Replaces the file at `path` with `bytes`, atomically and durably.
///
/// On error the old file, if any, is left as it was, and the temporary file
/// is removed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = temp_path(path);
    let result = write_temp(&tmp, bytes).and_then(|()| {
        fs::rename(&tmp, path).map_err(|err| Error::Rename {
            path: path.to_owned(),
            err,
        })
    });
    if result.is_err() {
        // Best effort: the error to report is the one above, and the next
        // write replaces a temporary file left behind anyway.
        let _ = fs::remove_file(&tmp);
    }
    result?;
    let dir = parent_dir(path);
    sync_dir(dir).map_err(|err| Error::SyncDir {
        path: dir.to_owned(),
        err,
    })
}

/// Reads the snapshot at `path`, or `None` if there is none yet.
pub fn read(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(Error::Read {
            path: path.to_owned(),
            err,
        }),
    }
}

/// The temporary file for `path`: `dir/.state.pb.tmp` for `dir/state.pb`.
fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or(OsStr::new("state"));
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    parent_dir(path).join(tmp_name)
}

/// Writes `bytes` to a new file `tmp` with mode 0600 and syncs it.
fn write_temp(tmp: &Path, bytes: &[u8]) -> Result<(), Error> {
    // A temporary file left by a crash is removed rather than reused, so that
    // `create_new` (O_EXCL) can guarantee a fresh file with our mode, never
    // one with looser permissions or a symlink planted in its place.
    let create_temp = |err| Error::CreateTemp {
        path: tmp.to_owned(),
        err,
    };
    if let Err(err) = fs::remove_file(tmp) {
        if err.kind() != io::ErrorKind::NotFound {
            return Err(create_temp(err));
        }
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(MODE)
        .open(tmp)
        .map_err(create_temp)?;
    file.write_all(bytes).map_err(|err| Error::Write {
        path: tmp.to_owned(),
        err,
    })?;
    file.sync_all().map_err(|err| Error::Sync {
        path: tmp.to_owned(),
        err,
    })
}

/// The directory that holds `path`; `.` for a bare file name.
pub(super) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Syncs the directory `dir`, making the creation, rename or removal of the
/// files in it durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A directory of one test's own, removed on drop.
    struct Scratch {
        dir: PathBuf,
    }

    impl Scratch {
        fn new() -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "csi-agent-store-test-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir(&dir).unwrap();
            Self { dir }
        }

        fn names(&self) -> Vec<String> {
            let mut names: Vec<String> = fs::read_dir(&self.dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn written_bytes_read_back() {
        let scratch = Scratch::new();
        let path = scratch.dir.join("state.pb");
        write_atomic(&path, b"snapshot one").unwrap();
        assert_eq!(read(&path).unwrap().as_deref(), Some(&b"snapshot one"[..]));
    }

    #[test]
    fn write_replaces_the_previous_snapshot() {
        let scratch = Scratch::new();
        let path = scratch.dir.join("state.pb");
        write_atomic(&path, b"a longer first snapshot").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(read(&path).unwrap().as_deref(), Some(&b"second"[..]));
    }

    #[test]
    fn snapshot_is_readable_by_its_owner_only() {
        let scratch = Scratch::new();
        let path = scratch.dir.join("state.pb");
        write_atomic(&path, b"secret").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn no_temporary_file_is_left_behind() {
        let scratch = Scratch::new();
        let path = scratch.dir.join("state.pb");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(scratch.names(), ["state.pb"]);
    }

    #[test]
    fn stale_temporary_file_is_replaced_with_a_private_one() {
        let scratch = Scratch::new();
        let path = scratch.dir.join("state.pb");
        let tmp = scratch.dir.join(".state.pb.tmp");
        fs::write(&tmp, b"left by a crash").unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)).unwrap();
        write_atomic(&path, b"fresh").unwrap();
        assert_eq!(read(&path).unwrap().as_deref(), Some(&b"fresh"[..]));
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(scratch.names(), ["state.pb"]);
    }

    #[test]
    fn missing_snapshot_reads_as_none() {
        let scratch = Scratch::new();
        assert_eq!(read(&scratch.dir.join("state.pb")).unwrap(), None);
    }

    #[test]
    fn write_into_a_missing_directory_fails_at_creating_the_temporary_file() {
        let scratch = Scratch::new();
        let path = scratch.dir.join("missing").join("state.pb");
        let err = write_atomic(&path, b"x").unwrap_err();
        assert!(matches!(err, Error::CreateTemp { .. }), "{err:?}");
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn bare_file_name_lives_in_the_current_directory() {
        assert_eq!(parent_dir(Path::new("state.pb")), Path::new("."));
        assert_eq!(
            temp_path(Path::new("state.pb")),
            Path::new("./.state.pb.tmp")
        );
        assert_eq!(
            temp_path(Path::new("/var/lib/csi-agent/state.pb")),
            Path::new("/var/lib/csi-agent/.state.pb.tmp")
        );
    }
}
