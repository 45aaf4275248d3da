//! The work behind the planned steps: the plugin RPC (with the request the
//! spec wants: capabilities with mount options, contexts and secrets in
//! every RPC that takes them) or the local bind mount, run on the plugin's
//! worker pool.
//!
//! A job runs a run of steps back to back: a claim's ControllerPublish,
//! NodeStage, NodePublish and host bind, or a release's unbind,
//! NodeUnpublish, NodeUnstage and ControllerUnpublish, as far as the
//! planner sees them following each other on one plugin instance (see
//! `VolumeManager::plan`). One job per volume, so one RPC in flight per
//! volume still. The job reports each step to the main loop as it ends,
//! stops at the first that fails, and before each RPC waits until the
//! outcomes of the RPCs before it are written to the journal
//! (`run_steps`), so that a killed agent re-sends at most the last RPC
//! sent: between RPCs there is still a hand-off to the loop, but no new
//! job to plan and queue, and a host bind or unbind follows its neighbour
//! RPC at once.
//!
//! Written, not synced: those outcomes survive the agent being killed,
//! not a power cut or a kernel crash, until the next sync, at the latest
//! the one before the claim's or release's answer (see
//! [`crate::state::journal`]). A power cut before it loses the `Done`
//! marks, and the recovering agent sends those steps again: the CSI spec
//! requires each of these calls to be idempotent, and the host bind and
//! unbind are too (`bind_target` takes its own bind for done,
//! `unbind_target` a target already gone). What
//! must stay synced before the first RPC, the record that marks every
//! forward step `Pending`, is: a power cut may not forget an attach.
//!
//! The directories of a plugin's stagings and publishes
//! (`csi/<plugin>/staging` and `csi/<plugin>/per-alloc`, the skeleton) are
//! made private (0700) the first time a step needs them and kept; a step
//! makes and removes only the dirs of its volume and alloc below them, so
//! a claim does not build the tree again each time.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::{bounded, Sender};

use super::model::{Claim, Volume};
use super::ops::{OpDone, OpResult, Paths, StepDone, StepError, StepReport};
use super::plan::{Action, Protocol};
use super::target::{self, Owner};
use crate::cluster::attachments::Attacher;
use crate::csi::types::{NodePublish, NodeStage};
use crate::csi::{Class, Client};
use crate::mount::{self, Mounter, SysMounter, UnmountMode};
use crate::plugin::workers::Job;

/// Everything a job's steps need, copied out of the main loop's state.
pub struct StepContext {
    /// The volume's record with every forward step of the job marked
    /// `Pending`.
    pub volume: Volume,
    /// The steps, run in order (see the module docs).
    pub actions: Vec<Action>,
    pub node_id: String,
    pub protocol: Protocol,
    pub paths: Paths,
    /// The plugin kept leaving a mount behind after NodeUnpublish or
    /// NodeUnstage: if it does again, the agent unmounts its own path.
    pub contain: bool,
    /// Where the plugin sees `csi/<plugin>`, if not at its host path; the
    /// paths of its RPCs are given there (see [`Paths::for_plugin`]).
    pub plugin_base_dir: Option<PathBuf>,
    /// In a cluster: ControllerPublish and ControllerUnpublish are asked
    /// of the plugin's controller leader through it, not of the local
    /// controller.
    pub attacher: Option<Arc<Attacher>>,
}

impl StepContext {
    /// A host path of this volume as the plugin names it.
    fn for_plugin(&self, path: &Path) -> PathBuf {
        self.paths.for_plugin(
            &self.volume.plugin_id,
            path,
            self.plugin_base_dir.as_deref(),
        )
    }
}

/// A job that runs `ctx`'s steps back to back and reports each one.
pub fn steps_job(ctx: StepContext, token: u64, done: Sender<OpDone>) -> Job {
    Box::new(move |client: &Client| run_steps(client, ctx, token, &done))
}

