//! Claims and volumes shared by the agents of a cluster, against a real
//! 3-member etcd and real agents: a volume registered on one host is known
//! on every host; of three hosts claiming a single-writer volume at once
//! exactly one wins, every round; readers of a multi-node reader volume
//! all win; `volume status` names each claim's node; a volume claimed on
//! another host cannot be deregistered, and a deregistration reaches every
//! host.
//!
//! Each host is an agent with a hostpath plugin of its own node ID, all
//! plugins on one base dir (one storage system seen from three hosts).

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use csi_agent::api::client::{self, AgentClient};
use csi_agent::proto::agent::{VolumeClaimRequest, VolumeStatus};

use crate::etcd::{require_etcd, Cluster};
use crate::harness::{healthy, Agent, WAIT};
use crate::util::Plugin;
use crate::volume_util::{claim_req, connect, released, spec, try_volume, wait_volume, PLUGIN};

/// One host of the cluster: its agent (dropped first) and its plugin.
pub struct Host {
    pub agent: Agent,
    #[allow(dead_code)] // kept running; its verdict is checked on drop
    pub plugin: Plugin,
    pub node: String,
}

/// `n` hosts in `cluster`, their plugins started with `flags`. The last
/// host's plugin owns the shared base dir: it is dropped last.
pub fn hosts(cluster: &Cluster, n: usize, flags: &[&str]) -> Vec<Host> {
    let nodes: Vec<String> = (0..n).map(|i| format!("host-{i}")).collect();
    // One base dir for every host: `-shared` says so, so a volume made
    // through one host can be claimed through each.
    let with_node = |i: usize| [flags, &["-shared", "-node-id", nodes[i].as_str()]].concat();
    let owner = Plugin::start_with(&[], &with_node(n - 1));
    let mut plugins: Vec<Plugin> = (0..n - 1)
        .map(|i| Plugin::start_sharing(&owner, &[], &with_node(i)))
        .collect();
    plugins.push(owner);
    let endpoints: Vec<String> = cluster.clients.iter().map(|e| format!("{e:?}")).collect();
    plugins
        .into_iter()
        .enumerate()
        .map(|(i, plugin)| {
            let config = format!(
                "\nnode_name = {:?}\n\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = \"monolith\"\n}}\n\ncluster {{\n  etcd      = [{}]\n  lease_ttl = \"3s\"\n}}\n",
                nodes[i],
                plugin.socket.display().to_string(),
                endpoints.join(", ")
            );
            let agent = Agent::start_with_config(&config);
            agent.wait_for(PLUGIN, healthy, WAIT);
            Host {
                agent,
                plugin,
                node: nodes[i].clone(),
            }
        })
        .collect()
}

/// Waits until every host knows volume `id`.
pub fn known_everywhere(hosts: &[Host], id: &str) {
    for host in hosts {
        wait_volume(&host.agent, id, "registered", |_| true, WAIT);
    }
}

/// Claims `req` from every host at once (`req` with each host's own alloc
/// ID): each host's answer, in host order.
fn claim_at_once(
    hosts: &[Host],
    volume: &str,
    round: usize,
    read_only: bool,
) -> Vec<Result<String, String>> {
    let barrier = Arc::new(Barrier::new(hosts.len()));
    let calls: Vec<_> = hosts
        .iter()
        .map(|host| {
            let socket = host.agent.socket.clone();
            let barrier = barrier.clone();
            let req = VolumeClaimRequest {
                read_only,
                ..claim_req(volume, &format!("{}-r{round}", host.node))
            };
            thread::spawn(move || {
                let client = AgentClient::connect(&socket).map_err(|e| e.to_string())?;
                barrier.wait();
                client
                    .volume_claim(&req)
                    .map(|_| req.alloc_id.clone())
                    .map_err(|err| match err {
                        client::Error::Refused { message, .. } => message,
                        other => format!("not a refusal: {other}"),
                    })
            })
        })
        .collect();
    calls.into_iter().map(|c| c.join().unwrap()).collect()
}

pub fn claims_of(v: &VolumeStatus) -> Vec<(String, String, String)> {
    let mut claims: Vec<_> = v
        .claims
        .iter()
        .map(|c| (c.node.clone(), c.alloc_id.clone(), c.state.clone()))
        .collect();
    claims.sort();
    claims
}

