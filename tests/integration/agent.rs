//! The agent daemon as it runs: a real `csi-agent agent` process, real
//! hostpath plugin processes on real sockets, signals, the state snapshot,
//! the control socket's access checks, and `csi-agent plugin status`.
//!
//! No test asserts how fast anything happens: each waits, with a generous
//! limit, for the state it expects.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client;
use csi_agent::proto::agent::Health;
use csi_agent::proto::state::State;
use grpcio::RpcStatusCode;
use protobuf::Message;

use crate::harness::{
    block, changes, healthy, hostpath_processes_under, is_json, one_line_failure, output_within,
    pending, text, unhealthy, Agent, WAIT,
};
use crate::util::{bin, require_root, Plugin, TestDir, NODE};

/// The uid the access tests run the CLI as.
const NOBODY: u32 = 65534;

/// True if `uid` may execute `path`: every directory on the way can be
/// searched by "others" and the file can be executed by them.
fn others_may_execute(path: &Path) -> bool {
    let others_x = |p: &Path| {
        fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    };
    others_x(path) && path.ancestors().skip(1).all(others_x)
}

/// The `csi-agent` binary where uid 65534 may execute it: the one cargo
/// built, or a copy in `dir` when the target dir keeps others out.
fn binary_for_nobody(dir: &TestDir) -> PathBuf {
    let built = Path::new(bin());
    if others_may_execute(built) {
        return built.to_path_buf();
    }
    let copy = dir.mkdir("bin").join("csi-agent");
    fs::copy(built, &copy).unwrap();
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(dir.join("bin"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&dir.path, fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        others_may_execute(&copy),
        "uid {NOBODY} cannot execute {} either; check the modes on its path",
        copy.display()
    );
    copy
}

/// `csi-agent plugin status` against `agent`, run as uid and gid 65534.
fn plugin_status_as_nobody(agent: &Agent, binary: &Path) -> Output {
    output_within(
        Command::new(binary)
            .args(["plugin", "status"])
            .env(
                client::ADDRESS_ENV,
                format!("unix://{}", agent.socket.display()),
            )
            .env_remove("RUST_LOG")
            .current_dir("/")
            .gid(NOBODY)
            .uid(NOBODY),
        WAIT,
    )
}

/// Waits until `plugin` received a Probe (one that a `Probe hang` rule
/// holds).
#[track_caller]
fn wait_for_probe(plugin: &Plugin) {
    let start = Instant::now();
    while !plugin.trace_methods().iter().any(|m| m == "Probe") {
        assert!(start.elapsed() < WAIT, "the agent never probed the plugin");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_configured_plugin_turns_healthy_with_its_fingerprint() {
    let plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    let p = agent.wait_for("hp", healthy, WAIT);
    let fp = p
        .fingerprint
        .as_ref()
        .expect("a healthy plugin has a fingerprint");
    assert_eq!(fp.provider, "hostpath.csi-agent");
    assert_eq!(fp.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(fp.node_id, NODE);
    assert_eq!(p.socket, plugin.socket.display().to_string());
    assert_eq!(p.type_, "monolith");
    assert_eq!(p.source, "config");
    assert!(p.last_heartbeat_unix_ms > 0);
    assert_eq!(changes(&p), [(Health::PENDING, Health::HEALTHY)]);
}

#[test]
fn every_control_api_call_is_answered_when_the_loop_answers_at_once() {
    // A read is answered in the loop's turn, often before grpcio's
    // handler has returned; the answer must still reach the caller (the
    // call is kept until gRPC has sent it: one let go earlier is
    // cancelled). From four threads at once, as a CO's workers would ask.
    let plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    agent.wait_for("hp", healthy, WAIT);
    thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for i in 0..100 {
                    // A connection per call, as the CLI makes.
                    let client = client::AgentClient::connect(&agent.socket).unwrap();
                    let status = client.plugin_status("");
                    assert!(status.is_ok(), "call {i}: {status:?}");
                }
            });
        }
    });
}

/// The health changes of a plugin that turned healthy, then unhealthy,
/// then healthy again.
const DOWN_AND_UP: [(Health, Health); 3] = [
    (Health::PENDING, Health::HEALTHY),
    (Health::HEALTHY, Health::UNHEALTHY),
    (Health::UNHEALTHY, Health::HEALTHY),
];

