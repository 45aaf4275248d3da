//! Many hosts: the shared truth of a cluster of agents lives in etcd v3
//! (docs/ARCHITECTURE.md, "Many hosts"), an existing, proven engine that csi-agent
//! speaks over gRPC with the grpcio stack it already has.
//!
//! This module owns that concern:
//!
//! | file | owns |
//! |---|---|
//! | [`alive`] | the node's last keep-alive that went through, kept in the data dir for the agent's next process, which resumes its lease and honours its promise from it |
//! | [`etcd`] | the client: KV Range/Put/DeleteRange, transactions comparing a key's revision and guarded by conditions (`etcd/txn.rs`), leases with keep-alives, watches (`etcd/watch.rs`); fail-over between members, and a clear error when no member can answer (a leaderless cluster is an error, not a hang, and the error says a quorum is likely lost); plain `http://`, or TLS with the cluster's CA and a client certificate (`cluster { tls }`) |
//! | [`tls`] | the PEM files of `cluster { tls }` (CA, client certificate and key), read and checked at start, made into each member's gRPC credentials; the key is never shown |
//! | [`attachments`] | `attachments/<volume>/<node>`: a node's attach or detach intent, served by the controller leader, who writes the outcome (publish context or error) back; the node waits with a watch ([`attachments::Attacher`]) |
//! | [`leader`] | the candidate thread of each plugin whose controller runs here: campaigns (the election record carries the controller's capabilities), and while leading serves every node's attach intents and relayed calls with its controller |
//! | [`ops`] | the volume manager's ops (admit, free, share, unshare) carried out off the main loop, in order per volume, retried with backoff |
//! | [`volumes`] | `volumes/<id>`: each volume's record as true on every host, written by the agent that registered or changed it; the watch every agent learns them (and the claim sets) from |
//! | [`relay`] | `calls/<plugin>/<node>/<id>`: a controller call of a host without the plugin's controller, encoded as on the wire, on a lease of its own; the leader makes it and writes the answer back; the caller's side is [`relay::EtcdRelay`], which carries the calls of a [`crate::csi::Controller`] |
//! | [`election`] | `controllers/<plugin>` and `fencer`: elections on the leader's lease, at most one leader each; a candidate's life (campaign, follow, lead, start over) |
//! | [`fence`] | lost nodes: the fencer marks their claims past, has the controller leader detach them, frees them; `volume detach -force -node` |
//! | [`claims`] | `volumes/<id>/claims`: every claim on a volume from every node, admitted by a revision-compared transaction, so two hosts never both win a single-writer volume |
//! | [`member`] | the agent as a member: the thread that registers the node (retrying while etcd is out of reach) and reports connected, disconnected, or a name another agent holds |
//! | [`node`] | `nodes/<node>`: the node's record on its lease, kept alive by a thread that reports disconnection and reconnection, and rewrites the record when the node's plugins or their health change; unique node names |
//!
//! The agent's `cluster` block starts [`member`], [`ops`], the
//! [`volumes`] watch and a [`leader`] candidate per attaching controller
//! (`agent/cluster.rs`); the volume manager's side (claims journalled
//! before etcd is asked, volumes adopted from the watch) is
//! `volume/manager/engine/cluster.rs`, and in a cluster its ControllerPublish
//! and Unpublish steps go to the leader. An agent without a `cluster`
//! block never reaches any of it.
//!
//! A lost node's claims are fenced by the agent elected [`fence`]r; the
//! node's own agent gives up what etcd took away when it is back
//! (`volume/manager/engine/lost.rs`) and, with `stop_after_disconnect`, stops
//! its writers while cut off (`agent/cluster.rs`).
//!
//! A host with only a plugin's node learns from the controller elections
//! (seen by the [`volumes`] watch) what the plugin's controller does: the
//! leader attaches its claims, and makes its other controller calls
//! (create, delete, snapshot, expand, validate, list), which the agent
//! relays ([`relay`]; `agent/cluster.rs` routes them).

pub mod alive;
pub mod attachments;
pub mod claims;
pub mod election;
pub mod etcd;
pub mod fence;
pub mod leader;
pub mod member;
pub mod node;
pub mod ops;
pub mod relay;
pub mod tls;
pub mod volumes;
