//! The plugin registry: every plugin the agent supervises, its last
//! fingerprint, health, and recent health events.
//!
//! Owned by the main loop and changed only there. Subscribers (the volume
//! manager is one) get every registration, deregistration and health change
//! over a channel, so nothing polls. The registry is kept in the state
//! snapshot, so a restarted agent knows its plugins before it has probed
//! them.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::time::SystemTime;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::fingerprint::{from_unix_ms, unix_ms};
use super::{Fingerprint, Health, PluginSpec, Report, Source};
use crate::proto::agent as api;

/// How many health events each plugin keeps.
pub const EVENTS_KEPT: usize = 16;

/// One change of a plugin's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthEvent {
    pub time: SystemTime,
    pub old: Health,
    pub new: Health,
    pub reason: String,
}

/// What subscribers hear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryEvent {
    Registered(String),
    Deregistered(String),
    HealthChanged {
        id: String,
        old: Health,
        new: Health,
    },
}

/// A plugin in the registry.
#[derive(Clone, Debug, PartialEq)]
pub struct PluginRecord {
    pub spec: PluginSpec,
    pub health: Health,
    /// Why `health` is what it is.
    pub reason: String,
    pub fingerprint: Option<Fingerprint>,
    pub last_heartbeat: Option<SystemTime>,
    /// The most recent health changes, oldest first.
    pub events: VecDeque<HealthEvent>,
    pub registered: SystemTime,
}

impl PluginRecord {
    fn new(spec: PluginSpec) -> PluginRecord {
        PluginRecord {
            spec,
            health: Health::Pending,
            reason: "waiting for the plugin".to_string(),
            fingerprint: None,
            last_heartbeat: None,
            events: VecDeque::new(),
            registered: SystemTime::now(),
        }
    }

    /// Healthy and serving the controller service.
    pub fn controller_healthy(&self) -> bool {
        self.health == Health::Healthy
            && self.spec.plugin_type.has_controller()
            && self
                .fingerprint
                .as_ref()
                .is_some_and(|f| f.has_controller())
    }

    /// Healthy and serving the node service.
    pub fn node_healthy(&self) -> bool {
        self.health == Health::Healthy && self.spec.plugin_type.has_node()
    }

