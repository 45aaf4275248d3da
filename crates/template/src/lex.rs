//! The lexer: a template's text split into text and actions, each action
//! into tokens, with the trim markers (`{{- `, ` -}}`) applied to the text
//! around them and comments (`{{/* ... */}}`) dropped.

use super::Error;

/// A position in the template: line and column (in characters), from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

/// A token inside an action.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    /// A function name or a keyword (`if`, `end`, `true`, `nil`, ...).
    Ident(String),
    /// `.Name`: a field of what comes before it, or of the dot.
    Field(String),
    /// `$name`, or `$` alone.
    Var(String),
    /// `.` alone.
    Dot,
    Str(String),
    Int(i64),
    Float(f64),
    Pipe,
    LParen,
    RParen,
    /// `:=`
    Declare,
    /// `=`
    Assign,
    Comma,
}

/// A token, where it starts, and whether space comes right before it
/// (`$x.Field` chains a field, `$x .Field` is two arguments).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub tok: Tok,
    pub pos: Pos,
    pub spaced: bool,
}

/// A piece of the template.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Item {
    Text(String),
    /// An action's tokens, and where its left delimiter starts.
    Action(Vec<Token>, Pos),
}

struct Lexer<'s> {
    src: &'s str,
    at: usize,
    right: &'s str,
    /// Byte offsets where lines start.
    lines: Vec<usize>,
    /// The last position asked for, as (byte offset, its `Pos`): positions
    /// are asked for in order, so each column is counted on from the last
    /// one rather than from the line's start, which on a long line would
    /// make lexing quadratic.
    last: (usize, Pos),
}

