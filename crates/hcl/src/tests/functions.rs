//! The function table: one test per function, through the parser and the
//! evaluator as a job file uses them.

use std::collections::BTreeMap;

use super::{parse_ok, render, FILE};
use crate::{evaluate, function_names, FileSource, Scope};

/// The value of the expression `src`, as `x = VALUE` renders it.
pub(super) fn value(src: &str) -> String {
    let files = FileSource {
        given: BTreeMap::from([("certs/ca.pem".to_string(), "PEM\n".to_string())]),
        ..FileSource::default()
    };
    let scope = Scope {
        files: Some(&files),
        ..Scope::default()
    };
    let mut body = parse_ok(&format!("x = {src}\n"));
    match evaluate(&mut body, &scope, FILE) {
        Ok(()) => render(&body)
            .trim_start_matches("x = ")
            .trim_end()
            .to_string(),
        Err(errors) => format!("error: {}", errors[0].message),
    }
}

#[test]
fn format_fills_go_verbs() {
    assert_eq!(
        value(r#"format("%s-%d %q 100%%", "a", 7, "b")"#),
        r#""a-7 \"b\" 100%""#
    );
    assert_eq!(
        value(r#"format("%s")"#),
        "error: format: not enough arguments for %s"
    );
}

#[test]
fn join_and_split() {
    assert_eq!(value(r#"join(",", ["a", "b"])"#), r#""a,b""#);
    assert_eq!(value(r#"split(",", "a,b")"#), r#"["a", "b"]"#);
}

#[test]
fn lower_upper() {
    assert_eq!(value(r#"lower("AbC")"#), r#""abc""#);
    assert_eq!(value(r#"upper("AbC")"#), r#""ABC""#);
}

#[test]
fn replace_is_literal() {
    assert_eq!(value(r#"replace("a.b.c", ".", "/")"#), r#""a/b/c""#);
}

#[test]
fn trims() {
    assert_eq!(value(r#"trimspace("  a \n")"#), r#""a""#);
    assert_eq!(value(r#"trim("--a--", "-")"#), r#""a""#);
    assert_eq!(value(r#"trimprefix("vol-1", "vol-")"#), r#""1""#);
    assert_eq!(value(r#"trimsuffix("a.hcl", ".hcl")"#), r#""a""#);
    assert_eq!(value(r#"chomp("a\n")"#), r#""a""#);
}

#[test]
fn substr_and_strrev() {
    assert_eq!(value(r#"substr("hello", 1, 3)"#), r#""ell""#);
    assert_eq!(value(r#"substr("hello", 2, -1)"#), r#""llo""#);
    assert_eq!(value(r#"strrev("abc")"#), r#""cba""#);
}

#[test]
fn conversions() {
    assert_eq!(value("tostring(5)"), r#""5""#);
    assert_eq!(value(r#"tonumber("5")"#), "5");
    assert_eq!(value(r#"tobool("true")"#), "true");
    assert_eq!(value(r#"tolist(["a"])"#), r#"["a"]"#);
    assert_eq!(value(r#"toset(["a"])"#), r#"["a"]"#);
    assert_eq!(value(r#"tomap({a = 1})"#), r#"{ "a" = 1 }"#);
}

#[test]
fn concat_joins_lists() {
    assert_eq!(
        value(r#"concat(["a"], [], ["b", "c"])"#),
        r#"["a", "b", "c"]"#
    );
    assert_eq!(
        value(r#"concat("a")"#),
        "error: concat: argument 1 must be a list, not a string"
    );
}

#[test]
fn lookup_with_and_without_default() {
    assert_eq!(value(r#"lookup({a = "1"}, "a")"#), r#""1""#);
    assert_eq!(value(r#"lookup({a = "1"}, "b", "d")"#), r#""d""#);
    assert_eq!(
        value(r#"lookup({a = "1"}, "b")"#),
        r#"error: lookup: no key "b" and no default"#
    );
}

#[test]
fn length_of_strings_lists_and_maps() {
    assert_eq!(value(r#"length("héé")"#), "3");
    assert_eq!(value(r#"length(["a", "b"])"#), "2");
    assert_eq!(value("length({a = 1})"), "1");
}

#[test]
fn element_wraps_around() {
    assert_eq!(value(r#"element(["a", "b"], 3)"#), r#""b""#);
}

#[test]
fn contains_keys_values() {
    assert_eq!(value(r#"contains(["a", "b"], "b")"#), "true");
    assert_eq!(value(r#"keys({a = 1, b = 2})"#), r#"["a", "b"]"#);
    assert_eq!(value(r#"values({a = 1, b = 2})"#), "[1, 2]");
    // go-cty orders a map by its keys, not as it was written.
    assert_eq!(value(r#"keys({b = 1, a = 2})"#), r#"["a", "b"]"#);
    assert_eq!(value(r#"values({b = 1, a = 2})"#), "[2, 1]");
}

#[test]
fn merge_later_maps_win() {
    assert_eq!(
        value("merge({a = 1, b = 1}, {b = 2})"),
        r#"{ "a" = 1, "b" = 2 }"#
    );
}

#[test]
fn list_shaping() {
    assert_eq!(
        value(r#"flatten([["a"], ["b", ["c"]]])"#),
        r#"["a", "b", "c"]"#
    );
    assert_eq!(value(r#"distinct(["a", "b", "a"])"#), r#"["a", "b"]"#);
    assert_eq!(value(r#"reverse(["a", "b"])"#), r#"["b", "a"]"#);
    assert_eq!(value(r#"slice(["a", "b", "c"], 1, 3)"#), r#"["b", "c"]"#);
    assert_eq!(value(r#"compact(["a", "", "b"])"#), r#"["a", "b"]"#);
    assert_eq!(value(r#"coalesce("", "b")"#), r#""b""#);
    assert_eq!(value(r#"zipmap(["a"], [1])"#), r#"{ "a" = 1 }"#);
}

#[test]
fn numbers() {
    assert_eq!(value("max(1, 5, 3)"), "5");
    assert_eq!(value("min(1, 5, 3)"), "1");
    assert_eq!(value("abs(-2)"), "2");
    assert_eq!(value("ceil(1.2)"), "2");
    assert_eq!(value("floor(1.8)"), "1");
}

#[test]
fn base64_round_trips() {
    assert_eq!(value(r#"base64encode("hello!?")"#), r#""aGVsbG8hPw==""#);
    assert_eq!(value(r#"base64decode("aGVsbG8hPw==")"#), r#""hello!?""#);
    assert_eq!(
        value(r#"base64decode("a")"#),
        "error: base64decode: not valid base64"
    );
}

#[test]
fn json_round_trips_with_sorted_keys() {
    assert_eq!(
        value(r#"jsonencode({b = [1, true], a = "x<"})"#),
        r#""{\"a\":\"x\\u003c\",\"b\":[1,true]}""#
    );
    assert_eq!(
        value(r#"jsondecode("{\"a\": [1, null]}")"#),
        r#"{ "a" = [1, null] }"#
    );
}

#[test]
fn urlencode_as_query_escape() {
    assert_eq!(value(r#"urlencode("a b/c")"#), r#""a+b%2Fc""#);
}

#[test]
fn uuidv5_is_rfc_4122s_name_based_uuid() {
    assert_eq!(
        value(r#"uuidv5("dns", "kadalu.io")"#),
        r#""808d0902-f454-5ea3-b749-cfd111cc35ed""#
    );
    assert_eq!(
        value(r#"uuidv5("url", "https://x")"#),
        r#""48d34be5-10a3-5c30-96ef-9cf9a60110f2""#
    );
    assert_eq!(
        value(r#"uuidv5("6ba7b814-9dad-11d1-80b4-00c04fd430c8", "")"#),
        r#""b4bdf874-8c03-5bd8-8fd7-5e409dfd82c0""#
    );
    // More than one SHA-1 block.
    assert_eq!(
        value(&format!("uuidv5(\"dns\", \"{}\")", "a".repeat(100))),
        r#""56596f37-716c-57a9-a735-2561f8608390""#
    );
    assert_eq!(
        value(r#"uuidv5("nope", "a")"#),
        r#"error: uuidv5: "nope" is not a namespace: dns, url, oid, x500 or a UUID"#
    );
}

#[test]
fn file_reads_what_was_sent_with_the_job() {
    assert_eq!(value(r#"file("certs/ca.pem")"#), r#""PEM\n""#);
    assert_eq!(
        value(r#"file("other")"#),
        r#"error: file: file "other" was not sent with the job"#
    );
}

#[test]
fn basename_dirname() {
    assert_eq!(value(r#"basename("/a/b.txt")"#), r#""b.txt""#);
    assert_eq!(value(r#"dirname("/a/b.txt")"#), r#""/a""#);
}

#[test]
fn the_number_of_arguments_is_checked() {
    assert_eq!(
        value(r#"upper("a", "b")"#),
        "error: upper takes 1 arguments, not 2"
    );
}

#[test]
fn every_function_in_the_table_is_tested_here() {
    let tests = [
        include_str!("functions.rs"),
        include_str!("functions_network_regex.rs"),
    ]
    .concat();
    for name in function_names() {
        assert!(tests.contains(&format!("{name}(")), "no test calls {name}");
    }
}

#[test]
fn json_decode_reads_plain_json_where_template_sequences_are_text() {
    // `$${` and `%%{` are HCL's escapes: the argument holds `${x}` and
    // `%{if y}`, which JSON reads as any other characters.
    assert_eq!(
        value(r#"jsondecode("{\"a\": \"$${x}\", \"b\": [\"%%{if y}\"]}")"#),
        r#"{ "a" = "${x}", "b" = ["%{if y}"] }"#
    );
    assert_eq!(
        value(r#"jsonencode(jsondecode("[\"$${x}\"]"))"#),
        r#""[\"${x}\"]""#
    );
}

#[test]
fn json_decode_keeps_numbers_as_written() {
    assert_eq!(
        value(r#"jsondecode("[1.5e3, -0, 12345678901234567890, 0.1]")"#),
        "[1.5e3, -0, 12345678901234567890, 0.1]"
    );
    assert_eq!(value(r#"jsondecode("2.5e1") + 1"#), "26");
}

#[test]
fn json_decode_stops_at_the_json_nesting_limit() {
    let depth = json::MAX_DEPTH;
    let deep = |n: usize| format!(r#"jsondecode("{}{}")"#, "[".repeat(n), "]".repeat(n));
    assert!(!value(&deep(depth)).starts_with("error"));
    assert_eq!(
        value(&deep(depth + 1)),
        format!(
            "error: jsondecode: invalid JSON at 1:{}: nested deeper than {depth} levels",
            depth + 1
        )
    );
}

#[test]
fn json_decode_errors_say_where_and_refuse_duplicate_keys() {
    assert_eq!(
        value(r#"jsondecode("{\"a\": tru}")"#),
        "error: jsondecode: invalid JSON at 1:7: expected a value"
    );
    assert_eq!(
        value(r#"jsondecode("{\"a\": 1, \"a\": 2}")"#),
        r#"error: jsondecode: duplicate key "a" in a JSON object"#
    );
}

#[test]
fn json_encode_escapes_as_go_json_marshal() {
    assert_eq!(
        value(r#"jsonencode("<&>\u0008\u000c\u2028")"#),
        r#""\"\\u003c\\u0026\\u003e\\b\\f\\u2028\"""#
    );
}

#[test]
fn strings_stop_at_the_string_limit_before_they_are_built() {
    let err = value(&format!(
        "{}\"abcdefghijklmnop\"{}",
        "replace(".repeat(4),
        ", \"\", \"abcdefghijklmnopabcdefghijklmnop\")".repeat(4)
    ));
    assert!(err.contains("the HCL string limit"), "{err}");
    let x64 = "abcdefghijklmnop".repeat(4);
    let err = value(&format!(
        "join({}\"abcdefghijklmnop\"{}, split(\",\", \"a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t\"))",
        "replace(".repeat(3),
        format!(", \"\", \"{x64}\")").repeat(3)
    ));
    assert!(
        err.contains("join: a string of") && err.contains("the HCL string limit"),
        "{err}"
    );
}

#[test]
fn distinct_of_a_long_list_takes_one_pass() {
    // A search of the list so far made 100,000 distinct values take
    // minutes.
    let commas = ",".repeat(99_999);
    let out = value(&format!(
        "length(distinct([for i, c in split(\",\", \"{commas}\") : i]))"
    ));
    assert_eq!(out, "100000");
}
