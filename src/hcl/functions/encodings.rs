//! Encoding functions: base64, JSON, URLs, and name-based UUIDs.

use super::{Args, Function};
use crate::hcl::eval::Value;

/// The encoding functions, by name, with how many arguments each takes (at least,
/// at most).
pub(super) const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("base64encode", 1, 1, |a| {
        Ok(Value::String(base64_encode(a.string(0)?.as_bytes())))
    }),
    ("base64decode", 1, 1, |a| {
        let bytes = base64_decode(&a.string(0)?).ok_or("base64decode: not valid base64")?;
        String::from_utf8(bytes)
            .map(Value::String)
            .map_err(|_| "base64decode: the decoded bytes are not UTF-8".to_string())
    }),
    ("jsonencode", 1, 1, |a| {
        let mut out = String::new();
        json_encode(&a.values[0], &mut out);
        Ok(Value::String(out))
    }),
    ("jsondecode", 1, 1, json_decode),
    ("urlencode", 1, 1, |a| {
        Ok(Value::String(url_encode(&a.string(0)?)))
    }),
    // Name-based UUIDs only: uuid() and timestamp() would give a job
    // another value each time the agent decodes it.
    ("uuidv5", 2, 2, uuidv5),
];

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as Go's `base64.StdEncoding`.
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 with padding; `None` if it is not that.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
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
        let mut n: u32 = 0;
        for &c in &chunk[..4 - pad] {
            let digit = BASE64.iter().position(|&d| d == c)?;
            n = (n << 6) | digit as u32;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// Writes `value` as JSON, objects with their keys sorted as cty does.
pub(super) fn json_encode(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(&b.to_string()),
        Value::Number(n) => out.push_str(n.text()),
        Value::String(s) => json_string(s, out),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_encode(item, out);
            }
            out.push(']');
        }
        Value::Object(entries) => {
            let mut sorted: Vec<&(String, Value)> = entries.iter().collect();
            sorted.sort_by(|x, y| x.0.cmp(&y.0));
            out.push('{');
            for (i, (key, value)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(key, out);
                out.push(':');
                json_encode(value, out);
            }
            out.push('}');
        }
    }
}

pub(super) fn json_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `jsondecode(text)`, read with the JSON parser of HCL's JSON syntax.
pub(super) fn json_decode(a: &Args<'_>) -> Result<Value, String> {
    let text = a.string(0)?;
    let wrapped = format!("{{\"value\": {text}}}");
    let body = crate::hcl::json::parse(&wrapped, "jsondecode")
        .map_err(|err| format!("jsondecode: not valid JSON: {}", err.message))?;
    let expr = &body
        .attribute("value")
        .ok_or("jsondecode: not valid JSON")?
        .value;
    crate::hcl::eval::eval(expr, &crate::hcl::eval::Scope::default(), "jsondecode")
        .map_err(|err| err.message)
}

/// `uuidv5(namespace, name)`: the name-based UUID of RFC 4122, SHA-1 of
/// the namespace's bytes and the name; the namespace is `dns`, `url`,
/// `oid`, `x500` or a UUID.
pub(super) fn uuidv5(a: &Args<'_>) -> Result<Value, String> {
    let namespace = a.string(0)?;
    let known = match namespace.as_str() {
        "dns" => "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
        "url" => "6ba7b811-9dad-11d1-80b4-00c04fd430c8",
        "oid" => "6ba7b812-9dad-11d1-80b4-00c04fd430c8",
        "x500" => "6ba7b814-9dad-11d1-80b4-00c04fd430c8",
        other => other,
    };
    let hex: String = known.chars().filter(|c| *c != '-').collect();
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    let mut input = match bytes {
        Some(bytes) if bytes.len() == 16 && hex.len() == 32 => bytes,
        _ => {
            return Err(format!(
                "uuidv5: {namespace:?} is not a namespace: dns, url, oid, x500 or a UUID"
            ))
        }
    };
    input.extend_from_slice(a.string(1)?.as_bytes());
    let mut id = sha1(&input);
    id[6] = (id[6] & 0x0f) | 0x50;
    id[8] = (id[8] & 0x3f) | 0x80;
    let hex: Vec<String> = id[..16].iter().map(|b| format!("{b:02x}")).collect();
    Ok(Value::String(format!(
        "{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )))
}

/// SHA-1 (FIPS 180-4), for [`uuidv5`] only: no security rests on it.
pub(super) fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, word) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let next = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*word);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, next);
        }
        for (state, value) in h.iter_mut().zip([a, b, c, d, e]) {
            *state = state.wrapping_add(value);
        }
    }
    let mut out = [0u8; 20];
    for (chunk, word) in out.chunks_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// Percent-encoding as Go's `url.QueryEscape`: spaces become `+`.
pub(super) fn url_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}
