//! Templates: what a quoted string, a heredoc or a string of HCL's JSON
//! syntax becomes once its `${...}` interpolations and `%{...}` directives
//! are read.
//!
//! The lexers find the sequences and keep them in the decoded text as
//! written; this module reads them in order, as HCL's template grammar
//! does: an interpolation is one value, and the directives `%{ if COND }`,
//! `%{ else }`, `%{ endif }`, `%{ for V in COLL }` (or `K, V`) and
//! `%{ endfor }` nest into [`Part::If`] and [`Part::For`]. A `~` just inside
//! the braces of either kind (`%{~ if x ~}`) strips the whitespace, newlines
//! included, of the text next to it on that side.
//!
//! What needs evaluating is evaluated with the file and the rest is kept
//! for the agent, as for any sequence: an interpolation of a name known
//! only when a task starts (`${NOMAD_TASK_DIR}`) stays as written, and so
//! do the `%{ }` of a directive whose condition or collection names one;
//! the text and the interpolations between them are read as any others.

use super::{names_runtime, needs_evaluation, Parser};
use crate::ast::{Expr, Ident, Part};
use crate::error::Error;
use crate::lexer::{Lexer, Sequence, Token, TokenKind};
use crate::pos::{Pos, Span};

/// A sequence with its strip markers taken off.
struct Tag<'v> {
    /// The text between the braces, without the markers.
    inner: &'v str,
    /// Where `inner` starts in the file.
    pos: Pos,
    /// Where the sequence starts in the file.
    start: Pos,
    directive: bool,
}

/// A directive that is open: its parts so far, and what it needs when it
/// closes.
struct Open {
    kind: OpenKind,
    /// Where its `%{` is, for "has no `%{ endif }`" errors.
    at: Pos,
    /// The parts before it, to which it is added when it closes.
    outer: Vec<Part>,
    /// How it was written, kept when it stays for the agent.
    written: String,
}

enum OpenKind {
    If {
        cond: Option<Expr>,
        /// The parts before `%{ else }` once it is seen, and how it was
        /// written.
        then: Option<(Vec<Part>, String)>,
    },
    For {
        key_var: Option<Ident>,
        value_var: Ident,
        collection: Option<Expr>,
        /// How many names it added to the parser's bound names.
        binds: usize,
    },
}

impl OpenKind {
    fn keyword(&self) -> &'static str {
        match self {
            OpenKind::If { .. } => "if",
            OpenKind::For { .. } => "for",
        }
    }
}

