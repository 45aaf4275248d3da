//! `csi-agent csi`: talk to a plugin socket directly, with no agent, like
//! gocsi's `csc`. For debugging a plugin by hand and for the README demo.
//!
//! Every command prints our types (text, or JSON with `-json`); secrets and
//! mount flags are never printed.

use super::out;
use std::path::PathBuf;
use std::time::Duration;

use super::args::{self, Args, Flag, UsageError};
use super::json::string_map;
use super::CliError;
use crate::csi::model::{
    AccessMode, AttachmentMode, Capability, MountFlags, MountOptions, Secrets,
};
use crate::csi::types::*;
use crate::csi::{check_validation, Client, Endpoint, Validation};
use crate::units;
use json::Value as Json;

pub const USAGE: &str = "\
usage: csi-agent csi -endpoint EP [-timeout 10s] [-json] SERVICE VERB [ARGS]

  identity info | caps | probe
  node info | caps
  node stage VOL -staging P -cap CAP [-publish-context k=v]... [-context k=v]... [-secret k=v]...
  node publish VOL -target P [-staging P] -cap CAP [-read-only] [-publish-context k=v]... [-context k=v]... [-secret k=v]...
  node unpublish VOL -target P
  node unstage VOL -staging P
  node stats VOL -path P [-staging P]
  node expand VOL -path P [-size BYTES] [-staging P]
  controller caps | list
  controller create NAME -cap CAP [-size BYTES] [-param k=v]... [-secret k=v]... [-topology k=v]...
  controller delete VOL [-secret k=v]...
  controller publish VOL -node ID -cap CAP [-read-only] [-context k=v]... [-secret k=v]...
  controller unpublish VOL -node ID [-secret k=v]...
  controller validate VOL -cap CAP [-context k=v]... [-param k=v]... [-secret k=v]...
  controller capacity [-cap CAP]... [-param k=v]...
  controller expand VOL -size BYTES [-secret k=v]...

CAP is MODE,TYPE[,FS[,FLAG...]], e.g. single-node-writer,file-system,ext4,noatime
(TYPE: file-system or block-device). -endpoint defaults to $CSI_ENDPOINT.";

const FLAGS: &[Flag] = &[
    args::value("endpoint"),
    args::value("timeout"),
    args::switch("json"),
    args::value("staging"),
    args::value("target"),
    args::value("path"),
    args::value("node"),
    args::value("size"),
    args::repeated("cap"),
    args::switch("read-only"),
    args::repeated("publish-context"),
    args::repeated("context"),
    args::repeated("param"),
    args::repeated("secret"),
    args::repeated("topology"),
];

/// What a command prints: text for people, JSON for `-json`.
struct Output {
    text: String,
    json: Json,
}

