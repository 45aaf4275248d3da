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
//! A write claim that carries its node's [`Promise`] (the node runs with
//! `stop_after_disconnect`: it stops the claim's tasks itself when cut
//! off) is never freed before that promise has run out: its budget,
//! counted from the expiry of the node's lease and stretched for clock
//! rates ([`Promise::wait_after_expiry`]). Attached by a controller, it
//! waits for both the detach and the budget; not attached, the budget is
//! enough. A claim without a promise goes only with a storage fence (the
//! detach) or an operator.
//!
//! Every write of the fence is a transaction that also compares that the
//! fencer still holds its election on the lease it won it with, and that
//! the lost node's key is still gone ([`Condition`]): a deposed fencer, or
//! a node that came back, makes it fail.
//!
//! What cannot be done yet (no controller leader answered, the detach
//! failed, the budget is still running) is tried again later; the reason
//! in the claim says what the fence waits for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, never, select, Receiver, Sender};

use super::attachments::{self, Outcome};
use super::claims::{self, ClaimSets, Promise};
use super::election::{self, Candidacy, Ended, Held};
use super::etcd::{self, Condition, Etcd, Event};
use crate::csi::{AccessMode, Backoff};
use crate::proto::cluster as pb;

/// Backoff between fences of a node that could not be finished.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// How long `volume detach` waits for the controller leader.
pub const DETACH_TIMEOUT: Duration = Duration::from_secs(30);

/// The reason a lost node's claims carry.
pub const NODE_LOST: &str = "node lost";

/// What a write claim whose node made a promise waits for.
const PROMISED: &str =
    "freed once the node's promise to stop its writers (stop_after_disconnect) has run out";

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

/// A node still to fence: since when it is gone (as this fencer saw it),
/// when to try next, and how many tries failed.
struct Due {
    gone_since: Instant,
    at: Instant,
    attempt: u32,
}

impl Due {
    /// A node seen gone now: fenced once it has been gone a `ttl`, so
    /// that an agent restarted meanwhile registers again first.
    fn now(ttl: Duration) -> Due {
        let now = Instant::now();
        Due {
            gone_since: now,
            at: now + ttl,
            attempt: 0,
        }
    }
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
    // When a node without a key went is unknown here: it counts as gone
    // from now, which is never earlier than its lease's expiry.
    let mut due: BTreeMap<String, Due> = BTreeMap::new();
    for (_, set) in &sets {
        for c in &set.claims {
            if !alive.contains(&c.node) {
                due.entry(c.node.clone()).or_insert_with(|| Due::now(ttl));
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
                                let line = format!(
                                    "it is fenced unless it is back within {}",
                                    crate::units::format_duration(ttl)
                                );
                                log::info!("Cluster: node {node} left; {line}");
                                node_event("Left", &node, line);
                                due.insert(node, Due::now(ttl));
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
                    let d = due.get_mut(&node).expect("due");
                    let lost = Lost {
                        node: &node,
                        gone_since: Some(d.gone_since),
                        guard: vec![
                            held.guard(),
                            Condition::Absent(super::node::node_key(prefix, &node)),
                        ],
                    };
                    match fence_node(etcd, prefix, &lost, held.period()) {
                        Ok(Next::Done) => {
                            due.remove(&node);
                        }
                        Ok(Next::At(at)) => {
                            d.at = at;
                        }
                        Ok(Next::Retry) => {
                            d.at = Instant::now() + RETRY.delay(d.attempt, 1.0);
                            d.attempt = d.attempt.saturating_add(1).min(16);
                        }
                        // etcd failed, or a guard: this node may not be
                        // the fencer for long.
                        Err(err) => return Ended::Again(err),
                    }
                }
            },
        }
    }
}

/// A lost node as the fence sees it.
pub struct Lost<'a> {
    pub node: &'a str,
    /// Since when the fencer has seen the node's key gone; `None` for an
    /// operator's `-force`, which frees without waiting for any promise.
    pub gone_since: Option<Instant>,
    /// What every write of the fence also compares.
    pub guard: Vec<Condition>,
}

/// What is left of a node's fence.
enum Next {
    /// Nothing but what an operator must decide.
    Done,
    /// A promise runs out then.
    At(Instant),
    /// Something failed or is not done yet: again, with backoff.
    Retry,
}

/// Fences every claim of lost node `lost`.
fn fence_node(etcd: &Etcd, prefix: &str, lost: &Lost, wait: Duration) -> Result<Next, String> {
    let node = lost.node;
    let sets = ClaimSets::new(etcd, prefix);
    let all = sets.all().map_err(|err| crate::error_chain(&err))?;
    let mut next = Next::Done;
    for (volume, set) in all {
        if !set.claims.iter().any(|c| c.node == node) {
            continue;
        }
        match fence(etcd, prefix, &volume, lost, wait) {
            Ok(Fenced::Freed) => {
                crate::metrics::FENCED_CLAIMS.inc(&[]);
                log::info!("Cluster: fenced lost node {node}'s claims on volume {volume}");
                node_event(
                    "Fenced",
                    node,
                    format!("its claims on volume {volume} are freed"),
                );
            }
            Ok(Fenced::Operator) => {
                let line = format!(
                    "it keeps its write claim on volume {volume}: no controller can detach it; `csi-agent volume detach -force -node {node} {volume}` frees it once the node is known to be down"
                );
                log::warn!("Cluster: lost node {node}: {line}");
                node_event("FenceNeedsOperator", node, line);
            }
            Ok(Fenced::Until(at)) => {
                next = match next {
                    Next::At(other) if other < at => Next::At(other),
                    Next::Retry => Next::Retry,
                    _ => Next::At(at),
                };
            }
            Ok(Fenced::Waiting(why)) => {
                log::warn!("Cluster: fencing lost node {node} on volume {volume}: {why}");
                next = Next::Retry;
            }
            Err(claims::Error::Guard) => {
                return Err("the fencer was deposed, or the node came back".into())
            }
            Err(err) => return Err(crate::error_chain(&err)),
        }
    }
    Ok(next)
}

