//! Jobs and their allocations: the `exec`, `raw_exec` and `docker` drivers
//! and the task hooks.
//!
//! `job run` decodes a job file (Nomad's format) and creates one
//! allocation per group instance; [`Allocs`], owned by the main loop, takes
//! each through its life:
//!
//! 1. **pending**: placed once it fits on the node ([`placement`]), the volume hook claims every `csi` group volume for the
//!    alloc (read-only if the volume says so; `per_alloc` claims
//!    `source[index]`) through the volume manager, retrying retryable
//!    refusals with backoff (shown as task events) and failing the alloc
//!    on a terminal one. `host` volumes come from the agent config.
//! 2. **running**: every task is started (on the starter's threads,
//!    `starter.rs`, `starting` meanwhile; [`exec`]), in its lifecycle
//!    order ([`lifecycle`]: prestart, main, poststart), in its own session and
//!    mount namespace: an `exec` task in a root of its own, built as
//!    Nomad's exec driver builds it ([`root`]), with each volume at its
//!    destination ([`mounts`]); a `raw_exec` task on the host's root, with
//!    no volumes; a `docker` task as a container of the host's engine,
//!    started and watched by threads of its driver (`docker/`). Exits go
//!    through the restart policy ([`restart`]). A task with a
//!    `csi_plugin` block is a plugin: the supervisor hook gives it a socket
//!    dir `data_dir/plugins/<alloc>/` and `CSI_ENDPOINT`, keeps the
//!    agent's `csi/` root a peer of the host in its namespace, and asks the
//!    agent ([`PluginEffect`]) to probe it; it is registered only once
//!    healthy, within `health_timeout`, or killed.
//! 3. **stopping**: each task's `kill_signal` (SIGTERM unless it says
//!    otherwise) to its process group, SIGKILL after `kill_timeout`; then the poststop tasks run. When the main tasks end
//!    by themselves (a batch job), the sidecars stop and the poststop
//!    tasks run the same way. An alloc that provides a plugin stops only after
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
//! The plugin's view of paths, Nomad's contract: an exec plugin task's
//! root holds its socket dir `data_dir/plugins/<alloc>/` at `mount_dir`
//! (default `/csi`), and `CSI_ENDPOINT` is `unix://<mount_dir>/csi.sock`
//! (unless the task's `env` sets another socket in `mount_dir`; the agent
//! then watches that one); and the agent's `csi/<plugin>` dir at
//! `stage_publish_base_dir` (default `/local/csi`), both bidirectional
//! binds. The plugin is registered with that base dir, and the staging and
//! publish paths of its RPCs are given under it, in its own view; the agent
//! itself works with the host's. A `raw_exec` plugin task, on the host's
//! root, gets host paths.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the alloc and task records, [`Allocs`] and its small queries |
//! | `jobs.rs` | the API: `job run` (and its checks), `job stop`, `job status`, `alloc logs` |
//! | `periodic.rs` | periodic and parameterized parents: their children, the schedule, `job periodic force` |
//! | `dispatch.rs` | `job dispatch`: its checks, the payload written into a task's `local/`, the meta in its environment |
//! | `alloc_ops.rs` | an operator's hand on one alloc: `alloc signal`, `alloc restart`, `alloc stop`; `job inspect` |
//! | [`alloc_stats`] | `alloc status`'s resource usage: where each task's figures are, and their reading on a session thread |
//! | `runner.rs` | an alloc's life: starting, exits and restarts, kill timeouts, stopping, settling |
//! | [`lifecycle`] | the order of a group's tasks (prestart, main, poststart, poststop) and what an exit 0 means |
//! | `volume_hook.rs` | claiming the group's `csi` volumes, retries, what a release unmounts |
//! | `driver.rs` | what every driver does: the handle of a running task, its signals, polling for its end |
//! | `exit.rs` | how a task ended, whatever its driver: what the runner and the restart policy are told |
//! | `docker/` | the `docker` driver: a thread per container start and watch, the container a task asks for, the loop's side of their reports |
//! | `launch.rs` | starting one task: task dir, environment, driver mounts, root, plugin socket dir |
//! | `plugin_endpoint.rs` | a `csi_plugin` task's `CSI_ENDPOINT`, the socket the agent watches, the spec it is registered with |
//! | `starter.rs` | the threads that carry out starts off the loop, re-renders and a done task's cleanups; taking a start in |
//! | [`prepare`] | the prepare helper: the process in which a start's artifacts are fetched and its templates rendered (`artifact/`, `templates.rs`, `rerender.rs`), so that no input crashes the agent |
//! | `services.rs` | the `service` blocks of running tasks as registrations, and templates that read the registry rendered again when it changes |
//! | `leader.rs` | a dead `leader` task or a failed one stopping the group's other tasks |
//! | `max_run.rs` | a batch group's `max_run_duration`: when it counts from, the alloc stopped when it runs out |
//! | `placement.rs` | the node's fingerprint, what allocs ask for, placing pending allocs, `job run`'s bounds |
//! | [`feasible`] | a job's `constraint`s against the node's attributes at `job run`, `distinct_hosts` and `distinct_property` |
//! | [`node`] | the node's attributes: the agent's and its config's, the host's fingerprint |
//! | `node.rs` | what the jobs know of the node ([`node::NodeFacts`]): its attributes, from the agent and the host's fingerprint, and the CSI volumes it cannot use |
//! | `feasible.rs` | a job's constraints checked against the node, and which instances the node cannot take |
//! | `refit.rs` | placement again after a SIGHUP changes the node: unplaced instances placed, a system job's misfits stopped |
//! | `persist.rs` | the snapshot's jobs and allocs, restore, re-adoption after a restart |
//! | `cgroup.rs` | an exec or raw_exec task's control group: its limits from `resources`, its OOM kills, its removal |
//! | [`exec`] | the drivers: the start helper (`exec/helper.rs`, never a fork of the agent), the child's namespace and root (`exec/child.rs`), exec |
//! | [`root`] | an exec task's root: `chroot_env`, `/dev`, `/proc`, `/secrets`, `/alloc`, mount points |
//! | [`user`] | the user a task runs as, looked up before its start |
//! | [`destination`] | a path of the task's view in the task dir, its mount point made there safely |
//! | [`mounts`] | where volumes appear in a task, and the namespace plan |
//! | [`env`](mod@env) | the task's environment and `${VAR}` interpolation |
//! | [`restart`] | the restart policy |

