//! Fencing lost nodes, against real etcd: the fencer waits a lease TTL
//! after a node's key is gone, then has the controller leader detach what
//! a controller attached before it frees the claims; claims no controller
//! attached are freed when they cannot write, and a writer's stays until
//! an operator's `volume detach -force`, which is refused while the node
//! lives. A writer whose node promised to stop it is freed once that
//! promise has run out, never before, and never once the node is back.
//! A node back within the TTL is not fenced.
//!
//! The controller leader here is a stand-in thread that answers every
//! detach intent; the agents' own leader and fencer are exercised in
//! `cluster_netns.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::cluster::attachments::{self, Outcome};
use csi_agent::cluster::claims::{self, ClaimRequest, ClaimSets, Promise};
use csi_agent::cluster::etcd::{Condition, Etcd, Event};
use csi_agent::cluster::fence::{self, Fenced, Fencer};
use csi_agent::cluster::node::node_key;
use csi_agent::csi::AccessMode;
use csi_agent::proto::cluster as pb;

use crate::etcd::{require_etcd, Cluster};

const PREFIX: &str = "/csi-agent";

fn admit(etcd: &Etcd, volume: &str, node: &str, alloc: &str, read_only: bool, mode: AccessMode) {
    let req = ClaimRequest {
        node: node.into(),
        alloc_id: alloc.into(),
        read_only,
        access_mode: mode,
        promise: None,
    };
    ClaimSets::new(etcd, PREFIX).admit(volume, &req).unwrap();
}

fn claims(etcd: &Etcd, volume: &str) -> Vec<pb::ClusterClaim> {
    ClaimSets::new(etcd, PREFIX).read(volume).unwrap().0.claims
}

/// Puts `volume`'s attachment to `node` as a controller leader left it.
fn attached(etcd: &Etcd, volume: &str, node: &str) {
    use protobuf::Message;
    let record = pb::Attachment {
        state: pb::attachment::State::ATTACHED.into(),
        plugin_node_id: format!("id-{node}"),
        ..Default::default()
    };
    let key = attachments::attachment_key(PREFIX, volume, node);
    etcd.put(&key, &record.write_to_bytes().unwrap(), 0)
        .unwrap();
}

/// A stand-in controller leader: answers each detach intent `Detached`
/// (noting the plugin node IDs it detached) until `stop`.
fn leader(etcd: Etcd, stop: Arc<AtomicBool>) -> thread::JoinHandle<Vec<String>> {
    thread::spawn(move || {
        let prefix = attachments::attachments_prefix(PREFIX);
        let (_, revision) = etcd.get_prefix(prefix.as_bytes()).unwrap();
        let watch = etcd.watch_prefix(prefix.as_bytes(), revision + 1).unwrap();
        let mut detached = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let Ok(batch) = watch.next(Duration::from_millis(200)) else {
                continue;
            };
            let puts = batch.puts();
            for intent in attachments::pending(PREFIX, &puts) {
                if intent.attach {
                    continue;
                }
                attachments::answer(&etcd, PREFIX, "leader", &intent, &Outcome::Detached, &[])
                    .unwrap();
                detached.push(intent.plugin_node_id.clone());
            }
        }
        detached
    })
}

