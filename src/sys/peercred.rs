//! Who is at the other end of a unix socket.
//!
//! The control socket is mode 0600, and the agent also checks the uid of
//! every client with `SO_PEERCRED`, so that a socket whose mode was changed
//! by mistake does not open the agent to every local user. The kernel
//! records the credentials when the client connects, so a client cannot
//! lie about them.
//!
//! Each libc call is wrapped in one small function that holds the only
//! `unsafe` block for it.

use std::io;
use std::mem::{self, MaybeUninit};
use std::os::fd::RawFd;

use super::cvt;

/// The effective uid the peer of the connected unix socket `fd` had when
/// it connected (or when the pair was created), from `SO_PEERCRED`.
pub fn peer_uid(fd: RawFd) -> io::Result<u32> {
    Ok(peer_cred(fd)?.uid)
}

/// The process that connected to the unix socket `fd` (or created the
/// pair), from `SO_PEERCRED`: `None` when the kernel cannot name it in
/// the agent's PID namespace (it reports 0 for a process outside it).
pub fn peer_pid(fd: RawFd) -> io::Result<Option<u32>> {
    let pid = peer_cred(fd)?.pid;
    Ok((pid > 0).then_some(pid as u32))
}

/// The real uid of the agent, to compare with [`peer_uid`].
pub fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Calls getsockopt(2) for `SO_PEERCRED`.
fn peer_cred(fd: RawFd) -> io::Result<libc::ucred> {
    let mut cred = MaybeUninit::<libc::ucred>::uninit();
    let mut len = mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is valid for writing `len` bytes and `len` for reading
    // and writing one `socklen_t`, both for the whole call; a bad `fd` is an
    // error, not undefined behaviour.
    let ret = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            cred.as_mut_ptr().cast(),
            &mut len,
        )
    };
    cvt(ret)?;
    if len as usize != mem::size_of::<libc::ucred>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "SO_PEERCRED returned a short ucred",
        ));
    }
    // SAFETY: getsockopt succeeded and wrote a whole `ucred`.
    Ok(unsafe { cred.assume_init() })
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
    use std::thread;

    use super::*;

    /// The uid of the user `nobody`.
    const NOBODY: u32 = 65534;

    /// Calls geteuid(2).
    fn euid() -> u32 {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() }
    }

    /// Sets the effective uid of the calling thread alone with the raw
    /// setresuid(2) system call, which, unlike the libc function, does not
    /// change the other threads of the process.
    fn set_thread_euid(uid: u32) -> io::Result<()> {
        let keep = -1 as libc::c_long;
        // SAFETY: setresuid takes no pointers; it changes the credentials of
        // this thread only, which the test spawned for this purpose.
        let ret =
            unsafe { libc::syscall(libc::SYS_setresuid, keep, libc::c_long::from(uid), keep) };
        cvt(ret)?;
        Ok(())
    }

    /// Tells whether a test that needs root can run. In CI, which runs as
    /// root, a missing root is a failure rather than a silent skip.
    fn require_root() -> bool {
        if euid() == 0 {
            return true;
        }
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("this test needs root; CI runs as root");
        }
        eprintln!("skipping a test that needs root");
        false
    }

    #[test]
    fn the_peer_of_a_socket_pair_is_the_current_user() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(ours.as_raw_fd()).unwrap(), current_uid());
        assert_eq!(peer_uid(theirs.as_raw_fd()).unwrap(), current_uid());
    }

    #[test]
    fn the_peer_of_a_connection_is_the_process_that_connected() {
        let name = format!("csi-agent-peerpid-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        let _client = UnixStream::connect_addr(&addr).unwrap();
        let (server_end, _) = listener.accept().unwrap();
        assert_eq!(
            peer_pid(server_end.as_raw_fd()).unwrap(),
            Some(std::process::id())
        );
    }

    #[test]
    fn a_client_connecting_as_another_user_is_seen_as_that_user() {
        if !require_root() {
            return;
        }
        // An abstract address, so that no file permission stands between
        // the unprivileged client and the listener.
        let name = format!("csi-agent-peercred-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        let client = thread::spawn(move || {
            set_thread_euid(NOBODY).unwrap();
            let stream = UnixStream::connect_addr(&addr);
            set_thread_euid(0).unwrap();
            stream.unwrap()
        });
        let (server_end, _) = listener.accept().unwrap();
        let _client_end = client.join().unwrap();
        assert_eq!(peer_uid(server_end.as_raw_fd()).unwrap(), NOBODY);
        assert_eq!(euid(), 0, "the test thread kept its own uid");
    }

    #[test]
    fn a_descriptor_that_is_not_a_socket_is_an_error() {
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let err = peer_uid(file.as_raw_fd()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTSOCK));
    }
}
