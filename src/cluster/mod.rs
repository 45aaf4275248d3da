//! Many hosts: the shared truth of a cluster of agents lives in etcd v3
//! (DESIGN.md, "Many hosts"), an existing, proven engine that csi-agent
//! speaks over gRPC with the grpcio stack it already has.
//!
//! This module owns that concern. Today it holds the client
//! ([`etcd::Etcd`]): KV Range/Put/DeleteRange, transactions comparing a
//! key's revision (how two agents admitting writers at once cannot both
//! win), leases with keep-alives (how a node is alive while its key
//! exists), and watches (how agents learn of changes without polling),
//! with fail-over between the cluster's members and a clear error when no
//! member can answer (a leaderless cluster is an error, not a hang).
//!
//! Volumes, claims, attachments and node records built on it follow in
//! their own files of this module; an agent without a `cluster` block
//! never reaches any of it.

pub mod etcd;
