//! `csi-agent volume ...`: registers, creates, claims, releases and shows
//! volumes through the agent's control API.
//!
//! The agent does the work; this module turns command lines into requests
//! and answers into text. It checks locally what it can (a propagation name,
//! an absolute target), so that a typo is a usage error before any call.
//! Mount flags and secret values never reach it: the agent sends only their
//! number and the secret keys.

use super::out;
use std::path::Path;

use super::args::{self, switch, value, Args, Flag, UsageError};
use super::json::from_message;
use super::plugin_cmd::columns;
use super::CliError;
use crate::api::client::{self, resolve_address, AgentClient};
use crate::mount::Propagation;
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::units::{format_size, format_timestamp};

pub const USAGE: &str = "\
usage: csi-agent volume COMMAND [-address ADDR] ARGS

  register FILE           register an existing volume from a volume spec
  create FILE             create the volume a spec describes (CreateVolume),
                          then register it; for both, a FILE named *.json
                          is read in HCL's JSON syntax, and - reads stdin
  deregister [-force] ID  forget a volume; refused while it is claimed unless
                          -force, which releases every claim first
  delete ID               delete a volume the agent created (DeleteVolume),
                          then deregister it
  status [-json] [ID]     without ID, a table of every volume; with ID, its
                          details, claims and usage; -json prints JSON
  claim -alloc ALLOC [-read-only] [-target PATH] [-propagation MODE] ID
                          claim a volume for an alloc and wait until it is
                          published (and bind-mounted at PATH, an absolute
                          host path); MODE is private (the default),
                          host-to-task or bidirectional
  release -alloc ALLOC ID
                          release an alloc's claim and wait until it is gone
  detach [-alloc ALLOC] ID
                          Nomad's name for release: without -alloc, release
                          every claim of the volume on this host, waiting
  detach -force -node NODE ID
                          in a cluster: free the claims of NODE, a lost node
                          (its agent is gone), after the controller leader
                          detached the volume from it where a controller had
                          attached it; for a write claim no controller can
                          fence, only once you know NODE no longer writes
  status -plugin PLUGIN [-json]
                          the plugin's registered volumes, and the volumes
                          it lists (ListVolumes) that are not registered
  init [-json] [FILE]     write an example volume spec (default volume.hcl),
                          every key explained in a comment; -json writes it
                          in HCL's JSON syntax (default volume.json)
  snapshot create|delete|list ...
                          snapshots (see `csi-agent volume snapshot -help`)

  -address ADDR           the agent's control socket (default
                          $CSI_AGENT_ADDR, else /var/lib/csi-agent/control.sock)";

const ADDRESS_FLAGS: &[Flag] = &[value("address")];
const DEREGISTER_FLAGS: &[Flag] = &[switch("force"), value("address")];
const STATUS_FLAGS: &[Flag] = &[switch("json"), value("plugin"), value("address")];
const DETACH_FLAGS: &[Flag] = &[
    value("alloc"),
    switch("force"),
    value("node"),
    value("address"),
];
const INIT_FLAGS: &[Flag] = &[switch("json")];
const CLAIM_FLAGS: &[Flag] = &[
    value("alloc"),
    switch("read-only"),
    value("target"),
    value("propagation"),
    value("address"),
];
const RELEASE_FLAGS: &[Flag] = &[value("alloc"), value("address")];

const VERBS: &str =
    "register, create, deregister, delete, status, claim, release, detach, init, snapshot";

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let Some((verb, rest)) = argv.split_first() else {
        return Err(UsageError::new(format!("missing the volume command ({VERBS})")).into());
    };
    match verb.as_str() {
        "register" => spec(rest, false),
        "create" => spec(rest, true),
        "deregister" => forget(rest, false),
        "delete" => forget(rest, true),
        "status" => status(rest),
        "claim" => claim(rest),
        "release" => release(rest),
        "detach" => detach(rest),
        "init" => super::volume_init::run(rest, INIT_FLAGS),
        "snapshot" => super::snapshot_cmd::run(rest),
        other => Err(UsageError::new(format!("unknown volume command {other:?}")).into()),
    }
}

