//! The agent as a member of a cluster: a thread that registers the node
//! (retrying with backoff while etcd cannot be reached), keeps it alive
//! through [`Registration`], and tells the main loop where it stands.
//!
//! The main loop never waits on etcd: it hears [`MemberEvent`]s on a
//! channel, answers `node status` from a thread of its own, and hands the
//! node's plugins to the thread when they change ([`Member::set_plugins`]),
//! so that `nodes/<node>` follows the agent's registry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

use super::etcd::Etcd;
use super::node::{self, NodeEvent, Registration};
use super::tls::Tls;
use crate::csi::Backoff;
use crate::proto::cluster as pb;
use crate::spec::ClusterConfig;

/// How long an etcd call of the member thread may take per member.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// Backoff between registration attempts while etcd cannot be reached.
const RETRY: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(10));

/// What the member thread reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberEvent {
    /// Registered (first, or again after a disconnection).
    Connected,
    /// A keep-alive or registration sent at `sent` went through (see
    /// [`NodeEvent::Alive`]).
    Alive {
        sent: std::time::Instant,
        lease: i64,
    },
    /// Not registered, or cut off for longer than the lease's TTL.
    Disconnected { reason: String },
    /// Another live agent holds this node's name: the agent must not run
    /// as a member of the cluster.
    NameTaken { node: String },
}

/// The member thread; dropping it stops the thread, which revokes the
/// node's lease (a clean stop leaves the cluster at once).
pub struct Member {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    events: Receiver<MemberEvent>,
    /// The node's plugins as last handed to the thread.
    plugins: Vec<pb::NodePlugin>,
    plugin_updates: Sender<Vec<pb::NodePlugin>>,
    etcd: Arc<Etcd>,
    prefix: String,
    /// Whether the thread revokes the node's lease when it stops.
    revoke: Arc<AtomicBool>,
}

/// The node's record: its name, when it started, its plugins.
pub fn record(node: &str, plugins: Vec<pb::NodePlugin>) -> pb::NodeRecord {
    pb::NodeRecord {
        node: node.to_string(),
        registered_unix_ms: node::unix_ms_now(),
        plugins,
        ..Default::default()
    }
}

impl Member {
    /// Starts registering `record` in the cluster `config` names. Its TLS
    /// files, if any, are read here: a missing one fails the start.
    /// `resume`: the lease of the agent's previous process, taken back
    /// if etcd still keeps it (see [`Registration::start`]).
    pub fn start(
        config: &ClusterConfig,
        record: pb::NodeRecord,
        resume: Option<i64>,
    ) -> Result<Member, super::etcd::Error> {
        let tls = match &config.tls {
            Some(tls) => Some(
                Tls::load(
                    &tls.ca_file,
                    tls.client_cert
                        .as_ref()
                        .map(|c| (c.cert_file.as_path(), c.key_file.as_path())),
                )
                .map_err(super::etcd::Error::Tls)?,
            ),
            None => None,
        };
        let etcd = Arc::new(Etcd::new(&config.etcd, tls.as_ref())?.with_timeout(CALL_TIMEOUT));
        let (stop_tx, stop_rx) = bounded::<()>(1);
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let (updates_tx, updates_rx) = crossbeam_channel::unbounded();
        let (thread_etcd, prefix, ttl) = (etcd.clone(), config.prefix.clone(), config.lease_ttl);
        let plugins = record.plugins.clone();
        let revoke = Arc::new(AtomicBool::new(true));
        let channels = Channels {
            stop: stop_rx,
            plugins: updates_rx,
            events: events_tx,
            revoke: revoke.clone(),
        };
        let thread = thread::Builder::new()
            .name("cluster-member".into())
            .spawn(move || run(thread_etcd, &prefix, record, ttl, resume, &channels))
            .map_err(|err| super::etcd::Error::WatchEnded {
                reason: format!("cannot start the member thread: {err}"),
                compact_revision: 0,
            })?;
        Ok(Member {
            stop: Some(stop_tx),
            thread: Some(thread),
            events: events_rx,
            plugins,
            plugin_updates: updates_tx,
            etcd,
            prefix: config.prefix.clone(),
            revoke,
        })
    }

