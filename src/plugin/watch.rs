//! The socket watcher: one thread that tells plugin supervisors when a
//! plugin's unix socket appears at its path or disappears from it.
//!
//! A plugin must be seen healthy within 100 ms of creating its socket, so
//! the agent learns of the socket from inotify rather than from a sleep
//! loop. One thread, named `socket-watch`, blocks in poll(2) on a single
//! inotify descriptor, which serves every watched path, and on a waker that
//! other threads use to hand it commands.
//!
//! A socket counts as appeared when its name is created in its directory or
//! renamed into it, because plugins (the built-in hostpath plugin among
//! them) bind a temporary name and rename it into place once they serve;
//! it counts as gone when its name is deleted or renamed away. Other names
//! in the directory are ignored. The socket's directory need not exist:
//! the watcher then watches the deepest directory that does exist on the
//! way to it, and moves the watch down as the missing components are
//! created, or back up when a watched directory is deleted or renamed away.
//! When the kernel's event queue overflows, every watched path is looked at
//! again.
//!
//! Limitations: renaming a directory above the watched one (say the data
//! directory, while its plugin directories exist) goes unnoticed, as
//! inotify does not report it to watches below; and `Appeared` may come
//! twice for one socket when it is created as watching begins.

use std::collections::hash_map::{Entry, HashMap};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::sys::inotify::{self, Event, Inotify, Waker};

/// The events of a watched directory that can change whether a watched
/// socket, or a directory on the way to it, exists.
const DIR_EVENTS: u32 = libc::IN_CREATE
    | libc::IN_MOVED_TO
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

/// How often placing a socket's watch is tried while the directories on
/// the way to it keep changing under it. Each try normally either watches
/// a deeper directory or finishes, so only a path being created and
/// deleted over and over again reaches the limit.
const MAX_ANCHOR_ATTEMPTS: usize = 64;

/// What happened at a watched socket path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketEvent {
    /// A socket now exists at the path: it was created there, renamed into
    /// place, or already there when watching began or when the kernel's
    /// queue overflowed. It may be a new socket replacing an old one.
    Appeared,
    /// The socket that had appeared is gone: deleted, renamed away, or its
    /// directory was.
    Disappeared,
}

/// A handle on the socket watcher thread; clones share the thread.
///
/// The thread runs until [`SocketWatcher::shutdown`] or until the last
/// clone is dropped. When it stops, it drops every event sender it holds.
#[derive(Debug, Clone)]
pub struct SocketWatcher {
    shared: Arc<Shared>,
}

