//! Two hosts sharing volumes through etcd, each agent with its own
//! endpoint: the scope is `global`, and a single-node-writer volume
//! mounted through host A's endpoint is refused through host B's, naming
//! the holder, until A unmounts it.

use std::fs;
use std::path::PathBuf;

use json::Value;

use super::{config, Docker, NAME};
use crate::etcd::{require_etcd, Cluster};
use crate::harness::{healthy, Agent, WAIT};
use crate::util::Plugin;
use crate::volume_util::{wait_volume, PLUGIN};

/// One host: its agent (dropped first), its plugin, its endpoint.
struct Host {
    agent: Agent,
    #[allow(dead_code)] // kept running; its verdict is checked on drop
    plugin: Plugin,
    socket: PathBuf,
}

/// Two hosts in `cluster`, their plugins on one base dir (one storage
/// system seen from both); the last owns it and is dropped last.
fn two_hosts(cluster: &Cluster) -> Vec<Host> {
    let nodes = ["host-a", "host-b"];
    let owner = Plugin::start_with(&[], &["-shared", "-node-id", nodes[1]]);
    let first = Plugin::start_sharing(&owner, &[], &["-shared", "-node-id", nodes[0]]);
    let endpoints: Vec<String> = cluster.clients.iter().map(|e| format!("{e:?}")).collect();
    [first, owner]
        .into_iter()
        .zip(nodes)
        .map(|(plugin, node)| {
            let socket = plugin.dir.join("docker-plugins").join(format!("{NAME}.sock"));
            let mut text = format!(
                "\nnode_name = {node:?}\n\ncluster {{\n  etcd      = [{}]\n  lease_ttl = \"3s\"\n}}\n",
                endpoints.join(", ")
            );
            text.push_str(&config(&plugin, &socket, ""));
            let agent = Agent::start_with_config(&text);
            agent.wait_for(PLUGIN, healthy, WAIT);
            Host {
                agent,
                plugin,
                socket,
            }
        })
        .collect()
}

#[test]
fn a_single_writer_volume_mounted_on_one_host_is_refused_on_the_other_until_unmounted() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let hosts = two_hosts(&cluster);
    let (a, b) = (
        Docker::dockerd(&hosts[0].socket),
        Docker::dockerd(&hosts[1].socket),
    );
    let scope = a.call("/VolumeDriver.Capabilities", "").ok();
    assert_eq!(
        scope
            .body
            .get("Capabilities")
            .and_then(|c| c.get("Scope"))
            .and_then(Value::as_str),
        Some("global")
    );
    a.create("web", &[]).ok();
    wait_volume(&hosts[1].agent, "web", "known", |_| true, WAIT);
    // Host B's engine sees it by name.
    b.named("Get", "web").ok();

    let on_a = a.mount("web", "ca");
    fs::write(on_a.join("owner"), "a").unwrap();
    let message = b.with_id("Mount", "web", "cb").failed();
    assert!(message.contains("docker-ca"), "{message}");
    assert!(message.contains("\"web\""), "{message}");

    a.unmount("web", "ca");
    wait_volume(
        &hosts[1].agent,
        "web",
        "no claim left",
        |v| v.claims.is_empty(),
        WAIT,
    );
    let on_b = b.mount("web", "cb");
    assert_eq!(fs::read_to_string(on_b.join("owner")).unwrap(), "a");
    b.unmount("web", "cb");
}

#[test]
fn read_only_and_mount_group_travel_with_the_volume_s_record() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let hosts = two_hosts(&cluster);
    let (a, b) = (
        Docker::dockerd(&hosts[0].socket),
        Docker::dockerd(&hosts[1].socket),
    );
    a.create("shared", &[("read_only", "true"), ("mount_group", "1000")])
        .ok();
    let on_b = wait_volume(
        &hosts[1].agent,
        "shared",
        "known with its settings",
        |v| v.mounts_read_only && v.mount_group == "1000",
        WAIT,
    );
    assert!(on_b.mounts_read_only);
    // A repeated Create on B compares with the shared record.
    let message = b.create("shared", &[("read_only", "false")]).failed();
    assert!(
        message.ends_with("read_only false (the volume's is true)"),
        "{message}"
    );
    // Host B mounts it read-only, a reader claim, from the shared record.
    let mountpoint = b.mount("shared", "cb");
    assert_eq!(crate::util::mount_state(&mountpoint), Some(true));
    let status = crate::volume_util::volume(&hosts[1].agent, "shared");
    let modes: Vec<&str> = status.claims.iter().map(|c| c.mode.as_str()).collect();
    assert_eq!(modes, ["read"]);
    b.unmount("shared", "cb");
}
