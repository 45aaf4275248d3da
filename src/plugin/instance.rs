//! The instance manager: one thread per plugin instance that owns its
//! connection (a split plugin's controller and node each have their own).
//!
//! The thread waits for the socket (inotify through [`SocketWatcher`], so a
//! plugin is probed the moment its socket appears), probes it quickly at
//! first and then less often, up to every [`PROBE_CEILING`], fingerprints
//! it once Probe says ready, and then heartbeats (Probe) every
//! `heartbeat`. It reports each outcome to the main loop and never touches
//! the registry itself.
//!
//! The fingerprint (plugin info, capabilities, node info: five RPCs) is
//! taken again on every new connection (a new socket is a new process),
//! after any heartbeat that did not find the plugin healthy, and otherwise
//! every [`REFINGERPRINT_EVERY`] heartbeats, to notice a plugin changed
//! behind a socket that stayed; a heartbeat in between is one Probe, so an
//! idle agent with many plugins costs little.
//!
//! Health as the thread sees it: `Pending` until the first good fingerprint
//! (or until `health_timeout` passes, then `Unhealthy`); `Healthy` while
//! heartbeats succeed; `Unhealthy` after a failed one or when the socket is
//! removed. A new socket at the path is probed at once, on a new connection.
//!
//! The [`Instance`] owns its thread and its workers' ([`super::workers`]);
//! stopping it hands them to the agent, which joins them as they end and
//! waits for them at shutdown ([`Instance::threads`] says what bounds
//! each).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{never, select, unbounded, Receiver, Sender};

use super::watch::{SocketEvent, SocketWatcher, Watch};
use super::workers::{Job, Workers};
use super::{Fingerprint, Health, InstanceKey, PluginSpec, Report};
use crate::csi::{Backoff, Client};
use crate::metrics;

/// The slowest probing gets while a plugin is not healthy.
pub const PROBE_CEILING: Duration = Duration::from_secs(5);

/// Probing starts this quickly and doubles up to [`PROBE_CEILING`].
const PROBE_BACKOFF: Backoff = Backoff::new(Duration::from_millis(20), PROBE_CEILING);

/// How long a plugin may take to become healthy, as in Nomad.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(30);

/// The deadline of each fingerprint RPC: they are cheap, and a plugin that
/// cannot answer them in this time is not healthy.
const FINGERPRINT_TIMEOUT: Duration = Duration::from_secs(10);

/// Heartbeats that trust the last fingerprint before one takes it again.
pub const REFINGERPRINT_EVERY: u32 = 10;

/// How an instance watches its plugin.
#[derive(Clone, Copy, Debug)]
pub struct InstanceSettings {
    pub heartbeat: Duration,
    pub health_timeout: Duration,
    /// The deadline of each volume RPC on the worker pool.
    pub rpc_timeout: Duration,
}

/// A report, with the instance it comes from: `generation` tells the
/// reports of a plugin that was removed and added again apart.
#[derive(Clone, Debug)]
pub struct InstanceReport {
    pub key: InstanceKey,
    pub generation: u64,
    pub report: Report,
}

enum Command {
    /// The plugin went away for good: end without a last word.
    Stop,
    /// The agent is stopping: report unhealthy, then end.
    Shutdown,
}

/// The handle of a running instance thread.
pub struct Instance {
    generation: u64,
    commands: Sender<Command>,
    thread: JoinHandle<()>,
    workers: Workers,
}

impl Instance {
    /// Starts the thread for `spec`.
    pub fn start(
        spec: PluginSpec,
        generation: u64,
        settings: InstanceSettings,
        watcher: &SocketWatcher,
        reports: Sender<InstanceReport>,
    ) -> io::Result<Instance> {
        let (commands, command_rx) = unbounded();
        let (socket_tx, socket_events) = unbounded();
        let watch = match watcher.watch(spec.endpoint.path(), socket_tx) {
            Ok(watch) => Some(watch),
            Err(err) => {
                // Probing still finds the socket, only later.
                log::warn!(
                    "Plugin {}: cannot watch {} ({err}); polling instead",
                    spec.key(),
                    spec.endpoint.path().display()
                );
                None
            }
        };
        let client = new_client(&spec);
        let connection = Arc::new(AtomicU64::new(0));
        let workers = Workers::new(
            &spec.key(),
            &spec.endpoint,
            settings.rpc_timeout,
            connection.clone(),
        );
        let runner = Runner {
            connection,
            spec,
            generation,
            settings,
            client,
            reports,
            commands: command_rx,
            socket_events,
            _watch: watch,
            health: Health::Pending,
            trusted: 0,
            refusal_told: None,
        };
        let thread = thread::Builder::new()
            .name(runner.spec.key().thread_name())
            .spawn(move || runner.run())?;
        Ok(Instance {
            generation,
            commands,
            thread,
            workers,
        })
    }

