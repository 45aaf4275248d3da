//! Safe wrappers over inotify(7) and eventfd(2), and a wait on a few
//! descriptors through [`super::poll`].
//!
//! The agent learns that a plugin's socket exists from the kernel rather
//! than by polling the file system: a plugin must be seen healthy within
//! 100 ms of creating its socket, and a sleep loop would be either slow or
//! busy. [`Inotify`] owns an inotify instance, [`Waker`] lets another thread
//! interrupt a wait, and [`poll_readable`] blocks until one of them has
//! something to read.
//!
//! Each libc call is wrapped in one small function that holds the only
//! `unsafe` block for it; `cvt` turns the -1 of a failed call into the
//! thread's `errno`. The variable-length event records are parsed from
//! plain bytes, without casting the buffer to `inotify_event`.

use std::ffi::{CString, OsString};
use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::time::Duration;

use libc::c_int;

use super::poll::{poll, timeout_ms};

/// The size of the fixed part of an event record, before its name.
const EVENT_HEADER_LEN: usize = mem::size_of::<libc::inotify_event>();

/// Enough for at least one event with the longest name (`NAME_MAX` plus its
/// NUL), and for many events with the short names the agent watches.
const READ_BUFFER_LEN: usize = 16 * 1024;

/// An inotify instance, non-blocking and close-on-exec; dropping it closes
/// its descriptor, which removes all its watches.
#[derive(Debug)]
pub struct Inotify {
    fd: OwnedFd,
}

/// One event read from an [`Inotify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The watch the event is for, or -1 for `IN_Q_OVERFLOW`.
    pub wd: i32,
    /// The `IN_*` bits that describe the event.
    pub mask: u32,
    /// Pairs the `IN_MOVED_FROM` and `IN_MOVED_TO` of one rename.
    pub cookie: u32,
    /// The name of the entry in the watched directory the event is about,
    /// or `None` when it is about the watched directory itself.
    pub name: Option<OsString>,
}

impl Inotify {
    /// Creates an inotify instance with `IN_NONBLOCK | IN_CLOEXEC`.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC)?,
        })
    }

    /// Watches `dir` for the events in `mask`, and returns the watch
    /// descriptor. Watching an inode that is already watched returns its
    /// existing descriptor and replaces its mask.
    pub fn add_watch(&self, dir: &Path, mask: u32) -> io::Result<i32> {
        let dir = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
        inotify_add_watch(self.fd.as_fd(), &dir, mask)
    }

    /// Removes the watch `wd`; the kernel then queues an `IN_IGNORED` for
    /// it.
    pub fn rm_watch(&self, wd: i32) -> io::Result<()> {
        inotify_rm_watch(self.fd.as_fd(), wd)
    }

    /// Reads the events queued now, as many as fit one buffer; an empty
    /// list means that none is queued. Poll again for more.
    pub fn read_events(&self) -> io::Result<Vec<Event>> {
        let mut buf = vec![0; READ_BUFFER_LEN];
        loop {
            match read(self.fd.as_fd(), &mut buf) {
                Ok(len) => return Ok(parse_events(&buf[..len])),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(Vec::new()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
        }
    }
}

impl AsFd for Inotify {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Inotify {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Parses the event records the kernel wrote into `buf`. Each record is
/// the fixed `inotify_event` header followed by `len` bytes of name, padded
/// with NULs; a truncated record, which the kernel never writes, ends the
/// list.
fn parse_events(buf: &[u8]) -> Vec<Event> {
    let field = |record: &[u8], offset: usize| -> [u8; 4] {
        record[offset..offset + 4]
            .try_into()
            .expect("a header field is four bytes")
    };
    let mut events = Vec::new();
    let mut rest = buf;
    while rest.len() >= EVENT_HEADER_LEN {
        let (header, tail) = rest.split_at(EVENT_HEADER_LEN);
        let name_len = u32::from_ne_bytes(field(header, 12)) as usize;
        if tail.len() < name_len {
            break;
        }
        let (name, tail) = tail.split_at(name_len);
        let name = name.split(|&byte| byte == 0).next().unwrap_or_default();
        events.push(Event {
            wd: i32::from_ne_bytes(field(header, 0)),
            mask: u32::from_ne_bytes(field(header, 4)),
            cookie: u32::from_ne_bytes(field(header, 8)),
            name: (!name.is_empty()).then(|| OsString::from_vec(name.to_vec())),
        });
        rest = tail;
    }
    events
}

/// Wakes a thread blocked in [`poll_readable`] from another thread: an
/// eventfd, non-blocking and close-on-exec.
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// Creates a waker that is not yet readable.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: eventfd(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?,
        })
    }

    /// Makes the waker readable until [`Waker::drain`]; waking it again
    /// before then changes nothing.
    pub fn wake(&self) -> io::Result<()> {
        match write(self.fd.as_fd(), &1u64.to_ne_bytes()) {
            // The counter is full, so the waker is readable already.
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(err) => Err(err),
            Ok(_) => Ok(()),
        }
    }

    /// Makes the waker not readable again, collapsing any number of wakes
    /// into the one the caller is handling.
    pub fn drain(&self) -> io::Result<()> {
        let mut counter = [0; 8];
        match read(self.fd.as_fd(), &mut counter) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(err) => Err(err),
            Ok(_) => Ok(()),
        }
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Waker {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Blocks until at least one of `fds` is readable, or `timeout` passes, and
/// tells which are. A descriptor with an error or a hang-up counts as
/// readable, so that reading it reports the problem. A signal interrupting
/// the wait returns early with none readable, as a timeout does; `None`
/// waits without a time limit.
pub fn poll_readable<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    timeout: Option<Duration>,
) -> io::Result<[bool; N]> {
    let mut poll_fds = fds.map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    match poll(&mut poll_fds, timeout_ms(timeout)) {
        Err(err) if err.kind() == io::ErrorKind::Interrupted => return Ok([false; N]),
        Err(err) => return Err(err),
        Ok(_) => {}
    }
    let readable = libc::POLLIN | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
    Ok(poll_fds.map(|poll_fd| poll_fd.revents & readable != 0))
}

