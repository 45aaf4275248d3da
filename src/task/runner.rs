//! The life of an allocation: the volume hook, starting tasks, exits and
//! restarts, stopping, and re-adoption after an agent restart.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{bounded, TryRecvError};

use super::env::{interpolate, task_env, TaskContext};
use super::exec::{self, Launch};
use super::mounts::{prepare_target, resolve_destination, DriverMount, NamespacePlan};
use super::restart::{self, Decision};
use super::{Alloc, AllocStatus, Allocs, PluginEffect, Process, TaskState, UseState, VolumeSource};
use crate::api::{ErrorKind, Response};
use crate::csi::backoff::Jitter;
use crate::csi::{Backoff, Endpoint};
use crate::mount::{MountInfo, Mounter, Propagation, SysMounter, UnmountMode};
use crate::plugin::{InstanceKey, PluginSpec, Source};
use crate::proto::agent as api;
use crate::spec::{Group, Task};
use crate::units::format_duration;
use crate::volume::manager::VolumeManager;

/// The volume hook's retry policy for refused claims.
const CLAIM_RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// How a task's process ended.
enum Exit {
    Status(ExitStatus),
    /// An adopted process went away; its status is unknown.
    Vanished,
    /// It could not be started.
    StartFailed(String),
}

impl Exit {
    fn success(&self) -> bool {
        matches!(self, Exit::Status(s) if s.success())
    }

    fn describe(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Exit::Status(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                _ => "exited".to_string(),
            },
            Exit::Vanished => "exited while the agent was not watching".to_string(),
            Exit::StartFailed(why) => format!("failed to start: {why}"),
        }
    }
}

/// Checks, at `job run`, that every `${VAR}` of a task names a variable and
/// that every destination stays inside the task dir.
pub(super) fn check_interpolation(group: &Group, task: &Task, job: &str) -> Result<(), String> {
    let alloc_dir = Path::new("/alloc/00000000");
    let ctx = TaskContext {
        alloc_id: "00000000",
        alloc_index: 0,
        job,
        group: &group.name,
        task: &task.name,
        alloc_dir,
    };
    let mut base = ctx.base();
    if task.csi_plugin.is_some() {
        base.insert(
            "CSI_ENDPOINT".into(),
            "unix:///plugins/00000000/csi.sock".into(),
        );
    }
    let env = task_env(&base, &task.env).map_err(|(key, e)| format!("env {key}: {e}"))?;
    for arg in &task.config.args {
        interpolate(arg, &env).map_err(|e| format!("config.args: {e}"))?;
    }
    for vm in &task.volume_mounts {
        let dest = interpolate(&vm.destination, &env)
            .map_err(|e| format!("volume_mount {:?}: {e}", vm.volume))?;
        resolve_destination(&ctx.task_dir(), &dest)
            .map_err(|e| format!("volume_mount {:?}: {e}", vm.volume))?;
    }
    Ok(())
}

impl Allocs {
    /// Takes every alloc as far as it can go now: claims, starts, stops,
    /// kills, restarts. Returns whether anything changed, so the agent
    /// plans and persists again.
    pub fn step(
        &mut self,
        volumes: &mut VolumeManager,
        registry: &crate::plugin::Registry,
        now: Instant,
    ) -> bool {
        let live = self.allocs.values().any(|a| !a.status.is_terminal());
        if !live && !self.jobs.values().any(|j| j.purge) {
            return false;
        }
        let claims = claims_by_plugin(volumes);
        let ids: Vec<String> = self.allocs.keys().cloned().collect();
        let mut changed = false;
        for id in ids {
            let Some(mut alloc) = self.allocs.remove(&id) else {
                continue;
            };
            changed |= self.step_alloc(&mut alloc, volumes, registry, &claims, now);
            self.allocs.insert(id, alloc);
        }
        changed |= self.purge_jobs();
        if changed {
            self.dirty = true;
        }
        changed
    }

