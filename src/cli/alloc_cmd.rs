//! `csi-agent alloc status|signal|restart|stop` and `job inspect`: one
//! alloc looked at, or handled, through the agent's control API, as
//! Nomad's commands of the same names do. An alloc is named by its ID or a
//! unique prefix of it.

use super::args::{self, switch, value, Flag, UsageError};
use super::json::from_message;
use super::plugin_cmd::columns;
use super::{out, CliError};
use crate::api::client::{resolve_address, AgentClient};
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::units::format_timestamp;
use json::Value as Json;

const STATUS_FLAGS: &[Flag] = &[switch("json"), switch("stats"), value("address")];
const SIGNAL_FLAGS: &[Flag] = &[value("s"), value("address")];
const PLAIN_FLAGS: &[Flag] = &[value("address")];
const INSPECT_FLAGS: &[Flag] = &[switch("json"), value("address")];

fn connect(args: &args::Args) -> Result<AgentClient, CliError> {
    Ok(AgentClient::connect(&resolve_address(
        args.value("address"),
    )?)?)
}

/// `alloc status [-json] [-stats] ALLOC`.
pub fn status(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(STATUS_FLAGS, argv)?;
    args.at_most(1)?;
    let prefix = args.positional(0, "the ALLOC ID")?;
    let client = connect(&args)?;
    let jobs = client.job_status("")?.jobs;
    let (job, alloc) = find(&jobs, prefix)?;
    // The usage of a task that is not running says so; a failed call
    // (the alloc gone meanwhile, the agent's sessions all busy) leaves the
    // figures out and says why.
    // `-json` alone prints the alloc only, and needs no sample.
    let stats = if args.switch("json") && !args.switch("stats") {
        Err(String::new())
    } else {
        client.alloc_stats(&alloc.id).map_err(|err| err.to_string())
    };
    if args.switch("json") {
        let mut json = from_message(alloc);
        if args.switch("stats") {
            let stats = match &stats {
                Ok(stats) => from_message(stats),
                Err(why) => Json::object([("error", Json::from(why.as_str()))]),
            };
            json = Json::object([("alloc", json), ("stats", stats)]);
        }
        out::outln!("{}", json.pretty());
    } else {
        out::out!("{}", details(job, alloc, &stats, args.switch("stats")));
    }
    Ok(())
}

/// The alloc whose ID starts with `prefix`, and its job: Nomad's prefix
/// matching, refused when it names none or several.
fn find<'a>(
    jobs: &'a [api::JobStatus],
    prefix: &str,
) -> Result<(&'a api::JobStatus, &'a api::AllocStatus), CliError> {
    let matches: Vec<(&api::JobStatus, &api::AllocStatus)> = jobs
        .iter()
        .flat_map(|j| j.allocs.iter().map(move |a| (j, a)))
        .filter(|(_, a)| !prefix.is_empty() && a.id.starts_with(prefix))
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(CliError::Failed(format!("no alloc {prefix:?}"))),
        several => {
            let ids: Vec<&str> = several.iter().map(|(_, a)| a.id.as_str()).collect();
            Err(CliError::Failed(format!(
                "alloc ID prefix {prefix:?} is ambiguous: {}",
                ids.join(", ")
            )))
        }
    }
}

fn time(unix_ms: i64) -> String {
    format_timestamp(from_unix_ms(unix_ms))
}

/// Nomad's `alloc status` layout: the alloc, its ports, then each task
/// with its resources (with `-stats`, the detailed figures), volumes and
/// recent events.
fn details(
    job: &api::JobStatus,
    alloc: &api::AllocStatus,
    stats: &Result<api::AllocStatsResponse, String>,
    verbose: bool,
) -> String {
    let modified = alloc
        .tasks
        .iter()
        .flat_map(|t| t.events.iter().map(|e| e.unix_ms))
        .max()
        .unwrap_or(alloc.created_unix_ms);
    let mut rows = vec![
        ("ID", alloc.id.clone()),
        (
            "Name",
            format!("{}.{}[{}]", job.name, alloc.group, alloc.index),
        ),
        ("Job ID", job.name.clone()),
        ("Job Type", job.type_.clone()),
        ("Task Group", alloc.group.clone()),
        ("Client Status", alloc.status.clone()),
    ];
    rows.push((
        "Client Description",
        if alloc.message.is_empty() {
            "-".to_string()
        } else {
            alloc.message.clone()
        },
    ));
    rows.push(("Created", time(alloc.created_unix_ms)));
    rows.push(("Modified", time(modified)));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value) in rows {
        out.push_str(&format!("{key:<width$} = {value}\n"));
    }
    if !alloc.ports.is_empty() {
        out.push_str("\nAllocation Addresses:\n");
        let mut rows = vec![vec!["Label".to_string(), "Host Port".to_string()]];
        for p in &alloc.ports {
            rows.push(vec![p.label.clone(), p.host.to_string()]);
        }
        out.push_str(&columns(&rows));
    }
    if !alloc.volumes.is_empty() {
        out.push_str("\nVolumes:\n");
        let mut rows = vec![["Alias", "Volume", "Read Only", "State", "Message"]
            .map(str::to_string)
            .to_vec()];
        for v in &alloc.volumes {
            rows.push(vec![
                v.alias.clone(),
                v.volume_id.clone(),
                v.read_only.to_string(),
                v.state.clone(),
                v.message.clone(),
            ]);
        }
        out.push_str(&columns(&rows));
    }
    for task in &alloc.tasks {
        let usage = match stats {
            Ok(stats) => Ok(stats.tasks.iter().find(|u| u.task == task.name)),
            Err(why) => Err(why.as_str()),
        };
        out.push_str(&task_section(task, &alloc.ports, usage, verbose));
    }
    out
}

