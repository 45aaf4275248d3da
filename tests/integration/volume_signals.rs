//! Usage, health and capacity as signals, with a real hostpath plugin on a
//! tmpfs of the test's own, a real agent polling it every 5 s (the
//! shortest `volume_stats_interval`) and its metrics scraped over
//! loopback: a claimed volume's gauges appear within one poll and move
//! when the volume fills; a volume whose directory goes missing turns
//! abnormal (event, gauge, `volume status`) and healthy again; a failing
//! NodeGetVolumeStats costs its poll and one log line; the plugin's
//! capacity is in `plugin status` and a gauge, and a volume larger than it
//! is refused before any CreateVolume. The alerting rules of
//! docs/metrics.md pass `promtool check rules` and `promtool test rules`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::etcd::free_port;
use crate::harness::{healthy, text, Agent, WAIT};
use crate::metrics::{have, plugin_block, sample, scrape, telemetry, LOOPBACK};
use crate::util::{require_root, Plugin, TestDir};
use crate::volume_util::*;

const SNW: &str = "single-node-writer";

/// Longer than two polls, their jitter and a loaded machine's turn.
const POLLS: Duration = Duration::from_secs(30);

/// A tmpfs of `size` made by the test for the plugin's base dir; unmounted
/// on drop, after whatever holds it.
struct Tmpfs {
    _dir: TestDir,
    path: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = TestDir::new();
        let path = dir.mkdir("base");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "signals-base"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tmpfs: {status}");
        Tmpfs { _dir: dir, path }
    }
}

/// A plugin on a 64 MiB tmpfs and an agent that polls it every 5 s and
/// serves its metrics on a loopback port. Dropped agent first, then the
/// plugin, then the file system (the test dir unmounts it).
struct SignalsRig {
    rig: Rig,
    port: u16,
    _fs: Tmpfs,
}

fn rig() -> SignalsRig {
    let fs = Tmpfs::mount("64m");
    let plugin = Plugin::start_on(&fs.path, &[("RUST_LOG", "csi_agent=debug")], &[]);
    let port = free_port(LOOPBACK);
    let config =
        plugin_block(&plugin.socket) + &telemetry(port) + "\nvolume_stats_interval = \"5s\"\n";
    let agent = Agent::start_with_config(&config);
    agent.wait_for(PLUGIN, healthy, WAIT);
    SignalsRig {
        rig: Rig { agent, plugin },
        port,
        _fs: fs,
    }
}

fn series(name: &str, volume: &str) -> String {
    format!("{name}{{volume=\"{volume}\",plugin=\"{PLUGIN}\"}}")
}

