//! The plugin registry: every plugin instance the agent supervises, by
//! [`InstanceKey`], with its last fingerprint, health, and recent health
//! events; and the status of a plugin ID, its instances taken together as
//! Nomad counts them (controllers and nodes, healthy and expected).
//!
//! Owned by the main loop and changed only there. Subscribers (the volume
//! manager is one) get every registration, deregistration and health change
//! over a channel, so nothing polls. The registry is kept in the state
//! snapshot, so a restarted agent knows its plugins before it has probed
//! them. A record names its instance by its ID and type, so the snapshots
//! of releases that had one record per ID load as they are.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::time::SystemTime;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::fingerprint::{from_unix_ms, unix_ms};
use super::{Fingerprint, Health, InstanceKey, PluginSpec, Report, Service, Source};
use crate::csi::types::PluginCapability;
use crate::events::{self, Topic};
use crate::proto::state as pb;

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
    Registered(InstanceKey),
    Deregistered(InstanceKey),
    HealthChanged {
        key: InstanceKey,
        old: Health,
        new: Health,
    },
}

/// A plugin's instances counted by service ([`Registry::counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub controllers_healthy: u32,
    pub controllers_expected: u32,
    pub nodes_healthy: u32,
    pub nodes_expected: u32,
}

/// A plugin as `plugin status` shows it: its instances taken together.
#[derive(Clone, Debug, PartialEq)]
pub struct PluginStatus {
    pub id: String,
    /// The name and version its controller's fingerprint gives, else its
    /// node's.
    pub provider: String,
    pub version: String,
    pub controllers_healthy: u32,
    pub controllers_expected: u32,
    pub nodes_healthy: u32,
    pub nodes_expected: u32,
    /// Healthy if every instance is, unhealthy if any is.
    pub health: Health,
    /// Empty for a plugin only other nodes of a cluster run.
    pub instances: Vec<PluginRecord>,
    /// The volumes registered on it.
    pub volumes: Vec<String>,
    /// Its controller's last GetCapacity here, with when, or why it failed.
    pub capacity: Option<CapacityStatus>,
}

/// A plugin's capacity as its controller last said it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapacityStatus {
    pub reading: Option<(crate::csi::types::Capacity, std::time::SystemTime)>,
    /// Why the last GetCapacity failed, if it did.
    pub error: String,
}

impl PluginStatus {
    /// A plugin this host has no instance of (only other nodes of a
    /// cluster run it): nothing counted yet.
    pub fn elsewhere(id: &str) -> PluginStatus {
        PluginStatus {
            id: id.to_string(),
            provider: String::new(),
            version: String::new(),
            controllers_healthy: 0,
            controllers_expected: 0,
            nodes_healthy: 0,
            nodes_expected: 0,
            health: Health::Pending,
            instances: Vec::new(),
            volumes: Vec::new(),
            capacity: None,
        }
    }
}

/// The answer to `plugin status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusReport {
    pub plugins: Vec<PluginStatus>,
    /// Why the counts are this host's only, in a cluster.
    pub cluster_note: String,
}