pub mod alloc_fs;
mod alloc_ops;
pub mod alloc_stats;
mod artifact;
pub mod calls;
mod cgroup;
pub mod destination;
mod dispatch;
mod docker;
mod driver;
pub mod env;
pub mod exec;
pub mod exec_target;
mod exit;
pub mod feasible;
mod jobs;
mod launch;
mod leader;
mod leftovers;
pub mod lifecycle;
mod max_run;
pub mod mounts;
pub mod node;
mod periodic;
mod persist;
mod placement;
mod plan;
mod plugin_endpoint;
mod ports;
pub mod prepare;
mod refit;
mod rerender;
mod services;

/// How long the pids of started tasks may wait for a snapshot (see
/// [`Allocs::take_unsaved_starts`]): short enough that `job status` after
/// an agent restart rarely shows a task `pending` for long, long enough
/// that a big job's start writes a few snapshots a second, not one a turn.
pub const STARTS_SAVED_WITHIN: std::time::Duration = std::time::Duration::from_millis(500);
pub mod restart;
pub mod root;
mod runner;
mod starter;
mod templates;
pub mod user;
mod volume_hook;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Receiver;

use crate::call::{CallError, ErrorKind};
use crate::csi::backoff::SplitMix64;
use crate::plugin::{InstanceKey, PluginSpec};
use crate::spec::{ChrootEntry, DockerSettings, ExecSettings, Group, HostVolume, Job, JobInputs};
pub use dispatch::MAX_DISPATCH_PAYLOAD;
pub use docker::ContainerEvent;
use restart::Window;
pub use starter::StartReport;

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
        /// How it ended: `exited with status 1`, `failed to start: ...`.
        how: String,
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
    /// Its start is on a starter thread (`starter.rs`).
    Starting,
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
            TaskState::Starting => "starting",
            TaskState::Running => "running",
            TaskState::Restarting { .. } => "restarting",
            TaskState::Dead => "dead",
        }
    }
}

