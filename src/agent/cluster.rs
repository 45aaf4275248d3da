//! The agent's side of a `cluster` block: it starts the member thread
//! ([`crate::cluster::member`]) that registers this node in etcd and keeps
//! it alive, the cluster ops, the volume watch, the fencer and a
//! controller candidate per plugin whose controller runs here; follows
//! the member's reports (connected, disconnected, a node name another
//! live agent holds, which stops the agent); stops writers after
//! `stop_after_disconnect`; relays the controller calls of plugins
//! without a controller here; and gives up the claims the cluster took
//! away. The calls answered from etcd are `cluster_calls.rs`. An agent
//! without a `cluster` block has none of it.

use crate::events::Topic;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::sync::Arc;

use crossbeam_channel::{never, unbounded, Receiver};

use crate::cluster::alive::{self, Alive};
use crate::cluster::attachments::Attacher;
use crate::cluster::claims::Promise;
use crate::cluster::fence::Fencer;
use crate::cluster::leader::{AttachCalls, Candidate};
use crate::cluster::member::{self, Member, MemberEvent};
use crate::cluster::ops::{Answer, Ops};
use crate::cluster::relay::EtcdRelay;
use crate::cluster::volumes::{VolumeEvent, VolumeWatch};
use crate::csi::client::DEFAULT_TIMEOUT;
use crate::csi::{Carrier, Client, Controller, Endpoint};
use crate::plugin::{Health, Registry, Service};
use crate::proto::cluster as pb;
use crate::proto::state as statepb;
use crate::volume::controller::ControllerCalls;
use crate::volume::manager::Dispatch;
use crate::volume::model::Volume;

use super::guard::{self, Writer, Writers};
use super::Agent;

/// What a controller candidate campaigns with: a new endpoint or new
/// capabilities (a plugin restarted as another version) start it over.
#[derive(PartialEq, Eq)]
pub(super) struct Campaigning {
    endpoint: Endpoint,
    capabilities: Vec<i32>,
}

/// Where this agent stands in its cluster.
pub(super) enum Connection {
    Connecting,
    Connected,
    Disconnected { reason: String },
}

/// The cluster membership of a running agent.
pub(super) struct ClusterMember {
    pub member: Member,
    pub connection: Connection,
    pub node: String,
    /// Carries out the volume manager's ops for etcd.
    pub ops: Ops,
    pub answers: Receiver<Answer>,
    /// Watches the cluster's volumes and claim sets.
    _watch: VolumeWatch,
    /// This node's candidacy to fence lost nodes.
    _fencer: Fencer,
    pub volume_events: Receiver<VolumeEvent>,
    /// This node's candidacies for plugins' controller elections: one per
    /// plugin with a healthy controller here, by plugin ID.
    candidates: BTreeMap<String, (Campaigning, Candidate)>,
    pub prefix: String,
    lease_ttl: std::time::Duration,
    /// When the last keep-alive (or registration) that went through was
    /// sent, by this process or, after a restart, by the one before
    /// ([`alive::Alive`]): `stop_after_disconnect` runs from it, on the
    /// monotonic clock, whatever the calls in flight are doing.
    last_alive: Option<Instant>,
    /// Whether the tasks `stop_after_disconnect` stops were stopped since
    /// the last keep-alive.
    stopped_for_disconnect: bool,
    stop_after_disconnect: Option<Duration>,
    /// Where the last keep-alive is kept for the next process.
    alive_file: std::path::PathBuf,
    /// The writers' file the guard reads: only with a promise (see
    /// [`guard`]).
    writers: Option<WritersFile>,
}

/// The writers' file as this agent keeps it for its guard.
struct WritersFile {
    /// What was written last.
    written: String,
    /// The claims, the tasks or the promise may have changed since: the
    /// file is computed again at the end of the turn.
    stale: bool,
}

/// What the agent adds to `stop_after_disconnect` and `max_kill_timeout`
/// in the budget it promises (see [`Promise`]): its loop's turn to stop
/// the allocs, and releasing the claims' mounts once their tasks are gone.
pub(super) const RELEASE_ALLOWANCE: Duration = Duration::from_secs(5);

