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
//! | [`agent`] | the main loop: owns the plugin registry and the volume manager, answers the control API, persists each turn's changes before acting on them (and holds back, refuses changes and retries while it cannot); signals; `-dev` |
//! | [`plugin`] | the registry of plugin instances with subscribers (a plugin ID is a monolith, or a controller and a node run apart, counted as Nomad counts them), the per-instance thread (inotify wait, probe, fingerprint, heartbeat), the bounded worker pool for volume RPCs |
//! | [`volume`] | volume records and claims, the pure planner of the claim/release protocol, the steps' RPCs and host bind mounts, the manager (admission, retries, reconciliation with mountinfo) |
//! | [`state`] | the snapshot `state.pb` (atomic write) and the CRC-framed journal with group commit |
//! | [`cluster`] | many hosts through etcd v3: the client (KV, revision-compared transactions, leases, watches, member fail-over; plain or TLS with client certificates), node records on leases, claim sets, shared volume records, attachments and relayed controller calls served by each plugin's controller leader, the fencing of lost nodes |
//! | [`api`] | the control API (`proto/agent.proto`): the server with the `SO_PEERCRED` check, and the CLI's client |
//! | [`mount`] | safe wrappers over `mount(2)`/`umount2(2)`/`statvfs(3)` and the `/proc/self/mountinfo` parser; all mount syscalls of the agent live here |
//! | [`sys`] | the other system calls: inotify, peer credentials, signals to children, file locks, the hostpath plugin's loop devices and sparse-file extents |
//! | [`hcl`] | the HCL subset parser (blocks, attributes, strings, heredocs, numbers, lists, objects, comments) and the parser of HCL's JSON syntax (`*.json`), both with line:col positions, into one syntax tree |
//! | [`spec`] | typed, validated specs decoded from HCL (native or JSON syntax, by the file name) in Nomad's formats: agent config, volume spec, job spec; strict keys with did-you-mean, every error with `file:line:col`, Nomad keys csi-agent ignores kept with a warning |
//! | [`hostpath`] | the built-in hostpath CSI plugin (`csi-agent hostpath`): the `-dev` default and our test fixture; directory and block (loop device) volumes, snapshots, clones, expansion, a monolith or a controller and a node process sharing one base dir (`-mode`), a strict mode that refuses and records what a conforming CO never sends, test-only fault injection and call tracing |
//! | [`proto`] | every generated protobuf module |
//! | [`id`] | validation of IDs that become path components |
//! | [`trace`] | latency trace points (off unless `CSI_AGENT_TRACE` names a file), read by the benchmark into the anatomy of a claim |
//! | [`units`] | durations (`30s`, `1h30m`), byte sizes (`10GiB`) and timestamps as users read and write them |
//! | [`task`] | jobs and allocations: the `exec` driver (fork/exec in a new session and mount namespace, in a root of the task's own built from `chroot_env`, driver mounts with propagation, logs, restart policy) and `raw_exec` (the host's root), the volume hook and the `csi_plugin` supervisor hook, re-adoption after a restart |
//! | [`cli`] | argument parsing and every command: `agent`, `plugin`, `volume`, `job`, `alloc`, the direct plugin client `csi`, `validate` |
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
//! # Departures from DESIGN.md
//!
//! - DESIGN.md's module table has no home for the built-in plugin, which
//!   the foundation issue asks for; it is [`hostpath`], a CSI *server*, and
//!   the only code besides [`csi`] that touches generated CSI protobuf.
//! - IDs may also contain `[` and `]`, for Nomad's `per_alloc` volume
//!   names such as `data[0]`; see [`id`].
//! - `main.rs` only dispatches; the command implementations and the small
//!   flag parser live in [`cli`] so they are unit-testable.
//! - `agent.rs` is a directory, [`agent`]: `-dev`'s supervised hostpath
//!   child lives beside the main loop, and so do the loop's other concerns
//!   (persisting a turn, plugins, plugin tasks, signals), a file each.
//! - libc calls that are not mounts (inotify, `SO_PEERCRED`, `kill`,
//!   `flock`, the loop device ioctls) live in [`sys`], with the same
//!   one-small-function-per-call rule as [`mount`].
//! - A volume is staged once per node, at `csi/<plugin>/staging/<volume>`,
//!   with its widest capability, as DESIGN.md and the CSI spec say; this is
//!   a departure from Nomad, which stages once per usage. States of the
//!   first releases (per-usage stagings) load and migrate: their published
//!   claims keep their staging until released, then it is unstaged, and new
//!   claims reuse such a staging when it can serve them
//!   ([`volume::model`]).
//! - Host targets follow DESIGN.md's mount ownership ([`volume::target`]):
//!   refused when dangerous or already a mount point, unmounted only when
//!   provably the agent's bind. A release step that cannot succeed leaves
//!   its claim as a `failed` past claim until released again, instead of a
//!   retry loop.
//! - DESIGN.md's "one thread per plugin" is one thread (and worker pool)
//!   per plugin *instance*: a plugin ID may be a controller process and a
//!   node process, and each RPC goes to the instance serving its service
//!   ([`plugin`]); the one-call-per-volume rule holds across both.
//! - Calls about a volume that are not protocol steps (CreateSnapshot,
//!   NodeGetVolumeStats, an expansion) wait in a per-volume queue until no
//!   other call for the volume is in flight.
//! - There is no separate usage tracker: whether a staging or the
//!   attachment is still in use is computed from the claims each time
//!   ([`volume::model`]), so it cannot drift and needs no rebuilding.
//! - Claim states are recorded per step (`Absent`, `Pending`, `Done` for
//!   the attachment, each staging, each publish and host bind) rather than
//!   as one state per claim; the planner ([`volume::plan`]) derives the next
//!   RPC from them, and `volume status` shows them with DESIGN.md's names
//!   (`taken`, `unpublishing`, `node-detached`, `ready-to-free`). Only
//!   forward steps are marked before their RPC: a release step's "not yet
//!   absent" already makes it be re-sent after a crash.
//! - DESIGN.md persists every transition before the next RPC, one step
//!   per job. A claim's steps (or a release's) run back to back as one job
//!   on the plugin's worker ([`volume::steps`]), and the journal gets
//!   fewer records: one marks all of a claim's forward steps `Pending`
//!   before the first RPC, synced; each RPC's outcome is written before the
//!   next RPC (the job waits for that write, not for a sync), so that a
//!   killed agent re-sends at most the last RPC sent, and a power cut at
//!   most the RPCs since the last sync, which are idempotent; a host bind
//!   or unbind rides on its neighbour's record. The answer that a claim
//!   is taken, or that a released claim is freed, waits for its records
//!   to be written, not synced: the synced record before the job (the
//!   admission, the release) already decides it, and after a power cut the
//!   next start does the `Pending` steps again to the same end. A claim
//!   through ControllerPublish, NodeStage, NodePublish and a host bind is
//!   1 sync instead of 5 (the `Pending` record), its release 1 (the
//!   release, before its job), as a bare CSI client keeping one record
//!   would.
//! - The journal holds whole volume records (one per volume changed in a
//!   loop turn), not per-transition deltas: replay is "last record wins",
//!   and a turn that changes a volume five times writes it once.
//! - Volume specs travel to the agent as text with their file name over the
//!   control socket and are decoded there (the name says whether it is HCL's
//!   JSON syntax), so errors name the file's line and column and the spec
//!   is validated by the same code as `csi-agent validate`.
//! - An exec task's root ([`task::root`]) is built entirely in the task's
//!   mount namespace, `/secrets` included (Nomad mounts that tmpfs on the
//!   host), so nothing of it shows in the host's mount table and a restart
//!   starts with empty secrets. Tasks share the host's PID and IPC
//!   namespaces (Nomad's `pid_mode` and `ipc_mode` default to private): a
//!   task's `/proc` lists the host's processes, and a task can reach the
//!   root of another task of the same user through `/proc/<pid>/root`.
//! - A `raw_exec` plugin task, on the host's root, gets host paths in its
//!   RPCs and in `CSI_ENDPOINT`, as external plugins do; `mount_dir` and
//!   `stage_publish_base_dir` apply to `exec` plugin tasks only.
//! - A `raw_exec` task keeps the host's root but still gets a mount
//!   namespace of its own, in which the control socket is covered: tasks
//!   never reach the agent's API (Nomad's `raw_exec` has no isolation).
//! - While a plugin task runs, the agent's `csi/` root is a bind mount of
//!   itself, made shared, so that the mounts the plugin makes in its own
//!   namespace land on the host even when the host's `/` is private (it is
//!   on this project's machines). It is unmounted when the last plugin
//!   task stops and nothing is mounted below it.
//! - Tasks outlive the agent: stopping the agent leaves them running, and
//!   the next agent adopts them (pid and start time, or the pid file the
//!   child writes before exec). Only `job stop` stops tasks.
//! - Exits are noticed per task (`waitpid` on that pid on SIGCHLD; the
//!   start time of an adopted process, looked at every 500 ms while there
//!   is one), never with `waitpid(-1)`, which would steal the exit of
//!   `-dev`'s plugin child.
//! - Jobs and allocations are kept in the snapshot, not the journal: task
//!   transitions are rare, and a crash between fork and the snapshot is
//!   covered by the pid file.
//! - A task that exits with status 0 is done and not restarted (Nomad's
//!   batch behaviour); any other exit goes through the restart policy,
//!   whose delay doubles from `delay` up to `interval` (the shared
//!   `Backoff`'s ceiling, without jitter).
//! - Allocation IDs are 8 hex digits, not UUIDs: they are path components
//!   of plugin sockets, and `sun_path` holds 107 bytes.
//! - Many hosts: DESIGN.md has the controller leader fence a lost node.
//!   Here one agent of the cluster, the holder of a `fencer` election (a
//!   key DESIGN.md does not list), decides that a node is lost (its key
//!   gone for a lease TTL, so a restarted agent is spared), marks its
//!   claims past and has the plugin's controller leader detach them
//!   before it frees them ([`cluster::fence`]): lost nodes holding claims
//!   of a plugin with no controller leader at that moment are fenced all
//!   the same once one comes. Reader and multi-writer claims no controller
//!   attached are freed without a fence, as the issue asks; a writer's
//!   waits for its node's promise to stop it (`stop_after_disconnect`,
//!   counted from the lease's expiry) or, without one, for an operator.
//!   Leadership is the election key's lease, and the fencer's and the
//!   controller leaders' writes compare it.
//! - Many hosts: tasks outlive their agent, so a node's promise to stop
//!   its writers is also kept by a guard process of its own
//!   ([`agent::guard`]), which DESIGN.md does not have.
//! - Many hosts: DESIGN.md has only the controller leader make controller
//!   RPCs. Here the leader makes every attach and detach (the calls that
//!   change what other hosts may do, and that fencing depends on), and
//!   the calls of hosts without a controller of the plugin (relayed,
//!   [`cluster::relay`]); a host with a controller of its own creates,
//!   deletes, snapshots and expands with it. A controller on every host is
//!   what node-local storage deploys (Kubernetes runs its provisioner per
//!   node for it), and such a controller can make volumes only where it
//!   runs: the leader could not make one for another host. Calls a user
//!   makes on one host are made once, so no leader is needed to keep two
//!   agents from making the same one.
//! - A volume's local record remembers the etcd cluster (its ID) that held
//!   it, a field DESIGN.md does not have: an agent that comes back tells a
//!   deregistration made while it was away (missing from the same etcd)
//!   from a volume etcd never had (shared to it).

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
pub mod cluster;
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
pub mod task;
pub mod trace;
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
