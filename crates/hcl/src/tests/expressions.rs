//! Expressions: how they parse, and what they evaluate to.

use std::collections::BTreeMap;

use super::{parse_ok, render, FILE};
use crate::{evaluate, Scope, Value};

/// A scope with the variables `vars` (all strings) and no locals.
pub(super) fn scope(vars: &[(&str, Value)]) -> Scope<'static> {
    Scope {
        vars: vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        declares: true,
        ..Scope::default()
    }
}

pub(super) fn text(s: &str) -> Value {
    Value::String(s.to_string())
}

/// `src` evaluated with `vars`, rendered.
pub(super) fn evaluated(src: &str, vars: &[(&str, Value)]) -> String {
    let mut body = parse_ok(src);
    if let Err(errors) = evaluate(&mut body, &scope(vars), FILE) {
        panic!("expected {src:?} to evaluate, got {}", errors[0]);
    }
    render(&body)
}

/// The first error evaluating `src` with `vars`.
pub(super) fn evaluation_error(src: &str, vars: &[(&str, Value)]) -> String {
    let mut body = parse_ok(src);
    match evaluate(&mut body, &scope(vars), FILE) {
        Ok(()) => panic!("expected {src:?} to fail, got {}", render(&body)),
        Err(errors) => errors[0].to_string(),
    }
}

#[test]
fn bare_type_names_and_calls_parse() {
    assert_eq!(
        render(&parse_ok("type = list(string)\nx = var.a.b[0]\n")),
        "type = list(string)\nx = var.a.b[0]\n"
    );
}

#[test]
fn a_variable_in_a_string_is_a_template() {
    assert_eq!(
        render(&parse_ok("x = \"id-${var.vol_id}-${NOMAD_ALLOC_INDEX}\"\n")),
        "x = template(\"id-\"${var.vol_id}\"-${NOMAD_ALLOC_INDEX}\")\n"
    );
}

#[test]
fn runtime_sequences_stay_plain_strings() {
    assert_eq!(
        render(&parse_ok(
            "x = \"${NOMAD_TASK_DIR}/${attr.unique.hostname} $${var.x}\"\n"
        )),
        "x = \"${NOMAD_TASK_DIR}/${attr.unique.hostname} ${var.x}\"\n"
    );
}

#[test]
fn variables_are_interpolated_and_runtime_sequences_kept() {
    assert_eq!(
        evaluated(
            "source = \"${var.vol_id}\"\ndir = \"${NOMAD_TASK_DIR}/${var.vol_id}\"\n",
            &[("vol_id", text("ceph-1"))]
        ),
        "source = \"ceph-1\"\ndir = \"${NOMAD_TASK_DIR}/ceph-1\"\n"
    );
}

#[test]
fn a_lone_interpolation_keeps_the_value_type() {
    let ports = Value::List(vec![text("a"), text("b")]);
    assert_eq!(
        evaluated("x = \"${var.ports}\"\ny = var.ports\n", &[("ports", ports)]),
        "x = [\"a\", \"b\"]\ny = [\"a\", \"b\"]\n"
    );
}

#[test]
fn calls_nest_inside_strings_inside_calls() {
    assert_eq!(
        evaluated(
            "x = upper(\"${format(\"%s-%d\", var.name, 3)}\")\n",
            &[("name", text("web"))]
        ),
        "x = \"WEB-3\"\n"
    );
}

#[test]
fn blocks_are_evaluated_too() {
    assert_eq!(
        evaluated("a {\n  b {\n    c = lower(\"X\")\n  }\n}\n", &[]),
        "a {\n  b {\n    c = \"x\"\n  }\n}\n"
    );
}

#[test]
fn an_undeclared_variable_is_an_error_at_its_position() {
    assert_eq!(
        evaluation_error("x = \"id-${var.nope}\"\n", &[]),
        "test.hcl:1:11: no variable \"nope\" is declared: declare it with variable \"nope\" { ... }"
    );
}

#[test]
fn an_unknown_function_is_an_error_naming_it_at_its_position() {
    assert_eq!(
        evaluation_error("x = \"${frobnicate(var.a)}\"\n", &[("a", text("b"))]),
        "test.hcl:1:8: unknown function 'frobnicate'"
    );
    assert_eq!(
        evaluation_error("x = [\"a\",\n  bcrypt(\"x\")]\n", &[]),
        "test.hcl:2:3: unknown function 'bcrypt'"
    );
}

#[test]
fn a_bare_identifier_value_asks_for_quotes() {
    assert_eq!(
        evaluation_error("restart {\n  mode = fail\n}\n", &[]),
        "test.hcl:2:10: unknown name 'fail' (strings need quotes: \"fail\")"
    );
}

