//! Agents with a `cluster` block, against a real etcd: each registers its
//! node, `node status` on any of them lists them all, a node name held by
//! a live agent makes a second agent with it stop with the reason, a
//! stopped agent leaves the list at once, and an agent whose etcd is gone
//! reports itself disconnected. A node's record follows its plugins'
//! health as it changes. An agent without a `cluster` block says it is in
//! none. With a `tls` block the agent speaks TLS to etcd and presents its
//! client certificate; a TLS file it cannot read stops it, naming the
//! file.

use std::fs;
use std::time::{Duration, Instant};

use crate::etcd::{names_a_failed_certificate_check, require_etcd, require_openssl, Cluster};
use crate::harness::{agent_refusing, config_text, healthy, text, unhealthy, Agent, WAIT};
use crate::util::{Plugin, TestDir};

/// The config of an agent named `node` in `cluster`, with a 2 s lease
/// (and, when the cluster speaks TLS, its CA and the client certificate).
pub fn cluster_block(cluster: &Cluster, node: &str) -> String {
    let endpoints: Vec<String> = cluster.clients.iter().map(|e| format!("{e:?}")).collect();
    let tls = cluster
        .certs
        .as_ref()
        .map(|c| c.tls_block())
        .unwrap_or_default();
    format!(
        "\nnode_name = {node:?}\n\ncluster {{\n  etcd      = [{}]\n  lease_ttl = \"2s\"\n{tls}}}\n",
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
    // What placement sees of this node; no alloc holds any of it.
    assert!(seen.contains("\nResources: cpu "), "{seen}");
    assert!(seen.contains("allocated 0)\n"), "{seen}");
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
    // The event stream told each change of the connection.
    let out = a.cli(&["events", "-topic", "node"]);
    assert!(out.status.success(), "{}", text(&out));
    let told: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().nth(3).unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        told,
        ["Connected", "Disconnected", "Connected"],
        "{}",
        text(&out)
    );
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
fn an_agent_without_a_cluster_block_shows_its_node_and_resources_alone() {
    let agent = Agent::start(&[]);
    let out = agent.cli(&["node", "status"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("This agent: node ")
            && stdout.contains(" (none: its config has no cluster block)\n"),
        "{stdout}"
    );
    assert!(stdout.contains("\nResources: cpu "), "{stdout}");
    assert!(stdout.contains("allocated 0)\n"), "{stdout}");
    assert!(!stdout.contains("No live nodes"), "{stdout}");
}

#[test]
fn agents_with_a_tls_block_register_over_tls_and_see_each_other() {
    if !require_etcd() || !require_openssl() {
        return;
    }
    let cluster = Cluster::start_tls(1);
    let a = Agent::start_with_config(&cluster_block(&cluster, "node-a"));
    let _b = Agent::start_with_config(&cluster_block(&cluster, "node-b"));
    // node status reads etcd through the agent, over the agent's TLS. (A
    // node's record is in etcd a moment before its agent hears so: until
    // then it says "connecting".)
    node_status_until(&a, "both nodes, node-a connected", |s| {
        s.starts_with("This agent: node node-a (connected)")
            && lists(s, "node-a")
            && lists(s, "node-b")
    });
    // The key was never logged, even at debug level.
    let key = fs::read_to_string(&cluster.certs.as_ref().unwrap().client_key).unwrap();
    let body = key.lines().nth(1).unwrap();
    assert!(!a.log().contains(body), "{}", a.log());
}

#[test]
fn an_agent_whose_tls_key_file_cannot_be_read_stops_naming_it() {
    if !require_etcd() || !require_openssl() {
        return;
    }
    let cluster = Cluster::start_tls(1);
    let dir = TestDir::new();
    let certs = cluster.certs.as_ref().unwrap();
    let missing = dir.join("missing.key");
    let block = cluster_block(&cluster, "node-a")
        .replace(&format!("{:?}", certs.client_key), &format!("{missing:?}"));
    let config = dir.join("agent.hcl");
    fs::write(&config, config_text(&dir.join("data"), &[]) + &block).unwrap();
    let out = agent_refusing(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cluster: cannot use the cluster's tls block: cannot read key_file {}: No such file or directory",
            missing.display()
        )),
        "{}",
        text(&out)
    );
}

#[test]
fn an_agent_trusting_another_ca_is_not_connected_and_node_status_says_why() {
    if !require_etcd() || !require_openssl() {
        return;
    }
    let cluster = Cluster::start_tls(1);
    let certs = cluster.certs.as_ref().unwrap();
    let block = cluster_block(&cluster, "node-a")
        .replace(&format!("{:?}", certs.ca), &format!("{:?}", certs.other_ca));
    let a = Agent::start_with_config(&block);
    let out = a.cli(&["node", "status"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot list the cluster's nodes: no etcd member answered Range")
            && names_a_failed_certificate_check(&stderr),
        "{}",
        text(&out)
    );
    // gRPC's own report of the handshake is a line of the agent's log.
    a.wait_for_log("ERROR] Handshake failed", WAIT);
}
