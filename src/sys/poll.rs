//! poll(2): waiting until any of many descriptors can be read or written.
//!
//! [`poll_many`] serves a thread that watches a changing set of sockets
//! (the HTTP server's connections); `inotify`'s `poll_readable`, for a
//! fixed few descriptors, calls the same one wrapper of the system call.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use libc::c_int;

use super::inotify::cvt;

/// What a descriptor is watched for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Read,
    Write,
}

/// Blocks until at least one of `fds` is ready for what it is watched for,
/// or `timeout` passes (`None`: no limit), and tells which are. An error or
/// a hang-up counts as ready for either, so that the read or write reports
/// it. A signal interrupting the wait returns early with none ready, as a
/// timeout does.
pub fn poll_many(
    fds: &[(BorrowedFd<'_>, Want)],
    timeout: Option<Duration>,
) -> io::Result<Vec<bool>> {
    let mut poll_fds: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, want)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: match want {
                Want::Read => libc::POLLIN,
                Want::Write => libc::POLLOUT,
            },
            revents: 0,
        })
        .collect();
    match poll(&mut poll_fds, timeout_ms(timeout)) {
        Err(err) if err.kind() == io::ErrorKind::Interrupted => return Ok(vec![false; fds.len()]),
        Err(err) => return Err(err),
        Ok(_) => {}
    }
    let trouble = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
    Ok(poll_fds
        .iter()
        .map(|poll_fd| poll_fd.revents & (poll_fd.events | trouble) != 0)
        .collect())
}

/// The timeout argument of poll(2): milliseconds rounded up, so that a
/// short timeout does not become a busy loop, and -1 for none.
pub(super) fn timeout_ms(timeout: Option<Duration>) -> c_int {
    match timeout {
        None => -1,
        Some(timeout) => {
            let ms = timeout.as_nanos().div_ceil(1_000_000);
            c_int::try_from(ms).unwrap_or(c_int::MAX)
        }
    }
}

/// Calls poll(2) on `fds`.
pub(super) fn poll(fds: &mut [libc::pollfd], timeout_ms: c_int) -> io::Result<c_int> {
    // SAFETY: `fds` is valid for reading and writing `fds.len()` pollfd
    // structures for the whole call.
    cvt(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    const SHORT: Option<Duration> = Some(Duration::from_millis(20));

    #[test]
    fn each_descriptor_is_ready_for_what_it_is_watched_for() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let ready = poll_many(&[(a.as_fd(), Want::Write), (b.as_fd(), Want::Read)], SHORT).unwrap();
        assert_eq!(ready, [true, false]);
        a.write_all(b"x").unwrap();
        let ready = poll_many(&[(b.as_fd(), Want::Read)], SHORT).unwrap();
        assert_eq!(ready, [true]);
    }

    #[test]
    fn a_hang_up_counts_as_ready() {
        let (a, b) = UnixStream::pair().unwrap();
        assert_eq!(
            poll_many(&[(b.as_fd(), Want::Read)], SHORT).unwrap(),
            [false]
        );
        drop(a);
        assert_eq!(
            poll_many(&[(b.as_fd(), Want::Read)], SHORT).unwrap(),
            [true]
        );
    }

    #[test]
    fn timeouts_round_up_to_whole_milliseconds() {
        assert_eq!(timeout_ms(None), -1);
        assert_eq!(timeout_ms(Some(Duration::ZERO)), 0);
        assert_eq!(timeout_ms(Some(Duration::from_micros(1))), 1);
        assert_eq!(timeout_ms(Some(Duration::from_millis(250))), 250);
        assert_eq!(timeout_ms(Some(Duration::MAX)), c_int::MAX);
    }
}