/// A running task: what runs it, and the timers of its stopping.
struct Process {
    handle: driver::Handle,
    /// The task is to stop, and its `shutdown_delay` runs: its kill
    /// signal goes at this instant.
    signal_at: Option<Instant>,
    /// The kill signal was sent; SIGKILL follows at this instant.
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
    /// `job/alloc/task`: what its events are about.
    key: String,
    state: TaskState,
    failed: bool,
    process: Option<Process>,
    restarts: u32,
    window: Option<Window>,
    events: VecDeque<calls::TaskEvent>,
    plugin: Option<PluginRun>,
    /// A changed template's `change_mode`, due after its splay
    /// (`rerender.rs`).
    template_change: Option<(Instant, crate::spec::ChangeMode)>,
    /// Changed templates held back by their `wait`: rendered at the first
    /// instant, pushed back by each further change up to the second
    /// (`rerender.rs`).
    template_render: Option<(Instant, Instant)>,
    /// Stopped for a changed template or by `alloc restart`: starts again
    /// at once, outside the restart policy.
    template_restart: bool,
}

impl TaskRun {
    /// Keeps an event in the task's recent events (`job status`) and
    /// emits it to the agent's event stream: one event, both places.
    fn event(&mut self, kind: &str, message: impl Into<String>) {
        let message = message.into();
        crate::events::emit(
            crate::events::Topic::Job,
            task_event_type(kind),
            self.key.clone(),
            message.clone(),
        );
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(calls::TaskEvent {
            time: SystemTime::now(),
            kind: kind.to_string(),
            message,
        });
    }
}

impl TaskRun {
    /// A task event that tells how far a step is: on the event stream as
    /// any other, and in the task's events in place of the one before it
    /// of the same kind, so that a long step's news does not push the
    /// others out of the [`EVENTS_KEPT`].
    fn progress_event(&mut self, kind: &str, message: impl Into<String>) {
        if self.events.back().is_some_and(|e| e.kind == kind) {
            self.events.pop_back();
        }
        self.event(kind, message);
    }
}

/// The event stream's type of a task event: its kind as Nomad's task
/// events name theirs (`Started`, `Restarting`, ...).
fn task_event_type(kind: &str) -> String {
    let mut chars = kind.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
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
    answer: Option<Receiver<crate::call::Answer<crate::volume::calls::Answer>>>,
    retry_at: Option<Instant>,
    failures: u32,
    /// The volume lost a claim while this use's claim was on its way: a
    /// refusal is answered by claiming again at once, not after the
    /// backoff (see [`Allocs::volumes_freed`]).
    freed_meanwhile: bool,
    message: String,
}

struct Alloc {
    id: String,
    job: String,
    index: u64,
    group: Group,
    job_hcl: String,
    job_file: String,
    /// What the caller gave the variables of `job_hcl`.
    job_inputs: JobInputs,
    status: AllocStatus,
    stop_wanted: bool,
    message: String,
    tasks: Vec<TaskRun>,
    volumes: Vec<VolumeUse>,
    created: SystemTime,
    replaces: Option<String>,
    /// Placed on the node ([`placement`]): its resources are held.
    placed: bool,
    /// The host ports of its group's network, chosen when it was placed
    /// ([`ports`]).
    ports: Vec<ports::AllocPort>,
    /// Its group's `max_run_duration` counts from here ([`max_run`]).
    max_run: max_run::Bound,
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
    inputs: JobInputs,
    spec: Job,
    submitted: SystemTime,
    stop_wanted: bool,
    purge: bool,
    /// A periodic or dispatched child: its parent, payload and meta.
    child: Option<periodic::ChildOf>,
    /// A periodic parent's last launch, in seconds since the epoch; until
    /// the first, when the job was run (Nomad's rule, for the launch
    /// missed while the agent was down).
    last_launch: Option<i64>,
    /// A periodic parent's next launch, in seconds since the epoch: from
    /// the time it was run or the agent started, then from each launch.
    /// Not kept in the snapshot.
    next_launch: Option<i64>,
    /// Nomad's job modify index: the agent's job index when the job was
    /// last changed (submitted with a change, or stopped).
    modify_index: u64,
}

impl JobEntry {
    /// A job as `job run` (or a launch) submits it at `now`: not stopping,
    /// no child of anything, no launch yet.
    fn submitted(spec: Job, req: &calls::JobFile, now: SystemTime, index: u64) -> JobEntry {
        JobEntry {
            name: spec.name.clone(),
            file: req.file.clone(),
            hcl: req.hcl.clone(),
            inputs: req.inputs.clone(),
            spec,
            submitted: now,
            stop_wanted: false,
            purge: false,
            child: None,
            last_launch: None,
            next_launch: None,
            modify_index: index,
        }
    }
}