    pub fn to_proto(&self) -> api::Plugin {
        api::Plugin {
            id: self.spec.id.clone(),
            socket: self.spec.endpoint.path().to_string_lossy().into_owned(),
            type_: self.spec.plugin_type.as_str().to_string(),
            source: self.spec.source.as_string(),
            health: health_to_proto(self.health).into(),
            health_reason: self.reason.clone(),
            fingerprint: self.fingerprint.as_ref().map(Fingerprint::to_proto).into(),
            last_heartbeat_unix_ms: self.last_heartbeat.map(unix_ms).unwrap_or(0),
            events: self
                .events
                .iter()
                .map(|e| api::HealthEvent {
                    unix_ms: unix_ms(e.time),
                    old_health: health_to_proto(e.old).into(),
                    new_health: health_to_proto(e.new).into(),
                    reason: e.reason.clone(),
                    ..Default::default()
                })
                .collect(),
            registered_unix_ms: unix_ms(self.registered),
            stage_publish_base_dir: self
                .spec
                .stage_publish_base_dir
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    /// The record a snapshot kept, or why it cannot be used.
    pub fn from_proto(p: &api::Plugin) -> Result<PluginRecord, String> {
        let endpoint = p
            .socket
            .parse()
            .map_err(|e| format!("plugin {:?}: {e}", p.id))?;
        let plugin_type = p
            .type_
            .parse()
            .map_err(|e| format!("plugin {:?}: {e}", p.id))?;
        let source = Source::parse(&p.source)
            .ok_or_else(|| format!("plugin {:?}: unknown source {:?}", p.id, p.source))?;
        let health = |h: protobuf::EnumOrUnknown<api::Health>| match h.enum_value() {
            Ok(api::Health::HEALTHY) => Health::Healthy,
            Ok(api::Health::UNHEALTHY) => Health::Unhealthy,
            _ => Health::Pending,
        };
        Ok(PluginRecord {
            spec: PluginSpec {
                id: p.id.clone(),
                endpoint,
                plugin_type,
                source,
                stage_publish_base_dir: (!p.stage_publish_base_dir.is_empty())
                    .then(|| PathBuf::from(&p.stage_publish_base_dir)),
            },
            health: health(p.health),
            reason: p.health_reason.clone(),
            fingerprint: p.fingerprint.as_ref().map(Fingerprint::from_proto),
            last_heartbeat: (p.last_heartbeat_unix_ms > 0)
                .then(|| from_unix_ms(p.last_heartbeat_unix_ms)),
            events: p
                .events
                .iter()
                .map(|e| HealthEvent {
                    time: from_unix_ms(e.unix_ms),
                    old: health(e.old_health),
                    new: health(e.new_health),
                    reason: e.reason.clone(),
                })
                .collect(),
            registered: from_unix_ms(p.registered_unix_ms),
        })
    }
}

pub fn health_to_proto(health: Health) -> api::Health {
    match health {
        Health::Pending => api::Health::PENDING,
        Health::Healthy => api::Health::HEALTHY,
        Health::Unhealthy => api::Health::UNHEALTHY,
    }
}

/// What applying a report changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changed {
    pub health: bool,
    pub fingerprint: bool,
}

impl Changed {
    /// Whether the snapshot must be written again.
    pub fn persistent(self) -> bool {
        self.health || self.fingerprint
    }
}

#[derive(Default)]
pub struct Registry {
    plugins: BTreeMap<String, PluginRecord>,
    subscribers: Vec<Sender<RegistryEvent>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// A registry with the records of a snapshot, as they were: their
    /// instances report the current health soon.
    pub fn restore(records: Vec<PluginRecord>) -> Registry {
        Registry {
            plugins: records
                .into_iter()
                .map(|r| (r.spec.id.clone(), r))
                .collect(),
            subscribers: Vec::new(),
        }
    }

    /// A channel that hears every later change.
    pub fn subscribe(&mut self) -> Receiver<RegistryEvent> {
        let (tx, rx) = unbounded();
        self.subscribers.push(tx);
        rx
    }

    fn publish(&mut self, event: RegistryEvent) {
        self.subscribers.retain(|s| s.send(event.clone()).is_ok());
    }

    /// Registers `spec`, or updates the spec of a plugin with its ID (a new
    /// socket or type starts it over as pending). Returns whether anything
    /// changed.
    pub fn register(&mut self, spec: PluginSpec) -> bool {
        match self.plugins.get_mut(&spec.id) {
            Some(record) if record.spec == spec => false,
            Some(record) => {
                log::info!(
                    "Plugin {} changed: {}, {} at {}",
                    spec.id,
                    spec.source.as_string(),
                    spec.plugin_type,
                    spec.endpoint.path().display()
                );
                let id = spec.id.clone();
                record.spec = spec;
                record.fingerprint = None;
                record.last_heartbeat = None;
                // The new socket or type starts over as pending, as an
                // event like any other health change.
                self.apply(
                    &id,
                    Report::Status {
                        health: Health::Pending,
                        reason: "its socket or type changed".to_string(),
                        fingerprint: None,
                        heartbeat: None,
                    },
                );
                true
            }
            None => {
                log::info!(
                    "Plugin {} registered ({}, {} at {})",
                    spec.id,
                    spec.source.as_string(),
                    spec.plugin_type,
                    spec.endpoint.path().display()
                );
                let id = spec.id.clone();
                self.plugins.insert(id.clone(), PluginRecord::new(spec));
                self.publish(RegistryEvent::Registered(id));
                true
            }
        }
    }

    pub fn deregister(&mut self, id: &str) -> Option<PluginRecord> {
        let record = self.plugins.remove(id)?;
        log::info!("Plugin {id} deregistered");
        self.publish(RegistryEvent::Deregistered(id.to_string()));
        Some(record)
    }

    pub fn get(&self, id: &str) -> Option<&PluginRecord> {
        self.plugins.get(id)
    }

    /// Every plugin, by ID.
    pub fn list(&self) -> impl Iterator<Item = &PluginRecord> {
        self.plugins.values()
    }

