//! Jobs and their allocations: the `exec` driver and the task hooks.
//!
//! `job run` decodes a job file (Nomad's format) and creates one
//! allocation per group instance; [`Allocs`], owned by the main loop, takes
//! each through its life:
//!
//! 1. **pending**: the volume hook claims every `csi` group volume for the
//!    alloc (read-only if the volume says so; `per_alloc` claims
//!    `source[index]`) through the volume manager, retrying retryable
//!    refusals with backoff (shown as task events) and failing the alloc
//!    on a terminal one. `host` volumes come from the agent config.
//! 2. **running**: every task is started by the exec driver ([`exec`]) in
//!    its own mount namespace with its driver mounts ([`mounts`]); exits
//!    go through the restart policy ([`restart`]). A task with a
//!    `csi_plugin` block is a plugin: the supervisor hook gives it a socket
//!    dir `data_dir/plugins/<alloc>/` and `CSI_ENDPOINT`, keeps the
//!    agent's `csi/` root a peer of the host in its namespace, and asks the
//!    agent ([`PluginEffect`]) to probe it; it is registered only once
//!    healthy, within `health_timeout`, or killed.
//! 3. **stopping**: SIGTERM to each task's process group, SIGKILL after
//!    `kill_timeout`. An alloc that provides a plugin stops only after
//!    every claim on that plugin's volumes is gone, so volumes are never
//!    left without the plugin that must unmount them.
//! 4. **complete** or **failed**: the claims are released (the volume
//!    manager's watcher finishes what fails), the plugins deregistered.
//!
//! Tasks outlive the agent: on restart, a task whose process still runs
//! (same pid, same start time) is adopted, one that died meanwhile goes
//! through its restart policy, and none is started twice (see [`exec`]'s
//! pid file).
//!
//! The plugin's view of paths: an exec task is not chrooted, so it sees
//! the host's paths. `CSI_ENDPOINT` is `unix://<data_dir>/plugins/<alloc>/
//! csi.sock` (unless the task's `env` sets it; the agent then watches that
//! socket), and the staging and publish paths in its RPCs are the agent's
//! `<data_dir>/csi/<plugin>/...`. `mount_dir` and `stage_publish_base_dir`
//! are accepted for Nomad's files and not used.

pub mod env;
pub mod exec;
pub mod mounts;
pub mod restart;
mod runner;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Receiver;

use crate::api::{ApiError, ErrorKind, Response};
use crate::csi::backoff::SplitMix64;
use crate::plugin::fingerprint::{from_unix_ms, unix_ms};
use crate::plugin::{InstanceKey, PluginSpec};
use crate::proto::{agent as api, state as pb};
use crate::spec::{Group, HostVolume, Job};
use restart::Window;

/// How many events each task keeps.
const EVENTS_KEPT: usize = 10;

