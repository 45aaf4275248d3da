//! Where an archive's entries land: a [`Sink`] writes each one under its
//! destination dir and refuses what would leave it (`..`, absolute names,
//! a path through a symlink, a link whose target leads out), and enforces
//! the agent's `decompression_file_count_limit` and
//! `decompression_size_limit` while writing, not after. Files are written
//! under a temporary name and renamed into place, so a task never sees
//! half a file.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// What unpacking bounds.
#[derive(Debug, Clone, Copy)]
pub struct UnpackLimits {
    /// The most entries an archive may hold.
    pub file_count: u64,
    /// The most bytes its files may hold in all.
    pub size: u64,
}

/// The destination of one archive, with what it took so far.
pub struct Sink<'a> {
    root: &'a Path,
    limits: UnpackLimits,
    files: u64,
    bytes: u64,
}

fn refused(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// The normal components of an entry's name, or why it is refused.
pub fn entry_parts(name: &str) -> io::Result<Vec<&str>> {
    if name.starts_with('/') {
        return Err(refused(format!("entry {name:?} has an absolute name")));
    }
    let mut parts = Vec::new();
    for component in Path::new(name).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str().unwrap_or_default()),
            Component::CurDir => {}
            _ => {
                return Err(refused(format!(
                    "entry {name:?} leads outside the destination"
                )))
            }
        }
    }
    Ok(parts)
}

/// Makes the dirs of `parts` under `root`, refusing to go through a
/// symlink (one the task left there could point anywhere on the host).
pub fn make_dirs(root: &Path, parts: &[&str]) -> io::Result<PathBuf> {
    let mut path = root.to_path_buf();
    for part in parts {
        path.push(part);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(refused(format!(
                    "{} is a symlink: csi-agent does not write through one",
                    path.display()
                )))
            }
            Ok(_) => {
                return Err(refused(format!("{} is not a dir", path.display())));
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new().mode(0o755).create(&path)?;
            }
            Err(err) => return Err(err),
        }
    }
    Ok(path)
}

/// Writes `content` at `path` through a temporary name, at most `max`
/// bytes (more is `too_large`); the bytes written.
pub fn write_file(
    path: &Path,
    mode: u32,
    content: &mut dyn Read,
    max: u64,
    too_large: &dyn Fn() -> String,
) -> io::Result<u64> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = path.with_file_name(format!(".{name}.artifact-part"));
    let _ = fs::remove_file(&temp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)?;
    let written = io::copy(&mut content.take(max + 1), &mut file);
    let done = written.and_then(|n| {
        if n > max {
            return Err(refused(too_large()));
        }
        file.flush()?;
        fs::set_permissions(&temp, fs::Permissions::from_mode(mode & 0o777))?;
        fs::rename(&temp, path)?;
        Ok(n)
    });
    if done.is_err() {
        let _ = fs::remove_file(&temp);
    }
    done
}

impl<'a> Sink<'a> {
    pub fn new(root: &'a Path, limits: UnpackLimits) -> Sink<'a> {
        Sink {
            root,
            limits,
            files: 0,
            bytes: 0,
        }
    }

    fn count(&mut self) -> io::Result<()> {
        self.files += 1;
        if self.files > self.limits.file_count {
            return Err(refused(format!(
                "the archive holds more than {} entries (decompression_file_count_limit)",
                self.limits.file_count
            )));
        }
        Ok(())
    }

    /// The dir of an entry's parent, made, and the entry's own name.
    fn parent(&self, name: &str) -> io::Result<(PathBuf, String)> {
        let parts = entry_parts(name)?;
        let Some((last, dirs)) = parts.split_last() else {
            return Err(refused(format!("entry {name:?} has no name")));
        };
        Ok((make_dirs(self.root, dirs)?, last.to_string()))
    }

    pub fn dir(&mut self, name: &str, mode: u32) -> io::Result<()> {
        self.count()?;
        let parts = entry_parts(name)?;
        let path = make_dirs(self.root, &parts)?;
        if !parts.is_empty() {
            fs::set_permissions(&path, fs::Permissions::from_mode((mode & 0o777) | 0o700))?;
        }
        Ok(())
    }

    pub fn file(&mut self, name: &str, mode: u32, content: &mut dyn Read) -> io::Result<()> {
        self.count()?;
        let (dir, last) = self.parent(name)?;
        let path = dir.join(&last);
        if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            return Err(refused(format!("entry {name:?}: a dir is in the way")));
        }
        let left = self.limits.size.saturating_sub(self.bytes);
        let limit = self.limits.size;
        let too_large =
            || format!("the files are larger than {limit} bytes (decompression_size_limit)");
        let written = write_file(&path, mode, content, left, &too_large)?;
        self.bytes += written;
        Ok(())
    }

    /// A symlink, refused when its target leads outside the destination.
    pub fn symlink(&mut self, name: &str, target: &str) -> io::Result<()> {
        self.count()?;
        let parts = entry_parts(name)?;
        if target.starts_with('/') {
            return Err(refused(format!(
                "symlink {name:?} points at an absolute path"
            )));
        }
        let mut depth = parts.len().saturating_sub(1);
        for component in Path::new(target).components() {
            match component {
                Component::Normal(_) => depth += 1,
                Component::ParentDir => {
                    depth = depth.checked_sub(1).ok_or_else(|| {
                        refused(format!(
                            "symlink {name:?} points outside the destination ({target:?})"
                        ))
                    })?
                }
                _ => {}
            }
        }
        let (dir, last) = self.parent(name)?;
        let path = dir.join(last);
        if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir()) {
            fs::remove_file(&path)?;
        }
        std::os::unix::fs::symlink(target, &path)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-artifact-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    const LIMITS: UnpackLimits = UnpackLimits {
        file_count: 10,
        size: 100,
    };

    #[test]
    fn names_that_leave_the_destination_are_refused() {
        let dir = temp_dir("names");
        let mut sink = Sink::new(&dir, LIMITS);
        for name in ["../x", "a/../../x", "/etc/x"] {
            assert!(sink.file(name, 0o644, &mut &b"x"[..]).is_err(), "{name}");
        }
        assert!(sink.symlink("l", "../../etc").is_err());
        assert!(sink.symlink("l", "/etc").is_err());
        sink.symlink("a/l", "../b").unwrap();
        assert!(!dir.parent().unwrap().join("x").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_on_the_way_is_not_followed() {
        let dir = temp_dir("through");
        let outside = temp_dir("through-outside");
        std::os::unix::fs::symlink(&outside, dir.join("l")).unwrap();
        let mut sink = Sink::new(&dir, LIMITS);
        let err = sink.file("l/x", 0o644, &mut &b"x"[..]).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(!outside.join("x").exists());
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn limits_hold_while_writing() {
        let dir = temp_dir("limits");
        let mut sink = Sink::new(&dir, LIMITS);
        sink.file("a", 0o755, &mut &[1u8; 60][..]).unwrap();
        let err = sink.file("b", 0o644, &mut &[1u8; 60][..]).unwrap_err();
        assert!(
            err.to_string().contains("decompression_size_limit"),
            "{err}"
        );
        assert!(!dir.join("b").exists());
        assert_eq!(
            fs::metadata(dir.join("a")).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let mut sink = Sink::new(&dir, LIMITS);
        for i in 0..10 {
            sink.dir(&format!("d{i}"), 0o755).unwrap();
        }
        let err = sink.dir("d10", 0o755).unwrap_err();
        assert!(
            err.to_string().contains("decompression_file_count_limit"),
            "{err}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
