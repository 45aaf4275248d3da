//! Error messages and positions, checked exactly.

use super::{error_text, parse_err, parse_ok};
use crate::{Error, Pos, MAX_NESTING};

#[test]
fn error_displays_as_file_line_col_message() {
    let err = Error::new(
        "job.hcl",
        Pos::new(12, 18),
        "expected '=' or '{' after 'volume_mount', found string",
    );
    assert_eq!(
        err.to_string(),
        "job.hcl:12:18: expected '=' or '{' after 'volume_mount', found string"
    );
    let as_std: &dyn std::error::Error = &err;
    assert!(as_std.source().is_none());
}

#[test]
fn error_carries_file_and_position() {
    let err = parse_err("a = 1\n  b 2\n");
    assert_eq!(err.file, "test.hcl");
    assert_eq!(err.pos, Pos::new(2, 5));
}

#[test]
fn missing_equals_is_reported_at_the_value() {
    assert_eq!(
        error_text("job \"x\" {\n  count 3\n}\n"),
        "test.hcl:2:9: expected '=' or '{' after 'count', found number"
    );
}

#[test]
fn missing_brace_after_labels_names_the_header() {
    assert_eq!(
        error_text("volume_mount \"data\" volume = \"x\"\n"),
        "test.hcl:1:28: expected '{' after 'volume_mount \"data\" volume', found '='"
    );
}

#[test]
fn unterminated_string_is_reported_at_the_opening_quote() {
    assert_eq!(
        error_text("a = 1\nx = \"abc\ny = 2\n"),
        "test.hcl:2:5: unterminated string: expected a closing '\"' before the end of the line"
    );
}

#[test]
fn unterminated_string_at_end_of_file() {
    assert_eq!(
        error_text("x = \"abc\\\""),
        "test.hcl:1:5: unterminated string: expected a closing '\"' before the end of the file"
    );
}

#[test]
fn unterminated_interpolation_is_reported_at_its_start() {
    assert_eq!(
        error_text("x = \"a ${b\"\n"),
        "test.hcl:1:8: unterminated '${' in string: expected '}' before the end of the line"
    );
}

#[test]
fn unterminated_heredoc_is_reported_at_its_start() {
    assert_eq!(
        error_text("job {\n  x = <<EOF\n  text\n  EOFX\n"),
        "test.hcl:2:7: unterminated heredoc: no line with the closing 'EOF'"
    );
}

#[test]
fn heredoc_delimiter_must_end_the_line() {
    assert_eq!(
        error_text("x = <<-EOF # comment\nEOF\n"),
        "test.hcl:1:11: expected a newline right after the heredoc delimiter 'EOF'"
    );
}

#[test]
fn unterminated_block_comment_is_reported_at_its_start() {
    assert_eq!(
        error_text("x = 1\n  /* no end\n*\n"),
        "test.hcl:2:3: unterminated block comment: expected '*/'"
    );
}

#[test]
fn unexpected_closing_brace_at_top_level() {
    assert_eq!(
        error_text("job {\n}\n}\n"),
        "test.hcl:3:1: expected an attribute or block name, found '}' (there is no open block to close)"
    );
}

#[test]
fn unclosed_block_names_where_it_opened() {
    assert_eq!(
        error_text("job \"x\" {\n  group {\n  }\n"),
        "test.hcl:4:1: expected '}' to close block 'job' opened at 1:9, found end of file"
    );
}

