//! The built-in hostpath CSI plugin: `csi-agent hostpath`.
//!
//! A real CSI plugin (Identity, Controller, Node over gRPC on a unix socket)
//! whose volumes are directories under a base dir, staged and published with
//! bind mounts, or, for `block` capabilities, sparse files attached to loop
//! devices whose device nodes are bound onto target files (`block.rs`). It
//! is the agent's `-dev` default, the fixture of our tests, and a reference
//! for what a well-behaved plugin answers: idempotent repeats succeed,
//! incompatible repeats are ALREADY_EXISTS, unknown volumes NOT_FOUND,
//! missing fields INVALID_ARGUMENT, and out-of-order calls (stage before
//! attach, unstage while published, detach while staged)
//! FAILED_PRECONDITION, so a CO that breaks the spec's ordering finds out.
//!
//! It advertises, and does for real:
//!
//! - plugin: CONTROLLER_SERVICE, VOLUME_ACCESSIBILITY_CONSTRAINTS (one
//!   topology segment, the node), ONLINE volume expansion;
//! - controller: CREATE_DELETE_VOLUME, PUBLISH_UNPUBLISH_VOLUME and
//!   PUBLISH_READONLY (attachments are records NodeStage checks; neither
//!   with `-no-attach`), LIST_VOLUMES with LIST_VOLUMES_PUBLISHED_NODES
//!   (not with `-no-attach`), GET_VOLUME and VOLUME_CONDITION (abnormal
//!   when a volume's data is gone or a staged block volume lost its loop
//!   device), GET_CAPACITY (the base dir's free space),
//!   CREATE_DELETE_SNAPSHOT and LIST_SNAPSHOTS, CLONE_VOLUME (snapshots
//!   and volumes made from them or from a volume are synced copies, see
//!   `snapshots.rs`), EXPAND_VOLUME, SINGLE_NODE_MULTI_WRITER;
//! - node: STAGE_UNSTAGE_VOLUME, GET_VOLUME_STATS and VOLUME_CONDITION,
//!   EXPAND_VOLUME, SINGLE_NODE_MULTI_WRITER, VOLUME_MOUNT_GROUP (a
//!   directory volume given a `volume_mount_group` at NodeStage or
//!   NodePublish becomes that group's, `g+rwxs`, see `node.rs`).
//!
//! That is the monolith's list (the default `-mode`). A `-mode controller`
//! process advertises the plugin and controller capabilities and answers
//! the Node service's RPCs UNIMPLEMENTED (NodeGetCapabilities included); a
//! `-mode node` process leaves CONTROLLER_SERVICE out of its plugin
//! capabilities and answers the Controller service's RPCs UNIMPLEMENTED
//! (ControllerGetCapabilities, snapshots, ControllerGetVolume included). So
//! snapshots, clones, ControllerGetVolume and the controller's half of an
//! expansion are the controller process's; NodeExpandVolume and stats the
//! node process's.
//!
//! Expansion is split as on real storage: ControllerExpandVolume records a
//! directory's capacity or grows a block volume's backing file, and asks
//! for NodeExpandVolume while loop devices show the volume; that one makes
//! them show the new size. List calls page with index tokens; a token that
//! is not one is ABORTED. Not implemented: GET_SNAPSHOT and MODIFY_VOLUME
//! (UNIMPLEMENTED), the group controller and snapshot metadata services.
//!
//! With `-strict` it also judges the CO: every request a CO that keeps the
//! spec never sends (a second staging path for a volume, a publish before
//! the stage, a stage or publish without ControllerPublishVolume's publish
//! context, an unstage while published, a detach while staged, two calls in
//! flight for one volume, an RPC of a capability not advertised, secrets on
//! an RPC that takes none; CreateSnapshot counts as a call for its source
//! volume) is refused with FAILED_PRECONDITION
//! `strict: <rule>: ...` and recorded as `<RPC> <volume>: <rule>` in
//! `<base-dir>/strict-violations`, created empty at start. The rules are
//! [`strict`]'s, a pure checker; [`verdict`] runs it around each call. Off
//! by default: without it the plugin serves such requests as it always has
//! (a CO that stages per usage, as Nomad does, still works).
//!
//! With `-mode controller` or `-mode node` a process serves one half of the
//! plugin, as real deployments split a CSI plugin into a controller and
//! node plugins under one plugin ID: Identity and Controller, or Identity
//! and Node (GetPluginCapabilities leaves CONTROLLER_SERVICE out), and the
//! other service's RPCs are UNIMPLEMENTED. A controller process and a node
//! process given one base dir and one node ID make one plugin: they share
//! the state's records (see [`records`]), so the node finds the controller's
//! attachments and the controller the node's stagings. In strict mode each
//! process judges what it sees, with the other side of its model taken
//! from that shared state before each call, and a call for a volume the
//! other process has a call in flight for is a second call in flight (see
//! [`verdict`] and [`in_flight`]); a call of the service a process does not
//! serve is refused as an RPC the plugin did not advertise.
//!
//! Each RPC runs on its own thread (`service.rs`), so an injected sleep or hang (see
//! [`faults`]) delays only that call; changes to a volume or a snapshot are
//! serialised by its record's lock, which also keeps out the other
//! processes of the base dir (see [`records`]); copies for snapshots and
//! clones are made under the locks of the records they read and make.
//!
//! Files under the base dir: `records/`, `locks/` and `state.lock` (see
//! [`records`]), `volumes/<id>/` (a file-system volume), `block/<id>.img`
//! (a block volume's backing file), `snapshots/<id>/files/` or
//! `snapshots/<id>/block.img` (a snapshot's copy of a file-system or block
//! volume), `tmp/` (copies being made, emptied at start while holding
//! `state.lock` alone, so a process of a split plugin that starts never
//! removes a copy the other one is making), `strict-violations` (strict mode's verdict),
//! `in-flight/<id>` (a split plugin's locks of calls in flight),
//! `volumes/<id>@fenced.<n>` (with `-fence`, what a fenced node's mounts
//! of a volume still reach).

