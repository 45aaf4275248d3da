//! Where an archive's entries land: a [`Sink`] writes each one under its
//! destination dir and enforces the agent's `decompression_file_count_limit`
//! and `decompression_size_limit` while writing, not after. Files are
//! written under a temporary name and renamed into place, so a task never
//! sees half a file.
//!
//! Every path is resolved beneath the destination by the kernel, not
//! checked as text: the destination is held open, and each entry's dirs
//! are opened from it one name at a time through
//! [`crate::sys::beneath`] (`openat2` with `RESOLVE_BENEATH` and
//! `RESOLVE_NO_SYMLINKS`, or `openat` with `O_NOFOLLOW` where the kernel
//! lacks it), so no write goes through a symlink, whoever made it: the
//! task, in an earlier start, or an earlier entry. The file itself is
//! created with `O_EXCL` beside its name and renamed over it, which
//! replaces a symlink of that name instead of writing where it points.
//!
//! Names with `..` or a leading `/` are refused before that. So are
//! symlinks whose target could lead out once followed (by the task, which
//! reads what was unpacked): an absolute target, more leading `..` than
//! the link has dirs above it, or a `..` after a name (`b -> a/..` leaves
//! if `a` is itself a link to `.`). With those rules a link only ever
//! names a place beneath the destination, whatever the links it goes
//! through, because each of them obeys the same rules from a real dir.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::sys::beneath::{self, Kind};

/// What unpacking bounds.
#[derive(Debug, Clone, Copy)]
pub struct UnpackLimits {
    /// The most entries an archive may hold.
    pub file_count: u64,
    /// The most bytes its files may hold in all.
    pub size: u64,
}

/// An open dir, and its path for messages.
pub struct Dir {
    file: File,
    pub path: PathBuf,
}

