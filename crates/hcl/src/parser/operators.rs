//! Values with operators: `? :`, the binary operators by HCL's
//! precedence, unary `!` and `-`, and parentheses, down to the primary
//! values the rest of the parser reads (literals, lists, objects,
//! references, calls).

use super::Parser;
use crate::ast::{BinaryOp, Expr, Ident, Number, UnaryOp};
use crate::error::Error;
use crate::lexer::TokenKind;
use crate::pos::Span;

impl Parser<'_> {
    /// Parses one value, operators and `? :` included. `owner` completes
    /// "expected a value ..." in errors, as in `for 'count'` or `in the
    /// list`.
    pub(super) fn parse_value(&mut self, owner: &str) -> Result<Expr, Error> {
        let cond = self.parse_binary(1, owner)?;
        if self.tok.kind != TokenKind::Other('?') {
            return Ok(cond);
        }
        let question = self.tok.start;
        self.enter(question)?;
        self.advance()?;
        let then = self.parse_value("after '?'")?;
        if self.tok.kind != TokenKind::Colon {
            return Err(self.unexpected(&format!("':' of the '?' at {question}")));
        }
        self.advance()?;
        let otherwise = self.parse_value("after ':'")?;
        self.leave();
        let span = Span::new(cond.span().start, otherwise.span().end);
        Ok(Expr::Conditional {
            cond: Box::new(cond),
            then: Box::new(then),
            otherwise: Box::new(otherwise),
            span,
        })
    }

    /// Parses operands joined by binary operators of precedence `min` and
    /// above, left to right.
    ///
    /// Each operator nests the tree one level deeper (`1 + 2 + 3` is
    /// `(1 + 2) + 3`), so each counts against the nesting limit until the
    /// chain ends: evaluating and dropping the tree recurse as deep.
    fn parse_binary(&mut self, min: u8, owner: &str) -> Result<Expr, Error> {
        let mut lhs = self.parse_unary(owner)?;
        let mut chained = 0;
        let result = loop {
            let Some(op) = self.binary_operator() else {
                break Ok(lhs);
            };
            if op.precedence() < min {
                break Ok(lhs);
            }
            let at = self.tok.start;
            let op = match self
                .take_operator(op)
                .and_then(|op| self.enter(at).map(|()| op))
            {
                Ok(op) => op,
                Err(err) => break Err(err),
            };
            chained += 1;
            let rhs =
                match self.parse_binary(op.precedence() + 1, &format!("after '{}'", op.symbol())) {
                    Ok(rhs) => rhs,
                    Err(err) => break Err(err),
                };
            let span = Span::new(lhs.span().start, rhs.span().end);
            lhs = Expr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
                span,
            };
        };
        for _ in 0..chained {
            self.leave();
        }
        result
    }

    /// `!x`, `-x`, or a primary value.
    fn parse_unary(&mut self, owner: &str) -> Result<Expr, Error> {
        let op = match self.tok.kind {
            TokenKind::Other('!') => UnaryOp::Not,
            TokenKind::Other('-') => UnaryOp::Negate,
            _ => return self.parse_primary(owner),
        };
        let start = self.tok.start;
        self.enter(start)?;
        self.advance()?;
        let operand = self.parse_unary(owner)?;
        self.leave();
        let span = Span::new(start, operand.span().end);
        Ok(Expr::Unary {
            op,
            operand: Box::new(operand),
            span,
        })
    }

    /// The binary operator the current token starts, if any (its second
    /// character, as in `<=`, is read by [`Parser::take_operator`]).
    fn binary_operator(&self) -> Option<BinaryOp> {
        Some(match self.tok.kind {
            TokenKind::Other('+') => BinaryOp::Add,
            TokenKind::Other('-') => BinaryOp::Subtract,
            TokenKind::Other('*') => BinaryOp::Multiply,
            TokenKind::Other('/') => BinaryOp::Divide,
            TokenKind::Other('%') => BinaryOp::Modulo,
            TokenKind::Other('<') => BinaryOp::Less,
            TokenKind::Other('>') => BinaryOp::Greater,
            TokenKind::Other('!') => BinaryOp::NotEqual,
            TokenKind::Equals => BinaryOp::Equal,
            TokenKind::Other('&') => BinaryOp::And,
            TokenKind::Other('|') => BinaryOp::Or,
            _ => return None,
        })
    }

    /// Consumes the operator `op` starts: one character, or two where the
    /// second must follow at once (`==`, `!=`, `<=`, `>=`, `&&`, `||`).
    fn take_operator(&mut self, op: BinaryOp) -> Result<BinaryOp, Error> {
        let first = self.advance()?;
        if op.precedence() >= BinaryOp::Add.precedence() {
            // `+ - * / %`: one character.
            return Ok(op);
        }
        let second = |tok: &TokenKind| match (op, tok) {
            (BinaryOp::Equal | BinaryOp::NotEqual, TokenKind::Equals) => Some(op),
            (BinaryOp::Less, TokenKind::Equals) => Some(BinaryOp::LessEqual),
            (BinaryOp::Greater, TokenKind::Equals) => Some(BinaryOp::GreaterEqual),
            (BinaryOp::And, TokenKind::Other('&')) => Some(op),
            (BinaryOp::Or, TokenKind::Other('|')) => Some(op),
            _ => None,
        };
        let adjacent = self.tok.start == first.end;
        match (adjacent.then(|| second(&self.tok.kind)).flatten(), op) {
            (Some(op), _) => {
                self.advance()?;
                Ok(op)
            }
            (None, BinaryOp::Less | BinaryOp::Greater) => Ok(op),
            (None, _) => Err(self.error(
                first.start,
                format!("expected the operator '{}'", op.symbol()),
            )),
        }
    }

    /// Parses a value without operators: a literal, a list, an object, a
    /// reference, a call, or a parenthesized expression.
    fn parse_primary(&mut self, owner: &str) -> Result<Expr, Error> {
        if self.tok.kind == TokenKind::Other('(') {
            let open = self.tok.start;
            self.enter(open)?;
            self.advance()?;
            let inner = self.parse_value("in parentheses")?;
            if self.tok.kind != TokenKind::Other(')') {
                return Err(self.unexpected(&format!("')' to close the '(' at {open}")));
            }
            self.advance()?;
            self.leave();
            return self.postfix(inner);
        }
        match self.tok.kind {
            TokenKind::LBracket => {
                let list = self.parse_list()?;
                return self.postfix(list);
            }
            TokenKind::LBrace => return self.parse_object(),
            _ => {}
        }
        let span = self.span();
        let expr = match std::mem::replace(&mut self.tok.kind, TokenKind::Newline) {
            TokenKind::Str {
                value, sequences, ..
            } => self.template(value, &sequences, span)?,
            TokenKind::Heredoc { value, sequences } => {
                match self.template(value, &sequences, span)? {
                    Expr::String { value, span } => Expr::Heredoc { value, span },
                    template => template,
                }
            }
            TokenKind::Number(text) => Expr::Number {
                value: Number::new(text),
                span,
            },
            TokenKind::Ident(name) => match name.as_str() {
                "true" => Expr::Bool { value: true, span },
                "false" => Expr::Bool { value: false, span },
                "null" => Expr::Null { span },
                _ => return self.parse_operation(Ident { name, span }, owner),
            },
            other => {
                self.tok.kind = other;
                return Err(self.unexpected(&format!("a value {owner}")));
            }
        };
        self.advance()?;
        Ok(expr)
    }
}
