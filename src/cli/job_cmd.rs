//! `csi-agent job ...` and `csi-agent alloc logs`: run, stop and show jobs
//! through the agent's control API.
//!
//! The job file travels to the agent as text with its name and is decoded
//! there, by the same code as `csi-agent validate` (in HCL's JSON syntax for
//! a name ending in `.json`), so errors name the file's lines.

use super::out;
use std::io;

use super::alloc_cmd;
use super::args::{self, switch, value, Flag, UsageError};
use super::job_inputs::{self, VAR_FLAGS};
use super::job_watch;
use super::json::from_message;
use super::plugin_cmd::columns;
use super::validate;
use super::CliError;
use crate::api::client::{resolve_address, AgentClient};
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::units::format_timestamp;

pub const USAGE: &str = "\
usage: csi-agent job COMMAND [-address ADDR] ARGS

  run [-detach] [-verbose] [-timeout DURATION] [-check-index INDEX]
      [-var NAME=VALUE]... [-var-file FILE]... [-hcl2-strict=false] FILE
                          validate a job file and start its allocations
                          (one per group instance); prints their IDs, then
                          watches them until every one runs (a plugin
                          task: until its plugin is healthy) or completed
                          (exit 0), one failed (exit 1), or -timeout
                          (default 5m) ran out (exit 1, with what is still
                          pending); -detach returns at once; -verbose
                          shows full IDs and every event; FILE
                          is read as JSON when it ends in .json, from
                          stdin when it is -; -var, -var-file and
                          NOMAD_VAR_<NAME> in the environment give its
                          variables values (later ones win: env, then
                          var files, then -var); a value for a variable
                          the file does not declare is an error (a
                          warning with -hcl2-strict=false), as in Nomad;
                          -check-index runs it only if the job's modify
                          index (job plan's) is still INDEX (0: only if
                          there is no such job)
  plan [-diff=BOOL] [-verbose] [-json] [-var ...] [-var-file ...] FILE
                          what job run of FILE would change, nothing done:
                          the diff, the dry run, the job modify index; see
                          `csi-agent job plan -h`
  stop [-purge] NAME      stop every allocation of a job; -purge also forgets
                          the job once they are stopped
  status [-json] [NAME]   without NAME, a table of jobs; with NAME, a
                          summary of its allocations by status, then its
                          allocations, tasks and recent task events; of a
                          periodic or parameterized job, its next launch
                          and its children
  periodic force NAME     launch a periodic job's child now
  dispatch [-meta KEY=VALUE]... [-id-prefix-template PREFIX] NAME [FILE]
                          launch a parameterized job's child with meta and
                          the payload in FILE (stdin for -; at most 16 KiB)
  inspect [-json] NAME    the job file as it was submitted; -json: the
                          agent's record of it (name, file, text, type,
                          groups, job modify index)

  -address ADDR           the agent's control socket (default
                          $CSI_AGENT_ADDR, else /var/lib/csi-agent/control.sock)";

pub const ALLOC_USAGE: &str = "\
usage: csi-agent alloc COMMAND [-address ADDR] ARGS

  logs [-stderr] ALLOC TASK
                          a task's stdout (or its stderr with -stderr)
  status [-json] [-stats] ALLOC
                          the alloc, its ports and volumes, and each task's
                          state, resources used and asked for (-stats: in
                          detail) and recent events
  signal [-s SIGNAL] ALLOC [TASK]
                          send SIGNAL (default SIGKILL) to the task, or to
                          every running task
  restart ALLOC [TASK]    stop the task (or every running task) and start
                          it again at once, in place, outside its restart
                          policy
  stop ALLOC              stop the alloc; a service or system job's is
                          replaced by a new alloc of the same group
  exec [-task TASK] [-i=BOOL] [-t=BOOL] ALLOC COMMAND [ARGS...]
                          run a command in a running task (a TTY with -t);
                          see `csi-agent alloc exec -h`
  fs [-stat] [-H] [-json] [-f] [-tail [-n LINES|-c BYTES]] ALLOC [PATH]
                          list, print, follow or stat what is beneath the
                          alloc dir; see `csi-agent alloc fs -h`

  ALLOC may be a unique prefix of an allocation ID.";

const RUN_FLAGS: &[Flag] = &[
    value("address"),
    VAR_FLAGS[0],
    VAR_FLAGS[1],
    VAR_FLAGS[2],
    switch("detach"),
    switch("verbose"),
    value("timeout"),
    value("check-index"),
];
const STOP_FLAGS: &[Flag] = &[switch("purge"), value("address")];
const STATUS_FLAGS: &[Flag] = &[switch("json"), value("address")];
const LOGS_FLAGS: &[Flag] = &[switch("stderr"), value("address")];

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let Some((verb, rest)) = argv.split_first() else {
        return Err(
            UsageError::new("missing the job command (run, plan, stop, status, inspect)").into(),
        );
    };
    match verb.as_str() {
        "run" => run_job(rest),
        "stop" => stop(rest),
        "status" => status(rest),
        "periodic" => super::job_children::periodic(rest),
        "dispatch" => super::job_children::dispatch(rest),
        "inspect" => alloc_cmd::inspect(rest),
        "plan" => super::job_plan::run(rest),
        other => Err(UsageError::new(format!("unknown job command {other:?}")).into()),
    }
}

