//! All integration tests, in one test binary: a real hostpath plugin process
//! on a real unix socket per test, real gRPC, real bind mounts; the spec
//! decoders on our fixtures; `csi-agent validate` as a user runs it; and the
//! agent daemon as a process, with its plugins, signals and control API;
//! and volumes claimed and released through it, with injected faults and
//! crashes; the plugin's strict mode, its block volumes, snapshots, clones,
//! expansion and volume conditions; agents of a cluster against real
//! etcd, on hosts of their own (network namespaces made by the test); the
//! upgrade from data dirs an earlier binary wrote (our fixtures); and the
//! crate's import graph, read from `src/`, held to its layers (`layers`);
//! the container engine client against a private dockerd per test; the
//! agent's Docker volume plugin socket driven by the `docker` CLI,
//! `docker-compose` and `podman`, and the agent as a managed Docker plugin
//! (`volume_clients`); the agent as systemd
//! runs it, told ready on a notify socket and handed its sockets by
//! `systemd-socket-activate`, through a boot with dockerd first
//! (`systemd`); and
//! external corpora (RE2, JSONTestSuite, HCL's specsuite, Go's template
//! tests) against the hand-written engines (`corpus`); and the checks CI
//! runs on the static binary, static and within its size budget
//! (`static_build`).

// Tests sort with the standard library's sorts: only the agent's binary
// keeps to order (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod agent;
mod block;
mod block_claims;
mod claim_errors;
mod cli;
mod client;
mod cluster;
mod cluster_agents;
mod cluster_chaos;
mod cluster_claims;
mod cluster_fence;
mod cluster_fencing;
mod cluster_freed;
mod cluster_netns;
mod cluster_quorum;
mod cluster_relay;
mod cluster_writers;
mod corpus;
mod docker_engine;
mod dockerd;
mod durable;
mod etcd;
mod events;
mod expansion;
mod harness;
mod job;
mod layers;
mod metrics;
mod metrics_families;
mod migration;
mod netns;
mod registry;
mod requests;
mod snapshots;
mod snapshots_cli;
mod spec;
mod split;
mod split_hostpath;
mod static_build;
mod strict;
mod systemd;
mod targets;
mod topology;
mod upgrade;
mod util;
mod validate;
mod volume;
mod volume_clients;
mod volume_commands;
mod volume_plugin;
mod volume_plugin_reconcile;
mod volume_signals;
mod volume_sources;
mod volume_status;
mod volume_util;