#[test]
fn a_single_writer_volume_claimed_from_three_hosts_at_once_has_one_winner_every_round() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(3);
    let hosts = hosts(&cluster, 3, &[]);
    connect(&hosts[0].agent)
        .volume_create("v.hcl", &spec("v", &["single-node-writer"], None))
        .unwrap();
    known_everywhere(&hosts, "v");
    for round in 0..100 {
        let answers = claim_at_once(&hosts, "v", round, false);
        let winners: Vec<(usize, &String)> = answers
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.as_ref().ok().map(|alloc| (i, alloc)))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {answers:?}");
        for refusal in answers.iter().filter_map(|a| a.as_ref().err()) {
            assert!(
                refusal.contains("is claimed on node host-"),
                "round {round}: {refusal}"
            );
        }
        let (winner, alloc) = winners[0];
        released(&hosts[winner].agent, "v", alloc);
    }
}

#[test]
fn readers_of_a_multi_node_reader_volume_all_win_and_every_host_sees_every_claim() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(3);
    let hosts = hosts(&cluster, 3, &["-no-attach"]);
    connect(&hosts[1].agent)
        .volume_create("r.hcl", &spec("r", &["multi-node-reader-only"], None))
        .unwrap();
    known_everywhere(&hosts, "r");
    let answers = claim_at_once(&hosts, "r", 0, true);
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    // Each host shows its own claim and the other two, with their nodes.
    for host in &hosts {
        let v = wait_volume(
            &host.agent,
            "r",
            "three claims",
            |v| v.claims.len() == 3,
            WAIT,
        );
        let claims = claims_of(&v);
        for (other, (node, alloc, state)) in hosts.iter().zip(&claims) {
            assert_eq!(node, &other.node, "{claims:?}");
            assert_eq!(alloc, &format!("{}-r0", other.node));
            let expected = if other.node == host.node {
                "taken"
            } else {
                "held"
            };
            assert_eq!(state, expected, "on {}: {claims:?}", host.node);
        }
    }
    let out = hosts[0].agent.cli(&["volume", "status", "r"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Node"), "{text}");
    assert!(text.contains("host-2-r0"), "{text}");
    for host in &hosts {
        released(&host.agent, "r", &format!("{}-r0", host.node));
    }
}

#[test]
fn a_volume_is_known_on_every_host_and_deregistered_from_any_once_unclaimed() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(3);
    let hosts = hosts(&cluster, 3, &[]);
    connect(&hosts[0].agent)
        .volume_create("d.hcl", &spec("d", &["single-node-writer"], None))
        .unwrap();
    known_everywhere(&hosts, "d");
    crate::volume_util::claimed(&hosts[2].agent, &claim_req("d", "w1"));
    // Host 1 sees host 2's claim, and will not deregister the volume.
    wait_volume(
        &hosts[1].agent,
        "d",
        "host-2's claim",
        |v| v.claims.iter().any(|c| c.node == "host-2"),
        WAIT,
    );
    let err = connect(&hosts[1].agent)
        .volume_deregister("d", false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("claimed on other nodes") && err.contains("alloc w1 on node host-2"),
        "{err}"
    );
    released(&hosts[2].agent, "d", "w1");
    wait_volume(
        &hosts[1].agent,
        "d",
        "no claims",
        |v| v.claims.is_empty(),
        WAIT,
    );
    connect(&hosts[1].agent)
        .volume_deregister("d", false)
        .unwrap();
    for host in &hosts {
        let deadline = std::time::Instant::now() + WAIT;
        while try_volume(&host.agent, "d").unwrap().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "{} still has volume d",
                host.node
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The attach calls in `plugin`'s trace: `(RPC, node)`.
fn attach_calls(plugin: &Plugin) -> Vec<(String, String)> {
    plugin
        .trace()
        .iter()
        .filter(|l| {
            l.starts_with("ControllerPublishVolume") || l.starts_with("ControllerUnpublishVolume")
        })
        .map(|l| {
            let rpc = l.split(' ').next().unwrap_or("").to_string();
            let node = l
                .split(' ')
                .find_map(|f| f.strip_prefix("node="))
                .unwrap_or("")
                .to_string();
            (rpc, node)
        })
        .collect()
}

#[test]
fn one_controller_leader_attaches_for_every_host_and_detaches_a_before_attaching_b() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(3);
    let hosts = hosts(&cluster, 3, &[]);
    connect(&hosts[0].agent)
        .volume_create("a.hcl", &spec("a", &["single-node-writer"], None))
        .unwrap();
    known_everywhere(&hosts, "a");
    crate::volume_util::claimed(&hosts[1].agent, &claim_req("a", "w1"));
    released(&hosts[1].agent, "a", "w1");
    crate::volume_util::claimed(&hosts[2].agent, &claim_req("a", "w2"));
    released(&hosts[2].agent, "a", "w2");
    // Exactly one plugin made the attach calls, for both hosts, in order.
    let calls: Vec<Vec<(String, String)>> = hosts.iter().map(|h| attach_calls(&h.plugin)).collect();
    let serving: Vec<&Vec<(String, String)>> = calls.iter().filter(|c| !c.is_empty()).collect();
    assert_eq!(serving.len(), 1, "attach calls by plugin: {calls:?}");
    let pair = |rpc: &str, node: &str| (rpc.to_string(), node.to_string());
    assert_eq!(
        serving[0],
        &vec![
            pair("ControllerPublishVolume", "host-1"),
            pair("ControllerUnpublishVolume", "host-1"),
            pair("ControllerPublishVolume", "host-2"),
            pair("ControllerUnpublishVolume", "host-2"),
        ]
    );
}

#[test]
fn an_agent_killed_mid_claim_keeps_its_one_claim_in_the_cluster_after_a_restart() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(3);
    let mut hosts = hosts(&cluster, 2, &[]);
    connect(&hosts[0].agent)
        .volume_create("k.hcl", &spec("k", &["single-node-writer"], None))
        .unwrap();
    known_everywhere(&hosts, "k");
    hosts[0]
        .plugin
        .set_faults("NodeStageVolume sleep=3s count=1\n");
    let socket = hosts[0].agent.socket.clone();
    let claiming = thread::spawn(move || {
        AgentClient::connect(&socket).and_then(|c| c.volume_claim(&claim_req("k", "k1")))
    });
    // Admitted by the cluster, and NodeStage on its way: kill the agent.
    wait_volume(
        &hosts[1].agent,
        "k",
        "host-0's claim",
        |v| v.claims.iter().any(|c| c.node == "host-0"),
        WAIT,
    );
    let deadline = std::time::Instant::now() + WAIT;
    while !hosts[0]
        .plugin
        .trace_methods()
        .iter()
        .any(|m| m == "NodeStageVolume")
    {
        assert!(std::time::Instant::now() < deadline, "no NodeStageVolume");
        thread::sleep(Duration::from_millis(20));
    }
    hosts[0].agent.sigkill();
    assert!(claiming.join().unwrap().is_err());
    // The plugin finishes the call the dead agent made before the new one
    // may ask again (one call in flight per volume).
    thread::sleep(Duration::from_millis(3500));
    hosts[0].agent.restart();
    // The claim goes on from its record, and the cluster holds it once.
    wait_volume(
        &hosts[0].agent,
        "k",
        "the claim taken",
        |v| {
            v.claims
                .iter()
                .any(|c| c.alloc_id == "k1" && c.state == "taken")
        },
        crate::volume_util::LONG,
    );
    let seen = wait_volume(
        &hosts[1].agent,
        "k",
        "host-0's claim",
        |v| !v.claims.is_empty(),
        WAIT,
    );
    assert_eq!(
        claims_of(&seen),
        vec![("host-0".into(), "k1".into(), "held".into())]
    );
    let err = crate::volume_util::claim(&hosts[1].agent, &claim_req("k", "k2")).unwrap_err();
    assert!(
        err.to_string()
            .contains("claimed on node host-0 by alloc k1"),
        "{err}"
    );
    // Released, the cluster forgets it, and the other host may claim.
    released(&hosts[0].agent, "k", "k1");
    crate::volume_util::claimed(&hosts[1].agent, &claim_req("k", "k2"));
    released(&hosts[1].agent, "k", "k2");
}

