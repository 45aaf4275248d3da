//! A group's `volume` blocks: the volumes its tasks may mount, a
//! registered CSI volume or a host volume of the agent configuration. The
//! rules are checked where the group's count is known: csi volumes need
//! both modes, reader-only modes need `read_only = true`, block devices
//! take no mount options, and a single-node mode shared by several
//! instances needs `per_alloc`, which gives instance N the volume
//! `source[N]`.

use crate::csi::{AccessMode, AttachmentMode, Capability, MountOptions};

use super::decode::Fields;
use super::encode::Writer;
use super::volume::{decode_mount_options, write_mount_options};
use super::{keywords, Kept};

/// Keys of Nomad's group `volume` block that csi-agent ignores.
pub(super) const VOLUME_IGNORED: &[&str] = &["sticky"];

keywords! {
    /// Where a group volume comes from.
    pub enum VolumeType ("volume type") {
        /// A registered CSI volume, claimed through its plugin.
        Csi = "csi",
        /// A `host_volume` of the agent configuration.
        Host = "host",
    }
}

/// `volume "<alias>" { ... }` in a group: a volume the group's tasks may
/// mount.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupVolume {
    /// The name `volume_mount` blocks use.
    pub alias: String,
    pub volume_type: VolumeType,
    /// The volume ID (csi) or host volume name (host). With `per_alloc`,
    /// instance N uses `source[N]`.
    pub source: String,
    pub read_only: bool,
    /// Always set for csi volumes.
    pub access_mode: Option<AccessMode>,
    /// Always set for csi volumes.
    pub attachment_mode: Option<AttachmentMode>,
    pub per_alloc: bool,
    /// Override the volume's own mount options, field by field.
    pub mount_options: MountOptions,
    pub ignored: Vec<Kept>,
}

impl GroupVolume {
    /// The capability the group claims, for csi volumes.
    pub fn capability(&self) -> Option<Capability> {
        Some(
            Capability::new(self.access_mode?, self.attachment_mode?)
                .with_mount_options(self.mount_options.clone()),
        )
    }

    /// The volume ID or host volume name for instance `index` of the group.
    pub fn source_for(&self, index: u64) -> String {
        if self.per_alloc {
            format!("{}[{index}]", self.source)
        } else {
            self.source.clone()
        }
    }
}

/// Decodes a group volume and checks it against the group's `count`.
pub(super) fn decode_group_volume(
    f: &mut Fields<'_>,
    alias: String,
    count: u64,
    group: &str,
) -> GroupVolume {
    let volume_type = f.parsed("type");
    let volume_type = f.require("type", volume_type).unwrap_or(VolumeType::Csi);
    let source = f.string_at("source");
    let source = f.require("source", source);
    let read_only = f.bool("read_only").unwrap_or(false);
    let access_at = f.parsed_at::<AccessMode>("access_mode");
    let access = access_at.map(|(mode, _)| mode);
    let attachment_mode = f.parsed("attachment_mode");
    let per_alloc = f.bool("per_alloc").unwrap_or(false);
    let mount_block = f.block("mount_options");
    let mount_options = mount_block
        .map(|block| decode_mount_options(&mut f.nested(block)))
        .unwrap_or_default();
    let ignored = f.ignore(VOLUME_IGNORED);
    let dec = f.dec();
    if let Some((source, pos)) = &source {
        let what = match volume_type {
            VolumeType::Csi => "volume ID",
            VolumeType::Host => "host volume name",
        };
        if dec.check_id(*pos, what, source) && per_alloc {
            // The last instance's volume ID must be valid too.
            dec.check_id(
                *pos,
                what,
                &format!("{source}[{}]", count.saturating_sub(1)),
            );
        }
    }
    match volume_type {
        VolumeType::Csi => {
            f.require("access_mode", access);
            f.require("attachment_mode", attachment_mode);
        }
        VolumeType::Host => {
            if let Some(block) = mount_block {
                f.error(
                    block.kind.span.start,
                    format!("mount_options in {} apply only to csi volumes", f.what()),
                );
            }
        }
    }
    if let Some((mode, pos)) = access_at {
        if mode.is_read_only() && !read_only {
            f.error(
                pos,
                format!(
                    "access_mode {:?} in {} needs read_only = true",
                    mode.as_str(),
                    f.what()
                ),
            );
        }
        let single_node = matches!(
            mode,
            AccessMode::SingleNodeWriter
                | AccessMode::SingleNodeReaderOnly
                | AccessMode::SingleNodeSingleWriter
                | AccessMode::SingleNodeMultiWriter
        );
        if single_node && count > 1 && !per_alloc {
            f.error(
                pos,
                format!(
                    "{} is {mode}, which one instance at a time can claim, but {group} has count = {count}: set per_alloc = true to give each instance its own volume",
                    f.what()
                ),
            );
        }
    }
    if let (Some(AttachmentMode::BlockDevice), Some(block)) = (attachment_mode, mount_block) {
        f.error(
            block.kind.span.start,
            format!(
                "{} is a block-device volume and cannot have mount_options",
                f.what()
            ),
        );
    }
    f.finish();
    GroupVolume {
        alias,
        volume_type,
        source: source.map(|(source, _)| source).unwrap_or_default(),
        read_only,
        access_mode: access,
        attachment_mode,
        per_alloc,
        mount_options,
        ignored,
    }
}

/// Writes a group volume back as HCL that decodes to it.
pub(super) fn write_group_volume(w: &mut Writer, volume: &GroupVolume) {
    w.open("volume", Some(&volume.alias));
    w.string("type", volume.volume_type.as_str());
    w.string("source", &volume.source);
    w.plain("read_only", volume.read_only);
    w.opt_string("access_mode", volume.access_mode.map(AccessMode::as_str));
    w.opt_string(
        "attachment_mode",
        volume.attachment_mode.map(AttachmentMode::as_str),
    );
    w.plain("per_alloc", volume.per_alloc);
    write_mount_options(w, &volume.mount_options);
    w.kept(&volume.ignored);
    w.close();
}
