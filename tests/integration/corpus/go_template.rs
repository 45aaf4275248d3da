//! Go's `text/template` test tables, taken as data
//! (`tests/corpora/go-template/`: `exec.jsonl` from `exec_test.go`'s
//! `execTests`, `parse.jsonl` from `parse_test.go`'s `parseTests`), against
//! the template engine (`crates/template`) with consul-template's
//! functions.
//!
//! An exec case is the template, the output Go expects, whether it
//! succeeds, and its dot as JSON (`"$tVal"` for `tval.json`, the fields of
//! Go's test struct that plain data can hold). The engine renders with a
//! `nil` dot, so a case with data is rendered as a defined template called
//! with the data decoded by `parseJSON`, which sets both `.` and `$`, as
//! Go's `Execute` does. Cases that need what a Go value has and ours do not
//! (methods, func-typed fields, complex numbers, typed map keys, struct
//! printing, Go's own test functions) carry a `skip` with why and are
//! counted, not run. A parse case only says whether Go's parser accepts
//! the text.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use json::Value;
use template::{Functions, Options, Template};

use super::{check_known, dir};

/// Exec cases whose result differs from Go's, by name, each with why.
const KNOWN_EXEC: &[(&str, &str)] = &[
    ("NIL", "Go prints a nil pointer as <nil>; our data has one nil, printed as a missing value is"),
    (
        "printf dot",
        "parseJSON decodes numbers as float64, as consul-template's does, so %d of the data's 17 is %!d(float64=17)",
    ),
    ("printf var", "as \"printf dot\""),
    ("map[NO]", "Go's index of a missing key is the typed zero of a map[string]int; ours are untyped"),
    ("map[``]", "as \"map[NO]\""),
];

/// Parse cases whose acceptance differs from Go's, by name, with why.
const KNOWN_PARSE: &[(&str, &str)] = &[
    (
        "dot after dot",
        "Go refuses `..E`; our parser reads it as `.E`",
    ),
    (
        "bug2b",
        "our parser refuses an assignment to a variable not declared; Go's leaves it to execution",
    ),
];

fn cases(file: &str) -> Vec<Value> {
    std::fs::read_to_string(dir("go-template").join(file))
        .unwrap()
        .lines()
        .map(|line| json::parse(line).unwrap_or_else(|e| panic!("{file}: {e}: {line}")))
        .collect()
}

fn text<'a>(case: &'a Value, key: &str) -> &'a str {
    case.get(key).and_then(Value::as_str).unwrap()
}

/// The template engine's own functions: Go's built-ins and
/// consul-template's, with no context.
fn parse(text: &str) -> Result<Template<()>, template::Error> {
    Template::parse(text, "", "", &Arc::new(Functions::consul_template()))
}

fn render(template: &str) -> Result<String, String> {
    let options = Options {
        error_on_missing_key: false,
        now: UNIX_EPOCH,
    };
    let tmpl = parse(template).map_err(|e| e.to_string())?;
    tmpl.render(&(), &options).map_err(|e| e.to_string())
}

#[test]
fn go_exec_tests_render_as_go_does() {
    let tval = std::fs::read_to_string(dir("go-template").join("tval.json")).unwrap();
    let tval = json::to_string(&json::parse(&tval).unwrap());
    let all = cases("exec.jsonl");
    let (mut run, mut different, mut unexpected) = (0, Vec::new(), Vec::new());
    for case in &all {
        if case.get("skip").is_some() {
            continue;
        }
        let (name, input) = (text(case, "name"), text(case, "input"));
        let dot = match case.get("dot").unwrap() {
            Value::Null => None,
            Value::String(s) if s == "$tVal" => Some(tval.clone()),
            other => Some(json::to_string(other)),
        };
        let template = match &dot {
            None => input.to_string(),
            Some(data) => {
                assert!(
                    !data.contains('`'),
                    "{name}: a raw string cannot hold {data}"
                );
                format!("{{{{define \"case\"}}}}{input}{{{{end}}}}{{{{template \"case\" (parseJSON `{data}`)}}}}")
            }
        };
        let got = render(&template);
        let want_ok = case.get("ok").and_then(Value::as_bool).unwrap();
        let want = text(case, "output");
        run += 1;
        let same = match &got {
            Ok(out) => want_ok && out == want,
            Err(_) => !want_ok,
        };
        if !same {
            if !KNOWN_EXEC.iter().any(|(n, _)| *n == name) {
                unexpected.push(format!(
                    "{name}: {input:?} gives {got:?}; Go gives {}",
                    if want_ok {
                        format!("{want:?}")
                    } else {
                        "an error".into()
                    }
                ));
            }
            different.push(name.to_string());
        }
    }
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
    println!(
        "go exec tests: {run} of {} run, {} skipped, {} known differences",
        all.len(),
        all.len() - run,
        different.len()
    );
    let known: Vec<&str> = KNOWN_EXEC.iter().map(|(n, _)| *n).collect();
    check_known("go exec tests", &known, &different);
    assert!(run > 100, "only {run} cases run");
}

#[test]
fn go_parse_tests_accept_what_go_accepts() {
    let all = cases("parse.jsonl");
    let (mut run, mut different, mut unexpected) = (0, Vec::new(), Vec::new());
    for case in &all {
        if case.get("skip").is_some() {
            continue;
        }
        let (name, input) = (text(case, "name"), text(case, "input"));
        let want_ok = case.get("ok").and_then(Value::as_bool).unwrap();
        let got = parse(input);
        run += 1;
        if got.is_ok() != want_ok {
            if !KNOWN_PARSE.iter().any(|(n, _)| *n == name) {
                unexpected.push(format!(
                    "{name}: {input:?} gives {got:?}; Go {}",
                    if want_ok { "accepts it" } else { "refuses it" }
                ));
            }
            different.push(name.to_string());
        }
    }
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
    println!(
        "go parse tests: {run} of {} run, {} known differences",
        all.len(),
        different.len()
    );
    let known: Vec<&str> = KNOWN_PARSE.iter().map(|(n, _)| *n).collect();
    check_known("go parse tests", &known, &different);
    assert!(run > 100, "only {run} cases run");
}
