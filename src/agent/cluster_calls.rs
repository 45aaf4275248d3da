//! The API calls a clustered agent answers from etcd, each on a thread of
//! its own so that the loop never waits on etcd (an errand, see
//! `errands.rs`): `node status`, `plugin status` counted across the
//! cluster, and an operator's `volume detach -force -node`.

use std::thread;

use crate::api::{ReplyTo, Response};
use crate::call::{CallError, ErrorKind};
use crate::cluster::fence::{self, DetachError, Fenced};
use crate::cluster::node::{self, ClusterNode, NodeStatus};
use crate::plugin::{Health, PluginStatus, StatusReport};
use crate::proto::cluster as pb;

use super::cluster::Connection;
use super::Agent;

impl Agent {
    /// `plugin status` in a cluster: this host's answer (`local`), with
    /// controllers and nodes counted over every node's record, read on a
    /// thread of its own.
    pub(super) fn cluster_plugin_status(
        &mut self,
        id: String,
        local: Result<StatusReport, CallError>,
        reply: ReplyTo,
    ) {
        let Some(cluster) = &self.cluster else {
            reply.send(local.map(Response::PluginStatus));
            return;
        };
        let (etcd, prefix, me) = (
            cluster.member.etcd(),
            cluster.prefix.clone(),
            cluster.node.clone(),
        );
        let spawned = thread::Builder::new()
            .name("plugin-status".into())
            .spawn(move || {
                let answer = match node::list(&etcd, &prefix) {
                    Ok(records) => counted_over(&id, local, &records, &me),
                    Err(err) => local.map(|mut resp| {
                        resp.cluster_note = format!(
                            "counts of this host only: cannot read the cluster's nodes: {}",
                            crate::error_chain(&err)
                        );
                        resp
                    }),
                };
                reply.send(answer.map(Response::PluginStatus));
            });
        match spawned {
            Ok(thread) => self.errands.keep(thread),
            Err(err) => log::error!("Cannot start a thread for plugin status: {err}"),
        }
    }

    /// This agent's plugins as its node record shows them.
    fn this_node_plugins(&self) -> Vec<node::ClusterNodePlugin> {
        super::cluster::node_plugins(&self.registry)
            .into_iter()
            .map(node::ClusterNodePlugin::from_record)
            .collect()
    }

    /// `node status`: read from etcd on a thread of its own.
    pub(super) fn node_status(&mut self, reply: ReplyTo) {
        let Some(cluster) = &self.cluster else {
            // Not in a cluster: this node alone, as placement sees it.
            let status = NodeStatus {
                this_node: super::node_name(&self.options.config),
                connection: "none".to_string(),
                reason: "its config has no cluster block".to_string(),
                nodes: Vec::new(),
                resources: node_resources(&self.allocs),
                plugins: self.this_node_plugins(),
            };
            reply.send(Ok(Response::NodeStatus(status)));
            return;
        };
        let (connection, reason) = match &cluster.connection {
            Connection::Connecting => ("connecting", String::new()),
            Connection::Connected => ("connected", String::new()),
            Connection::Disconnected { reason } => ("disconnected", reason.clone()),
        };
        let base = NodeStatus {
            this_node: cluster.node.clone(),
            connection: connection.to_string(),
            reason,
            nodes: Vec::new(),
            resources: node_resources(&self.allocs),
            plugins: self.this_node_plugins(),
        };
        // Cut off from etcd, the agent still knows where it stands, and
        // the error says so.
        let this_agent = match &base.reason[..] {
            "" => format!("this agent: node {} ({connection})", base.this_node),
            reason => format!(
                "this agent: node {} ({connection}: {reason})",
                base.this_node
            ),
        };
        let (etcd, prefix) = (cluster.member.etcd(), cluster.member.prefix().to_string());
        let spawned = thread::Builder::new()
            .name("node-status".into())
            .spawn(move || {
                let answer = node::list(&etcd, &prefix)
                    .map(|records| {
                        let mut resp = base;
                        resp.nodes = records.into_iter().map(ClusterNode::from_record).collect();
                        order::sort_by(&mut resp.nodes, |a, b| a.name.cmp(&b.name));
                        Response::NodeStatus(resp)
                    })
                    .map_err(|err| {
                        let chain = crate::error_chain(&err);
                        let message =
                            format!("{this_agent}; cannot list the cluster's nodes: {chain}");
                        CallError::new(ErrorKind::Unavailable, message)
                    });
                reply.send(answer);
            });
        match spawned {
            Ok(thread) => self.errands.keep(thread),
            Err(err) => log::error!("Cannot start a thread for node status: {err}"),
        }
    }

