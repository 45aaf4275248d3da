//! `for` expressions and splats: how they parse, what they evaluate to,
//! and where their errors point.

use super::expressions::{evaluated, evaluation_error, text};
use super::{parse_ok, render};
use crate::Value;

fn list(items: &[&str]) -> Value {
    Value::List(items.iter().map(|s| text(s)).collect())
}

fn object(entries: &[(&str, Value)]) -> Value {
    Value::Object(
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

#[test]
fn for_expressions_parse_in_lists_and_objects() {
    assert_eq!(
        render(&parse_ok(
            "x = [for i, v in var.l : upper(v) if v != \"\"]\ny = {for k, v in var.m : v => k...}\n"
        )),
        "x = [for i, v in var.l : upper(v) if (v != \"\")]\ny = {for k, v in var.m : v => k...}\n"
    );
}

#[test]
fn a_for_may_span_lines() {
    assert_eq!(
        render(&parse_ok(
            "x = [\n  for s in var.l :\n  upper(s)\n  if s != \"\"\n]\ny = {\n  for s in var.l :\n  s => 1\n}\n"
        )),
        "x = [for s in var.l : upper(s) if (s != \"\")]\ny = {for s in var.l : s => 1}\n"
    );
}

#[test]
fn a_list_for_maps_each_element_in_order() {
    let l = ("l", list(&["a", "b", "c"]));
    assert_eq!(
        evaluated(
            "x = [for s in var.l : upper(s)]\n",
            std::slice::from_ref(&l)
        ),
        "x = [\"A\", \"B\", \"C\"]\n"
    );
    assert_eq!(
        evaluated(
            "x = [for i, s in var.l : \"${i}=${s}\"]\n",
            std::slice::from_ref(&l)
        ),
        "x = [\"0=a\", \"1=b\", \"2=c\"]\n"
    );
    assert_eq!(
        evaluated("x = [for s in var.l : s if s != \"b\"]\n", &[l]),
        "x = [\"a\", \"c\"]\n"
    );
}

#[test]
fn maps_and_objects_are_iterated_in_key_order() {
    let m = ("m", object(&[("b", text("2")), ("a", text("1"))]));
    assert_eq!(
        evaluated(
            "x = [for k, v in var.m : \"${k}:${v}\"]\n",
            std::slice::from_ref(&m)
        ),
        "x = [\"a:1\", \"b:2\"]\n"
    );
    assert_eq!(
        evaluated("x = [for v in { z = 1, y = 2 } : v]\n", &[]),
        "x = [2, 1]\n"
    );
    assert_eq!(
        evaluated("x = {for k, v in var.m : v => k}\n", &[m]),
        "x = { \"1\" = \"a\", \"2\" = \"b\" }\n"
    );
}

#[test]
fn an_object_for_makes_keys_and_groups_them_with_an_ellipsis() {
    let l = ("l", list(&["ab", "ac", "b"]));
    assert_eq!(
        evaluated(
            "x = {for s in var.l : s => upper(s)}\n",
            std::slice::from_ref(&l)
        ),
        "x = { \"ab\" = \"AB\", \"ac\" = \"AC\", \"b\" = \"B\" }\n"
    );
    assert_eq!(
        evaluated(
            "x = {for s in var.l : substr(s, 0, 1) => s...}\n",
            std::slice::from_ref(&l)
        ),
        "x = { \"a\" = [\"ab\", \"ac\"], \"b\" = [\"b\"] }\n"
    );
    assert_eq!(
        evaluation_error("x = {for s in var.l : substr(s, 0, 1) => s}\n", &[l]),
        "test.hcl:1:23: the for expression makes the key \"a\" twice: add '...' after its value to group the values of a key into a list"
    );
}

#[test]
fn for_errors_point_at_the_collection_the_condition_and_the_key() {
    assert_eq!(
        evaluation_error("x = [for s in \"abc\" : s]\n", &[]),
        "test.hcl:1:15: a for expression iterates over a list, a set, a map or an object, not a string"
    );
    assert_eq!(
        evaluation_error("x = [for s in null : s]\n", &[]),
        "test.hcl:1:15: a for expression iterates over a list, a set, a map or an object, not a null"
    );
    assert_eq!(
        evaluation_error("x = [for s in [1, 2] : s if s]\n", &[]),
        "test.hcl:1:29: the 'if' of a for expression must be a bool, not a number"
    );
    assert_eq!(
        evaluation_error("x = {for s in [[1]] : s => 1}\n", &[]),
        "test.hcl:1:23: the key of a for expression must be a string, not a list"
    );
    assert_eq!(
        evaluation_error("x = [for s in [1] : t]\n", &[]),
        "test.hcl:1:21: unknown name 't' (strings need quotes: \"t\")"
    );
}

#[test]
fn for_expressions_nest_and_see_outer_names() {
    assert_eq!(
        evaluated(
            "x = [for a in [1, 2] : [for b in [\"x\", \"y\"] : \"${a}${b}\"]]\n",
            &[]
        ),
        "x = [[\"1x\", \"1y\"], [\"2x\", \"2y\"]]\n"
    );
    // The name bound inside does not leak out of the `for`.
    assert_eq!(
        evaluation_error("x = [[for s in [1] : s], s]\n", &[]),
        "test.hcl:1:26: unknown name 's' (strings need quotes: \"s\")"
    );
}

#[test]
fn a_for_inside_a_string_is_evaluated_and_runtime_sequences_are_kept() {
    let l = ("l", list(&["a", "b"]));
    assert_eq!(
        evaluated(
            "x = \"${join(\",\", [for s in var.l : \"${s}-${NOMAD_ALLOC_INDEX}\"])}\"\n",
            std::slice::from_ref(&l)
        ),
        "x = \"a-${NOMAD_ALLOC_INDEX},b-${NOMAD_ALLOC_INDEX}\"\n"
    );
    // A for whose filter needs a name known only when a task starts stays
    // for the agent, as an operator on such a name does.
    assert_eq!(
        evaluated(
            "x = \"${[for s in var.l : s if NOMAD_ALLOC_INDEX == 0]}\"\n",
            &[l]
        ),
        "x = \"${[for s in var.l : s if NOMAD_ALLOC_INDEX == 0]}\"\n"
    );
}

#[test]
fn splats_take_an_attribute_of_each_element() {
    let disks = (
        "disks",
        Value::List(vec![
            object(&[("id", text("a")), ("tags", list(&["x", "y"]))]),
            object(&[("id", text("b")), ("tags", list(&["z"]))]),
        ]),
    );
    assert_eq!(
        render(&parse_ok("x = var.disks[*].id\ny = var.disks.*.id\n")),
        "x = var.disks[*].id\ny = var.disks.*.id\n"
    );
    assert_eq!(
        evaluated(
            "x = var.disks[*].id\ny = var.disks.*.id\nz = var.disks[*].tags[0]\nw = var.disks.*.tags[0]\n",
            &[disks]
        ),
        "x = [\"a\", \"b\"]\ny = [\"a\", \"b\"]\nz = [\"x\", \"z\"]\nw = [\"x\", \"y\"]\n"
    );
}

#[test]
fn a_splat_wraps_a_single_value_and_makes_null_empty() {
    let one = ("one", object(&[("id", text("a"))]));
    assert_eq!(
        evaluated(
            "x = var.one[*].id\ny = var.none[*]\n",
            &[one, ("none", Value::Null)]
        ),
        "x = [\"a\"]\ny = []\n"
    );
    assert_eq!(
        evaluation_error("x = var.l[*].id\n", &[("l", list(&["a"]))]),
        "test.hcl:1:14: a string has no element \"id\""
    );
}

#[test]
fn splats_count_against_the_nesting_limit() {
    let deep = format!("x = var.l{}\n", "[*]".repeat(100_000));
    let err = super::parse_err(&deep);
    assert!(err.message.contains("nesting deeper than"), "{err}");
}

#[test]
fn fors_count_against_the_nesting_limit() {
    let deep = format!(
        "x = {}s{}\n",
        "[for s in [1] : ".repeat(50_000),
        "]".repeat(50_000)
    );
    let err = super::parse_err(&deep);
    assert!(err.message.contains("nesting deeper than"), "{err}");
}

#[test]
fn calls_parentheses_and_lists_take_steps_too() {
    assert_eq!(
        render(&parse_ok(
            "x = split(\",\", var.s)[0]\ny = (var.a).b[*].c\n"
        )),
        "x = (split(\",\", var.s))[0]\ny = (var.a).b[*].c\n"
    );
    let s = ("s", text("a,b,c"));
    assert_eq!(
        evaluated(
            "x = split(\",\", var.s)[1]\ny = \"${split(\",\", var.s)[2]}\"\nz = [for v in split(\",\", var.s) : upper(v)][0]\n",
            std::slice::from_ref(&s)
        ),
        "x = \"b\"\ny = \"c\"\nz = \"A\"\n"
    );
    assert_eq!(
        evaluated(
            "x = values({ a = { id = 1 }, b = { id = 2 } })[*].id\n",
            &[]
        ),
        "x = [1, 2]\n"
    );
    assert_eq!(
        evaluation_error("x = split(\",\", var.s)[5]\n", &[s]),
        "test.hcl:1:23: a list has no element \"5\""
    );
}

#[test]
fn the_deepest_fors_and_splats_that_parse_evaluate_without_overflowing() {
    // The deepest nesting of each that the parser accepts.
    let deepest = |make: &dyn Fn(usize) -> String| {
        let mut n = 1;
        while crate::parse(&make(n + 1), "test.hcl").is_ok() {
            n += 1;
        }
        make(n)
    };
    let fors = deepest(&|n| {
        format!(
            "x = {}length(s){}\n",
            "[for s in [\"a\"] : ".repeat(n),
            "]".repeat(n)
        )
    });
    let mut want = "1".to_string();
    for _ in 0..fors.matches("[for").count() {
        want = format!("[{want}]");
    }
    assert_eq!(evaluated(&fors, &[]), format!("x = {want}\n"));
    // Each splat after the first wraps each element (a string) in a list.
    let splats = deepest(&|n| format!("x = var.l{}\n", "[*]".repeat(n)));
    let n = splats.matches("[*]").count();
    let want = format!("x = {}\"a\"{}\n", "[".repeat(n), "]".repeat(n));
    assert_eq!(evaluated(&splats, &[("l", list(&["a"]))]), want);
}

#[test]
fn copying_a_big_value_many_times_is_refused() {
    let big = Value::List((0..100_000).map(|i| Value::number(f64::from(i))).collect());
    let idx = Value::List((0..200).map(|i| Value::number(f64::from(i))).collect());
    assert_eq!(
        evaluation_error(
            "x = length([for i in var.idx : var.big])\n",
            &[("big", big), ("idx", idx)]
        ),
        "test.hcl:1:32: the expressions copy more than 10000000 values from variables and locals"
    );
}
