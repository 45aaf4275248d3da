//! Byte encodings that several layers speak: base64 (RFC 4648, the
//! standard and the URL-safe alphabet, with `=` padding) and
//! percent-encoding (RFC 3986's unreserved characters kept, as Go's
//! `url.QueryEscape` with `+` for a space; or any other set kept, as the
//! hostpath plugin's file names and state words need).
//!
//! One encoder each, so that HCL's `base64encode` and `urlencode`, the
//! templates' `base64Encode` and `urlquery`, the CLI's `-json` bytes and
//! the engine's `X-Registry-Auth` header and URLs cannot drift apart.

/// A base64 alphabet: which 64 characters stand for the 6-bit groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alphabet {
    /// `A-Z a-z 0-9 + /` (Go's `base64.StdEncoding`).
    Standard,
    /// `A-Z a-z 0-9 - _` (Go's `base64.URLEncoding`).
    Url,
}

impl Alphabet {
    fn digits(self) -> &'static [u8; 64] {
        match self {
            Alphabet::Standard => {
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
            }
            Alphabet::Url => b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
        }
    }
}

/// `bytes` in base64 with `=` padding to a multiple of four characters.
pub fn base64(bytes: &[u8], alphabet: Alphabet) -> String {
    let digits = alphabet.digits();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let group = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let sextet = (group >> (18 - 6 * i)) & 0x3f;
                out.push(char::from(digits[sextet as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes padded base64 in `alphabet`; `None` if `text` is not that (a
/// length that is not a multiple of four, a character outside the
/// alphabet, padding other than at the end).
pub fn base64_decode(text: &str, alphabet: Alphabet) -> Option<Vec<u8>> {
    let digits = alphabet.digits();
    let text = text.as_bytes();
    if text.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for (at, chunk) in text.chunks(4).enumerate() {
        let last = at + 1 == text.len() / 4;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut group: u32 = 0;
        for &c in &chunk[..4 - pad] {
            let digit = digits.iter().position(|&d| d == c)?;
            group = (group << 6) | digit as u32;
        }
        group <<= 6 * pad as u32;
        let bytes = [(group >> 16) as u8, (group >> 8) as u8, group as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// How percent-encoding writes a space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// `%20`, as in a path or a query value read back by a strict decoder.
    Percent,
    /// `+`, as an HTML form and Go's `url.QueryEscape` write it.
    Plus,
}

/// `text` with every byte but RFC 3986's unreserved ones (`A-Z a-z 0-9 - .
/// _ ~`) written as `%XX` (upper-case hex), and a space as `space` says.
pub fn percent(text: &str, space: Space) -> String {
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
    let escaped = percent_except(text, unreserved);
    match space {
        Space::Percent => escaped,
        // `%` itself is escaped, so every `%20` is a space.
        Space::Plus => escaped.replace("%20", "+"),
    }
}

/// `text` with every byte for which `keep` is false written as `%XX`
/// (upper-case hex); `keep` must be false for `%`, or the text cannot be
/// read back.
pub fn percent_except(text: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if keep(byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4648 section 10's test vectors, in both alphabets.
    const VECTORS: [(&[u8], &str); 7] = [
        (b"", ""),
        (b"f", "Zg=="),
        (b"fo", "Zm8="),
        (b"foo", "Zm9v"),
        (b"foob", "Zm9vYg=="),
        (b"fooba", "Zm9vYmE="),
        (b"foobar", "Zm9vYmFy"),
    ];

    #[test]
    fn base64_pads_rfc_4648_vectors_in_both_alphabets() {
        for (bytes, text) in VECTORS {
            for alphabet in [Alphabet::Standard, Alphabet::Url] {
                assert_eq!(base64(bytes, alphabet), text);
                assert_eq!(base64_decode(text, alphabet).as_deref(), Some(bytes));
            }
        }
    }

    #[test]
    fn base64_alphabets_differ_in_their_last_two_digits() {
        assert_eq!(base64(&[0xfb, 0xff, 0xbf], Alphabet::Standard), "+/+/");
        assert_eq!(base64(&[0xfb, 0xff, 0xbf], Alphabet::Url), "-_-_");
        assert_eq!(base64_decode("-_-_", Alphabet::Standard), None);
        assert_eq!(base64_decode("+/+/", Alphabet::Url), None);
    }

    #[test]
    fn base64_decode_refuses_what_is_not_padded_base64() {
        for text in ["Zg", "Zg=", "Z===", "Zg==Zg==", "Zm9v!A==", "===="] {
            assert_eq!(base64_decode(text, Alphabet::Standard), None, "{text}");
        }
    }

    #[test]
    fn percent_keeps_unreserved_bytes_and_writes_spaces_as_asked() {
        assert_eq!(percent("aZ09-._~", Space::Percent), "aZ09-._~");
        assert_eq!(
            percent("a b/c:d?e&f=g", Space::Percent),
            "a%20b%2Fc%3Ad%3Fe%26f%3Dg"
        );
        assert_eq!(percent("a b+c%20", Space::Plus), "a+b%2Bc%2520");
        assert_eq!(percent("é", Space::Plus), "%C3%A9");
    }

    #[test]
    fn percent_except_keeps_only_what_it_is_told_to() {
        let word = |b: u8| b.is_ascii_graphic() && b != b'%';
        assert_eq!(percent_except("a b%c/é", word), "a%20b%25c/%C3%A9");
        assert_eq!(percent_except("", word), "");
    }
}
