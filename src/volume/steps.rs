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
//! a claim does not build the tree again each time. A job makes and
//! removes those while one of its RPCs is in flight where it can (see
//! [`super::chores`]).

use std::fs;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::{bounded, Sender};

use super::chores::{Chores, Dir, Tidy};
use super::controller::ControllerCalls;
use super::layout::Paths;
use super::model::{Claim, Volume};
use super::ops::{Job, OpDone, OpResult, StepDone, StepError, StepReport, Verdict};
use super::plan::{Action, Protocol};
use super::target::{self, Owner};
use crate::cluster::attachments::Attacher;
use crate::csi::rpc::Sent;
use crate::csi::types::{NodePublish, NodeStage};
use crate::csi::{Class, Client};
use crate::mount::{self, Mounter, SysMounter, UnmountMode};

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

    /// The dir `action` needs before its RPC: NodeStage its staging dir,
    /// NodePublish the parent of its target (the plugin makes the target).
    fn needed_dir(&self, action: &Action) -> Option<Dir> {
        let v = &self.volume;
        match action {
            Action::NodeStage { staging } => Some(Dir {
                skeleton: self.paths.staging_root(&v.plugin_id),
                path: self.paths.staging(v, staging),
                private: true,
            }),
            Action::NodePublish { alloc } => {
                let claim = v.claims.get(alloc)?;
                let target = self.paths.publish(v, alloc, &claim.usage);
                Some(Dir {
                    skeleton: self.paths.publish_root(&v.plugin_id),
                    path: target.parent()?.to_path_buf(),
                    private: false,
                })
            }
            _ => None,
        }
    }
}

/// A job that runs `ctx`'s steps back to back and reports each one.
pub fn steps_job(ctx: StepContext, token: u64, done: Sender<OpDone>) -> Job {
    Box::new(move |client: &Client, controller: &dyn ControllerCalls| {
        run_steps(client, controller, ctx, token, &done)
    })
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
/// The job ends without sending anything more when the loop answers
/// [`Verdict::Stop`]: the record changed under the job so that the
/// planner's next step is no longer the job's (a release came, or another
/// claim), or that step's instance is not healthy; the planner takes over
/// from there. It ends too when the loop is gone.
///
/// The job's directory chores run while its RPCs are in flight (see
/// [`super::chores`]); whatever of them is left when the job ends is done
/// before its last report, or by the loop when it stops the job.
fn run_steps(
    client: &Client,
    controller: &dyn ControllerCalls,
    mut ctx: StepContext,
    token: u64,
    done: &Sender<OpDone>,
) {
    let actions = std::mem::take(&mut ctx.actions);
    let needs = actions
        .iter()
        .enumerate()
        .filter_map(|(i, a)| ctx.needed_dir(a).map(|dir| (i, dir)))
        .collect();
    let mut chores = Chores::new(needs);
    // An RPC succeeded whose outcome is not known to be durable yet.
    let mut unconfirmed = false;
    for (i, action) in actions.iter().enumerate() {
        let kind = if action.is_rpc() { "rpc" } else { "local" };
        crate::trace::point(kind, action.name());
        let result = run_one(client, controller, &ctx, action, i, &mut chores);
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
        let last = !ok || i + 1 == actions.len();
        if last {
            chores.finish();
        }
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
            leftover: if wait {
                chores.leftover()
            } else {
                Default::default()
            },
        };
        let sent = done.send(OpDone {
            volume_id: ctx.volume.id.clone(),
            token,
            result: OpResult::Step(report),
        });
        if last {
            return;
        }
        if sent.is_err() {
            // The loop is gone.
            return chores.finish();
        }
        if let Some(resumed) = resumed {
            match resumed.recv() {
                Ok(Verdict::GoOn) => {}
                // The loop did what the report left.
                Ok(Verdict::Stop) => return,
                Err(_) => return chores.finish(),
            }
            crate::trace::point("resumed", "");
            unconfirmed = false;
        }
    }
}