/// Runs the steps in order, reporting each as a [`StepReport`], and stops
/// at the first that fails. Before an RPC, the outcome of every RPC before
/// it must be in the journal, so that a killed agent re-sends at most the
/// last RPC sent: the report of the step before it carries a `resume`
/// sender, and the job waits until the loop has written the record (a
/// sync is not waited for; see the module docs) and answers on it. A
/// local step's outcome (a host bind or unbind) is not waited for: doing
/// it again after a crash is harmless, and a bind's `Pending` mark was
/// durable before the job was handed out.
/// The job ends without sending anything more when the loop drops its
/// `resume`: the loop stopped, or the record changed under the job so that
/// the planner's next step is no longer the job's (a release came, or
/// another claim), or that step's instance is not healthy; the planner
/// takes over from there.
fn run_steps(client: &Client, mut ctx: StepContext, token: u64, done: &Sender<OpDone>) {
    let actions = std::mem::take(&mut ctx.actions);
    // An RPC succeeded whose outcome is not known to be durable yet.
    let mut unconfirmed = false;
    for (i, action) in actions.iter().enumerate() {
        let kind = if action.is_rpc() { "rpc" } else { "local" };
        crate::trace::point(kind, action.name());
        let result = run_one(client, &ctx, action);
        crate::trace::point("step-done", action.name());
        let ok = result.is_ok();
        if let Ok(StepDone {
            publish_context: Some(context),
            ..
        }) = &result
        {
            // NodeStage and NodePublish carry ControllerPublish's answer.
            ctx.volume.publish_context = context.clone();
        }
        unconfirmed |= ok && action.is_rpc();
        let wait = ok && unconfirmed && actions.get(i + 1).is_some_and(Action::is_rpc);
        let (resume, resumed) = match wait {
            true => {
                let (tx, rx) = bounded(1);
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        let report = StepReport {
            action: action.clone(),
            result,
            resume,
        };
        let sent = done.send(OpDone {
            volume_id: ctx.volume.id.clone(),
            token,
            result: OpResult::Step(report),
        });
        if !ok || sent.is_err() {
            return;
        }
        if let Some(resumed) = resumed {
            if resumed.recv().is_err() {
                return;
            }
            crate::trace::point("resumed", "");
            unconfirmed = false;
        }
    }
}

/// One step: the local controller's or node's RPC, a host bind, or in a
/// cluster the controller leader's attach or detach. A release step the
/// plugin answers NOT_FOUND ("nothing to do") is done.
fn run_one(client: &Client, ctx: &StepContext, action: &Action) -> Result<StepDone, StepError> {
    let result = match (&ctx.attacher, action) {
        (Some(attacher), Action::ControllerPublish | Action::ControllerUnpublish) => {
            leader_step(attacher, ctx, action)
        }
        _ => run_step(client, ctx, action),
    };
    match result {
        Err(StepError::Rpc(err)) if action.is_release() && err.class == Class::Ignorable => {
            log::debug!("Volume {}: {err}: already done", ctx.volume.id);
            Ok(StepDone::default())
        }
        other => other,
    }
}

/// ControllerPublish or ControllerUnpublish in a cluster, through the
/// controller leader.
fn leader_step(
    attacher: &Attacher,
    ctx: &StepContext,
    action: &Action,
) -> Result<StepDone, StepError> {
    let v = &ctx.volume;
    let result = match action {
        Action::ControllerPublish => {
            let read_only = v
                .node_capability()
                .is_some_and(|c| c.access_mode.is_read_only());
            attacher
                .attach(&v.id, &ctx.node_id, read_only)
                .map(|context| StepDone {
                    publish_context: Some(context.into_iter().collect()),
                    ..StepDone::default()
                })
        }
        Action::ControllerUnpublish => attacher
            .detach(&v.id, &ctx.node_id)
            .map(|()| StepDone::default()),
        other => Err(format!("{} is not a controller step", other.name())),
    };
    result.map_err(|message| StepError::Local {
        message,
        terminal: false,
    })
}

/// A local step's failure, which a retry may mend.
fn local(what: &str, path: &Path, err: impl std::fmt::Display) -> StepError {
    StepError::Local {
        message: format!("cannot {what} {}: {err}", path.display()),
        terminal: false,
    }
}

/// A local step's failure that no retry can mend.
fn terminal(message: String) -> StepError {
    StepError::Local {
        message,
        terminal: true,
    }
}

fn run_step(client: &Client, ctx: &StepContext, action: &Action) -> Result<StepDone, StepError> {
    let v = &ctx.volume;
    let rpc =
        |r: Result<(), crate::csi::Error>| r.map(|()| StepDone::default()).map_err(StepError::Rpc);
    match action {
        Action::ControllerPublish => {
            let req = v
                .controller_publish(&ctx.node_id)
                .ok_or_else(|| terminal("the volume has no capability".into()))?;
            let context = client.controller_publish(&req).map_err(StepError::Rpc)?;
            Ok(StepDone {
                publish_context: Some(context),
                ..StepDone::default()
            })
        }
        Action::NodeStage { staging: key } => {
            let staging = v
                .stagings
                .get(key)
                .ok_or_else(|| terminal(format!("no record of {key}")))?;
            let path = ctx.paths.staging(v, key);
            let skeleton = ctx.paths.staging_root(&v.plugin_id);
            make_below(&skeleton, &path, 0o700)
                .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o700)))
                .map_err(|e| local("create the staging dir", &path, e))?;
            rpc(client.node_stage(&NodeStage {
                volume_id: v.external_id.clone(),
                publish_context: v.publish_context.clone(),
                staging_target_path: ctx.for_plugin(&path),
                capability: v.with_mount_options(&staging.capability),
                secrets: v.secrets.clone(),
                volume_context: v.context.clone(),
            }))
        }
        Action::NodePublish { alloc } => {
            let claim = &v.claims[alloc];
            let target = ctx.paths.publish(v, alloc, &claim.usage);
            if let Some(parent) = target.parent() {
                let skeleton = ctx.paths.publish_root(&v.plugin_id);
                make_below(&skeleton, parent, 0o777)
                    .map_err(|e| local("create the publish dir", parent, e))?;
            }
            rpc(client.node_publish(&NodePublish {
                volume_id: v.external_id.clone(),
                publish_context: v.publish_context.clone(),
                staging_target_path: ctx
                    .protocol
                    .stage
                    .then(|| ctx.for_plugin(&ctx.paths.staging(v, &claim.staging))),
                target_path: ctx.for_plugin(&target),
                capability: v.with_mount_options(&claim.capability),
                read_only: claim.read_only,
                secrets: v.secrets.clone(),
                volume_context: v.context.clone(),
            }))
        }
        Action::BindTarget { alloc } => {
            let claim = &v.claims[alloc];
            let source = ctx.paths.publish(v, alloc, &claim.usage);
            let mount_id = bind_target(&source, claim)?;
            Ok(StepDone {
                mount_id,
                ..StepDone::default()
            })
        }
        Action::UnbindTarget { alloc } => {
            let claim = &v.claims[alloc];
            let source = ctx.paths.publish(v, alloc, &claim.usage);
            unbind_target(&source, claim)?;
            Ok(StepDone::default())
        }
        Action::NodeUnpublish { alloc } => {
            let claim = &v.claims[alloc];
            let target = ctx.paths.publish(v, alloc, &claim.usage);
            let result = client.node_unpublish(&v.external_id, &ctx.for_plugin(&target));
            let done = released_path(result, "NodeUnpublishVolume", &target, ctx.contain)?;
            // The plugin removed the target; the agent made its parents.
            remove_empty_dirs(&target, &ctx.paths.publish_root(&v.plugin_id));
            Ok(done)
        }
        Action::NodeUnstage { staging } => {
            let path = ctx.paths.staging(v, staging);
            let result = client.node_unstage(&v.external_id, &ctx.for_plugin(&path));
            let done = released_path(result, "NodeUnstageVolume", &path, ctx.contain)?;
            let _ = fs::remove_dir(&path);
            remove_empty_dirs(&path, &ctx.paths.staging_root(&v.plugin_id));
            Ok(done)
        }
        Action::ControllerUnpublish => {
            rpc(client.controller_unpublish(&v.external_id, &ctx.node_id, &v.secrets))
        }
        Action::Free { .. } => Ok(StepDone::default()),
    }
}