impl Output {
    fn done(verb: &str, volume: &str) -> Output {
        Output {
            text: format!("{verb} {volume}"),
            json: Json::object([
                ("volume_id", Json::from(volume)),
                ("result", Json::from("ok")),
            ]),
        }
    }
}

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(FLAGS, argv)?;
    let endpoint_text = match args.value("endpoint") {
        Some(ep) => ep.to_string(),
        None => {
            std::env::var("CSI_ENDPOINT").map_err(|_| UsageError::new("-endpoint is required"))?
        }
    };
    let endpoint: Endpoint = endpoint_text
        .parse()
        .map_err(|e: crate::csi::endpoint::EndpointError| UsageError::new(e.to_string()))?;
    let timeout = match args.value("timeout") {
        Some(t) => units::parse_duration(t).map_err(|e| UsageError::new(e.to_string()))?,
        None => Duration::from_secs(10),
    };
    let client = Client::new(&endpoint).with_timeout(timeout);
    let service = args.positional(0, "SERVICE (identity, node or controller)")?;
    let verb = args.positional(1, "VERB")?;
    let output = match (service, verb) {
        ("identity", "info") => identity_info(&client, &args)?,
        ("identity", "caps") => {
            let caps = client.plugin_capabilities()?;
            list_output(caps.iter().map(|c| c.as_str()))
        }
        ("identity", "probe") => {
            let ready = client.probe()?;
            Output {
                text: if ready {
                    "ready".into()
                } else {
                    "not ready".into()
                },
                json: Json::object([("ready", Json::Bool(ready))]),
            }
        }
        ("node", "info") => node_info(&client, &args)?,
        ("node", "caps") => {
            let caps = client.node_capabilities()?;
            list_output(caps.iter().map(|c| c.as_str()))
        }
        ("node", "stage") => node_stage(&client, &args)?,
        ("node", "publish") => node_publish(&client, &args)?,
        ("node", "unpublish") => {
            args.at_most(3)?;
            let volume = args.positional(2, "VOL")?;
            client.node_unpublish(volume, &PathBuf::from(args.required("target")?))?;
            Output::done("unpublished", volume)
        }
        ("node", "unstage") => {
            args.at_most(3)?;
            let volume = args.positional(2, "VOL")?;
            client.node_unstage(volume, &PathBuf::from(args.required("staging")?))?;
            Output::done("unstaged", volume)
        }
        ("node", "stats") => node_stats(&client, &args)?,
        ("node", "expand") => node_expand(&client, &args)?,
        ("controller", "caps") => {
            let caps = client.controller_capabilities()?;
            list_output(caps.iter().map(|c| c.as_str()))
        }
        ("controller", "list") => controller_list(&client, &args)?,
        ("controller", "create") => controller_create(&client, &args)?,
        ("controller", "delete") => {
            args.at_most(3)?;
            let volume = args.positional(2, "VOL")?;
            client.delete_volume(volume, &secrets(&args)?)?;
            Output::done("deleted", volume)
        }
        ("controller", "publish") => controller_publish(&client, &args)?,
        ("controller", "unpublish") => {
            args.at_most(3)?;
            let volume = args.positional(2, "VOL")?;
            client.controller_unpublish(volume, args.required("node")?, &secrets(&args)?)?;
            Output::done("unpublished", volume)
        }
        ("controller", "validate") => controller_validate(&client, &args)?,
        ("controller", "capacity") => controller_capacity(&client, &args)?,
        ("controller", "expand") => controller_expand(&client, &args)?,
        (service, verb) => {
            return Err(UsageError::new(format!("unknown command {service:?} {verb:?}")).into())
        }
    };
    if args.switch("json") {
        out::outln!("{}", output.json);
    } else if !output.text.is_empty() {
        out::outln!("{}", output.text);
    }
    Ok(())
}

/// Parses `MODE,TYPE[,FS[,FLAG...]]`.
pub fn parse_capability(text: &str) -> Result<Capability, UsageError> {
    let mut parts = text.split(',');
    let mode: AccessMode = parts
        .next()
        .unwrap_or_default()
        .parse()
        .map_err(|e| UsageError::new(format!("-cap: {e}")))?;
    let attachment = match parts.next() {
        Some("file-system" | "mount") => AttachmentMode::FileSystem,
        Some("block-device" | "block") => AttachmentMode::BlockDevice,
        Some(other) => {
            return Err(UsageError::new(format!(
                "-cap: unknown attachment mode {other:?} (expected file-system or block-device)"
            )))
        }
        None => return Err(UsageError::new("-cap takes MODE,TYPE[,FS[,FLAG...]]")),
    };
    let fs_type = parts.next().unwrap_or_default().to_string();
    let flags: Vec<String> = parts.map(str::to_string).collect();
    if attachment == AttachmentMode::BlockDevice && (!fs_type.is_empty() || !flags.is_empty()) {
        return Err(UsageError::new(
            "-cap: block-device takes no file system type or mount flags",
        ));
    }
    Ok(
        Capability::new(mode, attachment).with_mount_options(MountOptions {
            fs_type,
            mount_flags: MountFlags::new(flags),
            volume_mount_group: String::new(),
        }),
    )
}

fn capability(args: &Args) -> Result<Capability, UsageError> {
    match args.all("cap") {
        [one] => parse_capability(one),
        [] => Err(UsageError::new("-cap is required")),
        _ => Err(UsageError::new("-cap is given more than once")),
    }
}

