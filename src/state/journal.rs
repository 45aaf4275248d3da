//! The journal: an append-only file of the transitions made since the last
//! snapshot.
//!
//! The agent appends every state transition here, and makes it durable,
//! before it acts on it; at start-up it replays the journal on top of the
//! snapshot ([`super::store`]). Records are opaque bytes (the caller encodes
//! protobuf): this module frames, checksums, numbers and syncs them.
//!
//! # Frame format
//!
//! Each record is one frame; integers are little-endian:
//!
//! ```text
//! len: u32 | crc: u32 | seq: u64 | payload: [u8; len]
//! ```
//!
//! `len` is the length of the payload alone, at most [`MAX_PAYLOAD`]
//! (64 MiB); `crc` is the CRC-32C (Castagnoli) of `seq` and `payload`; `seq`
//! is the record's sequence number.
//!
//! A crash during an append can leave a torn frame at the end of the file.
//! [`Journal::open`] stops at the first frame that is short, has a bad CRC,
//! an absurd length or a `seq` that does not increase, drops everything from
//! there (reported in [`Replay::dropped_bytes`] and logged), and truncates
//! the file to the last good frame so that later appends are not hidden
//! behind the damage. Only the batches written since the last sync can be
//! torn (a sync covers every byte written before it), and none of them was
//! acknowledged: a crash tears the tail, never a synced record. Damage in
//! the middle of the file (a bad disk) loses the records after it too; the
//! warning says how many bytes.
//!
//! # Group commit
//!
//! [`Journal::append_batch`] writes all the records of a batch with one
//! write and makes them durable with one `fdatasync(2)`. The main loop
//! collects every transition of one loop turn and commits them together
//! before it sends the RPCs that depend on them, so one sync pays for the
//! whole turn.
//!
//! # Written now, durable with the next sync
//!
//! [`Journal::append_unsynced`] writes a batch without syncing it. What
//! `write(2)` handed to the kernel survives the agent being killed (the
//! page cache outlives the process; a restarted agent reads it back), and
//! is lost only with the kernel: a power cut or a panic. The next sync,
//! whichever batch it is for, makes it durable too. This is for a record
//! whose loss is harmless: the `Done` mark of a step in the middle of a
//! claim's or a release's job, written before the job's next RPC so that a
//! killed agent re-sends only the RPC in flight. Should a power cut take
//! the mark, the step is `Pending` (or not yet absent) again and is sent
//! once more on recovery, which CSI allows: its calls are idempotent. What
//! must not be lost (a step marked `Pending` before its first RPC, an
//! outcome that is answered) goes through [`Journal::append_batch`].
//!
//! A failed append leaves its records possibly on disk, possibly
//! not, and the journal refuses further appends ([`Error::Poisoned`]): after
//! a failed sync the kernel may have dropped the dirty pages and will not
//! report it again, so a retry could claim durability for data that is gone.
//! Reopening the journal reads back what is really there.
//!
//! # Sequence numbers and snapshots
//!
//! The journal assigns the sequence numbers, strictly increasing over the
//! whole life of the file: across reopens and across [`Journal::truncate`].
//! The caller stores in each snapshot the seq of the last record the
//! snapshot covers and passes it back as `after_seq` to [`Journal::open`],
//! which replays only the records after it. Compaction is: write a snapshot
//! covering [`Journal::last_seq`] with [`super::store::write_atomic`], then
//! [`Journal::truncate`]. A crash between the two leaves records in the
//! journal that the snapshot already covers; their seqs say so, and they are
//! not applied twice. New seqs continue from `max(last seq in the file,
//! after_seq) + 1`, so a record appended after a truncation never looks
//! covered by the snapshot.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::store;

/// The largest payload of one record. A frame header claiming more is
/// treated as damage, not as a reason to allocate gigabytes.
pub const MAX_PAYLOAD: usize = 64 << 20;

/// The bytes of a frame before its payload: `len`, `crc` and `seq`.
const HEADER_LEN: usize = 16;

/// The mode of the journal file: its records hold secrets.
const MODE: u32 = 0o600;