/// Every event under the prefix after revision `start`, in order.
fn history(etcd: &Etcd, start: i64) -> Vec<Event> {
    let watch = etcd.watch_prefix(PREFIX.as_bytes(), start + 1).unwrap();
    let mut events = Vec::new();
    while let Ok(batch) = watch.next(Duration::from_secs(1)) {
        events.extend(batch.events);
    }
    events
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn claims_no_controller_attached_are_freed_when_harmless_and_writers_wait_for_an_operator() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    let wait = Duration::from_secs(2);
    admit(
        &etcd,
        "readers",
        "a",
        "r1",
        true,
        AccessMode::MultiNodeReaderOnly,
    );
    admit(
        &etcd,
        "shared",
        "a",
        "w1",
        false,
        AccessMode::MultiNodeMultiWriter,
    );
    admit(
        &etcd,
        "single",
        "a",
        "w2",
        false,
        AccessMode::SingleNodeWriter,
    );
    admit(
        &etcd,
        "single",
        "a",
        "r2",
        true,
        AccessMode::SingleNodeWriter,
    );

    let lost = fence::Lost {
        node: "a",
        gone_since: Some(Instant::now()),
        guard: Vec::new(),
    };
    let fenced = |volume: &str| fence::fence(&etcd, PREFIX, volume, &lost, wait).unwrap();
    assert_eq!(fenced("readers"), Fenced::Freed);
    assert_eq!(fenced("shared"), Fenced::Freed);
    assert!(claims(&etcd, "readers").is_empty());
    assert!(claims(&etcd, "shared").is_empty());
    // The writer stays, past, saying what frees it; the reader beside it
    // is freed.
    assert_eq!(fenced("single"), Fenced::Operator);
    let left = claims(&etcd, "single");
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].alloc_id, "w2");
    assert!(!left[0].wanted);
    assert!(
        left[0]
            .reason
            .contains("node lost: no controller can detach it; `csi-agent volume detach -force -node a single`"),
        "{}",
        left[0].reason
    );
    let req = ClaimRequest {
        node: "b".into(),
        alloc_id: "w3".into(),
        read_only: false,
        access_mode: AccessMode::SingleNodeWriter,
        promise: None,
    };
    let sets = ClaimSets::new(&etcd, PREFIX);
    assert!(sets.admit("single", &req).is_err());

    // The operator's detach is refused while the node lives...
    let (lease, _) = etcd.grant(Duration::from_secs(30)).unwrap();
    etcd.put(&node_key(PREFIX, "a"), b"{}", lease).unwrap();
    let err = fence::detach(&etcd, PREFIX, "single", "a").unwrap_err();
    assert!(
        err.to_string().contains("node a is alive in the cluster"),
        "{err}"
    );
    // ...and frees the claim once it is gone.
    etcd.revoke(lease).unwrap();
    assert_eq!(
        fence::detach(&etcd, PREFIX, "single", "a").unwrap(),
        Fenced::Freed
    );
    assert!(claims(&etcd, "single").is_empty());
    sets.admit("single", &req).unwrap();
}