impl Dir {
    /// Opens the dir at `path`, which the agent made (a task dir).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(path)?;
        Ok(Dir {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Makes (as needed) and opens the dirs of `parts` beneath this one,
    /// through no symlink.
    pub fn descend(&self, parts: &[&str]) -> io::Result<Dir> {
        let mut path = self.path.clone();
        let mut held: Option<File> = None;
        for part in parts {
            path.push(part);
            let at = held.as_ref().unwrap_or(&self.file);
            match beneath::mkdir_at(at, OsStr::new(part), 0o755) {
                Err(err) if err.kind() != io::ErrorKind::AlreadyExists => {
                    return Err(at_path(&path, err))
                }
                _ => {}
            }
            let opened =
                beneath::open_beneath(at, Path::new(part), libc::O_RDONLY | libc::O_DIRECTORY, 0);
            held = Some(match opened {
                Ok(file) => file,
                Err(err) if matches!(err.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                    let symlink = beneath::kind_at(at, OsStr::new(part))
                        .is_ok_and(|k| k == Some(Kind::Symlink));
                    return Err(refused(if symlink {
                        format!(
                            "{} is a symlink: csi-agent does not write through one",
                            path.display()
                        )
                    } else {
                        format!("{} is not a dir", path.display())
                    }));
                }
                Err(err) => return Err(at_path(&path, err)),
            });
        }
        let file = match held {
            Some(file) => file,
            None => self.file.try_clone()?,
        };
        Ok(Dir { file, path })
    }

    fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
        beneath::kind_at(&self.file, OsStr::new(name)).map_err(|e| at_path(&self.path, e))
    }
}

/// The destination of one archive, with what it took so far.
pub struct Sink {
    root: Dir,
    limits: UnpackLimits,
    files: u64,
    bytes: u64,
}

fn refused(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// `err` with the path it happened at.
fn at_path(path: &Path, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
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

/// Makes the dirs of `parts` beneath `root`, a dir the agent made, through
/// no symlink (one the task left there could point anywhere on the host).
pub fn make_dirs(root: &Path, parts: &[&str]) -> io::Result<Dir> {
    Dir::open(root)?.descend(parts)
}

/// Writes `content` as `name` in `dir` through a temporary name, at most
/// `max` bytes (more is `too_large`); the bytes written.
pub fn write_file(
    dir: &Dir,
    name: &str,
    mode: u32,
    content: &mut dyn Read,
    max: u64,
    too_large: &dyn Fn() -> String,
) -> io::Result<u64> {
    let temp = format!(".{name}.artifact-part");
    let temp = OsStr::new(&temp);
    let _ = beneath::unlink_at(&dir.file, temp);
    let mut file = beneath::open_beneath(
        &dir.file,
        Path::new(temp),
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )
    .map_err(|e| at_path(&dir.path.join(temp), e))?;
    let written = io::copy(&mut content.take(max + 1), &mut file);
    let done = written.and_then(|n| {
        if n > max {
            return Err(refused(too_large()));
        }
        file.flush()?;
        file.set_permissions(fs::Permissions::from_mode(mode & 0o777))?;
        beneath::rename_at(&dir.file, temp, OsStr::new(name))
            .map_err(|e| at_path(&dir.path.join(name), e))?;
        Ok(n)
    });
    if done.is_err() {
        let _ = beneath::unlink_at(&dir.file, temp);
    }
    done
}

/// Refuses a symlink `name` (its dirs `parts` less the last) to `target`
/// that could lead outside the destination once followed.
fn check_link(name: &str, parts: &[&str], target: &str) -> io::Result<()> {
    let outside = || {
        refused(format!(
            "symlink {name:?} points outside the destination ({target:?})"
        ))
    };
    if target.is_empty() {
        return Err(refused(format!("symlink {name:?} has an empty target")));
    }
    if target.starts_with('/') {
        return Err(refused(format!(
            "symlink {name:?} points at an absolute path ({target:?})"
        )));
    }
    let mut above = parts.len().saturating_sub(1);
    let mut named = false;
    for component in Path::new(target).components() {
        match component {
            Component::Normal(_) => named = true,
            Component::ParentDir if named => {
                return Err(refused(format!(
                    "symlink {name:?}: its target {target:?} has a \"..\" after a name, which a link could turn outside the destination"
                )))
            }
            Component::ParentDir => above = above.checked_sub(1).ok_or_else(outside)?,
            _ => {}
        }
    }
    Ok(())
}

impl Sink {
    /// A sink into `root`, a dir the agent made.
    #[cfg(test)]
    pub fn new(root: &Path, limits: UnpackLimits) -> io::Result<Sink> {
        Ok(Sink::in_dir(Dir::open(root)?, limits))
    }

    /// A sink into the open dir `root`.
    pub fn in_dir(root: Dir, limits: UnpackLimits) -> Sink {
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
    fn parent<'n>(&self, name: &'n str) -> io::Result<(Dir, &'n str)> {
        let parts = entry_parts(name)?;
        let Some((last, dirs)) = parts.split_last() else {
            return Err(refused(format!("entry {name:?} has no name")));
        };
        Ok((self.root.descend(dirs)?, last))
    }

    pub fn dir(&mut self, name: &str, mode: u32) -> io::Result<()> {
        self.count()?;
        let parts = entry_parts(name)?;
        let dir = self.root.descend(&parts)?;
        if !parts.is_empty() {
            dir.file
                .set_permissions(fs::Permissions::from_mode((mode & 0o777) | 0o700))?;
        }
        Ok(())
    }

    pub fn file(&mut self, name: &str, mode: u32, content: &mut dyn Read) -> io::Result<()> {
        self.count()?;
        let (dir, last) = self.parent(name)?;
        if dir.kind(last)? == Some(Kind::Dir) {
            return Err(refused(format!("entry {name:?}: a dir is in the way")));
        }
        let left = self.limits.size.saturating_sub(self.bytes);
        let limit = self.limits.size;
        let too_large =
            || format!("the files are larger than {limit} bytes (decompression_size_limit)");
        let written = write_file(&dir, last, mode, content, left, &too_large)?;
        self.bytes += written;
        Ok(())
    }

    /// A symlink, refused when its target could lead outside the
    /// destination.
    pub fn symlink(&mut self, name: &str, target: &str) -> io::Result<()> {
        self.count()?;
        check_link(name, &entry_parts(name)?, target)?;
        let (dir, last) = self.parent(name)?;
        match dir.kind(last)? {
            Some(Kind::Dir) => return Err(refused(format!("entry {name:?}: a dir is in the way"))),
            Some(_) => beneath::unlink_at(&dir.file, OsStr::new(last))?,
            None => {}
        }
        beneath::symlink_at(OsStr::new(target), &dir.file, OsStr::new(last))
            .map_err(|e| at_path(&dir.path.join(last), e))
    }

    /// A hard link, which is not made (as go-getter does not): refused when
    /// it names something outside the destination, else skipped with a
    /// warning.
    pub fn hard_link(&mut self, name: &str, target: &str) -> io::Result<()> {
        self.count()?;
        entry_parts(name)?;
        entry_parts(target).map_err(|_| {
            refused(format!(
                "hard link {name:?} names {target:?}, outside the destination"
            ))
        })?;
        log::warn!("Artifact: skipping hard link {name:?} to {target:?}");
        Ok(())
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
        // The destination's parent is the test's own, so that what a
        // name leading out of it would write is looked for where no one
        // else writes.
        let root = temp_dir("names");
        let dir = root.join("dest");
        fs::create_dir(&dir).unwrap();
        let mut sink = Sink::new(&dir, LIMITS).unwrap();
        for name in ["../x", "a/../../x", "/etc/x"] {
            assert!(sink.file(name, 0o644, &mut &b"x"[..]).is_err(), "{name}");
        }
        assert!(sink.symlink("l", "../../etc").is_err());
        assert!(sink.symlink("l", "/etc").is_err());
        sink.symlink("a/l", "../b").unwrap();
        assert!(!root.join("x").exists());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_symlink_on_the_way_is_not_followed() {
        let dir = temp_dir("through");
        let outside = temp_dir("through-outside");
        std::os::unix::fs::symlink(&outside, dir.join("l")).unwrap();
        let mut sink = Sink::new(&dir, LIMITS).unwrap();
        let err = sink.file("l/x", 0o644, &mut &b"x"[..]).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(!outside.join("x").exists());
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn a_symlink_of_a_file_s_name_is_replaced_not_written_through() {
        let dir = temp_dir("same-name");
        let outside = temp_dir("same-name-outside");
        fs::write(outside.join("secret"), "s").unwrap();
        // As a task could have left it in its own dir.
        std::os::unix::fs::symlink(outside.join("secret"), dir.join("f")).unwrap();
        let mut sink = Sink::new(&dir, LIMITS).unwrap();
        sink.file("f", 0o644, &mut &b"new"[..]).unwrap();
        assert_eq!(fs::read_to_string(outside.join("secret")).unwrap(), "s");
        let meta = fs::symlink_metadata(dir.join("f")).unwrap();
        assert!(meta.is_file(), "{meta:?}");
        assert_eq!(fs::read_to_string(dir.join("f")).unwrap(), "new");
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn link_targets_that_could_lead_out_are_refused() {
        let dir = temp_dir("targets");
        let mut sink = Sink::new(&dir, LIMITS).unwrap();
        sink.symlink("a", ".").unwrap();
        sink.symlink("d/up", "../x").unwrap();
        sink.symlink("d/here", "./x/y").unwrap();
        for (name, target, says) in [
            ("b", "a/..", "after a name"),
            ("b", "x/../..", "after a name"),
            ("d/l", "../../x", "outside the destination"),
            ("l", "..", "outside the destination"),
            ("l", "/etc", "absolute"),
            ("l", "", "empty"),
        ] {
            let err = sink.symlink(name, target).unwrap_err();
            let message = err.to_string();
            assert!(message.contains(&format!("symlink {name:?}")), "{message}");
            assert!(message.contains(says), "{target}: {message}");
            assert!(!dir.join(name).exists(), "{name}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_gz_file_bomb_stops_at_the_size_limit_while_inflating() {
        // What `mode = "file"` does with a .gz: 256 MiB of zeros, gzipped.
        let dir = temp_dir("gz-bomb");
        let bomb = dir.join("bomb.gz");
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "head -c 268435456 /dev/zero | gzip -9 > {}",
                bomb.display()
            ))
            .status()
            .unwrap();
        assert!(status.success());
        let packed = fs::metadata(&bomb).unwrap().len();
        let mut input = File::open(&bomb).unwrap();
        let mut content = super::super::gzip::GzipReader::new(&mut input).unwrap();
        let dest = Dir::open(&dir).unwrap();
        let err = write_file(&dest, "out", 0o644, &mut content, 1 << 20, &|| {
            "too large (decompression_size_limit)".into()
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("decompression_size_limit"),
            "{err}"
        );
        drop(content);
        // One 64 KiB buffer of about 260 KiB read.
        use std::io::Seek;
        let read = input.stream_position().unwrap();
        assert!(read < packed / 2, "read {read} of {packed} bytes");
        assert!(!dir.join("out").exists() && !dir.join(".out.artifact-part").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hard_link_inside_is_skipped_and_one_outside_refused() {
        let dir = temp_dir("hard");
        let mut sink = Sink::new(&dir, LIMITS).unwrap();
        sink.hard_link("h", "a/b").unwrap();
        assert!(!dir.join("h").exists());
        for target in ["../x", "/etc/passwd", "a/../../x"] {
            let err = sink.hard_link("h", target).unwrap_err();
            assert!(err.to_string().contains("hard link \"h\""), "{err}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn limits_hold_while_writing() {
        let dir = temp_dir("limits");
        let mut sink = Sink::new(&dir, LIMITS).unwrap();
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
        let mut sink = Sink::new(&dir, LIMITS).unwrap();
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
