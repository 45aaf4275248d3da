//! consul-template's functions on strings and regular expressions.

use super::go::compare;
use super::{Args, Family};
use crate::convert::title;
use crate::{Value, MAX_ITEMS, MAX_OUTPUT};
use regex::Regex;

/// The string functions, by name, with how many arguments each takes (at
/// least, at most).
pub(super) const FUNCTIONS: Family = &[
    // Strings.
    ("toLower", 1, 1, |a| {
        Ok(Value::Str(a.string(0)?.to_lowercase()))
    }),
    ("toUpper", 1, 1, |a| {
        Ok(Value::Str(a.string(0)?.to_uppercase()))
    }),
    ("toTitle", 1, 1, |a| Ok(Value::Str(title(&a.string(0)?)))),
    ("title", 1, 1, |a| Ok(Value::Str(title(&a.string(0)?)))),
    ("trimSpace", 1, 1, |a| {
        Ok(Value::Str(a.string(0)?.trim().to_string()))
    }),
    ("trim", 2, 2, |a| {
        let (cut, s) = (a.string(0)?, a.string(1)?);
        Ok(Value::Str(s.trim_matches(|c| cut.contains(c)).to_string()))
    }),
    ("trimPrefix", 2, 2, |a| {
        let (prefix, s) = (a.string(0)?, a.string(1)?);
        Ok(Value::Str(
            s.strip_prefix(prefix.as_str()).unwrap_or(&s).to_string(),
        ))
    }),
    ("trimSuffix", 2, 2, |a| {
        let (suffix, s) = (a.string(0)?, a.string(1)?);
        Ok(Value::Str(
            s.strip_suffix(suffix.as_str()).unwrap_or(&s).to_string(),
        ))
    }),
    ("replaceAll", 3, 3, |a| {
        let (from, to, s) = (a.string(0)?, a.string(1)?, a.string(2)?);
        // Go's `Replace` with an empty `from` puts `to` around every
        // character: one more place than there are characters.
        let places = if from.is_empty() {
            s.chars().count() + 1
        } else {
            s.matches(from.as_str()).count()
        };
        let len = (s.len() - places.saturating_mul(from.len()).min(s.len()))
            .saturating_add(places.saturating_mul(to.len()));
        within_value_limit(len)?;
        Ok(Value::Str(s.replace(&from, &to)))
    }),
    ("split", 2, 2, |a| {
        let (sep, s) = (a.string(0)?, a.string(1)?);
        if s.is_empty() {
            return Ok(Value::List(Vec::new()));
        }
        let parts = if sep.is_empty() {
            s.chars().count()
        } else {
            s.matches(sep.as_str()).count() + 1
        };
        if parts > MAX_ITEMS {
            return Err(format!(
                "{parts} parts exceed the template list limit of {MAX_ITEMS}"
            ));
        }
        Ok(Value::List(
            s.split(sep.as_str())
                .map(|p| Value::Str(p.to_string()))
                .collect(),
        ))
    }),
    ("join", 2, 2, |a| {
        let sep = a.string(0)?;
        let items = a.list(1)?;
        let mut out = String::new();
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(&sep);
            }
            out.push_str(&item.to_string());
            within_value_limit(out.len())?;
        }
        Ok(Value::Str(out))
    }),
    ("indent", 2, 2, |a| {
        let n = usize::try_from(a.int(0)?).map_err(|_| "indent must be at least 0".to_string())?;
        let s = a.string(1)?;
        let lines = s.split('\n').count();
        within_value_limit(n.saturating_mul(lines).saturating_add(s.len()))?;
        let pad = " ".repeat(n);
        Ok(Value::Str(
            s.split('\n')
                .map(|l| format!("{pad}{l}"))
                .collect::<Vec<_>>()
                .join("\n"),
        ))
    }),
    ("contains", 2, 2, |a| {
        Ok(Value::Bool(holds(&a.values[1], &a.values[0])))
    }),
    ("in", 2, 2, |a| {
        Ok(Value::Bool(holds(&a.values[0], &a.values[1])))
    }),
    ("containsAll", 2, 2, |a| contains_some(a, true, true)),
    ("containsAny", 2, 2, |a| contains_some(a, false, false)),
    ("containsNone", 2, 2, |a| contains_some(a, true, false)),
    ("containsNotAll", 2, 2, |a| contains_some(a, false, true)),
    // Regular expressions, with Go's syntax and matches.
    ("regexMatch", 2, 2, |a| {
        let (re, text) = (pattern(a, 0)?, a.string(1)?);
        Ok(Value::Bool(re.is_match(&text)))
    }),
    ("regexReplaceAll", 3, 3, |a| {
        let (re, with, text) = (pattern(a, 0)?, a.string(1)?, a.string(2)?);
        let replaced = re
            .replace_all(&text, &with)
            .map_err(|err| format!("regexReplaceAll: {err}"))?;
        Ok(Value::Str(replaced))
    }),
];

/// Refuses a string of `len` bytes before it is built, past the limit
/// every template value keeps.
fn within_value_limit(len: usize) -> Result<(), String> {
    if len > MAX_OUTPUT {
        return Err(format!(
            "the result would be {len} bytes, over the template value limit of {} MiB",
            MAX_OUTPUT >> 20
        ));
    }
    Ok(())
}

/// Whether `haystack` (a list, a map's keys, or a string) holds `needle`.
pub(super) fn holds(haystack: &Value, needle: &Value) -> bool {
    match (haystack, needle) {
        (Value::List(l), n) => l
            .iter()
            .any(|v| compare(v, n).ok().flatten().is_some_and(|o| o.is_eq())),
        (Value::Map(m), Value::Str(k)) => m.contains_key(k),
        (Value::Str(s), Value::Str(n)) => s.contains(n.as_str()),
        _ => false,
    }
}

/// consul-template's `containsAll` and kin: `all` of the needles (or any),
/// `holds` or not.
pub(super) fn contains_some(
    a: &mut Args<'_>,
    all: bool,
    holds_wanted: bool,
) -> Result<Value, String> {
    let needles = a.list(0)?;
    let haystack = &a.values[1];
    let test = |n: &Value| holds(haystack, n) == holds_wanted;
    Ok(Value::Bool(if all {
        needles.iter().all(test)
    } else {
        needles.iter().any(test)
    }))
}

/// Argument `i` compiled as a regular expression.
fn pattern(a: &Args<'_>, i: usize) -> Result<Regex, String> {
    let text = a.string(i)?;
    Regex::new(&text).map_err(|err| format!("invalid pattern {text:?} {err}"))
}