    fn step_alloc(
        &mut self,
        alloc: &mut Alloc,
        volumes: &mut VolumeManager,
        registry: &crate::plugin::Registry,
        claims: &BTreeMap<String, Vec<(String, String)>>,
        now: Instant,
    ) -> bool {
        if alloc.status.is_terminal() {
            return false;
        }
        let mut changed = self.poll_claims(alloc, now);
        changed |= self.escalate(alloc, now);
        let failing = alloc.tasks.iter().any(|t| t.failed);
        if alloc.stop_wanted || failing {
            return self.stop_step(alloc, volumes, registry, claims, now) || changed;
        }
        if alloc.status == AllocStatus::Pending {
            if let Some(old) = &alloc.replaces {
                let old_live = self
                    .allocs
                    .get(old)
                    .is_some_and(|a| !a.status.is_terminal());
                if old_live && alloc.plugin_ids().next().is_none() {
                    let message = format!("waiting for alloc {old} to stop");
                    if alloc.message != message {
                        alloc.message = message;
                        changed = true;
                    }
                    return changed;
                }
            }
        }
        changed |= self.claim_volumes(alloc, volumes, registry, now);
        if alloc.tasks.iter().any(|t| t.failed) {
            return true;
        }
        let claimed = alloc.volumes.iter().all(|v| {
            matches!(v.source, VolumeSource::Host { .. })
                || matches!(v.state, UseState::Claimed { .. })
        });
        if !claimed {
            return changed;
        }
        if alloc.status == AllocStatus::Pending {
            alloc.status = AllocStatus::Running;
            alloc.message.clear();
            changed = true;
        }
        for i in 0..alloc.tasks.len() {
            let due = match alloc.tasks[i].state {
                TaskState::Pending => true,
                TaskState::Restarting { at } => at <= now,
                _ => false,
            };
            if due {
                self.start_task(alloc, i, now);
                changed = true;
            }
        }
        if alloc.tasks.iter().all(|t| t.state == TaskState::Dead) {
            changed |= self.finish(alloc, volumes);
        }
        changed
    }

    /// Stopping (or failing): kill what runs, cancel restarts, and once
    /// every task is dead, release the claims. An alloc that provides a
    /// plugin waits first for the claims on that plugin's volumes.
    fn stop_step(
        &mut self,
        alloc: &mut Alloc,
        volumes: &mut VolumeManager,
        registry: &crate::plugin::Registry,
        claims: &BTreeMap<String, Vec<(String, String)>>,
        now: Instant,
    ) -> bool {
        let mut changed = false;
        if alloc.status != AllocStatus::Stopping {
            alloc.status = AllocStatus::Stopping;
            changed = true;
        }
        let failing = alloc.tasks.iter().any(|t| t.failed);
        if alloc.stop_wanted && !failing {
            // Claims on a plugin another alloc now provides do not hold
            // this one back (a replaced plugin alloc).
            let provided_here = |key: &InstanceKey| match registry.get(key).map(|r| &r.spec.source)
            {
                Some(Source::Task {
                    alloc: provider, ..
                }) => *provider == alloc.id,
                _ => true,
            };
            let held: Vec<String> = alloc
                .plugin_keys()
                .filter(|k| provided_here(k))
                .flat_map(|k| claims.get(&k.plugin_id).into_iter().flatten())
                .filter(|(_, a)| *a != alloc.id)
                .map(|(v, a)| format!("{v} by {a}"))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            if !held.is_empty() {
                let message = format!(
                    "waiting for the claims on its plugin's volumes to be released: {}",
                    held.join(", ")
                );
                if alloc.message != message {
                    log::info!("Alloc {}: {message}", alloc.id);
                    alloc.message = message;
                    changed = true;
                }
                return changed;
            }
        }
        for task in &mut alloc.tasks {
            match task.state {
                TaskState::Pending | TaskState::Restarting { .. } => {
                    task.state = TaskState::Dead;
                    changed = true;
                }
                TaskState::Running => {
                    let timeout = alloc
                        .group
                        .tasks
                        .iter()
                        .find(|t| t.name == task.name)
                        .map_or(Duration::from_secs(5), |t| t.kill_timeout);
                    if let Some(p) = &mut task.process {
                        if p.kill_at.is_none() && !p.killed {
                            let _ = exec::signal_group(p.pid, libc::SIGTERM);
                            p.kill_at = Some(now + timeout);
                            task.event(
                                "killing",
                                format!("sent SIGTERM; SIGKILL in {}", format_duration(timeout)),
                            );
                            changed = true;
                        }
                    }
                }
                TaskState::Dead => {}
            }
        }
        if alloc.tasks.iter().all(|t| t.state == TaskState::Dead) {
            changed |= self.finish(alloc, volumes);
        }
        changed
    }