/// Turns the -1 with which a libc call fails into the thread's `errno`.
pub(super) fn cvt(ret: c_int) -> io::Result<c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Calls inotify_init1(2).
fn inotify_init1(flags: c_int) -> io::Result<OwnedFd> {
    // SAFETY: inotify_init1 takes no pointers.
    let fd = cvt(unsafe { libc::inotify_init1(flags) })?;
    // SAFETY: `fd` is a descriptor the call just opened, owned by nothing
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Calls inotify_add_watch(2).
fn inotify_add_watch(fd: BorrowedFd<'_>, path: &CString, mask: u32) -> io::Result<c_int> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and
    // the kernel only reads from it.
    cvt(unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) })
}

/// Calls inotify_rm_watch(2).
fn inotify_rm_watch(fd: BorrowedFd<'_>, wd: c_int) -> io::Result<()> {
    // SAFETY: inotify_rm_watch takes no pointers.
    cvt(unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), wd) })?;
    Ok(())
}

/// Calls eventfd(2) with an initial count of zero.
fn eventfd(flags: c_int) -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers.
    let fd = cvt(unsafe { libc::eventfd(0, flags) })?;
    // SAFETY: `fd` is a descriptor the call just opened, owned by nothing
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Calls read(2) into `buf`.
fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writing `buf.len()` bytes for the whole
    // call.
    let len = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if len == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(len as usize)
}

