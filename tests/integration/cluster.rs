//! The cluster's shared claims and node registrations, against real etcd:
//! a single-writer volume claimed from three hosts at once has exactly one
//! winner every round, readers of a reader-only volume all win, a released
//! claim still counts until freed, a node lives by its lease, its name is
//! unique, a node whose key is gone has no claim admitted, and a node cut
//! off from etcd is told so and registers again when etcd returns.
//!
//! "Hosts" here are threads with clients of their own; the agents in
//! network namespaces come with the agent's `cluster` block.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver};

use csi_agent::cluster::claims::{ClaimRequest, ClaimSets, Error};
use csi_agent::cluster::node::{self, NodeEvent, Registration};
use csi_agent::cluster::ops::{Answer, Op, Ops};
use csi_agent::csi::AccessMode;
use csi_agent::proto::cluster as pb;

use crate::etcd::{require_etcd, Cluster};

const PREFIX: &str = "/csi-agent";

fn request(node: &str, alloc: &str, read_only: bool, mode: AccessMode) -> ClaimRequest {
    ClaimRequest {
        node: node.into(),
        alloc_id: alloc.into(),
        read_only,
        access_mode: mode,
        promise: None,
    }
}

/// Three hosts claim volume `v<round>` at the same moment, `rounds` times:
/// which hosts won each round.
fn race(cluster: &Cluster, rounds: usize, read_only: bool, mode: AccessMode) -> Vec<Vec<String>> {
    let barrier = Arc::new(Barrier::new(3));
    let hosts: Vec<_> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|host| {
            let etcd = cluster.client();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let sets = ClaimSets::new(&etcd, PREFIX);
                let mut won = Vec::new();
                for round in 0..rounds {
                    barrier.wait();
                    let req = request(host, &format!("alloc-{host}"), read_only, mode);
                    match sets.admit(&format!("v{round}"), &req) {
                        Ok(()) => won.push(round),
                        Err(Error::Refused(_)) => {}
                        Err(err) => panic!("{host} round {round}: {err}"),
                    }
                }
                (host, won)
            })
        })
        .collect();
    let mut winners = vec![Vec::new(); rounds];
    for handle in hosts {
        let (host, won) = handle.join().unwrap();
        for round in won {
            winners[round].push(host.to_string());
        }
    }
    winners
}

#[test]
fn a_single_writer_volume_claimed_from_three_hosts_at_once_has_one_winner_every_round() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let winners = race(&cluster, 100, false, AccessMode::SingleNodeWriter);
    for (round, won) in winners.iter().enumerate() {
        assert_eq!(won.len(), 1, "round {round}: {won:?}");
    }
    // The set in etcd says the same: one claim, the winner's.
    let etcd = cluster.client();
    let sets = ClaimSets::new(&etcd, PREFIX);
    for (round, won) in winners.iter().enumerate() {
        let (set, _) = sets.read(&format!("v{round}")).unwrap();
        assert_eq!(set.claims.len(), 1);
        assert_eq!(set.claims[0].node, won[0]);
    }
}

#[test]
fn readers_of_a_multi_node_reader_volume_claimed_at_once_all_win() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let winners = race(&cluster, 30, true, AccessMode::MultiNodeReaderOnly);
    for (round, won) in winners.iter().enumerate() {
        assert_eq!(won.len(), 3, "round {round}: {won:?}");
    }
}

#[test]
fn a_released_claim_counts_until_freed_then_another_host_may_claim() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    let sets = ClaimSets::new(&etcd, PREFIX);
    let mode = AccessMode::SingleNodeWriter;
    sets.admit("v", &request("a", "w1", false, mode)).unwrap();
    // A repeat is the same claim.
    sets.admit("v", &request("a", "w1", false, mode)).unwrap();
    let b = request("b", "w2", false, mode);
    let err = sets.admit("v", &b).unwrap_err();
    assert!(
        err.to_string().contains("claimed on node a by alloc w1"),
        "{err}"
    );
    // Released but not yet detached on node a: still in the way.
    sets.release("v", "a", "w1", "released").unwrap();
    let (set, _) = sets.read("v").unwrap();
    assert!(!set.claims[0].wanted);
    assert_eq!(set.claims[0].reason, "released");
    assert!(sets.admit("v", &b).is_err());
    sets.free("v", "a", "w1").unwrap();
    assert_eq!(
        etcd.get(format!("{PREFIX}/volumes/v/claims").as_bytes())
            .unwrap(),
        None
    );
    sets.admit("v", &b).unwrap();
}

