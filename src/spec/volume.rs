//! The volume spec that `volume register` and `volume create` read, in
//! Nomad's format.
//!
//! ```hcl
//! id          = "db"
//! name        = "database"
//! type        = "csi"
//! plugin_id   = "hostpath"
//! external_id = "vol-0123"
//!
//! capability {
//!   access_mode     = "single-node-writer"
//!   attachment_mode = "file-system"
//! }
//!
//! capacity_min = "10GiB"
//! secrets { password = "..." }
//! ```
//!
//! Map blocks (`secrets`, `parameters`, `context`, `segments`) hold
//! `key = "value"` lines, or several on one line separated by commas
//! (`segments { rack = "R1", zone = "z" }`); keys that are not
//! identifiers are quoted, in the block (`"topology.ebs.csi.aws.com/zone" =
//! "us-east-1b"`, as Nomad reads it) or in an object
//! (`parameters = { "csi.storage.k8s.io/fstype" = "ext4" }`).
//!
//! `snapshot_id` and `clone_id` (Nomad's keys, the plugin's IDs of a
//! snapshot or of a volume) make `volume create` restore the snapshot or
//! clone the volume; at most one may be given.

use std::collections::BTreeMap;

use crate::csi::{AttachmentMode, Capability, MountFlags, MountOptions, Secrets};
use crate::units::{format_size, parse_size, UnitError};
use hcl::{Body, Expr};

use super::decode::{Decoder, Fields};
use super::encode::Writer;
use super::{Decoded, Invalid, Kept};

/// Keys of Nomad's volume spec that csi-agent accepts and ignores.
const IGNORED: &[&str] = &["namespace"];

/// A CSI volume as registered or created, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeSpec {
    /// The volume's ID, which jobs name as a group volume's `source`.
    pub id: String,
    /// The display name, and the name asked for on creation; defaults to
    /// the ID.
    pub name: String,
    pub plugin_id: String,
    /// The storage provider's ID of the volume; set for registration, not
    /// for creation.
    pub external_id: Option<String>,
    /// The capabilities the volume must support, in file order. Their own
    /// mount options are empty: the volume's `mount_options` apply.
    pub capabilities: Vec<Capability>,
    /// Mount options for file-system capabilities; empty when not given.
    pub mount_options: MountOptions,
    pub secrets: Secrets,
    pub parameters: BTreeMap<String, String>,
    pub context: BTreeMap<String, String>,
    /// Capacity bounds in bytes.
    pub capacity_min: Option<u64>,
    pub capacity_max: Option<u64>,
    pub topology_request: TopologyRequest,
    /// `snapshot_id`: create the volume from this snapshot (the plugin's
    /// ID).
    pub snapshot_id: Option<String>,
    /// `clone_id`: create the volume as a copy of this volume (the
    /// plugin's ID).
    pub clone_id: Option<String>,
    /// Nomad keys csi-agent does not act on, as written.
    pub ignored: Vec<Kept>,
}

/// Where the volume must be, or should preferably be, accessible from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopologyRequest {
    pub required: Vec<Topology>,
    pub preferred: Vec<Topology>,
}

impl TopologyRequest {
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.preferred.is_empty()
    }
}

/// One location: segments such as `rack = "R1"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub segments: BTreeMap<String, String>,
}

impl VolumeSpec {
    /// Decodes and validates a volume spec; `file` names it in messages.
    pub fn decode(src: &str, file: &str) -> Result<Decoded<VolumeSpec>, Invalid> {
        Decoder::run(src, file, decode_volume)
    }

    /// The spec as HCL that decodes to it, secrets included: write it only
    /// where the spec itself may go, and never log it.
    pub fn to_hcl(&self) -> String {
        let mut w = Writer::new();
        w.string("id", &self.id);
        w.string("name", &self.name);
        w.string("type", "csi");
        w.string("plugin_id", &self.plugin_id);
        w.opt_string("external_id", self.external_id.as_deref());
        w.opt_string("snapshot_id", self.snapshot_id.as_deref());
        w.opt_string("clone_id", self.clone_id.as_deref());
        for (key, value) in [
            ("capacity_min", self.capacity_min),
            ("capacity_max", self.capacity_max),
        ] {
            if let Some(bytes) = value {
                w.string(key, &bytes.to_string());
            }
        }
        for capability in &self.capabilities {
            w.open("capability", None);
            w.string("access_mode", capability.access_mode.as_str());
            w.string("attachment_mode", capability.attachment_mode.as_str());
            w.close();
        }
        write_mount_options(&mut w, &self.mount_options);
        w.pairs("secrets", self.secrets.expose());
        w.map("parameters", &self.parameters);
        w.map("context", &self.context);
        if !self.topology_request.is_empty() {
            w.open("topology_request", None);
            for (kind, topologies) in [
                ("required", &self.topology_request.required),
                ("preferred", &self.topology_request.preferred),
            ] {
                if topologies.is_empty() {
                    continue;
                }
                w.open(kind, None);
                for topology in topologies {
                    w.open("topology", None);
                    w.map("segments", &topology.segments);
                    w.close();
                }
                w.close();
            }
            w.close();
        }
        w.kept(&self.ignored);
        w.finish()
    }
}

