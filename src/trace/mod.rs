//! Latency trace points: where the time of a claim goes, for the
//! benchmark's anatomy of one (`make bench`, row P1). Off unless the agent
//! starts with [`TRACE_ENV`] naming a file: then each point records the
//! monotonic clock (the same clock in every process of the host, so the
//! benchmark's own points line up with the agent's) and its label in
//! memory, and [`finish`] writes them to the file when the agent stops.
//! Off, a point is one relaxed atomic load; on, a lock and a push, well
//! under a microsecond, so the trace barely moves what it measures. It is
//! a benchmark's tool: the first million points are kept.
//!
//! The file has one line per point: microseconds, label, detail (a step's
//! name, or `-`).

pub mod anatomy;

use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The environment variable naming the file the points go to.
pub const TRACE_ENV: &str = "CSI_AGENT_TRACE";

/// Points kept at most (40 MiB): an agent left tracing keeps the first
/// ones, and its memory stops growing there.
const MAX_POINTS: usize = 1 << 20;

static ON: AtomicBool = AtomicBool::new(false);
static POINTS: Mutex<Points> = Mutex::new(Points {
    file: None,
    points: Vec::new(),
});

struct Points {
    file: Option<PathBuf>,
    points: Vec<(u64, &'static str, &'static str)>,
}

/// Turns tracing on when [`TRACE_ENV`] is set.
pub fn start() {
    let Some(file) = std::env::var_os(TRACE_ENV) else {
        return;
    };
    let mut points = POINTS.lock().unwrap_or_else(|e| e.into_inner());
    points.file = Some(PathBuf::from(file));
    points.points.reserve(1 << 16);
    ON.store(true, Ordering::Relaxed);
}

/// Records `label` (and `detail`) now, when tracing is on.
#[inline]
pub fn point(label: &'static str, detail: &'static str) {
    if ON.load(Ordering::Relaxed) {
        record(label, detail);
    }
}

#[cold]
fn record(label: &'static str, detail: &'static str) {
    let now = now_us();
    let mut points = POINTS.lock().unwrap_or_else(|e| e.into_inner());
    if points.points.len() < MAX_POINTS {
        points.points.push((now, label, detail));
    }
}

/// Writes the points recorded to the file, when tracing is on.
pub fn finish() -> io::Result<()> {
    if !ON.swap(false, Ordering::Relaxed) {
        return Ok(());
    }
    let mut points = POINTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(file) = points.file.take() else {
        return Ok(());
    };
    let mut out = io::BufWriter::new(fs::File::create(&file)?);
    for (at, label, detail) in points.points.drain(..) {
        let detail = if detail.is_empty() { "-" } else { detail };
        writeln!(out, "{at} {label} {detail}")?;
    }
    out.flush()
}

/// The monotonic clock in microseconds.
pub fn now_us() -> u64 {
    crate::sys::process::monotonic_us()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_kept_only_while_on_and_written_in_order() {
        // Other tests of the process may record points while this one has
        // tracing on: only this test's labels are looked at.
        let file = std::env::temp_dir().join(format!("csi-agent-trace-{}", std::process::id()));
        point("trace-test-before", "");
        POINTS.lock().unwrap().file = Some(file.clone());
        ON.store(true, Ordering::Relaxed);
        point("trace-test-a", "");
        point("trace-test-b", "NodeStageVolume");
        finish().unwrap();
        point("trace-test-after", "");
        let text = fs::read_to_string(&file).unwrap();
        fs::remove_file(&file).unwrap();
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split(' ').collect())
            .filter(|l: &Vec<&str>| l[1].starts_with("trace-test-"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0][1..], ["trace-test-a", "-"]);
        assert_eq!(lines[1][1..], ["trace-test-b", "NodeStageVolume"]);
        let at: Vec<u64> = lines.iter().map(|l| l[0].parse().unwrap()).collect();
        assert!(at[0] <= at[1] && at[0] > 0, "{at:?}");
        assert!(!ON.load(Ordering::Relaxed), "off once written");
    }
}