/// Splits `src` into text and actions between `left` and `right`.
pub(super) fn lex(src: &str, left: &str, right: &str) -> Result<Vec<Item>, Error> {
    let mut lines = vec![0];
    lines.extend(src.match_indices('\n').map(|(i, _)| i + 1));
    let mut lx = Lexer {
        src,
        at: 0,
        right,
        lines,
        last: (0, Pos { line: 1, col: 1 }),
    };
    let mut items = Vec::new();
    let mut trim_next = false;
    loop {
        let rest = &src[lx.at..];
        let end = rest.find(left).map_or(src.len(), |i| lx.at + i);
        let mut text = &src[lx.at..end];
        if trim_next {
            text = text.trim_start_matches(is_space);
        }
        if end == src.len() {
            if !text.is_empty() {
                items.push(Item::Text(text.to_string()));
            }
            return Ok(items);
        }
        let start = lx.pos(end);
        lx.at = end + left.len();
        if lx.src[lx.at..].starts_with('-') && lx.src[lx.at + 1..].starts_with(is_space) {
            text = text.trim_end_matches(is_space);
            lx.at += 1;
            lx.skip_space();
        }
        if !text.is_empty() {
            items.push(Item::Text(text.to_string()));
        }
        if lx.src[lx.at..].starts_with("/*") {
            let close = lx.src[lx.at..]
                .find("*/")
                .ok_or_else(|| Error::new(start, "unclosed comment"))?;
            lx.at += close + 2;
            trim_next = lx.close_comment(start)?;
            continue;
        }
        let mut tokens = Vec::new();
        loop {
            let spaced = lx.skip_space();
            if lx.at >= src.len() {
                return Err(Error::new(start, "unclosed action"));
            }
            if let Some(trim) = lx.try_close(spaced) {
                trim_next = trim;
                break;
            }
            let pos = lx.pos(lx.at);
            let tok = lx.token(pos)?;
            tokens.push(Token { tok, pos, spaced });
        }
        items.push(Item::Action(tokens, start));
    }
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

impl Lexer<'_> {
    fn pos(&mut self, at: usize) -> Pos {
        let line = self.lines.partition_point(|&start| start <= at);
        let start = self.lines[line - 1];
        let (last_at, last_pos) = self.last;
        let col = if last_pos.line == line && (start..=at).contains(&last_at) {
            last_pos.col + self.src[last_at..at].chars().count()
        } else {
            self.src[start..at].chars().count() + 1
        };
        let pos = Pos { line, col };
        self.last = (at, pos);
        pos
    }

    /// Skips white space; whether there was any.
    fn skip_space(&mut self) -> bool {
        let rest = &self.src[self.at..];
        let trimmed = rest.trim_start_matches(is_space);
        self.at += rest.len() - trimmed.len();
        rest.len() != trimmed.len()
    }

    /// The right delimiter, with its trim marker (` -}}`) if `spaced`:
    /// whether it trims the text after it.
    fn try_close(&mut self, spaced: bool) -> Option<bool> {
        let rest = &self.src[self.at..];
        if rest.starts_with(self.right) {
            self.at += self.right.len();
            return Some(false);
        }
        if spaced && rest.starts_with('-') && rest[1..].starts_with(self.right) {
            self.at += 1 + self.right.len();
            return Some(true);
        }
        None
    }

    /// The end of a comment's action.
    fn close_comment(&mut self, start: Pos) -> Result<bool, Error> {
        let spaced = self.skip_space();
        self.try_close(spaced)
            .ok_or_else(|| Error::new(start, "comment ends before the closing delimiter"))
    }

    fn token(&mut self, pos: Pos) -> Result<Tok, Error> {
        let rest = &self.src[self.at..];
        let c = rest.chars().next().unwrap_or(' ');
        let word = |s: &str| -> usize {
            s.find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(s.len())
        };
        let tok = match c {
            '|' => self.one(Tok::Pipe),
            '(' => self.one(Tok::LParen),
            ')' => self.one(Tok::RParen),
            ',' => self.one(Tok::Comma),
            '=' => self.one(Tok::Assign),
            ':' if rest.starts_with(":=") => {
                self.at += 2;
                Tok::Declare
            }
            '$' => {
                let n = word(&rest[1..]);
                self.at += 1 + n;
                Tok::Var(rest[1..1 + n].to_string())
            }
            '.' if rest[1..].starts_with(|c: char| c.is_alphabetic() || c == '_') => {
                let n = word(&rest[1..]);
                self.at += 1 + n;
                Tok::Field(rest[1..1 + n].to_string())
            }
            '.' if !rest[1..].starts_with(|c: char| c.is_ascii_digit()) => self.one(Tok::Dot),
            '"' => self.quoted(pos)?,
            '`' => {
                let close = rest[1..]
                    .find('`')
                    .ok_or_else(|| Error::new(pos, "unterminated raw string"))?;
                self.at += close + 2;
                Tok::Str(rest[1..1 + close].to_string())
            }
            '\'' => {
                let mut chars = rest[1..].chars();
                let (ch, len) = match chars.next() {
                    Some('\\') => {
                        let e = chars
                            .next()
                            .ok_or_else(|| Error::new(pos, "bad character"))?;
                        (escape(e).ok_or_else(|| Error::new(pos, "bad escape"))?, 2)
                    }
                    Some(ch) => (ch, ch.len_utf8()),
                    None => return Err(Error::new(pos, "unterminated character")),
                };
                if !rest[1 + len..].starts_with('\'') {
                    return Err(Error::new(pos, "unterminated character"));
                }
                self.at += len + 2;
                Tok::Int(i64::from(u32::from(ch)))
            }
            c if c.is_ascii_digit() || matches!(c, '-' | '+' | '.') => self.number(pos)?,
            c if c.is_alphabetic() || c == '_' => {
                let n = word(rest);
                self.at += n;
                Tok::Ident(rest[..n].to_string())
            }
            c => return Err(Error::new(pos, format!("unexpected {c:?} in action"))),
        };
        Ok(tok)
    }

    fn one(&mut self, tok: Tok) -> Tok {
        self.at += 1;
        tok
    }

    fn quoted(&mut self, pos: Pos) -> Result<Tok, Error> {
        let mut out = String::new();
        let mut chars = self.src[self.at + 1..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.at += i + 2;
                    return Ok(Tok::Str(out));
                }
                '\n' => break,
                '\\' => match chars.next() {
                    Some((_, 'x')) => {
                        let hex: String =
                            (0..2).filter_map(|_| chars.next().map(|x| x.1)).collect();
                        let b = u8::from_str_radix(&hex, 16)
                            .map_err(|_| Error::new(pos, "bad \\x escape in string"))?;
                        out.push(char::from(b));
                    }
                    Some((_, u @ ('u' | 'U'))) => {
                        let n = if u == 'u' { 4 } else { 8 };
                        let hex: String =
                            (0..n).filter_map(|_| chars.next().map(|x| x.1)).collect();
                        let ch = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .ok_or_else(|| Error::new(pos, "bad unicode escape in string"))?;
                        out.push(ch);
                    }
                    Some((_, e)) => out.push(escape(e).ok_or_else(|| {
                        Error::new(pos, format!("unknown escape \\{e} in string"))
                    })?),
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(Error::new(pos, "unterminated quoted string"))
    }

    fn number(&mut self, pos: Pos) -> Result<Tok, Error> {
        let rest = &self.src[self.at..];
        let n = rest
            .char_indices()
            .find(|&(i, c)| {
                !(c.is_ascii_alphanumeric()
                    || c == '.'
                    || c == '_'
                    || (matches!(c, '+' | '-')
                        && (i == 0 || matches!(rest.as_bytes()[i - 1], b'e' | b'E'))))
            })
            .map_or(rest.len(), |(i, _)| i);
        let text = rest[..n].replace('_', "");
        self.at += n;
        let bad = || Error::new(pos, format!("bad number syntax: {:?}", &rest[..n]));
        let (neg, digits) = match text.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, text.strip_prefix('+').unwrap_or(&text)),
        };
        let radix = [
            ("0x", 16),
            ("0X", 16),
            ("0o", 8),
            ("0O", 8),
            ("0b", 2),
            ("0B", 2),
        ]
        .iter()
        .find(|(p, _)| digits.starts_with(p));
        if let Some((p, radix)) = radix {
            let v = i64::from_str_radix(&digits[p.len()..], *radix).map_err(|_| bad())?;
            return Ok(Tok::Int(if neg { -v } else { v }));
        }
        if let Ok(v) = text.parse::<i64>() {
            return Ok(Tok::Int(v));
        }
        text.parse::<f64>().map(Tok::Float).map_err(|_| bad())
    }
}

fn escape(e: char) -> Option<char> {
    Some(match e {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        '\\' => '\\',
        '"' => '"',
        '\'' => '\'',
        'a' => '\u{7}',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'v' => '\u{b}',
        '0' => '\0',
        _ => return None,
    })
}
