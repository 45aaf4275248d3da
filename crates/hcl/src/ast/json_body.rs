//! A body of HCL's JSON syntax: an object's properties become its
//! attributes, and HCL's rules read a property as blocks when the decoder
//! asks for blocks of its name.
//!
//! A property named `//` is a comment, and is left out of the body.
//! Without labels, an object is one block and a list of objects one block
//! per object. With one label, the property's value is an object whose keys
//! are the labels, each holding a block's body as above (a list of such
//! objects is accepted too). `null` is no block, and any other value is
//! reported where it is, with what was expected, and skipped, so that the
//! decoder reports it and goes on. A reading is built once per attribute and
//! kept in it ([`BlockViews`]), so the blocks live as long as the tree and a
//! decoder borrows them as it borrows native blocks.

use std::cell::OnceCell;
use std::fmt;

use super::{Attribute, Block, Body, Expr, Ident, Item, Key, Label, Syntax};
use crate::pos::{Pos, Span};

/// The key of a comment property in a body.
pub(crate) const COMMENT_KEY: &str = "//";

impl Body {
    /// A body of the JSON syntax from an object's entries, comments left
    /// out: the JSON parser's for a file, and a block's read from a
    /// property.
    pub(crate) fn from_json_object(entries: Vec<(Key, Expr)>) -> Body {
        let items = entries
            .into_iter()
            .filter(|(key, _)| key.name != COMMENT_KEY)
            .map(|(key, value)| {
                let span = Span::new(key.span.start, value.span().end);
                Item::Attribute(Attribute::new(key, value, span))
            })
            .collect();
        Body {
            items,
            syntax: Syntax::Json,
        }
    }
}

/// The blocks a JSON property stands for (see
/// [`Attribute::json_blocks`](crate::Attribute::json_blocks)), and
/// every place where its value does not have a block's shape.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JsonBlocks {
    /// The blocks, in the order of the file.
    pub blocks: Vec<Block>,
    /// Values that are not a block's body, each skipped.
    pub misshapen: Vec<Misshapen>,
}

/// A value of a JSON property that should be a block's body and is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misshapen {
    /// Where the value is.
    pub pos: Pos,
    /// What is wrong, to follow the block's kind and where it is
    /// (`"capability" in the volume spec ...`): `is a block: its value must
    /// be an object or a list of objects, found a string`.
    pub message: String,
}

/// The two readings of a property as blocks, each built when first asked
/// for.
#[derive(Clone, Default)]
pub(crate) struct BlockViews {
    unlabeled: OnceCell<JsonBlocks>,
    labeled: OnceCell<JsonBlocks>,
}

impl BlockViews {
    /// The property `key = value` read as blocks, with one label each when
    /// `labeled`.
    pub(crate) fn get(&self, key: &Key, value: &Expr, labeled: bool) -> &JsonBlocks {
        let cell = if labeled {
            &self.labeled
        } else {
            &self.unlabeled
        };
        cell.get_or_init(|| read_blocks(key, value, labeled))
    }
}

impl PartialEq for BlockViews {
    /// Always equal: the views are built from the attribute they belong to,
    /// and say nothing of their own.
    fn eq(&self, _: &BlockViews) -> bool {
        true
    }
}

impl fmt::Debug for BlockViews {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockViews").finish_non_exhaustive()
    }
}

/// An object that is a block's body, and the span that stands for the
/// block's kind in messages: the key that introduces the body, or for an
/// object in a list, the object itself.
struct BodyAt<'e> {
    head: Span,
    entries: &'e [(Key, Expr)],
    end: Pos,
}

/// Reads `key = value` as blocks of the kind `key` names.
fn read_blocks(key: &Key, value: &Expr, labeled: bool) -> JsonBlocks {
    let mut out = JsonBlocks::default();
    let shape = "is a block: its value must be an object or a list of objects";
    if !labeled {
        for body_at in bodies(key.span, value, shape, &mut out.misshapen) {
            out.blocks.push(block(key, body_at, Vec::new()));
        }
        return out;
    }
    let outer_shape = "holds blocks by name: its value must be an object such as {\"NAME\": {...}}";
    for outer in bodies(key.span, value, outer_shape, &mut out.misshapen) {
        for (name, inner) in outer.entries {
            if name.name == COMMENT_KEY {
                continue;
            }
            let shape = format!(
                "holds blocks by name: the value of {:?} must be an object or a list of objects",
                name.name
            );
            for body_at in bodies(name.span, inner, &shape, &mut out.misshapen) {
                let label = Label {
                    value: name.name.clone(),
                    quoted: true,
                    span: name.span,
                };
                out.blocks.push(block(key, body_at, vec![label]));
            }
        }
    }
    out
}

/// The objects `value` holds as block bodies: itself, or each object of a
/// list; `null` holds none. Anything else is reported as not having the
/// `shape` a block needs.
fn bodies<'e>(
    head: Span,
    value: &'e Expr,
    shape: &str,
    misshapen: &mut Vec<Misshapen>,
) -> Vec<BodyAt<'e>> {
    let found = |expr: &Expr| article(expr.kind_name());
    match value {
        Expr::Object { entries, span } => vec![BodyAt {
            head,
            entries,
            end: span.end,
        }],
        Expr::List { items, .. } => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    Expr::Object { entries, span } => out.push(BodyAt {
                        head: *span,
                        entries,
                        end: span.end,
                    }),
                    other => misshapen.push(Misshapen {
                        pos: other.pos(),
                        message: format!("{shape}, found {} in the list", found(other)),
                    }),
                }
            }
            out
        }
        Expr::Null { .. } => Vec::new(),
        other => {
            misshapen.push(Misshapen {
                pos: other.pos(),
                message: format!("{shape}, found {}", found(other)),
            });
            Vec::new()
        }
    }
}

/// A block of the kind `key` names with `labels`, whose body is `at`.
fn block(key: &Key, at: BodyAt<'_>, labels: Vec<Label>) -> Block {
    Block {
        kind: Ident {
            name: key.name.clone(),
            span: at.head,
        },
        labels,
        body: Body::from_json_object(at.entries.to_vec()),
        span: Span::new(at.head.start, at.end),
    }
}

/// `a string`, `an object`, `a list`.
fn article(kind: &str) -> String {
    if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {kind}")
    } else {
        format!("a {kind}")
    }
}