/// How many of `plugin`'s calls so far were `rpc`.
fn count(plugin: &Plugin, rpc: &str) -> usize {
    plugin.trace_methods().iter().filter(|m| *m == rpc).count()
}

#[test]
fn a_heartbeat_is_a_probe_and_the_fingerprint_is_taken_again_after_a_failure_or_every_tenth() {
    let plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    agent.wait_for("hp", healthy, WAIT);
    // 25 heartbeats (200 ms each): the first fingerprint, and one every
    // tenth heartbeat after it.
    let start = std::time::Instant::now();
    while count(&plugin, "Probe") < 25 {
        assert!(start.elapsed() < WAIT, "{:?}", plugin.trace_methods());
        thread::sleep(Duration::from_millis(50));
    }
    let probes = count(&plugin, "Probe");
    let fingerprints = count(&plugin, "GetPluginInfo");
    assert!(
        (2..=1 + probes / 10).contains(&fingerprints),
        "{fingerprints} fingerprints in {probes} probes"
    );
    // A heartbeat that finds the plugin not ready: the next one that finds
    // it ready fingerprints it again, at once.
    // Right after a fingerprint, so that the every-tenth one is nine
    // heartbeats away and cannot fall next to the fault's.
    let start = std::time::Instant::now();
    while plugin.trace_methods().last().map(String::as_str) != Some("NodeGetCapabilities") {
        assert!(start.elapsed() < WAIT, "{:?}", plugin.trace_methods());
        thread::sleep(Duration::from_millis(5));
    }
    let seen = plugin.trace_methods().len();
    plugin.set_faults("Probe not-ready count=1\n");
    let start = std::time::Instant::now();
    loop {
        let after: Vec<String> = plugin.trace_methods().split_off(seen);
        if after.len() >= 3 {
            assert_eq!(after[..3], ["Probe", "Probe", "GetPluginInfo"], "{after:?}");
            break;
        }
        assert!(start.elapsed() < WAIT, "{after:?}");
        thread::sleep(Duration::from_millis(20));
    }
    let p = agent.wait_for("hp", healthy, WAIT);
    assert_eq!(changes(&p), DOWN_AND_UP);
}

#[test]
fn a_killed_plugin_turns_unhealthy_once_and_healthy_again_once_restarted() {
    let mut plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    agent.wait_for("hp", healthy, WAIT);

    plugin.kill();
    let p = agent.wait_for("hp", unhealthy, WAIT);
    assert_eq!(
        changes(&p),
        [
            (Health::PENDING, Health::HEALTHY),
            (Health::HEALTHY, Health::UNHEALTHY)
        ]
    );
    // The agent keeps probing the dead plugin (after 20 ms, 40 ms, 80 ms,
    // ...); half a second holds several failed probes, and none of them
    // may add an event.
    thread::sleep(Duration::from_millis(500));
    assert_eq!(agent.plugin("hp").events.len(), 2);

    plugin.restart();
    let p = agent.wait_for("hp", healthy, WAIT);
    assert_eq!(changes(&p), DOWN_AND_UP);
    // Two more heartbeats of the healthy plugin add no event either.
    let mut last = p.last_heartbeat_unix_ms;
    for _ in 0..2 {
        last = agent
            .wait_for("hp", |p| p.last_heartbeat_unix_ms > last, WAIT)
            .last_heartbeat_unix_ms;
    }
    assert_eq!(agent.plugin("hp").events.len(), 3);
}

#[test]
fn a_stopped_plugin_turns_unhealthy_and_healthy_again_when_its_socket_returns() {
    let mut plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    agent.wait_for("hp", healthy, WAIT);

    assert_eq!(plugin.stop(), Some(0));
    assert!(!plugin.socket.exists());
    let p = agent.wait_for("hp", unhealthy, WAIT);
    assert_eq!(
        changes(&p),
        [
            (Health::PENDING, Health::HEALTHY),
            (Health::HEALTHY, Health::UNHEALTHY)
        ],
        "a configured plugin stays registered"
    );

    plugin.restart();
    let p = agent.wait_for("hp", healthy, WAIT);
    assert_eq!(changes(&p), DOWN_AND_UP);
}

