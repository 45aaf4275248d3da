//! One test per validation rule of job specs. Each error names the block
//! it concerns and points at the line that breaks the rule.

use csi_agent::spec::SpecFile;

use super::{job, ok, FILE};

/// A job with one group of `count` instances, one volume `data` whose body
/// is `volume`, and one task `t` with `task` added to its body.
fn group(count: u64, volume: &str, task: &str) -> String {
    format!(
        r#"job "j" {{
  group "g" {{
    count = {count}
    volume "data" {{
{volume}
    }}
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/true"
      }}
{task}
    }}
  }}
}}
"#
    )
}

/// A read-write csi volume that any count may share.
const SHARED: &str = r#"      type            = "csi"
      source          = "vol"
      access_mode     = "multi-node-multi-writer"
      attachment_mode = "file-system""#;

/// A task body that mounts `data` with `extra` lines in the mount.
fn mount(extra: &str) -> String {
    format!(
        "      volume_mount {{\n        volume      = \"data\"\n        destination = \"/data\"\n{extra}\n      }}"
    )
}

/// A task body with a csi_plugin block holding `body`.
fn plugin(body: &str) -> String {
    format!("      csi_plugin {{\n{body}\n      }}")
}

/// Asserts that `src` has exactly one error, `message`, on the line that
/// contains `needle`.
fn assert_rule(src: &str, needle: &str, message: &str) {
    let invalid = match SpecFile::decode(src, FILE) {
        Ok(decoded) => panic!("expected an error, got {:?}\nin:\n{src}", decoded.spec),
        Err(invalid) => invalid,
    };
    let messages: Vec<&str> = invalid.errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages, [message], "in:\n{src}");
    let line = src
        .lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{needle:?} is not in the source"));
    assert_eq!(invalid.errors[0].pos.line, line, "{}", invalid.errors[0]);
}

#[test]
fn the_rules_accept_a_valid_group() {
    let src = group(
        3,
        SHARED,
        &mount("        propagation_mode = \"bidirectional\""),
    );
    ok(job(&src));
}

#[test]
fn csi_plugin_needs_an_id() {
    assert_rule(
        &group(1, SHARED, &plugin("        type = \"node\"")),
        "csi_plugin {",
        r#"missing required attribute "id" in csi_plugin in task "t""#,
    );
}

#[test]
fn csi_plugin_id_must_not_be_empty() {
    assert_rule(
        &group(
            1,
            SHARED,
            &plugin("        id   = \"\"\n        type = \"node\""),
        ),
        "id   = \"\"",
        r#"invalid plugin ID "": must not be empty"#,
    );
}

#[test]
fn csi_plugin_needs_a_type_of_node_controller_or_monolith() {
    assert_rule(
        &group(
            1,
            SHARED,
            &plugin("        id   = \"p\"\n        type = \"nodes\""),
        ),
        "type = \"nodes\"",
        r#""type" in csi_plugin in task "t": unknown plugin type "nodes" (expected one of: node, controller, monolith)"#,
    );
    assert_rule(
        &group(1, SHARED, &plugin("        id   = \"p\"")),
        "csi_plugin {",
        r#"missing required attribute "type" in csi_plugin in task "t""#,
    );
}

#[test]
fn stage_publish_base_dir_must_not_be_inside_mount_dir() {
    let body = "        id = \"p\"\n        type = \"node\"\n        mount_dir = \"/csi\"\n        stage_publish_base_dir = \"/csi/local\"";
    assert_rule(
        &group(1, SHARED, &plugin(body)),
        "stage_publish_base_dir",
        r#"stage_publish_base_dir "/csi/local" in csi_plugin in task "t" must not be inside mount_dir "/csi": the plugin's socket directory would hide the volumes' mounts"#,
    );
}

#[test]
fn stage_publish_base_dir_must_not_be_mount_dir_itself() {
    let body = "        id = \"p\"\n        type = \"node\"\n        mount_dir = \"/local/csi/\"";
    assert_rule(
        &group(1, SHARED, &plugin(body)),
        "csi_plugin {",
        r#"stage_publish_base_dir "/local/csi" in csi_plugin in task "t" must not be inside mount_dir "/local/csi/": the plugin's socket directory would hide the volumes' mounts"#,
    );
}

