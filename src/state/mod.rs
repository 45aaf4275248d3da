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
use std::path::{Path, PathBuf};

use protobuf::Message;

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
        let state = match bytes {
            None => pb::State::new(),
            Some(bytes) => pb::State::parse_from_bytes(&bytes).map_err(|err| Error::Decode {
                path: snapshot.clone(),
                err,
            })?,
        };
        if state.version > VERSION {
            return Err(Error::Version {
                path: snapshot,
                found: state.version,
            });
        }
        let (journal, replay) = Journal::open(&data_dir.join(JOURNAL_NAME), state.journal_seq)
            .map_err(Error::Journal)?;
        let loaded = Loaded {
            state,
            journal: replay.records.into_iter().map(|(_, r)| r).collect(),
            existed,
        };
        Ok((Store { snapshot, journal }, loaded))
    }

    /// Writes `state` as the new snapshot, covering every journal record so
    /// far, and then empties the journal.
    pub fn save(&mut self, state: &pb::State) -> Result<(), Error> {
        let mut state = state.clone();
        state.version = VERSION;
        state.journal_seq = self.journal.last_seq();
        let bytes = state.write_to_bytes().map_err(Error::Encode)?;
        store::write_atomic(&self.snapshot, &bytes).map_err(Error::Snapshot)?;
        if self.journal.len_bytes() > 0 {
            self.journal.truncate().map_err(Error::Journal)?;
        }
        Ok(())
    }

    /// Appends records to the journal with one sync.
    pub fn append(&mut self, records: &[Vec<u8>]) -> Result<(), Error> {
        self.journal
            .append_batch(records)
            .map(|_| ())
            .map_err(Error::Journal)
    }

    /// The journal's size, to decide when to fold it into a snapshot.
    pub fn journal_bytes(&self) -> u64 {
        self.journal.len_bytes()
    }
}
