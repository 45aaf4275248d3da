//! The typed getters of attribute values: strings (parsed with `FromStr`,
//! as durations, or as absolute paths), booleans, numbers and ports, lists of strings, and
//! maps of strings written as a block or as an object. Each registers its
//! key as known, and reports a value of the wrong type at its
//! `file:line:col`, naming what it expected.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::Fields;
use crate::spec::MemoryMax;
use hcl::{Attribute, Expr, Item, Number, Pos, Syntax};

/// A number, or a string that holds one: HCL converts such a string where
/// a number is wanted, so Nomad takes `static = "9015"` (as its own
/// portworx demo writes it).
fn number_of(expr: &Expr) -> Option<Number> {
    match expr {
        Expr::Number { value, .. } => Some(value.clone()),
        Expr::String { value, .. } if is_number_text(value) => Some(Number::new(value.clone())),
        _ => None,
    }
}

/// Whether `text` is a number as HCL writes one: an optional `-`, digits,
/// an optional fraction and an optional exponent.
fn is_number_text(text: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((whole, fraction)) => digits(whole) && digits(fraction),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.map_or(true, |e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// A bool, or the string `"true"` or `"false"`, which HCL converts where a
/// bool is wanted.
fn bool_of(expr: &Expr) -> Option<bool> {
    match expr {
        Expr::String { value, .. } if value == "true" || value == "false" => Some(value == "true"),
        other => other.as_bool(),
    }
}

/// One `key = "value"` of a map, with where each side is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MapEntry {
    pub(crate) key: String,
    pub(crate) key_pos: Pos,
    pub(crate) value: String,
    pub(crate) value_pos: Pos,
}

impl<'d> Fields<'d> {
    /// A type error for the value of `attr`.
    fn expected(&self, attr: &Attribute, expected: &str) {
        self.error(
            attr.value.pos(),
            format!(
                "{:?} in {} must be {expected}, found {}",
                attr.key.name,
                self.what,
                article(attr.value.kind_name())
            ),
        );
    }

    /// A string attribute.
    pub(crate) fn string(&mut self, key: &'static str) -> Option<String> {
        self.string_at(key).map(|(value, _)| value)
    }

    /// A string attribute with the position of its value.
    pub(crate) fn string_at(&mut self, key: &'static str) -> Option<(String, Pos)> {
        let attr = self.attr(key)?;
        match attr.value.as_str() {
            Some(text) => Some((text.to_string(), attr.value.pos())),
            None => {
                self.expected(attr, "a string");
                None
            }
        }
    }

    /// A string attribute that must be an absolute path, with its position.
    pub(crate) fn absolute_path(&mut self, key: &'static str) -> Option<(PathBuf, Pos)> {
        let (text, pos) = self.string_at(key)?;
        if !text.starts_with('/') {
            self.error(
                pos,
                format!(
                    "{key:?} in {} must be an absolute path, found {text:?}",
                    self.what
                ),
            );
            return None;
        }
        Some((PathBuf::from(text), pos))
    }

    /// A string attribute parsed with `FromStr`; the parse error is the
    /// message.
    pub(crate) fn parsed<T>(&mut self, key: &'static str) -> Option<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        self.parsed_at(key).map(|(value, _)| value)
    }

    /// Like [`Fields::parsed`], with the position of the value.
    pub(crate) fn parsed_at<T>(&mut self, key: &'static str) -> Option<(T, Pos)>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        let (text, pos) = self.string_at(key)?;
        match text.parse() {
            Ok(value) => Some((value, pos)),
            Err(err) => {
                self.error(pos, format!("{key:?} in {}: {err}", self.what));
                None
            }
        }
    }

    /// A boolean attribute.
    pub(crate) fn bool(&mut self, key: &'static str) -> Option<bool> {
        let attr = self.attr(key)?;
        let value = bool_of(&attr.value);
        if value.is_none() {
            self.expected(attr, "true or false");
        }
        value
    }

    /// A whole, non-negative number.
    pub(crate) fn u64(&mut self, key: &'static str) -> Option<u64> {
        self.u64_at(key).map(|(value, _)| value)
    }

    /// A whole, non-negative number, with the position of its value.
    pub(crate) fn u64_at(&mut self, key: &'static str) -> Option<(u64, Pos)> {
        let attr = self.attr(key)?;
        match number_of(&attr.value) {
            Some(number) => {
                let value = number.as_u64().map(|value| (value, attr.value.pos()));
                if value.is_none() {
                    self.error(
                        attr.value.pos(),
                        format!(
                            "{key:?} in {} must be a whole number of at least 0, found {}",
                            self.what,
                            number.text()
                        ),
                    );
                }
                value
            }
            None => {
                self.expected(attr, "a number");
                None
            }
        }
    }

    /// A TCP port number, 1 to 65535.
    pub(crate) fn port_number(&mut self, key: &'static str) -> Option<u16> {
        let pos = self.attr(key)?.value.pos();
        let value = self.u64(key)?;
        match u16::try_from(value) {
            Ok(port) if port > 0 => Some(port),
            _ => {
                self.error(
                    pos,
                    format!(
                        "{key:?} in {} must be a port from 1 to 65535, found {value}",
                        self.what
                    ),
                );
                None
            }
        }
    }

    /// A port inside a task's network namespace (a port's `to`): 1 to
    /// 65535, or Nomad's -1, which means the same as leaving it out (the
    /// port inside is the one the host gets).
    pub(crate) fn port_inside(&mut self, key: &'static str) -> Option<u16> {
        let (value, pos) = self.i64_at(key)?;
        if value == -1 {
            return None;
        }
        match u16::try_from(value) {
            Ok(port) if port > 0 => Some(port),
            _ => {
                self.error(
                    pos,
                    format!(
                        "{key:?} in {} must be a port from 1 to 65535 (or -1, the host's port), found {value}",
                        self.what
                    ),
                );
                None
            }
        }
    }

    /// A task's `memory_max`: MiB, or Nomad's -1 for no hard limit.
    pub(crate) fn memory_max(&mut self, key: &'static str) -> Option<MemoryMax> {
        let (value, pos) = self.i64_at(key)?;
        match value {
            -1 => Some(MemoryMax::Unlimited),
            mib if mib >= 0 => Some(MemoryMax::MiB(mib as u64)),
            _ => {
                self.error(
                    pos,
                    format!(
                        "{key:?} in {} must be a whole number of MiB, or -1 for no limit, found {value}",
                        self.what
                    ),
                );
                None
            }
        }
    }

    /// A duration written as a string, such as `"30s"` or `"1h30m"`.
    pub(crate) fn duration(&mut self, key: &'static str) -> Option<Duration> {
        self.duration_at(key).map(|(value, _)| value)
    }

    /// Like [`Fields::duration`], with the value's position.
    pub(crate) fn duration_at(&mut self, key: &'static str) -> Option<(Duration, Pos)> {
        let (text, pos) = self.string_at(key)?;
        match crate::units::parse_duration(&text) {
            Ok(value) => Some((value, pos)),
            Err(err) => {
                self.error(pos, format!("{key:?} in {}: {err}", self.what));
                None
            }
        }
    }

    /// A list of strings.
    pub(crate) fn strings(&mut self, key: &'static str) -> Option<Vec<String>> {
        let attr = self.attr(key)?;
        let Some(items) = attr.value.as_list() else {
            self.expected(attr, "a list of strings");
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item.as_str() {
                Some(text) => out.push(text.to_string()),
                None => self.error(
                    item.pos(),
                    format!(
                        "{:?} in {} must be a list of strings, found {} in the list",
                        attr.key.name,
                        self.what,
                        article(item.kind_name())
                    ),
                ),
            }
        }
        (out.len() == items.len()).then_some(out)
    }

    /// A list of strings, each with the position of its value.
    pub(crate) fn strings_at(&mut self, key: &'static str) -> Option<Vec<(String, Pos)>> {
        let values = self.strings(key)?;
        let attr = self.body.attribute(key)?;
        let items = attr.value.as_list()?;
        Some(
            values
                .into_iter()
                .zip(items.iter().map(Expr::pos))
                .collect(),
        )
    }

    /// A whole number that may be negative, with the position of its value.
    pub(crate) fn i64_at(&mut self, key: &'static str) -> Option<(i64, Pos)> {
        let attr = self.attr(key)?;
        match number_of(&attr.value) {
            Some(number) => {
                let value = number.text().parse::<i64>().ok();
                if value.is_none() {
                    self.error(
                        attr.value.pos(),
                        format!(
                            "{key:?} in {} must be a whole number, found {}",
                            self.what,
                            number.text()
                        ),
                    );
                }
                value.map(|value| (value, attr.value.pos()))
            }
            None => {
                self.expected(attr, "a number");
                None
            }
        }
    }

    /// A map of strings, written either as a block (`env { A = "1" }`) or
    /// as an attribute holding an object (`env = { "a.b" = "1" }`), the form
    /// for keys that are not identifiers. Numbers and booleans become their
    /// text, as in HCL's `map(string)`.
    pub(crate) fn map(&mut self, key: &'static str) -> Option<BTreeMap<String, String>> {
        let entries = self.map_entries(key)?;
        Some(order::map(
            entries.into_iter().map(|entry| (entry.key, entry.value)),
        ))
    }

    /// Like [`Fields::map`], with each entry's positions, in source order.
    pub(crate) fn map_entries(&mut self, key: &'static str) -> Option<Vec<MapEntry>> {
        self.known.push(key);
        let mut blocks = self.body.blocks_named(key);
        let attr = self.body.attribute(key).filter(|a| !a.value.is_null());
        let mut entries: Vec<(&str, Pos, &Expr)> = Vec::new();
        let found = match (blocks.next(), attr) {
            (None, None) => return None,
            (Some(block), _) => {
                if self.no_labels(block) {
                    for item in &block.body.items {
                        match item {
                            Item::Attribute(a) => {
                                entries.push((&a.key.name, a.key.span.start, &a.value))
                            }
                            Item::Block(inner) => self.error(
                                inner.kind.span.start,
                                format!(
                                    "{key} in {} holds only key = value lines, found block {:?}",
                                    self.what, inner.kind.name
                                ),
                            ),
                        }
                    }
                }
                if let Some(attr) = attr {
                    self.error(
                        attr.key.span.start,
                        format!("{key:?} in {} is also set as a block", self.what),
                    );
                }
                for extra in blocks {
                    self.twice(key, extra, block);
                }
                true
            }
            (None, Some(attr)) => match attr.value.as_object() {
                Some(object) => {
                    for (k, v) in object {
                        entries.push((&k.name, k.span.start, v));
                    }
                    true
                }
                None => {
                    let expected = match self.body.syntax {
                        Syntax::Native => "an object or a block",
                        Syntax::Json => "an object",
                    };
                    self.expected(attr, expected);
                    false
                }
            },
        };
        let mut map: Vec<MapEntry> = Vec::new();
        for (name, pos, value) in entries {
            let text = match value {
                Expr::String { value, .. } | Expr::Heredoc { value, .. } => value.clone(),
                Expr::Number { value, .. } => value.text().to_string(),
                Expr::Bool { value, .. } => value.to_string(),
                other => {
                    self.error(
                        other.pos(),
                        format!(
                            "{name:?} in {key} in {} must be a string, found {}",
                            self.what,
                            article(other.kind_name())
                        ),
                    );
                    continue;
                }
            };
            if map.iter().any(|entry| entry.key == name) {
                self.error(
                    pos,
                    format!("{name:?} is set twice in {key} in {}", self.what),
                );
                continue;
            }
            map.push(MapEntry {
                key: name.to_string(),
                key_pos: pos,
                value: text,
                value_pos: value.pos(),
            });
        }
        found.then_some(map)
    }
}

/// `a string`, `an object`: a value kind with its article.
fn article(kind: &str) -> String {
    if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {kind}")
    } else if kind == "null" {
        kind.to_string()
    } else {
        format!("a {kind}")
    }
}
