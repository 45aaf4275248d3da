//! What iterates over a collection: `for` expressions and splats.
//!
//! A `for` binds its names for each element in the scope's `bound` list
//! and takes them off again after, so that references inside it find them
//! before variables, locals and the agent's names. Lists are iterated in
//! order, with their index as the key; maps and objects in the order of
//! their keys, as HCL does. The elements all `for` expressions of one
//! evaluation make are counted, so that loops nested in loops over big
//! lists cannot hold the agent (which decodes a job again after a
//! restart) for long.

use std::collections::BTreeMap;

use super::{eval, index, render, Scope};
use crate::ast::{Expr, ForExpr, Ident, Part, Step};
use crate::error::Error;
use crate::pos::Pos;
use crate::value::{within_string_limit, Value};

/// How many elements the `for` expressions of one scope may make in all:
/// far more than any job file needs.
pub(crate) const MAX_ITERATIONS: usize = 1_000_000;

/// The value of `name` if a `for` around the expression binds it.
pub(super) fn bound(scope: &Scope<'_>, name: &str) -> Option<Value> {
    let bound = scope.bound.borrow();
    let found = bound.iter().rev().find(|(bound, _)| bound == name);
    found.map(|(_, value)| value.clone())
}

/// `value` with `steps` applied in turn. A splat applies the steps after
/// it to each element, all of them for `[*]`, the attribute steps that
/// follow at once for `.*`, and the rest to the list they make; a value
/// that is not a list is taken as a list of one, and null as an empty
/// list, as HCL does.
pub(super) fn traverse(
    mut value: Value,
    steps: &[Step],
    scope: &Scope<'_>,
    file: &str,
) -> Result<Value, Error> {
    for (at, step) in steps.iter().enumerate() {
        let Step::Splat { full, .. } = step else {
            value = index(value, step, scope, file)?;
            continue;
        };
        let rest = &steps[at + 1..];
        let each = if *full {
            rest.len()
        } else {
            rest.iter()
                .take_while(|step| matches!(step, Step::Attr(_)))
                .count()
        };
        let items = match value {
            Value::Null => Vec::new(),
            Value::List(items) => items,
            other => vec![other],
        };
        let items = items
            .into_iter()
            .map(|item| traverse(item, &rest[..each], scope, file))
            .collect::<Result<Vec<_>, _>>()?;
        return traverse(Value::List(items), &rest[each..], scope, file);
    }
    Ok(value)
}

/// The key and the value of each element of the collection `expr`
/// names, in the order a `for` visits them; `what` names the `for` in the
/// error for a value that is not a collection.
pub(super) fn elements(
    expr: &Expr,
    what: &str,
    scope: &Scope<'_>,
    file: &str,
) -> Result<Vec<(Value, Value)>, Error> {
    match eval(expr, scope, file)? {
        Value::List(items) => Ok(items
            .into_iter()
            .enumerate()
            .map(|(i, item)| (Value::number(i as f64), item))
            .collect()),
        Value::Object(mut entries) => {
            order::sort_by(&mut entries, |a, b| a.0.cmp(&b.0));
            let entries = entries.into_iter();
            Ok(entries.map(|(k, v)| (Value::String(k), v)).collect())
        }
        other => Err(Error::new(
            file,
            expr.pos(),
            format!(
                "{what} iterates over a list, a set, a map or an object, not a {}",
                other.kind_name()
            ),
        )),
    }
}

/// Counts one more element made by a `for` of the scope, at `pos`.
pub(super) fn count_iteration(scope: &Scope<'_>, file: &str, pos: Pos) -> Result<(), Error> {
    let made = scope.iterations.get() + 1;
    if made > MAX_ITERATIONS {
        return Err(Error::new(
            file,
            pos,
            format!("the for expressions make more than {MAX_ITERATIONS} elements"),
        ));
    }
    scope.iterations.set(made);
    Ok(())
}