/// Something the agent does for the plugin supervisor hook.
#[derive(Clone, Debug, PartialEq)]
pub enum PluginEffect {
    /// The task started: probe its socket, register it once healthy.
    Start {
        alloc: String,
        task: String,
        spec: PluginSpec,
        health_timeout: Duration,
    },
    /// The task's process ended and will restart: the plugin is unhealthy.
    Exited {
        alloc: String,
        task: String,
        key: InstanceKey,
    },
    /// The task is gone for good: deregister the plugin if this task still
    /// provides it.
    Stop {
        alloc: String,
        task: String,
        key: InstanceKey,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AllocStatus {
    Pending,
    Running,
    Stopping,
    Complete,
    Failed,
}

impl AllocStatus {
    fn as_str(self) -> &'static str {
        match self {
            AllocStatus::Pending => "pending",
            AllocStatus::Running => "running",
            AllocStatus::Stopping => "stopping",
            AllocStatus::Complete => "complete",
            AllocStatus::Failed => "failed",
        }
    }

    fn parse(text: &str) -> AllocStatus {
        match text {
            "running" => AllocStatus::Running,
            "stopping" => AllocStatus::Stopping,
            "complete" => AllocStatus::Complete,
            "failed" => AllocStatus::Failed,
            _ => AllocStatus::Pending,
        }
    }

    fn is_terminal(self) -> bool {
        matches!(self, AllocStatus::Complete | AllocStatus::Failed)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskState {
    Pending,
    Running,
    /// Waiting to start again.
    Restarting {
        at: Instant,
    },
    Dead,
}

impl TaskState {
    fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Restarting { .. } => "restarting",
            TaskState::Dead => "dead",
        }
    }
}

/// A task's process.
struct Process {
    pid: u32,
    start_ticks: u64,
    /// `None` for a process adopted after an agent restart: not our child,
    /// so its exit is noticed by its start time going away.
    child: Option<Child>,
    /// SIGTERM was sent; SIGKILL follows at this instant.
    kill_at: Option<Instant>,
    /// SIGKILL was sent.
    killed: bool,
}

/// The plugin side of a task with a `csi_plugin` block.
struct PluginRun {
    /// The instance it provides: its plugin ID and type.
    key: InstanceKey,
    /// Registered: healthy at least once since it started.
    healthy: bool,
    /// Killed if not healthy by then.
    deadline: Option<Instant>,
}

struct TaskRun {
    name: String,
    state: TaskState,
    failed: bool,
    process: Option<Process>,
    restarts: u32,
    window: Option<Window>,
    events: VecDeque<api::TaskEvent>,
    plugin: Option<PluginRun>,
}

impl TaskRun {
    fn event(&mut self, kind: &str, message: impl Into<String>) {
        let message = message.into();
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(api::TaskEvent {
            unix_ms: unix_ms(SystemTime::now()),
            kind: kind.to_string(),
            message,
            ..Default::default()
        });
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum VolumeSource {
    Csi,
    Host { path: PathBuf },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum UseState {
    /// Not claimed yet, or to claim again at `retry`.
    Unclaimed,
    /// A claim is on its way; its answer arrives on `Use::answer`.
    Claiming,
    Claimed {
        publish_path: PathBuf,
    },
    Released,
}

/// A group volume as one alloc uses it.
struct VolumeUse {
    alias: String,
    volume_id: String,
    read_only: bool,
    source: VolumeSource,
    state: UseState,
    answer: Option<Receiver<Result<Response, ApiError>>>,
    retry_at: Option<Instant>,
    failures: u32,
    message: String,
}

struct Alloc {
    id: String,
    job: String,
    index: u64,
    group: Group,
    job_hcl: String,
    job_file: String,
    status: AllocStatus,
    stop_wanted: bool,
    message: String,
    tasks: Vec<TaskRun>,
    volumes: Vec<VolumeUse>,
    created: SystemTime,
    replaces: Option<String>,
}

impl Alloc {
    fn task_mut(&mut self, name: &str) -> Option<&mut TaskRun> {
        self.tasks.iter_mut().find(|t| t.name == name)
    }

    fn plugin_ids(&self) -> impl Iterator<Item = &str> {
        self.group
            .tasks
            .iter()
            .filter_map(|t| t.csi_plugin.as_ref().map(|p| p.id.as_str()))
    }

    /// The plugin instances its tasks provide.
    fn plugin_keys(&self) -> impl Iterator<Item = InstanceKey> + '_ {
        self.group
            .tasks
            .iter()
            .filter_map(|t| t.csi_plugin.as_ref())
            .map(|p| InstanceKey::new(&p.id, p.plugin_type))
    }
}

struct JobEntry {
    name: String,
    file: String,
    hcl: String,
    spec: Job,
    submitted: SystemTime,
    stop_wanted: bool,
    purge: bool,
}

/// The jobs and allocations of this agent, owned by the main loop.
pub struct Allocs {
    data_dir: PathBuf,
    host_volumes: Vec<HostVolume>,
    /// Plugin IDs the agent config provides; a job may not provide them.
    config_plugins: BTreeSet<String>,
    jobs: BTreeMap<String, JobEntry>,
    allocs: BTreeMap<String, Alloc>,
    effects: Vec<PluginEffect>,
    dirty: bool,
    jitter: SplitMix64,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::InvalidArgument, message)
}

impl Allocs {
    pub fn new(data_dir: &Path) -> Allocs {
        Allocs {
            data_dir: data_dir.to_path_buf(),
            host_volumes: Vec::new(),
            config_plugins: BTreeSet::new(),
            jobs: BTreeMap::new(),
            allocs: BTreeMap::new(),
            effects: Vec::new(),
            dirty: false,
            jitter: SplitMix64::from_entropy(),
        }
    }

