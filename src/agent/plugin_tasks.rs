//! Plugin tasks: plugins that jobs run, as the supervisor hook asks.
//!
//! A `csi_plugin` task's plugin is first a *candidate*: an instance thread
//! probes its socket, and only once it is healthy does it replace whatever
//! provided that instance of the plugin ID before (an older allocation,
//! during an update), and any instance of the ID that serves a service it
//! serves too (a monolith replaced by a split plugin's node, say).
//! When the task exits the plugin turns unhealthy; when it is stopped for
//! good the plugin is deregistered, and the shared bind of the `csi/` root
//! goes once no plugin task needs it.

use crate::plugin::instance::{Instance, InstanceReport, InstanceSettings};
use crate::plugin::{Health, InstanceKey, Report, Source};
use crate::task::PluginEffect;

use super::{Agent, RunningInstance};

impl Agent {
    /// Carries out what the plugin supervisor hook asked for.
    pub(super) fn plugin_effects(&mut self) {
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
                        self.errands.keep_all(old.instance.stop());
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
                                spec.key(),
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
                        Err(err) => log::error!("Cannot watch plugin {}: {err}", spec.key()),
                    }
                }
                PluginEffect::Exited {
                    alloc,
                    task,
                    key,
                    how,
                } => {
                    self.plugin_task_gone(alloc, task, &key, Gone::Exited(how));
                }
                PluginEffect::Stop { alloc, task, key } => {
                    self.plugin_task_gone(alloc, task, &key, Gone::Stopped);
                }
            }
        }
    }

    /// A plugin task's process ended (for good if [`Gone::Stopped`]):
    /// stop watching it, and mark its plugin unhealthy (saying how the
    /// task ended) or deregister it, if the task still provides it.
    pub(super) fn plugin_task_gone(
        &mut self,
        alloc: String,
        task: String,
        key: &InstanceKey,
        gone: Gone,
    ) {
        let candidate_key = (alloc, task);
        if let Some(candidate) = self.candidates.remove(&candidate_key) {
            self.errands.keep_all(candidate.instance.stop());
        }
        let (alloc, task) = candidate_key;
        let provides = self
            .registry
            .get(key)
            .is_some_and(|r| r.spec.source == Source::Task { alloc, task });
        if !provides {
            return;
        }
        self.stop_instance(key);
        match gone {
            Gone::Stopped => {
                log::info!("Plugin {key}: its task stopped; deregistering it");
                self.registry.deregister(key);
                self.release_csi_root();
            }
            Gone::Exited(how) => {
                self.registry.apply(
                    key,
                    Report::Status {
                        health: Health::Unhealthy,
                        reason: format!("its task {how}"),
                        fingerprint: None,
                        heartbeat: None,
                    },
                );
            }
        }
        self.dirty = true;
    }

    /// A report of a plugin task being probed: once healthy, it replaces
    /// whatever provided the plugin ID before.
    pub(super) fn candidate_report(&mut self, report: InstanceReport) {
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
        let instance = candidate.spec.key();
        log::info!(
            "Plugin {instance}: the task of alloc {} is healthy; registering it",
            key.0
        );
        for other in self.registry.conflicting(&candidate.spec) {
            log::info!("Plugin {other} is replaced by {instance}");
            self.stop_instance(&other);
            self.registry.deregister(&other);
        }
        self.stop_instance(&instance);
        self.registry.register(candidate.spec.clone());
        self.instances.insert(instance.clone(), candidate);
        self.registry.apply(&instance, report.report);
        self.allocs.plugin_healthy(&key.0, &key.1);
        self.dirty = true;
    }

    /// Unmounts the shared bind of the `csi/` root once no plugin task
    /// needs it and nothing is mounted below it.
    pub(super) fn release_csi_root(&self) {
        if self.allocs.any_plugin_task() {
            return;
        }
        let root = self.options.config.csi_dir();
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
}

/// How a plugin task went away.
pub(super) enum Gone {
    /// Its process ended, how: it will be restarted, or not.
    Exited(String),
    /// It stopped for good: its plugin is deregistered.
    Stopped,
}
