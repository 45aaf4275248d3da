//! The functions a template may call, in one table: Go's `text/template`
//! built-ins and the consul-template functions that need neither Consul,
//! Vault nor Nomad's variables. The piped value comes last, as in
//! consul-template (`{{ "a,b" | split "," }}` is `split "," "a,b"`).
//!
//! The functions that read Consul, Vault or Nomad's variables and service
//! registry are refused by name, as are the two Nomad itself denies
//! (`plugin`, `writeToFile`); any other name is an unknown function.

use std::collections::BTreeMap;

use super::convert::{from_json, html, js, pretty_json, title, to_json, urlquery};
use super::exec::Value;
use super::fmt::{printf, sprint, timestamp};
use super::Context;
use crate::hcl::{base64_decode, base64_encode};

type Function = fn(&mut Args<'_>) -> Result<Value, String>;

/// A call's arguments and the context it renders in.
pub(super) struct Args<'a> {
    pub values: Vec<Value>,
    pub ctx: &'a Context<'a>,
}

/// The functions, by name, with how many arguments each takes (at least,
/// at most).
const TABLE: &[(&str, usize, usize, Function)] = &[
    // Go's built-ins (`and` and `or` are the executor's: they are lazy).
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
        let format = a.string(0)?;
        Ok(Value::Str(printf(&format, &a.values[1..])))
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
        Ok(Value::Str(urlquery(&sprint(&a.values, false))))
    }),
    ("html", 0, usize::MAX, |a| {
        Ok(Value::Str(html(&sprint(&a.values, false))))
    }),
    ("js", 0, usize::MAX, |a| {
        Ok(Value::Str(js(&sprint(&a.values, false))))
    }),
    // consul-template: the environment and files.
    ("env", 1, 1, |a| {
        let key = a.string(0)?;
        Ok(Value::Str(a.ctx.env.get(&key).cloned().unwrap_or_default()))
    }),
    ("mustEnv", 1, 1, |a| {
        let key = a.string(0)?;
        a.ctx
            .env
            .get(&key)
            .cloned()
            .map(Value::Str)
            .ok_or_else(|| format!("environment variable {key:?} is not set"))
    }),
    ("envOrDefault", 2, 2, |a| {
        let (key, default) = (a.string(0)?, a.string(1)?);
        Ok(Value::Str(
            a.ctx
                .env
                .get(&key)
                .filter(|v| !v.is_empty())
                .cloned()
                .unwrap_or(default),
        ))
    }),
    ("file", 1, 1, |a| {
        let path = a.string(0)?;
        a.ctx.read_file(&path).map(Value::Str)
    }),
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
        Ok(Value::Str(s.replace(&from, &to)))
    }),
    ("split", 2, 2, |a| {
        let (sep, s) = (a.string(0)?, a.string(1)?);
        if s.is_empty() {
            return Ok(Value::List(Vec::new()));
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
        Ok(Value::Str(
            items
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(&sep),
        ))
    }),
    ("indent", 2, 2, |a| {
        let n = a.int(0)?;
        let pad =
            " ".repeat(usize::try_from(n).map_err(|_| "indent must be at least 0".to_string())?);
        let s = a.string(1)?;
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
    // Conversions.
    ("parseBool", 1, 1, |a| {
        let s = a.string(0)?;
        match s.as_str() {
            "" => Ok(Value::Bool(false)),
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(Value::Bool(true)),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(Value::Bool(false)),
            _ => Err(format!("parsing {s:?}: invalid syntax")),
        }
    }),
    ("parseInt", 1, 1, |a| {
        let s = a.string(0)?;
        if s.is_empty() {
            return Ok(Value::Int(0));
        }
        s.trim()
            .parse()
            .map(Value::Int)
            .map_err(|_| format!("parsing {s:?}: invalid syntax"))
    }),
    ("parseUint", 1, 1, |a| {
        let s = a.string(0)?;
        if s.is_empty() {
            return Ok(Value::Int(0));
        }
        s.trim()
            .parse::<u32>()
            .map(|n| Value::Int(i64::from(n)))
            .or_else(|_| {
                s.trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .map(Value::Int)
                    .ok_or_else(|| format!("parsing {s:?}: invalid syntax"))
            })
    }),
    ("parseFloat", 1, 1, |a| {
        let s = a.string(0)?;
        if s.is_empty() {
            return Ok(Value::Float(0.0));
        }
        s.trim()
            .parse()
            .map(Value::Float)
            .map_err(|_| format!("parsing {s:?}: invalid syntax"))
    }),
    ("parseJSON", 1, 1, |a| {
        let s = a.string(0)?;
        if s.is_empty() {
            return Ok(Value::Map(BTreeMap::new()));
        }
        let json = crate::json::parse(&s).map_err(|e| e.to_string())?;
        Ok(from_json(&json))
    }),
    ("toJSON", 1, 1, |a| {
        Ok(Value::Str(crate::json::to_string(&to_json(&a.values[0]))))
    }),
    ("toUnescapedJSON", 1, 1, |a| {
        Ok(Value::Str(crate::json::to_string(&to_json(&a.values[0]))))
    }),
    ("toJSONPretty", 1, 1, |a| {
        Ok(Value::Str(pretty_json(&to_json(&a.values[0]), 0)))
    }),
    ("toUnescapedJSONPretty", 1, 1, |a| {
        Ok(Value::Str(pretty_json(&to_json(&a.values[0]), 0)))
    }),
    ("base64Encode", 1, 1, |a| {
        Ok(Value::Str(base64_encode(a.string(0)?.as_bytes())))
    }),
    ("base64Decode", 1, 1, |a| decode64(&a.string(0)?, false)),
    ("base64URLEncode", 1, 1, |a| {
        Ok(Value::Str(
            base64_encode(a.string(0)?.as_bytes())
                .replace('+', "-")
                .replace('/', "_"),
        ))
    }),
    ("base64URLDecode", 1, 1, |a| decode64(&a.string(0)?, true)),
    ("timestamp", 0, 1, |a| {
        let format = if a.values.is_empty() {
            "2006-01-02T15:04:05Z07:00".to_string()
        } else {
            a.string(0)?
        };
        Ok(Value::Str(timestamp(&format, a.ctx.now)))
    }),
    // Numbers.
    ("loop", 1, 2, |a| {
        let (start, end) = if a.values.len() == 1 {
            (0, a.int(0)?)
        } else {
            (a.int(0)?, a.int(1)?)
        };
        if end.saturating_sub(start) > 1_000_000 {
            return Err(format!(
                "loop of {} iterations: at most 1000000",
                end - start
            ));
        }
        Ok(Value::List((start..end).map(Value::Int).collect()))
    }),
    ("add", 2, 2, |a| arith(a, i64::checked_add, |x, y| x + y)),
    ("subtract", 2, 2, |a| {
        arith(a, |x, y| y.checked_sub(x), |x, y| y - x)
    }),
    ("multiply", 2, 2, |a| {
        arith(a, i64::checked_mul, |x, y| x * y)
    }),
    ("divide", 2, 2, |a| {
        arith(a, |x, y| y.checked_div(x), |x, y| y / x)
    }),
    ("modulo", 2, 2, |a| {
        arith(a, |x, y| y.checked_rem(x), |x, y| y % x)
    }),
    ("minimum", 2, 2, |a| {
        Ok(
            if compare(&a.values[0], &a.values[1])?.is_some_and(|o| o.is_le()) {
                a.values[0].clone()
            } else {
                a.values[1].clone()
            },
        )
    }),
    ("maximum", 2, 2, |a| {
        Ok(
            if compare(&a.values[0], &a.values[1])?.is_some_and(|o| o.is_ge()) {
                a.values[0].clone()
            } else {
                a.values[1].clone()
            },
        )
    }),
];

/// Functions that read what csi-agent does not have, with what they need.
const REFUSED: &[(&str, &str)] = &[
    ("key", "Consul"),
    ("keyExists", "Consul"),
    ("keyOrDefault", "Consul"),
    ("ls", "Consul"),
    ("safeLs", "Consul"),
    ("tree", "Consul"),
    ("safeTree", "Consul"),
    ("service", "Consul"),
    ("services", "Consul"),
    ("connect", "Consul"),
    ("caLeaf", "Consul"),
    ("caRoots", "Consul"),
    ("datacenters", "Consul"),
    ("node", "Consul"),
    ("nodes", "Consul"),
    ("checks", "Consul"),
    ("partitions", "Consul"),
    ("peerings", "Consul"),
    ("exportedServices", "Consul"),
    ("byKey", "Consul"),
    ("byTag", "Consul"),
    ("byMeta", "Consul"),
    ("secret", "Vault"),
    ("secrets", "Vault"),
    ("pkiCert", "Vault"),
    ("nomadVar", "Nomad's variables"),
    ("nomadVarList", "Nomad's variables"),
    ("nomadVarListSafe", "Nomad's variables"),
    ("nomadVarExists", "Nomad's variables"),
    ("nomadService", "Nomad's service registry"),
    ("nomadServices", "Nomad's service registry"),
];

/// Whether a template may call `name`: an error that says why not.
pub(super) fn check(name: &str) -> Result<(), String> {
    if TABLE.iter().any(|(n, ..)| *n == name) {
        return Ok(());
    }
    if let Some((_, needs)) = REFUSED.iter().find(|(n, _)| *n == name) {
        return Err(format!(
            "function {name:?} needs {needs}, which csi-agent does not have"
        ));
    }
    Err(match name {
        "plugin" | "writeToFile" => {
            format!("function {name:?} is denied, as Nomad denies it by default")
        }
        "regexMatch" | "regexReplaceAll" => {
            format!("function {name:?} is not supported: csi-agent has no regular expressions")
        }
        "sockaddr" | "sha256Hex" | "md5sum" | "toYAML" | "parseYAML" | "toTOML"
        | "executeTemplate" => {
            format!("function {name:?} is not supported by csi-agent")
        }
        _ if name.starts_with("sprig_") => {
            format!("function {name:?} is not supported: csi-agent has no sprig functions")
        }
        _ => format!("function {name:?} not defined"),
    })
}

/// Calls `name`, which [`check`] accepted, with `values`.
pub(super) fn call(name: &str, values: Vec<Value>, ctx: &Context<'_>) -> Result<Value, String> {
    let (_, min, max, f) = TABLE
        .iter()
        .find(|(n, ..)| *n == name)
        .ok_or_else(|| format!("function {name:?} not defined"))?;
    if values.len() < *min || values.len() > *max {
        let want = if min == max {
            min.to_string()
        } else if *max == usize::MAX {
            format!("at least {min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(format!(
            "wrong number of args: got {}, want {want}",
            values.len()
        ));
    }
    f(&mut Args { values, ctx })
}

impl Args<'_> {
    fn string(&self, i: usize) -> Result<String, String> {
        match &self.values[i] {
            Value::Str(s) => Ok(s.clone()),
            Value::Int(_) | Value::Float(_) | Value::Bool(_) => Ok(self.values[i].to_string()),
            other => Err(format!(
                "argument {} is a {}, not a string",
                i + 1,
                other.kind()
            )),
        }
    }

    fn int(&self, i: usize) -> Result<i64, String> {
        match &self.values[i] {
            Value::Int(n) => Ok(*n),
            Value::Float(f) if f.fract() == 0.0 => Ok(*f as i64),
            Value::Str(s) => s
                .trim()
                .parse()
                .map_err(|_| format!("argument {} is {s:?}, not an integer", i + 1)),
            other => Err(format!(
                "argument {} is a {}, not an integer",
                i + 1,
                other.kind()
            )),
        }
    }

    fn list(&self, i: usize) -> Result<Vec<Value>, String> {
        match &self.values[i] {
            Value::List(l) => Ok(l.clone()),
            Value::Nil => Ok(Vec::new()),
            other => Err(format!(
                "argument {} is a {}, not a list",
                i + 1,
                other.kind()
            )),
        }
    }
}

fn index(a: &mut Args<'_>) -> Result<Value, String> {
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

fn slice(a: &mut Args<'_>) -> Result<Value, String> {
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
fn compare(x: &Value, y: &Value) -> Result<Option<std::cmp::Ordering>, String> {
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

fn ordered(a: &mut Args<'_>, test: fn(std::cmp::Ordering) -> bool) -> Result<Value, String> {
    if matches!(a.values[0], Value::Bool(_) | Value::Nil)
        || matches!(a.values[1], Value::Bool(_) | Value::Nil)
    {
        return Err("invalid type for comparison".into());
    }
    Ok(Value::Bool(
        compare(&a.values[0], &a.values[1])?.is_some_and(test),
    ))
}

/// Whether `haystack` (a list, a map's keys, or a string) holds `needle`.
fn holds(haystack: &Value, needle: &Value) -> bool {
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
fn contains_some(a: &mut Args<'_>, all: bool, holds_wanted: bool) -> Result<Value, String> {
    let needles = a.list(0)?;
    let haystack = &a.values[1];
    let test = |n: &Value| holds(haystack, n) == holds_wanted;
    Ok(Value::Bool(if all {
        needles.iter().all(test)
    } else {
        needles.iter().any(test)
    }))
}

/// consul-template's math: the piped value is the left operand
/// (`{{ 10 | subtract 3 }}` is 7), floats if either is one.
fn arith(
    a: &mut Args<'_>,
    int: fn(i64, i64) -> Option<i64>,
    float: fn(f64, f64) -> f64,
) -> Result<Value, String> {
    let num = |v: &Value| -> Result<Value, String> {
        match v {
            Value::Int(_) | Value::Float(_) => Ok(v.clone()),
            Value::Str(s) => s
                .trim()
                .parse::<i64>()
                .map(Value::Int)
                .or_else(|_| s.trim().parse::<f64>().map(Value::Float))
                .map_err(|_| format!("{s:?} is not a number")),
            other => Err(format!("a {} is not a number", other.kind())),
        }
    };
    match (num(&a.values[0])?, num(&a.values[1])?) {
        (Value::Int(x), Value::Int(y)) => int(x, y)
            .map(Value::Int)
            .ok_or_else(|| "integer overflow or division by zero".to_string()),
        (x, y) => {
            let f = |v: Value| {
                if let Value::Int(n) = v {
                    n as f64
                } else if let Value::Float(f) = v {
                    f
                } else {
                    0.0
                }
            };
            Ok(Value::Float(float(f(x), f(y))))
        }
    }
}

fn decode64(s: &str, url: bool) -> Result<Value, String> {
    let s = if url {
        s.replace('-', "+").replace('_', "/")
    } else {
        s.to_string()
    };
    let bytes = base64_decode(&s).ok_or("not valid base64")?;
    String::from_utf8(bytes)
        .map(Value::Str)
        .map_err(|_| "the decoded bytes are not UTF-8".into())
}
