//! The control API (`proto/agent.proto`): the agent serves it on
//! `data_dir/control.sock`; every other `csi-agent` command is a client.
//!
//! [`server`] accepts connections itself, so that it can refuse a peer
//! whose uid (`SO_PEERCRED`) is neither root nor the agent's before gRPC
//! sees a byte, and hands each call to the main loop as a [`Call`]: the
//! main loop answers through the call's reply channel, from its own state,
//! so the API never reads shared state. [`client`] is the CLI's side.

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
    JobRun(api::JobRunRequest),
    JobStop(api::JobStopRequest),
    JobStatus(api::JobStatusRequest),
    AllocLogs(api::AllocLogsRequest),
}

/// The main loop's answer to a [`Request`] of the same name.
#[derive(Debug)]
pub enum Response {
    PluginStatus(api::PluginStatusResponse),
    VolumeStatus(api::VolumeStatusResponse),
    VolumeDeregister(api::VolumeDeregisterResponse),
    VolumeClaim(api::VolumeClaimResponse),
    VolumeRelease(api::VolumeReleaseResponse),
    JobRun(api::JobRunResponse),
    JobStop(api::JobStopResponse),
    JobStatus(api::JobStatusResponse),
    AllocLogs(api::AllocLogsResponse),
}

/// One API call on its way to the main loop.
#[derive(Debug)]
pub struct Call {
    pub request: Request,
    pub reply: Sender<Result<Response, ApiError>>,
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
