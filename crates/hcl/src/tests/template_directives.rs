//! Template directives: `%{ if }` and `%{ for }` in strings and heredocs,
//! the strip markers `~`, and what stays for the agent.

use super::expressions::{evaluated, evaluation_error, scope, text};
use super::{error_text, json_error_text, json_ok, parse_ok, render, JSON_FILE};
use crate::{evaluate, Value};

fn list(items: &[&str]) -> Value {
    Value::List(items.iter().map(|s| text(s)).collect())
}

#[test]
fn if_directive_picks_the_branch_its_condition_names() {
    let src = "x = \"%{ if var.on }yes%{ else }no%{ endif }\"\n";
    assert_eq!(
        evaluated(src, &[("on", Value::Bool(true))]),
        "x = \"yes\"\n"
    );
    assert_eq!(
        evaluated(src, &[("on", Value::Bool(false))]),
        "x = \"no\"\n"
    );
}

#[test]
fn if_without_else_makes_nothing_when_false() {
    let src = "x = \"a%{ if var.n > 2 }-big%{ endif }\"\n";
    assert_eq!(evaluated(src, &[("n", text("1"))]), "x = \"a\"\n");
    assert_eq!(evaluated(src, &[("n", text("3"))]), "x = \"a-big\"\n");
}

#[test]
fn for_directive_repeats_its_body_with_the_element_bound() {
    let src = "x = \"%{ for s in var.l }[${upper(s)}]%{ endfor }\"\n";
    assert_eq!(
        evaluated(src, &[("l", list(&["a", "b"]))]),
        "x = \"[A][B]\"\n"
    );
}

#[test]
fn for_directive_binds_key_and_value_of_a_map_in_key_order() {
    let map = Value::Object(vec![("b".into(), text("2")), ("a".into(), text("1"))]);
    let src = "x = \"%{ for k, v in var.m }${k}=${v};%{ endfor }\"\n";
    assert_eq!(evaluated(src, &[("m", map)]), "x = \"a=1;b=2;\"\n");
}

#[test]
fn directives_nest() {
    let src = "x = \"%{ for s in var.l }%{ if s != \"b\" }${s}%{ endif }%{ endfor }\"\n";
    assert_eq!(
        evaluated(src, &[("l", list(&["a", "b", "c"]))]),
        "x = \"ac\"\n"
    );
}

#[test]
fn strip_markers_remove_whitespace_and_newlines_next_to_them() {
    let src = "x = <<EOT\n%{ for s in var.l ~}\n  ${s}\n%{ endfor ~}\nend  ${~ var.z ~}  !\nEOT\n";
    assert_eq!(
        evaluated(src, &[("l", list(&["a", "b"])), ("z", text("Z"))]),
        "x = \"a\\nb\\nendZ!\\n\"\n"
    );
}

#[test]
fn heredoc_lines_built_by_a_for_directive() {
    let src = "x = <<-EOT\n  %{~ for s in var.l ~}\n  ${s}\n  %{~ endfor ~}\n  EOT\n";
    assert_eq!(evaluated(src, &[("l", list(&["a", "b"]))]), "x = \"ab\"\n");
}

#[test]
fn a_condition_that_is_not_a_bool_is_an_error_at_its_position() {
    let err = evaluation_error("x = \"%{ if var.s }y%{ endif }\"\n", &[("s", text("t"))]);
    assert_eq!(
        err,
        "test.hcl:1:12: the condition of '%{ if }' must be a bool, not a string"
    );
}

#[test]
fn a_for_over_a_string_is_an_error_at_its_collection() {
    let err = evaluation_error(
        "x = \"%{ for s in var.s }${s}%{ endfor }\"\n",
        &[("s", text("t"))],
    );
    assert_eq!(
        err,
        "test.hcl:1:18: '%{ for }' iterates over a list, a set, a map or an object, not a string"
    );
}

#[test]
fn endif_without_if_is_a_parse_error_at_it() {
    assert_eq!(
        error_text("x = \"a%{ endif }\"\n"),
        "test.hcl:1:7: '%{ endif }' without a '%{ if }' before it"
    );
}

