//! `make bench`: the agent's performance targets, measured in one run on
//! this machine against real processes, sockets and mounts, and printed
//! as one table. BENCHMARKS.md says what each row means, gives the
//! numbers, and how to reproduce them.
//!
//! Rows: C (what the building blocks cost here), P1 claim and release
//! latency next to a bare client's floor, P2 boot storm (P2L at scale),
//! P3 idle footprint, P4 recovery after SIGKILL (P4L after the storm at
//! scale), P5 static binary size, P6 plugin discovery, P7 claims across
//! three hosts of a cluster (etcd), P8 the docker driver: a plugin's
//! container start to healthy, and a container task's claim to running
//! beside an exec task's (a private dockerd), P9 the control API's
//! latency while a job of 2,000 allocs starts, next to idle, P10 the
//! agent as Docker's volume plugin: `docker run -v` with a csi-agent
//! volume beside a `local` one, and the plugin calls a container makes,
//! P11 a boot's restore: dockerd restarted with 50 `--restart always`
//! containers on csi-agent volumes, beside the same on `local` ones.
//! Each module's docs define its measurement.
//!
//! Needs root (the agent and the hostpath plugin mount). Run it through
//! `make bench BENCH_ARGS="..."`, or `cargo bench --bench agent -- ARGS`;
//! `--help` lists the arguments.

// Tests sort with the standard library's sorts: only the agent's binary
// keeps to order (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod anatomy;
mod bigjob;
mod boot;
mod calibrate;
mod calls;
mod claim;
mod cluster;
mod containers;
mod discovery;
mod docker;
mod floor;
mod freed;
mod idle;
mod polls;
mod recovery;
mod rig;
mod size;
mod stats;
mod storm;
mod volumes;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use csi_agent::plugin::workers::WORKERS;
use csi_agent::units::{format_duration, parse_duration};

use rig::Delay;
use stats::{ms, ratio};

