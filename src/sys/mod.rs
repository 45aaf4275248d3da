//! Small safe wrappers over the system calls the agent needs besides
//! mounts (those live in [`crate::mount`]): control groups, inotify, poll,
//! peer credentials, signals, file locks, the interface addresses and
//! default route the templates' `sockaddr` reads, names resolved beneath a dir
//! (`openat2`), the loop devices and sparse copies of the hostpath
//! plugin's block volumes, the user database, and the calls the start
//! helper makes before a task's exec (descriptors as integers, sessions,
//! namespaces, fork, wait and exit, `set*id` and capabilities), which
//! allocate nothing; and whether the process runs under a user-mode
//! emulator (`emulation`, for the tests).
//! Each libc call is one small function holding the only `unsafe` block
//! for it; [`cvt`] turns the -1 of a failed call into the thread's `errno`,
//! for these wrappers and for those of `mount` and the exec driver.
//!
//! `sys` uses no other module of the crate, so that every layer, the
//! ground's `mount` included, may use it.

use std::io;

pub mod beneath;
pub mod caps;
pub mod cgroup;
pub mod emulation;
pub mod fd;
pub mod flock;
pub mod ifaddrs;
pub mod inotify;
pub mod listen_fd;
pub mod loop_dev;
pub mod peercred;
pub mod poll;
pub mod process;
pub mod sparse;
pub mod tty;
pub mod user;

/// A libc return type whose `-1` says that the call failed and left the
/// reason in `errno`: `int`, `long` (`syscall(2)`) and `ssize_t`.
pub trait MinusOne: Copy + PartialEq {
    const MINUS_ONE: Self;
}

impl MinusOne for i32 {
    const MINUS_ONE: Self = -1;
}

impl MinusOne for i64 {
    const MINUS_ONE: Self = -1;
}

impl MinusOne for isize {
    const MINUS_ONE: Self = -1;
}

/// Turns the -1 with which a libc call fails into the thread's `errno`;
/// any other value is the call's result.
pub fn cvt<T: MinusOne>(ret: T) -> io::Result<T> {
    if ret == T::MINUS_ONE {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minus_one_is_errno_and_anything_else_the_result() {
        assert_eq!(cvt(0i32).unwrap(), 0);
        assert_eq!(cvt(7isize).unwrap(), 7);
        assert_eq!(cvt(-2i64).unwrap(), -2);
        // SAFETY: close(2) of a descriptor that is never open: it only sets
        // errno to EBADF.
        let ret = unsafe { libc::close(-5) };
        assert_eq!(cvt(ret).unwrap_err().raw_os_error(), Some(libc::EBADF));
    }
}
