//! What the hostpath plugin remembers: its volumes (and what each was made
//! from), which node each is attached to, where it staged and published
//! them, and its snapshots.
//!
//! Kept in one small text file under the base dir, rewritten atomically on
//! every change, so a restarted plugin answers repeat calls idempotently.
//! The file is the truth, not a copy in memory: a controller process and a
//! node process (`-mode controller`, `-mode node`) of one base dir share it
//! (the node checks the controller's attachments, the controller the node's
//! stagings), so every use reads it again under an exclusive `flock` of
//! `state.lock` and writes it before letting go ([`SharedState`]); neither
//! process loses the other's changes.
//! A file-system volume's data lives in `<base-dir>/volumes/<id>/`, a block
//! volume's in the file `<base-dir>/block/<id>.img`, a snapshot's in
//! `<base-dir>/snapshots/<id>/` (see `snapshots.rs`). Which loop
//! devices show a block volume is not recorded: the kernel says (see
//! [`crate::sys::loop_dev::find`]).
//!
//! One line per record: `volume <id> <capacity> <node|-> <ro> <kind>
//! [<source>]` (the source `snapshot:<id>` or `volume:<id>`),
//! `staged <volume> <capability> <path>`, `published <volume> <ro> <path>`,
//! `snapshot <id> <source volume> <size> <secs>.<nanos> <kind> <name>`
//! with the CO's name %-escaped. Files of earlier versions, without kinds
//! or sources, still load.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sys::flock;

use crate::csi::model::{AttachmentMode, Capability};
use crate::csi::types::ContentSource;

/// What a volume is made of, chosen by CreateVolume's capabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VolumeKind {
    /// A directory, for `mount` capabilities.
    #[default]
    Directory,
    /// A sparse file attached to loop devices, for `block` capabilities.
    Block,
}

impl VolumeKind {
    fn as_str(self) -> &'static str {
        match self {
            VolumeKind::Directory => "dir",
            VolumeKind::Block => "block",
        }
    }

    fn parse(word: &str) -> Option<VolumeKind> {
        match word {
            "dir" => Some(VolumeKind::Directory),
            "block" => Some(VolumeKind::Block),
            _ => None,
        }
    }

    /// The access type of the capabilities the volume serves.
    pub fn attachment(self) -> &'static str {
        match self {
            VolumeKind::Directory => "file-system",
            VolumeKind::Block => "block-device",
        }
    }

    /// The kind of volume that serves capabilities of `mode`.
    pub fn serving(mode: AttachmentMode) -> VolumeKind {
        match mode {
            AttachmentMode::FileSystem => VolumeKind::Directory,
            AttachmentMode::BlockDevice => VolumeKind::Block,
        }
    }

    /// The kind of volume that serves `caps`: a directory for file-system
    /// capabilities, a block volume for block-device ones, never both.
    pub fn for_capabilities(caps: &[Capability]) -> Result<VolumeKind, String> {
        let mut kinds = caps.iter().map(|c| VolumeKind::serving(c.attachment_mode));
        let first = kinds.next().unwrap_or_default();
        if kinds.any(|k| k != first) {
            return Err(
                "a hostpath volume is a directory or a block device: file-system and \
                        block-device capabilities cannot be mixed"
                    .to_string(),
            );
        }
        Ok(first)
    }

    /// Whether volume `id`, of this kind, serves `caps`; why not if not.
    pub fn check_serves(self, id: &str, caps: &[Capability]) -> Result<(), String> {
        match VolumeKind::for_capabilities(caps)? {
            wanted if wanted == self => Ok(()),
            wanted => Err(format!(
                "volume {id} is a {} volume: {} is not supported for it",
                self.attachment(),
                wanted.attachment()
            )),
        }
    }
}

/// A volume the plugin created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeRecord {
    pub capacity_bytes: i64,
    /// The node it is attached to by ControllerPublishVolume, and read-only.
    pub attached: Option<(String, bool)>,
    pub kind: VolumeKind,
    /// The snapshot or volume its contents were copied from.
    pub content_source: Option<ContentSource>,
}

/// A snapshot the plugin took: a copy of a volume at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRecord {
    /// The CO's name for it, from which its ID is derived.
    pub name: String,
    pub source_volume_id: String,
    /// The source volume's capacity when the snapshot was taken: a volume
    /// made from the snapshot is at least this large.
    pub size_bytes: i64,
    pub creation_time: SystemTime,
    /// The kind of the source volume, and of volumes made from it.
    pub kind: VolumeKind,
}

