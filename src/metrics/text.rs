//! Prometheus' text exposition format, version 0.0.4: per family a `HELP`
//! and a `TYPE` line, then one line per series; a histogram's series is its
//! cumulative `_bucket{le="..."}` lines ending with `+Inf`, its `_sum` and
//! its `_count`.

use std::fmt::Write as _;

use super::{Family, Kind, Series, Value};

/// A label value as the format quotes it: `\`, `"` and newline escaped.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A `HELP` text: `\` and newline escaped.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value: integers without a fraction, `+Inf`, `-Inf`, `NaN`.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{v}")
    }
}

/// `{a="x",b="y"}` with `extra` (`le`) last; nothing without labels.
fn labels(names: &[&str], values: &[String], extra: Option<(&str, &str)>) -> String {
    let mut pairs: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(name, value)| format!("{name}=\"{}\"", escape_label_value(value)))
        .collect();
    if let Some((name, value)) = extra {
        pairs.push(format!("{name}=\"{}\"", escape_label_value(value)));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

pub(super) fn write_family(out: &mut String, family: &Family, series: &Series) {
    let name = family.name;
    writeln!(out, "# HELP {name} {}", escape_help(family.help)).unwrap();
    writeln!(out, "# TYPE {name} {}", family.kind.as_str()).unwrap();
    for (values, value) in series {
        match (value, family.kind) {
            (Value::Number(v), _) => {
                let l = labels(family.labels, values, None);
                writeln!(out, "{name}{l} {}", format_value(*v)).unwrap();
            }
            (Value::Histogram { counts, sum, count }, Kind::Histogram(buckets)) => {
                let mut cumulative = 0;
                for (i, n) in counts.iter().enumerate() {
                    cumulative += n;
                    let le = buckets
                        .get(i)
                        .map_or("+Inf".to_string(), |b| format_value(*b));
                    let l = labels(family.labels, values, Some(("le", &le)));
                    writeln!(out, "{name}_bucket{l} {cumulative}").unwrap();
                }
                let l = labels(family.labels, values, None);
                writeln!(out, "{name}_sum{l} {}", format_value(*sum)).unwrap();
                writeln!(out, "{name}_count{l} {count}").unwrap();
            }
            (Value::Histogram { .. }, _) => {}
        }
    }
}
