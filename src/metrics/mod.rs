//! The agent's own metrics, for a Prometheus scrape: a small
//! registry of counters, gauges and histograms with labels, and the text
//! exposition format (version 0.0.4) it is written in.
//!
//! Every family the agent exports is a `static` [`Family`] in
//! `families.rs`, with its name, help, type and label names; the code that
//! does the thing counts it where it happens (`metrics::CSI_OPERATIONS
//! .observe(...)`), through one process-wide [`Registry`], so no layer
//! plumbs a handle and a scrape never walks the agent's state. A scrape
//! ([`render`]) writes every family, sorted by name, even those that have
//! not moved yet (their `HELP` and `TYPE` lines), and each family's
//! series sorted by their label values, so the output is stable.
//!
//! Label values are IDs and names only (plugin IDs, RPC method names,
//! codes, states); never a secret, a mount flag or a volume context value.
//! The registry does not know what a value means, so this is the callers'
//! rule: `families.rs` lists each family's label names, and nothing else
//! can be a label.
//!
//! Updates take one mutex around a map lookup: they are rare next to the
//! I/O they count (an RPC, a sync, an API call).

mod families;
pub mod http;
mod text;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

pub use families::*;
pub use text::{escape_label_value, format_value};

/// What a family is: a counter (only goes up), a gauge, or a histogram
/// with its upper bounds (ascending; `+Inf` is implied).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram(&'static [f64]),
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        }
    }
}

/// One metric family: its name (`csi_agent_` and the unit in it), help
/// line, kind and label names.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
}

impl Family {
    pub const fn counter(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Family {
        Family {
            name,
            help,
            kind: Kind::Counter,
            labels,
        }
    }

    pub const fn gauge(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Family {
        Family {
            name,
            help,
            kind: Kind::Gauge,
            labels,
        }
    }

    pub const fn histogram(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        buckets: &'static [f64],
    ) -> Family {
        Family {
            name,
            help,
            kind: Kind::Histogram(buckets),
            labels,
        }
    }

    /// Adds one to a counter's series (`values` in the order of
    /// [`Family::labels`]).
    pub fn inc(&'static self, values: &[&str]) {
        global().add(self, values, 1.0);
    }

    /// Adds `n` to a counter's or a gauge's series.
    pub fn add(&'static self, values: &[&str], n: f64) {
        global().add(self, values, n);
    }

    /// Sets a gauge's series.
    pub fn set(&'static self, values: &[&str], v: f64) {
        global().set(self, values, v);
    }

    /// Drops a gauge's series (a volume or plugin that is gone), so that
    /// a scrape no longer shows its last value.
    pub fn remove(&'static self, values: &[&str]) {
        global().remove(self, values);
    }

    /// Counts one observation of a histogram.
    pub fn observe(&'static self, values: &[&str], v: f64) {
        global().observe(self, values, v);
    }

    /// A series' value now: a counter's or a gauge's value, a histogram's
    /// count; 0 for a series never touched.
    pub fn value(&'static self, values: &[&str]) -> f64 {
        global().value(self, values)
    }

    /// The sum of every series' [`Family::value`].
    pub fn total(&'static self) -> f64 {
        global().total(self)
    }
}

/// The value of one series.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Number(f64),
    Histogram {
        /// Per bucket, not cumulative; the last is `+Inf`'s own.
        counts: Vec<u64>,
        sum: f64,
        count: u64,
    },
}

type Series = BTreeMap<Vec<String>, Value>;

/// Series by family name.
#[derive(Debug, Default)]
pub struct Registry {
    families: Mutex<BTreeMap<&'static str, Series>>,
}

/// The process-wide registry every [`Family`] method counts in.
pub fn global() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// Every family the agent exports, in the exposition format, from the
/// process-wide registry.
pub fn render() -> String {
    global().render(ALL)
}

/// [`render`] written to `out` as it goes, a few KiB at a time: a scrape
/// of an agent with many plugins is hundreds of KiB, which need not be
/// held (and kept by the allocator) at once.
pub fn render_into(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    global().write(ALL, out)
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    fn with_series<R>(
        &self,
        family: &Family,
        values: &[&str],
        f: impl FnOnce(&mut Option<&mut Value>) -> R,
    ) -> R {
        debug_assert_eq!(
            values.len(),
            family.labels.len(),
            "{}: label values {values:?} for {:?}",
            family.name,
            family.labels
        );
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let series = families.entry(family.name).or_default();
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        if !series.contains_key(&key) {
            let fresh = match family.kind {
                Kind::Histogram(buckets) => Value::Histogram {
                    counts: vec![0; buckets.len() + 1],
                    sum: 0.0,
                    count: 0,
                },
                _ => Value::Number(0.0),
            };
            series.insert(key.clone(), fresh);
        }
        f(&mut series.get_mut(&key))
    }

    pub fn add(&self, family: &Family, values: &[&str], n: f64) {
        debug_assert!(family.kind != Kind::Counter || n >= 0.0);
        self.with_series(family, values, |value| {
            if let Some(Value::Number(v)) = value {
                *v += n;
            }
        });
    }

    pub fn set(&self, family: &Family, values: &[&str], n: f64) {
        self.with_series(family, values, |value| {
            if let Some(Value::Number(v)) = value {
                *v = n;
            }
        });
    }

    pub fn remove(&self, family: &Family, values: &[&str]) {
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(series) = families.get_mut(family.name) {
            let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            series.remove(&key);
        }
    }

    pub fn observe(&self, family: &Family, values: &[&str], v: f64) {
        let Kind::Histogram(buckets) = family.kind else {
            return;
        };
        self.with_series(family, values, |value| {
            if let Some(Value::Histogram { counts, sum, count }) = value {
                let at = buckets
                    .iter()
                    .position(|bound| v <= *bound)
                    .unwrap_or(buckets.len());
                counts[at] += 1;
                *sum += v;
                *count += 1;
            }
        });
    }

    pub fn value(&self, family: &Family, values: &[&str]) -> f64 {
        let families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        families
            .get(family.name)
            .and_then(|series| series.get(&key))
            .map_or(0.0, Value::scalar)
    }

    pub fn total(&self, family: &Family) -> f64 {
        let families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        families
            .get(family.name)
            .map_or(0.0, |series| series.values().map(Value::scalar).sum())
    }

    /// `families` in the exposition format, sorted by name.
    pub fn render(&self, families: &[&Family]) -> String {
        let mut out = Vec::new();
        self.write(families, &mut out)
            .expect("writing to a Vec cannot fail");
        String::from_utf8(out).expect("the format is UTF-8")
    }

    /// [`Registry::render`] written to `out`. The mutex is held only to
    /// copy the values, never while `out` (a client's socket) is written.
    pub fn write(&self, families: &[&Family], out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let mut sorted: Vec<&Family> = families.to_vec();
        order::sort_by_key(&mut sorted, |f| f.name);
        let snapshot = self
            .families
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let empty = Series::new();
        let mut buf = String::with_capacity(text::CHUNK + 4096);
        for family in sorted {
            let series = snapshot.get(family.name).unwrap_or(&empty);
            text::write_family(&mut buf, family, series, out)?;
        }
        out.write_all(buf.as_bytes())
    }
}

impl Value {
    fn scalar(&self) -> f64 {
        match self {
            Value::Number(v) => *v,
            Value::Histogram { count, .. } => *count as f64,
        }
    }
}

#[cfg(test)]
mod tests;
