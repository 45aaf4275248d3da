//! JSON (RFC 8259) as data: a value, its parser and its writer.
//!
//! The container engine's API speaks JSON, and the design card allows no
//! JSON crate, so this is ours. It is deliberately small: a [`Value`] tree
//! that keeps numbers as their text (an engine's 64-bit IDs and sizes stay
//! exact; [`Value::as_i64`] and [`Value::as_u64`] read them), objects as
//! ordered pairs (duplicate keys are kept; [`Value::get`] finds the first),
//! a parser whose errors say `line:col` and which refuses nesting deeper
//! than [`MAX_DEPTH`], and a writer that escapes what RFC 8259 requires,
//! compact ([`to_string`]), indented ([`Value::pretty`]) or HTML-safe as
//! Go's `json.Marshal` ([`to_string_html_safe`]).
//!
//! It is csi-agent's one JSON reader and writer: the engine's API, the
//! CLI's `-json` output, the templates' `parseJSON` and `toJSON`, and HCL's
//! `jsondecode` and `jsonencode` all go through it. It uses only `std`.
//!
//! The HCL crate's `hcl::json` is a different thing: HCL's JSON syntax,
//! whose strings are templates (`${...}`). Data from outside goes through
//! this crate.

use std::fmt;

/// The deepest nesting of arrays and objects the parser accepts: the
/// parser recurses, and a hostile peer must not overflow the stack.
pub const MAX_DEPTH: usize = 128;

/// A JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Null,
    Bool(bool),
    /// A number as its text in the document, which the parser checked
    /// against RFC 8259's grammar.
    Number(String),
    String(String),
    Array(Vec<Value>),
    /// Members in document order.
    Object(Vec<(String, Value)>),
}

impl Value {
    /// An object from `(key, value)` pairs, in that order.
    pub fn object<K: Into<String>>(members: impl IntoIterator<Item = (K, Value)>) -> Value {
        Value::Object(members.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// An array of values.
    pub fn array(items: impl IntoIterator<Item = Value>) -> Value {
        Value::Array(items.into_iter().collect())
    }

    /// An array of strings.
    pub fn strings<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Value {
        Value::Array(items.into_iter().map(|s| Value::from(s.as_ref())).collect())
    }

    /// The value of the first member named `key`, if this is an object
    /// that has one.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Adds a member at the end, if this is an object; else does nothing.
    pub fn push(&mut self, key: impl Into<String>, value: Value) {
        if let Value::Object(members) = self {
            members.push((key.into(), value));
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The number, if it is an integer that fits `i64` (no fraction, no
    /// exponent).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(n) => n.parse().ok(),
            _ => None,
        }
    }

    /// The number, if it is an integer that fits `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(n) => n.parse().ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&[(String, Value)]> {
        match self {
            Value::Object(members) => Some(members),
            _ => None,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s)
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Value {
        Value::String(s.clone())
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Number(n.to_string())
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Value {
        Value::Number(n.to_string())
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Value {
        Value::Number(n.to_string())
    }
}

/// Compact JSON text: no whitespace between tokens.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_string(self))
    }
}

impl Value {
    /// The value indented by two spaces per level, one element or member
    /// per line, `": "` after a key; empty arrays and objects stay `[]` and
    /// `{}`. No trailing newline. Go's `json.MarshalIndent(v, "", "  ")`
    /// lays values out the same way.
    pub fn pretty(&self) -> String {
        Writer::text(self, true, false)
    }
}

/// The value as compact JSON text.
pub fn to_string(value: &Value) -> String {
    Writer::text(value, false, false)
}

/// The value as compact JSON text with `<`, `>`, `&`, U+2028 and U+2029
/// escaped as well, as Go's `json.Marshal` writes strings (and so HCL's
/// `jsonencode`): the text is safe inside HTML and JavaScript.
pub fn to_string_html_safe(value: &Value) -> String {
    Writer::text(value, false, true)
}

/// The one JSON writer: how it lays values out and escapes strings.
struct Writer<'a> {
    out: &'a mut String,
    /// Two spaces a level, as [`Value::pretty`]; else compact.
    indent: bool,
    /// Escapes what [`to_string_html_safe`] says.
    html_safe: bool,
}

impl Writer<'_> {
    fn text(value: &Value, indent: bool, html_safe: bool) -> String {
        let mut out = String::new();
        Writer {
            out: &mut out,
            indent,
            html_safe,
        }
        .value(value, 0);
        out
    }

    fn value(&mut self, value: &Value, depth: usize) {
        match value {
            Value::Null => self.out.push_str("null"),
            Value::Bool(true) => self.out.push_str("true"),
            Value::Bool(false) => self.out.push_str("false"),
            Value::Number(n) => self.out.push_str(n),
            Value::String(s) => self.string(s),
            Value::Array(items) if !items.is_empty() => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.separator(i, depth + 1);
                    self.value(item, depth + 1);
                }
                self.newline(depth);
                self.out.push(']');
            }
            Value::Object(members) if !members.is_empty() => {
                self.out.push('{');
                for (i, (key, item)) in members.iter().enumerate() {
                    self.separator(i, depth + 1);
                    self.string(key);
                    self.out.push_str(if self.indent { ": " } else { ":" });
                    self.value(item, depth + 1);
                }
                self.newline(depth);
                self.out.push('}');
            }
            Value::Array(_) => self.out.push_str("[]"),
            Value::Object(_) => self.out.push_str("{}"),
        }
    }

    /// What comes before the `i`th element at `depth`: a comma after the
    /// first, and a new line when indenting.
    fn separator(&mut self, i: usize, depth: usize) {
        if i > 0 {
            self.out.push(',');
        }
        self.newline(depth);
    }

    fn newline(&mut self, depth: usize) {
        if self.indent {
            self.out.push('\n');
            for _ in 0..depth {
                self.out.push_str("  ");
            }
        }
    }

    /// A JSON string literal: quotes, backslashes and control characters
    /// (DEL too) escaped, with the short forms where JSON has one;
    /// everything else as UTF-8 unless `html_safe` says otherwise.
    fn string(&mut self, s: &str) {
        let out = &mut *self.out;
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                }
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if self.html_safe => {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Why a document is not JSON, and where: 1-based line and column (in
/// characters) of the offending character.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid JSON at {}:{}: {}",
            self.line, self.col, self.message
        )
    }
}