#[test]
fn a_plugin_started_after_the_agent_is_picked_up_when_its_socket_appears() {
    let sockets = TestDir::new();
    // Neither the socket nor its directory exists when the agent starts.
    let socket = sockets.join("later/csi.sock");
    let agent = Agent::start(&[block("hp", &socket)]);
    let p = agent.plugin("hp");
    assert!(pending(&p), "{p:#?}");

    sockets.mkdir("later");
    let _plugin = Plugin::start_at(&socket);
    let p = agent.wait_for("hp", healthy, WAIT);
    assert_eq!(changes(&p), [(Health::PENDING, Health::HEALTHY)]);
}

#[test]
fn a_plugin_not_ready_yet_stays_pending_then_turns_healthy() {
    let plugin = Plugin::start();
    plugin.set_faults("Probe not-ready count=5\n");
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    let p = agent.wait_for("hp", healthy, WAIT);
    // Only a ready Probe leads to a fingerprint, so the plugin was pending
    // through five not-ready answers, and never unhealthy.
    let probes = plugin
        .trace_methods()
        .iter()
        .filter(|m| *m == "Probe")
        .count();
    assert!(probes >= 6, "five not-ready probes, then a ready one");
    assert_eq!(
        changes(&p),
        [(Health::PENDING, Health::HEALTHY)],
        "not ready is not unhealthy"
    );
}

#[test]
fn a_plugin_not_ready_within_its_health_timeout_turns_unhealthy() {
    let plugin = Plugin::start();
    plugin.set_faults("Probe not-ready\n");
    let agent = Agent::start(&[block("hp", &plugin.socket).health_timeout("300ms")]);
    let p = agent.wait_for("hp", unhealthy, WAIT);
    assert_eq!(changes(&p), [(Health::PENDING, Health::UNHEALTHY)]);
    let reason = &p.events[0].reason;
    assert!(
        reason.contains("not healthy within 300ms"),
        "the event names the timeout: {reason:?}"
    );

    plugin.set_faults("");
    // Probing has backed off by now, up to 5 s between probes.
    let p = agent.wait_for("hp", healthy, WAIT);
    assert_eq!(
        changes(&p),
        [
            (Health::PENDING, Health::UNHEALTHY),
            (Health::UNHEALTHY, Health::HEALTHY)
        ]
    );
}

#[test]
fn sighup_after_removing_a_plugin_block_deregisters_it() {
    let one = Plugin::start();
    let two = Plugin::start();
    let agent = Agent::start(&[block("one", &one.socket), block("two", &two.socket)]);
    agent.wait_for("one", healthy, WAIT);
    agent.wait_for("two", healthy, WAIT);

    agent.rewrite_config(&[block("one", &one.socket)]);
    agent.sighup();
    let start = Instant::now();
    let err = loop {
        match agent.try_plugin("two") {
            Err(err) => break err,
            Ok(p) => assert!(
                start.elapsed() < WAIT,
                "still registered after SIGHUP: {p:#?}\n{}",
                agent.log()
            ),
        }
        thread::sleep(Duration::from_millis(10));
    };
    assert!(
        matches!(err, client::Error::Refused { code, .. } if code == RpcStatusCode::NOT_FOUND),
        "{err:?}"
    );
    let ids: Vec<String> = agent.status().into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["one"]);
    assert!(agent.log().contains("Plugin two deregistered"));
}

#[test]
fn sighup_after_adding_a_plugin_block_registers_it() {
    let one = Plugin::start();
    let two = Plugin::start();
    let agent = Agent::start(&[block("one", &one.socket)]);
    let before = agent.wait_for("one", healthy, WAIT);

    agent.rewrite_config(&[block("one", &one.socket), block("two", &two.socket)]);
    agent.sighup();
    let p = agent.wait_for("two", healthy, WAIT);
    assert_eq!(p.fingerprint.provider, "hostpath.csi-agent");
    let ids: Vec<String> = agent.status().into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["one", "two"]);
    let after = agent.plugin("one");
    assert_eq!(
        (after.registered_unix_ms, changes(&after)),
        (before.registered_unix_ms, changes(&before)),
        "an unchanged plugin is left alone"
    );
}

