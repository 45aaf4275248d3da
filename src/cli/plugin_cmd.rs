//! `csi-agent plugin status`: the plugin registry, from the agent, per
//! plugin ID as Nomad shows plugins: controllers and nodes counted
//! (healthy/expected), and every instance (a monolith, or a controller and
//! a node run apart) with its socket, health, fingerprint and events.

use super::out;
use std::time::SystemTime;

use super::args::{self, switch, value, Flag, UsageError};
use super::json::from_message;
use super::CliError;
use crate::api::client::{resolve_address, AgentClient};
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::units::{format_duration, format_timestamp};

pub const USAGE: &str = "\
usage: csi-agent plugin status [-json] [-address ADDR] [ID]

Without ID, a table of every plugin ID with its controllers and nodes
(healthy/expected); with ID, everything the agent knows about that plugin,
instance by instance, with their recent health events.

  -json           print the answer as JSON
  -address ADDR   the agent's control socket (default $CSI_AGENT_ADDR, else
                  /var/lib/csi-agent/control.sock)";

const FLAGS: &[Flag] = &[switch("json"), value("address")];

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let Some((verb, rest)) = argv.split_first() else {
        return Err(UsageError::new("missing the plugin command (status)").into());
    };
    if verb != "status" {
        return Err(UsageError::new(format!("unknown plugin command {verb:?}")).into());
    }
    let args = args::parse(FLAGS, rest)?;
    args.at_most(1)?;
    let id = args.positional.first().map(String::as_str).unwrap_or("");
    let socket = resolve_address(args.value("address"))?;
    let client = AgentClient::connect(&socket)?;
    let resp = client.plugin_status(id)?;
    if !resp.cluster_note.is_empty() {
        eprintln!("note: {}", resp.cluster_note);
    }
    if args.switch("json") {
        let json = if id.is_empty() {
            from_message(&resp)
        } else {
            from_message(&resp.plugins[0])
        };
        out::outln!("{}", json.pretty());
    } else if id.is_empty() {
        out::out!("{}", table(&resp.plugins));
    } else {
        out::out!("{}", details(&resp.plugins[0], SystemTime::now()));
    }
    Ok(())
}

fn health(h: protobuf::EnumOrUnknown<api::Health>) -> &'static str {
    match h.enum_value() {
        Ok(api::Health::HEALTHY) => "healthy",
        Ok(api::Health::UNHEALTHY) => "unhealthy",
        Ok(api::Health::PENDING) => "pending",
        _ => "unknown",
    }
}

/// The types of a plugin's instances: `monolith`, or `controller+node`.
fn types(p: &api::PluginStatus) -> String {
    let types: Vec<&str> = p.instances.iter().map(|i| i.type_.as_str()).collect();
    if types.is_empty() {
        // Counted from the cluster's other nodes only.
        return "elsewhere".to_string();
    }
    types.join("+")
}

fn healthy_of(healthy: u32, expected: u32) -> String {
    format!("{healthy}/{expected}")
}

/// Left-aligned columns, two spaces apart.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn table(plugins: &[api::PluginStatus]) -> String {
    if plugins.is_empty() {
        return "No plugins registered\n".to_string();
    }
    let mut rows = vec![[
        "ID",
        "Provider",
        "Version",
        "Type",
        "Controllers Healthy/Expected",
        "Nodes Healthy/Expected",
        "Health",
    ]
    .map(String::from)
    .to_vec()];
    let or_none = |s: &str| {
        if s.is_empty() {
            "<none>".to_string()
        } else {
            s.to_string()
        }
    };
    for p in plugins {
        rows.push(vec![
            p.id.clone(),
            or_none(&p.provider),
            or_none(&p.version),
            types(p),
            healthy_of(p.controllers_healthy, p.controllers_expected),
            healthy_of(p.nodes_healthy, p.nodes_expected),
            health(p.health).to_string(),
        ]);
    }
    columns(&rows)
}

