//! The volume capability model: what a workload asks of a volume.
//!
//! These are csi-agent's own types for the CSI `VolumeCapability` and the
//! secrets that travel with volume RPCs. Every user-facing string (HCL, CLI,
//! status output) is the kebab-case form Nomad uses. Mount flags and secret
//! values may carry credentials (`password=...` is a real NFS/CIFS flag), so
//! their `Debug` and `Display` print `[REDACTED]`; the raw values are only
//! reachable through explicit accessors used when building an RPC.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// What `Debug`, `Display`, logs and CLI output print instead of a secret.
pub const REDACTED: &str = "[REDACTED]";

/// A CSI access mode (`VolumeCapability.AccessMode.Mode`), all seven of v1.12.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccessMode {
    SingleNodeWriter,
    SingleNodeReaderOnly,
    MultiNodeReaderOnly,
    MultiNodeSingleWriter,
    MultiNodeMultiWriter,
    SingleNodeSingleWriter,
    SingleNodeMultiWriter,
}

impl AccessMode {
    pub const ALL: [AccessMode; 7] = [
        AccessMode::SingleNodeReaderOnly,
        AccessMode::SingleNodeWriter,
        AccessMode::SingleNodeSingleWriter,
        AccessMode::SingleNodeMultiWriter,
        AccessMode::MultiNodeReaderOnly,
        AccessMode::MultiNodeSingleWriter,
        AccessMode::MultiNodeMultiWriter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::SingleNodeWriter => "single-node-writer",
            AccessMode::SingleNodeReaderOnly => "single-node-reader-only",
            AccessMode::MultiNodeReaderOnly => "multi-node-reader-only",
            AccessMode::MultiNodeSingleWriter => "multi-node-single-writer",
            AccessMode::MultiNodeMultiWriter => "multi-node-multi-writer",
            AccessMode::SingleNodeSingleWriter => "single-node-single-writer",
            AccessMode::SingleNodeMultiWriter => "single-node-multi-writer",
        }
    }

    /// The CSI wire number of this mode.
    pub fn number(self) -> i32 {
        match self {
            AccessMode::SingleNodeWriter => 1,
            AccessMode::SingleNodeReaderOnly => 2,
            AccessMode::MultiNodeReaderOnly => 3,
            AccessMode::MultiNodeSingleWriter => 4,
            AccessMode::MultiNodeMultiWriter => 5,
            AccessMode::SingleNodeSingleWriter => 6,
            AccessMode::SingleNodeMultiWriter => 7,
        }
    }

    /// The mode for a CSI wire number; `None` for UNKNOWN (0) and numbers
    /// this version of the spec does not define.
    pub fn from_number(n: i32) -> Option<AccessMode> {
        AccessMode::ALL.into_iter().find(|m| m.number() == n)
    }

    /// True for the modes that admit no writer at all.
    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            AccessMode::SingleNodeReaderOnly | AccessMode::MultiNodeReaderOnly
        )
    }

    /// True for the modes that need the node's SINGLE_NODE_MULTI_WRITER
    /// capability (CSI 1.5); plugins without it still accept
    /// single-node-writer.
    pub fn needs_single_node_multi_writer(self) -> bool {
        matches!(
            self,
            AccessMode::SingleNodeSingleWriter | AccessMode::SingleNodeMultiWriter
        )
    }
}

impl fmt::Display for AccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AccessMode {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        AccessMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| ParseError::new("access mode", s, AccessMode::ALL.map(|m| m.as_str())))
    }
}

/// How the workload reaches the volume: a mounted file system or a raw block
/// device (the `access_type` oneof of `VolumeCapability`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttachmentMode {
    FileSystem,
    BlockDevice,
}

impl AttachmentMode {
    pub const ALL: [AttachmentMode; 2] = [AttachmentMode::FileSystem, AttachmentMode::BlockDevice];

    pub fn as_str(self) -> &'static str {
        match self {
            AttachmentMode::FileSystem => "file-system",
            AttachmentMode::BlockDevice => "block-device",
        }
    }
}

impl fmt::Display for AttachmentMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttachmentMode {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        AttachmentMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                ParseError::new(
                    "attachment mode",
                    s,
                    AttachmentMode::ALL.map(|m| m.as_str()),
                )
            })
    }
}

