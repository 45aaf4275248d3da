//! File descriptors as plain integers, for the start helper's steps before
//! a task's exec, which hold no `File`s: open, write, sync and close, and
//! the directory calls. None of them allocates.

use std::ffi::CStr;
use std::io;

use libc::{c_int, c_uint};

use super::cvt;

/// Calls open(2).
pub fn open(path: &CStr, flags: c_int, mode: c_uint) -> io::Result<c_int> {
    // SAFETY: `path` is NUL-terminated; the flags and mode are plain
    // integers.
    cvt(unsafe { libc::open(path.as_ptr(), flags, mode) })
}

/// Calls openat(2): `name` under the open directory `dir`.
pub fn openat(dir: c_int, name: &CStr, flags: c_int, mode: c_uint) -> io::Result<c_int> {
    // SAFETY: `name` is NUL-terminated; a bad `dir` is an error, not
    // undefined behaviour.
    cvt(unsafe { libc::openat(dir, name.as_ptr(), flags, mode) })
}

/// Calls close(2); the caller opened `fd` and closes it once.
pub fn close(fd: c_int) {
    // SAFETY: closing a descriptor touches no memory of ours.
    unsafe { libc::close(fd) };
}

/// Calls write(2) once: how many bytes of `bytes` went out.
pub fn write(fd: c_int, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: `bytes` is a live slice of the given length.
    let n = cvt(unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) })?;
    Ok(n as usize)
}

/// Writes all of `bytes`, stopping quietly at the first error or short
/// write of nothing: for messages that have nowhere else to go.
pub fn write_all(fd: c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match write(fd, bytes) {
            Ok(n) if n > 0 => bytes = &bytes[n..],
            _ => return,
        }
    }
}

/// A copy of `fd` at the lowest free descriptor from `lowest` on, closed
/// on exec (fcntl(2) with `F_DUPFD_CLOEXEC`).
pub fn dup_cloexec(fd: c_int, lowest: c_int) -> io::Result<c_int> {
    // SAFETY: fcntl(2) with integer arguments; a bad descriptor is an
    // error, not undefined behaviour.
    cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, lowest) })
}

/// Calls dup2(2): `onto` becomes a copy of `fd` (closed first if open).
/// Only for a process that owns no `File` or `OwnedFd` at `onto`.
pub fn dup2(fd: c_int, onto: c_int) -> io::Result<()> {
    // SAFETY: dup2(2) with integer arguments; it touches descriptors only.
    cvt(unsafe { libc::dup2(fd, onto) }).map(drop)
}

/// Calls fsync(2).
pub fn fsync(fd: c_int) -> io::Result<()> {
    // SAFETY: a plain integer; a bad descriptor is an error.
    cvt(unsafe { libc::fsync(fd) }).map(drop)
}

/// Calls mkdir(2).
pub fn mkdir(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; the mode is a plain integer.
    cvt(unsafe { libc::mkdir(path.as_ptr(), mode) }).map(drop)
}

/// Calls symlink(2): `link` pointing at `target`.
pub fn symlink(target: &CStr, link: &CStr) -> io::Result<()> {
    // SAFETY: both are NUL-terminated strings that outlive the call.
    cvt(unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) }).map(drop)
}

/// Calls chdir(2).
pub fn chdir(path: &CStr) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated.
    cvt(unsafe { libc::chdir(path.as_ptr()) }).map(drop)
}

/// Calls fchdir(2).
pub fn fchdir(fd: c_int) -> io::Result<()> {
    // SAFETY: a plain integer; a bad descriptor is an error, not UB.
    cvt(unsafe { libc::fchdir(fd) }).map(drop)
}

/// Closes every descriptor from `first` to `last`: close_range(2), or one
/// close(2) each up to 4095 on kernels before 5.9. Only for a process
/// that owns no `File` or `OwnedFd` in that range.
pub fn close_range(first: c_uint, last: c_uint) {
    // SAFETY: close_range(2) with integer arguments; closes descriptors
    // only.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
    if ret == 0 {
        return;
    }
    for fd in first..=last.min(4095) {
        close(fd as c_int);
    }
}
