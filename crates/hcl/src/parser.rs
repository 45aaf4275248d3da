//! The parser: recursive descent over the lexer's tokens, one token of
//! lookahead, no backtracking.
//!
//! Recursion only happens when a block, a list, an object or parentheses
//! open, an operator takes its operand (`parser/operators.rs`), a `for`
//! its parts (`parser/for_expr.rs`, two levels each) or a splat the steps
//! after it, and the nesting limit bounds it, so hostile input cannot
//! overflow the stack, in parsing or in evaluating.

use std::collections::HashMap;

use super::ast::{Attribute, Block, Body, Expr, Ident, Item, Key, Label, Part, Step, Syntax};
use super::error::Error;
use super::lexer::{Lexer, Token, TokenKind};
use super::pos::{Pos, Span};

mod for_expr;
mod operators;
mod template;

/// How deeply blocks, lists and objects may nest, all counted together.
pub const MAX_NESTING: usize = 64;

/// The parser state: the lexer, the current token and the nesting depth.
pub(crate) struct Parser<'a> {
    lexer: Lexer<'a>,
    file: &'a str,
    tok: Token,
    depth: usize,
    /// The names the `for` expressions around the current token bind:
    /// `${s}` in a string inside `[for s in ...]` is evaluated with it.
    bound: Vec<String>,
}

