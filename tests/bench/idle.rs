//! P3, the idle footprint: an agent with `--idle-plugins` hostpath plugins
//! registered and heartbeating (every `--heartbeat`), and nothing else to
//! do. Once every plugin is healthy and a settling pause has passed, the
//! agent process is watched for `--idle` seconds: CPU time from
//! `/proc/PID/stat` (user + system, reaped threads included) over the
//! window, resident memory (`VmRSS`, sampled every second, the largest
//! kept, with its anonymous and file-backed parts: the file-backed part
//! is clean pages of the binary and its libraries, which the kernel may
//! drop and read again, while the anonymous part is the agent's own) and
//! the thread count from `/proc/PID/status`. The plugins' processes are
//! not counted: they are not the agent.
//!
//! With telemetry, the agent also serves its metrics on a loopback port,
//! which the bench scrapes every [`SCRAPE_EVERY`] (Prometheus' default
//! interval) through the window, as a Prometheus server would: the cost
//! of telemetry is the endpoint's thread and the scrapes it answers.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::rig::{agent_config, Agent, BenchDir, Delay, Plugin};
use crate::Options;

/// Let start-up work (first fingerprints, the first snapshot) finish
/// before the window opens.
const SETTLE: Duration = Duration::from_secs(2);

/// How often the telemetry run scrapes `/metrics`: Prometheus' default
/// `scrape_interval`.
pub const SCRAPE_EVERY: Duration = Duration::from_secs(15);

pub struct IdleResult {
    pub plugins: usize,
    pub window: Duration,
    pub heartbeat: Duration,
    /// The largest VmRSS seen, bytes, and its anonymous and file-backed
    /// parts then.
    pub rss: u64,
    pub rss_anon: u64,
    pub rss_file: u64,
    pub threads: u64,
    /// Percent of one core.
    pub cpu_percent: f64,
    /// Scrapes of `/metrics` answered during the window (telemetry on).
    pub scrapes: usize,
}

/// The footprint of the agent binary `agent_bin`; `name` names its
/// bench dir.
/// With `telemetry`, the agent serves its metrics and is scraped every
/// [`SCRAPE_EVERY`] through the window.
pub fn run(
    opts: &Options,
    root: &Path,
    agent_bin: &Path,
    name: &str,
    telemetry: bool,
) -> IdleResult {
    let dir = BenchDir::new(root, name, opts.keep);
    let mut plugins: Vec<Plugin> = (0..opts.idle_plugins)
        .map(|p| {
            Plugin::new(
                &opts.bin,
                &dir.join(&format!("plugin{p}")),
                &dir.join(&format!("p{p}.sock")),
                Delay::None,
            )
        })
        .collect();
    for plugin in &mut plugins {
        plugin.start();
    }
    let blocks: Vec<(String, PathBuf)> = plugins
        .iter()
        .enumerate()
        .map(|(p, plugin)| (format!("p{p}"), plugin.socket.clone()))
        .collect();
    let port = telemetry.then(crate::cluster::free_port);
    let mut agent = Agent::new(agent_bin, &dir.join("agent"), |data| {
        let mut text = agent_config(data, opts.heartbeat, &blocks);
        if let Some(port) = port {
            text.push_str(&format!(
                "\ntelemetry {{\n  prometheus_metrics = true\n  listen = \"127.0.0.1:{port}\"\n}}\n"
            ));
        }
        text
    });
    agent.start();
    agent.wait_healthy(plugins.len());
    thread::sleep(SETTLE);

    let pid = agent.pid();
    let cpu_start = cpu_ticks(pid);
    let start = Instant::now();
    let mut largest = ProcStatus::default();
    let mut threads = 0;
    let mut scrapes = 0;
    let mut next_scrape = start;
    while start.elapsed() < opts.idle_window {
        if let Some(port) = port {
            if Instant::now() >= next_scrape {
                scrape(port);
                scrapes += 1;
                next_scrape += SCRAPE_EVERY;
            }
        }
        let left = opts.idle_window.saturating_sub(start.elapsed());
        thread::sleep(left.min(Duration::from_secs(1)));
        let status = ProcStatus::read(pid);
        threads = threads.max(status.threads);
        if status.rss > largest.rss {
            largest = status;
        }
    }
    let window = start.elapsed();
    let cpu = cpu_ticks(pid) - cpu_start;
    let unhealthy = agent
        .plugins()
        .iter()
        .filter(|p| !crate::rig::is_healthy(p))
        .count();
    assert_eq!(unhealthy, 0, "plugins went unhealthy while idle");
    IdleResult {
        plugins: plugins.len(),
        window,
        heartbeat: opts.heartbeat,
        rss: largest.rss,
        rss_anon: largest.rss_anon,
        rss_file: largest.rss_file,
        threads,
        cpu_percent: cpu as f64 / clock_ticks_per_second() / window.as_secs_f64() * 100.0,
        scrapes,
    }
}

/// `GET /metrics` on loopback `port`, which must answer 200.
fn scrape(port: u16) {
    let mut conn = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("connect to /metrics");
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("send the scrape");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("read the scrape");
    assert!(answer.starts_with("HTTP/1.1 200"), "scrape: {answer:.200}");
}

/// utime + stime of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    // The command name may hold spaces: fields count from after its ')'.
    let rest = &stat[stat.rfind(')').expect("a comm field") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), the 12th and 13th after the comm.
    let utime: u64 = fields[11].parse().expect("utime");
    let stime: u64 = fields[12].parse().expect("stime");
    utime + stime
}

pub fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks as f64
}

/// The fields of `/proc/PID/status` the footprint needs.
#[derive(Default)]
pub struct ProcStatus {
    /// VmRSS, bytes, and its parts: RssAnon, and RssFile with RssShmem.
    pub rss: u64,
    pub rss_anon: u64,
    pub rss_file: u64,
    pub threads: u64,
}

impl ProcStatus {
    pub fn read(pid: u32) -> ProcStatus {
        let text =
            fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        ProcStatus {
            rss: field("VmRSS:") * 1024,
            rss_anon: field("RssAnon:") * 1024,
            rss_file: (field("RssFile:") + field("RssShmem:")) * 1024,
            threads: field("Threads:"),
        }
    }
}
