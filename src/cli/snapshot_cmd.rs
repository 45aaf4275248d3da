//! `csi-agent volume snapshot create|delete|list`: Nomad's snapshot
//! commands, through the agent, which calls the plugin's controller.
//!
//! `create` names the snapshot after the volume and the minute when no
//! NAME is given (`data-20261122-1604`), so a command retried within that
//! minute asks for the same snapshot again, which the plugin answers as
//! done (CSI snapshot names are idempotent). Secret values given with
//! `-secret` go to the agent only; nothing here prints them.

use super::out;
use std::time::SystemTime;

use super::args::{self, repeated, switch, value, Args, Flag, UsageError};
use super::json::from_message;
use super::plugin_cmd::columns;
use super::CliError;
use crate::api::client::{resolve_address, AgentClient};
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::units::{format_size, format_timestamp};

pub const USAGE: &str = "\
usage: csi-agent volume snapshot COMMAND [-address ADDR] ARGS

  create [-parameter k=v]... [-secret k=v]... [-json] VOLUME [NAME]
                          snapshot a registered volume (CreateSnapshot); NAME
                          defaults to VOLUME-YYYYMMDD-HHMM (UTC), so a retry
                          within the minute is the same snapshot
  delete [-secret k=v]... PLUGIN SNAPSHOT
                          delete a snapshot (DeleteSnapshot)
  list -plugin ID [-secret k=v]... [-json]
                          every snapshot of a plugin (ListSnapshots, all pages)";

const CREATE_FLAGS: &[Flag] = &[
    repeated("parameter"),
    repeated("secret"),
    switch("json"),
    value("address"),
];
const DELETE_FLAGS: &[Flag] = &[repeated("secret"), value("address")];
const LIST_FLAGS: &[Flag] = &[
    value("plugin"),
    repeated("secret"),
    switch("json"),
    value("address"),
];

const HEADER: &str = "Snapshot ID, Volume ID, External ID, Size, Creation Time, Ready";

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let Some((verb, rest)) = argv.split_first() else {
        return Err(UsageError::new("missing the snapshot command (create, delete, list)").into());
    };
    match verb.as_str() {
        "create" => create(rest),
        "delete" => delete(rest),
        "list" => list(rest),
        other => Err(UsageError::new(format!("unknown snapshot command {other:?}")).into()),
    }
}

fn connect(args: &Args) -> Result<AgentClient, CliError> {
    let socket = resolve_address(args.value("address"))?;
    Ok(AgentClient::connect(&socket)?)
}

fn map(args: &Args, name: &str) -> Result<std::collections::HashMap<String, String>, UsageError> {
    Ok(args.pairs(name)?.into_iter().collect())
}

/// The default snapshot name: the volume and the minute, in UTC.
pub fn default_name(volume: &str, now: SystemTime) -> String {
    let stamp = format_timestamp(now); // 2026-11-22T16:04:05.123Z
    let digits: String = stamp
        .chars()
        .take(16)
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    let (date, time) = digits.split_once('T').unwrap_or((&digits, ""));
    format!("{volume}-{date}-{time}")
}

fn create(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(CREATE_FLAGS, argv)?;
    args.at_most(2)?;
    let volume = args.positional(0, "the VOLUME")?;
    let name = match args.positional.get(1) {
        Some(name) => name.clone(),
        None => default_name(volume, SystemTime::now()),
    };
    let req = api::SnapshotCreateRequest {
        volume_id: volume.to_string(),
        name: name.clone(),
        parameters: map(&args, "parameter")?,
        secrets: map(&args, "secret")?,
        ..Default::default()
    };
    let resp = connect(&args)?.snapshot_create(&req)?;
    if args.switch("json") {
        out::outln!("{}", from_message(&resp).pretty());
        return Ok(());
    }
    let snapshot = resp.snapshot.get_or_default();
    out::outln!(
        "Snapshot {:?} of volume {volume:?} created: {}",
        name,
        snapshot.id
    );
    out::out!("{}", table(std::slice::from_ref(snapshot)));
    Ok(())
}

fn delete(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(DELETE_FLAGS, argv)?;
    args.at_most(2)?;
    let plugin = args.positional(0, "the PLUGIN")?;
    let snapshot = args.positional(1, "the SNAPSHOT ID")?;
    let req = api::SnapshotDeleteRequest {
        plugin_id: plugin.to_string(),
        snapshot_id: snapshot.to_string(),
        secrets: map(&args, "secret")?,
        ..Default::default()
    };
    connect(&args)?.snapshot_delete(&req)?;
    out::outln!("Snapshot {snapshot:?} deleted");
    Ok(())
}

fn list(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(LIST_FLAGS, argv)?;
    args.at_most(0)?;
    let plugin = args.required("plugin")?;
    let req = api::SnapshotListRequest {
        plugin_id: plugin.to_string(),
        secrets: map(&args, "secret")?,
        ..Default::default()
    };
    let resp = connect(&args)?.snapshot_list(&req)?;
    if args.switch("json") {
        out::outln!("{}", from_message(&resp).pretty());
    } else {
        out::out!("{}", table(&resp.snapshots));
    }
    Ok(())
}

fn or_none(text: &str) -> String {
    if text.is_empty() {
        "<none>".to_string()
    } else {
        text.to_string()
    }
}

/// Snapshots in Nomad's columns.
fn table(snapshots: &[api::Snapshot]) -> String {
    if snapshots.is_empty() {
        return "No snapshots\n".to_string();
    }
    let mut rows = vec![HEADER.split(", ").map(str::to_string).collect::<Vec<_>>()];
    for s in snapshots {
        rows.push(vec![
            s.id.clone(),
            or_none(&s.volume_id),
            s.source_volume_id.clone(),
            if s.size_bytes > 0 {
                format_size(s.size_bytes as u64)
            } else {
                "<unknown>".to_string()
            },
            if s.created_unix_ms > 0 {
                format_timestamp(from_unix_ms(s.created_unix_ms))
            } else {
                "<unknown>".to_string()
            },
            s.ready.to_string(),
        ]);
    }
    columns(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn the_default_name_is_the_volume_and_the_minute_in_utc() {
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000); // 2023-11-14T22:13:20Z
        assert_eq!(default_name("data", at), "data-20231114-2213");
        assert_eq!(
            default_name("data", at + Duration::from_secs(30)),
            "data-20231114-2213",
            "a retry within the minute names the same snapshot"
        );
        assert_eq!(
            default_name("data", at + Duration::from_secs(60)),
            "data-20231114-2214"
        );
    }

    #[test]
    fn the_table_has_nomad_s_columns_and_unknowns_say_so() {
        let text = table(&[api::Snapshot {
            id: "snap-1".into(),
            source_volume_id: "ext-1".into(),
            volume_id: "data".into(),
            size_bytes: 0,
            created_unix_ms: 1_700_000_000_000,
            ready: true,
            ..Default::default()
        }]);
        let mut lines = text.lines();
        assert!(lines
            .next()
            .unwrap()
            .starts_with("Snapshot ID  Volume ID  External ID  Size"));
        let row = lines.next().unwrap();
        assert!(row.starts_with("snap-1"), "{row}");
        assert!(
            row.contains("<unknown>") && row.contains("2023-11-14T22:13:20.000Z"),
            "{row}"
        );
        assert!(row.ends_with("true"), "{row}");
        assert_eq!(table(&[]), "No snapshots\n");
    }
}
