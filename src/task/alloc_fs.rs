//! `alloc fs`: a listing, a stat or a bounded part of a file beneath an
//! alloc's dir. Every path is opened beneath the alloc dir
//! ([`crate::sys::beneath`]): no `..`, absolute path or symlink leads out
//! of it, and a symlink is listed with its target, never followed. Runs on
//! the API session's thread, never on the main loop; `alloc fs -f` reads
//! again from where it stopped at each look (`api/session_reads.rs`), the
//! path opened beneath the alloc dir each time.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use crate::call::{CallError, ErrorKind};
use crate::sys::beneath;

/// The most bytes of a file one `alloc fs` call returns; the CLI asks
/// again from where it stopped.
pub const MAX_FS_READ: usize = 1 << 20;

/// The most entries a listing returns: a dir with more is refused with
/// an error that names this bound.
pub const MAX_FS_ENTRIES: usize = 10_000;

/// One entry of the alloc dir.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsEntry {
    pub name: String,
    pub size: u64,
    pub mode: u32,
    pub modified_unix: i64,
    pub is_dir: bool,
    pub link_target: String,
}

/// What an `alloc fs` call found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsAnswer {
    pub entry: FsEntry,
    pub entries: Vec<FsEntry>,
    pub data: Vec<u8>,
    pub eof: bool,
}

/// An `alloc fs` call: `path` relative to the alloc dir.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsRequest {
    pub path: String,
    pub stat: bool,
    pub offset: u64,
}

/// Answers `req` beneath `alloc_dir`.
pub fn read(alloc_dir: &Path, req: &FsRequest) -> Result<FsAnswer, CallError> {
    let io_error = |what: &str, err: io::Error| {
        let kind = match err.kind() {
            io::ErrorKind::NotFound => ErrorKind::NotFound,
            _ => ErrorKind::InvalidArgument,
        };
        let why = match err.raw_os_error() {
            Some(libc::ELOOP) => "a symlink, which alloc fs does not follow".to_string(),
            Some(libc::EXDEV) => "outside the alloc dir".to_string(),
            _ => err.to_string(),
        };
        CallError::new(kind, format!("cannot {what} {:?}: {why}", req.path))
    };
    let root = File::open(alloc_dir).map_err(|err| io_error("open the alloc dir for", err))?;
    let relative = relative_path(&req.path);
    let file = if relative.as_os_str().is_empty() {
        root
    } else {
        beneath::open_beneath(
            &root,
            &relative,
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK,
            0,
        )
        .map_err(|err| io_error("open", err))?
    };
    let meta = file.metadata().map_err(|err| io_error("stat", err))?;
    let name = relative
        .file_name()
        .map_or_else(|| "/".to_string(), |n| n.to_string_lossy().into_owned());
    let mut answer = FsAnswer {
        entry: entry(name, &meta, String::new()),
        ..Default::default()
    };
    if req.stat {
        return Ok(answer);
    }
    if meta.is_dir() {
        answer.entries = list(&file).map_err(|err| io_error("list", err))?;
        if answer.entries.len() > MAX_FS_ENTRIES {
            return Err(CallError::new(
                ErrorKind::OutOfRange,
                format!(
                    "{:?} holds more than MAX_FS_ENTRIES ({MAX_FS_ENTRIES}) entries",
                    req.path
                ),
            ));
        }
    } else if meta.is_file() {
        let mut file = file;
        file.seek(SeekFrom::Start(req.offset))
            .map_err(|err| io_error("read", err))?;
        file.take(MAX_FS_READ as u64)
            .read_to_end(&mut answer.data)
            .map_err(|err| io_error("read", err))?;
        answer.eof = req.offset + answer.data.len() as u64 >= meta.len();
    } else {
        return Err(CallError::new(
            ErrorKind::InvalidArgument,
            format!("{:?} is neither a file nor a dir", req.path),
        ));
    }
    Ok(answer)
}

/// The request's path as a relative one: leading `/`s and `.`s dropped
/// (the alloc dir is the root the caller names paths from).
fn relative_path(path: &str) -> std::path::PathBuf {
    Path::new(path)
        .components()
        .filter(|c| !matches!(c, Component::RootDir | Component::CurDir))
        .collect()
}