    /// Every task is dead: release the claims, deregister the plugins,
    /// and settle the alloc as complete or failed.
    fn finish(&mut self, alloc: &mut Alloc, volumes: &mut VolumeManager) -> bool {
        if alloc.status.is_terminal() {
            return false;
        }
        let mounts = MountInfo::read().ok();
        for v in &mut alloc.volumes {
            if v.source != VolumeSource::Csi || v.state == UseState::Released {
                continue;
            }
            if let (UseState::Claimed { publish_path }, Some(mounts)) = (&v.state, &mounts) {
                unmount_below(mounts, publish_path);
            }
            let (reply, _answer) = bounded(1);
            volumes.release(&v.volume_id, &alloc.id, reply);
            v.state = UseState::Released;
            v.answer = None;
        }
        for task in &alloc.tasks {
            if let Some(plugin) = &task.plugin {
                self.effects.push(PluginEffect::Stop {
                    alloc: alloc.id.clone(),
                    task: task.name.clone(),
                    key: plugin.key.clone(),
                });
            }
        }
        if alloc.plugin_ids().next().is_some() {
            let _ = fs::remove_dir_all(self.plugin_socket_dir(&alloc.id));
        }
        let failed = alloc.tasks.iter().find(|t| t.failed);
        alloc.status = if let Some(task) = failed {
            if alloc.message.is_empty() || alloc.stop_wanted {
                alloc.message = format!("task {:?} failed", task.name);
            }
            AllocStatus::Failed
        } else {
            alloc.message.clear();
            AllocStatus::Complete
        };
        log::info!("Alloc {}: {}", alloc.id, alloc.status.as_str());
        true
    }

    /// The volume hook: claims what is not claimed yet, when its retry is
    /// due.
    fn claim_volumes(
        &mut self,
        alloc: &mut Alloc,
        volumes: &mut VolumeManager,
        registry: &crate::plugin::Registry,
        now: Instant,
    ) -> bool {
        let mut changed = false;
        for v in &mut alloc.volumes {
            if v.source != VolumeSource::Csi || v.state != UseState::Unclaimed {
                continue;
            }
            if v.retry_at.is_some_and(|at| at > now) {
                continue;
            }
            let (reply, answer) = bounded(1);
            let req = api::VolumeClaimRequest {
                volume_id: v.volume_id.clone(),
                alloc_id: alloc.id.clone(),
                read_only: v.read_only,
                ..Default::default()
            };
            volumes.claim(&req, reply, registry, now);
            v.state = UseState::Claiming;
            v.answer = Some(answer);
            v.retry_at = None;
            changed = true;
        }
        changed
    }

    /// Reads the answers to the claims in flight.
    fn poll_claims(&mut self, alloc: &mut Alloc, now: Instant) -> bool {
        let mut changed = false;
        let mut events = Vec::new();
        let mut fatal = None;
        for v in &mut alloc.volumes {
            let Some(answer) = &v.answer else { continue };
            let result = match answer.try_recv() {
                Err(TryRecvError::Empty) => continue,
                Ok(result) => result,
                Err(TryRecvError::Disconnected) => Err(crate::api::ApiError::new(
                    ErrorKind::Unavailable,
                    "the claim was dropped",
                )),
            };
            v.answer = None;
            changed = true;
            match result {
                Ok(Response::VolumeClaim(resp)) => {
                    v.state = UseState::Claimed {
                        publish_path: PathBuf::from(resp.publish_path),
                    };
                    v.failures = 0;
                    v.message.clear();
                    events.push(format!("claimed volume {:?}", v.volume_id));
                }
                Ok(_) => unreachable!("a claim is answered with a claim"),
                Err(err) => {
                    let retryable = matches!(
                        err.kind,
                        ErrorKind::FailedPrecondition
                            | ErrorKind::Unavailable
                            | ErrorKind::DeadlineExceeded
                            | ErrorKind::Internal
                    );
                    v.message = err.message.clone();
                    if retryable && !alloc.stop_wanted {
                        let delay = CLAIM_RETRY.delay(v.failures, self.jitter.unit());
                        v.failures += 1;
                        v.state = UseState::Unclaimed;
                        v.retry_at = Some(now + delay);
                        events.push(format!(
                            "claim of volume {:?} refused: {}; retrying in {}",
                            v.volume_id,
                            err.message,
                            format_duration(delay)
                        ));
                    } else {
                        v.state = UseState::Released;
                        if !alloc.stop_wanted {
                            fatal = Some(format!(
                                "claim of volume {:?} failed: {}",
                                v.volume_id, err.message
                            ));
                        }
                    }
                }
            }
        }
        for message in events {
            for task in &mut alloc.tasks {
                task.event("volumes", message.clone());
            }
        }
        if let Some(message) = fatal {
            log::warn!("Alloc {}: {message}", alloc.id);
            alloc.message = message.clone();
            for task in &mut alloc.tasks {
                task.event("failed", message.clone());
                if task.state != TaskState::Running {
                    task.state = TaskState::Dead;
                }
                task.failed = true;
            }
        }
        changed
    }

