//! The HCL2 functions a job file may call, in one table: the string,
//! collection, encoding and file functions Nomad's job files commonly use,
//! with Nomad's (go-cty's) meaning. A call to any other function is an
//! error that names it.

use super::eval::{FileSource, Value};

/// What a function gets: its name (for messages), its arguments and the
/// files `file()` may read.
struct Args<'a> {
    name: &'static str,
    values: Vec<Value>,
    files: Option<&'a FileSource>,
}

type Function = fn(&Args<'_>) -> Result<Value, String>;

/// The functions, by name, with how many arguments each takes (at least,
/// at most).
const TABLE: &[(&str, usize, usize, Function)] = &[
    // Strings.
    ("format", 1, usize::MAX, format),
    ("join", 2, 2, join),
    ("split", 2, 2, split),
    ("lower", 1, 1, |a| {
        Ok(Value::String(a.string(0)?.to_lowercase()))
    }),
    ("upper", 1, 1, |a| {
        Ok(Value::String(a.string(0)?.to_uppercase()))
    }),
    ("replace", 3, 3, |a| {
        Ok(Value::String(
            a.string(0)?.replace(&a.string(1)?, &a.string(2)?),
        ))
    }),
    ("trimspace", 1, 1, |a| {
        Ok(Value::String(a.string(0)?.trim().to_string()))
    }),
    ("trimprefix", 2, 2, |a| {
        let (text, prefix) = (a.string(0)?, a.string(1)?);
        Ok(Value::String(
            text.strip_prefix(&prefix).unwrap_or(&text).to_string(),
        ))
    }),
    ("trimsuffix", 2, 2, |a| {
        let (text, suffix) = (a.string(0)?, a.string(1)?);
        Ok(Value::String(
            text.strip_suffix(&suffix).unwrap_or(&text).to_string(),
        ))
    }),
    ("trim", 2, 2, |a| {
        let cut = a.string(1)?;
        Ok(Value::String(
            a.string(0)?.trim_matches(|c| cut.contains(c)).to_string(),
        ))
    }),
    ("chomp", 1, 1, |a| {
        Ok(Value::String(
            a.string(0)?.trim_end_matches(['\r', '\n']).to_string(),
        ))
    }),
    ("substr", 3, 3, substr),
    ("strrev", 1, 1, |a| {
        Ok(Value::String(a.string(0)?.chars().rev().collect()))
    }),
    ("tostring", 1, 1, |a| Ok(Value::String(a.string(0)?))),
    ("tonumber", 1, 1, |a| a.number(0).map(Value::number)),
    ("tobool", 1, 1, tobool),
    // Collections.
    ("concat", 0, usize::MAX, |a| {
        let mut out = Vec::new();
        for i in 0..a.values.len() {
            out.extend(a.list(i)?);
        }
        Ok(Value::List(out))
    }),
    ("lookup", 2, 3, lookup),
    ("length", 1, 1, length),
    ("element", 2, 2, |a| {
        let items = a.list(0)?;
        if items.is_empty() {
            return Err("element: cannot take an element of an empty list".to_string());
        }
        let index = a.index(1)?;
        Ok(items[index % items.len()].clone())
    }),
    ("contains", 2, 2, |a| {
        Ok(Value::Bool(a.list(0)?.contains(&a.values[1])))
    }),
    ("keys", 1, 1, |a| {
        let keys = a.object(0)?.into_iter().map(|(k, _)| Value::String(k));
        Ok(Value::List(keys.collect()))
    }),
    ("values", 1, 1, |a| {
        Ok(Value::List(
            a.object(0)?.into_iter().map(|(_, v)| v).collect(),
        ))
    }),
    ("merge", 0, usize::MAX, merge),
    ("flatten", 1, 1, |a| Ok(Value::List(flatten(a.list(0)?)))),
    ("distinct", 1, 1, |a| {
        let mut out: Vec<Value> = Vec::new();
        for item in a.list(0)? {
            if !out.contains(&item) {
                out.push(item);
            }
        }
        Ok(Value::List(out))
    }),
    ("reverse", 1, 1, |a| {
        Ok(Value::List(a.list(0)?.into_iter().rev().collect()))
    }),
    ("slice", 3, 3, |a| {
        let items = a.list(0)?;
        let (start, end) = (a.index(1)?, a.index(2)?);
        match items.get(start..end) {
            Some(slice) => Ok(Value::List(slice.to_vec())),
            None => Err(format!(
                "slice: {start}..{end} is out of a list of {}",
                items.len()
            )),
        }
    }),
    ("compact", 1, 1, |a| {
        let items = a.list(0)?.into_iter();
        Ok(Value::List(
            items
                .filter(|v| !matches!(v, Value::String(s) if s.is_empty()))
                .collect(),
        ))
    }),
    ("coalesce", 1, usize::MAX, |a| {
        let empty = |v: &&Value| match v {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            _ => false,
        };
        let found = a.values.iter().find(|v| !empty(v));
        found
            .cloned()
            .ok_or_else(|| "coalesce: no non-null, non-empty argument".to_string())
    }),
    ("zipmap", 2, 2, |a| {
        let (keys, values) = (a.list(0)?, a.list(1)?);
        if keys.len() != values.len() {
            return Err("zipmap: the lists of keys and values differ in length".to_string());
        }
        let keys = keys
            .iter()
            .map(|k| k.as_text().ok_or("zipmap: keys must be strings"));
        let keys = keys.collect::<Result<Vec<_>, _>>()?;
        Ok(Value::Object(keys.into_iter().zip(values).collect()))
    }),
    ("tolist", 1, 1, |a| a.list(0).map(Value::List)),
    ("toset", 1, 1, |a| a.list(0).map(Value::List)),
    ("tomap", 1, 1, |a| a.object(0).map(Value::Object)),
    // Numbers.
    ("max", 1, usize::MAX, |a| {
        numbers(a).map(|n| Value::number(n.into_iter().fold(f64::MIN, f64::max)))
    }),
    ("min", 1, usize::MAX, |a| {
        numbers(a).map(|n| Value::number(n.into_iter().fold(f64::MAX, f64::min)))
    }),
    ("abs", 1, 1, |a| a.number(0).map(|n| Value::number(n.abs()))),
    ("ceil", 1, 1, |a| {
        a.number(0).map(|n| Value::number(n.ceil()))
    }),
    ("floor", 1, 1, |a| {
        a.number(0).map(|n| Value::number(n.floor()))
    }),
    // Encodings.
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
    // Files and paths.
    ("file", 1, 1, |a| {
        let Some(files) = a.files else {
            return Err("file: only job files may read files".to_string());
        };
        files
            .text(&a.string(0)?)
            .map(Value::String)
            .map_err(|err| format!("file: {err}"))
    }),
    ("basename", 1, 1, |a| {
        let path = a.string(0)?;
        Ok(Value::String(
            path.trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string(),
        ))
    }),
    ("dirname", 1, 1, |a| {
        let path = a.string(0)?;
        Ok(Value::String(match path.rsplit_once('/') {
            Some(("", _)) => "/".to_string(),
            Some((dir, _)) => dir.to_string(),
            None => ".".to_string(),
        }))
    }),
];

/// The names of the functions, for documentation and tests.
pub fn names() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|(name, ..)| *name)
}