/// After NodeUnpublish or NodeUnstage: a plugin that answers success (or
/// NOT_FOUND, "nothing to do") has released `path`, so it must no longer
/// be a mount point. Some plugins answer so after a restart without
/// looking: the path is checked, and a mount left there is an error the
/// caller retries; with `contain` (it kept happening), the agent unmounts
/// its own path itself and says so.
fn released_path(
    result: Result<(), crate::csi::Error>,
    rpc: &'static str,
    path: &Path,
    contain: bool,
) -> Result<StepDone, StepError> {
    match result {
        Ok(()) => {}
        Err(err) if err.class == crate::csi::Class::Ignorable => {}
        Err(err) => return Err(StepError::Rpc(err)),
    }
    if !still_mounted(path)? {
        return Ok(StepDone::default());
    }
    if !contain {
        return Err(StepError::LeftMount {
            rpc,
            path: path.to_path_buf(),
        });
    }
    // The path is the agent's own (under its `csi/` dir) and the plugin
    // declared it released: whatever is stacked there comes off.
    while still_mounted(path)? {
        SysMounter
            .unmount(path, UnmountMode::Normal)
            .map_err(|e| local("unmount what the plugin left at", path, e))?;
    }
    // The plugin should have removed a publish target too.
    let _ = fs::remove_dir(path);
    Ok(StepDone {
        contained: Some(format!(
            "left a mount at {} after {rpc}; unmounted by the agent",
            path.display()
        )),
        ..StepDone::default()
    })
}

