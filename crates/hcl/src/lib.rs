//! A parser for the subset of HCL, HashiCorp's configuration language, that
//! Nomad job files and the agent's own configuration are written in.
//!
//! The accepted subset is HCL's native syntax: blocks with zero or more
//! labels (quoted strings or bare identifiers), `key = value` attributes
//! one per line, quoted strings with escapes, heredocs (`<<EOF` and the
//! indentation-stripping `<<-EOF`), numbers, `true`, `false`, `null`,
//! lists, objects, references (`var.x`, `a.b[0]`) with splats (`a[*].b`,
//! `a.*.b`), function calls, operators and `? :`, `for` expressions
//! (`[for v in coll : value if cond]`, `{for k, v in coll : key =>
//! value...}`), and `#`, `//` and `/* */` comments. A `${...}` sequence
//! that calls a function or names `var.*`, `local.*` or a name a `for`
//! around it binds makes its string a template, which [`evaluate`]
//! (`eval.rs`, with the functions of `functions/`) replaces by its value
//! before decoding; other sequences such as `${NOMAD_TASK_DIR}` are kept in
//! strings as written, for the agent to interpolate later, and so is an
//! operation or a `for` on such a name. `%{ if }` and `%{ for }` directives
//! and the strip markers `~` are read as HCL's template grammar defines them
//! (`parser/template.rs`); a directive on a name known only when a task
//! starts is kept as written. `$${` and `%%{` decode to a literal `${` and
//! `%{` as in HCL.
//!
//! Two forms of HCL1, which Nomad still reads volume specs and parts of
//! job files with, are accepted because Nomad's own documentation and
//! inputs use them: quoted attribute names (`"topology.ebs.csi.aws.com/zone"
//! = "us-east-1b"` inside `segments { }`), which are the same attribute as
//! the identifier when they spell one, and commas between attributes, so
//! that a block fits on one line (`segments { rack = "R1", zone = "z" }`).
//!
//! HCL's JSON syntax, which Nomad reads files named `*.json` in, is parsed
//! by [`json::parse`] into the same tree: a JSON file is one object, each
//! property an attribute of its body, and a property is read as blocks when
//! the decoder asks for blocks of its name ([`Attribute::json_blocks`]: an
//! object is one block, a list of objects one block each, and labels are the
//! keys of an object around the bodies, as in `{"job": {"web": {...}}}`).
//! [`parse_file`] picks the syntax by the file's name, as Nomad does.
//!
//! The parsers are written by hand rather than taken from a crate for two
//! reasons: the agent adds no dependency for them, and every error points at
//! an exact `file:line:col` and says in words what was expected and what was
//! found. A single-pass lexer feeds a recursive-descent parser with one
//! token of lookahead, and the JSON parser reads its input in one pass too,
//! so parsing takes time linear in the input; nesting is limited to
//! [`MAX_NESTING`] levels in both, so no input can exhaust the stack.

mod ast;
mod error;
mod eval;
mod functions;
pub mod json;
mod lexer;
mod parser;
mod pos;
mod value;

#[cfg(test)]
mod tests;

pub use ast::{
    Attribute, BinaryOp, Block, Body, Expr, ForExpr, Ident, Item, JsonBlocks, Key, Label,
    Misshapen, Number, Part, Step, Syntax, UnaryOp,
};
pub use error::Error;
pub use eval::{eval, evaluate, evaluate_in_place, Scope};
pub use functions::{names as function_names, FileSource};
pub use parser::MAX_NESTING;
pub use pos::{Pos, Span};
pub use value::Value;

/// Parses `src`, the contents of the file named `file`, in HCL's native
/// syntax into its body. The file name is only used in error messages.
pub fn parse(src: &str, file: &str) -> Result<Body, Error> {
    parser::Parser::new(src, file)?.parse_file()
}

/// Parses `src`, the contents of the file named `file`, in the syntax its
/// name says ([`Syntax::of_file`]): HCL's JSON syntax for `*.json`, the
/// native syntax for any other name.
pub fn parse_file(src: &str, file: &str) -> Result<Body, Error> {
    match Syntax::of_file(file) {
        Syntax::Native => parse(src, file),
        Syntax::Json => json::parse(src, file),
    }
}
