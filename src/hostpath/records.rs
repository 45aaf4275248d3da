//! Where the hostpath plugin keeps its [state](super::state), and how the
//! threads and processes sharing a base dir take turns with it.
//!
//! One small record file per volume and per snapshot in
//! `<base-dir>/records/`: `volume-<id>` holds the volume's line and the
//! lines of its stagings and publishes, `snapshot-<id>` the snapshot's line
//! (IDs escaped into file names by [`Key::file_name`]). A call rewrites only
//! the records it changed, atomically (a temporary file, fsync, rename
//! over the record, fsync of the directory), and removes a record left
//! with no line. Nothing grows with the number of volumes but the
//! directory.
//!
//! A call locks the records it reads or changes ([`SharedState::lock`]):
//! an exclusive `flock` of `<base-dir>/locks/<record>` each, taken in the
//! order of their keys, so calls on different volumes do not wait for each
//! other, and two calls never wait for each other's locks. Each lock is an
//! open file of its own, so the threads of one process keep each other out
//! as processes do: a controller process and a node process of a split
//! plugin see each other's changes (the node the controller's attachments,
//! the controller the node's stagings). A lock file goes with its record,
//! removed by its holder before letting go; one who waited for it finds it
//! unlinked and opens the new one.
//!
//! Listing (ListVolumes, ListSnapshots, strict mode's view of a split
//! plugin) reads every record without locks ([`SharedState::read_all`]):
//! each record is whole at every moment.
//!
//! `<base-dir>/state.lock` guards the base dir as a whole: copies into the
//! scratch space are made under a shared lock of it, and a starting process
//! empties the scratch space, and moves the single `state` file of earlier
//! versions into records, under an exclusive one ([`SharedState::hold`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::record_key::Key;
use super::state::State;
use crate::sys::flock;

/// The records of one base dir, shared by the threads of this process and
/// by the other processes of the base dir.
pub struct SharedState {
    base_dir: PathBuf,
    records: PathBuf,
    locks: PathBuf,
}

/// Whether a [`SharedState::hold`] of the base dir keeps others out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// With other shared holders: a copy in the scratch space.
    Shared,
    /// Alone: emptying the scratch space, moving the old state file.
    Exclusive,
}

/// A hold of `state.lock`, released when dropped.
pub struct BaseDirHold {
    _file: File,
}

/// The records of some keys, read under their locks and held until
/// dropped; changes are written with [`StateGuard::save`] before it is.
pub struct StateGuard<'a> {
    shared: &'a SharedState,
    state: State,
    held: Vec<Held>,
}

/// One locked record: its lock file, open and locked, and its text as read
/// or last written (empty when there is no record).
struct Held {
    key: Key,
    /// Open, so locked, until dropped.
    _lock: File,
    written: String,
}

/// `err` with the path it is about.
fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |err| io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

impl SharedState {
    /// Opens the records of `base_dir`, moving the single state file of
    /// earlier versions into records first, and checks that they can be
    /// read.
    pub fn open(base_dir: &Path) -> io::Result<SharedState> {
        let shared = SharedState {
            base_dir: base_dir.to_path_buf(),
            records: base_dir.join("records"),
            locks: base_dir.join("locks"),
        };
        for dir in [&shared.records, &shared.locks] {
            fs::create_dir_all(dir).map_err(at(dir))?;
        }
        let hold = shared.hold(Hold::Exclusive)?;
        shared.migrate()?;
        drop(hold);
        shared.read_all()?;
        Ok(shared)
    }

