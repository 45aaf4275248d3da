//! Regular expressions with the syntax and the matches of Go's `regexp`
//! (RE2's syntax), for the HCL functions `regex`, `regexall` and
//! `regex_replace` and the template functions `regexMatch` and
//! `regexReplaceAll`, which Nomad evaluates with Go's package.
//!
//! The subset is what job files use: literals and escapes (octal `\141`
//! too), `.`, classes (`[a-z]`, `[^...]`, `[[:alpha:]]`, `\d \w \s` and
//! their negations),
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
//! Finding every match can still be quadratic when each match looks ahead
//! to the end of the text before it settles, so those searches have a
//! budget of VM steps linear in the text and the program
//! ([`Regex::step_limit`]) and stop with [`TooMuchWork`] past it.
//!
//! It uses only the standard library and csi-agent's sort (the `order`
//! crate).

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

/// A search for every match (or every replacement) that would take more
/// steps of the VM than [`Regex::step_limit`] allows for its text: with a
/// pattern whose each match must look ahead to the end of the text
/// (`a(.*z)?` over many `a`s), finding all matches takes time quadratic in
/// the text, though each one alone is linear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooMuchWork {
    pub limit: u64,
}

impl fmt::Display for TooMuchWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "finding every match would take more than {} steps of the matcher over this text (each match of this pattern looks ahead to the end of the text); match a smaller text or a pattern that settles each match sooner",
            self.limit
        )
    }
}

impl std::error::Error for TooMuchWork {}

/// The longest text [`Regex::replace_all`] builds: each match may expand
/// into a replacement far longer than itself, so the result is bounded
/// apart from the text.
pub const MAX_REPLACED: usize = 16 << 20;

/// Why [`Regex::replace_all`] gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceError {
    TooMuchWork(TooMuchWork),
    /// The result would exceed [`MAX_REPLACED`] bytes.
    TooLong,
}

impl fmt::Display for ReplaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplaceError::TooMuchWork(e) => e.fmt(f),
            ReplaceError::TooLong => write!(
                f,
                "the replaced text would exceed {} MiB (the replacement size limit)",
                MAX_REPLACED >> 20
            ),
        }
    }
}

impl std::error::Error for ReplaceError {}

/// The steps a search for every match may take whatever its text, and per
/// character of the text and instruction of the program: 8 times what a
/// search that visits each character once with every thread alive takes,
/// so that only a search whose total is quadratic in the text runs out.
const BASE_STEPS: u64 = 1_000_000;
const STEPS_PER_CHAR_AND_INSTRUCTION: u64 = 8;

/// A compiled regular expression.
#[derive(Debug, Clone)]
pub struct Regex {
    program: vm::Program,
    /// The names of the groups by index, 0 the whole match (unnamed).
    names: Vec<Option<String>>,
}

/// A budget a single match never runs out of: it takes time linear in the
/// text.
fn unbounded() -> vm::Budget {
    vm::Budget {
        taken: 0,
        limit: u64::MAX,
    }
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
        self.program.find_at(text, 0, &mut unbounded()).is_some()
    }

    /// The first match in `text`, leftmost-first as Go's.
    pub fn captures(&self, text: &str) -> Option<Captures> {
        self.captures_at(text, 0, &mut unbounded())
    }

    /// The steps a search for every match in `text` may take: linear in the
    /// text and in the program.
    pub fn step_limit(&self, text: &str) -> u64 {
        let size = (text.len() as u64 + 1).saturating_mul(self.program.len() as u64);
        BASE_STEPS.saturating_add(size.saturating_mul(STEPS_PER_CHAR_AND_INSTRUCTION))
    }

    fn captures_at(&self, text: &str, start: usize, budget: &mut vm::Budget) -> Option<Captures> {
        let slots = self.program.find_at(text, start, budget)?;
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
    /// `FindAll`: an empty match right after another is skipped. Refused
    /// past [`Regex::step_limit`] steps.
    pub fn captures_all(&self, text: &str) -> Result<Vec<Captures>, TooMuchWork> {
        self.captures_all_within(text, self.step_limit(text))
            .map(|(all, _)| all)
    }

    /// [`Regex::captures_all`] within `limit` steps, with the steps taken.
    fn captures_all_within(
        &self,
        text: &str,
        limit: u64,
    ) -> Result<(Vec<Captures>, u64), TooMuchWork> {
        let mut budget = vm::Budget { taken: 0, limit };
        let mut out = Vec::new();
        let mut pos = 0;
        let mut previous_end = None;
        while pos <= text.len() {
            let Some(found) = self.captures_at(text, pos, &mut budget) else {
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
        match budget.exhausted() {
            true => Err(TooMuchWork { limit }),
            false => Ok((out, budget.taken)),
        }
    }

    /// `text` with every match replaced by `template` expanded as Go's
    /// `ReplaceAllString` does: `$1`, `${1}`, `$name`, `${name}` for a
    /// group, `$$` for a `$`. Refused past [`Regex::step_limit`] steps or
    /// [`MAX_REPLACED`] bytes.
    pub fn replace_all(&self, text: &str, template: &str) -> Result<String, ReplaceError> {
        let limit = self.step_limit(text);
        let mut budget = vm::Budget { taken: 0, limit };
        let mut out = String::new();
        let mut last_end = 0;
        let mut search = 0;
        while search <= text.len() {
            let Some(found) = self.captures_at(text, search, &mut budget) else {
                break;
            };
            let (from, to) = found[0].unwrap_or((search, search));
            out.push_str(&text[last_end..from]);
            // An empty match right after another is not replaced again.
            if to > last_end || from == 0 {
                self.expand(template, text, &found, &mut out)?;
            }
            last_end = to;
            let width = text[search..].chars().next().map_or(1, char::len_utf8);
            search = if search + width > to {
                search + width
            } else {
                to
            };
        }
        if budget.exhausted() {
            return Err(ReplaceError::TooMuchWork(TooMuchWork { limit }));
        }
        if last_end < text.len() {
            out.push_str(&text[last_end..]);
        }
        if out.len() > MAX_REPLACED {
            return Err(ReplaceError::TooLong);
        }
        Ok(out)
    }

    /// Appends `template` to `out` with its `$` references to the groups of
    /// `found` replaced, as Go's `Expand`: a name is the longest run of
    /// letters, digits and `_` (so `$1x` is the group named `1x`), an
    /// unknown group or one that took no part is empty, and a `$` that
    /// starts no valid reference is kept.
    /// Stops at [`MAX_REPLACED`] bytes: one match's expansion alone may
    /// repeat a long group many times.
    fn expand(
        &self,
        template: &str,
        text: &str,
        found: &Captures,
        out: &mut String,
    ) -> Result<(), ReplaceError> {
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
                if out.len() + (to - from) > MAX_REPLACED {
                    return Err(ReplaceError::TooLong);
                }
                out.push_str(&text[*from..*to]);
            }
        }
        if out.len() + rest.len() > MAX_REPLACED {
            return Err(ReplaceError::TooLong);
        }
        out.push_str(rest);
        Ok(())
    }
}
