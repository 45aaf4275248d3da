//! Conversions and escapes for the function table: values to and from
//! JSON (as Go's `encoding/json` does them), `toTitle`, and the escapes of
//! `urlquery`, `html` and `js`.

use super::exec::Value;

pub(super) fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut start = true;
    for c in s.chars() {
        if start && c.is_alphanumeric() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        start = !(c.is_alphanumeric() || c == '_' || c == '\'');
    }
    out
}

pub(super) fn urlquery(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

pub(super) fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('\'', "&#39;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\0', "\u{FFFD}")
}

pub(super) fn js(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

pub(super) fn from_json(v: &crate::json::Value) -> Value {
    use crate::json::Value as J;
    match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Bool(*b),
        // Go's encoding/json decodes every number as a float64.
        J::Number(n) => n.parse::<f64>().map(Value::Float).unwrap_or(Value::Nil),
        J::String(s) => Value::Str(s.clone()),
        J::Array(items) => Value::List(items.iter().map(from_json).collect()),
        J::Object(members) => Value::Map(
            members
                .iter()
                .map(|(k, v)| (k.clone(), from_json(v)))
                .collect(),
        ),
    }
}

pub(super) fn to_json(v: &Value) -> crate::json::Value {
    use crate::json::Value as J;
    match v {
        Value::Nil => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(n) => J::Number(n.to_string()),
        Value::Float(f) if f.is_finite() => J::Number(super::exec::format_float(*f)),
        Value::Float(_) => J::Null,
        Value::Str(s) => J::String(s.clone()),
        Value::List(items) => J::Array(items.iter().map(to_json).collect()),
        Value::Map(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}

/// JSON indented by two spaces, as Go's `json.MarshalIndent(v, "", "  ")`.
pub(super) fn pretty_json(v: &crate::json::Value, depth: usize) -> String {
    use crate::json::Value as J;
    let pad = |d: usize| "  ".repeat(d);
    match v {
        J::Array(items) if !items.is_empty() => {
            let inner: Vec<String> = items
                .iter()
                .map(|i| format!("{}{}", pad(depth + 1), pretty_json(i, depth + 1)))
                .collect();
            format!("[\n{}\n{}]", inner.join(",\n"), pad(depth))
        }
        J::Object(members) if !members.is_empty() => {
            let inner: Vec<String> = members
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}{}: {}",
                        pad(depth + 1),
                        crate::json::to_string(&J::String(k.clone())),
                        pretty_json(v, depth + 1)
                    )
                })
                .collect();
            format!("{{\n{}\n{}}}", inner.join(",\n"), pad(depth))
        }
        other => crate::json::to_string(other),
    }
}