    /// Holds the base dir's `state.lock`, shared or alone, until dropped.
    pub fn hold(&self, hold: Hold) -> io::Result<BaseDirHold> {
        let path = self.base_dir.join("state.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(at(&path))?;
        match hold {
            Hold::Shared => flock::lock_shared(&file),
            Hold::Exclusive => flock::lock_exclusive(&file),
        }
        .map_err(at(&path))?;
        Ok(BaseDirHold { _file: file })
    }

    /// The records of `keys` as their files have them now, each kept from
    /// every other user until the guard is dropped. Locks are taken in the
    /// order of the keys, whatever the order given.
    pub fn lock(&self, keys: &[Key]) -> io::Result<StateGuard<'_>> {
        let mut keys = keys.to_vec();
        order::sort(&mut keys);
        keys.dedup();
        let mut guard = StateGuard {
            shared: self,
            state: State::default(),
            held: Vec::with_capacity(keys.len()),
        };
        for key in keys {
            let lock = self.lock_file(&key)?;
            let path = self.records.join(key.file_name());
            match fs::read_to_string(&path) {
                Ok(text) => guard.state.parse(&text, &path)?,
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(at(&path)(err)),
            }
            let written = guard.state.record_text(&key);
            guard.held.push(Held {
                key,
                _lock: lock,
                written,
            });
        }
        Ok(guard)
    }

    /// Every record as its file has it now, without locks: for listing.
    pub fn read_all(&self) -> io::Result<State> {
        let mut state = State::default();
        for entry in fs::read_dir(&self.records).map_err(at(&self.records))? {
            let entry = entry.map_err(at(&self.records))?;
            if entry.file_name().as_encoded_bytes().starts_with(b".") {
                // A record being written.
                continue;
            }
            let path = entry.path();
            match fs::read_to_string(&path) {
                Ok(text) => state.parse(&text, &path)?,
                // Removed since the directory was read.
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(at(&path)(err)),
            }
        }
        Ok(state)
    }

    /// Opens and locks `key`'s lock file. A holder that removed it (its
    /// record went) let go of a file nobody else will open: then open the
    /// one there now.
    fn lock_file(&self, key: &Key) -> io::Result<File> {
        let path = self.locks.join(key.file_name());
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(at(&path))?;
            flock::lock_exclusive(&file).map_err(at(&path))?;
            let locked = file.metadata().map_err(at(&path))?;
            match fs::metadata(&path) {
                Ok(now) if (now.dev(), now.ino()) == (locked.dev(), locked.ino()) => {
                    return Ok(file)
                }
                Ok(_) => continue,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(at(&path)(err)),
            }
        }
    }

    /// Writes `key`'s record atomically, or removes it when `text` is
    /// empty; then syncs the directory.
    fn write_record(&self, key: &Key, text: &str) -> io::Result<()> {
        let name = key.file_name();
        let path = self.records.join(&name);
        if text.is_empty() {
            match fs::remove_file(&path) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(at(&path)(err)),
                _ => {}
            }
        } else {
            // Only the holder of the key's lock writes it: one name will do.
            let tmp = self.records.join(format!(".{name}.tmp"));
            let mut file = File::create(&tmp).map_err(at(&tmp))?;
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(at(&tmp))?;
            fs::rename(&tmp, &path).map_err(at(&path))?;
        }
        File::open(&self.records)
            .and_then(|dir| dir.sync_all())
            .map_err(at(&self.records))
    }

    /// Moves the single `state` file of earlier versions into records:
    /// each written, then the old file removed (a crash in between moves
    /// it again at the next start). Called under the exclusive hold, before
    /// any call is served.
    fn migrate(&self) -> io::Result<()> {
        let old = self.base_dir.join("state");
        if !old.exists() {
            return Ok(());
        }
        let state = State::load(&old).map_err(at(&old))?;
        let keys = state.keys();
        for key in &keys {
            self.write_record(key, &state.record_text(key))?;
        }
        fs::remove_file(&old).map_err(at(&old))?;
        let _ = fs::remove_file(self.base_dir.join("state.tmp"));
        File::open(&self.base_dir)
            .and_then(|dir| dir.sync_all())
            .map_err(at(&self.base_dir))?;
        log::info!(
            "Moved the state file {} into {} records in {}",
            old.display(),
            keys.len(),
            self.records.display()
        );
        Ok(())
    }
}

