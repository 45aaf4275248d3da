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
//! CLI to the answer, what is written to disk before what, and the cluster's
//! keys and its many-hosts safety rule; the pages under `docs/architecture/`
//! hold the detail of each. Its module map is the one map of the modules,
//! their layers and the crates under them (the layers test holds the code
//! to it); each module's own doc goes deeper.
//!
//! The general-purpose machinery that knows nothing of CSI is in crates of
//! the workspace (`crates/`), which this crate composes, each with its own
//! README and tests: [`hcl`] (HCL's native and JSON syntax, parsed and
//! evaluated), [`json`], [`regex`] (Go's syntax, a Pike VM), [`encode`]
//! (base64 and percent-encoding), [`http`] (HTTP/1.1: the bounded server of
//! the agent's sockets, and the client codec of the engine's client and the
//! artifact fetcher), [`template`] (Go's `text/template`, into which
//! [`nomad_template`] registers csi-agent's own functions), and [`order`],
//! the one sort of the binary
//! (clippy.toml refuses the slice sorts outside tests).
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
pub mod grpc;
pub mod hostpath;
pub mod httpd;
pub mod id;
pub mod message;
pub mod metrics;
pub mod mount;
pub mod nomad_template;
pub mod plugin;
pub mod proto;
pub mod services;
pub mod spec;
pub mod state;
pub mod sys;
pub mod task;
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
