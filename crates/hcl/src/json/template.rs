//! JSON strings as templates: HCL reads every string value of its JSON
//! syntax as it reads a quoted string of the native syntax, so `${...}` and
//! `%{...}` mean what they mean there, and `$${` and `%%{` are a literal
//! `${` and `%{`.

use super::Parser;
use crate::ast::Expr;
use crate::error::Error;
use crate::lexer::{sequence_end, Sequence};
use crate::parser;
use crate::pos::{Pos, Span};

impl Parser<'_> {
    /// The expression of a string value whose decoded text is `text`, the
    /// character `i` of it at `positions[i]` in the file.
    pub(super) fn template(
        &mut self,
        text: &str,
        positions: &[Pos],
        span: Span,
    ) -> Result<Expr, Error> {
        let chars: Vec<char> = text.chars().collect();
        let mut value = String::with_capacity(text.len());
        let mut sequences = Vec::new();
        let mut k = 0;
        while k < chars.len() {
            let c = chars[k];
            let next = |n: usize| chars.get(k + n).copied();
            if (c == '$' || c == '%') && next(1) == Some(c) && next(2) == Some('{') {
                value.push(c);
                value.push('{');
                k += 3;
                continue;
            }
            if (c == '$' || c == '%') && next(1) == Some('{') {
                let Some(end) = sequence_end(&chars, k + 2) else {
                    let opener = format!("{c}{{");
                    return Err(self.error(
                        positions[k],
                        format!("unterminated '{opener}' in string: expected '}}' before its end"),
                    ));
                };
                let begin = value.len();
                value.extend(&chars[k..=end]);
                sequences.push(Sequence {
                    range: begin..value.len(),
                    pos: positions[k],
                    directive: c == '%',
                });
                k = end + 1;
                continue;
            }
            value.push(c);
            k += 1;
        }
        if sequences.is_empty() {
            return Ok(Expr::String { value, span });
        }
        parser::Parser::for_templates(self.file, self.depth, &self.bound)
            .template(value, &sequences, span)
    }
}
