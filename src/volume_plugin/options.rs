//! A Create's options (`docker volume create -o KEY=VALUE`), named as the
//! volume spec's fields, read into a [`VolumeSpec`] for `volume create`;
//! and, when the volume exists already, the options given compared with
//! it, each difference named.
//!
//! | option | spec field |
//! |---|---|
//! | `plugin_id` | `plugin_id` (default: the block's `plugin_id`) |
//! | `capacity_min`, alias `size` | `capacity_min` |
//! | `capacity_max` | `capacity_max` |
//! | `access_mode` | `capability.access_mode` (default `single-node-writer`) |
//! | `attachment_mode` | `capability.attachment_mode` (`file-system` only) |
//! | `fs_type` | `mount_options.fs_type` |
//! | `mount_flags` | `mount_options.mount_flags`, comma-separated |
//! | `parameters.KEY` | `parameters { KEY }` |
//! | `secrets=NAME` | `secrets { ... }`: the named secret of `secrets_dir` |
//! | `secrets.KEY` | `secrets { KEY }` (accepted with a warning) |
//! | `snapshot_id`, `clone_id` | `snapshot_id`, `clone_id` |
//! | `read_only` | the volume's [`PluginSettings::read_only`] |
//! | `mount_group` | the volume's [`PluginSettings::mount_group`] |
//! | `topology.KEY` | `topology_request { required { topology { segments { KEY } } } }`: every `topology.KEY` given makes one topology |
//!
//! A secret's value appears in no message: only its key.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::csi::{AccessMode, AttachmentMode, Capability, MountFlags, MountOptions, Secrets};
use crate::spec::{parse_capacity, Topology, TopologyRequest, VolumeSpec};
use crate::units::format_size;
use crate::volume::calls::{PluginSettings, VolumeStatus};

/// Every option a Create accepts, as its errors list them.
pub const ACCEPTED_OPTIONS: &[&str] = &[
    "plugin_id",
    "capacity_min",
    "size",
    "capacity_max",
    "access_mode",
    "attachment_mode",
    "fs_type",
    "mount_flags",
    "parameters.KEY",
    "secrets",
    "secrets.KEY",
    "snapshot_id",
    "clone_id",
    "read_only",
    "mount_group",
    "topology.KEY",
];

/// The access mode of a Create that names none.
pub const DEFAULT_ACCESS_MODE: AccessMode = AccessMode::SingleNodeWriter;

/// A refused option, said without the volume's name (the caller adds it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError(pub String);

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionError {}

/// What the options of one Create said: the spec to create, and which of
/// its fields were given (the others are defaults, not compared with an
/// existing volume).
#[derive(Debug)]
pub(super) struct CreateOptions {
    pub spec: VolumeSpec,
    /// What the volume keeps beyond its spec.
    pub settings: PluginSettings,
    /// What the caller should hear of although the Create goes on: the
    /// inline secrets' keys (never values).
    pub warnings: Vec<String>,
    read_only_given: bool,
    mount_group_given: bool,
    plugin_given: bool,
    access_given: bool,
    attachment_given: bool,
    fs_type_given: bool,
    mount_flags_given: bool,
}