#[test]
fn a_second_else_is_a_parse_error() {
    assert_eq!(
        error_text("x = \"%{ if true }a%{ else }b%{ else }c%{ endif }\"\n"),
        "test.hcl:1:29: a second '%{ else }' for the '%{ if }' at 1:6"
    );
}

#[test]
fn a_missing_endfor_is_a_parse_error_at_the_for() {
    assert_eq!(
        error_text("x = \"%{ for s in var.l }${s}\"\n"),
        "test.hcl:1:6: the '%{ for }' has no '%{ endfor }' before the end of the string"
    );
}

#[test]
fn an_endfor_closing_an_if_is_a_parse_error() {
    assert_eq!(
        error_text("x = \"%{ if true }a%{ endfor }\"\n"),
        "test.hcl:1:19: '%{ endfor }' where the '%{ if }' at 1:6 needs its '%{ endif }' first"
    );
}

#[test]
fn an_unknown_directive_is_a_parse_error() {
    assert_eq!(
        error_text("x = \"%{ while true }\"\n"),
        "test.hcl:1:8: unknown template directive '%{ while true }': expected if, else, endif, for or endfor"
    );
}

#[test]
fn a_directive_on_a_runtime_name_stays_for_the_agent_with_its_body_evaluated() {
    let src = "x = \"%{ if NOMAD_ALLOC_INDEX == 0 }${var.a}%{ endif }\"\n";
    assert_eq!(
        evaluated(src, &[("a", text("A"))]),
        "x = \"%{ if NOMAD_ALLOC_INDEX == 0 }A%{ endif }\"\n"
    );
    let src = "x = \"%{ for s in env }${s}%{ endfor }\"\n";
    assert_eq!(
        render(&parse_ok(src)),
        "x = \"%{ for s in env }${s}%{ endfor }\"\n"
    );
}

#[test]
fn escaped_directive_stays_literal() {
    assert_eq!(
        render(&parse_ok("x = \"%%{ if true }\"\n")),
        "x = \"%{ if true }\"\n"
    );
}

#[test]
fn json_strings_are_templates_with_directives() {
    let mut body =
        json_ok(r#"{"x": "%{ for s in var.l }${upper(s)}\u002c%{ endfor }${NOMAD_TASK_DIR}"}"#);
    evaluate(&mut body, &scope(&[("l", list(&["a", "b"]))]), JSON_FILE).unwrap();
    assert_eq!(render(&body), "\"x\" = \"A,B,${NOMAD_TASK_DIR}\"\n");
}

#[test]
fn json_directive_errors_name_their_line_and_column() {
    assert_eq!(
        json_error_text("{\n  \"x\": \"a %{ endfor }\"\n}"),
        "test.json:2:11: '%{ endfor }' without a '%{ for }' before it"
    );
    let mut body = json_ok("{\n  \"x\": \"%{ if var.s }y%{ endif }\"\n}");
    let err = evaluate(&mut body, &scope(&[("s", text("t"))]), JSON_FILE).unwrap_err();
    assert_eq!(
        err[0].to_string(),
        "test.json:2:15: the condition of '%{ if }' must be a bool, not a string"
    );
}

#[test]
fn an_inventory_heredoc_with_strip_markers_has_one_line_per_element() {
    let map = |pairs: &[(&str, &str)]| {
        Value::Object(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), text(v)))
                .collect(),
        )
    };
    let src = "x = <<EOT\n[hosts]\n%{ for ip in var.hosts ~}\n${ip}\n%{ endfor ~}\n[dns]\n%{ for i in var.dns ~}\nserver=/${i[\"domain\"]}/${ i[\"ip\"] }\n%{ endfor ~}\nend\nEOT\n";
    let dns = Value::List(vec![
        map(&[("domain", "a.test"), ("ip", "10.0.0.1")]),
        map(&[("domain", "b.test"), ("ip", "10.0.0.2")]),
    ]);
    assert_eq!(
        evaluated(src, &[("hosts", list(&["h1", "h2"])), ("dns", dns)]),
        "x = \"[hosts]\\nh1\\nh2\\n[dns]\\nserver=/a.test/10.0.0.1\\nserver=/b.test/10.0.0.2\\nend\\n\"\n"
    );
}