/// Calls the function `name`; the message of an error says what is wrong
/// without the position, which the caller adds.
pub(crate) fn call(
    name: &str,
    values: Vec<Value>,
    files: Option<&FileSource>,
) -> Result<Value, String> {
    let Some(&(name, least, most, function)) = TABLE.iter().find(|(n, ..)| *n == name) else {
        return Err(format!("unknown function '{name}'"));
    };
    if values.len() < least || values.len() > most {
        let wanted = match (least, most) {
            (l, m) if l == m => format!("{l}"),
            (l, usize::MAX) => format!("at least {l}"),
            (l, m) => format!("{l} to {m}"),
        };
        return Err(format!(
            "{name} takes {wanted} arguments, not {}",
            values.len()
        ));
    }
    function(&Args {
        name,
        values,
        files,
    })
}

impl Args<'_> {
    fn wrong(&self, i: usize, wanted: &str) -> String {
        format!(
            "{}: argument {} must be a {wanted}, not a {}",
            self.name,
            i + 1,
            self.values[i].kind_name()
        )
    }

    fn string(&self, i: usize) -> Result<String, String> {
        self.values[i]
            .as_text()
            .ok_or_else(|| self.wrong(i, "string"))
    }

    fn number(&self, i: usize) -> Result<f64, String> {
        let parsed = match &self.values[i] {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        parsed.ok_or_else(|| self.wrong(i, "number"))
    }

    fn index(&self, i: usize) -> Result<usize, String> {
        let n = self.number(i)?;
        if n < 0.0 || n.fract() != 0.0 {
            return Err(format!(
                "{}: argument {} must be a whole number, not {n}",
                self.name,
                i + 1
            ));
        }
        Ok(n as usize)
    }

    fn list(&self, i: usize) -> Result<Vec<Value>, String> {
        match &self.values[i] {
            Value::List(items) => Ok(items.clone()),
            _ => Err(self.wrong(i, "list")),
        }
    }

    fn object(&self, i: usize) -> Result<Vec<(String, Value)>, String> {
        match &self.values[i] {
            Value::Object(entries) => Ok(entries.clone()),
            _ => Err(self.wrong(i, "map")),
        }
    }
}

