//! A parser for the subset of HCL, HashiCorp's configuration language, that
//! Nomad job files and the agent's own configuration are written in.
//!
//! The accepted subset is HCL's native syntax without expressions: blocks
//! with zero or more labels (quoted strings or bare identifiers), `key =
//! value` attributes one per line, quoted strings with escapes, heredocs
//! (`<<EOF` and the indentation-stripping `<<-EOF`), numbers, `true`,
//! `false`, `null`, lists, objects, and `#`, `//` and `/* */` comments.
//! Template sequences such as `${NOMAD_TASK_DIR}` are kept in strings as
//! written, for the agent to interpolate later; `$${` and `%%{` decode to a
//! literal `${` and `%{` as in HCL. Operators, function calls, references
//! and `for` expressions are rejected with an error that says so.
//!
//! Two forms of HCL1, which Nomad still reads volume specs and parts of
//! job files with, are accepted because Nomad's own documentation and
//! inputs use them: quoted attribute names (`"topology.ebs.csi.aws.com/zone"
//! = "us-east-1b"` inside `segments { }`), which are the same attribute as
//! the identifier when they spell one, and commas between attributes, so
//! that a block fits on one line (`segments { rack = "R1", zone = "z" }`).
//!
//! The parser is written by hand rather than taken from a crate for two
//! reasons: the agent adds no dependency for it, and every error points at
//! an exact `file:line:col` and says in words what was expected and what was
//! found. A single-pass lexer feeds a recursive-descent parser with one
//! token of lookahead, so parsing takes time linear in the input; nesting is
//! limited to [`MAX_NESTING`] levels, so no input can exhaust the stack.

mod ast;
mod lexer;
mod parser;

#[cfg(test)]
mod tests;

pub use ast::{Attribute, Block, Body, Error, Expr, Ident, Item, Key, Label, Number, Pos, Span};
pub use parser::MAX_NESTING;

/// Parses `src`, the contents of the file named `file`, into its body. The
/// file name is only used in error messages.
pub fn parse(src: &str, file: &str) -> Result<Body, Error> {
    parser::Parser::new(src, file)?.parse_file()
}
