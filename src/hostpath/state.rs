//! What the hostpath plugin remembers: its volumes (and what each was made
//! from), which node each is attached to, where it staged and published
//! them, and its snapshots.
//!
//! [`State`] is a view of some or all of it, as lines of text: where the
//! lines are kept (one small record file per volume and per snapshot) and
//! how the processes of a base dir take turns with them is
//! [`super::records`]'s. A restarted plugin reads them back and answers
//! repeat calls idempotently.
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
//! with the CO's name %-escaped. Lines of earlier versions, without kinds
//! or sources, still load; so does the single `state` file of earlier
//! versions, which [`super::records`] moves into records.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::record_key::Key;
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
    encode::percent_except(name, |b| b.is_ascii_graphic() && b != b'%')
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
    /// Loads the state file `path` of earlier versions, or an empty state
    /// if it does not exist.
    pub fn load(path: &Path) -> io::Result<State> {
        let mut state = State::default();
        match fs::read_to_string(path) {
            Ok(text) => state.parse(&text, path)?,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        Ok(state)
    }

    /// Adds the lines of `text`, read from `origin` (named in errors).
    pub(super) fn parse(&mut self, text: &str, origin: &Path) -> io::Result<()> {
        for (n, line) in text.lines().enumerate() {
            self.parse_line(line).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}:{}: bad line", origin.display(), n + 1),
                )
            })?;
        }
        Ok(())
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

    /// The lines of `key`'s record: a volume's own line and those of its
    /// stagings and publishes, or a snapshot's line; empty when nothing is
    /// recorded.
    pub(super) fn record_text(&self, key: &Key) -> String {
        let mut text = String::new();
        match key {
            Key::Volume(id) => {
                if let Some(v) = self.volumes.get(id) {
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
                for (path, s) in self.staged.iter().filter(|(_, s)| s.volume_id == *id) {
                    text.push_str(&format!(
                        "staged {id} {} {}\n",
                        s.capability,
                        path.display()
                    ));
                }
                for (path, (_, ro)) in self.published.iter().filter(|(_, (v, _))| v == id) {
                    text.push_str(&format!(
                        "published {id} {} {}\n",
                        u8::from(*ro),
                        path.display()
                    ));
                }
            }
            Key::Snapshot(id) => {
                if let Some(s) = self.snapshots.get(id) {
                    text.push_str(&format!(
                        "snapshot {id} {} {} {} {} {}\n",
                        s.source_volume_id,
                        s.size_bytes,
                        time_word(s.creation_time),
                        s.kind.as_str(),
                        escape_name(&s.name)
                    ));
                }
            }
        }
        text
    }

    /// The key of every record this state has lines for.
    pub(super) fn keys(&self) -> BTreeSet<Key> {
        let volumes = self.volumes.keys().cloned();
        let staged = self.staged.values().map(|s| s.volume_id.clone());
        let published = self.published.values().map(|(v, _)| v.clone());
        let snapshots = self.snapshots.keys().cloned().map(Key::Snapshot);
        order::set(
            volumes
                .chain(staged)
                .chain(published)
                .map(Key::Volume)
                .chain(snapshots),
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_through_its_records_with_spaces_in_paths() {
        let dir = std::env::temp_dir().join(format!("csi-agent-hp-state-{}", std::process::id()));
        let mut state = State::load(&dir.join("state")).unwrap();
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
        let mut loaded = State::default();
        for key in state.keys() {
            let text = state.record_text(&key);
            assert!(!text.is_empty(), "{key:?}");
            loaded.parse(&text, Path::new("record")).unwrap();
        }
        assert_eq!(loaded.volumes, state.volumes);
        assert_eq!(loaded.staged, state.staged);
        assert_eq!(loaded.published, state.published);
        assert_eq!(loaded.snapshots, state.snapshots);
        assert_eq!(
            loaded.in_use_on_node("v1"),
            Some(dir.join("stage dir").as_path())
        );
        assert_eq!(loaded.in_use_on_node("v2"), None);
    }

    #[test]
    fn a_volume_s_record_holds_its_stagings_and_publishes_only() {
        let mut state = State::default();
        let text = "volume v1 0 n1 0 dir\nvolume v2 0 - 0 dir\n\
                    staged v1 cap /s1\nstaged v2 cap /s2\n\
                    published v1 1 /t1\npublished v2 0 /t2\n";
        state.parse(text, Path::new("state")).unwrap();
        assert_eq!(
            state.record_text(&Key::Volume("v1".into())),
            "volume v1 0 n1 0 dir\nstaged v1 cap /s1\npublished v1 1 /t1\n"
        );
        assert_eq!(state.record_text(&Key::Volume("v3".into())), "");
        assert_eq!(state.record_text(&Key::Snapshot("v1".into())), "");
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
