//! The metrics endpoint of the `telemetry` block with real
//! clients: an agent that has taken and released a claim, failed one,
//! restarted a failing task and seen its plugin restart is scraped over
//! loopback; `promtool check metrics` accepts what it serves, the
//! families moved, other paths are 404, and a scrape is answered within a
//! second beside 100 idle clients, 20 that sent half a request line and
//! one that trickles. A real `prometheus` scraping the agent every second
//! sees `up == 1` and the claim counted.
//!
//! `promtool` and `prometheus` come from Debian's `prometheus` package
//! (`make deps`); without them the tests skip, and fail under CI.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::etcd::free_port;
use crate::harness::{healthy, text, unhealthy, Agent, WAIT};
use crate::util::{require_root, Plugin, TestDir};
use crate::volume_util::*;

const SNW: &str = "single-node-writer";

/// A batch job whose one task fails, is restarted once, and fails again.
const FAILING_JOB: &str = r#"
job "failing" {
  type = "batch"
  group "g" {
    restart {
      attempts = 1
      interval = "1m"
      delay    = "100ms"
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exit 1"]
      }
    }
  }
}
"#;
pub const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Whether `tool` is on the PATH; under CI its absence fails the test.
pub fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{tool} is missing: run `make deps` (Debian's prometheus package)");
        }
        eprintln!("skipping: {tool} is missing (run `make deps`)");
    }
    found
}

/// The agent config's `telemetry` block on loopback `port`.
pub fn telemetry(port: u16) -> String {
    format!("\ntelemetry {{\n  prometheus_metrics = true\n  listen = \"127.0.0.1:{port}\"\n}}\n")
}

/// A monolith `plugin` block for the test plugin at `socket`.
pub fn plugin_block(socket: &Path) -> String {
    format!(
        "\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = \"monolith\"\n}}\n",
        socket.display().to_string()
    )
}

/// A rig whose agent serves its metrics on a loopback port from the start
/// (the `telemetry` block is read at start only).
pub fn rig_with_metrics() -> (Rig, u16) {
    let port = free_port(LOOPBACK);
    let plugin = Plugin::start();
    let agent = Agent::start_with_config(&(plugin_block(&plugin.socket) + &telemetry(port)));
    agent.wait_for(PLUGIN, healthy, WAIT);
    (Rig { agent, plugin }, port)
}

/// `request` sent to the agent's endpoint; the whole answer.
fn http(port: u16, request: &str) -> String {
    let mut conn = TcpStream::connect((LOOPBACK, port)).unwrap();
    conn.set_read_timeout(Some(WAIT)).unwrap();
    conn.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

fn get(port: u16, path: &str) -> String {
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    )
}

/// The body of a 200 answer to `GET /metrics`.
pub fn scrape(port: u16) -> String {
    let answer = get(port, "/metrics");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    body.to_string()
}

/// The value of the sample `series` (name and labels as written), if any.
pub fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

#[track_caller]
fn at_least(body: &str, series: &str, min: f64) {
    let value = sample(body, series).unwrap_or_else(|| panic!("no {series} in:\n{body}"));
    assert!(value >= min, "{series} is {value}, expected at least {min}");
}