/// Whether `path` is a mount point; a path that does not exist is not.
fn still_mounted(path: &Path) -> Result<bool, StepError> {
    mount::is_mount_point_if_present(path).map_err(|e| local("check", path, e))
}

/// Makes `path`, a volume's or an alloc's dir below `skeleton` (the
/// plugin's `staging` or `per-alloc`), and the dirs between them with
/// `mode` (less the umask). The skeleton is made, with its parents, only
/// when missing, and private (0700).
fn make_below(skeleton: &Path, path: &Path, mode: u32) -> io::Result<()> {
    if !skeleton.is_dir() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(skeleton)?;
        fs::set_permissions(skeleton, fs::Permissions::from_mode(0o700))?;
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
}

/// Removes `path`'s parents while they are empty, up to (not including)
/// `root`: the skeleton stays.
fn remove_empty_dirs(path: &Path, root: &Path) {
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// Bind-mounts the published volume (`source`) at the claim's host target
/// with its propagation; read-only claims are remounted read-only. A
/// file-system volume's target is a directory, a block volume's a file
/// (0600), made when missing. A target that is already a mount point is
/// taken as this step's earlier, unconfirmed success only when it provably
/// is (see [`target::owner`]); anything else there is refused for good.
/// Answers the mount ID of the bind, to be recorded.
pub fn bind_target(source: &Path, claim: &Claim) -> Result<Option<u64>, StepError> {
    let target = claim
        .target
        .as_deref()
        .ok_or_else(|| terminal("the claim has no target".into()))?;
    let block = claim.capability.attachment_mode == crate::csi::AttachmentMode::BlockDevice;
    make_target(target, block)?;
    let mounter = SysMounter;
    match target::owner(target, claim.target_mount_id, source)
        .map_err(|e| local("check the target", target, e))?
    {
        Owner::Other(what) => {
            return Err(terminal(format!(
                "the target {} is a mount point of {what} that csi-agent did not make; it is \
                 left alone",
                target.display(),
            )))
        }
        Owner::Agent => {}
        Owner::Nobody => mounter
            .bind(source, target, true)
            .map_err(|e| local("bind-mount the target", target, e))?,
    }
    if claim.read_only {
        mounter
            .remount_read_only(target)
            .map_err(|e| local("make read-only the target", target, e))?;
    }
    mounter
        .set_propagation(target, claim.propagation)
        .map_err(|e| local("set the propagation of the target", target, e))?;
    mount::mount_id(target).map_err(|e| local("read the mount ID of the target", target, e))
}

/// Creates a missing target: a directory, or for a block volume an empty
/// regular file (0600) to bind the device node onto. An existing target of
/// the other kind is refused for good.
fn make_target(target: &Path, block: bool) -> Result<(), StepError> {
    match fs::symlink_metadata(target) {
        Ok(meta) if meta.file_type().is_symlink() => Err(terminal(format!(
            "the target {} is a symlink",
            target.display()
        ))),
        Ok(meta) if block && meta.is_dir() => Err(terminal(format!(
            "the target {} of a block volume is a directory; it must be a file or not exist",
            target.display()
        ))),
        Ok(meta) if !block && !meta.is_dir() => Err(terminal(format!(
            "the target {} is not a directory",
            target.display()
        ))),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| local("create the target's parent", parent, e))?;
            }
            if block {
                fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(target)
                    .map(drop)
                    .or_else(|e| match e.kind() {
                        io::ErrorKind::AlreadyExists => Ok(()),
                        _ => Err(e),
                    })
                    .map_err(|e| local("create the target", target, e))
            } else {
                fs::create_dir(target)
                    .or_else(|e| match e.kind() {
                        io::ErrorKind::AlreadyExists => Ok(()),
                        _ => Err(e),
                    })
                    .map_err(|e| local("create the target", target, e))
            }
        }
        Err(e) => Err(local("check the target", target, e)),
    }
}