/// One step: the local controller's or node's RPC, a host bind, or in a
/// cluster the controller leader's attach or detach. A release step the
/// plugin answers NOT_FOUND ("nothing to do") is done.
/// `step` is the action's index in its job, for `chores`.
fn run_one(
    client: &Client,
    controller: &dyn ControllerCalls,
    ctx: &StepContext,
    action: &Action,
    step: usize,
    chores: &mut Chores,
) -> Result<StepDone, StepError> {
    let result = match (&ctx.attacher, action) {
        (Some(attacher), Action::ControllerPublish | Action::ControllerUnpublish) => {
            // Through etcd and another host: the chores first.
            chores.meanwhile(step);
            leader_step(attacher, ctx, action)
        }
        _ => run_step(client, controller, ctx, action, step, chores),
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

fn run_step(
    client: &Client,
    controller: &dyn ControllerCalls,
    ctx: &StepContext,
    action: &Action,
    step: usize,
    chores: &mut Chores,
) -> Result<StepDone, StepError> {
    let v = &ctx.volume;
    // The dir the step needs, made now unless made ahead.
    let mut own_dir = |what: &str| {
        chores
            .own_dir(step)
            .map_err(|(path, e)| local(what, &path, e))
    };
    match action {
        Action::ControllerPublish => {
            let req = v
                .controller_publish(&ctx.node_id)
                .ok_or_else(|| terminal("the volume has no capability".into()))?;
            let context = answer(controller.send_controller_publish(&req), step, chores)
                .map_err(StepError::Rpc)?;
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
            own_dir("create the staging dir")?;
            let path = ctx.paths.staging(v, key);
            let sent = client.send_node_stage(&NodeStage {
                volume_id: v.external_id.clone(),
                publish_context: v.publish_context.clone(),
                staging_target_path: ctx.for_plugin(&path),
                capability: v.node_rpc_capability(&staging.capability, ctx.protocol.mount_group),
                secrets: v.secrets.clone(),
                volume_context: v.context.clone(),
            });
            rpc(answer(sent, step, chores))
        }
        Action::NodePublish { alloc } => {
            let claim = &v.claims[alloc];
            own_dir("create the publish dir")?;
            let target = ctx.paths.publish(v, alloc, &claim.usage);
            let sent = client.send_node_publish(&NodePublish {
                volume_id: v.external_id.clone(),
                publish_context: v.publish_context.clone(),
                staging_target_path: ctx
                    .protocol
                    .stage
                    .then(|| ctx.for_plugin(&ctx.paths.staging(v, &claim.staging))),
                target_path: ctx.for_plugin(&target),
                capability: v.node_rpc_capability(&claim.capability, ctx.protocol.mount_group),
                read_only: claim.read_only,
                secrets: v.secrets.clone(),
                volume_context: v.context.clone(),
            });
            rpc(answer(sent, step, chores))
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
            if let Some(made) = unbind_target(&source, claim)? {
                chores.tidy(Tidy::Target(made));
            }
            Ok(StepDone::default())
        }
        Action::NodeUnpublish { alloc } => {
            let claim = &v.claims[alloc];
            let target = ctx.paths.publish(v, alloc, &claim.usage);
            let sent = client.send_node_unpublish(&v.external_id, &ctx.for_plugin(&target));
            let result = answer(sent, step, chores);
            let done = released_path(result, "NodeUnpublishVolume", &target, ctx.contain)?;
            // The plugin removed the target; the agent made its parents.
            if let Some(parent) = target.parent() {
                chores.tidy(Tidy::Dir(Dir {
                    skeleton: ctx.paths.publish_root(&v.plugin_id),
                    path: parent.to_path_buf(),
                    private: false,
                }));
            }
            Ok(done)
        }
        Action::NodeUnstage { staging } => {
            let path = ctx.paths.staging(v, staging);
            let sent = client.send_node_unstage(&v.external_id, &ctx.for_plugin(&path));
            let result = answer(sent, step, chores);
            let done = released_path(result, "NodeUnstageVolume", &path, ctx.contain)?;
            chores.tidy(Tidy::Dir(Dir {
                skeleton: ctx.paths.staging_root(&v.plugin_id),
                path,
                private: true,
            }));
            Ok(done)
        }
        Action::ControllerUnpublish => rpc(answer(
            controller.send_controller_unpublish(&v.external_id, &ctx.node_id, &v.secrets),
            step,
            chores,
        )),
        Action::Free { .. } => Ok(StepDone::default()),
    }
}

/// The answer of an RPC sent for step `step`, taken once the job's chores
/// are done (see [`super::chores`]).
fn answer<T: 'static>(
    sent: Sent<T>,
    step: usize,
    chores: &mut Chores,
) -> Result<T, crate::csi::Error> {
    chores.meanwhile(step);
    sent.wait()
}

fn rpc(result: Result<(), crate::csi::Error>) -> Result<StepDone, StepError> {
    result.map(|()| StepDone::default()).map_err(StepError::Rpc)
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
/// that is not the agent's is left alone and the step fails for good.
/// Answers the target if the agent created it, to be removed (once empty).
pub fn unbind_target(source: &Path, claim: &Claim) -> Result<Option<PathBuf>, StepError> {
    let Some(target) = claim.target.as_deref() else {
        return Ok(None);
    };
    if fs::symlink_metadata(target).is_err() {
        // Gone already.
        return Ok(None);
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
    Ok((claim.target_created && !still_mounted(target)?).then(|| target.to_path_buf()))
}
