//! Controller calls from a host without the plugin's controller: the
//! node-only host's agent relays them through etcd to the controller
//! leader on another host, whose controller makes them. Every command
//! works from the node-only host as from the controller's: create, expand,
//! snapshot (create, list, delete), delete; and so does a host without any
//! instance of the plugin; with no controller leading in
//! the cluster, a create fails within seconds, clearly, and leaves nothing.

use std::thread;
use std::time::{Duration, Instant};

use csi_agent::cluster::election;
use csi_agent::proto::agent::{SnapshotCreateRequest, SnapshotDeleteRequest, SnapshotListRequest};

use csi_agent::spec::DEFAULT_CLUSTER_PREFIX;

use crate::cluster_claims::NodeOnly;
use crate::etcd::{require_etcd, Cluster};
use crate::harness::{Agent, WAIT};
use crate::volume_util::{connect, spec, try_volume, wait_volume, PLUGIN};

/// How many times `plugin`'s trace has `rpc`.
fn calls(plugin: &crate::util::Plugin, rpc: &str) -> usize {
    plugin.trace_methods().iter().filter(|m| *m == rpc).count()
}

#[test]
fn a_node_only_host_creates_expands_snapshots_and_deletes_through_the_controller_leader() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(3);
    let NodeOnly {
        full,
        node,
        owner,
        node_only,
    } = NodeOnly::start(&cluster, &[]);
    node.wait_for_log("plugin hp's controller leads in the cluster", WAIT);
    // hostpath volumes live on one node: a volume is created where the
    // spec's topology says, or by default where it is asked for.
    let on = |id: &str, min: &str, node: Option<&str>| {
        let mut hcl = format!(
            "{}capacity_min = {min:?}\n",
            spec(id, &["single-node-writer"], None)
        );
        if let Some(node) = node {
            hcl.push_str(&format!(
                "topology_request {{\n  required {{\n    topology {{\n      segments = {{ \"topology.hostpath.csi-agent/node\" = {node:?} }}\n    }}\n  }}\n}}\n"
            ));
        }
        hcl
    };
    let sized = |min: &str| on("r", min, Some("host-0"));

    // The leader's controller's refusal comes back as it was made: host
    // 0's controller cannot make a volume on host 1; nothing is left.
    let err = connect(&node)
        .volume_create("q.hcl", &on("q", "1MiB", None))
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "CreateVolume failed: RESOURCE_EXHAUSTED: no requisite topology includes this node"
        ),
        "{err}"
    );
    assert_eq!(try_volume(&node, "q").unwrap(), None);

    // Created from the node-only host, by the leader's controller.
    let created = connect(&node)
        .volume_create("r.hcl", &sized("1MiB"))
        .unwrap();
    let status = &created.volumes[0];
    assert!(!status.external_id.is_empty(), "{status:?}");
    assert_eq!(calls(&owner, "CreateVolume"), 2);
    assert_eq!(calls(&node_only, "CreateVolume"), 0);
    wait_volume(&full, "r", "registered", |_| true, WAIT);
    full.wait_for_log("making CreateVolume for another host (relayed)", WAIT);

    // Expanded from there too: ControllerExpandVolume on the leader.
    connect(&node)
        .volume_create("r.hcl", &sized("4MiB"))
        .unwrap();
    assert_eq!(calls(&owner, "ControllerExpandVolume"), 1);
    let v = try_volume(&node, "r").unwrap().unwrap();
    assert!(v.capacity_bytes >= 4 << 20, "{v:?}");

    // A snapshot, listed and deleted from the node-only host.
    let client = connect(&node);
    let snapshot = client
        .snapshot_create(&SnapshotCreateRequest {
            volume_id: "r".into(),
            name: "r-snap".into(),
            ..Default::default()
        })
        .unwrap()
        .snapshot
        .unwrap();
    assert_eq!(snapshot.volume_id, "r");
    let listed = client
        .snapshot_list(&SnapshotListRequest {
            plugin_id: PLUGIN.into(),
            ..Default::default()
        })
        .unwrap();
    assert!(
        listed.snapshots.iter().any(|s| s.id == snapshot.id),
        "{listed:?}"
    );
    client
        .snapshot_delete(&SnapshotDeleteRequest {
            plugin_id: PLUGIN.into(),
            snapshot_id: snapshot.id.clone(),
            ..Default::default()
        })
        .unwrap();
    for rpc in ["CreateSnapshot", "ListSnapshots", "DeleteSnapshot"] {
        assert_eq!(calls(&owner, rpc), 1, "{rpc}: {:?}", owner.trace_methods());
    }

    // Deleted from the node-only host: gone from the plugin and the cluster.
    client.volume_delete("r").unwrap();
    assert_eq!(calls(&owner, "DeleteVolume"), 1);
    assert_eq!(try_volume(&node, "r").unwrap(), None);
    let deadline = Instant::now() + WAIT;
    while try_volume(&full, "r").unwrap().is_some() {
        assert!(Instant::now() < deadline, "host 0 still has volume r");
        thread::sleep(Duration::from_millis(50));
    }

    // A host without any instance of the plugin does the same.
    let endpoints: Vec<String> = cluster.clients.iter().map(|e| format!("{e:?}")).collect();
    let bare = Agent::start_with_config(&format!(
        "\nnode_name = \"host-2\"\n\ncluster {{\n  etcd      = [{}]\n  lease_ttl = \"3s\"\n}}\n",
        endpoints.join(", ")
    ));
    bare.wait_for_log("plugin hp's controller leads in the cluster", WAIT);
    connect(&bare)
        .volume_create("t.hcl", &on("t", "1MiB", Some("host-0")))
        .unwrap();
    assert_eq!(calls(&owner, "CreateVolume"), 3);
    wait_volume(&node, "t", "registered", |_| true, WAIT);
    // It cannot claim (no node here), and says so.
    let err = connect(&bare)
        .volume_claim(&crate::volume_util::claim_req("t", "t1"))
        .unwrap_err();
    assert!(
        err.to_string().contains("has no node on this host"),
        "{err}"
    );
    connect(&bare).volume_delete("t").unwrap();
    assert_eq!(calls(&owner, "DeleteVolume"), 2);
    drop(bare);

    // No controller leads once host 0's agent is gone (killed: its
    // election key goes with its lease): a create from the node-only host
    // fails within seconds, says why, and leaves no volume behind.
    drop(full);
    let etcd = cluster.client();
    let deadline = Instant::now() + WAIT;
    while election::leader(&etcd, DEFAULT_CLUSTER_PREFIX, PLUGIN)
        .unwrap()
        .is_some()
    {
        assert!(Instant::now() < deadline, "host 0 still leads");
        thread::sleep(Duration::from_millis(100));
    }
    let err = connect(&node)
        .volume_create("s.hcl", &on("s", "1MiB", Some("host-0")))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no controller of plugin \"hp\" runs in the cluster"),
        "{err}"
    );
    assert_eq!(try_volume(&node, "s").unwrap(), None);
    assert_eq!(calls(&owner, "CreateVolume"), 3);
    drop(node);
    drop(node_only);
}

