//! A parser for `/proc/self/mountinfo`, the kernel's mount table as this
//! process sees it (see proc_pid_mountinfo(5)).
//!
//! A line reads, for example:
//!
//! ```text
//! 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//! ```
//!
//! that is: mount id, parent id, major:minor, root, mount point, mount
//! options, zero or more optional fields, a `-` separator, file system type,
//! source and super options. The kernel escapes space, tab, newline and
//! backslash in these fields as octal (`\040`, `\011`, `\012`, `\134`).

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use crate::mount::{Error, Result};

/// Where the kernel publishes the mount table of the calling process.
pub(super) const PATH: &str = "/proc/self/mountinfo";

/// A propagation tag from the optional fields of a mountinfo line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PropagationTag {
    /// `shared:N`: the mount is in peer group N.
    Shared(u32),
    /// `master:N`: the mount is a slave of peer group N.
    Master(u32),
    /// `propagate_from:N`: the mount receives events from peer group N, the
    /// nearest dominant peer group this process can see.
    PropagateFrom(u32),
    /// `unbindable`: the mount cannot be bind mounted.
    Unbindable,
}

/// One mount, from one line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfoEntry {
    /// The unique id of the mount (it may be reused after an unmount).
    pub mount_id: u32,
    /// The id of the parent mount, or of the mount itself at the top of the
    /// tree.
    pub parent_id: u32,
    /// The major number of the device of the file system.
    pub major: u32,
    /// The minor number of the device of the file system.
    pub minor: u32,
    /// The directory of the file system that is the root of this mount; it
    /// is not `/` for a bind mount of a subdirectory.
    pub root: PathBuf,
    /// Where the mount is, relative to this process's root directory.
    pub mount_point: PathBuf,
    /// The per-mount options, such as `rw` or `nosuid`.
    pub mount_options: Vec<String>,
    /// The propagation tags; empty for a private mount. Optional fields that
    /// are not propagation tags are ignored, as proc_pid_mountinfo(5) asks.
    pub propagation: Vec<PropagationTag>,
    /// The file system type, such as `ext4` or `fuse.sshfs`.
    pub fs_type: String,
    /// The file system specific source, such as `/dev/vda` or `none`.
    pub source: String,
    /// The per-superblock options.
    pub super_options: Vec<String>,
}

impl MountInfoEntry {
    /// The peer group the mount shares events with, if it is shared.
    pub fn shared_peer_group(&self) -> Option<u32> {
        self.propagation.iter().find_map(|tag| match tag {
            PropagationTag::Shared(group) => Some(*group),
            _ => None,
        })
    }

    /// The peer group the mount receives events from, if it is a slave.
    pub fn master_peer_group(&self) -> Option<u32> {
        self.propagation.iter().find_map(|tag| match tag {
            PropagationTag::Master(group) => Some(*group),
            _ => None,
        })
    }

    /// Tells whether the mount is unbindable.
    pub fn is_unbindable(&self) -> bool {
        self.propagation.contains(&PropagationTag::Unbindable)
    }

    /// Tells whether the per-mount options include `option`.
    pub fn has_mount_option(&self, option: &str) -> bool {
        self.mount_options.iter().any(|o| o == option)
    }

    /// Tells whether the mount is read-only.
    pub fn is_read_only(&self) -> bool {
        self.has_mount_option("ro")
    }
}

/// The mount table of the calling process, in the kernel's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountInfo {
    entries: Vec<MountInfoEntry>,
}

impl MountInfo {
    /// Reads and parses `/proc/self/mountinfo`.
    pub fn read() -> Result<Self> {
        let bytes = fs::read(PATH).map_err(|err| Error::ReadMountInfo { err })?;
        Self::parse_bytes(&bytes)
    }

    /// Parses the text of a mountinfo file.
    pub fn parse(text: &str) -> Result<Self> {
        Self::parse_bytes(text.as_bytes())
    }

