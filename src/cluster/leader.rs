//! The controller leader of a plugin: every agent that runs a healthy
//! controller of a plugin is a candidate in its election
//! ([`super::election`]), whose record carries the controller's
//! capabilities. The one that leads serves, with its controller:
//! - every node's attach and detach intents ([`super::attachments`]), if
//!   the plugin attaches: a plugin's volumes are attached by one
//!   controller for the whole cluster, as an external-attacher does in
//!   Kubernetes;
//! - the controller calls that hosts without a controller of the plugin
//!   relay to it ([`super::relay`]): create, delete, snapshot, expand,
//!   validate, list. Each is made on a thread of its own (at most
//!   [`relay::MAX_RELAYED`] at once), so a slow CreateVolume does not hold
//!   up the attachments; a stopped candidate hands the threads still
//!   running to the agent ([`Candidate::stop`]).
//!
//! The election key lives on a lease of the leader thread's own, kept
//! alive by it: when the agent dies or is cut off, the key goes after the
//! lease's TTL and a follower takes over; a leader that cannot keep its
//! lease alive stops serving at once.
//!
//! What the attach and detach calls of a volume are is the volume layer's
//! knowledge, which sits above this one: the agent hands the candidate a
//! [`ReadVolume`] that reads a volume's record into its [`AttachCalls`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};

use super::attachments::{self, Intent, Outcome};
use super::election::{self, Candidacy, Ended, Held};
use super::etcd::{Condition, Etcd, Kv, Watch};
use super::relay;
use super::volumes;
use crate::csi::types::ControllerPublish;
use crate::csi::{Client, Endpoint, Secrets};
use crate::proto::cluster as pb;
use crate::proto::state as statepb;

/// The controller calls that attach a volume to a node and detach it.
pub struct AttachCalls {
    /// ControllerPublishVolume's request, or `None` when the volume has no
    /// capability to publish with.
    pub publish: Option<ControllerPublish>,
    /// The volume's ID in the plugin, for ControllerUnpublishVolume.
    pub external_id: String,
    pub secrets: Secrets,
}

/// Reads a volume's record, as etcd holds it (`volumes/<id>`), into the
/// calls that attach it to the node the plugin knows as `plugin_node_id`
/// and detach it from that node; or says why the record cannot be read.
pub type ReadVolume = fn(&statepb::Volume, &str) -> Result<AttachCalls, String>;

/// A candidate (then maybe the leader) for one plugin's controller; dropping
/// it stops the thread, which gives up the leadership at once.
pub struct Candidate {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// The leader's relayed calls, shared with the campaign.
    calls: Arc<relay::Server>,
}

/// The volumes a leader has a controller call in flight for.
struct Volumes<'scope, 'env, 'g> {
    /// Where each intent's thread runs: every one is joined before the
    /// leader stops leading.
    scope: &'scope thread::Scope<'scope, 'env>,
    /// Each thread sends its volume when done.
    done: Sender<String>,
    in_flight: HashSet<String>,
    /// Volumes whose new intents wait for the call in flight.
    deferred: HashSet<String>,
    guard: &'g Condition,
}

/// Who the candidate is, and what it serves with.
struct Campaign {
    etcd: Arc<Etcd>,
    prefix: String,
    node: String,
    plugin: String,
    client: Client,
    /// What the volume layer makes of a volume record.
    read_volume: ReadVolume,
    ttl: Duration,
    /// The controller's capabilities, for the election record.
    capabilities: Vec<i32>,
    /// The relayed calls being made, on threads of their own, which the
    /// [`Candidate`] hands over when it stops.
    calls: Arc<relay::Server>,
}

