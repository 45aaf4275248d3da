//! Each literal form, comments, and the small structural forms.

use super::{error_text, parse_ok, render, string_of, value_of};
use crate::{Expr, Pos, Span};

#[test]
fn string_escapes_are_decoded() {
    assert_eq!(string_of(r#"x = "a\nb\tc\rd\"e\\f""#), "a\nb\tc\rd\"e\\f");
}

#[test]
fn unicode_escapes_are_decoded() {
    assert_eq!(string_of(r#"x = "caf\u00e9 \U0001F600""#), "café 😀");
}

#[test]
fn interpolation_is_kept_as_written() {
    assert_eq!(
        string_of(r#"x = "echo ${NOMAD_TASK_DIR}/run""#),
        "echo ${NOMAD_TASK_DIR}/run"
    );
}

#[test]
fn template_directive_is_kept_as_written() {
    assert_eq!(
        string_of(r#"x = "%{ if a }yes%{ else }no%{ endif }""#),
        "%{ if a }yes%{ else }no%{ endif }"
    );
}

#[test]
fn interpolation_may_contain_quoted_strings_with_braces() {
    assert_eq!(
        string_of(r#"x = "${env["}"]}-${meta["a\"b"]}" "#),
        r#"${env["}"]}-${meta["a\"b"]}"#
    );
}

#[test]
fn escaped_template_sequences_are_decoded() {
    assert_eq!(
        string_of(r#"x = "$${HOME} %%{x} $$ %% $5""#),
        "${HOME} %{x} $$ %% $5"
    );
}

#[test]
fn string_span_includes_the_quotes() {
    let value = value_of("x = \"é\"");
    assert_eq!(value.span(), Span::new(Pos::new(1, 5), Pos::new(1, 8)));
}

#[test]
fn heredoc_keeps_lines_and_final_newline() {
    let src = "x = <<EOF\n  line one\n    line two\nEOF\ny = 1\n";
    assert_eq!(string_of(src), "  line one\n    line two\n");
    assert_eq!(value_of(src).kind_name(), "string");
}

#[test]
fn heredoc_closing_delimiter_may_be_indented() {
    let src = "x = <<EOT\nNOT EOT\n  EOT\n";
    assert_eq!(string_of(src), "NOT EOT\n");
}

#[test]
fn heredoc_closing_delimiter_may_have_trailing_blanks() {
    // Nomad's e2e/metrics/input/prometheus.hcl ends a heredoc with "EOH  ".
    let src = "x = <<EOH\nEOH x\nEOH \t\ny = 1\n";
    assert_eq!(string_of(src), "EOH x\n");
}

#[test]
fn indented_heredoc_strips_common_leading_whitespace() {
    let src = "x = <<-EOT\n    hello\n      world\n\n    ${NOMAD_ALLOC_DIR}\n    EOT\n";
    assert_eq!(string_of(src), "hello\n  world\n\n${NOMAD_ALLOC_DIR}\n");
}

#[test]
fn indented_heredoc_counts_tabs_as_one_character() {
    let src = "x = <<-EOT\n\t\tFoo\n\t  Bar\n\t  Baz\n  EOT\n";
    assert_eq!(string_of(src), "Foo\n Bar\n Baz\n");
}

#[test]
fn heredoc_keeps_backslashes_and_decodes_dollar_escape() {
    let src = "x = <<EOF\necho \\n $${X} ${Y}\nEOF\n";
    assert_eq!(string_of(src), "echo \\n ${X} ${Y}\n");
}

#[test]
fn heredoc_accepts_crlf_line_endings() {
    let src = "x = <<EOF\r\none\r\nEOF\r\ny = 2\r\n";
    assert_eq!(string_of(src), "one\n");
}

#[test]
fn heredoc_is_followed_by_the_next_attribute() {
    let body = parse_ok("x = <<EOF\nhi\nEOF\ny = \"after\"\n");
    let y = body.attribute("y").map(|a| a.value.clone());
    assert_eq!(y.as_ref().and_then(Expr::as_str), Some("after"));
    assert_eq!(y.map(|v| v.pos()), Some(Pos::new(4, 5)));
}

#[test]
fn integer_keeps_its_text_and_value() {
    let value = value_of("x = 42");
    let number = value.as_number();
    assert_eq!(number.map(|n| n.text()), Some("42"));
    assert_eq!(number.and_then(|n| n.as_i64()), Some(42));
    assert_eq!(number.and_then(|n| n.as_u64()), Some(42));
    assert_eq!(value.kind_name(), "number");
}

#[test]
fn negative_integer_is_a_number() {
    let value = value_of("x = -1");
    let number = value.as_number();
    assert_eq!(number.map(|n| n.text()), Some("-1"));
    assert_eq!(number.and_then(|n| n.as_i64()), Some(-1));
    assert_eq!(number.and_then(|n| n.as_u64()), None);
}

#[test]
fn float_is_a_number_but_not_an_integer() {
    let value = value_of("x = 2.5");
    let number = value.as_number();
    assert_eq!(number.and_then(|n| n.as_f64()), Some(2.5));
    assert_eq!(number.and_then(|n| n.as_i64()), None);
}

#[test]
fn exponent_forms_are_evaluated_exactly() {
    let cases = [
        ("1e3", Some(1000), Some(1000.0)),
        ("2.50E+2", Some(250), Some(250.0)),
        ("-1.5e-2", None, Some(-0.015)),
        ("100e-2", Some(1), Some(1.0)),
        ("0e999999999999999999999", Some(0), Some(0.0)),
        ("1e999999999999999999999", None, None),
    ];
    for (text, int, float) in cases {
        let value = value_of(&format!("x = {text}"));
        let number = value.as_number();
        assert_eq!(number.map(|n| n.text()), Some(text));
        assert_eq!(number.and_then(|n| n.as_i64()), int, "{text} as i64");
        assert_eq!(number.and_then(|n| n.as_f64()), float, "{text} as f64");
    }
}

#[test]
fn big_integers_keep_their_precision() {
    let big = "123456789012345678901234567890";
    let value = value_of(&format!("x = {big}"));
    assert_eq!(value.as_number().map(|n| n.text()), Some(big));
    assert_eq!(value.as_number().and_then(|n| n.as_i64()), None);
    let min = value_of("x = -9223372036854775808");
    assert_eq!(min.as_number().and_then(|n| n.as_i64()), Some(i64::MIN));
    let above = value_of("x = 9223372036854775808");
    assert_eq!(above.as_number().and_then(|n| n.as_i64()), None);
    assert_eq!(
        above.as_number().and_then(|n| n.as_u64()),
        Some(9_223_372_036_854_775_808)
    );
}

#[test]
fn booleans_and_null_are_values() {
    let body = parse_ok("a = true\nb = false\nc = null\n");
    let kinds: Vec<&str> = body.attributes().map(|a| a.value.kind_name()).collect();
    assert_eq!(kinds, ["bool", "bool", "null"]);
    assert_eq!(
        body.attribute("b").and_then(|a| a.value.as_bool()),
        Some(false)
    );
    assert!(body.attribute("c").is_some_and(|a| a.value.is_null()));
}

#[test]
fn list_allows_newlines_and_a_trailing_comma() {
    let body = parse_ok("x = [\n  \"a\",\n  2\n  , [true],\n]\n");
    assert_eq!(render(&body), "x = [\"a\", 2, [true]]\n");
}

#[test]
fn empty_list_and_object_are_values() {
    let body = parse_ok("a = []\nb = {}\n");
    assert_eq!(render(&body), "a = []\nb = { }\n");
}

#[test]
fn object_accepts_equals_colon_and_quoted_keys() {
    let src = "x = { a = 1, \"b.c\" = \"two\", d: [3]\n  e = { f: null }\n}\n";
    assert_eq!(
        render(&parse_ok(src)),
        "x = { a = 1, \"b.c\" = \"two\", d = [3], e = { f = null } }\n"
    );
}

#[test]
fn object_keys_record_quoting_and_position() {
    let value = value_of("x = {\n  \"k\" = 1\n}");
    let Some([(key, _)]) = value.as_object() else {
        panic!("expected one entry in {value:?}");
    };
    assert!(key.quoted);
    assert_eq!(key.span.start, Pos::new(2, 3));
    assert_eq!(value.span(), Span::new(Pos::new(1, 5), Pos::new(3, 2)));
}

#[test]
fn comments_of_all_kinds_are_ignored_everywhere() {
    let src = r#"# hash comment
// slash comment
/* block
   comment */
job /* between kind and label */ "web" /* before brace */ { # after brace
  a = /* before value */ 1 // after value
  b = [ # in list
    1, /* in list */ 2 // after element
  ]
  c = { // in object
    k = "v" # after entry
  }
  /* standalone */
} // after block
"#;
    assert_eq!(
        render(&parse_ok(src)),
        "job \"web\" {\n  a = 1\n  b = [1, 2]\n  c = { k = \"v\" }\n}\n"
    );
}

#[test]
fn comment_markers_inside_strings_are_text() {
    assert_eq!(string_of(r#"x = "a # b // c /* d""#), "a # b // c /* d");
}

#[test]
fn blocks_accept_identifier_and_multiple_labels() {
    let body = parse_ok("block foo \"bar\" baz {\n}\n");
    let Some(block) = body.blocks().next() else {
        panic!("no block");
    };
    let labels: Vec<(&str, bool)> = block
        .labels
        .iter()
        .map(|l| (l.value.as_str(), l.quoted))
        .collect();
    assert_eq!(labels, [("foo", false), ("bar", true), ("baz", false)]);
}

#[test]
fn single_line_block_ends_at_its_closing_brace() {
    let body = parse_ok("env { FOO = \"bar\" }\nempty {}\n");
    assert_eq!(render(&body), "env {\n  FOO = \"bar\"\n}\nempty {\n}\n");
}

#[test]
fn quoted_attribute_names_are_attributes() {
    // As in Nomad's e2e inputs: HCL1 lets a block body quote its keys.
    let body = parse_ok(
        "segments {\n  \"topology.ebs.csi.aws.com/zone\" = \"us-east-1b\"\n  rack = \"R1\"\n}\n",
    );
    assert_eq!(
        render(&body),
        "segments {\n  \"topology.ebs.csi.aws.com/zone\" = \"us-east-1b\"\n  rack = \"R1\"\n}\n"
    );
    let block = body.blocks().next().unwrap();
    let zone = block
        .body
        .attribute("topology.ebs.csi.aws.com/zone")
        .unwrap();
    assert!(zone.key.quoted);
    assert_eq!(zone.key.span.start, Pos::new(2, 3));
    assert!(!block.body.attribute("rack").unwrap().key.quoted);
}

#[test]
fn a_quoted_name_and_an_identifier_are_the_same_attribute() {
    assert_eq!(
        error_text("s {\n  rack = \"R1\"\n  \"rack\" = \"R2\"\n}\n"),
        "test.hcl:3:3: attribute 'rack' is already set at 2:3"
    );
}

#[test]
fn one_line_blocks_separate_attributes_with_commas() {
    // As in Nomad's documentation: `segments { rack = "R1", zone = "z" }`.
    let body = parse_ok("segments { rack = \"R1\", zone = \"z\" }\nnext = 1\n");
    assert_eq!(
        render(&body),
        "segments {\n  rack = \"R1\"\n  zone = \"z\"\n}\nnext = 1\n"
    );
    // A trailing comma, a comma at the end of a line, and quoted keys.
    let body = parse_ok("s {\n  a = 1,\n  \"b.c\" = [2], d = true,\n}\n");
    assert_eq!(
        render(&body),
        "s {\n  a = 1\n  \"b.c\" = [2]\n  d = true\n}\n"
    );
}

#[test]
fn empty_and_comment_only_files_have_no_items() {
    assert!(parse_ok("").items.is_empty());
    assert!(parse_ok("\n\n  # nothing\n/* here */\n").items.is_empty());
}

#[test]
fn crlf_line_endings_separate_items() {
    let body = parse_ok("a = 1\r\nb {\r\n  c = \"d\"\r\n}\r\n");
    assert_eq!(render(&body), "a = 1\nb {\n  c = \"d\"\n}\n");
}

#[test]
fn columns_count_characters_not_bytes() {
    let body = parse_ok("é = \"ü\"\nx = \"ö\" \n");
    let pos: Vec<Pos> = body.attributes().map(|a| a.value.pos()).collect();
    assert_eq!(pos, [Pos::new(1, 5), Pos::new(2, 5)]);
    assert_eq!(
        body.attributes().next().map(|a| a.key.name.as_str()),
        Some("é")
    );
}

#[test]
fn identifiers_may_contain_dashes_and_digits() {
    let body = parse_ok("max-parallel_2 = 1\n");
    assert!(body.attribute("max-parallel_2").is_some());
}

#[test]
fn byte_order_mark_is_skipped() {
    let body = parse_ok("\u{feff}x = 1\n");
    assert_eq!(
        body.attribute("x").map(|a| a.key.span.start),
        Some(Pos::new(1, 1))
    );
}
