//! The parser: items and tokens into a tree of nodes, as Go's
//! `text/template/parse` builds it. Function names are checked here
//! against the function table, so that an unknown or refused function is
//! an error before anything renders.

use std::collections::BTreeMap;

use crate::funcs::Names;
use crate::lex::{Item, Pos, Tok, Token};
use crate::scope::Scope;
use crate::{Error, MAX_NESTING};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Text(String),
    /// `{{ pipeline }}`: prints its value unless it declares variables.
    Action(Pipe),
    If(Branch),
    Range(Branch),
    With(Branch),
    /// `{{ template "name" pipeline }}`.
    Template(String, Option<Pipe>, Pos),
    Break(Pos),
    Continue(Pos),
}

/// The pipeline of an `if`, `range` or `with`, its body and its `else`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Branch {
    pub pipe: Pipe,
    pub body: Vec<Node>,
    pub els: Vec<Node>,
}

/// `$a, $b := cmd | cmd`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Pipe {
    pub decl: Vec<String>,
    /// `=` rather than `:=`.
    pub assign: bool,
    pub cmds: Vec<Cmd>,
    pub pos: Pos,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Cmd {
    pub args: Vec<Arg>,
    pub pos: Pos,
}

/// An operand and the fields taken of it (`$x.a.b`, `(f).a`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Arg {
    pub operand: Operand,
    pub fields: Vec<String>,
    pub pos: Pos,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Operand {
    Dot,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Var(String),
    Func(String),
    Sub(Box<Pipe>),
}

/// How a list of nodes ended.
enum Stop {
    Eof,
    End(Pos),
    /// `{{ else }}`, or `{{ else if ... }}` with the tokens after `else`.
    Else(Vec<Token>, Pos),
}

/// The templates `define` and `block` name.
pub(super) type Defines = BTreeMap<String, Vec<Node>>;

pub(super) struct Parser<'f> {
    items: std::vec::IntoIter<Item>,
    pub defines: Defines,
    /// Variables in scope, for "undefined variable" errors.
    vars: Scope<()>,
    range_depth: usize,
    /// How deep the parse is in blocks, `else if`s and parentheses: the
    /// parser recurses at each, so [`MAX_NESTING`] bounds its stack.
    depth: usize,
    /// The functions a command may name.
    functions: &'f dyn Names,
}

impl<'f> Parser<'f> {
    pub(super) fn parse(
        items: Vec<Item>,
        functions: &'f dyn Names,
    ) -> Result<(Vec<Node>, Defines), Error> {
        let mut p = Parser {
            items: items.into_iter(),
            defines: BTreeMap::new(),
            vars: Scope::new(()),
            range_depth: 0,
            depth: 0,
            functions,
        };
        let (nodes, end) = p.list()?;
        match end {
            Stop::Eof => Ok((nodes, p.defines)),
            Stop::End(pos) => Err(Error::new(pos, "unexpected {{end}}")),
            Stop::Else(_, pos) => Err(Error::new(pos, "unexpected {{else}}")),
        }
    }

