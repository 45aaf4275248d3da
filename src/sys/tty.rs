//! Terminals and namespaces for `alloc exec`: a pseudo-terminal pair
//! (openpty(3)), its window size, a controlling terminal, raw mode for the
//! CLI's own terminal, and the calls that move a process into a running
//! task (setns(2), chroot(2)).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::cvt;

/// A pseudo-terminal pair: `master` stays in the agent, `slave` becomes
/// the command's stdin, stdout and stderr.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal pair of size `rows` x `cols`; both ends are
/// close-on-exec (the slave is dup'ed onto the command's stdio).
pub fn openpty(rows: u16, cols: u16) -> io::Result<Pty> {
    let mut master = -1;
    let mut slave = -1;
    let size = winsize(rows, cols);
    // SAFETY: the two out pointers are live c_ints, the name is not asked
    // for (null), termios is left to the default (null) and `size` is a
    // live winsize the call only reads.
    cvt(unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    })?;
    // SAFETY: openpty succeeded: both are open descriptors now ours alone.
    let pty = unsafe {
        Pty {
            master: OwnedFd::from_raw_fd(master),
            slave: OwnedFd::from_raw_fd(slave),
        }
    };
    set_cloexec(pty.master.as_fd())?;
    set_cloexec(pty.slave.as_fd())?;
    Ok(pty)
}

/// Opens a pseudo-terminal pair from the `ptmx` at `ptmx` (another devpts
/// instance's, such as a task's `/proc/<pid>/root/dev/pts/ptmx`), so that
/// the slave is a `/dev/pts/N` of that instance; the slave comes from the
/// master itself (TIOCGPTPEER), with no path looked up. Anything at
/// `ptmx` but a pty multiplexer (character device 5:2) is refused.
pub fn openpty_at(ptmx: &std::path::Path, rows: u16, cols: u16) -> io::Result<Pty> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let master = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(ptmx)?;
    let meta = master.metadata()?;
    if !meta.file_type().is_char_device() || meta.rdev() != libc::makedev(5, 2) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a pty multiplexer", ptmx.display()),
        ));
    }
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one live c_int.
    cvt(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) })?;
    // SAFETY: TIOCGPTPEER takes open flags and returns a new descriptor.
    let slave = cvt(unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: the ioctl succeeded: `slave` is an open descriptor now ours.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    let pty = Pty {
        master: OwnedFd::from(master),
        slave,
    };
    set_window_size(pty.master.as_fd(), rows, cols)?;
    Ok(pty)
}

fn winsize(rows: u16, cols: u16) -> libc::winsize {
    libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

fn set_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl(2) F_SETFD with an integer flag on a borrowed, open fd.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) }).map(drop)
}

/// Makes reads and writes of `fd` return `WouldBlock` rather than wait.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl(2) F_GETFL on a borrowed, open fd.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: fcntl(2) F_SETFL with an integer flag word.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

/// Sets the window size of the terminal `fd` (TIOCSWINSZ): its foreground
/// process group gets SIGWINCH.
pub fn set_window_size(fd: BorrowedFd<'_>, rows: u16, cols: u16) -> io::Result<()> {
    let size = winsize(rows, cols);
    // SAFETY: TIOCSWINSZ reads one live winsize.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &size) }).map(drop)
}

/// The window size of the terminal `fd` (TIOCGWINSZ): rows and columns;
/// `None` when it is not a terminal.
pub fn window_size(fd: BorrowedFd<'_>) -> Option<(u16, u16)> {
    let mut size = winsize(0, 0);
    // SAFETY: TIOCGWINSZ writes one winsize into the live `size`.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut size) }).ok()?;
    Some((size.ws_row, size.ws_col))
}

/// Whether `fd` is a terminal.
pub fn is_terminal(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: isatty(3) only asks about a borrowed fd.
    unsafe { libc::isatty(fd.as_raw_fd()) == 1 }
}

/// Makes the terminal on stdin the caller's controlling terminal
/// (TIOCSCTTY); the caller leads a session of its own. Async-signal-safe:
/// fit for a child between fork and exec.
pub fn take_controlling_terminal() -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer (0: do not steal it).
    cvt(unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) }).map(drop)
}

/// The terminal `fd` in raw mode until the guard drops, when its earlier
/// mode comes back: keys go to the remote command as typed, and the
/// remote terminal does the echoing and line editing.
pub struct RawMode {
    fd: libc::c_int,
    saved: libc::termios,
}

impl RawMode {
    pub fn enter(fd: BorrowedFd<'_>) -> io::Result<RawMode> {
        // SAFETY: termios is plain data; all zeroes is a valid value that
        // tcgetattr overwrites.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr(3) writes into the live `saved`.
        cvt(unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut saved) })?;
        let mut raw = saved;
        // SAFETY: cfmakeraw(3) edits the live `raw` in place.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: tcsetattr(3) reads the live `raw`.
        cvt(unsafe { libc::tcsetattr(fd.as_raw_fd(), libc::TCSANOW, &raw) })?;
        Ok(RawMode {
            fd: fd.as_raw_fd(),
            saved,
        })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: tcsetattr(3) reads the live `saved`; the fd is the
        // process's stdin or stdout, open for its whole life.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}

/// Joins the namespace `fd` refers to (a `/proc/<pid>/ns/*` file). A PID
/// namespace holds the caller's children from then on, not the caller.
pub fn setns(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: plain integers (no type check: 0); a bad descriptor is an
    // error, not UB.
    cvt(unsafe { libc::setns(fd, 0) }).map(drop)
}

/// Changes the caller's root to `path` (chroot(2)).
pub fn chroot(path: &CStr) -> io::Result<()> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    cvt(unsafe { libc::chroot(path.as_ptr()) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_pty_carries_bytes_and_its_size() {
        let pty = openpty(33, 101).unwrap();
        assert!(is_terminal(pty.slave.as_fd()));
        assert_eq!(window_size(pty.slave.as_fd()), Some((33, 101)));
        set_window_size(pty.master.as_fd(), 10, 20).unwrap();
        assert_eq!(window_size(pty.slave.as_fd()), Some((10, 20)));
        let mut master = std::fs::File::from(pty.master.try_clone().unwrap());
        let mut slave = std::fs::File::from(pty.slave.try_clone().unwrap());
        slave.write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        master.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");
    }

    #[test]
    fn a_pty_opens_from_a_ptmx_and_nothing_else() {
        let pty = openpty_at(std::path::Path::new("/dev/ptmx"), 12, 34).unwrap();
        assert!(is_terminal(pty.slave.as_fd()));
        assert_eq!(window_size(pty.slave.as_fd()), Some((12, 34)));
        let err = openpty_at(std::path::Path::new("/dev/null"), 12, 34)
            .err()
            .unwrap();
        assert!(err.to_string().contains("not a pty multiplexer"), "{err}");
    }
}