impl StateGuard<'_> {
    /// Writes the records of the guard's keys that changed.
    pub fn save(&mut self) -> io::Result<()> {
        for held in &mut self.held {
            let text = self.state.record_text(&held.key);
            if text != held.written {
                self.shared.write_record(&held.key, &text)?;
                held.written = text;
            }
        }
        Ok(())
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        for held in &self.held {
            if held.written.is_empty() {
                // No record: its lock goes too, while still held (see
                // `lock_file`). A lock left behind is only a file.
                let _ = fs::remove_file(self.shared.locks.join(held.key.file_name()));
            }
        }
        // The locks are let go as `held` drops, after this.
    }
}

impl Deref for StateGuard<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.state
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostpath::state::{Staged, VolumeKind, VolumeRecord};

    fn base_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "csi-agent-hp-records-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn volume(id: &str) -> Key {
        Key::Volume(id.into())
    }

    fn attached(node: &str) -> VolumeRecord {
        VolumeRecord {
            capacity_bytes: 0,
            attached: Some((node.into(), false)),
            kind: VolumeKind::Directory,
            content_source: None,
        }
    }

    /// Whether someone holds the lock of `key`.
    fn locked(dir: &Path, key: &Key) -> bool {
        match File::open(dir.join("locks").join(key.file_name())) {
            Ok(file) => !flock::try_lock_exclusive(&file).unwrap(),
            Err(_) => false,
        }
    }

    #[test]
    fn processes_sharing_a_base_dir_see_each_other_s_changes_under_the_volume_s_lock() {
        let dir = base_dir("shared");
        // Two opens stand for two processes.
        let controller = SharedState::open(&dir).unwrap();
        let node = SharedState::open(&dir).unwrap();
        {
            let mut state = controller.lock(&[volume("v1")]).unwrap();
            state.volumes.insert("v1".into(), attached("n1"));
            state.save().unwrap();
            // While one holds the volume, nobody else can take its lock.
            assert!(locked(&dir, &volume("v1")));
        }
        assert!(!locked(&dir, &volume("v1")));
        {
            let mut state = node.lock(&[volume("v1")]).unwrap();
            assert_eq!(state.volumes.get("v1"), Some(&attached("n1")));
            state.staged.insert(
                dir.join("staging"),
                Staged {
                    volume_id: "v1".into(),
                    capability: String::new(),
                },
            );
            state.save().unwrap();
        }
        let state = controller.lock(&[volume("v1")]).unwrap();
        assert_eq!(
            state.in_use_on_node("v1"),
            Some(dir.join("staging").as_path())
        );
        drop(state);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn calls_on_different_volumes_take_different_locks_and_files() {
        let dir = base_dir("apart");
        let shared = SharedState::open(&dir).unwrap();
        let mut one = shared.lock(&[volume("v1")]).unwrap();
        // Another thread or process takes v2 while v1 is held.
        let other = SharedState::open(&dir).unwrap();
        let mut two = other.lock(&[volume("v2")]).unwrap();
        two.volumes.insert("v2".into(), attached("n2"));
        two.save().unwrap();
        one.volumes.insert("v1".into(), attached("n1"));
        one.save().unwrap();
        assert!(locked(&dir, &volume("v1")) && locked(&dir, &volume("v2")));
        drop((one, two));
        let records = dir.join("records");
        assert_eq!(
            fs::read_to_string(records.join("volume-v1")).unwrap(),
            "volume v1 0 n1 0 dir\n"
        );
        assert_eq!(
            fs::read_to_string(records.join("volume-v2")).unwrap(),
            "volume v2 0 n2 0 dir\n"
        );
        let all = shared.read_all().unwrap();
        assert_eq!(all.volumes.len(), 2);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_record_left_empty_goes_with_its_lock() {
        let dir = base_dir("empty");
        let shared = SharedState::open(&dir).unwrap();
        let mut state = shared.lock(&[volume("v1")]).unwrap();
        state.volumes.insert("v1".into(), attached("n1"));
        state.save().unwrap();
        drop(state);
        assert!(dir.join("locks/volume-v1").exists());
        let mut state = shared.lock(&[volume("v1")]).unwrap();
        state.volumes.remove("v1");
        state.save().unwrap();
        drop(state);
        assert!(!dir.join("records/volume-v1").exists());
        assert!(!dir.join("locks/volume-v1").exists());
        // Looking at a volume that does not exist leaves nothing either.
        drop(shared.lock(&[volume("nothing")]).unwrap());
        assert_eq!(fs::read_dir(dir.join("locks")).unwrap().count(), 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_removed_while_waited_for_is_taken_again() {
        let dir = base_dir("waited");
        let shared = std::sync::Arc::new(SharedState::open(&dir).unwrap());
        let mut held = shared.lock(&[volume("v1")]).unwrap();
        held.volumes.insert("v1".into(), attached("n1"));
        held.save().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut state = shared.lock(&[volume("v1")]).unwrap();
                tx.send(state.volumes.get("v1").cloned()).unwrap();
                state.volumes.insert("v1".into(), attached("n2"));
                state.save().unwrap();
            })
        };
        // Until `held` goes the waiter has nothing; then the record is gone
        // and its lock with it.
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(50))
            .is_err());
        held.volumes.remove("v1");
        held.save().unwrap();
        drop(held);
        assert_eq!(rx.recv().unwrap(), None);
        waiter.join().unwrap();
        // The waiter's lock is the file now there, and its record is kept.
        assert!(dir.join("locks/volume-v1").exists());
        let state = shared.lock(&[volume("v1")]).unwrap();
        assert_eq!(state.volumes.get("v1"), Some(&attached("n2")));
        drop(state);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_state_file_of_earlier_versions_moves_into_records() {
        let dir = base_dir("migrate");
        fs::write(
            dir.join("state"),
            "volume v1 1048576 n1 0 dir\nvolume data[0] 0 - 0 block\n\
             staged v1 single-node-writer/file-system/ /s p\npublished v1 1 /t\n\
             snapshot s1 v1 1048576 1700000000.000000001 dir a%20name\n",
        )
        .unwrap();
        let before = State::load(&dir.join("state")).unwrap();
        let shared = SharedState::open(&dir).unwrap();
        assert!(!dir.join("state").exists(), "the old file is gone");
        let mut names: Vec<String> = fs::read_dir(dir.join("records"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["snapshot-s1", "volume-data%5B0%5D", "volume-v1"]);
        let after = shared.read_all().unwrap();
        assert_eq!(after.volumes, before.volumes);
        assert_eq!(after.staged, before.staged);
        assert_eq!(after.published, before.published);
        assert_eq!(after.snapshots, before.snapshots);
        let v1 = shared.lock(&[volume("v1")]).unwrap();
        assert_eq!(v1.in_use_on_node("v1"), Some(Path::new("/s p")));
        drop(v1);
        // Opening again finds nothing more to move.
        drop(SharedState::open(&dir).unwrap());
        assert_eq!(shared.read_all().unwrap().volumes.len(), 2);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn record_names_are_safe_file_names() {
        assert_eq!(volume("v-1_x").file_name(), "volume-v-1_x");
        assert_eq!(volume("../x").file_name(), "volume-%2E%2E%2Fx");
        assert_eq!(
            Key::Snapshot("[h]ab".into()).file_name(),
            "snapshot-%5Bh%5Dab"
        );
        let long = volume(&"/".repeat(128)).file_name();
        assert!(long.len() <= 200 && long.starts_with("volume-%h"), "{long}");
        assert_ne!(long, volume(&"/".repeat(127)).file_name());
    }
}
