//! Where a volume lives: a volume carries the topologies it is accessible
//! from (CreateVolume's answer, `volume register`'s required topologies, a
//! volume plugin Create's `topology.KEY` options), and a claim on a node
//! whose plugin topology is in none of them is refused before any RPC, on
//! every path: `volume claim`, a job (not placed: `job run` and `job plan`
//! say why), a docker Mount through the volume plugin, and in a cluster.
//! The built-in hostpath plugin is node-local; with `-shared` on one base
//! dir, hosts claim its volumes in turn.

use std::path::PathBuf;

use csi_agent::proto::agent::VolumeStatus;

use crate::cluster_claims::hosts;
use crate::etcd::{require_etcd, Cluster};
use crate::harness::{healthy, text, Agent, WAIT};
use crate::util::{require_root, Plugin};
use crate::volume_plugin::{self, Docker, NAME};
use crate::volume_util::{
    claim_req, claimed, connect, protocol_methods, released, spec, unclaimed, volume, wait_volume,
    Rig, PLUGIN,
};

/// The hostpath plugin's topology key: the node a volume lives on.
const NODE_KEY: &str = "topology.hostpath.csi-agent/node";

/// The node ID of the plugins of the single-host tests (the harness's).
const NODE: &str = crate::util::NODE;

/// A spec of volume `id` whose `topology_request` requires `node`.
fn spec_on(id: &str, node: &str, external_id: Option<&str>) -> String {
    format!(
        "{}\ntopology_request {{\n  required {{\n    topology {{\n      segments = {{ {NODE_KEY:?} = {node:?} }}\n    }}\n  }}\n}}\n",
        spec(id, &["single-node-writer"], external_id)
    )
}

/// The segments of each of the volume's topologies.
fn topologies(v: &VolumeStatus) -> Vec<Vec<(String, String)>> {
    v.topologies
        .iter()
        .map(|t| {
            let mut segments: Vec<(String, String)> = t
                .segments
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            segments.sort();
            segments
        })
        .collect()
}

fn on(node: &str) -> Vec<Vec<(String, String)>> {
    vec![vec![(NODE_KEY.to_string(), node.to_string())]]
}

/// A job whose group claims volume `id`, its task a sleep.
fn job_claiming(name: &str, id: &str) -> String {
    format!(
        r#"job "{name}" {{
  group "g" {{
    volume "data" {{
      type            = "csi"
      source          = "{id}"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["60"]
      }}
    }}
  }}
}}
"#
    )
}

/// Runs `verb` (`run` or `plan`) of `job` on `agent`.
fn job_cli(agent: &Agent, verb: &str, name: &str, job: &str) -> std::process::Output {
    let path = agent.dir.join(&format!("{name}.hcl"));
    std::fs::write(&path, job).unwrap();
    agent.cli(&["job", verb, &path.display().to_string()])
}

