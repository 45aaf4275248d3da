//! No input may panic the parser or overflow its stack.

use super::files::{AGENT_CONFIG, JOB};
use super::{error_text, value_of, FILE};
use crate::hcl::parse;

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