/// Mount flags for a file-system volume. They may hold credentials, so they
/// never print; [`MountFlags::expose`] hands them to the RPC builder.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct MountFlags(Vec<String>);

impl MountFlags {
    pub fn new(flags: Vec<String>) -> MountFlags {
        MountFlags(flags)
    }

    /// The raw flags, for building a CSI request. Never print these.
    pub fn expose(&self) -> &[String] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if every flag of `self` is also in `other`.
    pub fn is_subset_of(&self, other: &MountFlags) -> bool {
        self.0.iter().all(|f| other.0.contains(f))
    }
}

impl fmt::Debug for MountFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for MountFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("[]")
        } else {
            f.write_str(REDACTED)
        }
    }
}

/// `mount_options { fs_type, mount_flags }` of a file-system volume, and
/// the group a NodeStage or NodePublish asks the mount to be owned by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MountOptions {
    /// The file system type; empty means "the plugin's default".
    pub fs_type: String,
    pub mount_flags: MountFlags,
    /// CSI 1.5's `MountVolume.volume_mount_group` (a GID), for a node with
    /// VOLUME_MOUNT_GROUP; empty for none. Only NodeStage and NodePublish
    /// carry it.
    pub volume_mount_group: String,
}

impl MountOptions {
    pub fn is_empty(&self) -> bool {
        self.fs_type.is_empty() && self.mount_flags.is_empty() && self.volume_mount_group.is_empty()
    }

    /// Options of `self`, with each field that is set in `overrides`
    /// replaced (a claim's options override the volume's, as in Nomad).
    pub fn merged_with(&self, overrides: &MountOptions) -> MountOptions {
        MountOptions {
            fs_type: if overrides.fs_type.is_empty() {
                self.fs_type.clone()
            } else {
                overrides.fs_type.clone()
            },
            mount_flags: if overrides.mount_flags.is_empty() {
                self.mount_flags.clone()
            } else {
                overrides.mount_flags.clone()
            },
            volume_mount_group: if overrides.volume_mount_group.is_empty() {
                self.volume_mount_group.clone()
            } else {
                overrides.volume_mount_group.clone()
            },
        }
    }
}

impl fmt::Display for MountOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fs_type = if self.fs_type.is_empty() {
            "default"
        } else {
            &self.fs_type
        };
        write!(f, "fs_type={fs_type} mount_flags={}", self.mount_flags)?;
        if !self.volume_mount_group.is_empty() {
            write!(f, " volume_mount_group={}", self.volume_mount_group)?;
        }
        Ok(())
    }
}

/// One volume capability: access mode, attachment mode, and for file-system
/// volumes the mount options.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Capability {
    pub access_mode: AccessMode,
    pub attachment_mode: AttachmentMode,
    /// Only meaningful for [`AttachmentMode::FileSystem`]; always empty for
    /// block devices.
    pub mount_options: MountOptions,
}

impl Capability {
    pub fn new(access_mode: AccessMode, attachment_mode: AttachmentMode) -> Capability {
        Capability {
            access_mode,
            attachment_mode,
            mount_options: MountOptions::default(),
        }
    }

    pub fn with_mount_options(mut self, mount_options: MountOptions) -> Capability {
        self.mount_options = mount_options;
        self
    }

    /// Nomad's "usage" name for this capability, used as a path component
    /// and to count stagings: `rw-file-system-single-node-writer`.
    pub fn usage_name(&self, read_only: bool) -> String {
        let rw = if read_only { "ro" } else { "rw" };
        format!("{rw}-{}-{}", self.attachment_mode, self.access_mode)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.access_mode, self.attachment_mode)?;
        if !self.mount_options.is_empty() {
            write!(f, " ({})", self.mount_options)?;
        }
        Ok(())
    }
}

/// Secrets sent to the plugin with the RPCs that take them. Keys print,
/// values never do.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(BTreeMap<String, String>);

