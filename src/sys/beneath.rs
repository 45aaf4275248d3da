//! Names resolved beneath an open dir, never through a symlink: what the
//! artifact unpacker creates and opens inside a destination a task (or an
//! archive's earlier entries) may have filled with links.
//!
//! [`open_beneath`] asks the kernel with `openat2(2)` (`RESOLVE_BENEATH`,
//! `RESOLVE_NO_SYMLINKS`, `RESOLVE_NO_MAGICLINKS`); on a kernel without it
//! (`ENOSYS`, before Linux 5.6) it walks the path a component at a time
//! with `openat(2)` and `O_NOFOLLOW`, which refuses a symlink at every step
//! the same way. The other calls take one name inside a dir already opened
//! that way, so none of them can leave it either: `mkdirat`, `symlinkat`,
//! `renameat` (which replaces a symlink, never writes through it) and
//! `fstatat` without following. Each libc call is one small function
//! holding the only `unsafe` block for it.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

use super::cvt;

/// Set once `openat2` answered `ENOSYS`, so later opens walk at once.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The flags of every open here: no descriptor leaks into a task, and no
/// final symlink is followed.
const ALWAYS: libc::c_int = libc::O_CLOEXEC | libc::O_NOFOLLOW;

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// One name: not empty, no `/`, not `.` or `..`.
fn single(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    c_name(name)
}

/// Opens `path`, relative, beneath `dir` with `flags` (and `mode` when
/// they create), following no symlink on the way or at the end.
pub fn open_beneath(dir: &File, path: &Path, flags: libc::c_int, mode: u32) -> io::Result<File> {
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let resolve =
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
        match openat2(
            dir,
            &c_name(path.as_os_str())?,
            flags | ALWAYS,
            mode,
            resolve,
        ) {
            Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {
                NO_OPENAT2.store(true, Ordering::Relaxed);
            }
            done => return done,
        }
    }
    open_walking(dir, path, flags, mode)
}

/// [`open_beneath`] without `openat2`: each dir on the way opened with
/// `O_NOFOLLOW | O_DIRECTORY`; `..` and absolute paths refused.
fn open_walking(dir: &File, path: &Path, flags: libc::c_int, mode: u32) -> io::Result<File> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            // What RESOLVE_BENEATH answers for a path that could leave.
            _ => return Err(io::Error::from_raw_os_error(libc::EXDEV)),
        }
    }
    let Some((last, dirs)) = names.split_last() else {
        return openat(dir, c".", flags, mode);
    };
    let mut held: Option<File> = None;
    for name in dirs {
        let at = held.as_ref().unwrap_or(dir);
        held = Some(openat(
            at,
            &single(name)?,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?);
    }
    openat(held.as_ref().unwrap_or(dir), &single(last)?, flags, mode)
}

/// `openat2(dir, path, how)` with `flags | ALWAYS` and `resolve`.
fn openat2(
    dir: &File,
    path: &std::ffi::CStr,
    flags: libc::c_int,
    mode: u32,
    resolve: u64,
) -> io::Result<File> {
    // SAFETY: open_how is three integers (libc marks it non_exhaustive,
    // so it cannot be built field by field); all zeros is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.mode = if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
        u64::from(mode)
    } else {
        0
    };
    how.resolve = resolve;
    // SAFETY: `path` is a NUL-terminated string and `how` an initialised
    // open_how, both alive for the call, whose size is passed with it; the
    // kernel only reads them. `dir` is an open descriptor for the call.
    let fd = cvt(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    })?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { File::from(OwnedFd::from_raw_fd(fd as libc::c_int)) })
}

/// `openat(dir, name, flags | ALWAYS, mode)`.
fn openat(dir: &File, name: &std::ffi::CStr, flags: libc::c_int, mode: u32) -> io::Result<File> {
    // SAFETY: `name` is a NUL-terminated string alive for the call and
    // `dir` an open descriptor; the mode is passed by value.
    let fd = cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | ALWAYS,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { File::from(OwnedFd::from_raw_fd(fd)) })
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdir_at(dir: &File, name: &OsStr, mode: u32) -> io::Result<()> {
    let name = single(name)?;
    // SAFETY: `name` is a NUL-terminated string alive for the call and
    // `dir` an open descriptor.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// `symlinkat(target, dir, name)`: a link named `name` in `dir`.
pub fn symlink_at(target: &OsStr, dir: &File, name: &OsStr) -> io::Result<()> {
    let (target, name) = (c_name(target)?, single(name)?);
    // SAFETY: both strings are NUL-terminated and alive for the call;
    // `dir` is an open descriptor.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// `renameat(dir, from, dir, to)`: whatever `to` was (a symlink too) is
/// replaced, not written through.
pub fn rename_at(dir: &File, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (from, to) = (single(from)?, single(to)?);
    // SAFETY: both strings are NUL-terminated and alive for the call;
    // `dir` is an open descriptor, passed for both names.
    cvt(unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) })
        .map(drop)
}

