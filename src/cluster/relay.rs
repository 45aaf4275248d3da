//! Controller calls relayed through etcd: a host without a controller of
//! a plugin writes the call, encoded as on the wire, to
//! `<prefix>/calls/<plugin>/<node>/<id>` ([`pb::RelayedCall`]); the
//! plugin's controller leader ([`super::leader`]) watches the plugin's
//! calls, makes each with its controller and writes the answer into the
//! same record; the caller waits for it with a watch and removes the
//! record.
//!
//! [`EtcdRelay`] is the caller's side, a [`Carrier`] of encoded calls:
//! a [`crate::csi::Controller`] carried by it makes the host's controller
//! calls with the leader's controller, and reads the answers and
//! classifies failures exactly as if its own controller had answered.
//! [`serve`] is the leader's side. ControllerPublish and
//! ControllerUnpublish are not relayed: an attachment is a record of its
//! own ([`super::attachments`]), which the fencer of lost nodes reads too.
//!
//! - The record lives on a lease of the call's own, granted for the call's
//!   deadline and a margin, and revoked when the caller has its answer:
//!   a caller that dies waiting leaves nothing behind.
//! - The leader's answer compares the record's revision, so it never
//!   writes a record the caller has given up (and removed) back.
//! - Without a leader (or etcd) nothing is sent, and the caller hears
//!   FAILED_PRECONDITION: the controller made nothing, and the call may be
//!   tried again later. Once the record may have been written, an answer
//!   that does not come leaves the outcome unknown (DEADLINE_EXCEEDED), as
//!   a controller that does not answer would: the volume manager then does
//!   what the CSI error table says, as for its own controller (a
//!   CreateVolume is sent again, with the same name).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::select;
use grpcio::{RpcStatus, RpcStatusCode};

use super::election;
use super::etcd::{self, Condition, Etcd, Event, Kv};
use crate::csi::{Carrier, Controller, Rpc};
use crate::proto::cluster as pb;

/// What etcd may take besides the controller's own time: the record's
/// writes and the watch that brings the answer.
const MARGIN: Duration = Duration::from_secs(5);

/// How long a call waits for a leader when the election has none.
const WAIT_FOR_LEADER: Duration = Duration::from_secs(3);

/// Whether `rpc` is one the controller leader makes for other hosts.
pub fn relayable(rpc: Rpc) -> bool {
    matches!(
        rpc,
        Rpc::ControllerGetCapabilities
            | Rpc::CreateVolume
            | Rpc::DeleteVolume
            | Rpc::ValidateVolumeCapabilities
            | Rpc::ListVolumes
            | Rpc::GetCapacity
            | Rpc::ControllerExpandVolume
            | Rpc::ControllerGetVolume
            | Rpc::CreateSnapshot
            | Rpc::DeleteSnapshot
            | Rpc::ListSnapshots
    )
}

/// The RPC named `name` ([`Rpc::name`]), if it is relayed.
pub fn relayable_named(name: &str) -> Option<Rpc> {
    Rpc::ALL
        .into_iter()
        .find(|rpc| rpc.name() == name)
        .filter(|rpc| relayable(*rpc))
}

/// What `send` answers when `rpc` is relayed; refused before anything is
/// sent when it is not.
fn relayed_only(
    rpc: Rpc,
    send: impl FnOnce() -> Result<Vec<u8>, RpcStatus>,
) -> Result<Vec<u8>, RpcStatus> {
    if !relayable(rpc) {
        let why = format!("{rpc} is not relayed to a controller leader");
        return Err(RpcStatus::with_message(
            RpcStatusCode::INVALID_ARGUMENT,
            why,
        ));
    }
    send()
}

/// The prefix of `plugin`'s relayed calls.
pub fn calls_prefix(prefix: &str, plugin: &str) -> String {
    format!("{}/calls/{plugin}/", prefix.trim_end_matches('/'))
}

/// A relay of one plugin's controller calls to its leader, for node
/// `node`.
pub struct EtcdRelay {
    etcd: Arc<Etcd>,
    prefix: String,
    node: String,
    plugin: String,
}

