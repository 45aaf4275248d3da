//! HCL's `dynamic` blocks, expanded before a job file is decoded, as
//! Nomad's parser does with hashicorp/hcl's `dynblock` extension:
//!
//! ```hcl
//! dynamic "env" {
//!   for_each = var.envs      # a list, set, map or object
//!   iterator = e             # the name in `content`; the label by default
//!   labels   = [e.key]       # the labels of each block made, if it has any
//!   content {
//!     NAME = e.value
//!   }
//! }
//! ```
//!
//! makes one block of the label's type per element, in the order a `for`
//! visits them, with the iterator bound to `{ key, value }` (the index
//! for a list) while its labels and its `content` are evaluated; a
//! `dynamic` block in `content` is expanded in turn, with the names of
//! the ones around it still bound. The blocks made point at the
//! `dynamic` block, so that the decoder's errors about them do too.

use super::collections::{count_iteration, elements};
use super::{eval, evaluate_body, evaluate_in_place, Scope};
use crate::ast::{Attribute, Block, Body, Expr, Ident, Item, Key, Label};
use crate::error::Error;
use crate::value::Value;

/// The attributes and the block a `dynamic` block takes.
const KEYS: &str = "for_each, iterator, labels and one content block";

/// The blocks `block`, a `dynamic` one, makes; its errors go to `errors`.
pub(super) fn expand(
    block: Block,
    scope: &Scope<'_>,
    file: &str,
    errors: &mut Vec<Error>,
) -> Vec<Block> {
    match expand_checked(block, scope, file, errors) {
        Ok(blocks) => blocks,
        Err(err) => {
            errors.push(err);
            Vec::new()
        }
    }
}

fn expand_checked(
    block: Block,
    scope: &Scope<'_>,
    file: &str,
    errors: &mut Vec<Error>,
) -> Result<Vec<Block>, Error> {
    let at = |pos, message: String| Error::new(file, pos, message);
    let [label] = block.labels.as_slice() else {
        return Err(at(
            block.kind.span.start,
            format!(
                "a dynamic block takes one label, the type of the blocks it makes; found {}",
                block.labels.len()
            ),
        ));
    };
    let kind = Ident {
        name: label.value.clone(),
        span: label.span,
    };
    let what = format!("dynamic {:?}", kind.name);
    let mut for_each = None;
    let mut iterator = None;
    let mut labels = None;
    let mut content: Option<Block> = None;
    for item in block.body.items {
        match item {
            Item::Attribute(attr) => match attr.key.name.as_str() {
                "for_each" => for_each = Some(attr.value),
                "labels" => labels = Some(attr.value),
                "iterator" => match attr.value {
                    Expr::Reference { root, steps, .. } if steps.is_empty() => {
                        iterator = Some(root.name)
                    }
                    other => {
                        return Err(at(
                            other.pos(),
                            format!(
                                "the iterator of {what} is a bare name, such as `iterator = item`"
                            ),
                        ))
                    }
                },
                other => {
                    return Err(at(
                        attr.key.span.start,
                        format!("unknown attribute {other:?} in {what}: it takes {KEYS}"),
                    ))
                }
            },
            Item::Block(inner) if inner.kind.name == "content" && inner.labels.is_empty() => {
                if let Some(first) = &content {
                    return Err(at(
                        inner.kind.span.start,
                        format!(
                            "{what} has a second content block (the first is at {})",
                            first.kind.span.start
                        ),
                    ));
                }
                content = Some(inner);
            }
            Item::Block(inner) => {
                return Err(at(
                    inner.kind.span.start,
                    format!(
                        "unexpected block {:?} in {what}: it takes {KEYS}",
                        inner.kind.name
                    ),
                ))
            }
        }
    }
    let Some(for_each) = for_each else {
        return Err(at(block.kind.span.start, format!("{what} needs for_each")));
    };
    let Some(content) = content else {
        return Err(at(
            block.kind.span.start,
            format!("{what} needs a content block"),
        ));
    };
    let iterator = iterator.unwrap_or_else(|| kind.name.clone());
    each_element(&for_each, &what, &iterator, scope, file, || {
        make_one(&kind, labels.as_ref(), &content, scope, file, errors)
    })
}

