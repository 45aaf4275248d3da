//! `for` expressions: `[for v in coll : value if cond]` and `{for k, v in
//! coll : key => value... if cond}`, read once the opening bracket or
//! brace and the `for` keyword are behind.

use super::Parser;
use crate::ast::{Expr, ForExpr, Ident};
use crate::error::Error;
use crate::lexer::TokenKind;
use crate::pos::{Pos, Span};

/// A `for`'s key (of an object `for`), value, `...`, `if`, and where it
/// ends.
type ForBody = (Option<Expr>, Expr, bool, Option<Expr>, Pos);

impl Parser<'_> {
    /// Parses the rest of a `for` expression opened at `open` (by `{` when
    /// `object`, `[` otherwise), from the first name after `for` to the
    /// closing bracket or brace, which it consumes. Newlines may stand
    /// between its parts, as inside any brackets.
    ///
    /// A `for` takes more stack to parse and to evaluate than a list, so it
    /// counts as one more level of nesting than its brackets.
    pub(super) fn parse_for(&mut self, open: Pos, object: bool) -> Result<Expr, Error> {
        self.enter(open)?;
        let expr = self.parse_for_nested(open, object);
        self.leave();
        expr
    }

    fn parse_for_nested(&mut self, open: Pos, object: bool) -> Result<Expr, Error> {
        let first = self.for_name("a name after 'for'")?;
        let (key_var, value_var) = if self.tok.kind == TokenKind::Comma {
            self.advance()?;
            let second = self.for_name("a second name after ','")?;
            (Some(first), second)
        } else {
            (None, first)
        };
        if !matches!(&self.tok.kind, TokenKind::Ident(word) if word == "in") {
            return Err(self.unexpected(&format!("'in' after the names of the 'for' at {open}")));
        }
        self.advance()?;
        let collection = self.parse_value("after 'in'")?;
        if self.tok.kind != TokenKind::Colon {
            return Err(
                self.unexpected(&format!("':' after the collection of the 'for' at {open}"))
            );
        }
        self.advance()?;
        self.skip_newlines()?;
        let outer = self.bound.len();
        self.bound
            .extend(key_var.iter().map(|name| name.name.clone()));
        self.bound.push(value_var.name.clone());
        let rest = self.for_body(open, object);
        self.bound.truncate(outer);
        let (key, value, grouped, cond, end) = rest?;
        Ok(Expr::For(Box::new(ForExpr {
            key_var,
            value_var,
            collection,
            key,
            value,
            grouped,
            cond,
            span: Span::new(open, end),
        })))
    }

    /// Parses what a `for` makes of each element, with its names bound:
    /// from after the `:` to the closing bracket or brace.
    fn for_body(&mut self, open: Pos, object: bool) -> Result<ForBody, Error> {
        let close = if object { "'}'" } else { "']'" };
        let key = if object {
            let key = self.parse_value("as the key of the 'for'")?;
            self.skip_newlines()?;
            if self.tok.kind != TokenKind::Arrow {
                return Err(self.unexpected(&format!("'=>' after the key of the 'for' at {open}")));
            }
            self.advance()?;
            self.skip_newlines()?;
            Some(key)
        } else {
            None
        };
        let value = self.parse_value("after ':' of the 'for'")?;
        self.skip_newlines()?;
        let grouped = object && self.tok.kind == TokenKind::Ellipsis;
        if grouped {
            self.advance()?;
            self.skip_newlines()?;
        }
        let cond = if matches!(&self.tok.kind, TokenKind::Ident(word) if word == "if") {
            self.advance()?;
            let cond = self.parse_value("after 'if'")?;
            self.skip_newlines()?;
            Some(cond)
        } else {
            None
        };
        let closes = if object {
            TokenKind::RBrace
        } else {
            TokenKind::RBracket
        };
        if self.tok.kind != closes {
            let ellipsis = if object && !grouped { ", '...'" } else { "" };
            return Err(self.unexpected(&format!(
                "'if'{ellipsis} or {close} to close the 'for' opened at {open}"
            )));
        }
        let end = self.advance()?.end;
        Ok((key, value, grouped, cond, end))
    }

    /// The name a `for` binds: an identifier.
    pub(super) fn for_name(&mut self, expected: &str) -> Result<Ident, Error> {
        let span = self.span();
        let TokenKind::Ident(name) = &self.tok.kind else {
            return Err(self.unexpected(expected));
        };
        let ident = Ident {
            name: name.clone(),
            span,
        };
        self.advance()?;
        Ok(ident)
    }
}