fn capabilities(args: &Args) -> Result<Vec<Capability>, UsageError> {
    args.all("cap")
        .iter()
        .map(|c| parse_capability(c))
        .collect()
}

fn map(args: &Args, name: &str) -> Result<StringMap, UsageError> {
    Ok(args.pairs(name)?.into_iter().collect())
}

fn secrets(args: &Args) -> Result<Secrets, UsageError> {
    Ok(args.pairs("secret")?.into_iter().collect())
}

fn size(args: &Args) -> Result<i64, UsageError> {
    match args.value("size") {
        None => Ok(0),
        Some(text) => {
            let bytes =
                units::parse_size(text).map_err(|e| UsageError::new(format!("-size: {e}")))?;
            i64::try_from(bytes).map_err(|_| UsageError::new("-size is too large"))
        }
    }
}

fn list_output<'a>(items: impl Iterator<Item = &'a str>) -> Output {
    let items: Vec<&str> = items.collect();
    Output {
        text: items.join("\n"),
        json: Json::strings(&items),
    }
}

fn kv_text(map: &StringMap) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn identity_info(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(2)?;
    let info = client.plugin_info()?;
    let mut text = format!("name: {}\nversion: {}", info.name, info.vendor_version);
    if !info.manifest.is_empty() {
        text.push_str(&format!("\nmanifest: {}", kv_text(&info.manifest)));
    }
    let json = Json::object([
        ("name", Json::from(&info.name)),
        ("vendor_version", Json::from(&info.vendor_version)),
        ("manifest", string_map(&info.manifest)),
    ]);
    Ok(Output { text, json })
}

fn node_info(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(2)?;
    let info = client.node_info()?;
    let topology = info.accessible_topology.clone().unwrap_or_default();
    let max = if info.max_volumes_per_node == 0 {
        "unlimited".to_string()
    } else {
        info.max_volumes_per_node.to_string()
    };
    let text = format!(
        "node_id: {}\nmax_volumes: {max}\ntopology: {}",
        info.node_id,
        kv_text(&topology)
    );
    let json = Json::object([
        ("node_id", Json::from(&info.node_id)),
        (
            "max_volumes_per_node",
            Json::from(info.max_volumes_per_node),
        ),
        (
            "accessible_topology",
            info.accessible_topology
                .as_ref()
                .map_or(Json::Null, string_map),
        ),
    ]);
    Ok(Output { text, json })
}

fn node_stage(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(3)?;
    let volume = args.positional(2, "VOL")?;
    client.node_stage(&NodeStage {
        volume_id: volume.to_string(),
        publish_context: map(args, "publish-context")?,
        staging_target_path: PathBuf::from(args.required("staging")?),
        capability: capability(args)?,
        secrets: secrets(args)?,
        volume_context: map(args, "context")?,
    })?;
    Ok(Output::done("staged", volume))
}

fn node_publish(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(3)?;
    let volume = args.positional(2, "VOL")?;
    client.node_publish(&NodePublish {
        volume_id: volume.to_string(),
        publish_context: map(args, "publish-context")?,
        staging_target_path: args.value("staging").map(PathBuf::from),
        target_path: PathBuf::from(args.required("target")?),
        capability: capability(args)?,
        read_only: args.switch("read-only"),
        secrets: secrets(args)?,
        volume_context: map(args, "context")?,
    })?;
    Ok(Output::done("published", volume))
}

fn node_stats(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(3)?;
    let volume = args.positional(2, "VOL")?;
    let path = PathBuf::from(args.required("path")?);
    let staging = args.value("staging").map(PathBuf::from);
    let stats = client.node_volume_stats(volume, &path, staging.as_deref())?;
    let mut lines = Vec::new();
    let mut usage_json = Vec::new();
    for u in &stats.usage {
        lines.push(format!(
            "{}: used {} available {} total {}",
            u.unit, u.used, u.available, u.total
        ));
        usage_json.push(Json::object([
            ("unit", Json::from(u.unit.to_string())),
            ("used", Json::from(u.used)),
            ("available", Json::from(u.available)),
            ("total", Json::from(u.total)),
        ]));
    }
    let condition = match &stats.condition {
        Some(c) => {
            lines.push(format!(
                "condition: {} ({})",
                if c.abnormal { "abnormal" } else { "normal" },
                c.message
            ));
            Json::object([
                ("abnormal", Json::Bool(c.abnormal)),
                ("message", Json::from(&c.message)),
            ])
        }
        None => Json::Null,
    };
    Ok(Output {
        text: lines.join("\n"),
        json: Json::object([("usage", Json::Array(usage_json)), ("condition", condition)]),
    })
}

