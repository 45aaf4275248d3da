//! The agent's side of a `cluster` block: it starts the member thread
//! ([`crate::cluster::member`]) that registers this node in etcd and keeps
//! it alive, follows its reports (connected, disconnected, a node name
//! another live agent holds, which stops the agent), and answers
//! `node status` from a thread of its own, so the loop never waits on
//! etcd. An agent without a `cluster` block has none of it.

use std::thread;

use crate::api::{ApiError, ErrorKind, Response};
use crate::cluster::member::{self, Member, MemberEvent};
use crate::cluster::node;
use crate::proto::agent as api;
use crate::proto::cluster as pb;
use crate::volume::manager::ReplyTo;

use super::Agent;

/// Where this agent stands in its cluster.
pub(super) enum Connection {
    Connecting,
    Connected,
    Disconnected { reason: String },
}

/// The cluster membership of a running agent.
pub(super) struct ClusterMember {
    pub member: Member,
    pub connection: Connection,
    pub node: String,
}

impl Agent {
    /// Starts the member thread when the config has a `cluster` block.
    pub(super) fn start_cluster(&mut self) -> Result<(), super::Error> {
        let Some(config) = self.options.config.cluster.clone() else {
            return Ok(());
        };
        let node = super::node_name(&self.options.config);
        let plugins = self
            .registry
            .list()
            .map(|record| pb::NodePlugin {
                id: record.spec.id.clone(),
                node_id: record
                    .fingerprint
                    .as_ref()
                    .and_then(|f| f.node.as_ref())
                    .map(|n| n.node_id.clone())
                    .unwrap_or_default(),
                healthy: record.health == crate::plugin::Health::Healthy,
                ..Default::default()
            })
            .collect();
        let member = Member::start(&config, member::record(&node, plugins))
            .map_err(|err| super::Error::Cluster(crate::error_chain(&err)))?;
        log::info!(
            "Cluster: registering node {node} in etcd at {}",
            config.etcd.join(", ")
        );
        self.cluster = Some(ClusterMember {
            member,
            connection: Connection::Connecting,
            node,
        });
        Ok(())
    }

    /// A report of the member thread.
    pub(super) fn cluster_event(&mut self, event: MemberEvent) {
        let Some(cluster) = &mut self.cluster else {
            return;
        };
        match event {
            MemberEvent::Connected => {
                log::info!("Cluster: node {} is registered", cluster.node);
                cluster.connection = Connection::Connected;
            }
            MemberEvent::Disconnected { reason } => {
                log::warn!("Cluster: node {} is disconnected: {reason}", cluster.node);
                cluster.connection = Connection::Disconnected { reason };
            }
            MemberEvent::NameTaken { node } => {
                let message = format!(
                    "node name {node:?} is held by another live agent of the cluster; node names must be unique (set node_name)"
                );
                log::error!("Cluster: {message}");
                self.fatal = Some(message);
            }
        }
    }

    /// `node status`: read from etcd on a thread of its own.
    pub(super) fn node_status(&self, reply: ReplyTo) {
        let Some(cluster) = &self.cluster else {
            let err = ApiError::new(
                ErrorKind::FailedPrecondition,
                "this agent is not in a cluster (its config has no cluster block)",
            );
            let _ = reply.send(Err(err));
            return;
        };
        let (connection, reason) = match &cluster.connection {
            Connection::Connecting => ("connecting", String::new()),
            Connection::Connected => ("connected", String::new()),
            Connection::Disconnected { reason } => ("disconnected", reason.clone()),
        };
        let base = api::NodeStatusResponse {
            this_node: cluster.node.clone(),
            connection: connection.to_string(),
            reason,
            ..Default::default()
        };
        let (etcd, prefix) = (cluster.member.etcd(), cluster.member.prefix().to_string());
        let spawned = thread::Builder::new()
            .name("node-status".into())
            .spawn(move || {
                let answer = node::list(&etcd, &prefix)
                    .map(|records| {
                        let mut resp = base;
                        resp.nodes = records.into_iter().map(node_to_api).collect();
                        resp.nodes.sort_by(|a, b| a.name.cmp(&b.name));
                        Response::NodeStatus(resp)
                    })
                    .map_err(|err| ApiError::new(ErrorKind::Unavailable, crate::error_chain(&err)));
                let _ = reply.send(answer);
            });
        if let Err(err) = spawned {
            log::error!("Cannot start a thread for node status: {err}");
        }
    }
}

fn node_to_api(record: pb::NodeRecord) -> api::ClusterNode {
    api::ClusterNode {
        name: record.node,
        registered_unix_ms: record.registered_unix_ms,
        plugins: record
            .plugins
            .into_iter()
            .map(|p| api::ClusterNodePlugin {
                id: p.id,
                node_id: p.node_id,
                healthy: p.healthy,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}