mod block;
mod checks;
mod content;
mod controller;
mod controller_grpc;
pub mod faults;
pub mod in_flight;
mod methods;
mod node;
pub mod record_key;
pub mod records;
mod service;
mod snapshots;
pub mod state;
pub mod strict;
pub mod verdict;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use grpcio::{RpcStatus, RpcStatusCode, ServerBuilder, ServerCredentials};

use crate::csi::endpoint::Endpoint;
use crate::csi::error::Code;
use crate::csi::proto::csi as pb;
use crate::csi::types::CapacityRange;
use crate::spec::PluginType;
use faults::{Faults, Trace};
use record_key::Key;
use records::{Hold, SharedState, StateGuard};
use state::State;
use strict::{Advertised, Call, Service as CsiService};
use verdict::StrictMode;

pub use service::Service;
pub(crate) use service::{publish_context, trace_fields, Received};

/// The name the plugin reports in GetPluginInfo.
pub const PLUGIN_NAME: &str = "hostpath.csi-agent";

/// The topology key of the node a hostpath volume lives on.
pub const TOPOLOGY_KEY: &str = "topology.hostpath.csi-agent/node";

/// With `-shared`, the topology key of the storage a volume lives on: the
/// base dir, whichever hosts see it (its value is the base dir's
/// [`STORAGE_ID`]).
pub const SHARED_TOPOLOGY_KEY: &str = "topology.hostpath.csi-agent/storage";

/// `<base-dir>/storage-id`: the base dir's name for itself, made by the
/// first `-shared` process that serves on it, read by the others, so that
/// every host that shares the base dir reports the same topology.
const STORAGE_ID: &str = "storage-id";

/// The directory in the base dir where copies are made before they are
/// renamed into place; emptied when the plugin starts.
const SCRATCH: &str = "tmp";

/// `<base-dir>/nodes/<node-id>`: a file for each node process that served
/// on the base dir (one storage system seen from several hosts); the
/// controller attaches volumes to these nodes.
const NODES: &str = "nodes";

impl Plugin {
    /// Whether `node` is a node of this base dir: this process's own, or
    /// one another process announced.
    fn knows_node(&self, node: &str) -> bool {
        node == self.config.node_id
            || (!node.contains('/')
                && node != "."
                && node != ".."
                && self.config.base_dir.join(NODES).join(node).is_file())
    }

    /// Whether node processes of other nodes serve on this base dir (hosts
    /// of a cluster sharing one storage system): their attachments are made
    /// by another process, the controller leader's.
    fn shares_base(&self) -> bool {
        fs::read_dir(self.config.base_dir.join(NODES)).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name() != self.config.node_id.as_str())
        })
    }
}