    /// SIGKILL for tasks past their kill timeout, SIGTERM for plugins past
    /// their health timeout.
    fn escalate(&mut self, alloc: &mut Alloc, now: Instant) -> bool {
        let mut changed = false;
        for i in 0..alloc.tasks.len() {
            let kill_timeout = alloc.group.tasks[i].kill_timeout;
            let task = &mut alloc.tasks[i];
            let Some(p) = &mut task.process else { continue };
            if p.kill_at.is_some_and(|at| at <= now) {
                let _ = exec::signal_group(p.pid, libc::SIGKILL);
                p.kill_at = None;
                p.killed = true;
                task.event("killed", "sent SIGKILL: the task outlived its kill_timeout");
                changed = true;
                continue;
            }
            let overdue = task
                .plugin
                .as_ref()
                .is_some_and(|pl| !pl.healthy && pl.deadline.is_some_and(|d| d <= now));
            if overdue && p.kill_at.is_none() && !p.killed {
                let plugin = task.plugin.as_mut().expect("checked");
                plugin.deadline = None;
                let message = format!(
                    "plugin {:?} did not become healthy within its health_timeout; killing the task",
                    plugin.key.plugin_id
                );
                log::warn!("Alloc {}: task {}: {message}", alloc.id, task.name);
                let _ = exec::signal_group(p.pid, libc::SIGTERM);
                p.kill_at = Some(now + kill_timeout);
                task.event("plugin", message);
                changed = true;
            }
        }
        changed
    }

    /// Starts task `i` of `alloc`; a failure to start counts as an exit.
    fn start_task(&mut self, alloc: &mut Alloc, i: usize, now: Instant) {
        match self.launch(alloc, i) {
            Ok((child, spec)) => {
                let pid = child.id();
                let start_ticks = exec::start_ticks(pid).unwrap_or(0);
                let task = &mut alloc.tasks[i];
                task.process = Some(Process {
                    pid,
                    start_ticks,
                    child: Some(child),
                    kill_at: None,
                    killed: false,
                });
                task.state = TaskState::Running;
                task.event("started", format!("started (pid {pid})"));
                log::info!("Alloc {}: task {} started (pid {pid})", alloc.id, task.name);
                if let (Some(plugin), Some((spec, health_timeout))) = (&mut task.plugin, spec) {
                    plugin.healthy = false;
                    plugin.deadline = Some(now + health_timeout);
                    self.effects.push(PluginEffect::Start {
                        alloc: alloc.id.clone(),
                        task: task.name.clone(),
                        spec,
                        health_timeout,
                    });
                }
            }
            Err(why) => {
                log::warn!("Alloc {}: task {}: {why}", alloc.id, alloc.tasks[i].name);
                self.exited(alloc, i, Exit::StartFailed(why), now);
            }
        }
    }

