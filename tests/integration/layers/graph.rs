//! The graph of the crate's files: each file's module is a node, each
//! reference an edge to the longest prefix of its path that is a file's
//! module; and what the rules ask of it, circles and shortest paths.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::Path;

use super::source::{module_path, parse};

/// A module's name: its path joined with `::`, or `crate` for the root of
/// csi-agent's own crate. A module of one of the workspace's crates is
/// named from that crate's directory under `crates/`: `crates/hcl/src/lib.rs`
/// is `hcl`, `crates/hcl/src/ast.rs` is `hcl::ast`, so the modules of every
/// crate and of `src/` are nodes of one graph and never share a name.
fn name(krate: Option<&str>, path: &[String]) -> String {
    match (krate, path.is_empty()) {
        (None, true) => "crate".to_string(),
        (None, false) => path.join("::"),
        (Some(krate), true) => krate.to_string(),
        (Some(krate), false) => format!("{krate}::{}", path.join("::")),
    }
}

pub(super) struct SourceFile {
    /// The path from the repository's root: `src/volume/model.rs`,
    /// `crates/hcl/src/ast.rs`.
    pub(super) file: String,
    pub(super) module: String,
    /// The lines before the file's test module (all of them without one).
    pub(super) code_lines: usize,
}

#[derive(Debug, Clone)]
pub(super) struct Edge {
    pub(super) file: String,
    pub(super) line: usize,
    pub(super) from: String,
    pub(super) to: String,
    /// The whole path the reference names, from the crate root.
    pub(super) path: Vec<String>,
}

impl Edge {
    pub(super) fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

pub(super) struct Graph {
    pub(super) files: Vec<SourceFile>,
    pub(super) edges: Vec<Edge>,
}

fn rust_files(dir: &Path, relative: &str, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()))
        .map(|entry| entry.unwrap())
        .collect();
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let relative = if relative.is_empty() {
            name.clone()
        } else {
            format!("{relative}/{name}")
        };
        if entry.file_type().unwrap().is_dir() {
            rust_files(&entry.path(), &relative, out);
        } else if name.ends_with(".rs") {
            out.push(relative);
        }
    }
}

impl Graph {
    /// The graph of csi-agent's own files (`src/`) and of every crate of
    /// the workspace (`crates/NAME/src/`), each crate's modules named
    /// after it. A reference from one crate to another (`json::Value`) is
    /// not an edge of this graph: Cargo's dependencies are its edges.
    pub(super) fn read_workspace(root: &Path) -> Graph {
        let mut graph = Graph::read(&root.join("src"), "src", None);
        for krate in super::crates::members(root) {
            let src = format!("crates/{krate}/src");
            let theirs = Graph::read(&root.join(&src), &src, Some(&krate));
            graph.files.extend(theirs.files);
            graph.edges.extend(theirs.edges);
        }
        graph
    }

    /// The graph of the `.rs` files under `src`, shown as under `shown`
    /// (their path from the repository's root), the modules of the crate
    /// `krate` if it is one of the workspace's.
    fn read(src: &Path, shown: &str, krate: Option<&str>) -> Graph {
        let mut relatives = Vec::new();
        rust_files(src, "", &mut relatives);
        let mut parsed = Vec::new();
        let mut test_modules = Vec::new();
        for relative in relatives {
            let text = std::fs::read_to_string(src.join(&relative)).unwrap();
            let module = module_path(&relative);
            let is_main = krate.is_none() && relative == "main.rs";
            // `main.rs` is the binary's root, which reaches the library as
            // `csi_agent::`.
            let scope = if is_main { Vec::new() } else { module.clone() };
            let file = parse(&text, &scope);
            test_modules.extend(
                file.test_modules
                    .iter()
                    .map(|child| [module.clone(), child.clone()].concat()),
            );
            let total = text.lines().count();
            parsed.push((relative, module, file, total));
        }
        parsed.retain(|(_, module, _, _)| {
            !test_modules
                .iter()
                .any(|test| module.starts_with(test.as_slice()))
        });
        let modules: BTreeSet<Vec<String>> = parsed
            .iter()
            .filter(|(relative, ..)| krate.is_some() || relative != "main.rs")
            .map(|(_, module, ..)| module.clone())
            .collect();
        let mut graph = Graph {
            files: Vec::new(),
            edges: Vec::new(),
        };
        for (relative, module, file, total) in parsed {
            let file_name = format!("{shown}/{relative}");
            let from = name(krate, &module);
            for reference in file.refs {
                let target = (0..=reference.path.len())
                    .rev()
                    .map(|len| &reference.path[..len])
                    .find(|prefix| modules.contains(*prefix))
                    .unwrap_or_default();
                let to = name(krate, target);
                if to != from {
                    graph.edges.push(Edge {
                        file: file_name.clone(),
                        line: reference.line,
                        from: from.clone(),
                        to,
                        path: reference.path,
                    });
                }
            }
            graph.files.push(SourceFile {
                file: file_name,
                module: from,
                code_lines: file.test_cut.map_or(total, |line| line - 1),
            });
        }
        graph
    }
}

/// The strongly connected components of a graph with more than one node
/// (Tarjan's algorithm).
pub(super) fn circles(adjacent: &BTreeMap<&str, BTreeSet<&str>>) -> Vec<BTreeSet<String>> {
    struct Tarjan<'a> {
        adjacent: &'a BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, node: &'a str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for &next in self.adjacent.get(node).into_iter().flatten() {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = BTreeSet::new();
                loop {
                    let member = self.stack.pop().unwrap();
                    self.on_stack.remove(member);
                    component.insert(member.to_string());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.out.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        adjacent,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &node in adjacent.keys() {
        if !tarjan.index.contains_key(node) {
            tarjan.visit(node);
        }
    }
    tarjan.out
}

/// The shortest path from `from` to `to`, both included.
pub(super) fn shortest_path<'a>(
    adjacent: &BTreeMap<&'a str, BTreeSet<&'a str>>,
    from: &'a str,
    to: &'a str,
) -> Vec<&'a str> {
    let mut previous: HashMap<&str, &str> = HashMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(node) = queue.pop_front() {
        if node == to {
            let mut path = vec![to];
            while let Some(&before) = previous.get(path.last().unwrap()) {
                path.push(before);
                if before == from {
                    break;
                }
            }
            path.reverse();
            return path;
        }
        for &next in adjacent.get(node).into_iter().flatten() {
            if next != from && !previous.contains_key(next) {
                previous.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    Vec::new()
}