/// Two hosts: host 0 runs the whole plugin (its controller leads), host 1
/// only the plugin's node, as a node-only Nomad client does.
pub struct NodeOnly {
    pub full: Agent,
    pub node: Agent,
    pub owner: Plugin,
    pub node_only: Plugin,
}

impl NodeOnly {
    /// The two hosts, their plugins with `flags` besides their node IDs:
    /// `-shared` for volumes claimed from either host, none for volumes
    /// that live on one node.
    pub fn start(cluster: &Cluster, flags: &[&str]) -> NodeOnly {
        NodeOnly::start_with(cluster, flags, "")
    }

    /// [`NodeOnly::start`], with `extra` added to both agents' configs.
    pub fn start_with(cluster: &Cluster, flags: &[&str], extra: &str) -> NodeOnly {
        let owner = Plugin::start_with(&[], &[flags, &["-node-id", "host-0"]].concat());
        let node_only = Plugin::start_sharing(
            &owner,
            &[],
            &[flags, &["-mode", "node", "-node-id", "host-1"]].concat(),
        );
        let endpoints: Vec<String> = cluster.clients.iter().map(|e| format!("{e:?}")).collect();
        let config = |node: &str, plugin: &Plugin, kind: &str| {
            format!(
                "\nnode_name = {node:?}\n\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = {kind:?}\n}}\n\ncluster {{\n  etcd      = [{}]\n  lease_ttl = \"3s\"\n}}\n{extra}",
                plugin.socket.display().to_string(),
                endpoints.join(", ")
            )
        };
        let full = Agent::start_with_config(&config("host-0", &owner, "monolith"));
        let node = Agent::start_with_config(&config("host-1", &node_only, "node"));
        full.wait_for(PLUGIN, healthy, WAIT);
        node.wait_for(PLUGIN, healthy, WAIT);
        NodeOnly {
            full,
            node,
            owner,
            node_only,
        }
    }
}