/// Parses `argv` against `flags` and takes exactly one positional argument,
/// named `what` in the error.
fn one_argument(flags: &[Flag], argv: &[String], what: &str) -> Result<(Args, String), UsageError> {
    let args = args::parse(flags, argv)?;
    args.at_most(1)?;
    let arg = args.positional(0, what)?.to_string();
    Ok((args, arg))
}

fn connect(args: &Args) -> Result<AgentClient, CliError> {
    let socket = resolve_address(args.value("address"))?;
    Ok(AgentClient::connect(&socket)?)
}

fn spec(argv: &[String], create: bool) -> Result<(), CliError> {
    let (args, path) = one_argument(ADDRESS_FLAGS, argv, "the volume spec FILE")?;
    // `-` reads the spec from standard input, as Nomad's demos pipe it.
    let (file, hcl) = super::job_inputs::read_source(&path, "volume spec")?;
    let client = connect(&args)?;
    let (resp, done) = if create {
        (client.volume_create(&file, &hcl)?, "created")
    } else {
        (client.volume_register(&file, &hcl)?, "registered")
    };
    match resp.volumes.first() {
        Some(v) => out::outln!("Volume {:?} {done} (external ID {:?})", v.id, v.external_id),
        None => out::outln!("Volume from {file} {done}"),
    }
    Ok(())
}

/// `deregister`, or `delete` when `delete` is true: the agent forgets the
/// volume, after deleting it with the plugin for `delete`.
fn forget(argv: &[String], delete: bool) -> Result<(), CliError> {
    if delete {
        let (args, id) = one_argument(ADDRESS_FLAGS, argv, "the volume ID")?;
        connect(&args)?.volume_delete(&id)?;
        out::outln!("Volume {id:?} deleted");
    } else {
        let (args, id) = one_argument(DEREGISTER_FLAGS, argv, "the volume ID")?;
        connect(&args)?.volume_deregister(&id, args.switch("force"))?;
        out::outln!("Volume {id:?} deregistered");
    }
    Ok(())
}

fn status(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(STATUS_FLAGS, argv)?;
    args.at_most(1)?;
    let id = args.positional.first().map(String::as_str).unwrap_or("");
    if let Some(plugin) = args.value("plugin") {
        if !id.is_empty() {
            return Err(
                UsageError::new("-plugin lists a plugin's volumes: give no volume ID").into(),
            );
        }
        let resp = connect(&args)?.volume_status_of_plugin(plugin)?;
        if args.switch("json") {
            out::outln!("{}", from_message(&resp).pretty());
        } else {
            out::out!("{}", table(&resp.volumes));
            out::out!("{}", external_table(&resp));
        }
        return Ok(());
    }
    let resp = connect(&args)?.volume_status(id, !id.is_empty())?;
    if id.is_empty() {
        if args.switch("json") {
            out::outln!("{}", from_message(&resp).pretty());
        } else {
            out::out!("{}", table(&resp.volumes));
        }
        return Ok(());
    }
    let Some(volume) = resp.volumes.first() else {
        return Err(client::Error::Refused {
            code: grpcio::RpcStatusCode::NOT_FOUND,
            message: format!("volume {id:?} not found"),
        }
        .into());
    };
    if args.switch("json") {
        out::outln!("{}", from_message(volume).pretty());
    } else {
        out::out!("{}", details(volume));
    }
    Ok(())
}

/// The claim request a `claim` command line asks for, checked locally.
fn claim_request(args: &Args) -> Result<api::VolumeClaimRequest, UsageError> {
    args.at_most(1)?;
    let volume_id = args.positional(0, "the volume ID")?;
    let alloc_id = args.required("alloc")?;
    let target = args.value("target").unwrap_or("");
    if !target.is_empty() && !Path::new(target).is_absolute() {
        return Err(UsageError::new(format!(
            "-target must be an absolute path, not {target:?}"
        )));
    }
    let propagation = match args.value("propagation") {
        None => "",
        Some(_) if target.is_empty() => {
            return Err(UsageError::new("-propagation needs -target"));
        }
        Some(text) => text
            .parse::<Propagation>()
            .map_err(|e| UsageError::new(e.to_string()))?
            .as_str(),
    };
    Ok(api::VolumeClaimRequest {
        volume_id: volume_id.to_string(),
        alloc_id: alloc_id.to_string(),
        read_only: args.switch("read-only"),
        target: target.to_string(),
        propagation: propagation.to_string(),
        ..Default::default()
    })
}

