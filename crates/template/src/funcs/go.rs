//! Go's `text/template` built-ins.

use super::{Args, Family};
use crate::convert::{html, js};
use crate::fmt::{printf, sprint};
use crate::Value;
use encode::{percent, Space};

/// Go's built-ins (`and` and `or` are the executor's: they are lazy), by name, with how many arguments each takes (at least,
/// at most).
pub(super) const FUNCTIONS: Family = &[
    ("and", 1, usize::MAX, |_| Ok(Value::Nil)),
    ("or", 1, usize::MAX, |_| Ok(Value::Nil)),
    ("not", 1, 1, |a| Ok(Value::Bool(!a.values[0].truthy()))),
    ("len", 1, 1, |a| {
        Ok(Value::Int(match &a.values[0] {
            Value::Str(s) => s.len(),
            Value::List(l) => l.len(),
            Value::Map(m) => m.len(),
            other => return Err(format!("len of type {}", other.kind())),
        } as i64))
    }),
    ("index", 1, usize::MAX, index),
    ("slice", 1, 3, slice),
    ("print", 0, usize::MAX, |a| {
        Ok(Value::Str(sprint(&a.values, false)))
    }),
    ("println", 0, usize::MAX, |a| {
        Ok(Value::Str(sprint(&a.values, true)))
    }),
    ("printf", 1, usize::MAX, |a| {
        // Go's printf takes a string format: a number or a bool piped into
        // a bare `printf` is an error, not a format.
        let Value::Str(format) = &a.values[0] else {
            return Err(format!(
                "the format is a {}, not a string",
                a.values[0].kind()
            ));
        };
        Ok(Value::Str(printf(format, &a.values[1..])))
    }),
    ("eq", 1, usize::MAX, |a| {
        let first = &a.values[0];
        for other in &a.values[1..] {
            if compare(first, other)? == Some(std::cmp::Ordering::Equal) {
                return Ok(Value::Bool(true));
            }
        }
        Ok(Value::Bool(a.values.len() == 1))
    }),
    ("ne", 2, 2, |a| {
        Ok(Value::Bool(
            compare(&a.values[0], &a.values[1])? != Some(std::cmp::Ordering::Equal),
        ))
    }),
    ("lt", 2, 2, |a| ordered(a, |o| o.is_lt())),
    ("le", 2, 2, |a| ordered(a, |o| o.is_le())),
    ("gt", 2, 2, |a| ordered(a, |o| o.is_gt())),
    ("ge", 2, 2, |a| ordered(a, |o| o.is_ge())),
    ("urlquery", 0, usize::MAX, |a| {
        Ok(Value::Str(percent(&sprint(&a.values, false), Space::Plus)))
    }),
    ("html", 0, usize::MAX, |a| {
        Ok(Value::Str(html(&sprint(&a.values, false))))
    }),
    ("js", 0, usize::MAX, |a| {
        Ok(Value::Str(js(&sprint(&a.values, false))))
    }),
];

pub(super) fn index(a: &mut Args<'_>) -> Result<Value, String> {
    let mut value = a.values[0].clone();
    for key in &a.values[1..] {
        value = match (value, key) {
            (Value::List(l), Value::Int(i)) => l
                .get(usize::try_from(*i).map_err(|_| format!("index out of range: {i}"))?)
                .cloned()
                .ok_or_else(|| format!("index out of range: {i}"))?,
            (Value::Str(s), Value::Int(i)) => s
                .as_bytes()
                .get(usize::try_from(*i).map_err(|_| format!("index out of range: {i}"))?)
                .map(|b| Value::Int(i64::from(*b)))
                .ok_or_else(|| format!("index out of range: {i}"))?,
            (Value::Map(m), Value::Str(k)) => m.get(k).cloned().unwrap_or(Value::Nil),
            (Value::Nil, _) => return Err("index of untyped nil".into()),
            (v, k) => {
                return Err(format!(
                    "can't index item of type {} with {}",
                    v.kind(),
                    k.kind()
                ))
            }
        };
    }
    Ok(value)
}

pub(super) fn slice(a: &mut Args<'_>) -> Result<Value, String> {
    let len = match &a.values[0] {
        Value::List(l) => l.len(),
        Value::Str(s) => s.len(),
        other => return Err(format!("can't slice item of type {}", other.kind())),
    };
    let from = if a.values.len() > 1 { a.int(1)? } else { 0 };
    let to = if a.values.len() > 2 {
        a.int(2)?
    } else {
        len as i64
    };
    if from < 0 || to < from || to as usize > len {
        return Err(format!("slice bounds [{from}:{to}] out of range of {len}"));
    }
    let (from, to) = (from as usize, to as usize);
    Ok(match &a.values[0] {
        Value::List(l) => Value::List(l[from..to].to_vec()),
        Value::Str(s) => Value::Str(
            s.get(from..to)
                .ok_or("slice splits a character")?
                .to_string(),
        ),
        _ => Value::Nil,
    })
}

/// Go's comparison of basic values: numbers with numbers, strings with
/// strings, bools with bools (for `eq`); `None` when unordered.
pub(super) fn compare(x: &Value, y: &Value) -> Result<Option<std::cmp::Ordering>, String> {
    Ok(match (x, y) {
        (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
        (Value::Int(a), Value::Float(b)) => (*a as f64).partial_cmp(b),
        (Value::Float(a), Value::Int(b)) => a.partial_cmp(&(*b as f64)),
        (Value::Float(a), Value::Float(b)) => a.partial_cmp(b),
        (Value::Str(a), Value::Str(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        (Value::Nil, Value::Nil) => Some(std::cmp::Ordering::Equal),
        (Value::Nil, _) | (_, Value::Nil) => None,
        (a, b) => {
            return Err(format!(
                "incompatible types for comparison: {} and {}",
                a.kind(),
                b.kind()
            ))
        }
    })
}

pub(super) fn ordered(
    a: &mut Args<'_>,
    test: fn(std::cmp::Ordering) -> bool,
) -> Result<Value, String> {
    if matches!(a.values[0], Value::Bool(_) | Value::Nil)
        || matches!(a.values[1], Value::Bool(_) | Value::Nil)
    {
        return Err("invalid type for comparison".into());
    }
    Ok(Value::Bool(
        compare(&a.values[0], &a.values[1])?.is_some_and(test),
    ))
}
