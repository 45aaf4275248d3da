//! Agents on three hosts: each agent runs in a network namespace of its
//! own ([`Net`]) and reaches a 3-member etcd on the bridge over its veth
//! link, as agents on three machines reach their etcd. Every agent's
//! `node status` lists all three; a host whose link is cut reports itself
//! disconnected, the others stop listing it once its lease has expired,
//! and when the link is back it registers again and is listed again.

use std::time::Duration;

use crate::cluster_agents::{cluster_block, lists, node_status_until};
use crate::etcd::{require_etcd, Cluster};
use crate::harness::{text, Agent};
use crate::netns::Net;
use crate::util::require_root;

/// The node names of the three hosts.
const NODES: [&str; 3] = ["host-a", "host-b", "host-c"];

/// Three hosts, each with an agent, and the etcd they share. The fields
/// drop in order: the agents, then etcd, then the namespaces.
struct Hosts {
    agents: Vec<Agent>,
    etcd: Cluster,
    net: Net,
}

/// Makes the hosts and waits until every agent lists every node.
fn three_hosts() -> Hosts {
    let net = Net::new(NODES.len());
    let etcd = Cluster::start_on(NODES.len(), net.bridge_addr().into());
    let agents: Vec<Agent> = NODES
        .iter()
        .enumerate()
        .map(|(i, node)| {
            Agent::start_in_netns(&net.netns_path(i), &[], &cluster_block(&etcd, node))
        })
        .collect();
    for agent in &agents {
        node_status_until(agent, "all three nodes", |s| {
            NODES.iter().all(|node| lists(s, node))
        });
    }
    Hosts { agents, etcd, net }
}

#[test]
fn agents_in_three_namespaces_list_each_other_through_etcd_on_the_bridge() {
    if !require_root() || !require_etcd() {
        return;
    }
    let hosts = three_hosts();
    for (i, agent) in hosts.agents.iter().enumerate() {
        // Each agent is in its host's namespace, not the test's.
        assert_eq!(hosts.net.pids(i), [agent.pid() as libc::pid_t]);
        let out = agent.cli(&["node", "status"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.starts_with(&format!("This agent: node {} (connected)", NODES[i])),
            "{}",
            text(&out)
        );
    }
    // The test, in the root namespace, sees the same cluster.
    let etcd = hosts.etcd.client();
    let (nodes, _) = etcd.get_prefix(b"/csi-agent/nodes/").unwrap();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
}

#[test]
fn a_partitioned_host_is_disconnected_dropped_after_its_ttl_and_back_when_healed() {
    if !require_root() || !require_etcd() {
        return;
    }
    let hosts = three_hosts();
    let [a, b, c] = &hosts.agents[..] else {
        unreachable!()
    };
    hosts.net.partition(0);
    // Host A's keep-alives fail for longer than the TTL: it says so.
    a.wait_for_log(
        "Cluster: node host-a is disconnected",
        Duration::from_secs(30),
    );
    let out = a.cli(&["node", "status"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("node host-a (disconnected: ")
            && stderr.contains("no etcd member answered"),
        "{}",
        text(&out)
    );
    // Its lease expires: the others stop listing it, and still list each
    // other.
    for agent in [b, c] {
        node_status_until(agent, "host-a gone", |s| {
            !lists(s, "host-a") && lists(s, "host-b") && lists(s, "host-c")
        });
    }
    hosts.net.heal(0);
    node_status_until(a, "host-a connected and listed again", |s| {
        s.starts_with("This agent: node host-a (connected)") && NODES.iter().all(|n| lists(s, n))
    });
    for agent in [b, c] {
        node_status_until(agent, "host-a back", |s| lists(s, "host-a"));
    }
}
