//! What the main loop and the plugins' workers exchange about volumes:
//! where a volume's stagings and publishes live ([`Paths`]), a [`Job`] and
//! what it reports ([`OpDone`]), a job for one plugin call about a volume,
//! and the requests of register, create and status. The protocol's steps
//! themselves run in [`super::steps`].

use std::path::{Path, PathBuf};

use crossbeam_channel::Sender;

use super::controller::ControllerCalls;
use super::model::{StagingKey, Volume};
use super::plan::Action;
use crate::csi::types::{CreateVolume, StringMap, ValidateVolume, VolumeStats};
use crate::csi::{Client, Validation};

/// A unit of work about volumes, run on a worker of the plugin instance
/// that serves its service: it gets that worker's connection and the
/// plugin's controller (see [`super::controller`]), and reports its own
/// result.
pub type Job = Box<dyn FnOnce(&Client, &dyn ControllerCalls) + Send>;

/// Where a volume's stagings and publishes live under `data_dir`.
#[derive(Clone, Debug)]
pub struct Paths {
    pub data_dir: PathBuf,
}

impl Paths {
    /// `csi/<plugin>/staging/<volume>`: the NodeStage target, one per
    /// volume; `.../<volume>/<usage>` for a staging of the per-usage
    /// layout of the first releases.
    pub fn staging(&self, volume: &Volume, key: &StagingKey) -> PathBuf {
        let path = self.staging_root(&volume.plugin_id).join(&volume.id);
        match key {
            StagingKey::Volume => path,
            StagingKey::Usage(usage) => path.join(usage),
        }
    }

    /// `csi/<plugin>/per-alloc/<alloc>/<volume>/<usage>`: the NodePublish
    /// target.
    pub fn publish(&self, volume: &Volume, alloc: &str, usage: &str) -> PathBuf {
        self.publish_root(&volume.plugin_id)
            .join(alloc)
            .join(&volume.id)
            .join(usage)
    }

    /// `csi/<plugin>/staging`, of the skeleton: made once and kept.
    pub fn staging_root(&self, plugin_id: &str) -> PathBuf {
        self.csi_root().join(plugin_id).join("staging")
    }

    /// `csi/<plugin>/per-alloc`, of the skeleton: made once and kept.
    pub fn publish_root(&self, plugin_id: &str) -> PathBuf {
        self.csi_root().join(plugin_id).join("per-alloc")
    }

    /// Everything the agent mounts lives under here.
    pub fn csi_root(&self) -> PathBuf {
        self.data_dir.join("csi")
    }

    /// `path`, one of the host paths of `plugin_id`'s volumes, as the plugin
    /// names it: under `base_dir` (where a plugin task in a root of its own
    /// sees `csi/<plugin>`, its `stage_publish_base_dir`), or as it is.
    pub fn for_plugin(&self, plugin_id: &str, path: &Path, base_dir: Option<&Path>) -> PathBuf {
        let dir = self.csi_root().join(plugin_id);
        match (base_dir, path.strip_prefix(&dir)) {
            (Some(base), Ok(rest)) => base.join(rest),
            _ => path.to_path_buf(),
        }
    }
}

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
    ControllerExpanded(super::manager::ControllerExpansion),
    /// NodeExpandVolume: the new capacity.
    Expanded(super::manager::Expansion),
    /// ListVolumes, every page.
    External(Result<Vec<crate::csi::types::ListedVolume>, crate::csi::Error>),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_task_is_given_its_paths_under_its_base_dir() {
        let paths = Paths {
            data_dir: PathBuf::from("/var/lib/csi-agent"),
        };
        let staging = Path::new("/var/lib/csi-agent/csi/hp/staging/v1");
        let publish = Path::new("/var/lib/csi-agent/csi/hp/per-alloc/a1/v1/rw-file-system-x");
        let base = Some(Path::new("/local/csi"));
        assert_eq!(
            paths.for_plugin("hp", staging, base),
            Path::new("/local/csi/staging/v1")
        );
        assert_eq!(
            paths.for_plugin("hp", publish, base),
            Path::new("/local/csi/per-alloc/a1/v1/rw-file-system-x")
        );
        // Other plugins, and plugins that see host paths, get them as they are.
        assert_eq!(paths.for_plugin("hp", staging, None), staging);
        assert_eq!(paths.for_plugin("other", staging, base), staging);
    }
}
