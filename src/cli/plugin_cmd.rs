//! `csi-agent plugin status`: the plugin registry, from the agent.

use std::time::SystemTime;

use super::args::{self, switch, value, Flag, UsageError};
use super::json::Json;
use super::CliError;
use crate::api::client::{resolve_address, AgentClient};
use crate::csi::types::PluginCapability;
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::spec::PluginType;
use crate::units::{format_duration, format_timestamp};

pub const USAGE: &str = "\
usage: csi-agent plugin status [-json] [-address ADDR] [ID]

Without ID, a table of every plugin; with ID, everything the agent knows
about that plugin, with its recent health events.

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
    if args.switch("json") {
        let json = if id.is_empty() {
            Json::from_message(&resp)
        } else {
            Json::from_message(&resp.plugins[0])
        };
        println!("{}", json.pretty());
    } else if id.is_empty() {
        print!("{}", table(&resp.plugins));
    } else {
        print!("{}", details(&resp.plugins[0], SystemTime::now()));
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

/// The plugin's type; `None` for a type this binary does not know.
fn plugin_type(p: &api::Plugin) -> Option<PluginType> {
    p.type_.parse().ok()
}

/// "healthy/expected" controllers: a plugin of controller type is one
/// expected controller, healthy when it is and serves the service.
fn controllers(p: &api::Plugin) -> String {
    let expected = u8::from(plugin_type(p).is_some_and(PluginType::has_controller));
    let service = PluginCapability::ControllerService.as_str();
    let serves = p
        .fingerprint
        .as_ref()
        .is_some_and(|f| f.plugin_capabilities.iter().any(|c| c == service));
    let healthy = u8::from(expected == 1 && serves && health(p.health) == "healthy");
    format!("{healthy}/{expected}")
}

fn nodes(p: &api::Plugin) -> String {
    let expected = u8::from(plugin_type(p).is_some_and(PluginType::has_node));
    let healthy = u8::from(expected == 1 && health(p.health) == "healthy");
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

fn table(plugins: &[api::Plugin]) -> String {
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
    for p in plugins {
        let fp = p.fingerprint.as_ref();
        rows.push(vec![
            p.id.clone(),
            fp.map_or("<none>".into(), |f| f.provider.clone()),
            fp.map_or("<none>".into(), |f| f.version.clone()),
            p.type_.clone(),
            controllers(p),
            nodes(p),
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

fn details(p: &api::Plugin, now: SystemTime) -> String {
    let mut fields: Vec<(&str, String)> = vec![
        ("ID", p.id.clone()),
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
        ("Controllers Healthy", controllers(p)),
        ("Nodes Healthy", nodes(p)),
        ("Last Heartbeat", ago(p.last_heartbeat_unix_ms, now)),
        ("Registered", ago(p.registered_unix_ms, now)),
    ];
    match p.fingerprint.as_ref() {
        None => fields.push(("Fingerprint", "<none yet>".to_string())),
        Some(f) => {
            let topology: Vec<String> = {
                let mut pairs: Vec<_> = f.topology.iter().collect();
                pairs.sort();
                pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
            };
            let manifest: Vec<String> = {
                let mut pairs: Vec<_> = f.manifest.iter().collect();
                pairs.sort();
                pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
            };
            fields.extend([
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
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value) in &fields {
        out.push_str(&format!("{key:<width$} = {value}\n"));
    }
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

    fn plugin(type_: &str, health: api::Health, caps: &[&str]) -> api::Plugin {
        let fingerprint = api::Fingerprint {
            provider: "hostpath.csi-agent".into(),
            version: "0.1.0".into(),
            plugin_capabilities: caps.iter().map(|c| c.to_string()).collect(),
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

    #[test]
    fn a_healthy_monolith_counts_as_one_controller_and_one_node() {
        let p = plugin("monolith", api::Health::HEALTHY, &["controller-service"]);
        assert_eq!((controllers(&p), nodes(&p)), ("1/1".into(), "1/1".into()));
    }

    #[test]
    fn a_monolith_without_the_controller_service_is_no_healthy_controller() {
        let p = plugin("monolith", api::Health::HEALTHY, &[]);
        assert_eq!((controllers(&p), nodes(&p)), ("0/1".into(), "1/1".into()));
    }

    #[test]
    fn an_unhealthy_node_plugin_expects_no_controller() {
        let p = plugin("node", api::Health::UNHEALTHY, &[]);
        assert_eq!((controllers(&p), nodes(&p)), ("0/0".into(), "0/1".into()));
    }

    #[test]
    fn the_table_aligns_columns() {
        let p = plugin("monolith", api::Health::HEALTHY, &["controller-service"]);
        let text = table(&[p]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("ID  Provider            Version  Type"));
        assert!(lines[1].starts_with("hp  hostpath.csi-agent  0.1.0    monolith"));
        assert!(lines[1].ends_with("1/1                           1/1                     healthy"));
    }

    #[test]
    fn details_show_unlimited_volumes_and_no_events() {
        let p = plugin("node", api::Health::PENDING, &[]);
        let text = details(&p, SystemTime::now());
        assert!(
            text.contains("Max Volumes             = unlimited\n"),
            "{text}"
        );
        assert!(
            text.contains("Health                  = pending ()\n"),
            "{text}"
        );
        assert!(text.ends_with("Recent Health Events\n<none>\n"), "{text}");
    }
}