impl Candidate {
    /// Starts campaigning for `plugin`'s controller, serving with the
    /// controller at `endpoint` while leading, with the calls
    /// `read_volume` reads from each volume's record.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        etcd: Arc<Etcd>,
        prefix: &str,
        node: &str,
        plugin: &str,
        endpoint: &Endpoint,
        capabilities: Vec<i32>,
        ttl: Duration,
        read_volume: ReadVolume,
    ) -> std::io::Result<Candidate> {
        let (stop_tx, stop_rx) = bounded(1);
        let calls = Arc::new(relay::Server::default());
        let campaign = Campaign {
            etcd,
            prefix: prefix.to_string(),
            node: node.to_string(),
            plugin: plugin.to_string(),
            client: Client::new(endpoint).for_plugin(plugin),
            read_volume,
            ttl,
            capabilities,
            calls: calls.clone(),
        };
        let thread = thread::Builder::new()
            .name(format!("leader-{plugin}"))
            .spawn(move || campaign.run(&stop_rx))?;
        Ok(Candidate {
            stop: Some(stop_tx),
            thread: Some(thread),
            calls,
        })
    }

    /// Stops the candidate (as dropping it does) and hands over the
    /// threads of the relayed calls still being made, for the caller to
    /// own: each ends by its call's deadline (see [`relay::Server`]).
    pub fn stop(mut self) -> Vec<JoinHandle<()>> {
        self.end();
        self.calls.take_threads()
    }

    /// Ends the campaign thread and joins it: it gives up the leadership
    /// at once, after the attach and detach calls in flight (each within
    /// its deadline).
    fn end(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                log::error!("Cluster: a controller election thread panicked");
            }
        }
    }
}

impl Drop for Candidate {
    /// Without [`Candidate::stop`], the relayed calls still being made end
    /// by themselves, unjoined: the agent always stops its candidates.
    fn drop(&mut self) {
        self.end();
    }
}

impl Campaign {
    fn run(&self, stop: &Receiver<()>) {
        let candidacy = Candidacy {
            etcd: &self.etcd,
            key: election::election_key(&self.prefix, &self.plugin),
            record: pb::Leader {
                node: self.node.clone(),
                controller_capabilities: self.capabilities.clone(),
                ..Default::default()
            },
            ttl: self.ttl,
            what: &format!("controller of plugin {}", self.plugin),
        };
        candidacy.run(stop, |held| self.serve(held, stop));
    }

    /// Serves every pending intent and relayed call, then each new one,
    /// while the lease lives. Each intent is served on a thread of its own
    /// (the controller works on many volumes at once), at most one per
    /// volume at a time, as CSI asks: an intent for a volume with a call
    /// in flight is served once that call is done, as etcd has it then.
    fn serve(&self, held: &mut Held, stop: &Receiver<()>) -> Ended {
        let intents = attachments::attachments_prefix(&self.prefix);
        let calls = relay::calls_prefix(&self.prefix, &self.plugin);
        // Every answer is written only while this leader holds its lease.
        let guard = held.guard();
        thread::scope(|scope| {
            let (done_tx, done) = unbounded::<String>();
            let mut volumes = Volumes {
                scope,
                done: done_tx,
                in_flight: HashSet::new(),
                deferred: HashSet::new(),
                guard: &guard,
            };
            let intent_watch = match self.read_and_watch(&intents, false, &mut volumes) {
                Ok(watch) => watch,
                Err(ended) => return ended,
            };
            let call_watch = match self.read_and_watch(&calls, true, &mut volumes) {
                Ok(watch) => watch,
                Err(ended) => return ended,
            };
            let keep_alive = crossbeam_channel::tick(held.period());
            loop {
                let (batch, relayed) = select! {
                    recv(stop) -> _ => return Ended::Stopped,
                    recv(keep_alive) -> _ => {
                        if let Err(ended) = held.renew(&self.etcd) {
                            return ended;
                        }
                        continue;
                    },
                    recv(done) -> volume => {
                        let Ok(volume) = volume else { continue };
                        volumes.in_flight.remove(&volume);
                        if volumes.deferred.remove(&volume) {
                            let of_volume = format!("{intents}{volume}/");
                            match self.etcd.get_prefix(of_volume.as_bytes()) {
                                Ok((kvs, _)) => self.serve_kvs(false, kvs, &mut volumes),
                                Err(err) => return err.into(),
                            }
                        }
                        continue;
                    },
                    recv(intent_watch.receiver()) -> batch => (batch, false),
                    recv(call_watch.receiver()) -> batch => (batch, true),
                };
                match batch {
                    Ok(Ok(batch)) => self.serve_kvs(relayed, batch.puts(), &mut volumes),
                    Ok(Err(err)) => return err.into(),
                    Err(_) => return Ended::Again("the watch ended".into()),
                }
            }
        })
    }