#[test]
fn a_host_with_only_the_plugin_s_node_has_its_claims_attached_by_the_controller_leader_elsewhere() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(3);
    let NodeOnly {
        full,
        node,
        owner,
        node_only,
    } = NodeOnly::start(&cluster, &["-shared"]);
    connect(&full)
        .volume_create("n.hcl", &spec("n", &["single-node-writer"], None))
        .unwrap();
    wait_volume(&node, "n", "registered", |_| true, WAIT);
    node.wait_for_log("plugin hp's controller leads in the cluster", WAIT);

    // plugin status counts the cluster's instances: one controller (host
    // 0's monolith) and two nodes, from either host.
    for agent in [&full, &node] {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let status = AgentClient::connect(&agent.socket)
                .unwrap()
                .plugin_status(PLUGIN)
                .unwrap();
            let p = &status.plugins[0];
            let counts = (
                p.controllers_healthy,
                p.controllers_expected,
                p.nodes_healthy,
                p.nodes_expected,
            );
            if counts == (1, 1, 2, 2) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{status:#?}");
            thread::sleep(Duration::from_millis(100));
        }
    }
    let out = node.cli(&["plugin", "status"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(PLUGIN) && l.contains("1/1") && l.contains("2/2")),
        "{table}"
    );

    crate::volume_util::claimed(&node, &claim_req("n", "n1"));
    released(&node, "n", "n1");
    // The leader's controller attached the volume to host 1, then
    // detached it; the node plugin staged it in between.
    let pair = |rpc: &str, node: &str| (rpc.to_string(), node.to_string());
    assert_eq!(
        attach_calls(&owner),
        [
            pair("ControllerPublishVolume", "host-1"),
            pair("ControllerUnpublishVolume", "host-1")
        ]
    );
    let methods = node_only.trace_methods();
    assert!(
        methods.iter().any(|m| m == "NodeStageVolume")
            && methods.iter().any(|m| m == "NodeUnstageVolume"),
        "{methods:?}"
    );
    drop((full, node));
    drop(node_only);
}

#[test]
fn a_volume_deregistered_while_a_host_was_away_stays_deregistered_when_it_returns() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(3);
    let mut hosts = hosts(&cluster, 2, &[]);
    connect(&hosts[0].agent)
        .volume_create("gone.hcl", &spec("gone", &["single-node-writer"], None))
        .unwrap();
    known_everywhere(&hosts, "gone");
    assert_eq!(hosts[1].agent.sigterm(), 0);
    connect(&hosts[0].agent)
        .volume_deregister("gone", false)
        .unwrap();
    // Back, host 1 learns the deregistration instead of undoing it.
    hosts[1].agent.restart();
    hosts[1].agent.wait_for(PLUGIN, healthy, WAIT);
    hosts[1].agent.wait_for_log(
        "Volume gone was deregistered in the cluster while this agent was away",
        WAIT,
    );
    assert!(try_volume(&hosts[1].agent, "gone").unwrap().is_none());
    let record = cluster.client().get(b"/csi-agent/volumes/gone").unwrap();
    assert!(record.is_none(), "{record:?}");
    assert!(try_volume(&hosts[0].agent, "gone").unwrap().is_none());
}