/// An error from one step of opening, appending to or truncating the journal.
#[derive(Debug)]
pub enum Error {
    /// The journal `path` could not be opened or created.
    Open { path: PathBuf, err: io::Error },
    /// Syncing the directory `path` that holds the journal failed.
    SyncDir { path: PathBuf, err: io::Error },
    /// Reading the journal `path` failed.
    Read { path: PathBuf, err: io::Error },
    /// Cutting the damaged tail off the journal `path` failed.
    TruncateTail { path: PathBuf, err: io::Error },
    /// Writing a batch of records to the journal `path` failed.
    Write { path: PathBuf, err: io::Error },
    /// Syncing the journal `path` to disk failed.
    Sync { path: PathBuf, err: io::Error },
    /// Truncating the journal `path` after a snapshot failed.
    Truncate { path: PathBuf, err: io::Error },
    /// A record of `len` bytes is larger than [`MAX_PAYLOAD`]; nothing of
    /// its batch was written.
    PayloadTooLarge { path: PathBuf, len: usize },
    /// An earlier write or sync of the journal `path` failed, so what is on
    /// disk is unknown until the journal is reopened.
    Poisoned { path: PathBuf },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open { path, .. } => write!(f, "failed to open the journal {}", path.display()),
            Self::SyncDir { path, .. } => {
                write!(f, "failed to sync the directory {}", path.display())
            }
            Self::Read { path, .. } => write!(f, "failed to read the journal {}", path.display()),
            Self::TruncateTail { path, .. } => write!(
                f,
                "failed to cut the damaged tail off the journal {}",
                path.display()
            ),
            Self::Write { path, .. } => {
                write!(f, "failed to write to the journal {}", path.display())
            }
            Self::Sync { path, .. } => write!(f, "failed to sync the journal {}", path.display()),
            Self::Truncate { path, .. } => {
                write!(f, "failed to truncate the journal {}", path.display())
            }
            Self::PayloadTooLarge { path, len } => write!(
                f,
                "a record of {len} bytes is too large for the journal {} (at most {MAX_PAYLOAD})",
                path.display()
            ),
            Self::Poisoned { path } => write!(
                f,
                "the journal {} must be reopened after an earlier failed write or sync",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open { err, .. }
            | Self::SyncDir { err, .. }
            | Self::Read { err, .. }
            | Self::TruncateTail { err, .. }
            | Self::Write { err, .. }
            | Self::Sync { err, .. }
            | Self::Truncate { err, .. } => Some(err),
            Self::PayloadTooLarge { .. } | Self::Poisoned { .. } => None,
        }
    }
}

/// What [`Journal::open`] read back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replay {
    /// The records after the snapshot's `after_seq`, as `(seq, payload)` in
    /// the order they were appended.
    pub records: Vec<(u64, Vec<u8>)>,
    /// The bytes of a damaged tail that were dropped and cut off the file.
    pub dropped_bytes: u64,
}

/// The open journal, positioned to append after its last good frame.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    /// The length of the file: where the next frame goes.
    len: u64,
    /// The seq of the last record appended, or the snapshot's if larger.
    last_seq: u64,
    /// Set when a write or sync failed; see [`Error::Poisoned`].
    poisoned: bool,
    /// Bytes were written since the last sync ([`Journal::append_unsynced`]).
    unsynced: bool,
}