pub fn alloc(argv: &[String]) -> Result<(), CliError> {
    let Some((verb, rest)) = argv.split_first() else {
        return Err(UsageError::new(
            "missing the alloc command (logs, status, signal, restart, stop, exec, fs)",
        )
        .into());
    };
    match verb.as_str() {
        "logs" => {}
        "status" => return alloc_cmd::status(rest),
        "signal" | "restart" | "stop" => return alloc_cmd::control(verb, rest),
        "exec" => return super::alloc_exec_cmd::run(rest),
        "fs" => return super::alloc_fs_cmd::run(rest),
        other => return Err(alloc_cmd::unknown(other)),
    }
    let args = args::parse(LOGS_FLAGS, rest)?;
    args.at_most(2)?;
    let alloc = args.positional(0, "the ALLOC ID")?;
    let task = args.positional(1, "the TASK name")?;
    let client = AgentClient::connect(&resolve_address(args.value("address"))?)?;
    let resp = client.alloc_logs(alloc, task, args.switch("stderr"))?;
    let mut file = match std::fs::File::open(&resp.path) {
        Ok(file) => file,
        // The task has not written anything yet.
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => {
            return Err(CliError::Io {
                what: format!("failed to read the log {}", resp.path),
                err,
            })
        }
    };
    out::copy(&mut file).map_err(|err| CliError::Io {
        what: format!("failed to print the log {}", resp.path),
        err,
    })
}

fn connect(args: &args::Args) -> Result<AgentClient, CliError> {
    Ok(AgentClient::connect(&resolve_address(
        args.value("address"),
    )?)?)
}

fn run_job(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(RUN_FLAGS, argv)?;
    args.at_most(1)?;
    let path = args.positional(0, "the job FILE")?;
    let (file, hcl) = job_inputs::read_source(path, "job file")?;
    let mut inputs = job_inputs::gather(&args, path)?;
    validate::refuse_if_any(&job_inputs::undeclared(&inputs, &file, &hcl))?;
    validate::refuse_if_any(&job_inputs::read_job_files(&mut inputs, &file, &hcl))?;
    let watch = job_watch::options(&args)?;
    let check_index = match args.value("check-index") {
        None => None,
        Some(text) => Some(text.parse::<u64>().map_err(|_| {
            UsageError::new(format!(
                "-check-index takes a job modify index (a whole number), not {text:?}"
            ))
        })?),
    };
    let client = connect(&args)?;
    let since = match &watch {
        Some(_) => job_watch::start_index(&client)?,
        None => 0,
    };
    let resp = client.job_run_checked(&file, &hcl, job_inputs::to_api(&inputs), check_index)?;
    for warning in &resp.warnings {
        eprintln!("{warning}");
    }
    if resp.unchanged {
        out::outln!("Job {:?} is already running with this spec", resp.job);
    } else {
        out::outln!("Job {:?} submitted", resp.job);
    }
    for id in &resp.alloc_ids {
        out::outln!("  alloc {id}");
    }
    if !resp.unplaced.is_empty() {
        // Nothing to watch come up where the node filtered the job.
        out::outln!("Failed to place all allocations:");
        out::out!("{}", placement_failures(&resp.unplaced));
        return Err(CliError::NotPlaced {
            job: resp.job.clone(),
            groups: resp.unplaced.len(),
        });
    }
    let Some(options) = watch else {
        return Ok(());
    };
    if resp.alloc_ids.is_empty() {
        // A periodic or parameterized job runs nothing itself: as Nomad's
        // job run, say when it launches and return.
        let status = client.job_status(&resp.job)?;
        if let Some(parent) = status
            .jobs
            .iter()
            .find(|j| j.name == resp.job && !j.parent_kind.is_empty())
        {
            out::out!("{}", super::job_children::launches(parent));
            return Ok(());
        }
    }
    job_watch::watch(&client, &resp.job, &resp.alloc_ids, since, &options)
}

/// Nomad's lines for groups the node filtered: each group, how many
/// allocs, and the constraint.
fn placement_failures(unplaced: &[api::Unplaced]) -> String {
    let mut out = String::new();
    for u in unplaced {
        out.push_str(&format!(
            "  Task Group {:?} (failed to place {} allocation{}):\n    * {}\n",
            u.group,
            u.count,
            if u.count == 1 { "" } else { "s" },
            u.message
        ));
    }
    out
}

fn stop(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(STOP_FLAGS, argv)?;
    args.at_most(1)?;
    let name = args.positional(0, "the job NAME")?;
    let resp = connect(&args)?.job_stop(name, args.switch("purge"))?;
    out::outln!(
        "Job {name:?}: stopping {} allocation{}",
        resp.alloc_ids.len(),
        if resp.alloc_ids.len() == 1 { "" } else { "s" }
    );
    Ok(())
}

