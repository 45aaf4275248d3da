//! HCL's JSON syntax: properties read as blocks, with and without labels,
//! as the decoder asks for them.

use super::{json_ok, parse_ok, render};
use crate::{Block, Body, Item, JsonBlocks, Misshapen, Pos, Span, Syntax};

/// The property `kind` of the JSON file `src` read as blocks.
fn read_as_blocks(src: &str, kind: &str, labeled: bool) -> JsonBlocks {
    let body = json_ok(src);
    match body.attribute(kind) {
        Some(attr) => attr.json_blocks(labeled).clone(),
        None => panic!("no property {kind:?} in {src}"),
    }
}

/// The blocks in the canonical text form, as if they had been written in
/// the native syntax.
fn render_blocks(blocks: &[Block]) -> String {
    let body = Body {
        items: blocks.iter().cloned().map(Item::Block).collect(),
        syntax: Syntax::Native,
    };
    render(&body)
}

fn at(line: usize, col: usize) -> Pos {
    Pos::new(line, col)
}

#[test]
fn an_object_is_one_block() {
    let read = read_as_blocks(
        r#"{"mount_options": {"fs_type": "ext4", "mount_flags": ["noatime"]}}"#,
        "mount_options",
        false,
    );
    assert!(read.misshapen.is_empty());
    assert_eq!(
        render_blocks(&read.blocks),
        "mount_options {\n  \"fs_type\" = \"ext4\"\n  \"mount_flags\" = [\"noatime\"]\n}\n"
    );
    let block = &read.blocks[0];
    assert_eq!(block.kind.span, Span::new(at(1, 2), at(1, 17)));
    assert_eq!(block.span, Span::new(at(1, 2), at(1, 66)));
    assert_eq!(block.body.syntax, Syntax::Json);
}

#[test]
fn a_list_of_objects_is_one_block_per_object() {
    let src = r#"{"capability": [
  {"access_mode": "single-node-writer"},
  {"access_mode": "single-node-reader-only"}
]}"#;
    let read = read_as_blocks(src, "capability", false);
    assert!(read.misshapen.is_empty());
    assert_eq!(
        render_blocks(&read.blocks),
        "capability {\n  \"access_mode\" = \"single-node-writer\"\n}\n\
         capability {\n  \"access_mode\" = \"single-node-reader-only\"\n}\n"
    );
    // Each block is found at its own object.
    let starts: Vec<Pos> = read.blocks.iter().map(|b| b.kind.span.start).collect();
    assert_eq!(starts, [at(2, 3), at(3, 3)]);
}

#[test]
fn labels_are_the_keys_of_an_object_around_the_bodies() {
    let src = r#"{"plugin": {
  "hostpath": {"socket": "/run/h.sock"},
  "ebs": [{"socket": "/run/e.sock"}]
}}"#;
    let read = read_as_blocks(src, "plugin", true);
    assert!(read.misshapen.is_empty());
    assert_eq!(
        render_blocks(&read.blocks),
        "plugin \"hostpath\" {\n  \"socket\" = \"/run/h.sock\"\n}\n\
         plugin \"ebs\" {\n  \"socket\" = \"/run/e.sock\"\n}\n"
    );
    let first = &read.blocks[0];
    assert_eq!(first.labels[0].span, Span::new(at(2, 3), at(2, 13)));
    assert_eq!(first.kind.span.start, at(2, 3));
    assert_eq!(read.blocks[1].kind.span.start, at(3, 11));
}

#[test]
fn labeled_blocks_may_also_be_a_list_of_objects_of_labels() {
    let read = read_as_blocks(
        r#"{"job": [{"a": {"x": 1}}, {"b": {}, "//": "c"}]}"#,
        "job",
        true,
    );
    assert!(read.misshapen.is_empty());
    assert_eq!(
        render_blocks(&read.blocks),
        "job \"a\" {\n  \"x\" = 1\n}\njob \"b\" {\n}\n"
    );
}