/// The promise of a node with `config`'s settings, if it stops its
/// writers when cut off: at `stop_after_disconnect` (the guard, should
/// the agent be gone, a grace and a poll later), SIGKILL at most
/// `max_kill_timeout` after, and the mounts released.
pub(super) fn promise(config: &crate::spec::AgentConfig) -> Option<Promise> {
    let cluster = config.cluster.as_ref()?;
    let stop_after = cluster.stop_after_disconnect?;
    Some(Promise {
        stop_after,
        budget: stop_after
            + guard::GRACE
            + guard::POLL
            + config.max_kill_timeout
            + RELEASE_ALLOWANCE,
        lease_ttl: cluster.lease_ttl,
    })
}

impl Agent {
    /// Starts the member thread when the config has a `cluster` block.
    pub(super) fn start_cluster(&mut self) -> Result<(), super::Error> {
        let Some(config) = self.options.config.cluster.clone() else {
            return Ok(());
        };
        let node = super::node_name(&self.options.config);
        let plugins = node_plugins(&self.registry);
        // The keep-alive the previous process of this agent left, if it
        // ran since the host booted: its lease is resumed if etcd still
        // has it, and its writers are stopped on time if not.
        let alive_file = self.options.config.data_dir.join(alive::FILE);
        let before = Alive::read(&alive_file);
        let member = Member::start(
            &config,
            member::record(&node, plugins),
            before.map(|a| a.lease),
        )
        .map_err(|err| super::Error::Cluster(crate::error_chain(&err)))?;
        log::info!(
            "Cluster: registering node {node} in etcd at {}",
            config.etcd.join(", ")
        );
        let cannot = |what: &str, err: std::io::Error| {
            super::Error::Cluster(format!("cannot start the {what} thread: {err}"))
        };
        let (answers_tx, answers) = unbounded();
        let ops = Ops::start(member.etcd(), &config.prefix, &node, answers_tx)
            .map_err(|err| cannot("cluster ops", err))?;
        let (events_tx, volume_events) = unbounded();
        let watch = VolumeWatch::start(member.etcd(), &config.prefix, events_tx)
            .map_err(|err| cannot("volume watch", err))?;
        let fencer = Fencer::start(member.etcd(), &config.prefix, &node, config.lease_ttl)
            .map_err(|err| cannot("fencer", err))?;
        let promise = promise(&self.options.config);
        self.volumes.join_cluster(
            &node,
            Attacher::new(member.etcd(), &config.prefix, &node),
            promise,
        );
        self.cluster = Some(ClusterMember {
            member,
            connection: Connection::Connecting,
            node,
            ops,
            answers,
            _watch: watch,
            _fencer: fencer,
            volume_events,
            candidates: BTreeMap::new(),
            prefix: config.prefix.clone(),
            lease_ttl: config.lease_ttl,
            last_alive: before.map(|a| a.sent),
            stopped_for_disconnect: false,
            stop_after_disconnect: config.stop_after_disconnect,
            alive_file,
            writers: promise.map(|_| WritersFile {
                written: String::new(),
                stale: true,
            }),
        });
        if promise.is_some() {
            self.sync_guard();
            self.start_guard()?;
        }
        self.sync_candidates();
        Ok(())
    }