impl<'a> Parser<'a> {
    /// A parser with no input of its own, for the templates of HCL's JSON
    /// syntax: strings nested `depth` deep in the file named `file`, with
    /// the names of the `dynamic` blocks around them `bound`.
    pub(crate) fn for_templates(file: &'a str, depth: usize, bound: &[String]) -> Parser<'a> {
        let pos = Pos::new(1, 1);
        Parser {
            lexer: Lexer::at("", file, pos),
            file,
            tok: Token {
                kind: TokenKind::Eof,
                start: pos,
                end: pos,
            },
            depth,
            bound: bound.to_vec(),
        }
    }

    /// A string whose decoded text is `value` and whose sequences are
    /// `sequences`, as an expression: [`Expr::String`] when nothing in it
    /// needs evaluating, [`Expr::Template`] otherwise.
    pub(crate) fn template(
        &mut self,
        value: String,
        sequences: &[Sequence],
        span: Span,
    ) -> Result<Expr, Error> {
        let outer_bound = self.bound.len();
        let parts = self.template_parts(&value, sequences);
        self.bound.truncate(outer_bound);
        let mut parts = parts?;
        merge_text(&mut parts);
        match parts.as_slice() {
            [] => Ok(Expr::String {
                value: String::new(),
                span,
            }),
            [Part::Text(text)] => Ok(Expr::String {
                value: text.clone(),
                span,
            }),
            _ => Ok(Expr::Template { parts, span }),
        }
    }

    fn template_parts(&mut self, value: &str, sequences: &[Sequence]) -> Result<Vec<Part>, Error> {
        // The text between the sequences, with the strip markers applied.
        let mut texts: Vec<&str> = Vec::with_capacity(sequences.len() + 1);
        let mut tags = Vec::with_capacity(sequences.len());
        let mut done = 0;
        for seq in sequences {
            texts.push(&value[done..seq.range.start]);
            let mut inner = &value[seq.range.start + 2..seq.range.end - 1];
            let strip_before = inner.starts_with('~');
            inner = inner.strip_prefix('~').unwrap_or(inner);
            let strip_after = inner.ends_with('~');
            inner = inner.strip_suffix('~').unwrap_or(inner);
            tags.push((
                Tag {
                    inner,
                    pos: Pos::new(seq.pos.line, seq.pos.col + 2 + usize::from(strip_before)),
                    start: seq.pos,
                    directive: seq.directive,
                },
                strip_before,
                strip_after,
            ));
            done = seq.range.end;
        }
        texts.push(&value[done..]);
        for (i, (_, strip_before, strip_after)) in tags.iter().enumerate() {
            if *strip_before {
                texts[i] = texts[i].trim_end();
            }
            if *strip_after {
                texts[i + 1] = texts[i + 1].trim_start();
            }
        }

        let mut parts = Vec::new();
        let mut open: Vec<Open> = Vec::new();
        for (i, (tag, _, _)) in tags.iter().enumerate() {
            parts.push(Part::Text(texts[i].to_string()));
            if tag.directive {
                self.directive(tag, &mut parts, &mut open)?;
            } else {
                parts.push(self.interpolation(tag)?);
            }
        }
        parts.push(Part::Text(texts[tags.len()].to_string()));
        if let Some(unclosed) = open.last() {
            let keyword = unclosed.kind.keyword();
            return Err(Error::new(
                self.file,
                unclosed.at,
                format!("the '%{{ {keyword} }}' has no '%{{ end{keyword} }}' before the end of the string"),
            ));
        }
        Ok(parts)
    }

    /// A `${...}`: an [`Part::Interpolation`] when it needs evaluating, its
    /// text for the agent otherwise. One that does not parse is kept for the
    /// agent too, unless it names a variable, a local or calls a function.
    fn interpolation(&mut self, tag: &Tag<'_>) -> Result<Part, Error> {
        match self.sequence(tag.inner, tag.pos, "'${'") {
            Ok(expr) if needs_evaluation(&expr, &self.bound) => Ok(Part::Interpolation(expr)),
            Ok(_) => Ok(Part::Text(format!("${{{}}}", tag.inner))),
            Err(err)
                if ["var.", "local.", "("]
                    .iter()
                    .any(|mark| tag.inner.contains(mark)) =>
            {
                Err(err)
            }
            Err(_) => Ok(Part::Text(format!("${{{}}}", tag.inner))),
        }
    }

    /// A `%{...}`: opens, continues or closes a directive.
    fn directive(
        &mut self,
        tag: &Tag<'_>,
        parts: &mut Vec<Part>,
        open: &mut Vec<Open>,
    ) -> Result<(), Error> {
        let written = format!("%{{{}}}", tag.inner);
        let trimmed = tag.inner.trim_start();
        let keyword_end = trimmed
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(trimmed.len());
        let keyword = &trimmed[..keyword_end];
        let rest_pos = Pos::new(
            tag.pos.line,
            tag.pos.col + (tag.inner.len() - trimmed.len()) + keyword_end,
        );
        let rest = &trimmed[keyword_end..];
        let bare = |rest: &str| -> Result<(), Error> {
            match rest.trim().is_empty() {
                true => Ok(()),
                false => Err(Error::new(
                    self.file,
                    rest_pos,
                    format!(
                        "expected '}}' after '%{{ {keyword}', found '{}'",
                        rest.trim()
                    ),
                )),
            }
        };
        match keyword {
            "if" => {
                let cond = self.sequence(rest, rest_pos, "'%{ if'")?;
                let runtime =
                    names_runtime(&cond, &mut self.bound.iter().map(String::as_str).collect());
                open.push(Open {
                    kind: OpenKind::If {
                        cond: (!runtime).then_some(cond),
                        then: None,
                    },
                    at: tag.start,
                    outer: std::mem::take(parts),
                    written,
                });
            }
            "for" => {
                let (key_var, value_var, collection) = self.for_directive(rest, rest_pos)?;
                let runtime = names_runtime(
                    &collection,
                    &mut self.bound.iter().map(String::as_str).collect(),
                );
                let mut binds = 0;
                if !runtime {
                    let names = key_var.iter().chain([&value_var]);
                    for name in names {
                        self.bound.push(name.name.clone());
                        binds += 1;
                    }
                }
                open.push(Open {
                    kind: OpenKind::For {
                        key_var,
                        value_var,
                        collection: (!runtime).then_some(collection),
                        binds,
                    },
                    at: tag.start,
                    outer: std::mem::take(parts),
                    written,
                });
            }
            "else" => {
                bare(rest)?;
                match open.last_mut() {
                    Some(Open {
                        kind:
                            OpenKind::If {
                                then: then @ None, ..
                            },
                        ..
                    }) => *then = Some((std::mem::take(parts), written)),
                    Some(Open {
                        kind: OpenKind::If { then: Some(_), .. },
                        at,
                        ..
                    }) => {
                        return Err(Error::new(
                            self.file,
                            tag.start,
                            format!("a second '%{{ else }}' for the '%{{ if }}' at {at}"),
                        ))
                    }
                    _ => return Err(self.stray(tag, "else", "if", open)),
                }
            }
            "endif" | "endfor" => {
                bare(rest)?;
                let closes = &keyword[3..];
                if open.last().map(|o| o.kind.keyword()) != Some(closes) {
                    return Err(self.stray(tag, keyword, closes, open));
                }
                let Some(done) = open.pop() else {
                    return Err(self.stray(tag, keyword, closes, open));
                };
                let body = std::mem::replace(parts, done.outer);
                self.close(done.kind, done.written, body, written, parts);
            }
            _ => {
                return Err(Error::new(
                    self.file,
                    tag.pos,
                    format!(
                    "unknown template directive '%{{{}}}': expected if, else, endif, for or endfor",
                    tag.inner
                ),
                ))
            }
        }
        Ok(())
    }

    /// Adds a directive that just closed to `parts`: evaluated, or as
    /// written for the agent with the parts inside it.
    fn close(
        &mut self,
        kind: OpenKind,
        written: String,
        body: Vec<Part>,
        end_written: String,
        parts: &mut Vec<Part>,
    ) {
        match kind {
            OpenKind::If {
                cond: Some(cond),
                then,
            } => {
                let (then, otherwise) = match then {
                    Some((then, _)) => (then, body),
                    None => (body, Vec::new()),
                };
                parts.push(Part::If {
                    cond,
                    then,
                    otherwise,
                });
            }
            OpenKind::For {
                key_var,
                value_var,
                collection: Some(collection),
                binds,
            } => {
                self.bound.truncate(self.bound.len() - binds);
                parts.push(Part::For {
                    key_var,
                    value_var,
                    collection,
                    body,
                });
            }
            OpenKind::If { cond: None, then } => {
                parts.push(Part::Text(written));
                if let Some((then, else_written)) = then {
                    parts.extend(then);
                    parts.push(Part::Text(else_written));
                }
                parts.extend(body);
                parts.push(Part::Text(end_written));
            }
            OpenKind::For {
                collection: None, ..
            } => {
                parts.push(Part::Text(written));
                parts.extend(body);
                parts.push(Part::Text(end_written));
            }
        }
    }

    /// The error for an `%{ else }`, `%{ endif }` or `%{ endfor }` that
    /// closes nothing open, or not the directive open last.
    fn stray(&self, tag: &Tag<'_>, keyword: &str, wants: &str, open: &[Open]) -> Error {
        let message = match open.last() {
            Some(last) => format!(
                "'%{{ {keyword} }}' where the '%{{ {} }}' at {} needs its '%{{ end{} }}' first",
                last.kind.keyword(),
                last.at,
                last.kind.keyword()
            ),
            None => format!("'%{{ {keyword} }}' without a '%{{ {wants} }}' before it"),
        };
        Error::new(self.file, tag.start, message)
    }

    /// The names and the collection of `%{ for K, V in COLL }`, from the
    /// text after `for`.
    fn for_directive(
        &mut self,
        text: &str,
        pos: Pos,
    ) -> Result<(Option<Ident>, Ident, Expr), Error> {
        let mut sub = self.sub_parser(text, pos)?;
        let first = sub.for_name("a name after '%{ for'")?;
        let (key_var, value_var) = if sub.tok.kind == TokenKind::Comma {
            sub.advance()?;
            (Some(first), sub.for_name("a second name after ','")?)
        } else {
            (None, first)
        };
        if !matches!(&sub.tok.kind, TokenKind::Ident(word) if word == "in") {
            return Err(sub.unexpected("'in' after the names of '%{ for'"));
        }
        sub.advance()?;
        self.enter(pos)?;
        sub.depth = self.depth;
        let collection = sub.parse_value("after 'in'");
        self.leave();
        let collection = collection?;
        if sub.tok.kind != TokenKind::Eof {
            return Err(sub.unexpected("'}' after the collection of '%{ for'"));
        }
        Ok((key_var, value_var, collection))
    }

    /// A parser over the text of a sequence, which starts at `pos`.
    fn sub_parser<'s>(&self, inner: &'s str, pos: Pos) -> Result<Parser<'s>, Error>
    where
        'a: 's,
    {
        let mut sub = Parser {
            lexer: Lexer::at(inner, self.file, pos),
            file: self.file,
            tok: Token {
                kind: TokenKind::Newline,
                start: pos,
                end: pos,
            },
            depth: self.depth,
            bound: self.bound.clone(),
        };
        sub.advance()?;
        Ok(sub)
    }

