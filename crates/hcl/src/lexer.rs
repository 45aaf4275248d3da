//! The lexer: turns source text into tokens in one forward pass.
//!
//! Every character is looked at a bounded number of times, so lexing is
//! linear in the size of the input. Strings and heredocs are decoded here,
//! so the parser only ever sees finished values.

use super::error::Error;
use super::pos::Pos;

/// What a token is, with its decoded payload.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TokenKind {
    /// An identifier such as `job`, `true` or `mount_options`.
    Ident(String),
    /// A quoted string with its escapes decoded. `template` says whether it
    /// contains `${...}` or `%{...}` sequences, which are kept as written.
    Str {
        value: String,
        template: bool,
        sequences: Vec<Sequence>,
    },
    /// A heredoc with its text decoded, and where its `${...}` sequences
    /// are, as for a string.
    Heredoc {
        value: String,
        sequences: Vec<Sequence>,
    },
    /// A number, as written.
    Number(String),
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Comma,
    Equals,
    Colon,
    /// `=>`, between the key and the value of an object `for` expression.
    Arrow,
    /// `...`, after the value of an object `for` expression that groups.
    Ellipsis,
    /// The end of a line; it terminates attributes and blocks.
    Newline,
    /// The end of the input.
    Eof,
    /// Any other character, such as `(` or `+`; the parser decides what to
    /// say about it.
    Other(char),
}

impl TokenKind {
    /// Describes the token in words for "expected X, found Y" messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            TokenKind::Ident(name) => format!("identifier '{name}'"),
            TokenKind::Str { .. } => "string".to_string(),
            TokenKind::Heredoc { .. } => "heredoc".to_string(),
            TokenKind::Number(_) => "number".to_string(),
            TokenKind::LBrace => "'{'".to_string(),
            TokenKind::RBrace => "'}'".to_string(),
            TokenKind::LBracket => "'['".to_string(),
            TokenKind::RBracket => "']'".to_string(),
            TokenKind::Comma => "','".to_string(),
            TokenKind::Equals => "'='".to_string(),
            TokenKind::Colon => "':'".to_string(),
            TokenKind::Arrow => "'=>'".to_string(),
            TokenKind::Ellipsis => "'...'".to_string(),
            TokenKind::Newline => "newline".to_string(),
            TokenKind::Eof => "end of file".to_string(),
            TokenKind::Other(c) => format!("'{}'", c.escape_debug()),
        }
    }
}

/// Where a `${...}` interpolation or a `%{...}` directive sits in a decoded
/// string: its byte range in the value (from `$` or `%` to the closing `}`)
/// and the source position of its first character. Sequences of the native
/// syntax hold no escapes or newlines, so the text in the value is the text
/// in the source.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sequence {
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) pos: Pos,
    /// `%{...}` rather than `${...}`.
    pub(crate) directive: bool,
}

/// A token and where it starts and ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub(crate) kind: TokenKind,
    pub(crate) start: Pos,
    pub(crate) end: Pos,
}

/// Whether `c` can start an identifier.
pub(crate) fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

/// Whether `c` can continue an identifier.
pub(crate) fn is_ident_continue(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// The lexer state: the input, the byte offset of the next character, and
/// that character's line and column.
pub(crate) struct Lexer<'a> {
    src: &'a str,
    file: &'a str,
    offset: usize,
    line: usize,
    col: usize,
}

/// The context kept while skipping over a `${...}` sequence inside a
/// string: either the sequence itself, with its count of open inner braces,
/// or a string quoted inside it.
#[derive(Clone, Copy)]
enum SeqContext {
    Sequence { open_braces: usize },
    Quoted,
}