#[test]
fn sighup_with_a_changed_socket_moves_the_plugin_to_the_new_socket() {
    let one = Plugin::start();
    let two = Plugin::start();
    let agent = Agent::start(&[block("hp", &one.socket)]);
    agent.wait_for("hp", healthy, WAIT);

    agent.rewrite_config(&[block("hp", &two.socket)]);
    agent.sighup();
    let two_socket = two.socket.display().to_string();
    let p = agent.wait_for("hp", |p| p.socket == two_socket && healthy(p), WAIT);
    assert!(two.trace_methods().iter().any(|m| m == "Probe"));
    // Each event starts from the health the previous one ended in: a
    // subscriber that follows the events knows the health at every moment.
    let changes = changes(&p);
    for pair in changes.windows(2) {
        assert_eq!(
            pair[0].1, pair[1].0,
            "a health change without its event: {changes:?}"
        );
    }
}

#[test]
fn an_invalid_config_on_sighup_is_logged_and_changes_nothing() {
    let plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    let before = agent.wait_for("hp", healthy, WAIT);

    agent.write_config("plugin \"hp\" {\n  socket = 42\n");
    agent.sighup();
    agent.wait_for_log("SIGHUP: keeping the current config", WAIT);
    let line = agent
        .log()
        .lines()
        .find(|l| l.contains("SIGHUP: keeping the current config"))
        .unwrap()
        .to_string();
    assert!(line.contains(&agent.config.display().to_string()), "{line}");
    let after = agent.plugin("hp");
    assert!(healthy(&after), "{after:#?}");
    assert_eq!(
        (after.registered_unix_ms, changes(&after)),
        (before.registered_unix_ms, changes(&before))
    );
    assert_eq!(agent.status().len(), 1);
}

#[test]
fn sigterm_exits_0_and_leaves_a_snapshot_with_the_plugins_unhealthy() {
    let one = Plugin::start();
    let two = Plugin::start();
    let mut agent = Agent::start(&[block("one", &one.socket), block("two", &two.socket)]);
    agent.wait_for("one", healthy, WAIT);
    agent.wait_for("two", healthy, WAIT);

    assert_eq!(agent.sigterm(), 0, "{}", agent.log());
    assert!(!agent.socket.exists(), "control.sock is removed");
    let bytes = fs::read(agent.data_dir.join("state.pb")).unwrap();
    let state = State::parse_from_bytes(&bytes).unwrap();
    let ids: Vec<&str> = state.plugins.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["one", "two"]);
    for p in &saved_as_api(&state) {
        assert!(unhealthy(p), "{p:#?}");
        assert_eq!(
            changes(p).last(),
            Some(&(Health::HEALTHY, Health::UNHEALTHY)),
            "{p:#?}"
        );
        assert_eq!(p.fingerprint.provider, "hostpath.csi-agent");
    }
    assert!(one.socket.exists() && two.socket.exists(), "plugins run on");
}

#[test]
fn sigterm_with_a_hung_plugin_still_exits_0_with_the_plugin_unhealthy() {
    let hung = Plugin::start();
    hung.set_faults("Probe hang\n");
    let fine = Plugin::start();
    let mut agent = Agent::start(&[block("fine", &fine.socket), block("hung", &hung.socket)]);
    agent.wait_for("fine", healthy, WAIT);
    wait_for_probe(&hung);

    // The hung Probe holds its plugin thread until the Probe's 5 s
    // deadline; the agent would give up on the thread after 10 s anyway.
    assert_eq!(agent.sigterm(), 0, "{}", agent.log());
    let bytes = fs::read(agent.data_dir.join("state.pb")).unwrap();
    let state = State::parse_from_bytes(&bytes).unwrap();
    assert_eq!(state.plugins.len(), 2);
    for p in &saved_as_api(&state) {
        assert!(unhealthy(p), "{p:#?}");
    }
}

#[test]
fn a_second_signal_during_shutdown_exits_at_once_with_code_1() {
    let hung = Plugin::start();
    hung.set_faults("Probe hang\n");
    let mut agent = Agent::start(&[block("hung", &hung.socket)]);
    wait_for_probe(&hung);

    agent.signal(libc::SIGTERM);
    // The hung Probe holds the shutdown until its 5 s deadline: time
    // enough for a second signal.
    agent.wait_for_log("Stopping on signal", WAIT);
    agent.signal(libc::SIGINT);
    assert_eq!(agent.exit_code(), 1, "{}", agent.log());
    assert!(agent.log().contains("Second signal"));
    let bytes = fs::read(agent.data_dir.join("state.pb")).unwrap();
    let state = State::parse_from_bytes(&bytes).expect("the snapshot is whole");
    assert_eq!(state.plugins.len(), 1);
}

