//! The crate's import graph held to its architecture: no arrow
//! runs up the layers, no circle inside any folder, the control
//! API's wire types (`proto::agent`) stay at its edge (`api/` and `cli/`),
//! no file has more than [`MAX_LINES`] lines of code before its tests, and
//! the workspace's crates depend on each other as the crate map of
//! `docs/ARCHITECTURE.md` draws, none on csi-agent (`crates.rs`).
//!
//! There is no graph tool on the build machines, so this module is one: it
//! reads every `.rs` file under `src/` and under each crate's
//! `crates/NAME/src/`, and finds each file's references to
//! other modules of its crate: `use crate::...` (grouped trees too),
//! `use super::...` and `self::...` resolved from the file's module path
//! (and the inline module they are written in), inline paths such as
//! `crate::x::y()`, and paths that start with a name a `use` of the crate
//! bound (`use crate::proto; proto::agent::X`). Comments, doc comments and
//! literals are skipped, and so is every `#[cfg(test)]` item (tests may
//! reach anywhere), as are the files of `#[cfg(test)] mod x;`. A module's
//! bare paths to its own children (`mod x; pub use x::Y;`) are not edges:
//! a module owns its children. `source.rs` reads a file, `graph.rs` makes
//! the graph; this file holds the architecture and its rules.
//!
//! Each node is a file's module (`src/volume/manager/claims.rs` is
//! `volume::manager::claims`, `src/volume/manager/mod.rs` is
//! `volume::manager`, `src/lib.rs` is `crate`; `crates/hcl/src/ast.rs` is
//! `hcl::ast`); a reference is an edge to the longest prefix of its path
//! that is a file's module. The layers are `src/`'s: a crate's modules are
//! held to no circle and the line cap, and the crates to each other by
//! Cargo and the crate map.
//!
//! Where the code breaks these rules today, each rule lists the
//! violations it tolerates, and fails both on a new one and on a listed one that no longer occurs, so the lists only
//! shrink: when a test says a violation is fixed, delete its line.

mod crates;
mod graph;
mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::OnceLock;

use graph::{circles, shortest_path, Edge, Graph};

/// The layers, top first: a module may use its own top-level module and the
/// layers below its own, never a layer above it nor another module of its
/// own layer (the modules of one layer do not know each other).
/// `crate` (`lib.rs`, which declares the modules and holds
/// `error_chain`) is exempt, as is `main` (`main.rs`) as the source of an
/// edge.
const LAYERS: &[&[&str]] = &[
    // The edge of the CLI: the binary's argument dispatch, the flag parser
    // and every command, exit codes and the printing of answers and errors.
    &["main", "cli"],
    // The wiring: the main loop, which owns all state, persists each turn
    // and answers the control API's calls; signals, `-dev`, the cluster
    // membership and the writers' guard.
    &["agent"],
    // Docker's Volume Plugin protocol: an edge beside the control API's,
    // whose calls it sends to the main loop as the API's own requests.
    &["volume_plugin"],
    // The control API's edge: its server (with the `SO_PEERCRED` check) and
    // the CLI's client; the requests and answers, mapped between domain
    // types and `proto::agent`.
    &["api"],
    // Jobs and allocations: the `exec` and `raw_exec` drivers, task roots
    // and mounts, the restart policy, the volume and `csi_plugin` hooks,
    // re-adoption after a restart.
    &["task"],
    // Volume records and claims, the pure planner, the steps' RPCs and host
    // binds, and the manager (admission, the protocol, retries,
    // reconciliation, the cluster side); the service registry of Nomad's
    // built-in service discovery, this host's and, through etcd, the
    // cluster's.
    &["volume", "services"],
    // Services: the registry of plugin instances and their threads; many
    // hosts through etcd (claim sets, leaders, fencing); the built-in
    // hostpath plugin, a CSI server.
    &["plugin", "cluster", "hostpath"],
    // Typed, validated specs decoded from HCL into csi's model: agent
    // config, volume and job specs.
    &["spec"],
    // Protocol and storage: the CO's side of CSI (types, blocking client,
    // error classification, `Backoff`); the snapshot and the journal; the
    // container engine's API (Docker's, over its unix socket).
    &["csi", "state", "docker"],
    // Nomad's `template` blocks: the template crate's engine with
    // csi-agent's functions registered (the task's environment and files,
    // the service registry, `sockaddr` over `sys`'s interface addresses).
    &["nomad_template"],
    // gRPC over plain bytes, for every service the agent serves or calls,
    // over the ground's protobuf encoding.
    &["grpc"],
    // The ground: every mount system call; IDs that become paths;
    // durations and sizes; latency trace points; the generated protobuf
    // modules and their bytes; a call's answer in the domain's terms
    // (`CallError`, `ReplyTo`); metrics and events.
    &[
        "mount", "id", "units", "trace", "proto", "message", "call", "metrics", "events",
    ],
    // Below the ground: the agent's own sockets (the metrics endpoint,
    // Docker's volume plugin protocol) served by the `http` crate's
    // bounded server, which it hands `sys`'s poll and `SO_PEERCRED`.
    &["httpd"],
    // The floor, which uses nothing of `src/`: the system calls besides
    // mounts, with the `cvt` that `mount` uses too. (HCL, JSON, regular
    // expressions, base64 and percent-encoding, and the one sort are
    // crates of the workspace, under every layer: see the crate map.)
    &["sys"],
];