/// A staging the plugin did: which volume, and the capability it was staged
/// with (`mode/attachment/fs_type`; never the flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staged {
    pub volume_id: String,
    pub capability: String,
}

#[derive(Debug, Default)]
pub struct State {
    path: PathBuf,
    pub volumes: BTreeMap<String, VolumeRecord>,
    pub staged: BTreeMap<PathBuf, Staged>,
    /// Target path → (volume, read-only).
    pub published: BTreeMap<PathBuf, (String, bool)>,
    /// Snapshot ID → snapshot.
    pub snapshots: BTreeMap<String, SnapshotRecord>,
}

fn source_word(source: &ContentSource) -> String {
    match source {
        ContentSource::Snapshot(id) => format!("snapshot:{id}"),
        ContentSource::Volume(id) => format!("volume:{id}"),
    }
}

fn parse_source(word: &str) -> Option<ContentSource> {
    match word.split_once(':')? {
        ("snapshot", id) if !id.is_empty() => Some(ContentSource::Snapshot(id.to_string())),
        ("volume", id) if !id.is_empty() => Some(ContentSource::Volume(id.to_string())),
        _ => None,
    }
}

/// A CO's name as one word of the state file: printable ASCII but `%` as
/// is, every other byte `%XX`.
fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_graphic() && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn unescape_name(word: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(word.len());
    let mut rest = word.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

fn time_word(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:09}", since.as_secs(), since.subsec_nanos())
}

fn parse_time(word: &str) -> Option<SystemTime> {
    let (secs, nanos) = word.split_once('.')?;
    let since = Duration::new(secs.parse().ok()?, nanos.parse().ok()?);
    UNIX_EPOCH.checked_add(since)
}

impl State {
    /// Loads `path`, or starts empty if it does not exist.
    pub fn load(path: &Path) -> io::Result<State> {
        let mut state = State {
            path: path.to_path_buf(),
            ..State::default()
        };
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(state),
            Err(err) => return Err(err),
        };
        for (n, line) in text.lines().enumerate() {
            state.parse_line(line).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}:{}: bad line", path.display(), n + 1),
                )
            })?;
        }
        Ok(state)
    }

    fn parse_line(&mut self, line: &str) -> Option<()> {
        let (kind, rest) = line.split_once(' ')?;
        match kind {
            "volume" => {
                let mut words = rest.split(' ');
                let id = words.next()?.to_string();
                let capacity_bytes = words.next()?.parse().ok()?;
                let node = words.next()?;
                let ro = words.next()? == "1";
                let attached = (node != "-").then(|| (node.to_string(), ro));
                // Files written before block volumes have no kind, and
                // those before clones no source.
                let kind = match words.next() {
                    None => VolumeKind::Directory,
                    Some(word) => VolumeKind::parse(word)?,
                };
                let content_source = match words.next() {
                    None => None,
                    Some(word) => Some(parse_source(word)?),
                };
                self.volumes.insert(
                    id,
                    VolumeRecord {
                        capacity_bytes,
                        attached,
                        kind,
                        content_source,
                    },
                );
            }
            "snapshot" => {
                let mut words = rest.split(' ');
                let id = words.next()?.to_string();
                let record = SnapshotRecord {
                    source_volume_id: words.next()?.to_string(),
                    size_bytes: words.next()?.parse().ok()?,
                    creation_time: parse_time(words.next()?)?,
                    kind: VolumeKind::parse(words.next()?)?,
                    name: unescape_name(words.next()?)?,
                };
                if words.next().is_some() {
                    return None;
                }
                self.snapshots.insert(id, record);
            }
            "staged" => {
                let mut words = rest.splitn(3, ' ');
                let volume_id = words.next()?.to_string();
                let capability = words.next()?.to_string();
                self.staged.insert(
                    PathBuf::from(words.next()?),
                    Staged {
                        volume_id,
                        capability,
                    },
                );
            }
            "published" => {
                let mut words = rest.splitn(3, ' ');
                let volume_id = words.next()?.to_string();
                let ro = words.next()? == "1";
                self.published
                    .insert(PathBuf::from(words.next()?), (volume_id, ro));
            }
            _ => return None,
        }
        Some(())
    }

    /// Writes the state to a temporary file, fsyncs and renames it over the
    /// old one.
    pub fn save(&self) -> io::Result<()> {
        let mut text = String::new();
        for (id, v) in &self.volumes {
            let (node, ro) = match &v.attached {
                Some((node, ro)) => (node.as_str(), *ro),
                None => ("-", false),
            };
            text.push_str(&format!(
                "volume {id} {} {node} {} {}",
                v.capacity_bytes,
                u8::from(ro),
                v.kind.as_str()
            ));
            if let Some(source) = &v.content_source {
                text.push(' ');
                text.push_str(&source_word(source));
            }
            text.push('\n');
        }
        for (path, s) in &self.staged {
            text.push_str(&format!(
                "staged {} {} {}\n",
                s.volume_id,
                s.capability,
                path.display()
            ));
        }
        for (path, (id, ro)) in &self.published {
            text.push_str(&format!(
                "published {id} {} {}\n",
                u8::from(*ro),
                path.display()
            ));
        }
        for (id, s) in &self.snapshots {
            text.push_str(&format!(
                "snapshot {id} {} {} {} {} {}\n",
                s.source_volume_id,
                s.size_bytes,
                time_word(s.creation_time),
                s.kind.as_str(),
                escape_name(&s.name)
            ));
        }
        let tmp = self.path.with_extension("tmp");
        let mut file = fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, &self.path)
    }

    /// True if a staging or publish of `volume_id` is still recorded.
    pub fn in_use_on_node(&self, volume_id: &str) -> Option<&Path> {
        self.staged
            .iter()
            .find(|(_, s)| s.volume_id == volume_id)
            .map(|(p, _)| p.as_path())
            .or_else(|| {
                self.published
                    .iter()
                    .find(|(_, (v, _))| v == volume_id)
                    .map(|(p, _)| p.as_path())
            })
    }
}

