//! Collection functions, and the conversions between types.

use super::{Args, Function};
use crate::value::Value;

/// The collection and conversion functions, by name, with how many arguments each takes (at least,
/// at most).
pub(super) const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("concat", 0, usize::MAX, |a| {
        let mut out = Vec::new();
        for i in 0..a.values.len() {
            out.extend(a.list(i)?);
        }
        Ok(Value::List(out))
    }),
    ("lookup", 2, 3, lookup),
    ("length", 1, 1, length),
    ("element", 2, 2, |a| {
        let items = a.list(0)?;
        if items.is_empty() {
            return Err("element: cannot take an element of an empty list".to_string());
        }
        let index = a.index(1)?;
        Ok(items[index % items.len()].clone())
    }),
    ("contains", 2, 2, |a| {
        Ok(Value::Bool(a.list(0)?.contains(&a.values[1])))
    }),
    // As in go-cty, a map's keys and values come in the order of its
    // keys, whatever the order it was written in.
    ("keys", 1, 1, |a| {
        let keys = sorted(a.object(0)?)
            .into_iter()
            .map(|(k, _)| Value::String(k));
        Ok(Value::List(keys.collect()))
    }),
    ("values", 1, 1, |a| {
        Ok(Value::List(
            sorted(a.object(0)?).into_iter().map(|(_, v)| v).collect(),
        ))
    }),
    ("merge", 0, usize::MAX, merge),
    ("flatten", 1, 1, |a| Ok(Value::List(flatten(a.list(0)?)))),
    ("distinct", 1, 1, |a| {
        // Equal values print alike: the set of their printed forms finds
        // a repeat at once, where a search of the list so far made a long
        // list quadratic.
        let mut seen = std::collections::HashSet::new();
        let mut out: Vec<Value> = Vec::new();
        for item in a.list(0)? {
            if seen.insert(format!("{item:?}")) {
                out.push(item);
            }
        }
        Ok(Value::List(out))
    }),
    ("reverse", 1, 1, |a| {
        Ok(Value::List(a.list(0)?.into_iter().rev().collect()))
    }),
    ("slice", 3, 3, |a| {
        let items = a.list(0)?;
        let (start, end) = (a.index(1)?, a.index(2)?);
        match items.get(start..end) {
            Some(slice) => Ok(Value::List(slice.to_vec())),
            None => Err(format!(
                "slice: {start}..{end} is out of a list of {}",
                items.len()
            )),
        }
    }),
    ("compact", 1, 1, |a| {
        let items = a.list(0)?.into_iter();
        Ok(Value::List(
            items
                .filter(|v| !matches!(v, Value::String(s) if s.is_empty()))
                .collect(),
        ))
    }),
    ("coalesce", 1, usize::MAX, |a| {
        let empty = |v: &&Value| match v {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            _ => false,
        };
        let found = a.values.iter().find(|v| !empty(v));
        found
            .cloned()
            .ok_or_else(|| "coalesce: no non-null, non-empty argument".to_string())
    }),
    ("zipmap", 2, 2, |a| {
        let (keys, values) = (a.list(0)?, a.list(1)?);
        if keys.len() != values.len() {
            return Err("zipmap: the lists of keys and values differ in length".to_string());
        }
        let keys = keys
            .iter()
            .map(|k| k.as_text().ok_or("zipmap: keys must be strings"));
        let keys = keys.collect::<Result<Vec<_>, _>>()?;
        Ok(Value::Object(keys.into_iter().zip(values).collect()))
    }),
    ("tolist", 1, 1, |a| a.list(0).map(Value::List)),
    ("toset", 1, 1, |a| a.list(0).map(Value::List)),
    ("tomap", 1, 1, |a| a.object(0).map(Value::Object)),
];

pub(super) fn lookup(a: &Args<'_>) -> Result<Value, String> {
    let key = a.string(1)?;
    match (a.values[0].get(&key), a.values.get(2)) {
        (Some(found), _) => Ok(found.clone()),
        (None, Some(default)) => Ok(default.clone()),
        (None, None) => match &a.values[0] {
            Value::Object(_) => Err(format!("lookup: no key {key:?} and no default")),
            _ => Err(a.wrong(0, "map")),
        },
    }
}

pub(super) fn length(a: &Args<'_>) -> Result<Value, String> {
    let n = match &a.values[0] {
        Value::String(s) => s.chars().count(),
        Value::List(items) => items.len(),
        Value::Object(entries) => entries.len(),
        _ => return Err(a.wrong(0, "string, list or map")),
    };
    Ok(Value::number(n as f64))
}

pub(super) fn merge(a: &Args<'_>) -> Result<Value, String> {
    let mut out: Vec<(String, Value)> = Vec::new();
    for i in 0..a.values.len() {
        if a.values[i] == Value::Null {
            continue;
        }
        for (key, value) in a.object(i)? {
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value,
                None => out.push((key, value)),
            }
        }
    }
    Ok(Value::Object(out))
}

pub(super) fn flatten(items: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for item in items {
        match item {
            Value::List(inner) => out.extend(flatten(inner)),
            other => out.push(other),
        }
    }
    out
}

/// The entries of a map or object in the order of their keys.
fn sorted(mut entries: Vec<(String, Value)>) -> Vec<(String, Value)> {
    order::sort_by(&mut entries, |a, b| a.0.cmp(&b.0));
    entries
}