/// What the ops thread of node `node` answers to an admission of
/// `alloc`'s write claim on `volume`.
fn admission_answer(ops: &Ops, answers: &Receiver<Answer>, volume: &str, alloc: &str) -> Answer {
    ops.submit(Op::Admit {
        volume: volume.into(),
        request: request("a", alloc, false, AccessMode::SingleNodeWriter),
    });
    answers
        .recv_timeout(Duration::from_secs(10))
        .expect("the ops thread answers an admission")
}

#[test]
fn a_node_whose_key_is_gone_has_no_claim_admitted_since_no_fencer_would_free_it() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = Arc::new(cluster.client());
    let (answers_tx, answers) = unbounded();
    let ops = Ops::start(etcd.clone(), PREFIX, "a", answers_tx).unwrap();
    let unregistered = |volume: &str, alloc: &str| Answer::Unregistered {
        volume: volume.into(),
        alloc: alloc.into(),
    };
    let sets = ClaimSets::new(&etcd, PREFIX);

    // Not registered yet: refused, and nothing is in the set.
    assert_eq!(
        admission_answer(&ops, &answers, "v1", "w1"),
        unregistered("v1", "w1")
    );
    assert!(sets.read("v1").unwrap().0.claims.is_empty());

    // Registered (the node's key on its lease): admitted.
    let key = node::node_key(PREFIX, "a");
    let (lease, _) = etcd.grant(Duration::from_secs(30)).unwrap();
    etcd.put_if(&key, 0, b"a", lease)
        .unwrap()
        .expect("the key is free");
    assert_eq!(
        admission_answer(&ops, &answers, "v1", "w1"),
        Answer::Admitted {
            volume: "v1".into(),
            alloc: "w1".into()
        }
    );

    // The lease gone (as a node frozen past its TTL finds on thawing,
    // before it registers again): the fencer has seen the key go, so a
    // claim admitted now would never be fenced. It is refused.
    etcd.revoke(lease).unwrap();
    assert_eq!(etcd.get(&key).unwrap(), None);
    assert_eq!(
        admission_answer(&ops, &answers, "v2", "w2"),
        unregistered("v2", "w2")
    );
    assert!(sets.read("v2").unwrap().0.claims.is_empty());
}

/// A registration's revoke-on-stop flag, set.
fn revoke() -> Arc<std::sync::atomic::AtomicBool> {
    Arc::new(std::sync::atomic::AtomicBool::new(true))
}

/// The registration's next event other than a keep-alive that went
/// through, within `timeout`.
fn next_change(registration: &Registration, timeout: Duration) -> Option<NodeEvent> {
    let deadline = Instant::now() + timeout;
    loop {
        match registration
            .events()
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(NodeEvent::Alive { .. }) => continue,
            other => return other.ok(),
        }
    }
}

fn record(node: &str) -> pb::NodeRecord {
    pb::NodeRecord {
        node: node.into(),
        registered_unix_ms: 1,
        ..Default::default()
    }
}

#[test]
fn a_node_lives_by_its_lease_and_its_name_is_unique() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = Arc::new(cluster.client());
    let ttl = Duration::from_secs(2);
    let a =
        Registration::start(etcd.clone(), PREFIX, record("node-a"), ttl, revoke(), None).unwrap();
    // Kept alive well past its TTL.
    thread::sleep(ttl * 2);
    let nodes: Vec<String> = node::list(&etcd, PREFIX)
        .unwrap()
        .into_iter()
        .map(|r| r.node)
        .collect();
    assert_eq!(nodes, ["node-a"]);
    // The name is taken while node-a lives.
    let err = Registration::start(etcd.clone(), PREFIX, record("node-a"), ttl, revoke(), None)
        .err()
        .expect("a second node-a");
    assert!(err.to_string().contains("must be unique"), "{err}");
    // A clean stop leaves at once.
    drop(a);
    assert!(node::list(&etcd, PREFIX).unwrap().is_empty());
}

