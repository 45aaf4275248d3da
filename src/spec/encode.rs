//! The HCL writer behind each spec's `to_hcl`: attributes, blocks, maps,
//! and kept items as they were written.
//!
//! Its output decodes to the spec it was written from, which the round-trip
//! tests check for every spec type. It writes secret values and mount flags
//! in clear, as the file they came from did.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::Kept;
use crate::units::format_duration;
use hcl::{Expr, Key};

/// Writes HCL text, two spaces per level of nesting.
#[derive(Default)]
pub(crate) struct Writer {
    out: String,
    depth: usize,
}

impl Writer {
    pub(crate) fn new() -> Writer {
        Writer::default()
    }

    pub(crate) fn finish(self) -> String {
        self.out
    }

    fn line(&mut self, text: &str) {
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// `key = "value"`.
    pub(crate) fn string(&mut self, key: &str, value: &str) {
        self.line(&format!("{key} = {}", quote(value)));
    }

    /// `key = "value"` if there is a value.
    pub(crate) fn opt_string(&mut self, key: &str, value: Option<&str>) {
        if let Some(value) = value {
            self.string(key, value);
        }
    }

    /// `key = true`, `key = 3`: a value written as its `Display`.
    pub(crate) fn plain(&mut self, key: &str, value: impl std::fmt::Display) {
        self.line(&format!("{key} = {value}"));
    }

    /// `key = "1h30m"`.
    pub(crate) fn duration(&mut self, key: &str, value: Duration) {
        self.string(key, &format_duration(value));
    }

    /// `key = ["a", "b"]`.
    pub(crate) fn strings(&mut self, key: &str, values: &[String]) {
        let items: Vec<String> = values.iter().map(|v| quote(v)).collect();
        self.line(&format!("{key} = [{}]", items.join(", ")));
    }

    /// A map, as a block when every key is an identifier, otherwise as an
    /// object with quoted keys. Nothing is written for an empty map.
    pub(crate) fn map(&mut self, key: &str, map: &BTreeMap<String, String>) {
        self.pairs(key, map.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }

    /// Like [`Writer::map`], for the pairs of a secret map.
    pub(crate) fn pairs<'p>(&mut self, key: &str, pairs: impl Iterator<Item = (&'p str, &'p str)>) {
        let pairs: Vec<(&str, &str)> = pairs.collect();
        if pairs.is_empty() {
            return;
        }
        let as_block = pairs.iter().all(|(k, _)| is_identifier(k));
        if as_block {
            self.open(key, None);
        } else {
            self.line(&format!("{key} = {{"));
            self.depth += 1;
        }
        for (k, v) in pairs {
            if as_block {
                self.string(k, v);
            } else {
                self.line(&format!("{} = {}", quote(k), quote(v)));
            }
        }
        self.close();
    }

    /// Opens `kind "label" {`.
    pub(crate) fn open(&mut self, kind: &str, label: Option<&str>) {
        match label {
            Some(label) => self.line(&format!("{kind} {} {{", quote(label))),
            None => self.line(&format!("{kind} {{")),
        }
        self.depth += 1;
    }

    /// Closes the innermost block or object.
    pub(crate) fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.line("}");
    }

    /// Items kept as written. Their first line is indented here; the lines
    /// after it are the original ones, so heredocs keep their meaning.
    pub(crate) fn kept(&mut self, kept: &[Kept]) {
        for item in kept {
            self.line(&item.text);
        }
    }
}

/// A property of a JSON file as HCL on one line: how an ignored item of a
/// JSON file is kept, so that `to_hcl` writes HCL whichever syntax the file
/// was in. An object is written as a block (`update { max_parallel = 1 }`),
/// since the keys csi-agent keeps with an object value are blocks in
/// Nomad's files, and some (a sidecar task's `config`) must be; anything
/// else as an attribute.
pub(crate) fn kept_text(key: &str, value: &Expr) -> String {
    let mut out = key_text(key);
    match value {
        Expr::Object { entries, .. } if is_identifier(key) => {
            out.push(' ');
            write_entries(&mut out, entries);
        }
        value => {
            out.push_str(" = ");
            write_expr(&mut out, value);
        }
    }
    out
}

/// A key, bare when it is an identifier, quoted otherwise.
fn key_text(key: &str) -> String {
    if is_identifier(key) {
        key.to_string()
    } else {
        quote(key)
    }
}