fn decode_volume(dec: &Decoder<'_>, body: &Body) -> VolumeSpec {
    let mut f = dec.top(body, "the volume spec");
    let id = f.string_at("id");
    if let Some((id, pos)) = &id {
        dec.check_id(*pos, "volume ID", id);
    }
    let id = f.require("id", id).map(|(id, _)| id).unwrap_or_default();
    let name = f.string("name").unwrap_or_else(|| id.clone());
    let volume_type = f.string_at("type");
    match f.require("type", volume_type) {
        Some((kind, _)) if kind == "csi" => {}
        Some((kind, pos)) if kind == "host" => f.error(
            pos,
            "volume type \"host\" is not supported here: declare host volumes as host_volume blocks in the agent config",
        ),
        Some((kind, pos)) => f.error(pos, format!("unknown volume type {kind:?} (expected \"csi\")")),
        None => {}
    }
    let plugin_id = f.string_at("plugin_id");
    if let Some((plugin_id, pos)) = &plugin_id {
        dec.check_id(*pos, "plugin ID", plugin_id);
    }
    let plugin_id = f
        .require("plugin_id", plugin_id)
        .map(|(id, _)| id)
        .unwrap_or_default();
    let external_id = f.string_at("external_id").map(|(external_id, pos)| {
        if external_id.is_empty() {
            f.error(pos, "\"external_id\" in the volume spec must not be empty");
        }
        external_id
    });

    let capabilities = decode_capabilities(&mut f);
    let mount_options_block = f.block("mount_options");
    let mount_options = mount_options_block
        .map(|block| decode_mount_options(&mut f.nested(block)))
        .unwrap_or_default();
    if let Some(block) = mount_options_block {
        let file_system = capabilities
            .iter()
            .any(|c| c.attachment_mode == AttachmentMode::FileSystem);
        if !capabilities.is_empty() && !file_system {
            f.error(
                block.kind.span.start,
                "mount_options apply to file-system volumes, but no capability of the volume spec is file-system",
            );
        }
    }

    let secrets = f
        .map("secrets")
        .unwrap_or_default()
        .into_iter()
        .collect::<Secrets>();
    let parameters = f.map("parameters").unwrap_or_default();
    let context = f.map("context").unwrap_or_default();
    let capacity_min = size(&mut f, "capacity_min");
    let capacity_max = size(&mut f, "capacity_max");
    if let (Some(min), Some(max)) = (capacity_min, capacity_max) {
        if min > max {
            let pos = body
                .attribute("capacity_max")
                .map_or(f.pos(), |a| a.value.pos());
            f.error(
                pos,
                format!(
                    "\"capacity_max\" ({}) is smaller than \"capacity_min\" ({})",
                    format_size(max),
                    format_size(min)
                ),
            );
        }
    }
    let topology_request = f
        .block("topology_request")
        .map(|block| decode_topology_request(&mut f.nested(block)))
        .unwrap_or_default();
    let mut source = |key: &'static str| {
        f.string_at(key).and_then(|(value, pos)| {
            if value.is_empty() {
                f.error(pos, format!("{key:?} must not be empty"));
                None
            } else {
                Some((value, pos))
            }
        })
    };
    let snapshot_id = source("snapshot_id");
    let clone_id = source("clone_id");
    if let (Some(_), Some((_, pos))) = (&snapshot_id, &clone_id) {
        f.error(
            *pos,
            "\"snapshot_id\" and \"clone_id\" cannot both be set: a volume is made from one source",
        );
    }
    let (snapshot_id, clone_id) = (snapshot_id.map(|s| s.0), clone_id.map(|c| c.0));
    let ignored = f.ignore(IGNORED);
    f.finish();
    VolumeSpec {
        id,
        name,
        plugin_id,
        external_id,
        capabilities,
        mount_options,
        secrets,
        parameters,
        context,
        capacity_min,
        capacity_max,
        topology_request,
        snapshot_id,
        clone_id,
        ignored,
    }
}

