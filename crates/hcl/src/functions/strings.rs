//! String functions: formatting, splitting and joining, case, trimming.

use super::{Args, Function};
use crate::value::{within_string_limit, Value};

/// The string functions, by name, with how many arguments each takes (at least,
/// at most).
pub(super) const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("format", 1, usize::MAX, format),
    ("join", 2, 2, join),
    ("split", 2, 2, split),
    ("lower", 1, 1, |a| {
        Ok(Value::String(a.string(0)?.to_lowercase()))
    }),
    ("upper", 1, 1, |a| {
        Ok(Value::String(a.string(0)?.to_uppercase()))
    }),
    ("replace", 3, 3, |a| {
        let (text, from, to) = (a.string(0)?, a.string(1)?, a.string(2)?);
        // An empty `from` matches around every character.
        let places = if from.is_empty() {
            text.chars().count() + 1
        } else {
            text.matches(from.as_str()).count()
        };
        let len = (text.len() - places.saturating_mul(from.len()).min(text.len()))
            .saturating_add(places.saturating_mul(to.len()));
        within_string_limit(len).map_err(|e| format!("replace: {e}"))?;
        Ok(Value::String(text.replace(&from, &to)))
    }),
    ("trimspace", 1, 1, |a| {
        Ok(Value::String(a.string(0)?.trim().to_string()))
    }),
    ("trimprefix", 2, 2, |a| {
        let (text, prefix) = (a.string(0)?, a.string(1)?);
        Ok(Value::String(
            text.strip_prefix(&prefix).unwrap_or(&text).to_string(),
        ))
    }),
    ("trimsuffix", 2, 2, |a| {
        let (text, suffix) = (a.string(0)?, a.string(1)?);
        Ok(Value::String(
            text.strip_suffix(&suffix).unwrap_or(&text).to_string(),
        ))
    }),
    ("trim", 2, 2, |a| {
        let cut = a.string(1)?;
        Ok(Value::String(
            a.string(0)?.trim_matches(|c| cut.contains(c)).to_string(),
        ))
    }),
    ("chomp", 1, 1, |a| {
        Ok(Value::String(
            a.string(0)?.trim_end_matches(['\r', '\n']).to_string(),
        ))
    }),
    ("substr", 3, 3, substr),
    ("strrev", 1, 1, |a| {
        Ok(Value::String(a.string(0)?.chars().rev().collect()))
    }),
    ("tostring", 1, 1, |a| Ok(Value::String(a.string(0)?))),
    ("tonumber", 1, 1, |a| a.number(0).map(Value::number)),
    ("tobool", 1, 1, tobool),
];

/// `format(spec, args...)`: Go's verbs as cty reads them: `%s`, `%d`,
/// `%v`, `%q`, `%f` and `%%`.
pub(super) fn format(a: &Args<'_>) -> Result<Value, String> {
    let spec = a.string(0)?;
    let mut out = String::new();
    let mut next = 1;
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let verb = chars.next().ok_or("format: the format ends with '%'")?;
        if verb == '%' {
            out.push('%');
            continue;
        }
        if next >= a.values.len() {
            return Err(format!("format: not enough arguments for %{verb}"));
        }
        match verb {
            's' | 'v' => out.push_str(&a.string(next)?),
            'q' => out.push_str(&format!("{:?}", a.string(next)?)),
            'd' => out.push_str(&format!("{:.0}", a.number(next)?.trunc())),
            'f' => out.push_str(&format!("{:.6}", a.number(next)?)),
            other => return Err(format!("format: unsupported verb %{other}")),
        }
        next += 1;
        within_string_limit(out.len()).map_err(|e| format!("format: {e}"))?;
    }
    if next < a.values.len() {
        return Err(format!(
            "format: {} arguments too many",
            a.values.len() - next
        ));
    }
    Ok(Value::String(out))
}

pub(super) fn join(a: &Args<'_>) -> Result<Value, String> {
    let sep = a.string(0)?;
    let items = a.list(1)?;
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        let text = item.as_text().ok_or("join: elements must be strings")?;
        let sep = if i > 0 { sep.as_str() } else { "" };
        within_string_limit(out.len() + sep.len() + text.len())
            .map_err(|e| format!("join: {e}"))?;
        out.push_str(sep);
        out.push_str(&text);
    }
    Ok(Value::String(out))
}

pub(super) fn split(a: &Args<'_>) -> Result<Value, String> {
    let (sep, text) = (a.string(0)?, a.string(1)?);
    if sep.is_empty() {
        return Err("split: the separator must not be empty".to_string());
    }
    Ok(Value::List(
        text.split(sep.as_str())
            .map(|s| Value::String(s.to_string()))
            .collect(),
    ))
}

pub(super) fn substr(a: &Args<'_>) -> Result<Value, String> {
    let chars: Vec<char> = a.string(0)?.chars().collect();
    let offset = a.index(1)?.min(chars.len());
    let length = a.number(2)?;
    let end = if length < 0.0 {
        chars.len()
    } else {
        (offset + length as usize).min(chars.len())
    };
    Ok(Value::String(chars[offset..end].iter().collect()))
}

pub(super) fn tobool(a: &Args<'_>) -> Result<Value, String> {
    match &a.values[0] {
        Value::Bool(b) => Ok(Value::Bool(*b)),
        Value::String(s) if s == "true" => Ok(Value::Bool(true)),
        Value::String(s) if s == "false" => Ok(Value::Bool(false)),
        _ => Err(a.wrong(0, "bool")),
    }
}
