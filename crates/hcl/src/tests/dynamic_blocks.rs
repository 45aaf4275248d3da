//! `dynamic` blocks: the blocks they make, with their iterator bound, and
//! where their errors point.

use super::expressions::{evaluated, evaluation_error, text};
use crate::Value;

fn list(items: &[&str]) -> Value {
    Value::List(items.iter().map(|s| text(s)).collect())
}

#[test]
fn a_dynamic_block_makes_one_block_per_element_with_its_label_as_iterator() {
    let src = r#"task "t" {
  dynamic "template" {
    for_each = var.files
    content {
      destination = "local/${template.value}"
      data        = "${template.key}: ${NOMAD_TASK_DIR}"
    }
  }
}
"#;
    assert_eq!(
        evaluated(src, &[("files", list(&["a", "b"]))]),
        "task \"t\" {\n  template {\n    destination = \"local/a\"\n    data = \"0: ${NOMAD_TASK_DIR}\"\n  }\n  template {\n    destination = \"local/b\"\n    data = \"1: ${NOMAD_TASK_DIR}\"\n  }\n}\n"
    );
}

#[test]
fn iterator_and_labels_name_the_element_and_label_the_blocks() {
    let src = r#"dynamic "group" {
  for_each = { web = 2, db = 1 }
  iterator = g
  labels   = [g.key]
  content {
    count = g.value
  }
}
"#;
    assert_eq!(
        evaluated(src, &[]),
        "group \"db\" {\n  count = 1\n}\ngroup \"web\" {\n  count = 2\n}\n"
    );
}

#[test]
fn nested_dynamic_blocks_see_the_names_around_them() {
    let src = r#"dynamic "group" {
  for_each = ["a", "b"]
  labels   = [group.value]
  content {
    dynamic "task" {
      for_each = [1, 2]
      iterator = n
      labels   = ["${group.value}${n.value}"]
      content {
        driver = "exec"
      }
    }
  }
}
"#;
    assert_eq!(
        evaluated(src, &[]),
        "group \"a\" {\n  task \"a1\" {\n    driver = \"exec\"\n  }\n  task \"a2\" {\n    driver = \"exec\"\n  }\n}\ngroup \"b\" {\n  task \"b1\" {\n    driver = \"exec\"\n  }\n  task \"b2\" {\n    driver = \"exec\"\n  }\n}\n"
    );
}

#[test]
fn an_empty_for_each_makes_no_block() {
    assert_eq!(
        evaluated(
            "x = 1\ndynamic \"env\" {\n  for_each = []\n  content {\n    A = 1\n  }\n}\n",
            &[]
        ),
        "x = 1\n"
    );
}

#[test]
fn a_for_each_that_is_not_a_collection_is_an_error_at_it() {
    assert_eq!(
        evaluation_error(
            "dynamic \"env\" {\n  for_each = \"x\"\n  content {\n    A = 1\n  }\n}\n",
            &[]
        ),
        "test.hcl:2:14: the for_each of dynamic \"env\" iterates over a list, a set, a map or an object, not a string"
    );
}

#[test]
fn an_unknown_attribute_of_the_iterator_is_an_error_at_it() {
    let err = evaluation_error(
        "dynamic \"env\" {\n  for_each = [\"a\"]\n  content {\n    A = env.name\n  }\n}\n",
        &[],
    );
    assert!(err.starts_with("test.hcl:4:13: "), "{err}");
    assert!(err.contains("no element \"name\""), "{err}");
}

