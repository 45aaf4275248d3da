//! The metric families the first scrape of `metrics.rs` does not drive,
//! each moved by the real thing it counts: a plugin whose fingerprint
//! fails and whose heartbeats fail, a task the OOM killer ends, a call
//! refused on a full data dir, and a cluster agent whose etcd goes away
//! (its requests timed, keep-alives failing, `connected` falling to 0 and
//! back).

use std::thread;
use std::time::{Duration, Instant};

use crate::cluster_agents::cluster_block;
use crate::durable::{big_spec, SmallFs, CANNOT_PERSIST};
use crate::etcd::{free_port, require_etcd, Cluster};
use crate::harness::{healthy, text, unhealthy, Agent, WAIT};
use crate::metrics::{plugin_block, rig_with_metrics, sample, scrape, telemetry, LOOPBACK};
use crate::util::{require_root, Plugin, TestDir};
use crate::volume_util::*;

/// Scrapes until `series` is there and `ok` with its value; the body.
#[track_caller]
fn scrape_until(port: u16, series: &str, ok: impl Fn(f64) -> bool) -> String {
    let start = Instant::now();
    loop {
        let body = scrape(port);
        if sample(&body, series).is_some_and(&ok) {
            return body;
        }
        assert!(
            start.elapsed() < WAIT * 2,
            "{series} never got there:\n{body}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

const HOG: &str = r#"
job "hog" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "x=a; while :; do x=$x$x; done"]
      }
      resources {
        memory = 16
      }
    }
  }
}
"#;

#[test]
fn a_failed_fingerprint_failed_heartbeats_and_an_oom_kill_are_counted() {
    if !require_root() {
        return;
    }
    let (mut rig, port) = rig_with_metrics();
    let labels = format!("{{plugin=\"{PLUGIN}\",type=\"monolith\"}}");
    let heartbeats = format!("csi_agent_plugin_heartbeat_failures_total{labels}");
    let fingerprints = format!("csi_agent_plugin_fingerprint_failures_total{labels}");
    // A family with labels has no series until it first moves.
    let before = scrape(port);
    assert_eq!(sample(&before, &heartbeats), None, "{before}");
    assert_eq!(sample(&before, &fingerprints), None, "{before}");

    // Down: heartbeats fail. Back with a broken NodeGetInfo: the
    // fingerprint fails until it is mended.
    rig.plugin.kill();
    rig.agent.wait_for(PLUGIN, unhealthy, WAIT);
    scrape_until(port, &heartbeats, |n| n >= 1.0);
    rig.plugin
        .set_faults("NodeGetInfo code=INTERNAL message=no node info today\n");
    rig.plugin.restart();
    scrape_until(port, &fingerprints, |n| n >= 1.0);
    rig.plugin.set_faults("");
    rig.agent.wait_for(PLUGIN, healthy, WAIT);

    let dir = TestDir::new();
    let job = dir.path.join("hog.hcl");
    std::fs::write(&job, HOG).unwrap();
    let out = rig.agent.cli(&["job", "run", job.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    scrape_until(
        port,
        "csi_agent_task_oom_kills_total{driver=\"raw_exec\"}",
        |n| n == 1.0,
    );
}

#[test]
fn a_call_refused_on_a_full_data_dir_is_counted() {
    if !require_root() {
        return;
    }
    let small = SmallFs::mount();
    let port = free_port(LOOPBACK);
    let plugin = Plugin::start();
    let config = plugin_block(&plugin.socket) + &telemetry(port);
    let agent = Agent::start_in_with_config(&small.path, &config);
    agent.wait_for(PLUGIN, healthy, WAIT);
    let refusals = "csi_agent_persist_refusals_total";
    // A counter with no labels has no sample until it first moves.
    assert_eq!(sample(&scrape(port), refusals), None);

    let filler = small.fill();
    // The first change cannot be written: held, and the agent knows.
    let first = spawn_call({
        let socket = agent.socket.clone();
        move || {
            csi_agent::api::client::AgentClient::connect(&socket)?
                .volume_create("v1.hcl", &big_spec("v1"))
        }
    });
    agent.wait_for_log(CANNOT_PERSIST, WAIT);
    // The next is refused at once, and counted.
    let spec = agent.dir.join("v2.hcl");
    std::fs::write(&spec, big_spec("v2")).unwrap();
    let out = agent.cli(&["volume", "create", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("cannot persist the state in"),
        "{}",
        text(&out)
    );
    assert_eq!(sample(&scrape(port), refusals), Some(1.0));

    filler.remove();
    first
        .recv_timeout(LONG)
        .expect("the held create is answered once space returns")
        .unwrap_or_else(|err| panic!("create: {err}"));
    assert_eq!(sample(&scrape(port), refusals), Some(1.0));
}

#[test]
fn a_cluster_agent_counts_its_etcd_requests_and_its_connection() {
    if !require_etcd() {
        return;
    }
    let mut cluster = Cluster::start(1);
    let port = free_port(LOOPBACK);
    let mut config = cluster_block(&cluster, "node-a");
    config.push_str(&telemetry(port));
    let agent = Agent::start_with_config(&config);
    let connected = "csi_agent_cluster_connected";
    let body = scrape_until(port, connected, |v| v == 1.0);
    let granted = "csi_agent_etcd_request_seconds_count{operation=\"LeaseGrant\",outcome=\"ok\"}";
    assert!(sample(&body, granted).is_some_and(|n| n >= 1.0), "{body}");
    let failures = "csi_agent_etcd_lease_keepalive_failures_total";
    assert_eq!(sample(&body, failures), None, "{body}");

    cluster.kill(0);
    agent.wait_for_log("Cluster: node node-a is disconnected", WAIT);
    let body = scrape_until(port, connected, |v| v == 0.0);
    assert!(sample(&body, failures).is_some_and(|n| n >= 1.0), "{body}");
    cluster.restart(0);
    scrape_until(port, connected, |v| v == 1.0);
}