impl Journal {
    /// Opens the journal at `path`, creating it (mode 0600) if missing, and
    /// reads back the records after `after_seq`, the seq of the last record
    /// the snapshot covers (0 without a snapshot).
    ///
    /// A damaged tail is dropped and cut off the file; see the module docs.
    pub fn open(path: &Path, after_seq: u64) -> Result<(Journal, Replay), Error> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(MODE)
            .open(path)
            .map_err(|err| Error::Open {
                path: path.to_owned(),
                err,
            })?;
        // The directory entry of a new journal must be durable before the
        // records in it are; syncing it on every open is cheaper than
        // finding out whether the file was just created.
        let dir = store::parent_dir(path);
        store::sync_dir(dir).map_err(|err| Error::SyncDir {
            path: dir.to_owned(),
            err,
        })?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|err| Error::Read {
            path: path.to_owned(),
            err,
        })?;

        let scan = scan(&bytes);
        let dropped_bytes = (bytes.len() - scan.good_len) as u64;
        if let Some(damage) = &scan.damage {
            log::warn!(
                "journal {}: dropping {dropped_bytes} bytes from offset {}: {damage}",
                path.display(),
                scan.good_len
            );
            file.set_len(scan.good_len as u64)
                .map_err(|err| Error::TruncateTail {
                    path: path.to_owned(),
                    err,
                })?;
            file.sync_all().map_err(|err| Error::Sync {
                path: path.to_owned(),
                err,
            })?;
        }

        let records: Vec<(u64, Vec<u8>)> = scan
            .records
            .iter()
            .filter(|(seq, _)| *seq > after_seq)
            .map(|&(seq, payload)| (seq, payload.to_vec()))
            .collect();
        if let Some(&(first, _)) = records.first() {
            if first != after_seq + 1 {
                log::warn!(
                    "journal {}: records {}..={} are in neither the snapshot nor the journal",
                    path.display(),
                    after_seq + 1,
                    first - 1
                );
            }
        }

        let journal = Journal {
            path: path.to_owned(),
            file,
            len: scan.good_len as u64,
            last_seq: scan.last_seq.max(after_seq),
            poisoned: false,
            // What the file holds may be a killed agent's unsynced batches.
            unsynced: true,
        };
        let replay = Replay {
            records,
            dropped_bytes,
        };
        Ok((journal, replay))
    }

    /// Appends `payloads` as one batch: one write and one `fdatasync(2)` for
    /// all of them, which covers the batches [`Journal::append_unsynced`]
    /// wrote before too. Returns the seqs assigned, in order. An empty batch
    /// writes nothing, and syncs only when something written is not synced
    /// yet.
    ///
    /// Every record appended so far is durable when this returns `Ok`.
    /// After an `Err` they may or may not be, and every later append fails
    /// with [`Error::Poisoned`] until the journal is reopened; an oversized
    /// payload is the exception, rejected before anything is written.
    pub fn append_batch<P: AsRef<[u8]>>(&mut self, payloads: &[P]) -> Result<Vec<u64>, Error> {
        let at = std::time::Instant::now();
        let (seqs, written) = self.write_frames(payloads)?;
        if self.unsynced || written > 0 {
            let synced = self.file.sync_data();
            self.poison_on(synced, |path, err| Error::Sync { path, err })?;
            crate::metrics::JOURNAL_SYNC.observe(&[], at.elapsed().as_secs_f64());
        }
        self.unsynced = false;
        self.advance(&seqs, written);
        Ok(seqs)
    }

    /// Appends `payloads` as one batch with one write and no sync: the
    /// records are read back after the agent is killed, and durable once a
    /// later [`Journal::append_batch`] returns (see the module docs for
    /// when that is enough). Returns the seqs assigned, in order; an empty
    /// batch writes nothing. Errors as [`Journal::append_batch`].
    pub fn append_unsynced<P: AsRef<[u8]>>(&mut self, payloads: &[P]) -> Result<Vec<u64>, Error> {
        let (seqs, written) = self.write_frames(payloads)?;
        if written > 0 {
            self.unsynced = true;
        }
        self.advance(&seqs, written);
        Ok(seqs)
    }

    /// Writes the frames of `payloads` after the last good one, with one
    /// write, and answers their seqs and size. The journal's length and
    /// last seq stay behind them until the caller has what it needs (a
    /// sync, for [`Journal::append_batch`]): after a failure, reopening
    /// reads back whatever of them reached the disk.
    fn write_frames<P: AsRef<[u8]>>(&mut self, payloads: &[P]) -> Result<(Vec<u64>, u64), Error> {
        self.check_usable()?;
        if payloads.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let mut size = 0;
        for payload in payloads {
            let len = payload.as_ref().len();
            if len > MAX_PAYLOAD {
                return Err(Error::PayloadTooLarge {
                    path: self.path.clone(),
                    len,
                });
            }
            size += HEADER_LEN + len;
        }

        let mut frames = Vec::with_capacity(size);
        let seqs: Vec<u64> = (self.last_seq + 1..)
            .zip(payloads)
            .map(|(seq, payload)| {
                encode_frame(&mut frames, seq, payload.as_ref());
                seq
            })
            .collect();

        let written = self.file.write_all_at(&frames, self.len);
        self.poison_on(written, |path, err| Error::Write { path, err })?;
        Ok((seqs, frames.len() as u64))
    }

    /// Counts the frames [`Journal::write_frames`] wrote as appended.
    fn advance(&mut self, seqs: &[u64], written: u64) {
        self.len += written;
        crate::metrics::JOURNAL_BYTES.set(&[], self.len as f64);
        self.last_seq += seqs.len() as u64;
    }

    /// Whether bytes were written since the last sync: records of
    /// [`Journal::append_unsynced`] that a power cut could still take.
    pub fn has_unsynced(&self) -> bool {
        self.unsynced
    }

    /// The seq of the last record appended, or the snapshot's `after_seq`
    /// if that is larger; the next record gets the one after.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Whether an earlier write or sync failed; see [`Error::Poisoned`].
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The length of the journal file in bytes, to decide when to compact.
    pub fn len_bytes(&self) -> u64 {
        self.len
    }

    /// Empties the journal once a durable snapshot covers every record in
    /// it (up to [`Journal::last_seq`]). Seqs keep increasing afterwards.
    pub fn truncate(&mut self) -> Result<(), Error> {
        self.check_usable()?;
        self.file.set_len(0).map_err(|err| Error::Truncate {
            path: self.path.clone(),
            err,
        })?;
        self.len = 0;
        crate::metrics::JOURNAL_BYTES.set(&[], 0.0);
        let synced = self.file.sync_all();
        self.poison_on(synced, |path, err| Error::Sync { path, err })?;
        self.unsynced = false;
        Ok(())
    }

    /// A write or sync that failed leaves the file's end unknown: the
    /// journal refuses every later append until it is reopened.
    fn poison_on(
        &mut self,
        result: io::Result<()>,
        error: impl FnOnce(PathBuf, io::Error) -> Error,
    ) -> Result<(), Error> {
        result.map_err(|err| {
            self.poisoned = true;
            error(self.path.clone(), err)
        })
    }

    fn check_usable(&self) -> Result<(), Error> {
        if self.poisoned {
            return Err(Error::Poisoned {
                path: self.path.clone(),
            });
        }
        Ok(())
    }
}

