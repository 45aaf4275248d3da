//! Copies of a volume's contents, for snapshots and for volumes made from
//! a snapshot or from another volume.
//!
//! A file-system volume is a directory: [`copy_tree`] copies its
//! directories, regular files and symbolic links with their modes, owners
//! and modification times, and skips what a copy cannot stand for
//! (sockets, FIFOs, device nodes). What is mounted inside the volume (a
//! mount point in the mount table, or another file system) is not part of
//! it: a directory mount point is copied as an empty directory, as
//! `cp -x` does. Hard links become separate files. A block volume is one sparse file: [`copy_file`] copies
//! its data extents and keeps its holes.
//!
//! Every file and directory of a copy is fsynced before the copy counts,
//! and a copy is made aside (the plugin's `tmp/`) and renamed into place
//! ([`put_in_place`]), so that a crash leaves either no copy or a whole
//! one. Making the *source* consistent (flushing what the loop devices of
//! a block volume hold) is the caller's business.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{lchown, DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use crate::mount::MountInfo;
use crate::sys::sparse;

/// The size of one read while copying data.
const CHUNK: usize = 1 << 20;

/// A failed step of a copy, with the path it failed on.
#[derive(Debug)]
pub enum Error {
    /// A source file or directory could not be read.
    Read { path: PathBuf, err: io::Error },
    /// A file, directory or link of the copy could not be made or written.
    Write { path: PathBuf, err: io::Error },
    /// The mode, owner or time of a copied entry could not be set.
    Attributes { path: PathBuf, err: io::Error },
    /// A copied file or directory could not be synced.
    Sync { path: PathBuf, err: io::Error },
    /// The mount table could not be read.
    Mounts(crate::mount::Error),
    /// A leftover of an earlier attempt could not be removed.
    Remove { path: PathBuf, err: io::Error },
    /// The finished copy could not be renamed into place.
    Rename { to: PathBuf, err: io::Error },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read { path, .. } => write!(f, "cannot read {}", path.display()),
            Error::Write { path, .. } => write!(f, "cannot write {}", path.display()),
            Error::Attributes { path, .. } => {
                write!(f, "cannot set the attributes of {}", path.display())
            }
            Error::Sync { path, .. } => write!(f, "cannot sync {}", path.display()),
            Error::Mounts(_) => f.write_str("cannot read the mount table"),
            Error::Remove { path, .. } => write!(f, "cannot remove {}", path.display()),
            Error::Rename { to, .. } => write!(f, "cannot rename the copy to {}", to.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Read { err, .. }
            | Error::Write { err, .. }
            | Error::Attributes { err, .. }
            | Error::Sync { err, .. }
            | Error::Remove { err, .. }
            | Error::Rename { err, .. } => Some(err),
            Error::Mounts(err) => Some(err),
        }
    }
}

fn read(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |err| Error::Read {
        path: path.to_path_buf(),
        err,
    }
}

fn write(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |err| Error::Write {
        path: path.to_path_buf(),
        err,
    }
}

fn attributes(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |err| Error::Attributes {
        path: path.to_path_buf(),
        err,
    }
}

fn sync(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |err| Error::Sync {
        path: path.to_path_buf(),
        err,
    }
}

/// Copies the file `from` to the new file `to`, keeping its holes, and
/// syncs it. With `len`, the copy is made that long (a larger volume from a
/// smaller source); its length otherwise. Answers the copy's length.
pub fn copy_file(from: &Path, to: &Path, len: Option<u64>) -> Result<u64, Error> {
    let source = File::open(from).map_err(read(from))?;
    let meta = source.metadata().map_err(read(from))?;
    let copy = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(write(to))?;
    let len = len.unwrap_or(meta.len()).max(meta.len());
    // Holes everywhere first; then only the data is written.
    copy.set_len(len).map_err(write(to))?;
    let mut buf = vec![0; CHUNK];
    for extent in sparse::data_extents(&source).map_err(read(from))? {
        let mut offset = extent.start;
        while offset < extent.end {
            let want = usize::try_from(extent.end - offset).map_or(CHUNK, |n| n.min(CHUNK));
            let got = source
                .read_at(&mut buf[..want], offset)
                .map_err(read(from))?;
            if got == 0 {
                // The source shrank under us: the rest reads as zeros.
                break;
            }
            copy.write_all_at(&buf[..got], offset).map_err(write(to))?;
            offset += got as u64;
        }
    }
    copy_attributes(&copy, to, &meta)?;
    copy.sync_all().map_err(sync(to))?;
    Ok(len)
}

