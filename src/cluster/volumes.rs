//! Volumes shared by the agents of a cluster: `<prefix>/volumes/<id>`
//! holds the volume's record (its spec, capabilities, secrets, external
//! ID and capacity: what is true on every host), and
//! `<prefix>/volumes/<id>/claims` its claim set ([`super::claims`]).
//!
//! Every agent keeps a copy of each volume, learnt from a watch of the
//! whole `volumes/` range ([`VolumeWatch`]): it reads the range, reports
//! it as one [`VolumeEvent::Sync`], then reports each change; a watch that
//! breaks (etcd compacted past it, every member gone) starts over from a
//! fresh read, so the agent never misses a change, only sees it late.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{bounded, select, Receiver, RecvTimeoutError, Sender};

use super::election;
use super::etcd::{self, Etcd, Event, Kv};
use crate::csi::types::{CapabilitySet, ControllerCapability};
use crate::csi::Backoff;
use crate::proto::cluster as pb;
use crate::proto::state as statepb;

/// Backoff between attempts to read and watch the range again.
const RETRY: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));

fn volumes_prefix(prefix: &str) -> String {
    format!("{}/volumes/", prefix.trim_end_matches('/'))
}

/// The key of volume `id`'s record.
pub fn volume_key(prefix: &str, id: &str) -> Vec<u8> {
    format!("{}{id}", volumes_prefix(prefix)).into_bytes()
}

/// Writes a volume's record.
pub fn put(etcd: &Etcd, prefix: &str, record: &statepb::Volume) -> Result<(), etcd::Error> {
    let bytes = crate::message::encode(record).expect("encoding a volume record cannot fail");
    etcd.put(&volume_key(prefix, &record.id), &bytes, 0)
        .map(|_| ())
}

/// Removes a volume's record.
pub fn delete(etcd: &Etcd, prefix: &str, id: &str) -> Result<(), etcd::Error> {
    etcd.delete(&volume_key(prefix, id)).map(|_| ())
}

/// What the watch of the volumes saw.
#[derive(Clone, Debug, PartialEq)]
pub enum VolumeEvent {
    /// Every record and claim set, as read when the watch (re)started
    /// from the etcd cluster whose ID is `cluster_id`.
    Sync {
        records: Vec<statepb::Volume>,
        claims: Vec<(String, pb::ClaimSet)>,
        cluster_id: u64,
    },
    /// A volume's record was written.
    Put(Box<statepb::Volume>),
    /// A volume's record was removed.
    Removed(String),
    /// A volume's claim set changed (empty once removed).
    Claims { volume: String, set: pb::ClaimSet },
    /// A controller of `plugin` leads somewhere in the cluster (its
    /// `controllers/<plugin>` election is held) with `capabilities`: a
    /// host without a controller of the plugin relays its controller calls
    /// there, and, if it attaches, has its volumes attached before they
    /// are staged.
    Controller {
        plugin: String,
        capabilities: CapabilitySet<ControllerCapability>,
    },
}

/// What a key under `volumes/` is.
enum Key<'a> {
    Record(&'a str),
    Claims(&'a str),
}

fn parse_key<'a>(volumes: &str, key: &'a [u8]) -> Option<Key<'a>> {
    let rest = std::str::from_utf8(key.strip_prefix(volumes.as_bytes())?).ok()?;
    match rest.split_once('/') {
        None => Some(Key::Record(rest)),
        Some((id, "claims")) => Some(Key::Claims(id)),
        Some(_) => None,
    }
}

/// The event a put of `kv` is, if it is one of ours and readable.
fn event_of_put(volumes: &str, kv: &Kv) -> Option<VolumeEvent> {
    match parse_key(volumes, &kv.key)? {
        Key::Record(_) => match crate::message::decode::<statepb::Volume>(&kv.value) {
            Ok(record) => Some(VolumeEvent::Put(Box::new(record))),
            Err(err) => {
                log::error!(
                    "Cluster: the volume record {} in etcd is unreadable: {err}",
                    String::from_utf8_lossy(&kv.key)
                );
                None
            }
        },
        Key::Claims(id) => match crate::message::decode::<pb::ClaimSet>(&kv.value) {
            Ok(set) => Some(VolumeEvent::Claims {
                volume: id.to_string(),
                set,
            }),
            Err(err) => {
                log::error!("Cluster: the claims of volume {id} in etcd are unreadable: {err}");
                None
            }
        },
    }
}

fn event_of(volumes: &str, event: &Event) -> Option<VolumeEvent> {
    match event {
        Event::Put(kv) => event_of_put(volumes, kv),
        Event::Delete { key, .. } => match parse_key(volumes, key)? {
            Key::Record(id) => Some(VolumeEvent::Removed(id.to_string())),
            Key::Claims(id) => Some(VolumeEvent::Claims {
                volume: id.to_string(),
                set: pb::ClaimSet::new(),
            }),
        },
    }
}