    /// Parses the bytes of a mountinfo file; paths need not be UTF-8.
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self> {
        let entries = bytes
            .split(|&b| b == b'\n')
            .enumerate()
            .filter(|(_, line)| !line.is_empty())
            .map(|(index, line)| {
                parse_line(line).map_err(|reason| Error::ParseMountInfo {
                    line: index + 1,
                    reason,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { entries })
    }

    /// The entries, in the kernel's order.
    pub fn entries(&self) -> &[MountInfoEntry] {
        &self.entries
    }

    /// The top mount at `mount_point`, the one a path lookup reaches.
    ///
    /// Mounts stacked at one mount point are each mounted on the one below,
    /// so the top is the one no other mount at that point has as parent.
    /// Should that not single one out, the last listed wins: the kernel
    /// lists mounts in the order they were made.
    pub fn get(&self, mount_point: &Path) -> Option<&MountInfoEntry> {
        let stack = || {
            self.entries
                .iter()
                .filter(|entry| entry.mount_point == mount_point)
        };
        let below_another = |entry: &MountInfoEntry| {
            stack()
                .any(|above| above.parent_id == entry.mount_id && above.mount_id != entry.mount_id)
        };
        stack()
            .rev()
            .find(|entry| !below_another(entry))
            .or_else(|| stack().next_back())
    }

    /// All mounts at `mount_point`, in the kernel's order.
    pub fn stack<'a>(
        &'a self,
        mount_point: &'a Path,
    ) -> impl Iterator<Item = &'a MountInfoEntry> + 'a {
        self.entries
            .iter()
            .filter(move |entry| entry.mount_point == mount_point)
    }

    /// The mounts at `path` or below it, in the kernel's order. Paths are
    /// compared by component, so `/a/bc` is not below `/a/b`.
    pub fn under<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = &'a MountInfoEntry> + 'a {
        self.entries
            .iter()
            .filter(move |entry| entry.mount_point.starts_with(path))
    }

    /// The mount with the id `mount_id`.
    pub fn by_id(&self, mount_id: u32) -> Option<&MountInfoEntry> {
        self.entries.iter().find(|entry| entry.mount_id == mount_id)
    }
}

impl<'a> IntoIterator for &'a MountInfo {
    type Item = &'a MountInfoEntry;
    type IntoIter = std::slice::Iter<'a, MountInfoEntry>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

/// Parses one line; the error is the reason, the caller adds the line
/// number.
fn parse_line(line: &[u8]) -> std::result::Result<MountInfoEntry, String> {
    let mut fields = line.split(|&b| b == b' ');
    let mut next = |name: &str| field(&mut fields, name);

    let mount_id = number(next("mount id")?, "mount id")?;
    let parent_id = number(next("parent id")?, "parent id")?;
    let device = next("major:minor")?;
    let (major, minor) = split_once(device, b':')
        .ok_or_else(|| format!("invalid major:minor {:?}", lossy(device)))?;
    let major = number(major, "major")?;
    let minor = number(minor, "minor")?;
    let root = path(next("root")?);
    let mount_point = path(next("mount point")?);
    let mount_options = options(next("mount options")?);

    let mut propagation = Vec::new();
    loop {
        let field = fields
            .next()
            .ok_or_else(|| "missing separator \"-\"".to_owned())?;
        if field == b"-" {
            break;
        }
        if let Some(tag) = propagation_tag(field)? {
            propagation.push(tag);
        }
    }

    let mut next = |name: &str| field(&mut fields, name);
    let fs_type = text(next("file system type")?);
    let source = text(next("source")?);
    let super_options = options(next("super options")?);
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected field {:?}", lossy(extra)));
    }

    Ok(MountInfoEntry {
        mount_id,
        parent_id,
        major,
        minor,
        root,
        mount_point,
        mount_options,
        propagation,
        fs_type,
        source,
        super_options,
    })
}

/// The next field, named `name` in the error if it is missing.
fn field<'a>(
    fields: &mut impl Iterator<Item = &'a [u8]>,
    name: &str,
) -> std::result::Result<&'a [u8], String> {
    fields
        .next()
        .ok_or_else(|| format!("missing field {name:?}"))
}

