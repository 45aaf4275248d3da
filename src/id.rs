//! IDs that become path components (volume, plugin, alloc and task IDs).
//!
//! They are validated once, where they enter the agent, so that no ID can
//! name a path outside the directory it belongs in: only `[A-Za-z0-9._-]`,
//! not `.` or `..`, at most 128 bytes.

use std::fmt;

/// The longest ID we accept, in bytes (CSI's string limit).
pub const MAX_LEN: usize = 128;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidId {
    pub what: String,
    pub id: String,
    pub reason: &'static str,
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} {:?}: {}", self.what, self.id, self.reason)
    }
}

impl std::error::Error for InvalidId {}

/// Checks that `id` is safe as one path component; `what` names it in the
/// error (`volume ID`).
pub fn validate(what: &str, id: &str) -> Result<(), InvalidId> {
    let fail = |reason| {
        Err(InvalidId {
            what: what.to_string(),
            id: id.to_string(),
            reason,
        })
    };
    if id.is_empty() {
        return fail("must not be empty");
    }
    if id.len() > MAX_LEN {
        return fail("longer than 128 bytes");
    }
    if id == "." || id == ".." {
        return fail("must not be . or ..");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return fail("only letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_ids() {
        for id in [
            "vol1",
            "web.data-0",
            "A_b",
            ".hidden",
            "a..b",
            &"x".repeat(128),
        ] {
            assert_eq!(validate("volume ID", id), Ok(()), "{id}");
        }
    }

    #[test]
    fn rejects_ids_that_could_escape_their_directory() {
        for (id, reason) in [
            ("", "must not be empty"),
            (".", "must not be . or .."),
            ("..", "must not be . or .."),
            ("a/b", "only letters, digits, '.', '_' and '-' are allowed"),
            (
                "../etc",
                "only letters, digits, '.', '_' and '-' are allowed",
            ),
            ("a b", "only letters, digits, '.', '_' and '-' are allowed"),
            (
                "vol\0",
                "only letters, digits, '.', '_' and '-' are allowed",
            ),
            ("é", "only letters, digits, '.', '_' and '-' are allowed"),
        ] {
            assert_eq!(
                validate("volume ID", id).unwrap_err().reason,
                reason,
                "{id:?}"
            );
        }
        let long = "x".repeat(129);
        assert_eq!(
            validate("volume ID", &long).unwrap_err().reason,
            "longer than 128 bytes"
        );
        assert_eq!(
            validate("volume ID", "a/b").unwrap_err().to_string(),
            "invalid volume ID \"a/b\": only letters, digits, '.', '_' and '-' are allowed"
        );
    }
}