/// The relay's own protocol against etcd, with the test as the leader.
mod protocol {
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    use csi_agent::cluster::election;
    use csi_agent::cluster::relay::{calls_prefix, EtcdRelay};
    use csi_agent::csi::{Carrier, Rpc};
    use grpcio::RpcStatusCode;

    use crate::etcd::{require_etcd, Cluster};

    const PREFIX: &str = "/relay-test";

    #[test]
    fn without_a_leader_nothing_is_sent_and_the_call_fails_within_seconds() {
        if !require_etcd() {
            return;
        }
        let cluster = Cluster::start(1);
        let etcd = Arc::new(cluster.client());
        let relay = EtcdRelay::new(etcd.clone(), PREFIX, "node-b", "ebs");
        let start = Instant::now();
        let err = relay
            .carry(Rpc::CreateVolume, vec![], Duration::from_secs(30))
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(8));
        assert_eq!(err.code(), RpcStatusCode::FAILED_PRECONDITION);
        assert!(
            err.message()
                .contains("no controller of plugin \"ebs\" runs in the cluster"),
            "{err:?}"
        );
        let (calls, _) = etcd
            .get_prefix(calls_prefix(PREFIX, "ebs").as_bytes())
            .unwrap();
        assert!(calls.is_empty(), "{calls:?}");
    }

    #[test]
    fn a_leader_that_leaves_before_answering_leaves_the_outcome_unknown_and_no_record() {
        if !require_etcd() {
            return;
        }
        let cluster = Cluster::start(1);
        let etcd = Arc::new(cluster.client());
        let (lease, _) = etcd.grant(Duration::from_secs(30)).unwrap();
        election::campaign(&etcd, PREFIX, "ebs", "node-a", lease).unwrap();
        // The "leader" sees the call, then its lease is revoked (as when
        // its agent stops) without an answer.
        let leader = {
            let etcd = etcd.clone();
            thread::spawn(move || {
                let prefix = calls_prefix(PREFIX, "ebs");
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    let (calls, _) = etcd.get_prefix(prefix.as_bytes()).unwrap();
                    if let Some(call) = calls.first() {
                        let key = String::from_utf8_lossy(&call.key).into_owned();
                        etcd.revoke(lease).unwrap();
                        return key;
                    }
                    assert!(Instant::now() < deadline, "no call was written");
                    thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let relay = EtcdRelay::new(etcd.clone(), PREFIX, "node-b", "ebs");
        let start = Instant::now();
        let err = relay
            .carry(Rpc::DeleteVolume, vec![1, 2, 3], Duration::from_secs(60))
            .unwrap_err();
        let key = leader.join().unwrap();
        assert!(key.starts_with("/relay-test/calls/ebs/node-b/"), "{key}");
        assert!(start.elapsed() < Duration::from_secs(10));
        assert_eq!(err.code(), RpcStatusCode::DEADLINE_EXCEEDED);
        assert!(
            err.message().contains("the leader left before it answered"),
            "{err:?}"
        );
        // The caller's lease took the record with it.
        assert_eq!(etcd.get(key.as_bytes()).unwrap(), None);
    }
}

#[test]
fn a_node_only_host_polls_the_capacity_of_the_controller_leader_and_refuses_a_volume_past_it() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(3);
    let NodeOnly {
        full: _full,
        node,
        owner,
        node_only: _node_only,
    } = NodeOnly::start_with(&cluster, &["-shared"], "\nvolume_stats_interval = \"5s\"\n");
    node.wait_for_log("plugin hp's controller leads in the cluster", WAIT);
    // The node-only host has no controller of its own: its capacity comes
    // from the leader's, relayed.
    let deadline = Instant::now() + WAIT + Duration::from_secs(10);
    let line = loop {
        let out = node.cli(&["plugin", "status", PLUGIN]);
        let status = String::from_utf8_lossy(&out.stdout).to_string();
        if let Some(line) = status.lines().find(|l| l.starts_with("Capacity ")) {
            if line.contains(" available at ") {
                break line.to_string();
            }
        }
        assert!(Instant::now() < deadline, "no capacity shown:\n{status}");
        thread::sleep(Duration::from_millis(200));
    };
    assert!(line.contains(" available at "), "{line}");
    assert!(calls(&owner, "GetCapacity") > 0);

    // A volume larger than the leader's controller has room for is
    // refused on the node-only host before any CreateVolume.
    let hcl = format!(
        "{}capacity_min = \"100000TiB\"\n",
        spec("huge", &["single-node-writer"], None)
    );
    let err = connect(&node)
        .volume_create("huge.hcl", &hcl)
        .expect_err("a volume larger than the plugin's room");
    let message = err.to_string();
    assert!(
        message.contains("available for new volumes (GetCapacity)")
            && message.contains("CreateVolume was not sent"),
        "{message}"
    );
    assert_eq!(calls(&owner, "CreateVolume"), 0);
    assert!(try_volume(&node, "huge").unwrap().is_none());
}
