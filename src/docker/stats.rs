//! `GET /containers/{id}/stats`, one sample (`stream=false&one-shot=true`):
//! a container's memory and CPU counters as the engine reads them from its
//! control group, for `alloc status`.

use super::http::encode;
use super::{Engine, Error};
use json::Value;

/// One sample of a container's counters; each is `None` when the engine
/// did not give it (a cgroup v2 host has no `max_usage`, say).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerStats {
    pub memory_usage: Option<u64>,
    pub memory_max_usage: Option<u64>,
    /// `rss` (cgroup v1) or `anon` (v2) of `memory_stats.stats`.
    pub rss: Option<u64>,
    /// `cache` (v1) or `file` (v2).
    pub cache: Option<u64>,
    pub swap: Option<u64>,
    /// Nanoseconds of CPU, all of it, in user mode and in kernel mode.
    pub cpu_total_ns: Option<u64>,
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub throttled_periods: Option<u64>,
    pub throttled_time_ns: Option<u64>,
}

impl Engine {
    /// One sample of the counters of container `id_or_name`.
    pub fn stats(&self, id_or_name: &str) -> Result<ContainerStats, Error> {
        let target = format!(
            "/containers/{}/stats?stream=false&one-shot=true",
            encode(id_or_name)
        );
        Ok(ContainerStats::from_answer(&self.get_json(&target)?))
    }
}

impl ContainerStats {
    /// The counters of the engine's answer.
    pub fn from_answer(answer: &Value) -> ContainerStats {
        let at = |path: &[&str]| {
            path.iter()
                .try_fold(answer, |v, key| v.get(key))
                .and_then(Value::as_u64)
        };
        let either = |a: &[&str], b: &[&str]| at(a).or_else(|| at(b));
        ContainerStats {
            memory_usage: at(&["memory_stats", "usage"]),
            memory_max_usage: at(&["memory_stats", "max_usage"]),
            rss: either(
                &["memory_stats", "stats", "rss"],
                &["memory_stats", "stats", "anon"],
            ),
            cache: either(
                &["memory_stats", "stats", "cache"],
                &["memory_stats", "stats", "file"],
            ),
            swap: at(&["memory_stats", "stats", "swap"]),
            cpu_total_ns: at(&["cpu_stats", "cpu_usage", "total_usage"]),
            cpu_user_ns: at(&["cpu_stats", "cpu_usage", "usage_in_usermode"]),
            cpu_system_ns: at(&["cpu_stats", "cpu_usage", "usage_in_kernelmode"]),
            throttled_periods: at(&["cpu_stats", "throttling_data", "throttled_periods"]),
            throttled_time_ns: at(&["cpu_stats", "throttling_data", "throttled_time"]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_v1_and_v2_answers() {
        let v2 = json::parse_bytes(
            br#"{"memory_stats":{"usage":4096,"stats":{"anon":1000,"file":2000}},
                "cpu_stats":{"cpu_usage":{"total_usage":5000,"usage_in_usermode":3000,"usage_in_kernelmode":2000},
                "throttling_data":{"periods":0,"throttled_periods":0,"throttled_time":0}}}"#,
        )
        .unwrap();
        let stats = ContainerStats::from_answer(&v2);
        assert_eq!(stats.memory_usage, Some(4096));
        assert_eq!(stats.memory_max_usage, None);
        assert_eq!(
            (stats.rss, stats.cache, stats.swap),
            (Some(1000), Some(2000), None)
        );
        assert_eq!(stats.cpu_total_ns, Some(5000));
        assert_eq!(stats.throttled_periods, Some(0));
        let v1 = json::parse_bytes(
            br#"{"memory_stats":{"usage":10,"max_usage":20,"stats":{"rss":3,"cache":4,"swap":5}}}"#,
        )
        .unwrap();
        let stats = ContainerStats::from_answer(&v1);
        assert_eq!(
            (stats.memory_max_usage, stats.rss, stats.cache, stats.swap),
            (Some(20), Some(3), Some(4), Some(5))
        );
        assert_eq!(stats.cpu_total_ns, None);
    }
}
