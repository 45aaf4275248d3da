//! `alloc status`'s "Task Resources" table and, with `-stats`, its
//! "Memory Stats" and "CPU Stats", in Nomad's layout: used/limit for CPU
//! (MHz) and memory (bytes as go-humanize's `IBytes` writes them), then
//! the figures the agent measured, sorted by name as Nomad sorts them. A
//! figure that is not available is left out of the used/limit cell, and a
//! line under the table says why.

use super::plugin_cmd::columns;
use crate::proto::agent as api;

/// The "Task Resources" section of `task`; `usage` is its figures, none
/// for it, or why the call for them failed.
pub fn resources(
    task: &api::TaskStatus,
    ports: &[api::AllocPort],
    usage: Result<Option<&api::TaskUsage>, &str>,
    verbose: bool,
) -> String {
    let found = usage.ok().flatten();
    let memory = found.and_then(|u| u.memory.as_ref());
    let cpu = found.and_then(|u| u.cpu.as_ref());
    let cpu_used = cpu
        .filter(|c| measured(&c.measured, "Percent"))
        .map(|c| c.total_mhz);
    let memory_used = memory
        .filter(|m| measured(&m.measured, "RSS"))
        .map(|m| m.rss);
    let cpu_cell = match (cpu_used, task.cpu_mhz) {
        (Some(used), 0) => format!("{used} MHz"),
        (Some(used), limit) => format!("{used}/{limit} MHz"),
        (None, 0) => "-".to_string(),
        (None, limit) => format!("{limit} MHz"),
    };
    let limit = task.memory_mb.saturating_mul(1024 * 1024);
    let memory_cell = match (memory_used, limit) {
        (Some(used), 0) => ibytes(used),
        (Some(used), limit) => format!("{}/{}", ibytes(used), ibytes(limit)),
        (None, 0) => "-".to_string(),
        (None, limit) => ibytes(limit),
    };
    let addresses: Vec<String> = ports
        .iter()
        .map(|p| format!("{}: {}", p.label, p.host))
        .collect();
    let mut rows = vec![["CPU", "Memory", "Disk", "Addresses"]
        .map(str::to_string)
        .to_vec()];
    rows.push(vec![
        cpu_cell,
        memory_cell,
        // ephemeral_disk is not reserved here.
        "-".to_string(),
        addresses
            .first()
            .cloned()
            .unwrap_or_else(|| "-".to_string()),
    ]);
    for more in addresses.iter().skip(1) {
        rows.push(vec![
            String::new(),
            String::new(),
            String::new(),
            more.clone(),
        ]);
    }
    let mut out = String::from("Task Resources:\n");
    out.push_str(&columns(&rows));
    let why = match usage {
        Err(why) => format!("the agent gave no usage: {why}"),
        Ok(None) => "the agent gave no usage for this task".to_string(),
        Ok(Some(u)) => u.note.clone(),
    };
    let some = memory.is_some_and(|m| !m.measured.is_empty())
        || cpu.is_some_and(|c| !c.measured.is_empty());
    if some && !why.is_empty() {
        // Some figures, not all: which are missing.
        out.push_str(&format!("Usage {why}\n"));
    } else if !why.is_empty() {
        out.push_str(&format!("Usage not available: {why}\n"));
    }
    if verbose {
        if let Some(m) = memory.filter(|m| !m.measured.is_empty()) {
            out.push_str("\nMemory Stats\n");
            out.push_str(&figures(&m.measured, |name| match name {
                "RSS" => ibytes(m.rss),
                "Cache" => ibytes(m.cache),
                "Swap" => ibytes(m.swap),
                "Usage" => ibytes(m.usage),
                "Max Usage" => ibytes(m.max_usage),
                _ => "-".to_string(),
            }));
        }
        if let Some(c) = cpu.filter(|c| !c.measured.is_empty()) {
            out.push_str("\nCPU Stats\n");
            out.push_str(&figures(&c.measured, |name| match name {
                "Percent" => format!("{:.2}%", c.percent),
                "User Mode" => format!("{:.2}%", c.user_mode),
                "System Mode" => format!("{:.2}%", c.system_mode),
                "Throttled Periods" => c.throttled_periods.to_string(),
                "Throttled Time" => c.throttled_time.to_string(),
                _ => "-".to_string(),
            }));
        }
    }
    out
}

fn measured(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n == name)
}

/// A header of the measured names, sorted, and a row of their values.
fn figures(names: &[String], value: impl Fn(&str) -> String) -> String {
    let mut names: Vec<&String> = names.iter().collect();
    order::sort(&mut names);
    columns(&[
        names.iter().map(|n| n.to_string()).collect(),
        names.iter().map(|n| value(n)).collect(),
    ])
}

/// Bytes as go-humanize's `IBytes` writes them: `512 B`, `1.5 KiB`,
/// `12 MiB` (one decimal below 10).
pub fn ibytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 10 {
        return format!("{bytes} B");
    }
    let exp = ((bytes as f64).ln() / 1024f64.ln()).floor() as usize;
    let exp = exp.min(UNITS.len() - 1);
    let value = (bytes as f64 / 1024f64.powi(exp as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[exp])
    } else {
        format!("{value:.0} {}", UNITS[exp])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_print_as_go_humanize_prints_them() {
        assert_eq!(ibytes(0), "0 B");
        assert_eq!(ibytes(9), "9 B");
        assert_eq!(ibytes(512), "512 B");
        assert_eq!(ibytes(1536), "1.5 KiB");
        assert_eq!(ibytes(64 * 1024 * 1024), "64 MiB");
        assert_eq!(ibytes(1_288_490_189), "1.2 GiB");
    }

    fn task() -> api::TaskStatus {
        api::TaskStatus {
            name: "t".into(),
            cpu_mhz: 150,
            memory_mb: 64,
            ..Default::default()
        }
    }

    #[test]
    fn used_over_limit_and_the_detail_with_stats() {
        let usage = api::TaskUsage {
            task: "t".into(),
            source: "cgroup v2".into(),
            memory: protobuf::MessageField::some(api::MemoryUsage {
                rss: 3 * 1024 * 1024,
                usage: 4 * 1024 * 1024,
                measured: vec!["RSS".into(), "Usage".into()],
                ..Default::default()
            }),
            cpu: protobuf::MessageField::some(api::CpuUsage {
                percent: 12.5,
                total_mhz: 250,
                measured: vec!["Percent".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let port = api::AllocPort {
            label: "http".into(),
            host: 23456,
            ..Default::default()
        };
        let text = resources(&task(), &[port], Ok(Some(&usage)), true);
        assert!(
            text.contains("250/150 MHz  3.0 MiB/64 MiB  -     http: 23456"),
            "{text}"
        );
        assert!(text.contains("RSS      Usage\n3.0 MiB  4.0 MiB"), "{text}");
        assert!(text.contains("Percent\n12.50%"), "{text}");
        assert!(!text.contains("not available"), "{text}");
    }

    #[test]
    fn a_figure_not_available_is_said_so() {
        let usage = api::TaskUsage {
            task: "t".into(),
            note: "the task is not running (dead)".into(),
            ..Default::default()
        };
        let text = resources(&task(), &[], Ok(Some(&usage)), false);
        assert!(text.contains("150 MHz  64 MiB  -     -"), "{text}");
        assert!(
            text.contains("Usage not available: the task is not running (dead)"),
            "{text}"
        );
        let text = resources(&task(), &[], Err("the agent is gone"), false);
        assert!(text.contains("Usage not available: the agent gave no usage: the agent is gone"));
    }
}