#[test]
fn a_restarted_agent_reattaches_to_its_plugins_from_the_snapshot() {
    let plugin = Plugin::start();
    let mut agent = Agent::start(&[block("hp", &plugin.socket)]);
    agent.wait_for("hp", healthy, WAIT);
    assert_eq!(agent.sigterm(), 0);
    let bytes = fs::read(agent.data_dir.join("state.pb")).unwrap();
    let saved = saved_as_api(&State::parse_from_bytes(&bytes).unwrap()).remove(0);

    agent.restart();
    // The first answer already has the plugin, with the record the
    // snapshot kept: registered then, with the events of the first run.
    let status = agent.status();
    assert_eq!(status.len(), 1);
    let p = &status[0];
    assert_eq!(p.registered_unix_ms, saved.registered_unix_ms);
    let saved_changes = changes(&saved);
    assert_eq!(changes(p)[..saved_changes.len()], saved_changes[..]);

    let p = agent.wait_for("hp", healthy, WAIT);
    assert_eq!(changes(&p), DOWN_AND_UP);
}

#[test]
fn an_agent_killed_with_sigkill_restarts_over_its_stale_socket() {
    let plugin = Plugin::start();
    let mut agent = Agent::start(&[block("hp", &plugin.socket)]);
    let before = agent.wait_for("hp", healthy, WAIT);

    agent.sigkill();
    assert!(agent.socket.exists(), "a killed agent leaves its socket");
    agent.restart();
    let p = agent.wait_for("hp", healthy, WAIT);
    assert_eq!(p.registered_unix_ms, before.registered_unix_ms);
    assert_eq!(
        changes(&p),
        [(Health::PENDING, Health::HEALTHY)],
        "the snapshot said healthy, and the plugin still is"
    );
}

