//! The agent: one main loop that owns all state.
//!
//! Everything that happens reaches the loop as a message on a channel: a
//! control API [`Call`], an instance thread's [`InstanceReport`], a signal,
//! or the tick. Only the loop changes the registry; it never waits on a
//! plugin (instance threads make every plugin call). After each message it
//! persists what changed, before any reply or command that depends on it.
//!
//! Shutdown (SIGTERM, SIGINT): stop the control API, ask every instance for
//! its last report (each says unhealthy), wait for them for a bounded time,
//! persist, exit 0. A second signal during shutdown exits at once; the
//! state on disk is consistent at every moment. SIGHUP re-reads the config
//! file and adds, changes or removes plugins; a config with errors is
//! logged and ignored, and nothing changes.

pub mod dev;

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{at, bounded, never, select, tick, unbounded, Receiver, Sender};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};

use crate::api::server::ControlServer;
use crate::api::{self, ApiError, Call, Request, Response};
use crate::plugin::instance::{Instance, InstanceReport, InstanceSettings};
use crate::plugin::watch::SocketWatcher;
use crate::plugin::{Health, PluginRecord, PluginSpec, Registry, RegistryEvent, Report, Source};
use crate::proto::{agent as apipb, state as statepb};
use crate::spec::{AgentConfig, DEFAULT_HEALTH_TIMEOUT};
use crate::state::Store;
use crate::task::{Allocs, PluginEffect};
use crate::volume::manager::{Dispatch, VolumeManager};
use crate::volume::ops::{OpDone, Paths};
use dev::DevPlugin;

/// Fold the journal into a new snapshot once it is this large.
const COMPACT_JOURNAL_BYTES: u64 = 1 << 20;

/// How long shutdown waits for the instances' last reports.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The most messages one loop turn takes before it persists and answers.
const TURN_BATCH: usize = 64;

/// How often the loop wakes up without a message (dev plugin supervision).
const TICK: Duration = Duration::from_millis(500);

/// How the agent was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: AgentConfig,
    /// The file SIGHUP re-reads; `None` when there is none (`-dev` alone).
    pub config_path: Option<PathBuf>,
    /// Run the built-in hostpath plugin as plugin `hostpath`.
    pub dev: bool,
    /// Remove the data dir on exit (a temporary one of `-dev`), unless
    /// something is still mounted under it.
    pub temporary_data_dir: bool,
}

