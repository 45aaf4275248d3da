//! Encoding functions: base64, JSON, URLs, and name-based UUIDs.

use super::{Args, Function};
use crate::ast::Number;
use crate::value::Value;
use encode::{base64, base64_decode, percent, Alphabet, Space};

/// The encoding functions, by name, with how many arguments each takes (at least,
/// at most).
pub(super) const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("base64encode", 1, 1, |a| {
        Ok(Value::String(base64(
            a.string(0)?.as_bytes(),
            Alphabet::Standard,
        )))
    }),
    ("base64decode", 1, 1, |a| {
        let bytes = base64_decode(&a.string(0)?, Alphabet::Standard)
            .ok_or("base64decode: not valid base64")?;
        String::from_utf8(bytes)
            .map(Value::String)
            .map_err(|_| "base64decode: the decoded bytes are not UTF-8".to_string())
    }),
    ("jsonencode", 1, 1, |a| {
        Ok(Value::String(json_encode(&a.values[0])))
    }),
    ("jsondecode", 1, 1, json_decode),
    ("urlencode", 1, 1, |a| {
        // Go's `url.QueryEscape`, as Terraform's `urlencode`.
        Ok(Value::String(percent(&a.string(0)?, Space::Plus)))
    }),
    // Name-based UUIDs only: uuid() and timestamp() would give a job
    // another value each time the agent decodes it.
    ("uuidv5", 2, 2, uuidv5),
];

/// `jsonencode(value)`: objects with their keys sorted as cty does, and
/// strings escaped as Go's `json.Marshal` escapes them.
pub(super) fn json_encode(value: &Value) -> String {
    json::to_string_html_safe(&to_json(value))
}

fn to_json(value: &Value) -> json::Value {
    match value {
        Value::Null => json::Value::Null,
        Value::Bool(b) => json::Value::Bool(*b),
        Value::Number(n) => json::Value::Number(n.text().to_string()),
        Value::String(s) => json::Value::from(s),
        Value::List(items) => json::Value::Array(items.iter().map(to_json).collect()),
        Value::Object(entries) => {
            let mut sorted: Vec<&(String, Value)> = entries.iter().collect();
            order::sort_by(&mut sorted, |x, y| x.0.cmp(&y.0));
            json::Value::object(sorted.into_iter().map(|(k, v)| (k.as_str(), to_json(v))))
        }
    }
}

/// `jsondecode(text)`: `text` read as plain JSON (RFC 8259) by
/// [`json`], so a string is that string, `${` and `%{` included,
/// and nesting stops at [`json::MAX_DEPTH`]. A key twice in one object is
/// an error, as in cty.
pub(super) fn json_decode(a: &Args<'_>) -> Result<Value, String> {
    let text = a.string(0)?;
    let value = json::parse(&text).map_err(|err| format!("jsondecode: {err}"))?;
    from_json(&value)
}

fn from_json(value: &json::Value) -> Result<Value, String> {
    Ok(match value {
        json::Value::Null => Value::Null,
        json::Value::Bool(b) => Value::Bool(*b),
        json::Value::Number(n) => Value::Number(Number::new(n.clone())),
        json::Value::String(s) => Value::String(s.clone()),
        json::Value::Array(items) => {
            Value::List(items.iter().map(from_json).collect::<Result<_, _>>()?)
        }
        json::Value::Object(members) => {
            let mut entries: Vec<(String, Value)> = Vec::with_capacity(members.len());
            for (key, member) in members {
                if entries.iter().any(|(seen, _)| seen == key) {
                    return Err(format!(
                        "jsondecode: duplicate key {key:?} in a JSON object"
                    ));
                }
                entries.push((key.clone(), from_json(member)?));
            }
            Value::Object(entries)
        }
    })
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
