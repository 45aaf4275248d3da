//! csi-agent: the orchestrator's side of the Container Storage Interface on
//! one host, in one static binary.
//!
//! # Architecture
//!
//! csi-agent does for a single host what Nomad's client does for CSI: it
//! supervises CSI plugins, claims volumes for workloads (ControllerPublish →
//! NodeStage → NodePublish, and back), and bind-mounts them into tasks. It is
//! synchronous: a thread per plugin makes blocking grpcio calls and talks to
//! one main loop over crossbeam channels (see `../shared/DESIGN.md` for the
//! whole picture; this crate documents where it stands today).
//!
//! Modules, each owning one concern:
//!
//! | module | owns |
//! |---|---|
//! | [`csi`] | generated CSI v1.12.0 stubs (`build.rs`, `proto/csi.proto`), the typed blocking client, the capability model with redacting `Debug`/`Display`, capability comparison, error classification per RPC and code, [`csi::Backoff`] |
//! | [`mount`] | safe wrappers over `mount(2)`/`umount2(2)`/`statvfs(3)` and the `/proc/self/mountinfo` parser; all mount syscalls of the agent live here |
//! | [`hcl`] | the HCL subset parser (blocks, attributes, strings, heredocs, numbers, lists, objects, comments) with line:col positions |
//! | [`spec`] | typed, validated specs decoded from HCL in Nomad's formats: agent config, volume spec, job spec; strict keys with did-you-mean, every error with `file:line:col`, Nomad keys csi-agent ignores kept with a warning |
//! | [`hostpath`] | the built-in hostpath CSI plugin (`csi-agent hostpath`): the `-dev` default and our test fixture, with test-only fault injection and call tracing |
//! | [`id`] | validation of IDs that become path components |
//! | [`units`] | durations (`30s`, `1h30m`) and byte sizes (`10GiB`) as users write them |
//! | [`cli`] | argument parsing, the direct plugin client `csi-agent csi ...`, and `csi-agent validate` |
//!
//! Still to come, per DESIGN.md: `plugin/` (registry, instance manager),
//! `volume/` (claims), `task/` (exec driver),
//! `state/` (persistence), `api/` (control API) and `agent.rs` (main loop).
//!
//! # Departures from DESIGN.md
//!
//! - DESIGN.md's module table has no home for the built-in plugin, which
//!   the foundation issue asks for; it is [`hostpath`], a CSI *server*, and
//!   the only code besides [`csi`] that touches generated protobuf.
//! - IDs may also contain `[` and `]`, for Nomad's `per_alloc` volume
//!   names such as `data[0]`; see [`id`].
//! - `main.rs` only dispatches; the command implementations and the small
//!   flag parser live in [`cli`] so they are unit-testable.
//!
//! # Conventions
//!
//! - Secrets and mount flags print `[REDACTED]` in `Debug`, `Display`, logs
//!   and CLI output; raw values are reachable only through `expose()`.
//! - Errors are typed per module; their `Display` is one short sentence that
//!   does not repeat its `source()`; the CLI prints the whole chain.
//! - Every `unsafe` block has a `// SAFETY:` comment (enforced by
//!   `clippy::undocumented_unsafe_blocks`) and lives in a small function.

pub mod agent;
pub mod api;
pub mod cli;
pub mod csi;
pub mod hcl;
pub mod hostpath;
pub mod id;
pub mod mount;
pub mod plugin;
pub mod proto;
pub mod spec;
pub mod state;
pub mod sys;
pub mod units;
pub mod volume;

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