#[test]
fn a_node_cut_off_from_etcd_is_told_so_and_registers_again_when_it_returns() {
    if !require_etcd() {
        return;
    }
    let mut cluster = Cluster::start(1);
    let etcd = Arc::new(cluster.client().with_timeout(Duration::from_millis(500)));
    let ttl = Duration::from_secs(2);
    let registration =
        Registration::start(etcd.clone(), PREFIX, record("node-a"), ttl, revoke(), None).unwrap();
    let first_registered = node::list(&etcd, PREFIX).unwrap()[0].registered_unix_ms;
    cluster.kill(0);
    let start = Instant::now();
    match next_change(&registration, Duration::from_secs(20)) {
        Some(NodeEvent::Disconnected { reason }) => {
            assert!(reason.contains("no keep-alive went through"), "{reason}");
            // Not at the first failed keep-alive: only once the last good
            // one (up to a third of the TTL before the kill) is a TTL old.
            assert!(
                start.elapsed() >= ttl / 2,
                "disconnected too early: {:?}",
                start.elapsed()
            );
        }
        other => panic!("expected a disconnection: {other:?}"),
    }
    cluster.restart(0);
    match next_change(&registration, Duration::from_secs(30)) {
        Some(NodeEvent::Reconnected { lease }) => assert!(lease != 0),
        other => panic!("expected a reconnection: {other:?}"),
    }
    let nodes = node::list(&etcd, PREFIX).unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].node, "node-a");
    // The record says when it registered again, not the first time.
    assert!(
        nodes[0].registered_unix_ms > first_registered,
        "{} is the first registration's time",
        nodes[0].registered_unix_ms
    );
}

#[test]
fn one_candidate_leads_a_plugin_s_controller_and_another_takes_over_when_its_node_goes() {
    use csi_agent::cluster::election::{self, Leadership};
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    let (lease_a, _) = etcd.grant(Duration::from_secs(30)).unwrap();
    let (lease_b, _) = etcd.grant(Duration::from_secs(30)).unwrap();
    assert_eq!(
        election::campaign(&etcd, PREFIX, "ebs", "node-a", lease_a).unwrap(),
        Leadership::Leader
    );
    assert_eq!(
        election::campaign(&etcd, PREFIX, "ebs", "node-b", lease_b).unwrap(),
        Leadership::Follower {
            leader: "node-a".into()
        }
    );
    // Campaigning again changes nothing; another plugin has its own.
    assert_eq!(
        election::campaign(&etcd, PREFIX, "ebs", "node-a", lease_a).unwrap(),
        Leadership::Leader
    );
    assert_eq!(
        election::campaign(&etcd, PREFIX, "nfs", "node-b", lease_b).unwrap(),
        Leadership::Leader
    );
    // node-a's lease ends (its node is lost): node-b sees it and takes over.
    let (_, revision) = etcd
        .get_prefix(&election::election_key(PREFIX, "ebs"))
        .unwrap();
    let watch = etcd
        .watch_prefix(&election::election_key(PREFIX, "ebs"), revision + 1)
        .unwrap();
    etcd.revoke(lease_a).unwrap();
    let batch = watch.next(Duration::from_secs(10)).unwrap();
    assert!(election::leader_left(&batch.events), "{batch:?}");
    assert_eq!(
        election::campaign(&etcd, PREFIX, "ebs", "node-b", lease_b).unwrap(),
        Leadership::Leader
    );
    assert_eq!(
        election::leader(&etcd, PREFIX, "ebs").unwrap().as_deref(),
        Some("node-b")
    );
}

#[test]
fn leadership_is_the_lease_not_the_name_and_a_deposed_leader_s_guarded_writes_fail() {
    use csi_agent::cluster::election::{self, Leadership};
    use csi_agent::cluster::etcd::Condition;
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    // The agent's previous process won with its lease...
    let (old, _) = etcd.grant(Duration::from_secs(30)).unwrap();
    assert_eq!(
        election::campaign(&etcd, PREFIX, "ebs", "node-a", old).unwrap(),
        Leadership::Leader
    );
    // ...and the restarted agent, same name, new lease, does not lead
    // until that lease is gone.
    let (new, _) = etcd.grant(Duration::from_secs(30)).unwrap();
    assert_eq!(
        election::campaign(&etcd, PREFIX, "ebs", "node-a", new).unwrap(),
        Leadership::Follower {
            leader: "node-a".into()
        }
    );
    let key = election::election_key(PREFIX, "ebs");
    let led_by = |lease| Condition::OnLease {
        key: key.clone(),
        lease,
    };
    assert!(etcd.holds(&[led_by(old)]).unwrap());
    assert!(!etcd.holds(&[led_by(new)]).unwrap());
    // A write guarded by the old lease succeeds while it leads...
    assert!(etcd
        .put_guarded(b"/csi-agent/x", 0, b"1", 0, &[led_by(old)])
        .unwrap()
        .is_some());
    etcd.revoke(old).unwrap();
    // ...and fails once deposed, even if nobody else leads yet.
    let (kv, _) = etcd.get_prefix(b"/csi-agent/x").unwrap();
    assert!(etcd
        .put_guarded(b"/csi-agent/x", kv[0].mod_revision, b"2", 0, &[led_by(old)])
        .unwrap()
        .is_none());
    assert!(!etcd
        .delete_guarded(b"/csi-agent/x", kv[0].mod_revision, &[led_by(old)])
        .unwrap());
    assert_eq!(
        election::campaign(&etcd, PREFIX, "ebs", "node-a", new).unwrap(),
        Leadership::Leader
    );
}