    /// Starts this process's writers' guard (see [`guard`]): this program
    /// again, `csi-agent guard`, in a session of its own, so that it
    /// outlives the agent.
    fn start_guard(&self) -> Result<(), super::Error> {
        let me = std::process::id();
        let ticks = crate::task::exec::start_ticks(me).unwrap_or_default();
        let exe = std::env::current_exe().map_err(|err| {
            super::Error::Cluster(format!(
                "cannot find this program to start its guard: {err}"
            ))
        })?;
        let mut cmd = std::process::Command::new(exe);
        cmd.args([
            "guard",
            "-data-dir",
            &self.options.config.data_dir.display().to_string(),
            "-agent",
            &format!("{me}:{ticks}"),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
        crate::sys::process::in_new_session(&mut cmd)
            .spawn()
            .map(drop)
            .map_err(|err| super::Error::Cluster(format!("cannot start the writers' guard: {err}")))
    }

    /// The claims or the tasks may have changed this turn: the guard's
    /// file is computed again at its end.
    pub(super) fn writers_may_have_changed(&mut self) {
        if let Some(file) = self.cluster.as_mut().and_then(|c| c.writers.as_mut()) {
            file.stale = true;
        }
    }

    /// Rewrites the writers' file for the guard, if the tasks holding
    /// write claims may have changed and did.
    pub(super) fn sync_guard(&mut self) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let (Some(file), Some(stop_after)) = (&cluster.writers, cluster.stop_after_disconnect)
        else {
            return;
        };
        if !file.stale {
            return;
        }
        let mut tasks: Vec<Writer> = self
            .volumes
            .exclusive_writers()
            .iter()
            .flat_map(|(_, alloc)| self.allocs.processes(alloc))
            .map(|(pid, start_ticks, kill_timeout)| Writer {
                pid,
                start_ticks,
                kill_timeout,
            })
            .collect();
        order::sort_by_key(&mut tasks, |w| (w.pid, w.start_ticks));
        tasks.dedup();
        let text = Writers { stop_after, tasks }.render();
        let path = self.options.config.data_dir.join(guard::WRITERS_FILE);
        let written = file.written == text || {
            match crate::state::store::write_atomic(&path, text.as_bytes()) {
                Ok(()) => true,
                // Still stale: tried again at the end of the next turn.
                Err(err) => {
                    log::warn!("Cluster: {}", crate::error_chain(&err));
                    false
                }
            }
        };
        if let Some(file) = self.cluster.as_mut().and_then(|c| c.writers.as_mut()) {
            if written {
                file.written = text;
                file.stale = false;
            }
        }
    }

    /// Campaigns for the controller election of every plugin whose
    /// controller runs here and is healthy, with the controller's
    /// capabilities in the election record; gives up the others.
    pub(super) fn sync_candidates(&mut self) {
        let Some(cluster) = &mut self.cluster else {
            return;
        };
        let wanted: BTreeMap<String, Campaigning> =
            order::map(self.registry.ids().into_iter().filter_map(|id| {
                let r = self
                    .registry
                    .serving(id, Service::Controller)
                    .filter(|r| r.is_controller() && r.health == Health::Healthy)?;
                // In the set's order: the same capabilities, the same list.
                let capabilities: Vec<i32> = r
                    .fingerprint
                    .as_ref()
                    .map(|f| {
                        f.controller_capabilities
                            .iter()
                            .map(|c| c.number())
                            .collect()
                    })
                    .unwrap_or_default();
                let campaigning = Campaigning {
                    endpoint: r.spec.endpoint.clone(),
                    capabilities,
                };
                Some((id.to_string(), campaigning))
            }));
        let gone: Vec<String> = cluster
            .candidates
            .iter()
            .filter(|(id, (campaigning, _))| wanted.get(*id) != Some(campaigning))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some((_, candidate)) = cluster.candidates.remove(&id) {
                // Its relayed calls still being made end by their deadlines.
                self.errands.keep_all(candidate.stop());
            }
        }
        for (id, campaigning) in wanted {
            if cluster.candidates.contains_key(&id) {
                continue;
            }
            match Candidate::start(
                cluster.member.etcd(),
                &cluster.prefix,
                &cluster.node,
                &id,
                &campaigning.endpoint,
                campaigning.capabilities.clone(),
                cluster.lease_ttl,
                attach_calls,
            ) {
                Ok(candidate) => {
                    cluster.candidates.insert(id, (campaigning, candidate));
                }
                Err(err) => log::error!(
                    "Cluster: cannot start the controller election thread of plugin {id}: {err}"
                ),
            }
        }
    }