/// The publish-context key ControllerPublishVolume answers with; NodeStage
/// and NodePublish insist on getting it back.
pub const PUBLISH_CONTEXT_KEY: &str = "hostpath.csi-agent/attached-node";

#[derive(Clone, Debug)]
pub struct Config {
    pub endpoint: Endpoint,
    pub base_dir: PathBuf,
    pub node_id: String,
    /// Test only: the fault-injection rules file.
    pub faults: Option<PathBuf>,
    /// Test only: the call trace file.
    pub trace: Option<PathBuf>,
    /// Behave like a plugin without attachments (NFS-like): no
    /// PUBLISH_UNPUBLISH_VOLUME, and NodeStage/NodePublish do not ask for
    /// ControllerPublishVolume first.
    pub no_attach: bool,
    /// ControllerUnpublishVolume detaches even while the volume is staged
    /// or published, as a storage system fencing a lost node does: the
    /// node's mounts stay until it unstages, but no longer reach the data
    /// other nodes see (a directory volume's data becomes a new generation,
    /// `controller.rs`); without it, such a detach is refused with
    /// FAILED_PRECONDITION.
    pub fence: bool,
    /// Refuse, and record in `<base-dir>/strict-violations`, every request
    /// a CO that keeps the spec never sends (see [`strict`]).
    pub strict: bool,
    /// Test only (`-test-without`): capabilities not to advertise, by name
    /// (`create-delete-snapshot`, `online-expansion`, ...), to play a
    /// plugin that lacks them.
    pub without: Vec<String>,
    /// Test only (`-test-require-secrets`): a file of `KEY=VALUE` lines
    /// that CreateVolume, NodeStageVolume and NodePublishVolume must carry
    /// as secrets, or be refused UNAUTHENTICATED, as a storage system
    /// refuses wrong credentials: a test's proof that secrets reached the
    /// plugin, without the plugin ever writing a value anywhere.
    pub require_secrets: Option<PathBuf>,
    /// Which services this process serves: both (`monolith`), or one, for
    /// a plugin split into a controller process and a node process that
    /// share the base dir.
    pub mode: PluginType,
    /// The base dir is shared by several hosts, standing in for network
    /// storage: the plugin reports the base dir's topology
    /// ([`SHARED_TOPOLOGY_KEY`]), which every host sharing it has, rather
    /// than its node's, so its volumes can be claimed from each of them.
    pub shared: bool,
}

#[derive(Debug)]
pub enum Error {
    BaseDir { path: PathBuf, err: io::Error },
    StorageId { path: PathBuf, err: io::Error },
    State { err: io::Error },
    Verdict { err: io::Error },
    Trace { err: io::Error },
    RequiredSecrets { path: PathBuf, err: io::Error },
    Socket { path: PathBuf, err: io::Error },
    Grpc(grpcio::Error),
    Signals(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BaseDir { path, .. } => {
                write!(f, "cannot create the base dir {}", path.display())
            }
            Error::StorageId { path, .. } => {
                write!(f, "cannot read or make the storage ID {}", path.display())
            }
            Error::State { .. } => f.write_str("cannot load the plugin state"),
            Error::Verdict { .. } => f.write_str("cannot open the strict mode's verdict file"),
            Error::Trace { .. } => f.write_str("cannot open the call trace"),
            Error::RequiredSecrets { path, .. } => {
                write!(f, "cannot read the required secrets {}", path.display())
            }
            Error::Socket { path, .. } => write!(f, "cannot replace the socket {}", path.display()),
            Error::Grpc(_) => f.write_str("cannot serve gRPC"),
            Error::Signals(_) => f.write_str("cannot install signal handlers"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::BaseDir { err, .. }
            | Error::StorageId { err, .. }
            | Error::State { err }
            | Error::Verdict { err }
            | Error::Trace { err }
            | Error::RequiredSecrets { err, .. }
            | Error::Socket { err, .. }
            | Error::Signals(err) => Some(err),
            Error::Grpc(err) => Some(err),
        }
    }
}

/// The plugin: configuration, state and test hooks, shared by RPC threads.
pub struct Plugin {
    config: Config,
    state: SharedState,
    faults: Faults,
    trace: Trace,
    strict: Option<StrictMode>,
    /// `-test-require-secrets`, read.
    required_secrets: Option<std::collections::BTreeMap<String, String>>,
    /// The one segment of the topology the plugin reports (NodeGetInfo)
    /// and gives its volumes (CreateVolume): the node, or with `-shared`
    /// the base dir.
    segment: (String, String),
}