fn task_section(
    task: &api::TaskStatus,
    ports: &[api::AllocPort],
    usage: Result<Option<&api::TaskUsage>, &str>,
    verbose: bool,
) -> String {
    let mut out = format!("\nTask {:?} is {:?}", task.name, task.state);
    if !task.lifecycle.is_empty() {
        out.push_str(&format!(" ({})", task.lifecycle));
    }
    out.push('\n');
    out.push_str(&super::alloc_usage::resources(task, ports, usage, verbose));
    out.push('\n');
    let mut rows = vec![["Restarts", "PID", "Plugin"].map(str::to_string).to_vec()];
    rows.push(vec![
        task.restarts.to_string(),
        if task.pid == 0 {
            "-".to_string()
        } else {
            task.pid.to_string()
        },
        if task.plugin_id.is_empty() {
            "-".to_string()
        } else {
            task.plugin_id.clone()
        },
    ]);
    out.push_str(&columns(&rows));
    out.push_str("\nRecent Events:\n");
    let mut rows = vec![["Time", "Type", "Description"].map(str::to_string).to_vec()];
    // Newest first, as Nomad's table.
    for e in task.events.iter().rev() {
        rows.push(vec![
            time(e.unix_ms),
            capitalized(&e.kind),
            e.message.clone(),
        ]);
    }
    out.push_str(&columns(&rows));
    out
}

fn capitalized(kind: &str) -> String {
    let mut chars = kind.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

/// `alloc signal [-s SIGNAL] ALLOC [TASK]`, `alloc restart ALLOC [TASK]`,
/// `alloc stop ALLOC`.
pub fn control(verb: &str, argv: &[String]) -> Result<(), CliError> {
    let flags = if verb == "signal" {
        SIGNAL_FLAGS
    } else {
        PLAIN_FLAGS
    };
    let args = args::parse(flags, argv)?;
    args.at_most(if verb == "stop" { 1 } else { 2 })?;
    let alloc = args.positional(0, "the ALLOC ID")?;
    let task = args.positional.get(1).map(String::as_str).unwrap_or("");
    let signal = args.value("s").unwrap_or("");
    let resp = connect(&args)?.alloc_control(alloc, task, verb, signal)?;
    match verb {
        "stop" if resp.replacement.is_empty() => {
            out::outln!("Alloc {}: stopping", resp.alloc_id)
        }
        "stop" => out::outln!(
            "Alloc {}: stopping; alloc {} replaces it",
            resp.alloc_id,
            resp.replacement
        ),
        "signal" => out::outln!(
            "Alloc {}: sent {} to task{} {}",
            resp.alloc_id,
            if signal.is_empty() { "SIGKILL" } else { signal },
            if resp.tasks.len() == 1 { "" } else { "s" },
            quoted(&resp.tasks)
        ),
        _ => out::outln!(
            "Alloc {}: restarting task{} {}",
            resp.alloc_id,
            if resp.tasks.len() == 1 { "" } else { "s" },
            quoted(&resp.tasks)
        ),
    }
    Ok(())
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `job inspect [-json] NAME`: the job file as it was submitted, or with
/// `-json` the agent's record of it (name, file, text, type, groups).
pub fn inspect(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(INSPECT_FLAGS, argv)?;
    args.at_most(1)?;
    let name = args.positional(0, "the job NAME")?;
    let resp = connect(&args)?.job_inspect(name)?;
    if args.switch("json") {
        out::outln!("{}", from_message(&resp).pretty());
    } else {
        out::out!("{}", resp.hcl);
        if !resp.hcl.ends_with('\n') {
            out::outln!();
        }
    }
    Ok(())
}

/// Refuses an `alloc` verb this module does not know.
pub fn unknown(verb: &str) -> CliError {
    UsageError::new(format!("unknown alloc command {verb:?}")).into()
}
