//! What the snapshot keeps of jobs and allocs, loading it back, and
//! re-adopting the tasks that kept running while the agent was away.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::docker;
use super::driver::Handle;
use super::exec;
use super::exit::Exit;
use super::periodic::{child_spec, ChildOf};
use super::plugin_endpoint::plugin_spec;
use super::restart::Window;
use super::{
    Alloc, AllocStatus, Allocs, JobEntry, PluginEffect, PluginRun, Process, TaskRun, TaskState,
    UseState,
};
use crate::plugin::fingerprint::{from_unix_ms, unix_ms};
use crate::plugin::{InstanceKey, PluginSpec};
use crate::proto::state as pb;
use crate::spec::{Driver, Job, JobInputs};

impl Allocs {
    pub fn jobs_to_proto(&self) -> Vec<pb::Job> {
        self.jobs
            .values()
            .map(|j| pb::Job {
                name: j.name.clone(),
                file: j.file.clone(),
                hcl: j.hcl.clone(),
                inputs: inputs_to_proto(&j.inputs),
                submitted_unix_ms: unix_ms(j.submitted),
                stop_wanted: j.stop_wanted,
                purge: j.purge,
                parent: j
                    .child
                    .as_ref()
                    .map(|c| c.parent.clone())
                    .unwrap_or_default(),
                last_launch_unix: j.last_launch.unwrap_or(0),
                payload: j
                    .child
                    .as_ref()
                    .map(|c| c.payload.clone())
                    .unwrap_or_default(),
                dispatch_meta: j
                    .child
                    .iter()
                    .flat_map(|c| &c.meta)
                    .map(|(name, text)| pb::NamedText {
                        name: name.clone(),
                        text: text.clone(),
                        ..Default::default()
                    })
                    .collect(),
                modify_index: j.modify_index,
                ..Default::default()
            })
            .collect()
    }

    /// The last job modify index given out, for the snapshot.
    pub fn job_index(&self) -> u64 {
        self.job_index
    }

    /// Takes the snapshot's last job modify index, after [`Allocs::restore`]:
    /// no index given out before is given again (a snapshot from before
    /// the index was kept starts after its jobs' own).
    pub fn restore_job_index(&mut self, index: u64) {
        let highest = self.jobs.values().map(|j| j.modify_index).max();
        self.job_index = index.max(highest.unwrap_or(0)).max(self.job_index);
    }