impl Plugin {
    fn volume_dir(&self, id: &str) -> PathBuf {
        self.config.base_dir.join("volumes").join(id)
    }

    /// `-test-require-secrets`: refuses a request whose secrets lack a key
    /// of the file or carry another value for it (UNAUTHENTICATED, naming
    /// the key, never a value).
    fn check_secrets(&self, given: &std::collections::HashMap<String, String>) -> RpcResult<()> {
        let Some(required) = &self.required_secrets else {
            return Ok(());
        };
        for (key, value) in required {
            if given.get(key) != Some(value) {
                return Err(status(
                    Code::Unauthenticated,
                    format!("secret {key:?} is missing or wrong"),
                ));
            }
        }
        Ok(())
    }

    /// The record of volume `id` as its file has it, held until the guard
    /// is dropped.
    fn lock(&self, id: &str) -> RpcResult<StateGuard<'_>> {
        self.lock_records(&[Key::Volume(id.to_string())])
    }

    /// The records of `keys`, held until the guard is dropped.
    fn lock_records(&self, keys: &[Key]) -> RpcResult<StateGuard<'_>> {
        self.state
            .lock(keys)
            .map_err(|e| internal("cannot read the plugin state", e))
    }

    /// Every record, read without locks: for listing.
    fn read_all(&self) -> RpcResult<State> {
        self.state
            .read_all()
            .map_err(|e| internal("cannot read the plugin state", e))
    }

    /// What the shared state records, as the calls that made it, for a
    /// strict process of a split plugin; `None` (logged) when the state
    /// cannot be read: the call then meets its own error.
    fn recorded(&self) -> Option<Vec<Call>> {
        match self.state.read_all() {
            Ok(state) => Some(verdict::recorded_calls(&state)),
            Err(err) => {
                log::error!("strict: cannot read the shared state: {err}");
                None
            }
        }
    }

    /// Whether this process serves `service`'s RPCs.
    fn serves(&self, service: CsiService) -> bool {
        match service {
            CsiService::Identity => true,
            CsiService::Controller => self.config.mode.has_controller(),
            CsiService::Node => self.config.mode.has_node(),
        }
    }

    fn topology(&self) -> pb::Topology {
        let mut topology = pb::Topology::new();
        let (key, value) = self.segment.clone();
        topology.segments.insert(key, value);
        topology
    }
}

/// The base dir's storage ID at `path`: the one there, or a new one. A new
/// one is written aside and linked into place, which fails if another
/// process linked its own first: then that one is read, so every process
/// of the base dir agrees.
fn storage_id(path: &Path) -> io::Result<String> {
    match fs::read_to_string(path) {
        Ok(id) => return checked_storage_id(id, path),
        Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
        Err(_) => {}
    }
    let mut random = crate::csi::backoff::SplitMix64::from_entropy();
    let id = format!("{:016x}", random.next_u64());
    let aside = path.with_extension(format!("{}.{id}", std::process::id()));
    fs::write(&aside, &id)?;
    let linked = fs::hard_link(&aside, path);
    let _ = fs::remove_file(&aside);
    match linked {
        Ok(()) => Ok(id),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            checked_storage_id(fs::read_to_string(path)?, path)
        }
        Err(err) => Err(err),
    }
}

/// A storage ID read back: one line of 1 to 64 characters, as a topology
/// value may hold; anything else is not one.
fn checked_storage_id(id: String, path: &Path) -> io::Result<String> {
    let id = id.trim().to_string();
    if id.is_empty() || id.len() > 64 || id.chars().any(char::is_control) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not a storage ID (one line of 1 to 64 characters)",
                path.display()
            ),
        ));
    }
    Ok(id)
}

