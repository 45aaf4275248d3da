//! P12, the cost of the usage polls: with P2's 1,000 claims taken (its
//! rig, after P4's restart, which P12 makes itself without P4), the agent asks NodeGetVolumeStats of each staged
//! volume every `volume_stats_interval` (its default, 60 s, jittered) and
//! GetCapacity of each plugin. Its CPU time over [`WINDOW`] (two
//! intervals) is compared with the same window after a SIGHUP turned the
//! polls off (`volume_stats_interval = "0s"`): the difference is the
//! polls' share of one core.
//!
//! Checked, not timed: every volume's condition was asked for within the
//! window with the polls on (`volume status` shows when each was last
//! checked), so the polls did run, each volume at least once.

use std::time::{Duration, Instant, SystemTime};

use crate::idle::{clock_ticks_per_second, cpu_ticks};
use crate::storm::StormRig;

/// Each measured window: two of the default intervals.
pub const WINDOW: Duration = Duration::from_secs(120);

/// After the restart of P4 (or the SIGHUP), before a window starts: the
/// first polls of a restored volume fall within a tenth of the interval.
const SETTLE: Duration = Duration::from_secs(10);

pub struct PollsResult {
    pub volumes: usize,
    /// Percent of one core over the window, with the polls and without.
    pub with: f64,
    pub without: f64,
    /// Volumes whose condition was checked within the window with polls.
    pub polled: usize,
}

fn cpu_percent(pid: u32, window: Duration) -> f64 {
    let start = cpu_ticks(pid);
    let began = Instant::now();
    std::thread::sleep(window);
    let ticks = cpu_ticks(pid) - start;
    ticks as f64 / clock_ticks_per_second() / began.elapsed().as_secs_f64() * 100.0
}

pub fn run(rig: &mut StormRig) -> PollsResult {
    std::thread::sleep(SETTLE);
    let pid = rig.agent.pid();
    let started = SystemTime::now();
    let with = cpu_percent(pid, WINDOW);
    let status = rig
        .agent
        .client()
        .volume_status("", false)
        .expect("volume status");
    let since = csi_agent::plugin::fingerprint::unix_ms(started);
    let polled = status
        .volumes
        .iter()
        .filter(|v| {
            v.health
                .as_ref()
                .is_some_and(|h| h.checked_unix_ms >= since)
        })
        .count();
    rig.agent
        .append_config("\nvolume_stats_interval = \"0s\"\n");
    rig.agent.signal(libc::SIGHUP);
    std::thread::sleep(SETTLE);
    let without = cpu_percent(pid, WINDOW);
    PollsResult {
        volumes: status.volumes.len(),
        with,
        without,
        polled,
    }
}
