//! Descriptors a service manager hands the process at exec (socket
//! activation): whether one is open, what kind of socket it is, and
//! taking it as an owned, close-on-exec descriptor. What the descriptors
//! are for is the agent's to decide; this module only asks the kernel.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use libc::{c_int, socklen_t};

use super::cvt;

/// What a socket descriptor is, as getsockopt(2) tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketKind {
    /// `AF_UNIX`, `AF_INET`, ...
    pub domain: c_int,
    /// `SOCK_STREAM`, `SOCK_DGRAM`, ...
    pub sock_type: c_int,
    /// Whether listen(2) was called on it.
    pub listening: bool,
}

impl SocketKind {
    /// A listening unix stream socket.
    pub fn is_unix_listener(&self) -> bool {
        self.domain == libc::AF_UNIX && self.sock_type == libc::SOCK_STREAM && self.listening
    }
}

/// Takes `fd`, which the process inherited at exec and nothing in it owns
/// yet, as an owned descriptor, and marks it close-on-exec (a service
/// manager hands them without): so no child the agent starts inherits it.
/// An `fd` that is not open is an error (`EBADF`).
///
/// The caller takes each inherited descriptor once.
pub fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD reads the descriptor's flags; a closed descriptor is
    // EBADF, not undefined behaviour.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: F_SETFD with an integer argument changes only the flags.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    // SAFETY: the descriptor is open (F_GETFD succeeded), and the caller
    // takes each inherited descriptor once: nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The kind of socket `fd` is; `ENOTSOCK` when it is no socket.
pub fn socket_kind(fd: BorrowedFd<'_>) -> io::Result<SocketKind> {
    let domain = int_option(fd, libc::SO_DOMAIN)?;
    let sock_type = int_option(fd, libc::SO_TYPE)?;
    let listening = int_option(fd, libc::SO_ACCEPTCONN)? != 0;
    Ok(SocketKind {
        domain,
        sock_type,
        listening,
    })
}

/// getsockopt(2) of an integer option at `SOL_SOCKET`.
fn int_option(fd: BorrowedFd<'_>, option: c_int) -> io::Result<c_int> {
    let mut value: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: `value` and `len` are live locals of the sizes given; the
    // kernel writes at most `len` bytes into `value`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&mut value as *mut c_int).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, IntoRawFd};
    use std::os::unix::net::{UnixDatagram, UnixListener};

    #[test]
    fn a_listening_unix_stream_socket_is_told_from_others() {
        let dir = std::env::temp_dir().join(format!("csi-agent-listen-fd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let listener = UnixListener::bind(dir.join("s.sock")).unwrap();
        assert!(socket_kind(listener.as_fd()).unwrap().is_unix_listener());
        let datagram = UnixDatagram::unbound().unwrap();
        let kind = socket_kind(datagram.as_fd()).unwrap();
        assert_eq!(kind.sock_type, libc::SOCK_DGRAM);
        assert!(!kind.is_unix_listener());
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let err = socket_kind(file.as_fd()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTSOCK));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_inherited_descriptor_is_taken_close_on_exec_and_a_closed_one_refused() {
        let datagram = UnixDatagram::unbound().unwrap();
        let raw = datagram.into_raw_fd();
        let owned = take_inherited(raw).unwrap();
        // SAFETY: F_GETFD only reads the flags of a descriptor we own.
        let flags = unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        drop(owned);
        // Not `raw` again: another test's thread may have opened it since.
        // A number above any descriptor limit is never open.
        let err = take_inherited(i32::MAX).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    }
}