#[test]
fn mount_dir_must_not_be_inside_stage_publish_base_dir() {
    let body =
        "        id = \"p\"\n        type = \"node\"\n        mount_dir = \"/local/csi/socket\"";
    assert_rule(
        &group(1, SHARED, &plugin(body)),
        "mount_dir",
        r#"mount_dir "/local/csi/socket" in csi_plugin in task "t" must not be inside stage_publish_base_dir "/local/csi": the volumes' directory would hide the plugin's socket directory"#,
    );
}

#[test]
fn a_sibling_of_mount_dir_is_not_inside_it() {
    let body = "        id = \"p\"\n        type = \"node\"\n        mount_dir = \"/csi\"\n        stage_publish_base_dir = \"/csi2\"";
    ok(job(&group(1, SHARED, &plugin(body))));
}

#[test]
fn volume_mount_must_name_a_volume_of_its_group() {
    let task = "      volume_mount {\n        volume      = \"date\"\n        destination = \"/data\"\n      }";
    assert_rule(
        &group(1, SHARED, task),
        "\"date\"",
        r#"volume_mount in task "t" names volume "date", which group "g" does not declare (did you mean "data"?)"#,
    );
}

#[test]
fn volume_mount_destination_must_not_climb_out() {
    let task = "      volume_mount {\n        volume      = \"data\"\n        destination = \"local/../../etc\"\n      }";
    assert_rule(
        &group(1, SHARED, task),
        "destination",
        r#""destination" in volume_mount in task "t" must not contain "..", found "local/../../etc""#,
    );
}

#[test]
fn propagation_mode_must_be_one_of_the_three() {
    assert_rule(
        &group(1, SHARED, &mount("        propagation_mode = \"rshared\"")),
        "propagation_mode",
        r#""propagation_mode" in volume_mount in task "t": unknown propagation "rshared", expected one of private, host-to-task, bidirectional"#,
    );
}

#[test]
fn bidirectional_propagation_needs_a_read_write_volume() {
    let volume = format!("{SHARED}\n      read_only       = true");
    assert_rule(
        &group(
            1,
            &volume,
            &mount("        propagation_mode = \"bidirectional\""),
        ),
        "propagation_mode",
        r#"propagation_mode "bidirectional" in volume_mount in task "t" needs a read-write volume and mount, and the volume is read-only"#,
    );
}

#[test]
fn bidirectional_propagation_needs_a_read_write_mount() {
    let extra = "        read_only        = true\n        propagation_mode = \"bidirectional\"";
    assert_rule(
        &group(1, SHARED, &mount(extra)),
        "propagation_mode",
        r#"propagation_mode "bidirectional" in volume_mount in task "t" needs a read-write volume and mount, and the mount is read-only"#,
    );
}

#[test]
fn csi_volumes_need_an_access_mode() {
    let volume = "      type            = \"csi\"\n      source          = \"vol\"\n      attachment_mode = \"file-system\"";
    assert_rule(
        &group(1, volume, ""),
        "volume \"data\"",
        r#"missing required attribute "access_mode" in volume "data""#,
    );
}

#[test]
fn csi_volumes_need_an_attachment_mode() {
    let volume = "      type            = \"csi\"\n      source          = \"vol\"\n      access_mode     = \"single-node-writer\"";
    assert_rule(
        &group(1, volume, ""),
        "volume \"data\"",
        r#"missing required attribute "attachment_mode" in volume "data""#,
    );
}

#[test]
fn host_volumes_need_no_modes() {
    let volume = "      type   = \"host\"\n      source = \"certs\"";
    ok(job(&group(2, volume, &mount(""))));
}

