//! Number functions.

use super::{Args, Function};
use crate::value::Value;

/// The number functions, by name, with how many arguments each takes (at least,
/// at most).
pub(super) const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("max", 1, usize::MAX, |a| {
        numbers(a).map(|n| Value::number(n.into_iter().fold(f64::MIN, f64::max)))
    }),
    ("min", 1, usize::MAX, |a| {
        numbers(a).map(|n| Value::number(n.into_iter().fold(f64::MAX, f64::min)))
    }),
    ("abs", 1, 1, |a| a.number(0).map(|n| Value::number(n.abs()))),
    ("ceil", 1, 1, |a| {
        a.number(0).map(|n| Value::number(n.ceil()))
    }),
    ("floor", 1, 1, |a| {
        a.number(0).map(|n| Value::number(n.floor()))
    }),
];

pub(super) fn numbers(a: &Args<'_>) -> Result<Vec<f64>, String> {
    (0..a.values.len()).map(|i| a.number(i)).collect()
}
