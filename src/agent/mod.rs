//! The agent: one main loop that owns all state.
//!
//! Everything that happens reaches the loop as a message on a channel: a
//! control API [`Call`], an instance thread's [`InstanceReport`], a signal,
//! or a deadline (`wakeup.rs`); with none of them due, the loop sleeps.
//! Only the loop changes the registry; it never waits on a
//! plugin (instance threads make every plugin call). After each message it
//! persists what changed, before any reply or command that depends on it.
//! When the state cannot be written (a full or failing data dir), replies
//! and plugin jobs are held, calls that would change the state are refused
//! at once, reads still answer, and the loop wakes up to write again with
//! backoff until it can; `persist.rs` has the state machine.
//!
//! Shutdown (SIGTERM, SIGINT): stop the control API, ask every instance for
//! its last report (each says unhealthy), wait for them for a bounded time,
//! persist, wait for the errands under way and the threads of the
//! instances and leaders within the same time, exit 0. A second signal during shutdown exits at once; the
//! state on disk is consistent at every moment. SIGHUP re-reads the config
//! file and adds, changes or removes plugins; a config with errors is
//! logged and ignored, and nothing changes.
//!
//! This file holds the loop and the answers to the control API; the rest
//! of the agent is split by concern:
//!
//! | module | does |
//! |---|---|
//! | `persist.rs` | the end of a turn: plan, make the turn durable, then submit the plugin jobs and send the replies |
//! | `plugins.rs` | the config's and `-dev`'s plugins: registry, instance threads, their reports, `plugin status` |
//! | `plugin_tasks.rs` | plugins run by jobs: candidates probed before they are registered, and their exits |
//! | `job_calls.rs` | the job and alloc calls of the control API, handed to the job runner |
//! | `signals.rs` | the signal thread |
//! | `engine_watch.rs` | the container engine's fingerprint taken again once the engine answers |
//! | `activation.rs` | the sockets a service manager handed over (socket activation) |
//! | `notify.rs` | readiness and stopping told to the service manager (`Type=notify`) |
//! | `telemetry.rs` | the metrics endpoint of the `telemetry` block |
//! | `volume_plugin.rs` | the endpoint of the `volume_plugin` block, Docker's volume plugin protocol |
//! | `wakeup.rs` | when the loop must wake up without a message, and what it does then |
//! | `services.rs` | the service registry kept up with what runs, in etcd in a cluster; `service list`/`service info` |
//! | `events.rs` | the ring of published events and the `Events` calls waiting for one |
//! | `errands.rs` | the threads of work handed off so that the loop never waits on it (calls answered from etcd, relayed controller calls) |
//! | [`dev`] | the supervised hostpath plugin of `-dev` and `-hostpath`, and `-dev`'s demo volume |

mod activation;
mod cluster;
mod cluster_calls;
pub mod dev;
mod engine_watch;
mod errands;
mod error;
mod events;
pub mod guard;
mod job_calls;
mod notify;
mod persist;
mod plugin_tasks;
mod plugins;
mod services;
mod setup;
mod signals;
mod telemetry;
mod volume_plugin;
mod wakeup;

use std::time::{Duration, Instant};
use std::{collections::BTreeMap, fs, thread};

use crossbeam_channel::{at, bounded, never, select, unbounded, Receiver, Sender};
use signal_hook::consts::{SIGCHLD, SIGHUP};

use crate::api::server::ControlServer;
use crate::api::{self, Access, Call, Request, Response};
use crate::plugin::instance::InstanceReport;
use crate::plugin::watch::SocketWatcher;
use crate::plugin::{Health, InstanceKey, Registry, RegistryEvent, Report, Service, Source};
use crate::spec::AgentConfig;
use crate::state::Store;
use crate::task::Allocs;
use crate::volume::layout::Paths;
use crate::volume::manager::VolumeManager;
use crate::volume::ops::OpDone;
use crate::volume_plugin::reconcile::Reconciler;
use dev::DevPlugin;
use errands::Errands;
pub use error::Error;
use events::EventLog;
use persist::{Effect, Gate};
use plugins::{config_plugin_ids, restore_registry, RunningInstance};
use setup::{another_agent_answers, create_private_dir, remove_temporary_data_dir};
pub use setup::{host_name, load_config, node_name, temp_data_dir, Options};
use signals::SignalThread;

