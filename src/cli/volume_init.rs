//! `csi-agent volume init [-json] [FILE]`: writes an example volume spec,
//! as `nomad volume init` does: in HCL with every key explained, or with
//! `-json` in HCL's JSON syntax, which has no comments and so holds only the
//! keys the HCL example sets. Both examples are valid specs and decode to
//! the same spec (unit tests check it), so a user edits one rather than
//! starts from a blank page. An existing file is never overwritten.
//!
//! csi-agent reads a spec as JSON when its name ends in `.json`, so `-json`
//! refuses any other name, and the HCL example a `.json` one: the file
//! written is always one csi-agent reads back.

use super::out;
use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};

use super::args::{self, Flag, UsageError};
use super::CliError;
use hcl::Syntax;

/// The file written when none is named.
pub const DEFAULT_FILE: &str = "volume.hcl";

/// The file written with `-json` when none is named.
pub const DEFAULT_JSON_FILE: &str = "volume.json";

/// The example: Nomad's volume spec keys, with csi-agent's meaning.
pub const EXAMPLE: &str = r#"# A CSI volume for csi-agent, in Nomad's volume spec format.
# `csi-agent volume create volume.hcl` creates it with the plugin's
# CreateVolume and registers it; with `external_id` set,
# `csi-agent volume register volume.hcl` registers an existing volume.
# `csi-agent validate volume.hcl` checks this file.

# The volume's ID: jobs name it as a group volume's `source`.
id = "database"

# The name asked for at CreateVolume (defaults to the ID).
name = "database"

# Always "csi" here (host volumes are `host_volume` blocks of the agent config).
type = "csi"

# The plugin that serves the volume: a `plugin` block of the agent config,
# or a job task's `csi_plugin { id }`.
plugin_id = "hostpath"

# For `volume register`: the plugin's own ID of an existing volume.
# external_id = "vol-0123456789"

# For `volume create`: the size to ask for. A larger capacity_min given to
# `volume create` for a volume that exists expands it.
capacity_min = "1GiB"
capacity_max = "2GiB"

# For `volume create`: make the volume from a snapshot (the plugin's
# snapshot ID, see `csi-agent volume snapshot list`), or as a clone of
# another volume (the plugin's volume ID). At most one of the two.
# snapshot_id = "snap-12345"
# clone_id    = "vol-12345"

# How the volume may be used; at least one. access_mode is
# single-node-writer, single-node-reader-only, single-node-single-writer,
# single-node-multi-writer, multi-node-reader-only,
# multi-node-single-writer or multi-node-multi-writer; attachment_mode is
# file-system or block-device.
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

capability {
  access_mode     = "single-node-reader-only"
  attachment_mode = "file-system"
}

# For file-system volumes: the file system and mount flags the plugin uses.
# Mount flags are never printed back (they may hold credentials).
mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime"]
}

# Secrets for the plugin's RPCs that take them; never printed or logged.
# secrets {
#   api_token = "..."
# }

# Opaque parameters for CreateVolume and ValidateVolumeCapabilities.
# parameters {
#   tier = "ssd"
# }

# Where the volume must (required) or should (preferred) be accessible,
# for plugins with topology; segments are the plugin's topology keys.
# topology_request {
#   required {
#     topology {
#       segments { rack = "R1" }
#     }
#   }
# }
"#;

/// [`EXAMPLE`] in HCL's JSON syntax, without the keys it leaves commented.
pub const EXAMPLE_JSON: &str = r#"{
  "id": "database",
  "name": "database",
  "type": "csi",
  "plugin_id": "hostpath",
  "capacity_min": "1GiB",
  "capacity_max": "2GiB",
  "capability": [
    {
      "access_mode": "single-node-writer",
      "attachment_mode": "file-system"
    },
    {
      "access_mode": "single-node-reader-only",
      "attachment_mode": "file-system"
    }
  ],
  "mount_options": {
    "fs_type": "ext4",
    "mount_flags": ["noatime"]
  }
}
"#;

pub fn run(argv: &[String], flags: &[Flag]) -> Result<(), CliError> {
    let args = args::parse(flags, argv)?;
    args.at_most(1)?;
    let json = args.switch("json");
    let (default, example) = if json {
        (DEFAULT_JSON_FILE, EXAMPLE_JSON)
    } else {
        (DEFAULT_FILE, EXAMPLE)
    };
    let file = args
        .positional
        .first()
        .map(String::as_str)
        .unwrap_or(default);
    match (json, Syntax::of_file(file)) {
        (true, Syntax::Native) => {
            return Err(UsageError::new(format!(
                "-json writes JSON, which csi-agent reads from files named *.json, not {file:?}"
            ))
            .into())
        }
        (false, Syntax::Json) => {
            return Err(UsageError::new(format!(
                "{file:?} would be read as JSON: give -json, or a name not ending in .json"
            ))
            .into())
        }
        _ => {}
    }
    let mut out = match OpenOptions::new().write(true).create_new(true).open(file) {
        Ok(out) => out,
        Err(err) if err.kind() == ErrorKind::AlreadyExists => {
            return Err(CliError::Io {
                what: format!("{file} already exists; csi-agent does not overwrite it"),
                err,
            })
        }
        Err(err) => {
            return Err(CliError::Io {
                what: format!("failed to create {file}"),
                err,
            })
        }
    };
    out.write_all(example.as_bytes())
        .and_then(|()| out.sync_all())
        .map_err(|err| CliError::Io {
            what: format!("failed to write {file}"),
            err,
        })?;
    out::outln!("Example volume specification written to {file}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::VolumeSpec;

    #[test]
    fn the_example_is_a_valid_volume_spec() {
        let decoded = VolumeSpec::decode(EXAMPLE, DEFAULT_FILE).unwrap();
        let spec = decoded.spec;
        assert_eq!(spec.id, "database");
        assert_eq!(spec.plugin_id, "hostpath");
        assert_eq!(spec.capabilities.len(), 2);
        assert_eq!(spec.capacity_min, Some(1 << 30));
        assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    }

    #[test]
    fn the_json_example_is_the_same_spec() {
        let decoded =
            VolumeSpec::decode(EXAMPLE_JSON, DEFAULT_JSON_FILE).unwrap_or_else(|e| panic!("{e}"));
        assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
        let hcl = VolumeSpec::decode(EXAMPLE, DEFAULT_FILE).unwrap().spec;
        assert_eq!(decoded.spec, hcl);
    }

    #[test]
    fn every_commented_key_is_valid_when_uncommented() {
        // Uncomment `external_id`, `snapshot_id`, secrets, parameters and
        // topology: the spec still decodes (clone_id would conflict with
        // snapshot_id, so it stays commented).
        let text: String = EXAMPLE
            .lines()
            .map(|line| {
                let uncommented = line.strip_prefix("# ").unwrap_or(line);
                let keep = line.starts_with("# ")
                    && (uncommented.starts_with("external_id")
                        || uncommented.starts_with("snapshot_id")
                        || uncommented.starts_with("secrets")
                        || uncommented.starts_with("parameters")
                        || uncommented.starts_with("topology_request")
                        || uncommented.starts_with("  ")
                        || uncommented == "}");
                if keep {
                    uncommented.to_string()
                } else {
                    line.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let spec = VolumeSpec::decode(&text, DEFAULT_FILE)
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .spec;
        assert_eq!(spec.snapshot_id.as_deref(), Some("snap-12345"));
        assert_eq!(spec.external_id.as_deref(), Some("vol-0123456789"));
        assert_eq!(spec.parameters["tier"], "ssd");
        assert_eq!(spec.topology_request.required.len(), 1);
    }
}
