//! The API calls a clustered agent answers from etcd, each on a thread of
//! its own so that the loop never waits on etcd: `node status`, `plugin
//! status` counted across the cluster, and an operator's `volume detach
//! -force -node`.

use std::thread;

use crate::api::{ApiError, ErrorKind, Response};
use crate::cluster::fence::{self, DetachError, Fenced};
use crate::cluster::node;
use crate::proto::agent as api;
use crate::proto::cluster as pb;
use crate::volume::manager::ReplyTo;

use super::cluster::Connection;
use super::Agent;

impl Agent {
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
                        resp.nodes = records.into_iter().map(node_to_api).collect();
                        resp.nodes.sort_by(|a, b| a.name.cmp(&b.name));
                        Response::NodeStatus(resp)
                    })
                    .map_err(|err| {
                        let chain = crate::error_chain(&err);
                        let message =
                            format!("{this_agent}; cannot list the cluster's nodes: {chain}");
                        ApiError::new(ErrorKind::Unavailable, message)
                    });
                let _ = reply.send(answer);
            });
        if let Err(err) = spawned {
            log::error!("Cannot start a thread for node status: {err}");
        }
    }

    /// `volume detach -force -node`: on a thread of its own, since the
    /// controller leader's detach may take a while.
    pub(super) fn force_detach(&self, req: api::VolumeForceDetachRequest, reply: ReplyTo) {
        let refuse = |kind, message: String| {
            let _ = reply.send(Err(ApiError::new(kind, message)));
        };
        let Some(cluster) = &self.cluster else {
            return refuse(
                ErrorKind::FailedPrecondition,
                "detaching another node's claims needs a cluster: this agent's config has no cluster block".into(),
            );
        };
        if req.volume_id.is_empty() || req.node.is_empty() {
            return refuse(
                ErrorKind::InvalidArgument,
                "volume_id and node are required".into(),
            );
        }
        if req.node == cluster.node {
            return refuse(
                ErrorKind::FailedPrecondition,
                format!(
                    "node {} is this agent: release its claims with `csi-agent volume detach {}`",
                    req.node, req.volume_id
                ),
            );
        }
        let (etcd, prefix) = (cluster.member.etcd(), cluster.prefix.clone());
        let spawned = thread::Builder::new()
            .name("force-detach".into())
            .spawn(move || {
                let (volume, node) = (&req.volume_id, &req.node);
                let answer = match fence::detach(&etcd, &prefix, volume, node) {
                    Ok(Fenced::Freed | Fenced::Operator) => {
                        log::info!("Cluster: an operator freed lost node {node}'s claims on volume {volume}");
                        Ok(Response::VolumeForceDetach(Default::default()))
                    }
                    Ok(Fenced::Waiting(why)) => Err(ApiError::new(
                        ErrorKind::Unavailable,
                        format!("node {node}'s claims on volume {volume} are not freed: {why}"),
                    )),
                    Err(err @ DetachError::NodeAlive { .. }) => Err(ApiError::new(
                        ErrorKind::FailedPrecondition,
                        err.to_string(),
                    )),
                    Err(err) => Err(ApiError::new(
                        ErrorKind::Unavailable,
                        crate::error_chain(&err),
                    )),
                };
                let _ = reply.send(answer);
            });
        if let Err(err) = spawned {
            log::error!("Cannot start a thread for volume detach: {err}");
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