    /// Serves what is under `prefix` now, and watches it from there.
    fn read_and_watch<'scope, 'env: 'scope>(
        &'env self,
        prefix: &str,
        relayed: bool,
        volumes: &mut Volumes<'scope, 'env, '_>,
    ) -> Result<Watch, Ended> {
        let (kvs, revision) = self.etcd.get_prefix(prefix.as_bytes())?;
        self.serve_kvs(relayed, kvs, volumes);
        Ok(self.etcd.watch_prefix(prefix.as_bytes(), revision + 1)?)
    }

    /// Serves what `kvs` (a read or a watch's puts) ask for: relayed
    /// calls, or attach intents.
    fn serve_kvs<'scope, 'env: 'scope>(
        &'env self,
        relayed: bool,
        kvs: Vec<Kv>,
        volumes: &mut Volumes<'scope, 'env, '_>,
    ) {
        if relayed {
            for call in relay::pending(kvs) {
                relay::serve(
                    &self.etcd,
                    &self.node,
                    self.client.controller(),
                    call,
                    &self.calls,
                    volumes.guard,
                );
            }
            return;
        }
        for intent in attachments::pending(&self.prefix, &kvs) {
            if !volumes.in_flight.insert(intent.volume.clone()) {
                volumes.deferred.insert(intent.volume.clone());
                continue;
            }
            let (done, guard) = (volumes.done.clone(), volumes.guard.clone());
            volumes.scope.spawn(move || {
                self.serve_one(&intent, &guard);
                let _ = done.send(intent.volume);
            });
        }
    }

    /// Calls the controller for `intent`, if its volume is of this plugin,
    /// and writes the outcome back.
    fn serve_one(&self, intent: &Intent, guard: &Condition) {
        let record = match self
            .etcd
            .get(&volumes::volume_key(&self.prefix, &intent.volume))
        {
            Ok(Some(kv)) => match crate::message::decode::<statepb::Volume>(&kv.value) {
                Ok(record) => record,
                Err(err) => {
                    self.answer(
                        intent,
                        Outcome::Failed(format!("the volume record is unreadable: {err}")),
                        guard,
                    );
                    return;
                }
            },
            Ok(None) => {
                self.answer(
                    intent,
                    Outcome::Failed(format!(
                        "volume {:?} is not registered in the cluster",
                        intent.volume
                    )),
                    guard,
                );
                return;
            }
            Err(err) => {
                log::warn!(
                    "Cluster: cannot read volume {} for its attachment: {}",
                    intent.volume,
                    crate::error_chain(&err)
                );
                return;
            }
        };
        if record.plugin_id != self.plugin {
            return;
        }
        let outcome = match (self.read_volume)(&record, &intent.plugin_node_id) {
            Ok(calls) => self.call(calls, intent),
            Err(err) => Outcome::Failed(err),
        };
        self.answer(intent, outcome, guard);
    }

    fn call(&self, calls: AttachCalls, intent: &Intent) -> Outcome {
        let failed = |err: crate::csi::Error| Outcome::Failed(crate::error_chain(&err));
        if !intent.attach {
            log::info!(
                "Cluster: detaching volume {} from node {} (ControllerUnpublishVolume)",
                intent.volume,
                intent.node
            );
            return match self.client.controller_unpublish(
                &calls.external_id,
                &intent.plugin_node_id,
                &calls.secrets,
            ) {
                Ok(()) => Outcome::Detached,
                Err(err) if err.class == crate::csi::Class::Ignorable => Outcome::Detached,
                Err(err) => failed(err),
            };
        }
        let Some(req) = calls.publish else {
            return Outcome::Failed("the volume has no capability".into());
        };
        log::info!(
            "Cluster: attaching volume {} to node {} (ControllerPublishVolume)",
            intent.volume,
            intent.node
        );
        match self.client.controller_publish(&req) {
            Ok(context) => Outcome::Attached(context.into_iter().collect::<HashMap<_, _>>()),
            Err(err) => failed(err),
        }
    }

    fn answer(&self, intent: &Intent, outcome: Outcome, guard: &Condition) {
        let written = attachments::answer(
            &self.etcd,
            &self.prefix,
            &self.node,
            intent,
            &outcome,
            std::slice::from_ref(guard),
        );
        match written {
            Ok(true) => {}
            Ok(false) => log::debug!(
                "Cluster: the intent for volume {} on node {} changed while it was served, or this node no longer leads",
                intent.volume,
                intent.node
            ),
            Err(err) => log::warn!(
                "Cluster: cannot write the attachment of volume {} on node {}: {}",
                intent.volume,
                intent.node,
                crate::error_chain(&err)
            ),
        }
    }
}