fn node_expand(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(3)?;
    let volume = args.positional(2, "VOL")?;
    let required_bytes = size(args)?;
    let capacity = client.node_expand(&NodeExpand {
        volume_id: volume.to_string(),
        volume_path: PathBuf::from(args.required("path")?),
        capacity: CapacityRange {
            required_bytes,
            limit_bytes: 0,
        },
        staging_target_path: args.value("staging").map(PathBuf::from),
        capability: args
            .all("cap")
            .first()
            .map(|c| parse_capability(c))
            .transpose()?,
        secrets: secrets(args)?,
    })?;
    Ok(Output {
        text: format!("expanded {volume}: {capacity} bytes"),
        json: Json::object([
            ("volume_id", Json::from(volume)),
            ("capacity_bytes", Json::from(capacity)),
        ]),
    })
}

fn volume_json(v: &Volume) -> Json {
    Json::object([
        ("volume_id", Json::from(&v.volume_id)),
        ("capacity_bytes", Json::from(v.capacity_bytes)),
        ("volume_context", string_map(&v.volume_context)),
        (
            "accessible_topology",
            Json::Array(v.accessible_topology.iter().map(string_map).collect()),
        ),
    ])
}

fn controller_list(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(2)?;
    let mut entries = Vec::new();
    let mut token = String::new();
    loop {
        let page = client.list_volumes(0, &token)?;
        entries.extend(page.entries);
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    let text = entries
        .iter()
        .map(|e| {
            let nodes = if e.published_node_ids.is_empty() {
                "-".to_string()
            } else {
                e.published_node_ids.join(",")
            };
            format!(
                "{}\t{}\t{nodes}",
                e.volume.volume_id, e.volume.capacity_bytes
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let json = Json::Array(
        entries
            .iter()
            .map(|e| {
                Json::object([
                    ("volume", volume_json(&e.volume)),
                    ("published_node_ids", Json::strings(&e.published_node_ids)),
                ])
            })
            .collect(),
    );
    Ok(Output { text, json })
}

fn controller_create(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(3)?;
    let name = args.positional(2, "NAME")?;
    let caps = capabilities(args)?;
    if caps.is_empty() {
        return Err(UsageError::new("-cap is required").into());
    }
    let topology: Topology = map(args, "topology")?;
    let volume = client.create_volume(&CreateVolume {
        name: name.to_string(),
        capacity: CapacityRange {
            required_bytes: size(args)?,
            limit_bytes: 0,
        },
        capabilities: caps,
        parameters: map(args, "param")?,
        secrets: secrets(args)?,
        accessibility: (!topology.is_empty()).then(|| TopologyRequirement {
            requisite: vec![topology.clone()],
            preferred: vec![topology],
        }),
        content_source: None,
    })?;
    let mut text = format!("{}\t{}", volume.volume_id, volume.capacity_bytes);
    if !volume.volume_context.is_empty() {
        text.push_str(&format!("\t{}", kv_text(&volume.volume_context)));
    }
    Ok(Output {
        text,
        json: volume_json(&volume),
    })
}

fn controller_publish(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(3)?;
    let volume = args.positional(2, "VOL")?;
    let context = client.controller_publish(&ControllerPublish {
        volume_id: volume.to_string(),
        node_id: args.required("node")?.to_string(),
        capability: capability(args)?,
        read_only: args.switch("read-only"),
        secrets: secrets(args)?,
        volume_context: map(args, "context")?,
    })?;
    // One `key=value` per line: ready to pass as -publish-context.
    Ok(Output {
        text: context
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\n"),
        json: Json::object([
            ("volume_id", Json::from(volume)),
            ("publish_context", string_map(&context)),
        ]),
    })
}

fn controller_validate(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(3)?;
    let volume = args.positional(2, "VOL")?;
    let caps = capabilities(args)?;
    if caps.is_empty() {
        return Err(UsageError::new("-cap is required").into());
    }
    let answer = client.validate_volume(&ValidateVolume {
        volume_id: volume.to_string(),
        volume_context: map(args, "context")?,
        capabilities: caps.clone(),
        parameters: map(args, "param")?,
        secrets: secrets(args)?,
    })?;
    check_validation(&caps, &answer).map_err(CliError::Mismatch)?;
    let confirmed = match &answer {
        Validation::Confirmed(c) => c.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        Validation::NotConfirmed { .. } => Vec::new(),
    };
    Ok(Output {
        text: format!("confirmed {volume}: {}", confirmed.join(", ")),
        json: Json::object([
            ("volume_id", Json::from(volume)),
            ("confirmed", Json::strings(&confirmed)),
        ]),
    })
}

fn controller_capacity(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(2)?;
    let capacity = client.capacity(&capabilities(args)?, &map(args, "param")?, None)?;
    let mut text = format!("available: {}", capacity.available_capacity);
    if let Some(max) = capacity.maximum_volume_size {
        text.push_str(&format!("\nmaximum_volume_size: {max}"));
    }
    if let Some(min) = capacity.minimum_volume_size {
        text.push_str(&format!("\nminimum_volume_size: {min}"));
    }
    let opt = |v: Option<i64>| v.map_or(Json::Null, Json::from);
    Ok(Output {
        text,
        json: Json::object([
            (
                "available_capacity",
                Json::from(capacity.available_capacity),
            ),
            ("maximum_volume_size", opt(capacity.maximum_volume_size)),
            ("minimum_volume_size", opt(capacity.minimum_volume_size)),
        ]),
    })
}

fn controller_expand(client: &Client, args: &Args) -> Result<Output, CliError> {
    args.at_most(3)?;
    let volume = args.positional(2, "VOL")?;
    let required_bytes = size(args)?;
    if required_bytes == 0 {
        return Err(UsageError::new("-size is required").into());
    }
    let expanded = client.controller_expand(&ControllerExpand {
        volume_id: volume.to_string(),
        capacity: CapacityRange {
            required_bytes,
            limit_bytes: 0,
        },
        secrets: secrets(args)?,
        capability: args
            .all("cap")
            .first()
            .map(|c| parse_capability(c))
            .transpose()?,
    })?;
    Ok(Output {
        text: format!(
            "expanded {volume}: {} bytes{}",
            expanded.capacity_bytes,
            if expanded.node_expansion_required {
                " (node expansion required)"
            } else {
                ""
            }
        ),
        json: Json::object([
            ("volume_id", Json::from(volume)),
            ("capacity_bytes", Json::from(expanded.capacity_bytes)),
            (
                "node_expansion_required",
                Json::Bool(expanded.node_expansion_required),
            ),
        ]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_flag_parses_every_part() {
        let cap = parse_capability("single-node-writer,file-system,ext4,noatime,ro").unwrap();
        assert_eq!(cap.access_mode, AccessMode::SingleNodeWriter);
        assert_eq!(cap.attachment_mode, AttachmentMode::FileSystem);
        assert_eq!(cap.mount_options.fs_type, "ext4");
        assert_eq!(
            cap.mount_options.mount_flags.expose(),
            ["noatime".to_string(), "ro".to_string()]
        );
        let block = parse_capability("multi-node-multi-writer,block-device").unwrap();
        assert_eq!(block.attachment_mode, AttachmentMode::BlockDevice);
    }

    #[test]
    fn capability_flag_errors_name_the_part() {
        assert!(parse_capability("single-node-writer")
            .unwrap_err()
            .message
            .contains("MODE,TYPE"));
        assert!(parse_capability("rw,file-system")
            .unwrap_err()
            .message
            .contains("unknown access mode"));
        assert!(parse_capability("single-node-writer,disk")
            .unwrap_err()
            .message
            .contains("unknown attachment mode"));
        assert!(parse_capability("single-node-writer,block-device,ext4").is_err());
    }
}