/// How long shutdown waits for the instances' last reports.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The most messages one loop turn takes before it persists and answers.
const TURN_BATCH: usize = 64;

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(mut options: Options) -> Result<(), Error> {
    // Both read (and remove) variables of the environment: before any
    // thread starts.
    let notifier = notify::Notifier::from_env();
    let handed = activation::take_for(&options.config).map_err(Error::Activation)?;
    crate::trace::start();
    create_private_dir(&options.config.data_dir)?;
    // Mount points in mountinfo are canonical paths: so are ours, even when
    // the data dir is reached through a symlink.
    let data_dir = fs::canonicalize(&options.config.data_dir).map_err(|err| Error::DataDir {
        path: options.config.data_dir.clone(),
        err,
    })?;
    options.config.data_dir = data_dir.clone();
    setup::resolve_csi_dir(&mut options.config)?;
    let socket = data_dir.join(api::SOCKET_NAME);
    // A socket handed over answers connections itself (they wait in its
    // backlog), and the service manager runs one agent per unit.
    if handed.control.is_none() && another_agent_answers(&socket) {
        return Err(Error::AlreadyRunning { socket });
    }
    let (store, loaded) = Store::open(&data_dir).map_err(Error::State)?;
    let signals = SignalThread::start()?;
    let watcher = SocketWatcher::start().map_err(Error::Watcher)?;
    let (reports_tx, reports) = unbounded();
    let (calls_tx, calls) = unbounded();
    // Metrics first: an agent whose control socket answers serves them.
    let metrics = telemetry::start(&options.config.telemetry)?;
    let volume_plugin = volume_plugin::start(&options.config, handed.volume_plugin, &calls_tx)?;
    let _reconcile = Reconciler::start(&options.config, &node_name(&options.config), &calls_tx);
    let control = ControlServer::start(&socket, handed.control, calls_tx).map_err(Error::Api)?;

    let (done_tx, done) = unbounded();
    let mut volumes = VolumeManager::new(
        Paths {
            data_dir: data_dir.clone(),
            csi_root: options.config.csi_dir(),
        },
        done_tx,
    );
    volumes.set_stats_interval(options.config.volume_stats_interval);
    volumes.restore(&loaded.state.volumes, &loaded.journal);
    match crate::mount::MountInfo::read() {
        Ok(mounts) => volumes.reconcile(&mounts),
        Err(err) => log::error!("Cannot reconcile the claims with the mount table: {err}"),
    }
    let mut allocs = Allocs::new(&data_dir, &data_dir.join(api::SOCKET_NAME));
    allocs.use_csi_root(&options.config.csi_dir());
    allocs.configure(
        &options.config.host_volumes,
        config_plugin_ids(&options.config),
        options.config.chroot_env(),
        options.config.docker.clone(),
        options.config.exec.clone(),
        &options.config.client,
    );
    // Not reloaded on SIGHUP: a cluster node's promise counts it.
    allocs.set_max_kill_timeout(options.config.max_kill_timeout);
    allocs.set_node(crate::task::node::node_attributes(
        &setup::node_id(&data_dir)?,
        &node_name(&options.config),
        &host_name(),
        &options.config,
    ));
    allocs.restore(&loaded.state.jobs, &loaded.state.allocs);
    allocs.restore_job_index(loaded.state.job_index);
    let mut registry = restore_registry(&loaded.state);
    let registry_events = registry.subscribe();
    let mut agent = Agent {
        volumes,
        allocs,
        candidates: BTreeMap::new(),
        adopted_looked: Instant::now(),
        gate: Gate::new(),
        demo_requested: false,
        registry,
        dev: None,
        instances: BTreeMap::new(),
        generation: 0,
        watcher,
        reports_tx,
        store,
        dirty: !loaded.existed,
        cluster: None,
        errands: Errands::default(),
        events: EventLog::default(),
        starts_due: None,
        fatal: None,
        services: crate::services::Registry::default(),
        service_sync: None,
        service_lease: 0,
        options,
    };
    if agent.options.dev || agent.options.hostpath {
        let plugin = DevPlugin::start(&data_dir, &node_name(&agent.options.config))
            .map_err(Error::DevPlugin)?;
        agent.dev = Some(plugin);
    }
    agent.sync_plugins();
    agent.await_first_probes(&reports);
    agent.start_cluster()?;
    agent
        .start_service_sync()
        .map_err(|e| Error::Cluster(format!("cannot start the service sync thread: {e}")))?;
    agent.end_turn();
    log::info!(
        "Agent running with data dir {} ({} plugins)",
        data_dir.display(),
        agent.registry.list().count()
    );
    // State restored, plugins and tasks adopted, every socket bound: the
    // loop below answers what waits in their backlogs.
    notifier.ready(&format!(
        "Running ({} plugins)",
        agent.registry.list().count()
    ));
    let engine_watch = agent.watch_engine();
    let mut engine = engine_watch
        .as_ref()
        .map(|w| w.answered.clone())
        .unwrap_or_else(never);

    let (member_events, cluster_answers, volume_events) = agent.cluster_receivers();
    let service_others = agent
        .service_sync
        .as_ref()
        .map(|s| s.others().clone())
        .unwrap_or_else(never);
    let containers = agent.allocs.container_events();
    let starts = agent.allocs.start_reports();
    agent.allocs.look_for_leftover_containers();
    let mut failure = None;
    loop {
        let deadline = agent.deadlines().next().map(at).unwrap_or_else(never);
        select! {
            recv(calls) -> call => if let Ok(call) = call { agent.answer(call) },
            recv(reports) -> report => if let Ok(report) = report { agent.apply(report) },
            recv(done) -> done => if let Ok(done) = done { agent.completed(done) },
            recv(registry_events) -> event => if let Ok(event) = event { agent.registry_event(event) },
            recv(deadline) -> _ => agent.deadline_passed(),
            recv(signals.events) -> signal => match signal {
                Ok(SIGHUP) => agent.reload(),
                Ok(SIGCHLD) => agent.child_exited(),
                Ok(signal) => {
                    log::info!("Stopping on signal {signal}");
                    break;
                }
                Err(_) => break,
            },
            recv(member_events) -> event => if let Ok(event) = event { agent.cluster_event(event) },
            recv(cluster_answers) -> answer => if let Ok(answer) = answer { agent.volumes.cluster_answer(answer) },
            recv(volume_events) -> event => if let Ok(event) = event {
                agent.volumes.volume_event(event);
                agent.keep_promises();
            },
            recv(containers) -> event => if let Ok(event) = event {
                agent.allocs.container_event(event, Instant::now());
            },
            recv(starts) -> report => if let Ok(report) = report {
                agent.allocs.started(report, Instant::now());
            },
            recv(service_others) -> others => if let Ok(others) = others {
                agent.services.set_remote(others);
            },
            recv(engine) -> answered => {
                engine = never();
                if answered.is_ok() { agent.engine_answered() }
            },
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
                recv(starts) -> report => if let Ok(report) = report {
                    agent.allocs.started(report, Instant::now());
                },
                default => break,
            }
        }
        agent.end_turn();
        if let Some(message) = agent.fatal.take() {
            failure = Some(Error::Cluster(message));
            break;
        }
    }

    notifier.stopping();
    // Calls waiting for events, and calls sent but not yet taken (a
    // follower's next call, at the moment the signal came), hear that the
    // agent stops: dropping the receiver discards what the channel holds,
    // and a later call cannot be sent. The control API then stops without
    // waiting on calls nobody would answer.
    agent.events.close();
    if let Some(watch) = engine_watch {
        agent.errands.keep(watch.stop());
    }
    drop(calls);
    let sent = control.stop();
    if let Some(metrics) = metrics {
        metrics.stop();
    }
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
    // The answers the agent still held go with it; then the thread that
    // sent the others ends.
    drop(agent);
    drop(volume_plugin);
    sent.join_within(SENT_LIMIT);
    if let Err(err) = crate::trace::finish() {
        log::warn!(
            "Cannot write the latency trace (${}): {err}",
            crate::trace::TRACE_ENV
        );
    }
    match failure {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// How long the end of the agent waits for the control API's answers in
/// flight to be sent.
const SENT_LIMIT: Duration = Duration::from_secs(2);

struct Agent {
    volumes: VolumeManager,
    allocs: Allocs,
    /// Plugin tasks being probed before they are registered, by
    /// (alloc, task).
    candidates: BTreeMap<(String, String), RunningInstance>,
    /// Replies and plugin jobs, held until the state they depend on is
    /// durable; and whether it can be persisted at all.
    gate: Gate<Effect>,
    /// `-dev`: the demo volume was asked for.
    demo_requested: bool,
    options: Options,
    registry: Registry,
    dev: Option<DevPlugin>,
    instances: BTreeMap<InstanceKey, RunningInstance>,
    generation: u64,
    watcher: SocketWatcher,
    reports_tx: Sender<InstanceReport>,
    store: Store,
    /// Whether the state changed since it was last persisted.
    dirty: bool,
    /// The `cluster` block's membership, when there is one.
    cluster: Option<cluster::ClusterMember>,
    /// Work under way on threads of its own, so that the loop does not
    /// wait on it.
    errands: Errands,
    /// The published events and the `Events` calls waiting for one.
    events: EventLog,
    /// When the snapshot must have the pids of tasks started since the
    /// last one ([`crate::task::STARTS_SAVED_WITHIN`]).
    starts_due: Option<Instant>,
    /// Why the agent must stop (a node name another agent holds).
    fatal: Option<String>,
    /// When the loop last looked whether adopted tasks still run: the
    /// next look is due [`wakeup::ADOPTED_POLL`] after it, however many
    /// messages come meanwhile.
    adopted_looked: Instant,
    /// Nomad's service registry (`services.rs`), and in a cluster the
    /// thread that keeps it in etcd, with the node's lease.
    services: crate::services::Registry,
    service_sync: Option<crate::services::cluster::ServiceSync>,
    service_lease: i64,
}

impl Agent {
    /// Answers a control API call. A change is refused while the state
    /// cannot be persisted, and its answer (and any plugin job) waits for
    /// the state it made to be durable; a read is answered at once, from
    /// memory.
    fn answer(&mut self, call: Call) {
        let reply = call.reply;
        if call.request.access() == Access::Change {
            if let Some(failing) = self.gate.failing() {
                let err = persist::refusal(&self.options.config.data_dir, &failing.cause);
                crate::metrics::PERSIST_REFUSALS.inc(&[]);
                // The caller may have given up; that is not the loop's problem.
                reply.send(Err(err));
                return;
            }
        }
        let registry = &self.registry;
        // The volume manager answers in its own terms.
        let volume_reply = |reply: api::ReplyTo| reply.map(Response::Volume);
        let dispatch = match call.request {
            Request::PluginStatus { id } => {
                let local = self.plugin_status(&id);
                self.cluster_plugin_status(id, local, reply);
                None
            }
            Request::VolumeRegister(req) => {
                self.volumes.register(&req, volume_reply(reply), registry)
            }
            Request::VolumeCreate(req) => self.volumes.create(&req, volume_reply(reply), registry),
            Request::VolumeDeregister(req) => {
                self.volumes
                    .deregister(&req.id, req.force, volume_reply(reply));
                None
            }
            Request::VolumeDelete(req) => {
                self.volumes.delete(&req.id, volume_reply(reply), registry)
            }
            Request::VolumeStatus(req) => {
                // NodeGetVolumeStats changes nothing: it goes out now.
                if let Some(stats) = self.volumes.status(&req, volume_reply(reply), registry) {
                    self.submit(stats);
                }
                None
            }
            Request::VolumeClaim(req) => {
                crate::trace::point("loop-claim", "");
                self.volumes
                    .claim(&req, volume_reply(reply), registry, Instant::now());
                None
            }
            Request::VolumeRelease(req) => {
                crate::trace::point("loop-release", "");
                self.volumes
                    .release(&req.volume_id, &req.alloc_id, volume_reply(reply));
                None
            }
            Request::SnapshotCreate(req) => {
                // Sent once the volume has no other call in flight.
                self.volumes
                    .snapshot_create(&req, volume_reply(reply), registry);
                None
            }
            // These change nothing the agent keeps: they go out now.
            Request::SnapshotDelete(req) => {
                if let Some(job) = self
                    .volumes
                    .snapshot_delete(&req, volume_reply(reply), registry)
                {
                    self.submit(job);
                }
                None
            }
            Request::SnapshotList(req) => {
                if let Some(job) = self
                    .volumes
                    .snapshot_list(&req, volume_reply(reply), registry)
                {
                    self.submit(job);
                }
                None
            }
            Request::NodeStatus => {
                self.node_status(reply);
                None
            }
            Request::VolumeForceDetach { volume_id, node } => {
                self.force_detach(volume_id, node, reply);
                None
            }
            request @ (Request::JobRun(_)
            | Request::JobStop { .. }
            | Request::JobPeriodicForce { .. }
            | Request::JobDispatch(_)
            | Request::JobStatus { .. }
            | Request::AllocLogs(_)
            | Request::AllocControl(_)
            | Request::JobInspect { .. }
            | Request::JobPlan(_)) => {
                self.job_call(request, reply);
                None
            }
            Request::Events(req) => {
                self.events.read(req, reply, Instant::now());
                None
            }
            Request::Services { name } => {
                self.service_call(name, reply);
                None
            }
            Request::Session(lookup) => {
                reply.send(self.allocs.session(&lookup).map(Response::Session));
                None
            }
        };
        if let Some(dispatch) = dispatch {
            self.gate.hold(Effect::Submit(dispatch));
        }
    }

    fn completed(&mut self, done: OpDone) {
        self.volumes.completed(done, &self.registry, Instant::now());
    }

    /// Records the volume manager's notes on its plugins' histories.
    fn note_plugins(&mut self, notes: Vec<(String, String)>) {
        for (plugin, note) in notes {
            // Notes are about mounts: the node's doing.
            let Some(key) = self
                .registry
                .serving(&plugin, Service::Node)
                .map(|r| r.key())
            else {
                continue;
            };
            // The registry is in the snapshot: its history changed.
            self.dirty |= self.registry.note(&key, note);
        }
    }

    fn registry_event(&mut self, event: RegistryEvent) {
        if let RegistryEvent::HealthChanged { key, new, .. } = &event {
            let record = self.registry.get(key);
            let source = record.map(|r| r.spec.source.clone());
            let reason = record.map(|r| r.reason.clone()).unwrap_or_default();
            if let Some(Source::Task { alloc, task }) = source {
                let id = &key.plugin_id;
                let message = match new {
                    Health::Healthy => format!("plugin {id:?} became healthy"),
                    other => format!("plugin {id:?} became {}: {reason}", other.as_str()),
                };
                self.allocs.plugin_event(&alloc, &task, message);
            }
        }
        if let RegistryEvent::HealthChanged {
            key,
            new: Health::Healthy,
            ..
        } = event
        {
            // Whichever instance it is, the volumes that wait for the
            // plugin may go on.
            self.volumes.plugin_healthy(&key.plugin_id, Instant::now());
            if self.options.dev && key.plugin_id == dev::PLUGIN_ID {
                self.create_demo_volume();
            }
        }
        self.sync_candidates();
        self.sync_node_record();
    }

    /// `-dev`: creates the volume `demo` on the built-in plugin, once.
    fn create_demo_volume(&mut self) {
        if self.demo_requested || self.volumes.volumes().any(|v| v.id == dev::DEMO_VOLUME) {
            return;
        }
        self.demo_requested = true;
        let (reply, answer) = bounded(1);
        let req = crate::volume::calls::SpecRequest {
            file: "(dev demo volume)".into(),
            hcl: dev::DEMO_VOLUME_HCL.into(),
            ..Default::default()
        };
        if let Some(dispatch) = self.volumes.create(&req, reply.into(), &self.registry) {
            self.gate.hold(Effect::Submit(dispatch));
        }
        let spawned = thread::Builder::new()
            .name("dev-demo".into())
            .spawn(move || match answer.recv() {
                Ok(Ok(_)) => log::info!("Created the dev volume {:?}", dev::DEMO_VOLUME),
                Ok(Err(err)) => log::error!("Cannot create the dev volume: {err}"),
                Err(_) => {}
            });
        match spawned {
            Ok(thread) => self.errands.keep(thread),
            Err(err) => log::warn!("Cannot watch the dev volume's creation: {err}"),
        }
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
        setup::changed_for_next_start(&self.options.config, &config, self.options.dev);
        let data_dir = self.options.config.data_dir.clone();
        self.options.config = AgentConfig { data_dir, ..config };
        self.allocs.configure(
            &self.options.config.host_volumes,
            config_plugin_ids(&self.options.config),
            self.options.config.chroot_env(),
            self.options.config.docker.clone(),
            self.options.config.exec.clone(),
            &self.options.config.client,
        );
        self.allocs.reconfigure_node(&self.options.config);
        self.volumes
            .set_stats_interval(self.options.config.volume_stats_interval);
        log::info!("SIGHUP: reloaded {}", path.display());
        self.sync_plugins();
    }

    /// SIGCHLD: a task or `-dev`'s plugin may have exited.
    fn child_exited(&mut self) {
        self.adopted_looked = Instant::now();
        self.allocs.reap(self.adopted_looked);
        if let Some(dev) = &mut self.dev {
            dev.supervise();
        }
    }

    /// state is persisted. Bounded by [`SHUTDOWN_TIMEOUT`].
    fn shutdown(&mut self, reports: &Receiver<InstanceReport>, signals: &Receiver<i32>) {
        // Leaving the cluster revokes the node's lease, so the others see
        // it gone at once, unless tasks that hold write claims outlive the
        // agent: then the lease expires as for a node cut off, which is
        // what the fencer counts a node's promise from.
        self.leave_cluster();
        for (_, candidate) in std::mem::take(&mut self.candidates) {
            self.errands.keep_all(candidate.instance.stop());
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
        let silent: Vec<InstanceKey> = self
            .registry
            .list()
            .filter(|r| r.health != crate::plugin::Health::Unhealthy)
            .map(|r| r.key())
            .collect();
        for key in silent {
            self.registry.apply(
                &key,
                Report::Status {
                    health: crate::plugin::Health::Unhealthy,
                    reason: "the agent stopped".to_string(),
                    fingerprint: None,
                    heartbeat: None,
                },
            );
        }
        // The starts under way are taken in, so that the snapshot has
        // their pids.
        let starters = self.allocs.finish_starts(deadline);
        self.errands.keep_all(starters);
        self.persist_at_shutdown();
        for (_, running) in std::mem::take(&mut self.instances) {
            self.errands.keep_all(running.instance.threads());
        }
        // The errands, and the threads of the instances and leaders.
        self.errands.finish(deadline);
        if let Some(mut dev) = self.dev.take() {
            dev.stop();
        }
        self.release_csi_root();
        log::info!("Agent stopped");
    }
}
