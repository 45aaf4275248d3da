//! The syntax tree that both parsers produce, the evaluator rewrites and
//! the decoders read.

use std::fmt;

use crate::pos::{Pos, Span};

mod json_body;
mod number;

use json_body::BlockViews;
pub(crate) use json_body::COMMENT_KEY;
pub use json_body::{JsonBlocks, Misshapen};
pub use number::Number;

/// The two syntaxes of HCL a file can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Syntax {
    /// HCL's native syntax: `key = value` and `kind "label" { ... }`.
    #[default]
    Native,
    /// HCL's JSON syntax: one JSON object, whose properties a decoder reads
    /// as attributes or as blocks (see [`Attribute::json_blocks`]).
    Json,
}

impl Syntax {
    /// The syntax of a file told by its name, as Nomad does: JSON for a
    /// name ending in `.json`, native for any other.
    pub fn of_file(name: &str) -> Syntax {
        if name.ends_with(".json") {
            Syntax::Json
        } else {
            Syntax::Native
        }
    }
}

/// The contents of a file or of a block: attributes and nested blocks, in
/// source order.
///
/// A body in the JSON syntax holds only attributes, one per property of its
/// object: whether a property is a block is for the decoder to say.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Body {
    /// The items in the order they were written.
    pub items: Vec<Item>,
    /// The syntax the items were written in.
    pub syntax: Syntax,
}

impl Body {
    /// Iterates over the attributes of this body, in source order.
    pub fn attributes(&self) -> impl Iterator<Item = &Attribute> {
        self.items.iter().filter_map(|item| match item {
            Item::Attribute(attr) => Some(attr),
            Item::Block(_) => None,
        })
    }

    /// Iterates over the blocks of this body, in source order.
    pub fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.items.iter().filter_map(|item| match item {
            Item::Block(block) => Some(block),
            Item::Attribute(_) => None,
        })
    }

    /// Iterates over the blocks of one kind, such as all `group` blocks.
    pub fn blocks_named<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Block> + 'a {
        self.blocks().filter(move |block| block.kind.name == kind)
    }

    /// Finds the attribute with this key; the parser rejects duplicates, so
    /// there is at most one.
    pub fn attribute(&self, key: &str) -> Option<&Attribute> {
        self.attributes().find(|attr| attr.key.name == key)
    }
}

/// One entry of a body.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A `key = value` line.
    Attribute(Attribute),
    /// A `kind "label" { ... }` block.
    Block(Block),
}

impl Item {
    /// The span of the whole item.
    pub fn span(&self) -> Span {
        match self {
            Item::Attribute(attr) => attr.span,
            Item::Block(block) => block.span,
        }
    }
}

/// An identifier with its span: a block's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    /// The identifier as written.
    pub name: String,
    /// Where it was written.
    pub span: Span,
}

/// A `key = value` attribute, or a property of a body in the JSON syntax.
#[derive(Clone, PartialEq)]
pub struct Attribute {
    /// The key on the left of `=`: an identifier, or a quoted string as
    /// HCL1 allows (always quoted in JSON).
    pub key: Key,
    /// The value on the right of `=`.
    pub value: Expr,
    /// From the key to the end of the value.
    pub span: Span,
    /// The property read as blocks, built when first asked for.
    pub(crate) views: BlockViews,
}

impl Attribute {
    /// Builds an attribute: the parser's, or a decoder's that rewrites one.
    pub fn new(key: Key, value: Expr, span: Span) -> Attribute {
        Attribute {
            key,
            value,
            span,
            views: BlockViews::default(),
        }
    }

    /// This property of a JSON body read as blocks of the kind its key
    /// names, with one label each when `labeled`, by HCL's JSON rules: an
    /// object is one block and a list of objects one block per object;
    /// labels are the keys of an object around the bodies
    /// (`{"plugin": {"hostpath": {...}}}`). Built on the first call and
    /// kept, so the blocks borrow from the tree as native ones do.
    pub fn json_blocks(&self, labeled: bool) -> &JsonBlocks {
        self.views.get(&self.key, &self.value, labeled)
    }
}

impl fmt::Debug for Attribute {
    /// The attribute without the blocks read from it, which say nothing new.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attribute")
            .field("key", &self.key)
            .field("value", &self.value)
            .field("span", &self.span)
            .finish()
    }
}

/// A block such as `task "web" { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The block type, such as `task`.
    pub kind: Ident,
    /// The labels between the type and the opening brace.
    pub labels: Vec<Label>,
    /// What is between the braces.
    pub body: Body,
    /// From the block type to the closing brace.
    pub span: Span,
}

impl Block {
    /// The label at `index`, as text.
    pub fn label(&self, index: usize) -> Option<&str> {
        self.labels.get(index).map(|label| label.value.as_str())
    }
}

/// A block label: a quoted string (escapes decoded) or a bare identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The label text.
    pub value: String,
    /// Whether it was written as a quoted string rather than an identifier.
    pub quoted: bool,
    /// Where it was written, including the quotes.
    pub span: Span,
}