impl<'a> Lexer<'a> {
    /// Starts lexing `src`; a leading byte-order mark is skipped.
    pub(crate) fn new(src: &'a str, file: &'a str) -> Lexer<'a> {
        let offset = if src.starts_with('\u{feff}') { 3 } else { 0 };
        Lexer {
            src,
            file,
            offset,
            line: 1,
            col: 1,
        }
    }

    /// Starts lexing `src` as if it began at `pos` of the file: for the
    /// text of a `${...}` sequence, which lies on one line.
    pub(crate) fn at(src: &'a str, file: &'a str, pos: Pos) -> Lexer<'a> {
        Lexer {
            src,
            file,
            offset: 0,
            line: pos.line,
            col: pos.col,
        }
    }

    /// The position of the next character.
    pub(crate) fn pos(&self) -> Pos {
        Pos::new(self.line, self.col)
    }

    /// The remaining input.
    fn rest(&self) -> &'a str {
        self.src.get(self.offset..).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.rest().chars().nth(n)
    }

    /// Consumes one character, keeping the line and column up to date.
    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.offset += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    /// Consumes characters while `pred` holds.
    fn bump_while(&mut self, pred: impl Fn(char) -> bool) {
        while self.peek().is_some_and(&pred) {
            self.bump();
        }
    }

    fn error(&self, pos: Pos, message: impl Into<String>) -> Error {
        Error::new(self.file, pos, message)
    }

    /// Produces the next token, skipping spaces and comments.
    pub(crate) fn next_token(&mut self) -> Result<Token, Error> {
        loop {
            let start = self.pos();
            let Some(c) = self.peek() else {
                return Ok(Token {
                    kind: TokenKind::Eof,
                    start,
                    end: start,
                });
            };
            match c {
                ' ' | '\t' | '\r' => {
                    self.bump();
                }
                '#' => self.bump_while(|c| c != '\n'),
                '/' if self.peek_at(1) == Some('/') => self.bump_while(|c| c != '\n'),
                '/' if self.peek_at(1) == Some('*') => self.skip_block_comment(start)?,
                _ => {
                    let kind = self.lex_token(c, start)?;
                    return Ok(Token {
                        kind,
                        start,
                        end: self.pos(),
                    });
                }
            }
        }
    }

    /// Skips a `/* ... */` comment, which may span lines but does not nest.
    fn skip_block_comment(&mut self, start: Pos) -> Result<(), Error> {
        self.bump();
        self.bump();
        loop {
            match self.bump() {
                None => return Err(self.error(start, "unterminated block comment: expected '*/'")),
                Some('*') if self.peek() == Some('/') => {
                    self.bump();
                    return Ok(());
                }
                Some(_) => {}
            }
        }
    }

    /// Lexes one token that starts with `c`.
    fn lex_token(&mut self, c: char, start: Pos) -> Result<TokenKind, Error> {
        if c == '=' && self.peek_at(1) == Some('>') {
            self.bump();
            self.bump();
            return Ok(TokenKind::Arrow);
        }
        if c == '.' && self.peek_at(1) == Some('.') && self.peek_at(2) == Some('.') {
            self.bump();
            self.bump();
            self.bump();
            return Ok(TokenKind::Ellipsis);
        }
        let single = match c {
            '\n' => Some(TokenKind::Newline),
            '{' => Some(TokenKind::LBrace),
            '}' => Some(TokenKind::RBrace),
            '[' => Some(TokenKind::LBracket),
            ']' => Some(TokenKind::RBracket),
            ',' => Some(TokenKind::Comma),
            '=' => Some(TokenKind::Equals),
            ':' => Some(TokenKind::Colon),
            _ => None,
        };
        if let Some(kind) = single {
            self.bump();
            return Ok(kind);
        }
        let next_is_digit = self.peek_at(1).is_some_and(|c| c.is_ascii_digit());
        match c {
            '"' => self.lex_string(start),
            '<' if self.peek_at(1) == Some('<') => self.lex_heredoc(start),
            '-' if next_is_digit => self.lex_number(start),
            '0'..='9' => self.lex_number(start),
            c if is_ident_start(c) => {
                let begin = self.offset;
                self.bump_while(is_ident_continue);
                Ok(TokenKind::Ident(self.slice_from(begin).to_string()))
            }
            _ => {
                self.bump();
                Ok(TokenKind::Other(c))
            }
        }
    }

    /// The input from byte offset `begin` up to the current offset.
    fn slice_from(&self, begin: usize) -> &'a str {
        self.src.get(begin..self.offset).unwrap_or("")
    }

    /// Lexes a number: an optional `-`, digits, an optional fraction and an
    /// optional exponent.
    fn lex_number(&mut self, start: Pos) -> Result<TokenKind, Error> {
        let begin = self.offset;
        if self.peek() == Some('-') {
            self.bump();
        }
        self.bump_while(|c| c.is_ascii_digit());
        if self.peek() == Some('.') {
            if !self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
                self.bump();
                let text = self.slice_from(begin);
                return Err(self.error(
                    start,
                    format!("invalid number '{text}': expected digits after '.'"),
                ));
            }
            self.bump();
            self.bump_while(|c| c.is_ascii_digit());
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let exponent_follows = match self.peek_at(1) {
                Some('+' | '-') => self.peek_at(2).is_some_and(|c| c.is_ascii_digit()),
                Some(c) => c.is_ascii_digit(),
                None => false,
            };
            if exponent_follows {
                self.bump();
                self.bump();
                self.bump_while(|c| c.is_ascii_digit());
            }
        }
        // Catch `30s` or `1e`: a value that is not a number after all.
        if self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            self.bump_while(is_ident_continue);
            let text = self.slice_from(begin);
            return Err(self.error(
                start,
                format!(
                    "invalid number '{text}' (durations and other text need quotes: \"{text}\")"
                ),
            ));
        }
        Ok(TokenKind::Number(self.slice_from(begin).to_string()))
    }

    /// Lexes a quoted string that starts at `start`, decoding escapes and
    /// keeping template sequences as written.
    fn lex_string(&mut self, start: Pos) -> Result<TokenKind, Error> {
        self.bump();
        let mut value = String::new();
        let mut template = false;
        let mut sequences = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.error(
                    start,
                    "unterminated string: expected a closing '\"' before the end of the file",
                ));
            };
            match c {
                '\n' => {
                    return Err(self.error(
                        start,
                        "unterminated string: expected a closing '\"' before the end of the line",
                    ))
                }
                '"' => {
                    self.bump();
                    return Ok(TokenKind::Str {
                        value,
                        template,
                        sequences,
                    });
                }
                '\\' => self.lex_escape(&mut value, start)?,
                // `$${` and `%%{` are the escapes for a literal `${` and `%{`.
                '$' | '%' if self.peek_at(1) == Some(c) && self.peek_at(2) == Some('{') => {
                    self.bump();
                    self.bump();
                    self.bump();
                    value.push(c);
                    value.push('{');
                }
                '$' | '%' if self.peek_at(1) == Some('{') => {
                    template = true;
                    let (pos, begin) = (self.pos(), value.len());
                    self.skip_template_sequence(&mut value)?;
                    sequences.push(Sequence {
                        range: begin..value.len(),
                        pos,
                        directive: c == '%',
                    });
                }
                _ => {
                    self.bump();
                    value.push(c);
                }
            }
        }
    }

    /// Decodes one backslash escape into `out`.
    fn lex_escape(&mut self, out: &mut String, string_start: Pos) -> Result<(), Error> {
        let at = self.pos();
        self.bump();
        let decoded = match self.peek() {
            None | Some('\n') => {
                return Err(self.error(
                    string_start,
                    "unterminated string: expected a closing '\"' before the end of the line",
                ))
            }
            Some('n') => '\n',
            Some('t') => '\t',
            Some('r') => '\r',
            Some('"') => '"',
            Some('\\') => '\\',
            Some(letter @ ('u' | 'U')) => {
                self.bump();
                let digits = if letter == 'u' { 4 } else { 8 };
                let begin = self.offset;
                for _ in 0..digits {
                    if !self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                        break;
                    }
                    self.bump();
                }
                let hex = self.slice_from(begin);
                if hex.len() < digits {
                    return Err(self.error(
                        at,
                        format!(
                            "invalid escape sequence '\\{letter}{hex}': expected {digits} hexadecimal digits"
                        ),
                    ));
                }
                let scalar = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32);
                let Some(decoded) = scalar else {
                    return Err(self.error(
                        at,
                        format!(
                            "invalid escape sequence '\\{letter}{hex}': not a Unicode character"
                        ),
                    ));
                };
                out.push(decoded);
                return Ok(());
            }
            Some(other) => {
                return Err(self.error(
                    at,
                    format!(
                        "invalid escape sequence '\\{}' in string (valid escapes are \\n, \\t, \\r, \\\", \\\\, \\uXXXX and \\UXXXXXXXX)",
                        other.escape_debug()
                    ),
                ))
            }
        };
        self.bump();
        out.push(decoded);
        Ok(())
    }

    /// Copies a `${...}` or `%{...}` sequence into `out` as written. Strings
    /// quoted inside it may hold braces and further sequences, so an explicit
    /// stack (not recursion) tracks where the sequence really ends.
    fn skip_template_sequence(&mut self, out: &mut String) -> Result<(), Error> {
        let start = self.pos();
        let opener: String = self.rest().chars().take(2).collect();
        self.copy_chars(2, out);
        let mut stack = vec![SeqContext::Sequence { open_braces: 0 }];
        while let Some(context) = stack.last_mut() {
            let c = match self.peek() {
                Some(c) if c != '\n' => c,
                _ => {
                    return Err(self.error(
                        start,
                        format!("unterminated '{opener}' in string: expected '}}' before the end of the line"),
                    ))
                }
            };
            match context {
                SeqContext::Sequence { open_braces } => match c {
                    '{' => *open_braces += 1,
                    '}' if *open_braces == 0 => {
                        stack.pop();
                    }
                    '}' => *open_braces -= 1,
                    '"' => stack.push(SeqContext::Quoted),
                    _ => {}
                },
                SeqContext::Quoted => match c {
                    '"' => {
                        stack.pop();
                    }
                    // The backslash and the character it escapes are copied
                    // together, so an escaped quote does not end the string.
                    '\\' if self.peek_at(1) != Some('\n') => self.copy_chars(1, out),
                    '$' | '%' if self.peek_at(1) == Some(c) && self.peek_at(2) == Some('{') => {
                        self.copy_chars(2, out);
                    }
                    '$' | '%' if self.peek_at(1) == Some('{') => {
                        self.copy_chars(2, out);
                        stack.push(SeqContext::Sequence { open_braces: 0 });
                        continue;
                    }
                    _ => {}
                },
            }
            self.copy_chars(1, out);
        }
        Ok(())
    }

    /// Consumes up to `count` characters, appending them to `out`.
    fn copy_chars(&mut self, count: usize, out: &mut String) {
        for _ in 0..count {
            if let Some(c) = self.bump() {
                out.push(c);
            }
        }
    }

    /// Lexes a heredoc starting at `start` (the first `<`): `<<EOF` or
    /// `<<-EOF`, a newline, the lines of text, and a line holding only the
    /// delimiter (which may be indented, and followed by spaces or tabs, as
    /// HCL's own scanner allows).
    fn lex_heredoc(&mut self, start: Pos) -> Result<TokenKind, Error> {
        self.bump();
        self.bump();
        let strip_indent = self.peek() == Some('-');
        if strip_indent {
            self.bump();
        }
        if !self.peek().is_some_and(is_ident_start) {
            return Err(self.error(
                self.pos(),
                "expected a heredoc delimiter such as 'EOF' right after '<<'",
            ));
        }
        let begin = self.offset;
        self.bump_while(is_ident_continue);
        let delimiter = self.slice_from(begin);
        if self.peek() == Some('\r') && self.peek_at(1) == Some('\n') {
            self.bump();
        }
        if self.peek() != Some('\n') {
            return Err(self.error(
                self.pos(),
                format!("expected a newline right after the heredoc delimiter '{delimiter}'"),
            ));
        }
        self.bump();
        let unterminated = format!("unterminated heredoc: no line with the closing '{delimiter}'");
        let mut lines = Vec::new();
        loop {
            if self.peek().is_none() {
                return Err(self.error(start, unterminated));
            }
            let line_begin = self.offset;
            self.bump_while(|c| c != '\n');
            let line = self.slice_from(line_begin);
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.trim_matches([' ', '\t']) == delimiter {
                // The newline after the delimiter ends the attribute, so it
                // is left for the next token.
                break;
            }
            lines.push(line);
            if self.bump().is_none() {
                return Err(self.error(start, unterminated));
            }
        }
        let (value, sequences) = heredoc_text(&lines, strip_indent, start.line + 1);
        Ok(TokenKind::Heredoc { value, sequences })
    }
}

