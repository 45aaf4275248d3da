//! The volume spec of `volume register` and `volume create`.

use std::collections::BTreeMap;

use csi_agent::csi::{AccessMode, AttachmentMode, Capability};
use csi_agent::spec::Topology;

use super::{assert_one_error, errors, fixture, ok, volume, warnings};

/// A valid volume spec with `extra` appended.
fn spec_with(extra: &str) -> String {
    format!(
        "id        = \"v\"\ntype      = \"csi\"\nplugin_id = \"p\"\ncapability {{\n  access_mode     = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}}\n{extra}"
    )
}

fn segments(pairs: &[(&str, &str)]) -> Topology {
    Topology {
        segments: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

#[test]
fn the_registration_example_decodes() {
    let decoded = ok(volume(fixture("volume-register.hcl")));
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let spec = decoded.spec;
    assert_eq!(spec.id, "ebs_prod_db1");
    assert_eq!(spec.name, "database");
    assert_eq!(spec.plugin_id, "ebs-prod");
    assert_eq!(spec.external_id.as_deref(), Some("vol-0a1b2c3d"));
    assert_eq!(
        spec.capabilities,
        [
            Capability::new(AccessMode::SingleNodeReaderOnly, AttachmentMode::FileSystem),
            Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::FileSystem),
        ]
    );
    assert_eq!(spec.mount_options.fs_type, "ext4");
    assert_eq!(
        spec.mount_options.mount_flags.expose(),
        ["noatime", "nodiratime"]
    );
    assert_eq!(spec.secrets.keys().collect::<Vec<_>>(), ["example_secret"]);
    assert_eq!(spec.parameters["skuname"], "Premium_LRS");
    assert_eq!(spec.context["endpoint"], "http://192.168.1.101:9425");
    assert_eq!(
        spec.topology_request.required,
        [
            segments(&[("rack", "R2")]),
            segments(&[("rack", "R1"), ("zone", "us-east-1a")]),
        ]
    );
    assert!(spec.topology_request.preferred.is_empty());
    assert_eq!((spec.capacity_min, spec.capacity_max), (None, None));
}

#[test]
fn the_creation_example_decodes() {
    let decoded = ok(volume(fixture("volume-create.hcl")));
    assert_eq!(
        warnings(&decoded.warnings),
        [r#"test.hcl:9:1: warning: "namespace" in the volume spec is ignored by csi-agent"#]
    );
    let spec = decoded.spec;
    assert_eq!(spec.name, "database-2");
    assert_eq!(spec.external_id, None);
    assert_eq!(spec.capacity_min, Some(50 << 30));
    assert_eq!(spec.capacity_max, Some(100 << 30));
    assert_eq!(spec.parameters["csi.storage.k8s.io/fstype"], "xfs");
    assert_eq!(spec.topology_request.required.len(), 2);
    assert_eq!(
        spec.topology_request.preferred,
        [segments(&[("rack", "R1"), ("zone", "us-east-1a")])]
    );
    assert_eq!(spec.ignored.len(), 1);
    assert_eq!(spec.ignored[0].text, "namespace = \"default\"");
}

#[test]
fn the_ebs_example_with_a_quoted_topology_key_decodes() {
    let decoded = ok(volume(fixture("volume-ebs.hcl")));
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let spec = decoded.spec;
    assert_eq!(spec.id, "ebs-vol[0]");
    assert_eq!(spec.plugin_id, "aws-ebs0");
    assert_eq!(spec.capabilities.len(), 2);
    assert_eq!(spec.parameters["type"], "gp2");
    assert_eq!(
        spec.topology_request.required,
        [segments(&[("topology.ebs.csi.aws.com/zone", "us-east-1b")])]
    );
}

#[test]
fn one_line_blocks_and_quoted_keys_stay_strict() {
    // Commas in a block that is not a map: the keys are still checked.
    let spec = ok(volume(&spec_with(
        "mount_options { fs_type = \"ext4\", mount_flags = [\"noatime\"] }\n",
    )))
    .spec;
    assert_eq!(spec.mount_options.fs_type, "ext4");
    // A quoted key is the same key as an identifier, typos included.
    assert_one_error(
        &spec_with("mount_options { \"fs_typ\" = \"ext4\" }\n"),
        "test.hcl:8:17: unknown attribute \"fs_typ\" in mount_options in the volume spec (did you mean \"fs_type\"?)",
    );
    assert_one_error(
        &spec_with("mount_options { fs_type = \"ext4\", mount_flag = [] }\n"),
        "test.hcl:8:35: unknown attribute \"mount_flag\" in mount_options in the volume spec (did you mean \"mount_flags\"?)",
    );
}

#[test]
fn volume_specs_round_trip_through_hcl() {
    for name in ["volume-register.hcl", "volume-create.hcl", "volume-ebs.hcl"] {
        let spec = ok(volume(fixture(name))).spec;
        let text = spec.to_hcl();
        let again = ok(volume(&text)).spec;
        assert_eq!(again, spec, "{name}:\n{text}");
        assert_eq!(again.to_hcl(), text, "{name}");
    }
}

#[test]
fn secrets_and_mount_flags_stay_redacted_in_the_spec() {
    let spec = ok(volume(fixture("volume-register.hcl"))).spec;
    let shown = format!("{spec:?}");
    assert!(!shown.contains("plugh"), "{shown}");
    assert!(!shown.contains("noatime"), "{shown}");
    assert!(shown.contains("example_secret: [REDACTED]"), "{shown}");
}

#[test]
fn name_defaults_to_the_id() {
    let spec = ok(volume(&spec_with(""))).spec;
    assert_eq!(spec.name, "v");
    assert_eq!(spec.parameters, BTreeMap::new());
}

#[test]
fn a_volume_needs_a_capability() {
    assert_one_error(
        "id = \"v\"\ntype = \"csi\"\nplugin_id = \"p\"\n",
        "test.hcl:1:1: the volume spec needs at least one capability block",
    );
}

#[test]
fn a_capability_needs_both_modes() {
    let src = "id = \"v\"\ntype = \"csi\"\nplugin_id = \"p\"\ncapability {\n  access_mode = \"single-node-writer\"\n}\n";
    assert_one_error(
        src,
        r#"test.hcl:4:1: missing required attribute "attachment_mode" in capability in the volume spec"#,
    );
}

#[test]
fn a_capability_given_twice_is_an_error() {
    assert_one_error(
        &spec_with("capability {\n  access_mode     = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n"),
        "test.hcl:8:1: capability single-node-writer/file-system is given twice",
    );
}

#[test]
fn id_type_and_plugin_id_are_required() {
    let src = "plugin_id = \"p\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n";
    assert_eq!(
        errors(volume(src)),
        [
            r#"test.hcl:1:1: missing required attribute "id" in the volume spec"#,
            r#"test.hcl:1:1: missing required attribute "type" in the volume spec"#,
        ]
    );
}

#[test]
fn the_type_must_be_csi() {
    let src = spec_with("").replace("\"csi\"", "\"host\"");
    assert_one_error(
        &src,
        "test.hcl:2:13: volume type \"host\" is not supported here: declare host volumes as host_volume blocks in the agent config",
    );
    let src = spec_with("").replace("\"csi\"", "\"nfs\"");
    assert_one_error(
        &src,
        "test.hcl:2:13: unknown volume type \"nfs\" (expected \"csi\")",
    );
}

#[test]
fn volume_and_plugin_ids_become_paths_and_are_validated() {
    let src = spec_with("").replace("id        = \"v\"", "id = \"../v\"");
    assert_one_error(
        &src,
        r#"test.hcl:1:6: invalid volume ID "../v": only letters, digits, '.', '_', '-', '[' and ']' are allowed"#,
    );
    let src = spec_with("").replace("plugin_id = \"p\"", "plugin_id = \".\"");
    assert_one_error(
        &src,
        r#"test.hcl:3:13: invalid plugin ID ".": must not be . or .."#,
    );
}

#[test]
fn capacities_take_units_in_any_case_or_bytes() {
    let spec = ok(volume(&spec_with(
        "capacity_min = 1048576\ncapacity_max = \"2g\"\n",
    )))
    .spec;
    assert_eq!(spec.capacity_min, Some(1 << 20));
    assert_eq!(spec.capacity_max, Some(2_000_000_000));
    assert_one_error(
        &spec_with("capacity_min = \"ten gigs\"\n"),
        r#"test.hcl:8:16: "capacity_min" in the volume spec: invalid size "ten gigs" (expected bytes, or a number with a unit, like 512MiB, 10GiB or 1GB)"#,
    );
}

#[test]
fn capacity_max_must_not_be_below_capacity_min() {
    assert_one_error(
        &spec_with("capacity_min = \"2GiB\"\ncapacity_max = \"1GiB\"\n"),
        r#"test.hcl:9:16: "capacity_max" (1.0 GiB) is smaller than "capacity_min" (2.0 GiB)"#,
    );
}

#[test]
fn mount_options_need_a_file_system_capability() {
    let src = spec_with("mount_options {\n  fs_type = \"ext4\"\n}\n")
        .replace("file-system", "block-device");
    assert_one_error(
        &src,
        "test.hcl:8:1: mount_options apply to file-system volumes, but no capability of the volume spec is file-system",
    );
}

#[test]
fn a_snapshot_or_a_clone_source_is_kept_but_not_both() {
    let spec = ok(volume(&spec_with("snapshot_id = \"snap-1\"\n"))).spec;
    assert_eq!(spec.snapshot_id.as_deref(), Some("snap-1"));
    assert_eq!(spec.clone_id, None);
    let spec = ok(volume(&spec_with("clone_id = \"vol-1\"\n"))).spec;
    assert_eq!(spec.clone_id.as_deref(), Some("vol-1"));
    assert_one_error(
        &spec_with("snapshot_id = \"snap-1\"\nclone_id = \"vol-1\"\n"),
        r#"test.hcl:9:12: "snapshot_id" and "clone_id" cannot both be set: a volume is made from one source"#,
    );
}

#[test]
fn topology_segments_must_not_be_empty() {
    assert_one_error(
        &spec_with("topology_request {\n  required {\n    topology {\n      segments {\n      }\n    }\n  }\n}\n"),
        "test.hcl:10:5: segments in topology in the volume spec must not be empty",
    );
}