/// Scrapes until `ready` accepts the value of `series` (`None`: absent),
/// within `limit`; the last value.
#[track_caller]
fn wait_sample(
    port: u16,
    series: &str,
    limit: Duration,
    ready: impl Fn(Option<f64>) -> bool,
) -> Option<f64> {
    let start = Instant::now();
    loop {
        let value = sample(&scrape(port), series);
        if ready(value) {
            return value;
        }
        assert!(
            start.elapsed() < limit,
            "{series} is {value:?} after {limit:?}"
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// The plugin's directory of volume `id` (its external ID is its ID).
fn volume_dir(base: &Path, id: &str) -> PathBuf {
    base.join("volumes").join(id)
}

/// `events -topic volume -json` of the agent, as (type, key, message).
fn volume_events(agent: &Agent) -> Vec<(String, String, String)> {
    let out = agent.cli(&["events", "-topic", "volume", "-json"]);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let v = json::parse(line).unwrap();
            let s = |k: &str| v.get(k).and_then(json::Value::as_str).unwrap().to_string();
            (s("type"), s("key"), s("message"))
        })
        .collect()
}

#[test]
fn a_claimed_volume_s_usage_and_condition_are_gauges_events_and_status() {
    if !require_root() {
        return;
    }
    let s = rig();
    let (agent, port) = (&s.rig.agent, s.port);
    s.rig.create("vol", SNW);
    let taken = claimed(agent, &claim_req("vol", "a1"));

    // Within one poll of the claim.
    let used = series("csi_agent_volume_stats_used_bytes", "vol");
    let before = wait_sample(port, &used, POLLS, |v| v.is_some()).unwrap();
    let body = scrape(port);
    let capacity = sample(
        &body,
        &series("csi_agent_volume_stats_capacity_bytes", "vol"),
    );
    assert_eq!(
        capacity,
        Some((64 << 20) as f64),
        "the tmpfs' size:\n{body}"
    );
    for name in [
        "csi_agent_volume_stats_available_bytes",
        "csi_agent_volume_stats_inodes",
        "csi_agent_volume_stats_inodes_free",
        "csi_agent_volume_stats_inodes_used",
    ] {
        assert!(
            sample(&body, &series(name, "vol")).is_some(),
            "{name}:\n{body}"
        );
    }
    let abnormal = series("csi_agent_volume_stats_health_status_abnormal", "vol");
    assert_eq!(sample(&body, &abnormal), Some(0.0), "{body}");

    // Filling the volume moves the gauges at the next poll.
    let data = vec![7u8; 16 << 20];
    std::fs::write(Path::new(&taken.publish_path).join("fill"), &data).unwrap();
    let after = wait_sample(port, &used, POLLS, |v| {
        v.is_some_and(|v| v >= before + (16 << 20) as f64)
    });
    assert!(after.is_some());
    let available = sample(
        &scrape(port),
        &series("csi_agent_volume_stats_available_bytes", "vol"),
    )
    .unwrap();
    assert!(available <= (48 << 20) as f64, "available {available}");

    // The plugin's directory goes missing: abnormal at the next poll.
    let dir = volume_dir(&s._fs.path, "vol");
    let aside = s._fs.path.join("aside");
    std::fs::rename(&dir, &aside).unwrap();
    wait_sample(port, &abnormal, POLLS, |v| v == Some(1.0));
    let events = volume_events(agent);
    let unhealthy = events
        .iter()
        .find(|(kind, key, _)| kind == "VolumeUnhealthy" && key == "vol")
        .unwrap_or_else(|| panic!("no VolumeUnhealthy in {events:?}"));
    assert!(unhealthy.2.contains("is missing"), "{unhealthy:?}");
    let out = agent.cli(&["volume", "status", "vol"]);
    assert!(out.status.success(), "{}", text(&out));
    let status = text(&out);
    let health = status
        .lines()
        .find(|l| l.starts_with("Health "))
        .unwrap_or_else(|| panic!("no Health line in:\n{status}"));
    assert!(
        health.contains("= abnormal since ") && health.contains("is missing"),
        "{health}"
    );
    let json_out = agent.cli(&["volume", "status", "-json", "vol"]);
    assert!(
        text(&json_out).contains("\"abnormal\": true"),
        "{}",
        text(&json_out)
    );

    // Back: healthy again, once.
    std::fs::rename(&aside, &dir).unwrap();
    wait_sample(port, &abnormal, POLLS, |v| v == Some(0.0));
    let kinds: Vec<String> = volume_events(agent)
        .into_iter()
        .filter(|(kind, key, _)| key == "vol" && kind.starts_with("Volume"))
        .map(|(kind, _, _)| kind)
        .collect();
    assert_eq!(kinds, ["VolumeUnhealthy", "VolumeHealthy"]);
    let status = text(&agent.cli(&["volume", "status", "vol"]));
    assert!(status.contains("= normal since "), "{status}");

    // Released: its series go.
    released(agent, "vol", "a1");
    wait_sample(port, &used, POLLS, |v| v.is_none());
    assert_eq!(sample(&scrape(port), &abnormal), None);
    let polls = format!("csi_agent_volume_stats_polls_total{{plugin=\"{PLUGIN}\",outcome=\"ok\"}}");
    assert!(sample(&scrape(port), &polls).is_some_and(|n| n >= 3.0));
}

#[test]
fn a_failing_stats_call_costs_its_poll_and_one_log_line() {
    if !require_root() {
        return;
    }
    let s = rig();
    let (agent, port) = (&s.rig.agent, s.port);
    s.rig.create("vol", SNW);
    claimed(agent, &claim_req("vol", "a1"));
    let used = series("csi_agent_volume_stats_used_bytes", "vol");
    let last = wait_sample(port, &used, POLLS, |v| v.is_some());
    s.rig
        .plugin
        .set_faults("NodeGetVolumeStats code=INTERNAL message=stats are broken\n");
    let errors =
        format!("csi_agent_volume_stats_polls_total{{plugin=\"{PLUGIN}\",outcome=\"error\"}}");
    wait_sample(port, &errors, POLLS, |v| v.is_some_and(|n| n >= 2.0));
    // The gauges keep the last answer; the failure is logged once.
    assert_eq!(sample(&scrape(port), &used), last);
    let log = agent.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("stats are broken") && !l.contains(" DEBUG "))
        .collect();
    assert_eq!(lines.len(), 1, "logged {} times: {lines:#?}", lines.len());
    // A claim still goes through beside the failing polls.
    s.rig.create("other", SNW);
    claimed(agent, &claim_req("other", "a2"));
    s.rig.plugin.set_faults("");
    wait_sample(
        port,
        &series("csi_agent_volume_stats_used_bytes", "other"),
        POLLS,
        |v| v.is_some(),
    );
    agent.wait_for_log("NodeGetVolumeStats answers again", POLLS);
}