    /// Whether stopping leaves the node's lease to expire rather than
    /// revoking it. While tasks that hold write claims outlive the agent,
    /// the cluster must count them from the lease's expiry, as for a node
    /// cut off, never from an early revoke.
    pub fn keep_lease_on_stop(&self, keep: bool) {
        self.revoke.store(!keep, Ordering::Relaxed);
    }

    /// The node's plugins now (their IDs, node IDs and health): when they
    /// differ from the last ones, the thread rewrites the node's record.
    pub fn set_plugins(&mut self, plugins: Vec<pb::NodePlugin>) {
        if plugins != self.plugins {
            self.plugins = plugins.clone();
            let _ = self.plugin_updates.send(plugins);
        }
    }

    pub fn events(&self) -> &Receiver<MemberEvent> {
        &self.events
    }

    /// The client, for reads answered off the main loop.
    pub fn etcd(&self) -> Arc<Etcd> {
        self.etcd.clone()
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The member thread's channels.
struct Channels {
    /// Closed when the thread must stop.
    stop: Receiver<()>,
    /// The node's plugins, when they change.
    plugins: Receiver<Vec<pb::NodePlugin>>,
    events: Sender<MemberEvent>,
    revoke: Arc<AtomicBool>,
}

/// Takes the latest plugins waiting in `updates` into `record`; whether
/// there were any.
fn take_plugins(record: &mut pb::NodeRecord, updates: &Receiver<Vec<pb::NodePlugin>>) -> bool {
    match updates.try_iter().last() {
        Some(plugins) => {
            record.plugins = plugins;
            true
        }
        None => false,
    }
}

fn run(
    etcd: Arc<Etcd>,
    prefix: &str,
    mut record: pb::NodeRecord,
    ttl: Duration,
    mut resume: Option<i64>,
    channels: &Channels,
) {
    let Channels {
        stop,
        plugins,
        events,
        revoke,
    } = channels;
    let mut attempt = 0;
    let registration = loop {
        // Registered with the plugins as they are by now.
        take_plugins(&mut record, plugins);
        match Registration::start(
            etcd.clone(),
            prefix,
            record.clone(),
            ttl,
            revoke.clone(),
            resume.take(),
        ) {
            Ok(registration) => break registration,
            Err(node::Error::NameTaken { node }) => {
                let _ = events.send(MemberEvent::NameTaken { node });
                return;
            }
            Err(err) => {
                let _ = events.send(MemberEvent::Disconnected {
                    reason: crate::error_chain(&err),
                });
                let delay = RETRY.delay(attempt, 1.0);
                attempt = attempt.saturating_add(1);
                match stop.recv_timeout(delay) {
                    Err(RecvTimeoutError::Timeout) => continue,
                    _ => return,
                }
            }
        }
    };
    let _ = events.send(MemberEvent::Connected);
    let _ = events.send(MemberEvent::Alive {
        sent: registration.sent,
        lease: registration.lease,
    });
    // Plugins that changed while registering.
    if take_plugins(&mut record, plugins) {
        registration.update(record.clone());
    }
    loop {
        crossbeam_channel::select! {
            recv(stop) -> _ => return, // dropping `registration` revokes the lease
            recv(plugins) -> update => if let Ok(update) = update {
                record.plugins = update;
                take_plugins(&mut record, plugins);
                registration.update(record.clone());
            },
            recv(registration.events()) -> event => match event {
                Ok(NodeEvent::Disconnected { reason }) => {
                    let _ = events.send(MemberEvent::Disconnected { reason });
                }
                Ok(NodeEvent::Reconnected { .. }) => {
                    let _ = events.send(MemberEvent::Connected);
                }
                Ok(NodeEvent::Alive { sent, lease }) => {
                    let _ = events.send(MemberEvent::Alive { sent, lease });
                }
                Err(_) => return,
            },
        }
    }
}