impl Secrets {
    pub fn new() -> Secrets {
        Secrets::default()
    }

    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The raw key/value pairs, for building a CSI request. Never print
    /// the values.
    pub fn expose(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl FromIterator<(String, String)> for Secrets {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Secrets {
        Secrets(iter.into_iter().collect())
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, key) in self.0.keys().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{key}: {REDACTED}")?;
        }
        f.write_str("}")
    }
}

/// A user string that names none of the accepted values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub what: &'static str,
    pub value: String,
    pub accepted: Vec<&'static str>,
}

impl ParseError {
    fn new<const N: usize>(
        what: &'static str,
        value: &str,
        accepted: [&'static str; N],
    ) -> ParseError {
        ParseError {
            what,
            value: value.to_string(),
            accepted: accepted.to_vec(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} {:?} (expected one of: {})",
            self.what,
            self.value,
            self.accepted.join(", ")
        )
    }
}

impl std::error::Error for ParseError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_modes_round_trip_through_their_user_strings() {
        for mode in AccessMode::ALL {
            assert_eq!(mode.as_str().parse::<AccessMode>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.as_str());
        }
    }

    #[test]
    fn access_modes_round_trip_through_their_wire_numbers() {
        let numbers: Vec<i32> = AccessMode::ALL.iter().map(|m| m.number()).collect();
        let mut sorted = numbers.clone();
        sorted.sort();
        assert_eq!(sorted, vec![1, 2, 3, 4, 5, 6, 7]);
        for mode in AccessMode::ALL {
            assert_eq!(AccessMode::from_number(mode.number()), Some(mode));
        }
        assert_eq!(AccessMode::from_number(0), None);
        assert_eq!(AccessMode::from_number(8), None);
    }

    #[test]
    fn unknown_access_mode_names_the_accepted_values() {
        let err = "single-writer".parse::<AccessMode>().unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("unknown access mode \"single-writer\""),
            "{text}"
        );
        assert!(text.contains("multi-node-multi-writer"), "{text}");
    }

    #[test]
    fn attachment_modes_round_trip_and_reject_unknown() {
        for mode in AttachmentMode::ALL {
            assert_eq!(mode.as_str().parse::<AttachmentMode>(), Ok(mode));
        }
        assert!("filesystem".parse::<AttachmentMode>().is_err());
    }

    #[test]
    fn mount_flags_never_print() {
        let flags = MountFlags::new(vec!["password=hunter2".into(), "noatime".into()]);
        assert_eq!(format!("{flags}"), REDACTED);
        assert_eq!(format!("{flags:?}"), REDACTED);
        let opts = MountOptions {
            fs_type: "cifs".into(),
            mount_flags: flags,
            volume_mount_group: String::new(),
        };
        let shown = format!("{opts} {opts:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("noatime"), "{shown}");
        assert!(shown.contains("cifs"), "{shown}");
        let cap = Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::FileSystem)
            .with_mount_options(opts);
        let shown = format!("{cap} {cap:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn secrets_print_keys_but_never_values() {
        let mut secrets = Secrets::new();
        secrets.insert("user", "admin");
        secrets.insert("password", "hunter2");
        let shown = format!("{secrets} {secrets:?} {:?}", Some(&secrets));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("admin"), "{shown}");
        assert!(shown.contains("password: [REDACTED]"), "{shown}");
        assert_eq!(secrets.keys().collect::<Vec<_>>(), vec!["password", "user"]);
    }

    #[test]
    fn usage_name_matches_nomads_layout() {
        let cap = Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::FileSystem);
        assert_eq!(cap.usage_name(false), "rw-file-system-single-node-writer");
        assert_eq!(cap.usage_name(true), "ro-file-system-single-node-writer");
    }

    #[test]
    fn claim_mount_options_override_the_volumes_field_by_field() {
        let volume = MountOptions {
            fs_type: "ext4".into(),
            mount_flags: MountFlags::new(vec!["noatime".into()]),
            volume_mount_group: String::new(),
        };
        let claim = MountOptions {
            fs_type: String::new(),
            mount_flags: MountFlags::new(vec!["ro".into()]),
            volume_mount_group: String::new(),
        };
        let merged = volume.merged_with(&claim);
        assert_eq!(merged.fs_type, "ext4");
        assert_eq!(merged.mount_flags.expose(), ["ro".to_string()]);
    }
}
