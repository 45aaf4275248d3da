//! A node's presence in the cluster: `<prefix>/nodes/<node>` holds the
//! node's record, attached to the agent's lease, which a thread of its own
//! keeps alive. The node is alive while the key exists; when the agent
//! stops keeping it alive (it died, or it is cut off), etcd deletes the key
//! after the lease's TTL.
//!
//! The thread reports what the agent must act on: once keep-alives have
//! failed for longer than the TTL the agent is *disconnected* (the cluster
//! considers it lost), and when it gets through again it registers anew
//! and is *reconnected*. Node names are unique: a name whose key is held by
//! another live lease is refused.
//!
//! The record follows the node: a new one ([`Registration::update`]) goes
//! to the same thread, which puts it on the lease it holds (the latest of
//! a burst, once), retries it at each keep-alive while etcd refuses, and
//! registers with it when it reconnects.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{at, bounded, select, Receiver, Sender};

use super::etcd::{self, Etcd};
use crate::proto::cluster as pb;

/// What the registration thread reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// A keep-alive (or a registration) went through: it was sent at
    /// `sent`, so etcd keeps the lease at least a TTL from then. The
    /// agent's own view of being cut off runs from the last of these,
    /// never from when a call that failed happened to return.
    Alive { sent: Instant, lease: i64 },
    /// Keep-alives failed for longer than the lease's TTL: the cluster
    /// counts this node as lost.
    Disconnected { reason: String },
    /// Registered again after a disconnection, under a new lease.
    Reconnected { lease: i64 },
}

/// The wall clock in Unix milliseconds, for records people read: when
/// a node record says its node registered.
pub fn unix_ms_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Why a node could not register.
#[derive(Debug)]
pub enum Error {
    /// Another live agent holds the node name.
    NameTaken {
        node: String,
    },
    Etcd(etcd::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NameTaken { node } => write!(
                f,
                "node name {node:?} is held by another live agent of the cluster; node names must be unique"
            ),
            Error::Etcd(_) => f.write_str("cannot register the node in etcd"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Etcd(err) => Some(err),
            Error::NameTaken { .. } => None,
        }
    }
}

impl From<etcd::Error> for Error {
    fn from(err: etcd::Error) -> Error {
        Error::Etcd(err)
    }
}

/// `node status`: where this agent stands, and the nodes registered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStatus {
    pub this_node: String,
    /// `connecting`, `connected` or `disconnected`; `none` on an agent
    /// without a cluster.
    pub connection: String,
    /// Why it is disconnected.
    pub reason: String,
    /// By name.
    pub nodes: Vec<ClusterNode>,
    /// This agent's node as placement sees it.
    pub resources: NodeResources,
    /// This agent's plugins.
    pub plugins: Vec<ClusterNodePlugin>,
}

/// A node's resources for placement, MHz and MiB: what it has, what the
/// agent config reserves, and what live placed allocs hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeResources {
    pub cpu: u64,
    pub memory: u64,
    pub cores: u64,
    pub reserved_cpu: u64,
    pub reserved_memory: u64,
    pub allocated_cpu: u64,
    pub allocated_memory: u64,
}

/// A node's record, as `node status` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    pub name: String,
    pub registered: std::time::SystemTime,
    pub plugins: Vec<ClusterNodePlugin>,
}

/// A plugin a node runs, with the ID and topology it has there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterNodePlugin {
    pub id: String,
    pub node_id: String,
    pub healthy: bool,
    pub topology: crate::csi::types::Topology,
}

impl ClusterNodePlugin {
    pub fn from_record(p: pb::NodePlugin) -> ClusterNodePlugin {
        let topology: crate::csi::types::Topology = p.topology.into_iter().collect();
        // Another agent wrote it: shown only within the bounds a plugin's
        // answer is held to.
        let topology = match crate::csi::topology::check(&topology) {
            Ok(()) => topology,
            Err(err) => {
                log::warn!(
                    "Node record of plugin {}: {err}; its topology is not shown",
                    p.id
                );
                Default::default()
            }
        };
        ClusterNodePlugin {
            id: p.id,
            node_id: p.node_id,
            healthy: p.healthy,
            topology,
        }
    }
}

impl ClusterNode {
    pub fn from_record(record: pb::NodeRecord) -> ClusterNode {
        ClusterNode {
            name: record.node,
            registered: std::time::UNIX_EPOCH
                + Duration::from_millis(record.registered_unix_ms.max(0) as u64),
            plugins: record
                .plugins
                .into_iter()
                .map(ClusterNodePlugin::from_record)
                .collect(),
        }
    }
}