    /// Prepares the task dir, the environment and the mounts, and spawns
    /// the task; for a plugin task, also the spec the agent registers.
    #[allow(clippy::type_complexity)]
    fn launch(
        &mut self,
        alloc: &Alloc,
        i: usize,
    ) -> Result<(std::process::Child, Option<(PluginSpec, Duration)>), String> {
        let spec = &alloc.group.tasks[i];
        let alloc_dir = self.alloc_dir(&alloc.id);
        let ctx = TaskContext {
            alloc_id: &alloc.id,
            alloc_index: alloc.index,
            job: &alloc.job,
            group: &alloc.group.name,
            task: &spec.name,
            alloc_dir: &alloc_dir,
        };
        let task_dir = ctx.task_dir();
        let user = match &spec.user {
            Some(name) => Some(exec::lookup_user(name).map_err(|e| format!("user {name:?}: {e}"))?),
            None => None,
        };
        make_dir(&alloc_dir, 0o711)?;
        make_dir(&alloc_dir.join("alloc"), 0o755)?;
        make_dir(&task_dir, 0o755)?;
        for (dir, mode) in [
            ("local", 0o755),
            ("secrets", 0o700),
            ("tmp", 0o1777),
            ("logs", 0o755),
        ] {
            let path = task_dir.join(dir);
            make_dir(&path, mode)?;
            if let Some(user) = user {
                chown(&path, user)?;
            }
        }
        let socket_dir = self.plugin_socket_dir(&alloc.id);
        let env = self.task_environment(alloc, i)?;
        let args = spec
            .config
            .args
            .iter()
            .map(|a| interpolate(a, &env))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("config.args: {e}"))?;
        let mut mounts = Vec::new();
        for vm in &spec.volume_mounts {
            let used = alloc
                .volumes
                .iter()
                .find(|v| v.alias == vm.volume)
                .ok_or_else(|| format!("volume_mount {:?}: no such group volume", vm.volume))?;
            let source = match (&used.source, &used.state) {
                (VolumeSource::Host { path }, _) => path.clone(),
                (VolumeSource::Csi, UseState::Claimed { publish_path }) => publish_path.clone(),
                _ => return Err(format!("volume {:?} is not claimed", used.volume_id)),
            };
            let dest = interpolate(&vm.destination, &env)
                .map_err(|e| format!("volume_mount {:?}: {e}", vm.volume))?;
            let target = resolve_destination(&task_dir, &dest).map_err(|e| e.to_string())?;
            prepare_target(&task_dir, &dest, &target, source.is_dir())
                .map_err(|e| format!("volume_mount {:?}: {}", vm.volume, crate::error_chain(&e)))?;
            if vm.propagation != Propagation::Private && used.source == VolumeSource::Csi {
                make_shared(&source)?;
            }
            mounts.push(DriverMount {
                source,
                target,
                read_only: vm.read_only || used.read_only,
                propagation: vm.propagation,
            });
        }
        let mut keep = Vec::new();
        let plugin = plugin_spec(alloc, i, &env)?;
        if let (Some(p), Some((registered, _))) = (&spec.csi_plugin, &plugin) {
            let root = self.data_dir.join("csi");
            ensure_shared_root(&root)?;
            make_dir(&root.join(&p.id), 0o700)?;
            keep.push(root);
            make_dir(&socket_dir, 0o700)?;
            if let Some(user) = user {
                chown(&socket_dir, user)?;
            }
            let _ = fs::remove_file(registered.endpoint.path());
        }
        let host = MountInfo::read().map_err(|e| e.to_string())?;
        let hide = vec![self.data_dir.join(crate::api::SOCKET_NAME)];
        let launch = Launch {
            command: spec.config.command.clone(),
            args,
            env,
            cwd: task_dir.clone(),
            stdout: task_dir.join("logs/stdout"),
            stderr: task_dir.join("logs/stderr"),
            pid_file: alloc_dir.join(format!("{}.pid", spec.name)),
            user,
            namespace: NamespacePlan::new(&host, keep, mounts, hide),
        };
        let child = exec::spawn(&launch).map_err(|e| crate::error_chain(&e))?;
        Ok((child, plugin))
    }

    /// The whole environment of task `i` of `alloc`: the agent's variables
    /// (with a plugin task's `CSI_ENDPOINT`), then the task's `env` block.
    fn task_environment(
        &self,
        alloc: &Alloc,
        i: usize,
    ) -> Result<BTreeMap<String, String>, String> {
        let spec = &alloc.group.tasks[i];
        let alloc_dir = self.alloc_dir(&alloc.id);
        let ctx = TaskContext {
            alloc_id: &alloc.id,
            alloc_index: alloc.index,
            job: &alloc.job,
            group: &alloc.group.name,
            task: &spec.name,
            alloc_dir: &alloc_dir,
        };
        let mut base = ctx.base();
        if spec.csi_plugin.is_some() {
            let socket = self.plugin_socket_dir(&alloc.id).join("csi.sock");
            base.insert(
                "CSI_ENDPOINT".into(),
                format!("unix://{}", socket.display()),
            );
        }
        task_env(&base, &spec.env).map_err(|(key, e)| format!("env {key}: {e}"))
    }

    /// A task's process ended (or never started): the restart policy
    /// decides what follows.
    fn exited(&mut self, alloc: &mut Alloc, i: usize, exit: Exit, now: Instant) {
        let policy = alloc.group.restart.clone();
        let stopping = alloc.stop_wanted || alloc.tasks.iter().any(|t| t.failed);
        let task = &mut alloc.tasks[i];
        let kind = if matches!(exit, Exit::StartFailed(_)) {
            "failed"
        } else {
            "terminated"
        };
        task.event(kind, exit.describe());
        task.process = None;
        if let Some(plugin) = &mut task.plugin {
            plugin.healthy = false;
            plugin.deadline = None;
            self.effects.push(PluginEffect::Exited {
                alloc: alloc.id.clone(),
                task: task.name.clone(),
                key: plugin.key.clone(),
            });
        }
        self.dirty = true;
        if stopping {
            task.state = TaskState::Dead;
            return;
        }
        let (decision, window) =
            restart::decide(&policy, task.window, exit.success(), SystemTime::now());
        task.window = window;
        match decision {
            Decision::Restart(delay) => {
                task.restarts += 1;
                task.state = TaskState::Restarting { at: now + delay };
                task.event(
                    "restarting",
                    format!("restart {} in {}", task.restarts, format_duration(delay)),
                );
            }
            Decision::Complete => {
                task.state = TaskState::Dead;
                task.event("completed", "the task finished successfully");
            }
            Decision::Fail => {
                task.state = TaskState::Dead;
                task.failed = true;
                let message = format!(
                    "restart policy exhausted ({} attempts in {})",
                    policy.attempts,
                    format_duration(policy.interval)
                );
                task.event("failed", message.clone());
                alloc.message = format!("task {:?} failed: {message}", task.name);
            }
        }
    }

    /// Notices tasks whose process ended: children by `waitpid`, adopted
    /// processes by their start time going away.
    pub fn reap(&mut self, now: Instant) -> bool {
        let mut exits = Vec::new();
        for alloc in self.allocs.values_mut() {
            for (i, task) in alloc.tasks.iter_mut().enumerate() {
                let Some(p) = &mut task.process else { continue };
                let exit = match &mut p.child {
                    Some(child) => match child.try_wait() {
                        Ok(Some(status)) => Some(Exit::Status(status)),
                        Ok(None) => None,
                        Err(_) => Some(Exit::Vanished),
                    },
                    None => {
                        (exec::start_ticks(p.pid) != Some(p.start_ticks)).then_some(Exit::Vanished)
                    }
                };
                if let Some(exit) = exit {
                    exits.push((alloc.id.clone(), i, exit));
                }
            }
        }
        let reaped = !exits.is_empty();
        for (id, i, exit) in exits {
            let Some(mut alloc) = self.allocs.remove(&id) else {
                continue;
            };
            log::info!(
                "Alloc {id}: task {} {}",
                alloc.tasks[i].name,
                exit.describe()
            );
            self.exited(&mut alloc, i, exit, now);
            self.allocs.insert(id, alloc);
        }
        reaped
    }

    /// After a restart: adopt the processes that still run, and send the
    /// others through their restart policy.
    pub(super) fn readopt(&mut self, id: &str) {
        let Some(mut alloc) = self.allocs.remove(id) else {
            return;
        };
        let now = Instant::now();
        if !alloc.status.is_terminal() {
            for i in 0..alloc.tasks.len() {
                if alloc.tasks[i].state == TaskState::Dead {
                    continue;
                }
                let pid_file = self
                    .alloc_dir(id)
                    .join(format!("{}.pid", alloc.tasks[i].name));
                let plugin_start = self
                    .task_environment(&alloc, i)
                    .and_then(|env| plugin_spec(&alloc, i, &env));
                let task = &mut alloc.tasks[i];
                let recorded = task.process.as_ref().map(|p| (p.pid, p.start_ticks));
                let alive = match recorded {
                    Some((pid, ticks)) if pid != 0 && ticks != 0 => {
                        (exec::start_ticks(pid) == Some(ticks)).then_some((pid, ticks))
                    }
                    _ => exec::read_pid_file(&pid_file)
                        .filter(|pid| {
                            exec::has_env(*pid, "CSI_AGENT_ALLOC_ID", id)
                                && exec::has_env(*pid, "NOMAD_TASK_NAME", &task.name)
                        })
                        .and_then(|pid| exec::start_ticks(pid).map(|t| (pid, t))),
                };
                match alive {
                    Some((pid, start_ticks)) => {
                        task.process = Some(Process {
                            pid,
                            start_ticks,
                            child: None,
                            kill_at: None,
                            killed: false,
                        });
                        task.state = TaskState::Running;
                        task.event(
                            "adopted",
                            format!("re-adopted pid {pid} after an agent restart"),
                        );
                        log::info!("Alloc {id}: re-adopted task {} (pid {pid})", task.name);
                        match (&mut task.plugin, plugin_start) {
                            (Some(plugin), Ok(Some((spec, health_timeout)))) => {
                                plugin.healthy = false;
                                plugin.deadline = Some(now + health_timeout);
                                self.effects.push(PluginEffect::Start {
                                    alloc: id.to_string(),
                                    task: task.name.clone(),
                                    spec,
                                    health_timeout,
                                });
                            }
                            (Some(_), Err(err)) => log::error!(
                                "Alloc {id}: cannot watch the plugin of task {}: {err}",
                                task.name
                            ),
                            _ => {}
                        }
                    }
                    None if task.state == TaskState::Running => {
                        self.exited(&mut alloc, i, Exit::Vanished, now);
                    }
                    None => {}
                }
            }
        }
        self.allocs.insert(id.to_string(), alloc);
    }

    /// When the loop must next wake up for a task timer.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut at = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for alloc in self.allocs.values() {
            if alloc.status.is_terminal() {
                continue;
            }
            for task in &alloc.tasks {
                if let TaskState::Restarting { at: t } = task.state {
                    at(t);
                }
                if let Some(t) = task.process.as_ref().and_then(|p| p.kill_at) {
                    at(t);
                }
                if let Some(t) = task.plugin.as_ref().and_then(|p| p.deadline) {
                    at(t);
                }
            }
            for v in &alloc.volumes {
                if let Some(t) = v.retry_at {
                    at(t);
                }
            }
        }
        next
    }

    /// The agent registered a task's plugin: it is healthy. An alloc that
    /// replaces another stops the old one once all its plugins are.
    pub fn plugin_healthy(&mut self, alloc_id: &str, task: &str) {
        let Some(alloc) = self.allocs.get_mut(alloc_id) else {
            return;
        };
        if let Some(plugin) = alloc.task_mut(task).and_then(|t| t.plugin.as_mut()) {
            plugin.healthy = true;
            plugin.deadline = None;
        }
        let all_healthy = alloc
            .tasks
            .iter()
            .all(|t| t.plugin.as_ref().map_or(true, |p| p.healthy));
        if all_healthy {
            if let Some(old) = alloc.replaces.clone() {
                self.stop_alloc(&old, &format!("replaced by alloc {alloc_id}"));
            }
        }
        self.dirty = true;
    }

    /// A health change of a task's registered plugin, as a task event.
    pub fn plugin_event(&mut self, alloc_id: &str, task: &str, message: String) {
        if let Some(task) = self.allocs.get_mut(alloc_id).and_then(|a| a.task_mut(task)) {
            task.event("plugin", message);
            self.dirty = true;
        }
    }

    /// Forgets purged jobs whose allocations are all done, with their dirs.
    fn purge_jobs(&mut self) -> bool {
        let done: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.purge)
            .filter(|j| {
                self.allocs
                    .values()
                    .all(|a| a.job != j.name || a.status.is_terminal())
            })
            .map(|j| j.name.clone())
            .collect();
        if done.is_empty() {
            return false;
        }
        let mounts = MountInfo::read().ok();
        for name in &done {
            let ids: Vec<String> = self
                .allocs
                .values()
                .filter(|a| a.job == *name)
                .map(|a| a.id.clone())
                .collect();
            for id in ids {
                self.allocs.remove(&id);
                let dir = self.alloc_dir(&id);
                let clear = mounts
                    .as_ref()
                    .is_some_and(|m| m.under(&dir).next().is_none());
                if clear {
                    let _ = fs::remove_dir_all(&dir);
                }
            }
            self.jobs.remove(name);
            log::info!("Job {name}: purged");
        }
        !done.is_empty()
    }
}

