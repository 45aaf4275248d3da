//! The workspace's crates held to the crate map of `docs/ARCHITECTURE.md`:
//! each crate of `crates/` depends on the crates of ours that the map
//! says and on no others, none depends on csi-agent, and each is named
//! and depended on in the one way the map's table shows (package
//! `csi-agent-NAME` in `crates/NAME`, depended on as `NAME`).
//!
//! The dependencies are read from each `Cargo.toml`, one line per
//! dependency as the workspace writes them (`name = { package = "...",
//! path = "..." }`); a dependency with a `path` is one of ours, any other
//! comes from a registry and is not part of the map.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What csi-agent's own crate (`src/`) is called in the crate map.
const AGENT: &str = "csi-agent";

/// The crates under `root`'s `crates/`, by directory name.
pub(super) fn members(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap_or_else(|err| panic!("cannot read crates/: {err}"))
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.path().join("Cargo.toml").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A dependency with a `path`: one of the workspace's own.
#[derive(Debug)]
struct PathDependency {
    /// The name the code uses (the key in `Cargo.toml`).
    name: String,
    /// The package it renames, if it does.
    package: Option<String>,
    /// Where it is, from the manifest's directory.
    path: String,
}

struct Manifest {
    package: String,
    path_dependencies: Vec<PathDependency>,
}

/// The value of `key = "..."` in `text` (a line or an inline table).
fn string_value(text: &str, key: &str) -> Option<String> {
    let mut rest = text;
    while let Some(at) = rest.find(key) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + key.len()..].trim_start();
        if before.map_or(true, |c| !c.is_alphanumeric() && c != '_' && c != '-') {
            if let Some(value) = after.strip_prefix('=') {
                let value = value.trim_start().strip_prefix('"')?;
                return Some(value[..value.find('"')?].to_string());
            }
        }
        rest = &rest[at + key.len()..];
    }
    None
}

fn read_manifest(dir: &Path) -> Manifest {
    let path = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    let mut section = String::new();
    let mut package = None;
    let mut path_dependencies = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            section = name.trim_end_matches(']').to_string();
            continue;
        }
        if section == "package" && package.is_none() {
            package = string_value(line, "name");
        }
        if section.ends_with("dependencies") {
            let Some((name, _)) = line.split_once('=') else {
                continue;
            };
            if let Some(path) = string_value(line, "path") {
                path_dependencies.push(PathDependency {
                    name: name.trim().to_string(),
                    package: string_value(line, "package"),
                    path,
                });
            }
        }
    }
    Manifest {
        package: package.unwrap_or_else(|| panic!("{} names no package", path.display())),
        path_dependencies,
    }
}

/// The crate map: each crate's name and the crates of ours it uses, read
/// from the table under `## Crates` in `docs/ARCHITECTURE.md`, whose
/// first column is a crate's name and third the names it uses (or
/// "nothing"), each in backticks.
fn crate_map(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let section = text
        .split("\n## Crates\n")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a section `## Crates`");
    let section = section.split("\n## ").next().unwrap();
    let names = |cell: &str| -> BTreeSet<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut map = BTreeMap::new();
    for row in section.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = names(cells[1])
            .into_iter()
            .next()
            .expect("a crate's name in backticks");
        map.insert(name, names(cells[3]));
    }
    assert!(
        map.contains_key(AGENT),
        "the crate map has no row for {AGENT}"
    );
    map
}

/// Every crate's path dependencies by crate name: `csi-agent` for `src/`.
fn dependencies(root: &Path) -> BTreeMap<String, (Manifest, BTreeSet<String>)> {
    let mut found = BTreeMap::new();
    let mut add = |name: String, dir: &Path| {
        let manifest = read_manifest(dir);
        let uses = manifest
            .path_dependencies
            .iter()
            .map(|dep| dep.name.clone())
            .collect();
        found.insert(name, (manifest, uses));
    };
    add(AGENT.to_string(), root);
    for name in members(root) {
        add(name.clone(), &root.join("crates").join(&name));
    }
    found
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn crates_depend_on_each_other_as_the_crate_map_draws() {
    let map = crate_map(root());
    let found: BTreeMap<String, BTreeSet<String>> = dependencies(root())
        .into_iter()
        .map(|(name, (_, uses))| (name, uses))
        .collect();
    let mut report = String::new();
    for (name, uses) in &found {
        match map.get(name) {
            None => report.push_str(&format!("  {name}: not in the crate map\n")),
            Some(drawn) if drawn != uses => report.push_str(&format!(
                "  {name} uses {uses:?}, the crate map draws {drawn:?}\n"
            )),
            Some(_) => {}
        }
    }
    for name in map.keys().filter(|name| !found.contains_key(*name)) {
        report.push_str(&format!("  {name}: in the crate map, but no such crate\n"));
    }
    assert!(
        report.is_empty(),
        "the crates' dependencies differ from docs/ARCHITECTURE.md's crate map:\n{report}"
    );
}

#[test]
fn no_crate_depends_on_csi_agent() {
    let agent = root().canonicalize().unwrap();
    for name in members(root()) {
        let dir = root().join("crates").join(&name);
        for dep in read_manifest(&dir).path_dependencies {
            let target = dir.join(&dep.path).canonicalize().unwrap();
            assert!(
                target != agent && dep.package.as_deref() != Some(AGENT) && dep.name != AGENT,
                "crates/{name} depends on csi-agent ({dep:?}): a crate knows nothing of CSI"
            );
        }
    }
}

#[test]
fn every_crate_is_named_and_depended_on_one_way() {
    for (name, (manifest, _)) in dependencies(root()) {
        if name != AGENT {
            assert_eq!(
                manifest.package,
                format!("csi-agent-{name}"),
                "crates/{name}"
            );
            let readme = root().join("crates").join(&name).join("README.md");
            assert!(readme.is_file(), "crates/{name} has no README.md");
        }
        // From the root a crate is `crates/NAME`, from a crate `../NAME`.
        let from = if name == AGENT { "crates" } else { ".." };
        for dep in &manifest.path_dependencies {
            let package = format!("csi-agent-{}", dep.name);
            let path = format!("{from}/{}", dep.name);
            assert_eq!(
                (dep.package.as_deref(), dep.path.as_str()),
                (Some(package.as_str()), path.as_str()),
                "{name}'s dependency {}",
                dep.name
            );
        }
    }
}
