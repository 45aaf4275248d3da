//! What the main loop and the plugins' workers exchange about volumes: a
//! [`Job`] and what it reports ([`OpDone`]), a job for one plugin call
//! about a volume, and the requests of register, create and status. The
//! protocol's steps themselves run in [`super::steps`]; where their paths
//! are is [`super::layout`].

use std::path::PathBuf;

use crossbeam_channel::Sender;

use super::controller::ControllerCalls;
use super::model::Volume;
use super::plan::Action;
use crate::csi::types::{CreateVolume, StringMap, ValidateVolume, VolumeStats};
use crate::csi::{Client, Validation};

/// A unit of work about volumes, run on a worker of the plugin instance
/// that serves its service: it gets that worker's connection and the
/// plugin's controller (see [`super::controller`]), and reports its own
/// result.
pub type Job = Box<dyn FnOnce(&Client, &dyn ControllerCalls) + Send>;

/// What the node's expansion found: the new capacity, or the failed call.
pub type Expansion = Result<i64, crate::csi::Error>;

/// What ControllerExpandVolume answered.
pub type ControllerExpansion = Result<crate::csi::types::Expanded, crate::csi::Error>;

/// Why a step failed.
#[derive(Clone, Debug)]
pub enum StepError {
    Rpc(crate::csi::Error),
    /// A local step (directories, the host bind mount) failed; `terminal`
    /// when trying again cannot help (a mount that is not the agent's).
    Local {
        message: String,
        terminal: bool,
    },
    /// The plugin answered NodeUnpublish or NodeUnstage with success but
    /// the path is still a mount point.
    LeftMount {
        rpc: &'static str,
        path: PathBuf,
    },
}

impl StepError {
    /// Whether trying again cannot help.
    pub fn is_terminal(&self) -> bool {
        match self {
            StepError::Rpc(e) => e.class == crate::csi::Class::Terminal,
            StepError::Local { terminal, .. } => *terminal,
            StepError::LeftMount { .. } => false,
        }
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Rpc(err) => err.fmt(f),
            StepError::Local { message, .. } => f.write_str(message),
            StepError::LeftMount { rpc, path } => write!(
                f,
                "{rpc} succeeded but {} is still a mount point",
                path.display()
            ),
        }
    }
}

/// What a step that succeeded reports besides success.
#[derive(Debug, Default)]
pub struct StepDone {
    /// ControllerPublishVolume's publish context.
    pub publish_context: Option<StringMap>,
    /// The mount ID of the target bind the agent made.
    pub mount_id: Option<u64>,
    /// The plugin left a mount after saying it removed it, and the agent
    /// unmounted it: what to tell the user (a plugin health event).
    pub contained: Option<String>,
}

/// What a job found.
#[derive(Debug)]
pub enum OpResult {
    /// A protocol step, one of its job's.
    Step(StepReport),
    Validated(Result<Validation, crate::csi::Error>),
    Created(Result<crate::csi::types::Volume, crate::csi::Error>),
    Deleted(Result<(), crate::csi::Error>),
    Stats(Result<VolumeStats, crate::csi::Error>),
    Snapshot(Result<crate::csi::types::Snapshot, crate::csi::Error>),
    SnapshotDeleted(Result<(), crate::csi::Error>),
    Snapshots(Result<Vec<crate::csi::types::Snapshot>, crate::csi::Error>),
    /// ControllerExpandVolume's answer.
    ControllerExpanded(ControllerExpansion),
    /// NodeExpandVolume: the new capacity.
    Expanded(Expansion),
    /// ListVolumes, every page.
    External(Result<Vec<crate::csi::types::ListedVolume>, crate::csi::Error>),
    /// GetCapacity, for the plugin's capacity signal.
    Capacity(Result<crate::csi::types::Capacity, crate::csi::Error>),
}

/// One step of a job of protocol steps (see [`super::steps`]).
#[derive(Debug)]
pub struct StepReport {
    pub action: Action,
    pub result: Result<StepDone, StepError>,
    /// The job waits before its next RPC until this step's outcome is
    /// written: the loop answers [`Verdict::GoOn`] once it is.
    pub resume: Option<Sender<Verdict>>,
    /// With `resume`: the job's directory chores left undone, which the
    /// loop does itself if it stops the job here (see
    /// [`super::chores`]).
    pub leftover: super::chores::Leftover,
}

/// The loop's answer to a job waiting between two steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The step's outcome is written: send the next RPC.
    GoOn,
    /// The planner's next step is no longer the job's: end here. The loop
    /// did the report's [`StepReport::leftover`].
    Stop,
}

/// A job's report: which volume, which request, what happened.
#[derive(Debug)]
pub struct OpDone {
    pub volume_id: String,
    /// Ties the answer to the request that asked for it.
    pub token: u64,
    pub result: OpResult,
}

/// A job that runs `op`, a call of the plugin's node, and reports its
/// result.
pub fn node_job<F>(volume_id: &str, token: u64, done: Sender<OpDone>, op: F) -> Job
where
    F: FnOnce(&Client) -> OpResult + Send + 'static,
{
    reporting(volume_id, token, done, move |client, _| op(client))
}

/// A job that runs `op`, a call of the plugin's controller, and reports
/// its result.
pub fn controller_job<F>(volume_id: &str, token: u64, done: Sender<OpDone>, op: F) -> Job
where
    F: FnOnce(&dyn ControllerCalls) -> OpResult + Send + 'static,
{
    reporting(volume_id, token, done, move |_, controller| op(controller))
}

/// A job that runs `op` and reports its result.
fn reporting<F>(volume_id: &str, token: u64, done: Sender<OpDone>, op: F) -> Job
where
    F: FnOnce(&Client, &dyn ControllerCalls) -> OpResult + Send + 'static,
{
    let volume_id = volume_id.to_string();
    Box::new(move |client: &Client, controller: &dyn ControllerCalls| {
        let result = op(client, controller);
        let _ = done.send(OpDone {
            volume_id,
            token,
            result,
        });
    })
}

/// The requests of register, create and status.
pub fn validate_request(v: &Volume) -> ValidateVolume {
    ValidateVolume {
        volume_id: v.external_id.clone(),
        volume_context: v.context.clone(),
        capabilities: v
            .capabilities
            .iter()
            .map(|c| v.with_mount_options(c))
            .collect(),
        parameters: v.parameters.clone(),
        secrets: v.secrets.clone(),
    }
}

pub fn create_request(
    v: &Volume,
    capacity: crate::csi::types::CapacityRange,
    accessibility: Option<crate::csi::types::TopologyRequirement>,
    content_source: Option<crate::csi::types::ContentSource>,
) -> CreateVolume {
    CreateVolume {
        name: v.name.clone(),
        capacity,
        capabilities: v
            .capabilities
            .iter()
            .map(|c| v.with_mount_options(c))
            .collect(),
        parameters: v.parameters.clone(),
        secrets: v.secrets.clone(),
        accessibility,
        content_source,
    }
}
