//! Go's `text/template` with consul-template's functions, for Nomad's
//! `template` blocks: no templating crate, no Consul, no Vault.
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
//! The functions are `funcs.rs`'s table: Go's built-ins, the
//! consul-template functions that need neither Consul, Vault nor Nomad's
//! variables, `nomadService`/`nomadServices`, which read the snapshot
//! of csi-agent's service registry given in the [`Context`], and
//! `sockaddr`, whose text is a template of its own over go-sockaddr's
//! functions (`funcs/sockaddr/`: the host's interface addresses, read
//! when it renders), parsed and rendered with the same bounds, its text
//! at most [`MAX_SOCKADDR_TEXT`] bytes. A template that calls `key`,
//! `service`, `secret`, `nomadVar` or the like is refused when it is
//! parsed, naming the function, its line and what it needs; so is any
//! unknown name. Every
//! error carries the `line:col` of the template's text.
//!
//! Templates are input someone else wrote, so every walk over one is
//! bounded, each by a named limit that its error names: the parser's
//! nesting ([`MAX_NESTING`]: blocks, `else if`s and parentheses, each a
//! level of its recursion), the renderer's depth ([`MAX_RENDER_DEPTH`]:
//! bodies, `{{template}}` calls and parentheses as they run) and steps
//! ([`MAX_STEPS`]: a `range` over a large number ends, it does not spin),
//! the output ([`MAX_OUTPUT`]) and every value a function returns (a
//! string of at most [`MAX_OUTPUT`] bytes, a list or map of at most
//! [`MAX_ITEMS`] entries; functions that would build more refuse before
//! they allocate it). Both depths are small enough for a 2 MiB thread
//! stack, which the tests check on a thread of that size.
//!
//! The files: `lex.rs` (text, actions, tokens), `parse.rs` (the tree),
//! `exec.rs` (values and the executor), `funcs.rs` (the function table),
//! `fmt.rs` (`printf` and time layouts), `convert.rs` (JSON and escapes).

mod convert;
mod exec;
mod fmt;
mod funcs;
mod lex;
mod parse;
mod scope;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

pub use exec::Value;
pub use funcs::MAX_SOCKADDR_TEXT;
pub use lex::Pos;

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
    fn new(pos: Pos, message: impl Into<String>) -> Error {
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

/// A parsed template, ready to render any number of times.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    nodes: Vec<parse::Node>,
    defines: BTreeMap<String, Vec<parse::Node>>,
    functions: funcs::FunctionSet,
}

/// What a template renders with.
pub struct Context<'a> {
    /// What `env` reads: the task's environment.
    pub env: &'a BTreeMap<String, String>,
    /// Where `file` reads, relative to which, and nowhere outside it;
    /// `None` refuses `file`.
    pub task_dir: Option<&'a Path>,
    /// A missing map key is an error rather than `<no value>`.
    pub error_on_missing_key: bool,
    /// What `timestamp` prints.
    pub now: SystemTime,
    /// What `nomadService` and `nomadServices` read: the registered
    /// services, in any order.
    pub services: &'a [NomadService],
}

/// A registered service instance as consul-template's `NomadService`
/// shows it to a template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NomadService {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub node_id: String,
    pub datacenter: String,
    pub address: String,
    pub port: u16,
    pub tags: Vec<String>,
    pub job_id: String,
    pub alloc_id: String,
}

impl Template {
    /// Parses `text` with the action delimiters `left` and `right`
    /// (Go's `{{` and `}}` when empty).
    pub fn parse(text: &str, left: &str, right: &str) -> Result<Template, Error> {
        let left = if left.is_empty() { "{{" } else { left };
        let right = if right.is_empty() { "}}" } else { right };
        Template::parse_with(text, left, right, funcs::FunctionSet::ConsulTemplate)
    }

    /// Parses `text` with the functions of `functions`.
    fn parse_with(
        text: &str,
        left: &str,
        right: &str,
        functions: funcs::FunctionSet,
    ) -> Result<Template, Error> {
        let items = lex::lex(text, left, right)?;
        let (nodes, defines) = parse::Parser::parse(items, functions)?;
        Ok(Template {
            nodes,
            defines,
            functions,
        })
    }

    /// Renders the template; the dot starts as `nil`, as in
    /// consul-template.
    pub fn render(&self, ctx: &Context<'_>) -> Result<String, Error> {
        self.render_from(ctx, &Value::Nil)
    }

    /// Renders the template with `dot` as the dot.
    fn render_from(&self, ctx: &Context<'_>, dot: &Value) -> Result<String, Error> {
        let mut state = exec::State::new(self, ctx);
        state.run(&self.nodes, dot)?;
        Ok(state.out)
    }
}

impl Context<'_> {
    fn read_file(&self, path: &str) -> Result<String, String> {
        let dir = self
            .task_dir
            .ok_or_else(|| format!("file {path:?}: no task dir to read from"))?;
        read_in_dir(dir, path)
    }
}

/// The text of `path` in `dir`, for `file` and a template's `source`:
/// relative to `dir` (an absolute path is read as the task sees it,
/// inside `dir`, unless it already names a path in `dir`), and refused if
/// it leads outside, through `..` or a symlink, or if it is longer than
/// [`MAX_OUTPUT`].
pub fn read_in_dir(dir: &Path, path: &str) -> Result<String, String> {
    let full = if Path::new(path).starts_with(dir) {
        Path::new(path).to_path_buf()
    } else {
        dir.join(path.trim_start_matches('/'))
    };
    let root = dir
        .canonicalize()
        .map_err(|e| format!("file {path:?}: {}: {e}", dir.display()))?;
    let real = full
        .canonicalize()
        .map_err(|e| format!("file {path:?}: {e}"))?;
    if !real.starts_with(&root) {
        return Err(format!("file {path:?} is outside the task dir"));
    }
    // Read to one byte past the bound, so a longer file is refused rather
    // than read whole.
    let mut text = String::new();
    std::fs::File::open(&real)
        .and_then(|file| {
            std::io::Read::read_to_string(
                &mut std::io::Read::take(file, MAX_OUTPUT as u64 + 1),
                &mut text,
            )
        })
        .map_err(|e| format!("file {path:?}: {e}"))?;
    if text.len() > MAX_OUTPUT {
        return Err(format!(
            "file {path:?} is larger than the template value limit of {} MiB",
            MAX_OUTPUT >> 20
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod service_tests;
#[cfg(test)]
mod tests;