#[test]
fn a_volume_registered_for_another_node_is_listed_but_never_claimed_here() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    // A real volume of the plugin, here; then the same volume registered
    // as if it lived on another node (Nomad's meaning of `register`'s
    // required topology).
    let here = rig.create("here", "single-node-writer");
    assert_eq!(topologies(&here), on(NODE), "{here:#?}");
    let registered = connect(&rig.agent)
        .volume_register(
            "far.hcl",
            &spec_on("far", "elsewhere", Some(&here.external_id)),
        )
        .unwrap();
    assert_eq!(topologies(&registered.volumes[0]), on("elsewhere"));
    let before = protocol_methods(&rig.plugin);

    // `volume claim`: refused at once, naming both topologies.
    let out = rig.agent.cli(&["volume", "claim", "-alloc", "a1", "far"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains(&format!(
            "volume \"far\" is not accessible from this node: the volume's topologies are {{{NODE_KEY}=elsewhere}}, the node's (plugin {PLUGIN:?}) is {{{NODE_KEY}={NODE}}}"
        )),
        "{said}"
    );

    // A job that needs it is not placed: `job plan` and `job run` say why.
    let job = job_claiming("far-job", "far");
    let plan = job_cli(&rig.agent, "plan", "far-job", &job);
    let run = job_cli(&rig.agent, "run", "far-job", &job);
    for out in [&plan, &run] {
        let said = text(out);
        assert!(
            said.contains("Constraint \"did not meet topology requirement\": 1 nodes excluded by filter (volume \"far\" is not accessible from this node")
                && said.contains("{topology.hostpath.csi-agent/node=elsewhere}")
                && said.contains(&format!("{{{NODE_KEY}={NODE}}}")),
            "{said}"
        );
    }
    let status = connect(&rig.agent)
        .job_status("far-job")
        .unwrap()
        .jobs
        .remove(0);
    assert!(status.allocs.is_empty(), "{status:#?}");

    // No RPC was made for any of them.
    assert_eq!(protocol_methods(&rig.plugin), before);

    // `volume status` shows where it lives, and so does its -json form.
    let shown = rig.agent.cli(&["volume", "status", "far"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("\nTopology\nTopology  Segments\n00        topology.hostpath.csi-agent/node=elsewhere\n"),
        "{shown}"
    );
    let json = rig.agent.cli(&["volume", "status", "-json", "far"]);
    let json = String::from_utf8_lossy(&json.stdout);
    assert!(
        json.contains("\"topologies\"")
            && json.contains("\"topology.hostpath.csi-agent/node\": \"elsewhere\""),
        "{json}"
    );

    // Still listed, and deregistered as any other; the volume here is
    // claimed as ever.
    let list = rig.agent.cli(&["volume", "status"]);
    assert!(String::from_utf8_lossy(&list.stdout).contains("far"));
    connect(&rig.agent).volume_deregister("far", false).unwrap();
    claimed(&rig.agent, &claim_req("here", "a2"));
    released(&rig.agent, "here", "a2");
    connect(&rig.agent).job_stop("far-job", true).unwrap();
    rig.assert_nothing_left();
}

#[test]
fn each_per_alloc_instance_is_placed_where_its_own_volume_is() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    // Instance 0's volume lives here, instance 1's elsewhere.
    let here = rig.create("w[0]", "single-node-writer");
    connect(&rig.agent)
        .volume_register(
            "w1.hcl",
            &spec_on("w[1]", "elsewhere", Some(&here.external_id)),
        )
        .unwrap();
    let job = job_claiming("each", "w")
        .replace("group \"g\" {", "group \"g\" {\n    count = 2")
        .replace(
            "source          = \"w\"",
            "source          = \"w\"\n      per_alloc       = true",
        );
    let run = job_cli(&rig.agent, "run", "each", &job);
    let said = text(&run);
    assert!(
        said.contains("Task Group \"g\" (failed to place 1 allocation)")
            && said.contains("(volume \"w[1]\" is not accessible from this node"),
        "{said}"
    );
    // Instance 0 runs on its volume; instance 1 alone is unplaced.
    let start = std::time::Instant::now();
    let status = loop {
        let status = connect(&rig.agent)
            .job_status("each")
            .unwrap()
            .jobs
            .remove(0);
        if status.allocs.iter().any(|a| a.status == "running") || start.elapsed() > WAIT {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let instances: Vec<(u64, &str)> = status
        .allocs
        .iter()
        .map(|a| (a.index, a.status.as_str()))
        .collect();
    assert_eq!(instances, vec![(0, "running")], "{status:#?}");
    let unplaced: Vec<(&str, u64)> = status
        .unplaced
        .iter()
        .map(|u| (u.group.as_str(), u.count))
        .collect();
    assert_eq!(unplaced, vec![("g", 1)], "{status:#?}");
    assert!(rig.staging_path("w[0]").exists());

    connect(&rig.agent).job_stop("each", true).unwrap();
    wait_volume(
        &rig.agent,
        "w[0]",
        "released and unstaged",
        |v| unclaimed(v) && v.stagings.is_empty(),
        WAIT,
    );
    connect(&rig.agent)
        .volume_deregister("w[1]", false)
        .unwrap();
    rig.assert_nothing_left();
}

#[test]
fn the_node_s_topology_per_plugin_is_in_plugin_status_and_node_status() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let out = rig.agent.cli(&["node", "status"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.lines().any(|l| l.starts_with(PLUGIN)
            && l.contains(NODE)
            && l.contains("healthy")
            && l.ends_with(&format!("{{{NODE_KEY}={NODE}}}"))),
        "{}",
        text(&out)
    );
    let out = rig.agent.cli(&["plugin", "status", PLUGIN]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains(&format!("{NODE_KEY}={NODE}")), "{shown}");
}

/// One host of a cluster whose hostpath plugin is its own (node-local,
/// `-no-attach` as local storage is), with a volume plugin endpoint.
struct Host {
    agent: Agent,
    plugin: Plugin,
    socket: PathBuf,
}

/// Two hosts, `host-a` and `host-b`, sharing `cluster`.
fn node_local_hosts(cluster: &Cluster) -> Vec<Host> {
    let endpoints: Vec<String> = cluster.clients.iter().map(|e| format!("{e:?}")).collect();
    ["host-a", "host-b"]
        .into_iter()
        .map(|node| {
            let plugin = Plugin::start_with(&[], &["-no-attach", "-node-id", node]);
            let socket = plugin.dir.join("docker-plugins").join(format!("{NAME}.sock"));
            let mut config = format!(
                "\nnode_name = {node:?}\n\ncluster {{\n  etcd      = [{}]\n  lease_ttl = \"3s\"\n}}\n",
                endpoints.join(", ")
            );
            config.push_str(&volume_plugin::config(&plugin, &socket, ""));
            let agent = Agent::start_with_config(&config);
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
fn a_node_local_volume_is_claimed_where_it_lives_and_refused_elsewhere_on_every_path() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let hosts = node_local_hosts(&cluster);
    let (a, b) = (&hosts[0], &hosts[1]);

    // Made through host A, by A's controller: it lives on A.
    let made = connect(&a.agent)
        .volume_create("v.hcl", &spec("v", &["single-node-writer"], None))
        .unwrap();
    assert_eq!(topologies(&made.volumes[0]), on("host-a"));
    // A docker volume made for host A, through host A's volume plugin.
    Docker::dockerd(&a.socket)
        .create(
            "web",
            &[("topology.topology.hostpath.csi-agent/node", "host-a")],
        )
        .ok();
    for id in ["v", "web"] {
        let known = wait_volume(
            &b.agent,
            id,
            "known on B",
            |v| !v.topologies.is_empty(),
            WAIT,
        );
        assert_eq!(topologies(&known), on("host-a"), "{known:#?}");
    }
    // Docker's inspect shows where it lives, from either host.
    let got = Docker::dockerd(&b.socket).named("Get", "web").ok();
    let inspected = json::to_string(&got.body);
    assert!(
        inspected.contains(r#""topologies":[{"topology.hostpath.csi-agent/node":"host-a"}]"#),
        "{inspected}"
    );

    // Claimed on A, where it lives.
    claimed(&a.agent, &claim_req("v", "on-a"));
    released(&a.agent, "v", "on-a");

    // Refused on B, on every path, naming both topologies.
    let both = |said: &str| {
        said.contains("{topology.hostpath.csi-agent/node=host-a}")
            && said.contains("{topology.hostpath.csi-agent/node=host-b}")
    };
    let out = b.agent.cli(&["volume", "claim", "-alloc", "on-b", "v"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(both(&text(&out)), "{}", text(&out));
    let run = job_cli(&b.agent, "run", "j", &job_claiming("j", "v"));
    assert!(
        text(&run).contains("did not meet topology requirement") && both(&text(&run)),
        "{}",
        text(&run)
    );
    let message = Docker::dockerd(&b.socket)
        .with_id("Mount", "web", "cb")
        .failed();
    assert!(both(&message), "{message}");

    // B's plugin was never called for them; A's volume is still there.
    assert_eq!(protocol_methods(&b.plugin), Vec::<String>::new());
    let v = volume(&a.agent, "v");
    assert!(v.claims.is_empty() && v.past_claims.is_empty(), "{v:#?}");
    let on_a = Docker::dockerd(&a.socket).mount("web", "ca");
    assert!(on_a.is_dir());
    Docker::dockerd(&a.socket).unmount("web", "ca");
    connect(&b.agent).job_stop("j", true).unwrap();
}

#[test]
fn hosts_sharing_a_base_dir_with_shared_claim_its_volume_in_turn() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let hosts = hosts(&cluster, 2, &[]);
    let made = connect(&hosts[0].agent)
        .volume_create("s.hcl", &spec("s", &["single-node-writer"], None))
        .unwrap();
    let shared = topologies(&made.volumes[0]);
    assert_eq!(shared.len(), 1, "{made:#?}");
    assert_eq!(shared[0][0].0, "topology.hostpath.csi-agent/storage");
    wait_volume(&hosts[1].agent, "s", "known", |_| true, WAIT);
    for host in &hosts {
        claimed(&host.agent, &claim_req("s", &host.node));
        released(&host.agent, "s", &host.node);
    }
}

#[test]
fn topologies_past_their_bounds_are_refused_naming_the_bound() {
    if !require_root() {
        return;
    }
    // A spec's: seventeen segments in one required topology.
    let rig = Rig::start();
    let segments: Vec<String> = (0..17).map(|i| format!("\"k{i}\" = \"v\"")).collect();
    let hcl = format!(
        "{}\ntopology_request {{\n  required {{\n    topology {{\n      segments = {{ {} }}\n    }}\n  }}\n}}\n",
        spec("wide", &["single-node-writer"], Some("x")),
        segments.join(", ")
    );
    let err = connect(&rig.agent)
        .volume_register("wide.hcl", &hcl)
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "wide.hcl: topology_request.required: a topology has 17 segments, more than 16"
        ),
        "{err}"
    );
    assert!(crate::volume_util::try_volume(&rig.agent, "wide")
        .unwrap()
        .is_none());

    // A plugin's: NodeGetInfo answering a topology value of 300 bytes (the
    // hostpath plugin's value is its node ID). Its fingerprint fails, as
    // for any invalid answer; the agent goes on answering.
    let long = "n".repeat(200);
    let plugin = Plugin::start_with(&[], &["-node-id", &long]);
    let agent = Agent::start_with_config(&format!(
        "\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = \"monolith\"\n  health_timeout = \"1s\"\n}}\n",
        plugin.socket.display().to_string()
    ));
    agent.wait_for_log(
        "accessible_topology: a topology segment's value is 200 bytes long, more than 128",
        WAIT,
    );
    let status = connect(&agent).plugin_status(PLUGIN).unwrap();
    assert_ne!(
        status.plugins[0].health.enum_value(),
        Ok(csi_agent::proto::agent::Health::HEALTHY),
        "{status:#?}"
    );
    drop(agent);

    // Long before its health timeout, a pending plugin whose fingerprint
    // is refused is told of once in the log, and `plugin status` says
    // why it is not healthy yet: it is up, and wrong.
    let agent = Agent::start_with_config(&format!(
        "\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = \"monolith\"\n  health_timeout = \"10m\"\n}}\n",
        plugin.socket.display().to_string()
    ));
    let bound = "a topology segment's value is 200 bytes long, more than 128";
    agent.wait_for_log(bound, WAIT);
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        let status = connect(&agent).plugin_status(PLUGIN).unwrap();
        if status.plugins[0]
            .instances
            .iter()
            .any(|i| i.health_reason.contains(bound))
        {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "{status:#?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(
        status.plugins[0].health.enum_value(),
        Ok(csi_agent::proto::agent::Health::PENDING),
        "{status:#?}"
    );
    // The probes go on (every few hundred ms at first); the line does not.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(agent.log().matches(bound).count(), 1, "{}", agent.log());
    drop(agent);
}