/// Edges (`from`, `to`) of today's code that go up the layers.
const KNOWN_UPWARD: &[(&str, &str)] = &[];

/// Edges of today's code inside a circle of modules of one folder (a
/// top-level module and everything under it), each with why it is there.
const KNOWN_CYCLE_EDGES: &[(&str, &str)] = &[];

/// Modules outside `api/` and `cli/` that use `proto::agent` today.
const KNOWN_WIRE_USERS: &[&str] = &[];

/// The most lines of code a file may have before its `#[cfg(test)]` module.
const MAX_LINES: usize = 700;

/// Files longer than [`MAX_LINES`] today.
const KNOWN_LONG_FILES: &[&str] = &[];

/// The modules of the control API's wire types: `agent.proto`'s messages
/// and its gRPC service.
const WIRE_MODULES: &[&str] = &["agent", "agent_grpc"];

/// Where the wire types may be used: the API's edge, the CLI, the
/// generated code and the crate roots.
const WIRE_EDGE: &[&str] = &["api", "cli", "proto", "crate", "main"];

fn graph() -> &'static Graph {
    static GRAPH: OnceLock<Graph> = OnceLock::new();
    GRAPH.get_or_init(|| Graph::read_workspace(Path::new(env!("CARGO_MANIFEST_DIR"))))
}

/// The top-level module of a module name.
fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// The index of a top-level module's layer in [`LAYERS`], 0 the highest.
fn layer(top: &str) -> Option<usize> {
    LAYERS.iter().position(|row| row.contains(&top))
}

/// Violations found, against the list a rule tolerates: fails on a new one
/// and on a listed one that no longer occurs. Each found violation is a key
/// and the lines that show where it occurs.
fn check_against_known(
    rule: &str,
    list: &str,
    found: BTreeMap<String, Vec<String>>,
    known: &[String],
) {
    let known: BTreeSet<&String> = known.iter().collect();
    let mut report = String::new();
    for (key, lines) in &found {
        if !known.contains(key) {
            for line in lines {
                writeln!(report, "  {line}").unwrap();
            }
        }
    }
    if !report.is_empty() {
        report.insert_str(0, &format!("{rule}:\n"));
    }
    let fixed: Vec<&&String> = known
        .iter()
        .filter(|key| !found.contains_key(**key))
        .collect();
    if !fixed.is_empty() {
        writeln!(report, "no longer found (remove them from {list}: fixed):").unwrap();
        for key in fixed {
            writeln!(report, "  {key}").unwrap();
        }
    }
    assert!(report.is_empty(), "{report}");
}

/// Edges grouped by `key`, each shown as `file:line: from -> to` at its
/// first reference in a file, with the lines of the others.
fn grouped<'a>(
    edges: impl Iterator<Item = &'a Edge>,
    key: impl Fn(&Edge) -> String,
    to: impl Fn(&Edge) -> String,
) -> BTreeMap<String, Vec<String>> {
    let mut by_file: BTreeMap<(String, &str, String), Vec<&Edge>> = BTreeMap::new();
    for edge in edges {
        by_file
            .entry((key(edge), &edge.file, to(edge)))
            .or_default()
            .push(edge);
    }
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ((key, _, to), edges) in by_file {
        let first = edges[0];
        let mut line = format!("{}: {} -> {to}", first.at(), first.from);
        let mut others: Vec<String> = edges[1..]
            .iter()
            .map(|edge| edge.line)
            .filter(|&line| line != first.line)
            .map(|line| line.to_string())
            .collect();
        others.dedup();
        match others.len() {
            0 => {}
            1 => write!(line, " (also line {})", others[0]).unwrap(),
            _ => write!(line, " (also lines {})", others.join(", ")).unwrap(),
        }
        found.entry(key).or_default().push(line);
    }
    found
}

/// Edges grouped by `from -> to`.
fn by_pair<'a>(edges: impl Iterator<Item = &'a Edge>) -> BTreeMap<String, Vec<String>> {
    let pair = |edge: &Edge| format!("{} -> {}", edge.from, edge.to);
    grouped(edges, pair, |edge| edge.to.clone())
}

fn pairs(list: &[(&str, &str)]) -> Vec<String> {
    list.iter()
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect()
}

// ---------------------------------------------------------------------------
// The rules.