/// The key of `node` under `prefix`.
pub fn node_key(prefix: &str, node: &str) -> Vec<u8> {
    format!("{}/nodes/{node}", prefix.trim_end_matches('/')).into_bytes()
}

/// Every live node's record.
pub fn list(etcd: &Etcd, prefix: &str) -> Result<Vec<pb::NodeRecord>, etcd::Error> {
    let nodes = format!("{}/nodes/", prefix.trim_end_matches('/'));
    let (kvs, _) = etcd.get_prefix(nodes.as_bytes())?;
    Ok(kvs
        .iter()
        .filter_map(|kv| crate::message::decode::<pb::NodeRecord>(&kv.value).ok())
        .collect())
}

/// Puts the node's key under a new lease, if no other lease holds it:
/// the lease's ID.
fn register_once(etcd: &Etcd, key: &[u8], record: &[u8], ttl: Duration) -> Result<i64, Error> {
    let (lease, _) = etcd.grant(ttl)?;
    match etcd.put_if(key, 0, record, lease)? {
        Some(_) => Ok(lease),
        None => {
            let _ = etcd.revoke(lease);
            Err(Error::NameTaken {
                node: String::from_utf8_lossy(key).into_owned(),
            })
        }
    }
}

/// Takes the node's key back on `lease`, the lease of the agent's
/// previous process, if etcd still keeps it and the key is on it: a
/// restarted agent goes on as the same member, and the cluster never sees
/// it leave. Whether it did.
fn resume_once(etcd: &Etcd, key: &[u8], record: &[u8], lease: i64) -> Result<bool, Error> {
    if etcd.keep_alive(lease)? <= 0 {
        return Ok(false);
    }
    let Some(kv) = etcd.get(key)? else {
        return Ok(false);
    };
    if kv.lease != lease {
        return Ok(false);
    }
    Ok(etcd.put_if(key, kv.mod_revision, record, lease)?.is_some())
}

/// A node registered in the cluster, kept alive until dropped (which
/// revokes the lease: a clean stop removes the node at once).
pub struct Registration {
    /// When the registration's lease grant (or the keep-alive of the
    /// lease it resumed) was sent.
    pub sent: Instant,
    /// The lease it registered on.
    pub lease: i64,
    stop: Option<Sender<()>>,
    records: Sender<pb::NodeRecord>,
    thread: Option<JoinHandle<()>>,
    events: Receiver<NodeEvent>,
}

impl Registration {
    /// Registers `record` as node `record.node`, with a lease of `ttl`.
    /// A name held by another live lease is retried until that lease could
    /// have expired (an agent restarted after a crash finds its own old
    /// key), then refused.
    pub fn start(
        etcd: Arc<Etcd>,
        prefix: &str,
        record: pb::NodeRecord,
        ttl: Duration,
        revoke: Arc<std::sync::atomic::AtomicBool>,
        resume: Option<i64>,
    ) -> Result<Registration, Error> {
        let key = node_key(prefix, &record.node);
        let bytes = crate::message::encode(&record).expect("encoding a node record cannot fail");
        let deadline = Instant::now() + ttl + Duration::from_secs(2);
        let resumed = match resume {
            Some(lease) => {
                let sent = Instant::now();
                match resume_once(&etcd, &key, &bytes, lease) {
                    Ok(true) => Some((lease, sent)),
                    Ok(false) => None,
                    Err(err) => {
                        log::debug!("etcd: resuming lease {lease:x} failed: {err}");
                        None
                    }
                }
            }
            None => None,
        };
        let (lease, sent) = if let Some(resumed) = resumed {
            resumed
        } else {
            loop {
                let sent = Instant::now();
                match register_once(&etcd, &key, &bytes, ttl) {
                    Ok(lease) => break (lease, sent),
                    Err(Error::NameTaken { .. }) if Instant::now() < deadline => {
                        thread::sleep(Duration::from_millis(250));
                    }
                    Err(Error::NameTaken { .. }) => {
                        return Err(Error::NameTaken { node: record.node })
                    }
                    Err(err) => return Err(err),
                }
            }
        };
        let (stop_tx, stop_rx) = bounded(1);
        let (records_tx, records_rx) = crossbeam_channel::unbounded();
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let held = Lease {
            etcd,
            key,
            record: bytes,
            ttl,
            id: lease,
            last_ok: sent,
        };
        let thread = thread::Builder::new()
            .name("etcd-lease".into())
            .spawn(move || keep_alive(held, &stop_rx, &records_rx, &events_tx, &revoke))
            .map_err(|err| {
                Error::Etcd(etcd::Error::WatchEnded {
                    reason: format!("cannot start the keep-alive thread: {err}"),
                    compact_revision: 0,
                })
            })?;
        Ok(Registration {
            sent,
            lease,
            stop: Some(stop_tx),
            records: records_tx,
            thread: Some(thread),
            events: events_rx,
        })
    }

