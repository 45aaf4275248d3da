//! How another thread interrupts the poll thread's wait: a connected pair
//! of unix sockets, the standard library's, whose reading end the poll
//! thread waits on with its connections. A wake writes one byte; the poll
//! thread drains them all before it looks at what it was woken for.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

/// A waker that is readable from a [`Waker::wake`] until the next
/// [`Waker::drain`]; both ends are non-blocking and close-on-exec.
pub(super) struct Waker {
    /// The end the poll thread waits on and drains.
    readable: UnixStream,
    /// The end a wake writes to.
    writable: UnixStream,
}

impl Waker {
    /// A waker that is not yet readable.
    pub(super) fn new() -> io::Result<Waker> {
        let (readable, writable) = UnixStream::pair()?;
        readable.set_nonblocking(true)?;
        writable.set_nonblocking(true)?;
        Ok(Waker { readable, writable })
    }

    /// Makes the waker readable until [`Waker::drain`]; waking it again
    /// before then changes nothing.
    pub(super) fn wake(&self) -> io::Result<()> {
        loop {
            match (&self.writable).write(&[1]) {
                Ok(_) => return Ok(()),
                // The socket's buffer is full of wakes: readable already.
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
    }

    /// Makes the waker not readable again, collapsing any number of wakes
    /// into the one the caller is handling.
    pub(super) fn drain(&self) -> io::Result<()> {
        let mut wakes = [0u8; 64];
        loop {
            match (&self.readable).read(&mut wakes) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.readable.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a read finds a wake waiting (and takes one byte of it).
    fn woken(waker: &Waker) -> bool {
        match (&waker.readable).read(&mut [0u8; 1]) {
            Ok(n) => n > 0,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => false,
            Err(err) => panic!("{err}"),
        }
    }

    #[test]
    fn wakes_past_a_full_buffer_collapse_into_one_drain() {
        let waker = Waker::new().unwrap();
        assert!(!woken(&waker));
        for _ in 0..10_000 {
            waker.wake().unwrap();
        }
        waker.drain().unwrap();
        assert!(!woken(&waker));
        waker.drain().unwrap();
        waker.wake().unwrap();
        assert!(woken(&waker));
    }
}
