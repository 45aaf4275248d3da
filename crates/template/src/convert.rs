//! Conversions and escapes for the function table: values to and from
//! JSON (as Go's `encoding/json` does them), `toTitle`, and the escapes of
//! `html` and `js` (`urlquery` is [`encode::percent`]).

use crate::value::format_float;
use crate::Value;

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

pub(super) fn from_json(v: &json::Value) -> Value {
    use json::Value as J;
    match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Bool(*b),
        // Go's encoding/json decodes every number as a float64.
        J::Number(n) => n.parse::<f64>().map(Value::Float).unwrap_or(Value::Nil),
        J::String(s) => Value::Str(s.clone()),
        J::Array(items) => Value::List(items.iter().map(from_json).collect()),
        J::Object(members) => Value::Map(order::map(
            members.iter().map(|(k, v)| (k.clone(), from_json(v))),
        )),
    }
}

pub(super) fn to_json(v: &Value) -> json::Value {
    use json::Value as J;
    match v {
        Value::Nil => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(n) => J::Number(n.to_string()),
        Value::Float(f) if f.is_finite() => J::Number(format_float(*f)),
        Value::Float(_) => J::Null,
        Value::Str(s) => J::String(s.clone()),
        Value::List(items) => J::Array(items.iter().map(to_json).collect()),
        Value::Map(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}
