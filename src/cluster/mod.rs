//! Many hosts: the shared truth of a cluster of agents lives in etcd v3
//! (DESIGN.md, "Many hosts"), an existing, proven engine that csi-agent
//! speaks over gRPC with the grpcio stack it already has.
//!
//! This module owns that concern:
//!
//! | file | owns |
//! |---|---|
//! | [`etcd`] | the client: KV Range/Put/DeleteRange, transactions comparing a key's revision, leases with keep-alives, watches; fail-over between members, and a clear error when no member can answer (a leaderless cluster is an error, not a hang) |
//! | [`attachments`] | `attachments/<volume>/<node>`: a node's attach or detach intent, served by the controller leader, who writes the outcome (publish context or error) back; the node waits with a watch |
//! | [`election`] | `controllers/<plugin>`: the plugin's controller election on the leader's node lease, at most one leader per plugin |
//! | [`claims`] | `volumes/<id>/claims`: every claim on a volume from every node, admitted by a revision-compared transaction, so two hosts never both win a single-writer volume |
//! | [`member`] | the agent as a member: the thread that registers the node (retrying while etcd is out of reach) and reports connected, disconnected, or a name another agent holds |
//! | [`node`] | `nodes/<node>`: the node's record on its lease, kept alive by a thread that reports disconnection and reconnection; unique node names |
//!
//! The agent's `cluster` block starts [`member`] (`agent/cluster.rs`), and
//! `node status` lists the cluster's nodes. Claims, attachments and the
//! controller election are built and tested against etcd here, but the
//! agent's claims do not go through them yet. An agent without a
//! `cluster` block never reaches any of it.

pub mod attachments;
pub mod claims;
pub mod election;
pub mod etcd;
pub mod member;
pub mod node;