/// The state of the range as one event, and the revision it was read at.
fn sync(etcd: &Etcd, volumes: &str) -> Result<(VolumeEvent, i64), etcd::Error> {
    let cluster_id = etcd.cluster_id()?;
    let (kvs, revision) = etcd.get_prefix(volumes.as_bytes())?;
    let mut records = Vec::new();
    let mut claims = Vec::new();
    for kv in &kvs {
        match event_of_put(volumes, kv) {
            Some(VolumeEvent::Put(record)) => records.push(*record),
            Some(VolumeEvent::Claims { volume, set }) => claims.push((volume, set)),
            _ => {}
        }
    }
    Ok((
        VolumeEvent::Sync {
            records,
            claims,
            cluster_id,
        },
        revision,
    ))
}

/// The thread watching the volumes; dropping it stops the thread.
pub struct VolumeWatch {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl VolumeWatch {
    /// Starts watching the volumes under `prefix`, reporting on `events`.
    pub fn start(
        etcd: Arc<Etcd>,
        prefix: &str,
        events: Sender<VolumeEvent>,
    ) -> std::io::Result<VolumeWatch> {
        let (stop_tx, stop_rx) = bounded(1);
        let volumes = volumes_prefix(prefix);
        let thread = thread::Builder::new()
            .name("cluster-volumes".into())
            .spawn(move || run(&etcd, &volumes, &events, &stop_rx))?;
        Ok(VolumeWatch {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for VolumeWatch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(etcd: &Etcd, volumes: &str, events: &Sender<VolumeEvent>, stop: &Receiver<()>) {
    let mut attempt = 0;
    loop {
        match watch_once(etcd, volumes, events, stop) {
            Ok(()) => return,
            Err(err) => {
                log::warn!(
                    "Cluster: the watch of the volumes ended ({}); reading them again",
                    crate::error_chain(&err)
                );
            }
        }
        let delay = RETRY.delay(attempt, 1.0);
        attempt = attempt.saturating_add(1).min(16);
        match stop.recv_timeout(delay) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// A watch's batch as received from its channel.
fn received(
    batch: Result<Result<etcd::Batch, etcd::Error>, crossbeam_channel::RecvError>,
) -> Result<etcd::Batch, etcd::Error> {
    batch.unwrap_or_else(|_| {
        Err(etcd::Error::WatchEnded {
            reason: "its thread ended".into(),
            compact_revision: 0,
        })
    })
}

/// The leader of the controller election `kv` (under `controllers`).
fn controller(controllers: &str, kv: &Kv) -> Option<VolumeEvent> {
    let plugin = std::str::from_utf8(kv.key.strip_prefix(controllers.as_bytes())?).ok()?;
    let capabilities = order::set(
        election::leader_of(&kv.value)
            .controller_capabilities
            .into_iter()
            .filter_map(ControllerCapability::from_number),
    );
    Some(VolumeEvent::Controller {
        plugin: plugin.to_string(),
        capabilities,
    })
}

/// Reads the range and watches it until the watch breaks (`Err`) or the
/// thread is stopped (`Ok`). The controller elections are watched too: a
/// host without a controller of a plugin learns from them what the
/// plugin's controller does.
fn watch_once(
    etcd: &Etcd,
    volumes: &str,
    events: &Sender<VolumeEvent>,
    stop: &Receiver<()>,
) -> Result<(), etcd::Error> {
    let controllers = format!(
        "{}controllers/",
        volumes.strip_suffix("volumes/").unwrap_or(volumes)
    );
    let (leaders, leaders_revision) = etcd.get_prefix(controllers.as_bytes())?;
    let leader_watch = etcd.watch_prefix(controllers.as_bytes(), leaders_revision + 1)?;
    let (state, revision) = sync(etcd, volumes)?;
    let watch = etcd.watch_prefix(volumes.as_bytes(), revision + 1)?;
    let known = leaders.iter().filter_map(|kv| controller(&controllers, kv));
    for event in std::iter::once(state).chain(known) {
        if events.send(event).is_err() {
            return Ok(());
        }
    }
    loop {
        select! {
            recv(stop) -> _ => return Ok(()),
            recv(leader_watch.receiver()) -> batch => {
                let batch = received(batch)?;
                for event in &batch.events {
                    let Event::Put(kv) = event else { continue };
                    if let Some(event) = controller(&controllers, kv) {
                        if events.send(event).is_err() {
                            return Ok(());
                        }
                    }
                }
            }
            recv(watch.receiver()) -> batch => {
                let batch = received(batch)?;
                for event in &batch.events {
                    if let Some(event) = event_of(volumes, event) {
                        if events.send(event).is_err() {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_under_volumes_are_records_or_claim_sets() {
        let volumes = volumes_prefix("/csi-agent/");
        assert_eq!(volumes, "/csi-agent/volumes/");
        assert!(matches!(
            parse_key(&volumes, b"/csi-agent/volumes/v1"),
            Some(Key::Record("v1"))
        ));
        assert!(matches!(
            parse_key(&volumes, b"/csi-agent/volumes/v1/claims"),
            Some(Key::Claims("v1"))
        ));
        assert!(parse_key(&volumes, b"/csi-agent/volumes/v1/other").is_none());
        assert!(parse_key(&volumes, b"/csi-agent/nodes/n1").is_none());
        let removed = Event::Delete {
            key: b"/csi-agent/volumes/v1/claims".to_vec(),
            revision: 9,
        };
        assert_eq!(
            event_of(&volumes, &removed),
            Some(VolumeEvent::Claims {
                volume: "v1".into(),
                set: pb::ClaimSet::new()
            })
        );
    }
}
