//! The registry in a cluster: this host's registrations kept in etcd, the
//! other hosts' watched, by a thread of its own (`service-sync`) so that
//! the loop never waits on etcd.
//!
//! Each registration is a key `<prefix>services/<node>/<id>` whose value
//! is its JSON (Nomad's field names), put with the node's lease: when a
//! host is lost, its lease expires and its services are gone from every
//! host's registry with it. The loop hands the thread this host's
//! registrations and lease whenever either changes ([`ServiceSync::set`]);
//! the thread puts what is new or changed, deletes what is gone (at start,
//! also what an earlier process of this node left), and watches the
//! services prefix, sending the other hosts' registrations back whole
//! ([`ServiceSync::others`]) after each change. An etcd that cannot be
//! reached is tried again with backoff; the last state handed over is
//! what it writes when it can.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};

use super::{Registration, MAX_SERVICES};
use crate::cluster::etcd::{Error, Etcd, Event, Kv};
use json::Value;

/// The backoff between attempts while etcd cannot be reached.
const RETRY: Duration = Duration::from_secs(1);

/// What the loop hands the thread: this host's registrations by ID and
/// the node's lease (0 before it has one).
type Wanted = (BTreeMap<String, Registration>, i64);

/// The thread; dropping it stops and joins it.
pub struct ServiceSync {
    wanted: Sender<Wanted>,
    others: Receiver<BTreeMap<String, Registration>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ServiceSync {
    /// Starts the thread for node `node` under the cluster's `prefix`.
    pub fn start(etcd: Arc<Etcd>, prefix: &str, node: &str) -> std::io::Result<ServiceSync> {
        let (wanted_tx, wanted) = unbounded();
        let (others_tx, others) = unbounded();
        let (stop_tx, stop) = bounded(0);
        let root = format!("{prefix}services/");
        let own = format!("{root}{node}/");
        let thread = thread::Builder::new()
            .name("service-sync".into())
            .spawn(move || {
                Syncer {
                    etcd,
                    root,
                    own,
                    written: None,
                }
                .run(&wanted, &others_tx, &stop)
            })?;
        Ok(ServiceSync {
            wanted: wanted_tx,
            others,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Hands over this host's registrations and the node's lease.
    pub fn set(&self, local: BTreeMap<String, Registration>, lease: i64) {
        let _ = self.wanted.send((local, lease));
    }

    /// The other hosts' registrations, whole, after each change.
    pub fn others(&self) -> &Receiver<BTreeMap<String, Registration>> {
        &self.others
    }
}

impl Drop for ServiceSync {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Syncer {
    etcd: Arc<Etcd>,
    root: String,
    own: String,
    /// What etcd holds of this node's (by key: value, lease), once read.
    written: Option<BTreeMap<String, (Vec<u8>, i64)>>,
}

impl Syncer {
    fn run(
        mut self,
        wanted: &Receiver<Wanted>,
        others: &Sender<BTreeMap<String, Registration>>,
        stop: &Receiver<()>,
    ) {
        let mut want: Wanted = (BTreeMap::new(), 0);
        loop {
            // Read every host's, then watch from there on.
            let (kvs, revision) = match self.etcd.get_prefix(self.root.as_bytes()) {
                Ok(read) => read,
                Err(err) => {
                    log::warn!("Services: cannot read the cluster's services: {err}");
                    if !self.wait(RETRY, wanted, &mut want, stop) {
                        return;
                    }
                    continue;
                }
            };
            let mut seen: BTreeMap<Vec<u8>, Registration> = BTreeMap::new();
            let mut mine = BTreeMap::new();
            for kv in kvs {
                self.take(kv, &mut seen, &mut mine);
            }
            self.written = Some(mine);
            let _ = others.send(self.others_of(&seen));
            let watch = match self.etcd.watch_prefix(self.root.as_bytes(), revision + 1) {
                Ok(watch) => watch,
                Err(err) => {
                    log::warn!("Services: cannot watch the cluster's services: {err}");
                    continue;
                }
            };
            loop {
                if let Err(err) = self.write(&want) {
                    log::warn!("Services: cannot register this host's services: {err}");
                    if !self.wait(RETRY, wanted, &mut want, stop) {
                        return;
                    }
                    continue;
                }
                select! {
                    recv(stop) -> _ => return,
                    recv(wanted) -> w => match w {
                        Ok(w) => want = w,
                        Err(_) => return,
                    },
                    recv(watch.receiver()) -> batch => match batch {
                        Ok(Ok(batch)) => {
                            for event in batch.events {
                                match event {
                                    Event::Put(kv) => {
                                        let mut mine = self.written.take().unwrap_or_default();
                                        self.take(kv, &mut seen, &mut mine);
                                        self.written = Some(mine);
                                    }
                                    Event::Delete { key, .. } => {
                                        seen.remove(&key);
                                        if let Some(mine) = &mut self.written {
                                            mine.remove(&String::from_utf8_lossy(&key).into_owned());
                                        }
                                    }
                                }
                            }
                            let _ = others.send(self.others_of(&seen));
                        }
                        _ => break, // read again and watch anew
                    },
                }
            }
        }
    }

    /// Takes in a key read or watched: this node's go to `mine`, the
    /// others' to `seen` (up to [`MAX_SERVICES`]).
    fn take(
        &self,
        kv: Kv,
        seen: &mut BTreeMap<Vec<u8>, Registration>,
        mine: &mut BTreeMap<String, (Vec<u8>, i64)>,
    ) {
        if kv.key.starts_with(self.own.as_bytes()) {
            mine.insert(
                String::from_utf8_lossy(&kv.key).into_owned(),
                (kv.value, kv.lease),
            );
            return;
        }
        if seen.len() >= MAX_SERVICES && !seen.contains_key(&kv.key) {
            return;
        }
        let parsed = std::str::from_utf8(&kv.value)
            .ok()
            .and_then(|text| json::parse(text).ok())
            .and_then(|value| from_json(&value));
        match parsed {
            Some(r) => {
                seen.insert(kv.key, r);
            }
            None => log::debug!(
                "Services: {} is not a registration",
                String::from_utf8_lossy(&kv.key)
            ),
        }
    }

    fn others_of(&self, seen: &BTreeMap<Vec<u8>, Registration>) -> BTreeMap<String, Registration> {
        order::map(seen.values().map(|r| (r.id.clone(), r.clone())))
    }

    /// Puts what `want` has that etcd does not (or with another lease),
    /// deletes what it no longer has.
    fn write(&mut self, (local, lease): &Wanted) -> Result<(), Error> {
        let Some(written) = &mut self.written else {
            return Ok(());
        };
        if *lease == 0 {
            return Ok(());
        }
        let wanted: BTreeMap<String, Vec<u8>> = order::map(local.values().map(|r| {
            (
                format!("{}{}", self.own, r.id),
                json::to_string(&to_json(r)).into_bytes(),
            )
        }));
        let gone: Vec<String> = written
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            self.etcd.delete(key.as_bytes())?;
            written.remove(&key);
        }
        for (key, value) in wanted {
            if written.get(&key) == Some(&(value.clone(), *lease)) {
                continue;
            }
            self.etcd.put(key.as_bytes(), &value, *lease)?;
            written.insert(key, (value, *lease));
        }
        Ok(())
    }

    /// Waits `delay`, taking in what the loop hands over meanwhile: false
    /// when the thread must stop.
    fn wait(
        &self,
        delay: Duration,
        wanted: &Receiver<Wanted>,
        want: &mut Wanted,
        stop: &Receiver<()>,
    ) -> bool {
        let until = crossbeam_channel::after(delay);
        loop {
            select! {
                recv(stop) -> _ => return false,
                recv(wanted) -> w => match w {
                    Ok(w) => *want = w,
                    Err(_) => return false,
                },
                recv(until) -> _ => return true,
            }
        }
    }
}

/// A registration as JSON, with Nomad's field names (`Task` and `Meta`
/// are csi-agent's).
pub fn to_json(r: &Registration) -> Value {
    let text = |s: &str| Value::String(s.to_string());
    Value::object([
        ("ID", text(&r.id)),
        ("ServiceName", text(&r.name)),
        ("Namespace", text(&r.namespace)),
        ("NodeID", text(&r.node_id)),
        ("Datacenter", text(&r.datacenter)),
        ("JobID", text(&r.job_id)),
        ("AllocID", text(&r.alloc_id)),
        ("Task", text(&r.task)),
        ("Tags", Value::strings(&r.tags)),
        ("Address", text(&r.address)),
        ("Port", Value::Number(r.port.to_string())),
        (
            "Meta",
            Value::object(r.meta.iter().map(|(k, v)| (k.clone(), text(v)))),
        ),
    ])
}

/// The registration `value` holds, if it is one.
pub fn from_json(value: &Value) -> Option<Registration> {
    let text = |key: &str| value.get(key)?.as_str().map(str::to_string);
    Some(Registration {
        id: text("ID")?,
        name: text("ServiceName")?,
        namespace: text("Namespace")?,
        node_id: text("NodeID")?,
        datacenter: text("Datacenter")?,
        job_id: text("JobID")?,
        alloc_id: text("AllocID")?,
        task: text("Task").unwrap_or_default(),
        address: text("Address")?,
        port: u16::try_from(value.get("Port")?.as_u64()?).ok()?,
        tags: value
            .get("Tags")?
            .as_array()?
            .iter()
            .map(|t| t.as_str().map(str::to_string))
            .collect::<Option<_>>()?,
        meta: match value.get("Meta").and_then(Value::as_object) {
            Some(members) => order::map(
                members
                    .iter()
                    .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect::<Option<Vec<_>>>()?,
            ),
            None => BTreeMap::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_survives_its_json() {
        let mut r = crate::services::tests::registration("_nomad-task-a-group-g-nfs-nfs", "nfs");
        r.tags = vec!["a".into()];
        r.meta = BTreeMap::from([("k".into(), "v".into())]);
        let text = json::to_string(&to_json(&r));
        assert_eq!(from_json(&json::parse(&text).unwrap()), Some(r));
        assert_eq!(from_json(&json::parse("{\"ID\":1}").unwrap()), None);
    }
}