#[test]
fn an_agent_s_metrics_pass_promtool_and_count_claims_failures_and_restarts() {
    if !require_root() || !have("promtool") {
        return;
    }
    let (mut rig, port) = rig_with_metrics();
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));
    released(&rig.agent, "vol", "a1");
    refused_claim(&rig, "vol", "a2");
    wait_volume(&rig.agent, "vol", "the claim rolled back", unclaimed, LONG);
    rig.plugin.set_faults("");
    // A task that fails, is restarted once, and fails again.
    let jobs = TestDir::new();
    let job = jobs.path.join("failing.hcl");
    std::fs::write(&job, FAILING_JOB).unwrap();
    let out = rig.agent.cli(&["job", "run", job.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    rig.plugin.kill();
    rig.agent.wait_for(PLUGIN, unhealthy, WAIT);
    rig.plugin.restart();
    rig.agent.wait_for(PLUGIN, healthy, WAIT);

    let exits = "csi_agent_task_exits_total{driver=\"raw_exec\",outcome=\"failure\"}";
    let dead = "csi_agent_tasks{driver=\"raw_exec\",state=\"dead\"}";
    let deadline = Instant::now() + WAIT;
    // The exit is counted when it is taken, the tasks gauge at the end of
    // that turn: a scrape in between sees one and not yet the other.
    let body = loop {
        let body = scrape(port);
        if sample(&body, exits).is_some_and(|n| n >= 2.0)
            && sample(&body, dead).is_some_and(|n| n >= 1.0)
        {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "the task did not end twice:\n{body}"
        );
        thread::sleep(Duration::from_millis(100));
    };
    at_least(
        &body,
        "csi_agent_task_starts_total{driver=\"raw_exec\"}",
        2.0,
    );
    at_least(
        &body,
        "csi_agent_task_restarts_total{driver=\"raw_exec\"}",
        1.0,
    );
    at_least(
        &body,
        "csi_agent_tasks{driver=\"raw_exec\",state=\"dead\"}",
        1.0,
    );
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}\n{}\n{body}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    let mode = "single-node-writer";
    for (operation, outcome) in [("claim", "ok"), ("claim", "failed"), ("release", "ok")] {
        at_least(
            &body,
            &format!(
                "csi_agent_claims_total{{operation=\"{operation}\",outcome=\"{outcome}\",access_mode=\"{mode}\"}}"
            ),
            1.0,
        );
    }
    for (method, code) in [
        ("/csi.v1.Node/NodeStageVolume", "OK"),
        ("/csi.v1.Node/NodePublishVolume", "PERMISSION_DENIED"),
        ("/csi.v1.Controller/CreateVolume", "OK"),
        ("/csi.v1.Identity/Probe", "OK"),
    ] {
        at_least(
            &body,
            &format!(
                "csi_agent_csi_operations_seconds_count{{driver_name=\"{PLUGIN}\",method_name=\"{method}\",grpc_status_code=\"{code}\"}}"
            ),
            1.0,
        );
    }
    let instances = format!("csi_agent_plugin_instances{{plugin=\"{PLUGIN}\",type=\"monolith\"");
    at_least(&body, &format!("{instances},health=\"healthy\"}}"), 1.0);
    assert_eq!(
        sample(&body, &format!("{instances},health=\"unhealthy\"}}")),
        Some(0.0)
    );
    at_least(
        &body,
        &format!(
            "csi_agent_plugin_heartbeat_failures_total{{plugin=\"{PLUGIN}\",type=\"monolith\"}}"
        ),
        1.0,
    );
    at_least(
        &body,
        "csi_agent_api_calls_seconds_count{method=\"VolumeClaim\",code=\"OK\"}",
        1.0,
    );
    at_least(&body, "csi_agent_journal_sync_seconds_count", 1.0);
    at_least(&body, "csi_agent_volume_step_give_ups_total", 1.0);
    assert!(body.contains("# TYPE csi_agent_persist_refusals_total counter\n"));
    assert!(body.contains("# TYPE csi_agent_claims gauge\n"));
    assert!(!body.contains("wrong credentials"), "no message is a label");

    let other = get(port, "/other");
    assert!(other.starts_with("HTTP/1.1 404 "), "{other}");

    // Clients that connect and say nothing, or half a request line, or
    // trickle a byte every 100 ms, hold nothing a scraper needs.
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect((LOOPBACK, port)).unwrap())
        .collect();
    let stalled: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut conn = TcpStream::connect((LOOPBACK, port)).unwrap();
            conn.write_all(b"GET /metr").unwrap();
            conn
        })
        .collect();
    let mut trickler = TcpStream::connect((LOOPBACK, port)).unwrap();
    let trickling = thread::spawn(move || {
        for byte in b"GET /metrics HTTP/1.1\r\n\r\n" {
            if trickler.write_all(&[*byte]).is_err() {
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
    });
    let started = Instant::now();
    let body = scrape(port);
    let took = started.elapsed();
    assert!(body.contains("# TYPE csi_agent_claims gauge\n"), "{body}");
    assert!(took < Duration::from_secs(1), "the scrape took {took:?}");
    trickling.join().unwrap();
    drop((idle, stalled));
}

/// A `prometheus` server scraping `port` every second, with its data in
/// `dir`, answering its API on the port it returns.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &Path, target: u16) -> Prometheus {
        let port = free_port(LOOPBACK);
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: csi-agent\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Prometheus { child, port }
    }

    /// The first value of an instant query's answer, once there is one.
    fn query(&self, query: &str) -> Option<f64> {
        let mut conn = TcpStream::connect((LOOPBACK, self.port)).ok()?;
        conn.set_read_timeout(Some(WAIT)).unwrap();
        let encoded: String = query
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                b => format!("%{b:02X}"),
            })
            .collect();
        write!(
            conn,
            "GET /api/v1/query?query={encoded} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer).ok()?;
        // "value":[<time>,"<value>"]
        let value = answer.split("\"value\":[").nth(1)?;
        let value = value.split(",\"").nth(1)?.split('"').next()?;
        value.parse().ok()
    }

    fn wait_for(&self, query: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(value) = self.query(query).filter(|v| ok(*v)) {
                return value;
            }
            assert!(Instant::now() < deadline, "prometheus: no good {query}");
            thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_the_agent_and_sees_a_claim() {
    if !require_root() || !have("prometheus") {
        return;
    }
    let (rig, port) = rig_with_metrics();
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));
    let dir = TestDir::new();
    let prometheus = Prometheus::start(&dir.path, port);
    let up = prometheus.wait_for("up{job=\"csi-agent\"}", |v| v == 1.0);
    assert_eq!(up, 1.0);
    let claims = prometheus.wait_for(
        "sum(csi_agent_claims_total{operation=\"claim\",outcome=\"ok\"})",
        |v| v > 0.0,
    );
    assert!(claims >= 1.0);
    drop(prometheus);
    released(&rig.agent, "vol", "a1");
}
