//! The values expressions evaluate to, which the evaluator makes and the
//! functions take and return, and the bound on the strings they hold.

use crate::ast::{Expr, Key, Number};
use crate::pos::Span;

/// A value that an expression evaluates to.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    List(Vec<Value>),
    /// An object or a map, its entries in order.
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The type in words, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::List(_) => "list",
            Value::Object(_) => "object",
        }
    }

    /// A number from an `f64`, written without a fraction when it is whole.
    pub fn number(value: f64) -> Value {
        let text = if value.fract() == 0.0 && value.abs() < 1e15 {
            format!("{value:.0}")
        } else {
            value.to_string()
        };
        Value::Number(Number::new(text))
    }

    /// The value as text in a string template: strings as they are,
    /// numbers and bools as HCL writes them; other types have no text.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.text().to_string()),
            Value::Bool(value) => Some(value.to_string()),
            _ => None,
        }
    }

    /// How many values this one holds, itself and all levels below
    /// included; found without recursion.
    pub fn size(&self) -> usize {
        let mut size = 0;
        let mut stack = vec![self];
        while let Some(value) = stack.pop() {
            size += 1;
            match value {
                Value::List(items) => stack.extend(items),
                Value::Object(entries) => stack.extend(entries.iter().map(|(_, v)| v)),
                _ => {}
            }
        }
        size
    }

    /// How many bytes of text this one holds (strings and object keys),
    /// all levels below included; found without recursion.
    pub fn bytes(&self) -> usize {
        let mut bytes = 0usize;
        let mut stack = vec![self];
        while let Some(value) = stack.pop() {
            match value {
                Value::String(text) => bytes = bytes.saturating_add(text.len()),
                Value::List(items) => stack.extend(items),
                Value::Object(entries) => {
                    for (key, value) in entries {
                        bytes = bytes.saturating_add(key.len());
                        stack.push(value);
                    }
                }
                _ => {}
            }
        }
        bytes
    }

    /// The entry `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The literal expression with this value, placed at `span`.
    pub fn to_expr(&self, span: Span) -> Expr {
        match self {
            Value::Null => Expr::Null { span },
            Value::Bool(value) => Expr::Bool {
                value: *value,
                span,
            },
            Value::Number(value) => Expr::Number {
                value: value.clone(),
                span,
            },
            Value::String(value) => Expr::String {
                value: value.clone(),
                span,
            },
            Value::List(items) => Expr::List {
                items: items.iter().map(|item| item.to_expr(span)).collect(),
                span,
            },
            Value::Object(entries) => Expr::Object {
                entries: entries
                    .iter()
                    .map(|(key, value)| {
                        let key = Key {
                            name: key.clone(),
                            quoted: true,
                            span,
                        };
                        (key, value.to_expr(span))
                    })
                    .collect(),
                span,
            },
        }
    }
}

/// The longest string an expression may make: a string template, a
/// function's result, a file `file()` reads.
pub const MAX_STRING: usize = 16 << 20;

/// Refuses a string of `len` bytes past [`MAX_STRING`], before it is made.
pub(crate) fn within_string_limit(len: usize) -> Result<(), String> {
    if len > MAX_STRING {
        return Err(format!(
            "a string of {len} bytes exceeds {} MiB (the HCL string limit)",
            MAX_STRING >> 20
        ));
    }
    Ok(())
}
