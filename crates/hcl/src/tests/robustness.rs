//! No input may panic the parser or overflow its stack.

use super::files::{AGENT_CONFIG, JOB};
use super::{error_text, value_of, FILE};
use crate::{json, parse, Body};

/// A file that uses every literal form, so that cutting it up reaches every
/// lexer state.
const LITERALS: &str = r#"# every form
a = "esc \n \t \r \" \\ \u00e9 \U0001F600 $${x} %%{y} ${z("}")} %{ if a }b%{ endif }"
b = <<EOF
  plain ${x}
EOF
c = <<-EOT
    indented
      more
    EOT
d = [1, -2, 3.5, 1e3, -1.5E-2, true, false, null,]
e = { k = "v", "q": [ // list
  { n = 1 }
] }
/* block
   comment */ f "label" ident {
  g = {}
}
h { "q.k/z" = 1, r = [2], s { t = "u", } }
"#;

/// Checks that parsing `src` returns, and that an error points inside it.
fn check_returns(src: &str) {
    if let Err(err) = parse(src, FILE) {
        let lines = src.split('\n').count();
        assert!(
            err.pos.line >= 1 && err.pos.line <= lines && err.pos.col >= 1,
            "error {err} points outside {src:?}"
        );
        assert!(!err.message.is_empty());
    }
}

#[test]
fn sample_files_parse() {
    for src in [JOB, AGENT_CONFIG, LITERALS] {
        if let Err(err) = parse(src, FILE) {
            panic!("{err}");
        }
    }
}

#[test]
fn every_prefix_parses_or_fails_cleanly() {
    for src in [JOB, AGENT_CONFIG, LITERALS] {
        for (at, _) in src.char_indices() {
            check_returns(&src[..at]);
        }
    }
}

#[test]
fn every_single_character_deletion_parses_or_fails_cleanly() {
    for src in [JOB, AGENT_CONFIG, LITERALS] {
        for (at, c) in src.char_indices() {
            let mut cut = String::with_capacity(src.len());
            cut.push_str(&src[..at]);
            cut.push_str(&src[at + c.len_utf8()..]);
            check_returns(&cut);
        }
    }
}

#[test]
fn awkward_fragments_fail_cleanly() {
    let fragments = [
        "\\",
        "x = \\",
        "x = \"\\",
        "x = \"\\u",
        "x = \"\\U0011FFFF\"",
        "x = \"$",
        "x = \"${",
        "x = \"${\"",
        "x = \"${\"\\",
        "x = \"${\"${",
        "x = \"%%",
        "x = <",
        "x = <<",
        "x = <<-",
        "x = <<EOF",
        "x = <<EOF\r",
        "x = <<EOF\n",
        "x = -",
        "x = 1e",
        "x = 1e+",
        "x = 1.e5",
        "/",
        "/*",
        "*/",
        "\0",
        "x\0= 1",
        "x = \"a\0b",
        "\r",
        "é",
        "\u{feff}",
        "\u{feff}\u{feff}",
        "x = [",
        "x = {",
        "x = { \"k\"",
        "a b c",
        "a \"b\" = 1",
        "= 1",
        ",",
    ];
    for src in fragments {
        check_returns(src);
    }
    assert!(parse("x = \"\\U0011FFFF\"", FILE).is_err());
    assert!(parse("\0", FILE).is_err());
}

#[test]
fn deeply_nested_lists_hit_the_nesting_limit() {
    let src = format!("x = {}", "[".repeat(100_000));
    assert_eq!(
        error_text(&src),
        "test.hcl:1:69: nesting deeper than 64 levels"
    );
}

#[test]
fn long_operator_chains_and_unary_runs_hit_the_nesting_limit() {
    // Each operator nests the tree a level deeper, however it is written.
    let chain = format!("x = 1{}\n", " + 1".repeat(100_000));
    assert!(error_text(&chain).ends_with("nesting deeper than 64 levels"));
    let nots = format!("x = {}true\n", "!".repeat(100_000));
    assert!(error_text(&nots).ends_with("nesting deeper than 64 levels"));
    let conditionals = format!("x = {}1\n", "true ? 1 : ".repeat(100_000));
    assert!(error_text(&conditionals).ends_with("nesting deeper than 64 levels"));
    // 60 in a row is fine.
    assert!(
        super::parse_ok(&format!("x = 1{}\n", " + 1".repeat(60)))
            .items
            .len()
            == 1
    );
}

#[test]
fn deeply_nested_objects_hit_the_nesting_limit() {
    let src = format!("x = {}", "{ a = ".repeat(100_000));
    assert_eq!(
        error_text(&src),
        "test.hcl:1:389: nesting deeper than 64 levels"
    );
}

#[test]
fn deeply_nested_blocks_hit_the_nesting_limit() {
    let src = "b {\n".repeat(100_000);
    assert_eq!(
        error_text(&src),
        "test.hcl:65:3: nesting deeper than 64 levels"
    );
}