/// An object or attribute key: an identifier or a quoted string (escapes
/// decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The key text.
    pub name: String,
    /// Whether it was written as a quoted string rather than an identifier.
    pub quoted: bool,
    /// Where it was written, including the quotes.
    pub span: Span,
}

/// A value on the right of `=`, or inside a list or an object.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A quoted string with escapes decoded; `${...}` and `%{...}` sequences
    /// are kept as written for later interpolation.
    String { value: String, span: Span },
    /// A heredoc with its text decoded (indentation stripped for `<<-`).
    Heredoc { value: String, span: Span },
    /// A number, kept as written.
    Number { value: Number, span: Span },
    /// `true` or `false`.
    Bool { value: bool, span: Span },
    /// `null`.
    Null { span: Span },
    /// A `[a, b]` list.
    List { items: Vec<Expr>, span: Span },
    /// A `{ k = v }` object, with its entries in source order.
    Object {
        entries: Vec<(Key, Expr)>,
        span: Span,
    },
    /// A quoted string with `${...}` sequences that need evaluating
    /// (a function call, `var.x` or `local.x`), before
    /// [`evaluate`](crate::evaluate) replaces it with its value.
    /// Strings whose sequences are all for the agent (`${NOMAD_TASK_DIR}`)
    /// stay [`Expr::String`].
    Template { parts: Vec<Part>, span: Span },
    /// A bare reference such as `var.vol_id`, `local.name` or `string`.
    Reference {
        root: Ident,
        steps: Vec<Step>,
        span: Span,
    },
    /// A function call such as `upper(var.name)`.
    Call {
        name: Ident,
        args: Vec<Expr>,
        span: Span,
    },
    /// `!x` or `-x`.
    Unary {
        op: UnaryOp,
        operand: Box<Expr>,
        span: Span,
    },
    /// `a + b`, `a == b`, `a && b`, ...
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
        span: Span,
    },
    /// `cond ? a : b`.
    Conditional {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
        span: Span,
    },
    /// `[for v in coll : value if cond]` or `{for k, v in coll : key =>
    /// value... if cond}`.
    For(Box<ForExpr>),
    /// Steps after a value that is not a reference: `split(",", s)[0]`,
    /// `(var.a)[*].b`, `[for ...][0]`.
    Traversal {
        source: Box<Expr>,
        steps: Vec<Step>,
        span: Span,
    },
}

/// A `for` expression: what it iterates over, the names it binds, and what
/// it makes of each element.
#[derive(Debug, Clone, PartialEq)]
pub struct ForExpr {
    /// The first name of `for k, v in`: the key or index. `None` when only
    /// one name is given.
    pub key_var: Option<Ident>,
    /// The name bound to each element.
    pub value_var: Ident,
    /// What is iterated over: a list, a set, a map or an object.
    pub collection: Expr,
    /// `key =>` of an object `for`; `None` for a list `for`.
    pub key: Option<Expr>,
    /// The element made for each iteration.
    pub value: Expr,
    /// Whether the value ends with `...`: the values of each key are
    /// grouped into a list rather than a duplicate key being an error.
    pub grouped: bool,
    /// The `if` filter.
    pub cond: Option<Expr>,
    /// From the opening bracket or brace to the closing one.
    pub span: Span,
}

/// A unary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    Not,
    Negate,
}

/// A binary operator, by HCL's precedence: `||`, then `&&`, then
/// equality, then comparison, then `+ -`, then `* / %`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Or,
    And,
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    Add,
    Subtract,
    Multiply,
    Divide,
    Modulo,
}

impl BinaryOp {
    /// How tightly it binds: higher first.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Equal | BinaryOp::NotEqual => 3,
            BinaryOp::Less | BinaryOp::LessEqual | BinaryOp::Greater | BinaryOp::GreaterEqual => 4,
            BinaryOp::Add | BinaryOp::Subtract => 5,
            BinaryOp::Multiply | BinaryOp::Divide | BinaryOp::Modulo => 6,
        }
    }

    /// As written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Or => "||",
            BinaryOp::And => "&&",
            BinaryOp::Equal => "==",
            BinaryOp::NotEqual => "!=",
            BinaryOp::Less => "<",
            BinaryOp::LessEqual => "<=",
            BinaryOp::Greater => ">",
            BinaryOp::GreaterEqual => ">=",
            BinaryOp::Add => "+",
            BinaryOp::Subtract => "-",
            BinaryOp::Multiply => "*",
            BinaryOp::Divide => "/",
            BinaryOp::Modulo => "%",
        }
    }
}

/// A piece of a [`Expr::Template`].
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Text kept as it is, including `${...}` sequences for the agent.
    Text(String),
    /// A `${...}` sequence to evaluate.
    Interpolation(Expr),
    /// `%{ if cond }then%{ else }otherwise%{ endif }`.
    If {
        cond: Expr,
        then: Vec<Part>,
        otherwise: Vec<Part>,
    },
    /// `%{ for value_var in collection }body%{ endfor }`, or with
    /// `key_var, value_var`.
    For {
        key_var: Option<Ident>,
        value_var: Ident,
        collection: Expr,
        body: Vec<Part>,
    },
}

