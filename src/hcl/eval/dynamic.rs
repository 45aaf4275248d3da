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
use super::{eval, evaluate_body, Scope, Value};
use crate::hcl::ast::{Block, Body, Error, Expr, Ident, Item, Label};

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
    let mut made = Vec::new();
    for (key, value) in elements(&for_each, &format!("the for_each of {what}"), scope, file)? {
        count_iteration(scope, file, for_each.pos())?;
        let depth = scope.bound.borrow().len();
        let element = Value::Object(vec![("key".into(), key), ("value".into(), value)]);
        scope.bound.borrow_mut().push((iterator.clone(), element));
        let one = make_one(&kind, labels.as_ref(), &content, scope, file, errors);
        scope.bound.borrow_mut().truncate(depth);
        made.push(one?);
    }
    Ok(made)
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
    let mut made_labels = Vec::new();
    if let Some(expr) = labels {
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
            made_labels.push(Label {
                value,
                quoted: true,
                span: expr.span(),
            });
        }
    }
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