    fn list(&mut self) -> Result<(Vec<Node>, Stop), Error> {
        let mut nodes = Vec::new();
        while let Some(item) = self.items.next() {
            let (tokens, pos) = match item {
                Item::Text(text) => {
                    nodes.push(Node::Text(text));
                    continue;
                }
                Item::Action(tokens, pos) => (tokens, pos),
            };
            let keyword = match tokens.first() {
                Some(Token {
                    tok: Tok::Ident(word),
                    ..
                }) => word.as_str(),
                None => return Err(Error::new(pos, "missing value for command")),
                _ => "",
            };
            let rest = &tokens[1.min(tokens.len())..];
            match keyword {
                "end" => {
                    no_more(rest, "end")?;
                    return Ok((nodes, Stop::End(pos)));
                }
                "else" => return Ok((nodes, Stop::Else(rest.to_vec(), pos))),
                "if" => nodes.push(Node::If(self.branch(rest, pos, "if")?)),
                "with" => nodes.push(Node::With(self.branch(rest, pos, "with")?)),
                "range" => {
                    self.range_depth += 1;
                    let branch = self.branch(rest, pos, "range");
                    self.range_depth -= 1;
                    nodes.push(Node::Range(branch?));
                }
                "break" | "continue" => {
                    no_more(rest, keyword)?;
                    if self.range_depth == 0 {
                        return Err(Error::new(
                            pos,
                            format!("{{{{{keyword}}}}} outside {{{{range}}}}"),
                        ));
                    }
                    nodes.push(if keyword == "break" {
                        Node::Break(pos)
                    } else {
                        Node::Continue(pos)
                    });
                }
                "define" | "block" => {
                    let name = match rest.first() {
                        Some(Token {
                            tok: Tok::Str(name),
                            ..
                        }) => name.clone(),
                        _ => return Err(Error::new(pos, format!("{keyword} needs a quoted name"))),
                    };
                    let pipe = if keyword == "block" {
                        Some(self.pipeline(&rest[1..], pos, keyword)?)
                    } else {
                        no_more(&rest[1..], keyword)?;
                        None
                    };
                    let saved = std::mem::replace(&mut self.vars, Scope::new(()));
                    let body = self.body(pos, keyword);
                    self.vars = saved;
                    let (body, _) = body?;
                    if self.defines.insert(name.clone(), body).is_some() {
                        return Err(Error::new(
                            pos,
                            format!("template {name:?} is defined twice"),
                        ));
                    }
                    if keyword == "block" {
                        nodes.push(Node::Template(name, pipe, pos));
                    }
                }
                "template" => {
                    let name = match rest.first() {
                        Some(Token {
                            tok: Tok::Str(name),
                            ..
                        }) => name.clone(),
                        _ => return Err(Error::new(pos, "template needs a quoted name")),
                    };
                    let pipe = if rest.len() > 1 {
                        Some(self.pipeline(&rest[1..], pos, "template")?)
                    } else {
                        None
                    };
                    nodes.push(Node::Template(name, pipe, pos));
                }
                _ => nodes.push(Node::Action(self.pipeline(&tokens, pos, "command")?)),
            }
        }
        Ok((nodes, Stop::Eof))
    }