/// Parses an optional field; fields that are not propagation tags are
/// `None`.
fn propagation_tag(field: &[u8]) -> std::result::Result<Option<PropagationTag>, String> {
    if field == b"unbindable" {
        return Ok(Some(PropagationTag::Unbindable));
    }
    let Some((name, group)) = split_once(field, b':') else {
        return Ok(None);
    };
    let tag: fn(u32) -> PropagationTag = match name {
        b"shared" => PropagationTag::Shared,
        b"master" => PropagationTag::Master,
        b"propagate_from" => PropagationTag::PropagateFrom,
        _ => return Ok(None),
    };
    Ok(Some(tag(number(group, "peer group")?)))
}

fn split_once(field: &[u8], separator: u8) -> Option<(&[u8], &[u8])> {
    let at = field.iter().position(|&b| b == separator)?;
    Some((&field[..at], &field[at + 1..]))
}

fn number(field: &[u8], name: &str) -> std::result::Result<u32, String> {
    std::str::from_utf8(field)
        .ok()
        .filter(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(|| format!("invalid {name} {:?}", lossy(field)))
}

fn path(field: &[u8]) -> PathBuf {
    PathBuf::from(OsString::from_vec(unescape(field)))
}

fn text(field: &[u8]) -> String {
    String::from_utf8_lossy(&unescape(field)).into_owned()
}

/// Splits a comma-separated option list before decoding it, so that an
/// escaped comma (`\054`) stays inside its option.
fn options(field: &[u8]) -> Vec<String> {
    field.split(|&b| b == b',').map(text).collect()
}

fn lossy(field: &[u8]) -> String {
    String::from_utf8_lossy(field).into_owned()
}

/// Decodes the kernel's `\ooo` octal escapes; any other backslash is kept
/// as it is.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut rest = field;
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'\\' {
            if let Some(byte) = tail.get(..3).and_then(octal_byte) {
                out.push(byte);
                rest = &tail[3..];
                continue;
            }
        }
        out.push(first);
        rest = tail;
    }
    out
}