fn ago(ms: i64, now: SystemTime) -> String {
    if ms <= 0 {
        return "never".to_string();
    }
    let at = from_unix_ms(ms);
    let elapsed = now.duration_since(at).unwrap_or_default();
    let elapsed = std::time::Duration::from_millis(elapsed.as_millis() as u64 / 100 * 100);
    format!(
        "{} ({} ago)",
        format_timestamp(at),
        format_duration(elapsed)
    )
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "<none>".to_string()
    } else {
        items.join(", ")
    }
}

/// GetCapacity's last answer: `12.0 GiB available (volumes up to 1.0 GiB)
/// at TIME`, and why the last call failed when it did.
fn capacity(c: &api::PluginCapacity) -> String {
    let mut out = if c.known {
        let mut text = format!(
            "{} available",
            crate::units::format_size(c.available_bytes.max(0) as u64)
        );
        let bound = |n: i64| crate::units::format_size(n.max(0) as u64);
        match (c.minimum_volume_bytes, c.maximum_volume_bytes) {
            (0, 0) => {}
            (0, max) => text.push_str(&format!(" (volumes up to {})", bound(max))),
            (min, 0) => text.push_str(&format!(" (volumes of at least {})", bound(min))),
            (min, max) => text.push_str(&format!(" (volumes of {} to {})", bound(min), bound(max))),
        }
        text.push_str(&format!(
            " at {}",
            crate::units::format_timestamp(crate::plugin::fingerprint::from_unix_ms(
                c.checked_unix_ms
            ))
        ));
        text
    } else {
        "<not known yet>".to_string()
    };
    if !c.error.is_empty() {
        out.push_str(&format!("; the last GetCapacity failed: {}", c.error));
    }
    out
}

/// `key = value` lines, the keys padded to one width.
fn fields(fields: &[(&str, String)]) -> String {
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value) in fields {
        out.push_str(&format!("{key:<width$} = {value}\n"));
    }
    out
}

fn details(p: &api::PluginStatus, now: SystemTime) -> String {
    let mut rows = vec![
        ("ID", p.id.clone()),
        ("Provider", p.provider.clone()),
        ("Version", p.version.clone()),
        ("Controllers Healthy", p.controllers_healthy.to_string()),
        ("Controllers Expected", p.controllers_expected.to_string()),
        ("Nodes Healthy", p.nodes_healthy.to_string()),
        ("Nodes Expected", p.nodes_expected.to_string()),
        ("Health", health(p.health).to_string()),
        (
            "Volumes",
            if p.volumes.is_empty() {
                "<none>".to_string()
            } else {
                p.volumes.join(", ")
            },
        ),
    ];
    if let Some(c) = p.capacity.as_ref() {
        rows.push(("Capacity", capacity(c)));
    }
    let mut out = fields(&rows);
    for instance in &p.instances {
        let mut title = instance.type_.clone();
        if let Some(first) = title.get_mut(..1) {
            first.make_ascii_uppercase();
        }
        out.push_str(&format!("\n{title} Instance\n"));
        out.push_str(&instance_details(instance, now));
    }
    out
}