/// Reads `opts` for volume `name`; `default_plugin` is the block's
/// `plugin_id`, `named_secret` reads the secret a `secrets=NAME` names.
pub(super) fn parse(
    name: &str,
    opts: &[(String, String)],
    default_plugin: Option<&str>,
    named_secret: &dyn Fn(&str) -> Result<Secrets, String>,
) -> Result<CreateOptions, OptionError> {
    let mut plugin_id = None;
    let mut capacity_min: Option<(u64, &str)> = None;
    let mut capacity_max = None;
    let mut access_mode = None;
    let mut attachment_mode = None;
    let mut fs_type = None;
    let mut mount_flags = None;
    let mut parameters = BTreeMap::new();
    let mut secrets = Secrets::new();
    let mut snapshot_id = None;
    let mut clone_id = None;
    let mut read_only = None;
    let mut mount_group = None;
    let mut secret_name: Option<&str> = None;
    let mut topology = BTreeMap::new();
    let fail = |m: String| Err(OptionError(m));
    for (key, value) in opts {
        match key.as_str() {
            "plugin_id" => {
                if let Err(err) = crate::id::validate("plugin ID", value) {
                    return fail(format!("option plugin_id: {err}"));
                }
                plugin_id = Some(value.clone());
            }
            "capacity_min" | "size" => {
                if let Some((_, first)) = capacity_min {
                    return fail(format!(
                        "options {first} and {key} both set capacity_min (size is its alias): give one"
                    ));
                }
                capacity_min = Some((capacity(key, value)?, key.as_str()));
            }
            "capacity_max" => capacity_max = Some(capacity(key, value)?),
            "access_mode" => {
                let mode = value
                    .parse::<AccessMode>()
                    .map_err(|e| OptionError(format!("option access_mode: {e}")))?;
                access_mode = Some(mode);
            }
            "attachment_mode" => {
                let mode = value
                    .parse::<AttachmentMode>()
                    .map_err(|e| OptionError(format!("option attachment_mode: {e}")))?;
                if mode == AttachmentMode::BlockDevice {
                    return fail(
                        "option attachment_mode \"block-device\" is refused: a docker volume is a directory (raw block devices for containers go through a job's docker driver)"
                            .to_string(),
                    );
                }
                attachment_mode = Some(mode);
            }
            "fs_type" => fs_type = Some(value.clone()),
            "mount_flags" => {
                let flags: Vec<String> = value
                    .split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .map(str::to_string)
                    .collect();
                mount_flags = Some(MountFlags::new(flags));
            }
            "snapshot_id" | "clone_id" if value.is_empty() => {
                return fail(format!("option {key} must not be empty"));
            }
            "snapshot_id" => snapshot_id = Some(value.clone()),
            "clone_id" => clone_id = Some(value.clone()),
            "read_only" => {
                read_only = Some(match value.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return fail(format!(
                            "option read_only must be true or false, found {value:?}"
                        ))
                    }
                })
            }
            "mount_group" => mount_group = Some(gid(value)?),
            "secrets" => {
                if value.is_empty() {
                    return fail(
                        "option secrets needs the NAME of a secret of the agent's secrets_dir"
                            .to_string(),
                    );
                }
                secret_name = Some(value.as_str());
            }
            _ => {
                if let Some(param) = key.strip_prefix("parameters.") {
                    if param.is_empty() {
                        return fail("option parameters.KEY needs a KEY".to_string());
                    }
                    parameters.insert(param.to_string(), value.clone());
                } else if let Some(secret) = key.strip_prefix("secrets.") {
                    if secret.is_empty() {
                        return fail("option secrets.KEY needs a KEY".to_string());
                    }
                    secrets.insert(secret, value.clone());
                } else if let Some(segment) = key.strip_prefix("topology.") {
                    if segment.is_empty() || value.is_empty() {
                        return fail(format!(
                            "option {key}={value} needs a KEY and a VALUE (topology.KEY=VALUE)"
                        ));
                    }
                    topology.insert(segment.to_string(), value.clone());
                } else {
                    return fail(format!(
                        "unknown option {key:?} (accepted: {})",
                        ACCEPTED_OPTIONS.join(", ")
                    ));
                }
            }
        }
    }
    let inline: Vec<String> = secrets.keys().map(str::to_string).collect();
    if let Some(secret) = secret_name {
        if !inline.is_empty() {
            return fail(format!(
                "options secrets and secrets.KEY ({}) cannot both be given: name the agent's secret, or give the keys inline",
                inline.join(", ")
            ));
        }
        secrets = named_secret(secret).map_err(|e| OptionError(format!("option secrets: {e}")))?;
    }
    let warnings = inline
        .iter()
        .map(|key| format!("option secrets.{key} passes its value through the container engine, which keeps it in its own record of the volume (docker volume inspect shows it): give the agent the secret and name it with -o secrets=NAME"))
        .collect();
    if snapshot_id.is_some() && clone_id.is_some() {
        return fail(
            "options snapshot_id and clone_id cannot both be set: a volume is made from one source"
                .to_string(),
        );
    }
    if let (Some((min, _)), Some(max)) = (capacity_min, capacity_max) {
        if min > max {
            return fail(format!(
                "option capacity_max ({}) is smaller than capacity_min ({})",
                format_size(max),
                format_size(min)
            ));
        }
    }
    let plugin_given = plugin_id.is_some();
    let Some(plugin_id) = plugin_id.or_else(|| default_plugin.map(str::to_string)) else {
        return fail(
            "no CSI plugin: give -o plugin_id=ID, or set plugin_id in the agent's volume_plugin block"
                .to_string(),
        );
    };
    let capability = Capability::new(
        access_mode.unwrap_or(DEFAULT_ACCESS_MODE),
        attachment_mode.unwrap_or(AttachmentMode::FileSystem),
    );
    let given = (
        access_mode.is_some(),
        attachment_mode.is_some(),
        fs_type.is_some(),
        mount_flags.is_some(),
    );
    let spec = VolumeSpec {
        id: name.to_string(),
        name: name.to_string(),
        plugin_id,
        external_id: None,
        capabilities: vec![capability],
        mount_options: MountOptions {
            fs_type: fs_type.unwrap_or_default(),
            mount_flags: mount_flags.unwrap_or_default(),
            volume_mount_group: String::new(),
        },
        secrets,
        parameters,
        context: BTreeMap::new(),
        capacity_min: capacity_min.map(|(min, _)| min),
        capacity_max,
        // The node the volume is made for: the plugin is asked for a
        // volume accessible from it, and the volume is claimed only there.
        topology_request: TopologyRequest {
            required: if topology.is_empty() {
                Vec::new()
            } else {
                vec![Topology { segments: topology }]
            },
            preferred: Vec::new(),
        },
        snapshot_id,
        clone_id,
        ignored: Vec::new(),
    };
    Ok(CreateOptions {
        spec,
        settings: PluginSettings {
            read_only: read_only.unwrap_or(false),
            mount_group: mount_group.clone().unwrap_or_default(),
        },
        warnings,
        read_only_given: read_only.is_some(),
        mount_group_given: mount_group.is_some(),
        plugin_given,
        access_given: given.0,
        attachment_given: given.1,
        fs_type_given: given.2,
        mount_flags_given: given.3,
    })
}