/// What the clones of a [`SocketWatcher`] share.
#[derive(Debug)]
struct Shared {
    commands: Sender<Command>,
    waker: Arc<Waker>,
    next_id: AtomicU64,
    /// Taken by whichever joins the thread: `shutdown`, or the drop of the
    /// last clone.
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Keeps the events for one socket path coming; dropping it stops them
/// and drops their sender before the drop returns.
#[derive(Debug)]
pub struct Watch {
    id: WatchId,
    path: PathBuf,
    commands: Sender<Command>,
    waker: Arc<Waker>,
}

/// Tells the watches of the watcher thread apart.
type WatchId = u64;

/// What other threads ask of the watcher thread.
enum Command {
    /// Starts watching `path` for `events`; `done` gets the outcome.
    Add {
        id: WatchId,
        path: PathBuf,
        events: Sender<SocketEvent>,
        done: Sender<io::Result<()>>,
    },
    /// Stops watch `id`; `done` tells that no event will follow.
    Remove { id: WatchId, done: Sender<()> },
    /// Stops the thread.
    Shutdown,
}

impl SocketWatcher {
    /// Starts the watcher thread.
    pub fn start() -> io::Result<Self> {
        let inotify = Inotify::new()?;
        let waker = Arc::new(Waker::new()?);
        let (commands, command_rx) = crossbeam_channel::unbounded();
        let mut watch_loop = WatchLoop::new(inotify, Arc::clone(&waker), command_rx);
        let thread = thread::Builder::new()
            .name("socket-watch".into())
            .spawn(move || watch_loop.run())?;
        Ok(Self {
            shared: Arc::new(Shared {
                commands,
                waker,
                next_id: AtomicU64::new(0),
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// Sends `events` an [`SocketEvent::Appeared`] whenever a socket
    /// appears at `path` (created or renamed into place, or there already
    /// when this returns) and a [`SocketEvent::Disappeared`] when it
    /// disappears (deleted or renamed away), until the returned [`Watch`]
    /// is dropped. Missing directories on the way to `path` may be created
    /// later.
    ///
    /// `events` should be unbounded: the thread serves every plugin and
    /// never blocks on one receiver, so a full channel loses the event (with
    /// a warning). A disconnected one loses it silently.
    ///
    /// A relative `path` is taken relative to the current directory; one
    /// with a `..` component, or without a file name, is an error, as is a
    /// stopped watcher thread or a directory that cannot be watched.
    pub fn watch(&self, path: &Path, events: Sender<SocketEvent>) -> io::Result<Watch> {
        let path = socket_path(path)?;
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (done, added) = crossbeam_channel::bounded(1);
        self.shared.send(Command::Add {
            id,
            path: path.clone(),
            events,
            done,
        })?;
        added.recv().map_err(|_| stopped())??;
        Ok(Watch {
            id,
            path,
            commands: self.shared.commands.clone(),
            waker: Arc::clone(&self.shared.waker),
        })
    }

    /// Stops the watcher thread and joins it, re-raising its panic if it
    /// had one. Other clones then fail to add watches.
    pub fn shutdown(self) {
        let thread = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.shared.stop();
        if let Some(thread) = thread {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl Shared {
    /// Hands `command` to the watcher thread.
    fn send(&self, command: Command) -> io::Result<()> {
        self.commands.send(command).map_err(|_| stopped())?;
        self.waker.wake()
    }

    /// Asks the watcher thread to stop; it may have stopped already.
    fn stop(&self) {
        if let Err(err) = self.send(Command::Shutdown) {
            log::debug!("The socket watcher thread is not running: {err}");
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop();
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            // A panic of the thread was printed when it happened; raising
            // it again in a drop could abort.
            let _ = thread.join();
        }
    }
}

impl Watch {
    /// The socket path this watch is for, made absolute.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let (done, removed) = crossbeam_channel::bounded(1);
        let remove = Command::Remove { id: self.id, done };
        if self.commands.send(remove).is_ok() && self.waker.wake().is_ok() {
            // The thread never blocks but in poll(2), so this wait is short;
            // it ends at once if the thread has stopped.
            let _ = removed.recv();
        }
    }
}

/// The error of a watch asked of a watcher thread that has stopped.
fn stopped() -> io::Error {
    io::Error::other("the socket watcher thread has stopped")
}

/// Makes `path` absolute and checks that it names a file in a directory.
fn socket_path(path: &Path) -> io::Result<PathBuf> {
    let invalid = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot watch {}: {why}", path.display()),
        )
    };
    let absolute = std::path::absolute(path)?;
    if absolute.components().any(|c| c == Component::ParentDir) {
        return Err(invalid("the path has a `..` component"));
    }
    let normal: PathBuf = absolute.components().collect();
    if normal.file_name().is_none() || normal.parent().is_none() {
        return Err(invalid("the path has no file name"));
    }
    Ok(normal)
}

/// The state of the watcher thread, which only it changes.
struct WatchLoop {
    inotify: Inotify,
    waker: Arc<Waker>,
    commands: Receiver<Command>,
    sockets: BTreeMap<WatchId, WatchedSocket>,
    /// The kernel watches, by watch descriptor.
    dirs: HashMap<i32, DirWatch>,
}

/// One watch of a socket path.
struct WatchedSocket {
    path: PathBuf,
    events: Sender<SocketEvent>,
    /// Where the kernel watch for the socket is; `None` only when placing
    /// it failed.
    anchor: Option<Anchor>,
    /// Whether the last event sent was `Appeared`.
    present: bool,
}

/// The directory watched for a socket: its parent, or the deepest existing
/// directory on the way to it.
struct Anchor {
    wd: i32,
    dir: PathBuf,
    /// The component of the socket path that comes right after `dir`: the
    /// socket's file name when `dir` is its parent, else the next missing
    /// directory.
    next: OsString,
}

/// A kernel watch and how many sockets use it.
struct DirWatch {
    dir: PathBuf,
    users: usize,
}

impl WatchedSocket {
    /// Whether the socket's own directory is the watched one.
    fn watches_its_directory(&self) -> bool {
        self.anchor
            .as_ref()
            .is_some_and(|anchor| Some(anchor.dir.as_path()) == self.path.parent())
    }
}

impl WatchLoop {
    fn new(inotify: Inotify, waker: Arc<Waker>, commands: Receiver<Command>) -> Self {
        Self {
            inotify,
            waker,
            commands,
            sockets: BTreeMap::new(),
            dirs: HashMap::new(),
        }
    }

    /// The body of the watcher thread.
    fn run(&mut self) {
        if let Err(err) = self.serve() {
            log::error!("The socket watcher stopped: {err}");
        }
    }

    /// Serves commands and inotify events until told to stop.
    fn serve(&mut self) -> io::Result<()> {
        loop {
            let [changed, woken] =
                inotify::poll_readable([self.inotify.as_fd(), self.waker.as_fd()], None)?;
            if woken {
                self.waker.drain()?;
                // Every command is sent before its wake, so the drain above
                // cannot hide one that is not in the channel yet.
                while let Ok(command) = self.commands.try_recv() {
                    match command {
                        Command::Add {
                            id,
                            path,
                            events,
                            done,
                        } => {
                            let _ = done.send(self.add(id, path, events));
                        }
                        Command::Remove { id, done } => {
                            self.remove(id);
                            let _ = done.send(());
                        }
                        Command::Shutdown => return Ok(()),
                    }
                }
            }
            if changed {
                for event in self.inotify.read_events()? {
                    self.handle(event);
                }
            }
        }
    }

    /// Starts watching `path`, and reports the socket if it is there.
    fn add(&mut self, id: WatchId, path: PathBuf, events: Sender<SocketEvent>) -> io::Result<()> {
        let socket = WatchedSocket {
            path,
            events,
            anchor: None,
            present: false,
        };
        self.sockets.insert(id, socket);
        if let Err(err) = self.anchor(id) {
            self.remove(id);
            return Err(err);
        }
        self.sync(id, false);
        Ok(())
    }

    /// Stops watching for watch `id`.
    fn remove(&mut self, id: WatchId) {
        if let Some(anchor) = self.sockets.remove(&id).and_then(|socket| socket.anchor) {
            self.release(anchor.wd);
        }
    }

    fn handle(&mut self, event: Event) {
        if event.mask & libc::IN_Q_OVERFLOW != 0 {
            log::warn!("The inotify queue overflowed; looking at every watched socket again");
            let ids: Vec<WatchId> = self.sockets.keys().copied().collect();
            for id in ids {
                self.reanchor(id, true);
            }
            return;
        }
        if event.mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0 {
            self.dir_lost(event.wd, event.mask & libc::IN_IGNORED == 0);
            return;
        }
        let Some(name) = event.name else {
            return;
        };
        let ids: Vec<WatchId> = self
            .sockets
            .iter()
            .filter(|(_, socket)| {
                socket
                    .anchor
                    .as_ref()
                    .is_some_and(|anchor| anchor.wd == event.wd && anchor.next == name)
            })
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if !self.sockets[&id].watches_its_directory() {
                // A directory on the way to the socket came or went.
                self.reanchor(id, false);
            } else if event.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                self.notify(id, SocketEvent::Appeared);
            } else if event.mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
                self.notify(id, SocketEvent::Disappeared);
            }
        }
    }

    /// Handles the watched directory of `wd` having been deleted, renamed
    /// or unmounted: the sockets watched there are watched again from the
    /// deepest directory that exists now. A watch that the kernel keeps
    /// (`still_watched`) is removed first, so that watching the same inode
    /// again yields a new descriptor.
    fn dir_lost(&mut self, wd: i32, still_watched: bool) {
        let Some(lost) = self.dirs.remove(&wd) else {
            // The IN_IGNORED of a watch removed already.
            return;
        };
        log::debug!("Lost the watch on {}", lost.dir.display());
        if still_watched {
            if let Err(err) = self.inotify.rm_watch(wd) {
                log::debug!("Removing the watch on {}: {err}", lost.dir.display());
            }
        }
        let ids: Vec<WatchId> = self
            .sockets
            .iter()
            .filter(|(_, socket)| socket.anchor.as_ref().is_some_and(|anchor| anchor.wd == wd))
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if let Some(socket) = self.sockets.get_mut(&id) {
                socket.anchor = None;
            }
            self.reanchor(id, false);
        }
    }

    /// Moves the watch for socket `id` to where it belongs now, and reports
    /// any change in the socket's presence.
    fn reanchor(&mut self, id: WatchId, overflowed: bool) {
        if let Err(err) = self.anchor(id) {
            log::warn!(
                "Cannot watch for the socket {}: {err}",
                self.sockets[&id].path.display()
            );
        }
        self.sync(id, overflowed);
    }

    /// Watches, for socket `id`, the deepest existing directory on the way
    /// to it, and stops watching the one it had before.
    fn anchor(&mut self, id: WatchId) -> io::Result<()> {
        let path = self.sockets[&id].path.clone();
        let parent = path.parent().expect("a socket path has a parent");
        let mut last_err = None;
        for _ in 0..MAX_ANCHOR_ATTEMPTS {
            let dir = deepest_existing_dir(parent);
            // Watch again even where the socket is watched already: after
            // an overflow, the directory there may be a new one.
            let wd = match self.acquire(dir) {
                Ok(wd) => wd,
                Err(err) if vanished(&err) => {
                    last_err = Some(err);
                    continue;
                }
                Err(err) => {
                    if let Some(old) = self.sockets.get_mut(&id).and_then(|s| s.anchor.take()) {
                        self.release(old.wd);
                    }
                    return Err(err);
                }
            };
            let next = next_component(&path, dir);
            let anchor = Anchor {
                wd,
                dir: dir.to_path_buf(),
                next: next.clone(),
            };
            let socket = self.sockets.get_mut(&id).expect("the socket is watched");
            if let Some(old) = socket.anchor.replace(anchor) {
                self.release(old.wd);
            }
            log::debug!("Waiting for {} in {}", path.display(), dir.display());
            // A directory created between looking for it and watching its
            // parent raised no event for the watch; look again.
            if dir == parent || !dir.join(&next).is_dir() {
                return Ok(());
            }
        }
        Err(last_err
            .unwrap_or_else(|| io::Error::other("the directories on the way to it kept changing")))
    }

    /// Watches `dir`, or counts one more user of its watch.
    fn acquire(&mut self, dir: &Path) -> io::Result<i32> {
        let wd = self.inotify.add_watch(dir, DIR_EVENTS)?;
        let watch = self.dirs.entry(wd).or_insert_with(|| {
            log::debug!("Watching {} for plugin sockets", dir.display());
            DirWatch {
                dir: dir.to_path_buf(),
                users: 0,
            }
        });
        watch.users += 1;
        Ok(wd)
    }

    /// Counts one user less of the watch `wd`, and removes it when it has
    /// none left.
    fn release(&mut self, wd: i32) {
        let Entry::Occupied(mut watch) = self.dirs.entry(wd) else {
            return;
        };
        watch.get_mut().users -= 1;
        if watch.get().users > 0 {
            return;
        }
        let DirWatch { dir, .. } = watch.remove();
        log::debug!("Stopped watching {}", dir.display());
        if let Err(err) = self.inotify.rm_watch(wd) {
            // EINVAL: the kernel dropped the watch already, say because the
            // directory was deleted; its IN_IGNORED is still queued.
            log::debug!("Removing the watch on {}: {err}", dir.display());
        }
    }

    /// Reports the socket's presence when it differs from what was last
    /// reported. After an overflow, a socket that is there is reported
    /// whatever was reported before, since it may be a new one.
    fn sync(&mut self, id: WatchId, overflowed: bool) {
        let socket = &self.sockets[&id];
        let exists = socket.path.symlink_metadata().is_ok();
        if exists && (overflowed || !socket.present) {
            self.notify(id, SocketEvent::Appeared);
        } else if !exists && socket.present {
            self.notify(id, SocketEvent::Disappeared);
        }
    }

    /// Sends `event` for socket `id`. A `Disappeared` with no `Appeared`
    /// before it is not sent.
    fn notify(&mut self, id: WatchId, event: SocketEvent) {
        let socket = self.sockets.get_mut(&id).expect("the socket is watched");
        let appeared = event == SocketEvent::Appeared;
        if !appeared && !socket.present {
            return;
        }
        socket.present = appeared;
        log::debug!("Socket {}: {event:?}", socket.path.display());
        match socket.events.try_send(event) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => log::warn!(
                "Lost the event {event:?} of the socket {}: its channel is full",
                socket.path.display()
            ),
        }
    }
}

/// The deepest directory among `dir` and its ancestors that exists.
fn deepest_existing_dir(dir: &Path) -> &Path {
    dir.ancestors()
        .find(|ancestor| ancestor.is_dir())
        .unwrap_or(Path::new("/"))
}

/// The component of `path` that comes right after its ancestor `dir`.
fn next_component(path: &Path, dir: &Path) -> OsString {
    path.strip_prefix(dir)
        .ok()
        .and_then(|rest| rest.components().next())
        .map(|component| component.as_os_str().to_os_string())
        .expect("the watched directory is an ancestor of the socket path")
}

/// Whether watching a directory failed because it was deleted, or replaced
/// by something else, after it was found.
fn vanished(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::NotFound || err.raw_os_error() == Some(libc::ENOTDIR)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use crossbeam_channel::{unbounded, RecvTimeoutError};

    use super::*;

    /// Long enough for any expected event, however loaded the machine.
    const EVENT: Duration = Duration::from_secs(5);
    /// How long no event counts as none.
    const SILENCE: Duration = Duration::from_millis(200);

    /// A directory of one test's own, removed on drop.
    struct TestDir(PathBuf);

    impl TestDir {
        fn new() -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "csi-agent-watch-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir(&dir).unwrap();
            Self(dir)
        }

        fn join(&self, path: &str) -> PathBuf {
            self.0.join(path)
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn expect_event(events: &Receiver<SocketEvent>, expected: SocketEvent) {
        assert_eq!(events.recv_timeout(EVENT), Ok(expected));
    }

    fn expect_silence(events: &Receiver<SocketEvent>) {
        assert_eq!(events.recv_timeout(SILENCE), Err(RecvTimeoutError::Timeout));
    }

    /// Checks that `events` got nothing and that its sender is gone.
    fn expect_closed(events: &Receiver<SocketEvent>) {
        assert_eq!(
            events.recv_timeout(SILENCE),
            Err(RecvTimeoutError::Disconnected)
        );
    }

    #[test]
    fn a_socket_bound_at_the_path_appears() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let _watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        expect_silence(&events);
        let _listener = UnixListener::bind(dir.join("csi.sock")).unwrap();
        expect_event(&events, SocketEvent::Appeared);
        watcher.shutdown();
    }

    #[test]
    fn a_socket_renamed_into_place_appears() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let _watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        let _listener = UnixListener::bind(dir.join(".csi.sock.tmp")).unwrap();
        expect_silence(&events);
        fs::rename(dir.join(".csi.sock.tmp"), dir.join("csi.sock")).unwrap();
        expect_event(&events, SocketEvent::Appeared);
    }

