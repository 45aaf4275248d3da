//! Prometheus' text exposition format, version 0.0.4: per family a `HELP`
//! and a `TYPE` line, then one line per series; a histogram's series is its
//! cumulative `_bucket{le="..."}` lines ending with `+Inf`, its `_sum` and
//! its `_count`.

use std::fmt::Write as _;
use std::io;

/// How much text a scrape gathers before it writes it out.
pub(super) const CHUNK: usize = 16 << 10;

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

/// `a="x",b="y"`: a series' labels without the braces.
fn label_pairs(names: &[&str], values: &[String]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in names.iter().zip(values).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{name}=\"{}\"", escape_label_value(value));
    }
    out
}

/// Appends a family's lines to `out`, writing `out` to `sink` whenever it
/// holds a [`CHUNK`]. A scrape writes every series of every family, so
/// each series' labels are escaped once, and a histogram's bucket bounds
/// formatted once per family, not once per line.
pub(super) fn write_family(
    out: &mut String,
    family: &Family,
    series: &Series,
    sink: &mut dyn io::Write,
) -> io::Result<()> {
    let name = family.name;
    writeln!(out, "# HELP {name} {}", escape_help(family.help)).unwrap();
    writeln!(out, "# TYPE {name} {}", family.kind.as_str()).unwrap();
    let bounds: Vec<String> = match family.kind {
        Kind::Histogram(buckets) => buckets.iter().map(|b| format_value(*b)).collect(),
        _ => Vec::new(),
    };
    for (values, value) in series {
        let pairs = label_pairs(family.labels, values);
        // `{pairs}` for a series' own line; nothing without labels.
        let braced = if pairs.is_empty() {
            String::new()
        } else {
            format!("{{{pairs}}}")
        };
        match (value, family.kind) {
            (Value::Number(v), _) => {
                writeln!(out, "{name}{braced} {}", format_value(*v)).unwrap();
            }
            (Value::Histogram { counts, sum, count }, Kind::Histogram(_)) => {
                let sep = if pairs.is_empty() { "" } else { "," };
                let mut cumulative = 0;
                for (i, n) in counts.iter().enumerate() {
                    cumulative += n;
                    let le = bounds.get(i).map_or("+Inf", String::as_str);
                    writeln!(out, "{name}_bucket{{{pairs}{sep}le=\"{le}\"}} {cumulative}").unwrap();
                }
                writeln!(out, "{name}_sum{braced} {}", format_value(*sum)).unwrap();
                writeln!(out, "{name}_count{braced} {count}").unwrap();
            }
            (Value::Histogram { .. }, _) => {}
        }
        if out.len() >= CHUNK {
            sink.write_all(out.as_bytes())?;
            out.clear();
        }
    }
    Ok(())
}
