//! The job API of the agent: `job run` (checks, one alloc per group
//! instance, replacing a job's live allocs), `job stop`, `job status` and
//! `alloc logs`.

use std::collections::VecDeque;
use std::time::SystemTime;

use super::calls::{self, JobFile, JobRun, JobStatus, LogsRequest};
use super::feasible::{self, report_unplaced};
use super::{
    invalid, launch, Alloc, AllocStatus, Allocs, JobEntry, PluginRun, TaskRun, TaskState, UseState,
    VolumeSource, VolumeUse,
};
use crate::call::CallError;
use crate::plugin::InstanceKey;
use crate::spec::{DockerConfig, DockerMountType, DockerSettings, Driver, Group, Job};

impl Allocs {
    pub fn run_job(&mut self, req: &JobFile) -> Result<JobRun, CallError> {
        let decoded = Job::decode_with(&req.hcl, &req.file, &req.inputs)
            .map_err(|e| invalid(e.to_string().trim_end()))?;
        let spec = decoded.spec;
        self.check_modify_index(&spec.name, req.check_index)?;
        self.check_job(&spec, &req.file)?;
        self.check_placement(&spec, &req.file, &req.hcl)?;
        let warnings: Vec<String> = decoded.warnings.iter().map(|w| w.to_string()).collect();
        let unplaced = self.unplaced(&spec);
        let live: Vec<String> = self
            .allocs
            .values()
            .filter(|a| a.job == spec.name && !a.status.is_terminal() && !a.stop_wanted)
            .map(|a| a.id.clone())
            .collect();
        if spec.launches_children() {
            return Ok(self.run_parent(spec, req, &live, warnings));
        }
        if let Some(job) = self.jobs.get(&spec.name) {
            if job.spec == spec && !job.stop_wanted && !live.is_empty() {
                return Ok(JobRun {
                    job: spec.name.clone(),
                    alloc_ids: live,
                    unchanged: true,
                    warnings,
                    unplaced,
                });
            }
        }
        if let Some(run) = self.update_templates(&spec, req, &live, &warnings) {
            return Ok(run);
        }
        let now = SystemTime::now();
        let mut created = Vec::new();
        report_unplaced(&spec.name, &unplaced);
        for group in &spec.groups {
            for index in feasible::placed(group, &unplaced) {
                let old = self
                    .allocs
                    .values()
                    .find(|a| {
                        live.contains(&a.id) && a.group.name == group.name && a.index == index
                    })
                    .map(|a| a.id.clone());
                let id = self.new_alloc_id();
                let alloc = self.new_alloc(&id, &spec, group, index, req, now, old);
                log::info!(
                    "Job {}: alloc {id} for group {} [{index}]",
                    spec.name,
                    group.name
                );
                self.allocs.insert(id.clone(), alloc);
                created.push(id);
            }
        }
        // Old allocations stop now, and their replacements wait for them
        // (a single-writer volume has room for one); a plugin's old alloc
        // stops only once its replacement's plugins are healthy.
        for id in &live {
            let replaced_by_plugin = self
                .allocs
                .values()
                .any(|a| a.replaces.as_deref() == Some(id) && a.plugin_ids().next().is_some());
            if !replaced_by_plugin {
                self.stop_alloc(id, "the job was updated");
            }
        }
        let index = self.next_job_index();
        self.jobs.insert(
            spec.name.clone(),
            JobEntry::submitted(spec.clone(), req, now, index),
        );
        self.dirty = true;
        Ok(JobRun {
            job: spec.name,
            alloc_ids: created,
            unchanged: false,
            warnings,
            unplaced,
        })
    }