/// Sets the copy's mode, owner and modification time to the source's.
fn copy_attributes(copy: &File, path: &Path, meta: &fs::Metadata) -> Result<(), Error> {
    std::os::unix::fs::fchown(copy, Some(meta.uid()), Some(meta.gid()))
        .map_err(attributes(path))?;
    copy.set_permissions(meta.permissions())
        .map_err(attributes(path))?;
    let modified = UNIX_EPOCH
        + Duration::new(
            u64::try_from(meta.mtime()).unwrap_or(0),
            u32::try_from(meta.mtime_nsec()).unwrap_or(0),
        );
    copy.set_modified(modified).map_err(attributes(path))
}

/// What a tree copy leaves out: other file systems, and mount points.
struct Boundary {
    dev: u64,
    mount_points: BTreeSet<PathBuf>,
}

impl Boundary {
    fn excludes(&self, path: &Path, meta: &fs::Metadata) -> bool {
        meta.dev() != self.dev || self.mount_points.contains(path)
    }
}

/// Copies the directory tree `from` to `to`, which must not exist, and
/// syncs every file and directory of the copy.
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), Error> {
    let from = fs::canonicalize(from).map_err(read(from))?;
    let meta = fs::symlink_metadata(&from).map_err(read(&from))?;
    if !meta.is_dir() {
        return Err(Error::Read {
            path: from,
            err: io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
        });
    }
    // Mount points are read once: a copy is of one moment anyway.
    let mount_points = order::set(
        MountInfo::read()
            .map_err(Error::Mounts)?
            .under(&from)
            .map(|m| m.mount_point.clone())
            .filter(|p| *p != from),
    );
    let boundary = Boundary {
        dev: meta.dev(),
        mount_points,
    };
    copy_dir(&from, to, &meta, &boundary)
}

/// Copies the directory `from` (of `meta`) and what it holds within
/// `boundary`.
fn copy_dir(from: &Path, to: &Path, meta: &fs::Metadata, boundary: &Boundary) -> Result<(), Error> {
    make_dir(to)?;
    let mut entries = fs::read_dir(from)
        .map_err(read(from))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(read(from))?;
    // A stable order makes copies of one tree alike.
    order::sort(&mut entries);
    for name in entries {
        let source = from.join(&name);
        let copy = to.join(&name);
        let entry = fs::symlink_metadata(&source).map_err(read(&source))?;
        let kind = entry.file_type();
        if boundary.excludes(&source, &entry) {
            log::warn!(
                "not copying {}: something is mounted there",
                source.display()
            );
            if kind.is_dir() {
                make_dir(&copy)?;
                copy_attributes(&File::open(&copy).map_err(read(&copy))?, &copy, &entry)?;
            }
        } else if kind.is_dir() {
            copy_dir(&source, &copy, &entry, boundary)?;
        } else if kind.is_file() {
            copy_file(&source, &copy, None)?;
        } else if kind.is_symlink() {
            let target = fs::read_link(&source).map_err(read(&source))?;
            std::os::unix::fs::symlink(&target, &copy).map_err(write(&copy))?;
            lchown(&copy, Some(entry.uid()), Some(entry.gid())).map_err(attributes(&copy))?;
        } else {
            log::warn!(
                "not copying {}: a socket, FIFO or device node",
                source.display()
            );
        }
    }
    let dir = File::open(to).map_err(read(to))?;
    copy_attributes(&dir, to, meta)?;
    dir.sync_all().map_err(sync(to))
}

/// Makes the directory `path` (its parent exists), for a copy to be put
/// in.
pub fn make_dir(path: &Path) -> Result<(), Error> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(write(path))
}

/// Syncs the directory `path`, so that the entries made in it survive a
/// crash.
pub fn sync_dir(path: &Path) -> Result<(), Error> {
    File::open(path)
        .and_then(|dir| dir.sync_all())
        .map_err(sync(path))
}