fn octal_byte(digits: &[u8]) -> Option<u8> {
    digits.iter().try_fold(0u8, |value, &digit| {
        if !(b'0'..=b'7').contains(&digit) {
            return None;
        }
        value.checked_mul(8)?.checked_add(digit - b'0')
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    /// Lines as a host's kernel prints them.
    const HOST: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard,resuid=65534
28 27 0:25 / /mnt/tools ro,nosuid,nodev,relatime - tmpfs tools_unavailable ro,size=4k,mode=755
";

    fn one(line: &str) -> MountInfoEntry {
        let info = MountInfo::parse(line).unwrap();
        assert_eq!(info.entries().len(), 1);
        info.entries()[0].clone()
    }

    fn parse_error(text: &str) -> (usize, String) {
        match MountInfo::parse(text) {
            Err(Error::ParseMountInfo { line, reason }) => (line, reason),
            other => panic!("expected a parse error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn parses_every_field_of_a_line_without_optional_fields() {
        let entry = one("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resuid=65534\n");
        let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let expected = MountInfoEntry {
            mount_id: 27,
            parent_id: 1,
            major: 254,
            minor: 0,
            root: PathBuf::from("/"),
            mount_point: PathBuf::from("/"),
            mount_options: strings(&["rw", "relatime"]),
            propagation: vec![],
            fs_type: "ext4".into(),
            source: "/dev/vda".into(),
            super_options: strings(&["rw", "discard", "resuid=65534"]),
        };
        assert_eq!(entry, expected);
        assert_eq!(entry.shared_peer_group(), None);
        assert_eq!(entry.master_peer_group(), None);
        assert!(!entry.is_read_only());
    }

    #[test]
    fn parses_the_example_of_the_manual_page() {
        let entry =
            one("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue");
        assert_eq!((entry.mount_id, entry.parent_id), (36, 35));
        assert_eq!((entry.major, entry.minor), (98, 0));
        assert_eq!(entry.root, Path::new("/mnt1"));
        assert_eq!(entry.mount_point, Path::new("/mnt2"));
        assert_eq!(entry.propagation, [PropagationTag::Master(1)]);
        assert_eq!(entry.master_peer_group(), Some(1));
        assert_eq!(entry.shared_peer_group(), None);
        assert_eq!(entry.super_options, ["rw", "errors=continue"]);
    }

    #[test]
    fn parses_shared_and_master_tags_together() {
        let entry = one(
            "612 27 254:0 /srv/vol /run/task/vol rw,relatime shared:1 master:2 - ext4 /dev/vda rw",
        );
        assert_eq!(
            entry.propagation,
            [PropagationTag::Shared(1), PropagationTag::Master(2)]
        );
        assert_eq!(entry.shared_peer_group(), Some(1));
        assert_eq!(entry.master_peer_group(), Some(2));
        assert!(!entry.is_unbindable());
    }

    #[test]
    fn parses_propagate_from_and_unbindable_and_ignores_unknown_optional_fields() {
        let entry = one(
            "80 60 0:50 / /a rw master:4 propagate_from:3 future:9 unbindable - tmpfs tmpfs rw",
        );
        assert_eq!(
            entry.propagation,
            [
                PropagationTag::Master(4),
                PropagationTag::PropagateFrom(3),
                PropagationTag::Unbindable,
            ]
        );
        assert!(entry.is_unbindable());
        assert_eq!(entry.fs_type, "tmpfs");
    }

    #[test]
    fn a_bind_mount_of_a_subdirectory_has_that_directory_as_root() {
        let entry = one(
            "612 27 254:0 /var/lib/csi/volumes/v1/data /run/tasks/t1/mnt/data ro,nosuid,relatime \
             - ext4 /dev/vda rw,discard",
        );
        assert_eq!(entry.root, Path::new("/var/lib/csi/volumes/v1/data"));
        assert_eq!(entry.mount_point, Path::new("/run/tasks/t1/mnt/data"));
        assert!(entry.is_read_only());
        assert!(entry.has_mount_option("nosuid"));
        assert!(!entry.has_mount_option("nodev"));
    }

    #[test]
    fn decodes_octal_escapes_in_paths_and_source() {
        let entry = one(
            r"90 27 254:0 /data/with\040space /mnt/a\040b\011c\012d\134e rw - fuse.my\040fs src\040dir rw,x=a\054b",
        );
        assert_eq!(entry.root, Path::new("/data/with space"));
        assert_eq!(entry.mount_point, Path::new("/mnt/a b\tc\nd\\e"));
        assert_eq!(entry.fs_type, "fuse.my fs");
        assert_eq!(entry.source, "src dir");
        assert_eq!(entry.super_options, ["rw", "x=a,b"]);
    }

    #[test]
    fn keeps_backslashes_that_are_not_octal_escapes() {
        assert_eq!(unescape(br"a\b"), br"a\b");
        assert_eq!(unescape(br"a\08"), br"a\08");
        assert_eq!(unescape(br"a\7"), br"a\7");
        assert_eq!(unescape(br"\400"), br"\400");
        assert_eq!(unescape(br"\377\000"), [0o377, 0]);
        assert_eq!(unescape(br"end\"), br"end\");
    }

    #[test]
    fn paths_need_not_be_utf8() {
        let info = MountInfo::parse_bytes(b"90 27 254:0 / /mnt/\xff\\040x rw - ext4 /dev/vda rw\n")
            .unwrap();
        assert_eq!(
            info.entries()[0].mount_point.as_os_str().as_bytes(),
            b"/mnt/\xff x"
        );
    }

    #[test]
    fn parses_several_lines_in_order() {
        let info = MountInfo::parse(HOST).unwrap();
        let points: Vec<_> = info.into_iter().map(|e| e.mount_point.clone()).collect();
        assert_eq!(points, ["/proc", "/", "/mnt/tools"].map(PathBuf::from));
        assert_eq!(info.by_id(27).unwrap().shared_peer_group(), Some(1));
        assert_eq!(info.by_id(28).unwrap().source, "tools_unavailable");
        assert!(info.by_id(99).is_none());
        assert!(MountInfo::parse("").unwrap().entries().is_empty());
    }

    #[test]
    fn get_returns_the_top_of_a_stack() {
        let text = "\
27 1 254:0 / / rw - ext4 /dev/vda rw
100 27 254:0 /a /mnt rw - ext4 /dev/vda rw
101 100 254:0 /b /mnt rw - ext4 /dev/vda rw
102 27 254:0 /c /other rw - ext4 /dev/vda rw
";
        let info = MountInfo::parse(text).unwrap();
        assert_eq!(info.get(Path::new("/mnt")).unwrap().mount_id, 101);
        assert_eq!(info.stack(Path::new("/mnt")).count(), 2);
        assert_eq!(info.get(Path::new("/other")).unwrap().root, Path::new("/c"));
        assert!(info.get(Path::new("/mn")).is_none());
        assert!(info.get(Path::new("/mnt/x")).is_none());
    }

    #[test]
    fn get_follows_parents_when_a_mount_was_made_beneath_another() {
        // Mount 101 was made later but beneath 100 (move_mount with
        // MOVE_MOUNT_BENEATH), so 100 is mounted on it and is the top.
        let text = "\
100 101 254:0 /a /mnt rw - ext4 /dev/vda rw
101 27 254:0 /b /mnt rw - ext4 /dev/vda rw
";
        let info = MountInfo::parse(text).unwrap();
        assert_eq!(info.get(Path::new("/mnt")).unwrap().mount_id, 100);
    }

    #[test]
    fn under_compares_whole_components() {
        let text = "\
1 1 0:1 / /a/b rw - tmpfs t rw
2 1 0:1 / /a/b/c rw - tmpfs t rw
3 1 0:1 / /a/bc rw - tmpfs t rw
4 1 0:1 / /a rw - tmpfs t rw
";
        let info = MountInfo::parse(text).unwrap();
        let ids: Vec<_> = info.under(Path::new("/a/b")).map(|e| e.mount_id).collect();
        assert_eq!(ids, [1, 2]);
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_its_number() {
        let good = "27 1 254:0 / / rw - ext4 /dev/vda rw\n";
        let cases = [
            (
                "27 1 254:0 / / rw ext4 /dev/vda rw",
                "missing separator \"-\"",
            ),
            (
                "x 1 254:0 / / rw - ext4 /dev/vda rw",
                "invalid mount id \"x\"",
            ),
            (
                "27 -1 254:0 / / rw - ext4 /dev/vda rw",
                "invalid parent id \"-1\"",
            ),
            (
                "27 1 254 / / rw - ext4 /dev/vda rw",
                "invalid major:minor \"254\"",
            ),
            (
                "27 1 254:a / / rw - ext4 /dev/vda rw",
                "invalid minor \"a\"",
            ),
            ("27 1 254:0 /", "missing field \"mount point\""),
            ("27 1 254:0 / / rw -", "missing field \"file system type\""),
            (
                "27 1 254:0 / / rw - ext4 /dev/vda",
                "missing field \"super options\"",
            ),
            (
                "27 1 254:0 / / rw - ext4 /dev/vda rw x",
                "unexpected field \"x\"",
            ),
            (
                "27 1 254:0 / / rw shared:x - ext4 /dev/vda rw",
                "invalid peer group \"x\"",
            ),
            (
                "27 1 254:0 / / rw master: - ext4 /dev/vda rw",
                "invalid peer group \"\"",
            ),
            (
                "99999999999 1 0:0 / / rw - a b c",
                "invalid mount id \"99999999999\"",
            ),
            ("27", "missing field \"parent id\""),
        ];
        for (bad, reason) in cases {
            let text = format!("{good}{good}{bad}\n{good}");
            assert_eq!(parse_error(&text), (3, reason.to_owned()), "{bad:?}");
        }
        assert_eq!(parse_error("garbage").0, 1, "lines count from 1");
    }
}