fn capacity(key: &str, value: &str) -> Result<u64, OptionError> {
    parse_capacity(value).map_err(|e| OptionError(format!("option {key}: {e}")))
}

/// A group ID as CSI's `volume_mount_group` carries it: decimal, 0 to
/// 4294967294 (4294967295 is `(gid_t) -1`, "no group"). A group name is
/// refused: the node plugin, not the agent's host, would resolve it.
fn gid(value: &str) -> Result<String, OptionError> {
    match value.parse::<u32>() {
        Ok(gid) if gid != u32::MAX && value.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(gid.to_string())
        }
        _ => Err(OptionError(format!(
            "option mount_group must be a numeric group ID (GID), found {value:?}"
        ))),
    }
}

impl CreateOptions {
    /// How the existing volume `status` differs from what these options
    /// gave: one line per difference, none when they agree. Fields left
    /// out are not compared; secrets by their keys only.
    pub fn differences(&self, status: &VolumeStatus) -> Vec<String> {
        let spec = &self.spec;
        let mut out = Vec::new();
        if self.plugin_given && spec.plugin_id != status.plugin_id {
            out.push(format!(
                "plugin_id {:?} (the volume's is {:?})",
                spec.plugin_id, status.plugin_id
            ));
        }
        if self.access_given || self.attachment_given {
            let asked = &spec.capabilities[0];
            let matches = status.capabilities.iter().any(|c| {
                let (access, attachment) = c.split_once('/').unwrap_or((c, ""));
                (!self.access_given || access == asked.access_mode.as_str())
                    && (!self.attachment_given || attachment == asked.attachment_mode.as_str())
            });
            if !matches {
                out.push(format!(
                    "capability {}/{} (the volume's: {})",
                    asked.access_mode,
                    asked.attachment_mode,
                    status.capabilities.join(", ")
                ));
            }
        }
        // A volume that a node of the topology asked for could not use.
        for asked in &spec.topology_request.required {
            if !crate::csi::topology::accessible(&status.topologies, Some(&asked.segments)) {
                out.push(format!(
                    "topology {} (the volume's: {})",
                    crate::csi::topology::describe(&asked.segments),
                    crate::csi::topology::describe_all(&status.topologies)
                ));
            }
        }
        if self.fs_type_given && spec.mount_options.fs_type != status.fs_type {
            out.push(format!(
                "fs_type {:?} (the volume's is {:?})",
                spec.mount_options.fs_type, status.fs_type
            ));
        }
        let flags = spec.mount_options.mount_flags.len();
        if self.mount_flags_given && flags != status.mount_flags as usize {
            out.push(format!(
                "mount_flags: {flags} given (the volume has {})",
                status.mount_flags
            ));
        }
        for (key, value) in &spec.parameters {
            match status.parameters.get(key) {
                Some(theirs) if theirs == value => {}
                Some(theirs) => out.push(format!(
                    "parameters.{key} {value:?} (the volume's is {theirs:?})"
                )),
                None => out.push(format!("parameters.{key} {value:?} (the volume has none)")),
            }
        }
        let capacity = u64::try_from(status.capacity_bytes).unwrap_or(0);
        if let Some(min) = spec.capacity_min {
            if status.capacity_bytes > 0 && capacity < min {
                out.push(format!(
                    "capacity_min {} (the volume has {})",
                    format_size(min),
                    format_size(capacity)
                ));
            }
        }
        if let Some(max) = spec.capacity_max {
            if capacity > max {
                out.push(format!(
                    "capacity_max {} (the volume has {})",
                    format_size(max),
                    format_size(capacity)
                ));
            }
        }
        if self.read_only_given && self.settings.read_only != status.mounts_read_only {
            out.push(format!(
                "read_only {} (the volume's is {})",
                self.settings.read_only, status.mounts_read_only
            ));
        }
        if self.mount_group_given && self.settings.mount_group != status.mount_group {
            let theirs = if status.mount_group.is_empty() {
                "the volume has none".to_string()
            } else {
                format!("the volume's is {}", status.mount_group)
            };
            out.push(format!(
                "mount_group {} ({theirs})",
                self.settings.mount_group
            ));
        }
        let theirs: BTreeSet<&str> = order::set(status.secret_keys.iter().map(String::as_str));
        let ours: BTreeSet<&str> = order::set(spec.secrets.keys());
        if !ours.is_empty() && ours != theirs {
            let list = |keys: &BTreeSet<&str>| {
                if keys.is_empty() {
                    "none".to_string()
                } else {
                    keys.iter().copied().collect::<Vec<_>>().join(", ")
                }
            };
            out.push(format!(
                "secret keys {} (the volume's: {})",
                list(&ours),
                list(&theirs)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn no_secrets(name: &str) -> Result<Secrets, String> {
        Err(format!("no secret {name:?} here"))
    }

    fn refused(pairs: &[(&str, &str)]) -> String {
        parse("v", &opts(pairs), Some("hostpath"), &no_secrets)
            .unwrap_err()
            .0
    }

    #[test]
    fn every_option_lands_in_its_spec_field() {
        let parsed = parse(
            "data",
            &opts(&[
                ("plugin_id", "hp"),
                ("size", "64MiB"),
                ("capacity_max", "1gib"),
                ("access_mode", "single-node-multi-writer"),
                ("attachment_mode", "file-system"),
                ("fs_type", "ext4"),
                ("mount_flags", "noatime, nodev,"),
                ("parameters.tier", "fast"),
                ("secrets.token", "s3cr3t"),
                ("snapshot_id", "snap-1"),
            ]),
            Some("other"),
            &no_secrets,
        )
        .unwrap();
        let spec = &parsed.spec;
        assert_eq!(spec.id, "data");
        assert_eq!(spec.name, "data");
        assert_eq!(spec.plugin_id, "hp");
        assert_eq!(spec.capacity_min, Some(64 << 20));
        assert_eq!(spec.capacity_max, Some(1 << 30));
        assert_eq!(
            spec.capabilities,
            vec![Capability::new(
                AccessMode::SingleNodeMultiWriter,
                AttachmentMode::FileSystem
            )]
        );
        assert_eq!(spec.mount_options.fs_type, "ext4");
        assert_eq!(
            spec.mount_options.mount_flags.expose(),
            ["noatime", "nodev"]
        );
        assert_eq!(spec.parameters["tier"], "fast");
        assert_eq!(spec.secrets.keys().collect::<Vec<_>>(), ["token"]);
        assert_eq!(spec.snapshot_id.as_deref(), Some("snap-1"));
        // The spec goes to the agent as HCL, which decodes to the same.
        let again = VolumeSpec::decode(&spec.to_hcl(), "docker").unwrap().spec;
        assert_eq!(&again, spec);
    }

    #[test]
    fn defaults_are_the_block_s_plugin_and_a_single_node_writer_directory() {
        let spec = parse("v", &[], Some("hostpath"), &no_secrets).unwrap().spec;
        assert_eq!(spec.plugin_id, "hostpath");
        assert_eq!(
            spec.capabilities,
            vec![Capability::new(
                AccessMode::SingleNodeWriter,
                AttachmentMode::FileSystem
            )]
        );
        assert!(spec.mount_options.is_empty());
        let err = parse("v", &[], None, &no_secrets).unwrap_err().0;
        assert!(err.contains("-o plugin_id=ID"), "{err}");
    }

    #[test]
    fn each_bad_option_is_refused_with_its_reason() {
        let all = ACCEPTED_OPTIONS.join(", ");
        for (pairs, expected) in [
            (
                vec![("colour", "red")],
                format!("unknown option \"colour\" (accepted: {all})"),
            ),
            (
                vec![("parameters.", "x")],
                "option parameters.KEY needs a KEY".to_string(),
            ),
            (
                vec![("secrets.", "x")],
                "option secrets.KEY needs a KEY".to_string(),
            ),
            (
                vec![("size", "lots")],
                "option size: invalid size \"lots\"".to_string(),
            ),
            (
                vec![("capacity_max", "-1")],
                "option capacity_max: invalid size".to_string(),
            ),
            (
                vec![("size", "1GiB"), ("capacity_min", "2GiB")],
                "options size and capacity_min both set capacity_min (size is its alias): give one"
                    .to_string(),
            ),
            (
                vec![("capacity_min", "2GiB"), ("capacity_max", "1GiB")],
                "option capacity_max (1.0 GiB) is smaller than capacity_min (2.0 GiB)".to_string(),
            ),
            (
                vec![("access_mode", "many-writers")],
                "option access_mode: ".to_string(),
            ),
            (
                vec![("attachment_mode", "block-device")],
                "option attachment_mode \"block-device\" is refused: a docker volume is a directory"
                    .to_string(),
            ),
            (
                vec![("attachment_mode", "tape")],
                "option attachment_mode: ".to_string(),
            ),
            (
                vec![("plugin_id", "a/b")],
                "option plugin_id: invalid plugin ID \"a/b\"".to_string(),
            ),
            (
                vec![("snapshot_id", "")],
                "option snapshot_id must not be empty".to_string(),
            ),
            (
                vec![("snapshot_id", "s"), ("clone_id", "c")],
                "options snapshot_id and clone_id cannot both be set".to_string(),
            ),
        ] {
            let err = refused(&pairs);
            assert!(err.starts_with(&expected), "{pairs:?}: {err}");
        }
    }

    #[test]
    fn a_secret_s_value_is_in_no_message_nor_debug() {
        let parsed = parse(
            "v",
            &opts(&[("secrets.password", "hunter2"), ("colour", "x")]),
            Some("hp"),
            &no_secrets,
        );
        assert!(!parsed.unwrap_err().0.contains("hunter2"));
        let parsed = parse(
            "v",
            &opts(&[("secrets.password", "hunter2")]),
            Some("hp"),
            &no_secrets,
        )
        .unwrap();
        assert!(!format!("{parsed:?}").contains("hunter2"));
        let status = VolumeStatus {
            plugin_id: "hp".into(),
            capabilities: vec!["single-node-writer/file-system".into()],
            secret_keys: vec!["user".into()],
            ..Default::default()
        };
        let differences = parsed.differences(&status).join("; ");
        assert_eq!(differences, "secret keys password (the volume's: user)");
    }

    #[test]
    fn the_same_options_agree_with_the_volume_and_others_are_named() {
        let status = VolumeStatus {
            plugin_id: "hp".into(),
            capabilities: vec!["single-node-writer/file-system".into()],
            fs_type: "ext4".into(),
            parameters: [("tier".to_string(), "fast".to_string())].into(),
            capacity_bytes: 64 << 20,
            secret_keys: vec!["token".into()],
            ..Default::default()
        };
        let same = parse(
            "v",
            &opts(&[
                ("plugin_id", "hp"),
                ("size", "64MiB"),
                ("capacity_max", "1GiB"),
                ("access_mode", "single-node-writer"),
                ("fs_type", "ext4"),
                ("parameters.tier", "fast"),
                ("secrets.token", "x"),
            ]),
            Some("hp"),
            &no_secrets,
        )
        .unwrap();
        assert_eq!(same.differences(&status), Vec::<String>::new());
        // Nothing given, nothing compared: the defaults do not count.
        let bare = parse("v", &[], Some("other"), &no_secrets).unwrap();
        assert_eq!(bare.differences(&status), Vec::<String>::new());
        let other = parse(
            "v",
            &opts(&[
                ("plugin_id", "nfs"),
                ("capacity_min", "1GiB"),
                ("capacity_max", "1MiB"),
                ("access_mode", "single-node-multi-writer"),
                ("fs_type", "xfs"),
                ("mount_flags", "noatime"),
                ("parameters.tier", "slow"),
                ("parameters.zone", "a"),
            ]),
            None,
            &no_secrets,
        );
        // capacity_min > capacity_max is refused before any comparison.
        assert!(other.is_err());
        let other = parse(
            "v",
            &opts(&[
                ("plugin_id", "nfs"),
                ("capacity_min", "1GiB"),
                ("access_mode", "single-node-multi-writer"),
                ("fs_type", "xfs"),
                ("mount_flags", "noatime"),
                ("parameters.tier", "slow"),
                ("parameters.zone", "a"),
            ]),
            None,
            &no_secrets,
        )
        .unwrap();
        assert_eq!(
            other.differences(&status),
            vec![
                "plugin_id \"nfs\" (the volume's is \"hp\")".to_string(),
                "capability single-node-multi-writer/file-system (the volume's: single-node-writer/file-system)".to_string(),
                "fs_type \"xfs\" (the volume's is \"ext4\")".to_string(),
                "mount_flags: 1 given (the volume has 0)".to_string(),
                "parameters.tier \"slow\" (the volume's is \"fast\")".to_string(),
                "parameters.zone \"a\" (the volume has none)".to_string(),
                "capacity_min 1.0 GiB (the volume has 64.0 MiB)".to_string(),
            ]
        );
        let small = parse(
            "v",
            &opts(&[("capacity_max", "1MiB")]),
            Some("hp"),
            &no_secrets,
        )
        .unwrap();
        assert_eq!(
            small.differences(&status),
            vec!["capacity_max 1.0 MiB (the volume has 64.0 MiB)".to_string()]
        );
    }

    #[test]
    fn topology_options_make_one_required_topology_compared_with_the_volume_s() {
        let parsed = parse(
            "v",
            &opts(&[("topology.zone", "a"), ("topology.rack", "3")]),
            Some("hp"),
            &no_secrets,
        )
        .unwrap();
        let wanted: crate::csi::types::Topology = [
            ("rack".to_string(), "3".to_string()),
            ("zone".to_string(), "a".to_string()),
        ]
        .into();
        assert_eq!(
            parsed.spec.topology_request.required,
            vec![Topology {
                segments: wanted.clone()
            }]
        );
        assert!(parsed.spec.topology_request.preferred.is_empty());
        let elsewhere = VolumeStatus {
            plugin_id: "hp".into(),
            topologies: vec![[("zone".to_string(), "b".to_string())].into()],
            ..Default::default()
        };
        assert_eq!(
            parsed.differences(&elsewhere),
            vec!["topology {rack=3, zone=a} (the volume's: {zone=b})".to_string()]
        );
        let there = VolumeStatus {
            topologies: vec![[("zone".to_string(), "a".to_string())].into()],
            ..elsewhere
        };
        assert!(parsed.differences(&there).is_empty());
        for bad in [("topology.", "a"), ("topology.zone", "")] {
            let err = parse("v", &opts(&[bad]), Some("hp"), &no_secrets).unwrap_err();
            assert!(err.0.contains("needs a KEY and a VALUE"), "{err}");
        }
    }

    #[test]
    fn read_only_and_mount_group_are_kept_as_the_volume_s_settings() {
        let parsed = parse(
            "v",
            &opts(&[("read_only", "true"), ("mount_group", "1000")]),
            Some("hp"),
            &no_secrets,
        )
        .unwrap();
        assert_eq!(
            parsed.settings,
            PluginSettings {
                read_only: true,
                mount_group: "1000".into(),
            }
        );
        let plain = parse(
            "v",
            &opts(&[("read_only", "false")]),
            Some("hp"),
            &no_secrets,
        )
        .unwrap();
        assert_eq!(plain.settings, PluginSettings::default());
        for (pairs, expected) in [
            (
                vec![("read_only", "yes")],
                "option read_only must be true or false, found \"yes\"",
            ),
            (
                vec![("read_only", "")],
                "option read_only must be true or false, found \"\"",
            ),
            (
                vec![("mount_group", "staff")],
                "option mount_group must be a numeric group ID (GID), found \"staff\"",
            ),
            (
                vec![("mount_group", "-1")],
                "option mount_group must be a numeric group ID (GID), found \"-1\"",
            ),
            (
                vec![("mount_group", "4294967295")],
                "option mount_group must be a numeric group ID (GID), found \"4294967295\"",
            ),
            (
                vec![("mount_group", "+5")],
                "option mount_group must be a numeric group ID (GID), found \"+5\"",
            ),
        ] {
            assert_eq!(refused(&pairs), expected, "{pairs:?}");
        }
    }

    #[test]
    fn read_only_and_mount_group_are_compared_only_when_given() {
        let status = VolumeStatus {
            plugin_id: "hp".into(),
            capabilities: vec!["single-node-writer/file-system".into()],
            mounts_read_only: true,
            mount_group: "1000".into(),
            ..Default::default()
        };
        let same = parse(
            "v",
            &opts(&[("read_only", "true"), ("mount_group", "1000")]),
            Some("hp"),
            &no_secrets,
        )
        .unwrap();
        assert_eq!(same.differences(&status), Vec::<String>::new());
        let bare = parse("v", &[], Some("hp"), &no_secrets).unwrap();
        assert_eq!(bare.differences(&status), Vec::<String>::new());
        let other = parse(
            "v",
            &opts(&[("read_only", "false"), ("mount_group", "2000")]),
            Some("hp"),
            &no_secrets,
        )
        .unwrap();
        assert_eq!(
            other.differences(&status),
            [
                "read_only false (the volume's is true)",
                "mount_group 2000 (the volume's is 1000)",
            ]
        );
        let none = VolumeStatus {
            mount_group: String::new(),
            ..status
        };
        assert_eq!(
            other.differences(&none)[1],
            "mount_group 2000 (the volume has none)"
        );
    }

    #[test]
    fn a_named_secret_is_read_by_name_and_inline_ones_warn_by_key() {
        let store = |name: &str| -> Result<Secrets, String> {
            let mut secrets = Secrets::new();
            match name {
                "nfs" => {
                    secrets.insert("password", "hunter2");
                    Ok(secrets)
                }
                _ => Err(format!("no secret {name:?}")),
            }
        };
        let parsed = parse("v", &opts(&[("secrets", "nfs")]), Some("hp"), &store).unwrap();
        let pairs: Vec<(&str, &str)> = parsed.spec.secrets.expose().collect();
        assert_eq!(pairs, [("password", "hunter2")]);
        assert_eq!(parsed.warnings, Vec::<String>::new());
        assert!(!format!("{parsed:?}").contains("hunter2"));
        // Compared by keys, as inline secrets are.
        let status = VolumeStatus {
            plugin_id: "hp".into(),
            secret_keys: vec!["token".into()],
            ..Default::default()
        };
        assert_eq!(
            parsed.differences(&status),
            ["secret keys password (the volume's: token)"]
        );
        let err = parse("v", &opts(&[("secrets", "smb")]), Some("hp"), &store)
            .unwrap_err()
            .0;
        assert_eq!(err, "option secrets: no secret \"smb\"");
        let err = parse("v", &opts(&[("secrets", "")]), Some("hp"), &store)
            .unwrap_err()
            .0;
        assert_eq!(
            err,
            "option secrets needs the NAME of a secret of the agent's secrets_dir"
        );
        let err = parse(
            "v",
            &opts(&[("secrets", "nfs"), ("secrets.user", "bob")]),
            Some("hp"),
            &store,
        )
        .unwrap_err()
        .0;
        assert_eq!(
            err,
            "options secrets and secrets.KEY (user) cannot both be given: name the agent's secret, or give the keys inline"
        );
        let inline = parse(
            "v",
            &opts(&[("secrets.user", "bob"), ("secrets.password", "hunter2")]),
            Some("hp"),
            &store,
        )
        .unwrap();
        assert_eq!(inline.warnings.len(), 2);
        assert!(
            inline.warnings[0].starts_with(
                "option secrets.password passes its value through the container engine"
            ),
            "{:?}",
            inline.warnings
        );
        assert!(!inline.warnings.join(" ").contains("hunter2"));
    }
}
