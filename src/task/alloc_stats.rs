//! `alloc status`'s resource usage: each running task's memory and CPU, as
//! Nomad's `ResourceUsage` has them. The main loop only looks up where
//! each task's figures are ([`Allocs::stats_target`]); the session's
//! thread reads them ([`sample`]):
//!
//! - an `exec` or `raw_exec` task from its control group (`cgroup.rs`):
//!   on cgroup v2 `memory.current` (Usage), `memory.peak` (Max Usage,
//!   Linux 5.19 on), `memory.stat`'s `anon` and `file` (RSS, Cache),
//!   `memory.swap.current` (Swap) and `cpu.stat` (`usage_usec`,
//!   `user_usec`, `system_usec`, `nr_throttled`, `throttled_usec`); on v1
//!   `memory.usage_in_bytes`, `memory.max_usage_in_bytes`, `memory.stat`,
//!   `cpu.stat`, and `cpuacct.usage` where cpuacct shares the cpu
//!   controller's mount, else the user and system times of the group's
//!   processes (`/proc/<pid>/stat`; a child that has exited is not
//!   counted);
//! - a `docker` task from the engine's stats, one sample per call
//!   (`docker/stats.rs`).
//!
//! CPU percent is of one CPU, from two samples [`CPU_SAMPLE`] apart (Nomad's
//! percent is too); MHz is that share of one core's MHz (Nomad's
//! `TotalTicks`). A figure the source does not give is left out, and a
//! task with no source says why.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::driver::Handle;
use super::{cgroup, Allocs, TaskState};
use crate::call::CallError;
use crate::spec::Driver;
use crate::sys::cgroup::{keyed, Controller, Group};

/// How far apart the two samples of a task's CPU time are: long enough
/// for a percent that means something, short enough for a command.
pub const CPU_SAMPLE: Duration = Duration::from_millis(250);

/// Where one task's figures are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The task's control group.
    Cgroup(Group),
    /// The container `container` on the engine at `endpoint`.
    Docker { endpoint: String, container: String },
    /// None, and why.
    Unavailable(String),
}

/// What [`sample`] reads for an alloc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsTarget {
    pub alloc_id: String,
    /// One core's MHz, to turn a percent into MHz.
    pub mhz_per_core: u64,
    pub tasks: Vec<(String, Source)>,
}

/// A task's memory figures, in bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    pub rss: Option<u64>,
    pub cache: Option<u64>,
    pub swap: Option<u64>,
    pub usage: Option<u64>,
    pub max_usage: Option<u64>,
}

/// A task's CPU figures over [`CPU_SAMPLE`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cpu {
    pub percent: Option<f64>,
    pub user_mode: Option<f64>,
    pub system_mode: Option<f64>,
    pub throttled_periods: Option<u64>,
    pub throttled_time_ns: Option<u64>,
    pub total_mhz: Option<u64>,
}

/// One task's usage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    pub task: String,
    /// "cgroup v2", "cgroup v1", "docker", or empty.
    pub source: String,
    /// Why figures are missing.
    pub note: String,
    pub memory: Memory,
    pub cpu: Cpu,
}

/// One reading of a task's counters.
#[derive(Clone, Debug, Default)]
struct Counters {
    memory: Memory,
    cpu_ns: Option<u64>,
    user_ns: Option<u64>,
    system_ns: Option<u64>,
    throttled_periods: Option<u64>,
    throttled_time_ns: Option<u64>,
}

impl Allocs {
    /// Where the figures of each task of alloc `alloc_id` (an ID or a
    /// prefix) are.
    pub(super) fn stats_target(&self, alloc_id: &str) -> Result<StatsTarget, CallError> {
        let alloc = &self.allocs[&self.alloc_by_prefix(alloc_id)?];
        let endpoint = self.docker.endpoint();
        let tasks = alloc
            .tasks
            .iter()
            .map(|task| {
                let driver = alloc
                    .group
                    .tasks
                    .iter()
                    .find(|t| t.name == task.name)
                    .map(|t| t.driver);
                let handle = task.process.as_ref().map(|p| &p.handle);
                let source = match (task.state, driver, handle) {
                    (TaskState::Running, Some(Driver::Docker), Some(Handle::Container { name, .. })) => {
                        match &endpoint {
                            Ok(endpoint) => Source::Docker {
                                endpoint: endpoint.clone(),
                                container: name.clone(),
                            },
                            Err(why) => Source::Unavailable(why.clone()),
                        }
                    }
                    (TaskState::Running, Some(_), Some(_)) => {
                        match cgroup::group(&alloc.id, &task.name).filter(Group::exists) {
                            Some(group) => Source::Cgroup(group),
                            None => Source::Unavailable(
                                "the task has no control group (no cgroup controllers are mounted, or they are not writable)".into(),
                            ),
                        }
                    }
                    (state, _, _) => Source::Unavailable(format!(
                        "the task is not running ({})",
                        state.as_str()
                    )),
                };
                (task.name.clone(), source)
            })
            .collect();
        Ok(StatsTarget {
            alloc_id: alloc.id.clone(),
            mhz_per_core: self.placement.node.mhz_per_core,
            tasks,
        })
    }
}

