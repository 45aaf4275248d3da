//! A plugin split into a controller process and a node process under one
//! plugin ID, as AWS EBS, democratic-csi and most cloud drivers run: two
//! real hostpath processes (`-mode controller`, `-mode node`, strict, one
//! base dir) configured as two `plugin` blocks of one ID. The agent counts
//! them as Nomad does, sends each RPC to the process that serves its
//! service, and holds back what needs an instance that is not healthy.

use std::fs;
use std::path::Path;

use csi_agent::proto::agent::PluginStatus;

use crate::harness::{agent_refusing, one_line_failure, text, Agent, HEARTBEAT, WAIT};
use crate::util::{mounts_under, require_root, Plugin, TestDir};
use crate::volume_util::{
    assert_no_dirs_left, assert_nothing_mounted, assert_spec_order, claim_req, claimed, connect,
    count, protocol_methods, release, spec, unclaimed, volume, wait_for_calls, wait_volume, LONG,
    PLUGIN,
};

/// Every call of the plugins at debug level, so their logs show refusals.
const PLUGIN_LOG: (&str, &str) = ("RUST_LOG", "csi_agent=debug");

const MNMW: &str = "multi-node-multi-writer";

/// An agent config with plugin [`PLUGIN`] as a controller block and a
/// node block.
fn split_config(data_dir: &Path, controller: &Path, node: &Path) -> String {
    format!(
        "data_dir         = {:?}\nplugin_heartbeat = {HEARTBEAT:?}\n\n\
         plugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = \"controller\"\n}}\n\n\
         plugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = \"node\"\n}}\n",
        data_dir.display().to_string(),
        controller.display().to_string(),
        node.display().to_string(),
    )
}

/// A split plugin's two processes and an agent that uses them as plugin
/// [`PLUGIN`]. Dropped agent first, so nothing calls the plugin while it
/// goes, then the node, whose base dir is the controller's; each process
/// checks the (shared) strict verdict when dropped.
struct Split {
    agent: Agent,
    node: Plugin,
    controller: Plugin,
}

fn counts(s: &PluginStatus) -> [u32; 4] {
    [
        s.controllers_healthy,
        s.controllers_expected,
        s.nodes_healthy,
        s.nodes_expected,
    ]
}

impl Split {
    fn start() -> Split {
        let controller = Plugin::start_with(&[PLUGIN_LOG], &["-mode", "controller"]);
        let node = Plugin::start_sharing(&controller, &[PLUGIN_LOG], &["-mode", "node"]);
        let agent = Agent::start(&[]);
        agent.write_config(&split_config(
            &agent.data_dir,
            &controller.socket,
            &node.socket,
        ));
        agent.sighup();
        agent.wait_for_status(PLUGIN, |s| counts(s) == [1, 1, 1, 1], WAIT);
        Split {
            agent,
            node,
            controller,
        }
    }

    /// Creates volume `id` through the agent with one file-system
    /// capability of `access_mode`.
    #[track_caller]
    fn create(&self, id: &str, access_mode: &str) {
        connect(&self.agent)
            .volume_create(&format!("{id}.hcl"), &spec(id, &[access_mode], None))
            .unwrap_or_else(|err| panic!("volume create {id}: {err}"));
    }