/// The good frames at the start of a journal, and what ended them.
struct Scan<'a> {
    records: Vec<(u64, &'a [u8])>,
    /// The length of the good frames: where the damage, if any, starts.
    good_len: usize,
    /// The seq of the last good frame, 0 if none.
    last_seq: u64,
    /// Why the frames after `good_len`, if any, were not trusted.
    damage: Option<Damage>,
}

/// Why a frame was not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Damage {
    /// Fewer bytes are left than a frame header.
    ShortHeader { available: usize },
    /// The header claims more payload than [`MAX_PAYLOAD`].
    AbsurdLength { len: u32 },
    /// Fewer bytes are left than the header's payload length.
    ShortPayload { len: u32, available: usize },
    /// The CRC does not match the seq and payload.
    BadCrc,
    /// The seq is not larger than the previous frame's.
    SeqNotIncreasing { seq: u64, previous: u64 },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ShortHeader { available } => {
                write!(f, "torn frame header ({available} of {HEADER_LEN} bytes)")
            }
            Self::AbsurdLength { len } => {
                write!(f, "frame length {len} exceeds {MAX_PAYLOAD} bytes")
            }
            Self::ShortPayload { len, available } => {
                write!(f, "torn frame payload ({available} of {len} bytes)")
            }
            Self::BadCrc => write!(f, "frame checksum mismatch"),
            Self::SeqNotIncreasing { seq, previous } => {
                write!(f, "frame seq {seq} does not follow seq {previous}")
            }
        }
    }
}

/// Reads the frames of `bytes` up to the end or the first damaged one.
fn scan(bytes: &[u8]) -> Scan<'_> {
    let mut scan = Scan {
        records: Vec::new(),
        good_len: 0,
        last_seq: 0,
        damage: None,
    };
    while scan.good_len < bytes.len() {
        match decode_frame(&bytes[scan.good_len..], scan.last_seq) {
            Ok((seq, payload)) => {
                scan.records.push((seq, payload));
                scan.good_len += HEADER_LEN + payload.len();
                scan.last_seq = seq;
            }
            Err(damage) => {
                scan.damage = Some(damage);
                break;
            }
        }
    }
    scan
}