impl EtcdRelay {
    pub fn new(etcd: Arc<Etcd>, prefix: &str, node: &str, plugin: &str) -> EtcdRelay {
        EtcdRelay {
            etcd,
            prefix: prefix.to_string(),
            node: node.to_string(),
            plugin: plugin.to_string(),
        }
    }

    /// The node leading the plugin's controller: the one the election
    /// names, or the first to win it within [`WAIT_FOR_LEADER`] (a
    /// controller that has just turned healthy is about to campaign).
    fn leader(&self) -> Result<String, RpcStatus> {
        let cannot = |err: etcd::Error| {
            not_sent(format!(
                "cannot read the controller election from etcd: {}",
                chain(&err)
            ))
        };
        let key = election::election_key(&self.prefix, &self.plugin);
        let (kvs, revision) = self.etcd.get_prefix(&key).map_err(cannot)?;
        let named = |kv: &Kv| (kv.key == key).then(|| election::leader_of(&kv.value).node);
        if let Some(leader) = kvs.iter().find_map(named) {
            return Ok(leader);
        }
        let watch = self.etcd.watch_prefix(&key, revision + 1).map_err(cannot)?;
        let deadline = Instant::now() + WAIT_FOR_LEADER;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let batch = match watch.next(left) {
                Ok(batch) => batch,
                Err(etcd::Error::Timeout) => {
                    return Err(not_sent(format!(
                        "no controller of plugin {:?} runs in the cluster: none led its election within {WAIT_FOR_LEADER:?}",
                        self.plugin
                    )))
                }
                Err(err) => return Err(cannot(err)),
            };
            if let Some(leader) = batch.puts().iter().find_map(named) {
                return Ok(leader);
            }
        }
    }

    /// A key no other call of this node has had, in this run or before.
    fn new_key(&self) -> Vec<u8> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let id = format!(
            "{:020}-{:06}",
            since_epoch.as_nanos(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        format!(
            "{}{}/{id}",
            calls_prefix(&self.prefix, &self.plugin),
            self.node
        )
        .into_bytes()
    }

    /// Writes the call on `lease` and waits for its answer.
    fn send(
        &self,
        leader: &str,
        rpc: Rpc,
        request: Vec<u8>,
        timeout: Duration,
        lease: i64,
    ) -> Result<Vec<u8>, RpcStatus> {
        let record = pb::RelayedCall {
            rpc: rpc.name().to_string(),
            request,
            timeout_ms: timeout.as_millis() as u64,
            ..Default::default()
        };
        let key = self.new_key();
        let value = crate::message::encode(&record).expect("encoding a call cannot fail");
        // From here on the leader may be making the call: no answer means
        // an unknown outcome.
        let unknown = |why: String| {
            RpcStatus::with_message(
                RpcStatusCode::DEADLINE_EXCEEDED,
                format!(
                    "the controller leader of plugin {:?} (node {leader}) did not answer {rpc}: {why}",
                    self.plugin
                ),
            )
        };
        // The watches start before the call is written, in step with etcd:
        // one that starts in etcd's past waits for its sync loop (every
        // 100 ms) for every event.
        let watch = |key: &[u8]| {
            self.etcd
                .watch_prefix(key, 0)
                .map_err(|err| not_sent(chain(&err)))
        };
        let election = election::election_key(&self.prefix, &self.plugin);
        let (answers, leaders) = (watch(&key)?, watch(&election)?);
        self.etcd
            .put(&key, &value, lease)
            .map_err(|err| unknown(format!("writing the call to etcd failed: {}", chain(&err))))?;
        let deadline = Instant::now() + timeout + MARGIN;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let batch = select! {
                recv(answers.receiver()) -> batch => batch,
                recv(leaders.receiver()) -> batch => batch,
                default(left) => {
                    return Err(unknown(format!("no answer within {:?}", timeout + MARGIN)));
                }
            };
            let batch = match batch {
                Ok(Ok(batch)) => batch,
                Ok(Err(err)) => return Err(unknown(chain(&err))),
                Err(_) => return Err(unknown("the watch ended".into())),
            };
            for event in batch.events {
                match event {
                    Event::Put(kv) if kv.key == key => {
                        let Ok(call) = crate::message::decode::<pb::RelayedCall>(&kv.value) else {
                            return Err(unknown("its record is unreadable".into()));
                        };
                        if call.answered {
                            return answer_of(call);
                        }
                    }
                    Event::Delete { key: gone, .. } if gone == key => {
                        return Err(unknown("the call's record expired".into()));
                    }
                    // A leader that leaves may or may not have made the
                    // call; its successor would serve the record again,
                    // but none may come: the caller's backoff decides.
                    Event::Delete { key: gone, .. } if gone == election => {
                        return Err(unknown("the leader left before it answered".into()));
                    }
                    _ => {}
                }
            }
        }
    }

    /// Relays `rpc` to the leader and waits for its answer.
    fn relay(&self, rpc: Rpc, request: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, RpcStatus> {
        let leader = self.leader()?;
        let (lease, _) = self.etcd.grant(timeout + 2 * MARGIN).map_err(|err| {
            not_sent(format!(
                "cannot grant the call a lease in etcd: {}",
                chain(&err)
            ))
        })?;
        log::debug!(
            "Cluster: relaying {rpc} of plugin {} to its controller leader, node {leader}",
            self.plugin
        );
        let answer = self.send(&leader, rpc, request, timeout, lease);
        // Removes the record; its lease's TTL does, if etcd is out of reach.
        if let Err(err) = self.etcd.revoke(lease) {
            log::debug!(
                "Cluster: cannot revoke a relayed call's lease: {}",
                chain(&err)
            );
        }
        answer
    }
}

