//! The control API (`proto/agent.proto`): the agent serves it on
//! `data_dir/control.sock`; every other `csi-agent` command is a client.
//!
//! [`server`] accepts connections itself, so that it can refuse a peer
//! whose uid (`SO_PEERCRED`) is neither root nor the agent's before gRPC
//! sees a byte, and hands each call to the main loop as a [`Call`]: the
//! main loop answers through the call's [`ReplyTo`], from its own state,
//! so the API never reads shared state; the answer goes into the call's
//! gRPC sink from the thread that gives it. [`client`] is the CLI's side.

pub mod client;
pub mod server;

use std::fmt;

use crossbeam_channel::Sender;

use crate::proto::agent as api;

/// The socket's file name inside `data_dir`.
pub const SOCKET_NAME: &str = "control.sock";

/// A request the main loop answers.
#[derive(Debug)]
pub enum Request {
    PluginStatus(api::PluginStatusRequest),
    VolumeRegister(api::VolumeSpecRequest),
    VolumeCreate(api::VolumeSpecRequest),
    VolumeDeregister(api::VolumeDeregisterRequest),
    VolumeDelete(api::VolumeDeregisterRequest),
    VolumeStatus(api::VolumeStatusRequest),
    VolumeClaim(api::VolumeClaimRequest),
    VolumeRelease(api::VolumeReleaseRequest),
    SnapshotCreate(api::SnapshotCreateRequest),
    SnapshotDelete(api::SnapshotDeleteRequest),
    SnapshotList(api::SnapshotListRequest),
    NodeStatus(api::NodeStatusRequest),
    VolumeForceDetach(api::VolumeForceDetachRequest),
    JobRun(api::JobRunRequest),
    JobStop(api::JobStopRequest),
    JobStatus(api::JobStatusRequest),
    AllocLogs(api::AllocLogsRequest),
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
            Request::PluginStatus(_) => Access::Read,
            Request::VolumeStatus(_) => Access::Read,
            Request::JobStatus(_) => Access::Read,
            Request::AllocLogs(_) => Access::Read,
            // Snapshots live in the plugin: the agent keeps nothing of them.
            Request::SnapshotCreate(_) => Access::Read,
            Request::SnapshotDelete(_) => Access::Read,
            Request::SnapshotList(_) => Access::Read,
            Request::NodeStatus(_) => Access::Read,
            // It changes etcd's claims of another node: this agent's state
            // is untouched.
            Request::VolumeForceDetach(_) => Access::Read,
            Request::VolumeRegister(_) => Access::Change,
            Request::VolumeCreate(_) => Access::Change,
            Request::VolumeDeregister(_) => Access::Change,
            Request::VolumeDelete(_) => Access::Change,
            Request::VolumeClaim(_) => Access::Change,
            Request::VolumeRelease(_) => Access::Change,
            Request::JobRun(_) => Access::Change,
            Request::JobStop(_) => Access::Change,
        }
    }
}

/// The main loop's answer to a [`Request`] of the same name.
#[derive(Debug)]
pub enum Response {
    PluginStatus(api::PluginStatusResponse),
    VolumeStatus(api::VolumeStatusResponse),
    VolumeDeregister(api::VolumeDeregisterResponse),
    VolumeClaim(api::VolumeClaimResponse),
    VolumeRelease(api::VolumeReleaseResponse),
    SnapshotCreate(api::SnapshotCreateResponse),
    SnapshotDelete(api::SnapshotDeleteResponse),
    SnapshotList(api::SnapshotListResponse),
    NodeStatus(api::NodeStatusResponse),
    VolumeForceDetach(api::VolumeForceDetachResponse),
    JobRun(api::JobRunResponse),
    JobStop(api::JobStopResponse),
    JobStatus(api::JobStatusResponse),
    AllocLogs(api::AllocLogsResponse),
}

/// One API call on its way to the main loop.
#[derive(Debug)]
pub struct Call {
    pub request: Request,
    pub reply: ReplyTo,
}

/// The main loop's answer to a call.
pub type Answer = Result<Response, ApiError>;

/// Where the answer to a call goes: the control API call's gRPC sink, so
/// that whichever thread answers (the main loop, a worker) sends it on the
/// wire at once, with no thread of its own waiting for it; or a channel,
/// for the agent's own calls (a task's claims).
pub struct ReplyTo(Target);

enum Target {
    Channel(Sender<Answer>),
    /// `None` once answered.
    Sink(Option<Box<dyn FnOnce(Answer) + Send>>),
}

impl ReplyTo {
    /// An answer that `send` passes to `deliver`. Dropped unanswered (the
    /// agent stopping), it delivers `Unavailable`.
    pub fn sink(deliver: impl FnOnce(Answer) + Send + 'static) -> ReplyTo {
        ReplyTo(Target::Sink(Some(Box::new(deliver))))
    }

    /// Sends the answer. The caller may have given up on it: that is not
    /// the answering side's problem, so nothing is returned.
    pub fn send(mut self, answer: Answer) {
        match &mut self.0 {
            Target::Channel(sender) => {
                let _ = sender.send(answer);
            }
            Target::Sink(deliver) => {
                if let Some(deliver) = deliver.take() {
                    deliver(answer);
                }
            }
        }
    }
}

impl From<Sender<Answer>> for ReplyTo {
    fn from(sender: Sender<Answer>) -> ReplyTo {
        ReplyTo(Target::Channel(sender))
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        // A channel's receiver sees the disconnection instead.
        if let Target::Sink(deliver) = &mut self.0 {
            if let Some(deliver) = deliver.take() {
                deliver(Err(ApiError::new(
                    ErrorKind::Unavailable,
                    "the agent is shutting down",
                )));
            }
        }
    }
}

impl fmt::Debug for ReplyTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Target::Channel(_) => f.write_str("ReplyTo(channel)"),
            Target::Sink(Some(_)) => f.write_str("ReplyTo(sink)"),
            Target::Sink(None) => f.write_str("ReplyTo(answered)"),
        }
    }
}

/// What kind of failure an [`ApiError`] is; mapped to a gRPC code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    InvalidArgument,
    /// The request is valid but the state does not allow it now.
    FailedPrecondition,
    /// Not now, maybe later: the agent is shutting down.
    Unavailable,
    /// A claim kept failing with retryable errors until its deadline.
    DeadlineExceeded,
    /// The operation failed for good and was undone (a claim whose step
    /// failed terminally).
    Aborted,
    Internal,
}

/// A failed API call, as the agent explains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            kind,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound, message)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_logs_are_reads() {
        let reads = [
            Request::PluginStatus(Default::default()),
            Request::VolumeStatus(api::VolumeStatusRequest {
                stats: true,
                ..Default::default()
            }),
            Request::JobStatus(Default::default()),
            Request::AllocLogs(Default::default()),
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
            Request::JobStop(Default::default()),
        ];
        for request in changes {
            assert_eq!(request.access(), Access::Change, "{request:?}");
        }
    }
}