/// Removes whatever is at `path` (a file or a tree); nothing there is
/// fine.
pub fn remove(path: &Path) -> Result<(), Error> {
    let removed = match fs::symlink_metadata(path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => Err(err),
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
    };
    removed.map_err(|err| Error::Remove {
        path: path.to_path_buf(),
        err,
    })
}

/// Renames the finished copy `from` to `to`, replacing a leftover of an
/// earlier attempt that no record names, and syncs the directory of `to`
/// so that the rename survives a crash.
pub fn put_in_place(from: &Path, to: &Path) -> Result<(), Error> {
    remove(to)?;
    let rename = |err| Error::Rename {
        to: to.to_path_buf(),
        err,
    };
    let parent = to.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(parent).map_err(rename)?;
    fs::rename(from, to).map_err(rename)?;
    sync_dir(parent)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-content-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_tree_is_copied_with_files_links_and_modes() {
        let dir = dir("tree");
        let from = dir.join("from");
        fs::create_dir_all(from.join("sub/deeper")).unwrap();
        fs::write(from.join("a.txt"), "alpha").unwrap();
        fs::write(from.join("sub/deeper/b.txt"), "beta").unwrap();
        fs::set_permissions(from.join("a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::set_permissions(from.join("sub"), fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::symlink("a.txt", from.join("link")).unwrap();
        std::os::unix::net::UnixListener::bind(from.join("sock")).unwrap();

        let to = dir.join("to");
        copy_tree(&from, &to).unwrap();
        assert_eq!(fs::read_to_string(to.join("a.txt")).unwrap(), "alpha");
        assert_eq!(
            fs::read_to_string(to.join("sub/deeper/b.txt")).unwrap(),
            "beta"
        );
        assert_eq!(fs::read_link(to.join("link")).unwrap(), Path::new("a.txt"));
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&to.join("a.txt")), 0o640);
        assert_eq!(mode(&to.join("sub")), 0o750);
        assert_eq!(mode(&to), mode(&from));
        assert_eq!(
            fs::metadata(to.join("a.txt")).unwrap().modified().unwrap(),
            fs::metadata(from.join("a.txt"))
                .unwrap()
                .modified()
                .unwrap()
        );
        assert!(!to.join("sock").exists(), "sockets are not copied");

        // A copy is of its moment: later changes to the source stay there.
        fs::write(from.join("a.txt"), "changed").unwrap();
        assert_eq!(fs::read_to_string(to.join("a.txt")).unwrap(), "alpha");
        assert!(
            copy_tree(&from, &to).is_err(),
            "the copy's place must be free"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_sparse_file_is_copied_with_its_data_and_grown_when_asked() {
        let dir = dir("file");
        let from = dir.join("from.img");
        let file = File::create(&from).unwrap();
        file.set_len(4 << 20).unwrap();
        file.write_all_at(&[7; 4096], 1 << 20).unwrap();
        drop(file);
        let to = dir.join("to.img");
        assert_eq!(copy_file(&from, &to, None).unwrap(), 4 << 20);
        assert_eq!(fs::read(&to).unwrap(), fs::read(&from).unwrap());
        assert!(
            fs::metadata(&to).unwrap().blocks() * 512 < 4 << 20,
            "the copy is sparse"
        );
        let bigger = dir.join("bigger.img");
        assert_eq!(copy_file(&from, &bigger, Some(8 << 20)).unwrap(), 8 << 20);
        let data = fs::read(&bigger).unwrap();
        assert_eq!(data.len(), 8 << 20);
        assert_eq!(&data[..4 << 20], &fs::read(&from).unwrap()[..]);
        assert!(data[4 << 20..].iter().all(|b| *b == 0));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_copy_is_put_in_place_over_a_leftover() {
        let dir = dir("place");
        let leftover = dir.join("final");
        fs::create_dir_all(leftover.join("old")).unwrap();
        let copy = dir.join("tmp");
        fs::create_dir_all(&copy).unwrap();
        fs::write(copy.join("new"), "n").unwrap();
        put_in_place(&copy, &leftover).unwrap();
        assert!(!copy.exists());
        assert!(leftover.join("new").exists() && !leftover.join("old").exists());
        remove(&leftover).unwrap();
        remove(&leftover).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
