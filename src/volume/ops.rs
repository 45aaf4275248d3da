//! The work behind each planned step: the plugin RPC (with the request the
//! spec wants: capabilities with mount options, contexts and secrets in
//! every RPC that takes them) or the local bind mount, run on the plugin's
//! worker pool. Each job reports one [`OpDone`] to the main loop.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crossbeam_channel::Sender;

use super::model::Volume;
use super::plan::{Action, Protocol};
use crate::csi::types::{
    ControllerPublish, CreateVolume, NodePublish, NodeStage, StringMap, ValidateVolume, VolumeStats,
};
use crate::csi::{Client, Validation};
use crate::mount::{is_mount_point, Mounter, Propagation, SysMounter, UnmountMode};
use crate::plugin::workers::Job;

/// Where a volume's stagings and publishes live under `data_dir`.
#[derive(Clone, Debug)]
pub struct Paths {
    pub data_dir: PathBuf,
}

impl Paths {
    /// `csi/<plugin>/staging/<volume>/<usage>`: the NodeStage target.
    pub fn staging(&self, volume: &Volume, usage: &str) -> PathBuf {
        self.data_dir
            .join("csi")
            .join(&volume.plugin_id)
            .join("staging")
            .join(&volume.id)
            .join(usage)
    }

    /// `csi/<plugin>/per-alloc/<alloc>/<volume>/<usage>`: the NodePublish
    /// target.
    pub fn publish(&self, volume: &Volume, alloc: &str, usage: &str) -> PathBuf {
        self.data_dir
            .join("csi")
            .join(&volume.plugin_id)
            .join("per-alloc")
            .join(alloc)
            .join(&volume.id)
            .join(usage)
    }

    /// Everything the agent mounts lives under here.
    pub fn csi_root(&self) -> PathBuf {
        self.data_dir.join("csi")
    }
}

/// Why a step failed.
#[derive(Clone, Debug)]
pub enum StepError {
    Rpc(crate::csi::Error),
    /// A local step (directories, the host bind mount) failed.
    Local(String),
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Rpc(err) => err.fmt(f),
            StepError::Local(message) => f.write_str(message),
        }
    }
}

/// What a job found.
#[derive(Debug)]
pub enum OpResult {
    /// A protocol step; ControllerPublish answers the publish context.
    Step(Action, Result<Option<StringMap>, StepError>),
    Validated(Result<Validation, crate::csi::Error>),
    Created(Result<crate::csi::types::Volume, crate::csi::Error>),
    Deleted(Result<(), crate::csi::Error>),
    Stats(Result<VolumeStats, crate::csi::Error>),
}

/// A job's report: which volume, which request, what happened.
#[derive(Debug)]
pub struct OpDone {
    pub volume_id: String,
    /// Ties the answer to the request that asked for it.
    pub token: u64,
    pub result: OpResult,
}

/// Everything a step needs, copied out of the main loop's state.
pub struct StepContext {
    pub volume: Volume,
    pub action: Action,
    pub node_id: String,
    pub protocol: Protocol,
    pub paths: Paths,
}

pub fn step_job(ctx: StepContext, token: u64, done: Sender<OpDone>) -> Job {
    Box::new(move |client: &Client| {
        let result = run_step(client, &ctx);
        let _ = done.send(OpDone {
            volume_id: ctx.volume.id.clone(),
            token,
            result: OpResult::Step(ctx.action, result),
        });
    })
}

/// A job that runs `op` and reports its result.
pub fn job<F>(volume_id: &str, token: u64, done: Sender<OpDone>, op: F) -> Job
where
    F: FnOnce(&Client) -> OpResult + Send + 'static,
{
    let volume_id = volume_id.to_string();
    Box::new(move |client: &Client| {
        let result = op(client);
        let _ = done.send(OpDone {
            volume_id,
            token,
            result,
        });
    })
}

fn local(what: &str, path: &Path, err: impl std::fmt::Display) -> StepError {
    StepError::Local(format!("cannot {what} {}: {err}", path.display()))
}

