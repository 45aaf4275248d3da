//! The pattern's syntax, RE2's as Go's `regexp` reads it, into a tree:
//! literals and escapes, `.`, classes (`[a-z]`, `[^...]`, `[[:alpha:]]`,
//! `\d \w \s` and their negations), anchors (`^ $ \A \z \b \B`), groups
//! (capturing, `(?:...)`, `(?P<name>...)` and `(?<name>...)`), alternation,
//! repetition (`* + ? {n} {n,} {n,m}` and their lazy forms) and the flags
//! `i`, `m`, `s` and `U` (`(?i)`, `(?i:...)`, `(?-i)`).
//!
//! Groups nest at most [`MAX_NESTING`] deep and a count at most
//! [`MAX_REPEAT`], as in Go, so no pattern can exhaust the stack.

use super::Error;

/// How deeply groups may nest.
pub(super) const MAX_NESTING: usize = 100;

/// The largest count of `{n,m}`, as in Go.
pub(super) const MAX_REPEAT: u32 = 1000;

/// The tree of a pattern.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Empty,
    /// One character; `fold` when it matches either case.
    Char {
        c: char,
        fold: bool,
    },
    /// A set of characters.
    Class(Class),
    /// `.`; `newline` when it matches `\n` too (`(?s)`).
    Any {
        newline: bool,
    },
    Assert(Assertion),
    /// A capturing group (numbered from 1) or, with `None`, a plain one.
    Group {
        index: Option<usize>,
        node: Box<Node>,
    },
    Concat(Vec<Node>),
    Alternate(Vec<Node>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
        greedy: bool,
    },
}

/// What a position must be, without consuming a character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Assertion {
    /// `^` under `(?m)`: the start of the text or of a line.
    LineStart,
    /// `$` under `(?m)`: the end of the text or of a line.
    LineEnd,
    /// `^` and `\A`.
    TextStart,
    /// `$` and `\z`.
    TextEnd,
    /// `\b`.
    WordBoundary,
    /// `\B`.
    NotWordBoundary,
}

/// A set of characters: ranges, maybe negated, maybe matching either case.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Class {
    pub(crate) ranges: Vec<(char, char)>,
    pub(crate) negated: bool,
    pub(crate) fold: bool,
}

impl Class {
    /// Whether `c` is in the set.
    pub(crate) fn matches(&self, c: char) -> bool {
        let within = |c: char| self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
        let found = within(c) || (self.fold && other_cases(c).any(within));
        found != self.negated
    }
}

/// The other cases of `c`, for `(?i)`: its lowercase and uppercase forms
/// where they are one character.
pub(crate) fn other_cases(c: char) -> impl Iterator<Item = char> {
    let lower = single(c.to_lowercase());
    let upper = single(c.to_uppercase());
    lower.into_iter().chain(upper).filter(move |&o| o != c)
}

/// The one character of a case mapping, if it is one.
fn single(mut chars: impl Iterator<Item = char>) -> Option<char> {
    let first = chars.next();
    first.filter(|_| chars.next().is_none())
}

/// The flags in force: `(?i)`, `(?m)`, `(?s)`, `(?U)`.
#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    fold: bool,
    multiline: bool,
    dot_newline: bool,
    ungreedy: bool,
}

/// What the parser hands back: the tree, and the names of the groups by
/// index (0 the whole match, unnamed).
pub(super) struct Parsed {
    pub(super) node: Node,
    pub(super) names: Vec<Option<String>>,
}

/// Parses `pattern`.
pub(super) fn parse(pattern: &str) -> Result<Parsed, Error> {
    let mut parser = Parser {
        chars: pattern.chars().collect(),
        at: 0,
        flags: Flags::default(),
        names: vec![None],
        depth: 0,
    };
    let node = parser.alternation()?;
    if parser.at < parser.chars.len() {
        // Only an unopened ')' stops the top level early.
        return Err(parser.error(parser.at, "unexpected ')': no group is open"));
    }
    Ok(Parsed {
        node,
        names: parser.names,
    })
}