#[test]
fn deeply_nested_interpolations_do_not_recurse() {
    let src = format!("x = \"{}", "${\"".repeat(100_000));
    assert_eq!(
        error_text(&src),
        "test.hcl:1:6: unterminated '${' in string: expected '}' before the end of the line"
    );
    let closed = format!("x = \"{}{}\"", "${\"".repeat(10_000), "\"}".repeat(10_000));
    assert_eq!(value_of(&closed).as_str().map(str::len), Some(50_000));
}

#[test]
fn huge_number_keeps_its_text_without_a_machine_value() {
    let digits = format!("1{}", "0".repeat(100_000));
    let value = value_of(&format!("x = {digits}"));
    let number = value.as_number();
    assert_eq!(number.map(|n| n.text().len()), Some(100_001));
    assert_eq!(number.and_then(|n| n.as_i64()), None);
    assert_eq!(number.and_then(|n| n.as_f64()), None);
}

/// A JSON file in HCL's syntax that uses every value form and escape, so
/// that cutting it up reaches every state of the JSON parser.
const JSON: &str = r#"{
  "//": "every form",
  "id": "esc \" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00 $${x} ${y}",
  "n": [0, -0, 12, -1.5, 1e3, 2.5E-3, 1e+2, true, false, null],
  "capability": [{"access_mode": "single-node-writer"}, {}],
  "plugin": {"hostpath": {"socket": "/run/h.sock", "é": []}},
  "job": [{"web": {"group": {"g": [{"count": 2}]}}}],
  "empty": {}
}
"#;

/// Checks that parsing the JSON `src` returns, that an error points inside
/// it, and that reading every property as blocks returns too.
fn check_json_returns(src: &str) {
    match json::parse(src, FILE) {
        Ok(body) => read_every_property(&body),
        Err(err) => {
            let lines = src.split('\n').count();
            assert!(
                err.pos.line >= 1 && err.pos.line <= lines && err.pos.col >= 1,
                "error {err} points outside {src:?}"
            );
            assert!(!err.message.is_empty());
        }
    }
}

/// Reads every property of `body` as blocks both ways, and the bodies of
/// those blocks in turn.
fn read_every_property(body: &Body) {
    for attr in body.attributes() {
        for labeled in [false, true] {
            for block in &attr.json_blocks(labeled).blocks {
                read_every_property(&block.body);
            }
        }
    }
}

#[test]
fn json_sample_parses() {
    if let Err(err) = json::parse(JSON, FILE) {
        panic!("{err}");
    }
}

#[test]
fn every_json_prefix_parses_or_fails_cleanly() {
    for (at, _) in JSON.char_indices() {
        check_json_returns(&JSON[..at]);
    }
}

#[test]
fn every_single_character_deletion_of_json_parses_or_fails_cleanly() {
    for (at, c) in JSON.char_indices() {
        let mut cut = String::with_capacity(JSON.len());
        cut.push_str(&JSON[..at]);
        cut.push_str(&JSON[at + c.len_utf8()..]);
        check_json_returns(&cut);
    }
}

#[test]
fn awkward_json_fragments_fail_cleanly() {
    let fragments = [
        "{",
        "}",
        "{\"",
        "{\"\\",
        "{\"\\u",
        "{\"\\uD83D",
        "{\"\\uD83D\\",
        "{\"\\uD83D\\u",
        "{\"\\uDE00\"",
        "{\"a\"",
        "{\"a\":",
        "{\"a\":-",
        "{\"a\":1e",
        "{\"a\":1.",
        "{\"a\":0",
        "{\"a\":t",
        "{\"a\":[",
        "{\"a\":[1,",
        "{\"a\":{",
        "{\"a\":\"\u{0}\"}",
        "{\"a\":\"\\\n\"}",
        "\u{feff}",
        "\u{feff}\u{feff}{}",
        "\0",
        "é",
        "{}\0",
        "{} x",
        "[]",
        "\"a\"",
        "1",
        "null",
    ];
    for src in fragments {
        check_json_returns(src);
    }
    for src in ["", "[]", "{", "{\"\\uD83D\"}", "{}\0"] {
        assert!(json::parse(src, FILE).is_err(), "{src:?}");
    }
}

#[test]
fn random_json_bytes_never_panic() {
    // A xorshift generator: deterministic, so a failure reproduces.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet = b"{}[]:,\"\\/ \n-+.eE0123456789abfnrtuDdlsx";
    for _ in 0..3000 {
        let len = (next() % 64) as usize;
        let mut src = String::from("{");
        for _ in 0..len {
            src.push(char::from(
                alphabet[(next() % alphabet.len() as u64) as usize],
            ));
        }
        check_json_returns(&src);
    }
}
