//! The executor: walks the parsed nodes with a dot and variables, calls
//! functions, and writes the output, as Go's `text/template` executes.

use std::fmt::Write as _;

use crate::funcs::Calls;
use crate::lex::Pos;
use crate::parse::{Arg, Branch, Cmd, Defines, Node, Operand, Pipe};
use crate::scope::Scope;
use crate::{Error, Options, Value, MAX_ITEMS, MAX_OUTPUT, MAX_RENDER_DEPTH, MAX_STEPS};

/// What breaks a list of nodes off.
enum Flow {
    Normal,
    Break,
    Continue,
}

pub(crate) struct State<'t> {
    /// The template's `define`d templates.
    defines: &'t Defines,
    /// Its functions, bound to the render's context.
    calls: &'t dyn Calls,
    options: &'t Options,
    vars: Scope<Value>,
    pub(crate) out: String,
    /// How deep the walk is in bodies, `{{template}}` calls and
    /// parenthesised pipelines, against [`MAX_RENDER_DEPTH`].
    depth: usize,
    /// Nodes and commands evaluated so far, against [`MAX_STEPS`].
    steps: u64,
}

impl<'t> State<'t> {
    pub(crate) fn new(
        defines: &'t Defines,
        calls: &'t dyn Calls,
        options: &'t Options,
    ) -> State<'t> {
        State {
            defines,
            calls,
            options,
            vars: Scope::new(Value::Nil),
            out: String::new(),
            depth: 0,
            steps: 0,
        }
    }

    pub(crate) fn run(&mut self, nodes: &[Node], dot: &Value) -> Result<(), Error> {
        self.list(nodes, dot).map(|_| ())
    }

    /// Counts one step of the walk, or fails past [`MAX_STEPS`].
    fn step(&mut self, pos: Pos) -> Result<(), Error> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(Error::new(
                pos,
                format!("rendering took more than {MAX_STEPS} steps (the template step limit)"),
            ));
        }
        Ok(())
    }

    /// Runs `f` one level deeper, or fails at [`MAX_RENDER_DEPTH`].
    fn deeper<T>(
        &mut self,
        pos: Pos,
        f: impl FnOnce(&mut Self) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.depth >= MAX_RENDER_DEPTH {
            return Err(Error::new(
                pos,
                format!(
                    "templates nest too deeply: more than {MAX_RENDER_DEPTH} levels while rendering (the template render depth limit)"
                ),
            ));
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    /// A body's nodes, one level deeper.
    fn body(&mut self, nodes: &[Node], dot: &Value, pos: Pos) -> Result<Flow, Error> {
        self.deeper(pos, |s| s.list(nodes, dot))
    }

    fn list(&mut self, nodes: &[Node], dot: &Value) -> Result<Flow, Error> {
        for node in nodes {
            self.step(node_pos(node))?;
            match node {
                Node::Text(text) => self.write(text, Pos::default())?,
                Node::Action(pipe) => {
                    let value = self.pipe(pipe, dot)?;
                    if pipe.decl.is_empty() {
                        let text = printable(&value);
                        self.write(&text, pipe.pos)?;
                    }
                }
                Node::If(b) => {
                    let flow = self.scoped(|s| {
                        let value = s.pipe(&b.pipe, dot)?;
                        let nodes = if value.truthy() { &b.body } else { &b.els };
                        s.body(nodes, dot, b.pipe.pos)
                    })?;
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::With(b) => {
                    let flow = self.scoped(|s| {
                        let value = s.pipe(&b.pipe, dot)?;
                        if value.truthy() {
                            s.body(&b.body, &value, b.pipe.pos)
                        } else {
                            s.body(&b.els, dot, b.pipe.pos)
                        }
                    })?;
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::Range(b) => self.scoped(|s| s.range(b, dot))?,
                Node::Template(name, pipe, pos) => {
                    let body = self
                        .defines
                        .get(name)
                        .ok_or_else(|| Error::new(*pos, format!("no such template {name:?}")))?;
                    let arg = match pipe {
                        Some(pipe) => self.pipe(pipe, dot)?,
                        None => Value::Nil,
                    };
                    let saved = std::mem::replace(&mut self.vars, Scope::new(arg.clone()));
                    let result = self.body(body, &arg, *pos);
                    self.vars = saved;
                    result?;
                }
                Node::Break(_) => return Ok(Flow::Break),
                Node::Continue(_) => return Ok(Flow::Continue),
            }
        }
        Ok(Flow::Normal)
    }

    fn scoped<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, Error>) -> Result<T, Error> {
        let mark = self.vars.len();
        let result = f(self);
        self.vars.truncate(mark);
        result
    }

    fn write(&mut self, text: &str, pos: Pos) -> Result<(), Error> {
        if self.out.len() + text.len() > MAX_OUTPUT {
            return Err(Error::new(
                pos,
                format!(
                    "output exceeds {} MiB (the template output limit)",
                    MAX_OUTPUT >> 20
                ),
            ));
        }
        self.out.push_str(text);
        Ok(())
    }

    fn range(&mut self, b: &Branch, dot: &Value) -> Result<(), Error> {
        let value = self.pipe_value(&b.pipe, dot)?;
        let pos = b.pipe.pos;
        // An integer is ranged over without making its list: `range N`
        // costs steps, never memory.
        let items: Box<dyn Iterator<Item = (Value, Value)>> = match value {
            Value::List(items) => Box::new(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| (Value::Int(i as i64), v)),
            ),
            Value::Map(map) => Box::new(map.into_iter().map(|(k, v)| (Value::Str(k), v))),
            Value::Int(n) => Box::new((0..n.max(0)).map(|i| (Value::Int(i), Value::Int(i)))),
            Value::Nil => Box::new(std::iter::empty()),
            other => {
                return Err(Error::new(
                    pos,
                    format!("range can't iterate over {}", other),
                ))
            }
        };
        let mark = self.vars.len();
        let mut empty = true;
        for (key, item) in items {
            empty = false;
            self.step(pos)?;
            self.vars.truncate(mark);
            match b.pipe.decl.as_slice() {
                [v] => self.vars.push(v.clone(), item.clone()),
                [k, v] => {
                    self.vars.push(k.clone(), key);
                    self.vars.push(v.clone(), item.clone());
                }
                _ => {}
            }
            if let Flow::Break = self.body(&b.body, &item, pos)? {
                break;
            }
        }
        if empty {
            self.body(&b.els, dot, pos)?;
        }
        Ok(())
    }

    /// A pipeline's value and its declarations.
    fn pipe(&mut self, pipe: &Pipe, dot: &Value) -> Result<Value, Error> {
        let value = self.pipe_value(pipe, dot)?;
        if pipe.assign {
            let name = &pipe.decl[0];
            if let Some(slot) = self.vars.get_mut(name) {
                *slot = value.clone();
            }
        } else if let [name] = pipe.decl.as_slice() {
            self.vars.push(name.clone(), value.clone());
        }
        Ok(value)
    }

    fn pipe_value(&mut self, pipe: &Pipe, dot: &Value) -> Result<Value, Error> {
        let mut last = None;
        for cmd in &pipe.cmds {
            self.step(cmd.pos)?;
            last = Some(self.cmd(cmd, dot, last)?);
        }
        Ok(last.unwrap_or(Value::Nil))
    }

    fn cmd(&mut self, cmd: &Cmd, dot: &Value, piped: Option<Value>) -> Result<Value, Error> {
        let first = &cmd.args[0];
        if let Operand::Func(name) = &first.operand {
            if name == "and" || name == "or" {
                return self.and_or(name == "and", &cmd.args[1..], dot, piped, first.pos);
            }
            let mut args = Vec::with_capacity(cmd.args.len());
            for arg in &cmd.args[1..] {
                args.push(self.arg(arg, dot)?);
            }
            args.extend(piped);
            return self.call(name, args, first.pos);
        }
        if cmd.args.len() > 1 || piped.is_some() {
            return Err(Error::new(
                first.pos,
                "can't give argument to non-function".to_string(),
            ));
        }
        self.arg(first, dot)
    }

    fn call(&mut self, name: &str, args: Vec<Value>, pos: Pos) -> Result<Value, Error> {
        let value = self
            .calls
            .call(name, args, self.options)
            .map_err(|message| Error::new(pos, format!("error calling {name}: {message}")))?;
        check_size(&value)
            .map_err(|message| Error::new(pos, format!("error calling {name}: {message}")))?;
        Ok(value)
    }

    /// `and` and `or` evaluate their arguments only as far as they must.
    fn and_or(
        &mut self,
        and: bool,
        args: &[Arg],
        dot: &Value,
        piped: Option<Value>,
        pos: Pos,
    ) -> Result<Value, Error> {
        if args.is_empty() && piped.is_none() {
            return Err(Error::new(pos, "wrong number of args: want at least 1"));
        }
        let mut last = Value::Nil;
        for arg in args {
            last = self.arg(arg, dot)?;
            if last.truthy() != and {
                return Ok(last);
            }
        }
        Ok(piped.unwrap_or(last))
    }

    fn arg(&mut self, arg: &Arg, dot: &Value) -> Result<Value, Error> {
        let mut value =
            match &arg.operand {
                Operand::Dot => dot.clone(),
                Operand::Nil => Value::Nil,
                Operand::Bool(b) => Value::Bool(*b),
                Operand::Int(n) => Value::Int(*n),
                Operand::Float(f) => Value::Float(*f),
                Operand::Str(s) => Value::Str(s.clone()),
                Operand::Var(name) => self.vars.get(name).cloned().ok_or_else(|| {
                    Error::new(arg.pos, format!("undefined variable \"${name}\""))
                })?,
                Operand::Func(name) => self.call(name, Vec::new(), arg.pos)?,
                Operand::Sub(pipe) => self.deeper(arg.pos, |s| s.pipe_value(pipe, dot))?,
            };
        for field in &arg.fields {
            value = match value {
                Value::Map(mut map) => match map.remove(field) {
                    Some(v) => v,
                    None if self.options.error_on_missing_key => {
                        return Err(Error::new(
                            arg.pos,
                            format!("map has no entry for key {field:?}"),
                        ))
                    }
                    None => Value::Nil,
                },
                Value::Nil => {
                    return Err(Error::new(
                        arg.pos,
                        format!("nil data; no entry for key {field:?}"),
                    ))
                }
                other => {
                    return Err(Error::new(
                        arg.pos,
                        format!("can't evaluate field {field} in type {}", other.kind()),
                    ))
                }
            };
        }
        Ok(value)
    }
}

/// Where a node is, for the step limit's error.
fn node_pos(node: &Node) -> Pos {
    match node {
        Node::Text(_) => Pos::default(),
        Node::Action(pipe) => pipe.pos,
        Node::If(b) | Node::Range(b) | Node::With(b) => b.pipe.pos,
        Node::Template(_, _, pos) | Node::Break(pos) | Node::Continue(pos) => *pos,
    }
}

/// A function's value within the bounds every value keeps: a string of
/// at most [`MAX_OUTPUT`] bytes, a list or map of at most [`MAX_ITEMS`]
/// entries, so that a value doubled in a loop stops at the bound.
fn check_size(value: &Value) -> Result<(), String> {
    match value {
        Value::Str(s) if s.len() > MAX_OUTPUT => Err(format!(
            "a string of {} bytes exceeds the template value limit of {} MiB",
            s.len(),
            MAX_OUTPUT >> 20
        )),
        Value::List(items) if items.len() > MAX_ITEMS => Err(format!(
            "a list of {} items exceeds the template limit of {MAX_ITEMS}",
            items.len()
        )),
        Value::Map(map) if map.len() > MAX_ITEMS => Err(format!(
            "a map of {} entries exceeds the template limit of {MAX_ITEMS}",
            map.len()
        )),
        _ => Ok(()),
    }
}

/// What an action prints: a value's `%v`, and Go's `<no value>` for a
/// missing one.
fn printable(value: &Value) -> String {
    match value {
        Value::Nil => "<no value>".to_string(),
        other => {
            let mut out = String::new();
            let _ = write!(out, "{other}");
            out
        }
    }
}
