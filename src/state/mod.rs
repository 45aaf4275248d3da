//! Persistence: the snapshot `state.pb` and the transition journal.
//!
//! The main loop keeps all state in memory and persists it here: a
//! snapshot written atomically ([`store`]), and an append-only journal
//! ([`journal`]) of the transitions made since, committed once per loop
//! turn (group commit). [`Store`] ties the two together: it loads the
//! snapshot and the journal records it does not cover, and a new snapshot
//! folds the journal away.

pub mod journal;
pub mod store;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::proto::state as pb;
use journal::Journal;

/// The snapshot's name in `data_dir`.
pub const SNAPSHOT_NAME: &str = "state.pb";

/// The journal's name in `data_dir`.
pub const JOURNAL_NAME: &str = "journal";

/// The snapshot format this binary writes and reads.
pub const VERSION: u32 = 1;

#[derive(Debug)]
pub enum Error {
    Snapshot(store::Error),
    Journal(journal::Error),
    Decode {
        path: PathBuf,
        err: protobuf::Error,
    },
    Encode(protobuf::Error),
    /// A newer csi-agent wrote the snapshot.
    Version {
        path: PathBuf,
        found: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Snapshot(_) => f.write_str("cannot access the state snapshot"),
            Error::Journal(_) => f.write_str("cannot access the state journal"),
            Error::Decode { path, .. } => {
                write!(f, "the state snapshot {} is corrupt", path.display())
            }
            Error::Encode(_) => f.write_str("cannot encode the state"),
            Error::Version { path, found } => write!(
                f,
                "the state snapshot {} has format version {found}, newer than this csi-agent's {VERSION}",
                path.display()
            ),
        }
    }
}

impl Error {
    /// The system call's error underneath, if there is one: what an
    /// operator has to fix (`ENOSPC`, `EDQUOT`, `EIO`, ...).
    pub fn io_error(&self) -> Option<&io::Error> {
        let mut source = std::error::Error::source(self);
        while let Some(err) = source {
            if let Some(io) = err.downcast_ref::<io::Error>() {
                return Some(io);
            }
            source = err.source();
        }
        None
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Snapshot(err) => Some(err),
            Error::Journal(err) => Some(err),
            Error::Decode { err, .. } | Error::Encode(err) => Some(err),
            Error::Version { .. } => None,
        }
    }
}

/// The agent's persisted state in `data_dir`.
pub struct Store {
    snapshot: PathBuf,
    /// The snapshot's size when last read or written.
    snapshot_bytes: u64,
    journal_path: PathBuf,
    journal: Journal,
}

/// What [`Store::open`] found.
pub struct Loaded {
    pub state: pb::State,
    /// Journal records written after the snapshot, oldest first.
    pub journal: Vec<Vec<u8>>,
    /// Whether there was a snapshot at all (a first start has none).
    pub existed: bool,
}

impl Store {
    /// Opens the state in `data_dir` (which must exist), or an empty one.
    pub fn open(data_dir: &Path) -> Result<(Store, Loaded), Error> {
        let snapshot = data_dir.join(SNAPSHOT_NAME);
        let bytes = store::read(&snapshot).map_err(Error::Snapshot)?;
        let existed = bytes.is_some();
        let snapshot_bytes = bytes.as_ref().map_or(0, |b| b.len() as u64);
        let state = match bytes {
            None => pb::State::new(),
            Some(bytes) => {
                crate::message::decode::<pb::State>(&bytes).map_err(|err| Error::Decode {
                    path: snapshot.clone(),
                    err,
                })?
            }
        };
        if state.version > VERSION {
            return Err(Error::Version {
                path: snapshot,
                found: state.version,
            });
        }
        let journal_path = data_dir.join(JOURNAL_NAME);
        let (journal, replay) =
            Journal::open(&journal_path, state.journal_seq).map_err(Error::Journal)?;
        let loaded = Loaded {
            state,
            journal: replay.records.into_iter().map(|(_, r)| r).collect(),
            existed,
        };
        let store = Store {
            snapshot,
            snapshot_bytes,
            journal_path,
            journal,
        };
        Ok((store, loaded))
    }

    /// Writes `state` as the new snapshot, covering every journal record so
    /// far, and then empties the journal.
    ///
    /// This is also how the agent recovers from a failed write: after a
    /// failed append the journal is read back first, so that the snapshot
    /// covers every record that may have reached the disk.
    pub fn save(&mut self, state: &pb::State) -> Result<(), Error> {
        if self.journal.is_poisoned() {
            self.reopen_journal()?;
        }
        let mut state = state.clone();
        state.version = VERSION;
        state.journal_seq = self.journal.last_seq();
        let bytes = crate::message::encode(&state).map_err(Error::Encode)?;
        store::write_atomic(&self.snapshot, &bytes).map_err(Error::Snapshot)?;
        self.snapshot_bytes = bytes.len() as u64;
        if self.journal.len_bytes() > 0 {
            self.journal.truncate().map_err(Error::Journal)?;
        }
        Ok(())
    }

    /// Appends records to the journal with one sync, which makes the
    /// records [`Store::append_unsynced`] wrote before durable too; with no
    /// records, syncs those alone, if any.
    pub fn append(&mut self, records: &[Vec<u8>]) -> Result<(), Error> {
        self.journal
            .append_batch(records)
            .map(|_| ())
            .map_err(Error::Journal)
    }