/// The state file, shared by the threads of this process and by the other
/// processes of the base dir.
pub struct SharedState {
    path: PathBuf,
    /// `state.lock`, open for the life of the process: its `flock` keeps
    /// the other processes out.
    lock: File,
    /// Keeps the other threads of this process out: they would share the
    /// open file's lock.
    threads: Mutex<()>,
}

/// The state, read under the locks and held until dropped; changes are
/// written with [`State::save`] before it is.
pub struct StateGuard<'a> {
    state: State,
    // Fields drop in order: the other processes' lock goes before the
    // threads' one.
    _file: FileLock<'a>,
    _threads: MutexGuard<'a, ()>,
}

/// The `flock` of `state.lock`, released when dropped.
struct FileLock<'a>(&'a File);

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        if let Err(err) = flock::unlock(self.0) {
            // Closing the file at exit releases it anyway.
            log::error!("cannot unlock the state: {err}");
        }
    }
}

impl SharedState {
    /// Opens the state of `base_dir` (`state`, locked through
    /// `state.lock`), checking that it can be read.
    pub fn open(base_dir: &Path) -> io::Result<SharedState> {
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(base_dir.join("state.lock"))?;
        let shared = SharedState {
            path: base_dir.join("state"),
            lock,
            threads: Mutex::new(()),
        };
        drop(shared.lock()?);
        Ok(shared)
    }

    /// The state as the file has it now, with every other user of it kept
    /// out until the guard is dropped.
    pub fn lock(&self) -> io::Result<StateGuard<'_>> {
        let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        flock::lock_exclusive(&self.lock)?;
        // A failed load releases the lock as the guard drops.
        let file = FileLock(&self.lock);
        Ok(StateGuard {
            state: State::load(&self.path)?,
            _file: file,
            _threads: threads,
        })
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

