//! HCL's JSON syntax: error messages and positions, checked exactly.

use super::json_error_text;
use crate::MAX_NESTING;

#[test]
fn the_file_must_be_one_object() {
    assert_eq!(
        json_error_text(""),
        "test.json:1:1: expected '{' (a JSON file holds one object), found end of file"
    );
    assert_eq!(
        json_error_text("\n  [1]"),
        "test.json:2:3: expected '{' (a JSON file holds one object), found '['"
    );
    assert_eq!(
        json_error_text("{} {}"),
        "test.json:1:4: expected the end of the file after the object, found '{'"
    );
}

#[test]
fn keys_need_quotes() {
    assert_eq!(
        json_error_text("{\n  id: \"db\"\n}"),
        "test.json:2:3: expected a key (a quoted string) or '}' in the object opened at 1:1, found 'i'"
    );
    assert_eq!(
        json_error_text("{'id': 1}"),
        "test.json:1:2: expected a key (a quoted string) or '}' in the object opened at 1:1, found '''"
    );
}

#[test]
fn trailing_commas_are_refused() {
    assert_eq!(
        json_error_text("{\"a\": 1,\n}"),
        "test.json:2:1: expected a key (a quoted string) after ',' (JSON has no trailing commas), found '}'"
    );
    assert_eq!(
        json_error_text("{\"a\": [1, 2, ]}"),
        "test.json:1:14: expected a value after ',' (JSON has no trailing commas), found ']'"
    );
}

#[test]
fn a_missing_colon_or_comma_is_reported_where_it_should_be() {
    assert_eq!(
        json_error_text("{\"a\" 1}"),
        "test.json:1:6: expected ':' after the key \"a\", found '1'"
    );
    assert_eq!(
        json_error_text("{\"a\": 1\n \"b\": 2}"),
        "test.json:2:2: expected ',' or '}' after the value of \"a\" (in the object opened at 1:1), found '\"'"
    );
    assert_eq!(
        json_error_text("{\"a\": [1 2]}"),
        "test.json:1:10: expected ',' or ']' in the list opened at 1:7, found '2'"
    );
}

#[test]
fn a_missing_value_says_whose() {
    assert_eq!(
        json_error_text("{\"a\": }"),
        "test.json:1:7: expected a value for \"a\", found '}'"
    );
    assert_eq!(
        json_error_text("{\"a\": [,]}"),
        "test.json:1:8: expected a value in the list, found ','"
    );
}

#[test]
fn unclosed_objects_and_lists_reach_the_end_of_the_file() {
    assert_eq!(
        json_error_text("{\"a\": {\"b\": 1"),
        "test.json:1:14: expected ',' or '}' after the value of \"b\" (in the object opened at 1:7), found end of file"
    );
    assert_eq!(
        json_error_text("{\"a\": [1"),
        "test.json:1:9: expected ',' or ']' in the list opened at 1:7, found end of file"
    );
}

#[test]
fn a_key_given_twice_is_refused() {
    assert_eq!(
        json_error_text("{\n  \"id\": \"a\",\n  \"id\": \"b\"\n}"),
        "test.json:3:3: key \"id\" is already set at 2:3"
    );
    assert_eq!(
        json_error_text("{\"m\": {\"k\": 1, \"k\": 2}}"),
        "test.json:1:16: key \"k\" is already set at 1:8"
    );
}

#[test]
fn bare_words_say_what_json_wants() {
    assert_eq!(
        json_error_text("{\"a\": csi}"),
        "test.json:1:7: expected a value for \"a\", found 'csi' (strings need quotes: \"csi\")"
    );
    assert_eq!(
        json_error_text("{\"a\": True}"),
        "test.json:1:7: expected a value for \"a\", found 'True' (JSON writes it in lowercase: true)"
    );
    assert_eq!(
        json_error_text("{\"a\": [nul]}"),
        "test.json:1:8: expected a value in the list, found 'nul' (strings need quotes: \"nul\")"
    );
}

#[test]
fn unterminated_strings_are_reported_at_the_opening_quote() {
    assert_eq!(
        json_error_text("{\"a\": \"abc\n\"}"),
        "test.json:1:7: unterminated string: expected a closing '\"' before the end of the line"
    );
    assert_eq!(
        json_error_text("{\"a\": \"abc\\\""),
        "test.json:1:7: unterminated string: expected a closing '\"' before the end of the file"
    );
    assert_eq!(
        json_error_text("{\"a"),
        "test.json:1:2: unterminated string: expected a closing '\"' before the end of the file"
    );
}

#[test]
fn raw_control_characters_in_strings_are_refused() {
    assert_eq!(
        json_error_text("{\"a\": \"x\ty\"}"),
        "test.json:1:9: control character U+0009 in a string (write it as the escape \\u0009)"
    );
    assert_eq!(
        json_error_text("{\"a\u{1}\": 1}"),
        "test.json:1:4: control character U+0001 in a string (write it as the escape \\u0001)"
    );
}