fn status(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(STATUS_FLAGS, argv)?;
    args.at_most(1)?;
    let name = args.positional.first().map(String::as_str).unwrap_or("");
    let resp = connect(&args)?.job_status(name)?;
    if args.switch("json") {
        if name.is_empty() {
            out::outln!("{}", from_message(&resp).pretty());
        } else if let Some(job) = resp.jobs.first() {
            out::outln!("{}", from_message(job).pretty());
        }
        return Ok(());
    }
    if name.is_empty() {
        out::out!("{}", table(&resp.jobs));
    } else if let Some(job) = resp.jobs.first() {
        out::out!("{}", details(job));
    }
    Ok(())
}

fn table(jobs: &[api::JobStatus]) -> String {
    if jobs.is_empty() {
        return "No jobs\n".to_string();
    }
    let mut rows = vec![vec![
        "Name".to_string(),
        "Status".to_string(),
        "Allocs".to_string(),
        "Running".to_string(),
        "Submitted".to_string(),
    ]];
    for job in jobs {
        let running = job.allocs.iter().filter(|a| a.status == "running").count();
        rows.push(vec![
            job.name.clone(),
            job.status.clone(),
            job.allocs.len().to_string(),
            running.to_string(),
            format_timestamp(from_unix_ms(job.submitted_unix_ms)),
        ]);
    }
    columns(&rows)
}

/// Nomad's "Summary": each group's allocs by status, so a batch job that
/// ran to the end shows its allocs `Complete` while the job is `dead`.
fn summary(allocs: &[api::AllocStatus]) -> String {
    if allocs.is_empty() {
        return String::new();
    }
    let mut groups: Vec<&str> = allocs.iter().map(|a| a.group.as_str()).collect();
    groups.dedup();
    order::sort(&mut groups);
    groups.dedup();
    let mut rows = vec![["Task Group", "Starting", "Running", "Failed", "Complete"]
        .map(str::to_string)
        .to_vec()];
    for group in groups {
        let count = |statuses: &[&str]| {
            allocs
                .iter()
                .filter(|a| a.group == group && statuses.contains(&a.status.as_str()))
                .count()
                .to_string()
        };
        rows.push(vec![
            group.to_string(),
            count(&["pending"]),
            count(&["running", "stopping"]),
            count(&["failed"]),
            count(&["complete"]),
        ]);
    }
    format!("\nSummary\n{}", columns(&rows))
}

fn details(job: &api::JobStatus) -> String {
    let mut out = format!(
        "Name      = {}\nType      = {}\nStatus    = {}\nFile      = {}\nSubmitted = {}\n",
        job.name,
        job.type_,
        job.status,
        job.file,
        format_timestamp(from_unix_ms(job.submitted_unix_ms))
    );
    out.push_str(&format!("Job Modify Index = {}\n", job.job_modify_index));
    out.push_str(&super::job_children::details(job));
    out.push_str(&summary(&job.allocs));
    if !job.unplaced.is_empty() {
        out.push_str("\nPlacement Failure\n");
        out.push_str(&placement_failures(&job.unplaced));
    }
    for alloc in &job.allocs {
        out.push_str(&format!(
            "\nAlloc {} (group {:?} [{}]): {}{}\n",
            alloc.id,
            alloc.group,
            alloc.index,
            alloc.status,
            if alloc.message.is_empty() {
                String::new()
            } else {
                format!(": {}", alloc.message)
            }
        ));
        if !alloc.volumes.is_empty() {
            let mut rows = vec![vec![
                "  Volume".to_string(),
                "ID".to_string(),
                "Mode".to_string(),
                "State".to_string(),
                "Message".to_string(),
            ]];
            for v in &alloc.volumes {
                rows.push(vec![
                    format!("  {}", v.alias),
                    v.volume_id.clone(),
                    if v.read_only { "read" } else { "write" }.to_string(),
                    v.state.clone(),
                    v.message.clone(),
                ]);
            }
            out.push_str(&columns(&rows));
        }
        let mut rows = vec![vec![
            "  Task".to_string(),
            "State".to_string(),
            "Failed".to_string(),
            "Restarts".to_string(),
            "PID".to_string(),
            "Plugin".to_string(),
        ]];
        for t in &alloc.tasks {
            rows.push(vec![
                format!("  {}", t.name),
                t.state.clone(),
                t.failed.to_string(),
                t.restarts.to_string(),
                if t.pid == 0 {
                    "-".to_string()
                } else {
                    t.pid.to_string()
                },
                if t.plugin_id.is_empty() {
                    "-".to_string()
                } else {
                    t.plugin_id.clone()
                },
            ]);
        }
        out.push_str(&columns(&rows));
        for t in &alloc.tasks {
            if t.events.is_empty() {
                continue;
            }
            out.push_str(&format!("  Recent events of task {:?}:\n", t.name));
            let mut rows = Vec::new();
            for e in &t.events {
                rows.push(vec![
                    format!("    {}", format_timestamp(from_unix_ms(e.unix_ms))),
                    e.kind.clone(),
                    e.message.clone(),
                ]);
            }
            out.push_str(&columns(&rows));
        }
    }
    out
}