fn run_step(client: &Client, ctx: &StepContext) -> Result<Option<StringMap>, StepError> {
    let v = &ctx.volume;
    let rpc = |r: Result<(), crate::csi::Error>| r.map(|()| None).map_err(StepError::Rpc);
    match &ctx.action {
        Action::ControllerPublish => {
            // One attachment serves every claim on the node: attach with
            // the first capability a writer could use, read-only only when
            // the volume admits no writer at all, so that a writer after a
            // reader never meets a read-only attachment.
            let capability = v
                .capability_for(false)
                .or_else(|| v.capabilities.first())
                .cloned()
                .ok_or_else(|| StepError::Local("the volume has no capability".into()))?;
            let req = ControllerPublish {
                volume_id: v.external_id.clone(),
                node_id: ctx.node_id.clone(),
                read_only: capability.access_mode.is_read_only(),
                capability: v.with_mount_options(&capability),
                secrets: v.secrets.clone(),
                volume_context: v.context.clone(),
            };
            client
                .controller_publish(&req)
                .map(Some)
                .map_err(StepError::Rpc)
        }
        Action::NodeStage { usage } => {
            let staging = v
                .stagings
                .get(usage)
                .ok_or_else(|| StepError::Local(format!("no staging record for {usage}")))?;
            let path = ctx.paths.staging(v, usage);
            private_dir(&path).map_err(|e| local("create the staging dir", &path, e))?;
            rpc(client.node_stage(&NodeStage {
                volume_id: v.external_id.clone(),
                publish_context: v.publish_context.clone(),
                staging_target_path: path,
                capability: v.with_mount_options(&staging.capability),
                secrets: v.secrets.clone(),
                volume_context: v.context.clone(),
            }))
        }
        Action::NodePublish { alloc } => {
            let claim = &v.claims[alloc];
            let target = ctx.paths.publish(v, alloc, &claim.usage);
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| local("create the publish dir", parent, e))?;
            }
            rpc(client.node_publish(&NodePublish {
                volume_id: v.external_id.clone(),
                publish_context: v.publish_context.clone(),
                staging_target_path: ctx
                    .protocol
                    .stage
                    .then(|| ctx.paths.staging(v, &claim.usage)),
                target_path: target,
                capability: v.with_mount_options(&claim.capability),
                read_only: claim.read_only,
                secrets: v.secrets.clone(),
                volume_context: v.context.clone(),
            }))
        }
        Action::BindTarget { alloc } => {
            let claim = &v.claims[alloc];
            let source = ctx.paths.publish(v, alloc, &claim.usage);
            let target = claim
                .target
                .as_ref()
                .ok_or_else(|| StepError::Local("the claim has no target".into()))?;
            bind_target(&source, target, claim.propagation, claim.read_only).map(|()| None)
        }
        Action::UnbindTarget { alloc } => {
            let claim = &v.claims[alloc];
            match &claim.target {
                Some(target) => unbind_target(target).map(|()| None),
                None => Ok(None),
            }
        }
        Action::NodeUnpublish { alloc } => {
            let claim = &v.claims[alloc];
            let target = ctx.paths.publish(v, alloc, &claim.usage);
            rpc(client.node_unpublish(&v.external_id, &target))?;
            // The plugin removed the target; the agent made its parents.
            remove_empty_dirs(&target, &ctx.paths.csi_root());
            Ok(None)
        }
        Action::NodeUnstage { usage } => {
            let path = ctx.paths.staging(v, usage);
            rpc(client.node_unstage(&v.external_id, &path))?;
            let _ = fs::remove_dir(&path);
            remove_empty_dirs(&path, &ctx.paths.csi_root());
            Ok(None)
        }
        Action::ControllerUnpublish => {
            rpc(client.controller_unpublish(&v.external_id, &ctx.node_id, &v.secrets))
        }
        Action::Free { .. } => Ok(None),
    }
}

/// Creates `path` and its parents, `path` itself mode 0700.
fn private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o700))
}

/// Removes `path`'s parents while they are empty, up to (not including)
/// `root`.
fn remove_empty_dirs(path: &Path, root: &Path) {
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// Bind-mounts the published volume at the claim's host target with its
/// propagation; read-only claims are remounted read-only. A target that is
/// already a mount point is taken as this step's earlier, unconfirmed
/// success.
pub fn bind_target(
    source: &Path,
    target: &Path,
    propagation: Propagation,
    read_only: bool,
) -> Result<(), StepError> {
    fs::create_dir_all(target).map_err(|e| local("create the target", target, e))?;
    let mounted = is_mount_point(target).map_err(|e| local("check the target", target, e))?;
    let mounter = SysMounter;
    if !mounted {
        mounter
            .bind(source, target, true)
            .map_err(|e| local("bind-mount the target", target, e))?;
    }
    if read_only {
        mounter
            .remount_read_only(target)
            .map_err(|e| local("make read-only the target", target, e))?;
    }
    mounter
        .set_propagation(target, propagation)
        .map_err(|e| local("set the propagation of the target", target, e))
}

/// Unmounts a claim's host target; one that is not mounted is done.
pub fn unbind_target(target: &Path) -> Result<(), StepError> {
    match is_mount_point(target) {
        Ok(false) => return Ok(()),
        Ok(true) => {}
        // Gone already.
        Err(_) if !target.exists() => return Ok(()),
        Err(e) => return Err(local("check the target", target, e)),
    }
    SysMounter
        .unmount(target, UnmountMode::Normal)
        .map_err(|e| local("unmount the target", target, e))
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
    }
}