fn claim(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(CLAIM_FLAGS, argv)?;
    let req = claim_request(&args)?;
    let resp = connect(&args)?.volume_claim(&req)?;
    let mut line = format!(
        "Volume {:?} claimed for alloc {:?}: published at {}",
        req.volume_id, req.alloc_id, resp.publish_path
    );
    if let Some(target) = [&resp.target, &req.target]
        .into_iter()
        .find(|t| !t.is_empty())
    {
        line.push_str(&format!(", mounted at {target}"));
    }
    out::outln!("{line}");
    Ok(())
}

fn release(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(RELEASE_FLAGS, argv)?;
    args.at_most(1)?;
    let volume_id = args.positional(0, "the volume ID")?;
    let alloc_id = args.required("alloc")?;
    let resp = connect(&args)?.volume_release(volume_id, alloc_id)?;
    if resp.released {
        out::outln!("Volume {volume_id:?}: the claim of alloc {alloc_id:?} is released");
        return Ok(());
    }
    // The agent keeps the claim as a past claim and retries the failed
    // step; its message says which step and why.
    Err(CliError::Io {
        what: format!(
            "the claim of alloc {alloc_id:?} on volume {volume_id:?} is not released yet; the agent keeps retrying (see `csi-agent volume status {volume_id}`)"
        ),
        err: std::io::Error::other(if resp.message.is_empty() {
            "the agent gave no reason".to_string()
        } else {
            resp.message
        }),
    })
}