    /// A controller call in a cluster, on a host without a controller of
    /// the plugin: made by the plugin's controller leader, the job handed
    /// the relayed implementation of its [`ControllerCalls`] (a
    /// [`Controller`] carried by [`EtcdRelay`]), on the node's workers
    /// here, or, on a host without any instance of the plugin, on a thread
    /// of its own (such calls are few: create, delete, snapshot, expand,
    /// validate, list; an errand, see `errands.rs`). A host with a
    /// controller of its own makes its
    /// calls with it (see docs/architecture/cluster.md, "Controller calls").
    /// Answers the dispatch to submit: `dispatch` itself if it is not
    /// relayed, `None` if it is under way already.
    pub(super) fn relayed(&mut self, dispatch: Dispatch) -> Option<Dispatch> {
        let Some(cluster) = &self.cluster else {
            return Some(dispatch);
        };
        let plugin = &dispatch.plugin_id;
        if dispatch.service != Service::Controller
            || self.registry.serving(plugin, Service::Controller).is_some()
        {
            return Some(dispatch);
        }
        let relay: Arc<dyn Carrier> = Arc::new(EtcdRelay::new(
            cluster.member.etcd(),
            &cluster.prefix,
            &cluster.node,
            plugin,
        ));
        let job = dispatch.job;
        let driver = plugin.clone();
        if self.registry.serving(plugin, Service::Node).is_some() {
            return Some(Dispatch {
                service: Service::Node,
                job: Box::new(move |client: &Client, _: &dyn ControllerCalls| {
                    let controller = Controller::carried(relay, client.timeout());
                    job(client, &controller.for_plugin(&driver))
                }),
                ..dispatch
            });
        }
        // A controller call makes no node call: its client is one to
        // nowhere.
        self.run_unattached(format!("relay-{plugin}"), move |nowhere: &Client| {
            job(
                nowhere,
                &Controller::carried(relay, DEFAULT_TIMEOUT).for_plugin(&driver),
            )
        });
        None
    }

    /// Hands this node's plugins to the member thread, which rewrites the
    /// node's record in etcd when they (or their health) changed.
    pub(super) fn sync_node_record(&mut self) {
        if let Some(cluster) = &mut self.cluster {
            cluster.member.set_plugins(node_plugins(&self.registry));
        }
    }

    /// A report of the member thread.
    pub(super) fn cluster_event(&mut self, event: MemberEvent) {
        if let MemberEvent::Alive { lease, .. } = event {
            self.service_lease(lease);
        }
        let Some(cluster) = &mut self.cluster else {
            return;
        };
        match event {
            MemberEvent::Connected => {
                log::info!("Cluster: node {} is registered", cluster.node);
                crate::events::emit(
                    Topic::Node,
                    "Connected",
                    cluster.node.clone(),
                    "registered in the cluster",
                );
                cluster.connection = Connection::Connected;
                crate::metrics::CLUSTER_CONNECTED.set(&[], 1.0);
                self.allocs.cluster_registered(Instant::now());
            }
            MemberEvent::Alive { sent, lease } => {
                if !cluster.last_alive.is_some_and(|last| last >= sent) {
                    cluster.last_alive = Some(sent);
                    cluster.stopped_for_disconnect = false;
                    // For the next process, should this one die: a file
                    // that cannot be written only costs a restart its
                    // lease (it registers anew), never a stop too late.
                    if let Err(err) = (Alive { sent, lease }).write(&cluster.alive_file) {
                        log::debug!(
                            "Cluster: cannot write {}: {err}",
                            cluster.alive_file.display()
                        );
                    }
                }
            }
            MemberEvent::Disconnected { reason } => {
                log::warn!("Cluster: node {} is disconnected: {reason}", cluster.node);
                crate::events::emit(
                    Topic::Node,
                    "Disconnected",
                    cluster.node.clone(),
                    reason.clone(),
                );
                cluster.connection = Connection::Disconnected { reason };
                crate::metrics::CLUSTER_CONNECTED.set(&[], 0.0);
            }
            MemberEvent::NameTaken { node } => {
                let message = format!(
                    "node name {node:?} is held by another live agent of the cluster; node names must be unique (set node_name)"
                );
                log::error!("Cluster: {message}");
                crate::events::emit(Topic::Node, "NameTaken", node, message.clone());
                self.fatal = Some(message);
            }
        }
    }
}