#[test]
fn invalid_escape_is_reported_at_the_backslash() {
    assert_eq!(
        error_text(r#"x = "a\qb""#),
        "test.hcl:1:7: invalid escape sequence '\\q' in string (valid escapes are \\n, \\t, \\r, \\\", \\\\, \\uXXXX and \\UXXXXXXXX)"
    );
}

#[test]
fn short_unicode_escape_is_an_error() {
    assert_eq!(
        error_text(r#"x = "\u12g""#),
        "test.hcl:1:6: invalid escape sequence '\\u12': expected 4 hexadecimal digits"
    );
}

#[test]
fn surrogate_unicode_escape_is_an_error() {
    assert_eq!(
        error_text(r#"x = "\uD800""#),
        "test.hcl:1:6: invalid escape sequence '\\uD800': not a Unicode character"
    );
}

#[test]
fn nesting_limit_is_reported_at_the_first_level_too_deep() {
    let src = format!("x = {}", "[".repeat(MAX_NESTING + 1));
    assert_eq!(
        error_text(&src),
        "test.hcl:1:69: nesting deeper than 64 levels"
    );
}

#[test]
fn nesting_limit_allows_exactly_64_levels() {
    let src = format!(
        "x = {}{}\n",
        "[".repeat(MAX_NESTING),
        "]".repeat(MAX_NESTING)
    );
    parse_ok(&src);
}

#[test]
fn nesting_limit_counts_blocks_lists_and_objects_together() {
    let blocks = "b {\n".repeat(60);
    let src = format!("{blocks}x = [{{ y = [[[1]]] }}]\n");
    assert_eq!(
        error_text(&src),
        "test.hcl:61:14: nesting deeper than 64 levels"
    );
}

#[test]
fn two_attributes_on_one_line_are_an_error() {
    assert_eq!(
        error_text("a = 1 b = 2\n"),
        "test.hcl:1:7: expected a newline or ',' after the value of 'a', found identifier 'b'"
    );
}

#[test]
fn item_after_closing_brace_on_the_same_line_is_an_error() {
    assert_eq!(
        error_text("a {} b = 1\n"),
        "test.hcl:1:6: expected a newline after the closing '}' of block 'a', found identifier 'b'"
    );
}

#[test]
fn newline_after_equals_is_an_error() {
    assert_eq!(
        error_text("x =\n  1\n"),
        "test.hcl:1:4: expected a value for 'x', found newline"
    );
}

#[test]
fn duplicate_attribute_is_an_error() {
    assert_eq!(
        error_text("g {\n  count = 1\n  count = 2\n}\n"),
        "test.hcl:3:3: attribute 'count' is already set at 2:3"
    );
}

#[test]
fn half_an_operator_or_a_missing_operand_is_an_error_at_its_position() {
    assert_eq!(
        error_text("x = 1 & 2\n"),
        "test.hcl:1:7: expected the operator '&&'"
    );
    assert_eq!(
        error_text("x = 1 +\n"),
        "test.hcl:1:8: expected a value after '+', found newline"
    );
    assert_eq!(
        error_text("x = true ? 1\n"),
        "test.hcl:1:13: expected ':' of the '?' at 1:10, found newline"
    );
}

#[test]
fn for_outside_brackets_says_where_it_belongs() {
    assert_eq!(
        error_text("x = for s in l : s\n"),
        "test.hcl:1:5: expected a value for 'x', found identifier 'for' (a for expression is written inside '[ ]' or '{ }')"
    );
}

#[test]
fn malformed_for_expressions_say_what_was_expected() {
    assert_eq!(
        error_text("x = [for s l : s]\n"),
        "test.hcl:1:12: expected 'in' after the names of the 'for' at 1:5, found identifier 'l'"
    );
    assert_eq!(
        error_text("x = [for s in l s]\n"),
        "test.hcl:1:17: expected ':' after the collection of the 'for' at 1:5, found identifier 's'"
    );
    assert_eq!(
        error_text("x = {for k, v in m : k : v}\n"),
        "test.hcl:1:24: expected '=>' after the key of the 'for' at 1:5, found ':'"
    );
    assert_eq!(
        error_text("x = [for s in l : s, 1]\n"),
        "test.hcl:1:20: expected 'if' or ']' to close the 'for' opened at 1:5, found ','"
    );
    assert_eq!(
        error_text("x = {a = 1, for k, v in m : k => v}\n"),
        "test.hcl:1:13: a for expression must be alone in its '{ }', not after other entries"
    );
    assert_eq!(
        error_text("x = [for 1 in l : s]\n"),
        "test.hcl:1:10: expected a name after 'for', found number"
    );
}

#[test]
fn unquoted_duration_is_an_invalid_number() {
    assert_eq!(
        error_text("interval = 30s\n"),
        "test.hcl:1:12: invalid number '30s' (durations and other text need quotes: \"30s\")"
    );
}

#[test]
fn number_ending_in_a_point_is_an_error() {
    assert_eq!(
        error_text("x = 1.\n"),
        "test.hcl:1:5: invalid number '1.': expected digits after '.'"
    );
}

#[test]
fn list_elements_need_commas() {
    assert_eq!(
        error_text("x = [1 2]\n"),
        "test.hcl:1:8: expected ',' or ']' in the list opened at 1:5, found number"
    );
}

#[test]
fn object_entries_need_separators() {
    assert_eq!(
        error_text("x = { a = 1 b = 2 }\n"),
        "test.hcl:1:13: expected ',', a newline or '}' after the value of 'a', found identifier 'b'"
    );
}

#[test]
fn object_key_needs_equals_or_colon() {
    assert_eq!(
        error_text("x = { a 1 }\n"),
        "test.hcl:1:9: expected '=' or ':' after the key 'a', found number"
    );
}

#[test]
fn unclosed_list_names_where_it_opened() {
    assert_eq!(
        error_text("x = [\n  1,\n"),
        "test.hcl:3:1: expected ']' to close the list opened at 1:5, found end of file"
    );
}

#[test]
fn interpolated_block_label_is_an_error() {
    assert_eq!(
        error_text("task \"${name}\" {\n}\n"),
        "test.hcl:1:6: block labels cannot contain '${' or '%{' sequences"
    );
}

#[test]
fn stray_character_is_described() {
    assert_eq!(
        error_text("x = 1\n@\n"),
        "test.hcl:2:1: expected an attribute or block name, found '@'"
    );
}

#[test]
fn nul_byte_is_described_escaped() {
    assert_eq!(
        error_text("x = \0\n"),
        "test.hcl:1:5: expected a value for 'x', found '\\0'"
    );
}

#[test]
fn a_comma_after_a_block_is_an_error() {
    assert_eq!(
        error_text("a {}, b = 1\n"),
        "test.hcl:1:5: expected a newline after the closing '}' of block 'a', found ','"
    );
}

#[test]
fn two_commas_between_attributes_are_an_error() {
    assert_eq!(
        error_text("s { a = 1,, b = 2 }\n"),
        "test.hcl:1:11: expected an attribute or block name, found ','"
    );
}

#[test]
fn a_quoted_name_names_an_attribute_not_a_block() {
    assert_eq!(
        error_text("\"segments\" {\n}\n"),
        "test.hcl:1:12: expected '=' after the quoted attribute name \"segments\", found '{'"
    );
}

#[test]
fn a_quoted_attribute_name_cannot_interpolate() {
    assert_eq!(
        error_text("\"${x}\" = 1\n"),
        "test.hcl:1:1: attribute names cannot contain '${' or '%{' sequences"
    );
}
