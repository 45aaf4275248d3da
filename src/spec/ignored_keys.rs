//! The keys of Nomad's job files that csi-agent accepts with a warning and
//! does not act on, checked against docs/jobs.md's table of them: each
//! list of the decoder (`*_IGNORED`) is the table's rows of its "where",
//! so that a key is neither ignored without the table saying why it is
//! safe nor listed once it is acted on.

use std::collections::{BTreeMap, BTreeSet};

use super::{docker, group_volume, job, network, restart, task_keys as task, template};

/// Each "where" of the table, with the decoder's list for it.
fn lists() -> BTreeMap<&'static str, &'static [&'static str]> {
    BTreeMap::from([
        ("file (JSON)", job::FILE_IGNORED),
        ("job", job::JOB_IGNORED),
        ("group", job::GROUP_IGNORED),
        ("group restart", restart::RESTART_IGNORED),
        ("group volume", group_volume::VOLUME_IGNORED),
        ("task", task::TASK_IGNORED),
        ("resources", task::RESOURCES_IGNORED),
        ("volume_mount", task::VOLUME_MOUNT_IGNORED),
        ("exec config", task::EXEC_CONFIG_IGNORED),
        ("raw_exec config", task::RAW_EXEC_CONFIG_IGNORED),
        ("docker config", docker::DOCKER_CONFIG_IGNORED),
        (
            "docker mount volume_options",
            docker::VOLUME_OPTIONS_IGNORED,
        ),
        ("template", template::TEMPLATE_IGNORED),
        ("network", network::NETWORK_IGNORED),
        ("network port", network::PORT_IGNORED),
    ])
}

/// The table's rows: `| where | `key` | what Nomad does | why |`.
fn documented(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let section = doc
        .split("## Keys csi-agent ignores, and keys it refuses")
        .nth(1)
        .expect("docs/jobs.md has the section of ignored keys");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(place), Some(key)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Some(key) = key.strip_prefix('`').and_then(|k| k.strip_suffix('`')) else {
            continue;
        };
        let why = cells.get(4).copied().unwrap_or_default();
        assert!(!why.is_empty(), "{place} {key}: the table must say why");
        out.entry(place.to_string())
            .or_default()
            .insert(key.to_string());
    }
    out
}

#[test]
fn the_docs_table_lists_exactly_the_keys_the_decoder_ignores() {
    let doc = include_str!("../../docs/jobs.md");
    let table = documented(doc);
    let lists = lists();
    for (place, keys) in &lists {
        let code: BTreeSet<String> = keys.iter().map(|k| k.to_string()).collect();
        let docs = table.get(*place).cloned().unwrap_or_default();
        assert_eq!(
            docs, code,
            "docs/jobs.md's table and the decoder disagree on the keys ignored in {place}"
        );
    }
    for place in table.keys() {
        assert!(
            lists.contains_key(place.as_str()),
            "the table names {place:?}, which no list of the decoder is"
        );
    }
}