impl Agent {
    /// When `stop_after_disconnect` is due, if this node is cut off.
    pub(super) fn disconnect_deadline(&self) -> Option<Instant> {
        let cluster = self.cluster.as_ref()?;
        if cluster.stopped_for_disconnect {
            return None;
        }
        Some(cluster.last_alive? + cluster.stop_after_disconnect?)
    }

    /// The cluster's volumes or claim sets changed (the watch): this node
    /// keeps the promises its write claims hold in etcd, should they be
    /// stricter than the config's (it changed since they were admitted):
    /// the stop comes no later, the kill no later.
    pub(super) fn keep_promises(&mut self) {
        let Some((stop_after, allowance)) = self.volumes.promised() else {
            return;
        };
        let Some(cluster) = &mut self.cluster else {
            return;
        };
        if let Some(after) = &mut cluster.stop_after_disconnect {
            *after = (*after).min(stop_after);
        }
        let kill = allowance.saturating_sub(guard::GRACE + guard::POLL + RELEASE_ALLOWANCE);
        self.allocs.cap_kill_timeout(kill);
        self.writers_may_have_changed();
    }

    /// What the loop receives from the cluster: the member's events, etcd's
    /// answers to ops, the volume watch's events; `never` without one.
    pub(super) fn cluster_receivers(
        &self,
    ) -> (
        Receiver<MemberEvent>,
        Receiver<Answer>,
        Receiver<VolumeEvent>,
    ) {
        match &self.cluster {
            Some(c) => (
                c.member.events().clone(),
                c.answers.clone(),
                c.volume_events.clone(),
            ),
            None => (never(), never(), never()),
        }
    }

    /// Leaves the cluster: the lease is revoked unless tasks holding write
    /// claims outlive the agent (see `shutdown`).
    pub(super) fn leave_cluster(&mut self) {
        if let Some(mut cluster) = self.cluster.take() {
            for (_, (_, candidate)) in std::mem::take(&mut cluster.candidates) {
                self.errands.keep_all(candidate.stop());
            }
            let writers = self
                .volumes
                .exclusive_writers()
                .iter()
                .any(|(_, alloc)| self.allocs.runs(alloc));
            cluster.member.keep_lease_on_stop(writers);
        }
    }

    /// `stop_after_disconnect` passed while cut off: the allocs holding
    /// write claims other nodes may be given once this one is fenced stop.
    pub(super) fn stop_if_disconnected(&mut self, now: Instant) {
        if !self.disconnect_deadline().is_some_and(|at| at <= now) {
            return;
        }
        let Some(cluster) = &mut self.cluster else {
            return;
        };
        cluster.stopped_for_disconnect = true;
        let after =
            crate::units::format_duration(cluster.stop_after_disconnect.unwrap_or_default());
        let why = format!(
            "node {} had no keep-alive through to the cluster for {after} (stop_after_disconnect)",
            cluster.node
        );
        log::warn!("Cluster: {why}: stopping the allocs that hold write claims");
        for (volume, alloc) in self.volumes.exclusive_writers() {
            if !self.allocs.stop_alloc_for(&alloc, &why) {
                log::warn!(
                    "Cluster: volume {volume}'s claim of alloc {alloc} has no task to stop; it is given up when the cluster says so"
                );
            }
        }
    }

    /// Gives up the claims the cluster took away: their allocs stop (and
    /// release them once their tasks are gone); a claim without an alloc
    /// here is released.
    pub(super) fn give_up_lost_claims(&mut self) {
        for lost in self.volumes.take_lost_claims() {
            let why = format!(
                "the cluster took volume {}'s claim away: {}",
                lost.volume, lost.reason
            );
            if !self.allocs.stop_alloc_for(&lost.alloc, &why) {
                self.volumes.release_lost(&lost.volume, &lost.alloc);
            }
        }
    }
}