/// Calls `one` once for each element of `for_each`, in order, with
/// `iterator` bound to it (its `key` and `value`) meanwhile; what `one`
/// makes, in that order.
fn each_element<T>(
    for_each: &Expr,
    what: &str,
    iterator: &str,
    scope: &Scope<'_>,
    file: &str,
    mut one: impl FnMut() -> Result<T, Error>,
) -> Result<Vec<T>, Error> {
    let mut made = Vec::new();
    for (key, value) in elements(for_each, &format!("the for_each of {what}"), scope, file)? {
        count_iteration(scope, file, for_each.pos())?;
        let depth = scope.bound.borrow().len();
        let element = Value::Object(vec![("key".into(), key), ("value".into(), value)]);
        scope
            .bound
            .borrow_mut()
            .push((iterator.to_string(), element));
        let made_one = one();
        scope.bound.borrow_mut().truncate(depth);
        made.push(made_one?);
    }
    Ok(made)
}

/// The labels `expr` gives one block of type `kind`, each a string.
fn label_values(
    kind: &Ident,
    expr: &Expr,
    scope: &Scope<'_>,
    file: &str,
) -> Result<Vec<Label>, Error> {
    let items = match eval(expr, scope, file)? {
        Value::List(items) => items,
        other => {
            return Err(Error::new(
                file,
                expr.pos(),
                format!(
                    "the labels of dynamic {:?} are a list of strings, not a {}",
                    kind.name,
                    other.kind_name()
                ),
            ))
        }
    };
    let mut labels = Vec::new();
    for item in items {
        let value = match item {
            Value::String(s) => s,
            Value::Number(n) => n.text().to_string(),
            other => {
                return Err(Error::new(
                    file,
                    expr.pos(),
                    format!(
                        "a label of dynamic {:?} is a string, not a {}",
                        kind.name,
                        other.kind_name()
                    ),
                ))
            }
        };
        labels.push(Label {
            value,
            quoted: true,
            span: expr.span(),
        });
    }
    Ok(labels)
}

/// The block of one element: its labels, and `content`'s body evaluated.
fn make_one(
    kind: &Ident,
    labels: Option<&Expr>,
    content: &Block,
    scope: &Scope<'_>,
    file: &str,
    errors: &mut Vec<Error>,
) -> Result<Block, Error> {
    let made_labels = match labels {
        Some(expr) => label_values(kind, expr, scope, file)?,
        None => Vec::new(),
    };
    let mut body = Body {
        items: content.body.items.clone(),
        syntax: content.body.syntax,
    };
    evaluate_body(&mut body, scope, file, errors);
    Ok(Block {
        kind: kind.clone(),
        labels: made_labels,
        body,
        span: content.span,
    })
}

/// The `"dynamic"` properties in `expr`, a value of HCL's JSON syntax,
/// expanded wherever they are (`{"dynamic": {"env": {"for_each": ...,
/// "iterator": "e", "labels": [...], "content": {...}}}}`): each becomes
/// the property of its label, a list of one object per element (nested in
/// objects keyed by its labels, if it has any), with what the object held
/// under that name before them. Errors go to `errors`.
pub(super) fn expand_json(expr: &mut Expr, scope: &Scope<'_>, file: &str, errors: &mut Vec<Error>) {
    match expr {
        Expr::List { items, .. } => {
            for item in items {
                expand_json(item, scope, file, errors);
            }
        }
        Expr::Object { entries, .. } => {
            let at = entries
                .iter()
                .position(|(k, v)| k.name == "dynamic" && looks_dynamic(v));
            if let Some(at) = at {
                if let Err(err) = expand_json_property(entries, at, scope, file, errors) {
                    errors.push(err);
                }
            }
            for (_, value) in entries.iter_mut() {
                expand_json(value, scope, file, errors);
            }
        }
        _ => {}
    }
}

/// [`expand_json`] on the properties of a body of HCL's JSON syntax, a
/// `"dynamic"` one among them included.
pub(super) fn expand_json_body(
    body: &mut Body,
    scope: &Scope<'_>,
    file: &str,
    errors: &mut Vec<Error>,
) {
    let at = body.items.iter().position(|item| {
        matches!(item, Item::Attribute(a) if a.key.name == "dynamic" && looks_dynamic(&a.value))
    });
    let Some(at) = at else { return };
    let mut entries: Vec<(Key, Expr)> = Vec::new();
    for item in std::mem::take(&mut body.items) {
        if let Item::Attribute(attr) = item {
            entries.push((attr.key, attr.value));
        }
    }
    if let Err(err) = expand_json_property(&mut entries, at, scope, file, errors) {
        errors.push(err);
    }
    body.items = entries
        .into_iter()
        .map(|(key, value)| {
            let span = crate::pos::Span::new(key.span.start, value.span().end);
            Item::Attribute(Attribute::new(key, value, span))
        })
        .collect();
}