    /// Writes records to the journal without a sync: a killed agent reads
    /// them back, a power cut may take them until the next [`Store::append`]
    /// or [`Store::save`] (see [`Journal::append_unsynced`]).
    pub fn append_unsynced(&mut self, records: &[Vec<u8>]) -> Result<(), Error> {
        self.journal
            .append_unsynced(records)
            .map(|_| ())
            .map_err(Error::Journal)
    }

    /// Opens the journal again after a failed write or sync: what it holds
    /// is known again, and the records of the failed batch that reached
    /// the disk get seqs the next snapshot covers. They are not applied:
    /// the caller's state, which the snapshot will hold, already has them.
    fn reopen_journal(&mut self) -> Result<(), Error> {
        let (journal, replay) =
            Journal::open(&self.journal_path, self.journal.last_seq()).map_err(Error::Journal)?;
        if !replay.records.is_empty() {
            log::info!(
                "journal {}: {} records of a failed write reached the disk; the next snapshot covers them",
                self.journal_path.display(),
                replay.records.len()
            );
        }
        self.journal = journal;
        Ok(())
    }

    /// The journal's size, to decide when to fold it into a snapshot.
    pub fn journal_bytes(&self) -> u64 {
        self.journal.len_bytes()
    }

    /// The snapshot's size, as last read or written (0 without one).
    pub fn snapshot_bytes(&self) -> u64 {
        self.snapshot_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;
    use std::process::Command;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tells whether a test that needs root can run. In CI, which runs as
    /// root, a missing root is a failure rather than a silent skip.
    fn require_root() -> bool {
        if crate::sys::peercred::current_uid() == 0 {
            return true;
        }
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("this test needs root; CI runs as root");
        }
        eprintln!("skipping a test that needs root");
        false
    }

    /// A 1 MiB tmpfs of one test's own, to fill up; unmounted and removed
    /// on drop, even after a failed assertion.
    struct SmallFs {
        dir: PathBuf,
    }

    impl SmallFs {
        fn mount() -> SmallFs {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "csi-agent-state-test-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir(&dir).unwrap();
            let small = SmallFs { dir };
            let status = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs"])
                .arg(&small.dir)
                .status()
                .unwrap();
            assert!(status.success(), "mount -t tmpfs: {status}");
            small
        }

        /// Fills the file system with a file until it is full.
        fn fill(&self) -> PathBuf {
            let path = self.dir.join("filler");
            let mut file = fs::File::create(&path).unwrap();
            let chunk = vec![0u8; 64 << 10];
            loop {
                match file.write(&chunk) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(err) if err.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(err) => panic!("filling {}: {err}", path.display()),
                }
            }
            path
        }
    }

    impl Drop for SmallFs {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    fn state_with_plugin(id: &str) -> pb::State {
        let mut state = pb::State::new();
        state.plugins.push(pb::PluginRecord {
            id: id.into(),
            ..Default::default()
        });
        state
    }

    fn errno(err: &Error) -> Option<i32> {
        err.io_error().and_then(io::Error::raw_os_error)
    }

    #[test]
    fn a_store_on_a_full_file_system_writes_again_once_space_returns() {
        if !require_root() {
            return;
        }
        let small = SmallFs::mount();
        let (mut store, _) = Store::open(&small.dir).unwrap();
        store.save(&state_with_plugin("before")).unwrap();
        let filler = small.fill();

        // A record larger than a page needs a new page, whatever room the
        // journal's last page has left.
        let err = store.append(&[vec![7u8; 8192]]).unwrap_err();
        assert_eq!(errno(&err), Some(libc::ENOSPC), "{err:?}");
        let err = store.save(&state_with_plugin("after")).unwrap_err();
        assert_eq!(errno(&err), Some(libc::ENOSPC), "{err:?}");

        fs::remove_file(filler).unwrap();
        // The journal was poisoned by the failed append: saving reads it
        // back, drops the torn record, and writes.
        store.save(&state_with_plugin("after")).unwrap();
        store.append(&[b"next".to_vec()]).unwrap();
        drop(store);

        let (_, loaded) = Store::open(&small.dir).unwrap();
        assert_eq!(loaded.state.plugins[0].id, "after");
        assert_eq!(loaded.journal, vec![b"next".to_vec()]);
    }

    #[test]
    fn the_snapshot_size_is_known_after_a_save_and_after_a_start() {
        let dir = std::env::temp_dir().join(format!("csi-agent-state-size-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        let (mut store, _) = Store::open(&dir).unwrap();
        assert_eq!(store.snapshot_bytes(), 0, "no snapshot yet");
        store.save(&state_with_plugin("p")).unwrap();
        let size = fs::metadata(dir.join(SNAPSHOT_NAME)).unwrap().len();
        assert!(size > 0);
        assert_eq!(store.snapshot_bytes(), size);
        drop(store);
        let (store, _) = Store::open(&dir).unwrap();
        assert_eq!(store.snapshot_bytes(), size);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_io_error_under_a_state_error_is_found() {
        let err = Error::Journal(journal::Error::Write {
            path: "/x/journal".into(),
            err: io::Error::from_raw_os_error(libc::EDQUOT),
        });
        assert_eq!(errno(&err), Some(libc::EDQUOT));
        let err = Error::Journal(journal::Error::Poisoned {
            path: "/x/journal".into(),
        });
        assert_eq!(errno(&err), None);
    }
}