struct Parser {
    chars: Vec<char>,
    at: usize,
    flags: Flags,
    names: Vec<Option<String>>,
    depth: usize,
}

impl Parser {
    fn error(&self, at: usize, message: impl Into<String>) -> Error {
        Error {
            position: at + 1,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// `a|b|c`, up to the end or a `)`, which is left.
    fn alternation(&mut self) -> Result<Node, Error> {
        let mut branches = vec![self.concat()?];
        while self.eat('|') {
            branches.push(self.concat()?);
        }
        Ok(if branches.len() == 1 {
            branches.pop().unwrap_or(Node::Empty)
        } else {
            Node::Alternate(branches)
        })
    }

    /// Atoms with their repetitions, up to `|`, `)` or the end.
    fn concat(&mut self) -> Result<Node, Error> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let Some(atom) = self.atom()? else { continue };
            let node = self.repetitions(atom)?;
            items.push(node);
        }
        Ok(match items.len() {
            0 => Node::Empty,
            1 => items.pop().unwrap_or(Node::Empty),
            _ => Node::Concat(items),
        })
    }

    /// The repetition operator after an atom, if any: at most one, as Go
    /// refuses `a**`.
    fn repetitions(&mut self, atom: Node) -> Result<Node, Error> {
        let Some((min, max)) = self.repeat_op()? else {
            return Ok(atom);
        };
        let lazy = self.eat('?');
        if matches!(self.peek(), Some('*' | '+' | '?'))
            || (self.peek() == Some('{') && self.counted_ahead())
        {
            return Err(self.error(self.at, "a repetition operator cannot follow another"));
        }
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
            greedy: lazy == self.flags.ungreedy,
        })
    }

    /// `*`, `+`, `?` or a `{...}` count, consumed; `None` if none is next
    /// (a `{` that is not a count is a literal, as in Go).
    fn repeat_op(&mut self) -> Result<Option<(u32, Option<u32>)>, Error> {
        let op = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') if self.counted_ahead() => return self.count().map(Some),
            _ => return Ok(None),
        };
        self.at += 1;
        Ok(Some(op))
    }

    /// Whether a `{n}`, `{n,}` or `{n,m}` starts here.
    fn counted_ahead(&self) -> bool {
        let rest = &self.chars[self.at + 1..];
        let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return false;
        }
        match rest.get(digits) {
            Some('}') => true,
            Some(',') => {
                let more = rest[digits + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count();
                rest.get(digits + 1 + more) == Some(&'}')
            }
            _ => false,
        }
    }

    /// Reads a `{n}`, `{n,}` or `{n,m}` that [`Parser::counted_ahead`] saw.
    fn count(&mut self) -> Result<(u32, Option<u32>), Error> {
        let open = self.at;
        self.at += 1;
        let min = self.number(open)?;
        let max = if self.eat(',') {
            if self.peek() == Some('}') {
                None
            } else {
                Some(self.number(open)?)
            }
        } else {
            Some(min)
        };
        self.at += 1; // '}'
        if max.is_some_and(|max| max < min) {
            return Err(self.error(open, "the repetition count's maximum is below its minimum"));
        }
        Ok((min, max))
    }

    fn number(&mut self, open: usize) -> Result<u32, Error> {
        let mut value: u32 = 0;
        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
            value = value.saturating_mul(10).saturating_add(d);
            self.at += 1;
        }
        if value > MAX_REPEAT {
            return Err(self.error(open, format!("a repetition count is at most {MAX_REPEAT}")));
        }
        Ok(value)
    }

    /// One atom; `None` for a flag group such as `(?i)`, which matches
    /// nothing.
    fn atom(&mut self) -> Result<Option<Node>, Error> {
        let at = self.at;
        let Some(c) = self.peek() else {
            return Ok(Some(Node::Empty));
        };
        self.at += 1;
        let node = match c {
            '(' => return self.group(at),
            '[' => Node::Class(self.class(at)?),
            '.' => Node::Any {
                newline: self.flags.dot_newline,
            },
            '^' => Node::Assert(if self.flags.multiline {
                Assertion::LineStart
            } else {
                Assertion::TextStart
            }),
            '$' => Node::Assert(if self.flags.multiline {
                Assertion::LineEnd
            } else {
                Assertion::TextEnd
            }),
            '\\' => self.escape(at)?,
            '*' | '+' | '?' => {
                return Err(self.error(at, "the repetition operator has nothing to repeat"))
            }
            c => Node::Char {
                c,
                fold: self.flags.fold,
            },
        };
        Ok(Some(node))
    }

    /// A group opened by the `(` at `open`: capturing, named, plain, or
    /// a flag setting.
    fn group(&mut self, open: usize) -> Result<Option<Node>, Error> {
        if self.depth >= MAX_NESTING {
            return Err(self.error(
                open,
                format!("groups nest deeper than {MAX_NESTING} levels"),
            ));
        }
        let mut index = None;
        let saved = self.flags;
        if self.eat('?') {
            if self.peek() == Some('P') || self.peek() == Some('<') {
                self.eat('P');
                if !self.eat('<') {
                    return Err(self.error(open, "expected '<' after '(?P'"));
                }
                let name = self.group_name(open)?;
                self.names.push(Some(name));
                index = Some(self.names.len() - 1);
            } else if self.flag_group(open)? {
                // `(?flags)`: they hold to the end of the enclosing group.
                return Ok(None);
            }
        } else {
            self.names.push(None);
            index = Some(self.names.len() - 1);
        }
        self.depth += 1;
        let node = self.alternation()?;
        self.depth -= 1;
        if !self.eat(')') {
            return Err(self.error(open, "the group opened here is not closed: missing ')'"));
        }
        self.flags = saved;
        Ok(Some(Node::Group {
            index,
            node: Box::new(node),
        }))
    }

    /// The name of `(?P<name>`, up to `>`.
    fn group_name(&mut self, open: usize) -> Result<String, Error> {
        let mut name = String::new();
        loop {
            match self.peek() {
                Some('>') => {
                    self.at += 1;
                    break;
                }
                Some(c) if c.is_ascii_alphanumeric() || c == '_' => {
                    name.push(c);
                    self.at += 1;
                }
                _ => {
                    return Err(self.error(
                        open,
                        "a group name is letters, digits and '_', closed by '>'",
                    ))
                }
            }
        }
        if name.is_empty() {
            return Err(self.error(open, "the group name is empty"));
        }
        if self.names.iter().flatten().any(|n| *n == name) {
            return Err(self.error(open, format!("the group name {name:?} is used twice")));
        }
        Ok(name)
    }

    /// The flags of `(?flags)` or `(?flags:`, after `(?`; true for the
    /// first form, which is done, false for the second, whose group
    /// follows.
    fn flag_group(&mut self, open: usize) -> Result<bool, Error> {
        let mut negate = false;
        let mut any = false;
        loop {
            let Some(c) = self.peek() else {
                return Err(self.error(open, "the flag group is not closed: missing ')'"));
            };
            self.at += 1;
            let flag = match c {
                'i' => &mut self.flags.fold,
                'm' => &mut self.flags.multiline,
                's' => &mut self.flags.dot_newline,
                'U' => &mut self.flags.ungreedy,
                '-' if !negate => {
                    negate = true;
                    continue;
                }
                ')' | ':' if any || c == ':' => return Ok(c == ')'),
                _ => {
                    return Err(self.error(
                        self.at - 1,
                        format!("unknown flag {c:?}: the flags are i, m, s and U"),
                    ))
                }
            };
            *flag = !negate;
            any = true;
        }
    }

    /// An escape after the `\` at `at`, outside a class.
    fn escape(&mut self, at: usize) -> Result<Node, Error> {
        let Some(c) = self.peek() else {
            return Err(self.error(at, "the pattern ends with '\\'"));
        };
        let assertion = match c {
            'A' => Some(Assertion::TextStart),
            'z' => Some(Assertion::TextEnd),
            'b' => Some(Assertion::WordBoundary),
            'B' => Some(Assertion::NotWordBoundary),
            _ => None,
        };
        if let Some(assertion) = assertion {
            self.at += 1;
            return Ok(Node::Assert(assertion));
        }
        if let Some(class) = self.perl_class(c) {
            self.at += 1;
            return Ok(Node::Class(class));
        }
        let c = self.escaped_char(at)?;
        Ok(Node::Char {
            c,
            fold: self.flags.fold,
        })
    }

    /// `\d \D \w \W \s \S` as classes, ASCII as in Go.
    fn perl_class(&self, c: char) -> Option<Class> {
        let ranges: &[(char, char)] = match c.to_ascii_lowercase() {
            'd' => &[('0', '9')],
            'w' => &[('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')],
            's' => &[('\t', '\n'), ('\x0c', '\r'), (' ', ' ')],
            _ => return None,
        };
        Some(Class {
            ranges: ranges.to_vec(),
            negated: c.is_ascii_uppercase(),
            fold: false,
        })
    }

    /// The character an escape stands for (after its `\`, at `at`):
    /// punctuation as itself, `\t \n \r \f \v \a`, `\xHH`, `\x{H...}`
    /// and octal codes as Go reads them: `\0` and up to two more octal
    /// digits, or a digit 1 to 7 followed by one or two (a lone `\1` would
    /// be a backreference, which RE2 has not).
    fn escaped_char(&mut self, at: usize) -> Result<char, Error> {
        let Some(c) = self.peek() else {
            return Err(self.error(at, "the pattern ends with '\\'"));
        };
        self.at += 1;
        Ok(match c {
            'a' => '\x07',
            'f' => '\x0c',
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            'v' => '\x0b',
            'x' => return self.hex(at),
            '0'..='7' if c == '0' || self.peek().is_some_and(|d| d.is_digit(8)) => {
                let mut code = c.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    let Some(digit) = self.peek().and_then(|d| d.to_digit(8)) else {
                        break;
                    };
                    code = code * 8 + digit;
                    self.at += 1;
                }
                char::from_u32(code).unwrap_or('\0')
            }
            c if c.is_ascii_punctuation() => c,
            c => return Err(self.error(at, format!("unknown or unsupported escape '\\{c}'"))),
        })
    }

    /// `\xHH` or `\x{H...}`, after the `x`.
    fn hex(&mut self, at: usize) -> Result<char, Error> {
        let digits: String = if self.eat('{') {
            let digits: String = self.chars[self.at..]
                .iter()
                .take_while(|c| **c != '}')
                .collect();
            self.at += digits.chars().count();
            if !self.eat('}') {
                return Err(self.error(at, "'\\x{' is not closed by '}'"));
            }
            digits
        } else {
            let digits: String = self.chars[self.at..].iter().take(2).collect();
            self.at += digits.chars().count();
            digits
        };
        u32::from_str_radix(&digits, 16)
            .ok()
            .filter(|_| !digits.is_empty() && digits.len() <= 8)
            .and_then(char::from_u32)
            .ok_or_else(|| self.error(at, "invalid hexadecimal escape"))
    }

    /// A class opened by the `[` at `open`.
    fn class(&mut self, open: usize) -> Result<Class, Error> {
        let negated = self.eat('^');
        let mut ranges = Vec::new();
        let mut first = true;
        loop {
            let at = self.at;
            let Some(c) = self.peek() else {
                return Err(self.error(open, "the class opened here is not closed: missing ']'"));
            };
            if c == ']' && !first {
                self.at += 1;
                break;
            }
            first = false;
            if c == '[' && self.chars.get(self.at + 1) == Some(&':') {
                ranges.extend(self.posix_class(at)?);
                continue;
            }
            self.at += 1;
            let lo = if c == '\\' {
                if let Some(class) = self.peek().and_then(|e| self.perl_class(e)) {
                    self.at += 1;
                    ranges.extend(class_ranges(&class));
                    continue;
                }
                self.escaped_char(at)?
            } else {
                c
            };
            let is_range =
                self.peek() == Some('-') && self.chars.get(self.at + 1).is_some_and(|&n| n != ']');
            if !is_range {
                ranges.push((lo, lo));
                continue;
            }
            self.at += 1;
            let hi_at = self.at;
            let hi = match self.peek() {
                Some('\\') => {
                    self.at += 1;
                    self.escaped_char(hi_at)?
                }
                Some(h) => {
                    self.at += 1;
                    h
                }
                None => {
                    return Err(self.error(open, "the class opened here is not closed: missing ']'"))
                }
            };
            if hi < lo {
                return Err(self.error(at, format!("the range {lo}-{hi} is backwards")));
            }
            ranges.push((lo, hi));
        }
        Ok(Class {
            ranges,
            negated,
            fold: self.flags.fold,
        })
    }

    /// `[:alpha:]` and the other ASCII classes of POSIX, inside a class.
    fn posix_class(&mut self, at: usize) -> Result<Vec<(char, char)>, Error> {
        let rest: String = self.chars[self.at..].iter().take(12).collect();
        // The `:]` that closes it comes after the `[:` (in `[:]` it does not).
        let Some(end) = rest.get(2..).and_then(|r| r.find(":]")).map(|i| i + 2) else {
            return Err(self.error(at, "'[:' is not closed by ':]'"));
        };
        let name = &rest[2..end];
        let (negated, name) = match name.strip_prefix('^') {
            Some(name) => (true, name),
            None => (false, name),
        };
        let ranges: &[(char, char)] = match name {
            "alnum" => &[('0', '9'), ('A', 'Z'), ('a', 'z')],
            "alpha" => &[('A', 'Z'), ('a', 'z')],
            "ascii" => &[('\0', '\x7f')],
            "blank" => &[('\t', '\t'), (' ', ' ')],
            "cntrl" => &[('\0', '\x1f'), ('\x7f', '\x7f')],
            "digit" => &[('0', '9')],
            "graph" => &[('!', '~')],
            "print" => &[(' ', '~')],
            "lower" => &[('a', 'z')],
            "punct" => &[('!', '/'), (':', '@'), ('[', '`'), ('{', '~')],
            "space" => &[('\t', '\r'), (' ', ' ')],
            "upper" => &[('A', 'Z')],
            "word" => &[('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')],
            "xdigit" => &[('0', '9'), ('A', 'F'), ('a', 'f')],
            other => return Err(self.error(at, format!("unknown class [:{other}:]"))),
        };
        self.at += end + 2;
        let class = Class {
            ranges: ranges.to_vec(),
            negated,
            fold: false,
        };
        Ok(class_ranges(&class))
    }
}

/// The ranges a class covers, its negation worked out.
fn class_ranges(class: &Class) -> Vec<(char, char)> {
    if !class.negated {
        return class.ranges.clone();
    }
    let mut ranges = class.ranges.clone();
    order::sort(&mut ranges);
    let mut out = Vec::new();
    // The first character not yet covered, `None` past the last.
    let mut next = Some('\0');
    for (lo, hi) in ranges {
        if let (Some(from), Some(to)) = (next, before(lo)) {
            if from <= to {
                out.push((from, to));
            }
        }
        next = match (next, after(hi)) {
            (Some(from), Some(past)) => Some(from.max(past)),
            _ => None,
        };
    }
    if let Some(from) = next {
        out.push((from, char::MAX));
    }
    out
}

/// The character before `c`, across the gap of surrogates.
fn before(c: char) -> Option<char> {
    match c as u32 {
        0 => None,
        0xE000 => Some('\u{D7FF}'),
        n => char::from_u32(n - 1),
    }
}

/// The character after `c`, across the gap of surrogates.
fn after(c: char) -> Option<char> {
    match c as u32 {
        0xD7FF => Some('\u{E000}'),
        n => char::from_u32(n + 1),
    }
}
