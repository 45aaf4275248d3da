//! Go's `text/template`, with consul-template's functions that read
//! nothing but their arguments, and the functions a caller registers: the
//! engine of Nomad's `template` blocks, which knows nothing of Nomad.
//!
//! The language is Go's core: text and `{{ }}` actions (the delimiters
//! may be others), trim markers `{{- ` and ` -}}`, comments `{{/* */}}`,
//! pipelines with `|` (the piped value is the last argument), variables
//! (`$x := ...`, `$x = ...`, `$` the top-level dot), the dot and its
//! fields (`.Field` of a map), `if`/`else if`/`else`, `range` (over lists,
//! maps in key order and integers, with `$i, $v :=`, `break` and
//! `continue`), `with`/`else with`, `define`/`template`/`block`, and the
//! literals: quoted and raw strings, characters, integers, floats, bools
//! and `nil`. Values are [`Value`]s: what consul-template's functions
//! hand around as Go's `interface{}`.
//!
//! A template calls the functions of the [`Functions`] it is parsed with:
//! Go's built-ins ([`Functions::go`]), consul-template's functions on
//! strings, numbers, JSON, base64, regular expressions and time
//! ([`Functions::consul_template`]), and those the caller registers
//! ([`Functions::register`]), which read the caller's context `C` given
//! when the template renders. A name the set does not hold is refused
//! when the template is parsed, with the function's name and its line
//! (and why, if the caller explains it: [`Functions::explain_unknown`]).
//!
//! ```
//! # extern crate csi_agent_template as template;
//! use std::sync::Arc;
//! use std::time::SystemTime;
//! use template::{Functions, Options, Template, Value};
//!
//! struct Host {
//!     name: String,
//! }
//!
//! let mut functions = Functions::<Host>::consul_template();
//! functions.register("hostname", 0, |_, host: &Host| Ok(Value::Str(host.name.clone())));
//! let functions = Arc::new(functions);
//!
//! let t = Template::parse("{{ hostname | toUpper }}", "", "", &functions).unwrap();
//! let options = Options { error_on_missing_key: false, now: SystemTime::now() };
//! let host = Host { name: "web-1".into() };
//! assert_eq!(t.render(&host, &options).unwrap(), "WEB-1");
//! ```
//!
//! Templates are input someone else wrote, so every walk over one is
//! bounded, each by a named limit that its error names: the parser's
//! nesting ([`MAX_NESTING`]: blocks, `else if`s and parentheses, each a
//! level of its recursion), the renderer's depth ([`MAX_RENDER_DEPTH`]:
//! bodies, `{{template}}` calls and parentheses as they run) and steps
//! ([`MAX_STEPS`]: a `range` over a large number ends, it does not spin),
//! the output ([`MAX_OUTPUT`]) and every value a function returns, the
//! caller's too (a string of at most [`MAX_OUTPUT`] bytes, a list or map
//! of at most [`MAX_ITEMS`] entries; the crate's functions that would
//! build more refuse before they allocate it). Both depths are small
//! enough for a 2 MiB thread stack, which the tests check on a thread of
//! that size. Every error carries the `line:col` of the template's text.
//!
//! The files: `lex.rs` (text, actions, tokens), `parse.rs` (the tree),
//! `exec.rs` (the executor), `value.rs` (values), `funcs/` (the function
//! table and its families), `fmt.rs` (`printf` and time layouts),
//! `convert.rs` (JSON and escapes), `scope.rs` (variables in scope).

mod convert;
mod exec;
mod fmt;
mod funcs;
mod lex;
mod parse;
mod scope;
mod value;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

pub use funcs::{Args, Arity, Function, Functions};
pub use lex::Pos;
pub use value::Value;

/// How deeply blocks (`if`, `range`, `with`, `define`, `block`, and each
/// `else if`) and parenthesised pipelines may nest in a template's text.
/// Real templates nest a handful of levels; Go grows its stack instead.
pub const MAX_NESTING: usize = 100;

/// How deeply rendering may go: bodies, `{{template}}` calls (a template
/// that calls itself ends here) and parenthesised pipelines as they run.
pub const MAX_RENDER_DEPTH: usize = 200;

/// The most nodes, commands and `range` iterations one rendering may
/// evaluate: about a second's work, far past any real template.
pub const MAX_STEPS: u64 = 10_000_000;

/// The most output one rendering may produce, and the longest string a
/// function may return.
pub const MAX_OUTPUT: usize = 16 << 20;

/// The most items a list (or entries a map) a function returns may hold,
/// as many as `loop` may count.
pub const MAX_ITEMS: usize = 1_000_000;

/// A template error at a line and column of the template's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub pos: Pos,
    pub message: String,
}

impl Error {
    pub(crate) fn new(pos: Pos, message: impl Into<String>) -> Error {
        Error {
            pos,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}:{}: {}",
            self.pos.line, self.pos.col, self.message
        )
    }
}

impl std::error::Error for Error {}

/// How one rendering goes, besides the caller's context: what the
/// template's text cannot say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// A missing map key is an error rather than `<no value>`.
    pub error_on_missing_key: bool,
    /// What `timestamp` prints: the render's clock, given rather than read
    /// so that a test can fix it.
    pub now: SystemTime,
}

/// A parsed template, ready to render any number of times with a context
/// `C` for the functions registered into its [`Functions`].
pub struct Template<C: ?Sized> {
    nodes: Vec<parse::Node>,
    defines: BTreeMap<String, Vec<parse::Node>>,
    functions: Arc<Functions<C>>,
}

impl<C: ?Sized> Template<C> {
    /// Parses `text` with the action delimiters `left` and `right`
    /// (Go's `{{` and `}}` when empty); the template may call the
    /// functions of `functions`, and no others.
    pub fn parse(
        text: &str,
        left: &str,
        right: &str,
        functions: &Arc<Functions<C>>,
    ) -> Result<Template<C>, Error> {
        let left = if left.is_empty() { "{{" } else { left };
        let right = if right.is_empty() { "}}" } else { right };
        let items = lex::lex(text, left, right)?;
        let (nodes, defines) = parse::Parser::parse(items, functions.as_ref())?;
        Ok(Template {
            nodes,
            defines,
            functions: Arc::clone(functions),
        })
    }

    /// Renders the template with `ctx` for the registered functions; the
    /// dot starts as `nil`, as in consul-template.
    pub fn render(&self, ctx: &C, options: &Options) -> Result<String, Error> {
        self.render_with_dot(ctx, options, &Value::Nil)
    }

    /// Renders the template with `dot` as the dot.
    pub fn render_with_dot(
        &self,
        ctx: &C,
        options: &Options,
        dot: &Value,
    ) -> Result<String, Error> {
        let bound = funcs::Bound {
            functions: &self.functions,
            ctx,
        };
        let mut state = exec::State::new(&self.defines, &bound, options);
        state.run(&self.nodes, dot)?;
        Ok(state.out)
    }
}

impl<C: ?Sized> Clone for Template<C> {
    fn clone(&self) -> Self {
        Template {
            nodes: self.nodes.clone(),
            defines: self.defines.clone(),
            functions: Arc::clone(&self.functions),
        }
    }
}

impl<C: ?Sized> std::fmt::Debug for Template<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Template")
            .field("nodes", &self.nodes)
            .field("defines", &self.defines)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod registration_tests;
#[cfg(test)]
mod tests;