/// Writes `value` as an HCL expression: lists as `[a, b]`, objects as
/// `{ k = v, "k.2" = w }`.
fn write_expr(out: &mut String, value: &Expr) {
    match value {
        Expr::String { value, .. } | Expr::Heredoc { value, .. } => out.push_str(&quote(value)),
        Expr::Number { value, .. } => out.push_str(value.text()),
        Expr::Bool { value, .. } => out.push_str(if *value { "true" } else { "false" }),
        Expr::Null { .. } => out.push_str("null"),
        Expr::List { items, .. } => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_expr(out, item);
            }
            out.push(']');
        }
        Expr::Object { entries, .. } => write_entries(out, entries),
        // Evaluation replaces these before anything is kept.
        Expr::Template { .. }
        | Expr::Reference { .. }
        | Expr::Call { .. }
        | Expr::Unary { .. }
        | Expr::Binary { .. }
        | Expr::Conditional { .. }
        | Expr::For(_)
        | Expr::Traversal { .. } => out.push_str("null"),
    }
}

/// Writes `{ k = v, "k.2" = w }`, or `{}`: an object, or a block's body on
/// one line.
fn write_entries(out: &mut String, entries: &[(Key, Expr)]) {
    if entries.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push('{');
    for (i, (key, value)) in entries.iter().enumerate() {
        out.push_str(if i > 0 { ", " } else { " " });
        out.push_str(&key_text(&key.name));
        out.push_str(" = ");
        write_expr(out, value);
    }
    out.push_str(" }");
}

/// Whether `key` can be written bare as an attribute name.
fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !matches!(key, "true" | "false" | "null" | "for" | "in" | "if")
}

/// An HCL string literal whose value is exactly `text`: quotes, backslashes
/// and control characters are escaped, and `${` and `%{` are doubled so
/// that they are not read as templates.
pub(crate) fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '$' | '%' if chars.peek() == Some(&'{') => {
                out.push(c);
                out.push(c);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_strings_escape_what_hcl_would_read_differently() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quote("${x} %{y} $z"), "\"$${x} %%{y} $z\"");
        assert_eq!(quote("\n\t\u{1}"), "\"\\n\\t\\u0001\"");
    }

    #[test]
    fn quoted_strings_parse_back_to_the_same_text() {
        for text in [
            "",
            "a\"b\\c",
            "${NOMAD_TASK_DIR}/x",
            "%{ if }",
            "é\u{7f}\r\n",
        ] {
            let src = format!("x = {}\n", quote(text));
            let body = hcl::parse(&src, "t.hcl").unwrap();
            let value = body.attribute("x").and_then(|a| a.value.as_str());
            assert_eq!(value, Some(text), "{src}");
        }
    }

    /// The kept text of the property `key` of the JSON `src`.
    fn kept_json(src: &str, key: &str) -> String {
        let body = hcl::json::parse(src, "t.json").unwrap();
        let attr = body.attribute(key).unwrap();
        kept_text(&attr.key.name, &attr.value)
    }

    #[test]
    fn json_objects_are_kept_as_blocks_and_other_values_as_attributes() {
        let src = r#"{
  "update": {"max_parallel": 1, "a.b": [true, null, "${x}"], "e": {}},
  "meta": {},
  "datacenters": ["dc1", 2.5],
  "a.b": {"c": 1}
}"#;
        assert_eq!(
            kept_json(src, "update"),
            r#"update { max_parallel = 1, "a.b" = [true, null, "$${x}"], e = {} }"#
        );
        assert_eq!(kept_json(src, "meta"), "meta {}");
        assert_eq!(
            kept_json(src, "datacenters"),
            r#"datacenters = ["dc1", 2.5]"#
        );
        assert_eq!(kept_json(src, "a.b"), r#""a.b" = { c = 1 }"#);
    }

    #[test]
    fn kept_json_is_hcl_of_the_same_shape() {
        use hcl::Item;
        let src = r#"{"update": {"max_parallel": 1, "s": {"x": ["y"]}}, "n": [{"a": 1}]}"#;
        let update = hcl::parse(&kept_json(src, "update"), "t.hcl").unwrap();
        let Some(Item::Block(block)) = update.items.first() else {
            panic!("not a block: {update:?}");
        };
        let keys: Vec<&str> = block
            .body
            .attributes()
            .map(|a| a.key.name.as_str())
            .collect();
        assert_eq!(
            (block.kind.name.as_str(), keys),
            ("update", vec!["max_parallel", "s"])
        );
        let n = hcl::parse(&kept_json(src, "n"), "t.hcl").unwrap();
        let list = n.attribute("n").and_then(|a| a.value.as_list());
        assert_eq!(list.map(<[_]>::len), Some(1));
    }

    #[test]
    fn maps_with_identifier_keys_become_blocks() {
        let mut w = Writer::new();
        let map: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
        w.map("env", &map);
        let dotted: BTreeMap<String, String> = [("a.b/c".to_string(), "2".to_string())].into();
        w.map("parameters", &dotted);
        w.map("context", &BTreeMap::new());
        assert_eq!(
            w.finish(),
            "env {\n  A = \"1\"\n}\nparameters = {\n  \"a.b/c\" = \"2\"\n}\n"
        );
    }
}
