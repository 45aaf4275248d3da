//! IDs that become path components (volume, plugin, job, group, alloc and
//! task IDs).
//!
//! They are validated once, where they enter the agent, so that no ID can
//! name a path outside the directory it belongs in: only `[A-Za-z0-9._-]`
//! and square brackets, not `.` or `..`, at most 128 bytes.
//!
//! The CSI spec's usual `[A-Za-z0-9._-]`, with brackets added because
//! Nomad's `per_alloc` volumes are named `source[N]` (instance N of a group
//! mounts the volume `data[N]`), and such a volume ID must be accepted
//! everywhere a volume ID is: in specs, by the hostpath plugin, and in the
//! staging paths named after it. Brackets are ordinary bytes in a path
//! component; only `/` and NUL are special there, and both stay excluded.
//! One rule for every ID keeps a volume that one layer accepts from being
//! refused by the next.

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
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'[' | b']'))
    {
        return fail("only letters, digits, '.', '_', '-', '[' and ']' are allowed");
    }
    Ok(())
}

/// 32 hex digits of the 128-bit FNV-1a hash of `text`: a short stand-in,
/// valid as an ID, for a name that is not one. Not cryptographic: the
/// names hashed come from the host's own engine or plugin.
pub fn digest_hex(text: &str) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;
    let hash = text.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u128::from(byte)).wrapping_mul(PRIME)
    });
    format!("{hash:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_32_hex_digits_and_tells_names_apart() {
        let (a, b) = (digest_hex("a"), digest_hex("b"));
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, digest_hex("a"));
        // FNV-1a 128's published value for the empty input.
        assert_eq!(digest_hex(""), "6c62272e07bb014262b821756295c58d");
    }

    #[test]
    fn accepts_ordinary_ids() {
        for id in [
            "vol1",
            "web.data-0",
            "A_b",
            ".hidden",
            "a..b",
            "test-volume[0]",
            "[]",
            &"x".repeat(128),
        ] {
            assert_eq!(validate("volume ID", id), Ok(()), "{id}");
        }
    }

    #[test]
    fn rejects_ids_that_could_escape_their_directory() {
        const CHARSET: &str = "only letters, digits, '.', '_', '-', '[' and ']' are allowed";
        for (id, reason) in [
            ("", "must not be empty"),
            (".", "must not be . or .."),
            ("..", "must not be . or .."),
            ("a/b", CHARSET),
            ("../etc", CHARSET),
            ("a b", CHARSET),
            ("vol\0", CHARSET),
            ("é", CHARSET),
            ("vol{0}", CHARSET),
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
            format!("invalid volume ID \"a/b\": {CHARSET}")
        );
    }
}