/// What the agent registers for task `i` of `alloc` if it is a plugin,
/// with its health timeout; the socket is the task's `CSI_ENDPOINT`.
fn plugin_spec(
    alloc: &Alloc,
    i: usize,
    env: &BTreeMap<String, String>,
) -> Result<Option<(PluginSpec, Duration)>, String> {
    let spec = &alloc.group.tasks[i];
    let Some(csi) = &spec.csi_plugin else {
        return Ok(None);
    };
    let endpoint: Endpoint = env["CSI_ENDPOINT"]
        .parse()
        .map_err(|e| format!("CSI_ENDPOINT: {e}"))?;
    let registered = PluginSpec {
        id: csi.id.clone(),
        endpoint,
        plugin_type: csi.plugin_type,
        source: Source::Task {
            alloc: alloc.id.clone(),
            task: spec.name.clone(),
        },
    };
    Ok(Some((registered, csi.health_timeout)))
}

/// The claims on each plugin's volumes: plugin ID → (volume, alloc).
fn claims_by_plugin(volumes: &VolumeManager) -> BTreeMap<String, Vec<(String, String)>> {
    let mut claims: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for v in volumes.volumes() {
        for alloc in v.claims.keys() {
            claims
                .entry(v.plugin_id.clone())
                .or_default()
                .push((v.id.clone(), alloc.clone()));
        }
    }
    claims
}

