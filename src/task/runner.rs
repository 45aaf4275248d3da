//! The life of an allocation: starting tasks in their lifecycle order
//! ([`super::lifecycle`]), exits and restarts, kill timeouts, stopping
//! (poststop tasks last), and settling as complete or failed.

use std::collections::BTreeMap;
use std::fs;
use std::time::{Instant, SystemTime};

use crossbeam_channel::bounded;

use super::cgroup;
use super::exit::Exit;
use super::leader;
use super::lifecycle::{self, Progress, Role};
use super::restart::{self, Decision};
use super::starter::Lane;
use super::volume_hook::unmount_below;
use super::{Alloc, AllocStatus, Allocs, PluginEffect, TaskState, UseState, VolumeSource};
use crate::mount::MountInfo;
use crate::plugin::{InstanceKey, Source};
use crate::spec::Driver;
use crate::units::format_duration;
use crate::volume::manager::VolumeManager;

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
        // Cleanups that waited for room go first.
        self.starter.pump();
        let live = self.allocs.values().any(|a| !a.status.is_terminal());
        if !live && !self.jobs.values().any(|j| j.purge) {
            return false;
        }
        let claims = claims_by_plugin(volumes);
        let ids: Vec<String> = self.allocs.keys().cloned().collect();
        let mut changed = self.place(now);
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
        changed |= self.template_changes_due(alloc, now) | self.enforce_max_run(alloc, now);
        let failing = alloc.tasks.iter().any(|t| t.failed);
        if alloc.stop_wanted || failing {
            return self.stop_step(alloc, volumes, registry, claims, now) || changed;
        }
        if alloc.status == AllocStatus::Pending && !alloc.placed {
            return changed;
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
        if !volumes_claimed(alloc) {
            return changed;
        }
        if alloc.status == AllocStatus::Pending {
            alloc.status = AllocStatus::Running;
            alloc.message.clear();
            changed = true;
        }
        if lifecycle::main_done(&lifecycle_view(alloc)) {
            changed |= self.stop_sidecars(alloc, now);
        }
        changed |= self.stop_for_leader(alloc, now);
        for i in 0..alloc.tasks.len() {
            let due = match alloc.tasks[i].state {
                TaskState::Pending => lifecycle::may_start(&lifecycle_view(alloc), i),
                TaskState::Restarting { at } => at <= now,
                _ => false,
            };
            if due {
                changed |= self.start_task(alloc, i, now);
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
            if alloc.status == AllocStatus::Pending {
                // No task ran, so there is nothing for poststop tasks to
                // clean up after.
                for i in 0..alloc.tasks.len() {
                    if Role::in_group(&alloc.group, i) == Role::Poststop {
                        alloc.tasks[i].state = TaskState::Dead;
                    }
                }
            }
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
            let mut held: Vec<String> = alloc
                .plugin_keys()
                .filter(|k| provided_here(k))
                .flat_map(|k| claims.get(&k.plugin_id).into_iter().flatten())
                .filter(|(_, a)| *a != alloc.id)
                .map(|(v, a)| format!("{v} by {a}"))
                .collect();
            order::sort(&mut held);
            held.dedup();
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
        leader::note_sibling_failed(alloc);
        // Poststop tasks run once the others are dead, with the volumes
        // still claimed; they are not killed.
        for i in 0..alloc.tasks.len() {
            if Role::in_group(&alloc.group, i) == Role::Poststop {
                continue;
            }
            changed |= self.kill_task(alloc, i, now);
        }
        for i in 0..alloc.tasks.len() {
            if Role::in_group(&alloc.group, i) != Role::Poststop {
                continue;
            }
            match alloc.tasks[i].state {
                TaskState::Pending => {
                    if lifecycle::may_start(&lifecycle_view(alloc), i) {
                        changed |= self.start_task(alloc, i, now);
                    }
                }
                // Not killed: it restarts per its policy, as in Nomad.
                TaskState::Restarting { at } => {
                    if at <= now {
                        changed |= self.start_task(alloc, i, now);
                    }
                }
                TaskState::Starting | TaskState::Running | TaskState::Dead => {}
            }
        }
        if alloc.tasks.iter().all(|t| t.state == TaskState::Dead) {
            changed |= self.finish(alloc, volumes);
        }
        changed
    }

    /// Task `i` is to stop: a task not started or waiting to restart is
    /// dead at once, a running one gets its `kill_signal` (SIGTERM unless
    /// it says otherwise) after its `shutdown_delay`, and SIGKILL after
    /// its `kill_timeout`.
    pub(super) fn kill_task(&mut self, alloc: &mut Alloc, i: usize, now: Instant) -> bool {
        let timeout = self.kill_timeout(&alloc.group.tasks[i]);
        let signal = alloc.group.tasks[i].kill_signal;
        let delay = alloc.group.tasks[i].shutdown_delay;
        let task = &mut alloc.tasks[i];
        match task.state {
            TaskState::Pending | TaskState::Restarting { .. } => {
                task.state = TaskState::Dead;
                true
            }
            // Its start is on a starter thread: once reported, the task
            // runs and is stopped here as any other.
            TaskState::Starting => false,
            TaskState::Running => {
                let Some(p) = &mut task.process else {
                    return false;
                };
                if p.signal_at.is_some() || p.kill_at.is_some() || p.killed {
                    return false;
                }
                if !delay.is_zero() {
                    p.signal_at = Some(now + delay);
                    task.event(
                        "killing",
                        format!(
                            "{signal} in {} (its shutdown_delay)",
                            format_duration(delay)
                        ),
                    );
                    return true;
                }
                let _ = p.handle.signal(signal.number(), &mut self.docker);
                p.kill_at = Some(now + timeout);
                task.event(
                    "killing",
                    format!("sent {signal}; SIGKILL in {}", format_duration(timeout)),
                );
                true
            }
            TaskState::Dead => false,
        }
    }

    /// The main tasks are done: the sidecars and poststart tasks that
    /// still run stop too, so that poststop tasks can run and the alloc
    /// can settle.
    fn stop_sidecars(&mut self, alloc: &mut Alloc, now: Instant) -> bool {
        let mut changed = false;
        for i in 0..alloc.tasks.len() {
            if lifecycle::stops_with_main(Role::in_group(&alloc.group, i))
                && self.kill_task(alloc, i, now)
            {
                log::info!(
                    "Alloc {}: task {} stops: the main tasks are done",
                    alloc.id,
                    alloc.tasks[i].name
                );
                changed = true;
            }
        }
        changed
    }

    /// Every task is dead: release the claims, deregister the plugins,
    /// and settle the alloc as complete or failed.
    fn finish(&mut self, alloc: &mut Alloc, volumes: &mut VolumeManager) -> bool {
        if alloc.status.is_terminal() {
            return false;
        }
        // Read only when a claim may have mounts to undo: a big job's
        // allocs stop by the thousand.
        let claimed = alloc
            .volumes
            .iter()
            .any(|v| matches!(v.state, UseState::Claimed { .. }));
        let mounts = claimed.then(MountInfo::read).and_then(Result::ok);
        for v in &mut alloc.volumes {
            if v.source != VolumeSource::Csi || v.state == UseState::Released {
                continue;
            }
            if let (UseState::Claimed { publish_path }, Some(mounts)) = (&v.state, &mounts) {
                unmount_below(mounts, publish_path);
            }
            let (reply, _answer) = bounded(1);
            volumes.release(&v.volume_id, &alloc.id, reply.into());
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
            // A stopped alloc keeps saying why it was stopped.
            if !alloc.stop_wanted {
                alloc.message.clear();
            }
            AllocStatus::Complete
        };
        log::info!("Alloc {}: {}", alloc.id, alloc.status.as_str());
        true
    }

    /// SIGKILL for tasks past their kill timeout, SIGTERM for plugins past
    /// their health timeout.
    fn escalate(&mut self, alloc: &mut Alloc, now: Instant) -> bool {
        let mut changed = false;
        for i in 0..alloc.tasks.len() {
            let kill_timeout = self.kill_timeout(&alloc.group.tasks[i]);
            let signal = alloc.group.tasks[i].kill_signal;
            let task = &mut alloc.tasks[i];
            let Some(p) = &mut task.process else { continue };
            if p.signal_at.is_some_and(|at| at <= now) {
                let _ = p.handle.signal(signal.number(), &mut self.docker);
                p.signal_at = None;
                p.kill_at = Some(now + kill_timeout);
                task.event(
                    "killing",
                    format!(
                        "sent {signal}; SIGKILL in {}",
                        format_duration(kill_timeout)
                    ),
                );
                changed = true;
                continue;
            }
            if p.kill_at.is_some_and(|at| at <= now) {
                let _ = p.handle.signal(libc::SIGKILL, &mut self.docker);
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
            if overdue && p.signal_at.is_none() && p.kill_at.is_none() && !p.killed {
                let plugin = task.plugin.as_mut().expect("checked");
                plugin.deadline = None;
                let message = format!(
                    "plugin {:?} did not become healthy within its health_timeout; killing the task",
                    plugin.key.plugin_id
                );
                log::warn!("Alloc {}: task {}: {message}", alloc.id, task.name);
                let _ = p.handle.signal(signal.number(), &mut self.docker);
                p.kill_at = Some(now + kill_timeout);
                task.event("plugin", message);
                changed = true;
            }
        }
        changed
    }

    /// A task's process ended (or never started): the restart policy
    /// decides what follows.
    pub(super) fn exited(&mut self, alloc: &mut Alloc, i: usize, exit: Exit, now: Instant) {
        let exit = self.known_exit(alloc, i, exit);
        let (exit, group) = if alloc.group.tasks[i].driver == Driver::Docker {
            (exit, None)
        } else {
            cgroup::outcome(&alloc.id, &alloc.tasks[i].name, exit)
        };
        self.follow_policy(alloc, i, exit, now);
        // A task done for good has its group removed off the loop; one
        // that restarts, before its next start.
        if let Some(group) = group {
            let task = &alloc.tasks[i].name;
            match alloc.tasks[i].state {
                TaskState::Dead => self.starter.remove_group(&alloc.id, task, group),
                _ => cgroup::remove(&alloc.id, task, &group),
            }
        }
    }

    /// What follows task `i`'s end `exit`: a restart, or its death.
    fn follow_policy(&mut self, alloc: &mut Alloc, i: usize, exit: Exit, now: Instant) {
        let policy = alloc.group.tasks[i].restart.clone();
        let role = Role::in_group(&alloc.group, i);
        let restarts_on_success = role.restarts_on_success(alloc.group.job_type);
        // A sidecar outlives no main task: once they are done, its exit
        // is final.
        let wound_down =
            lifecycle::stops_with_main(role) && lifecycle::main_done(&lifecycle_view(alloc));
        // A poststop task runs because the alloc stops: it is never
        // killed, and follows its policy.
        let stopping = role != Role::Poststop
            && (alloc.stop_wanted || wound_down || leader::ended_by_another(alloc, i));
        let driver = alloc.group.tasks[i].driver.as_str();
        count_exit(driver, &exit);
        let task = &mut alloc.tasks[i];
        let kind = match exit {
            Exit::StartFailed(_) => "failed",
            // Nomad's event type, which its users look for.
            Exit::ArtifactFailed(_) => "Failed Artifact Download",
            _ => "terminated",
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
                how: exit.describe(),
            });
        }
        self.dirty = true;
        if stopping {
            task.state = TaskState::Dead;
            return;
        }
        if task.restarts_for_template(now) {
            return;
        }
        let (decision, window) = restart::decide(
            &policy,
            task.window,
            exit.success(),
            restarts_on_success,
            SystemTime::now(),
        );
        task.window = window;
        match decision {
            Decision::Restart(delay) => {
                crate::metrics::TASK_RESTARTS.inc(&[driver]);
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
                    "{}; restart policy exhausted ({} attempts in {})",
                    exit.describe(),
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
                if let Some(exit) = p.handle.poll() {
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

    /// When the loop must next wake up for a task timer.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut at = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for alloc in self.allocs.values() {
            if alloc.status.is_terminal() {
                continue;
            }
            for (task, spec) in alloc.tasks.iter().zip(&alloc.group.tasks) {
                // A restart that is due waits for room in the starter,
                // whose next report wakes the loop.
                if let TaskState::Restarting { at: t } = task.state {
                    if t > now || self.starter.has_room(Lane::of(spec)) {
                        at(t);
                    }
                }
                if let Some(p) = &task.process {
                    for t in p.signal_at.into_iter().chain(p.kill_at) {
                        at(t);
                    }
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
            Allocs::next_alloc_timer(alloc).map(&mut at);
        }
        self.placement_retry_at().map(&mut at);
        next
    }

    /// Whether a running task was adopted after an agent restart: it is
    /// not the agent's child, so no SIGCHLD tells of its exit, and the
    /// loop must look at its start time now and then.
    pub fn watches_adopted(&self) -> bool {
        self.allocs
            .values()
            .filter(|a| !a.status.is_terminal())
            .flat_map(|a| &a.tasks)
            .any(|t| t.process.as_ref().is_some_and(|p| p.handle.needs_polling()))
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
                    self.starter.remove_dir(dir);
                }
            }
            self.jobs.remove(name);
            log::info!("Job {name}: purged");
        }
        !done.is_empty()
    }
}

/// Every task's role and progress, for [`lifecycle`]'s decisions.
fn lifecycle_view(alloc: &Alloc) -> Vec<(Role, Progress)> {
    alloc
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let progress = match t.state {
                // Poststart tasks and main tasks after a prestart sidecar
                // wait until it runs, not only until its start is handed
                // over.
                TaskState::Pending | TaskState::Starting => Progress::Waiting,
                TaskState::Running | TaskState::Restarting { .. } => Progress::Live,
                TaskState::Dead => Progress::Dead { ok: !t.failed },
            };
            (Role::in_group(&alloc.group, i), progress)
        })
        .collect()
}

/// Whether every volume of the alloc is claimed (host volumes always are).
fn volumes_claimed(alloc: &Alloc) -> bool {
    alloc.volumes.iter().all(|v| {
        matches!(v.source, VolumeSource::Host { .. }) || matches!(v.state, UseState::Claimed { .. })
    })
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
/// Counts a task's end in the metrics: its outcome, and an OOM kill.
fn count_exit(driver: &str, exit: &Exit) {
    let outcome = match exit {
        Exit::StartFailed(_) | Exit::ArtifactFailed(_) => "start_failed",
        exit if exit.success() => "success",
        _ => "failure",
    };
    crate::metrics::TASK_EXITS.inc(&[driver, outcome]);
    if matches!(
        exit,
        Exit::OomKilled { .. }
            | Exit::Container {
                oom_killed: true,
                ..
            }
    ) {
        crate::metrics::TASK_OOM_KILLS.inc(&[driver]);
    }
}