    #[test]
    fn an_unlinked_socket_disappears() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let _watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        let listener = UnixListener::bind(dir.join("csi.sock")).unwrap();
        expect_event(&events, SocketEvent::Appeared);
        fs::remove_file(dir.join("csi.sock")).unwrap();
        expect_event(&events, SocketEvent::Disappeared);
        drop(listener);
        expect_silence(&events);
    }

    #[test]
    fn a_socket_renamed_away_disappears() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let _watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        let _listener = UnixListener::bind(dir.join("csi.sock")).unwrap();
        expect_event(&events, SocketEvent::Appeared);
        fs::rename(dir.join("csi.sock"), dir.join("old.sock")).unwrap();
        expect_event(&events, SocketEvent::Disappeared);
    }

    #[test]
    fn a_socket_there_already_appears_at_once() {
        let dir = TestDir::new();
        let _listener = UnixListener::bind(dir.join("csi.sock")).unwrap();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let _watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        assert_eq!(events.try_recv(), Ok(SocketEvent::Appeared));
        expect_silence(&events);
    }

    #[test]
    fn other_names_in_the_directory_are_ignored() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let _watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        let _other = UnixListener::bind(dir.join("other.sock")).unwrap();
        fs::write(dir.join("csi.sock.log"), b"").unwrap();
        fs::create_dir(dir.join("csi")).unwrap();
        fs::rename(dir.join("csi.sock.log"), dir.join("csi.log")).unwrap();
        fs::remove_file(dir.join("other.sock")).unwrap();
        expect_silence(&events);
    }

    #[test]
    fn a_socket_appears_once_its_missing_directories_are_created() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let path = dir.join("plugins/alloc/csi/csi.sock");
        let _watch = watcher.watch(&path, tx).unwrap();
        fs::create_dir_all(dir.join("plugins/alloc/csi")).unwrap();
        expect_silence(&events);
        let _listener = UnixListener::bind(&path).unwrap();
        expect_event(&events, SocketEvent::Appeared);
    }

    #[test]
    fn a_socket_bound_right_after_its_directories_are_created_appears() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let path = dir.join("plugins/alloc/csi/csi.sock");
        let _watch = watcher.watch(&path, tx).unwrap();
        fs::create_dir_all(dir.join("plugins/alloc/csi")).unwrap();
        let _listener = UnixListener::bind(&path).unwrap();
        expect_event(&events, SocketEvent::Appeared);
    }

    #[test]
    fn a_socket_appears_in_directories_created_one_at_a_time() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let path = dir.join("a/b/c/csi.sock");
        let _watch = watcher.watch(&path, tx).unwrap();
        for partial in ["a", "a/b", "a/b/c"] {
            fs::create_dir(dir.join(partial)).unwrap();
            expect_silence(&events);
        }
        let _listener = UnixListener::bind(&path).unwrap();
        expect_event(&events, SocketEvent::Appeared);
    }

    #[test]
    fn a_socket_in_a_directory_renamed_into_place_appears() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let _watch = watcher.watch(&dir.join("alloc/csi.sock"), tx).unwrap();
        fs::create_dir(dir.join("alloc.tmp")).unwrap();
        let _listener = UnixListener::bind(dir.join("alloc.tmp/csi.sock")).unwrap();
        expect_silence(&events);
        fs::rename(dir.join("alloc.tmp"), dir.join("alloc")).unwrap();
        expect_event(&events, SocketEvent::Appeared);
    }

    #[test]
    fn a_deleted_directory_is_watched_for_again() {
        let dir = TestDir::new();
        fs::create_dir(dir.join("alloc")).unwrap();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let path = dir.join("alloc/csi.sock");
        let _watch = watcher.watch(&path, tx).unwrap();
        let listener = UnixListener::bind(&path).unwrap();
        expect_event(&events, SocketEvent::Appeared);
        drop(listener);
        fs::remove_dir_all(dir.join("alloc")).unwrap();
        expect_event(&events, SocketEvent::Disappeared);
        fs::create_dir(dir.join("alloc")).unwrap();
        let _listener = UnixListener::bind(&path).unwrap();
        expect_event(&events, SocketEvent::Appeared);
    }

    #[test]
    fn a_directory_renamed_away_takes_its_socket_along() {
        let dir = TestDir::new();
        fs::create_dir(dir.join("alloc")).unwrap();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let path = dir.join("alloc/csi.sock");
        let _watch = watcher.watch(&path, tx).unwrap();
        let _old = UnixListener::bind(&path).unwrap();
        expect_event(&events, SocketEvent::Appeared);
        fs::rename(dir.join("alloc"), dir.join("old-alloc")).unwrap();
        expect_event(&events, SocketEvent::Disappeared);
        // The renamed directory is no longer watched.
        fs::remove_file(dir.join("old-alloc/csi.sock")).unwrap();
        expect_silence(&events);
        fs::create_dir(dir.join("alloc")).unwrap();
        let _new = UnixListener::bind(&path).unwrap();
        expect_event(&events, SocketEvent::Appeared);
    }

    #[test]
    fn two_watches_on_one_directory_are_both_notified() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx_a, events_a) = unbounded();
        let (tx_b, events_b) = unbounded();
        let (tx_same, events_same) = unbounded();
        let _a = watcher.watch(&dir.join("a.sock"), tx_a).unwrap();
        let _b = watcher.watch(&dir.join("b.sock"), tx_b).unwrap();
        let _same = watcher.watch(&dir.join("a.sock"), tx_same).unwrap();
        let _listener_a = UnixListener::bind(dir.join("a.sock")).unwrap();
        expect_event(&events_a, SocketEvent::Appeared);
        expect_event(&events_same, SocketEvent::Appeared);
        let _listener_b = UnixListener::bind(dir.join("b.sock")).unwrap();
        expect_event(&events_b, SocketEvent::Appeared);
        expect_silence(&events_a);
    }

    #[test]
    fn a_dropped_watch_stops_its_events() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        drop(watch);
        let _listener = UnixListener::bind(dir.join("csi.sock")).unwrap();
        expect_closed(&events);
    }

    #[test]
    fn dropping_one_watch_of_a_directory_keeps_the_other() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx_a, events_a) = unbounded();
        let (tx_b, events_b) = unbounded();
        let a = watcher.watch(&dir.join("a.sock"), tx_a).unwrap();
        let _b = watcher.watch(&dir.join("b.sock"), tx_b).unwrap();
        drop(a);
        let _listener_a = UnixListener::bind(dir.join("a.sock")).unwrap();
        let _listener_b = UnixListener::bind(dir.join("b.sock")).unwrap();
        expect_event(&events_b, SocketEvent::Appeared);
        expect_closed(&events_a);
    }

    #[test]
    fn a_closed_receiver_does_not_disturb_the_others() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx_gone, events_gone) = unbounded();
        let (tx, events) = unbounded();
        let _gone = watcher.watch(&dir.join("csi.sock"), tx_gone).unwrap();
        let _watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        drop(events_gone);
        let _listener = UnixListener::bind(dir.join("csi.sock")).unwrap();
        expect_event(&events, SocketEvent::Appeared);
    }

    #[test]
    fn shutdown_joins_the_thread_and_drops_the_event_senders() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let other = watcher.clone();
        let (tx, events) = unbounded();
        let _watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        watcher.shutdown();
        assert_eq!(
            events.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        );
        let (tx, _events) = unbounded();
        assert!(other.watch(&dir.join("csi.sock"), tx).is_err());
    }

    #[test]
    fn dropping_the_last_handle_stops_the_thread() {
        let dir = TestDir::new();
        let watcher = SocketWatcher::start().unwrap();
        let (tx, events) = unbounded();
        let watch = watcher.watch(&dir.join("csi.sock"), tx).unwrap();
        drop(watcher);
        assert_eq!(
            events.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        );
        drop(watch);
    }

    #[test]
    fn paths_with_parent_components_or_no_file_name_are_refused() {
        let watcher = SocketWatcher::start().unwrap();
        for path in ["/tmp/a/../csi.sock", "/", ""] {
            let (tx, _events) = unbounded();
            let err = watcher.watch(Path::new(path), tx).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{path:?}");
        }
    }

    #[test]
    fn relative_paths_are_made_absolute() {
        let watcher = SocketWatcher::start().unwrap();
        let (tx, _events) = unbounded();
        let watch = watcher.watch(Path::new("./missing/csi.sock"), tx).unwrap();
        assert_eq!(
            watch.path(),
            std::env::current_dir().unwrap().join("missing/csi.sock")
        );
    }

    #[test]
    fn an_overflow_reports_every_socket_as_it_is_now() {
        let dir = TestDir::new();
        let (_commands, command_rx) = unbounded();
        let mut watch_loop = WatchLoop::new(
            Inotify::new().unwrap(),
            Arc::new(Waker::new().unwrap()),
            command_rx,
        );
        let (tx_kept, kept) = unbounded();
        let (tx_removed, removed) = unbounded();
        let (tx_missing, missing) = unbounded();
        let _kept = UnixListener::bind(dir.join("kept.sock")).unwrap();
        let _removed = UnixListener::bind(dir.join("removed.sock")).unwrap();
        watch_loop.add(0, dir.join("kept.sock"), tx_kept).unwrap();
        watch_loop
            .add(1, dir.join("removed.sock"), tx_removed)
            .unwrap();
        watch_loop
            .add(2, dir.join("missing.sock"), tx_missing)
            .unwrap();
        assert_eq!(kept.try_recv(), Ok(SocketEvent::Appeared));
        assert_eq!(removed.try_recv(), Ok(SocketEvent::Appeared));
        // The events of this removal are never read, as if lost.
        fs::remove_file(dir.join("removed.sock")).unwrap();
        watch_loop.handle(Event {
            wd: -1,
            mask: libc::IN_Q_OVERFLOW,
            cookie: 0,
            name: None,
        });
        assert_eq!(kept.try_recv(), Ok(SocketEvent::Appeared));
        assert_eq!(removed.try_recv(), Ok(SocketEvent::Disappeared));
        assert!(missing.try_recv().is_err());
    }
}