#[derive(Debug)]
pub enum Error {
    DataDir { path: PathBuf, err: io::Error },
    AlreadyRunning { socket: PathBuf },
    State(crate::state::Error),
    Api(api::server::Error),
    Watcher(io::Error),
    Signals(io::Error),
    DevPlugin(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::DataDir { path, .. } => {
                write!(f, "cannot create the data dir {}", path.display())
            }
            Error::AlreadyRunning { socket } => write!(
                f,
                "another agent is already running with this data dir (it answers on {})",
                socket.display()
            ),
            Error::State(_) => f.write_str("cannot load the agent state"),
            Error::Api(_) => f.write_str("cannot serve the control API"),
            Error::Watcher(_) => f.write_str("cannot watch plugin sockets"),
            Error::Signals(_) => f.write_str("cannot install signal handlers"),
            Error::DevPlugin(_) => f.write_str("cannot start the dev hostpath plugin"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::DataDir { err, .. }
            | Error::Watcher(err)
            | Error::Signals(err)
            | Error::DevPlugin(err) => Some(err),
            Error::AlreadyRunning { .. } => None,
            Error::State(err) => Some(err),
            Error::Api(err) => Some(err),
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(mut options: Options) -> Result<(), Error> {
    create_private_dir(&options.config.data_dir)?;
    // Mount points in mountinfo are canonical paths: so are ours, even when
    // the data dir is reached through a symlink.
    let data_dir = fs::canonicalize(&options.config.data_dir).map_err(|err| Error::DataDir {
        path: options.config.data_dir.clone(),
        err,
    })?;
    options.config.data_dir = data_dir.clone();
    let socket = data_dir.join(api::SOCKET_NAME);
    if UnixStream::connect(&socket).is_ok() {
        return Err(Error::AlreadyRunning { socket });
    }
    let (store, loaded) = Store::open(&data_dir).map_err(Error::State)?;
    let signals = SignalThread::start()?;
    let watcher = SocketWatcher::start().map_err(Error::Watcher)?;
    let (reports_tx, reports) = unbounded();
    let (calls_tx, calls) = unbounded();
    let control = ControlServer::start(&socket, calls_tx).map_err(Error::Api)?;

    let (done_tx, done) = unbounded();
    let mut volumes = VolumeManager::new(
        Paths {
            data_dir: data_dir.clone(),
        },
        done_tx,
    );
    volumes.restore(&loaded.state.volumes, &loaded.journal);
    match crate::mount::MountInfo::read() {
        Ok(mounts) => volumes.reconcile(&mounts),
        Err(err) => log::error!("Cannot reconcile the claims with the mount table: {err}"),
    }
    let mut allocs = Allocs::new(&data_dir);
    allocs.configure(
        &options.config.host_volumes,
        config_plugin_ids(&options.config),
        options.config.chroot_env(),
    );
    allocs.restore(&loaded.state.jobs, &loaded.state.allocs);
    let mut registry = restore_registry(&loaded.state);
    let registry_events = registry.subscribe();
    let mut agent = Agent {
        volumes,
        allocs,
        candidates: BTreeMap::new(),
        dispatches: Vec::new(),
        demo_requested: false,
        registry,
        dev: None,
        instances: BTreeMap::new(),
        generation: 0,
        watcher,
        reports_tx,
        store,
        dirty: !loaded.existed,
        options,
    };
    if agent.options.dev {
        let plugin = DevPlugin::start(&data_dir, &node_name(&agent.options.config))
            .map_err(Error::DevPlugin)?;
        agent.dev = Some(plugin);
    }
    agent.sync_plugins();
    agent.end_turn();
    log::info!(
        "Agent running with data dir {} ({} plugins)",
        data_dir.display(),
        agent.registry.list().count()
    );

    let ticker = tick(TICK);
    loop {
        let wakeup = [agent.volumes.next_retry(), agent.allocs.next_wakeup()]
            .into_iter()
            .flatten()
            .min();
        let retry = wakeup.map(at).unwrap_or_else(never);
        select! {
            recv(calls) -> call => if let Ok(call) = call { agent.answer(call) },
            recv(reports) -> report => if let Ok(report) = report { agent.apply(report) },
            recv(done) -> done => if let Ok(done) = done { agent.completed(done) },
            recv(registry_events) -> event => if let Ok(event) = event { agent.registry_event(event) },
            recv(retry) -> _ => {},
            recv(signals.events) -> signal => match signal {
                Ok(SIGHUP) => agent.reload(),
                Ok(SIGCHLD) => {
                    agent.allocs.reap(Instant::now());
                }
                Ok(signal) => {
                    log::info!("Stopping on signal {signal}");
                    break;
                }
                Err(_) => break,
            },
            recv(ticker) -> _ => agent.tick(),
        }
        // Group commit: what else is already waiting joins this turn, so
        // that one plan and one journal sync cover all of it. Bounded, so
        // that replies and plugin jobs wait for one batch at most.
        for _ in 0..TURN_BATCH {
            select! {
                recv(calls) -> call => if let Ok(call) = call { agent.answer(call) },
                recv(reports) -> report => if let Ok(report) = report { agent.apply(report) },
                recv(done) -> done => if let Ok(done) = done { agent.completed(done) },
                recv(registry_events) -> event => if let Ok(event) = event { agent.registry_event(event) },
                default => break,
            }
        }
        agent.end_turn();
    }

    control.stop();
    agent.shutdown(&reports, &signals.events);
    signals.stop();
    if agent.options.temporary_data_dir && agent.allocs.any_live() {
        log::warn!(
            "Leaving the dev data dir {}: tasks still run in it (stop their jobs first)",
            data_dir.display()
        );
    } else if agent.options.temporary_data_dir {
        remove_temporary_data_dir(&data_dir);
    }
    Ok(())
}

struct Agent {
    volumes: VolumeManager,
    allocs: Allocs,
    /// Plugin tasks being probed before they are registered, by
    /// (alloc, task).
    candidates: BTreeMap<(String, String), RunningInstance>,
    /// Jobs planned this turn, submitted once the journal is durable.
    dispatches: Vec<Dispatch>,
    /// `-dev`: the demo volume was asked for.
    demo_requested: bool,
    options: Options,
    registry: Registry,
    dev: Option<DevPlugin>,
    instances: BTreeMap<String, RunningInstance>,
    generation: u64,
    watcher: SocketWatcher,
    reports_tx: Sender<InstanceReport>,
    store: Store,
    /// Whether the state changed since it was last persisted.
    dirty: bool,
}

struct RunningInstance {
    instance: Instance,
    spec: PluginSpec,
    settings: InstanceSettings,
}

impl Agent {
    /// The plugins the config and `-dev` ask for, with their settings.
    fn wanted_plugins(&self) -> Vec<(PluginSpec, InstanceSettings)> {
        let config = &self.options.config;
        let mut wanted: Vec<_> = config
            .plugins
            .iter()
            .map(|p| {
                let spec = PluginSpec {
                    id: p.id.clone(),
                    endpoint: p.socket.clone(),
                    plugin_type: p.plugin_type,
                    source: Source::Config,
                };
                let settings = InstanceSettings {
                    heartbeat: config.plugin_heartbeat,
                    health_timeout: p.health_timeout,
                    rpc_timeout: config.rpc_timeout,
                };
                (spec, settings)
            })
            .collect();
        if let Some(dev) = &self.dev {
            if wanted.iter().any(|(s, _)| s.id == dev::PLUGIN_ID) {
                log::warn!(
                    "The config's plugin {:?} replaces the dev plugin of the same ID",
                    dev::PLUGIN_ID
                );
            } else {
                let settings = InstanceSettings {
                    heartbeat: config.plugin_heartbeat,
                    health_timeout: DEFAULT_HEALTH_TIMEOUT,
                    rpc_timeout: config.rpc_timeout,
                };
                wanted.push((dev.spec(), settings));
            }
        }
        wanted
    }

    /// Makes the registry and the instance threads match the wanted
    /// plugins: registers new ones, restarts changed ones, and deregisters
    /// those that went away for good.
    fn sync_plugins(&mut self) {
        let wanted = self.wanted_plugins();
        let allocs = &self.allocs;
        let gone: Vec<String> = self
            .registry
            .list()
            .filter(|r| !wanted.iter().any(|(s, _)| s.id == r.spec.id))
            .filter(|r| match &r.spec.source {
                Source::Task { alloc, task } => !allocs.provides(alloc, task),
                _ => true,
            })
            .map(|r| r.spec.id.clone())
            .collect();
        for id in gone {
            self.stop_instance(&id);
            self.registry.deregister(&id);
            self.dirty = true;
        }
        for (spec, settings) in wanted {
            if self.registry.register(spec.clone()) {
                self.dirty = true;
            }
            let current = self.instances.get(&spec.id);
            let unchanged = current.is_some_and(|r| {
                r.spec == spec
                    && r.settings.heartbeat == settings.heartbeat
                    && r.settings.health_timeout == settings.health_timeout
                    && r.settings.rpc_timeout == settings.rpc_timeout
            });
            if !unchanged {
                self.stop_instance(&spec.id);
                self.start_instance(spec, settings);
            }
        }
    }

    fn start_instance(&mut self, spec: PluginSpec, settings: InstanceSettings) {
        self.generation += 1;
        let id = spec.id.clone();
        match Instance::start(
            spec.clone(),
            self.generation,
            settings,
            &self.watcher,
            self.reports_tx.clone(),
        ) {
            Ok(instance) => {
                self.instances.insert(
                    id,
                    RunningInstance {
                        instance,
                        spec,
                        settings,
                    },
                );
            }
            Err(err) => log::error!("Cannot start the thread of plugin {id}: {err}"),
        }
    }

    /// Stops an instance thread; it ends after any call in flight, and its
    /// late reports are ignored by generation.
    fn stop_instance(&mut self, id: &str) {
        if let Some(running) = self.instances.remove(id) {
            running.instance.stop();
            // Joining would wait for a call in flight; the thread ends by
            // itself, and a detached thread holds nothing the loop needs.
            drop(running);
        }
    }

    fn apply(&mut self, report: InstanceReport) {
        let current = self
            .instances
            .get(&report.id)
            .is_some_and(|r| r.instance.generation() == report.generation);
        if !current {
            self.candidate_report(report);
            return;
        }
        if self.registry.apply(&report.id, report.report).persistent() {
            self.dirty = true;
        }
    }

    fn answer(&mut self, call: Call) {
        let reply = call.reply;
        let registry = &self.registry;
        let dispatch = match call.request {
            Request::PluginStatus(req) => {
                let result = self.plugin_status(&req).map(Response::PluginStatus);
                // The caller may have given up; that is not the loop's problem.
                let _ = reply.send(result);
                None
            }
            Request::VolumeRegister(req) => self.volumes.register(&req, reply, registry),
            Request::VolumeCreate(req) => self.volumes.create(&req, reply, registry),
            Request::VolumeDeregister(req) => {
                self.volumes.deregister(&req.id, req.force, reply);
                None
            }
            Request::VolumeDelete(req) => self.volumes.delete(&req.id, reply, registry),
            Request::VolumeStatus(req) => self.volumes.status(&req, reply, registry),
            Request::VolumeClaim(req) => {
                self.volumes.claim(&req, reply, registry, Instant::now());
                None
            }
            Request::VolumeRelease(req) => {
                self.volumes.release(&req.volume_id, &req.alloc_id, reply);
                None
            }
            Request::JobRun(req) => {
                let _ = reply.send(self.allocs.run_job(&req).map(Response::JobRun));
                None
            }
            Request::JobStop(req) => {
                let _ = reply.send(self.allocs.stop_job(&req).map(Response::JobStop));
                None
            }
            Request::JobStatus(req) => {
                let _ = reply.send(self.allocs.status(&req).map(Response::JobStatus));
                None
            }
            Request::AllocLogs(req) => {
                let _ = reply.send(self.allocs.logs(&req).map(Response::AllocLogs));
                None
            }
        };
        self.dispatches.extend(dispatch);
    }

    fn completed(&mut self, done: OpDone) {
        self.volumes.completed(done, &self.registry, Instant::now());
        for (plugin, note) in self.volumes.take_plugin_notes() {
            // The registry is in the snapshot: its history changed.
            self.dirty |= self.registry.note(&plugin, note);
        }
    }

    fn registry_event(&mut self, event: RegistryEvent) {
        if let RegistryEvent::HealthChanged { id, new, .. } = &event {
            let record = self.registry.get(id);
            let source = record.map(|r| r.spec.source.clone());
            let reason = record.map(|r| r.reason.clone()).unwrap_or_default();
            if let Some(Source::Task { alloc, task }) = source {
                let message = match new {
                    Health::Healthy => format!("plugin {id:?} became healthy"),
                    other => format!("plugin {id:?} became {}: {reason}", other.as_str()),
                };
                self.allocs.plugin_event(&alloc, &task, message);
            }
        }
        if let RegistryEvent::HealthChanged {
            id,
            new: Health::Healthy,
            ..
        } = event
        {
            self.volumes.plugin_healthy(&id, Instant::now());
            if self.dev.is_some() && id == dev::PLUGIN_ID {
                self.create_demo_volume();
            }
        }
    }

    /// `-dev`: creates the volume `demo` on the built-in plugin, once.
    fn create_demo_volume(&mut self) {
        if self.demo_requested || self.volumes.volumes().any(|v| v.id == dev::DEMO_VOLUME) {
            return;
        }
        self.demo_requested = true;
        let (reply, answer) = bounded(1);
        let req = apipb::VolumeSpecRequest {
            file: "(dev demo volume)".into(),
            hcl: dev::DEMO_VOLUME_HCL.into(),
            ..Default::default()
        };
        let dispatch = self.volumes.create(&req, reply, &self.registry);
        self.dispatches.extend(dispatch);
        let spawned = thread::Builder::new()
            .name("dev-demo".into())
            .spawn(move || match answer.recv() {
                Ok(Ok(_)) => log::info!("Created the dev volume {:?}", dev::DEMO_VOLUME),
                Ok(Err(err)) => log::error!("Cannot create the dev volume: {err}"),
                Err(_) => {}
            });
        if let Err(err) = spawned {
            log::warn!("Cannot watch the dev volume's creation: {err}");
        }
    }

    /// The end of every loop turn: plan the volumes' next steps, make this
    /// turn's changes durable (one journal sync, or a new snapshot), then
    /// submit the planned jobs and send the replies.
    fn end_turn(&mut self) {
        // Tasks may claim or release volumes, which plans and journals
        // again; each round makes progress, and a few always suffice.
        for _ in 0..8 {
            self.commit_turn();
            let progressed = self
                .allocs
                .step(&mut self.volumes, &self.registry, Instant::now());
            self.plugin_effects();
            if self.allocs.take_dirty() {
                self.dirty = true;
            }
            if !progressed && !self.dirty {
                break;
            }
        }
    }

    fn commit_turn(&mut self) {
        let now = Instant::now();
        let planned = self.volumes.plan(&self.registry, now);
        self.dispatches.extend(planned);
        let records = self.volumes.take_journal();
        if self.dirty || self.store.journal_bytes() > COMPACT_JOURNAL_BYTES {
            self.dirty = true;
            self.persist();
        } else if !records.is_empty() {
            if let Err(err) = self.store.append(&records) {
                log::error!("Cannot journal the state: {}", crate::error_chain(&err));
                // A snapshot next turn covers what the journal could not.
                self.dirty = true;
            }
        }
        for dispatch in std::mem::take(&mut self.dispatches) {
            match self.instances.get_mut(&dispatch.plugin_id) {
                Some(running) => running.instance.submit(dispatch.job),
                None => log::error!(
                    "No running plugin {} for a volume operation",
                    dispatch.plugin_id
                ),
            }
        }
        for (reply, result) in self.volumes.take_outbox() {
            let _ = reply.send(result);
        }
    }

    /// Carries out what the plugin supervisor hook asked for.
    fn plugin_effects(&mut self) {
        for effect in self.allocs.take_effects() {
            match effect {
                PluginEffect::Start {
                    alloc,
                    task,
                    spec,
                    health_timeout,
                } => {
                    let key = (alloc, task);
                    if let Some(old) = self.candidates.remove(&key) {
                        old.instance.stop();
                    }
                    let settings = InstanceSettings {
                        heartbeat: self.options.config.plugin_heartbeat,
                        health_timeout,
                        rpc_timeout: self.options.config.rpc_timeout,
                    };
                    self.generation += 1;
                    match Instance::start(
                        spec.clone(),
                        self.generation,
                        settings,
                        &self.watcher,
                        self.reports_tx.clone(),
                    ) {
                        Ok(instance) => {
                            log::info!(
                                "Plugin {} of alloc {} task {}: waiting for {}",
                                spec.id,
                                key.0,
                                key.1,
                                spec.endpoint
                            );
                            self.candidates.insert(
                                key,
                                RunningInstance {
                                    instance,
                                    spec,
                                    settings,
                                },
                            );
                        }
                        Err(err) => log::error!("Cannot watch plugin {}: {err}", spec.id),
                    }
                }
                PluginEffect::Exited { alloc, task, id } => {
                    self.plugin_task_gone(alloc, task, &id, false);
                }
                PluginEffect::Stop { alloc, task, id } => {
                    self.plugin_task_gone(alloc, task, &id, true);
                }
            }
        }
    }

    /// A plugin task's process ended (`deregister`: for good): stop
    /// watching it, and mark its plugin unhealthy or deregister it, if the
    /// task still provides it.
    fn plugin_task_gone(&mut self, alloc: String, task: String, id: &str, deregister: bool) {
        let key = (alloc, task);
        if let Some(candidate) = self.candidates.remove(&key) {
            candidate.instance.stop();
        }
        let provides = self.registry.get(id).is_some_and(|r| {
            r.spec.source
                == Source::Task {
                    alloc: key.0.clone(),
                    task: key.1.clone(),
                }
        });
        if !provides {
            return;
        }
        self.stop_instance(id);
        if deregister {
            log::info!("Plugin {id}: its task stopped; deregistering it");
            self.registry.deregister(id);
        } else {
            self.registry.apply(
                id,
                Report::Status {
                    health: Health::Unhealthy,
                    reason: "the plugin task exited".to_string(),
                    fingerprint: None,
                    heartbeat: None,
                },
            );
        }
        self.dirty = true;
        if deregister {
            self.release_csi_root();
        }
    }

    /// A report of a plugin task being probed: once healthy, it replaces
    /// whatever provided the plugin ID before.
    fn candidate_report(&mut self, report: InstanceReport) {
        let key = self
            .candidates
            .iter()
            .find(|(_, c)| c.instance.generation() == report.generation)
            .map(|(k, _)| k.clone());
        let Some(key) = key else { return };
        let healthy = matches!(
            &report.report,
            Report::Status {
                health: Health::Healthy,
                fingerprint: Some(_),
                ..
            }
        );
        if !healthy {
            return;
        }
        let candidate = self.candidates.remove(&key).expect("found");
        let id = candidate.spec.id.clone();
        log::info!(
            "Plugin {id}: the task of alloc {} is healthy; registering it",
            key.0
        );
        self.stop_instance(&id);
        self.registry.register(candidate.spec.clone());
        self.instances.insert(id.clone(), candidate);
        self.registry.apply(&id, report.report);
        self.allocs.plugin_healthy(&key.0, &key.1);
        self.dirty = true;
    }

    /// Unmounts the shared bind of the `csi/` root once no plugin task
    /// needs it and nothing is mounted below it.
    fn release_csi_root(&self) {
        if self.allocs.any_plugin_task() {
            return;
        }
        let root = self.options.config.data_dir.join("csi");
        let Ok(info) = crate::mount::MountInfo::read() else {
            return;
        };
        if info.get(&root).is_none() || info.under(&root).any(|m| m.mount_point != root) {
            return;
        }
        use crate::mount::Mounter;
        if let Err(err) = crate::mount::SysMounter.unmount(&root, crate::mount::UnmountMode::Normal)
        {
            log::warn!("Cannot unmount {}: {err}", root.display());
        }
    }

    fn plugin_status(
        &self,
        req: &apipb::PluginStatusRequest,
    ) -> Result<apipb::PluginStatusResponse, ApiError> {
        let plugins = if req.id.is_empty() {
            self.registry.list().map(PluginRecord::to_proto).collect()
        } else {
            match self.registry.get(&req.id) {
                Some(record) => vec![record.to_proto()],
                None => {
                    let known: Vec<&str> =
                        self.registry.list().map(|r| r.spec.id.as_str()).collect();
                    return Err(ApiError::not_found(if known.is_empty() {
                        format!("no plugin {:?} (no plugins are registered)", req.id)
                    } else {
                        format!("no plugin {:?} (registered: {})", req.id, known.join(", "))
                    }));
                }
            }
        };
        Ok(apipb::PluginStatusResponse {
            plugins,
            ..Default::default()
        })
    }

    /// SIGHUP: re-read the config file and apply what changed.
    fn reload(&mut self) {
        let Some(path) = self.options.config_path.clone() else {
            log::info!("SIGHUP: no config file to reload");
            return;
        };
        let config = match load_config(&path) {
            Ok(config) => config,
            Err(err) => {
                log::error!(
                    "SIGHUP: keeping the current config, {} is not valid: {err}",
                    path.display()
                );
                return;
            }
        };
        if config.data_dir != self.options.config.data_dir && !self.options.dev {
            log::warn!(
                "SIGHUP: data_dir changed to {}; it takes effect at the next start",
                config.data_dir.display()
            );
        }
        let data_dir = self.options.config.data_dir.clone();
        self.options.config = AgentConfig { data_dir, ..config };
        self.allocs.configure(
            &self.options.config.host_volumes,
            config_plugin_ids(&self.options.config),
            self.options.config.chroot_env(),
        );
        log::info!("SIGHUP: reloaded {}", path.display());
        self.sync_plugins();
    }

    fn tick(&mut self) {
        if let Some(dev) = &mut self.dev {
            dev.supervise();
        }
        self.allocs.reap(Instant::now());
        self.volumes.tick(Instant::now());
    }

    fn state(&self) -> statepb::State {
        statepb::State {
            plugins: self.registry.list().map(PluginRecord::to_proto).collect(),
            volumes: self.volumes.to_proto(),
            jobs: self.allocs.jobs_to_proto(),
            allocs: self.allocs.allocs_to_proto(),
            ..Default::default()
        }
    }

    fn persist(&mut self) {
        if !self.dirty {
            return;
        }
        match self.store.save(&self.state()) {
            Ok(()) => self.dirty = false,
            // Kept dirty: the next turn tries again.
            Err(err) => log::error!("Cannot persist the state: {}", crate::error_chain(&err)),
        }
    }

    /// Every instance reports its plugin unhealthy and ends; then the
    /// state is persisted. Bounded by [`SHUTDOWN_TIMEOUT`].
    fn shutdown(&mut self, reports: &Receiver<InstanceReport>, signals: &Receiver<i32>) {
        for (_, candidate) in std::mem::take(&mut self.candidates) {
            candidate.instance.stop();
        }
        for running in self.instances.values() {
            running.instance.shutdown();
        }
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        let mut waiting = self.instances.len();
        while waiting > 0 {
            select! {
                recv(reports) -> report => {
                    let Ok(report) = report else { break };
                    let stopped = matches!(report.report, Report::Stopped);
                    self.apply(report);
                    if stopped {
                        waiting -= 1;
                    }
                }
                recv(signals) -> signal => {
                    if signal == Ok(SIGCHLD) {
                        continue;
                    }
                    log::warn!("Second signal: exiting at once");
                    std::process::exit(1);
                }
                default(deadline.saturating_duration_since(Instant::now())) => {
                    log::warn!("{waiting} plugin threads did not stop in time");
                    break;
                }
            }
        }
        // Whatever did not answer is not being watched any more either.
        let silent: Vec<String> = self
            .registry
            .list()
            .filter(|r| r.health != crate::plugin::Health::Unhealthy)
            .map(|r| r.spec.id.clone())
            .collect();
        for id in silent {
            self.registry.apply(
                &id,
                Report::Status {
                    health: crate::plugin::Health::Unhealthy,
                    reason: "the agent stopped".to_string(),
                    fingerprint: None,
                    heartbeat: None,
                },
            );
        }
        self.dirty = true;
        self.persist();
        for (_, running) in std::mem::take(&mut self.instances) {
            if running.instance.is_finished() {
                running.instance.join();
            }
        }
        if let Some(mut dev) = self.dev.take() {
            dev.stop();
        }
        self.release_csi_root();
        log::info!("Agent stopped");
    }
}

/// The registry a snapshot kept; unreadable records are logged and dropped
/// (their plugins register again from the config).
fn restore_registry(state: &statepb::State) -> Registry {
    let records = state
        .plugins
        .iter()
        .filter_map(|p| match PluginRecord::from_proto(p) {
            Ok(record) => Some(record),
            Err(err) => {
                log::warn!("Dropping a plugin record of the snapshot: {err}");
                None
            }
        })
        .collect();
    Registry::restore(records)
}

/// The plugin IDs the config provides; jobs may not provide them too.
fn config_plugin_ids(config: &AgentConfig) -> std::collections::BTreeSet<String> {
    config.plugins.iter().map(|p| p.id.clone()).collect()
}

/// Reads and validates an agent config file.
pub fn load_config(path: &Path) -> Result<AgentConfig, String> {
    let src = fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    match AgentConfig::decode(&src, &path.to_string_lossy()) {
        Ok(decoded) => {
            for warning in &decoded.warnings {
                log::warn!("{warning}");
            }
            Ok(decoded.spec)
        }
        Err(invalid) => Err(invalid.to_string().replace('\n', "; ")),
    }
}

/// The node's name: the config's, else the host name.
pub fn node_name(config: &AgentConfig) -> String {
    config.node_name.clone().unwrap_or_else(host_name)
}

/// The kernel's host name, or `localhost` when it has none.
pub fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

fn create_private_dir(path: &Path) -> Result<(), Error> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|err| Error::DataDir {
            path: path.to_path_buf(),
            err,
        })
}

/// A fresh data dir for `agent -dev`: `/tmp/csi-agent-dev-<pid>`, or with a
/// counter when that exists.
pub fn temp_data_dir() -> io::Result<PathBuf> {
    let base = std::env::temp_dir();
    for n in 0..100u32 {
        let name = if n == 0 {
            format!("csi-agent-dev-{}", std::process::id())
        } else {
            format!("csi-agent-dev-{}-{n}", std::process::id())
        };
        let path = base.join(name);
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free name for a dev data dir",
    ))
}