    /// Runs a volume operation on the plugin's worker pool.
    pub fn submit(&mut self, job: Job) {
        self.workers.submit(job);
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Asks the thread to end without a last report (the plugin was
    /// deregistered) and hands over its threads ([`Instance::threads`]).
    #[must_use = "the instance's threads are the caller's to join"]
    pub fn stop(self) -> Vec<JoinHandle<()>> {
        let _ = self.commands.send(Command::Stop);
        self.threads()
    }

    /// Asks the thread to report the plugin unhealthy and end.
    pub fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown);
    }

    /// Closes the worker pool's queue and hands over the instance thread
    /// and the workers, for the caller to join once asked to end
    /// ([`Instance::stop`], [`Instance::shutdown`]). What bounds each: the
    /// instance thread ends at its next command, after the check in
    /// flight (a Probe and at most a fingerprint, each RPC within
    /// [`FINGERPRINT_TIMEOUT`]); a worker after the jobs queued, each
    /// RPC within the instance's `rpc_timeout`.
    #[must_use = "the instance's threads are the caller's to join"]
    pub fn threads(self) -> Vec<JoinHandle<()>> {
        let mut threads = vec![self.thread];
        threads.extend(self.workers.finish());
        threads
    }
}

fn new_client(spec: &PluginSpec) -> Client {
    Client::new(&spec.endpoint)
        .with_timeout(FINGERPRINT_TIMEOUT)
        .for_plugin(&spec.id)
}

/// The outcome of one check of the plugin.
enum Check {
    /// With a fingerprint, if one was taken.
    Healthy(Option<Fingerprint>),
    /// Probe answered `ready = false`.
    NotReady,
    /// Probe answered ready, but the fingerprint failed or was refused (an
    /// answer out of bounds): the plugin is up and wrong, which its
    /// operator must hear at once, not at the health timeout.
    Refused(String),
    Failed(String),
}

struct Runner {
    /// Bumped when a new socket appears: the workers reconnect.
    connection: Arc<AtomicU64>,
    spec: PluginSpec,
    generation: u64,
    settings: InstanceSettings,
    client: Client,
    reports: Sender<InstanceReport>,
    commands: Receiver<Command>,
    socket_events: Receiver<SocketEvent>,
    _watch: Option<Watch>,
    /// The health last reported.
    health: Health,
    /// Heartbeats left that trust the last fingerprint: zero on a new
    /// connection and after a check that did not find the plugin healthy.
    trusted: u32,
    /// The last fingerprint failure logged, so that each is logged once
    /// until the plugin is healthy again.
    refusal_told: Option<String>,
}

impl Runner {
    fn run(mut self) {
        log::debug!(
            "Plugin {}: watching {}",
            self.spec.key(),
            self.spec.endpoint.path().display()
        );
        // When the current effort to get the plugin healthy began.
        let mut waiting_since = Instant::now();
        let mut attempt = 0u32;
        let mut next_check = Instant::now();
        loop {
            let timeout = next_check.saturating_duration_since(Instant::now());
            select! {
                recv(self.commands) -> command => match command {
                    Ok(Command::Stop) | Err(_) => {
                        log::debug!("Plugin {}: no longer watched", self.spec.key());
                        self.send(Report::Stopped);
                        return;
                    }
                    Ok(Command::Shutdown) => {
                        // The last fingerprint, with the connection closed:
                        // nothing answers it, so the record says unhealthy.
                        self.client = new_client(&self.spec);
                        self.set_health(Health::Unhealthy, "the agent stopped".into(), None, None);
                        self.send(Report::Stopped);
                        return;
                    }
                },
                recv(self.socket_events) -> event => match event {
                    Ok(SocketEvent::Appeared) => {
                        log::debug!("Plugin {}: socket appeared", self.spec.key());
                        // A new process is behind it: a new connection, at once.
                        self.client = new_client(&self.spec);
                        self.trusted = 0;
                        self.connection.fetch_add(1, Ordering::SeqCst);
                        attempt = 0;
                        next_check = Instant::now();
                    }
                    Ok(SocketEvent::Disappeared) => {
                        log::debug!("Plugin {}: socket removed", self.spec.key());
                        if self.health == Health::Healthy {
                            waiting_since = Instant::now();
                            self.set_health(Health::Unhealthy, "the socket was removed".into(), None, None);
                        }
                    }
                    Err(_) => self.socket_events = never(),
                },
                default(timeout) => {
                    match self.check() {
                        Check::Healthy(fingerprint) => {
                            attempt = 0;
                            self.refusal_told = None;
                            self.set_health(Health::Healthy, "probe ready".into(), fingerprint, Some(SystemTime::now()));
                            next_check = Instant::now() + self.settings.heartbeat;
                            continue;
                        }
                        Check::NotReady => self.not_healthy(waiting_since, "Probe answered not ready".into(), true),
                        Check::Refused(reason) => {
                            if self.health == Health::Healthy {
                                waiting_since = Instant::now();
                            }
                            if self.refusal_told.as_deref() != Some(reason.as_str()) {
                                log::warn!("Plugin {}: {reason}", self.spec.key());
                                self.refusal_told = Some(reason.clone());
                            }
                            self.not_healthy(waiting_since, reason, true)
                        }
                        Check::Failed(reason) => {
                            if self.health == Health::Healthy {
                                waiting_since = Instant::now();
                            }
                            self.not_healthy(waiting_since, reason, false)
                        }
                    }
                    let mut wait = PROBE_BACKOFF.ceiling(attempt);
                    if self.health == Health::Pending {
                        // Wake up in time to give up on a slow plugin.
                        let deadline = waiting_since + self.settings.health_timeout;
                        wait = wait.min(deadline.saturating_duration_since(Instant::now()));
                    }
                    next_check = Instant::now() + wait;
                    attempt = attempt.saturating_add(1);
                }
            }
        }
    }