    /// Checks what the spec decoder cannot know: host volumes, plugin IDs
    /// of other jobs and the config, users, and `${VAR}` names.
    pub(super) fn check_job(&self, spec: &Job, file: &str) -> Result<(), CallError> {
        // This job's plugin instances so far: (ID, type, task).
        let mut provided: Vec<(&str, crate::spec::PluginType, &str)> = Vec::new();
        for group in &spec.groups {
            for v in &group.volumes {
                if v.volume_type == crate::spec::VolumeType::Host
                    && !self.host_volumes.iter().any(|h| h.name == v.source)
                {
                    let known: Vec<&str> =
                        self.host_volumes.iter().map(|h| h.name.as_str()).collect();
                    return Err(invalid(format!(
                        "{file}: group {:?} volume {:?}: no host_volume {:?} in the agent config (it has: {})",
                        group.name,
                        v.alias,
                        v.source,
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    )));
                }
            }
            for task in &group.tasks {
                let what = format!("{file}: group {:?} task {:?}", group.name, task.name);
                if let Some(plugin) = &task.csi_plugin {
                    let twice = provided
                        .iter()
                        .find(|(id, t, _)| *id == plugin.id && t.conflicts(plugin.plugin_type));
                    if let Some((_, _, first)) = twice {
                        return Err(invalid(format!(
                            "{what}: plugin {:?} ({}) is already provided by task {first:?}; one ID has at most one controller and one node",
                            plugin.id, plugin.plugin_type
                        )));
                    }
                    provided.push((&plugin.id, plugin.plugin_type, &task.name));
                    if self.config_plugins.contains(&plugin.id) {
                        return Err(invalid(format!(
                            "{what}: plugin {:?} is already provided by the agent config",
                            plugin.id
                        )));
                    }
                    // Another job may run the other half of a split
                    // plugin, not a second instance of a service.
                    let other = self.allocs.values().find(|a| {
                        a.job != spec.name
                            && !a.status.is_terminal()
                            && a.plugin_keys().any(|k| {
                                k.plugin_id == plugin.id
                                    && k.plugin_type.conflicts(plugin.plugin_type)
                            })
                    });
                    if let Some(other) = other {
                        return Err(invalid(format!(
                            "{what}: plugin {:?} ({}) is already provided by job {:?}",
                            plugin.id, plugin.plugin_type, other.job
                        )));
                    }
                }
                if let Some(docker) = &task.docker {
                    check_docker(docker, &self.docker_settings)
                        .map_err(|e| invalid(format!("{what}: {e}")))?;
                }
                if task.driver == Driver::Exec {
                    if let Some(cap) = task
                        .config
                        .cap_add
                        .iter()
                        .find(|c| !self.exec_settings.allows(c))
                    {
                        return Err(invalid(format!(
                            "{what}: cap_add {cap:?} is not allowed by the agent's allow_caps (plugin \"exec\" {{ config {{ allow_caps = [...] }} }}; Nomad's default set unless given)"
                        )));
                    }
                }
                if let Some(user) = &task.user {
                    super::user::lookup_user(user)
                        .map_err(|e| invalid(format!("{what}: user {user:?}: {e}")))?;
                }
                launch::check_interpolation(
                    group,
                    task,
                    &spec.name,
                    &self.chroot_env,
                    self.node.attributes(),
                    &super::dispatch::child_env_names(spec),
                )
                .map_err(|e| invalid(format!("{what}: {e}")))?;
            }
        }
        Ok(())
    }