/// A plugin instance in the registry.
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

    pub fn key(&self) -> InstanceKey {
        self.spec.key()
    }

    /// Keeps a health change (or, with `old == new`, a note) in the
    /// record's recent events and emits it to the agent's event stream:
    /// one event, both places.
    fn event(&mut self, key: &InstanceKey, old: Health, new: Health, reason: String) {
        let (kind, message) = if old == new {
            ("Note", reason.clone())
        } else {
            ("HealthChanged", format!("{new} (was {old}): {reason}"))
        };
        events::emit(Topic::Plugin, kind, key.to_string(), message);
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(HealthEvent {
            time: SystemTime::now(),
            old,
            new,
            reason,
        });
    }

    /// Whether it is meant to serve the controller service: a controller,
    /// or a monolith whose fingerprint (if any yet) says it does.
    pub fn is_controller(&self) -> bool {
        self.spec.plugin_type.has_controller()
            && self
                .fingerprint
                .as_ref()
                .map_or(true, Fingerprint::has_controller)
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
        self.health == Health::Healthy
            && self.spec.plugin_type.has_node()
            && self.fingerprint.is_some()
    }

    pub fn to_proto(&self) -> pb::PluginRecord {
        pb::PluginRecord {
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
                .map(|e| pb::HealthEvent {
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
    pub fn from_proto(p: &pb::PluginRecord) -> Result<PluginRecord, String> {
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
        let health = |h: protobuf::EnumOrUnknown<pb::PluginHealth>| match h.enum_value() {
            Ok(pb::PluginHealth::PLUGIN_HEALTHY) => Health::Healthy,
            Ok(pb::PluginHealth::PLUGIN_UNHEALTHY) => Health::Unhealthy,
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

fn health_to_proto(health: Health) -> pb::PluginHealth {
    match health {
        Health::Pending => pb::PluginHealth::PLUGIN_PENDING,
        Health::Healthy => pb::PluginHealth::PLUGIN_HEALTHY,
        Health::Unhealthy => pb::PluginHealth::PLUGIN_UNHEALTHY,
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
    plugins: BTreeMap<InstanceKey, PluginRecord>,
    subscribers: Vec<Sender<RegistryEvent>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// A registry with the records of a snapshot, as they were: their
    /// instances report the current health soon.
    pub fn restore(records: Vec<PluginRecord>) -> Registry {
        for record in &records {
            count_instance(record.key(), record.health, 1.0);
        }
        Registry {
            plugins: order::map(records.into_iter().map(|r| (r.key(), r))),
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

    /// Registers `spec`, or updates the spec of its instance (a new socket
    /// or source starts it over as pending). Returns whether anything
    /// changed. The caller deregisters the instances it
    /// [conflicts](Registry::conflicting) with first.
    pub fn register(&mut self, spec: PluginSpec) -> bool {
        let key = spec.key();
        match self.plugins.get_mut(&key) {
            Some(record) if record.spec == spec => false,
            Some(record) => {
                log::info!(
                    "Plugin {key} changed: {} at {}",
                    spec.source.as_string(),
                    spec.endpoint.path().display()
                );
                record.spec = spec;
                record.fingerprint = None;
                record.last_heartbeat = None;
                // The new socket starts over as pending, as an event like
                // any other health change.
                self.apply(
                    &key,
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
                    "Plugin {key} registered ({}, {} at {})",
                    spec.source.as_string(),
                    spec.plugin_type,
                    spec.endpoint.path().display()
                );
                count_instance(key.clone(), Health::Pending, 1.0);
                events::emit(
                    Topic::Plugin,
                    "Registered",
                    key.to_string(),
                    format!(
                        "{} at {}",
                        spec.source.as_string(),
                        spec.endpoint.path().display()
                    ),
                );
                self.plugins.insert(key.clone(), PluginRecord::new(spec));
                self.publish(RegistryEvent::Registered(key));
                true
            }
        }
    }

    /// The other instances of `spec`'s plugin ID that serve a service it
    /// serves too: registering it must replace them.
    pub fn conflicting(&self, spec: &PluginSpec) -> Vec<InstanceKey> {
        let key = spec.key();
        self.instances(&spec.id)
            .map(PluginRecord::key)
            .filter(|k| *k != key && k.plugin_type.conflicts(key.plugin_type))
            .collect()
    }

    pub fn deregister(&mut self, key: &InstanceKey) -> Option<PluginRecord> {
        let record = self.plugins.remove(key)?;
        count_instance(key.clone(), record.health, -1.0);
        log::info!("Plugin {key} deregistered");
        events::emit(Topic::Plugin, "Deregistered", key.to_string(), "");
        self.publish(RegistryEvent::Deregistered(key.clone()));
        Some(record)
    }

    pub fn get(&self, key: &InstanceKey) -> Option<&PluginRecord> {
        self.plugins.get(key)
    }

    /// Every instance, by ID, then type.
    pub fn list(&self) -> impl Iterator<Item = &PluginRecord> {
        self.plugins.values()
    }

    /// The instances of plugin `id`.
    pub fn instances<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a PluginRecord> + 'a {
        self.plugins.values().filter(move |r| r.spec.id == id)
    }

    /// The instance of plugin `id` whose type serves `service`, if one is
    /// registered (there is at most one).
    pub fn serving(&self, id: &str, service: Service) -> Option<&PluginRecord> {
        self.plugins
            .values()
            .find(|r| r.spec.id == id && service.served_by(r.spec.plugin_type))
    }

    /// Every plugin ID, sorted.
    pub fn ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.plugins.keys().map(|k| k.plugin_id.as_str()).collect();
        ids.dedup();
        ids
    }

    /// Plugin `id`'s instances that serve its controller and its node
    /// service (a monolith counts in both), healthy ones and all, as Nomad
    /// counts them.
    pub fn counts(&self, id: &str) -> Counts {
        let count =
            |f: &dyn Fn(&PluginRecord) -> bool| self.instances(id).filter(|r| f(r)).count() as u32;
        Counts {
            controllers_healthy: count(&PluginRecord::controller_healthy),
            controllers_expected: count(&|r| r.spec.plugin_type.has_controller()),
            nodes_healthy: count(&PluginRecord::node_healthy),
            nodes_expected: count(&|r| r.spec.plugin_type.has_node()),
        }
    }

    /// Plugin `id` as `plugin status` shows it: its instances, and its
    /// controllers and nodes counted as Nomad counts them; `None` when it
    /// has no instance.
    pub fn status(&self, id: &str) -> Option<PluginStatus> {
        let instances: Vec<&PluginRecord> = self.instances(id).collect();
        if instances.is_empty() {
            return None;
        }
        // The controller's fingerprint names the plugin, else the node's.
        let fingerprint = instances
            .iter()
            .filter_map(|r| r.fingerprint.as_ref())
            .max_by_key(|f| {
                f.plugin_capabilities
                    .contains(&PluginCapability::ControllerService)
            });
        let health = if instances.iter().all(|r| r.health == Health::Healthy) {
            Health::Healthy
        } else if instances.iter().any(|r| r.health == Health::Unhealthy) {
            Health::Unhealthy
        } else {
            Health::Pending
        };
        let counts = self.counts(id);
        Some(PluginStatus {
            id: id.to_string(),
            provider: fingerprint.map(|f| f.info.name.clone()).unwrap_or_default(),
            version: fingerprint
                .map(|f| f.info.vendor_version.clone())
                .unwrap_or_default(),
            controllers_healthy: counts.controllers_healthy,
            controllers_expected: counts.controllers_expected,
            nodes_healthy: counts.nodes_healthy,
            nodes_expected: counts.nodes_expected,
            health,
            instances: instances.into_iter().cloned().collect(),
            volumes: Vec::new(),
            capacity: None,
        })
    }

    /// Applies an instance's report. A health change is logged, kept as an
    /// event and published; a report that repeats the health changes
    /// nothing but the heartbeat and reason.
    pub fn apply(&mut self, key: &InstanceKey, report: Report) -> Changed {
        let Report::Status {
            health,
            reason,
            fingerprint,
            heartbeat,
        } = report
        else {
            return Changed::default();
        };
        let Some(record) = self.plugins.get_mut(key) else {
            return Changed::default();
        };
        let mut changed = Changed::default();
        if let Some(fingerprint) = fingerprint {
            changed.fingerprint = !record
                .fingerprint
                .as_ref()
                .is_some_and(|f| f.same_as(&fingerprint));
            if changed.fingerprint {
                let line = format!(
                    "{} {}, node {:?}",
                    fingerprint.info.name,
                    fingerprint.info.vendor_version,
                    fingerprint
                        .node
                        .as_ref()
                        .map(|n| n.node_id.as_str())
                        .unwrap_or("")
                );
                log::info!("Plugin {key} fingerprinted: {line}");
                events::emit(Topic::Plugin, "Fingerprinted", key.to_string(), line);
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
            count_instance(key.clone(), old, -1.0);
            count_instance(key.clone(), health, 1.0);
            let line = format!("Plugin {key} is {health} (was {old}): {reason}");
            if health == Health::Healthy {
                log::info!("{line}");
            } else {
                log::warn!("{line}");
            }
            record.event(key, old, health, reason);
            self.publish(RegistryEvent::HealthChanged {
                key: key.clone(),
                old,
                new: health,
            });
        }
        changed
    }

    /// Records `reason` in instance `key`'s event history without changing
    /// its health: something the agent found the plugin doing (such as
    /// leaving a mount behind after saying it removed it). False when no
    /// such instance is registered.
    pub fn note(&mut self, key: &InstanceKey, reason: String) -> bool {
        let Some(record) = self.plugins.get_mut(key) else {
            return false;
        };
        let health = record.health;
        record.event(key, health, health, reason);
        true
    }
}

/// Moves `csi_agent_plugin_instances` for one instance in `health`.
fn count_instance(key: InstanceKey, health: Health, by: f64) {
    crate::metrics::PLUGIN_INSTANCES.add(
        &[&key.plugin_id, key.plugin_type.as_str(), health.as_str()],
        by,
    );
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

    fn key(id: &str) -> InstanceKey {
        InstanceKey::new(id, PluginType::Monolith)
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
        registry.apply(&key("a"), status(Health::Healthy, "ok"));
        registry.deregister(&key("a"));
        let heard: Vec<_> = events.try_iter().collect();
        assert_eq!(
            heard,
            [
                RegistryEvent::Registered(key("a")),
                RegistryEvent::HealthChanged {
                    key: key("a"),
                    old: Health::Pending,
                    new: Health::Healthy
                },
                RegistryEvent::Deregistered(key("a")),
            ]
        );
    }

    #[test]
    fn a_repeated_health_is_not_an_event() {
        let mut registry = Registry::new();
        registry.register(spec("a"));
        let events = registry.subscribe();
        assert!(
            registry
                .apply(&key("a"), status(Health::Unhealthy, "x"))
                .health
        );
        assert!(
            !registry
                .apply(&key("a"), status(Health::Unhealthy, "y"))
                .health
        );
        assert_eq!(events.try_iter().count(), 1);
        let record = registry.get(&key("a")).unwrap();
        assert_eq!(record.events.len(), 1);
        assert_eq!(record.reason, "y");
    }

    #[test]
    fn instances_are_counted_by_plugin_type_and_health() {
        use crate::metrics::PLUGIN_INSTANCES;
        let count = |health| PLUGIN_INSTANCES.value(&["metrics-gauge", "monolith", health]);
        let mut registry = Registry::new();
        registry.register(spec("metrics-gauge"));
        assert_eq!((count("pending"), count("healthy")), (1.0, 0.0));
        registry.apply(&key("metrics-gauge"), status(Health::Healthy, "ok"));
        assert_eq!((count("pending"), count("healthy")), (0.0, 1.0));
        registry.apply(&key("metrics-gauge"), status(Health::Unhealthy, "gone"));
        assert_eq!((count("healthy"), count("unhealthy")), (0.0, 1.0));
        registry.deregister(&key("metrics-gauge"));
        assert_eq!(count("unhealthy"), 0.0);
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
            registry.apply(&key("a"), status(health, &format!("r{i}")));
        }
        let events = &registry.get(&key("a")).unwrap().events;
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
        registry.apply(&key("a"), status(Health::Healthy, "ok"));
        let events = registry.subscribe();
        assert!(registry.register(PluginSpec {
            endpoint: "/run/csi/other.sock".parse().unwrap(),
            ..spec("a")
        }));
        let record = registry.get(&key("a")).unwrap();
        assert_eq!(record.health, Health::Pending);
        assert!(record.fingerprint.is_none());
        assert_eq!(record.events.len(), 2);
        assert_eq!(
            events.try_iter().collect::<Vec<_>>(),
            [RegistryEvent::HealthChanged {
                key: key("a"),
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
        registry.apply(&key("a"), status(Health::Unhealthy, "gone"));
        let record = registry.get(&key("a")).unwrap();
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

    fn fingerprint(controller_service: bool, provider: &str) -> Fingerprint {
        use crate::csi::types::{NodeInfo, PluginInfo};
        Fingerprint {
            info: PluginInfo {
                name: provider.into(),
                vendor_version: "1".into(),
                manifest: Default::default(),
            },
            plugin_capabilities: if controller_service {
                [PluginCapability::ControllerService].into()
            } else {
                Default::default()
            },
            controller_capabilities: Default::default(),
            node_capabilities: Default::default(),
            node: Some(NodeInfo {
                node_id: "n1".into(),
                max_volumes_per_node: 0,
                accessible_topology: None,
            }),
            taken: SystemTime::now(),
        }
    }

    fn healthy(registry: &mut Registry, key: &InstanceKey, controller_service: bool) {
        registry.apply(
            key,
            Report::Status {
                health: Health::Healthy,
                reason: "ok".into(),
                fingerprint: Some(fingerprint(controller_service, key.plugin_type.as_str())),
                heartbeat: None,
            },
        );
    }

    fn split(id: &str) -> (PluginSpec, PluginSpec) {
        let controller = PluginSpec {
            plugin_type: PluginType::Controller,
            ..spec(id)
        };
        let node = PluginSpec {
            plugin_type: PluginType::Node,
            endpoint: format!("/run/csi/{id}-node.sock").parse().unwrap(),
            ..spec(id)
        };
        (controller, node)
    }

    #[test]
    fn a_plugin_id_has_a_controller_instance_and_a_node_instance() {
        let mut registry = Registry::new();
        let (controller, node) = split("ebs");
        assert!(registry.register(controller.clone()));
        assert!(registry.register(node.clone()));
        registry.register(spec("other"));
        let keys: Vec<String> = registry.list().map(|r| r.key().to_string()).collect();
        assert_eq!(keys, ["ebs (controller)", "ebs (node)", "other"]);
        assert_eq!(registry.ids(), ["ebs", "other"]);
        let serving = |service| registry.serving("ebs", service).map(|r| r.key());
        assert_eq!(serving(Service::Controller), Some(controller.key()));
        assert_eq!(serving(Service::Node), Some(node.key()));
        assert_eq!(
            registry
                .serving("other", Service::Controller)
                .map(|r| r.key()),
            Some(key("other"))
        );
        // A monolith of the ID would serve both: it conflicts with both.
        assert_eq!(
            registry.conflicting(&spec("ebs")),
            [controller.key(), node.key()]
        );
        assert_eq!(registry.conflicting(&node), Vec::<InstanceKey>::new());
    }

    #[test]
    fn a_split_plugin_s_status_counts_its_controllers_and_nodes_apart() {
        let mut registry = Registry::new();
        let (controller, node) = split("ebs");
        registry.register(controller.clone());
        registry.register(node.clone());
        let counts = |r: &Registry| {
            let s = r.status("ebs").unwrap();
            [
                s.controllers_healthy,
                s.controllers_expected,
                s.nodes_healthy,
                s.nodes_expected,
            ]
        };
        assert_eq!(counts(&registry), [0, 1, 0, 1]);
        healthy(&mut registry, &node.key(), false);
        healthy(&mut registry, &controller.key(), true);
        assert_eq!(counts(&registry), [1, 1, 1, 1]);
        let status = registry.status("ebs").unwrap();
        assert_eq!(
            status.provider, "controller",
            "the controller's fingerprint names it"
        );
        assert_eq!(status.health, Health::Healthy);
        let types: Vec<&str> = status
            .instances
            .iter()
            .map(|i| i.spec.plugin_type.as_str())
            .collect();
        assert_eq!(types, ["controller", "node"]);
        registry.apply(&controller.key(), status_report(Health::Unhealthy));
        assert_eq!(counts(&registry), [0, 1, 1, 1]);
        let status = registry.status("ebs").unwrap();
        assert_eq!(status.health, Health::Unhealthy);
        assert!(registry.status("nope").is_none());
    }

    fn status_report(health: Health) -> Report {
        status(health, "x")
    }

    #[test]
    fn a_monolith_counts_as_a_controller_only_when_it_serves_the_service() {
        let mut registry = Registry::new();
        registry.register(spec("a"));
        registry.register(spec("b"));
        healthy(&mut registry, &key("a"), true);
        healthy(&mut registry, &key("b"), false);
        let counts = |id| {
            let s = registry.status(id).unwrap();
            [
                s.controllers_healthy,
                s.controllers_expected,
                s.nodes_healthy,
                s.nodes_expected,
            ]
        };
        assert_eq!(counts("a"), [1, 1, 1, 1]);
        assert_eq!(counts("b"), [0, 1, 1, 1]);
        assert!(registry.get(&key("a")).unwrap().is_controller());
        assert!(!registry.get(&key("b")).unwrap().is_controller());
    }

    #[test]
    fn a_snapshot_record_of_one_plugin_per_id_is_the_instance_of_its_type() {
        let mut registry = Registry::new();
        registry.register(PluginSpec {
            plugin_type: PluginType::Node,
            ..spec("a")
        });
        // A record as the releases before split plugins wrote it: no
        // field names the instance, the type does.
        let record = registry.list().next().unwrap().to_proto();
        let restored = Registry::restore(vec![PluginRecord::from_proto(&record).unwrap()]);
        let key = InstanceKey::new("a", PluginType::Node);
        assert!(restored.get(&key).is_some());
        assert_eq!(
            restored.serving("a", Service::Node).map(|r| r.key()),
            Some(key)
        );
        assert!(restored.serving("a", Service::Controller).is_none());
    }
}
