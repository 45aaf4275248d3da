//! Agents of a cluster while etcd loses members: with one of three members
//! dead, claims and releases go on from every host; with a majority dead, a
//! claim fails soon with an error that names the cause, instead of
//! hanging; once the members are back, claims succeed again, and nothing
//! claimed before is lost, in etcd or on the hosts, nor is a single-writer
//! volume ever held by two.

use std::time::{Duration, Instant};

use csi_agent::cluster::claims::ClaimSets;

use crate::cluster_claims::{claims_of, hosts, known_everywhere, Host};
use crate::etcd::{require_etcd, Cluster};
use crate::harness::WAIT;
use crate::volume_util::{claim, claim_req, claimed, connect, released, spec, wait_volume, LONG};

/// How long a claim may take to fail while etcd has no quorum: the
/// agent's deadline on each of the three members, and some slack.
const NO_QUORUM_ANSWER: Duration = Duration::from_secs(15);

/// Each volume's claims in etcd: `(volume, [(node, alloc)])`.
fn claims_in_etcd(cluster: &Cluster, volumes: &[&str]) -> Vec<(String, Vec<(String, String)>)> {
    let etcd = cluster.client();
    let sets = ClaimSets::new(&etcd, "/csi-agent");
    volumes
        .iter()
        .map(|v| {
            let (set, _) = sets.read(v).unwrap();
            let mut claims: Vec<(String, String)> = set
                .claims
                .iter()
                .map(|c| (c.node.clone(), c.alloc_id.clone()))
                .collect();
            claims.sort();
            (v.to_string(), claims)
        })
        .collect()
}

/// Claims `volume` for `alloc` on `host`, which must be refused because
/// `holder` holds it.
#[track_caller]
fn refused_for(host: &Host, volume: &str, alloc: &str, holder: &str) {
    let err = claim(&host.agent, &claim_req(volume, alloc)).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("claimed on node {holder}")),
        "{err}"
    );
}

#[test]
fn claims_go_on_without_one_etcd_member_fail_clearly_without_a_majority_and_resume() {
    if !require_etcd() {
        return;
    }
    let mut cluster = Cluster::start(3);
    let hosts = hosts(&cluster, 2, &[]);
    for v in ["q1", "q2", "q3"] {
        connect(&hosts[0].agent)
            .volume_create(&format!("{v}.hcl"), &spec(v, &["single-node-writer"], None))
            .unwrap();
        known_everywhere(&hosts, v);
    }
    claimed(&hosts[0].agent, &claim_req("q1", "a1"));

    // One member down (the leader or not): once the others have a
    // leader, both hosts claim and release as before.
    cluster.kill(0);
    cluster.wait_ready();
    claimed(&hosts[1].agent, &claim_req("q2", "b2"));
    refused_for(&hosts[0], "q2", "a2", "host-1");
    released(&hosts[1].agent, "q2", "b2");
    claimed(&hosts[0].agent, &claim_req("q2", "a2"));
    refused_for(&hosts[1], "q1", "b1", "host-0");

    // A majority down: a claim fails soon, and says why.
    cluster.kill(1);
    let start = Instant::now();
    let err = claim(&hosts[1].agent, &claim_req("q3", "b3")).unwrap_err();
    let took = start.elapsed();
    assert!(took < NO_QUORUM_ANSWER, "the claim took {took:?}: {err}");
    let message = err.to_string();
    assert!(
        message.contains("claim of volume \"q3\" for alloc b3 failed")
            && message.contains("no etcd member answered")
            && message.contains("for want of a quorum"),
        "{message}"
    );
    assert!(!message.contains("did not serve"), "{message}");
    eprintln!("without a majority, in {took:?}: {message}");

    // The members return. The failed claim may have reached etcd, so the
    // agent frees it there first (retried with backoff until etcd
    // answers); then the same claim goes through.
    cluster.restart(0);
    cluster.restart(1);
    cluster.wait_ready();
    wait_volume(
        &hosts[1].agent,
        "q3",
        "the failed claim freed",
        |v| v.claims.is_empty() && v.past_claims.is_empty(),
        LONG,
    );
    claimed(&hosts[1].agent, &claim_req("q3", "b3"));

    // Nothing lost: every claim is in etcd once, and each host sees it.
    assert_eq!(
        claims_in_etcd(&cluster, &["q1", "q2", "q3"]),
        [
            ("q1".into(), vec![("host-0".into(), "a1".into())]),
            ("q2".into(), vec![("host-0".into(), "a2".into())]),
            ("q3".into(), vec![("host-1".into(), "b3".into())]),
        ]
    );
    for (volume, node, alloc) in [("q1", 0, "a1"), ("q2", 0, "a2"), ("q3", 1, "b3")] {
        for (i, host) in hosts.iter().enumerate() {
            let state = if i == node { "taken" } else { "held" };
            let want = vec![(hosts[node].node.clone(), alloc.to_string(), state.into())];
            wait_volume(
                &host.agent,
                volume,
                &format!("{alloc}'s claim {state}"),
                |v| claims_of(v) == want,
                WAIT,
            );
        }
    }
    // And the single-writer volumes are still each one host's.
    refused_for(&hosts[1], "q1", "b1", "host-0");
    refused_for(&hosts[0], "q3", "a3", "host-1");
    for (volume, node, alloc) in [("q1", 0, "a1"), ("q2", 0, "a2"), ("q3", 1, "b3")] {
        released(&hosts[node].agent, volume, alloc);
    }
}
