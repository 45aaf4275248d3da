//! The control API (`proto/agent.proto`): the agent serves it on
//! `data_dir/control.sock`; every other `csi-agent` command is a client.
//!
//! [`server`] accepts connections itself, so that it can refuse a peer
//! whose uid (`SO_PEERCRED`) is neither root nor the agent's before gRPC
//! sees a byte, and hands each call to the main loop as a [`Call`]: the
//! main loop answers through the call's [`ReplyTo`], from its own state,
//! so the API never reads shared state; the answer goes into the call's
//! gRPC sink from the thread that gives it. [`client`] is the CLI's side.
//!
//! The parts of the agent that answer speak their own types (requests,
//! answers, [`CallError`]); `wire.rs` alone maps them to and from the
//! protobuf messages and the error kinds to gRPC codes (`wire_session.rs`
//! those of `alloc exec` and `alloc fs`, `wire_plan.rs` `job plan`'s,
//! `wire_jobs.rs` the other jobs' and allocs').

pub mod client;
mod listen;
mod methods;
mod outbound;
pub mod server;
mod server_error;
mod session;
mod session_docker;
mod session_output;
mod session_reads;
mod wire;
mod wire_jobs;
mod wire_plan;
mod wire_services;
mod wire_session;

use std::path::PathBuf;

use crate::cluster::node::NodeStatus;
use crate::plugin::StatusReport;
use crate::task::calls::{
    AllocControl, AllocControlled, DispatchRequest, JobFile, JobInspected, JobPlanned, JobRun,
    JobStatus, LogsRequest,
};
use crate::volume::calls as volume;

pub use crate::call::{CallError, ErrorKind};
pub use session::MAX_SESSIONS;
pub use session_reads::{FOLLOW_HEARTBEAT, FOLLOW_POLL};

/// The socket's file name inside `data_dir`.
pub const SOCKET_NAME: &str = "control.sock";

/// A request the main loop answers, in the terms of the part of the agent
/// that answers it (`wire.rs` maps each from its protobuf).
#[derive(Debug)]
pub enum Request {
    /// Plugin `id`, or every plugin when empty.
    PluginStatus {
        id: String,
    },
    VolumeRegister(volume::SpecRequest),
    VolumeCreate(volume::SpecRequest),
    VolumeDeregister(volume::DeregisterRequest),
    VolumeDelete(volume::DeregisterRequest),
    VolumeStatus(volume::StatusRequest),
    VolumeClaim(volume::ClaimRequest),
    VolumeRelease(volume::ReleaseRequest),
    SnapshotCreate(volume::SnapshotCreateRequest),
    SnapshotDelete(volume::SnapshotDeleteRequest),
    SnapshotList(volume::SnapshotListRequest),
    NodeStatus,
    VolumeForceDetach {
        volume_id: String,
        node: String,
    },
    JobRun(JobFile),
    JobStop {
        name: String,
        purge: bool,
    },
    /// `job periodic force`.
    JobPeriodicForce {
        name: String,
    },
    JobDispatch(DispatchRequest),
    /// Job `name`, or every job when empty.
    JobStatus {
        name: String,
    },
    AllocLogs(LogsRequest),
    /// Events after an index, waiting for one up to `wait`.
    Events(EventsRequest),
    /// `alloc signal`, `alloc restart`, `alloc stop`.
    AllocControl(AllocControl),
    /// `job inspect` of job `name`.
    JobInspect {
        name: String,
    },
    /// `job plan`: what `job run` of the file would do, nothing done.
    JobPlan(JobFile),
    /// `alloc exec`'s lookup of the running task, `alloc fs`'s of the
    /// alloc's dir (`session.rs`).
    Session(crate::task::exec_target::SessionLookup),
    /// `service list` (no name) and `service info NAME`.
    Services {
        name: Option<String>,
    },
}

/// The longest an `Events` call waits for an event: the CLI asks again.
pub const EVENTS_MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The most events one answer carries; a reader asks again for the rest.
pub const EVENTS_MAX_PAGE: usize = 1000;

/// An `Events` call: what to read and how long to wait for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventsRequest {
    pub query: crate::events::Query,
    pub wait: std::time::Duration,
}