/// A controller leader's reading of a volume's record (see
/// [`crate::cluster::leader::ReadVolume`]): the volume layer's, which the
/// cluster layer below it cannot import.
fn attach_calls(record: &statepb::Volume, plugin_node_id: &str) -> Result<AttachCalls, String> {
    let volume = Volume::from_proto(record)?;
    Ok(AttachCalls {
        publish: volume.controller_publish(plugin_node_id),
        external_id: volume.external_id,
        secrets: volume.secrets,
    })
}

/// The plugins this node registers with: one per plugin ID, as a split
/// plugin's controller and node instances are one plugin. Its node ID is
/// the node instance's (NodeGetInfo); it is healthy when every instance
/// of it is.
pub(super) fn node_plugins(registry: &Registry) -> Vec<pb::NodePlugin> {
    registry
        .ids()
        .into_iter()
        .map(|id| {
            let counts = registry.counts(id);
            let node = registry
                .serving(id, Service::Node)
                .and_then(|r| r.fingerprint.as_ref())
                .and_then(|f| f.node.as_ref());
            pb::NodePlugin {
                id: id.to_string(),
                node_id: node.map(|n| n.node_id.clone()).unwrap_or_default(),
                topology: node
                    .and_then(|n| n.accessible_topology.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                healthy: registry.instances(id).all(|r| r.health == Health::Healthy),
                controllers_healthy: counts.controllers_healthy,
                controllers_expected: counts.controllers_expected,
                nodes_healthy: counts.nodes_healthy,
                nodes_expected: counts.nodes_expected,
                ..Default::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::types::{NodeInfo, PluginInfo};
    use crate::plugin::fingerprint::Fingerprint;
    use crate::plugin::{InstanceKey, PluginSpec, Report, Source};
    use crate::spec::PluginType;

    fn register(registry: &mut Registry, id: &str, plugin_type: PluginType, node: Option<&str>) {
        registry.register(PluginSpec {
            id: id.to_string(),
            endpoint: format!("/run/csi/{id}-{plugin_type}.sock").parse().unwrap(),
            plugin_type,
            source: Source::Config,
            stage_publish_base_dir: None,
        });
        let fingerprint = Fingerprint {
            info: PluginInfo {
                name: "hostpath.csi-agent".into(),
                vendor_version: "0.1.0".into(),
                manifest: Default::default(),
            },
            plugin_capabilities: Default::default(),
            controller_capabilities: Default::default(),
            node_capabilities: Default::default(),
            node: node.map(|n| NodeInfo {
                node_id: n.into(),
                max_volumes_per_node: 0,
                accessible_topology: None,
            }),
            taken: std::time::SystemTime::now(),
        };
        registry.apply(
            &InstanceKey::new(id, plugin_type),
            Report::Status {
                health: Health::Healthy,
                reason: String::new(),
                fingerprint: Some(fingerprint),
                heartbeat: None,
            },
        );
    }

    #[test]
    fn a_split_plugin_is_one_plugin_of_the_node_with_its_node_instance_s_node_id() {
        let mut registry = Registry::new();
        register(&mut registry, "hp", PluginType::Controller, None);
        register(&mut registry, "hp", PluginType::Node, Some("n1"));
        register(&mut registry, "mono", PluginType::Monolith, Some("n2"));
        let plugins = node_plugins(&registry);
        let seen: Vec<(&str, &str, bool)> = plugins
            .iter()
            .map(|p| (p.id.as_str(), p.node_id.as_str(), p.healthy))
            .collect();
        assert_eq!(seen, [("hp", "n1", true), ("mono", "n2", true)]);
        // One instance down: the plugin is not healthy on this node.
        registry.apply(
            &InstanceKey::new("hp", PluginType::Controller),
            Report::Status {
                health: Health::Unhealthy,
                reason: "gone".into(),
                fingerprint: None,
                heartbeat: None,
            },
        );
        let plugins = node_plugins(&registry);
        assert!(!plugins[0].healthy);
        assert!(plugins[1].healthy);
    }
}