    /// Plugins that serve the controller service (by type).
    pub fn controllers(&self) -> impl Iterator<Item = &PluginRecord> {
        self.list().filter(|r| r.spec.plugin_type.has_controller())
    }

    /// Plugins that serve the node service (by type).
    pub fn nodes(&self) -> impl Iterator<Item = &PluginRecord> {
        self.list().filter(|r| r.spec.plugin_type.has_node())
    }

    /// Applies an instance's report. A health change is logged, kept as an
    /// event and published; a report that repeats the health changes
    /// nothing but the heartbeat and reason.
    pub fn apply(&mut self, id: &str, report: Report) -> Changed {
        let Report::Status {
            health,
            reason,
            fingerprint,
            heartbeat,
        } = report
        else {
            return Changed::default();
        };
        let Some(record) = self.plugins.get_mut(id) else {
            return Changed::default();
        };
        let mut changed = Changed::default();
        if let Some(fingerprint) = fingerprint {
            changed.fingerprint = !record
                .fingerprint
                .as_ref()
                .is_some_and(|f| f.same_as(&fingerprint));
            if changed.fingerprint {
                log::info!(
                    "Plugin {id} fingerprinted: {} {}, node {:?}",
                    fingerprint.info.name,
                    fingerprint.info.vendor_version,
                    fingerprint
                        .node
                        .as_ref()
                        .map(|n| n.node_id.as_str())
                        .unwrap_or("")
                );
            }
            record.fingerprint = Some(fingerprint);
        }
        if heartbeat.is_some() {
            record.last_heartbeat = heartbeat;
        }
        let old = record.health;
        record.reason = reason.clone();
        if old != health {
            changed.health = true;
            record.health = health;
            let line = format!("Plugin {id} is {health} (was {old}): {reason}");
            if health == Health::Healthy {
                log::info!("{line}");
            } else {
                log::warn!("{line}");
            }
            if record.events.len() == EVENTS_KEPT {
                record.events.pop_front();
            }
            record.events.push_back(HealthEvent {
                time: SystemTime::now(),
                old,
                new: health,
                reason,
            });
            self.publish(RegistryEvent::HealthChanged {
                id: id.to_string(),
                old,
                new: health,
            });
        }
        changed
    }