impl Carrier for EtcdRelay {
    fn answerer(&self) -> &str {
        "the controller leader"
    }

    fn carry(&self, rpc: Rpc, request: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, RpcStatus> {
        let answer = relayed_only(rpc, || self.relay(rpc, request, timeout));
        let outcome = if answer.is_ok() { "ok" } else { "error" };
        crate::metrics::RELAYED_CALLS.inc(&["sent", outcome]);
        answer
    }
}

/// A call that was not sent: the controller made nothing.
fn not_sent(message: String) -> RpcStatus {
    RpcStatus::with_message(RpcStatusCode::FAILED_PRECONDITION, message)
}

fn chain(err: &etcd::Error) -> String {
    crate::error_chain(err)
}

/// The leader's answer in `call`.
fn answer_of(call: pb::RelayedCall) -> Result<Vec<u8>, RpcStatus> {
    if call.code == 0 {
        Ok(call.response)
    } else {
        Err(RpcStatus::with_message(call.code, call.message))
    }
}

/// How many relayed calls a leader makes at once. One more is answered
/// ABORTED at once, which CSI calls "an operation is pending" and which
/// the caller's volume manager retries with backoff, as it would for its
/// own controller.
pub const MAX_RELAYED: usize = 16;

/// The leader's side of the relay: the calls being made, each on a
/// `relayed-call` thread that this owns. A thread that ended is joined when
/// the next call starts; [`Server::take_threads`] hands those still running
/// to whoever stops the leader (the agent keeps them with its errands and
/// waits for them at shutdown). Each ends by its call's deadline: the
/// controller's gRPC deadline is the caller's timeout, and the answer is one
/// etcd write within the client's timeout.
pub struct Server {
    /// The keys of the calls being made: a call is made once even when a
    /// new watch reports it again.
    in_flight: Mutex<HashSet<Vec<u8>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// At most this many calls run at once: [`MAX_RELAYED`].
    limit: usize,
}

/// Whether a call may start on a thread of its own.
#[derive(Debug, PartialEq, Eq)]
enum Admit {
    /// Its key is now in flight: [`Server::spawn`] it.
    Go,
    /// A thread makes it already.
    InFlight,
    /// [`Server::limit`] calls are being made.
    Busy,
}

impl Default for Server {
    fn default() -> Server {
        Server::with_limit(MAX_RELAYED)
    }
}

impl Server {
    fn with_limit(limit: usize) -> Server {
        Server {
            in_flight: Mutex::default(),
            threads: Mutex::default(),
            limit,
        }
    }

    /// The threads of the calls being made (ended ones are joined first).
    pub fn running(&self) -> usize {
        let mut threads = lock(&self.threads);
        join_ended(&mut threads);
        threads.len()
    }

