//! The jobs' part of `wire.rs`, in a file of its own: `job run`'s and
//! `job plan`'s file, `job status`, `job stop`, `job dispatch`, `alloc
//! logs`, `alloc signal`/`restart`/`stop` and `job inspect`, to and from
//! their protobuf messages.

use std::time::SystemTime;

use crate::call::{CallError, ErrorKind};
use crate::proto::agent as pb;
use crate::spec::JobInputs;
use crate::task::calls as task;

use crate::plugin::fingerprint::unix_ms;

fn ms(time: Option<SystemTime>) -> i64 {
    time.map_or(0, unix_ms)
}

pub fn job_file(req: pb::JobRunRequest) -> task::JobFile {
    let pairs = |texts: Vec<pb::NamedText>| -> Vec<(String, String)> {
        texts.into_iter().map(|t| (t.name, t.text)).collect()
    };
    let inputs = req.inputs.into_option().unwrap_or_default();
    let mut job_inputs = JobInputs {
        env: pairs(inputs.env),
        var_files: pairs(inputs.var_files),
        vars: pairs(inputs.vars),
        ..Default::default()
    };
    job_inputs.files.given = pairs(inputs.files).into_iter().collect();
    task::JobFile {
        file: req.file,
        hcl: req.hcl,
        inputs: job_inputs,
        check_index: req.enforce_index.then_some(req.job_modify_index),
    }
}

pub fn logs_request(req: pb::AllocLogsRequest) -> task::LogsRequest {
    task::LogsRequest {
        alloc_id: req.alloc_id,
        task: req.task,
        stderr: req.stderr,
    }
}

// ---- jobs ----

pub fn job_run(run: task::JobRun) -> pb::JobRunResponse {
    pb::JobRunResponse {
        job: run.job,
        alloc_ids: run.alloc_ids,
        unchanged: run.unchanged,
        warnings: run.warnings,
        unplaced: run.unplaced.iter().map(unplaced).collect(),
        ..Default::default()
    }
}

pub fn unplaced(u: &task::Unplaced) -> pb::Unplaced {
    pb::Unplaced {
        group: u.group.clone(),
        count: u.count,
        constraint: u.constraint.clone(),
        message: u.message(),
        ..Default::default()
    }
}

pub fn job_stop(alloc_ids: Vec<String>) -> pb::JobStopResponse {
    pb::JobStopResponse {
        alloc_ids,
        ..Default::default()
    }
}

pub fn job_status(jobs: Vec<task::JobStatus>) -> pb::JobStatusResponse {
    pb::JobStatusResponse {
        jobs: jobs.into_iter().map(job).collect(),
        ..Default::default()
    }
}

fn job(j: task::JobStatus) -> pb::JobStatus {
    pb::JobStatus {
        name: j.name,
        status: j.status,
        file: j.file,
        type_: j.job_type,
        submitted_unix_ms: ms(j.submitted),
        stop_wanted: j.stop_wanted,
        allocs: j.allocs.into_iter().map(alloc).collect(),
        unplaced: j.unplaced.iter().map(unplaced).collect(),
        parent: j.parent,
        parent_kind: j.parent_kind,
        next_launch_unix: j.next_launch.unwrap_or(0),
        job_modify_index: j.modify_index,
        children: j
            .children
            .into_iter()
            .map(|c| pb::JobChild {
                name: c.name,
                status: c.status,
                submitted_unix_ms: ms(c.submitted),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// `job dispatch`'s request, for the loop.
pub fn dispatch_request(req: pb::JobDispatchRequest) -> task::DispatchRequest {
    task::DispatchRequest {
        job: req.name,
        meta: req.meta.into_iter().collect(),
        payload: req.payload,
        id_prefix_template: req.id_prefix_template,
    }
}

fn alloc(a: task::AllocStatus) -> pb::AllocStatus {
    pb::AllocStatus {
        id: a.id,
        group: a.group,
        index: a.index,
        status: a.status,
        message: a.message,
        tasks: a
            .tasks
            .into_iter()
            .map(|t| pb::TaskStatus {
                name: t.name,
                state: t.state,
                failed: t.failed,
                restarts: t.restarts,
                pid: t.pid,
                plugin_id: t.plugin_id,
                events: t
                    .events
                    .into_iter()
                    .map(|e| pb::TaskEvent {
                        unix_ms: unix_ms(e.time),
                        kind: e.kind,
                        message: e.message,
                        ..Default::default()
                    })
                    .collect(),
                lifecycle: t.lifecycle,
                cpu_mhz: t.cpu_mhz,
                memory_mb: t.memory_mb,
                ..Default::default()
            })
            .collect(),
        volumes: a
            .volumes
            .into_iter()
            .map(|v| pb::AllocVolume {
                alias: v.alias,
                volume_id: v.volume_id,
                read_only: v.read_only,
                state: v.state,
                message: v.message,
                ..Default::default()
            })
            .collect(),
        created_unix_ms: ms(a.created),
        ports: alloc_ports(a.ports),
        ..Default::default()
    }
}

fn alloc_ports(ports: Vec<(String, u16)>) -> Vec<pb::AllocPort> {
    ports
        .into_iter()
        .map(|(label, host)| pb::AllocPort {
            label,
            host: u32::from(host),
            ..Default::default()
        })
        .collect()
}

pub fn logs(path: std::path::PathBuf) -> pb::AllocLogsResponse {
    pb::AllocLogsResponse {
        path: path.to_string_lossy().into_owned(),
        ..Default::default()
    }
}

// ---- alloc control and job inspect ----

/// `alloc signal`/`restart`/`stop`'s request; an unknown action or signal
/// is refused before it reaches the loop.
pub fn alloc_control(req: pb::AllocControlRequest) -> Result<task::AllocControl, CallError> {
    let action = match req.action.as_str() {
        "signal" => task::AllocAction::Signal(signal(&req.signal)?),
        "restart" => task::AllocAction::Restart,
        "stop" => task::AllocAction::Stop,
        other => {
            return Err(CallError::new(
                ErrorKind::InvalidArgument,
                format!("unknown alloc action {other:?} (signal, restart, stop)"),
            ))
        }
    };
    Ok(task::AllocControl {
        alloc_id: req.alloc_id,
        task: req.task,
        action,
    })
}

/// A signal's name, with or without its `SIG`; empty is SIGKILL, the
/// default of Nomad's `alloc signal`.
fn signal(name: &str) -> Result<crate::spec::KillSignal, CallError> {
    use crate::spec::KillSignal;
    if name.is_empty() {
        return Ok(KillSignal::Kill);
    }
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    KillSignal::ALL
        .iter()
        .copied()
        .find(|s| s.as_str() == full)
        .ok_or_else(|| {
            let known: Vec<&str> = KillSignal::ALL.iter().map(|s| s.as_str()).collect();
            CallError::new(
                ErrorKind::InvalidArgument,
                format!("unknown signal {name:?} (known: {})", known.join(", ")),
            )
        })
}

pub fn alloc_controlled(done: task::AllocControlled) -> pb::AllocControlResponse {
    pb::AllocControlResponse {
        alloc_id: done.alloc_id,
        tasks: done.tasks,
        replacement: done.replacement.unwrap_or_default(),
        ..Default::default()
    }
}

pub fn job_inspected(job: task::JobInspected) -> pb::JobInspectResponse {
    pb::JobInspectResponse {
        job_modify_index: job.modify_index,
        name: job.name,
        file: job.file,
        hcl: job.hcl,
        submitted_unix_ms: ms(job.submitted),
        type_: job.job_type,
        groups: job.groups,
        ..Default::default()
    }
}