/// One instance: its process, health and fingerprint, then its events.
fn instance_details(p: &api::Plugin, now: SystemTime) -> String {
    let mut lines: Vec<(&str, String)> = vec![
        ("Type", p.type_.clone()),
        ("Source", p.source.clone()),
        ("Socket", p.socket.clone()),
        (
            // Where a plugin task finds the agent's csi/<plugin> dir, and
            // the staging and publish paths of its RPCs.
            "Paths In Plugin",
            if p.stage_publish_base_dir.is_empty() {
                "host paths".to_string()
            } else {
                format!("under {}", p.stage_publish_base_dir)
            },
        ),
        (
            "Health",
            format!("{} ({})", health(p.health), p.health_reason),
        ),
        ("Last Heartbeat", ago(p.last_heartbeat_unix_ms, now)),
        ("Registered", ago(p.registered_unix_ms, now)),
    ];
    match p.fingerprint.as_ref() {
        None => lines.push(("Fingerprint", "<none yet>".to_string())),
        Some(f) => {
            let topology: Vec<String> = {
                let mut pairs: Vec<_> = f.topology.iter().collect();
                order::sort(&mut pairs);
                pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
            };
            let manifest: Vec<String> = {
                let mut pairs: Vec<_> = f.manifest.iter().collect();
                order::sort(&mut pairs);
                pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
            };
            lines.extend([
                ("Provider", f.provider.clone()),
                ("Version", f.version.clone()),
                ("Manifest", list(&manifest)),
                ("Plugin Capabilities", list(&f.plugin_capabilities)),
                ("Controller Capabilities", list(&f.controller_capabilities)),
                ("Node Capabilities", list(&f.node_capabilities)),
                (
                    "Node ID",
                    if f.node_id.is_empty() {
                        "<none>".to_string()
                    } else {
                        f.node_id.clone()
                    },
                ),
                (
                    "Max Volumes",
                    if f.max_volumes == 0 {
                        "unlimited".to_string()
                    } else {
                        f.max_volumes.to_string()
                    },
                ),
                ("Topology", list(&topology)),
                ("Fingerprinted", ago(f.taken_unix_ms, now)),
            ]);
        }
    }
    let mut out = fields(&lines);
    out.push_str("\nRecent Health Events\n");
    if p.events.is_empty() {
        out.push_str("<none>\n");
    } else {
        let mut rows = vec![["Time", "From", "To", "Reason"].map(String::from).to_vec()];
        for e in &p.events {
            rows.push(vec![
                format_timestamp(from_unix_ms(e.unix_ms)),
                health(e.old_health).to_string(),
                health(e.new_health).to_string(),
                e.reason.clone(),
            ]);
        }
        out.push_str(&columns(&rows));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(type_: &str, health: api::Health) -> api::Plugin {
        let fingerprint = api::Fingerprint {
            provider: "hostpath.csi-agent".into(),
            version: "0.1.0".into(),
            node_id: "n1".into(),
            ..Default::default()
        };
        api::Plugin {
            id: "hp".into(),
            type_: type_.into(),
            health: health.into(),
            fingerprint: Some(fingerprint).into(),
            ..Default::default()
        }
    }

    fn plugin(instances: Vec<api::Plugin>, counts: [u32; 4]) -> api::PluginStatus {
        api::PluginStatus {
            id: "hp".into(),
            provider: "hostpath.csi-agent".into(),
            version: "0.1.0".into(),
            controllers_healthy: counts[0],
            controllers_expected: counts[1],
            nodes_healthy: counts[2],
            nodes_expected: counts[3],
            health: api::Health::HEALTHY.into(),
            instances,
            ..Default::default()
        }
    }

    #[test]
    fn the_table_aligns_columns() {
        let p = plugin(
            vec![instance("monolith", api::Health::HEALTHY)],
            [1, 1, 1, 1],
        );
        let text = table(&[p]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("ID  Provider            Version  Type"));
        assert!(lines[1].starts_with("hp  hostpath.csi-agent  0.1.0    monolith"));
        assert!(lines[1].ends_with("1/1                           1/1                     healthy"));
    }

    #[test]
    fn a_split_plugin_is_one_row_counting_its_controller_and_node_apart() {
        let p = plugin(
            vec![
                instance("controller", api::Health::UNHEALTHY),
                instance("node", api::Health::HEALTHY),
            ],
            [0, 1, 1, 1],
        );
        let text = table(&[p]);
        let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(row[3..6], ["controller+node", "0/1", "1/1"], "{text}");
    }

    #[test]
    fn details_show_the_counts_then_each_instance_with_its_events() {
        let p = plugin(
            vec![
                instance("controller", api::Health::HEALTHY),
                instance("node", api::Health::PENDING),
            ],
            [1, 1, 0, 1],
        );
        let text = details(&p, SystemTime::now());
        assert!(text.starts_with("ID                   = hp\n"), "{text}");
        assert!(text.contains("Controllers Expected = 1\n"), "{text}");
        assert!(text.contains("Nodes Healthy        = 0\n"), "{text}");
        let controller = text.find("\nController Instance\nType").unwrap();
        let node = text.find("\nNode Instance\nType").unwrap();
        assert!(controller < node, "{text}");
        assert!(
            text[node..].contains("Max Volumes             = unlimited\n"),
            "{text}"
        );
        assert!(
            text[node..].contains("Health                  = pending ()\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("Recent Health Events\n<none>\n").count(),
            2,
            "{text}"
        );
    }
}
