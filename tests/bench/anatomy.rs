//! P1's anatomy: where the time of a claim and of a release goes. A second
//! agent, started with the trace points on (see `csi_agent::trace`), takes
//! [`RUNS`] claims and releases as P1 does, apart from P1's timed runs so
//! that the trace does not touch them. The agent's points and the
//! benchmark's own (the call sent, the answer back) are on one clock, and
//! split each call into phases: the control API both ways, the loop's work
//! before the record's sync, the sync, the hand-off to the worker, the
//! RPCs, the host bind or unbind, the hand-offs between steps (a step's
//! outcome written by the loop before the next RPC), and the answer after
//! the last step. The phases of a call add up to its total; each is the
//! median over the runs.

use std::fs;
use std::path::Path;
use std::time::Duration;

use csi_agent::proto::agent::VolumeClaimRequest;
pub use csi_agent::trace::anatomy::PHASES;
use csi_agent::trace::anatomy::{calls, medians, Phases, Point};
use csi_agent::trace::now_us;

use crate::claim::{self, Setup};
use crate::rig::BenchDir;
use crate::Options;

/// Claims and releases traced, after [`claim::WARMUP`].
pub const RUNS: usize = 50;

pub struct Anatomy {
    pub claim: Phases,
    pub release: Phases,
}

/// Traces the claims and releases; `None` when the agent wrote no trace
/// (a binary from before the trace points, through `--agent-bin`).
pub fn run(opts: &Options, root: &Path) -> Option<Anatomy> {
    let mut setup = Setup::start(opts, root, "p1-anatomy", true);
    let control = setup.agent.client();
    let targets = setup.dir.mkdir("targets");
    let mut marks: Vec<(u64, &'static str)> = Vec::new();
    for i in 0..claim::WARMUP + RUNS {
        let alloc = format!("a{i}");
        let target = claim::existing_target(&targets, &alloc);
        let req = VolumeClaimRequest {
            volume_id: "v".into(),
            alloc_id: alloc.clone(),
            target: target.display().to_string(),
            ..Default::default()
        };
        marks.push((now_us(), "claim"));
        control.volume_claim(&req).expect("claim through the agent");
        marks.push((now_us(), "claimed"));
        marks.push((now_us(), "release"));
        let released = control
            .volume_release("v", &alloc)
            .expect("release through the agent");
        marks.push((now_us(), "released"));
        assert!(released.released, "release: {}", released.message);
        claim::remove_target(&target);
    }
    let trace = trace_file(&setup.dir);
    setup.agent.stop();
    let text = fs::read_to_string(&trace).ok()?;
    let mut points: Vec<Point> = text.lines().filter_map(Point::parse).collect();
    points.extend(marks.into_iter().map(|(at, label)| Point {
        at,
        label: label.to_string(),
        detail: String::new(),
    }));
    points.sort_by_key(|p| p.at);
    Some(Anatomy {
        claim: medians(&calls(&points, "claim", "claimed", claim::WARMUP)),
        release: medians(&calls(&points, "release", "released", claim::WARMUP)),
    })
}

/// The file the traced agent writes its points to, under its dir.
pub fn trace_file(dir: &BenchDir) -> std::path::PathBuf {
    dir.join("trace")
}

/// `0.35 ms` for microseconds.
pub fn ms(us: u64) -> String {
    crate::stats::ms(Duration::from_micros(us))
}