/// Removes a temporary data dir, unless something is still mounted under
/// it: deleting through a mount would delete the volume's data.
fn remove_temporary_data_dir(path: &Path) {
    match crate::mount::MountInfo::read() {
        Ok(info) if info.under(path).next().is_none() => {
            if let Err(err) = fs::remove_dir_all(path) {
                log::warn!("Cannot remove the dev data dir {}: {err}", path.display());
            }
        }
        Ok(_) => log::warn!(
            "Leaving the dev data dir {}: something is still mounted under it",
            path.display()
        ),
        Err(err) => log::warn!("Leaving the dev data dir {}: {err}", path.display()),
    }
}

/// The thread that turns signals into messages for the main loop.
struct SignalThread {
    events: Receiver<i32>,
    handle: Handle,
    thread: JoinHandle<()>,
}

impl SignalThread {
    fn start() -> Result<SignalThread, Error> {
        let mut signals =
            Signals::new([SIGTERM, SIGINT, SIGHUP, SIGCHLD]).map_err(Error::Signals)?;
        let handle = signals.handle();
        let (tx, events) = bounded(16);
        let thread = thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if tx.send(signal).is_err() {
                        break;
                    }
                }
            })
            .map_err(Error::Signals)?;
        Ok(SignalThread {
            events,
            handle,
            thread,
        })
    }

    fn stop(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}