#[test]
fn layers_name_every_top_level_module_once() {
    let tops: BTreeSet<&str> = graph()
        .files
        .iter()
        .filter(|f| f.file.starts_with("src/"))
        .map(|f| top(&f.module))
        .filter(|&module| module != "crate")
        .collect();
    let listed: Vec<&str> = LAYERS.iter().flat_map(|row| row.iter().copied()).collect();
    let unlisted: Vec<&&str> = tops.iter().filter(|m| !listed.contains(m)).collect();
    assert!(
        unlisted.is_empty(),
        "put these modules in LAYERS: {unlisted:?}"
    );
    let gone: Vec<&&str> = listed.iter().filter(|m| !tops.contains(*m)).collect();
    assert!(
        gone.is_empty(),
        "LAYERS names modules that do not exist: {gone:?}"
    );
    let mut once = BTreeSet::new();
    let twice: Vec<&&str> = listed.iter().filter(|m| !once.insert(**m)).collect();
    assert!(
        twice.is_empty(),
        "LAYERS names these modules twice: {twice:?}"
    );
}

#[test]
fn no_module_uses_a_layer_above_it() {
    let upward = graph().edges.iter().filter(|edge| {
        if !edge.file.starts_with("src/") {
            return false;
        }
        let (from, to) = (top(&edge.from), top(&edge.to));
        if from == to || from == "crate" || from == "main" || to == "crate" {
            return false;
        }
        match (layer(from), layer(to)) {
            (Some(from), Some(to)) => to <= from,
            _ => false,
        }
    });
    check_against_known(
        "edges up the layers or across one (a module may use only the layers below its own)",
        "KNOWN_UPWARD",
        by_pair(upward),
        &pairs(KNOWN_UPWARD),
    );
}

#[test]
fn no_circle_inside_any_folder() {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let folders: BTreeSet<&str> = graph()
        .edges
        .iter()
        .filter(|edge| edge.from.contains("::"))
        .map(|edge| top(&edge.from))
        .collect();
    for subtree in folders {
        let inside = |module: &str| top(module) == subtree;
        let edges: Vec<&Edge> = graph()
            .edges
            .iter()
            .filter(|edge| inside(&edge.from) && inside(&edge.to))
            .collect();
        let mut adjacent: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for edge in &edges {
            adjacent.entry(&edge.from).or_default().insert(&edge.to);
        }
        for circle in circles(&adjacent) {
            let in_circle = edges
                .iter()
                .copied()
                .filter(|edge| circle.contains(&edge.from) && circle.contains(&edge.to));
            for (key, lines) in by_pair(in_circle) {
                let (from, to) = key.split_once(" -> ").unwrap();
                let back = shortest_path(&adjacent, to, from).join(" -> ");
                let lines = lines
                    .into_iter()
                    .map(|line| format!("{line}, in the circle {from} -> {back}"))
                    .collect();
                found.insert(key, lines);
            }
        }
    }
    check_against_known(
        "edges in a circle (break each circle: a module may not reach itself)",
        "KNOWN_CYCLE_EDGES",
        found,
        &pairs(KNOWN_CYCLE_EDGES),
    );
}

#[test]
fn control_api_wire_types_stay_at_its_edge() {
    let wire = |edge: &&Edge| {
        edge.path.len() >= 2
            && edge.path[0] == "proto"
            && WIRE_MODULES.contains(&edge.path[1].as_str())
            && !WIRE_EDGE.contains(&top(&edge.from))
    };
    let found = grouped(
        graph().edges.iter().filter(wire),
        |edge| edge.from.clone(),
        |edge| edge.path[..2].join("::"),
    );
    let known: Vec<String> = KNOWN_WIRE_USERS.iter().map(|m| m.to_string()).collect();
    check_against_known(
        "the control API's wire types outside api/ and cli/ (map to domain types in api/)",
        "KNOWN_WIRE_USERS",
        found,
        &known,
    );
}

#[test]
fn no_file_is_too_long() {
    let found = graph()
        .files
        .iter()
        .filter(|file| file.code_lines > MAX_LINES)
        .map(|file| {
            let line = format!(
                "{}: {} lines before its tests (at most {MAX_LINES})",
                file.file, file.code_lines
            );
            (file.file.clone(), vec![line])
        })
        .collect();
    let known: Vec<String> = KNOWN_LONG_FILES.iter().map(|f| f.to_string()).collect();
    check_against_known(
        "files too long (split them by concern)",
        "KNOWN_LONG_FILES",
        found,
        &known,
    );
}

#[test]
fn the_graph_of_the_crate_has_hundreds_of_edges() {
    let graph = graph();
    let pairs: BTreeSet<(&str, &str)> = graph
        .edges
        .iter()
        .map(|edge| (edge.from.as_str(), edge.to.as_str()))
        .collect();
    assert!(graph.files.len() >= 100, "{} files", graph.files.len());
    assert!(pairs.len() >= 300, "{} edges", pairs.len());
    for edge in [
        ("volume::manager::intake::claims", "volume::model"),
        ("task::exec::child", "task::exec"),
        ("csi::client", "csi::controller"),
        ("main", "cli"),
    ] {
        assert!(pairs.contains(&edge), "{edge:?} missing");
    }
    let modules: BTreeSet<&str> = graph.files.iter().map(|f| f.module.as_str()).collect();
    for test_only in [
        "volume::manager::answers_tests",
        "hcl::tests",
        "hcl::tests::errors",
    ] {
        assert!(!modules.contains(test_only), "{test_only} is test-only");
    }
}