/// Calls write(2) from `buf`.
fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reading `buf.len()` bytes for the whole
    // call.
    let len = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    if len == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(len as usize)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::thread;

    use super::*;

    /// A directory of one test's own, removed on drop.
    struct TestDir(PathBuf);

    impl TestDir {
        fn new() -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "csi-agent-inotify-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const LONG: Option<Duration> = Some(Duration::from_secs(5));
    const SHORT: Option<Duration> = Some(Duration::from_millis(50));

    /// Waits for events and reads them.
    fn next_events(inotify: &Inotify) -> Vec<Event> {
        let [readable] = poll_readable([inotify.as_fd()], LONG).unwrap();
        assert!(readable, "no event within 5 s");
        inotify.read_events().unwrap()
    }

    fn record(wd: i32, mask: u32, cookie: u32, name: &[u8], padded_len: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&wd.to_ne_bytes());
        bytes.extend_from_slice(&mask.to_ne_bytes());
        bytes.extend_from_slice(&cookie.to_ne_bytes());
        bytes.extend_from_slice(&(padded_len as u32).to_ne_bytes());
        bytes.extend_from_slice(name);
        bytes.resize(bytes.len() + padded_len - name.len(), 0);
        bytes
    }

    #[test]
    fn records_parse_with_their_padded_names() {
        let mut buf = record(1, libc::IN_CREATE, 0, b"csi.sock", 16);
        buf.extend(record(-1, libc::IN_Q_OVERFLOW, 0, b"", 0));
        buf.extend(record(2, libc::IN_MOVED_TO, 7, b"x", 16));
        assert_eq!(
            parse_events(&buf),
            [
                Event {
                    wd: 1,
                    mask: libc::IN_CREATE,
                    cookie: 0,
                    name: Some("csi.sock".into()),
                },
                Event {
                    wd: -1,
                    mask: libc::IN_Q_OVERFLOW,
                    cookie: 0,
                    name: None,
                },
                Event {
                    wd: 2,
                    mask: libc::IN_MOVED_TO,
                    cookie: 7,
                    name: Some("x".into()),
                },
            ]
        );
    }

    #[test]
    fn a_truncated_record_ends_the_list() {
        let mut buf = record(1, libc::IN_CREATE, 0, b"a", 16);
        buf.extend(&record(2, libc::IN_CREATE, 0, b"b", 16)[..20]);
        let events = parse_events(&buf);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].name, Some("a".into()));
    }

    #[test]
    fn creating_a_file_in_a_watched_directory_queues_its_name() {
        let dir = TestDir::new();
        let inotify = Inotify::new().unwrap();
        let wd = inotify.add_watch(&dir.0, libc::IN_CREATE).unwrap();
        fs::write(dir.0.join("csi.sock"), b"").unwrap();
        let events = next_events(&inotify);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].wd, wd);
        assert_ne!(events[0].mask & libc::IN_CREATE, 0);
        assert_eq!(events[0].name, Some("csi.sock".into()));
    }

    #[test]
    fn a_rename_queues_moved_from_and_moved_to_with_one_cookie() {
        let dir = TestDir::new();
        fs::write(dir.0.join("tmp"), b"").unwrap();
        let inotify = Inotify::new().unwrap();
        inotify
            .add_watch(&dir.0, libc::IN_MOVED_FROM | libc::IN_MOVED_TO)
            .unwrap();
        fs::rename(dir.0.join("tmp"), dir.0.join("csi.sock")).unwrap();
        let events = next_events(&inotify);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].mask, libc::IN_MOVED_FROM);
        assert_eq!(events[0].name, Some("tmp".into()));
        assert_eq!(events[1].mask, libc::IN_MOVED_TO);
        assert_eq!(events[1].name, Some("csi.sock".into()));
        assert_eq!(events[0].cookie, events[1].cookie);
    }

    #[test]
    fn reading_with_nothing_queued_returns_no_events() {
        let dir = TestDir::new();
        let inotify = Inotify::new().unwrap();
        inotify.add_watch(&dir.0, libc::IN_CREATE).unwrap();
        assert_eq!(inotify.read_events().unwrap(), []);
    }

    #[test]
    fn removing_a_watch_queues_in_ignored() {
        let dir = TestDir::new();
        let inotify = Inotify::new().unwrap();
        let wd = inotify.add_watch(&dir.0, libc::IN_CREATE).unwrap();
        inotify.rm_watch(wd).unwrap();
        let events = next_events(&inotify);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].wd, wd);
        assert_ne!(events[0].mask & libc::IN_IGNORED, 0);
        assert_eq!(
            inotify.rm_watch(wd).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn watching_a_directory_twice_returns_the_same_descriptor() {
        let dir = TestDir::new();
        let inotify = Inotify::new().unwrap();
        let first = inotify.add_watch(&dir.0, libc::IN_CREATE).unwrap();
        let second = inotify.add_watch(&dir.0, libc::IN_CREATE).unwrap();
        assert_eq!(first, second);
    }

    #[test]
    fn watching_a_missing_directory_fails_with_not_found() {
        let dir = TestDir::new();
        let inotify = Inotify::new().unwrap();
        let err = inotify
            .add_watch(&dir.0.join("missing"), libc::IN_CREATE)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_path_with_a_nul_byte_is_an_error_not_a_panic() {
        let inotify = Inotify::new().unwrap();
        let path = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/a\0b"));
        let err = inotify.add_watch(path, libc::IN_CREATE).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn poll_times_out_when_nothing_is_readable() {
        let inotify = Inotify::new().unwrap();
        let waker = Waker::new().unwrap();
        let ready = poll_readable([inotify.as_fd(), waker.as_fd()], SHORT).unwrap();
        assert_eq!(ready, [false, false]);
    }

    #[test]
    fn waking_from_another_thread_ends_the_wait() {
        let inotify = Inotify::new().unwrap();
        let waker = Arc::new(Waker::new().unwrap());
        let remote = Arc::clone(&waker);
        let wake = thread::spawn(move || remote.wake().unwrap());
        let ready = poll_readable([inotify.as_fd(), waker.as_fd()], None).unwrap();
        wake.join().unwrap();
        assert_eq!(ready, [false, true]);
    }

    #[test]
    fn draining_collapses_every_wake_into_one() {
        let waker = Waker::new().unwrap();
        waker.wake().unwrap();
        waker.wake().unwrap();
        waker.drain().unwrap();
        assert_eq!(poll_readable([waker.as_fd()], SHORT).unwrap(), [false]);
        waker.drain().unwrap();
    }

    #[test]
    fn a_queued_event_makes_the_inotify_descriptor_readable() {
        let dir = TestDir::new();
        let inotify = Inotify::new().unwrap();
        let waker = Waker::new().unwrap();
        inotify.add_watch(&dir.0, libc::IN_CREATE).unwrap();
        fs::create_dir(dir.0.join("sub")).unwrap();
        let ready = poll_readable([inotify.as_fd(), waker.as_fd()], LONG).unwrap();
        assert_eq!(ready, [true, false]);
    }
}