/// Runs the plugin until SIGTERM or SIGINT, then removes its socket.
pub fn run(config: Config) -> Result<(), Error> {
    let volumes = config.base_dir.join("volumes");
    fs::create_dir_all(&volumes).map_err(|err| Error::BaseDir { path: volumes, err })?;
    let state = SharedState::open(&config.base_dir).map_err(|err| Error::State { err })?;
    if config.mode != PluginType::Controller {
        // The controller attaches volumes to the nodes of its base dir.
        let nodes = config.base_dir.join(NODES);
        fs::create_dir_all(&nodes)
            .and_then(|()| fs::write(nodes.join(&config.node_id), b""))
            .map_err(|err| Error::BaseDir { path: nodes, err })?;
    }
    // What is in the scratch space is a copy a crash interrupted: copies
    // are made under a shared hold of the base dir, so none is being made
    // while we hold it alone, by this process or the other one of a split
    // plugin.
    let scratch = config.base_dir.join(SCRATCH);
    let held = state
        .hold(Hold::Exclusive)
        .map_err(|err| Error::State { err })?;
    match fs::remove_dir_all(&scratch) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => fs::create_dir_all(&scratch),
    }
    .map_err(|err| Error::BaseDir { path: scratch, err })?;
    drop(held);
    let segment = if config.shared {
        let path = config.base_dir.join(STORAGE_ID);
        let id = storage_id(&path).map_err(|err| Error::StorageId { path, err })?;
        (SHARED_TOPOLOGY_KEY.to_string(), id)
    } else {
        (TOPOLOGY_KEY.to_string(), config.node_id.clone())
    };
    let trace = Trace::open(config.trace.clone()).map_err(|err| Error::Trace { err })?;
    let required_secrets = match &config.require_secrets {
        None => None,
        Some(path) => {
            let text = fs::read_to_string(path).map_err(|err| Error::RequiredSecrets {
                path: path.clone(),
                err,
            })?;
            Some(
                text.lines()
                    .filter_map(|line| line.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        }
    };
    let strict = if config.strict {
        let advertised = Advertised {
            controller: order::set(controller::capabilities(&config)),
            node: order::set(node::CAPABILITIES.iter().copied()),
        };
        let recorded = state.read_all().map_err(|err| Error::State { err })?;
        let mode = StrictMode::open(
            &config.base_dir,
            advertised,
            &config.node_id,
            &recorded,
            config.mode,
        );
        Some(mode.map_err(|err| Error::Verdict { err })?)
    } else {
        verdict::remove_stale(&config.base_dir).map_err(|err| Error::Verdict { err })?;
        None
    };
    let socket = config.endpoint.path().to_path_buf();
    let mode = config.mode;
    remove_stale_socket(&socket)?;
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(Error::Signals)?;

    let service = Service(Arc::new(Plugin {
        faults: Faults::new(config.faults.clone()),
        config,
        state,
        trace,
        strict,
        required_secrets,
        segment,
    }));
    let env = crate::grpc::grpc_environment();
    let mut server = ServerBuilder::new(env)
        .register_service(methods::create(service))
        .build()
        .map_err(Error::Grpc)?;
    // Bind under a temporary name and rename once serving, so that the
    // socket's appearance means the plugin answers: a CO that waits for the
    // file, as the spec says, never meets a refused connection.
    let binding = socket.with_file_name(format!(".csi-{}.sock", std::process::id()));
    remove_stale_socket(&binding)?;
    let target = format!("unix:{}", binding.display());
    server
        .add_listening_port(target, ServerCredentials::insecure())
        .map_err(Error::Grpc)?;
    server.start();
    fs::rename(&binding, &socket).map_err(|err| Error::Socket {
        path: socket.clone(),
        err,
    })?;
    log::info!(
        "hostpath plugin serving on {} ({} mode)",
        socket.display(),
        mode
    );

    if let Some(signal) = signals.forever().next() {
        log::info!("hostpath plugin stopping on signal {signal}");
    }
    // In-flight calls die with the process; the CO retries them.
    let _ = fs::remove_file(&socket);
    Ok(())
}

/// A socket file left by a previous run would make bind fail.
fn remove_stale_socket(path: &Path) -> Result<(), Error> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(Error::Socket {
            path: path.to_path_buf(),
            err,
        }),
    }
}

/// A gRPC status with our code names.
pub(crate) fn status(code: Code, message: impl Into<String>) -> RpcStatus {
    RpcStatus::with_message(RpcStatusCode::from(code as i32), message.into())
}

pub(crate) type RpcResult<T> = Result<T, RpcStatus>;

/// Requires a non-empty string field.
pub(crate) fn required<'a>(field: &str, value: &'a str) -> RpcResult<&'a str> {
    if value.is_empty() {
        Err(status(
            Code::InvalidArgument,
            format!("{field} is required"),
        ))
    } else {
        Ok(value)
    }
}