    /// `volume detach -force -node`: on a thread of its own, since the
    /// controller leader's detach may take a while.
    pub(super) fn force_detach(&mut self, volume_id: String, node: String, reply: ReplyTo) {
        let refuse = |reply: ReplyTo, kind, message: String| {
            reply.send(Err(CallError::new(kind, message)));
        };
        let Some(cluster) = &self.cluster else {
            return refuse(
                reply,
                ErrorKind::FailedPrecondition,
                "detaching another node's claims needs a cluster: this agent's config has no cluster block".into(),
            );
        };
        if volume_id.is_empty() || node.is_empty() {
            return refuse(
                reply,
                ErrorKind::InvalidArgument,
                "volume_id and node are required".into(),
            );
        }
        if node == cluster.node {
            return refuse(
                reply,
                ErrorKind::FailedPrecondition,
                format!(
                    "node {} is this agent: release its claims with `csi-agent volume detach {}`",
                    node, volume_id
                ),
            );
        }
        let (etcd, prefix) = (cluster.member.etcd(), cluster.prefix.clone());
        let spawned = thread::Builder::new()
            .name("force-detach".into())
            .spawn(move || {
                let volume = &volume_id;
                let answer = match fence::detach(&etcd, &prefix, volume, &node) {
                    Ok(Fenced::Freed | Fenced::Operator) => {
                        log::info!("Cluster: an operator freed lost node {node}'s claims on volume {volume}");
                        Ok(Response::VolumeForceDetach)
                    }
                    Ok(Fenced::Until(_)) => Err(CallError::new(
                        ErrorKind::Unavailable,
                        format!("node {node}'s claims on volume {volume} are not freed yet"),
                    )),
                    Ok(Fenced::Waiting(why)) => Err(CallError::new(
                        ErrorKind::Unavailable,
                        format!("node {node}'s claims on volume {volume} are not freed: {why}"),
                    )),
                    Err(err @ DetachError::NodeAlive { .. }) => Err(CallError::new(
                        ErrorKind::FailedPrecondition,
                        err.to_string(),
                    )),
                    Err(err) => Err(CallError::new(
                        ErrorKind::Unavailable,
                        crate::error_chain(&err),
                    )),
                };
                reply.send(answer);
            });
        match spawned {
            Ok(thread) => self.errands.keep(thread),
            Err(err) => log::error!("Cannot start a thread for volume detach: {err}"),
        }
    }
}

/// This host's plugin status (`local`, for plugin `id` or every one when
/// empty) with the other nodes' instances counted in; a plugin only other
/// nodes run is listed with its counts.
fn counted_over(
    id: &str,
    local: Result<StatusReport, CallError>,
    records: &[pb::NodeRecord],
    me: &str,
) -> Result<StatusReport, CallError> {
    let others: Vec<&pb::NodePlugin> = records
        .iter()
        .filter(|r| r.node != me)
        .flat_map(|r| &r.plugins)
        .filter(|p| id.is_empty() || p.id == id)
        .collect();
    let mut resp = match local {
        Ok(resp) => resp,
        // Not here, but elsewhere in the cluster.
        Err(_) if !others.is_empty() => StatusReport::default(),
        Err(err) => return Err(err),
    };
    for p in others {
        let i = match resp.plugins.iter().position(|s| s.id == p.id) {
            Some(i) => i,
            None => {
                resp.plugins.push(PluginStatus::elsewhere(&p.id));
                resp.plugins.len() - 1
            }
        };
        let s = &mut resp.plugins[i];
        s.controllers_healthy += p.controllers_healthy;
        s.controllers_expected += p.controllers_expected;
        s.nodes_healthy += p.nodes_healthy;
        s.nodes_expected += p.nodes_expected;
    }
    for s in resp.plugins.iter_mut().filter(|s| s.instances.is_empty()) {
        // Only other nodes run it: its health is their counts'.
        let all =
            s.controllers_healthy == s.controllers_expected && s.nodes_healthy == s.nodes_expected;
        s.health = if all {
            Health::Healthy
        } else {
            Health::Unhealthy
        };
    }
    order::sort_by(&mut resp.plugins, |a, b| a.id.cmp(&b.id));
    Ok(resp)
}