fn entry(name: String, meta: &fs::Metadata, link_target: String) -> FsEntry {
    FsEntry {
        name,
        size: meta.len(),
        mode: meta.mode(),
        modified_unix: meta.mtime(),
        is_dir: meta.is_dir(),
        link_target,
    }
}

/// The dir's entries sorted by name, one past [`MAX_FS_ENTRIES`] at most;
/// symlinks stat'ed themselves, never followed.
fn list(dir: &File) -> io::Result<Vec<FsEntry>> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let mut entries = Vec::new();
    for item in fs::read_dir(&path)? {
        let item = item?;
        let meta = fs::symlink_metadata(item.path())?;
        let target = if meta.file_type().is_symlink() {
            fs::read_link(item.path())
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            String::new()
        };
        entries.push(entry(
            item.file_name().to_string_lossy().into_owned(),
            &meta,
            target,
        ));
        if entries.len() > MAX_FS_ENTRIES {
            break;
        }
    }
    order::sort_by(&mut entries, |a, b| a.name.cmp(&b.name));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("csi-alloc-fs-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("alloc/logs")).unwrap();
        dir
    }

    fn req(path: &str) -> FsRequest {
        FsRequest {
            path: path.into(),
            ..Default::default()
        }
    }

    #[test]
    fn lists_stats_and_reads_beneath_the_alloc_dir() {
        let root = dir("read");
        fs::write(root.join("alloc/logs/out"), b"hello").unwrap();
        let listing = read(&root, &req("/")).unwrap();
        assert_eq!(listing.entries.len(), 1);
        assert!(listing.entries[0].is_dir && listing.entries[0].name == "alloc");
        let logs = read(&root, &req("alloc/logs")).unwrap();
        assert_eq!(logs.entries[0].name, "out");
        assert_eq!(logs.entries[0].size, 5);
        let file = read(&root, &req("alloc/logs/out")).unwrap();
        assert_eq!(file.data, b"hello");
        assert!(file.eof);
        let tail = read(
            &root,
            &FsRequest {
                offset: 3,
                ..req("alloc/logs/out")
            },
        )
        .unwrap();
        assert_eq!(tail.data, b"lo");
        let stat = read(
            &root,
            &FsRequest {
                stat: true,
                ..req("alloc/logs/out")
            },
        )
        .unwrap();
        assert!(stat.data.is_empty() && stat.entry.size == 5 && stat.entry.name == "out");
        let missing = read(&root, &req("alloc/nope")).unwrap_err();
        assert_eq!(missing.kind, ErrorKind::NotFound);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_symlink_or_dot_dot_does_not_lead_out() {
        let root = dir("escape");
        std::os::unix::fs::symlink("/etc", root.join("alloc/etc")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("alloc/host")).unwrap();
        for path in ["alloc/etc/hostname", "alloc/host", "../", "alloc/../../etc"] {
            let err = read(&root, &req(path)).unwrap_err();
            assert!(!err.message.is_empty(), "{path}");
        }
        // Listed with its target, not followed.
        let listing = read(&root, &req("alloc")).unwrap();
        let link = listing.entries.iter().find(|e| e.name == "etc").unwrap();
        assert_eq!(link.link_target, "/etc");
        assert!(!link.is_dir);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_read_stops_at_max_fs_read() {
        let root = dir("big");
        fs::write(root.join("alloc/big"), vec![7u8; MAX_FS_READ + 10]).unwrap();
        let first = read(&root, &req("alloc/big")).unwrap();
        assert_eq!(first.data.len(), MAX_FS_READ);
        assert!(!first.eof);
        let rest = read(
            &root,
            &FsRequest {
                offset: MAX_FS_READ as u64,
                ..req("alloc/big")
            },
        )
        .unwrap();
        assert_eq!(rest.data.len(), 10);
        assert!(rest.eof);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_listing_past_max_fs_entries_is_refused() {
        let root = dir("many");
        let many = root.join("alloc/many");
        fs::create_dir(&many).unwrap();
        for i in 0..=MAX_FS_ENTRIES {
            File::create(many.join(i.to_string())).unwrap();
        }
        let err = read(&root, &req("alloc/many")).unwrap_err();
        assert!(err.message.contains("MAX_FS_ENTRIES"), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }
}