#[test]
fn nested_blocks_read_the_same_way() {
    let src = r#"{"job": {"web": {"group": {"g": {"task": {"t": {"driver": "exec"}}}}}}}"#;
    let body = json_ok(src);
    let job = &body.attribute("job").unwrap().json_blocks(true).blocks[0];
    let group = &job
        .body
        .attribute("group")
        .unwrap()
        .json_blocks(true)
        .blocks[0];
    let task = &group
        .body
        .attribute("task")
        .unwrap()
        .json_blocks(true)
        .blocks[0];
    assert_eq!(
        (job.label(0), group.label(0), task.label(0)),
        (Some("web"), Some("g"), Some("t"))
    );
    assert_eq!(render(&task.body), "\"driver\" = \"exec\"\n");
}

#[test]
fn the_same_property_as_native_blocks() {
    // The JSON file and the native one hold the same blocks.
    let json = read_as_blocks(
        r#"{"host_volume": {"certs": {"path": "/etc/ssl/certs", "read_only": true}}}"#,
        "host_volume",
        true,
    );
    let native = parse_ok(
        "host_volume \"certs\" {\n  \"path\" = \"/etc/ssl/certs\"\n  \"read_only\" = true\n}\n",
    );
    assert_eq!(render_blocks(&json.blocks), render(&native));
}

#[test]
fn null_and_empty_lists_are_no_blocks() {
    for value in ["null", "[]"] {
        let read = read_as_blocks(&format!("{{\"capability\": {value}}}"), "capability", false);
        assert_eq!(read, JsonBlocks::default(), "{value}");
    }
    let read = read_as_blocks(r#"{"plugin": {"a": null}}"#, "plugin", true);
    assert_eq!(read, JsonBlocks::default());
}

#[test]
fn values_without_a_block_shape_are_reported_and_skipped() {
    let misshapen = |pos: Pos, message: &str| Misshapen {
        pos,
        message: message.to_string(),
    };
    let read = read_as_blocks(r#"{"capability": "rw"}"#, "capability", false);
    assert_eq!(
        read.misshapen,
        [misshapen(
            at(1, 16),
            "is a block: its value must be an object or a list of objects, found a string"
        )]
    );
    let read = read_as_blocks(r#"{"capability": [{}, 1, []]}"#, "capability", false);
    assert_eq!(read.blocks.len(), 1);
    assert_eq!(
        read.misshapen,
        [
            misshapen(
                at(1, 21),
                "is a block: its value must be an object or a list of objects, found a number in the list"
            ),
            misshapen(
                at(1, 24),
                "is a block: its value must be an object or a list of objects, found a list in the list"
            ),
        ]
    );
    let read = read_as_blocks(r#"{"plugin": ["a"]}"#, "plugin", true);
    assert_eq!(
        read.misshapen,
        [misshapen(
            at(1, 13),
            "holds blocks by name: its value must be an object such as {\"NAME\": {...}}, found a string in the list"
        )]
    );
    let read = read_as_blocks(r#"{"plugin": {"a": true, "b": {}}}"#, "plugin", true);
    assert_eq!(read.blocks.len(), 1);
    assert_eq!(
        read.misshapen,
        [misshapen(
            at(1, 18),
            "holds blocks by name: the value of \"a\" must be an object or a list of objects, found a bool"
        )]
    );
}

#[test]
fn blocks_are_read_once_and_kept() {
    let body = json_ok(r#"{"capability": [{}, {}]}"#);
    let attr = body.attribute("capability").unwrap();
    let first: *const JsonBlocks = attr.json_blocks(false);
    let again: *const JsonBlocks = attr.json_blocks(false);
    assert!(std::ptr::eq(first, again));
    // The labeled reading is another one.
    assert_eq!(attr.json_blocks(true).blocks.len(), 0);
    assert_eq!(attr.json_blocks(false).blocks.len(), 2);
}