/// The `capability` blocks: at least one, no two alike.
fn decode_capabilities(f: &mut Fields<'_>) -> Vec<Capability> {
    let blocks = f.blocks("capability");
    if blocks.is_empty() {
        f.error(
            f.pos(),
            format!("{} needs at least one capability block", f.what()),
        );
    }
    let mut capabilities: Vec<Capability> = Vec::new();
    for block in blocks {
        let mut c = f.nested(block);
        let access_mode = c.parsed("access_mode");
        let access_mode = c.require("access_mode", access_mode);
        let attachment_mode = c.parsed("attachment_mode");
        let attachment_mode = c.require("attachment_mode", attachment_mode);
        c.finish();
        if let (Some(access_mode), Some(attachment_mode)) = (access_mode, attachment_mode) {
            let capability = Capability::new(access_mode, attachment_mode);
            if capabilities.contains(&capability) {
                f.error(
                    block.kind.span.start,
                    format!("capability {capability} is given twice"),
                );
            } else {
                capabilities.push(capability);
            }
        }
    }
    capabilities
}

/// `mount_options { fs_type, mount_flags }`.
pub(crate) fn decode_mount_options(f: &mut Fields<'_>) -> MountOptions {
    let fs_type = f.string("fs_type").unwrap_or_default();
    let mount_flags = MountFlags::new(f.strings("mount_flags").unwrap_or_default());
    f.finish();
    MountOptions {
        fs_type,
        mount_flags,
        volume_mount_group: String::new(),
    }
}

/// Writes `mount_options` unless they are empty.
pub(crate) fn write_mount_options(w: &mut Writer, options: &MountOptions) {
    if options.is_empty() {
        return;
    }
    w.open("mount_options", None);
    if !options.fs_type.is_empty() {
        w.string("fs_type", &options.fs_type);
    }
    if !options.mount_flags.is_empty() {
        w.strings("mount_flags", options.mount_flags.expose());
    }
    w.close();
}

fn decode_topology_request(f: &mut Fields<'_>) -> TopologyRequest {
    let mut request = TopologyRequest::default();
    for (kind, out) in [
        ("required", &mut request.required),
        ("preferred", &mut request.preferred),
    ] {
        let Some(block) = f.block(kind) else {
            continue;
        };
        let mut list = f.nested(block);
        for topology in list.blocks("topology") {
            let mut t = list.nested(topology);
            let segments = t.map("segments");
            match t.require("segments", segments) {
                Some(segments) if segments.is_empty() => t.error(
                    topology.kind.span.start,
                    format!("segments in {} must not be empty", t.what()),
                ),
                Some(segments) => out.push(Topology { segments }),
                None => {}
            }
            t.finish();
        }
        list.finish();
    }
    f.finish();
    request
}

/// A capacity: bytes as a number, or a string with a unit (`"10GiB"`). As
/// in Nomad, units may be written in any case and without the `B`
/// (`"50gib"`, `"200G"`).
fn size(f: &mut Fields<'_>, key: &'static str) -> Option<u64> {
    let attr = f.attr(key)?;
    let result = match &attr.value {
        Expr::Number { value, .. } => value.as_u64().ok_or_else(|| UnitError {
            what: "size",
            value: value.text().to_string(),
            expected: "a whole number of bytes",
        }),
        value => match value.as_str() {
            Some(text) => parse_capacity(text),
            None => {
                f.error(
                    value.pos(),
                    format!(
                        "{key:?} in {} must be a size such as \"10GiB\", found a {}",
                        f.what(),
                        value.kind_name()
                    ),
                );
                return None;
            }
        },
    };
    result
        .map_err(|err| f.error(attr.value.pos(), format!("{key:?} in {}: {err}", f.what())))
        .ok()
}

/// A capacity as a volume spec reads it: a size with a unit
/// ([`parse_size`]), or a unit Nomad accepts in another case or without its
/// `B` (`"50gib"`, `"200G"`).
pub fn parse_capacity(text: &str) -> Result<u64, UnitError> {
    parse_size(text).or_else(|err| parse_size(&canonical_unit(text)).map_err(|_| err))
}

/// `text` with its unit spelled as [`parse_size`] expects, if it is a unit
/// Nomad accepts in another case or without its `B`.
fn canonical_unit(text: &str) -> String {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = match unit.to_ascii_lowercase().as_str() {
        "b" => "",
        "k" | "kb" => "KB",
        "m" | "mb" => "MB",
        "g" | "gb" => "GB",
        "t" | "tb" => "TB",
        "ki" | "kib" => "KiB",
        "mi" | "mib" => "MiB",
        "gi" | "gib" => "GiB",
        "ti" | "tib" => "TiB",
        _ => return text.to_string(),
    };
    format!("{number}{unit}")
}

#[cfg(test)]
mod tests {
    use super::canonical_unit;

    #[test]
    fn units_in_any_case_become_canonical() {
        assert_eq!(canonical_unit("50gib"), "50GiB");
        assert_eq!(canonical_unit("200G"), "200GB");
        assert_eq!(canonical_unit("1.5mi"), "1.5MiB");
        assert_eq!(canonical_unit("7b"), "7");
        assert_eq!(canonical_unit("10 GiB"), "10 GiB");
    }
}