    #[test]
    fn state_round_trips_through_its_file_with_spaces_in_paths() {
        let dir = std::env::temp_dir().join(format!("csi-agent-hp-state-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state");
        let mut state = State::load(&path).unwrap();
        assert!(state.volumes.is_empty());
        state.volumes.insert(
            "v1".into(),
            VolumeRecord {
                capacity_bytes: 42,
                attached: Some(("n1".into(), true)),
                kind: VolumeKind::Block,
                content_source: None,
            },
        );
        state.volumes.insert(
            "v2".into(),
            VolumeRecord {
                capacity_bytes: 0,
                attached: None,
                kind: VolumeKind::Directory,
                content_source: Some(ContentSource::Snapshot("s[1]".into())),
            },
        );
        state.volumes.insert(
            "v3".into(),
            VolumeRecord {
                capacity_bytes: 7,
                attached: None,
                kind: VolumeKind::Block,
                content_source: Some(ContentSource::Volume("v1".into())),
            },
        );
        state.snapshots.insert(
            "s[1]".into(),
            SnapshotRecord {
                name: "a name with spaces, 100% \n and ünïcode".into(),
                source_volume_id: "v2".into(),
                size_bytes: 1 << 20,
                creation_time: UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789),
                kind: VolumeKind::Directory,
            },
        );
        state.staged.insert(
            dir.join("stage dir"),
            Staged {
                volume_id: "v1".into(),
                capability: "single-node-writer/file-system/".into(),
            },
        );
        state
            .published
            .insert(dir.join("tar get"), ("v1".into(), true));
        state.save().unwrap();
        let loaded = State::load(&path).unwrap();
        assert_eq!(loaded.volumes, state.volumes);
        assert_eq!(loaded.staged, state.staged);
        assert_eq!(loaded.published, state.published);
        assert_eq!(loaded.snapshots, state.snapshots);
        assert_eq!(
            loaded.in_use_on_node("v1"),
            Some(dir.join("stage dir").as_path())
        );
        assert_eq!(loaded.in_use_on_node("v2"), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn processes_sharing_a_base_dir_see_each_other_s_changes_under_one_lock() {
        let dir = std::env::temp_dir().join(format!("csi-agent-hp-shared-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        // Two opens stand for two processes: each has its own lock holder.
        let controller = SharedState::open(&dir).unwrap();
        let node = SharedState::open(&dir).unwrap();
        let record = VolumeRecord {
            capacity_bytes: 0,
            attached: Some(("n1".into(), false)),
            kind: VolumeKind::Directory,
            content_source: None,
        };
        {
            let mut state = controller.lock().unwrap();
            state.volumes.insert("v1".into(), record.clone());
            state.save().unwrap();
            // While one holds the state, nobody else can take its lock.
            let other = File::open(dir.join("state.lock")).unwrap();
            assert!(!flock::try_lock_exclusive(&other).unwrap());
        }
        {
            let mut state = node.lock().unwrap();
            assert_eq!(state.volumes.get("v1"), Some(&record));
            state.staged.insert(
                dir.join("staging"),
                Staged {
                    volume_id: "v1".into(),
                    capability: String::new(),
                },
            );
            state.save().unwrap();
        }
        let state = controller.lock().unwrap();
        assert_eq!(
            state.in_use_on_node("v1"),
            Some(dir.join("staging").as_path())
        );
        assert_eq!(state.volumes.len(), 1);
        drop(state);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_volume_is_of_one_kind_for_all_its_capabilities() {
        use crate::csi::model::AccessMode;
        let mount = Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::FileSystem);
        let block = Capability::new(AccessMode::MultiNodeReaderOnly, AttachmentMode::BlockDevice);
        assert_eq!(
            VolumeKind::for_capabilities(&[block.clone(), block.clone()]),
            Ok(VolumeKind::Block)
        );
        assert_eq!(
            VolumeKind::for_capabilities(std::slice::from_ref(&mount)),
            Ok(VolumeKind::Directory)
        );
        assert!(VolumeKind::for_capabilities(&[mount.clone(), block.clone()]).is_err());
        assert_eq!(
            VolumeKind::Block.check_serves("b", &[mount]),
            Err("volume b is a block-device volume: file-system is not supported for it".into())
        );
        assert_eq!(VolumeKind::Block.check_serves("b", &[block]), Ok(()));
    }

    #[test]
    fn a_state_written_before_block_volumes_loads_as_directories() {
        let dir = std::env::temp_dir().join(format!("csi-agent-hp-old-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state");
        fs::write(&path, "volume v1 1048576 n1 0\nvolume v2 0 - 0\n").unwrap();
        let loaded = State::load(&path).unwrap();
        assert_eq!(loaded.volumes.len(), 2);
        assert!(loaded
            .volumes
            .values()
            .all(|v| v.kind == VolumeKind::Directory));
        assert_eq!(
            loaded.volumes["v1"].attached,
            Some(("n1".to_string(), false))
        );
        assert!(loaded.volumes.values().all(|v| v.content_source.is_none()));
        for bad in [
            "volume v1 0 - 0 tape\n",
            "volume v1 0 - 0 dir image:x\n",
            "snapshot s v 0 12.5 dir\n",
            "snapshot s v 0 12 dir n\n",
            "snapshot s v 0 1.0 dir bad%zz\n",
        ] {
            fs::write(&path, bad).unwrap();
            assert!(State::load(&path).is_err(), "{bad:?}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