/// `unlinkat(dir, name, 0)`: removes a file or symlink, not a dir.
pub fn unlink_at(dir: &File, name: &OsStr) -> io::Result<()> {
    let name = single(name)?;
    // SAFETY: `name` is a NUL-terminated string alive for the call and
    // `dir` an open descriptor.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) }).map(drop)
}

/// What a name in a dir is, the name itself (a symlink is a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    Symlink,
    Other,
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`'s file type; `None` when
/// there is nothing by that name.
pub fn kind_at(dir: &File, name: &OsStr) -> io::Result<Option<Kind>> {
    let name = single(name)?;
    // SAFETY: all zeros is a valid `stat` (integers only); the call fills
    // it in.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a NUL-terminated string and `st` a writable stat,
    // both alive for the call; `dir` is an open descriptor.
    let ret = cvt(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    });
    match ret {
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
        Ok(_) => {}
    }
    Ok(Some(match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-beneath-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("root/d")).unwrap();
        fs::write(dir.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink("..", dir.join("root/up")).unwrap();
        std::os::unix::fs::symlink("d", dir.join("root/down")).unwrap();
        std::os::unix::fs::symlink(dir.join("secret"), dir.join("root/abs")).unwrap();
        dir
    }

    /// Both ways of opening refuse the same paths and open the same ones.
    #[test]
    fn openat2_and_the_walk_refuse_every_way_out() {
        let dir = temp("out");
        let root = File::open(dir.join("root")).unwrap();
        type Open = fn(&File, &Path, libc::c_int, u32) -> io::Result<File>;
        for (how, open) in [
            ("openat2", open_beneath as Open),
            ("walk", open_walking as Open),
        ] {
            for path in ["up/secret", "../secret", "/etc/passwd", "down/x", "abs"] {
                let err = open(&root, Path::new(path), libc::O_RDONLY, 0).unwrap_err();
                assert!(
                    matches!(
                        err.raw_os_error(),
                        Some(libc::ELOOP | libc::EXDEV | libc::ENOTDIR)
                    ),
                    "{how} {path}: {err}"
                );
            }
            let made = open(
                &root,
                Path::new("d/new"),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o600,
            )
            .unwrap();
            drop(made);
            assert!(dir.join("root/d/new").is_file(), "{how}");
            fs::remove_file(dir.join("root/d/new")).unwrap();
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_name_calls_take_one_name_and_follow_nothing() {
        let dir = temp("names");
        let root = File::open(dir.join("root")).unwrap();
        assert_eq!(kind_at(&root, "up".as_ref()).unwrap(), Some(Kind::Symlink));
        assert_eq!(kind_at(&root, "d".as_ref()).unwrap(), Some(Kind::Dir));
        assert_eq!(kind_at(&root, "none".as_ref()).unwrap(), None);
        assert!(mkdir_at(&root, "up/x".as_ref(), 0o755).is_err());
        assert!(mkdir_at(&root, "..".as_ref(), 0o755).is_err());
        // A rename over a symlink replaces the link, not what it names.
        fs::write(dir.join("root/new"), "n").unwrap();
        rename_at(&root, "new".as_ref(), "abs".as_ref()).unwrap();
        assert_eq!(fs::read_to_string(dir.join("secret")).unwrap(), "s");
        assert_eq!(kind_at(&root, "abs".as_ref()).unwrap(), Some(Kind::Other));
        symlink_at("d".as_ref(), &root, "l".as_ref()).unwrap();
        unlink_at(&root, "l".as_ref()).unwrap();
        assert_eq!(kind_at(&root, "l".as_ref()).unwrap(), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
