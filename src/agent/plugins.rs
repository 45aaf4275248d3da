//! The plugins of the config and `-dev`: the registry kept in step with
//! them, one instance thread per plugin instance (a split plugin's
//! controller and node each have theirs), their reports, and `plugin
//! status` per plugin ID.
//!
//! SIGHUP and start-up call [`Agent::sync_plugins`]: new instances are
//! registered and get a thread, changed ones get a new thread (late
//! reports of the old one are told apart by generation), and instances
//! that went away are deregistered, unless a running task provides them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::call::CallError;
use crate::plugin::instance::{Instance, InstanceReport, InstanceSettings};
use crate::plugin::{
    Health, InstanceKey, PluginRecord, PluginSpec, PluginStatus, Registry, Report, Source,
    StatusReport,
};
use crate::proto::state as statepb;
use crate::spec::{AgentConfig, DEFAULT_HEALTH_TIMEOUT};

use super::{dev, Agent};

/// How long the start waits for the plugins' first probes before the
/// agent is ready ([`Agent::await_first_probes`]): a plugin that serves
/// answers in milliseconds.
const FIRST_PROBES: Duration = Duration::from_secs(1);

/// An instance thread and what it was started with.
pub(super) struct RunningInstance {
    pub(super) instance: Instance,
    pub(super) spec: PluginSpec,
    pub(super) settings: InstanceSettings,
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
                    stage_publish_base_dir: None,
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
    /// plugins: registers new instances, restarts changed ones, and
    /// deregisters those that went away for good.
    pub(super) fn sync_plugins(&mut self) {
        let wanted = self.wanted_plugins();
        let allocs = &self.allocs;
        let gone: Vec<InstanceKey> = self
            .registry
            .list()
            .filter(|r| !wanted.iter().any(|(s, _)| s.key() == r.key()))
            .filter(|r| match &r.spec.source {
                Source::Task { alloc, task } => !allocs.provides(alloc, task),
                _ => true,
            })
            .map(PluginRecord::key)
            .collect();
        for key in gone {
            self.stop_instance(&key);
            self.registry.deregister(&key);
            self.dirty = true;
        }
        for (spec, settings) in wanted {
            // A plugin task's instance of the same service gives way.
            for key in self.registry.conflicting(&spec) {
                log::info!("Plugin {key} is replaced by {}", spec.key());
                self.stop_instance(&key);
                self.registry.deregister(&key);
                self.dirty = true;
            }
            if self.registry.register(spec.clone()) {
                self.dirty = true;
            }
            let current = self.instances.get(&spec.key());
            let unchanged = current.is_some_and(|r| {
                r.spec == spec
                    && r.settings.heartbeat == settings.heartbeat
                    && r.settings.health_timeout == settings.health_timeout
                    && r.settings.rpc_timeout == settings.rpc_timeout
            });
            if !unchanged {
                self.stop_instance(&spec.key());
                self.start_instance(spec, settings);
            }
        }
    }

    pub(super) fn start_instance(&mut self, spec: PluginSpec, settings: InstanceSettings) {
        self.generation += 1;
        let key = spec.key();
        match Instance::start(
            spec.clone(),
            self.generation,
            settings,
            &self.watcher,
            self.reports_tx.clone(),
        ) {
            Ok(instance) => {
                self.instances.insert(
                    key,
                    RunningInstance {
                        instance,
                        spec,
                        settings,
                    },
                );
            }
            Err(err) => log::error!("Cannot start the thread of plugin {key}: {err}"),
        }
    }

    /// Stops an instance thread; it ends after any call in flight, and its
    /// late reports are ignored by generation. Joining would wait for that
    /// call: the errands keep its threads and its workers' instead, joined
    /// once they ended.
    pub(super) fn stop_instance(&mut self, key: &InstanceKey) {
        if let Some(running) = self.instances.remove(key) {
            self.errands.keep_all(running.instance.stop());
        }
    }