impl<'a> Parser<'a> {
    /// Starts a parser on `src`, reading its first token.
    pub(crate) fn new(src: &'a str, file: &'a str) -> Result<Parser<'a>, Error> {
        let mut lexer = Lexer::new(src, file);
        let tok = lexer.next_token()?;
        Ok(Parser {
            lexer,
            file,
            tok,
            depth: 0,
            bound: Vec::new(),
        })
    }

    /// Parses the whole input as a body.
    pub(crate) fn parse_file(mut self) -> Result<Body, Error> {
        self.parse_body(None)
    }

    /// Moves to the next token and returns the one that was current.
    fn advance(&mut self) -> Result<Token, Error> {
        let next = self.lexer.next_token()?;
        Ok(std::mem::replace(&mut self.tok, next))
    }

    fn span(&self) -> Span {
        Span::new(self.tok.start, self.tok.end)
    }

    fn error(&self, pos: Pos, message: impl Into<String>) -> Error {
        Error::new(self.file, pos, message)
    }

    /// An "expected X, found Y" error at the current token.
    fn unexpected(&self, expected: &str) -> Error {
        let found = self.tok.kind.describe();
        self.error(
            self.tok.start,
            format!("expected {expected}, found {found}"),
        )
    }

    fn skip_newlines(&mut self) -> Result<(), Error> {
        while self.tok.kind == TokenKind::Newline {
            self.advance()?;
        }
        Ok(())
    }

    /// Enters one more level of blocks, lists or objects, opened at `pos`.
    fn enter(&mut self, pos: Pos) -> Result<(), Error> {
        if self.depth >= MAX_NESTING {
            return Err(self.error(pos, format!("nesting deeper than {MAX_NESTING} levels")));
        }
        self.depth += 1;
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Parses items until the end of the file (for the top level) or until
    /// the `}` closing the block named in `enclosing`, which is left as the
    /// current token.
    fn parse_body(&mut self, enclosing: Option<(&str, Pos)>) -> Result<Body, Error> {
        let mut items = Vec::new();
        let mut attributes_seen: HashMap<String, Pos> = HashMap::new();
        loop {
            self.skip_newlines()?;
            match (&self.tok.kind, enclosing) {
                (TokenKind::Eof, None) | (TokenKind::RBrace, Some(_)) => {
                    return Ok(Body {
                        items,
                        syntax: Syntax::Native,
                    });
                }
                (TokenKind::Eof, Some((name, open))) => {
                    return Err(
                        self.unexpected(&format!("'}}' to close block '{name}' opened at {open}"))
                    );
                }
                (TokenKind::RBrace, None) => {
                    return Err(self.error(
                        self.tok.start,
                        "expected an attribute or block name, found '}' (there is no open block to close)",
                    ));
                }
                (TokenKind::Ident(_) | TokenKind::Str { .. }, _) => {}
                _ => return Err(self.unexpected("an attribute or block name")),
            }
            let item = self.parse_item()?;
            if let Item::Attribute(attr) = &item {
                let key = &attr.key;
                if let Some(first) = attributes_seen.get(&key.name) {
                    return Err(self.error(
                        key.span.start,
                        format!("attribute '{}' is already set at {first}", key.name),
                    ));
                }
                attributes_seen.insert(key.name.clone(), key.span.start);
                if let (Some(("dynamic", _)), "iterator", Expr::Reference { root, steps, .. }) =
                    (enclosing, key.name.as_str(), &attr.value)
                {
                    if steps.is_empty() {
                        self.bound.push(root.name.clone());
                    }
                }
            }
            // One item per line: a newline, the end of the file or the
            // enclosing block's closing brace must come next; after an
            // attribute, a comma may too (HCL1's `{ rack = "R1", zone = "z" }`,
            // which Nomad's documentation writes).
            let comma = matches!(item, Item::Attribute(_)) && self.tok.kind == TokenKind::Comma;
            if comma {
                self.advance()?;
            } else if !matches!(
                self.tok.kind,
                TokenKind::Newline | TokenKind::Eof | TokenKind::RBrace
            ) {
                let after = match &item {
                    Item::Attribute(attr) => {
                        format!("a newline or ',' after the value of '{}'", attr.key.name)
                    }
                    Item::Block(block) => {
                        format!(
                            "a newline after the closing '}}' of block '{}'",
                            block.kind.name
                        )
                    }
                };
                return Err(self.unexpected(&after));
            }
            items.push(item);
        }
    }

    /// Parses an attribute or a block; the current token is its name, an
    /// identifier, or for an attribute a quoted string (HCL1's
    /// `"topology.ebs.csi.aws.com/zone" = "us-east-1b"`).
    fn parse_item(&mut self) -> Result<Item, Error> {
        let tok = self.advance()?;
        let span = Span::new(tok.start, tok.end);
        let (name, quoted) = match tok.kind {
            TokenKind::Ident(name) => (name, false),
            TokenKind::Str { template: true, .. } => {
                return Err(self.error(
                    tok.start,
                    "attribute names cannot contain '${' or '%{' sequences",
                ));
            }
            TokenKind::Str { value, .. } => (value, true),
            _ => return Err(self.error(tok.start, "expected an attribute or block name")),
        };
        match self.tok.kind {
            TokenKind::Equals => {
                self.advance()?;
                let value = self.parse_value(&format!("for '{name}'"))?;
                let span = Span::new(span.start, value.span().end);
                Ok(Item::Attribute(Attribute::new(
                    Key { name, quoted, span },
                    value,
                    span,
                )))
            }
            _ if quoted => Err(self.unexpected(&format!(
                "'=' after the quoted attribute name \"{}\"",
                name.escape_debug()
            ))),
            TokenKind::Str { .. } | TokenKind::Ident(_) | TokenKind::LBrace => {
                self.parse_block(Ident { name, span }).map(Item::Block)
            }
            _ => Err(self.unexpected(&format!("'=' or '{{' after '{name}'"))),
        }
    }

    /// Parses the labels and body of a block whose type is `kind`.
    fn parse_block(&mut self, kind: Ident) -> Result<Block, Error> {
        let mut labels = Vec::new();
        loop {
            let span = self.span();
            match std::mem::replace(&mut self.tok.kind, TokenKind::Newline) {
                TokenKind::Str { template: true, .. } => {
                    return Err(self.error(
                        span.start,
                        "block labels cannot contain '${' or '%{' sequences",
                    ));
                }
                TokenKind::Str { value, .. } => labels.push(Label {
                    value,
                    quoted: true,
                    span,
                }),
                TokenKind::Ident(value) => labels.push(Label {
                    value,
                    quoted: false,
                    span,
                }),
                other => {
                    self.tok.kind = other;
                    break;
                }
            }
            self.advance()?;
        }
        let open = self.tok.start;
        if self.tok.kind != TokenKind::LBrace {
            let mut header = kind.name.clone();
            for label in &labels {
                header.push(' ');
                if label.quoted {
                    header.push_str(&format!("\"{}\"", label.value.escape_debug()));
                } else {
                    header.push_str(&label.value);
                }
            }
            return Err(self.unexpected(&format!("'{{' after '{header}'")));
        }
        self.enter(open)?;
        self.advance()?;
        // A `dynamic "env"` block binds `env` (or the name its `iterator`
        // gives) in its body: `${env.value}` there is HCL's, evaluated
        // for each element when the block is expanded (`eval/dynamic.rs`).
        let outer = self.bound.len();
        if let [label] = labels.as_slice() {
            if kind.name == "dynamic" {
                self.bound.push(label.value.clone());
            }
        }
        let body = self.parse_body(Some((&kind.name, open)));
        self.bound.truncate(outer);
        let body = body?;
        let close = self.advance()?;
        self.leave();
        let span = Span::new(kind.span.start, close.end);
        Ok(Block {
            kind,
            labels,
            body,
            span,
        })
    }

    /// Parses what follows a bare identifier, the current token: a call
    /// `name(args)` or a reference `name.attr[index]`.
    pub(super) fn parse_operation(&mut self, name: Ident, owner: &str) -> Result<Expr, Error> {
        self.advance()?;
        if name.name == "for" && matches!(self.tok.kind, TokenKind::Ident(_)) {
            return Err(self.error(
                name.span.start,
                format!("expected a value {owner}, found identifier 'for' (a for expression is written inside '[ ]' or '{{ }}')"),
            ));
        }
        if self.tok.kind == TokenKind::Other('(') {
            let open = self.tok.start;
            self.enter(open)?;
            self.advance()?;
            let mut args = Vec::new();
            loop {
                self.skip_newlines()?;
                if self.tok.kind == TokenKind::Other(')') {
                    break;
                }
                args.push(self.parse_value(&format!("in the call to '{}'", name.name))?);
                self.skip_newlines()?;
                match self.tok.kind {
                    TokenKind::Comma => {
                        self.advance()?;
                    }
                    TokenKind::Other(')') => break,
                    _ => {
                        return Err(self.unexpected(&format!(
                            "',' or ')' in the call to '{}' opened at {open}",
                            name.name
                        )))
                    }
                }
            }
            let close = self.advance()?;
            self.leave();
            let span = Span::new(name.span.start, close.end);
            let call = Expr::Call { name, args, span };
            return self.postfix(call);
        }
        let (steps, end) = self.parse_steps(&format!("in a reference to '{}'", name.name))?;
        let end = end.unwrap_or(name.span.end);
        let span = Span::new(name.span.start, end);
        Ok(Expr::Reference {
            root: name,
            steps,
            span,
        })
    }

    /// Reads the steps that follow a value, if any (`.name`, `[index]`,
    /// `[*]`, `.*`), and where the last ends; `context` completes "expected
    /// ..." in errors.
    ///
    /// Each splat nests the evaluation one level deeper, so each counts
    /// against the nesting limit until the steps end.
    fn parse_steps(&mut self, context: &str) -> Result<(Vec<Step>, Option<Pos>), Error> {
        let mut steps = Vec::new();
        let mut end = None;
        let mut splats = 0;
        let result = loop {
            match self.reference_step(context, &mut steps, &mut splats) {
                Ok(Some(step_end)) => end = Some(step_end),
                Ok(None) => break Ok(()),
                Err(err) => break Err(err),
            }
        };
        for _ in 0..splats {
            self.leave();
        }
        result.map(|()| (steps, end))
    }

    /// `source` with the steps after it, for a value that is not a
    /// reference: a call, parentheses, a list, a `for` (`split(",",
    /// var.s)[0]`, `values(var.m)[*].id`).
    pub(super) fn postfix(&mut self, source: Expr) -> Result<Expr, Error> {
        let (steps, end) = self.parse_steps("after the value")?;
        let Some(end) = end else {
            return Ok(source);
        };
        let span = Span::new(source.span().start, end);
        Ok(Expr::Traversal {
            source: Box::new(source),
            steps,
            span,
        })
    }

    /// Reads one step, if one comes next: `.name`, `[index]`, `[*]` or
    /// `.*`; returns where it ends. A splat enters one more level of
    /// nesting, counted in `splats`.
    fn reference_step(
        &mut self,
        context: &str,
        steps: &mut Vec<Step>,
        splats: &mut usize,
    ) -> Result<Option<Pos>, Error> {
        match self.tok.kind {
            TokenKind::Other('.') => {
                let dot = self.advance()?;
                if self.tok.kind == TokenKind::Other('*') {
                    self.enter(dot.start)?;
                    *splats += 1;
                    steps.push(Step::Splat {
                        full: false,
                        pos: dot.start,
                    });
                    return Ok(Some(self.advance()?.end));
                }
                let span = self.span();
                let TokenKind::Ident(attr) = &self.tok.kind else {
                    return Err(
                        self.unexpected(&format!("an attribute name or '*' after '.' {context}"))
                    );
                };
                steps.push(Step::Attr(Ident {
                    name: attr.clone(),
                    span,
                }));
                self.advance()?;
                Ok(Some(span.end))
            }
            TokenKind::LBracket => {
                let open = self.tok.start;
                self.enter(open)?;
                self.advance()?;
                if self.tok.kind == TokenKind::Other('*') {
                    self.advance()?;
                    if self.tok.kind != TokenKind::RBracket {
                        return Err(self.unexpected(&format!("']' to close the '[*' at {open}")));
                    }
                    // The level entered stays entered for the splat.
                    *splats += 1;
                    steps.push(Step::Splat {
                        full: true,
                        pos: open,
                    });
                    return Ok(Some(self.advance()?.end));
                }
                let index = self.parse_value("as an index")?;
                if self.tok.kind != TokenKind::RBracket {
                    return Err(
                        self.unexpected(&format!("']' to close the index opened at {open}"))
                    );
                }
                let end = self.advance()?.end;
                self.leave();
                steps.push(Step::Index(index));
                Ok(Some(end))
            }
            _ => Ok(None),
        }
    }

    /// Parses `[a, b, c]`; newlines may appear between elements and a
    /// trailing comma is allowed.
    pub(super) fn parse_list(&mut self) -> Result<Expr, Error> {
        let open = self.tok.start;
        self.enter(open)?;
        self.advance()?;
        self.skip_newlines()?;
        if matches!(&self.tok.kind, TokenKind::Ident(word) if word == "for") {
            self.advance()?;
            let expr = self.parse_for(open, false)?;
            self.leave();
            return Ok(expr);
        }
        let mut items = Vec::new();
        loop {
            self.skip_newlines()?;
            match self.tok.kind {
                TokenKind::RBracket => break,
                TokenKind::Eof => {
                    return Err(self.unexpected(&format!("']' to close the list opened at {open}")))
                }
                _ => {}
            }
            items.push(self.parse_value("in the list")?);
            self.skip_newlines()?;
            match self.tok.kind {
                TokenKind::Comma => {
                    self.advance()?;
                }
                TokenKind::RBracket => break,
                _ => {
                    return Err(self.unexpected(&format!("',' or ']' in the list opened at {open}")))
                }
            }
        }
        let close = self.advance()?;
        self.leave();
        Ok(Expr::List {
            items,
            span: Span::new(open, close.end),
        })
    }

    /// Parses `{ k = v, "k2": v2 }`; entries are separated by commas or
    /// newlines.
    pub(super) fn parse_object(&mut self) -> Result<Expr, Error> {
        let open = self.tok.start;
        self.enter(open)?;
        self.advance()?;
        let mut entries = Vec::new();
        loop {
            self.skip_newlines()?;
            match self.tok.kind {
                TokenKind::RBrace => break,
                TokenKind::Eof => {
                    return Err(
                        self.unexpected(&format!("'}}' to close the object opened at {open}"))
                    )
                }
                _ => {}
            }
            let key = self.parse_key()?;
            match self.tok.kind {
                TokenKind::Equals | TokenKind::Colon => {
                    self.advance()?;
                }
                TokenKind::Ident(_) if key.name == "for" && !key.quoted => {
                    if !entries.is_empty() {
                        return Err(self.error(
                            key.span.start,
                            "a for expression must be alone in its '{ }', not after other entries",
                        ));
                    }
                    let expr = self.parse_for(open, true)?;
                    self.leave();
                    return Ok(expr);
                }
                _ => {
                    return Err(self.unexpected(&format!("'=' or ':' after the key '{}'", key.name)))
                }
            }
            let value = self.parse_value(&format!("for '{}'", key.name))?;
            if !matches!(
                self.tok.kind,
                TokenKind::Comma | TokenKind::Newline | TokenKind::RBrace
            ) {
                return Err(self.unexpected(&format!(
                    "',', a newline or '}}' after the value of '{}'",
                    key.name
                )));
            }
            entries.push((key, value));
            match self.tok.kind {
                TokenKind::Comma => {
                    self.advance()?;
                }
                TokenKind::RBrace => break,
                _ => {}
            }
        }
        let close = self.advance()?;
        self.leave();
        Ok(Expr::Object {
            entries,
            span: Span::new(open, close.end),
        })
    }

    /// Parses an object key: an identifier or a quoted string.
    fn parse_key(&mut self) -> Result<Key, Error> {
        let span = self.span();
        let key = match std::mem::replace(&mut self.tok.kind, TokenKind::Newline) {
            TokenKind::Ident(name) => Key {
                name,
                quoted: false,
                span,
            },
            TokenKind::Str { value, .. } => Key {
                name: value,
                quoted: true,
                span,
            },
            other => {
                self.tok.kind = other;
                return Err(self.unexpected("an object key (an identifier or a string)"));
            }
        };
        self.advance()?;
        Ok(key)
    }
}