/// Requires a volume ID usable as a directory name.
pub(crate) fn volume_id<'a>(field: &str, value: &'a str) -> RpcResult<&'a str> {
    required(field, value)?;
    crate::id::validate(field, value)
        .map_err(|err| status(Code::InvalidArgument, err.to_string()))?;
    Ok(value)
}

/// The capacity range of a request (unset bounds are 0): negative bounds
/// are INVALID_ARGUMENT, a required size above the limit OUT_OF_RANGE.
pub(crate) fn capacity_range(range: Option<&pb::CapacityRange>) -> RpcResult<CapacityRange> {
    let range = range.map(CapacityRange::from).unwrap_or_default();
    if range.required_bytes < 0 || range.limit_bytes < 0 {
        return Err(status(
            Code::InvalidArgument,
            "capacity_range must not be negative",
        ));
    }
    if range.limit_bytes > 0 && range.required_bytes > range.limit_bytes {
        return Err(status(
            Code::OutOfRange,
            "capacity_range: required_bytes exceeds limit_bytes",
        ));
    }
    Ok(range)
}

/// `[start, start + page)` of `len` entries, for a list call's
/// `starting_token` and `max_entries`; the next token is the index after
/// the page, empty on the last page. A token that is not such an index is
/// ABORTED, as the spec says.
pub(crate) fn page(
    len: usize,
    max_entries: i32,
    starting_token: &str,
) -> RpcResult<(std::ops::Range<usize>, String)> {
    let page = usize::try_from(max_entries)
        .map_err(|_| status(Code::InvalidArgument, "max_entries must not be negative"))?;
    let start: usize = if starting_token.is_empty() {
        0
    } else {
        starting_token.parse().map_err(|_| {
            status(
                Code::Aborted,
                format!("invalid starting_token {starting_token:?}"),
            )
        })?
    };
    if start > len {
        return Err(status(
            Code::Aborted,
            format!("starting_token {start} is past the end ({len} entries)"),
        ));
    }
    let end = if page == 0 {
        len
    } else {
        len.min(start.saturating_add(page))
    };
    let next = if end < len {
        end.to_string()
    } else {
        String::new()
    };
    Ok((start..end, next))
}

pub(crate) fn internal(what: &str, err: impl fmt::Display) -> RpcStatus {
    status(Code::Internal, format!("{what}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_every_entry_once_and_bad_tokens_are_aborted() {
        assert_eq!(page(5, 2, "").unwrap(), (0..2, "2".to_string()));
        assert_eq!(page(5, 2, "2").unwrap(), (2..4, "4".to_string()));
        assert_eq!(page(5, 2, "4").unwrap(), (4..5, String::new()));
        assert_eq!(page(5, 0, "").unwrap(), (0..5, String::new()));
        assert_eq!(page(0, 0, "").unwrap(), (0..0, String::new()));
        assert_eq!(page(5, 0, "5").unwrap(), (5..5, String::new()));
        for token in ["bogus", "-1", "6"] {
            let err = page(5, 2, token).unwrap_err();
            assert_eq!(err.code(), RpcStatusCode::ABORTED, "{token}");
        }
        let err = page(5, -1, "").unwrap_err();
        assert_eq!(err.code(), RpcStatusCode::INVALID_ARGUMENT);
    }

    #[test]
    fn every_process_of_a_shared_base_dir_reads_one_storage_id() {
        let dir = std::env::temp_dir().join(format!("hostpath-storage-id-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(STORAGE_ID);
        let _ = fs::remove_file(&path);
        // Processes starting at once agree on whichever linked first.
        let ids: Vec<String> = std::thread::scope(|s| {
            let racers: Vec<_> = (0..4).map(|_| s.spawn(|| storage_id(&path))).collect();
            racers
                .into_iter()
                .map(|r| r.join().unwrap().unwrap())
                .collect()
        });
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
        assert_eq!(ids[0].len(), 16);
        assert_eq!(storage_id(&path).unwrap(), ids[0]);
        // Something else in its place is refused, not reported.
        fs::write(&path, "x".repeat(65)).unwrap();
        let err = storage_id(&path).unwrap_err();
        assert!(err.to_string().contains("is not a storage ID"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
