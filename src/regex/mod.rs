//! Regular expressions with the syntax and the matches of Go's `regexp`
//! (RE2's syntax), for the HCL functions `regex`, `regexall` and
//! `regex_replace` and the template functions `regexMatch` and
//! `regexReplaceAll`, which Nomad evaluates with Go's package.
//!
//! The subset is what job files use: literals and escapes, `.`, classes
//! (`[a-z]`, `[^...]`, `[[:alpha:]]`, `\d \w \s` and their negations),
//! anchors (`^ $ \A \z \b \B`), groups (capturing, `(?:...)`,
//! `(?P<name>...)`), alternation, repetition (`* + ? {n} {n,} {n,m}` and
//! their lazy forms) and the flags `i m s U`. Unicode classes (`\pL`) and
//! `\Q...\E` are refused with an error naming their position.
//!
//! A pattern is parsed (`parse.rs`) and compiled to a program for a Pike
//! VM (`vm.rs`), which runs every alternative in lockstep: a match takes
//! time linear in the text for a given pattern, with no backtracking, so
//! no pattern (`(a*)*b`) can make a match take exponential time. The
//! pattern's size is bounded ([`MAX_PATTERN`] characters, and its program
//! [`vm::MAX_PROGRAM`] instructions), as is the depth of its groups.
//!
//! A ground module: it uses nothing else of the crate.

mod parse;
mod vm;

#[cfg(test)]
mod tests;

use std::fmt;

/// The longest pattern accepted, in characters.
pub const MAX_PATTERN: usize = 10_000;

/// A pattern that does not compile: where (the 1-based position of a
/// character in the pattern) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub position: usize,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.position == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "at character {}: {}", self.position, self.message)
        }
    }
}

impl std::error::Error for Error {}

/// A compiled regular expression.
#[derive(Debug, Clone)]
pub struct Regex {
    program: vm::Program,
    /// The names of the groups by index, 0 the whole match (unnamed).
    names: Vec<Option<String>>,
}

/// The spans of a match and of its groups, as byte ranges of the text;
/// `None` for a group that took no part in it.
pub type Captures = Vec<Option<(usize, usize)>>;

impl Regex {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Result<Regex, Error> {
        if pattern.chars().count() > MAX_PATTERN {
            return Err(Error {
                position: 0,
                message: format!("the pattern is longer than {MAX_PATTERN} characters"),
            });
        }
        let parsed = parse::parse(pattern)?;
        let program = vm::compile(&parsed.node, parsed.names.len())?;
        Ok(Regex {
            program,
            names: parsed.names,
        })
    }

    /// The names of the groups, 0 the whole match: `None` for an unnamed
    /// one.
    pub fn group_names(&self) -> &[Option<String>] {
        &self.names
    }

    /// Whether the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        self.program.find_at(text, 0).is_some()
    }

    /// The first match in `text`, leftmost-first as Go's.
    pub fn captures(&self, text: &str) -> Option<Captures> {
        self.captures_at(text, 0)
    }

    fn captures_at(&self, text: &str, start: usize) -> Option<Captures> {
        let slots = self.program.find_at(text, start)?;
        Some(
            slots
                .chunks(2)
                .map(|pair| match pair {
                    [Some(from), Some(to)] => Some((*from, *to)),
                    _ => None,
                })
                .collect(),
        )
    }

    /// Every match in `text` that does not overlap the one before, as Go's
    /// `FindAll`: an empty match right after another is skipped.
    pub fn captures_all(&self, text: &str) -> Vec<Captures> {
        let mut out = Vec::new();
        let mut pos = 0;
        let mut previous_end = None;
        while pos <= text.len() {
            let Some(found) = self.captures_at(text, pos) else {
                break;
            };
            let (from, to) = found[0].unwrap_or((pos, pos));
            let accept = !(to == from && previous_end == Some(from));
            pos = if to == pos {
                // An empty match: move on one character.
                pos + text[pos..].chars().next().map_or(1, char::len_utf8)
            } else {
                to
            };
            previous_end = Some(to);
            if accept {
                out.push(found);
            }
        }
        out
    }

    /// `text` with every match replaced by `template` expanded as Go's
    /// `ReplaceAllString` does: `$1`, `${1}`, `$name`, `${name}` for a
    /// group, `$$` for a `$`.
    pub fn replace_all(&self, text: &str, template: &str) -> String {
        let mut out = String::new();
        let mut last_end = 0;
        let mut search = 0;
        while search <= text.len() {
            let Some(found) = self.captures_at(text, search) else {
                break;
            };
            let (from, to) = found[0].unwrap_or((search, search));
            out.push_str(&text[last_end..from]);
            // An empty match right after another is not replaced again.
            if to > last_end || from == 0 {
                self.expand(template, text, &found, &mut out);
            }
            last_end = to;
            let width = text[search..].chars().next().map_or(1, char::len_utf8);
            search = if search + width > to {
                search + width
            } else {
                to
            };
        }
        if last_end < text.len() {
            out.push_str(&text[last_end..]);
        }
        out
    }

    /// Appends `template` to `out` with its `$` references to the groups of
    /// `found` replaced, as Go's `Expand`: a name is the longest run of
    /// letters, digits and `_` (so `$1x` is the group named `1x`), an
    /// unknown group or one that took no part is empty, and a `$` that
    /// starts no valid reference is kept.
    fn expand(&self, template: &str, text: &str, found: &Captures, out: &mut String) {
        let mut rest = template;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            if let Some(after) = rest.strip_prefix('$') {
                out.push('$');
                rest = after;
                continue;
            }
            let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
            let (name, after) = if let Some(braced) = rest.strip_prefix('{') {
                match braced.find('}') {
                    Some(end) if end > 0 && braced[..end].chars().all(is_name) => {
                        (&braced[..end], &braced[end + 1..])
                    }
                    _ => ("", rest),
                }
            } else {
                let end = rest.find(|c: char| !is_name(c)).unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            };
            if name.is_empty() {
                out.push('$');
                continue;
            }
            rest = after;
            let index = match name.parse::<usize>() {
                Ok(number) => Some(number),
                Err(_) => self.names.iter().position(|n| n.as_deref() == Some(name)),
            };
            if let Some(Some((from, to))) = index.and_then(|i| found.get(i)) {
                out.push_str(&text[*from..*to]);
            }
        }
        out.push_str(rest);
    }
}