/// Whether `expr` calls a function or names a variable, a local or a name
/// a `for` around it binds (`bound`), so that it is evaluated with the
/// file; references to anything else (`${NOMAD_TASK_DIR}`,
/// `${attr.unique.hostname}`) are for the agent to interpolate when a task
/// starts.
pub(crate) fn needs_evaluation(expr: &Expr, bound: &[String]) -> bool {
    match expr {
        Expr::Call { .. } | Expr::Template { .. } => true,
        Expr::Reference { root, steps, .. } => {
            matches!(root.name.as_str(), "var" | "local")
                || bound.contains(&root.name)
                || steps.iter().any(
                    |step| matches!(step, Step::Index(index) if needs_evaluation(index, bound)),
                )
        }
        Expr::Traversal { source, steps, .. } => {
            needs_evaluation(source, bound)
                || steps.iter().any(
                    |step| matches!(step, Step::Index(index) if needs_evaluation(index, bound)),
                )
        }
        Expr::List { items, .. } => items.iter().any(|item| needs_evaluation(item, bound)),
        Expr::Object { entries, .. } => entries
            .iter()
            .any(|(_, value)| needs_evaluation(value, bound)),
        // An operation is evaluated when the file says all it needs: one
        // on a name known only when a task starts stays for the agent.
        Expr::Unary { .. } | Expr::Binary { .. } | Expr::Conditional { .. } | Expr::For(_) => {
            !names_runtime(expr, &mut bound.iter().map(String::as_str).collect())
        }
        _ => false,
    }
}

