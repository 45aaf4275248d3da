//! `csi-agent node status [-json]`: this agent's node, its resources as
//! placement sees them and its plugins (node ID, health, topology, which
//! decides where volumes can be claimed); in a cluster, whether this
//! agent is connected,
//! and the agents of the cluster (the nodes whose lease-attached key
//! exists in etcd), when they registered, and their plugins.

use super::out;
use std::time::SystemTime;

use super::args::{self, switch, value, Flag, UsageError};
use super::json::from_message;
use super::plugin_cmd::columns;
use super::CliError;
use crate::api::client::{resolve_address, AgentClient};
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::units::{format_duration, format_timestamp};

pub const USAGE: &str = "\
usage: csi-agent node status [-json] [-address ADDR]

  status                  this agent's node, its resources as placement
                          sees them and its plugins' node IDs, health and
                          topologies; in a cluster (etcd), whether this agent
                          is connected, and each node of the cluster, when
                          it registered, its plugins";

const STATUS_FLAGS: &[Flag] = &[switch("json"), value("address")];

pub fn run(argv: &[String]) -> Result<(), CliError> {
    match argv.split_first() {
        Some((verb, rest)) if verb == "status" => status(rest),
        Some((other, _)) => Err(UsageError::new(format!("unknown node command {other:?}")).into()),
        None => Err(UsageError::new("missing the node command (status)").into()),
    }
}

fn status(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(STATUS_FLAGS, argv)?;
    args.at_most(0)?;
    let socket = resolve_address(args.value("address"))?;
    let resp = AgentClient::connect(&socket)?.node_status()?;
    if args.switch("json") {
        out::outln!("{}", from_message(&resp).pretty());
    } else {
        out::out!("{}", text(&resp, SystemTime::now()));
    }
    Ok(())
}

/// The status as a table, ages counted from `now`.
fn text(resp: &api::NodeStatusResponse, now: SystemTime) -> String {
    let mut out = format!("This agent: node {} ({}", resp.this_node, resp.connection);
    if !resp.reason.is_empty() {
        out.push_str(&format!(": {}", resp.reason));
    }
    out.push_str(")\n");
    if let Some(r) = resp.resources.as_ref() {
        out.push_str(&format!(
            "Resources: cpu {} MHz ({} cores; reserved {}, allocated {}), memory {} MiB (reserved {}, allocated {})\n",
            r.cpu, r.cores, r.reserved_cpu, r.allocated_cpu, r.memory, r.reserved_memory, r.allocated_memory
        ));
    }
    if !resp.plugins.is_empty() {
        out.push('\n');
        let mut rows = vec![vec![
            "Plugin".to_string(),
            "Node ID".to_string(),
            "Health".to_string(),
            "Topology".to_string(),
        ]];
        for p in &resp.plugins {
            rows.push(vec![
                p.id.clone(),
                if p.node_id.is_empty() {
                    "<none>".to_string()
                } else {
                    p.node_id.clone()
                },
                if p.healthy { "healthy" } else { "unhealthy" }.to_string(),
                topology(&p.topology),
            ]);
        }
        out.push_str(&columns(&rows));
    }
    if resp.connection == "none" {
        // Not in a cluster: there is no table of nodes to show.
        return out;
    }
    out.push('\n');
    if resp.nodes.is_empty() {
        out.push_str("No live nodes\n");
        return out;
    }
    let mut rows = vec![vec![
        "Node".to_string(),
        "Registered".to_string(),
        "Age".to_string(),
        "Plugins".to_string(),
    ]];
    for node in &resp.nodes {
        let registered = from_unix_ms(node.registered_unix_ms);
        let age = now
            .duration_since(registered)
            .map(|d| format_duration(std::time::Duration::from_secs(d.as_secs())))
            .unwrap_or_else(|_| "0s".to_string());
        let plugins: Vec<String> = node
            .plugins
            .iter()
            .map(|p| {
                let health = if p.healthy { "healthy" } else { "unhealthy" };
                if p.topology.is_empty() {
                    format!("{} ({health})", p.id)
                } else {
                    format!("{} ({health}, {})", p.id, topology(&p.topology))
                }
            })
            .collect();
        rows.push(vec![
            node.name.clone(),
            format_timestamp(registered),
            age,
            if plugins.is_empty() {
                "<none>".to_string()
            } else {
                plugins.join(", ")
            },
        ]);
    }
    out.push_str(&columns(&rows));
    out
}

/// A node's topology for a plugin, `<none>` without one.
fn topology(segments: &std::collections::HashMap<String, String>) -> String {
    if segments.is_empty() {
        return "<none>".to_string();
    }
    crate::csi::topology::describe(&segments.clone().into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn the_table_shows_each_node_its_age_and_plugins() {
        let resp = api::NodeStatusResponse {
            this_node: "a".into(),
            connection: "disconnected".into(),
            reason: "no keep-alive went through for 10s".into(),
            nodes: vec![api::ClusterNode {
                name: "a".into(),
                registered_unix_ms: 1_700_000_000_000,
                plugins: vec![api::ClusterNodePlugin {
                    id: "hostpath".into(),
                    healthy: true,
                    topology: [("zone".to_string(), "a".to_string())].into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            resources: protobuf::MessageField::some(api::NodeResources {
                cpu: 4000,
                memory: 8192,
                cores: 2,
                reserved_cpu: 500,
                reserved_memory: 512,
                allocated_cpu: 200,
                allocated_memory: 600,
                ..Default::default()
            }),
            ..Default::default()
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_090);
        let text = text(&resp, now);
        assert!(text.starts_with(
            "This agent: node a (disconnected: no keep-alive went through for 10s)\nResources: cpu 4000 MHz (2 cores; reserved 500, allocated 200), memory 8192 MiB (reserved 512, allocated 600)\n\n"
        ), "{text}");
        let row = text.lines().last().unwrap();
        assert!(
            row.starts_with("a     2023-11-14T22:13:20.000Z  1m30s"),
            "{row}"
        );
        assert!(row.ends_with("hostpath (healthy, {zone=a})"), "{row}");
    }
}