    /// Records `reason` in plugin `id`'s event history without changing
    /// its health: something the agent found the plugin doing (such as
    /// leaving a mount behind after saying it removed it). False when no
    /// such plugin is registered.
    pub fn note(&mut self, id: &str, reason: String) -> bool {
        let Some(record) = self.plugins.get_mut(id) else {
            return false;
        };
        if record.events.len() == EVENTS_KEPT {
            record.events.pop_front();
        }
        record.events.push_back(HealthEvent {
            time: SystemTime::now(),
            old: record.health,
            new: record.health,
            reason,
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::PluginType;

    fn spec(id: &str) -> PluginSpec {
        PluginSpec {
            id: id.to_string(),
            endpoint: format!("/run/csi/{id}.sock").parse().unwrap(),
            plugin_type: PluginType::Monolith,
            source: Source::Config,
            stage_publish_base_dir: None,
        }
    }

    fn status(health: Health, reason: &str) -> Report {
        Report::Status {
            health,
            reason: reason.to_string(),
            fingerprint: None,
            heartbeat: None,
        }
    }

    #[test]
    fn subscribers_hear_registration_health_and_deregistration() {
        let mut registry = Registry::new();
        let events = registry.subscribe();
        assert!(registry.register(spec("a")));
        registry.apply("a", status(Health::Healthy, "ok"));
        registry.deregister("a");
        let heard: Vec<_> = events.try_iter().collect();
        assert_eq!(
            heard,
            [
                RegistryEvent::Registered("a".into()),
                RegistryEvent::HealthChanged {
                    id: "a".into(),
                    old: Health::Pending,
                    new: Health::Healthy
                },
                RegistryEvent::Deregistered("a".into()),
            ]
        );
    }

    #[test]
    fn a_repeated_health_is_not_an_event() {
        let mut registry = Registry::new();
        registry.register(spec("a"));
        let events = registry.subscribe();
        assert!(registry.apply("a", status(Health::Unhealthy, "x")).health);
        assert!(!registry.apply("a", status(Health::Unhealthy, "y")).health);
        assert_eq!(events.try_iter().count(), 1);
        let record = registry.get("a").unwrap();
        assert_eq!(record.events.len(), 1);
        assert_eq!(record.reason, "y");
    }

    #[test]
    fn the_event_ring_keeps_the_most_recent() {
        let mut registry = Registry::new();
        registry.register(spec("a"));
        for i in 0..EVENTS_KEPT + 5 {
            let health = if i % 2 == 0 {
                Health::Healthy
            } else {
                Health::Unhealthy
            };
            registry.apply("a", status(health, &format!("r{i}")));
        }
        let events = &registry.get("a").unwrap().events;
        assert_eq!(events.len(), EVENTS_KEPT);
        assert_eq!(
            events.back().unwrap().reason,
            format!("r{}", EVENTS_KEPT + 4)
        );
    }

    #[test]
    fn a_changed_socket_is_a_health_change_to_pending() {
        let mut registry = Registry::new();
        registry.register(spec("a"));
        registry.apply("a", status(Health::Healthy, "ok"));
        let events = registry.subscribe();
        assert!(registry.register(PluginSpec {
            endpoint: "/run/csi/other.sock".parse().unwrap(),
            ..spec("a")
        }));
        let record = registry.get("a").unwrap();
        assert_eq!(record.health, Health::Pending);
        assert!(record.fingerprint.is_none());
        assert_eq!(record.events.len(), 2);
        assert_eq!(
            events.try_iter().collect::<Vec<_>>(),
            [RegistryEvent::HealthChanged {
                id: "a".into(),
                old: Health::Healthy,
                new: Health::Pending
            }]
        );
    }

    #[test]
    fn registering_the_same_spec_twice_changes_nothing() {
        let mut registry = Registry::new();
        let events = registry.subscribe();
        assert!(registry.register(spec("a")));
        assert!(!registry.register(spec("a")));
        assert_eq!(events.try_iter().count(), 1);
    }

    #[test]
    fn a_dropped_subscriber_is_forgotten() {
        let mut registry = Registry::new();
        drop(registry.subscribe());
        registry.register(spec("a"));
        assert!(registry.subscribers.is_empty());
    }

    #[test]
    fn records_survive_a_round_trip_through_the_snapshot_message() {
        let mut registry = Registry::new();
        registry.register(PluginSpec {
            source: Source::Task {
                alloc: "a1".into(),
                task: "plugin".into(),
            },
            // A plugin task's view of the paths survives an agent restart.
            stage_publish_base_dir: Some(PathBuf::from("/local/csi")),
            ..spec("a")
        });
        registry.apply("a", status(Health::Unhealthy, "gone"));
        let record = registry.get("a").unwrap();
        let mut restored = PluginRecord::from_proto(&record.to_proto()).unwrap();
        assert_eq!(
            restored.spec.stage_publish_base_dir.as_deref(),
            Some(std::path::Path::new("/local/csi"))
        );
        // Times go through milliseconds.
        let ms = |t: SystemTime| unix_ms(t);
        assert_eq!(ms(restored.registered), ms(record.registered));
        restored.registered = record.registered;
        for (a, b) in restored.events.iter_mut().zip(&record.events) {
            assert_eq!(ms(a.time), ms(b.time));
            a.time = b.time;
        }
        assert_eq!(&restored, record);
    }

    #[test]
    fn only_monoliths_and_controllers_count_as_controllers() {
        let mut registry = Registry::new();
        registry.register(spec("mono"));
        registry.register(PluginSpec {
            plugin_type: PluginType::Node,
            ..spec("node")
        });
        let ids = |it: &mut dyn Iterator<Item = &PluginRecord>| {
            it.map(|r| r.spec.id.clone()).collect::<Vec<_>>()
        };
        assert_eq!(ids(&mut registry.controllers()), ["mono"]);
        assert_eq!(ids(&mut registry.nodes()), ["mono", "node"]);
    }
}
