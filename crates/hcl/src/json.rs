//! HCL's JSON syntax: a JSON parser (RFC 8259) that builds the same syntax
//! tree as the native parser, and HCL's rules for reading a JSON property
//! as blocks.
//!
//! Nomad reads volume specs and job files named `*.json` in this syntax
//! (`nomad volume init -json` writes one), so csi-agent does too. A file is
//! one object, and each of its properties is an
//! [`Attribute`](crate::Attribute) of the body; its value becomes an
//! [`Expr`] as a native value would (an object an [`Expr::Object`], an
//! array an [`Expr::List`]). JSON cannot say whether a
//! property is a block, and HCL leaves that to the schema; here the decoder
//! decides as it asks:
//!
//! - asked for an attribute, a property is one, whatever its value;
//! - asked for blocks without labels, a property whose value is an object
//!   is one block, and one whose value is a list of objects one block per
//!   object (`"capability": [{...}, {...}]`);
//! - asked for blocks with one label, the property's value is an object
//!   whose keys are the labels, each holding a block's body as above:
//!   `{"job": {"web": {"group": {"g": {...}}}}}`.
//!
//! [`Attribute::json_blocks`](crate::Attribute::json_blocks) builds those
//! blocks on the first request and keeps them in the attribute
//! (`ast/json_body.rs`, which the tree owns), so a decoder borrows them
//! from the tree as it borrows native blocks, and the tree is never
//! rebuilt. As in HCL, a property named `//` in a body is a comment and is
//! left out.
//!
//! Strings that are values are read as HCL reads JSON strings, as
//! templates (`json/template.rs`): `${var.x}`, calls and `%{ }` directives
//! are evaluated as in the native syntax, other `${...}` are kept as written
//! for the agent to interpolate, and `$${` and `%%{` become a literal `${`
//! and `%{`. Keys are taken as they
//! are. Numbers keep their text, as native ones do. A key given twice in an
//! object is an error, as a native attribute given twice is (`//` comments
//! may repeat).
//!
//! Written by hand, as the native parser is: one forward pass over the
//! characters (no byte indexing that could panic), every error at its
//! `line:col` with what was expected and what was found, and arrays and
//! objects nested at most [`MAX_NESTING`] deep below the file's object.

use std::collections::HashMap;

use super::ast::{Body, Expr, Key, Number, COMMENT_KEY};
use super::error::Error;
use super::parser::MAX_NESTING;
use super::pos::{Pos, Span};

mod template;

/// Parses `src`, the contents of the file named `file`, written in HCL's
/// JSON syntax, into its body.
pub fn parse(src: &str, file: &str) -> Result<Body, Error> {
    let mut parser = Parser::new(src, file);
    parser.skip_whitespace();
    if parser.peek() != Some('{') {
        return Err(parser.unexpected("'{' (a JSON file holds one object)"));
    }
    let (entries, _) = parser.parse_object()?;
    parser.skip_whitespace();
    if parser.peek().is_some() {
        return Err(parser.unexpected("the end of the file after the object"));
    }
    Ok(Body::from_json_object(entries))
}

/// The parser state: the input, the byte offset of the next character, its
/// line and column, and how deeply arrays and objects are nested.
struct Parser<'a> {
    src: &'a str,
    file: &'a str,
    offset: usize,
    line: usize,
    col: usize,
    depth: usize,
    /// The names `dynamic` blocks around the current value bind, as the
    /// native parser's `bound`: `${e.value}` in a `"content"` is HCL's.
    bound: Vec<String>,
    /// What the object that starts next is to a `"dynamic"` property.
    next_object: DynamicRole,
}

/// The place of an object in a `"dynamic"` property: its value, whose
/// keys are the labels of the blocks to make (each binding its name), or
/// the value of one label, whose `"iterator"` names the binding instead.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum DynamicRole {
    #[default]
    None,
    Labels,
    Spec,
}