#[test]
fn unknown_escapes_list_the_valid_ones() {
    assert_eq!(
        json_error_text(r#"{"a": "x\qy"}"#),
        r#"test.json:1:9: invalid escape sequence '\q' in string (valid escapes are \", \\, \/, \b, \f, \n, \r, \t and \uXXXX)"#
    );
    // HCL's native `\U` is not JSON.
    assert_eq!(
        json_error_text(r#"{"a": "\U0001F600"}"#),
        r#"test.json:1:8: invalid escape sequence '\U' in string (valid escapes are \", \\, \/, \b, \f, \n, \r, \t and \uXXXX)"#
    );
}

#[test]
fn unicode_escapes_need_four_hex_digits() {
    assert_eq!(
        json_error_text(r#"{"a": "\u12"}"#),
        r#"test.json:1:8: invalid escape sequence '\u12': expected 4 hexadecimal digits"#
    );
    assert_eq!(
        json_error_text(r#"{"a": "\u00g0"}"#),
        r#"test.json:1:8: invalid escape sequence '\u00': expected 4 hexadecimal digits"#
    );
}

#[test]
fn unpaired_surrogates_are_refused() {
    let high =
        "a high surrogate must be followed by the escape of a low surrogate (\\uDC00 to \\uDFFF)";
    assert_eq!(
        json_error_text(r#"{"a": "\uD83D"}"#),
        format!(r"test.json:1:8: invalid escape sequence '\uD83D': {high}")
    );
    assert_eq!(
        json_error_text(r#"{"a": "\uD83Dx"}"#),
        format!(r"test.json:1:8: invalid escape sequence '\uD83D': {high}")
    );
    assert_eq!(
        json_error_text(r#"{"a": "\uD83D\u0041"}"#),
        format!(r"test.json:1:8: invalid escape sequence '\uD83D': {high}")
    );
    assert_eq!(
        json_error_text(r#"{"a": "\uD83D\uD83D"}"#),
        format!(r"test.json:1:8: invalid escape sequence '\uD83D': {high}")
    );
    assert_eq!(
        json_error_text(r#"{"a": "\uDE00"}"#),
        r"test.json:1:8: invalid escape sequence '\uDE00': a low surrogate without a high surrogate before it"
    );
    assert_eq!(
        json_error_text(r#"{"a": "\uD83D\u12"}"#),
        r"test.json:1:14: invalid escape sequence '\u12': expected 4 hexadecimal digits"
    );
}

#[test]
fn malformed_numbers_say_why() {
    for (number, reason) in [
        ("-", "expected a digit after '-'"),
        ("-x", "expected a digit after '-'"),
        ("1.", "expected digits after '.'"),
        ("1.e5", "expected digits after '.'"),
        ("1e", "expected digits in the exponent"),
        ("1e+", "expected digits in the exponent"),
        ("01", "JSON numbers have no leading zeros"),
        ("-00.5", "JSON numbers have no leading zeros"),
        ("30s", "text needs quotes: \"30s\""),
        ("1.2.3", "text needs quotes: \"1.2.3\""),
    ] {
        assert_eq!(
            json_error_text(&format!("{{\"a\": {number}}}")),
            format!("test.json:1:7: invalid number '{number}' ({reason})"),
            "{number}"
        );
    }
}

#[test]
fn other_number_forms_are_not_json() {
    for (src, found) in [("+1", "'+'"), (".5", "'.'"), ("0x10", "")] {
        let text = json_error_text(&format!("{{\"a\": {src}}}"));
        assert!(text.starts_with("test.json:1:7: "), "{src}: {text}");
        assert!(text.contains(found), "{src}: {text}");
    }
}

#[test]
fn nesting_is_limited_and_the_file_object_is_not_counted() {
    let depth = |n: usize| format!("{{\"a\": {}1{}}}", "[".repeat(n), "]".repeat(n));
    assert!(crate::json::parse(&depth(MAX_NESTING), "t.json").is_ok());
    assert_eq!(
        json_error_text(&depth(MAX_NESTING + 1)),
        format!(
            "test.json:1:{}: nesting deeper than 64 levels",
            7 + MAX_NESTING
        )
    );
}

#[test]
fn deeply_nested_input_is_refused_without_recursing() {
    let lists = format!("{{\"x\": {}", "[".repeat(100_000));
    assert_eq!(
        json_error_text(&lists),
        "test.json:1:71: nesting deeper than 64 levels"
    );
    let objects = format!("{{{}", "\"a\": {".repeat(100_000));
    assert_eq!(
        json_error_text(&objects),
        "test.json:1:391: nesting deeper than 64 levels"
    );
    let mixed = format!("{{\"x\": {}", "[{\"a\": ".repeat(100_000));
    assert_eq!(
        json_error_text(&mixed),
        "test.json:1:231: nesting deeper than 64 levels"
    );
}
