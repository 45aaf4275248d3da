//! Positions in the source text, which every token, node and error
//! carries: a `line:col` [`Pos`] and the [`Span`] between two of them.

use std::fmt;

/// A position in the source text: a 1-based line and a 1-based column, where
/// the column counts characters (not bytes) from the start of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    /// The line number, starting at 1.
    pub line: usize,
    /// The column in characters, starting at 1.
    pub col: usize,
}

impl Pos {
    /// Builds a position from a line and a column.
    pub const fn new(line: usize, col: usize) -> Pos {
        Pos { line, col }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// The extent of a node: where it starts, and the position just after its
/// last character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    /// The position of the node's first character.
    pub start: Pos,
    /// The position just past the node's last character.
    pub end: Pos,
}

impl Span {
    /// Builds a span from its two ends.
    pub const fn new(start: Pos, end: Pos) -> Span {
        Span { start, end }
    }
}