/// `format(spec, args...)`: Go's verbs as cty reads them: `%s`, `%d`,
/// `%v`, `%q`, `%f` and `%%`.
fn format(a: &Args<'_>) -> Result<Value, String> {
    let spec = a.string(0)?;
    let mut out = String::new();
    let mut next = 1;
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let verb = chars.next().ok_or("format: the format ends with '%'")?;
        if verb == '%' {
            out.push('%');
            continue;
        }
        if next >= a.values.len() {
            return Err(format!("format: not enough arguments for %{verb}"));
        }
        match verb {
            's' | 'v' => out.push_str(&a.string(next)?),
            'q' => out.push_str(&format!("{:?}", a.string(next)?)),
            'd' => out.push_str(&format!("{:.0}", a.number(next)?.trunc())),
            'f' => out.push_str(&format!("{:.6}", a.number(next)?)),
            other => return Err(format!("format: unsupported verb %{other}")),
        }
        next += 1;
    }
    if next < a.values.len() {
        return Err(format!(
            "format: {} arguments too many",
            a.values.len() - next
        ));
    }
    Ok(Value::String(out))
}

fn join(a: &Args<'_>) -> Result<Value, String> {
    let sep = a.string(0)?;
    let items = a.list(1)?;
    let texts = items
        .iter()
        .map(|item| item.as_text().ok_or("join: elements must be strings"));
    Ok(Value::String(
        texts.collect::<Result<Vec<_>, _>>()?.join(&sep),
    ))
}

fn split(a: &Args<'_>) -> Result<Value, String> {
    let (sep, text) = (a.string(0)?, a.string(1)?);
    if sep.is_empty() {
        return Err("split: the separator must not be empty".to_string());
    }
    Ok(Value::List(
        text.split(sep.as_str())
            .map(|s| Value::String(s.to_string()))
            .collect(),
    ))
}

fn substr(a: &Args<'_>) -> Result<Value, String> {
    let chars: Vec<char> = a.string(0)?.chars().collect();
    let offset = a.index(1)?.min(chars.len());
    let length = a.number(2)?;
    let end = if length < 0.0 {
        chars.len()
    } else {
        (offset + length as usize).min(chars.len())
    };
    Ok(Value::String(chars[offset..end].iter().collect()))
}

fn tobool(a: &Args<'_>) -> Result<Value, String> {
    match &a.values[0] {
        Value::Bool(b) => Ok(Value::Bool(*b)),
        Value::String(s) if s == "true" => Ok(Value::Bool(true)),
        Value::String(s) if s == "false" => Ok(Value::Bool(false)),
        _ => Err(a.wrong(0, "bool")),
    }
}

fn lookup(a: &Args<'_>) -> Result<Value, String> {
    let key = a.string(1)?;
    match (a.values[0].get(&key), a.values.get(2)) {
        (Some(found), _) => Ok(found.clone()),
        (None, Some(default)) => Ok(default.clone()),
        (None, None) => match &a.values[0] {
            Value::Object(_) => Err(format!("lookup: no key {key:?} and no default")),
            _ => Err(a.wrong(0, "map")),
        },
    }
}

fn length(a: &Args<'_>) -> Result<Value, String> {
    let n = match &a.values[0] {
        Value::String(s) => s.chars().count(),
        Value::List(items) => items.len(),
        Value::Object(entries) => entries.len(),
        _ => return Err(a.wrong(0, "string, list or map")),
    };
    Ok(Value::number(n as f64))
}

fn merge(a: &Args<'_>) -> Result<Value, String> {
    let mut out: Vec<(String, Value)> = Vec::new();
    for i in 0..a.values.len() {
        if a.values[i] == Value::Null {
            continue;
        }
        for (key, value) in a.object(i)? {
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value,
                None => out.push((key, value)),
            }
        }
    }
    Ok(Value::Object(out))
}

fn flatten(items: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for item in items {
        match item {
            Value::List(inner) => out.extend(flatten(inner)),
            other => out.push(other),
        }
    }
    out
}

fn numbers(a: &Args<'_>) -> Result<Vec<f64>, String> {
    (0..a.values.len()).map(|i| a.number(i)).collect()
}

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
fn json_encode(value: &Value, out: &mut String) {
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

fn json_string(text: &str, out: &mut String) {
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
fn json_decode(a: &Args<'_>) -> Result<Value, String> {
    let text = a.string(0)?;
    let wrapped = format!("{{\"value\": {text}}}");
    let body = super::json::parse(&wrapped, "jsondecode")
        .map_err(|err| format!("jsondecode: not valid JSON: {}", err.message))?;
    let expr = &body
        .attribute("value")
        .ok_or("jsondecode: not valid JSON")?
        .value;
    super::eval::eval(expr, &super::eval::Scope::default(), "jsondecode").map_err(|err| err.message)
}

/// `uuidv5(namespace, name)`: the name-based UUID of RFC 4122, SHA-1 of
/// the namespace's bytes and the name; the namespace is `dns`, `url`,
/// `oid`, `x500` or a UUID.
fn uuidv5(a: &Args<'_>) -> Result<Value, String> {
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
fn sha1(data: &[u8]) -> [u8; 20] {
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
fn url_encode(text: &str) -> String {
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
