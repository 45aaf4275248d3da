//! HCL's specification test suite (`tests/corpora/hcl-specsuite/`, the
//! files of `specsuite/tests/` the index holds) against the HCL parser and
//! evaluator. A `.hcl` file with a `.t` beside it is evaluated, and its
//! blocks and attributes are compared with the `.t` file's `result`, read
//! by the same parser; a `.t` with `diagnostics` means the file must be
//! refused. The structure tests without a `.t` (whose `.hcldec` specs the
//! index lacks) are checked to parse, or to be refused where their name
//! says they are invalid.

use hcl::{Body, Scope, Value};

use super::{check_known, dir};

/// Where csi-agent differs from the suite: `file: path` of a value, or
/// `file: accepted` for a file the suite refuses.
const KNOWN_DIFFERENT: &[&str] = &[
    // A reference to a name the file does not declare is left in the
    // string as written, for the agent to interpolate when a task starts
    // (`${NOMAD_TASK_DIR}`); the suite's harness declares `bar`.
    "expressions/heredoc.hcl: normal.interp",
    "expressions/heredoc.hcl: flush.interp",
    "expressions/heredoc.hcl: flush.interp_indented_more",
    "expressions/heredoc.hcl: flush.interp_indented_less",
    // Numbers are f64s, not arbitrary-precision decimals: 11 % 5.1 is
    // 0.8000000000000007.
    "expressions/operators.hcl: arithmetic.mod_frac",
    // Strings are kept as written, not normalized to NFC.
    "expressions/primitive_literals.hcl: string_unicode_nonnorm",
    // HCL1's commas between attributes (`{ rack = "R1", zone = "z" }`),
    // which Nomad's documentation writes, are accepted, and so are
    // one-line blocks that hold more than one attribute or a block.
    "structure/attributes/singleline_bad.hcl: accepted",
    "structure/blocks/single_oneline_invalid.hcl: accepted",
];

/// Structure files that HCL refuses.
const INVALID: &[&str] = &[
    "structure/attributes/singleline_bad.hcl",
    "structure/blocks/single_oneline_invalid.hcl",
    "structure/blocks/single_unclosed.hcl",
];

#[test]
fn hcl_specsuite_evaluates_as_specified() {
    let root = dir("hcl-specsuite");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    let (mut compared, mut different, mut unexpected) = (0, Vec::new(), Vec::new());
    for path in &files {
        let name = path
            .strip_prefix(&root)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let src = std::fs::read_to_string(path).unwrap();
        let parsed = hcl::parse(&src, &name);
        let spec = path.with_extension("t");
        let expected = spec
            .exists()
            .then(|| std::fs::read_to_string(&spec).unwrap());
        match expected {
            Some(t) if t.contains("diagnostics") => {
                if parsed.is_ok() {
                    differ(format!("{name}: accepted"), &mut different, &mut unexpected);
                }
            }
            Some(t) => {
                let body = match parsed {
                    Ok(body) => body,
                    Err(e) => {
                        unexpected.push(format!("{name} must parse: {e}"));
                        continue;
                    }
                };
                let got = body_value(&body, &name);
                let spec_body = hcl::parse(&t, "spec.t").unwrap();
                let want = hcl::eval(
                    &spec_body.attribute("result").unwrap().value,
                    &Scope::default(),
                    "spec.t",
                )
                .unwrap();
                compare(
                    &name,
                    "",
                    &want,
                    &got,
                    &mut compared,
                    &mut different,
                    &mut unexpected,
                );
            }
            None if INVALID.contains(&name.as_str()) => {
                if parsed.is_ok() {
                    differ(format!("{name}: accepted"), &mut different, &mut unexpected);
                }
            }
            None => {
                if let Err(e) = parsed {
                    unexpected.push(format!("{name} must parse: {e}"));
                }
            }
        }
    }
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
    println!(
        "hcl specsuite: {} files, {compared} values compared, known differences: {different:?}",
        files.len()
    );
    check_known("hcl specsuite", KNOWN_DIFFERENT, &different);
    assert!(compared > 50, "only {compared} values compared");
}

/// Records a difference: known, or unexpected.
fn differ(id: String, different: &mut Vec<String>, unexpected: &mut Vec<String>) {
    if !KNOWN_DIFFERENT.contains(&id.as_str()) {
        unexpected.push(id.clone());
    }
    different.push(id);
}

fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "hcl") {
            out.push(path);
        }
    }
}

/// A body as the suite's `result` shows it: its attributes by name and
/// its blocks by type, then by each label.
fn body_value(body: &Body, file: &str) -> Value {
    let mut entries: Vec<(String, Value)> = Vec::new();
    for attr in body.attributes() {
        let value = hcl::eval(&attr.value, &Scope::default(), file)
            .unwrap_or_else(|e| Value::String(format!("error: {e}")));
        entries.push((attr.key.name.clone(), value));
    }
    for block in body.blocks() {
        let mut slot = entry(&mut entries, &block.kind.name);
        for label in &block.labels {
            slot = entry(object(slot), &label.value);
        }
        *slot = body_value(&block.body, file);
    }
    Value::Object(entries)
}

fn entry<'a>(entries: &'a mut Vec<(String, Value)>, key: &str) -> &'a mut Value {
    match entries.iter().position(|(k, _)| k == key) {
        Some(i) => &mut entries[i].1,
        None => {
            entries.push((key.to_string(), Value::Object(Vec::new())));
            &mut entries.last_mut().unwrap().1
        }
    }
}

fn object(value: &mut Value) -> &mut Vec<(String, Value)> {
    match value {
        Value::Object(entries) => entries,
        other => panic!("a block where {other:?} is"),
    }
}

/// Compares `got` with every value `want` names (keys missing from `want`
/// are not compared: the suite's `.t` files predate some of the `.hcl`
/// files' cases); numbers as `f64`s.
fn compare(
    file: &str,
    path: &str,
    want: &Value,
    got: &Value,
    compared: &mut usize,
    different: &mut Vec<String>,
    unexpected: &mut Vec<String>,
) {
    match (want, got) {
        (Value::Object(want), Value::Object(got)) => {
            for (key, w) in want {
                match got.iter().find(|(k, _)| k == key) {
                    Some((_, g)) => {
                        let path = format!("{path}.{key}");
                        compare(file, &path, w, g, compared, different, unexpected)
                    }
                    None => unexpected.push(format!("{file}: no {path}.{key}")),
                }
            }
        }
        _ => {
            *compared += 1;
            let same = match (want, got) {
                (Value::Number(w), Value::Number(g)) => w.as_f64() == g.as_f64(),
                _ => want == got,
            };
            if !same {
                let id = format!("{file}: {}", &path[1..]);
                if !KNOWN_DIFFERENT.contains(&id.as_str()) {
                    unexpected.push(format!(
                        "{id}: the suite says {want:?}, the evaluator {got:?}"
                    ));
                }
                different.push(id);
            }
        }
    }
}
