//! Fencing lost nodes: a node whose key (`nodes/<node>`) is gone for a
//! lease TTL is lost, and its claims must not keep its volumes from the
//! rest of the cluster forever, nor be freed while it may still write.
//!
//! One agent of the cluster, the holder of the `fencer` election, watches
//! the nodes. A node gone for `lease_ttl` (so a restarted agent, which
//! registers again within it, is never fenced) has each of its claims
//! marked past with reason "node lost", then, volume by volume:
//!
//! - attached by a controller (an `attachments/<volume>/<node>` record is
//!   there): a detach intent for the lost node goes to the plugin's
//!   controller leader, which calls ControllerUnpublishVolume; once it is
//!   detached, the claims are freed, and only then the record goes (a
//!   crash in between leaves a detached record, never a freed claim that
//!   looks unattached);
//! - not attached by a controller: reader claims and claims of
//!   MULTI_NODE_MULTI_WRITER volumes are freed; a writer's claim on a
//!   volume that admits one writer (or one node) stays, because nothing
//!   can stop the lost node from writing, until an operator who knows the
//!   node is down runs `volume detach -force -node NODE VOLUME`
//!   ([`detach`]); its reason says so.
//!
//! What cannot be done yet (no controller leader answered, the detach
//! failed) is tried again with backoff; the reason in the claim says what
//! the fence waits for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, never, select, Receiver, Sender};
use protobuf::Message;

use super::attachments::{self, Outcome};
use super::claims::{self, ClaimSets};
use super::election::{self, Candidacy, Ended, Held};
use super::etcd::{self, Etcd, Event};
use crate::csi::{AccessMode, Backoff};
use crate::proto::cluster as pb;

/// Backoff between fences of a node that could not be finished.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// How long `volume detach` waits for the controller leader.
pub const DETACH_TIMEOUT: Duration = Duration::from_secs(30);

/// The reason a lost node's claims carry.
pub const NODE_LOST: &str = "node lost";