    /// Disconnections and reconnections, as they happen.
    pub fn events(&self) -> &Receiver<NodeEvent> {
        &self.events
    }

    /// Replaces the node's record in etcd with `record` (same node name),
    /// on the node's lease, without waiting: the keep-alive thread writes
    /// it, or registers with it when it reconnects.
    pub fn update(&self, record: pb::NodeRecord) {
        let _ = self.records.send(record);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The node's key on its lease, as the keep-alive thread holds them.
struct Lease {
    etcd: Arc<Etcd>,
    key: Vec<u8>,
    /// The latest record, encoded: what is (or is to be) at the key.
    record: Vec<u8>,
    ttl: Duration,
    id: i64,
    /// When the last keep-alive (or registration) that went through was
    /// sent.
    last_ok: Instant,
}

/// The keep-alive loop: every third of the TTL, each call with a third of
/// the TTL to answer; reports each keep-alive that went through, a
/// disconnection once the last one was sent a TTL ago, and registers
/// again when etcd answers. A new record is put on the lease when it
/// comes, and again at each keep-alive until etcd takes it.
fn keep_alive(
    mut lease: Lease,
    stop: &Receiver<()>,
    records: &Receiver<pb::NodeRecord>,
    events: &Sender<NodeEvent>,
    revoke: &std::sync::atomic::AtomicBool,
) {
    let (etcd, ttl) = (lease.etcd.clone(), lease.ttl);
    let period = ttl / 3;
    let mut last_ok = lease.last_ok;
    let mut next_keep_alive = last_ok + period;
    let mut connected = true;
    // A record etcd does not have yet.
    let mut unwritten = false;
    loop {
        select! {
            // Stopped: the node leaves at once.
            recv(stop) -> _ => {
                if connected && revoke.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = etcd.revoke(lease.id);
                }
                return;
            }
            recv(records) -> record => {
                // A burst of changes is one write: the latest record.
                let Some(record) = record.ok().into_iter().chain(records.try_iter()).last() else {
                    continue;
                };
                lease.record = crate::message::encode(&record)
                    .expect("encoding a node record cannot fail");
                unwritten = true;
            }
            recv(at(next_keep_alive)) -> _ => {
                let sent = Instant::now();
                next_keep_alive = sent + period;
                let alive = if connected {
                    let kept = matches!(etcd.keep_alive_within(lease.id, period), Ok(ttl) if ttl > 0);
                    if !kept {
                        crate::metrics::LEASE_KEEPALIVE_FAILURES.inc(&[]);
                    }
                    kept
                } else {
                    // Registered anew: the record says when.
                    if let Ok(mut record) = crate::message::decode::<pb::NodeRecord>(&lease.record) {
                        record.registered_unix_ms = unix_ms_now();
                        lease.record = crate::message::encode(&record)
                            .expect("encoding a node record cannot fail");
                    }
                    match register_once(&etcd, &lease.key, &lease.record, ttl) {
                        Ok(new) => {
                            lease.id = new;
                            connected = true;
                            unwritten = false;
                            let _ = events.send(NodeEvent::Reconnected { lease: new });
                            true
                        }
                        Err(err) => {
                            log::debug!("etcd: registering the node again failed: {err}");
                            false
                        }
                    }
                };
                if alive {
                    last_ok = sent;
                    let _ = events.send(NodeEvent::Alive { sent, lease: lease.id });
                } else if connected && last_ok.elapsed() >= ttl {
                    connected = false;
                    let _ = events.send(NodeEvent::Disconnected {
                        reason: format!(
                            "no keep-alive went through for {}",
                            crate::units::format_duration(Duration::from_secs(
                                last_ok.elapsed().as_secs()
                            ))
                        ),
                    });
                }
            }
        }
        if unwritten && connected {
            // The key is this lease's (registration made sure): a plain
            // put replaces the record and keeps the lease.
            match etcd.put(&lease.key, &lease.record, lease.id) {
                Ok(_) => unwritten = false,
                Err(err) => log::debug!("etcd: rewriting the node record failed: {err}"),
            }
        }
    }
}