#[test]
fn reader_only_access_modes_need_read_only() {
    for mode in ["single-node-reader-only", "multi-node-reader-only"] {
        let volume = format!(
            "      type            = \"csi\"\n      source          = \"vol\"\n      access_mode     = \"{mode}\"\n      attachment_mode = \"file-system\""
        );
        assert_rule(
            &group(1, &volume, ""),
            "access_mode",
            &format!(r#"access_mode "{mode}" in volume "data" needs read_only = true"#),
        );
        ok(job(&group(
            1,
            &format!("{volume}\n      read_only = true"),
            "",
        )));
    }
}

#[test]
fn block_devices_cannot_have_mount_options() {
    let volume = "      type            = \"csi\"\n      source          = \"vol\"\n      access_mode     = \"single-node-writer\"\n      attachment_mode = \"block-device\"\n      mount_options {\n        fs_type = \"ext4\"\n      }";
    assert_rule(
        &group(1, volume, ""),
        "mount_options",
        r#"volume "data" is a block-device volume and cannot have mount_options"#,
    );
}

#[test]
fn host_volumes_cannot_have_mount_options() {
    let volume =
        "      type   = \"host\"\n      source = \"certs\"\n      mount_options {\n      }";
    assert_rule(
        &group(1, volume, ""),
        "mount_options",
        r#"mount_options in volume "data" apply only to csi volumes"#,
    );
}

#[test]
fn single_node_access_modes_with_a_count_above_one_need_per_alloc() {
    let volume = "      type            = \"csi\"\n      source          = \"vol\"\n      access_mode     = \"single-node-writer\"\n      attachment_mode = \"file-system\"";
    assert_rule(
        &group(2, volume, ""),
        "access_mode",
        r#"volume "data" is single-node-writer, which one instance at a time can claim, but group "g" has count = 2: set per_alloc = true to give each instance its own volume"#,
    );
    ok(job(&group(1, volume, "")));
    ok(job(&group(
        2,
        &format!("{volume}\n      per_alloc = true"),
        "",
    )));
}

#[test]
fn job_ids_become_paths_and_are_validated() {
    let src = group(1, SHARED, "").replace("job \"j\"", "job \"a b\"");
    assert_rule(
        &src,
        "job \"a b\"",
        r#"invalid job ID "a b": only letters, digits, '.', '_', '-', '[' and ']' are allowed"#,
    );
}

#[test]
fn group_names_become_paths_and_are_validated() {
    let src = group(1, SHARED, "").replace("group \"g\"", "group \"..\"");
    assert_rule(
        &src,
        "group \"..\"",
        r#"invalid group name "..": must not be . or .."#,
    );
}

#[test]
fn task_names_become_paths_and_are_validated() {
    let src = group(1, SHARED, "").replace("task \"t\"", "task \"t/x\"");
    assert_rule(
        &src,
        "task \"t/x\"",
        r#"invalid task name "t/x": only letters, digits, '.', '_', '-', '[' and ']' are allowed"#,
    );
}

#[test]
fn volume_sources_become_paths_and_are_validated() {
    let src = group(1, SHARED, "").replace("\"vol\"", "\".\"");
    assert_rule(
        &src,
        "source",
        r#"invalid volume ID ".": must not be . or .."#,
    );
}

#[test]
fn per_alloc_volume_ids_of_every_instance_must_fit() {
    let source = "v".repeat(125);
    let volume = format!(
        "      type            = \"csi\"\n      source          = \"{source}\"\n      access_mode     = \"single-node-writer\"\n      attachment_mode = \"file-system\"\n      per_alloc       = true"
    );
    ok(job(&group(10, &volume, "")));
    assert_rule(
        &group(11, &volume, ""),
        "source",
        &format!(r#"invalid volume ID "{source}[10]": longer than 128 bytes"#),
    );
}

#[test]
fn plugin_ids_of_csi_plugin_tasks_become_paths_and_are_validated() {
    assert_rule(
        &group(
            1,
            SHARED,
            &plugin("        id   = \"../p\"\n        type = \"node\""),
        ),
        "../p",
        r#"invalid plugin ID "../p": only letters, digits, '.', '_', '-', '[' and ']' are allowed"#,
    );
}