    /// Joins the threads that ended and hands over those still running:
    /// the leader has stopped, and the caller owns them now.
    pub fn take_threads(&self) -> Vec<JoinHandle<()>> {
        let mut threads = lock(&self.threads);
        join_ended(&mut threads);
        std::mem::take(&mut *threads)
    }

    /// Whether the call at `key` may start; [`Admit::Go`] marks it in
    /// flight. Only the leader's thread admits calls, so a `Go` is not
    /// raced by another admission before its [`Server::spawn`].
    fn admit(&self, key: &[u8]) -> Admit {
        let mut threads = lock(&self.threads);
        join_ended(&mut threads);
        let mut in_flight = lock(&self.in_flight);
        if in_flight.contains(key) {
            Admit::InFlight
        } else if threads.len() >= self.limit {
            Admit::Busy
        } else {
            in_flight.insert(key.to_vec());
            Admit::Go
        }
    }

    /// Runs `work` for the admitted call at `key` on a thread this owns;
    /// the key leaves the calls in flight when it is done, or at once if
    /// no thread could start (the call is served again from the next
    /// watch or read).
    fn spawn(
        self: &Arc<Self>,
        key: Vec<u8>,
        work: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let server = self.clone();
        let done = key.clone();
        let spawned = thread::Builder::new()
            .name("relayed-call".into())
            .spawn(move || {
                work();
                lock(&server.in_flight).remove(&done);
            });
        match spawned {
            Ok(thread) => {
                lock(&self.threads).push(thread);
                Ok(())
            }
            Err(err) => {
                lock(&self.in_flight).remove(&key);
                Err(err)
            }
        }
    }
}

/// `mutex`'s value, also after a thread panicked holding it: the sets it
/// guards are whole after every change.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Joins the threads of `threads` that ended.
fn join_ended(threads: &mut Vec<JoinHandle<()>>) {
    let (ended, running) = std::mem::take(threads)
        .into_iter()
        .partition::<Vec<_>, _>(JoinHandle::is_finished);
    *threads = running;
    for thread in ended {
        if thread.join().is_err() {
            log::error!("Cluster: a relayed-call thread panicked");
        }
    }
}

/// One call waiting for the leader.
pub struct Pending {
    kv: Kv,
    call: pb::RelayedCall,
}

/// The calls in `kvs` (a read or a watch's puts) not answered yet.
pub fn pending(kvs: Vec<Kv>) -> Vec<Pending> {
    kvs.into_iter()
        .filter_map(|kv| {
            let call = crate::message::decode::<pb::RelayedCall>(&kv.value).ok()?;
            (!call.answered).then_some(Pending { kv, call })
        })
        .collect()
}

/// The leader's side: makes `pending` with `controller` on a thread of
/// `server`'s and writes the answer into its record, unless the caller
/// gave it up meanwhile. A call already being made is left to its thread;
/// one beyond [`MAX_RELAYED`] is answered ABORTED at once, and the caller
/// tries again.
pub fn serve(
    etcd: &Arc<Etcd>,
    leader: &str,
    controller: &Controller,
    pending: Pending,
    server: &Arc<Server>,
    guard: &Condition,
) {
    let Pending { kv, call } = pending;
    match server.admit(&kv.key) {
        Admit::Go => {}
        Admit::InFlight => return,
        Admit::Busy => {
            log::warn!(
                "Cluster: refusing a relayed {}: {} relayed calls are being made already",
                call.rpc,
                server.limit
            );
            let busy = RpcStatus::with_message(
                RpcStatusCode::ABORTED,
                format!(
                    "the controller leader (node {leader}) is making {} relayed calls already; try again later",
                    server.limit
                ),
            );
            write_answer(etcd, leader, &kv, call, Err(busy), guard);
            return;
        }
    }
    let key = kv.key.clone();
    let (etcd, leader) = (etcd.clone(), leader.to_string());
    let guard = guard.clone();
    let timeout = Duration::from_millis(call.timeout_ms).max(Duration::from_secs(1));
    let controller = controller.clone();
    let spawned = server.spawn(key, move || {
        let answer = make(&controller, &call, timeout);
        write_answer(&etcd, &leader, &kv, call, answer, &guard);
    });
    if let Err(err) = spawned {
        log::error!("Cluster: cannot start a thread for a relayed call: {err}");
    }
}

/// Makes `call` with the leader's controller, within `timeout`.
fn make(
    controller: &Controller,
    call: &pb::RelayedCall,
    timeout: Duration,
) -> Result<Vec<u8>, RpcStatus> {
    let Some(rpc) = relayable_named(&call.rpc) else {
        return Err(RpcStatus::with_message(
            RpcStatusCode::INVALID_ARGUMENT,
            format!(
                "{:?} is not a call a controller leader makes for others",
                call.rpc
            ),
        ));
    };
    log::info!("Cluster: making {rpc} for another host (relayed)");
    controller.serve_encoded(rpc, &call.request, timeout)
}

fn write_answer(
    etcd: &Etcd,
    leader: &str,
    kv: &Kv,
    call: pb::RelayedCall,
    answer: Result<Vec<u8>, RpcStatus>,
    guard: &Condition,
) {
    let outcome = if answer.is_ok() { "ok" } else { "error" };
    crate::metrics::RELAYED_CALLS.inc(&["served", outcome]);
    let (response, code, message) = match answer {
        Ok(response) => (response, 0, String::new()),
        Err(status) => (
            Vec::new(),
            i32::from(status.code()),
            status.message().to_string(),
        ),
    };
    let record = pb::RelayedCall {
        answered: true,
        response,
        code,
        message,
        served_by: leader.to_string(),
        // The request may hold secrets: the answer does not repeat them.
        request: Vec::new(),
        ..call
    };
    let value = crate::message::encode(&record).expect("encoding a call cannot fail");
    match etcd.put_guarded(
        &kv.key,
        kv.mod_revision,
        &value,
        kv.lease,
        std::slice::from_ref(guard),
    ) {
        Ok(Some(_)) => {}
        Ok(None) => log::debug!(
            "Cluster: the caller of a relayed {} gave it up before the answer, or this node no longer leads",
            record.rpc
        ),
        Err(err) => log::warn!(
            "Cluster: cannot write the answer of a relayed {}: {}",
            record.rpc,
            chain(&err)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_and_node_calls_are_never_relayed() {
        for rpc in [
            Rpc::ControllerPublishVolume,
            Rpc::ControllerUnpublishVolume,
            Rpc::NodeStageVolume,
            Rpc::Probe,
        ] {
            assert!(!relayable(rpc), "{rpc}");
            assert_eq!(relayable_named(rpc.name()), None);
        }
        let result = relayed_only(Rpc::ControllerPublishVolume, || panic!("sent"));
        assert!(result.is_err());
        assert_eq!(relayable_named("CreateVolume"), Some(Rpc::CreateVolume));
        assert_eq!(relayable_named("NoSuchCall"), None);
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_call_is_made_once_and_no_more_than_the_limit_run_at_once() {
        let server = Arc::new(Server::with_limit(2));
        let (release, released) = crossbeam_channel::unbounded::<()>();
        for key in [b"a", b"b"] {
            assert_eq!(server.admit(key), Admit::Go);
            let released = released.clone();
            server
                .spawn(key.to_vec(), move || {
                    let _ = released.recv();
                })
                .unwrap();
        }
        assert_eq!(server.admit(b"a"), Admit::InFlight);
        assert_eq!(server.admit(b"c"), Admit::Busy);
        assert_eq!(server.running(), 2);
        // A call that ended is joined, and makes room for the next.
        release.send(()).unwrap();
        wait_until("one call ended", || server.running() == 1);
        assert_eq!(server.admit(b"c"), Admit::Go);
        drop(release);
        wait_until("every call ended", || server.running() == 0);
        assert_eq!(server.admit(b"a"), Admit::Go);
    }

    #[test]
    fn a_stopped_server_hands_over_the_threads_still_running() {
        let server = Arc::new(Server::default());
        let (release, released) = crossbeam_channel::bounded::<()>(0);
        assert_eq!(server.admit(b"slow"), Admit::Go);
        server
            .spawn(b"slow".to_vec(), move || {
                let _ = released.recv();
            })
            .unwrap();
        let threads = server.take_threads();
        assert_eq!(threads.len(), 1);
        assert_eq!(threads[0].thread().name(), Some("relayed-call"));
        assert_eq!(server.running(), 0);
        drop(release);
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(lock(&server.in_flight).is_empty());
    }
}