    /// The `plugin status` table's row of [`PLUGIN`], in words.
    #[track_caller]
    fn table_row(&self) -> Vec<String> {
        let out = self.agent.cli(&["plugin", "status"]);
        assert!(out.status.success(), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let row = stdout.lines().nth(1).unwrap_or_default();
        row.split_whitespace().map(str::to_string).collect()
    }
}

#[test]
fn plugin_status_counts_one_controller_and_one_node_and_lists_both_instances() {
    let rig = Split::start();
    assert_eq!(
        rig.table_row(),
        [
            PLUGIN,
            "hostpath.csi-agent",
            env!("CARGO_PKG_VERSION"),
            "controller+node",
            "1/1",
            "1/1",
            "healthy"
        ]
    );
    let out = rig.agent.cli(&["plugin", "status", PLUGIN]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in [
        "Controllers Healthy  = 1\n",
        "Controllers Expected = 1\n",
        "Nodes Healthy        = 1\n",
        "Nodes Expected       = 1\n",
        "\nController Instance\nType",
        "\nNode Instance\nType",
    ] {
        assert!(stdout.contains(line), "{line:?}: {stdout}");
    }
    for socket in [&rig.controller.socket, &rig.node.socket] {
        assert!(stdout.contains(&socket.display().to_string()), "{stdout}");
    }
    let out = rig.agent.cli(&["plugin", "status", "-json", PLUGIN]);
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(json.contains("\"controllers_expected\": 1"), "{json}");
    assert!(json.contains("\"type\": \"controller\""), "{json}");
    assert!(json.contains("\"type\": \"node\""), "{json}");
}

#[test]
fn each_rpc_of_a_claim_goes_to_the_process_that_serves_its_service() {
    if !require_root() {
        return;
    }
    let rig = Split::start();
    rig.create("v", MNMW);
    assert_eq!(count(&rig.controller, "CreateVolume"), 1);
    assert_eq!(count(&rig.node, "CreateVolume"), 0);

    let taken = claimed(&rig.agent, &claim_req("v", "a1"));
    fs::write(Path::new(&taken.publish_path).join("hello.txt"), "hello").unwrap();
    assert_eq!(
        fs::read_to_string(rig.controller.base.join("volumes/v/hello.txt")).unwrap(),
        "hello"
    );
    let (released, message) = release(&rig.agent, "v", "a1");
    assert!(released, "{message}");
    wait_volume(&rig.agent, "v", "no claims", unclaimed, WAIT);
    connect(&rig.agent).volume_delete("v").unwrap();

    // The spec's order, each half on its own process; strict mode checked
    // the order across them (the node's publish context, the controller's
    // detach after the node's unstage).
    assert_eq!(
        protocol_methods(&rig.controller),
        ["ControllerPublishVolume", "ControllerUnpublishVolume"]
    );
    assert_eq!(
        protocol_methods(&rig.node),
        [
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ]
    );
    assert_eq!(count(&rig.controller, "DeleteVolume"), 1);
    for method in ["NodeGetInfo", "NodeGetCapabilities"] {
        assert_eq!(count(&rig.controller, method), 0, "{method}");
    }
    assert_eq!(count(&rig.node, "ControllerGetCapabilities"), 0);
    assert_spec_order(&rig.controller);
    assert_spec_order(&rig.node);
    assert_nothing_mounted(&rig.agent.dir.path);
    assert_no_dirs_left(&rig.agent.data_dir.join("csi"));
}

#[test]
fn without_its_controller_a_split_plugin_refuses_claims_that_need_attaching_until_it_returns() {
    if !require_root() {
        return;
    }
    let mut rig = Split::start();
    rig.create("attached", MNMW);
    rig.create("detached", MNMW);
    claimed(&rig.agent, &claim_req("attached", "a1"));

    rig.controller.kill();
    let status = rig
        .agent
        .wait_for_status(PLUGIN, |s| counts(s) == [0, 1, 1, 1], WAIT);
    assert!(
        crate::harness::unhealthy(&status.instances[0]),
        "{status:#?}"
    );
    assert_eq!(status.instances[0].type_, "controller");
    assert_eq!(rig.table_row()[4..6], ["0/1", "1/1"]);

    // A volume not attached yet needs ControllerPublishVolume: refused.
    assert!(!volume(&rig.agent, "detached").schedulable);
    let out = rig
        .agent
        .cli(&["volume", "claim", "-alloc", "a2", "detached"]);
    assert_eq!(
        one_line_failure(&out),
        format!(
            "error: volume \"detached\" is not schedulable: plugin {PLUGIN:?} has no healthy controller, which attaches its volumes (ControllerPublishVolume)"
        )
    );
    // One already attached to this node needs only the node.
    assert!(volume(&rig.agent, "attached").schedulable);
    claimed(&rig.agent, &claim_req("attached", "a2"));
    let (released, message) = release(&rig.agent, "attached", "a2");
    assert!(released, "{message}");

    // The last release gets as far as the node can take it, and says what
    // it waits for.
    let (released, message) = release(&rig.agent, "attached", "a1");
    assert!(!released);
    assert_eq!(
        message,
        format!("ControllerUnpublishVolume waits: plugin {PLUGIN:?} has no healthy controller (the agent goes on once it is healthy)")
    );
    assert_eq!(count(&rig.node, "NodeUnstageVolume"), 1);
    assert_nothing_mounted(&rig.agent.dir.path);
    let past = volume(&rig.agent, "attached").past_claims;
    assert_eq!(past.len(), 1, "{past:#?}");
    assert_eq!(past[0].state, "node-detached");
    assert!(
        past[0].last_error.contains("has no healthy controller"),
        "{past:#?}"
    );

    // The controller returns: the release finishes, and the other volume
    // can be claimed again.
    rig.controller.restart();
    rig.agent
        .wait_for_status(PLUGIN, |s| counts(s) == [1, 1, 1, 1], WAIT);
    wait_volume(&rig.agent, "attached", "no claims", unclaimed, LONG);
    wait_for_calls(&rig.controller, "ControllerUnpublishVolume", 1);
    claimed(&rig.agent, &claim_req("detached", "a3"));
    let (released, message) = release(&rig.agent, "detached", "a3");
    assert!(released, "{message}");
    assert_spec_order(&rig.node);
    assert_eq!(
        mounts_under(&rig.agent.dir.path),
        Vec::<std::path::PathBuf>::new()
    );
}

#[test]
fn expansion_runs_the_controller_s_half_then_the_node_s() {
    if !require_root() {
        return;
    }
    let rig = Split::start();
    let hcl = |capacity: &str| format!("{}capacity_min = {capacity:?}\n", spec("v", &[MNMW], None));
    connect(&rig.agent)
        .volume_create("v.hcl", &hcl("1MiB"))
        .unwrap_or_else(|err| panic!("{err}"));
    claimed(&rig.agent, &claim_req("v", "a1"));
    rig.controller
        .set_faults("ControllerExpandVolume node-expansion-required\n");
    let resp = connect(&rig.agent)
        .volume_create("v.hcl", &hcl("2MiB"))
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(resp.volumes[0].capacity_bytes, 2 << 20);
    assert_eq!(count(&rig.controller, "ControllerExpandVolume"), 1);
    assert_eq!(count(&rig.node, "NodeExpandVolume"), 1);
    assert_eq!(count(&rig.controller, "NodeExpandVolume"), 0);
    let (released, message) = release(&rig.agent, "v", "a1");
    assert!(released, "{message}");
}

#[test]
fn a_node_only_plugin_refuses_volume_create_and_suggests_register() {
    if !require_root() {
        return;
    }
    let node = Plugin::start_with(&[PLUGIN_LOG], &["-mode", "node", "-no-attach"]);
    let agent = Agent::start(&[]);
    agent.write_config(&format!(
        "data_dir = {:?}\nplugin_heartbeat = {HEARTBEAT:?}\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type = \"node\"\n}}\n",
        agent.data_dir.display().to_string(),
        node.socket.display().to_string()
    ));
    agent.sighup();
    let status = agent.wait_for_status(PLUGIN, |s| counts(s) == [0, 0, 1, 1], WAIT);
    assert_eq!(status.instances.len(), 1);

    let dir = TestDir::new();
    let file = dir.join("v.hcl");
    fs::write(&file, spec("v", &[MNMW], None)).unwrap();
    let out = agent.cli(&["volume", "create", &file.display().to_string()]);
    assert_eq!(
        one_line_failure(&out),
        format!("error: plugin {PLUGIN:?} has no controller: volume create needs one to create the volume; register an existing volume with `volume register`")
    );
    assert_eq!(count(&node, "CreateVolume"), 0);

    // An existing volume is registered as written: there is no controller
    // to validate it with.
    let registered = connect(&agent)
        .volume_register("v.hcl", &spec("v", &[MNMW], Some("v")))
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(registered.volumes[0].id, "v");
    assert_eq!(count(&node, "ValidateVolumeCapabilities"), 0);
}

#[test]
fn a_config_with_one_plugin_id_and_type_twice_is_refused_naming_the_line() {
    let dir = TestDir::new();
    let config = dir.join("agent.hcl");
    fs::write(
        &config,
        format!(
            "data_dir = {:?}\n\nplugin \"ebs\" {{\n  socket = \"/run/csi/a.sock\"\n  type   = \"node\"\n}}\n\nplugin \"ebs\" {{\n  socket = \"/run/csi/b.sock\"\n  type   = \"node\"\n}}\n",
            dir.join("data").display().to_string()
        ),
    )
    .unwrap();
    let out = agent_refusing(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:8:8: plugin \"ebs\" of type \"node\" is declared twice (first at 3:8)",
            config.display()
        )),
        "{}",
        text(&out)
    );
    assert!(
        !dir.join("data").exists(),
        "nothing started: {}",
        text(&out)
    );
}