    /// Parses the text of a sequence, which starts at `pos`, as one value;
    /// `what` names the sequence in errors.
    fn sequence(&mut self, inner: &str, pos: Pos, what: &str) -> Result<Expr, Error> {
        self.enter(pos)?;
        let sub = self.sub_parser(inner, pos);
        let expr = sub.and_then(|mut sub| {
            let expr = sub.parse_value(&format!("inside {what}"))?;
            if sub.tok.kind != TokenKind::Eof {
                return Err(sub.unexpected(&format!("'}}' after the value inside {what}")));
            }
            Ok(expr)
        });
        self.leave();
        expr
    }
}

/// Joins text parts that stand side by side and drops empty ones.
fn merge_text(parts: &mut Vec<Part>) {
    let mut merged: Vec<Part> = Vec::with_capacity(parts.len());
    for part in parts.drain(..) {
        match (merged.last_mut(), part) {
            (_, Part::Text(text)) if text.is_empty() => {}
            (Some(Part::Text(last)), Part::Text(text)) => last.push_str(&text),
            (
                _,
                Part::If {
                    cond,
                    mut then,
                    mut otherwise,
                },
            ) => {
                merge_text(&mut then);
                merge_text(&mut otherwise);
                merged.push(Part::If {
                    cond,
                    then,
                    otherwise,
                });
            }
            (
                _,
                Part::For {
                    key_var,
                    value_var,
                    collection,
                    mut body,
                },
            ) => {
                merge_text(&mut body);
                merged.push(Part::For {
                    key_var,
                    value_var,
                    collection,
                    body,
                });
            }
            (_, part) => merged.push(part),
        }
    }
    *parts = merged;
}