    /// What the agent config says about host volumes and plugins.
    pub fn configure(&mut self, host_volumes: &[HostVolume], config_plugins: BTreeSet<String>) {
        self.host_volumes = host_volumes.to_vec();
        self.config_plugins = config_plugins;
    }

    /// Whether anything changed that the snapshot must keep.
    pub fn take_dirty(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    pub fn take_effects(&mut self) -> Vec<PluginEffect> {
        std::mem::take(&mut self.effects)
    }

    fn alloc_dir(&self, alloc: &str) -> PathBuf {
        self.data_dir.join("alloc").join(alloc)
    }

    /// The socket dir of a plugin task: `data_dir/plugins/<alloc>`.
    pub fn plugin_socket_dir(&self, alloc: &str) -> PathBuf {
        self.data_dir.join("plugins").join(alloc)
    }

    /// Whether `alloc`'s task `task` is alive and may provide a plugin.
    pub fn provides(&self, alloc: &str, task: &str) -> bool {
        self.allocs.get(alloc).is_some_and(|a| {
            !a.status.is_terminal() && a.tasks.iter().any(|t| t.name == task && t.plugin.is_some())
        })
    }

    /// Whether any allocation is not done yet.
    pub fn any_live(&self) -> bool {
        self.allocs.values().any(|a| !a.status.is_terminal())
    }

    /// Whether any plugin task runs (the `csi/` root must stay shared).
    pub fn any_plugin_task(&self) -> bool {
        self.allocs
            .values()
            .any(|a| !a.status.is_terminal() && a.plugin_ids().next().is_some())
    }

    // ---- the API ----

    pub fn run_job(&mut self, req: &api::JobRunRequest) -> Result<api::JobRunResponse, ApiError> {
        let decoded =
            Job::decode(&req.hcl, &req.file).map_err(|e| invalid(e.to_string().trim_end()))?;
        let spec = decoded.spec;
        self.check_job(&spec, &req.file)?;
        let warnings: Vec<String> = decoded.warnings.iter().map(|w| w.to_string()).collect();
        let live: Vec<String> = self
            .allocs
            .values()
            .filter(|a| a.job == spec.name && !a.status.is_terminal() && !a.stop_wanted)
            .map(|a| a.id.clone())
            .collect();
        if let Some(job) = self.jobs.get(&spec.name) {
            if job.spec == spec && !job.stop_wanted && !live.is_empty() {
                return Ok(api::JobRunResponse {
                    job: spec.name.clone(),
                    alloc_ids: live,
                    unchanged: true,
                    warnings,
                    ..Default::default()
                });
            }
        }
        let now = SystemTime::now();
        let mut created = Vec::new();
        for group in &spec.groups {
            for index in 0..group.count {
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
        self.jobs.insert(
            spec.name.clone(),
            JobEntry {
                name: spec.name.clone(),
                file: req.file.clone(),
                hcl: req.hcl.clone(),
                spec: spec.clone(),
                submitted: now,
                stop_wanted: false,
                purge: false,
            },
        );
        self.dirty = true;
        Ok(api::JobRunResponse {
            job: spec.name,
            alloc_ids: created,
            unchanged: false,
            warnings,
            ..Default::default()
        })
    }

    /// Checks what the spec decoder cannot know: host volumes, plugin IDs
    /// of other jobs and the config, users, and `${VAR}` names.
    fn check_job(&self, spec: &Job, file: &str) -> Result<(), ApiError> {
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
                if let Some(user) = &task.user {
                    exec::lookup_user(user)
                        .map_err(|e| invalid(format!("{what}: user {user:?}: {e}")))?;
                }
                runner::check_interpolation(group, task, &spec.name)
                    .map_err(|e| invalid(format!("{what}: {e}")))?;
            }
        }
        Ok(())
    }

    fn new_alloc_id(&mut self) -> String {
        loop {
            let id = format!("{:08x}", self.jitter.next_u64() as u32);
            if !self.allocs.contains_key(&id) {
                return id;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn new_alloc(
        &self,
        id: &str,
        spec: &Job,
        group: &Group,
        index: u64,
        req: &api::JobRunRequest,
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
            status: AllocStatus::Pending,
            stop_wanted: false,
            message: String::new(),
            tasks: group
                .tasks
                .iter()
                .map(|t| TaskRun {
                    name: t.name.clone(),
                    state: TaskState::Pending,
                    failed: false,
                    process: None,
                    restarts: 0,
                    window: None,
                    events: VecDeque::new(),
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
        };
        alloc.volumes = self.volume_uses(group, index);
        for task in &mut alloc.tasks {
            task.event("received", "task received by the agent");
        }
        alloc
    }

    fn volume_uses(&self, group: &Group, index: u64) -> Vec<VolumeUse> {
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
                    message: String::new(),
                }
            })
            .collect()
    }

    pub fn stop_job(
        &mut self,
        req: &api::JobStopRequest,
    ) -> Result<api::JobStopResponse, ApiError> {
        let Some(job) = self.jobs.get_mut(&req.name) else {
            return Err(self.no_job(&req.name));
        };
        job.stop_wanted = true;
        job.purge |= req.purge;
        let ids: Vec<String> = self
            .allocs
            .values()
            .filter(|a| a.job == req.name && !a.status.is_terminal())
            .map(|a| a.id.clone())
            .collect();
        for id in &ids {
            self.stop_alloc(id, "the job was stopped");
        }
        self.dirty = true;
        Ok(api::JobStopResponse {
            alloc_ids: ids,
            ..Default::default()
        })
    }

    fn stop_alloc(&mut self, id: &str, why: &str) {
        if let Some(alloc) = self.allocs.get_mut(id) {
            if !alloc.stop_wanted && !alloc.status.is_terminal() {
                log::info!("Alloc {id}: stopping ({why})");
                alloc.stop_wanted = true;
                alloc.message = why.to_string();
                self.dirty = true;
            }
        }
    }

    fn no_job(&self, name: &str) -> ApiError {
        let known: Vec<&str> = self.jobs.keys().map(String::as_str).collect();
        ApiError::not_found(if known.is_empty() {
            format!("no job {name:?} (no jobs are known)")
        } else {
            format!("no job {name:?} (known: {})", known.join(", "))
        })
    }

    pub fn status(&self, req: &api::JobStatusRequest) -> Result<api::JobStatusResponse, ApiError> {
        let jobs: Vec<&JobEntry> = if req.name.is_empty() {
            self.jobs.values().collect()
        } else {
            vec![self
                .jobs
                .get(&req.name)
                .ok_or_else(|| self.no_job(&req.name))?]
        };
        Ok(api::JobStatusResponse {
            jobs: jobs.into_iter().map(|j| self.job_status(j)).collect(),
            ..Default::default()
        })
    }

    fn job_status(&self, job: &JobEntry) -> api::JobStatus {
        let allocs: Vec<&Alloc> = self.allocs.values().filter(|a| a.job == job.name).collect();
        let live = allocs.iter().any(|a| !a.status.is_terminal());
        let status = match (live, job.stop_wanted) {
            (false, _) => "dead",
            (true, true) => "stopping",
            (true, false) => "running",
        };
        let mut allocs: Vec<api::AllocStatus> = allocs.iter().map(|a| alloc_status(a)).collect();
        allocs.sort_by_key(|a| a.created_unix_ms);
        api::JobStatus {
            name: job.name.clone(),
            status: status.to_string(),
            file: job.file.clone(),
            submitted_unix_ms: unix_ms(job.submitted),
            stop_wanted: job.stop_wanted,
            allocs,
            ..Default::default()
        }
    }

    pub fn logs(&self, req: &api::AllocLogsRequest) -> Result<api::AllocLogsResponse, ApiError> {
        let matches: Vec<&Alloc> = self
            .allocs
            .values()
            .filter(|a| !req.alloc_id.is_empty() && a.id.starts_with(&req.alloc_id))
            .collect();
        let alloc = match matches.as_slice() {
            [one] => *one,
            [] => return Err(ApiError::not_found(format!("no alloc {:?}", req.alloc_id))),
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
            return Err(ApiError::not_found(format!(
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
        Ok(api::AllocLogsResponse {
            path: path.to_string_lossy().into_owned(),
            ..Default::default()
        })
    }

    // ---- persistence ----

    pub fn jobs_to_proto(&self) -> Vec<pb::Job> {
        self.jobs
            .values()
            .map(|j| pb::Job {
                name: j.name.clone(),
                file: j.file.clone(),
                hcl: j.hcl.clone(),
                submitted_unix_ms: unix_ms(j.submitted),
                stop_wanted: j.stop_wanted,
                purge: j.purge,
                ..Default::default()
            })
            .collect()
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
                        pid: t.process.as_ref().map_or(0, |p| p.pid),
                        start_ticks: t.process.as_ref().map_or(0, |p| p.start_ticks),
                        restarts: t.restarts,
                        restart_window_unix_ms: t.window.map_or(0, |w| unix_ms(w.started)),
                        restart_window_count: t.window.map_or(0, |w| w.restarts),
                        events: t.events.iter().cloned().collect(),
                        ..Default::default()
                    })
                    .collect(),
                created_unix_ms: unix_ms(a.created),
                job_hcl: a.job_hcl.clone(),
                job_file: a.job_file.clone(),
                replaces: a.replaces.clone().unwrap_or_default(),
                ..Default::default()
            })
            .collect()
    }

    /// Loads what a snapshot kept. Records that no longer decode are
    /// logged and dropped.
    pub fn restore(&mut self, jobs: &[pb::Job], allocs: &[pb::Alloc]) {
        for j in jobs {
            match Job::decode(&j.hcl, &j.file) {
                Ok(decoded) => {
                    self.jobs.insert(
                        j.name.clone(),
                        JobEntry {
                            name: j.name.clone(),
                            file: j.file.clone(),
                            hcl: j.hcl.clone(),
                            spec: decoded.spec,
                            submitted: from_unix_ms(j.submitted_unix_ms),
                            stop_wanted: j.stop_wanted,
                            purge: j.purge,
                        },
                    );
                }
                Err(err) => log::error!("Dropping job {:?} of the snapshot: {err}", j.name),
            }
        }
        for a in allocs {
            let group = Job::decode(&a.job_hcl, &a.job_file)
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
                status: AllocStatus::parse(&a.status),
                stop_wanted: a.stop_wanted,
                message: a.message.clone(),
                tasks: Vec::new(),
                volumes: self.volume_uses(&group, a.index),
                created: from_unix_ms(a.created_unix_ms),
                replaces: (!a.replaces.is_empty()).then(|| a.replaces.clone()),
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
                        .map(|t| t.events.iter().cloned().collect())
                        .unwrap_or_default(),
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
                        _ => TaskState::Pending,
                    };
                    if task.state == TaskState::Running {
                        task.process = Some(Process {
                            pid: saved.pid,
                            start_ticks: saved.start_ticks,
                            child: None,
                            kill_at: None,
                            killed: false,
                        });
                    }
                }
                alloc.tasks.push(task);
            }
            self.allocs.insert(alloc.id.clone(), alloc);
        }
        let ids: Vec<String> = self.allocs.keys().cloned().collect();
        for id in ids {
            self.readopt(&id);
        }
    }
}

fn alloc_status(a: &Alloc) -> api::AllocStatus {
    api::AllocStatus {
        id: a.id.clone(),
        group: a.group.name.clone(),
        index: a.index,
        status: a.status.as_str().to_string(),
        message: a.message.clone(),
        tasks: a
            .tasks
            .iter()
            .map(|t| api::TaskStatus {
                name: t.name.clone(),
                state: t.state.as_str().to_string(),
                failed: t.failed,
                restarts: t.restarts,
                pid: t.process.as_ref().map_or(0, |p| p.pid),
                plugin_id: t
                    .plugin
                    .as_ref()
                    .map(|p| p.key.plugin_id.clone())
                    .unwrap_or_default(),
                events: t.events.iter().cloned().collect(),
                ..Default::default()
            })
            .collect(),
        volumes: a
            .volumes
            .iter()
            .map(|v| api::AllocVolume {
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
                ..Default::default()
            })
            .collect(),
        created_unix_ms: unix_ms(a.created),
        ..Default::default()
    }
}