/// Reads the figures of every task of `target`: two readings
/// [`CPU_SAMPLE`] apart, the memory figures from the second.
pub fn sample(target: &StatsTarget) -> Vec<Usage> {
    let first: Vec<Result<Counters, String>> = target.tasks.iter().map(|(_, s)| read(s)).collect();
    let started = Instant::now();
    if target
        .tasks
        .iter()
        .any(|(_, s)| !matches!(s, Source::Unavailable(_)))
    {
        thread::sleep(CPU_SAMPLE);
    }
    let elapsed_ns = started.elapsed().as_nanos().max(1) as f64;
    target
        .tasks
        .iter()
        .zip(first)
        .map(|((task, source), first)| {
            let mut usage = Usage {
                task: task.clone(),
                source: source_name(source),
                ..Default::default()
            };
            let (first, second) = match (first, read(source)) {
                (Ok(first), Ok(second)) => (first, second),
                (Err(why), _) | (_, Err(why)) => {
                    usage.source.clear();
                    usage.note = why;
                    return usage;
                }
            };
            let percent = |a: Option<u64>, b: Option<u64>| {
                Some(b?.saturating_sub(a?) as f64 * 100.0 / elapsed_ns)
            };
            usage.cpu = Cpu {
                percent: percent(first.cpu_ns, second.cpu_ns),
                user_mode: percent(first.user_ns, second.user_ns),
                system_mode: percent(first.system_ns, second.system_ns),
                throttled_periods: second.throttled_periods,
                throttled_time_ns: second.throttled_time_ns,
                total_mhz: None,
            };
            usage.cpu.total_mhz = usage
                .cpu
                .percent
                .map(|p| (p / 100.0 * target.mhz_per_core as f64).floor() as u64);
            usage.memory = second.memory;
            usage.note = missing(&usage);
            usage
        })
        .collect()
}

fn source_name(source: &Source) -> String {
    match source {
        Source::Cgroup(group) if is_unified(group) => "cgroup v2".into(),
        Source::Cgroup(_) => "cgroup v1".into(),
        Source::Docker { .. } => "docker".into(),
        Source::Unavailable(_) => String::new(),
    }
}

/// What the source did not give, in words.
fn missing(usage: &Usage) -> String {
    let m = &usage.memory;
    let c = &usage.cpu;
    let names = [
        ("RSS", m.rss.is_none()),
        ("Cache", m.cache.is_none()),
        ("Swap", m.swap.is_none()),
        ("Usage", m.usage.is_none()),
        ("Max Usage", m.max_usage.is_none()),
        ("Percent", c.percent.is_none()),
        ("User Mode", c.user_mode.is_none()),
        ("System Mode", c.system_mode.is_none()),
        ("Throttled Periods", c.throttled_periods.is_none()),
        ("Throttled Time", c.throttled_time_ns.is_none()),
    ];
    let absent: Vec<&str> = names.iter().filter(|(_, a)| *a).map(|(n, _)| *n).collect();
    if absent.is_empty() {
        String::new()
    } else {
        format!("not measured by {}: {}", usage.source, absent.join(", "))
    }
}

fn is_unified(group: &Group) -> bool {
    group
        .dir(Controller::Memory)
        .is_some_and(|d| d.join("cgroup.controllers").exists())
}

fn read(source: &Source) -> Result<Counters, String> {
    match source {
        Source::Cgroup(group) => read_group(group),
        Source::Docker {
            endpoint,
            container,
        } => {
            let engine = crate::docker::Engine::new(endpoint).map_err(|e| e.to_string())?;
            let stats = engine
                .stats(container)
                .map_err(|e| format!("the container engine's stats: {e}"))?;
            Ok(Counters {
                memory: Memory {
                    rss: stats.rss,
                    cache: stats.cache,
                    swap: stats.swap,
                    usage: stats.memory_usage,
                    max_usage: stats.memory_max_usage,
                },
                cpu_ns: stats.cpu_total_ns,
                user_ns: stats.cpu_user_ns,
                system_ns: stats.cpu_system_ns,
                throttled_periods: stats.throttled_periods,
                throttled_time_ns: stats.throttled_time_ns,
            })
        }
        Source::Unavailable(why) => Err(why.clone()),
    }
}

fn number(dir: &Path, file: &str) -> Option<u64> {
    fs::read_to_string(dir.join(file)).ok()?.trim().parse().ok()
}

fn keyed_in(dir: &Path, file: &str, key: &str) -> Option<u64> {
    keyed(&fs::read_to_string(dir.join(file)).ok()?, key)
}