/// Whether `expr` refers to a name that is neither a variable, a local
/// nor one a `for` around it binds (`bound`): `NOMAD_ALLOC_INDEX`,
/// `attr.unique.hostname`, known only when a task starts.
fn names_runtime<'a>(expr: &'a Expr, bound: &mut Vec<&'a str>) -> bool {
    match expr {
        Expr::Reference { root, .. }
            if !matches!(root.name.as_str(), "var" | "local")
                && !bound.contains(&root.name.as_str()) =>
        {
            true
        }
        Expr::For(for_expr) => {
            if names_runtime(&for_expr.collection, bound) {
                return true;
            }
            let before = bound.len();
            bound.extend(for_expr.key_var.iter().map(|k| k.name.as_str()));
            bound.push(&for_expr.value_var.name);
            let found = for_expr.key.iter().any(|key| names_runtime(key, bound))
                || names_runtime(&for_expr.value, bound)
                || for_expr.cond.iter().any(|cond| names_runtime(cond, bound));
            bound.truncate(before);
            found
        }
        Expr::Template { parts, .. } => parts.iter().any(|part| part_names_runtime(part, bound)),
        _ => {
            let mut found = false;
            expr.for_each_child(&mut |child| found = found || names_runtime(child, bound));
            found
        }
    }
}

/// [`names_runtime`] for a part of a template, whose `%{ for }` binds its
/// names for its body.
fn part_names_runtime<'a>(part: &'a Part, bound: &mut Vec<&'a str>) -> bool {
    match part {
        Part::Text(_) => false,
        Part::Interpolation(expr) => names_runtime(expr, bound),
        Part::If {
            cond,
            then,
            otherwise,
        } => {
            names_runtime(cond, bound)
                || then
                    .iter()
                    .chain(otherwise)
                    .any(|part| part_names_runtime(part, bound))
        }
        Part::For {
            key_var,
            value_var,
            collection,
            body,
        } => {
            if names_runtime(collection, bound) {
                return true;
            }
            let before = bound.len();
            bound.extend(key_var.iter().map(|k| k.name.as_str()));
            bound.push(&value_var.name);
            let found = body.iter().any(|part| part_names_runtime(part, bound));
            bound.truncate(before);
            found
        }
    }
}