/// The jobs and allocations of this agent, owned by the main loop.
pub struct Allocs {
    data_dir: PathBuf,
    /// Where volumes are staged and published: a plugin task's
    /// `stage_publish_base_dir` is bound from here.
    csi_root: PathBuf,
    /// The agent's control API socket, hidden from `raw_exec` tasks.
    control_socket: PathBuf,
    host_volumes: Vec<HostVolume>,
    /// Plugin IDs the agent config provides; a job may not provide them.
    config_plugins: BTreeSet<String>,
    /// What exec tasks' roots are built from.
    chroot_env: Vec<ChrootEntry>,
    jobs: BTreeMap<String, JobEntry>,
    allocs: BTreeMap<String, Alloc>,
    effects: Vec<PluginEffect>,
    dirty: bool,
    /// Tasks started since the last snapshot that it need not have at
    /// once: a crash before it finds each by its pid file (see
    /// [`Allocs::take_unsaved_starts`]).
    unsaved_starts: bool,
    jitter: SplitMix64,
    /// The agent config's `max_kill_timeout`: no task waits longer
    /// between its kill signal and SIGKILL.
    max_kill_timeout: Duration,
    /// The node's attributes and the CSI volumes it cannot use.
    node: node::NodeFacts,
    /// The `docker` driver: its engine and threads.
    docker: docker::Docker,
    /// The agent config's `docker` settings: the engine, and what docker
    /// tasks may ask for (`privileged`, `volumes`).
    docker_settings: DockerSettings,
    /// What exec tasks may ask for (`allow_caps`).
    exec_settings: ExecSettings,
    /// The node's resources and the config's `client` block.
    placement: placement::Placement,
    /// What a privileged container can be given on this host.
    privileges: docker::Privileges,
    /// The threads that start tasks off the loop.
    starter: starter::Starter,
    /// The config's `client { artifact { ... } }` bounds.
    artifact_limits: artifact::ArtifactLimits,
    /// The wall clock of periodic launches: the system's, or a test's.
    clock: fn() -> SystemTime,
    /// The service registry as templates read it (`services.rs`).
    services: services::RegistryView,
    /// The last job modify index given out ([`JobEntry::modify_index`]).
    job_index: u64,
}

fn invalid(message: impl Into<String>) -> CallError {
    CallError::new(ErrorKind::InvalidArgument, message)
}

impl Allocs {
    /// The allocs of the agent whose data dir is `data_dir` and whose
    /// control API listens on `control_socket` (which a `raw_exec` task,
    /// in the host's root, must not reach).
    pub fn new(data_dir: &Path, control_socket: &Path) -> Allocs {
        Allocs {
            data_dir: data_dir.to_path_buf(),
            csi_root: data_dir.join("csi"),
            control_socket: control_socket.to_path_buf(),
            host_volumes: Vec::new(),
            config_plugins: BTreeSet::new(),
            chroot_env: crate::spec::AgentConfig::default().chroot_env(),
            jobs: BTreeMap::new(),
            allocs: BTreeMap::new(),
            effects: Vec::new(),
            dirty: false,
            unsaved_starts: false,
            jitter: SplitMix64::from_entropy(),
            max_kill_timeout: crate::spec::DEFAULT_MAX_KILL_TIMEOUT,
            node: node::NodeFacts::default(),
            docker: docker::Docker::new(&DockerSettings::default().endpoint),
            docker_settings: DockerSettings::default(),
            exec_settings: ExecSettings::default(),
            placement: placement::Placement::default(),
            privileges: docker::Privileges::of_this_process(),
            starter: starter::Starter::new(),
            artifact_limits: artifact::ArtifactLimits::default(),
            clock: SystemTime::now,
            services: services::RegistryView::default(),
            job_index: 0,
        }
    }

    /// The node attributes tasks' `${...}` may name
    /// ([`node::node_attributes`]).
    pub fn set_node(&mut self, node: BTreeMap<String, String>) {
        self.node.set_attributes(node);
    }

    /// The agent config's `max_kill_timeout`.
    pub fn set_max_kill_timeout(&mut self, max: Duration) {
        self.max_kill_timeout = max;
    }