/// The text of a heredoc's lines (the first on line `first_line` of the
/// file), with the indentation of `<<-` stripped, `$${` and `%%{` decoded,
/// and the `${...}` and `%{...}` sequences located as [`Lexer::lex_string`]
/// does. The
/// indentation stripped is the smallest of the non-blank lines, in
/// characters; blank lines are kept as they are.
fn heredoc_text(lines: &[&str], strip_indent: bool, first_line: usize) -> (String, Vec<Sequence>) {
    let is_blank = |line: &str| line.chars().all(char::is_whitespace);
    let indent = match strip_indent {
        true => lines
            .iter()
            .filter(|line| !is_blank(line))
            .map(|line| line.chars().take_while(|c| c.is_whitespace()).count())
            .min()
            .unwrap_or(0),
        false => 0,
    };
    let mut text = String::new();
    let mut sequences = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let cut = if is_blank(line) { 0 } else { indent };
        let chars: Vec<char> = line.chars().skip(cut).collect();
        let mut k = 0;
        while k < chars.len() {
            let c = chars[k];
            let next = |n: usize| chars.get(k + n).copied();
            if (c == '$' || c == '%') && next(1) == Some(c) && next(2) == Some('{') {
                text.push(c);
                text.push('{');
                k += 3;
                continue;
            }
            if (c == '$' || c == '%') && next(1) == Some('{') {
                if let Some(end) = sequence_end(&chars, k + 2) {
                    let begin = text.len();
                    text.extend(&chars[k..=end]);
                    sequences.push(Sequence {
                        range: begin..text.len(),
                        pos: Pos::new(first_line + i, cut + k + 1),
                        directive: c == '%',
                    });
                    k = end + 1;
                    continue;
                }
            }
            text.push(c);
            k += 1;
        }
        text.push('\n');
    }
    (text, sequences)
}

/// The index of the `}` that closes a sequence whose text starts at
/// `from`, skipping braces in quoted strings; `None` if the line ends
/// first.
pub(crate) fn sequence_end(chars: &[char], from: usize) -> Option<usize> {
    let (mut depth, mut quoted, mut k) = (0usize, false, from);
    while k < chars.len() {
        match (chars[k], quoted) {
            ('\\', true) => k += 1,
            ('"', _) => quoted = !quoted,
            ('{', false) => depth += 1,
            ('}', false) if depth == 0 => return Some(k),
            ('}', false) => depth -= 1,
            _ => {}
        }
        k += 1;
    }
    None
}
