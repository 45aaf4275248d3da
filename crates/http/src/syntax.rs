//! The characters of RFC 9110's grammar that both sides check: tokens
//! (methods, field names) and field values.

/// A character of a token (RFC 9110, 5.6.2): a method or a field name.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether `text` is a token: one or more `tchar`.
pub(crate) fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(is_tchar)
}

/// Whether `value` may be a field's value as sent (RFC 9110, 5.5): visible
/// characters, spaces and tabs, and bytes past ASCII, but no control
/// character: a CR or LF would end the field early, a NUL is refused by
/// many readers, and the others are no field's.
pub(crate) fn is_field_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b >= b' ' && b != 0x7f))
}

/// `text` cut to its first 80 characters, for an error message that
/// quotes what it refuses.
pub(crate) fn shorten(text: &str) -> &str {
    match text.char_indices().nth(80) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_field_values_are_rfc_9110_s() {
        assert!(is_token("Content-Length") && is_token("x!#$%&'*+-.^_`|~9"));
        for bad in ["", "a b", "a:b", "a\r", "(x)", "é"] {
            assert!(!is_token(bad), "{bad:?}");
        }
        assert!(is_field_value("text/plain; charset=utf-8\tand é"));
        assert!(is_field_value(""));
        for bad in ["a\r\nEvil: 1", "a\nb", "a\0", "a\x7f", "a\x1b[0m"] {
            assert!(!is_field_value(bad), "{bad:?}");
        }
    }

    #[test]
    fn quotes_are_shortened_to_80_characters() {
        assert_eq!(shorten("short"), "short");
        assert_eq!(shorten(&"é".repeat(100)), "é".repeat(80));
    }
}