/// Unmounts a claim's host target if the mount there is the one the agent
/// made (see [`target::owner`]); one that is not mounted is done. A mount
/// that is not the agent's is left alone and the step fails for good. A
/// target the agent created is removed once empty.
pub fn unbind_target(source: &Path, claim: &Claim) -> Result<(), StepError> {
    let Some(target) = claim.target.as_deref() else {
        return Ok(());
    };
    if fs::symlink_metadata(target).is_err() {
        // Gone already.
        return Ok(());
    }
    match target::owner(target, claim.target_mount_id, source)
        .map_err(|e| local("check the target", target, e))?
    {
        Owner::Nobody => {}
        Owner::Other(what) => {
            return Err(terminal(format!(
                "the mount at {} ({what}) is not the bind csi-agent made; it is left alone",
                target.display(),
            )))
        }
        Owner::Agent => SysMounter
            .unmount(target, UnmountMode::Normal)
            .map_err(|e| match &e {
                mount::Error::Unmount { err, .. } if err.raw_os_error() == Some(libc::EBUSY) => {
                    local("unmount the target", target, crate::error_chain(&e))
                }
                _ => terminal(format!(
                    "cannot unmount the target {}: {}",
                    target.display(),
                    crate::error_chain(&e)
                )),
            })?,
    }
    if claim.target_created && !still_mounted(target)? {
        remove_made_target(target);
    }
    Ok(())
}

/// Removes a target the agent created: an empty directory, or an empty
/// regular file.
fn remove_made_target(target: &Path) {
    match fs::symlink_metadata(target) {
        Ok(meta) if meta.is_dir() => {
            let _ = fs::remove_dir(target);
        }
        Ok(meta) if meta.is_file() && meta.len() == 0 => {
            let _ = fs::remove_file(target);
        }
        _ => {}
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("csi-agent-ops-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_skeleton_is_made_private_once_and_kept_when_a_claim_goes() {
        let dir = temp_dir("skeleton");
        let paths = Paths {
            data_dir: dir.clone(),
        };
        let skeleton = paths.publish_root("hp");
        let parent = skeleton.join("a1").join("v1");
        make_below(&skeleton, &parent, 0o777).unwrap();
        assert_eq!(mode(&paths.csi_root()), 0o700);
        assert_eq!(mode(&paths.csi_root().join("hp")), 0o700);
        assert_eq!(mode(&skeleton), 0o700);
        assert!(parent.is_dir());

        remove_empty_dirs(&parent.join("rw-file-system-x"), &skeleton);
        assert!(!skeleton.join("a1").exists(), "the alloc's dirs go");
        assert!(skeleton.is_dir(), "the skeleton stays");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dir_still_in_use_is_kept() {
        let dir = temp_dir("in-use");
        let paths = Paths {
            data_dir: dir.clone(),
        };
        let skeleton = paths.publish_root("hp");
        make_below(&skeleton, &skeleton.join("a1").join("v1"), 0o777).unwrap();
        make_below(&skeleton, &skeleton.join("a1").join("v2"), 0o777).unwrap();
        remove_empty_dirs(&skeleton.join("a1").join("v1").join("usage"), &skeleton);
        assert!(!skeleton.join("a1").join("v1").exists());
        assert!(
            skeleton.join("a1").join("v2").is_dir(),
            "another volume's dir"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