    /// Probe, and fingerprint when ready and the last fingerprint is no
    /// longer trusted.
    fn check(&mut self) -> Check {
        let check = self.probe();
        self.trusted = match &check {
            Check::Healthy(Some(_)) => REFINGERPRINT_EVERY,
            Check::Healthy(None) => self.trusted - 1,
            Check::NotReady | Check::Refused(_) | Check::Failed(_) => 0,
        };
        check
    }

    fn probe(&self) -> Check {
        let socket = self.spec.endpoint.path();
        if !socket.exists() {
            return Check::Failed(format!("no socket at {}", socket.display()));
        }
        let labels = [self.spec.id.as_str(), self.spec.plugin_type.as_str()];
        match self.client.probe() {
            Ok(true) if self.trusted > 0 => Check::Healthy(None),
            Ok(true) => match Fingerprint::take(&self.client, self.spec.plugin_type) {
                Ok(fingerprint) => Check::Healthy(Some(fingerprint)),
                Err(err) => {
                    metrics::PLUGIN_FINGERPRINT_FAILURES.inc(&labels);
                    Check::Refused(format!("fingerprint: {err}"))
                }
            },
            Ok(false) => Check::NotReady,
            Err(err) => {
                // A plugin still starting is not failing its heartbeats.
                if self.health != Health::Pending {
                    metrics::PLUGIN_HEARTBEAT_FAILURES.inc(&labels);
                }
                Check::Failed(err.to_string())
            }
        }
    }

    /// A check that did not find the plugin healthy: a healthy plugin
    /// becomes unhealthy at once; a pending one after `health_timeout`.
    fn not_healthy(&mut self, waiting_since: Instant, reason: String, answered: bool) {
        let heartbeat = answered.then(SystemTime::now);
        match self.health {
            Health::Healthy => self.set_health(Health::Unhealthy, reason, None, heartbeat),
            Health::Pending if waiting_since.elapsed() >= self.settings.health_timeout => {
                let reason = format!(
                    "not healthy within {}: {reason}",
                    crate::units::format_duration(self.settings.health_timeout)
                );
                self.set_health(Health::Unhealthy, reason, None, heartbeat)
            }
            Health::Pending | Health::Unhealthy => {
                log::trace!("Plugin {}: {reason}", self.spec.key());
                if heartbeat.is_some() {
                    let health = self.health;
                    self.set_health(health, reason, None, heartbeat);
                }
            }
        }
    }

    fn set_health(
        &mut self,
        health: Health,
        reason: String,
        fingerprint: Option<Fingerprint>,
        heartbeat: Option<SystemTime>,
    ) {
        self.health = health;
        self.send(Report::Status {
            health,
            reason,
            fingerprint,
            heartbeat,
        });
    }

    fn send(&self, report: Report) {
        // The main loop is gone only when the agent is exiting.
        let _ = self.reports.send(InstanceReport {
            key: self.spec.key(),
            generation: self.generation,
            report,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::Endpoint;
    use crate::plugin::Source;
    use crate::spec::PluginType;

    #[test]
    fn a_stopped_instance_hands_over_its_thread_and_workers_which_end() {
        let watcher = SocketWatcher::start().unwrap();
        let spec = PluginSpec {
            id: "stopped".into(),
            endpoint: Endpoint::from_path("/nonexistent/stopped.sock").unwrap(),
            plugin_type: PluginType::Monolith,
            source: Source::Config,
            stage_publish_base_dir: None,
        };
        let settings = InstanceSettings {
            heartbeat: Duration::from_secs(60),
            health_timeout: Duration::from_secs(60),
            rpc_timeout: Duration::from_secs(1),
        };
        let (reports, _report_rx) = unbounded();
        let mut instance = Instance::start(spec, 1, settings, &watcher, reports).unwrap();
        let (release, released) = crossbeam_channel::bounded::<()>(0);
        instance.submit(Box::new(move |_: &Client| {
            let _ = released.recv();
        }));
        let threads = instance.stop();
        let names: Vec<_> = threads.iter().map(|t| t.thread().name()).collect();
        assert_eq!(names.len(), 1 + super::super::workers::WORKERS, "{names:?}");
        assert_eq!(names[0], Some("plugin-stopped"));
        drop(release);
        let deadline = Instant::now() + Duration::from_secs(10);
        for thread in threads {
            while !thread.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "a thread of a stopped instance runs on"
                );
                thread::sleep(Duration::from_millis(5));
            }
            thread.join().unwrap();
        }
        watcher.shutdown();
    }
}