/// Binds a `for`'s names to an element while `f` runs.
fn with_bound<T>(
    scope: &Scope<'_>,
    (key_var, value_var): (Option<&Ident>, &Ident),
    (key, value): (Value, Value),
    f: impl FnOnce() -> T,
) -> T {
    let depth = scope.bound.borrow().len();
    {
        let mut bound = scope.bound.borrow_mut();
        if let Some(name) = key_var {
            bound.push((name.name.clone(), key));
        }
        bound.push((value_var.name.clone(), value));
    }
    let made = f();
    scope.bound.borrow_mut().truncate(depth);
    made
}

/// Appends the text of `%{ for }`'s body for each element of `collection`
/// to `out`.
pub(super) fn render_for(
    names: (Option<&Ident>, &Ident),
    collection: &Expr,
    body: &[Part],
    scope: &Scope<'_>,
    file: &str,
    out: &mut String,
) -> Result<(), Error> {
    for element in elements(collection, "'%{ for }'", scope, file)? {
        count_iteration(scope, file, collection.pos())?;
        with_bound(scope, names, element, || render(body, scope, file, out))?;
        // The body's literal text is not checked as it is appended: each
        // turn adds at most a body's worth past the bound.
        within_string_limit(out.len())
            .map_err(|message| Error::new(file, collection.pos(), message))?;
    }
    Ok(())
}

/// The value of a `for` expression.
pub(super) fn eval_for(expr: &ForExpr, scope: &Scope<'_>, file: &str) -> Result<Value, Error> {
    let elements = elements(&expr.collection, "a for expression", scope, file)?;
    let mut list = Vec::new();
    let mut object: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let names = (expr.key_var.as_ref(), &expr.value_var);
    for pair in elements {
        count_iteration(scope, file, expr.span.start)?;
        match with_bound(scope, names, pair, || element(expr, scope, file))? {
            None => {}
            Some((None, value)) => list.push(value),
            Some((Some(key), value)) => {
                let values = object.entry(key.clone()).or_default();
                if !values.is_empty() && !expr.grouped {
                    let at = expr.key.as_ref().map_or(expr.span.start, |k| k.pos());
                    return Err(Error::new(
                        file,
                        at,
                        format!("the for expression makes the key {key:?} twice: add '...' after its value to group the values of a key into a list"),
                    ));
                }
                values.push(value);
            }
        }
    }
    if expr.key.is_none() {
        return Ok(Value::List(list));
    }
    let entries = object.into_iter().map(|(key, mut values)| {
        let value = match expr.grouped {
            true => Value::List(values),
            false => values.remove(0),
        };
        (key, value)
    });
    Ok(Value::Object(entries.collect()))
}

/// What one iteration makes with its names bound: `None` when the `if`
/// filters it out, else the key (of an object `for`) and the value.
#[allow(clippy::type_complexity)]
fn element(
    expr: &ForExpr,
    scope: &Scope<'_>,
    file: &str,
) -> Result<Option<(Option<String>, Value)>, Error> {
    if let Some(cond) = &expr.cond {
        match eval(cond, scope, file)? {
            Value::Bool(true) => {}
            Value::Bool(false) => return Ok(None),
            other => {
                return Err(Error::new(
                    file,
                    cond.pos(),
                    format!(
                        "the 'if' of a for expression must be a bool, not a {}",
                        other.kind_name()
                    ),
                ))
            }
        }
    }
    let key = match &expr.key {
        None => None,
        Some(key_expr) => match eval(key_expr, scope, file)? {
            Value::Null => {
                return Err(Error::new(
                    file,
                    key_expr.pos(),
                    "the key of a for expression must not be null",
                ))
            }
            key => Some(key.as_text().ok_or_else(|| {
                Error::new(
                    file,
                    key_expr.pos(),
                    format!(
                        "the key of a for expression must be a string, not a {}",
                        key.kind_name()
                    ),
                )
            })?),
        },
    };
    Ok(Some((key, eval(&expr.value, scope, file)?)))
}