#[test]
fn the_shape_of_a_dynamic_block_is_checked() {
    for (src, want) in [
        (
            "dynamic {\n  for_each = []\n  content {}\n}\n",
            "test.hcl:1:1: a dynamic block takes one label, the type of the blocks it makes; found 0",
        ),
        (
            "dynamic \"env\" {\n  content {}\n}\n",
            "test.hcl:1:1: dynamic \"env\" needs for_each",
        ),
        (
            "dynamic \"env\" {\n  for_each = []\n}\n",
            "test.hcl:1:1: dynamic \"env\" needs a content block",
        ),
        (
            "dynamic \"env\" {\n  for_each = []\n  each = 1\n  content {}\n}\n",
            "test.hcl:3:3: unknown attribute \"each\" in dynamic \"env\": it takes for_each, iterator, labels and one content block",
        ),
        (
            "dynamic \"env\" {\n  for_each = []\n  iterator = \"e\"\n  content {}\n}\n",
            "test.hcl:3:14: the iterator of dynamic \"env\" is a bare name, such as `iterator = item`",
        ),
        (
            "dynamic \"env\" {\n  for_each = [1]\n  labels = \"a\"\n  content {}\n}\n",
            "test.hcl:3:12: the labels of dynamic \"env\" are a list of strings, not a string",
        ),
    ] {
        assert_eq!(evaluation_error(src, &[]), want, "{src}");
    }
}

/// The JSON `src` evaluated with `vars`, rendered.
fn json_evaluated(src: &str, vars: &[(&str, Value)]) -> String {
    let mut body = super::json_ok(src);
    if let Err(errors) = crate::evaluate(&mut body, &super::expressions::scope(vars), "test.json") {
        panic!("expected {src:?} to evaluate, got {}", errors[0]);
    }
    super::render(&body)
}

/// The first error evaluating the JSON `src` with `vars`.
fn json_evaluation_error(src: &str, vars: &[(&str, Value)]) -> String {
    let mut body = super::json_ok(src);
    match crate::evaluate(&mut body, &super::expressions::scope(vars), "test.json") {
        Ok(()) => panic!("expected {src:?} to fail, got {}", super::render(&body)),
        Err(errors) => errors[0].to_string(),
    }
}

#[test]
fn a_json_dynamic_property_makes_one_object_per_element() {
    let src = r#"{"task": {"t": {
  "template": {"destination": "local/x"},
  "dynamic": {"template": {
    "for_each": "${var.files}",
    "iterator": "f",
    "content": {"destination": "local/${f.value}", "data": "${f.key}: ${NOMAD_TASK_DIR}"}
  }}
}}}"#;
    let out = json_evaluated(src, &[("files", list(&["a", "b"]))]);
    assert_eq!(
        out,
        "\"task\" = { \"t\" = { \"template\" = [{ \"destination\" = \"local/x\" }, \
         { \"destination\" = \"local/a\", \"data\" = \"0: ${NOMAD_TASK_DIR}\" }, \
         { \"destination\" = \"local/b\", \"data\" = \"1: ${NOMAD_TASK_DIR}\" }] } }\n"
    );
}

#[test]
fn a_json_dynamic_property_with_labels_nests_each_object_in_them() {
    let src = r#"{"dynamic": {"group": {
  "for_each": {"web": 2, "db": 1},
  "labels": ["${group.key}"],
  "content": {"count": "${group.value}"}
}}}"#;
    assert_eq!(
        json_evaluated(src, &[]),
        "\"group\" = [{ \"db\" = { \"count\" = 1 } }, { \"web\" = { \"count\" = 2 } }]\n"
    );
}

#[test]
fn a_json_key_named_dynamic_in_a_map_is_left_alone() {
    let out = json_evaluated(r#"{"env": {"dynamic": "yes"}}"#, &[]);
    assert!(out.contains("dynamic"), "{out}");
}

#[test]
fn json_dynamic_errors_point_at_their_place() {
    assert_eq!(
        json_evaluation_error(
            "{\"dynamic\": {\"env\": {\n  \"for_each\": \"x\",\n  \"content\": {}\n}}}",
            &[]
        ),
        "test.json:2:15: the for_each of dynamic \"env\" iterates over a list, a set, a map or an object, not a string"
    );
    assert_eq!(
        json_evaluation_error(
            "{\"dynamic\": {\"env\": {\n  \"for_each\": [],\n  \"each\": 1,\n  \"content\": {}\n}}}",
            &[]
        ),
        "test.json:3:3: unknown key \"each\" in dynamic \"env\": it takes for_each, iterator, labels and one content block"
    );
}