impl<'a> Parser<'a> {
    /// Starts on `src`; a leading byte-order mark is skipped, as the native
    /// lexer skips it.
    fn new(src: &'a str, file: &'a str) -> Parser<'a> {
        let offset = if src.starts_with('\u{feff}') { 3 } else { 0 };
        Parser {
            src,
            file,
            offset,
            line: 1,
            col: 1,
            depth: 0,
            bound: Vec::new(),
            next_object: DynamicRole::None,
        }
    }

    fn pos(&self) -> Pos {
        Pos::new(self.line, self.col)
    }

    fn rest(&self) -> &'a str {
        self.src.get(self.offset..).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.rest().chars().nth(n)
    }

    /// Consumes one character, keeping the line and column up to date.
    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.offset += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn bump_while(&mut self, pred: impl Fn(char) -> bool) {
        while self.peek().is_some_and(&pred) {
            self.bump();
        }
    }

    /// The input from byte offset `begin` up to the current offset.
    fn slice_from(&self, begin: usize) -> &'a str {
        self.src.get(begin..self.offset).unwrap_or("")
    }

    /// Skips JSON's whitespace: spaces, tabs and line ends.
    fn skip_whitespace(&mut self) {
        self.bump_while(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    }

    fn error(&self, pos: Pos, message: impl Into<String>) -> Error {
        Error::new(self.file, pos, message)
    }

    /// An "expected X, found Y" error at the next character.
    fn unexpected(&self, expected: &str) -> Error {
        let found = match self.peek() {
            None => "end of file".to_string(),
            Some(c) if c.is_control() => format!("'{}'", c.escape_debug()),
            Some(c) => format!("'{c}'"),
        };
        self.error(self.pos(), format!("expected {expected}, found {found}"))
    }

    /// Enters one more level of arrays or objects, opened at `pos`.
    fn enter(&mut self, pos: Pos) -> Result<(), Error> {
        if self.depth >= MAX_NESTING {
            return Err(self.error(pos, format!("nesting deeper than {MAX_NESTING} levels")));
        }
        self.depth += 1;
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Parses one value, at a character that is not whitespace. `owner`
    /// completes "expected a value ..." in errors.
    fn parse_value(&mut self, owner: &str) -> Result<Expr, Error> {
        let start = self.pos();
        let role = std::mem::take(&mut self.next_object);
        match self.peek() {
            Some('{') => {
                self.enter(start)?;
                self.next_object = role;
                let (entries, span) = self.parse_object()?;
                self.leave();
                Ok(Expr::Object { entries, span })
            }
            Some('[') => {
                self.enter(start)?;
                let list = self.parse_array()?;
                self.leave();
                Ok(list)
            }
            Some('"') => {
                let mut positions = Vec::new();
                let (text, span) = self.parse_string(Some(&mut positions))?;
                self.template(&text, &positions, span)
            }
            Some('-' | '0'..='9') => self.parse_number(),
            Some(c) if c.is_alphabetic() => self.parse_literal(owner),
            _ => Err(self.unexpected(&format!("a value {owner}"))),
        }
    }

    /// Parses `true`, `false` or `null`; any other word is an error that
    /// says what JSON wants instead.
    fn parse_literal(&mut self, owner: &str) -> Result<Expr, Error> {
        let start = self.pos();
        let begin = self.offset;
        self.bump_while(|c| c.is_alphanumeric() || c == '_');
        let word = self.slice_from(begin);
        let span = Span::new(start, self.pos());
        match word {
            "true" => Ok(Expr::Bool { value: true, span }),
            "false" => Ok(Expr::Bool { value: false, span }),
            "null" => Ok(Expr::Null { span }),
            _ => {
                let lower = word.to_lowercase();
                let hint = if matches!(lower.as_str(), "true" | "false" | "null") {
                    format!("JSON writes it in lowercase: {lower}")
                } else {
                    format!("strings need quotes: \"{word}\"")
                };
                Err(self.error(
                    start,
                    format!("expected a value {owner}, found '{word}' ({hint})"),
                ))
            }
        }
    }

    /// Parses `{ "key": value, ... }`, the current character being `{`,
    /// into its entries and its span.
    fn parse_object(&mut self) -> Result<(Vec<(Key, Expr)>, Span), Error> {
        let role = std::mem::take(&mut self.next_object);
        let outer = self.bound.len();
        let parsed = self.parse_object_entries(role);
        self.bound.truncate(outer);
        parsed
    }

    /// [`Parser::parse_object`], with the names of a `"dynamic"` property
    /// bound as its `role` says.
    fn parse_object_entries(
        &mut self,
        role: DynamicRole,
    ) -> Result<(Vec<(Key, Expr)>, Span), Error> {
        let open = self.pos();
        self.bump();
        let mut entries: Vec<(Key, Expr)> = Vec::new();
        let mut seen: HashMap<String, Pos> = HashMap::new();
        self.skip_whitespace();
        if self.peek() == Some('}') {
            self.bump();
            return Ok((entries, Span::new(open, self.pos())));
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some('"') {
                let expected = if entries.is_empty() {
                    format!("a key (a quoted string) or '}}' in the object opened at {open}")
                } else if self.peek() == Some('}') {
                    "a key (a quoted string) after ',' (JSON has no trailing commas)".to_string()
                } else {
                    format!("a key (a quoted string) in the object opened at {open}")
                };
                return Err(self.unexpected(&expected));
            }
            let (name, span) = self.parse_string(None)?;
            // Comments may repeat; any other key is given once.
            if name != COMMENT_KEY {
                if let Some(first) = seen.get(&name) {
                    return Err(self.error(
                        span.start,
                        format!("key {name:?} is already set at {first}"),
                    ));
                }
                seen.insert(name.clone(), span.start);
            }
            self.skip_whitespace();
            if self.peek() != Some(':') {
                return Err(self.unexpected(&format!("':' after the key {name:?}")));
            }
            self.bump();
            self.skip_whitespace();
            let label_outer = self.bound.len();
            match (role, name.as_str()) {
                (DynamicRole::Labels, _) => {
                    self.bound.push(name.clone());
                    self.next_object = DynamicRole::Spec;
                }
                (DynamicRole::None, "dynamic") => self.next_object = DynamicRole::Labels,
                _ => {}
            }
            let value = self.parse_value(&format!("for {name:?}"));
            if role == DynamicRole::Labels {
                self.bound.truncate(label_outer);
            }
            let value = value?;
            if let (DynamicRole::Spec, "iterator", Expr::String { value, .. }) =
                (role, name.as_str(), &value)
            {
                self.bound.push(value.clone());
            }
            self.skip_whitespace();
            let next = self.peek();
            if !matches!(next, Some(',' | '}')) {
                return Err(self.unexpected(&format!(
                    "',' or '}}' after the value of {name:?} (in the object opened at {open})"
                )));
            }
            let key = Key {
                name,
                quoted: true,
                span,
            };
            entries.push((key, value));
            self.bump();
            if next == Some('}') {
                return Ok((entries, Span::new(open, self.pos())));
            }
        }
    }

    /// Parses `[value, ...]`, the current character being `[`.
    fn parse_array(&mut self) -> Result<Expr, Error> {
        let open = self.pos();
        self.bump();
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(']') {
            self.bump();
            return Ok(Expr::List {
                items,
                span: Span::new(open, self.pos()),
            });
        }
        loop {
            self.skip_whitespace();
            if !items.is_empty() && self.peek() == Some(']') {
                return Err(self.unexpected("a value after ',' (JSON has no trailing commas)"));
            }
            items.push(self.parse_value("in the list")?);
            self.skip_whitespace();
            match self.peek() {
                Some(',') => {
                    self.bump();
                }
                Some(']') => {
                    self.bump();
                    return Ok(Expr::List {
                        items,
                        span: Span::new(open, self.pos()),
                    });
                }
                _ => {
                    return Err(self.unexpected(&format!("',' or ']' in the list opened at {open}")))
                }
            }
        }
    }

    /// Parses a quoted string, the current character being `"`, with every
    /// escape decoded; returns it with its span, quotes included.
    ///
    /// With `positions`, the position in the file of each character of the
    /// decoded text is pushed onto it.
    fn parse_string(
        &mut self,
        mut positions: Option<&mut Vec<Pos>>,
    ) -> Result<(String, Span), Error> {
        let start = self.pos();
        self.bump();
        let mut text = String::new();
        loop {
            // Each turn decodes one character (an escape, a surrogate pair
            // included, decodes to one, placed at its backslash) or ends.
            if let (Some(positions), Some(c)) = (positions.as_deref_mut(), self.peek()) {
                if c == '\\' || c >= ' ' && c != '"' {
                    positions.push(self.pos());
                }
            }
            match self.peek() {
                None => {
                    return Err(self.error(
                        start,
                        "unterminated string: expected a closing '\"' before the end of the file",
                    ))
                }
                Some('\n') => {
                    return Err(self.error(
                        start,
                        "unterminated string: expected a closing '\"' before the end of the line",
                    ))
                }
                Some('"') => {
                    self.bump();
                    return Ok((text, Span::new(start, self.pos())));
                }
                Some('\\') => self.parse_escape(&mut text, start)?,
                Some(c) if c < ' ' => {
                    let code = u32::from(c);
                    return Err(self.error(
                        self.pos(),
                        format!(
                            "control character U+{code:04X} in a string (write it as the escape \\u{code:04x})"
                        ),
                    ));
                }
                Some(c) => {
                    self.bump();
                    text.push(c);
                }
            }
        }
    }

    /// Decodes one backslash escape into `out`. A `\uXXXX` escape of a
    /// UTF-16 high surrogate must be followed by one of a low surrogate, and
    /// the pair is one character.
    fn parse_escape(&mut self, out: &mut String, string_start: Pos) -> Result<(), Error> {
        let at = self.pos();
        self.bump();
        let decoded = match self.peek() {
            None | Some('\n') => {
                return Err(self.error(
                    string_start,
                    "unterminated string: expected a closing '\"' before the end of the line",
                ))
            }
            Some('"') => '"',
            Some('\\') => '\\',
            Some('/') => '/',
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('u') => {
                self.bump();
                let unit = self.hex4(at)?;
                let decoded = match unit {
                    0xD800..=0xDBFF => self.low_surrogate(at, unit)?,
                    0xDC00..=0xDFFF => {
                        return Err(self.error(
                            at,
                            format!(
                                "invalid escape sequence '\\u{unit:04X}': a low surrogate without a high surrogate before it"
                            ),
                        ))
                    }
                    _ => char::from_u32(unit).ok_or_else(|| {
                        self.error(
                            at,
                            format!("invalid escape sequence '\\u{unit:04X}': not a character"),
                        )
                    })?,
                };
                out.push(decoded);
                return Ok(());
            }
            Some(other) => {
                return Err(self.error(
                    at,
                    format!(
                        "invalid escape sequence '\\{}' in string (valid escapes are \\\", \\\\, \\/, \\b, \\f, \\n, \\r, \\t and \\uXXXX)",
                        other.escape_debug()
                    ),
                ))
            }
        };
        self.bump();
        out.push(decoded);
        Ok(())
    }

    /// The character of the high surrogate `high`, escaped at `at`, and the
    /// `\uXXXX` low surrogate that must come next.
    fn low_surrogate(&mut self, at: Pos, high: u32) -> Result<char, Error> {
        let unpaired = |parser: &Parser<'_>| {
            parser.error(
                at,
                format!(
                    "invalid escape sequence '\\u{high:04X}': a high surrogate must be followed by the escape of a low surrogate (\\uDC00 to \\uDFFF)"
                ),
            )
        };
        if self.peek() != Some('\\') || self.peek_at(1) != Some('u') {
            return Err(unpaired(self));
        }
        let low_at = self.pos();
        self.bump();
        self.bump();
        let low = self.hex4(low_at)?;
        if !(0xDC00..=0xDFFF).contains(&low) {
            return Err(unpaired(self));
        }
        let scalar = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
        char::from_u32(scalar).ok_or_else(|| unpaired(self))
    }

    /// Reads the four hexadecimal digits of a `\u` escape that starts at
    /// `at`.
    fn hex4(&mut self, at: Pos) -> Result<u32, Error> {
        let begin = self.offset;
        for _ in 0..4 {
            if !self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                break;
            }
            self.bump();
        }
        let hex = self.slice_from(begin);
        match u32::from_str_radix(hex, 16) {
            Ok(unit) if hex.len() == 4 => Ok(unit),
            _ => Err(self.error(
                at,
                format!("invalid escape sequence '\\u{hex}': expected 4 hexadecimal digits"),
            )),
        }
    }

    /// Parses a number: `-`, an integer part without leading zeros, an
    /// optional fraction and an optional exponent. Its text is kept.
    fn parse_number(&mut self) -> Result<Expr, Error> {
        let start = self.pos();
        let begin = self.offset;
        if self.peek() == Some('-') {
            self.bump();
        }
        let expected = match self.peek() {
            Some('0') => {
                self.bump();
                None
            }
            Some('1'..='9') => {
                self.bump_while(|c| c.is_ascii_digit());
                None
            }
            _ => Some("a digit after '-'"),
        };
        let expected = expected.or_else(|| {
            if self.peek() != Some('.') {
                return None;
            }
            self.bump();
            if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                return Some("digits after '.'");
            }
            self.bump_while(|c| c.is_ascii_digit());
            None
        });
        let expected = expected.or_else(|| {
            if !matches!(self.peek(), Some('e' | 'E')) {
                return None;
            }
            self.bump();
            if matches!(self.peek(), Some('+' | '-')) {
                self.bump();
            }
            if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                return Some("digits in the exponent");
            }
            self.bump_while(|c| c.is_ascii_digit());
            None
        });
        // Catch `30s`, `01` or `1.2.3`: text that is not one number.
        let glued = self
            .peek()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.');
        if expected.is_some() || glued {
            self.bump_while(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '+' | '-'));
            let text = self.slice_from(begin);
            let reason = match expected {
                Some(expected) => format!("expected {expected}"),
                None if text.trim_start_matches('-').starts_with('0') => {
                    "JSON numbers have no leading zeros".to_string()
                }
                None => format!("text needs quotes: \"{text}\""),
            };
            return Err(self.error(start, format!("invalid number '{text}' ({reason})")));
        }
        Ok(Expr::Number {
            value: Number::new(self.slice_from(begin).to_string()),
            span: Span::new(start, self.pos()),
        })
    }
}