/// The candidate (then maybe the fencer) of this agent; dropping it stops
/// the thread, which gives up the election at once.
pub struct Fencer {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Fencer {
    /// Starts campaigning as node `node`; `ttl` is the cluster's lease TTL,
    /// also how long a node is gone before it is fenced.
    pub fn start(
        etcd: Arc<Etcd>,
        prefix: &str,
        node: &str,
        ttl: Duration,
    ) -> std::io::Result<Fencer> {
        let (stop_tx, stop_rx) = bounded(1);
        let prefix = prefix.trim_end_matches('/').to_string();
        let node = node.to_string();
        let thread = thread::Builder::new()
            .name("fencer".into())
            .spawn(move || {
                let candidacy = Candidacy {
                    etcd: &etcd,
                    key: election::fencer_key(&prefix),
                    record: pb::Leader {
                        node: node.clone(),
                        ..Default::default()
                    },
                    ttl,
                    what: "fencer of lost nodes",
                };
                candidacy.run(&stop_rx, |held| lead(&etcd, &prefix, ttl, held, &stop_rx));
            })?;
        Ok(Fencer {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Fencer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn nodes_prefix(prefix: &str) -> String {
    format!("{prefix}/nodes/")
}

/// A node still to fence: when, and how many tries failed.
struct Due {
    at: Instant,
    attempt: u32,
}

/// While this agent is the fencer: every node that holds claims and has
/// no key is fenced once it has been gone for `ttl`.
fn lead(etcd: &Etcd, prefix: &str, ttl: Duration, held: &mut Held, stop: &Receiver<()>) -> Ended {
    let nodes = nodes_prefix(prefix);
    let node_of = |key: &[u8]| {
        key.strip_prefix(nodes.as_bytes())
            .map(|name| String::from_utf8_lossy(name).into_owned())
    };
    let (kvs, revision) = match etcd.get_prefix(nodes.as_bytes()) {
        Ok(read) => read,
        Err(err) => return err.into(),
    };
    let alive: Vec<String> = kvs.iter().filter_map(|kv| node_of(&kv.key)).collect();
    let sets = match ClaimSets::new(etcd, prefix).all() {
        Ok(sets) => sets,
        Err(err) => return Ended::Again(crate::error_chain(&err)),
    };
    // How long a node without a key has been gone is unknown here: it
    // gets a whole TTL from now.
    let mut due: BTreeMap<String, Due> = BTreeMap::new();
    for (_, set) in &sets {
        for c in &set.claims {
            if !alive.contains(&c.node) {
                due.entry(c.node.clone()).or_insert(Due {
                    at: Instant::now() + ttl,
                    attempt: 0,
                });
            }
        }
    }
    let watch = match etcd.watch_prefix(nodes.as_bytes(), revision + 1) {
        Ok(watch) => watch,
        Err(err) => return err.into(),
    };
    let keep_alive = crossbeam_channel::tick(held.period());
    loop {
        let next = due.values().map(|d| d.at).min();
        let timer = next.map_or_else(never, |at| {
            after(at.saturating_duration_since(Instant::now()))
        });
        select! {
            recv(stop) -> _ => return Ended::Stopped,
            recv(keep_alive) -> _ => if let Err(ended) = held.renew(etcd) {
                return ended;
            },
            recv(watch.receiver()) -> batch => {
                let batch = match batch {
                    Ok(Ok(batch)) => batch,
                    Ok(Err(err)) => return err.into(),
                    Err(_) => return Ended::Again("the watch of the nodes ended".into()),
                };
                for event in batch.events {
                    match event {
                        Event::Put(kv) => {
                            if let Some(node) = node_of(&kv.key) {
                                due.remove(&node);
                            }
                        }
                        Event::Delete { key, .. } => {
                            if let Some(node) = node_of(&key) {
                                log::info!(
                                    "Cluster: node {node} left; it is fenced unless it is back within {}",
                                    crate::units::format_duration(ttl)
                                );
                                due.insert(node, Due { at: Instant::now() + ttl, attempt: 0 });
                            }
                        }
                    }
                }
            },
            recv(timer) -> _ => {
                let now = Instant::now();
                let ready: Vec<String> = due
                    .iter()
                    .filter(|(_, d)| d.at <= now)
                    .map(|(node, _)| node.clone())
                    .collect();
                for node in ready {
                    if let Err(ended) = held.renew(etcd) {
                        return ended;
                    }
                    match fence_node(etcd, prefix, &node, held.period()) {
                        Ok(true) => {
                            due.remove(&node);
                        }
                        Ok(false) => {
                            let d = due.get_mut(&node).expect("due");
                            d.at = Instant::now() + RETRY.delay(d.attempt, 1.0);
                            d.attempt = d.attempt.saturating_add(1).min(16);
                        }
                        // etcd failed: this node may not be the fencer
                        // for long.
                        Err(err) => return Ended::Again(err),
                    }
                }
            },
        }
    }
}

/// Fences every claim of lost node `node`: whether nothing is left to do
/// but what an operator must decide.
fn fence_node(etcd: &Etcd, prefix: &str, node: &str, wait: Duration) -> Result<bool, String> {
    let sets = ClaimSets::new(etcd, prefix);
    let all = sets.all().map_err(|err| crate::error_chain(&err))?;
    let mut finished = true;
    for (volume, set) in all {
        if !set.claims.iter().any(|c| c.node == node) {
            continue;
        }
        match fence(etcd, prefix, &volume, node, wait, false) {
            Ok(Fenced::Freed) => {
                log::info!("Cluster: fenced lost node {node}'s claims on volume {volume}")
            }
            Ok(Fenced::Operator) => log::warn!(
                "Cluster: lost node {node} keeps its write claim on volume {volume}: no controller can detach it; `csi-agent volume detach -force -node {node} {volume}` frees it once the node is known to be down"
            ),
            Ok(Fenced::Waiting(why)) => {
                log::warn!("Cluster: fencing lost node {node} on volume {volume}: {why}");
                finished = false;
            }
            Err(err) => return Err(crate::error_chain(&err)),
        }
    }
    Ok(finished)
}

/// What fencing one volume came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fenced {
    /// The node's claims on the volume are freed.
    Freed,
    /// A write claim stays until an operator frees it with `-force`.
    Operator,
    /// Not yet: why.
    Waiting(String),
}

/// Whether a claim of a lost node may be freed without a controller's
/// detach: it cannot write, or others may write next to it anyway.
fn harmless(c: &pb::ClusterClaim) -> bool {
    c.read_only || AccessMode::from_number(c.access_mode) == Some(AccessMode::MultiNodeMultiWriter)
}

/// Fences node `node`'s claims on `volume` (see the module's docs),
/// waiting up to `wait` for the controller leader's detach. With `force`
/// (an operator's `volume detach -force`), claims no controller attached
/// are all freed.
pub fn fence(
    etcd: &Etcd,
    prefix: &str,
    volume: &str,
    node: &str,
    wait: Duration,
    force: bool,
) -> Result<Fenced, claims::Error> {
    let sets = ClaimSets::new(etcd, prefix);
    let mark = |reason: &str| sets.mark_lost(volume, node, reason);
    let key = attachments::attachment_key(prefix, volume, node);
    let attachment = etcd.get(&key)?.and_then(|kv| {
        pb::Attachment::parse_from_bytes(&kv.value)
            .ok()
            .map(|a| (a, kv))
    });
    let Some((record, kv)) = attachment else {
        // No controller attached the volume to the node: what cannot
        // write goes, the rest is marked past for an operator.
        let left = sets.free_fenced(volume, node, |c| force || harmless(c))?;
        if left == 0 {
            return Ok(Fenced::Freed);
        }
        mark(&format!(
            "{NODE_LOST}: no controller can detach it; `csi-agent volume detach -force -node {node} {volume}` frees it once the node is known to be down"
        ))?;
        return Ok(Fenced::Operator);
    };
    use pb::attachment::State;
    let outcome = match record.state.enum_value_or_default() {
        State::DETACHED => Outcome::Detached,
        state => {
            mark(&format!(
                "{NODE_LOST}: the controller leader is detaching it"
            ))?;
            let from = if state == State::DETACH_REQUESTED {
                kv.mod_revision
            } else {
                attachments::request(
                    etcd,
                    prefix,
                    volume,
                    node,
                    &record.plugin_node_id,
                    record.read_only,
                    false,
                )?
            };
            match attachments::wait(etcd, prefix, volume, node, from, wait) {
                Ok(outcome) => outcome,
                Err(etcd::Error::Timeout) => {
                    let why = "no controller leader has detached it yet".to_string();
                    return Ok(Fenced::Waiting(why));
                }
                Err(err) => return Err(err.into()),
            }
        }
    };
    match outcome {
        Outcome::Detached => {
            sets.free_fenced(volume, node, |_| true)?;
            // Only once the claims are gone: a detached record left by a
            // crash is harmless, a freed claim that looks unattached is not.
            etcd.delete(&key)?;
            Ok(Fenced::Freed)
        }
        Outcome::Failed(error) => {
            let why = format!("ControllerUnpublishVolume failed: {error}");
            mark(&format!("{NODE_LOST}: {why}"))?;
            Ok(Fenced::Waiting(why))
        }
        Outcome::Attached(_) => Ok(Fenced::Waiting(
            "the controller leader attached it again".into(),
        )),
    }
}

/// Why an operator's detach was refused or failed.
#[derive(Debug)]
pub enum DetachError {
    /// The node's key is there: it is not lost.
    NodeAlive {
        node: String,
    },
    Claims(claims::Error),
}

impl std::fmt::Display for DetachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DetachError::NodeAlive { node } => write!(
                f,
                "node {node} is alive in the cluster: release its claims there (stop the job that holds them)"
            ),
            DetachError::Claims(_) => f.write_str("cannot free the node's claims in etcd"),
        }
    }
}

impl std::error::Error for DetachError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DetachError::Claims(err) => Some(err),
            DetachError::NodeAlive { .. } => None,
        }
    }
}

impl<E: Into<claims::Error>> From<E> for DetachError {
    fn from(err: E) -> DetachError {
        DetachError::Claims(err.into())
    }
}

/// An operator's `volume detach -force -node NODE VOLUME`: refused while
/// the node is alive; otherwise the node's claims on the volume are
/// fenced, every one of them, waiting for the controller leader's detach
/// where a controller attached it.
pub fn detach(etcd: &Etcd, prefix: &str, volume: &str, node: &str) -> Result<Fenced, DetachError> {
    if etcd.get(&super::node::node_key(prefix, node))?.is_some() {
        return Err(DetachError::NodeAlive {
            node: node.to_string(),
        });
    }
    Ok(fence(etcd, prefix, volume, node, DETACH_TIMEOUT, true)?)
}
