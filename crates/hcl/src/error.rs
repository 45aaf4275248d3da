//! The error type shared by the lexer, both parsers, the evaluator and the
//! decoders that consume the tree: a message at a position in a file.

use std::fmt;

use crate::pos::Pos;

/// A syntax error, or a decoding error reported against a position in a file.
///
/// It displays as `{file}:{line}:{col}: {message}`, the form compilers use,
/// so that editors can jump to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The file name given to [`parse`](crate::parse).
    pub file: String,
    /// Where the problem was found.
    pub pos: Pos,
    /// What was expected and what was found, in words.
    pub message: String,
}

impl Error {
    /// Builds an error; the decoder uses this for its own messages too.
    pub fn new(file: &str, pos: Pos, message: impl Into<String>) -> Error {
        Error {
            file: file.to_string(),
            pos,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.pos.line, self.pos.col, self.message
        )
    }
}

impl std::error::Error for Error {}