const USAGE: &str = "\
usage: cargo bench --bench agent -- [ARGS]   (or: make bench BENCH_ARGS=\"ARGS\")

  --only ROWS          comma-separated rows to run, of C,P1,P2,P2L,P3,P4,P4L,
                       P5,P6,P7,P8,P9,P10,P11,P12 (default: all; P4 and P12 run
                       the storm of P2 to set up, P4L the large storm of P2L;
                       P12 takes 4 minutes after it; P7 needs
                       etcd, P8 dockerd and busybox-static, P10 those and the
                       docker CLI, P11 those and systemd-socket-activate)
  --runs N             P1: claims and releases measured (default 200)
  --delay DUR          P1: per-RPC delay injected in the plugin (default 0)
  --stats-interval DUR P1: volume_stats_interval of its agent (default: the
                       agent's, 60s; 0s turns the usage polls off, to see
                       that they do not move P1)
  --storm N            P2/P4: claims (default 1000)
  --storm-plugins N    P2/P4: plugins the volumes spread over (default 5)
  --storm-delay DUR    P2/P4: per-RPC delay injected in every plugin (default 5ms)
  --scale N            P2L/P4L: claims of the large storm (default 10000;
                       P2L also runs a tenth of it), over --storm-plugins
  --scale-delay DUR    P2L/P4L: per-RPC delay (default 1ms)
  --idle DUR           P3: the measured window (default 60s)
  --idle-plugins N     P3: plugins registered (default 20)
  --discovery N        P6: runs (default 50)
  --discovery-plugins N  P6: other plugins registered and healthy meanwhile
                       (default 50)
  --cluster-claims N   P7: claims made across the 3 hosts (default 300)
  --cluster-runs N     P7: claims measured one at a time, with etcd and
                       without (default 100)
  --freed-cuts N       P7: hosts frozen while they hold a volume another
                       host's job waits for (default 10; ~25 s each)
  --docker-runs N      P8: plugin starts, and claims of each driver, measured
                       (default 10)
  --big-job N          P9: allocs of the big job (default 2000)
  --volume-runs N      P10: containers run with each volume, csi-agent's and
                       local (default 60: the engine's own time varies
                       by more than the agent's share over 20)
  --activated          P10: the agent socket-activated, as systemd's socket
                       units start it (systemd-socket-activate)
  --boot-containers N  P11: --restart always containers dockerd restores
                       (default 50)
  --boot-runs N        P11: engine restarts timed with each kind of volume
                       (default 3)
  --heartbeat DUR      plugin_heartbeat of every agent (default 30s, the
                       agent's default)
  --keep               keep each row's directory (logs, state) to look at
  --dir DIR            where rows run (default /tmp/csi-agent-bench; use a
                       disk, not tmpfs: fsync is part of the cost)
  --agent-bin PATH     run the agent from this binary, e.g. to compare two
                       builds (the plugins still run the one built here)

environment:
  CSI_AGENT_STATIC_BIN the static binary P5 measures (default
                       target/x86_64-unknown-linux-musl/static/csi-agent)";

/// What to measure and how much.
pub struct Options {
    /// The `csi-agent` binary built with the benchmark: the plugins, and
    /// the agent unless `agent_bin` says otherwise.
    pub bin: PathBuf,
    /// The agent under test.
    pub agent_bin: PathBuf,
    pub only: Option<Vec<String>>,
    pub claim_runs: usize,
    pub claim_delay: Duration,
    /// P1's agent's `volume_stats_interval`; `None` leaves its default.
    pub stats_interval: Option<Duration>,
    pub storm_claims: usize,
    pub storm_plugins: usize,
    pub storm_delay: Duration,
    pub idle_window: Duration,
    pub idle_plugins: usize,
    pub discovery_runs: usize,
    pub discovery_plugins: usize,
    pub scale_claims: usize,
    pub scale_delay: Duration,
    pub cluster_claims: usize,
    pub cluster_runs: usize,
    pub freed_cuts: usize,
    pub docker_runs: usize,
    pub big_job: usize,
    pub volume_runs: usize,
    pub activated: bool,
    pub boot_containers: usize,
    pub boot_runs: usize,
    pub heartbeat: Duration,
    pub keep: bool,
    pub dir: PathBuf,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut opts = Options {
            bin: PathBuf::from(env!("CARGO_BIN_EXE_csi-agent")),
            agent_bin: PathBuf::from(env!("CARGO_BIN_EXE_csi-agent")),
            only: None,
            claim_runs: 200,
            claim_delay: Duration::ZERO,
            stats_interval: None,
            storm_claims: 1000,
            storm_plugins: 5,
            storm_delay: Duration::from_millis(5),
            idle_window: Duration::from_secs(60),
            idle_plugins: 20,
            discovery_runs: 50,
            discovery_plugins: 50,
            scale_claims: 10_000,
            scale_delay: Duration::from_millis(1),
            cluster_claims: 300,
            cluster_runs: 100,
            freed_cuts: 10,
            docker_runs: 10,
            big_job: 2000,
            volume_runs: 60,
            activated: false,
            boot_containers: 50,
            boot_runs: 3,
            heartbeat: Duration::from_secs(30),
            keep: false,
            dir: PathBuf::from("/tmp/csi-agent-bench"),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{arg} needs a value"))
            };
            let number = |text: String| {
                text.parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{arg}: {text:?} is not a positive number"))
            };
            let duration = |text: String| parse_duration(&text).map_err(|e| format!("{arg}: {e}"));
            match arg.as_str() {
                // cargo bench passes --bench to every bench binary.
                "--bench" => {}
                "--only" => {
                    let rows: Vec<String> = value()?
                        .split(',')
                        .map(|s| s.trim().to_ascii_uppercase())
                        .collect();
                    if let Some(bad) = rows.iter().find(|r| !ROWS.contains(&r.as_str())) {
                        return Err(format!("--only: no row {bad:?}"));
                    }
                    opts.only = Some(rows);
                }
                "--runs" => opts.claim_runs = number(value()?)?,
                "--delay" => opts.claim_delay = duration(value()?)?,
                "--stats-interval" => opts.stats_interval = Some(duration(value()?)?),
                "--storm" => opts.storm_claims = number(value()?)?,
                "--storm-plugins" => opts.storm_plugins = number(value()?)?,
                "--storm-delay" => opts.storm_delay = duration(value()?)?,
                "--idle" => opts.idle_window = duration(value()?)?,
                "--idle-plugins" => opts.idle_plugins = number(value()?)?,
                "--discovery" => opts.discovery_runs = number(value()?)?,
                "--discovery-plugins" => {
                    let text = value()?;
                    opts.discovery_plugins = text
                        .parse()
                        .map_err(|_| format!("{arg}: {text:?} is not a number"))?;
                }
                "--scale" => opts.scale_claims = number(value()?)?,
                "--scale-delay" => opts.scale_delay = duration(value()?)?,
                "--cluster-claims" => opts.cluster_claims = number(value()?)?,
                "--cluster-runs" => opts.cluster_runs = number(value()?)?,
                "--freed-cuts" => opts.freed_cuts = number(value()?)?,
                "--docker-runs" => opts.docker_runs = number(value()?)?,
                "--big-job" => opts.big_job = number(value()?)?,
                "--volume-runs" => opts.volume_runs = number(value()?)?,
                "--activated" => opts.activated = true,
                "--boot-containers" => opts.boot_containers = number(value()?)?,
                "--boot-runs" => opts.boot_runs = number(value()?)?,
                "--heartbeat" => opts.heartbeat = duration(value()?)?,
                "--keep" => opts.keep = true,
                "--dir" => opts.dir = PathBuf::from(value()?),
                "--agent-bin" => opts.agent_bin = PathBuf::from(value()?),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(opts)
    }

    fn wants(&self, row: &str) -> bool {
        self.only
            .as_ref()
            .map_or(true, |only| only.iter().any(|r| r == row))
    }

    /// How a plugin injects `delay`.
    pub fn delay(&self, delay: Duration) -> Delay {
        if delay.is_zero() {
            Delay::None
        } else {
            Delay::Faults(delay)
        }
    }
}

const ROWS: [&str; 15] = [
    "C", "P1", "P2", "P2L", "P3", "P4", "P4L", "P5", "P6", "P7", "P8", "P9", "P10", "P11", "P12",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let opts = match Options::parse(&args) {
        Ok(opts) => opts,
        Err(err) => {
            eprintln!("error: {err}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("error: the benchmarks mount, and need root");
        return ExitCode::from(1);
    }
    let root = opts.dir.join(std::process::id().to_string());
    println!("{}", conditions(&opts));
    let table = run(&opts, &root);
    let _ = fs::remove_dir(&root);
    print!("{}", table.render());
    println!("{}", conditions_after());
    ExitCode::SUCCESS
}

/// One line of the table.
struct Row {
    id: &'static str,
    what: String,
    agent: String,
    reference: String,
    ratio: String,
    target: &'static str,
    met: Option<bool>,
}

#[derive(Default)]
struct Table(Vec<Row>);

impl Table {
    fn push(&mut self, row: Row) {
        // Rows print as they come too: a long run shows progress.
        eprintln!(
            "  {} {}: {} | {}",
            row.id, row.what, row.agent, row.reference
        );
        self.0.push(row);
    }

    fn render(&self) -> String {
        let header = [
            "row",
            "measure",
            "agent",
            "floor / reference",
            "ratio",
            "target",
            "met",
        ];
        let cells: Vec<[String; 7]> = self
            .0
            .iter()
            .map(|r| {
                [
                    r.id.to_string(),
                    r.what.clone(),
                    r.agent.clone(),
                    r.reference.clone(),
                    r.ratio.clone(),
                    r.target.to_string(),
                    match r.met {
                        Some(true) => "yes".into(),
                        Some(false) => "NO".into(),
                        None => "-".into(),
                    },
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &cells {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut text = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                let sep = if i + 1 == cells.len() { "\n" } else { " | " };
                let _ = write!(text, "{cell:<w$}{sep}");
            }
            text
        };
        let mut out = line(&header.map(String::from));
        out.push_str(&line(&widths.map(|w| "-".repeat(w))));
        for row in &cells {
            out.push_str(&line(row));
        }
        out
    }
}

fn run(opts: &Options, root: &Path) -> Table {
    let mut table = Table::default();
    if opts.wants("C") {
        calibration_rows(&mut table, &calibrate::run(opts, root));
    }
    if opts.wants("P1") {
        claim_rows(&mut table, &claim::run(opts, root));
        anatomy_rows(&mut table, anatomy::run(opts, root));
    }
    if opts.wants("P2") || opts.wants("P4") || opts.wants("P12") {
        let (storm, mut rig) = storm::run(opts, root, opts.wants("P2"));
        if opts.wants("P2") {
            storm_row(&mut table, &storm);
        }
        if opts.wants("P4") {
            recovery_row(&mut table, "P4", &recovery::run(&mut rig));
        }
        if opts.wants("P12") {
            // P4's restart leaves the storm's claims behind: their
            // answered waiters' deadlines, which would otherwise pass
            // (and be looked at) in P12's window.
            if !opts.wants("P4") {
                recovery::run(&mut rig);
            }
            polls_row(&mut table, &polls::run(&mut rig));
        }
    }
    if opts.wants("P2L") || opts.wants("P4L") {
        let size = |claims| storm::StormSize {
            claims,
            delay: opts.scale_delay,
        };
        // The tenths first, each storm on its own rig: the large one's
        // is kept for P4L.
        let tenths: Vec<storm::StormResult> = match opts.wants("P2L") {
            true => (0..storm::ROUNDS)
                .map(|i| {
                    let tenth = size(opts.scale_claims.div_ceil(10));
                    let name = format!("p2l-tenth-{i}");
                    storm::run_sized(opts, root, &name, tenth, false, 1).0
                })
                .collect(),
            false => Vec::new(),
        };
        let large = size(opts.scale_claims);
        let (large, mut rig) = storm::run_sized(opts, root, "p2l", large, false, 1);
        if !tenths.is_empty() {
            scale_row(&mut table, tenths, &large);
        }
        if opts.wants("P4L") {
            recovery_row(&mut table, "P4L", &recovery::run(&mut rig));
        }
    }
    if opts.wants("P3") {
        idle_row(
            &mut table,
            &idle::run(opts, root, &opts.agent_bin, "p3", false),
            None,
        );
        // Telemetry on, scraped as Prometheus would: the idle targets hold
        // for an agent that is scraped too.
        idle_row(
            &mut table,
            &idle::run(opts, root, &opts.agent_bin, "p3-telemetry", true),
            None,
        );
        // The issue asks for the static binary's footprint too, when
        // `make static` has built it: what constrained hosts run.
        let static_bin = size::path();
        if static_bin.exists() {
            let r = idle::run(opts, root, &static_bin, "p3-static", false);
            idle_row(&mut table, &r, Some(&static_bin));
        }
    }
    if opts.wants("P5") {
        size_row(&mut table, &size::run());
    }
    let mut discovery_p50 = None;
    if opts.wants("P6") {
        let samples = discovery::run(opts, root);
        discovery_p50 = Some(samples.p50());
        let p50 = samples.p50();
        table.push(Row {
            id: "P6",
            what: format!(
                "socket created → healthy, p50 / p99 ({} runs, {} other plugins registered)",
                samples.len(),
                opts.discovery_plugins
            ),
            agent: format!("{} / {}", ms(p50), ms(samples.p99())),
            reference: "status polled every 1 ms".into(),
            ratio: "-".into(),
            target: "p50 ≤ 10 ms",
            met: Some(p50 <= Duration::from_millis(10)),
        });
    }
    if opts.wants("P7") {
        cluster_rows(&mut table, opts, root);
    }
    if opts.wants("P8") {
        docker_rows(&mut table, opts, root, discovery_p50);
    }
    if opts.wants("P9") {
        big_job_row(&mut table, &bigjob::run(opts, root));
    }
    if opts.wants("P10") {
        volume_rows(&mut table, opts, root);
    }
    if opts.wants("P11") {
        boot_row(&mut table, opts, root);
    }
    table
}

/// P11: a restarting dockerd restoring its `--restart always` containers,
/// on csi-agent volumes against `local` ones.
fn boot_row(table: &mut Table, opts: &Options, root: &Path) {
    if !(containers::available() && volumes::available() && boot::available()) {
        table.push(Row {
            id: "P11",
            what: "a boot's restore of --restart always containers".into(),
            agent: "skipped: dockerd, busybox-static, the docker CLI or systemd-socket-activate missing (make deps)".into(),
            reference: "-".into(),
            ratio: "-".into(),
            target: "-",
            met: None,
        });
        return;
    }
    let r = boot::run(opts, root);
    let spread = |s: &stats::Samples| {
        format!(
            "{} (min {}, max {})",
            ms(s.p50()),
            ms(s.percentile(0.0)),
            ms(s.percentile(100.0))
        )
    };
    table.push(Row {
        id: "P11",
        what: format!(
            "dockerd restarted with {} --restart always containers, one volume each: its start to all running, p50 ({} restarts each, alternating; the agent socket-activated)",
            r.containers,
            r.csi.len()
        ),
        agent: format!("csi-agent volumes {}", spread(&r.csi)),
        reference: format!("local volumes {}", spread(&r.local)),
        ratio: format!("{:.2}x", ratio(r.csi.p50(), r.local.p50())),
        target: "-",
        met: None,
    });
}

/// P10: `docker run -v` with a csi-agent volume against a `local` one,
/// and the plugin calls each container makes.
fn volume_rows(table: &mut Table, opts: &Options, root: &Path) {
    if !(containers::available() && volumes::available()) {
        table.push(Row {
            id: "P10",
            what: "docker run -v with a csi-agent volume".into(),
            agent: "skipped: dockerd, busybox-static or the docker CLI missing (make deps)".into(),
            reference: "-".into(),
            ratio: "-".into(),
            target: "-",
            met: None,
        });
        return;
    }
    let r = volumes::run(opts, root);
    let high = if r.csi.len() < 100 { "max" } else { "p99" };
    let spread = |s: &stats::Samples| format!("{} / {}", ms(s.p50()), ms(s.p99()));
    let x = ratio(r.csi.p50(), r.local.p50());
    table.push(Row {
        id: "P10",
        what: format!(
            "docker run --rm -v VOL:/data busybox true, p50 / {high} ({} runs each, alternating{})",
            r.csi.len(),
            if opts.activated {
                "; the agent socket-activated"
            } else {
                ""
            }
        ),
        agent: format!("csi-agent volume {}", spread(&r.csi)),
        reference: format!("local volume {}", spread(&r.local)),
        ratio: format!("{x:.2}x"),
        target: "≤ 1.15x at p50",
        met: Some(x <= 1.15),
    });
    let per_container = |n: usize| n as f64 / r.counted_runs as f64;
    let mut calls = Vec::new();
    let mut total = Duration::ZERO;
    for (name, samples) in &r.calls {
        calls.push(format!(
            "{name} x{} ({} p50)",
            per_container(samples.len()),
            ms(samples.p50())
        ));
        total += samples.sum();
    }
    table.push(Row {
        id: "P10",
        what: format!(
            "plugin calls dockerd makes per container, answer time p50 ({} containers through a counting proxy)",
            r.counted_runs
        ),
        agent: calls.join(", "),
        reference: format!(
            "{} in the agent per container",
            ms(total / r.counted_runs as u32)
        ),
        ratio: "-".into(),
        target: "-",
        met: None,
    });
}

fn big_job_row(table: &mut Table, r: &bigjob::BigJob) {
    let p99 = r.starting.p99();
    table.push(Row {
        id: "P9",
        what: format!(
            "control API (plugin status) p50 / p99 while a {}-alloc raw_exec job starts (all running in {:.1} s; {} calls)",
            r.allocs,
            r.start_time.as_secs_f64(),
            r.starting.len()
        ),
        agent: p50_p99(&r.starting),
        reference: format!("idle {}", p50_p99(&r.idle)),
        ratio: format!("{:.2}x at p99", ratio(p99, r.idle.p99())),
        target: "p99 ≤ 100 ms",
        met: Some(p99 <= Duration::from_millis(100)),
    });
}

fn p50_p99(s: &stats::Samples) -> String {
    format!("{} / {}", ms(s.p50()), ms(s.p99()))
}

fn calibration_rows(table: &mut Table, c: &calibrate::Calibration) {
    // Signed: the difference may be below the noise, either way.
    let hook = c.rpc_faults_hook.p50().as_micros() as i64 - c.rpc.p50().as_micros() as i64;
    table.push(Row {
        id: "C",
        what: "plugin RPC round trip (NodeGetCapabilities), p50 / p99".into(),
        agent: "-".into(),
        reference: p50_p99(&c.rpc),
        ratio: "-".into(),
        target: "",
        met: None,
    });
    table.push(Row {
        id: "C",
        what: "  the same through the -test-faults hook (no rule matches)".into(),
        agent: "-".into(),
        reference: format!("{} ({hook:+} µs at p50)", p50_p99(&c.rpc_faults_hook)),
        ratio: "-".into(),
        target: "",
        met: None,
    });
    table.push(Row {
        id: "C",
        what: format!(
            "  the same with a {} delay injected (-test-faults)",
            format_duration(c.delay)
        ),
        agent: "-".into(),
        reference: p50_p99(&c.rpc_delayed),
        ratio: "-".into(),
        target: "",
        met: None,
    });
    for (what, samples) in [
        (
            "fsynced journal record (write + fdatasync)",
            &c.journal_record,
        ),
        (
            "atomic snapshot (write, fsync, rename, fsync dir)",
            &c.atomic_write,
        ),
        ("bind mount + unmount", &c.bind_mount),
        ("control API round trip (plugin status)", &c.control_api),
        ("a claim's directories (staging, per-alloc)", &c.claim_dirs),
        ("  its release's (the same removed)", &c.release_dirs),
        (
            "hand-off to a parked thread and back (channels)",
            &c.hand_off,
        ),
    ] {
        table.push(Row {
            id: "C",
            what: format!("{what}, p50 / p99"),
            agent: "-".into(),
            reference: p50_p99(samples),
            ratio: "-".into(),
            target: "",
            met: None,
        });
    }
}

fn claim_rows(table: &mut Table, r: &claim::ClaimResult) {
    let mut delay = if r.delay.is_zero() {
        String::new()
    } else {
        format!(", {} per RPC", format_duration(r.delay))
    };
    if let Some(interval) = r.stats_interval {
        delay.push_str(&format!(
            ", volume_stats_interval {}",
            format_duration(interval)
        ));
    }
    let claim_ratio = ratio(r.agent_claim.p50(), r.floor_claim.p50());
    table.push(Row {
        id: "P1",
        what: format!("claim → mounted, p50 / p99 ({} runs{delay})", r.runs),
        agent: p50_p99(&r.agent_claim),
        reference: p50_p99(&r.floor_claim),
        ratio: format!("{claim_ratio:.2}x"),
        target: "≤ 1.2x at p50",
        met: Some(claim_ratio <= 1.2),
    });
    let release_ratio = ratio(r.agent_release.p50(), r.floor_release.p50());
    table.push(Row {
        id: "P1",
        what: format!("release → gone, p50 / p99 ({} runs{delay})", r.runs),
        agent: p50_p99(&r.agent_release),
        reference: p50_p99(&r.floor_release),
        ratio: format!("{release_ratio:.2}x"),
        target: "≤ 1.2x at p50",
        met: Some(release_ratio <= 1.2),
    });
    let per_pair = r.agent_cpu / r.runs.max(1) as u32;
    table.push(Row {
        id: "P1",
        what: "  the agent's CPU time per claim and its release (every thread)".into(),
        agent: format!("{:.0} µs", per_pair.as_secs_f64() * 1e6),
        reference: format!("{} over {} pairs", ms(r.agent_cpu), r.runs),
        ratio: "-".into(),
        target: "",
        met: None,
    });
}

fn anatomy_rows(table: &mut Table, a: Option<anatomy::Anatomy>) {
    let Some(a) = a else {
        table.push(Row {
            id: "P1",
            what: "where the time goes".into(),
            agent: "the agent wrote no trace (built before its trace points?)".into(),
            reference: String::new(),
            ratio: "-".into(),
            target: "",
            met: None,
        });
        return;
    };
    for (what, p) in [("claim", &a.claim), ("release", &a.release)] {
        let parts: Vec<String> = anatomy::PHASES
            .iter()
            .zip(p.phases)
            .map(|(name, us)| format!("{name} {}", anatomy::ms(us)))
            .collect();
        table.push(Row {
            id: "P1",
            what: format!(
                "  {what}, where the time goes (p50 of {} traced runs)",
                p.runs
            ),
            agent: anatomy::ms(p.total),
            reference: parts.join(", "),
            ratio: "-".into(),
            target: "",
            met: None,
        });
    }
}

fn storm_row(table: &mut Table, s: &storm::StormResult) {
    let ideal_ratio = (!s.ideal.is_zero()).then(|| ratio(s.agent_wall, s.ideal));
    let mut reference = format!("ideal {}", ms(s.ideal));
    let mut ratios = match ideal_ratio {
        Some(r) => format!("{r:.2}x ideal"),
        None => "-".into(),
    };
    let each = |walls: Vec<Duration>| walls.iter().map(|w| ms(*w)).collect::<Vec<_>>().join(", ");
    let mut bare_ratio = None;
    if let Some(bare) = s.bare_wall {
        let _ = write!(
            reference,
            ", bare client {} (median of {})",
            ms(bare),
            each(s.rounds.iter().filter_map(|(_, b)| *b).collect())
        );
        let r = ratio(s.agent_wall, bare);
        let _ = write!(ratios, ", {r:.2}x bare");
        bare_ratio = Some(r);
    }
    let _ = write!(reference, ", serial {}", ms(s.serial));
    let agent = match s.rounds.len() {
        1 => ms(s.agent_wall),
        _ => format!(
            "{} (median of {})",
            ms(s.agent_wall),
            each(s.rounds.iter().map(|(a, _)| *a).collect())
        ),
    };
    table.push(Row {
        id: "P2",
        what: format!(
            "boot storm: {} claims, {} plugins × {WORKERS} workers, {}/RPC, {} rounds (last round's claim p50 {}, p99 {})",
            s.claims,
            s.plugins,
            format_duration(s.delay),
            s.rounds.len(),
            ms(s.agent_latency.p50()),
            ms(s.agent_latency.p99())
        ),
        agent,
        reference,
        ratio: ratios,
        target: "≤ 1.25x ideal, ≤ 1.1x bare",
        met: ideal_ratio.map(|r| r <= 1.25 && bare_ratio.map_or(true, |b| b <= 1.1)),
    });
}

/// P2L: the storm at scale next to the median of the runs of a tenth of
/// it.
fn scale_row(table: &mut Table, mut tenths: Vec<storm::StormResult>, large: &storm::StormResult) {
    let walls: Vec<String> = tenths.iter().map(|t| ms(t.agent_wall)).collect();
    tenths.sort_by_key(|t| t.agent_wall);
    let small = &tenths[tenths.len() / 2];
    let growth = ratio(large.agent_wall, small.agent_wall);
    let times = large.claims as f64 / small.claims as f64;
    let mib = large.agent_rss as f64 / (1 << 20) as f64;
    table.push(Row {
        id: "P2L",
        what: format!(
            "storm at scale: {} claims, {} plugins, {}/RPC (claim p50 {}, p99 {})",
            large.claims,
            large.plugins,
            format_duration(large.delay),
            ms(large.agent_latency.p50()),
            ms(large.agent_latency.p99())
        ),
        agent: format!("{}, RSS {mib:.1} MiB at the end", ms(large.agent_wall)),
        reference: format!(
            "{} claims: {} (median of {}; RSS {:.1} MiB); ideal {}",
            small.claims,
            ms(small.agent_wall),
            walls.join(", "),
            small.agent_rss as f64 / (1 << 20) as f64,
            ms(large.ideal)
        ),
        ratio: format!("{growth:.2}x for {times:.0}x the claims"),
        target: "≤ 11x for 10x",
        met: Some(growth <= times * 1.1),
    });
}

/// P7: claims per second across the hosts of a cluster, and one claim's
/// latency with etcd and without.
fn cluster_rows(table: &mut Table, opts: &Options, root: &Path) {
    if !cluster::etcd_installed() {
        table.push(Row {
            id: "P7",
            what: "claims across 3 hosts (etcd)".into(),
            agent: "etcd not installed (make deps)".into(),
            reference: "-".into(),
            ratio: "-".into(),
            target: "-",
            met: None,
        });
        return;
    }
    let r = cluster::run(opts, root);
    for run in &r.runs {
        table.push(Row {
            id: "P7",
            what: format!(
                "{} claims + releases across {} hosts, {} at once on each, 3 etcd members (claim p50 {}, p99 {})",
                run.claims,
                cluster::HOSTS,
                run.at_once,
                ms(run.latency.p50()),
                ms(run.latency.p99())
            ),
            agent: format!("{:.1} claims/s", run.per_second()),
            reference: format!("{} wall", ms(run.wall)),
            ratio: format!("{:.2}x the 1-at-once rate", run.per_second() / r.runs[0].per_second()),
            target: "grows with concurrency",
            met: Some(run.per_second() >= r.runs[0].per_second() * 0.95),
        });
    }
    table.push(Row {
        id: "P7",
        what: format!(
            "claim, one at a time, etcd vs local journal, p50 / p99 ({} runs)",
            r.etcd_claim.len()
        ),
        agent: p50_p99(&r.etcd_claim),
        reference: format!("{} (no cluster block)", p50_p99(&r.local_claim)),
        ratio: format!("{:.2}x", ratio(r.etcd_claim.p50(), r.local_claim.p50())),
        target: "-",
        met: None,
    });
    if let Some(anatomy) = &r.anatomy {
        let parts: Vec<String> = cluster::PHASES
            .iter()
            .zip(anatomy)
            .map(|((name, _), us)| format!("{name} {}", anatomy::ms(*us)))
            .collect();
        table.push(Row {
            id: "P7",
            what: format!(
                "claim through etcd, its phases (medians): {}",
                parts.join("; ")
            ),
            agent: anatomy::ms(anatomy.iter().sum()),
            reference: "-".into(),
            ratio: "-".into(),
            target: "-",
            met: None,
        });
    }
    table.push(Row {
        id: "P7",
        what: "a host lost holding a claim (frozen; lease_ttl 10s, no stop_after_disconnect, fenced by the controller's detach): usable on another host after / the host back gives it up after".into(),
        agent: ms(r.lost.usable_elsewhere),
        reference: format!("{} to give it up", ms(r.lost.rejoined)),
        ratio: "-".into(),
        target: "-",
        met: None,
    });
    if r.freed.to_take.len() > 0 {
        table.push(Row {
            id: "P7",
            what: format!(
                "freed volume → taken elsewhere: a host waiting for a single-writer volume (its job's claim refused) takes it after the holder's claim leaves etcd, p50 / max of {} cuts (holder frozen; lease_ttl 10s, fenced by the controller's detach; the claim left etcd {} / {} after the cut)",
                r.freed.to_take.len(),
                ms(r.freed.to_free.p50()),
                ms(r.freed.to_free.percentile(100.0))
            ),
            agent: format!(
                "{} / {}",
                ms(r.freed.to_take.p50()),
                ms(r.freed.to_take.percentile(100.0))
            ),
            reference: "-".into(),
            ratio: "-".into(),
            target: "≤ 2 s",
            met: Some(r.freed.to_take.percentile(100.0) <= Duration::from_secs(2)),
        });
    }
    // The floor: the local claim, three etcd writes and a notification.
    let floor = r.local_claim.p50() + r.txn.p50() * 3 + r.notify.p50();
    table.push(Row {
        id: "P7",
        what: format!(
            "claim through etcd vs its floor: local claim + 3 etcd Txns (p50 {}) + a watch notification (p50 {})",
            ms(r.txn.p50()),
            ms(r.notify.p50())
        ),
        agent: ms(r.etcd_claim.p50()),
        reference: format!("{} floor", ms(floor)),
        ratio: format!("{:.2}x", ratio(r.etcd_claim.p50(), floor)),
        target: "≤ 1.5x",
        met: Some(ratio(r.etcd_claim.p50(), floor) <= 1.5),
    });
}

/// P8: the docker driver, `discovery_p50` P6's p50 if it ran.
fn docker_rows(table: &mut Table, opts: &Options, root: &Path, discovery_p50: Option<Duration>) {
    if !containers::available() {
        table.push(Row {
            id: "P8",
            what: "docker: plugin container start, claim to running".into(),
            agent: "skipped: dockerd or busybox-static missing (make deps)".into(),
            reference: "-".into(),
            ratio: "-".into(),
            target: "-",
            met: None,
        });
        return;
    }
    let r = docker::run(opts, root);
    // With few runs, p99 is the largest: say so.
    let high = if r.plugin_start.len() < 100 {
        "max"
    } else {
        "p99"
    };
    let spread = |s: &stats::Samples| format!("{} / {}", ms(s.p50()), ms(s.p99()));
    table.push(Row {
        id: "P8",
        what: format!(
            "plugin from its image: job run → healthy, p50 / {high} ({} runs, privileged docker csi_plugin, monolith)",
            r.plugin_start.len()
        ),
        agent: spread(&r.plugin_start),
        reference: match discovery_p50 {
            Some(p6) => format!("P6 socket → healthy p50 {}", ms(p6)),
            None => "P6 did not run".into(),
        },
        ratio: match discovery_p50 {
            Some(p6) => format!("{:.0}x P6", ratio(r.plugin_start.p50(), p6)),
            None => "-".into(),
        },
        target: "-",
        met: None,
    });
    table.push(Row {
        id: "P8",
        what: format!(
            "claim to running: job run (1 CSI volume) → task running, docker vs exec, p50 / {high} ({} runs each, alternating)",
            r.docker_claim.len()
        ),
        agent: format!("docker {}", spread(&r.docker_claim)),
        reference: format!("exec {}", spread(&r.exec_claim)),
        ratio: format!(
            "{:.2}x exec",
            ratio(r.docker_claim.p50(), r.exec_claim.p50())
        ),
        target: "-",
        met: None,
    });
}

fn polls_row(table: &mut Table, r: &polls::PollsResult) {
    let cost = r.with - r.without;
    table.push(Row {
        id: "P12",
        what: format!(
            "NodeGetVolumeStats polls of {} staged volumes at the default interval, {} window",
            r.volumes,
            format_duration(polls::WINDOW)
        ),
        agent: format!("{cost:.3}% of one core"),
        reference: format!(
            "agent CPU {:.3}% with the polls, {:.3}% without; {} of {} volumes polled in the window",
            r.with, r.without, r.polled, r.volumes
        ),
        ratio: "-".into(),
        target: "≤ 1%",
        met: Some(cost <= 1.0 && r.polled == r.volumes),
    });
}

fn recovery_row(table: &mut Table, id: &'static str, r: &recovery::RecoveryResult) {
    table.push(Row {
        id,
        what: format!("SIGKILL with {} claims, restart → reconciled", r.claims),
        agent: ms(r.reconciled),
        reference: format!(
            "plugins healthy at {}; {} repairs logged",
            ms(r.healthy),
            r.repairs
        ),
        ratio: "-".into(),
        target: "≤ 1 s",
        met: Some(r.reconciled <= Duration::from_secs(1)),
    });
}

/// P3's row for the agent, or for the static binary at `static_bin`
/// (reported, without a target of its own).
fn idle_row(table: &mut Table, r: &idle::IdleResult, static_bin: Option<&Path>) {
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let rss = mib(r.rss);
    let window = format_duration(Duration::from_secs(r.window.as_secs_f64().round() as u64));
    let what = match static_bin {
        None if r.scrapes > 0 => format!(
            "  the same, telemetry on, /metrics scraped every {} ({} scrapes)",
            format_duration(idle::SCRAPE_EVERY),
            r.scrapes
        ),
        None => format!(
            "idle: {} plugins, heartbeat {}, {window} window",
            r.plugins,
            format_duration(r.heartbeat)
        ),
        Some(_) => format!("  the same, the static binary ({window} window)"),
    };
    let reference = match static_bin {
        None => "of one core; the agent process only".to_string(),
        Some(path) => path.display().to_string(),
    };
    table.push(Row {
        id: "P3",
        what,
        agent: format!(
            "RSS {rss:.1} MiB (anon {:.1}, file {:.1}), {} threads, CPU {:.3}%",
            mib(r.rss_anon),
            mib(r.rss_file),
            r.threads,
            r.cpu_percent
        ),
        reference,
        ratio: "-".into(),
        target: if static_bin.is_none() {
            "RSS ≤ 12 MiB, CPU ≤ 0.05%"
        } else {
            ""
        },
        met: static_bin
            .is_none()
            .then_some(rss <= 12.0 && r.cpu_percent <= 0.05),
    });
}

fn size_row(table: &mut Table, r: &size::SizeResult) {
    let (agent, reference, met) = match r {
        size::SizeResult::NotBuilt(path) => (
            "not built (run make static)".to_string(),
            path.display().to_string(),
            None,
        ),
        size::SizeResult::Built {
            path,
            bytes,
            is_static,
            stripped,
        } => {
            let mut notes = Vec::new();
            notes.push(if *is_static { "static" } else { "NOT static" });
            notes.push(if *stripped {
                "stripped"
            } else {
                "NOT stripped"
            });
            (
                format!(
                    "{:.2} MiB ({bytes} bytes)",
                    *bytes as f64 / (1 << 20) as f64
                ),
                format!("{}, {}", notes.join(", "), path.display()),
                Some(*bytes <= 8 << 20),
            )
        }
    };
    table.push(Row {
        id: "P5",
        what: "static binary size".into(),
        agent,
        reference,
        ratio: "-".into(),
        target: "≤ 8 MiB stripped",
        met,
    });
}

/// The machine and its load, printed before the table: numbers from a
/// busy machine are not comparable.
fn conditions(opts: &Options) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "csi-agent benchmarks: agent {} ({} cores, load {} at start)",
        opts.agent_bin.display(),
        cores,
        load()
    )
}

fn conditions_after() -> String {
    format!("load {} at the end", load())
}

/// The 1, 5 and 15 minute load averages.
fn load() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