/// Decodes the frame at the start of `bytes`, which must have a seq larger
/// than `previous`.
fn decode_frame(bytes: &[u8], previous: u64) -> Result<(u64, &[u8]), Damage> {
    let Some((header, rest)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(Damage::ShortHeader {
            available: bytes.len(),
        });
    };
    let len = u32::from_le_bytes(header[0..4].try_into().unwrap());
    let crc = u32::from_le_bytes(header[4..8].try_into().unwrap());
    let seq_bytes = &header[8..16];
    if len as usize > MAX_PAYLOAD {
        return Err(Damage::AbsurdLength { len });
    }
    let Some(payload) = rest.get(..len as usize) else {
        return Err(Damage::ShortPayload {
            len,
            available: rest.len(),
        });
    };
    if crc32c::finish(crc32c::update(
        crc32c::update(crc32c::START, seq_bytes),
        payload,
    )) != crc
    {
        return Err(Damage::BadCrc);
    }
    let seq = u64::from_le_bytes(seq_bytes.try_into().unwrap());
    if seq <= previous {
        return Err(Damage::SeqNotIncreasing { seq, previous });
    }
    Ok((seq, payload))
}

/// Appends the frame of record `seq` to `out`.
fn encode_frame(out: &mut Vec<u8>, seq: u64, payload: &[u8]) {
    let seq_bytes = seq.to_le_bytes();
    let crc = crc32c::finish(crc32c::update(
        crc32c::update(crc32c::START, &seq_bytes),
        payload,
    ));
    // The caller checked the length against MAX_PAYLOAD, which fits in u32.
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&seq_bytes);
    out.extend_from_slice(payload);
}

/// CRC-32C (Castagnoli), the checksum of ext4 and iSCSI: table-driven, one
/// byte at a time, which is fast enough for records of a few hundred bytes.
mod crc32c {
    /// The reflected Castagnoli polynomial.
    const POLY: u32 = 0x82F6_3B78;

    /// The CRC register before any byte.
    pub(super) const START: u32 = !0;

