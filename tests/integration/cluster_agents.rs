//! Agents with a `cluster` block, against a real etcd: each registers its
//! node, `node status` on any of them lists them all, a node name held by
//! a live agent makes a second agent with it stop with the reason, a
//! stopped agent leaves the list at once, and an agent whose etcd is gone
//! reports itself disconnected. An agent without a `cluster` block says
//! it is in none.

use std::time::{Duration, Instant};

use crate::etcd::{require_etcd, Cluster};
use crate::harness::{text, Agent, WAIT};

/// The config of an agent named `node` in `cluster`, with a 2 s lease.
pub fn cluster_block(cluster: &Cluster, node: &str) -> String {
    let endpoints: Vec<String> = cluster.clients.iter().map(|e| format!("{e:?}")).collect();
    format!(
        "\nnode_name = {node:?}\n\ncluster {{\n  etcd      = [{}]\n  lease_ttl = \"2s\"\n}}\n",
        endpoints.join(", ")
    )
}

/// `node status` through `agent`'s CLI, polled until `done` holds.
#[track_caller]
pub fn node_status_until(agent: &Agent, what: &str, done: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let out = agent.cli(&["node", "status"]);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && done(&stdout) {
            return stdout;
        }
        if start.elapsed() > Duration::from_secs(30) {
            panic!(
                "node status never showed {what}:\n{}\n{}",
                text(&out),
                agent.log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// True if the node table of a `node status` lists `node`.
pub fn lists(stdout: &str, node: &str) -> bool {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("Node"))
        .any(|l| l.split_whitespace().next() == Some(node))
}

#[test]
fn agents_of_a_cluster_see_each_other_and_a_stopped_one_leaves() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let a = Agent::start_with_config(&cluster_block(&cluster, "node-a"));
    let mut b = Agent::start_with_config(&cluster_block(&cluster, "node-b"));
    let seen = node_status_until(&a, "both nodes", |s| {
        lists(s, "node-a") && lists(s, "node-b")
    });
    assert!(
        seen.starts_with("This agent: node node-a (connected)"),
        "{seen}"
    );
    node_status_until(&b, "both nodes", |s| {
        lists(s, "node-a") && lists(s, "node-b")
    });
    let out = a.cli(&["node", "status", "-json"]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("\"this_node\": \"node-a\""), "{json}");
    // A clean stop revokes the lease: gone at once, not after the TTL.
    assert_eq!(b.sigterm(), 0);
    node_status_until(&a, "node-b gone", |s| {
        lists(s, "node-a") && !lists(s, "node-b")
    });
}

#[test]
fn a_second_agent_with_a_live_node_s_name_stops_with_the_reason() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let a = Agent::start_with_config(&cluster_block(&cluster, "twin"));
    node_status_until(&a, "twin", |s| lists(s, "twin"));
    let mut second = Agent::start_with_config(&cluster_block(&cluster, "twin"));
    let code = second.exit_code();
    assert_eq!(code, 1, "{}", second.log());
    assert!(
        second.log().contains("node names must be unique"),
        "{}",
        second.log()
    );
    // The first one is untouched.
    node_status_until(&a, "twin still", |s| lists(s, "twin"));
}

#[test]
fn an_agent_whose_etcd_is_gone_reports_itself_disconnected() {
    if !require_etcd() {
        return;
    }
    let mut cluster = Cluster::start(1);
    let a = Agent::start_with_config(&cluster_block(&cluster, "node-a"));
    node_status_until(&a, "node-a", |s| lists(s, "node-a"));
    cluster.kill(0);
    // node status reads etcd, which is gone: the error says so, and the
    // agent's own view (in its log) turns disconnected after the TTL.
    a.wait_for_log("Cluster: node node-a is disconnected", WAIT);
    let out = a.cli(&["node", "status"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no etcd member answered"),
        "{}",
        text(&out)
    );
    cluster.restart(0);
    a.wait_for_log(
        "Cluster: node node-a is registered",
        Duration::from_secs(30),
    );
    node_status_until(&a, "node-a back", |s| {
        s.starts_with("This agent: node node-a (connected)") && lists(s, "node-a")
    });
}

#[test]
fn an_agent_without_a_cluster_block_is_in_none() {
    let agent = Agent::start(&[]);
    let out = agent.cli(&["node", "status"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not in a cluster"),
        "{}",
        text(&out)
    );
}