fn make_dir(path: &Path, mode: u32) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(mode)))
        .map_err(|e| format!("cannot create {}: {e}", path.display()))
}

fn chown(path: &Path, user: exec::User) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
        .map_err(|e| format!("cannot give {} to uid {}: {e}", path.display(), user.uid))
}

/// Makes the host's mount at `path` shared, so a task's slave or shared
/// bind of it receives (and for shared, sends) mount events.
fn make_shared(path: &Path) -> Result<(), String> {
    let info = MountInfo::read().map_err(|e| e.to_string())?;
    match info.get(path) {
        Some(m) if m.shared_peer_group().is_some() => Ok(()),
        Some(_) => SysMounter
            .set_propagation(path, Propagation::Bidirectional)
            .map_err(|e| crate::error_chain(&e)),
        None => Err(format!("{} is not a mount point", path.display())),
    }
}

/// The agent's `csi/` root as a shared mount of its own, so mounts a
/// plugin task makes under it (in its namespace) appear on the host.
fn ensure_shared_root(root: &Path) -> Result<(), String> {
    make_dir(root, 0o700)?;
    let info = MountInfo::read().map_err(|e| e.to_string())?;
    if info.get(root).is_none() {
        SysMounter
            .bind(root, root, false)
            .map_err(|e| crate::error_chain(&e))?;
    }
    make_shared(root)
}

/// Unmounts, deepest first, whatever a task mounted inside a volume it
/// shared with the host (`bidirectional`): the volume's own unpublish
/// would fail on them.
fn unmount_below(mounts: &MountInfo, publish_path: &Path) {
    let below: BTreeSet<PathBuf> = mounts
        .under(publish_path)
        .map(|m| m.mount_point.clone())
        .filter(|p| p != publish_path)
        .collect();
    for path in below.iter().rev() {
        log::info!(
            "Unmounting {}: a task mounted it inside its volume",
            path.display()
        );
        if let Err(err) = SysMounter.unmount(path, UnmountMode::Detach) {
            log::warn!("Cannot unmount {}: {err}", path.display());
        }
    }
}
