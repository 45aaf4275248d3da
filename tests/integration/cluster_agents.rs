//! Agents with a `cluster` block, against a real etcd: each registers its
//! node, `node status` on any of them lists them all, a node name held by
//! a live agent makes a second agent with it stop with the reason, a
//! stopped agent leaves the list at once, and an agent whose etcd is gone
//! reports itself disconnected. A node's record follows its plugins'
//! health as it changes. An agent without a `cluster` block says it is in
//! none.

use std::time::{Duration, Instant};

use crate::etcd::{require_etcd, Cluster};
use crate::harness::{healthy, text, unhealthy, Agent, WAIT};
use crate::util::Plugin;

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

/// Whether plugin `id` of the only node in `node status -json` is
/// healthy; `None` if the node has no such plugin.
fn plugin_healthy(json: &str, id: &str) -> Option<bool> {
    let plugin = &json[json.find(&format!("\"id\": {id:?}"))?..];
    let health = &plugin[plugin.find("\"healthy\": ")? + "\"healthy\": ".len()..];
    Some(health.starts_with("true"))
}

/// Polls `node status -json` until plugin `id` shows `healthy`; panics
/// with the last answer after [`WAIT`].
#[track_caller]
fn node_record_says(agent: &Agent, id: &str, healthy: bool) {
    let start = Instant::now();
    loop {
        let out = agent.cli(&["node", "status", "-json"]);
        let json = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && plugin_healthy(&json, id) == Some(healthy) {
            return;
        }
        if start.elapsed() > WAIT {
            panic!(
                "node status never showed plugin {id} with healthy = {healthy}:\n{}\n{}",
                text(&out),
                agent.log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_node_record_follows_its_plugin_s_health_as_it_changes() {
    if !require_etcd() {
        return;
    }
    let mut cluster = Cluster::start(1);
    // The plugin is down when the agent registers the node.
    let mut plugin = Plugin::start();
    plugin.kill();
    let config = format!(
        "\nplugin \"hp\" {{\n  socket = {:?}\n  type   = \"monolith\"\n  health_timeout = \"1s\"\n}}\n{}",
        plugin.socket.display().to_string(),
        cluster_block(&cluster, "node-a")
    );
    let agent = Agent::start_with_config(&config);
    agent.wait_for("hp", unhealthy, WAIT);
    node_record_says(&agent, "hp", false);
    // Up, down and up again: the record follows each time.
    plugin.restart();
    agent.wait_for("hp", healthy, WAIT);
    node_record_says(&agent, "hp", true);
    plugin.kill();
    agent.wait_for("hp", unhealthy, WAIT);
    node_record_says(&agent, "hp", false);
    plugin.restart();
    agent.wait_for("hp", healthy, WAIT);
    node_record_says(&agent, "hp", true);
    // A change made while etcd is gone is in the record once it is back.
    cluster.kill(0);
    plugin.kill();
    agent.wait_for("hp", unhealthy, WAIT);
    agent.wait_for_log("Cluster: node node-a is disconnected", WAIT);
    cluster.restart(0);
    node_record_says(&agent, "hp", false);
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
