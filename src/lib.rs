//! csi-agent: the orchestrator's side of the Container Storage Interface on
//! one host, in one static binary.
//!
//! # Architecture
//!
//! csi-agent does for a single host what Nomad's client does for CSI: it
//! supervises CSI plugins, claims volumes for workloads (ControllerPublish →
//! NodeStage → NodePublish, and back), and bind-mounts them into tasks. It is
//! synchronous: a thread per plugin instance makes blocking grpcio calls and
//! talks to one main loop over crossbeam channels.
//!
//! `docs/ARCHITECTURE.md` in the repository is the map for a newcomer: the
//! layers, the threads and channels, the walk of one `volume claim` from the
//! CLI to the answer, what is written to disk before what, the cluster's
//! keys and its many-hosts safety rule, and where the code departs from
//! Nomad. The module docs below go deeper.
//!
//! The general-purpose machinery that knows nothing of CSI is in crates of
//! the workspace (`crates/`), which this crate composes, each with its own
//! README and tests: [`hcl`] (HCL's native and JSON syntax, parsed and
//! evaluated), [`json`], [`regex`] (Go's syntax, a Pike VM), [`encode`]
//! (base64 and percent-encoding), [`http`] (HTTP/1.1: the bounded server of
//! the agent's sockets, and the client codec of the engine's client and the
//! artifact fetcher), and [`order`], the one sort of the binary
//! (clippy.toml refuses the slice sorts outside tests). The crate
//! map of `docs/ARCHITECTURE.md` draws them.
//!
//! Modules, each owning one concern:
//!
//! | module | owns |
//! |---|---|
//! | [`csi`] | generated CSI v1.12.0 stubs (`build.rs`, `proto/csi.proto`), the typed blocking client, the controller service over a plugin's socket or through a carrier of calls encoded as on the wire, the capability model with redacting `Debug`/`Display`, capability comparison, error classification per RPC and code, [`csi::Backoff`] |
//! | [`agent`] | the main loop: owns the plugin registry and the volume manager, answers the control API, persists each turn's changes before acting on them (and holds back, refuses changes and retries while it cannot); signals; `-dev`; the cluster membership and the writers' guard process |
//! | [`plugin`] | the registry of plugin instances with subscribers (a plugin ID is a monolith, or a controller and a node run apart, counted as Nomad counts them), the per-instance thread (inotify wait, probe, fingerprint, heartbeat), the bounded worker pool for volume RPCs |
//! | [`volume`] | volume records and claims, the pure planner of the claim/release protocol, the steps' RPCs and host bind mounts, the port through which jobs make controller calls, the manager (admission, retries, reconciliation with mountinfo) |
//! | [`docker`] | a client of the Docker Engine API 1.41 over its unix socket, for the `docker` task driver: images (presence, pull, import), containers (create from a typed spec, start, inspect, list, wait, kill, remove), demultiplexed logs; over the [`http`] crate's client codec |
//! | [`state`] | the snapshot `state.pb` (atomic write) and the CRC-framed journal with group commit |
//! | [`cluster`] | many hosts through etcd v3: the client (KV, revision-compared transactions, leases, watches, member fail-over; plain or TLS with client certificates), node records on leases, claim sets, shared volume records, attachments and relayed controller calls served by each plugin's controller leader, the fencing of lost nodes |
//! | [`services`] | the registry of Nomad's built-in service discovery (`service { provider = "nomad" }`): this host's registrations, synced by the loop each turn, and in a cluster every host's through etcd on each node's lease |
//! | [`api`] | the control API (`proto/agent.proto`): the server with the `SO_PEERCRED` check, and the CLI's client |
//! | [`volume_plugin`] | Docker's Volume Plugin protocol on a socket of its own, for `docker`, `docker compose` and `podman`: each call sent to the main loop as a control API request |
//! | [`mount`] | safe wrappers over `mount(2)`/`umount2(2)`/`statvfs(3)` and the `/proc/self/mountinfo` parser; all mount syscalls of the agent live here |
//! | [`sys`] | the other system calls: inotify, peer credentials, signals to children, file locks, the hostpath plugin's loop devices and sparse-file extents, the monotonic clock, and the start helper's (raw descriptors, fork, wait and exit, namespaces, the user database and `set*id`, capabilities); [`sys::cvt`], the one turn of a libc call's -1 into `errno` |
//! | [`spec`] | typed, validated specs decoded from HCL (native or JSON syntax, by the file name) in Nomad's formats: agent config, volume spec, job spec; strict keys with did-you-mean, every error with `file:line:col`, Nomad keys csi-agent ignores kept with a warning |
//! | [`hostpath`] | the built-in hostpath CSI plugin (`csi-agent hostpath`): the `-dev` default and our test fixture; directory and block (loop device) volumes, snapshots, clones, expansion, a monolith or a controller and a node process sharing one base dir (`-mode`), a strict mode that refuses and records what a conforming CO never sends, test-only fault injection and call tracing |
//! | [`proto`] | every generated protobuf module |
//! | [`id`] | validation of IDs that become path components |
//! | [`trace`] | latency trace points (off unless `CSI_AGENT_TRACE` names a file), read by the benchmark into the anatomy of a claim |
//! | [`metrics`] | the agent's metrics (counters, gauges, histograms with labels) counted where things happen, Prometheus' text format, and the `GET /metrics` endpoint of the `telemetry` block |
//! | [`events`] | the agent's events: emitted where things happen into one outbox, published by the loop once durable into a ring that `csi-agent events` reads |
//! | [`units`] | durations (`30s`, `1h30m`), byte sizes (`10GiB`) and timestamps as users read and write them |
//! | [`task`] | jobs and allocations: the `exec` driver (fork/exec in a new session and mount namespace, in a root of the task's own built from `chroot_env`, driver mounts with propagation, logs, restart policy) and `raw_exec` (the host's root), the volume hook and the `csi_plugin` supervisor hook, re-adoption after a restart |
//! | [`template`] | Go's `text/template` with consul-template's functions that need no Consul or Vault, for Nomad's `template` blocks |
//! | [`cli`] | argument parsing and every command: `agent`, `plugin`, `volume`, `node`, `job`, `alloc`, `hostpath`, the direct plugin client `csi`, `validate`, and `guard`, which the agent starts |
//!
//! # Durability
//!
//! Nothing is acknowledged, and no plugin call or mount is made, before
//! the state it depends on is on disk: each loop turn's records are synced
//! (one group commit) before the turn's replies and plugin jobs go out.
//! Two things wait for a write, not a sync, since a synced record already
//! decides them: a job of steps resumed between two RPCs, and the answer
//! that a claim is taken or freed at the end of its job (see
//! `agent/persist.rs`).
//! When the data dir cannot be written (`ENOSPC`, `EDQUOT`, `EIO`), the
//! agent *cannot persist*: it holds those replies and jobs, refuses every
//! call that would change the state ([`api::Request::access`]) at once
//! with `cannot persist the state in DATA_DIR: ERRNO; nothing was
//! changed`, keeps answering reads from memory, and writes a whole
//! snapshot again with backoff (100 ms doubling to 5 s) until one
//! succeeds; then it sends what it held, by itself. A SIGKILL meanwhile
//! loses only what was never acknowledged. `volume create` journals the
//! volume as being created before CreateVolume is sent; after a crash the
//! same request (its name makes it idempotent) is sent again and the
//! volume registered, as Kubernetes' external-provisioner would, instead
//! of leaving storage in the plugin that nobody knows of. The agent's
//! module docs have the state machine.
//!
//! # Conventions
//!
//! - Secrets and mount flags print `[REDACTED]` in `Debug`, `Display`, logs
//!   and CLI output; raw values are reachable only through `expose()`.
//! - Errors are typed per module; their `Display` is one short sentence that
//!   does not repeat its `source()`; the CLI prints the whole chain.
//! - Every `unsafe` block has a `// SAFETY:` comment (enforced by
//!   `clippy::undocumented_unsafe_blocks`) and lives in a small function.
//! - Sorts go through [`order`] (clippy's `disallowed_methods` refuses the
//!   slice sorts outside tests): each slice sort compiles its own copy of
//!   the algorithm.

// Tests sort with the standard library's sorts: they are not in the binary.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod agent;
pub mod api;
pub mod call;
pub mod cli;
pub mod cluster;
pub mod csi;
pub mod docker;
pub mod events;
pub mod hostpath;
pub mod httpd;
pub mod id;
pub mod metrics;
pub mod mount;
pub mod plugin;
pub mod proto;
pub mod services;
pub mod spec;
pub mod state;
pub mod sys;
pub mod task;
pub mod template;
pub mod trace;
pub mod units;
pub mod volume;
pub mod volume_plugin;

/// An error and its `source()` chain on one line: `a: b: c`.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(err) = source {
        text.push_str(": ");
        text.push_str(&err.to_string());
        source = err.source();
    }
    text
}
