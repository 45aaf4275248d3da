//! HCL's JSON syntax: every kind of JSON value, every escape, and the tree
//! with its positions.

use super::{json_ok, json_string_of, json_value_of, parse_ok, render};
use crate::{Expr, Item, Pos, Span, Syntax};

#[test]
fn every_simple_escape_decodes() {
    assert_eq!(
        json_string_of(r#""q\" b\\ s\/ b\b f\f n\n r\r t\t""#),
        "q\" b\\ s/ b\u{8} f\u{c} n\n r\r t\t"
    );
}

#[test]
fn unicode_escapes_decode_in_any_case_of_hex_digit() {
    assert_eq!(json_string_of(r#""\u00e9\u00E9\u0041""#), "ééA");
    assert_eq!(json_string_of(r#""\u0000""#), "\0");
    assert_eq!(json_string_of(r#""\uFFFF""#), "\u{ffff}");
}

#[test]
fn surrogate_pairs_decode_to_one_character() {
    assert_eq!(json_string_of(r#""\uD83D\uDE00""#), "😀");
    assert_eq!(json_string_of(r#""\ud834\udd1e x""#), "𝄞 x");
    assert_eq!(json_string_of(r#""\uDBFF\uDFFF""#), "\u{10ffff}");
}

#[test]
fn unescaped_unicode_is_kept_as_written() {
    assert_eq!(json_string_of("\"é 😀 \u{7f}\""), "é 😀 \u{7f}");
}

#[test]
fn strings_are_templates_as_in_hcl() {
    // `${...}` is kept for the agent; `$${` and `%%{` are the escapes for
    // a literal `${` and `%{`, as in a native string.
    assert_eq!(
        json_string_of(r#""${NOMAD_TASK_DIR}/x $${y} %%{z} $a""#),
        "${NOMAD_TASK_DIR}/x ${y} %{z} $a"
    );
    assert_eq!(
        json_value_of(r#""$${x}""#).as_str(),
        parse_ok("x = \"$${x}\"\n")
            .attribute("x")
            .and_then(|a| a.value.as_str())
    );
}

#[test]
fn keys_are_taken_as_written() {
    let body = json_ok(r#"{"$${k}": 1, "a\u002Eb": 2}"#);
    let keys: Vec<&str> = body
        .attributes()
        .map(|attr| attr.key.name.as_str())
        .collect();
    assert_eq!(keys, ["$${k}", "a.b"]);
    assert!(body.attributes().all(|attr| attr.key.quoted));
}

#[test]
fn numbers_keep_their_text() {
    for text in [
        "0", "-0", "7", "-12", "3.25", "-0.5", "1e3", "1E3", "1e+3", "2.5e-3", "-1.5E-2",
    ] {
        let value = json_value_of(text);
        assert_eq!(value.as_number().map(|n| n.text()), Some(text));
    }
}

#[test]
fn numbers_have_machine_values_when_they_fit() {
    let number = |text: &str| json_value_of(text).as_number().cloned();
    assert_eq!(number("1e3").and_then(|n| n.as_u64()), Some(1000));
    assert_eq!(number("-0").and_then(|n| n.as_u64()), Some(0));
    assert_eq!(number("-12").and_then(|n| n.as_i64()), Some(-12));
    assert_eq!(number("2.5").and_then(|n| n.as_u64()), None);
    assert_eq!(number("2.5e-3").and_then(|n| n.as_f64()), Some(0.0025));
    assert_eq!(
        number("18446744073709551616").and_then(|n| n.as_u64()),
        None
    );
}

#[test]
fn literals_are_bools_and_null() {
    assert_eq!(json_value_of("true").as_bool(), Some(true));
    assert_eq!(json_value_of("false").as_bool(), Some(false));
    assert!(json_value_of("null").is_null());
}

#[test]
fn arrays_and_objects_nest() {
    let value = json_value_of(r#"[1, "a", [], {}, {"k": [true, null]}]"#);
    let mut out = String::new();
    super::render_expr(&value, &mut out);
    assert_eq!(out, r#"[1, "a", [], { }, { "k" = [true, null] }]"#);
}

#[test]
fn the_file_is_a_body_of_attributes_in_order() {
    let body = json_ok(
        r#"{
  "id": "db",
  "capability": [{"access_mode": "single-node-writer"}],
  "mount_options": {"fs_type": "ext4"}
}"#,
    );
    assert_eq!(body.syntax, Syntax::Json);
    assert!(body
        .items
        .iter()
        .all(|item| matches!(item, Item::Attribute(_))));
    assert_eq!(
        render(&body),
        r#""id" = "db"
"capability" = [{ "access_mode" = "single-node-writer" }]
"mount_options" = { "fs_type" = "ext4" }
"#
    );
}

#[test]
fn spans_count_characters_and_lines() {
    let body = json_ok("{\n  \"é\": \"ü\",\n\t\"n\": [1, 22]\n}");
    let first = body.attribute("é").map(|attr| (attr.key.span, attr.span));
    assert_eq!(
        first,
        Some((
            Span::new(Pos::new(2, 3), Pos::new(2, 6)),
            Span::new(Pos::new(2, 3), Pos::new(2, 11))
        ))
    );
    let list = body.attribute("n").map(|attr| attr.value.clone());
    let Some(Expr::List { items, span }) = list else {
        panic!("n is not a list: {list:?}");
    };
    assert_eq!(span, Span::new(Pos::new(3, 7), Pos::new(3, 14)));
    let spans: Vec<Span> = items.iter().map(Expr::span).collect();
    assert_eq!(
        spans,
        [
            Span::new(Pos::new(3, 8), Pos::new(3, 9)),
            Span::new(Pos::new(3, 11), Pos::new(3, 13))
        ]
    );
}

#[test]
fn whitespace_and_a_byte_order_mark_are_skipped() {
    let body = json_ok("\u{feff} \r\n\t{ \"a\" : 1 , \"b\":2 }\r\n \t");
    assert_eq!(body.items.len(), 2);
    assert_eq!(
        body.attribute("a").map(|attr| attr.key.span.start),
        Some(Pos::new(2, 4))
    );
}

#[test]
fn an_empty_object_is_an_empty_body() {
    assert!(json_ok("{}").items.is_empty());
}

#[test]
fn comment_properties_of_a_body_are_left_out() {
    let body = json_ok(r#"{"//": "a comment", "a": 1, "//": ["another"]}"#);
    assert_eq!(render(&body), "\"a\" = 1\n");
}

#[test]
fn comment_keys_inside_an_object_value_are_kept() {
    // Only a body drops them: an object attribute keeps every key.
    let value = json_value_of(r#"{"//": "c"}"#);
    assert_eq!(value.as_object().map(<[_]>::len), Some(1));
}

#[test]
fn the_syntax_is_told_by_the_file_name() {
    assert_eq!(Syntax::of_file("volume.json"), Syntax::Json);
    assert_eq!(Syntax::of_file("/etc/csi-agent/job.json"), Syntax::Json);
    assert_eq!(Syntax::of_file("volume.hcl"), Syntax::Native);
    assert_eq!(Syntax::of_file("json"), Syntax::Native);
    assert_eq!(Syntax::of_file("<stdin>"), Syntax::Native);
    let json = crate::parse_file(r#"{"a": 1}"#, "x.json").map(|b| b.syntax);
    let native = crate::parse_file("a = 1\n", "x.hcl").map(|b| b.syntax);
    assert_eq!((json, native), (Ok(Syntax::Json), Ok(Syntax::Native)));
}