/// What fencing one volume came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fenced {
    /// The node's claims on the volume are freed.
    Freed,
    /// A write claim stays until an operator frees it with `-force`.
    Operator,
    /// A write claim's promise runs out then: fence it again.
    Until(Instant),
    /// Not yet: why.
    Waiting(String),
}

/// Whether a claim of a lost node may be freed without a controller's
/// detach: it cannot write, or others may write next to it anyway.
fn harmless(c: &pb::ClusterClaim) -> bool {
    c.read_only || AccessMode::from_number(c.access_mode) == Some(AccessMode::MultiNodeMultiWriter)
}

/// When a write claim of a lost node may be freed by the node's promise
/// alone, counted from `gone_since`: `None` without a promise.
fn promise_ends(c: &pb::ClusterClaim, gone_since: Instant) -> Option<Instant> {
    Promise::of(c).map(|p| gone_since + p.wait_after_expiry())
}

/// Fences node `lost`'s claims on `volume` (see the module's docs),
/// waiting up to `wait` for the controller leader's detach. With an
/// operator's `-force` (`gone_since` is `None`), claims no controller
/// attached are all freed.
pub fn fence(
    etcd: &Etcd,
    prefix: &str,
    volume: &str,
    lost: &Lost,
    wait: Duration,
) -> Result<Fenced, claims::Error> {
    let node = lost.node;
    let sets = ClaimSets::new(etcd, prefix).guarded(lost.guard.clone());
    let mark = |reason: &str| sets.mark_lost(volume, node, reason);
    let now = Instant::now();
    // Which claims may go once whatever storage fence there is is done,
    // and the earliest a promise still running runs out.
    // An operator's `-force` (no `gone_since`) waits for no promise.
    let ripe = |c: &pb::ClusterClaim| match lost.gone_since {
        None => true,
        Some(since) => harmless(c) || promise_ends(c, since).is_some_and(|at| at <= now),
    };
    let running = |set: &pb::ClaimSet| {
        let since = lost.gone_since?;
        set.claims
            .iter()
            .filter(|c| c.node == node && !harmless(c))
            .filter_map(|c| promise_ends(c, since))
            .filter(|at| *at > now)
            .min()
    };
    let key = attachments::attachment_key(prefix, volume, node);
    let attachment = etcd.get(&key)?.and_then(|kv| {
        crate::message::decode::<pb::Attachment>(&kv.value)
            .ok()
            .map(|a| (a, kv))
    });
    let Some((record, kv)) = attachment else {
        // No controller attached the volume to the node: what cannot
        // write goes, and writers once their node's promise has run out;
        // the rest is marked past, for later or for an operator.
        let (set, _) = sets.read(volume)?;
        let until = running(&set);
        let left = sets.free_fenced(volume, node, ripe)?;
        if left == 0 {
            return Ok(Fenced::Freed);
        }
        if let Some(at) = until {
            mark(&format!("{NODE_LOST}: {PROMISED}"))?;
            return Ok(Fenced::Until(at));
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
            // Detached: the storage fence is done. A claim whose node
            // promised to stop its writers still waits for that promise.
            let (set, _) = sets.read(volume)?;
            if let Some(at) = running(&set) {
                mark(&format!("{NODE_LOST}: detached; {PROMISED}"))?;
                return Ok(Fenced::Until(at));
            }
            sets.free_fenced(volume, node, |_| true)?;
            // Only once the claims are gone: a detached record left by a
            // crash is harmless, a freed claim that looks unattached is not.
            etcd.delete(&key)?;
            Ok(Fenced::Freed)
        }
        // The leader's error names its RPC already, when it made one.
        Outcome::Failed(error) => {
            let why = format!("the controller leader's detach failed: {error}");
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
    let key = super::node::node_key(prefix, node);
    let alive = || DetachError::NodeAlive {
        node: node.to_string(),
    };
    if etcd.get(&key)?.is_some() {
        return Err(alive());
    }
    let lost = Lost {
        node,
        gone_since: None,
        guard: vec![Condition::Absent(key)],
    };
    match fence(etcd, prefix, volume, &lost, DETACH_TIMEOUT) {
        Err(claims::Error::Guard) => Err(alive()),
        other => Ok(other?),
    }
}

/// An event of the `node` topic about node `node`.
fn node_event(kind: &str, node: &str, message: impl Into<String>) {
    crate::events::emit(crate::events::Topic::Node, kind, node, message);
}