#[test]
fn an_attach_intent_is_served_by_the_controller_leader_and_waited_for_with_a_watch() {
    use csi_agent::cluster::attachments::{self, Outcome};
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    // The leader: serves every intent it sees, from a read then a watch,
    // with a stand-in for ControllerPublish/Unpublish that fails node-c.
    let leader_etcd = cluster.client();
    let leader = std::thread::spawn(move || {
        let prefix = attachments::attachments_prefix(PREFIX);
        let (kvs, revision) = leader_etcd.get_prefix(prefix.as_bytes()).unwrap();
        let serve = |kvs: &[csi_agent::cluster::etcd::Kv]| {
            let mut served = 0;
            for intent in attachments::pending(PREFIX, kvs) {
                let outcome = match (intent.attach, intent.node.as_str()) {
                    (true, "node-c") => Outcome::Failed("node-c has no free slot".into()),
                    (true, _) => Outcome::Attached(
                        [(
                            "device".to_string(),
                            format!("/dev/for-{}", intent.plugin_node_id),
                        )]
                        .into(),
                    ),
                    (false, _) => Outcome::Detached,
                };
                if attachments::answer(&leader_etcd, PREFIX, "node-leader", &intent, &outcome, &[])
                    .unwrap()
                {
                    served += 1;
                }
            }
            served
        };
        let mut served = serve(&kvs);
        let watch = leader_etcd
            .watch_prefix(prefix.as_bytes(), revision + 1)
            .unwrap();
        while served < 4 {
            let batch = watch.next(Duration::from_secs(20)).unwrap();
            let puts = batch.puts();
            served += serve(&puts);
        }
    });
    let etcd = cluster.client();
    let wait = |volume: &str, node: &str, node_id: &str, attach: bool| {
        let revision =
            attachments::request(&etcd, PREFIX, volume, node, node_id, false, attach).unwrap();
        attachments::wait(
            &etcd,
            PREFIX,
            volume,
            node,
            revision,
            Duration::from_secs(20),
        )
        .unwrap()
    };
    assert_eq!(
        wait("vol", "node-a", "i-aaa", true),
        Outcome::Attached([("device".to_string(), "/dev/for-i-aaa".to_string())].into())
    );
    assert_eq!(wait("vol", "node-a", "i-aaa", false), Outcome::Detached);
    assert_eq!(
        wait("vol", "node-c", "i-ccc", true),
        Outcome::Failed("node-c has no free slot".into())
    );
    assert_eq!(
        wait("vol", "node-b", "i-bbb", true),
        Outcome::Attached([("device".to_string(), "/dev/for-i-bbb".to_string())].into())
    );
    leader.join().unwrap();
}

#[test]
fn a_lost_node_s_claims_become_past_claims_and_stay_until_freed() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    let sets = ClaimSets::new(&etcd, PREFIX);
    let snw = AccessMode::SingleNodeWriter;
    sets.admit("v1", &request("a", "w1", false, snw)).unwrap();
    sets.admit("v2", &request("b", "w2", false, snw)).unwrap();
    assert!(sets.mark_lost("v1", "a", "node lost").unwrap());
    let (set, _) = sets.read("v1").unwrap();
    assert!(!set.claims[0].wanted);
    assert_eq!(set.claims[0].reason, "node lost");
    // Still in the way: a lost node may still write until it is fenced.
    let err = sets
        .admit("v1", &request("b", "w3", false, snw))
        .unwrap_err();
    assert!(err.to_string().contains("claimed on node a"), "{err}");
    // Node b's claims are untouched; losing a node twice changes nothing.
    assert!(sets.read("v2").unwrap().0.claims[0].wanted);
    assert!(!sets.mark_lost("v1", "a", "node lost").unwrap());
    assert!(!sets.mark_lost("v2", "a", "node lost").unwrap());
    // Fenced (the controller leader detached node a), then freed.
    sets.free("v1", "a", "w1").unwrap();
    sets.admit("v1", &request("b", "w3", false, snw)).unwrap();
}
