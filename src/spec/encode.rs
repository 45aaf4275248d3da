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
            let body = crate::hcl::parse(&src, "t.hcl").unwrap();
            let value = body.attribute("x").and_then(|a| a.value.as_str());
            assert_eq!(value, Some(text), "{src}");
        }
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