#[test]
fn the_fencer_has_a_lost_node_detached_before_it_frees_its_claims_and_spares_a_node_that_came_back()
{
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    let ttl = Duration::from_secs(2);
    // Node a will be lost; node c leaves and comes back within the TTL.
    let (lease_a, _) = etcd.grant(ttl).unwrap();
    etcd.put(&node_key(PREFIX, "a"), b"a", lease_a).unwrap();
    let (lease_c, _) = etcd.grant(Duration::from_secs(30)).unwrap();
    etcd.put(&node_key(PREFIX, "c"), b"c", lease_c).unwrap();
    admit(&etcd, "vol", "a", "w1", false, AccessMode::SingleNodeWriter);
    attached(&etcd, "vol", "a");
    admit(
        &etcd,
        "other",
        "c",
        "w2",
        false,
        AccessMode::SingleNodeWriter,
    );

    let (_, start) = etcd.get_prefix(PREFIX.as_bytes()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let leader = leader(cluster.client(), stop.clone());
    let fencer = Fencer::start(Arc::new(cluster.client()), PREFIX, "fencer-node", ttl).unwrap();

    // Node c goes and comes back at once: not fenced.
    etcd.revoke(lease_c).unwrap();
    let (lease_c, _) = etcd.grant(Duration::from_secs(30)).unwrap();
    etcd.put(&node_key(PREFIX, "c"), b"c", lease_c).unwrap();

    // Node a's lease runs out (nobody keeps it alive): a TTL later its
    // claim is fenced.
    wait_for(
        "node a's claim to be freed",
        Duration::from_secs(20),
        || claims(&etcd, "vol").is_empty(),
    );
    let key = attachments::attachment_key(PREFIX, "vol", "a");
    wait_for(
        "the attachment record to go",
        Duration::from_secs(5),
        || etcd.get(&key).unwrap().is_none(),
    );
    stop.store(true, Ordering::SeqCst);
    assert_eq!(leader.join().unwrap(), ["id-a"]);
    // In etcd's history: the claim went past ("node lost"), the leader
    // detached, then the claim was freed, then the record went.
    let history = history(&etcd, start);
    let claims_key = format!("{PREFIX}/volumes/vol/claims");
    let at = |what: &str, pick: &dyn Fn(&Event) -> bool| {
        history
            .iter()
            .position(pick)
            .unwrap_or_else(|| panic!("no {what} in {history:?}"))
    };
    let past = at("past claim", &|e| match e {
        Event::Put(kv) if kv.key == claims_key.as_bytes() => {
            let set = <pb::ClaimSet as protobuf::Message>::parse_from_bytes(&kv.value).unwrap();
            set.claims
                .iter()
                .any(|c| !c.wanted && c.reason.starts_with("node lost"))
        }
        _ => false,
    });
    let detached = at("detach", &|e| match e {
        Event::Put(kv) if kv.key == key => {
            let a = <pb::Attachment as protobuf::Message>::parse_from_bytes(&kv.value).unwrap();
            a.state.enum_value_or_default() == pb::attachment::State::DETACHED
        }
        _ => false,
    });
    let freed = at(
        "free",
        &|e| matches!(e, Event::Delete { key: k, .. } if k == claims_key.as_bytes()),
    );
    let gone = at(
        "record removal",
        &|e| matches!(e, Event::Delete { key: k, .. } if *k == key),
    );
    assert!(
        past < detached && detached < freed && freed < gone,
        "{history:?}"
    );
    // Node c's claim is untouched after a TTL and more.
    thread::sleep(ttl * 2);
    let c = claims(&etcd, "other");
    assert!(c[0].wanted, "{c:?}");
    drop(fencer);
}

#[test]
fn a_lost_writer_s_claim_is_freed_once_its_node_s_promise_has_run_out_and_not_if_it_is_back() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    let promise = Promise {
        stop_after: Duration::from_secs(1),
        budget: Duration::from_secs(3),
        lease_ttl: Duration::from_secs(2),
    };
    let req = ClaimRequest {
        node: "a".into(),
        alloc_id: "w".into(),
        read_only: false,
        access_mode: AccessMode::SingleNodeWriter,
        promise: Some(promise),
    };
    ClaimSets::new(&etcd, PREFIX).admit("p", &req).unwrap();
    let held = &claims(&etcd, "p")[0];
    assert_eq!(
        Promise::of(held),
        Some(promise),
        "the claim holds the promise"
    );
    let gone_since = Instant::now();
    let key = node_key(PREFIX, "a");
    let lost = fence::Lost {
        node: "a",
        gone_since: Some(gone_since),
        guard: vec![Condition::Absent(key.clone())],
    };
    let wait = Duration::from_secs(1);
    // Not yet: the claim is past, saying what it waits for, and held.
    let Fenced::Until(at) = fence::fence(&etcd, PREFIX, "p", &lost, wait).unwrap() else {
        panic!("a promise still running frees nothing");
    };
    assert_eq!(at - gone_since, promise.wait_after_expiry());
    let left = claims(&etcd, "p");
    assert_eq!(left.len(), 1);
    assert!(!left[0].wanted);
    assert!(left[0].reason.contains("promise"), "{}", left[0].reason);
    let other = ClaimRequest {
        node: "b".into(),
        alloc_id: "w2".into(),
        promise: None,
        ..req.clone()
    };
    assert!(ClaimSets::new(&etcd, PREFIX).admit("p", &other).is_err());
    // The node is back before the promise ran out: the guarded fence
    // fails and frees nothing.
    let (lease, _) = etcd.grant(Duration::from_secs(30)).unwrap();
    etcd.put(&key, b"{}", lease).unwrap();
    thread::sleep(at.saturating_duration_since(Instant::now()));
    assert!(matches!(
        fence::fence(&etcd, PREFIX, "p", &lost, wait),
        Err(claims::Error::Guard)
    ));
    assert_eq!(claims(&etcd, "p").len(), 1);
    // Gone again, and the promise run out: freed.
    etcd.revoke(lease).unwrap();
    assert_eq!(
        fence::fence(&etcd, PREFIX, "p", &lost, wait).unwrap(),
        Fenced::Freed
    );
    assert!(claims(&etcd, "p").is_empty());
    ClaimSets::new(&etcd, PREFIX).admit("p", &other).unwrap();
}