    /// Runs `f` one level deeper, or fails at [`MAX_NESTING`] levels.
    fn nested<T>(
        &mut self,
        pos: Pos,
        f: impl FnOnce(&mut Self) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.depth >= MAX_NESTING {
            return Err(Error::new(pos, nesting_error()));
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    /// A body up to its `end`: nodes, and the `else` nodes.
    fn body(&mut self, pos: Pos, what: &str) -> Result<(Vec<Node>, Vec<Node>), Error> {
        self.nested(pos, |p| p.body_nested(pos, what))
    }

    fn body_nested(&mut self, pos: Pos, what: &str) -> Result<(Vec<Node>, Vec<Node>), Error> {
        let (body, end) = self.list()?;
        match end {
            Stop::End(_) => Ok((body, Vec::new())),
            Stop::Eof => Err(Error::new(
                pos,
                format!("unexpected EOF: {{{{{what}}}}} has no {{{{end}}}}"),
            )),
            Stop::Else(_, at) if what == "define" || what == "block" => {
                Err(Error::new(at, format!("unexpected {{{{else}}}} in {what}")))
            }
            Stop::Else(tokens, at) if tokens.is_empty() => {
                // A range's `else` runs when it iterates not at all:
                // `break` and `continue` there belong to no loop of it.
                let (els, end) = self.outside_range(what, |p| p.list())?;
                match end {
                    Stop::End(_) => Ok((body, els)),
                    Stop::Eof => Err(Error::new(
                        pos,
                        format!("unexpected EOF: {{{{{what}}}}} has no {{{{end}}}}"),
                    )),
                    Stop::Else(_, at2) => Err(Error::new(
                        at2,
                        format!(
                            "expected {{{{end}}}} after {{{{else}}}} at line {}",
                            at.line
                        ),
                    )),
                }
            }
            Stop::Else(tokens, at) => {
                // `else if ...` / `else with ...`: a nested branch that
                // shares this one's `end`.
                let kind = match &tokens[0].tok {
                    Tok::Ident(k) if k == "if" || k == "with" => k.clone(),
                    _ => {
                        return Err(Error::new(
                            at,
                            "expected {{else}}, {{else if}} or {{else with}}",
                        ))
                    }
                };
                let inner = self.outside_range(what, |p| p.branch(&tokens[1..], at, &kind))?;
                let node = if kind == "if" {
                    Node::If(inner)
                } else {
                    Node::With(inner)
                };
                Ok((body, vec![node]))
            }
        }
    }

    /// Runs `f` with the range `what` (if it is one) not counted as a
    /// loop `break` and `continue` may leave.
    fn outside_range<T>(&mut self, what: &str, f: impl FnOnce(&mut Self) -> T) -> T {
        let range = what == "range";
        if range {
            self.range_depth -= 1;
        }
        let result = f(self);
        if range {
            self.range_depth += 1;
        }
        result
    }

    fn branch(&mut self, tokens: &[Token], pos: Pos, what: &str) -> Result<Branch, Error> {
        if tokens.is_empty() {
            return Err(Error::new(pos, format!("missing value for {what}")));
        }
        let scope = self.vars.len();
        let pipe = self.pipeline(tokens, pos, what);
        let result = pipe.and_then(|pipe| {
            if pipe.cmds.is_empty() {
                return Err(Error::new(pos, format!("missing value for {what}")));
            }
            if what == "range" && pipe.decl.len() > 2 || what != "range" && pipe.decl.len() > 1 {
                return Err(Error::new(pos, format!("too many declarations in {what}")));
            }
            let (body, els) = self.body(pos, what)?;
            Ok(Branch { pipe, body, els })
        });
        self.vars.truncate(scope);
        result
    }

    /// A pipeline, with its declaration if it has one.
    fn pipeline(&mut self, tokens: &[Token], pos: Pos, what: &str) -> Result<Pipe, Error> {
        let mut decl = Vec::new();
        let mut assign = false;
        let mut at = 0;
        // `$x :=`, `$x =`, `$i, $v :=`.
        let is_var = |i: usize| matches!(tokens.get(i).map(|t| &t.tok), Some(Tok::Var(_)));
        let tok = |i: usize| tokens.get(i).map(|t| &t.tok);
        if is_var(0) && matches!(tok(1), Some(Tok::Declare | Tok::Assign)) {
            decl.push(var_name(&tokens[0]));
            assign = tok(1) == Some(&Tok::Assign);
            at = 2;
        } else if is_var(0)
            && tok(1) == Some(&Tok::Comma)
            && is_var(2)
            && tok(3) == Some(&Tok::Declare)
        {
            decl.push(var_name(&tokens[0]));
            decl.push(var_name(&tokens[2]));
            at = 4;
        }
        let mut cmds = Vec::new();
        let mut rest = &tokens[at..];
        loop {
            let (cmd, used) = self.command(rest, pos)?;
            rest = &rest[used..];
            // As Go's `checkPipeline`: a value that is not a function, a
            // field or a variable cannot take the piped value.
            if !cmds.is_empty()
                && matches!(
                    cmd.args[0].operand,
                    Operand::Dot
                        | Operand::Nil
                        | Operand::Bool(_)
                        | Operand::Int(_)
                        | Operand::Float(_)
                        | Operand::Str(_)
                )
                && cmd.args[0].fields.is_empty()
            {
                return Err(Error::new(
                    cmd.pos,
                    format!(
                        "non executable command in pipeline stage {}",
                        cmds.len() + 1
                    ),
                ));
            }
            cmds.push(cmd);
            match rest.first() {
                None => break,
                Some(Token {
                    tok: Tok::Pipe,
                    pos: p,
                    ..
                }) => {
                    if rest.len() == 1 {
                        return Err(Error::new(*p, "missing command after |"));
                    }
                    rest = &rest[1..];
                }
                Some(t) => {
                    return Err(Error::new(
                        t.pos,
                        format!("unexpected {} in {what}", describe(&t.tok)),
                    ))
                }
            }
        }
        if assign {
            if !self.vars.contains(&decl[0]) {
                return Err(Error::new(
                    pos,
                    format!("undefined variable \"${}\"", decl[0]),
                ));
            }
        } else {
            for name in &decl {
                self.vars.push(name.clone(), ());
            }
        }
        Ok(Pipe {
            decl,
            assign,
            cmds,
            pos,
        })
    }

    /// One command: its arguments up to a `|`, `)` or the end.
    fn command(&mut self, tokens: &[Token], pos: Pos) -> Result<(Cmd, usize), Error> {
        let mut args = Vec::new();
        let mut i = 0;
        while let Some(t) = tokens.get(i) {
            if matches!(t.tok, Tok::Pipe | Tok::RParen) {
                break;
            }
            // Go's parser wants operands apart: `printf 3`x``, `$x+2`.
            if !args.is_empty() && !t.spaced {
                return Err(Error::new(
                    t.pos,
                    format!("missing space before {}", describe(&t.tok)),
                ));
            }
            let (arg, used) = self.operand(&tokens[i..])?;
            args.push(arg);
            i += used;
        }
        let Some(first) = args.first() else {
            let at = tokens.first().map_or(pos, |t| t.pos);
            return Err(Error::new(at, "missing value for command"));
        };
        if matches!(first.operand, Operand::Nil) && first.fields.is_empty() {
            return Err(Error::new(first.pos, "nil is not a command"));
        }
        let cmd_pos = first.pos;
        Ok((Cmd { args, pos: cmd_pos }, i))
    }

    fn operand(&mut self, tokens: &[Token]) -> Result<(Arg, usize), Error> {
        let t = &tokens[0];
        let mut used = 1;
        let operand = match &t.tok {
            Tok::Dot => Operand::Dot,
            Tok::Field(_) => {
                used = 0;
                Operand::Dot
            }
            Tok::Var(name) => {
                if !self.vars.contains(name) {
                    return Err(Error::new(t.pos, format!("undefined variable \"${name}\"")));
                }
                Operand::Var(name.clone())
            }
            Tok::Str(s) => Operand::Str(s.clone()),
            Tok::Int(n) => Operand::Int(*n),
            Tok::Float(f) => Operand::Float(*f),
            Tok::Ident(word) => match word.as_str() {
                "true" => Operand::Bool(true),
                "false" => Operand::Bool(false),
                "nil" => Operand::Nil,
                "if" | "else" | "end" | "range" | "with" | "define" | "template" | "block"
                | "break" | "continue" => {
                    return Err(Error::new(
                        t.pos,
                        format!("unexpected keyword {word:?} in command"),
                    ))
                }
                name => {
                    self.functions
                        .check(name)
                        .map_err(|message| Error::new(t.pos, message))?;
                    Operand::Func(name.to_string())
                }
            },
            Tok::LParen => {
                let close = matching_paren(tokens)
                    .ok_or_else(|| Error::new(t.pos, "unclosed left paren"))?;
                let pipe = self.nested(t.pos, |p| {
                    p.pipeline(&tokens[1..close], t.pos, "parenthesized pipeline")
                })?;
                if !pipe.decl.is_empty() {
                    return Err(Error::new(t.pos, "a declaration inside parentheses"));
                }
                used = close + 1;
                Operand::Sub(Box::new(pipe))
            }
            tok => {
                return Err(Error::new(
                    t.pos,
                    format!("unexpected {} in operand", describe(tok)),
                ))
            }
        };
        let mut fields = Vec::new();
        while let Some(Token {
            tok: Tok::Field(name),
            spaced,
            ..
        }) = tokens.get(used)
        {
            if *spaced && !(used == 0 && fields.is_empty()) {
                break;
            }
            if matches!(operand, Operand::Func(_))
                || matches!(
                    operand,
                    Operand::Str(_)
                        | Operand::Int(_)
                        | Operand::Float(_)
                        | Operand::Bool(_)
                        | Operand::Nil
                )
            {
                return Err(Error::new(
                    tokens[used].pos,
                    format!("unexpected .{name} after {}", describe(&t.tok)),
                ));
            }
            fields.push(name.clone());
            used += 1;
        }
        Ok((
            Arg {
                operand,
                fields,
                pos: t.pos,
            },
            used,
        ))
    }
}

fn var_name(t: &Token) -> String {
    match &t.tok {
        Tok::Var(name) => name.clone(),
        _ => String::new(),
    }
}

fn matching_paren(tokens: &[Token]) -> Option<usize> {
    let mut depth = 0;
    for (i, t) in tokens.iter().enumerate() {
        match t.tok {
            Tok::LParen => depth += 1,
            Tok::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// What a template nested past [`MAX_NESTING`] is told.
pub(super) fn nesting_error() -> String {
    format!("nested deeper than {MAX_NESTING} levels (the template nesting limit)")
}

fn no_more(rest: &[Token], what: &str) -> Result<(), Error> {
    match rest.first() {
        None => Ok(()),
        Some(t) => Err(Error::new(
            t.pos,
            format!("unexpected {} in {what}", describe(&t.tok)),
        )),
    }
}

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Ident(w) => format!("{w:?}"),
        Tok::Field(f) => format!(".{f}"),
        Tok::Var(v) => format!("${v}"),
        Tok::Dot => "\".\"".into(),
        Tok::Str(s) => format!("{s:?}"),
        Tok::Int(n) => n.to_string(),
        Tok::Float(f) => f.to_string(),
        Tok::Pipe => "\"|\"".into(),
        Tok::LParen => "\"(\"".into(),
        Tok::RParen => "\")\"".into(),
        Tok::Declare => "\":=\"".into(),
        Tok::Assign => "\"=\"".into(),
        Tok::Comma => "\",\"".into(),
    }
}