    /// Lowers `max_kill_timeout` to `max` if it is higher.
    pub fn cap_kill_timeout(&mut self, max: Duration) {
        self.max_kill_timeout = self.max_kill_timeout.min(max);
    }

    /// A task's `kill_timeout`, capped by `max_kill_timeout`.
    fn kill_timeout(&self, task: &crate::spec::Task) -> Duration {
        task.kill_timeout.min(self.max_kill_timeout)
    }

    /// The processes of alloc `alloc`'s running tasks: pid, start time
    /// and kill timeout (capped by `max_kill_timeout`).
    pub fn processes(&self, alloc: &str) -> Vec<(u32, u64, Duration)> {
        let Some(a) = self.allocs.get(alloc) else {
            return Vec::new();
        };
        a.tasks
            .iter()
            .zip(&a.group.tasks)
            .filter_map(|(run, task)| {
                let p = run.process.as_ref()?;
                Some((
                    p.handle.pid(),
                    p.handle.start_ticks(),
                    self.kill_timeout(task),
                ))
            })
            .collect()
    }

    /// Whether alloc `alloc` is one of this agent's and not done: its
    /// tasks are the agent's to stop.
    pub fn runs(&self, alloc: &str) -> bool {
        self.allocs
            .get(alloc)
            .is_some_and(|a| !a.status.is_terminal())
    }

    /// Where volumes are staged and published, when not the data dir's
    /// `csi/` (the config's `csi_dir`): set once, before any task starts.
    pub fn use_csi_root(&mut self, root: &Path) {
        self.csi_root = root.to_path_buf();
    }

    /// What the agent config says about host volumes, plugins, the roots
    /// of exec tasks, what docker tasks may do, and placement (the node is
    /// fingerprinted again).
    pub fn configure(
        &mut self,
        host_volumes: &[HostVolume],
        config_plugins: BTreeSet<String>,
        chroot_env: Vec<ChrootEntry>,
        docker: DockerSettings,
        exec: ExecSettings,
        client: &crate::spec::ClientConfig,
    ) {
        self.set_client(client);
        self.host_volumes = host_volumes.to_vec();
        self.config_plugins = config_plugins;
        self.chroot_env = chroot_env;
        if docker.endpoint != self.docker_settings.endpoint {
            self.docker.set_engine(&docker.endpoint);
        }
        self.docker_settings = docker;
        self.exec_settings = exec;
    }

    /// Whether tasks started since the last call, which the snapshot
    /// keeps (their pids) but need not keep at once: a `starting` task is
    /// saved as pending, and an agent that restarts before the snapshot
    /// has the pid finds the process by its pid file (or the container by
    /// its name) and adopts it. So a big job's start reports, turn after
    /// turn, do not each write a whole snapshot; the agent writes one
    /// within [`crate::task::STARTS_SAVED_WITHIN`].
    pub fn take_unsaved_starts(&mut self) -> bool {
        std::mem::take(&mut self.unsaved_starts)
    }

    /// Whether anything changed that the snapshot must keep.
    pub fn take_dirty(&mut self) -> bool {
        let dirty = std::mem::take(&mut self.dirty);
        if dirty {
            self.count_tasks();
        }
        dirty
    }

    /// Sets `csi_agent_tasks` to the tasks by driver and state: in a turn
    /// that changed them, whose snapshot goes over every alloc anyway,
    /// never on a scrape.
    fn count_tasks(&self) {
        const DRIVERS: [&str; 3] = ["exec", "raw_exec", "docker"];
        const STATES: [&str; 5] = ["pending", "starting", "running", "restarting", "dead"];
        let mut counts = [[0u32; STATES.len()]; DRIVERS.len()];
        for alloc in self.allocs.values() {
            for (task, spec) in alloc.tasks.iter().zip(&alloc.group.tasks) {
                let driver = DRIVERS.iter().position(|d| *d == spec.driver.as_str());
                let state = STATES.iter().position(|s| *s == task.state.as_str());
                if let (Some(driver), Some(state)) = (driver, state) {
                    counts[driver][state] += 1;
                }
            }
        }
        for (driver, row) in DRIVERS.iter().zip(counts) {
            for (state, n) in STATES.iter().zip(row) {
                crate::metrics::TASKS.set(&[driver, state], f64::from(n));
            }
        }
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
}