impl Part {
    /// Calls `f` on each expression of the part and of the parts inside it,
    /// in source order.
    pub fn for_each_expr<'a>(&'a self, f: &mut dyn FnMut(&'a Expr)) {
        match self {
            Part::Text(_) => {}
            Part::Interpolation(expr) => f(expr),
            Part::If {
                cond,
                then,
                otherwise,
            } => {
                f(cond);
                then.iter()
                    .chain(otherwise)
                    .for_each(|part| part.for_each_expr(f));
            }
            Part::For {
                collection, body, ..
            } => {
                f(collection);
                body.iter().for_each(|part| part.for_each_expr(f));
            }
        }
    }
}

/// One step of a reference after its root: `.name`, `[index]`, or a
/// splat, `[*]` or `.*`, which applies the steps after it to each element
/// (all of them for `[*]`, the attribute steps that follow at once for
/// `.*`).
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Attr(Ident),
    Index(Expr),
    Splat { full: bool, pos: Pos },
}

impl Expr {
    /// The span of the value.
    pub fn span(&self) -> Span {
        match self {
            Expr::String { span, .. }
            | Expr::Heredoc { span, .. }
            | Expr::Number { span, .. }
            | Expr::Bool { span, .. }
            | Expr::Null { span }
            | Expr::List { span, .. }
            | Expr::Object { span, .. }
            | Expr::Template { span, .. }
            | Expr::Reference { span, .. }
            | Expr::Call { span, .. }
            | Expr::Unary { span, .. }
            | Expr::Binary { span, .. }
            | Expr::Conditional { span, .. }
            | Expr::Traversal { span, .. } => *span,
            Expr::For(for_expr) => for_expr.span,
        }
    }

    /// Where the value starts.
    pub fn pos(&self) -> Pos {
        self.span().start
    }

    /// The type of the value in words, for "expected X, found Y" messages:
    /// `string`, `number`, `bool`, `null`, `list` or `object`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Expr::String { .. } | Expr::Heredoc { .. } => "string",
            Expr::Number { .. } => "number",
            Expr::Bool { .. } => "bool",
            Expr::Null { .. } => "null",
            Expr::List { .. } => "list",
            Expr::Object { .. } => "object",
            Expr::Template { .. }
            | Expr::Reference { .. }
            | Expr::Call { .. }
            | Expr::Unary { .. }
            | Expr::Binary { .. }
            | Expr::Conditional { .. }
            | Expr::For(_)
            | Expr::Traversal { .. } => "expression",
        }
    }

    /// Calls `f` on each expression directly inside this one, in source
    /// order: for walks that look for names, as the locals' order does.
    pub fn for_each_child<'a>(&'a self, f: &mut dyn FnMut(&'a Expr)) {
        match self {
            Expr::List { items, .. } => items.iter().for_each(f),
            Expr::Object { entries, .. } => entries.iter().for_each(|(_, value)| f(value)),
            Expr::Template { parts, .. } => parts.iter().for_each(|part| part.for_each_expr(f)),
            Expr::Reference { steps, .. } => {
                for step in steps {
                    if let Step::Index(index) = step {
                        f(index);
                    }
                }
            }
            Expr::Traversal { source, steps, .. } => {
                f(source);
                for step in steps {
                    if let Step::Index(index) = step {
                        f(index);
                    }
                }
            }
            Expr::Call { args, .. } => args.iter().for_each(f),
            Expr::Unary { operand, .. } => f(operand),
            Expr::Binary { lhs, rhs, .. } => {
                f(lhs);
                f(rhs);
            }
            Expr::Conditional {
                cond,
                then,
                otherwise,
                ..
            } => {
                f(cond);
                f(then);
                f(otherwise);
            }
            Expr::For(for_expr) => {
                f(&for_expr.collection);
                if let Some(key) = &for_expr.key {
                    f(key);
                }
                f(&for_expr.value);
                if let Some(cond) = &for_expr.cond {
                    f(cond);
                }
            }
            Expr::String { .. }
            | Expr::Heredoc { .. }
            | Expr::Number { .. }
            | Expr::Bool { .. }
            | Expr::Null { .. } => {}
        }
    }

    /// The text of a quoted string or a heredoc.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Expr::String { value, .. } | Expr::Heredoc { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The number, if this is one.
    pub fn as_number(&self) -> Option<&Number> {
        match self {
            Expr::Number { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Expr::Bool { value, .. } => Some(*value),
            _ => None,
        }
    }

    /// The elements, if this is a list.
    pub fn as_list(&self) -> Option<&[Expr]> {
        match self {
            Expr::List { items, .. } => Some(items),
            _ => None,
        }
    }

    /// The entries, if this is an object.
    pub fn as_object(&self) -> Option<&[(Key, Expr)]> {
        match self {
            Expr::Object { entries, .. } => Some(entries),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Expr::Null { .. })
    }
}