/// Whether `value` has the shape of a `"dynamic"` property's (an object
/// of objects, each with a `for_each` or a `content`), so that a map
/// key of that name (an `env` variable, say) is left alone.
fn looks_dynamic(value: &Expr) -> bool {
    let spec = |v: &Expr| {
        matches!(v, Expr::Object { entries, .. }
            if entries.iter().any(|(k, _)| k.name == "for_each" || k.name == "content"))
    };
    matches!(value, Expr::Object { entries, .. }
        if !entries.is_empty() && entries.iter().all(|(_, v)| spec(v)))
}

/// Expands the `"dynamic"` property at `at` of an object's `entries`.
fn expand_json_property(
    entries: &mut Vec<(Key, Expr)>,
    at: usize,
    scope: &Scope<'_>,
    file: &str,
    errors: &mut Vec<Error>,
) -> Result<(), Error> {
    let (key, value) = entries.remove(at);
    let Expr::Object { entries: kinds, .. } = value else {
        return Err(Error::new(
            file,
            value.pos(),
            "a \"dynamic\" property is an object whose keys are the types of the blocks it makes",
        ));
    };
    let mut insert_at = at;
    for (kind, spec) in kinds {
        let made = expand_json_one(&kind, spec, scope, file, errors)?;
        match entries.iter_mut().find(|(k, _)| k.name == kind.name) {
            Some((_, existing)) => {
                let span = existing.span();
                let before = std::mem::replace(existing, Expr::Null { span });
                let mut items = match before {
                    Expr::List { items, .. } => items,
                    other => vec![other],
                };
                items.extend(made);
                *existing = Expr::List { items, span };
            }
            None => {
                let span = key.span;
                entries.insert(insert_at, (kind, Expr::List { items: made, span }));
                insert_at += 1;
            }
        }
    }
    Ok(())
}

/// The objects one label of a JSON `"dynamic"` property makes.
fn expand_json_one(
    kind: &Key,
    spec: Expr,
    scope: &Scope<'_>,
    file: &str,
    errors: &mut Vec<Error>,
) -> Result<Vec<Expr>, Error> {
    let what = format!("dynamic {:?}", kind.name);
    let at = |pos, message: String| Error::new(file, pos, message);
    let Expr::Object { entries, span } = spec else {
        return Err(at(spec.pos(), format!("{what} is an object of {KEYS}")));
    };
    let (mut for_each, mut iterator, mut labels, mut content) = (None, None, None, None);
    for (key, value) in entries {
        match (key.name.as_str(), value) {
            ("for_each", v) => for_each = Some(v),
            ("labels", v) => labels = Some(v),
            ("iterator", Expr::String { value, .. }) => iterator = Some(value),
            ("iterator", other) => {
                return Err(at(
                    other.pos(),
                    format!("the iterator of {what} is a name, such as \"iterator\": \"item\""),
                ))
            }
            ("content", v @ Expr::Object { .. }) => content = Some(v),
            ("content", other) => {
                return Err(at(
                    other.pos(),
                    format!("the content of {what} is an object"),
                ))
            }
            (other, _) => {
                return Err(at(
                    key.span.start,
                    format!("unknown key {other:?} in {what}: it takes {KEYS}"),
                ))
            }
        }
    }
    let Some(for_each) = for_each else {
        return Err(at(span.start, format!("{what} needs for_each")));
    };
    let Some(content) = content else {
        return Err(at(span.start, format!("{what} needs a content object")));
    };
    let iterator = iterator.unwrap_or_else(|| kind.name.clone());
    let label_kind = Ident {
        name: kind.name.clone(),
        span: kind.span,
    };
    each_element(&for_each, &what, &iterator, scope, file, || {
        json_one(&label_kind, labels.as_ref(), &content, scope, file, errors)
    })
}

/// The object of one element: `content` evaluated, inside objects keyed
/// by its labels.
fn json_one(
    kind: &Ident,
    labels: Option<&Expr>,
    content: &Expr,
    scope: &Scope<'_>,
    file: &str,
    errors: &mut Vec<Error>,
) -> Result<Expr, Error> {
    let names = match labels {
        Some(expr) => label_values(kind, expr, scope, file)?,
        None => Vec::new(),
    };
    let mut made = content.clone();
    expand_json(&mut made, scope, file, errors);
    evaluate_in_place(&mut made, scope, file)?;
    for label in names.into_iter().rev() {
        let span = made.span();
        made = Expr::Object {
            entries: vec![(
                Key {
                    name: label.value,
                    quoted: true,
                    span: label.span,
                },
                made,
            )],
            span,
        };
    }
    Ok(made)
}
