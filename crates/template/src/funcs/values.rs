//! consul-template's conversions, time and number functions.

use std::collections::BTreeMap;

use super::go::compare;
use super::{Args, Family};
use crate::convert::{from_json, to_json};
use crate::fmt::timestamp;
use crate::{Value, MAX_ITEMS};
use encode::{base64, base64_decode, Alphabet};

/// The conversion, time and number functions, by name, with how many arguments each takes (at least,
/// at most).
pub(super) const FUNCTIONS: Family = &[
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
        let json = json::parse(&s).map_err(|e| e.to_string())?;
        Ok(from_json(&json))
    }),
    ("toJSON", 1, 1, |a| {
        Ok(Value::Str(json::to_string(&to_json(&a.values[0]))))
    }),
    ("toUnescapedJSON", 1, 1, |a| {
        Ok(Value::Str(json::to_string(&to_json(&a.values[0]))))
    }),
    ("toJSONPretty", 1, 1, |a| {
        Ok(Value::Str(to_json(&a.values[0]).pretty()))
    }),
    ("toUnescapedJSONPretty", 1, 1, |a| {
        Ok(Value::Str(to_json(&a.values[0]).pretty()))
    }),
    ("base64Encode", 1, 1, |a| {
        Ok(Value::Str(base64(
            a.string(0)?.as_bytes(),
            Alphabet::Standard,
        )))
    }),
    ("base64Decode", 1, 1, |a| decode64(&a.string(0)?, false)),
    ("base64URLEncode", 1, 1, |a| {
        Ok(Value::Str(base64(a.string(0)?.as_bytes(), Alphabet::Url)))
    }),
    ("base64URLDecode", 1, 1, |a| decode64(&a.string(0)?, true)),
    ("timestamp", 0, 1, |a| {
        let format = if a.values.is_empty() {
            "2006-01-02T15:04:05Z07:00".to_string()
        } else {
            a.string(0)?
        };
        Ok(Value::Str(timestamp(&format, a.options().now)))
    }),
    // Numbers.
    ("loop", 1, 2, |a| {
        let (start, end) = if a.values.len() == 1 {
            (0, a.int(0)?)
        } else {
            (a.int(0)?, a.int(1)?)
        };
        if end.saturating_sub(start) > MAX_ITEMS as i64 {
            return Err(format!(
                "loop of {} iterations: at most {MAX_ITEMS} (the template list limit)",
                end.saturating_sub(start)
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

/// consul-template's math: the piped value is the left operand
/// (`{{ 10 | subtract 3 }}` is 7), floats if either is one.
pub(super) fn arith(
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

pub(super) fn decode64(s: &str, url: bool) -> Result<Value, String> {
    let s = if url {
        s.replace('-', "+").replace('_', "/")
    } else {
        s.to_string()
    };
    let bytes = base64_decode(&s, Alphabet::Standard).ok_or("not valid base64")?;
    String::from_utf8(bytes)
        .map(Value::Str)
        .map_err(|_| "the decoded bytes are not UTF-8".into())
}