/// `detach`: Nomad's name for releasing this host's claims of a volume,
/// one alloc's with `-alloc`, else every claim, each waited for.
fn detach(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(DETACH_FLAGS, argv)?;
    args.at_most(1)?;
    let volume_id = args.positional(0, "the volume ID")?;
    match (args.value("node"), args.switch("force")) {
        (Some(node), true) => {
            if args.value("alloc").is_some() {
                return Err(UsageError::new(
                    "-node frees every claim of the node on the volume: drop -alloc",
                )
                .into());
            }
            connect(&args)?.volume_force_detach(volume_id, node)?;
            out::outln!("Volume {volume_id:?}: the claims of lost node {node} are freed");
            return Ok(());
        }
        (Some(node), false) => {
            return Err(UsageError::new(format!(
                "detaching node {node}'s claims needs -force: it asserts that {node} no longer uses the volume"
            ))
            .into())
        }
        (None, true) => {
            return Err(UsageError::new("-force goes with -node NODE (a lost node)").into())
        }
        (None, false) => {}
    }
    let client = connect(&args)?;
    let allocs: Vec<String> = match args.value("alloc") {
        Some(alloc) => vec![alloc.to_string()],
        None => {
            let resp = client.volume_status(volume_id, false)?;
            let volume = resp.volumes.first().ok_or_else(|| client::Error::Refused {
                code: grpcio::RpcStatusCode::NOT_FOUND,
                message: format!("volume {volume_id:?} not found"),
            })?;
            volume
                .claims
                .iter()
                .chain(&volume.past_claims)
                .map(|c| c.alloc_id.clone())
                .collect()
        }
    };
    if allocs.is_empty() {
        out::outln!("Volume {volume_id:?} has no claims on this host");
        return Ok(());
    }
    let mut pending = Vec::new();
    for alloc in &allocs {
        let resp = client.volume_release(volume_id, alloc)?;
        if resp.released {
            out::outln!("Volume {volume_id:?}: the claim of alloc {alloc:?} is released");
        } else {
            pending.push(format!("alloc {alloc}: {}", resp.message));
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    Err(CliError::Io {
        what: format!(
            "volume {volume_id:?} is not detached yet; the agent keeps retrying (see `csi-agent volume status {volume_id}`)"
        ),
        err: std::io::Error::other(pending.join("; ")),
    })
}

/// The plugin's volumes that are not registered, Nomad's "External
/// Volumes".
fn external_table(resp: &api::VolumeStatusResponse) -> String {
    let mut out = String::from("\nExternal Volumes\n");
    if !resp.external_error.is_empty() {
        out.push_str(&format!("<not available: {}>\n", resp.external_error));
        return out;
    }
    let rows = resp.external.iter().map(|v| {
        vec![
            v.external_id.clone(),
            if v.capacity_bytes > 0 {
                format_size(count(v.capacity_bytes))
            } else {
                "<unknown>".to_string()
            },
            list(&v.published_node_ids),
            if v.abnormal {
                format!("abnormal: {}", v.condition_message)
            } else {
                "ok".to_string()
            },
        ]
    });
    out.push_str(&rows_or(EXTERNAL_HEADER, rows.collect(), "<none>"));
    out
}

fn or_none(text: &str) -> String {
    if text.is_empty() {
        "<none>".to_string()
    } else {
        text.to_string()
    }
}

fn list(items: &[String]) -> String {
    or_none(&items.join(", "))
}

fn pairs(map: &std::collections::HashMap<String, String>) -> String {
    let mut pairs: Vec<_> = map.iter().collect();
    order::sort(&mut pairs);
    let pairs: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    list(&pairs)
}

const STAGING_HEADER: &str = "Path, State, Capability";
const EXTERNAL_HEADER: &str = "External ID, Capacity, Nodes, Condition";
const VOLUME_HEADER: &str = "ID, Name, Plugin, Provider, Schedulable, Claims, Access";
const CLAIM_HEADER: &str = "Alloc, Mode, State, Usage, Target, Publish Path";
const TOPOLOGY_HEADER: &str = "Topology, Segments";
const PAST_CLAIM_HEADER: &str = "Alloc, Mode, State, Last Error, Next Retry";

/// `rows` in columns under `header` (names separated by ", "), or `empty`
/// when there are none.
fn rows_or(header: &str, rows: Vec<Vec<String>>, empty: &str) -> String {
    if rows.is_empty() {
        return format!("{empty}\n");
    }
    let mut all = vec![header.split(", ").map(str::to_string).collect()];
    all.extend(rows);
    columns(&all)
}

fn table(volumes: &[api::VolumeStatus]) -> String {
    let rows = volumes.iter().map(|v| {
        vec![
            v.id.clone(),
            v.name.clone(),
            v.plugin_id.clone(),
            or_none(&v.provider),
            v.schedulable.to_string(),
            v.claims.len().to_string(),
            or_none(v.capabilities.first().map_or("", String::as_str)),
        ]
    });
    rows_or(VOLUME_HEADER, rows.collect(), "No volumes registered")
}

/// A count the agent sends as `int64`; a negative one (never sent) is 0.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn details(v: &api::VolumeStatus) -> String {
    let mount_flags = if v.mount_flags == 0 {
        "<none>".to_string()
    } else {
        format!("[REDACTED] ({})", v.mount_flags)
    };
    let capacity = if v.capacity_bytes > 0 {
        format_size(count(v.capacity_bytes))
    } else {
        "<unknown>".to_string()
    };
    let created = match (v.creating, v.create_error.is_empty()) {
        (false, _) => v.created.to_string(),
        (true, true) => "creating (waiting for CreateVolume)".to_string(),
        (true, false) => format!("creating (retrying CreateVolume: {})", v.create_error),
    };
    let mut fields: Vec<(&str, String)> = vec![
        ("ID", v.id.clone()),
        ("Name", v.name.clone()),
        ("Plugin ID", v.plugin_id.clone()),
        ("Provider", or_none(&v.provider)),
        ("External ID", or_none(&v.external_id)),
        ("Capabilities", list(&v.capabilities)),
        ("File System", or_none(&v.fs_type)),
        ("Mount Flags", mount_flags),
        ("Secrets", list(&v.secret_keys)),
        ("Parameters", pairs(&v.parameters)),
        ("Context", pairs(&v.context)),
        ("Capacity", capacity),
        ("Schedulable", v.schedulable.to_string()),
        ("Created", created),
    ];
    // Set only by the volume plugin's Create options.
    if v.mounts_read_only {
        fields.push(("Docker Mounts", "read-only (reader claims)".to_string()));
    }
    if !v.mount_group.is_empty() {
        fields.push(("Mount Group", v.mount_group.clone()));
    }
    // The condition the plugin last reported, and since when.
    if let Some(h) = v.health.as_ref() {
        let state = if h.abnormal { "abnormal" } else { "normal" };
        fields.push((
            "Health",
            format!(
                "{state} since {}: {}",
                format_timestamp(from_unix_ms(h.since_unix_ms)),
                h.message
            ),
        ));
    }
    let mut out = key_values(&fields);

    if !v.stagings.is_empty() {
        let stagings = v
            .stagings
            .iter()
            .map(|s| vec![s.path.clone(), s.state.clone(), s.capability.clone()]);
        out.push_str("\nStaging\n");
        out.push_str(&rows_or(STAGING_HEADER, stagings.collect(), "<none>"));
    }

    // In a cluster, each claim's node comes first.
    let clustered = v
        .claims
        .iter()
        .chain(&v.past_claims)
        .any(|c| !c.node.is_empty());
    let with_node = |c: &api::Claim, mut row: Vec<String>| {
        if clustered {
            row.insert(0, or_none(&c.node));
        }
        row
    };
    let header = |h: &str| {
        if clustered {
            format!("Node, {h}")
        } else {
            h.to_string()
        }
    };
    let claims = v.claims.iter().map(|c| {
        with_node(
            c,
            vec![
                c.alloc_id.clone(),
                c.mode.clone(),
                c.state.clone(),
                or_none(&c.usage),
                or_none(&c.target),
                or_none(&c.publish_path),
            ],
        )
    });
    out.push_str("\nClaims\n");
    out.push_str(&rows_or(&header(CLAIM_HEADER), claims.collect(), "<none>"));
    for c in &v.claims {
        if !c.device.is_empty() {
            out.push_str(&format!("alloc {}: device {}\n", c.alloc_id, c.device));
        }
        if !c.failure.is_empty() {
            out.push_str(&format!("alloc {}: failed: {}\n", c.alloc_id, c.failure));
        } else if !c.last_error.is_empty() && c.state != "taken" {
            let next = if c.next_retry_unix_ms > 0 {
                format!(
                    "; next retry {}",
                    format_timestamp(from_unix_ms(c.next_retry_unix_ms))
                )
            } else {
                String::new()
            };
            out.push_str(&format!(
                "alloc {}: attempt {} failed: {}{next}\n",
                c.alloc_id, c.attempts, c.last_error
            ));
        }
    }

    let past_claims = v.past_claims.iter().map(|c| {
        let next_retry = if c.next_retry_unix_ms > 0 {
            format_timestamp(from_unix_ms(c.next_retry_unix_ms))
        } else {
            "<none>".to_string()
        };
        let error = if c.failure.is_empty() {
            or_none(&c.last_error)
        } else {
            c.failure.clone()
        };
        with_node(
            c,
            vec![
                c.alloc_id.clone(),
                c.mode.clone(),
                c.state.clone(),
                error,
                next_retry,
            ],
        )
    });
    out.push_str("\nPast Claims\n");
    out.push_str(&rows_or(
        &header(PAST_CLAIM_HEADER),
        past_claims.collect(),
        "<none>",
    ));

    out.push_str("\nUsage\n");
    out.push_str(&usage(v.stats.as_ref()));

    // Nomad's section: one row per topology the volume is accessible from.
    if !v.topologies.is_empty() {
        let rows = v.topologies.iter().enumerate().map(|(i, t)| {
            let mut segments: Vec<(&String, &String)> = t.segments.iter().collect();
            order::sort(&mut segments);
            let segments: Vec<String> = segments
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            vec![format!("{i:02}"), segments.join(", ")]
        });
        out.push_str("\nTopology\n");
        out.push_str(&rows_or(TOPOLOGY_HEADER, rows.collect(), "<none>"));
    }
    out
}

fn usage(stats: Option<&api::VolumeStats>) -> String {
    let Some(s) = stats.filter(|s| s.available) else {
        let error = stats.map_or("", |s| s.error.as_str());
        return if error.is_empty() {
            "<not available>\n".to_string()
        } else {
            format!("<not available: {error}>\n")
        };
    };
    let condition = if s.abnormal {
        format!("abnormal ({})", s.condition_message)
    } else {
        "normal".to_string()
    };
    key_values(&[
        ("Bytes Used", format_size(count(s.bytes_used))),
        ("Bytes Available", format_size(count(s.bytes_available))),
        ("Bytes Total", format_size(count(s.bytes_total))),
        ("Inodes Used", count(s.inodes_used).to_string()),
        ("Inodes Available", count(s.inodes_available).to_string()),
        ("Inodes Total", count(s.inodes_total).to_string()),
        ("Condition", condition),
    ])
}

/// `key = value` lines, the keys padded to one width.
fn key_values(fields: &[(&str, String)]) -> String {
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    fields
        .iter()
        .map(|(key, value)| format!("{key:<width$} = {value}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(alloc: &str, state: &str) -> api::Claim {
        api::Claim {
            alloc_id: alloc.into(),
            mode: "write".into(),
            state: state.into(),
            publish_path: format!("/var/lib/csi-agent/publish/vol1/{alloc}"),
            usage: "file-system".into(),
            ..Default::default()
        }
    }

    fn volume() -> api::VolumeStatus {
        api::VolumeStatus {
            id: "vol1".into(),
            name: "data".into(),
            plugin_id: "hp".into(),
            provider: "hostpath.csi-agent".into(),
            external_id: "ext-1".into(),
            capabilities: vec![
                "single-node-writer/file-system".into(),
                "single-node-reader-only/file-system".into(),
            ],
            fs_type: "ext4".into(),
            mount_flags: 2,
            secret_keys: vec!["password".into(), "user".into()],
            parameters: [("size".to_string(), "1G".to_string())].into(),
            schedulable: true,
            claims: vec![claim("a1", "taken")],
            capacity_bytes: 1 << 30,
            ..Default::default()
        }
    }

    /// A command line, split at spaces.
    fn argv(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn claim_args(line: &str) -> Result<api::VolumeClaimRequest, UsageError> {
        claim_request(&args::parse(CLAIM_FLAGS, &argv(line))?)
    }

    fn claim_error(line: &str) -> String {
        claim_args(line).unwrap_err().message
    }

    #[test]
    fn the_table_counts_claims_and_shows_the_first_capability() {
        let text = table(&[volume()]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(
            lines[0],
            "ID    Name  Plugin  Provider            Schedulable  Claims  Access"
        );
        assert_eq!(
            lines[1],
            "vol1  data  hp      hostpath.csi-agent  true         1       single-node-writer/file-system"
        );
    }

    #[test]
    fn an_empty_table_says_so() {
        assert_eq!(table(&[]), "No volumes registered\n");
    }

    #[test]
    fn details_redact_mount_flags_and_show_only_secret_keys() {
        let text = details(&volume());
        assert!(text.contains("Mount Flags  = [REDACTED] (2)\n"), "{text}");
        assert!(text.contains("Secrets      = password, user\n"), "{text}");
        assert!(text.contains("Parameters   = size=1G\n"), "{text}");
        assert!(text.contains("Capacity     = 1.0 GiB\n"), "{text}");
        let none = details(&api::VolumeStatus {
            mount_flags: 0,
            ..volume()
        });
        assert!(none.contains("Mount Flags  = <none>\n"), "{none}");
    }

    #[test]
    fn details_say_a_volume_is_being_created_and_why_it_is_retried() {
        let text = details(&volume());
        assert!(text.contains("Created      = false\n"), "{text}");
        let creating = api::VolumeStatus {
            creating: true,
            ..volume()
        };
        let text = details(&creating);
        assert!(
            text.contains("Created      = creating (waiting for CreateVolume)\n"),
            "{text}"
        );
        let text = details(&api::VolumeStatus {
            create_error: "CreateVolume failed: UNAVAILABLE".into(),
            ..creating
        });
        assert!(
            text.contains("Created      = creating (retrying CreateVolume: CreateVolume failed: UNAVAILABLE)\n"),
            "{text}"
        );
    }

    #[test]
    fn details_list_claims_and_past_claims_with_their_last_error() {
        let mut past = claim("a0", "node-detached");
        past.last_error = "ControllerUnpublishVolume: deadline exceeded".into();
        past.next_retry_unix_ms = 1_700_000_000_000;
        let text = details(&api::VolumeStatus {
            past_claims: vec![past],
            ..volume()
        });
        let claims = text.split("\nClaims\n").nth(1).unwrap();
        assert!(
            claims.starts_with("Alloc  Mode   State  Usage        Target  Publish Path\n"),
            "{text}"
        );
        let past = text.split("\nPast Claims\n").nth(1).unwrap();
        let row = past.lines().nth(1).unwrap();
        assert!(row.starts_with("a0     write  node-detached"), "{text}");
        assert!(
            row.ends_with("ControllerUnpublishVolume: deadline exceeded  2023-11-14T22:13:20.000Z"),
            "{text}"
        );
    }

    #[test]
    fn usage_shows_sizes_counts_and_an_abnormal_condition() {
        let stats = api::VolumeStats {
            available: true,
            bytes_total: 2048,
            bytes_used: 1024,
            bytes_available: 1024,
            inodes_total: 10,
            inodes_used: 3,
            inodes_available: 7,
            abnormal: true,
            condition_message: "disk failing".into(),
            ..Default::default()
        };
        let text = usage(Some(&stats));
        assert!(text.contains("Bytes Used       = 1.0 KiB\n"), "{text}");
        assert!(text.contains("Bytes Total      = 2.0 KiB\n"), "{text}");
        assert!(text.contains("Inodes Available = 7\n"), "{text}");
        assert!(
            text.ends_with("Condition        = abnormal (disk failing)\n"),
            "{text}"
        );
    }

    #[test]
    fn usage_that_is_not_available_shows_the_error_if_any() {
        let error = "plugin has no get-volume-stats".to_string();
        let failed = api::VolumeStats {
            error,
            ..Default::default()
        };
        assert_eq!(
            usage(Some(&failed)),
            "<not available: plugin has no get-volume-stats>\n"
        );
        assert_eq!(usage(None), "<not available>\n");
    }

    #[test]
    fn a_claim_command_line_becomes_a_request() {
        let req = claim_args("vol1 -alloc a1 -read-only -target /mnt/a1 -propagation host-to-task")
            .unwrap();
        assert_eq!(
            (req.volume_id.as_str(), req.alloc_id.as_str()),
            ("vol1", "a1")
        );
        assert!(req.read_only);
        assert_eq!(
            (req.target.as_str(), req.propagation.as_str()),
            ("/mnt/a1", "host-to-task")
        );
    }

    #[test]
    fn a_bad_propagation_is_a_usage_error() {
        assert_eq!(
            claim_error("vol1 -alloc a1 -target /t -propagation rshared"),
            "unknown propagation \"rshared\", expected one of private, host-to-task, bidirectional"
        );
        let code = crate::cli::main(argv(
            "volume claim vol1 -alloc a1 -target /t -propagation rshared",
        ));
        assert_eq!(code, std::process::ExitCode::from(2));
    }

    #[test]
    fn a_propagation_without_a_target_is_a_usage_error() {
        let message = claim_error("vol1 -alloc a1 -propagation private");
        assert_eq!(message, "-propagation needs -target");
    }

    #[test]
    fn a_relative_target_is_a_usage_error() {
        let message = claim_error("vol1 -alloc a1 -target mnt");
        assert_eq!(message, "-target must be an absolute path, not \"mnt\"");
    }

    #[test]
    fn a_claim_needs_an_alloc_and_a_volume() {
        assert_eq!(claim_error("vol1"), "-alloc is required");
        assert_eq!(claim_error("-alloc a1"), "missing the volume ID");
    }

    #[test]
    fn unknown_verbs_missing_arguments_and_misplaced_flags_are_usage_errors() {
        for line in [
            "",
            "mount vol1",
            "claim vol1 -json",
            "deregister",
            "release vol1",
        ] {
            assert!(
                matches!(run(&argv(line)), Err(CliError::Usage(_))),
                "{line:?}"
            );
        }
    }
}
