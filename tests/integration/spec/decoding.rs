//! The strict decoder's behaviour, the same in every kind of file.

use std::time::Duration;

use csi_agent::spec::{FileKind, SpecFile};

use super::{agent, assert_one_error, errors, job, ok, volume, FILE};

#[test]
fn unknown_attribute_suggests_the_nearest_name() {
    let src = r#"job "web" {
  group "g" {
    volume "data" {
      type            = "csi"
      source          = "vol"
      attachment_mode = "file-system"
      access_mode     = "single-node-writer"
      read_only       = false
      acess_mode      = "single-node-writer"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
"#;
    assert_one_error(
        src,
        r#"test.hcl:9:7: unknown attribute "acess_mode" in volume "data" (did you mean "access_mode"?)"#,
    );
}

#[test]
fn a_misspelt_required_attribute_is_one_error_not_two() {
    let src = "plugin \"p\" {\n  sokcet = \"/run/p.sock\"\n  type   = \"node\"\n}\n";
    assert_one_error(
        src,
        r#"test.hcl:2:3: unknown attribute "sokcet" in plugin "p" (did you mean "socket"?)"#,
    );
}

#[test]
fn unknown_block_suggests_the_nearest_kind() {
    assert_one_error(
        "plugins \"x\" {\n  socket = \"/run/x.sock\"\n}\n",
        r#"test.hcl:1:1: unknown block "plugins" in the agent config (did you mean "plugin"?)"#,
    );
}

#[test]
fn unknown_key_far_from_every_name_gets_no_suggestion() {
    assert_one_error(
        "colour = \"blue\"\n",
        r#"test.hcl:1:1: unknown attribute "colour" in the agent config"#,
    );
}

#[test]
fn wrong_type_names_the_expected_and_the_found_type() {
    assert_one_error(
        "data_dir = 42\n",
        r#"test.hcl:1:12: "data_dir" in the agent config must be a string, found a number"#,
    );
    assert_one_error(
        "plugin_heartbeat = [\"30s\"]\n",
        r#"test.hcl:1:20: "plugin_heartbeat" in the agent config must be a string, found a list"#,
    );
}

#[test]
fn missing_required_attribute_is_reported_at_its_block() {
    assert_one_error(
        "plugin \"p\" {\n  type = \"node\"\n}\n",
        r#"test.hcl:1:1: missing required attribute "socket" in plugin "p""#,
    );
}

#[test]
fn every_error_of_a_file_is_reported_in_reading_order() {
    let src = r#"data_dri = "/x"
log_level = "loud"
plugin "a/b" {
  socket = "relative.sock"
  type   = "node"
  tpye   = "node"
}
"#;
    assert_eq!(
        errors(agent(src)),
        [
            r#"test.hcl:1:1: unknown attribute "data_dri" in the agent config (did you mean "data_dir"?)"#,
            r#"test.hcl:2:13: unknown log level "loud" (expected one of: off, error, warn, info, debug, trace)"#,
            r#"test.hcl:3:8: invalid plugin ID "a/b": only letters, digits, '.', '_', '-', '[' and ']' are allowed"#,
            r#"test.hcl:4:12: "socket" in plugin "a/b": endpoint "relative.sock" is not an absolute unix socket path (expected unix:///path/to/csi.sock)"#,
            r#"test.hcl:6:3: unknown attribute "tpye" in plugin "a/b" (did you mean "type"?)"#,
        ]
    );
}

#[test]
fn an_attribute_written_as_a_block_is_an_error() {
    assert_one_error(
        "data_dir {\n}\n",
        r#"test.hcl:1:1: "data_dir" in the agent config is an attribute, not a block: write data_dir = ..."#,
    );
}

#[test]
fn a_block_written_as_an_attribute_is_an_error() {
    assert_one_error(
        "plugin = \"x\"\n",
        r#"test.hcl:1:1: "plugin" in the agent config is a block, not an attribute: write plugin "NAME" { ... }"#,
    );
}

#[test]
fn a_single_block_given_twice_is_an_error() {
    let src = "id = \"v\"\ntype = \"csi\"\nplugin_id = \"p\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\nmount_options {\n}\nmount_options {\n}\n";
    assert_one_error(
        src,
        "test.hcl:10:1: mount_options is given twice in the volume spec (first at 8:1)",
    );
}

#[test]
fn a_name_declared_twice_is_an_error() {
    let src = "host_volume \"h\" {\n  path = \"/a\"\n}\nhost_volume \"h\" {\n  path = \"/b\"\n}\n";
    assert_one_error(
        src,
        r#"test.hcl:4:13: host_volume "h" is declared twice in the agent config (first at 1:13)"#,
    );
}

#[test]
fn blocks_need_exactly_their_labels() {
    assert_one_error(
        "plugin {\n}\n",
        "test.hcl:1:1: plugin needs one label, its name (plugin \"NAME\" { ... }), found 0",
    );
    let src = "id = \"v\"\ntype = \"csi\"\nplugin_id = \"p\"\ncapability \"x\" {\n}\n";
    assert_eq!(
        errors(volume(src)),
        [
            "test.hcl:1:1: the volume spec needs at least one capability block",
            "test.hcl:4:12: capability in the volume spec takes no label",
        ]
    );
}

#[test]
fn null_counts_as_not_set() {
    let config = ok(agent("data_dir = null\nnode_name = null\n")).spec;
    assert_eq!(config.data_dir, std::path::Path::new("/var/lib/csi-agent"));
    assert_eq!(config.node_name, None);
}

#[test]
fn syntax_errors_stop_decoding_with_their_position() {
    assert_one_error(
        "data_dir = \"/x\" log_level = \"info\"\n",
        "test.hcl:1:17: expected a newline or ',' after the value of 'data_dir', found identifier 'log_level'",
    );
}

#[test]
fn durations_use_nomads_spelling() {
    for (text, expected) in [
        ("30s", Duration::from_secs(30)),
        ("5m", Duration::from_secs(300)),
        ("1h30m", Duration::from_secs(5400)),
        ("250ms", Duration::from_millis(250)),
    ] {
        let config = ok(agent(&format!("plugin_heartbeat = {text:?}\n"))).spec;
        assert_eq!(config.plugin_heartbeat, expected, "{text}");
    }
    assert_one_error(
        "plugin_heartbeat = \"30\"\n",
        r#"test.hcl:1:20: "plugin_heartbeat" in the agent config: invalid duration "30" (expected a number with a unit, like 500ms, 30s, 5m or 1h30m)"#,
    );
}

#[test]
fn maps_are_blocks_or_objects_and_take_numbers_and_bools_as_text() {
    let src = r#"id        = "v"
type      = "csi"
plugin_id = "p"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
parameters {
  replicas = 3
  thin     = true
}
context = { "csi.example.com/pool" = "fast", zone: "a" }
"#;
    let spec = ok(volume(src)).spec;
    let parameters: Vec<(&str, &str)> = spec
        .parameters
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(parameters, [("replicas", "3"), ("thin", "true")]);
    let context: Vec<(&str, &str)> = spec
        .context
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(context, [("csi.example.com/pool", "fast"), ("zone", "a")]);
}

#[test]
fn map_values_must_be_plain() {
    let src = "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"/bin/true\"\n      }\n      env = { A = [\"x\"], \"A\" = \"y\" }\n    }\n  }\n}\n";
    assert_eq!(
        errors(job(src)),
        [r#"test.hcl:8:19: "A" in env in task "t" must be a string, found a list"#,]
    );
    let src = "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"/bin/true\"\n      }\n      env = { A = \"x\", \"A\" = \"y\" }\n    }\n  }\n}\n";
    assert_eq!(
        errors(job(src)),
        [r#"test.hcl:8:24: "A" is set twice in env in task "t""#]
    );
}

#[test]
fn the_file_kind_follows_the_top_level() {
    for (src, kind) in [
        ("job \"j\" {\n}\n", FileKind::Job),
        ("plugin_id = \"p\"\n", FileKind::Volume),
        ("data_dir = \"/x\"\n", FileKind::Agent),
        ("", FileKind::Agent),
    ] {
        let body = hcl::parse(src, FILE).unwrap();
        assert_eq!(FileKind::of(&body), kind, "{src:?}");
    }
    let decoded = ok(SpecFile::decode(super::fixture("job-web.hcl"), FILE));
    assert_eq!(decoded.spec.kind(), FileKind::Job);
}

#[test]
fn a_value_of_the_wrong_type_is_reported_once() {
    let src = r#"job "j" {
  group "g" {
    volume "v" {
      type            = "csi"
      source          = "vol"
      access_mode     = 1
      attachment_mode = "file-system"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
      volume_mount {
        volume           = "v"
        destination      = "/v"
        propagation_mode = true
      }
      csi_plugin {
        id                     = "p"
        type                   = "node"
        stage_publish_base_dir = ["/x"]
      }
    }
  }
}
"#;
    assert_eq!(
        errors(job(src)),
        [
            r#"test.hcl:6:25: "access_mode" in volume "v" must be a string, found a number"#,
            r#"test.hcl:17:28: "propagation_mode" in volume_mount in task "t" must be a string, found a bool"#,
            r#"test.hcl:22:34: "stage_publish_base_dir" in csi_plugin in task "t" must be a string, found a list"#,
        ]
    );
}