    pub fn allocs_to_proto(&self) -> Vec<pb::Alloc> {
        self.allocs
            .values()
            .map(|a| pb::Alloc {
                id: a.id.clone(),
                job: a.job.clone(),
                group: a.group.name.clone(),
                index: a.index,
                stop_wanted: a.stop_wanted,
                status: a.status.as_str().to_string(),
                message: a.message.clone(),
                tasks: a
                    .tasks
                    .iter()
                    .map(|t| pb::Task {
                        name: t.name.clone(),
                        state: t.state.as_str().to_string(),
                        failed: t.failed,
                        pid: t.process.as_ref().map_or(0, |p| p.handle.pid()),
                        start_ticks: t.process.as_ref().map_or(0, |p| p.handle.start_ticks()),
                        restarts: t.restarts,
                        restart_window_unix_ms: t.window.map_or(0, |w| unix_ms(w.started)),
                        restart_window_count: t.window.map_or(0, |w| w.restarts),
                        events: t.events.iter().map(event_to_proto).collect(),
                        ..Default::default()
                    })
                    .collect(),
                created_unix_ms: unix_ms(a.created),
                job_hcl: a.job_hcl.clone(),
                job_file: a.job_file.clone(),
                job_inputs: inputs_to_proto(&a.job_inputs),
                replaces: a.replaces.clone().unwrap_or_default(),
                placed: a.placed,
                max_run_since_unix_ms: a.max_run.since.map_or(0, unix_ms),
                ports: a
                    .ports
                    .iter()
                    .map(|p| pb::AllocPort {
                        label: p.label.clone(),
                        host: u32::from(p.host),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect()
    }

    /// Loads what a snapshot kept. Records that no longer decode are
    /// logged and dropped.
    pub fn restore(&mut self, jobs: &[pb::Job], allocs: &[pb::Alloc]) {
        for j in jobs {
            let inputs = inputs_from_proto(&j.inputs);
            match Job::decode_with(&j.hcl, &j.file, &inputs) {
                Ok(decoded) => {
                    let child = (!j.parent.is_empty()).then(|| ChildOf {
                        parent: j.parent.clone(),
                        payload: j.payload.clone(),
                        meta: order::map(
                            j.dispatch_meta
                                .iter()
                                .map(|m| (m.name.clone(), m.text.clone())),
                        ),
                    });
                    let spec = match &child {
                        Some(_) => child_spec(&decoded.spec, &j.name),
                        None => decoded.spec,
                    };
                    self.jobs.insert(
                        j.name.clone(),
                        JobEntry {
                            name: j.name.clone(),
                            file: j.file.clone(),
                            hcl: j.hcl.clone(),
                            inputs,
                            last_launch: (j.last_launch_unix != 0).then_some(j.last_launch_unix),
                            spec,
                            submitted: from_unix_ms(j.submitted_unix_ms),
                            stop_wanted: j.stop_wanted,
                            purge: j.purge,
                            child,
                            next_launch: None,
                            modify_index: j.modify_index,
                        },
                    );
                }
                Err(err) => log::error!("Dropping job {:?} of the snapshot: {err}", j.name),
            }
        }
        for a in allocs {
            let job_inputs = inputs_from_proto(&a.job_inputs);
            let group = Job::decode_with(&a.job_hcl, &a.job_file, &job_inputs)
                .ok()
                .and_then(|d| d.spec.groups.into_iter().find(|g| g.name == a.group));
            let Some(group) = group else {
                log::error!(
                    "Dropping alloc {} of the snapshot: its job no longer decodes",
                    a.id
                );
                continue;
            };
            let mut alloc = Alloc {
                id: a.id.clone(),
                job: a.job.clone(),
                index: a.index,
                job_hcl: a.job_hcl.clone(),
                job_file: a.job_file.clone(),
                job_inputs,
                status: AllocStatus::parse(&a.status),
                stop_wanted: a.stop_wanted,
                message: a.message.clone(),
                tasks: Vec::new(),
                volumes: self.volume_uses(&group, a.index),
                created: from_unix_ms(a.created_unix_ms),
                replaces: (!a.replaces.is_empty()).then(|| a.replaces.clone()),
                // Before placement was kept, an alloc past pending was placed.
                placed: a.placed || AllocStatus::parse(&a.status) != AllocStatus::Pending,
                max_run: super::max_run::Bound::restored(
                    (a.max_run_since_unix_ms != 0).then(|| from_unix_ms(a.max_run_since_unix_ms)),
                    group.max_run_duration,
                    std::time::Instant::now(),
                ),
                ports: a
                    .ports
                    .iter()
                    .filter_map(|p| {
                        Some(super::ports::AllocPort {
                            label: p.label.clone(),
                            host: u16::try_from(p.host).ok()?,
                        })
                    })
                    .collect(),
                group,
            };
            if alloc.status.is_terminal() {
                for v in &mut alloc.volumes {
                    v.state = UseState::Released;
                }
            }
            for spec in &alloc.group.tasks {
                let saved = a.tasks.iter().find(|t| t.name == spec.name);
                let mut task = TaskRun {
                    name: spec.name.clone(),
                    key: format!("{}/{}/{}", alloc.job, alloc.id, spec.name),
                    state: TaskState::Pending,
                    failed: saved.is_some_and(|t| t.failed),
                    process: None,
                    restarts: saved.map_or(0, |t| t.restarts),
                    window: saved
                        .filter(|t| t.restart_window_unix_ms != 0)
                        .map(|t| Window {
                            started: from_unix_ms(t.restart_window_unix_ms),
                            restarts: t.restart_window_count,
                        }),
                    events: saved
                        .map(|t| t.events.iter().map(event_from_proto).collect())
                        .unwrap_or_default(),
                    template_change: None,
                    template_render: None,
                    template_restart: false,
                    plugin: spec.csi_plugin.as_ref().map(|p| PluginRun {
                        key: InstanceKey::new(&p.id, p.plugin_type),
                        healthy: false,
                        deadline: None,
                    }),
                };
                if let Some(saved) = saved {
                    task.state = match saved.state.as_str() {
                        "dead" => TaskState::Dead,
                        "running" => TaskState::Running,
                        "restarting" => TaskState::Restarting { at: Instant::now() },
                        // "starting" too: `readopt` adopts the process of
                        // its pid file, if its start got that far.
                        _ => TaskState::Pending,
                    };
                    if task.state == TaskState::Running {
                        task.process = Some(Process {
                            handle: Handle::adopted(saved.pid, saved.start_ticks),
                            signal_at: None,
                            kill_at: None,
                            killed: false,
                        });
                    }
                }
                alloc.tasks.push(task);
            }
            self.allocs.insert(alloc.id.clone(), alloc);
        }
        self.ports_for_upgraded_allocs();
        let ids: Vec<String> = self.allocs.keys().cloned().collect();
        for id in ids {
            self.readopt(&id);
        }
        self.sweep_leftovers();
        self.restore_schedule();
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
                    .and_then(|env| plugin_spec(&alloc, i, &env, &self.plugin_socket_dir(id)));
                if alloc.group.tasks[i].driver == Driver::Docker {
                    self.readopt_container(&mut alloc, i, plugin_start, now);
                    continue;
                }
                let task = &mut alloc.tasks[i];
                let recorded = task
                    .process
                    .as_ref()
                    .map(|p| (p.handle.pid(), p.handle.start_ticks()));
                let alive = match recorded {
                    Some((pid, ticks)) if pid != 0 && ticks != 0 => {
                        (exec::start_ticks(pid) == Some(ticks)).then_some((pid, ticks))
                    }
                    _ => exec::read_pid_file(&pid_file)
                        .filter(|pid| {
                            exec::task_has_env(*pid, "CSI_AGENT_ALLOC_ID", id)
                                && exec::task_has_env(*pid, "NOMAD_TASK_NAME", &task.name)
                        })
                        .and_then(|pid| exec::start_ticks(pid).map(|t| (pid, t))),
                };
                match alive {
                    Some((pid, start_ticks)) => {
                        task.process = Some(Process {
                            handle: Handle::adopted(pid, start_ticks),
                            signal_at: None,
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

    /// How an `exec` or `raw_exec` task ended that no `waitpid` told of
    /// (`Exit::Vanished`: it ended while the agent was away, or after it
    /// was adopted): the status in its exit record, when the process the
    /// agent tracked wrote one; else still unknown.
    pub(super) fn known_exit(&self, alloc: &Alloc, i: usize, exit: Exit) -> Exit {
        let (Exit::Vanished, Some(process)) = (&exit, &alloc.tasks[i].process) else {
            return exit;
        };
        if alloc.group.tasks[i].driver == Driver::Docker {
            return exit;
        }
        let name = &alloc.tasks[i].name;
        let record = exec::exit_record::path(&self.alloc_dir(&alloc.id), name);
        match exec::exit_record::read(&record, process.handle.pid()) {
            Some(status) => {
                log::info!(
                    "Alloc {}: task {name} ended while the agent was not watching; its exit record says: {}",
                    alloc.id,
                    Exit::Status(status).describe()
                );
                Exit::Status(status)
            }
            None => exit,
        }
    }

    /// After a restart: a docker task that ran is watched again by its
    /// container's name; the driver reports whether it still runs.
    fn readopt_container(
        &mut self,
        alloc: &mut Alloc,
        i: usize,
        plugin_start: Result<Option<(PluginSpec, Duration)>, String>,
        now: Instant,
    ) {
        let task = &mut alloc.tasks[i];
        if task.state != TaskState::Running {
            return;
        }
        let (pid, start_ticks) = task
            .process
            .as_ref()
            .map_or((0, 0), |p| (p.handle.pid(), p.handle.start_ticks()));
        let run = self.docker.next_run();
        let name = docker::container_name(&alloc.id, &task.name);
        task.process = Some(Process {
            handle: Handle::Container {
                name: name.clone(),
                run,
                pid,
                start_ticks,
                stopping: Arc::new(AtomicBool::new(false)),
            },
            signal_at: None,
            kill_at: None,
            killed: false,
        });
        let logs = self.alloc_dir(&alloc.id).join(&task.name).join("logs");
        self.docker.adopt(
            &alloc.id,
            &task.name,
            run,
            &name,
            [logs.join("stdout"), logs.join("stderr")],
        );
        match (&mut task.plugin, plugin_start) {
            (Some(plugin), Ok(Some((spec, health_timeout)))) => {
                plugin.healthy = false;
                plugin.deadline = Some(now + health_timeout);
                self.effects.push(PluginEffect::Start {
                    alloc: alloc.id.clone(),
                    task: task.name.clone(),
                    spec,
                    health_timeout,
                });
            }
            (Some(_), Err(err)) => log::error!(
                "Alloc {}: cannot watch the plugin of task {}: {err}",
                alloc.id,
                task.name
            ),
            _ => {}
        }
    }
}

fn event_to_proto(e: &super::calls::TaskEvent) -> pb::TaskEvent {
    pb::TaskEvent {
        unix_ms: unix_ms(e.time),
        kind: e.kind.clone(),
        message: e.message.clone(),
        ..Default::default()
    }
}

fn event_from_proto(e: &pb::TaskEvent) -> super::calls::TaskEvent {
    super::calls::TaskEvent {
        time: from_unix_ms(e.unix_ms),
        kind: e.kind.clone(),
        message: e.message.clone(),
    }
}

/// A job's inputs as the snapshot keeps them; the files its `file()` calls
/// read are kept with them, so that it decodes the same without them.
fn inputs_to_proto(inputs: &JobInputs) -> protobuf::MessageField<pb::JobInputs> {
    if inputs.is_empty() {
        return protobuf::MessageField::none();
    }
    let texts = |pairs: &[(String, String)]| -> Vec<pb::NamedText> {
        pairs
            .iter()
            .map(|(name, text)| pb::NamedText {
                name: name.clone(),
                text: text.clone(),
                ..Default::default()
            })
            .collect()
    };
    let files: Vec<(String, String)> = inputs.files_read().into_iter().collect();
    protobuf::MessageField::some(pb::JobInputs {
        env: texts(&inputs.env),
        var_files: texts(&inputs.var_files),
        vars: texts(&inputs.vars),
        files: texts(&files),
        ..Default::default()
    })
}

/// The inputs a snapshot kept; none for a job kept before inputs were.
fn inputs_from_proto(inputs: &protobuf::MessageField<pb::JobInputs>) -> JobInputs {
    let Some(inputs) = inputs.as_ref() else {
        return JobInputs::default();
    };
    let pairs = |texts: &[pb::NamedText]| -> Vec<(String, String)> {
        texts
            .iter()
            .map(|t| (t.name.clone(), t.text.clone()))
            .collect()
    };
    let mut out = JobInputs {
        env: pairs(&inputs.env),
        var_files: pairs(&inputs.var_files),
        vars: pairs(&inputs.vars),
        ..Default::default()
    };
    out.files.given = pairs(&inputs.files).into_iter().collect();
    out
}