    const TABLE: [u32; 256] = {
        let mut table = [0; 256];
        let mut i = 0;
        while i < 256 {
            let mut crc = i as u32;
            let mut bit = 0;
            while bit < 8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ POLY
                } else {
                    crc >> 1
                };
                bit += 1;
            }
            table[i] = crc;
            i += 1;
        }
        table
    };

    /// Feeds `bytes` into the CRC register `crc`.
    pub(super) fn update(crc: u32, bytes: &[u8]) -> u32 {
        bytes.iter().fold(crc, |crc, &byte| {
            TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8)
        })
    }

    /// The checksum of everything fed into the register `crc`.
    pub(super) fn finish(crc: u32) -> u32 {
        !crc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A directory of one test's own with a journal path in it, removed on
    /// drop.
    struct Scratch {
        dir: PathBuf,
        path: PathBuf,
    }

    impl Scratch {
        fn new() -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "csi-agent-journal-test-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir(&dir).unwrap();
            let path = dir.join("journal");
            Self { dir, path }
        }

        fn open(&self, after_seq: u64) -> (Journal, Replay) {
            Journal::open(&self.path, after_seq).unwrap()
        }

        fn file_len(&self) -> u64 {
            fs::metadata(&self.path).unwrap().len()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    fn records(pairs: &[(u64, &str)]) -> Vec<(u64, Vec<u8>)> {
        pairs
            .iter()
            .map(|&(seq, payload)| (seq, payload.as_bytes().to_vec()))
            .collect()
    }

    fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_frame(&mut out, seq, payload);
        out
    }

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        let crc = crc32c::finish(crc32c::update(crc32c::START, b"123456789"));
        assert_eq!(crc, 0xE306_9283);
    }

    #[test]
    fn new_journal_is_empty_and_private() {
        let scratch = Scratch::new();
        let (journal, replay) = scratch.open(0);
        assert_eq!(replay, Replay::default());
        assert_eq!((journal.last_seq(), journal.len_bytes()), (0, 0));
        let mode = fs::metadata(&scratch.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn batches_read_back_in_order_after_reopen() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        assert_eq!(journal.append_batch(&["a", "b"]).unwrap(), [1, 2]);
        assert_eq!(journal.append_batch(&["c"]).unwrap(), [3]);
        assert_eq!(
            journal
                .append_batch(&[b"d".to_vec(), Vec::new(), b"f".to_vec()])
                .unwrap(),
            [4, 5, 6]
        );
        assert_eq!(journal.len_bytes(), scratch.file_len());
        drop(journal);

        let (journal, replay) = scratch.open(0);
        let expected = records(&[(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, ""), (6, "f")]);
        assert_eq!(replay.records, expected);
        assert_eq!(replay.dropped_bytes, 0);
        assert_eq!(journal.last_seq(), 6);
        assert_eq!(journal.len_bytes(), scratch.file_len());
    }

    #[test]
    fn unsynced_records_are_read_back_and_the_next_sync_covers_them() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        journal.append_batch(&["a"]).unwrap();
        assert!(!journal.has_unsynced());
        assert_eq!(journal.append_unsynced(&["b", "c"]).unwrap(), [2, 3]);
        assert!(journal.has_unsynced());
        assert_eq!(journal.len_bytes(), scratch.file_len());

        // A killed agent's unsynced records: the next agent reads them from
        // the page cache, and must sync before it acts on them.
        let (mut next, replay) = scratch.open(0);
        assert_eq!(replay.records, records(&[(1, "a"), (2, "b"), (3, "c")]));
        assert!(next.has_unsynced());
        let nothing: &[&[u8]] = &[];
        assert_eq!(next.append_batch(nothing).unwrap(), Vec::<u64>::new());
        assert!(!next.has_unsynced());
        drop(next);

        // Seqs go on from the unsynced ones, and the next batch's sync
        // covers them.
        assert_eq!(journal.append_batch(&["d"]).unwrap(), [4]);
        assert!(!journal.has_unsynced());
        assert_eq!(journal.append_unsynced(&["e"]).unwrap(), [5]);
        assert_eq!(journal.append_batch(nothing).unwrap(), Vec::<u64>::new());
        assert!(
            !journal.has_unsynced(),
            "an empty batch syncs what is unsynced"
        );
        drop(journal);
        let (_, replay) = scratch.open(0);
        let expected = records(&[(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]);
        assert_eq!(replay.records, expected);
    }

    #[test]
    fn seq_continues_after_reopen() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        journal.append_batch(&["a", "b"]).unwrap();
        drop(journal);
        let (mut journal, _) = scratch.open(0);
        assert_eq!(journal.append_batch(&["c"]).unwrap(), [3]);
    }

    #[test]
    fn seq_continues_after_truncate_and_reopen() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        journal.append_batch(&["a", "b"]).unwrap();
        journal.truncate().unwrap();
        assert_eq!((journal.last_seq(), journal.len_bytes()), (2, 0));
        assert_eq!(scratch.file_len(), 0);
        assert_eq!(journal.append_batch(&["c"]).unwrap(), [3]);
        drop(journal);

        // The snapshot written before the truncation covers seq 2.
        let (mut journal, replay) = scratch.open(2);
        assert_eq!(replay.records, records(&[(3, "c")]));
        journal.truncate().unwrap();
        drop(journal);
        // The snapshot written before this truncation covers seq 3.
        let (mut journal, replay) = scratch.open(3);
        assert!(replay.records.is_empty());
        assert_eq!(journal.append_batch(&["d"]).unwrap(), [4]);
    }

    #[test]
    fn records_covered_by_the_snapshot_are_not_replayed() {
        // A crash between writing a snapshot up to seq 2 and truncating.
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        journal.append_batch(&["a", "b", "c"]).unwrap();
        drop(journal);

        let (journal, replay) = scratch.open(2);
        assert_eq!(replay.records, records(&[(3, "c")]));
        assert_eq!(journal.last_seq(), 3);
    }

    #[test]
    fn seq_continues_after_the_snapshot_when_the_journal_is_behind_it() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        journal.append_batch(&["a"]).unwrap();
        drop(journal);

        let (mut journal, replay) = scratch.open(10);
        assert!(replay.records.is_empty());
        assert_eq!(journal.last_seq(), 10);
        assert_eq!(journal.append_batch(&["b"]).unwrap(), [11]);
    }

    #[test]
    fn torn_last_frame_is_dropped_at_every_cut() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        journal.append_batch(&["first", "second"]).unwrap();
        let good_len = journal.len_bytes();
        journal.append_batch(&["third"]).unwrap();
        drop(journal);
        let full = fs::read(&scratch.path).unwrap();

        for cut in good_len as usize + 1..full.len() {
            fs::write(&scratch.path, &full[..cut]).unwrap();
            let (mut journal, replay) = scratch.open(0);
            assert_eq!(
                replay,
                Replay {
                    records: records(&[(1, "first"), (2, "second")]),
                    dropped_bytes: cut as u64 - good_len,
                },
                "cut at {cut}"
            );
            assert_eq!(scratch.file_len(), good_len, "cut at {cut}");
            assert_eq!(journal.append_batch(&["after"]).unwrap(), [3]);
            drop(journal);

            let (_, replay) = scratch.open(0);
            assert_eq!(
                replay,
                Replay {
                    records: records(&[(1, "first"), (2, "second"), (3, "after")]),
                    dropped_bytes: 0,
                },
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn flipped_payload_bit_is_caught_by_the_crc() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        journal.append_batch(&["first"]).unwrap();
        let good_len = journal.len_bytes();
        journal.append_batch(&["second", "third"]).unwrap();
        drop(journal);

        let mut bytes = fs::read(&scratch.path).unwrap();
        bytes[good_len as usize + HEADER_LEN + 2] ^= 0x10;
        fs::write(&scratch.path, &bytes).unwrap();

        let (journal, replay) = scratch.open(0);
        assert_eq!(replay.records, records(&[(1, "first")]));
        assert_eq!(replay.dropped_bytes, bytes.len() as u64 - good_len);
        assert_eq!(journal.last_seq(), 1);
    }

    #[test]
    fn absurd_length_is_treated_as_a_torn_tail() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        journal.append_batch(&["first"]).unwrap();
        let good_len = journal.len_bytes() as usize;
        journal.append_batch(&["second"]).unwrap();
        drop(journal);

        let mut bytes = fs::read(&scratch.path).unwrap();
        bytes[good_len..good_len + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        fs::write(&scratch.path, &bytes).unwrap();

        let (_, replay) = scratch.open(0);
        assert_eq!(replay.records, records(&[(1, "first")]));
        assert_eq!(replay.dropped_bytes, (bytes.len() - good_len) as u64);
        assert_eq!(scratch.file_len(), good_len as u64);
    }

    #[test]
    fn frame_whose_seq_does_not_increase_ends_the_replay() {
        let scratch = Scratch::new();
        let mut bytes = frame(1, b"a");
        bytes.extend(frame(2, b"b"));
        let good_len = bytes.len();
        bytes.extend(frame(2, b"again"));
        bytes.extend(frame(3, b"c"));
        fs::write(&scratch.path, &bytes).unwrap();

        let (journal, replay) = scratch.open(0);
        assert_eq!(replay.records, records(&[(1, "a"), (2, "b")]));
        assert_eq!(replay.dropped_bytes, (bytes.len() - good_len) as u64);
        assert_eq!(journal.last_seq(), 2);
    }

    #[test]
    fn empty_batch_writes_nothing() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        journal.append_batch(&["a"]).unwrap();
        let len = journal.len_bytes();
        let no_payloads: &[&[u8]] = &[];
        assert_eq!(
            journal.append_batch(no_payloads).unwrap(),
            Vec::<u64>::new()
        );
        assert_eq!((journal.last_seq(), journal.len_bytes()), (1, len));
        assert_eq!(scratch.file_len(), len);
    }

    #[test]
    fn oversized_payload_rejects_the_whole_batch() {
        let scratch = Scratch::new();
        let (mut journal, _) = scratch.open(0);
        let payloads = [b"fine".to_vec(), vec![0; MAX_PAYLOAD + 1]];
        let err = journal.append_batch(&payloads).unwrap_err();
        assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err:?}");
        assert_eq!((journal.last_seq(), scratch.file_len()), (0, 0));
        assert_eq!(journal.append_batch(&["next"]).unwrap(), [1]);
    }

    #[test]
    fn failed_write_poisons_the_journal_until_reopened() {
        let scratch = Scratch::new();
        let (journal, _) = scratch.open(0);
        // A read-only descriptor makes the next write fail.
        let mut journal = Journal {
            file: File::open(&scratch.path).unwrap(),
            ..journal
        };
        let err = journal.append_batch(&["a"]).unwrap_err();
        assert!(matches!(err, Error::Write { .. }), "{err:?}");
        let err = journal.append_batch(&["b"]).unwrap_err();
        assert!(matches!(err, Error::Poisoned { .. }), "{err:?}");
        assert!(matches!(journal.truncate(), Err(Error::Poisoned { .. })));
        drop(journal);

        let (mut journal, replay) = scratch.open(0);
        assert!(replay.records.is_empty());
        assert_eq!(journal.append_batch(&["c"]).unwrap(), [1]);
    }
}