    pub(super) fn apply(&mut self, report: InstanceReport) {
        let current = self
            .instances
            .get(&report.key)
            .is_some_and(|r| r.instance.generation() == report.generation);
        if !current {
            self.candidate_report(report);
            return;
        }
        // A fingerprint comes with a healthy check on a new connection (the
        // instance's first, a socket that appeared) or after a check that
        // failed. The registry may have called the plugin healthy all along
        // (the snapshot of an agent that was killed, or a reboot), so no
        // change of health says so: the volumes waiting on the plugin to
        // retry a step are woken here, not at their backoff's end.
        let reachable = matches!(
            &report.report,
            Report::Status {
                health: Health::Healthy,
                fingerprint: Some(_),
                ..
            }
        );
        let plugin_id = report.key.plugin_id.clone();
        if self.registry.apply(&report.key, report.report).persistent() {
            self.dirty = true;
        }
        if reachable {
            self.volumes.plugin_healthy(&plugin_id, Instant::now());
        }
    }

    /// At start, before the agent says it is ready: waits until every
    /// instance's first check found its plugin healthy, within
    /// [`FIRST_PROBES`].
    /// Each instance probes at once, so a plugin that already serves (the
    /// usual case after a reboot) is known healthy in a few milliseconds,
    /// and the first calls waiting in the sockets' backlogs (dockerd's
    /// Creates and Mounts) are not refused as "not healthy" meanwhile. A
    /// plugin that does not answer in time is waited for as before: its
    /// socket watched, probed the moment it appears.
    pub(super) fn await_first_probes(&mut self, reports: &Receiver<InstanceReport>) {
        let limit = FIRST_PROBES;
        let mut waiting: BTreeSet<InstanceKey> = self.instances.keys().cloned().collect();
        let deadline = Instant::now() + limit;
        while !waiting.is_empty() {
            let Ok(report) = reports.recv_deadline(deadline) else {
                break;
            };
            if matches!(
                report.report,
                Report::Status {
                    health: Health::Healthy,
                    ..
                }
            ) {
                waiting.remove(&report.key);
            }
            self.apply(report);
        }
        for key in waiting {
            log::info!(
                "Plugin {key} is not healthy {} after the start; its calls wait until it is",
                crate::units::format_duration(limit)
            );
        }
    }

    /// `plugin status`: every plugin ID, or one, with its instances.
    pub(super) fn plugin_status(&self, id: &str) -> Result<StatusReport, CallError> {
        let mut plugins: Vec<PluginStatus> = if id.is_empty() {
            self.registry
                .ids()
                .into_iter()
                .filter_map(|id| self.registry.status(id))
                .collect()
        } else {
            match self.registry.status(id) {
                Some(status) => vec![status],
                None => {
                    let known = self.registry.ids();
                    return Err(CallError::not_found(if known.is_empty() {
                        format!("no plugin {id:?} (no plugins are registered)")
                    } else {
                        format!("no plugin {id:?} (registered: {})", known.join(", "))
                    }));
                }
            }
        };
        for plugin in &mut plugins {
            plugin.volumes = self
                .volumes
                .volumes()
                .filter(|v| v.plugin_id == plugin.id)
                .map(|v| v.id.clone())
                .collect();
            plugin.capacity = self.volumes.plugin_capacity(&plugin.id).cloned();
        }
        Ok(StatusReport {
            plugins,
            cluster_note: String::new(),
        })
    }
}

/// The registry a snapshot kept; unreadable records are logged and dropped
/// (their plugins register again from the config).
///
/// A plugin a job's task serves has no instance until its task runs again
/// (adopted, or started anew after a reboot), so its records are
/// unhealthy until that instance says otherwise. A clean stop marks them
/// so before its last snapshot; a killed agent's snapshot still calls
/// them healthy, and a claim planned on that word would go to an instance
/// that is not there. The config's plugins get their instances before
/// the first turn, and keep the snapshot's word until they answer.
pub(super) fn restore_registry(state: &statepb::State) -> Registry {
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
    let mut registry = Registry::restore(records);
    let watched: Vec<InstanceKey> = registry
        .list()
        .filter(|r| r.health != Health::Unhealthy)
        .filter(|r| matches!(r.spec.source, Source::Task { .. }))
        .map(|r| r.key())
        .collect();
    for key in watched {
        registry.apply(
            &key,
            Report::Status {
                health: Health::Unhealthy,
                reason: "not watched since the agent stopped".to_string(),
                fingerprint: None,
                heartbeat: None,
            },
        );
    }
    registry
}

/// The plugin IDs the config provides; jobs may not provide them too.
pub(super) fn config_plugin_ids(config: &AgentConfig) -> std::collections::BTreeSet<String> {
    order::set(config.plugins.iter().map(|p| p.id.clone()))
}