/// The counters of a task's group: v2's one dir, or v1's memory and cpu
/// dirs.
fn read_group(group: &Group) -> Result<Counters, String> {
    let gone = || "the task's control group is gone".to_string();
    let memory_dir = group.dir(Controller::Memory).ok_or_else(gone)?;
    if !memory_dir.exists() {
        return Err(gone());
    }
    if is_unified(group) {
        let d = memory_dir;
        let us = |key: &str| keyed_in(d, "cpu.stat", key).map(|v| v.saturating_mul(1000));
        return Ok(Counters {
            memory: Memory {
                rss: keyed_in(d, "memory.stat", "anon"),
                cache: keyed_in(d, "memory.stat", "file"),
                swap: number(d, "memory.swap.current"),
                usage: number(d, "memory.current"),
                max_usage: number(d, "memory.peak"),
            },
            cpu_ns: us("usage_usec"),
            user_ns: us("user_usec"),
            system_ns: us("system_usec"),
            throttled_periods: keyed_in(d, "cpu.stat", "nr_throttled"),
            throttled_time_ns: us("throttled_usec"),
        });
    }
    let m = memory_dir;
    let cpu = group.dir(Controller::Cpu).filter(|d| d.exists());
    let cpu_number = |file: &str| cpu.and_then(|d| number(d, file));
    let cpu_keyed = |key: &str| cpu.and_then(|d| keyed_in(d, "cpu.stat", key));
    // Without cpuacct beside cpu (a host that mounts it apart, where the
    // agent makes no group), the group's processes' own CPU times.
    let ticks = if cpu_number("cpuacct.usage").is_some() {
        None
    } else {
        process_times(&group.pids())
    };
    Ok(Counters {
        memory: Memory {
            rss: keyed_in(m, "memory.stat", "rss"),
            cache: keyed_in(m, "memory.stat", "cache"),
            swap: keyed_in(m, "memory.stat", "swap"),
            usage: number(m, "memory.usage_in_bytes"),
            max_usage: number(m, "memory.max_usage_in_bytes"),
        },
        cpu_ns: cpu_number("cpuacct.usage").or(ticks.map(|(u, s)| u + s)),
        user_ns: ticks.map(|(u, _)| u),
        system_ns: ticks.map(|(_, s)| s),
        throttled_periods: cpu_keyed("nr_throttled"),
        throttled_time_ns: cpu_keyed("throttled_time"),
    })
}

/// The kernel's unit of `/proc/<pid>/stat`'s times: USER_HZ, 100 on
/// every Linux the agent runs on.
const USER_HZ: u64 = 100;

/// The user and system CPU times of `pids` together, in nanoseconds, from
/// `/proc/<pid>/stat` (fields 14 and 15); `None` for no pid.
fn process_times(pids: &[u32]) -> Option<(u64, u64)> {
    let to_ns = 1_000_000_000 / USER_HZ;
    let mut total = None;
    for pid in pids {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((user, system)) = stat_times(&text) {
            let (u, s) = total.unwrap_or((0, 0));
            total = Some((u + user * to_ns, s + system * to_ns));
        }
    }
    total
}

/// `utime` and `stime` of a `/proc/<pid>/stat` line: the 12th and 13th
/// fields after the command's closing parenthesis.
fn stat_times(text: &str) -> Option<(u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_without_a_source_says_why_and_is_not_sampled() {
        let target = StatsTarget {
            alloc_id: "a".into(),
            mhz_per_core: 2000,
            tasks: vec![(
                "t".into(),
                Source::Unavailable("the task is not running (dead)".into()),
            )],
        };
        let started = Instant::now();
        let usage = sample(&target);
        assert!(started.elapsed() < CPU_SAMPLE);
        assert_eq!(usage[0].note, "the task is not running (dead)");
        assert_eq!(usage[0].source, "");
        assert_eq!(usage[0].memory, Memory::default());
    }

    #[test]
    fn proc_stat_gives_user_and_system_ticks() {
        let line = "42 (a (b) c) R 1 42 42 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 1 0 1234 0 0";
        assert_eq!(stat_times(line), Some((37, 5)));
        assert_eq!(stat_times("42 (x) R 1"), None);
    }

    #[test]
    fn missing_figures_are_named() {
        let usage = Usage {
            source: "cgroup v2".into(),
            memory: Memory {
                rss: Some(1),
                cache: Some(1),
                swap: Some(0),
                usage: Some(1),
                max_usage: None,
            },
            cpu: Cpu {
                percent: Some(1.0),
                user_mode: Some(1.0),
                system_mode: Some(0.0),
                throttled_periods: Some(0),
                throttled_time_ns: Some(0),
                total_mhz: Some(20),
            },
            ..Default::default()
        };
        assert_eq!(missing(&usage), "not measured by cgroup v2: Max Usage");
    }
}
