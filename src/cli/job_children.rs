//! `csi-agent job periodic force` and `csi-agent job dispatch`: the
//! commands that launch a child of a periodic or parameterized job, and
//! what `job status` shows of a parent and its children.
//!
//! The payload of a dispatch is read from its file or stdin up to
//! [`MAX_DISPATCH_PAYLOAD`] and one byte more, so an endless input is
//! refused once it is past the bound, not read into memory.

use std::io::Read;

use super::args::{self, repeated, value, Flag, UsageError};
use super::plugin_cmd::columns;
use super::{out, CliError};
use crate::api::client::{resolve_address, AgentClient};
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::task::MAX_DISPATCH_PAYLOAD;
use crate::units::format_timestamp;

const FORCE_FLAGS: &[Flag] = &[value("address")];
const DISPATCH_FLAGS: &[Flag] = &[
    repeated("meta"),
    value("id-prefix-template"),
    value("address"),
];

/// `job periodic force NAME`.
pub fn periodic(argv: &[String]) -> Result<(), CliError> {
    let Some((verb, rest)) = argv.split_first() else {
        return Err(UsageError::new("missing the periodic command (force)").into());
    };
    if verb != "force" {
        return Err(UsageError::new(format!("unknown job periodic command {verb:?}")).into());
    }
    let args = args::parse(FORCE_FLAGS, rest)?;
    args.at_most(1)?;
    let name = args.positional(0, "the job NAME")?;
    let client = AgentClient::connect(&resolve_address(args.value("address"))?)?;
    let resp = client.job_periodic_force(name)?;
    launched(&resp);
    Ok(())
}

/// `job dispatch [-meta K=V]... [-id-prefix-template X] NAME [FILE|-]`.
pub fn dispatch(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(DISPATCH_FLAGS, argv)?;
    args.at_most(2)?;
    let name = args.positional(0, "the job NAME")?;
    let payload = match args.positional.get(1) {
        Some(path) => read_payload(path)?,
        None => Vec::new(),
    };
    let req = api::JobDispatchRequest {
        name: name.to_string(),
        payload,
        meta: args.pairs("meta")?.into_iter().collect(),
        id_prefix_template: args.value("id-prefix-template").unwrap_or("").to_string(),
        ..Default::default()
    };
    let client = AgentClient::connect(&resolve_address(args.value("address"))?)?;
    let resp = client.job_dispatch(&req)?;
    launched(&resp);
    Ok(())
}

fn launched(resp: &api::JobRunResponse) {
    out::outln!("Job {:?} launched", resp.job);
    for id in &resp.alloc_ids {
        out::outln!("  alloc {id}");
    }
}

/// The payload in `path`, or stdin for `-`, refused past
/// [`MAX_DISPATCH_PAYLOAD`].
fn read_payload(path: &str) -> Result<Vec<u8>, CliError> {
    let io_error = |err| CliError::Io {
        what: format!("failed to read the payload {path}"),
        err,
    };
    let reader: Box<dyn Read> = if path == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).map_err(io_error)?)
    };
    let mut payload = Vec::new();
    reader
        .take(MAX_DISPATCH_PAYLOAD as u64 + 1)
        .read_to_end(&mut payload)
        .map_err(io_error)?;
    if payload.len() > MAX_DISPATCH_PAYLOAD {
        return Err(UsageError::new(format!(
            "the payload {path} is over {MAX_DISPATCH_PAYLOAD} bytes (MAX_DISPATCH_PAYLOAD, Nomad's limit)"
        ))
        .into());
    }
    Ok(payload)
}

/// What `job run` of a parent says instead of watching it: when a
/// periodic job launches next, or how a parameterized one is launched.
pub fn launches(job: &api::JobStatus) -> String {
    match job.parent_kind.as_str() {
        "periodic" if job.next_launch_unix != 0 => format!(
            "Approximate next launch time: {}\n",
            crate::spec::format_utc(job.next_launch_unix)
        ),
        "periodic" => "No launch is due (the job is disabled, or no date matches)\n".to_string(),
        _ => format!(
            "Job {:?} is parameterized: launch it with csi-agent job dispatch\n",
            job.name
        ),
    }
}

/// What `job status NAME` shows of a parent (its next launch, its
/// children) or of a child (its parent).
pub fn details(job: &api::JobStatus) -> String {
    let mut out = String::new();
    if !job.parent.is_empty() {
        out.push_str(&format!("Parent    = {}\n", job.parent));
    }
    if job.parent_kind.is_empty() {
        return out;
    }
    out.push_str(&format!("Kind      = {}\n", job.parent_kind));
    if job.parent_kind == "periodic" {
        let next = if job.next_launch_unix == 0 {
            "none".to_string()
        } else {
            crate::spec::format_utc(job.next_launch_unix)
        };
        out.push_str(&format!("Next Periodic Launch = {next}\n"));
    }
    if job.children.is_empty() {
        out.push_str("\nNo children launched\n");
        return out;
    }
    let mut rows = vec![["ID", "Status", "Submitted"].map(str::to_string).to_vec()];
    for child in &job.children {
        rows.push(vec![
            child.name.clone(),
            child.status.clone(),
            format_timestamp(from_unix_ms(child.submitted_unix_ms)),
        ]);
    }
    out.push_str(&format!("\nChildren\n{}", columns(&rows)));
    out
}