#[test]
fn a_second_agent_on_the_same_data_dir_refuses_to_start() {
    let plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    agent.wait_for("hp", healthy, WAIT);

    let out = output_within(
        Command::new(bin())
            .args(agent.args())
            .env_remove("RUST_LOG"),
        WAIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already running"), "{}", text(&out));
    // The first agent is undisturbed.
    assert!(agent.socket.exists());
    assert!(healthy(&agent.plugin("hp")));
}

#[test]
fn a_non_root_peer_is_kept_out_by_the_socket_mode() {
    if !require_root() {
        return;
    }
    let bin_dir = TestDir::new();
    let binary = binary_for_nobody(&bin_dir);
    let agent = Agent::start(&[]);
    let mode = fs::metadata(&agent.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Let nobody through the directories, so that only the socket's own
    // mode keeps it out.
    fs::set_permissions(&agent.data_dir, fs::Permissions::from_mode(0o711)).unwrap();
    fs::set_permissions(&agent.dir.path, fs::Permissions::from_mode(0o711)).unwrap();

    let out = plugin_status_as_nobody(&agent, &binary);
    let line = one_line_failure(&out);
    assert!(line.contains("permission denied"), "{line}");
    assert!(agent.try_status().is_ok(), "root still gets in");
}

#[test]
fn a_non_root_peer_is_refused_by_its_credentials_when_the_socket_is_open() {
    if !require_root() {
        return;
    }
    let bin_dir = TestDir::new();
    let binary = binary_for_nobody(&bin_dir);
    let agent = Agent::start(&[]);
    fs::set_permissions(&agent.data_dir, fs::Permissions::from_mode(0o711)).unwrap();
    fs::set_permissions(&agent.dir.path, fs::Permissions::from_mode(0o711)).unwrap();
    fs::set_permissions(&agent.socket, fs::Permissions::from_mode(0o666)).unwrap();

    let out = plugin_status_as_nobody(&agent, &binary);
    let line = one_line_failure(&out);
    assert!(
        line.contains("for root and the agent's user only"),
        "{line}"
    );
    agent.wait_for_log(
        &format!("Refused a control API connection from uid {NOBODY}"),
        WAIT,
    );
    assert!(agent.try_status().is_ok(), "root still gets in");
}

#[test]
fn the_cli_says_in_one_line_that_no_agent_runs_without_a_socket() {
    let dir = TestDir::new();
    let socket = dir.join("control.sock");
    let out = output_within(
        Command::new(bin())
            .args(["plugin", "status"])
            .env(client::ADDRESS_ENV, format!("unix://{}", socket.display()))
            .env_remove("RUST_LOG"),
        WAIT,
    );
    let line = one_line_failure(&out);
    assert!(line.contains("the agent is not running"), "{line}");
    assert!(line.contains(&socket.display().to_string()), "{line}");
}

#[test]
fn the_cli_says_in_one_line_that_no_agent_runs_on_a_stale_socket() {
    let dir = TestDir::new();
    let socket = dir.join("control.sock");
    // A socket file nobody listens on, as a killed agent leaves behind.
    drop(UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let out = output_within(
        Command::new(bin())
            .args(["plugin", "status"])
            .env(client::ADDRESS_ENV, format!("unix://{}", socket.display()))
            .env_remove("RUST_LOG"),
        WAIT,
    );
    let line = one_line_failure(&out);
    assert!(line.contains("the agent is not running"), "{line}");
    assert!(line.contains(&socket.display().to_string()), "{line}");
}

#[test]
fn plugin_status_prints_a_table_of_plugins() {
    let plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    agent.wait_for("hp", healthy, WAIT);

    let out = agent.cli(&["plugin", "status"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for column in [
        "ID",
        "Provider",
        "Version",
        "Type",
        "Controllers Healthy/Expected",
        "Nodes Healthy/Expected",
    ] {
        assert!(lines[0].contains(column), "{column}: {stdout}");
    }
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row[..6],
        [
            "hp",
            "hostpath.csi-agent",
            env!("CARGO_PKG_VERSION"),
            "monolith",
            "1/1",
            "1/1"
        ],
        "{stdout}"
    );
}

#[test]
fn plugin_status_of_one_plugin_prints_every_field_and_its_events() {
    let plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    agent.wait_for("hp", healthy, WAIT);

    let out = agent.cli(&["plugin", "status", "hp"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (fields, events) = stdout
        .split_once("\nRecent Health Events\n")
        .unwrap_or_else(|| panic!("no events section: {stdout}"));
    let field = |key: &str| -> String {
        fields
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(" = ")?;
                (k.trim_end() == key).then(|| v.to_string())
            })
            .unwrap_or_else(|| panic!("no field {key:?}: {stdout}"))
    };
    assert_eq!(field("ID"), "hp");
    assert_eq!(field("Type"), "monolith");
    assert_eq!(field("Source"), "config");
    assert_eq!(field("Socket"), plugin.socket.display().to_string());
    assert!(field("Health").starts_with("healthy"), "{stdout}");
    assert_eq!(field("Provider"), "hostpath.csi-agent");
    assert_eq!(field("Version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field("Node ID"), NODE);
    assert_eq!(field("Max Volumes"), "unlimited");
    assert_eq!(
        field("Topology"),
        format!("{}={NODE}", csi_agent::hostpath::TOPOLOGY_KEY)
    );
    assert!(field("Plugin Capabilities").contains("controller-service"));
    assert!(field("Controller Capabilities").contains("create-delete-volume"));
    assert!(field("Node Capabilities").contains("stage-unstage-volume"));
    assert_ne!(field("Last Heartbeat"), "never");
    let events: Vec<Vec<&str>> = events
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(events[0][..4], ["Time", "From", "To", "Reason"], "{stdout}");
    assert_eq!(events.len(), 2, "{stdout}");
    assert!(
        events[1].windows(2).any(|w| w == ["pending", "healthy"]),
        "{stdout}"
    );
}

#[test]
fn plugin_status_of_an_unknown_plugin_names_the_registered_ones() {
    let plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);

    let out = agent.cli(&["plugin", "status", "nope"]);
    let line = one_line_failure(&out);
    assert!(line.starts_with("error: no plugin \"nope\""), "{line}");
    assert!(line.contains("registered: hp"), "{line}");
}

#[test]
fn plugin_status_json_is_one_document_derived_from_the_protobuf() {
    let plugin = Plugin::start();
    let agent = Agent::start(&[block("hp", &plugin.socket)]);
    agent.wait_for("hp", healthy, WAIT);

    let out = agent.cli(&["plugin", "status", "-json"]);
    assert!(out.status.success(), "{}", text(&out));
    let all = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(is_json(&all), "{all}");
    assert!(all.contains("\"plugins\": ["), "{all}");
    assert!(all.contains("\"health\": \"HEALTHY\""), "{all}");
    assert!(
        all.contains("\"provider\": \"hostpath.csi-agent\""),
        "{all}"
    );
    assert!(all.contains(&format!("\"node_id\": \"{NODE}\"")), "{all}");

    let out = agent.cli(&["plugin", "status", "-json", "hp"]);
    assert!(out.status.success(), "{}", text(&out));
    let one = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(is_json(&one), "{one}");
    assert!(one.trim_start().starts_with("{\n  \"id\": \"hp\""), "{one}");
    assert!(one.contains("\"health\": \"HEALTHY\""), "{one}");
    assert!(!one.contains("\"plugins\""), "{one}");
}

#[test]
fn agent_dev_runs_the_builtin_plugin_and_stops_it_on_sigterm() {
    let mut agent = Agent::start_dev();
    let p = agent.wait_for("hostpath", healthy, WAIT);
    assert_eq!(p.source, "dev");
    assert_eq!(p.fingerprint.provider, "hostpath.csi-agent");
    let socket = PathBuf::from(&p.socket);
    assert!(socket.starts_with(&agent.data_dir), "{}", socket.display());
    assert_eq!(
        hostpath_processes_under(&agent.data_dir).len(),
        1,
        "one dev plugin runs"
    );

    assert_eq!(agent.sigterm(), 0, "{}", agent.log());
    assert_eq!(
        hostpath_processes_under(&agent.data_dir),
        Vec::<u32>::new(),
        "the dev plugin stopped with the agent"
    );
    assert!(!socket.exists(), "the dev plugin's socket is gone");
    assert!(!agent.socket.exists(), "control.sock is gone");
}

#[test]
fn agent_dev_restarts_its_plugin_when_it_dies() {
    let agent = Agent::start_dev();
    agent.wait_for("hostpath", healthy, WAIT);
    let pids = hostpath_processes_under(&agent.data_dir);
    assert_eq!(pids.len(), 1);

    // SAFETY: kill has no memory-safety preconditions; the pid is the dev
    // plugin of our agent, found in /proc a moment ago, and only the agent
    // reaps it.
    unsafe { libc::kill(pids[0] as libc::pid_t, libc::SIGKILL) };
    // The agent sees the exit on its next tick and starts a new plugin half
    // a second later. The new one replaces the stale socket: the agent sees
    // it go (unhealthy, only for a moment) and come back (healthy).
    let p = agent.wait_for("hostpath", |p| healthy(p) && p.events.len() >= 3, WAIT);
    assert_eq!(changes(&p), DOWN_AND_UP);
    let now = hostpath_processes_under(&agent.data_dir);
    assert_eq!(now.len(), 1);
    assert_ne!(now, pids, "a new process");
}

#[test]
fn agent_dev_without_a_data_dir_removes_its_temporary_dir_on_exit() {
    let mut agent = Agent::start_dev_temporary();
    let p = agent.wait_for("hostpath", healthy, WAIT);
    let socket = PathBuf::from(&p.socket);
    assert!(socket.starts_with(&agent.data_dir), "{}", socket.display());
    let export = format!("export CSI_AGENT_ADDR=unix://{}", agent.socket.display());
    assert!(agent.log().contains(&export), "{}", agent.log());

    assert_eq!(agent.sigterm(), 0, "{}", agent.log());
    assert!(
        !agent.data_dir.exists(),
        "the temporary data dir is removed"
    );
    assert_eq!(hostpath_processes_under(&agent.data_dir), Vec::<u32>::new());
}

/// The snapshot's plugin records read as the control API's `Plugin`: the
/// state's message keeps the field numbers of the API's, which it was
/// until they parted, so a snapshot written then reads the same now.
fn saved_as_api(state: &State) -> Vec<csi_agent::proto::agent::Plugin> {
    state
        .plugins
        .iter()
        .map(|p| {
            let bytes = p.write_to_bytes().unwrap();
            csi_agent::proto::agent::Plugin::parse_from_bytes(&bytes).unwrap()
        })
        .collect()
}
