//! The parser: recursive descent over the lexer's tokens, one token of
//! lookahead, no backtracking.
//!
//! Recursion only happens when a block, a list or an object opens, and the
//! nesting limit bounds it, so hostile input cannot overflow the stack.

use std::collections::HashMap;

use super::ast::{Attribute, Block, Body, Error, Expr, Ident, Item, Key, Label, Number, Pos, Span};
use super::lexer::{Lexer, Token, TokenKind};

/// How deeply blocks, lists and objects may nest, all counted together.
pub const MAX_NESTING: usize = 64;

/// Characters that start an operator or another expression form that this
/// subset does not support; errors that find one say so.
const EXPRESSION_CHARS: &str = "(!-+*/%<>&|?.";

/// The parser state: the lexer, the current token and the nesting depth.
pub(crate) struct Parser<'a> {
    lexer: Lexer<'a>,
    file: &'a str,
    tok: Token,
    depth: usize,
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

    /// An "expected X, found Y" error at the current token. Operators get a
    /// hint, since a user who writes one probably expects HCL expressions.
    fn unexpected(&self, expected: &str) -> Error {
        let found = self.tok.kind.describe();
        let hint = match self.tok.kind {
            TokenKind::Other(c) if EXPRESSION_CHARS.contains(c) => {
                " (expressions are not supported)"
            }
            _ => "",
        };
        self.error(
            self.tok.start,
            format!("expected {expected}, found {found}{hint}"),
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
                    return Ok(Body { items });
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
                Ok(Item::Attribute(Attribute {
                    key: Key { name, quoted, span },
                    value,
                    span,
                }))
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
        let body = self.parse_body(Some((&kind.name, open)))?;
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

    /// Parses one value. `owner` completes "expected a value ..." in errors,
    /// as in `for 'count'` or `in the list`.
    fn parse_value(&mut self, owner: &str) -> Result<Expr, Error> {
        match self.tok.kind {
            TokenKind::LBracket => return self.parse_list(),
            TokenKind::LBrace => return self.parse_object(),
            _ => {}
        }
        let span = self.span();
        let expr = match std::mem::replace(&mut self.tok.kind, TokenKind::Newline) {
            TokenKind::Str { value, .. } => Expr::String { value, span },
            TokenKind::Heredoc(value) => Expr::Heredoc { value, span },
            TokenKind::Number(text) => Expr::Number {
                value: Number::new(text),
                span,
            },
            TokenKind::Ident(name) => match name.as_str() {
                "true" => Expr::Bool { value: true, span },
                "false" => Expr::Bool { value: false, span },
                "null" => Expr::Null { span },
                _ => return Err(self.bare_identifier(&name, owner, span.start)),
            },
            other => {
                self.tok.kind = other;
                return Err(self.unexpected(&format!("a value {owner}")));
            }
        };
        self.advance()?;
        Ok(expr)
    }

    /// The error for an identifier where a value should be. The token after
    /// it tells a function call or a reference apart from a missing quote.
    fn bare_identifier(&mut self, name: &str, owner: &str, pos: Pos) -> Error {
        let next = self.lexer.next_token().map(|tok| tok.kind);
        let hint = match next {
            Ok(TokenKind::Other('(')) => "function calls are not supported".to_string(),
            Ok(TokenKind::Other('.')) => {
                "references are not supported; write them inside a string, as in \"${...}\""
                    .to_string()
            }
            Ok(TokenKind::Ident(_)) if name == "for" => {
                "for expressions are not supported".to_string()
            }
            _ => format!("strings need quotes: \"{name}\""),
        };
        self.error(
            pos,
            format!("expected a value {owner}, found identifier '{name}' ({hint})"),
        )
    }

    /// Parses `[a, b, c]`; newlines may appear between elements and a
    /// trailing comma is allowed.
    fn parse_list(&mut self) -> Result<Expr, Error> {
        let open = self.tok.start;
        self.enter(open)?;
        self.advance()?;
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
    fn parse_object(&mut self) -> Result<Expr, Error> {
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
                    return Err(self.error(key.span.start, "for expressions are not supported"));
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