    pub(super) fn new_alloc_id(&mut self) -> String {
        loop {
            let id = format!("{:08x}", self.jitter.next_u64() as u32);
            if !self.allocs.contains_key(&id) {
                return id;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_alloc(
        &self,
        id: &str,
        spec: &Job,
        group: &Group,
        index: u64,
        req: &JobFile,
        now: SystemTime,
        replaces: Option<String>,
    ) -> Alloc {
        let mut alloc = Alloc {
            id: id.to_string(),
            job: spec.name.clone(),
            index,
            group: group.clone(),
            job_hcl: req.hcl.clone(),
            job_file: req.file.clone(),
            job_inputs: req.inputs.clone(),
            status: AllocStatus::Pending,
            stop_wanted: false,
            message: String::new(),
            tasks: group
                .tasks
                .iter()
                .map(|t| TaskRun {
                    name: t.name.clone(),
                    key: format!("{}/{id}/{}", spec.name, t.name),
                    state: TaskState::Pending,
                    failed: false,
                    process: None,
                    restarts: 0,
                    window: None,
                    events: VecDeque::new(),
                    template_change: None,
                    template_render: None,
                    template_restart: false,
                    plugin: t.csi_plugin.as_ref().map(|p| PluginRun {
                        key: InstanceKey::new(&p.id, p.plugin_type),
                        healthy: false,
                        deadline: None,
                    }),
                })
                .collect(),
            volumes: Vec::new(),
            created: now,
            replaces,
            placed: false,
            ports: Vec::new(),
            max_run: Default::default(),
        };
        alloc.volumes = self.volume_uses(group, index);
        for task in &mut alloc.tasks {
            task.event("received", "task received by the agent");
        }
        alloc
    }

    pub(super) fn volume_uses(&self, group: &Group, index: u64) -> Vec<VolumeUse> {
        group
            .volumes
            .iter()
            .map(|v| {
                let (volume_id, source) = match v.volume_type {
                    crate::spec::VolumeType::Csi => {
                        let id = if v.per_alloc {
                            format!("{}[{index}]", v.source)
                        } else {
                            v.source.clone()
                        };
                        (id, VolumeSource::Csi)
                    }
                    crate::spec::VolumeType::Host => {
                        let host = self.host_volumes.iter().find(|h| h.name == v.source);
                        (
                            v.source.clone(),
                            VolumeSource::Host {
                                path: host.map(|h| h.path.clone()).unwrap_or_default(),
                            },
                        )
                    }
                };
                let host_read_only = self
                    .host_volumes
                    .iter()
                    .any(|h| h.name == v.source && h.read_only && source != VolumeSource::Csi);
                VolumeUse {
                    alias: v.alias.clone(),
                    volume_id,
                    read_only: v.read_only || host_read_only,
                    state: UseState::Unclaimed,
                    source,
                    answer: None,
                    retry_at: None,
                    failures: 0,
                    freed_meanwhile: false,
                    message: String::new(),
                }
            })
            .collect()
    }

    /// `job stop`: the allocs stopping.
    pub fn stop_job(&mut self, name: &str, purge: bool) -> Result<Vec<String>, CallError> {
        if !self.jobs.contains_key(name) {
            return Err(self.no_job(name));
        }
        let index = self.next_job_index();
        let job = self.jobs.get_mut(name).expect("looked up above");
        job.stop_wanted = true;
        job.modify_index = index;
        job.purge |= purge;
        let ids: Vec<String> = self
            .allocs
            .values()
            .filter(|a| a.job == name && !a.status.is_terminal())
            .map(|a| a.id.clone())
            .collect();
        for id in &ids {
            self.stop_alloc(id, "the job was stopped");
        }
        self.dirty = true;
        Ok(ids)
    }

    /// Stops alloc `id` for a reason outside its job (the cluster took
    /// its volume away, or cut this node off): whether this agent runs
    /// such an alloc.
    pub fn stop_alloc_for(&mut self, id: &str, why: &str) -> bool {
        if !self.allocs.contains_key(id) {
            return false;
        }
        self.stop_alloc(id, why);
        true
    }

    pub(super) fn stop_alloc(&mut self, id: &str, why: &str) {
        if let Some(alloc) = self.allocs.get_mut(id) {
            if !alloc.stop_wanted && !alloc.status.is_terminal() {
                log::info!("Alloc {id}: stopping ({why})");
                alloc.stop_wanted = true;
                alloc.message = why.to_string();
                self.dirty = true;
            }
        }
    }

    pub(super) fn no_job(&self, name: &str) -> CallError {
        let known: Vec<&str> = self.jobs.keys().map(String::as_str).collect();
        CallError::not_found(if known.is_empty() {
            format!("no job {name:?} (no jobs are known)")
        } else {
            format!("no job {name:?} (known: {})", known.join(", "))
        })
    }

    /// `job status` of job `name`, or of every job when it is empty.
    pub fn status(&self, name: &str) -> Result<Vec<JobStatus>, CallError> {
        let jobs: Vec<&JobEntry> = if name.is_empty() {
            self.jobs.values().collect()
        } else {
            vec![self.jobs.get(name).ok_or_else(|| self.no_job(name))?]
        };
        Ok(jobs.into_iter().map(|j| self.job_status(j)).collect())
    }

    /// `running`, `stopping` or `dead`; a periodic or parameterized parent,
    /// which has no allocs, is `running` until it is stopped, as in Nomad.
    pub(super) fn job_state(&self, job: &JobEntry) -> &'static str {
        if job.spec.launches_children() {
            return if job.stop_wanted { "dead" } else { "running" };
        }
        let live = self
            .allocs
            .values()
            .any(|a| a.job == job.name && !a.status.is_terminal());
        match (live, job.stop_wanted) {
            (false, _) => "dead",
            (true, true) => "stopping",
            (true, false) => "running",
        }
    }

    fn job_status(&self, job: &JobEntry) -> JobStatus {
        let allocs: Vec<&Alloc> = self.allocs.values().filter(|a| a.job == job.name).collect();
        // A parent never runs, so nothing of it is placed or unplaced.
        let unplaced = if job.stop_wanted || job.spec.launches_children() {
            Vec::new()
        } else {
            self.still_unplaced(&job.name, self.unplaced(&job.spec))
        };
        let status = match self.job_state(job) {
            // Nomad's job waits for a node it fits.
            "dead" if !job.stop_wanted && allocs.is_empty() && !unplaced.is_empty() => "pending",
            state => state,
        };
        let mut allocs: Vec<calls::AllocStatus> = allocs.iter().map(|a| alloc_status(a)).collect();
        order::sort_by_key(&mut allocs, |a| a.created);
        JobStatus {
            name: job.name.clone(),
            status: status.to_string(),
            file: job.file.clone(),
            job_type: job.spec.job_type.as_str().to_string(),
            submitted: Some(job.submitted),
            stop_wanted: job.stop_wanted,
            allocs,
            unplaced,
            parent: job
                .child
                .as_ref()
                .map(|c| c.parent.clone())
                .unwrap_or_default(),
            parent_kind: match (&job.spec.periodic, &job.spec.parameterized) {
                (Some(_), _) => "periodic",
                (_, Some(_)) => "parameterized",
                _ => "",
            }
            .to_string(),
            next_launch: job.next_launch.filter(|_| !job.stop_wanted),
            children: self.children_of(&job.name),
            modify_index: job.modify_index,
        }
    }

    /// `alloc logs`: the path of the task's log file.
    pub fn logs(&self, req: &LogsRequest) -> Result<std::path::PathBuf, CallError> {
        let matches: Vec<&Alloc> = self
            .allocs
            .values()
            .filter(|a| !req.alloc_id.is_empty() && a.id.starts_with(&req.alloc_id))
            .collect();
        let alloc = match matches.as_slice() {
            [one] => *one,
            [] => return Err(CallError::not_found(format!("no alloc {:?}", req.alloc_id))),
            _ => {
                return Err(invalid(format!(
                    "alloc ID prefix {:?} is ambiguous ({} allocs)",
                    req.alloc_id,
                    matches.len()
                )))
            }
        };
        if !alloc.tasks.iter().any(|t| t.name == req.task) {
            let names: Vec<&str> = alloc.tasks.iter().map(|t| t.name.as_str()).collect();
            return Err(CallError::not_found(format!(
                "alloc {} has no task {:?} (tasks: {})",
                alloc.id,
                req.task,
                names.join(", ")
            )));
        }
        let file = if req.stderr { "stderr" } else { "stdout" };
        let path = self
            .alloc_dir(&alloc.id)
            .join(&req.task)
            .join("logs")
            .join(file);
        Ok(path)
    }
}

fn alloc_status(a: &Alloc) -> calls::AllocStatus {
    calls::AllocStatus {
        id: a.id.clone(),
        group: a.group.name.clone(),
        index: a.index,
        status: a.status.as_str().to_string(),
        message: a.message.clone(),
        tasks: a
            .tasks
            .iter()
            .map(|t| calls::TaskStatus {
                name: t.name.clone(),
                state: t.state.as_str().to_string(),
                failed: t.failed,
                restarts: t.restarts,
                pid: t.process.as_ref().map_or(0, |p| p.handle.pid()),
                plugin_id: t
                    .plugin
                    .as_ref()
                    .map(|p| p.key.plugin_id.clone())
                    .unwrap_or_default(),
                events: t.events.iter().cloned().collect(),
                ..task_spec_status(a, &t.name)
            })
            .collect(),
        volumes: a
            .volumes
            .iter()
            .map(|v| calls::AllocVolume {
                alias: v.alias.clone(),
                volume_id: v.volume_id.clone(),
                read_only: v.read_only,
                state: match (&v.source, &v.state) {
                    (VolumeSource::Host { .. }, _) => "host",
                    (_, UseState::Unclaimed | UseState::Claiming) => "claiming",
                    (_, UseState::Claimed { .. }) => "claimed",
                    (_, UseState::Released) => "released",
                }
                .to_string(),
                message: v.message.clone(),
            })
            .collect(),
        created: Some(a.created),
        ports: a.ports.iter().map(|p| (p.label.clone(), p.host)).collect(),
    }
}

/// What `alloc status` shows of task `name`'s spec: its lifecycle hook
/// and the resources it asks for.
fn task_spec_status(a: &Alloc, name: &str) -> calls::TaskStatus {
    let Some(spec) = a.group.tasks.iter().find(|t| t.name == name) else {
        return calls::TaskStatus::default();
    };
    let resources = spec.resources.as_ref();
    calls::TaskStatus {
        lifecycle: spec
            .lifecycle
            .map(|l| l.hook.as_str().to_string())
            .unwrap_or_default(),
        cpu_mhz: resources.and_then(|r| r.cpu).unwrap_or_default(),
        memory_mb: resources.and_then(|r| r.memory).unwrap_or_default(),
        ..Default::default()
    }
}

/// Checks a docker task's config against what the agent allows, as Nomad's
/// docker driver does when it starts the task (here, at `job run`): a
/// privileged container needs `allow_privileged`, and a host path bound in
/// by `volumes` or a bind `mount` needs `volumes { enabled = true }`, unless
/// it is relative (to the task dir).
fn check_docker(config: &DockerConfig, allowed: &DockerSettings) -> Result<(), String> {
    if config.privileged && !allowed.allow_privileged {
        return Err("Docker privileged mode is disabled on this agent: set allow_privileged = true in the agent config's docker block (or in plugin \"docker\" { config { ... } })".into());
    }
    if allowed.volumes_enabled {
        return Ok(());
    }
    // A relative path is in the task dir, which Nomad allows.
    let host_path = config
        .volumes
        .iter()
        .map(|v| v.source.as_str())
        .chain(
            config
                .mounts
                .iter()
                .filter(|m| m.mount_type == DockerMountType::Bind)
                .map(|m| m.source.as_str()),
        )
        .find(|source| source.starts_with('/'));
    match host_path {
        Some(path) => Err(format!(
            "volumes are not enabled on this agent, so the task cannot mount host path {path:?}: set volumes {{ enabled = true }} in the agent config's docker block (or in plugin \"docker\" {{ config {{ ... }} }})"
        )),
        None => Ok(()),
    }
}