#[test]
fn a_plugin_s_capacity_is_shown_and_a_larger_volume_is_refused_before_create_volume() {
    if !require_root() {
        return;
    }
    let s = rig();
    let (agent, port) = (&s.rig.agent, s.port);
    let gauge = format!("csi_agent_plugin_capacity_available_bytes{{plugin=\"{PLUGIN}\"}}");
    let available = wait_sample(port, &gauge, POLLS, |v| v.is_some()).unwrap();
    assert!(
        available > 0.0 && available <= (64 << 20) as f64,
        "the tmpfs' free bytes: {available}"
    );
    let out = agent.cli(&["plugin", "status", PLUGIN]);
    let status = text(&out);
    let line = status
        .lines()
        .find(|l| l.starts_with("Capacity "))
        .unwrap_or_else(|| panic!("no Capacity line in:\n{status}"));
    assert!(line.contains(" available at "), "{line}");

    let spec = |min: &str| format!("{}capacity_min = {min:?}\n", spec("big", &[SNW], None));
    let err = connect(agent)
        .volume_create("big.hcl", &spec("1GiB"))
        .expect_err("a volume larger than the plugin's room");
    let message = err.to_string();
    assert!(
        message.contains("available for new volumes (GetCapacity)")
            && message.contains("1.0 GiB (1073741824 bytes)")
            && message.contains("CreateVolume was not sent"),
        "{message}"
    );
    assert_eq!(count(&s.rig.plugin, "CreateVolume"), 0);
    assert!(
        try_volume(agent, "big").unwrap().is_none(),
        "no record is left"
    );
    // One that fits is made.
    connect(agent)
        .volume_create("big.hcl", &spec("8MiB"))
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(count(&s.rig.plugin, "CreateVolume"), 1);
}

/// The rules of docs/metrics.md's "Alerting on a volume filling up".
fn documented_rules() -> String {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md"))
            .unwrap();
    let section = docs
        .split_once("## Alerting on a volume filling up")
        .expect("the section")
        .1;
    let block = section.split_once("```yaml\n").expect("a yaml block").1;
    block.split_once("```").expect("its end").0.to_string()
}

/// Series over four hours: a volume of 100 MiB losing 64 KiB a minute from
/// 12 MiB free (below 10% at 33 minutes, below 3% at 145), one that stays
/// half full, and one whose plugin says it is abnormal for 10 minutes;
/// what the rules must fire, and when.
const RULE_TESTS: &str = r#"rule_files:
  - rules.yml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'csi_agent_volume_stats_capacity_bytes{volume="db",plugin="hp",instance="h1"}'
        values: '104857600+0x240'
      - series: 'csi_agent_volume_stats_available_bytes{volume="db",plugin="hp",instance="h1"}'
        values: '12582912-65536x240'
      - series: 'csi_agent_volume_stats_capacity_bytes{volume="logs",plugin="hp",instance="h1"}'
        values: '1073741824+0x240'
      - series: 'csi_agent_volume_stats_available_bytes{volume="logs",plugin="hp",instance="h1"}'
        values: '536870912+0x240'
      - series: 'csi_agent_volume_stats_health_status_abnormal{volume="logs",plugin="hp",instance="h1"}'
        values: '0x10 1x10 0x20'
    alert_rule_test:
      - eval_time: 1h
        alertname: CsiAgentVolumeFillingUp
        exp_alerts: []
      - eval_time: 2h
        alertname: CsiAgentVolumeFillingUp
        exp_alerts:
          - exp_labels:
              severity: warning
              volume: db
              plugin: hp
              instance: h1
            exp_annotations:
              summary: "Volume db fills up within 4 days"
              description: "Volume db of plugin hp on h1 has 4.5% of its space left."
      - eval_time: 140m
        alertname: CsiAgentVolumeAlmostFull
        exp_alerts: []
      - eval_time: 160m
        alertname: CsiAgentVolumeAlmostFull
        exp_alerts:
          - exp_labels:
              severity: critical
              volume: db
              plugin: hp
              instance: h1
            exp_annotations:
              summary: "Volume db is almost full"
              description: "Volume db of plugin hp on h1 has 2% of its space left."
      - eval_time: 18m
        alertname: CsiAgentVolumeUnhealthy
        exp_alerts:
          - exp_labels:
              severity: warning
              volume: logs
              plugin: hp
              instance: h1
            exp_annotations:
              summary: "Volume logs is abnormal"
              description: "Plugin hp says volume logs on h1 is abnormal: `csi-agent volume status logs` has its message."
      - eval_time: 40m
        alertname: CsiAgentVolumeUnhealthy
        exp_alerts: []
"#;

#[test]
fn the_documented_alerting_rules_pass_promtool() {
    if !have("promtool") {
        return;
    }
    let dir = TestDir::new();
    std::fs::write(dir.join("rules.yml"), documented_rules()).unwrap();
    std::fs::write(dir.join("tests.yml"), RULE_TESTS).unwrap();
    for args in [
        ["check", "rules", "rules.yml"],
        ["test", "rules", "tests.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir.path)
            .output()
            .unwrap();
        assert!(out.status.success(), "promtool {args:?}: {}", text(&out));
    }
}