/// How a [`Request`] uses the agent's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Answered from the state as it is; changes nothing.
    Read,
    /// Changes the state (and may lead to plugin calls or mounts): refused
    /// while the state cannot be persisted.
    Change,
}

impl Request {
    /// How the request uses the state. Every request is named here, with
    /// no wildcard, so that a new one cannot be added unclassified.
    pub fn access(&self) -> Access {
        match self {
            Request::PluginStatus { .. } => Access::Read,
            Request::VolumeStatus(_) => Access::Read,
            Request::JobStatus { .. } => Access::Read,
            Request::AllocLogs(_) => Access::Read,
            Request::Events(_) => Access::Read,
            Request::Session(_) => Access::Read,
            // Snapshots live in the plugin: the agent keeps nothing of them.
            Request::SnapshotCreate(_) => Access::Read,
            Request::SnapshotDelete(_) => Access::Read,
            Request::SnapshotList(_) => Access::Read,
            Request::NodeStatus => Access::Read,
            // It changes etcd's claims of another node: this agent's state
            // is untouched.
            Request::VolumeForceDetach { .. } => Access::Read,
            Request::VolumeRegister(_) => Access::Change,
            Request::VolumeCreate(_) => Access::Change,
            Request::VolumeDeregister(_) => Access::Change,
            Request::VolumeDelete(_) => Access::Change,
            Request::VolumeClaim(_) => Access::Change,
            Request::VolumeRelease(_) => Access::Change,
            Request::JobRun(_) => Access::Change,
            Request::JobStop { .. } => Access::Change,
            Request::JobPeriodicForce { .. } => Access::Change,
            Request::JobDispatch(_) => Access::Change,
            Request::AllocControl(_) => Access::Change,
            Request::JobInspect { .. } => Access::Read,
            Request::Services { .. } => Access::Read,
            Request::JobPlan(_) => Access::Read,
        }
    }
}

/// The main loop's answer to a [`Request`].
#[derive(Debug)]
pub enum Response {
    PluginStatus(StatusReport),
    /// Every volume request's.
    Volume(volume::Answer),
    NodeStatus(NodeStatus),
    VolumeForceDetach,
    JobRun(JobRun),
    /// The allocs stopping.
    JobStop(Vec<String>),
    JobStatus(Vec<JobStatus>),
    /// The log file's path.
    AllocLogs(PathBuf),
    Events(crate::events::Page),
    AllocControl(AllocControlled),
    JobInspect(JobInspected),
    JobPlan(JobPlanned),
    Session(crate::task::exec_target::SessionTarget),
    /// The registered service instances asked for.
    Services(Vec<crate::services::Registration>),
}

/// Where the answer to a call goes.
pub type ReplyTo = crate::call::ReplyTo<Response>;

/// One API call on its way to the main loop.
#[derive(Debug)]
pub struct Call {
    pub request: Request,
    pub reply: ReplyTo,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_logs_are_reads() {
        let reads = [
            Request::PluginStatus { id: String::new() },
            Request::VolumeStatus(volume::StatusRequest {
                stats: true,
                ..Default::default()
            }),
            Request::JobStatus {
                name: String::new(),
            },
            Request::AllocLogs(Default::default()),
            Request::Events(Default::default()),
            Request::JobInspect { name: "web".into() },
            Request::JobPlan(Default::default()),
        ];
        for request in reads {
            assert_eq!(request.access(), Access::Read, "{request:?}");
        }
    }

    #[test]
    fn every_call_that_registers_claims_or_runs_is_a_change() {
        let changes = [
            Request::VolumeRegister(Default::default()),
            Request::VolumeCreate(Default::default()),
            Request::VolumeDeregister(Default::default()),
            Request::VolumeDelete(Default::default()),
            Request::VolumeClaim(Default::default()),
            Request::VolumeRelease(Default::default()),
            Request::JobRun(Default::default()),
            Request::JobStop {
                name: "web".into(),
                purge: false,
            },
            Request::JobPeriodicForce { name: "web".into() },
            Request::JobDispatch(Default::default()),
            Request::AllocControl(crate::task::calls::AllocControl {
                alloc_id: "a1".into(),
                task: String::new(),
                action: crate::task::calls::AllocAction::Restart,
            }),
        ];
        for request in changes {
            assert_eq!(request.access(), Access::Change, "{request:?}");
        }
    }
}