/// What placement sees of this node, for `node status`.
fn node_resources(allocs: &crate::task::Allocs) -> node::NodeResources {
    let (node, reserved, used) = allocs.resources();
    node::NodeResources {
        cpu: node.cpu,
        memory: node.memory,
        cores: node.cores,
        reserved_cpu: reserved.cpu,
        reserved_memory: reserved.memory,
        allocated_cpu: used.cpu,
        allocated_memory: used.memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(id: &str, c: (u32, u32), n: (u32, u32)) -> pb::NodePlugin {
        pb::NodePlugin {
            id: id.into(),
            controllers_healthy: c.0,
            controllers_expected: c.1,
            nodes_healthy: n.0,
            nodes_expected: n.1,
            ..Default::default()
        }
    }

    fn record(node: &str, plugins: Vec<pb::NodePlugin>) -> pb::NodeRecord {
        pb::NodeRecord {
            node: node.into(),
            plugins,
            ..Default::default()
        }
    }

    fn row(s: &PluginStatus) -> (&str, u32, u32, u32, u32) {
        (
            s.id.as_str(),
            s.controllers_healthy,
            s.controllers_expected,
            s.nodes_healthy,
            s.nodes_expected,
        )
    }

    #[test]
    fn plugins_are_counted_over_every_node_and_this_one_from_its_own_answer() {
        let instance =
            crate::plugin::PluginRecord::from_proto(&crate::proto::state::PluginRecord {
                id: "ebs".into(),
                socket: "/run/ebs.sock".into(),
                type_: "node".into(),
                source: "config".into(),
                ..Default::default()
            })
            .unwrap();
        let local = StatusReport {
            plugins: vec![PluginStatus {
                nodes_healthy: 1,
                nodes_expected: 1,
                instances: vec![instance],
                ..PluginStatus::elsewhere("ebs")
            }],
            cluster_note: String::new(),
        };
        let records = [
            // This node's record may lag: its own answer counts.
            record("a", vec![counts("ebs", (0, 0), (0, 1))]),
            record("b", vec![counts("ebs", (1, 1), (1, 1))]),
            record(
                "c",
                vec![counts("ebs", (0, 0), (0, 1)), counts("nfs", (0, 0), (1, 1))],
            ),
        ];
        let resp = counted_over("", Ok(local.clone()), &records, "a").unwrap();
        let rows: Vec<_> = resp.plugins.iter().map(row).collect();
        assert_eq!(rows, [("ebs", 1, 1, 2, 3), ("nfs", 0, 0, 1, 1)]);
        // Only elsewhere: counted, with health from the counts.
        assert_eq!(resp.plugins[1].health, Health::Healthy);

        let unknown = CallError::not_found("no plugin \"nfs\"");
        let resp = counted_over("nfs", Err(unknown), &records, "a").unwrap();
        assert_eq!(
            resp.plugins.iter().map(row).collect::<Vec<_>>(),
            [("nfs", 0, 0, 1, 1)]
        );
        let unknown = CallError::not_found("no plugin \"zfs\"");
        assert!(counted_over("zfs", Err(unknown), &records, "a").is_err());
    }
}