impl std::error::Error for ParseError {}

/// Parses one JSON document (whitespace around it allowed, nothing else).
pub fn parse(text: &str) -> Result<Value, ParseError> {
    let mut parser = Parser { text, pos: 0 };
    parser.skip_ws();
    let value = parser.value(0)?;
    parser.skip_ws();
    if parser.pos < text.len() {
        return Err(parser.error("unexpected text after the value"));
    }
    Ok(value)
}

/// Parses JSON from bytes, which must be UTF-8.
pub fn parse_bytes(bytes: &[u8]) -> Result<Value, ParseError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text),
        Err(err) => {
            let valid = &bytes[..err.valid_up_to()];
            // The prefix is valid UTF-8, so this cannot fail.
            let text = std::str::from_utf8(valid).unwrap_or_default();
            let parser = Parser {
                text,
                pos: text.len(),
            };
            Err(parser.error("invalid UTF-8"))
        }
    }
}

struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, message: &str) -> ParseError {
        let before = &self.text[..self.pos];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        ParseError {
            line,
            col,
            message: message.to_string(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect_word(&mut self, word: &str, value: Value) -> Result<Value, ParseError> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.error("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        match self.peek() {
            None => Err(self.error("unexpected end of input, expected a value")),
            Some(b'n') => self.expect_word("null", Value::Null),
            Some(b't') => self.expect_word("true", Value::Bool(true)),
            Some(b'f') => self.expect_word("false", Value::Bool(false)),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => self.array(depth + 1),
            Some(b'{') => self.object(depth + 1),
            Some(_) => Err(self.error("expected a value")),
        }
    }

    fn enter(&self, depth: usize) -> Result<(), ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.error(&format!("nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn array(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.enter(depth)?;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                None => return Err(self.error("unexpected end of input in an array")),
                Some(_) => return Err(self.error("expected ',' or ']' in an array")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.enter(depth)?;
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a string key in an object"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.error("expected ':' after an object key"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value(depth)?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(members));
                }
                None => return Err(self.error("unexpected end of input in an object")),
                Some(_) => return Err(self.error("expected ',' or '}' in an object")),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.error("a number may not have a leading zero"));
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.error("expected a digit after '.'"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("expected a digit in the exponent"));
            }
        }
        Ok(Value::Number(self.text[start..self.pos].to_string()))
    }

    /// Four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u32, ParseError> {
        let hex = self.text.get(self.pos..self.pos + 4).unwrap_or("");
        if hex.len() != 4 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.error("expected four hex digits after \\u"));
        }
        self.pos += 4;
        u32::from_str_radix(hex, 16).map_err(|_| self.error("expected four hex digits after \\u"))
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let Some(c) = rest.chars().next() else {
                return Err(self.error("unexpected end of input in a string"));
            };
            match c {
                '"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                '\\' => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                c if (c as u32) < 0x20 => {
                    return Err(self.error("control character in a string (escape it)"));
                }
                c => {
                    out.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    /// The escape after a backslash, into `out`.
    fn escape(&mut self, out: &mut String) -> Result<(), ParseError> {
        let Some(b) = self.peek() else {
            return Err(self.error("unexpected end of input in an escape"));
        };
        let simple = match b {
            b'"' => Some('"'),
            b'\\' => Some('\\'),
            b'/' => Some('/'),
            b'b' => Some('\u{8}'),
            b'f' => Some('\u{c}'),
            b'n' => Some('\n'),
            b'r' => Some('\r'),
            b't' => Some('\t'),
            b'u' => None,
            _ => return Err(self.error("unknown escape in a string")),
        };
        self.pos += 1;
        if let Some(c) = simple {
            out.push(c);
            return Ok(());
        }
        let at = self.pos;
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.text[self.pos..].starts_with("\\u") {
                    self.pos = at;
                    return Err(self.error("a high surrogate without its low surrogate"));
                }
                self.pos += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    self.pos = at;
                    return Err(self.error("a high surrogate without its low surrogate"));
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => {
                self.pos = at;
                return Err(self.error("a low surrogate without its high surrogate"));
            }
            code => code,
        };
        match char::from_u32(code) {
            Some(c) => {
                out.push(c);
                Ok(())
            }
            None => Err(self.error("an escape that is not a character")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_of_value() {
        let v =
            parse(r#" {"a": [1, -2.5e3, true, false, null], "b": {"c": "d"}, "e": 0} "#).unwrap();
        let a = v.get("a").unwrap().as_array().unwrap();
        assert_eq!(a[0].as_i64(), Some(1));
        assert_eq!(a[1], Value::Number("-2.5e3".into()));
        assert_eq!(a[1].as_i64(), None);
        assert_eq!(a[2].as_bool(), Some(true));
        assert!(a[4].is_null());
        assert_eq!(v.get("b").unwrap().get("c").unwrap().as_str(), Some("d"));
        assert_eq!(v.get("e").unwrap().as_u64(), Some(0));
        assert_eq!(v.get("missing"), None);
    }

    #[test]
    fn keeps_big_numbers_exact() {
        let v = parse("18446744073709551615").unwrap();
        assert_eq!(v.as_u64(), Some(u64::MAX));
        assert_eq!(v.as_i64(), None);
        assert_eq!(to_string(&v), "18446744073709551615");
    }

    #[test]
    fn decodes_escapes_and_surrogate_pairs() {
        let v = parse(r#""a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00""#).unwrap();
        assert_eq!(v.as_str(), Some("a\"b\\c/d\u{8}\u{c}\n\r\té😀"));
    }

    #[test]
    fn refuses_lone_surrogates() {
        for text in [
            r#""\ud83d""#,
            r#""\ud83dx""#,
            r#""\ude00""#,
            r#""\ud83d\u0041""#,
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.message.contains("surrogate"), "{text}: {err}");
            assert_eq!((err.line, err.col), (1, 4), "{text}: {err}");
        }
    }

    #[test]
    fn errors_say_line_and_column() {
        let err = parse("{\n  \"a\": 1,\n  \"b\" 2\n}").unwrap_err();
        assert_eq!((err.line, err.col), (3, 7), "{err}");
        assert_eq!(
            err.to_string(),
            "invalid JSON at 3:7: expected ':' after an object key"
        );
        let err = parse("[1, 2").unwrap_err();
        assert!(err.message.contains("end of input"), "{err}");
        let err = parse("\"é\" x").unwrap_err();
        assert_eq!((err.line, err.col), (1, 5), "{err}");
    }

    #[test]
    fn refuses_what_rfc_8259_forbids() {
        for text in [
            "",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "[1,]",
            "{\"a\":1,}",
            "{a:1}",
            "'a'",
            "\"a\tb\"",
            "\"\\x\"",
            "nul",
            "true false",
            "[1 2]",
            "\"abc",
        ] {
            assert!(parse(text).is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn limits_nesting() {
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(&ok).is_ok());
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        let err = parse(&deep).unwrap_err();
        assert!(err.message.contains("nested deeper"), "{err}");
        let hostile = "{\"a\":".repeat(100_000);
        assert!(parse(&hostile).is_err());
    }

    #[test]
    fn refuses_invalid_utf8() {
        let err = parse_bytes(b"\"ab\xff\"").unwrap_err();
        assert_eq!((err.line, err.col), (1, 4), "{err}");
    }

    #[test]
    fn writes_escapes_that_parse_back() {
        let text = "q\" b\\ nl\n cr\r tab\t nul\u{0} esc\u{1b} del\u{7f} é 😀 </";
        let v = Value::object([("k\"ey", Value::from(text)), ("n", Value::from(-3i64))]);
        let out = to_string(&v);
        assert_eq!(
            out,
            r#"{"k\"ey":"q\" b\\ nl\n cr\r tab\t nul\u0000 esc\u001b del\u007f é 😀 </","n":-3}"#
        );
        assert_eq!(parse(&out).unwrap(), v);
        assert_eq!(v.to_string(), out);
    }

    #[test]
    fn html_safe_escapes_what_go_escapes_and_parses_back() {
        let text = "<a href='x'>&\u{2028}\u{2029}\u{8}\u{c}";
        let v = Value::array([Value::from(text)]);
        let out = to_string_html_safe(&v);
        assert_eq!(out, r#"["\u003ca href='x'\u003e\u0026\u2028\u2029\b\f"]"#);
        assert_eq!(parse(&out).unwrap(), v);
        assert_eq!(to_string(&v), "[\"<a href='x'>&\u{2028}\u{2029}\\b\\f\"]");
    }

    #[test]
    fn pretty_indents_by_two_spaces_and_keeps_empty_containers_on_one_line() {
        let v = Value::object([
            ("list", Value::array([])),
            ("map", Value::object::<&str>([])),
            (
                "items",
                Value::array([Value::from(1i64), Value::from("a\n")]),
            ),
        ]);
        assert_eq!(
            v.pretty(),
            "{\n  \"list\": [],\n  \"map\": {},\n  \"items\": [\n    1,\n    \"a\\n\"\n  ]\n}"
        );
        assert_eq!(parse(&v.pretty()).unwrap(), v);
        assert_eq!(Value::from("x").pretty(), r#""x""#);
    }

    #[test]
    fn builds_objects() {
        let mut v = Value::object::<&str>([]);
        v.push("Cmd", Value::strings(["sh", "-c"]));
        v.push("Tty", false.into());
        v.push("Memory", Value::from(8u64 << 20));
        v.push("Arr", Value::array([Value::Null]));
        assert_eq!(
            to_string(&v),
            r#"{"Cmd":["sh","-c"],"Tty":false,"Memory":8388608,"Arr":[null]}"#
        );
        assert_eq!(v.as_object().unwrap().len(), 4);
    }
}