#[test]
fn a_runtime_reference_outside_a_string_is_an_error() {
    assert_eq!(
        evaluation_error("x = upper(attr.unique.hostname)\n", &[]),
        "test.hcl:1:11: 'attr' is known only when a task starts: write it inside a string, as in \"${attr...}\", outside function calls"
    );
}

#[test]
fn a_list_cannot_be_interpolated_into_text() {
    assert_eq!(
        evaluation_error("x = \"a ${var.l}\"\n", &[("l", Value::List(vec![]))]),
        "test.hcl:1:10: a list cannot be interpolated into a string"
    );
}

#[test]
fn a_broken_expression_naming_a_variable_is_a_parse_error() {
    assert_eq!(
        super::error_text("x = \"${var.a +}\"\n"),
        "test.hcl:1:15: expected a value after '+', found end of file"
    );
}

#[test]
fn operators_parse_by_precedence() {
    assert_eq!(
        render(&parse_ok("x = 1 + 2 * 3 == 7 && !var.b || -var.n < 0\n")),
        "x = ((((1 + (2 * 3)) == 7) && (!var.b)) || ((-var.n) < 0))\n"
    );
    assert_eq!(
        render(&parse_ok(
            "x = var.a ? (1 + 1) * 2 : var.b >= 2 ? \"y\" : \"z\"\n"
        )),
        "x = (var.a ? ((1 + 1) * 2) : ((var.b >= 2) ? \"y\" : \"z\"))\n"
    );
}

#[test]
fn arithmetic_comparison_logic_and_conditionals_evaluate() {
    let vars = [
        ("count", Value::number(3.0)),
        ("env", text("prod")),
        ("on", Value::Bool(true)),
    ];
    assert_eq!(evaluated("x = var.count * 2 + 1\n", &vars), "x = 7\n");
    assert_eq!(evaluated("x = 7 % 4 - 10 / 4\n", &vars), "x = 0.5\n");
    assert_eq!(
        evaluated("x = var.env == \"prod\" ? 3 : 1\n", &vars),
        "x = 3\n"
    );
    assert_eq!(
        evaluated(
            "x = \"mem-${var.count > 2 ? \"big\" : \"small\"}\"\n",
            &vars
        ),
        "x = \"mem-big\"\n"
    );
    assert_eq!(
        evaluated(
            "x = !var.on || var.count >= 3 && var.env != \"dev\"\n",
            &vars
        ),
        "x = true\n"
    );
    // `&&` does not look at its right side once its left is false.
    assert_eq!(
        evaluated("x = false && var.missing\n", &vars),
        "x = false\n"
    );
}

#[test]
fn an_operation_on_a_runtime_name_stays_for_the_agent() {
    assert_eq!(
        evaluated("x = \"${NOMAD_ALLOC_INDEX + 1}\"\n", &[]),
        "x = \"${NOMAD_ALLOC_INDEX + 1}\"\n"
    );
}

#[test]
fn operators_on_the_wrong_types_are_errors_at_their_position() {
    assert_eq!(
        evaluation_error("x = 1 + true\n", &[]),
        "test.hcl:1:5: '+' needs two numbers, not a number and a bool"
    );
    assert_eq!(
        evaluation_error("x = 1 ? 2 : 3\n", &[]),
        "test.hcl:1:5: the condition of '? :' must be a bool, not a number"
    );
    assert_eq!(
        evaluation_error("x = 1 / 0\n", &[]),
        "test.hcl:1:5: division by zero"
    );
}

#[test]
fn files_that_declare_no_variables_refuse_var() {
    let mut body = parse_ok("x = \"${var.a}\"\n");
    let err = evaluate(&mut body, &Scope::default(), FILE).unwrap_err();
    assert_eq!(
        err[0].to_string(),
        "test.hcl:1:8: 'var.a': only job files declare variables and locals"
    );
}

#[test]
fn heredocs_are_templates_too() {
    let src =
        "x = <<-EOF\n    id: ${var.vol_id}\n      dir: ${NOMAD_TASK_DIR} $${var.vol_id}\n    EOF\n";
    assert_eq!(
        evaluated(src, &[("vol_id", text("v1"))]),
        "x = \"id: v1\\n  dir: ${NOMAD_TASK_DIR} ${var.vol_id}\\n\"\n"
    );
    assert_eq!(
        evaluation_error("x = <<-EOF\n    a\n      b ${upper(var.nope)}\n    EOF\n", &[]),
        "test.hcl:3:17: no variable \"nope\" is declared: declare it with variable \"nope\" { ... }"
    );
}

#[test]
fn heredocs_without_evaluation_stay_heredocs() {
    assert_eq!(
        render(&parse_ok(
            "x = <<EOF\n{{ env \"A\" }} ${NOMAD_TASK_DIR} $${x}\nEOF\n"
        )),
        "x = heredoc(\"{{ env \\\"A\\\" }} ${NOMAD_TASK_DIR} ${x}\\n\")\n"
    );
}
