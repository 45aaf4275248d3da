//! Specs written in HCL's JSON syntax, as Nomad reads `*.json` files: each
//! JSON fixture decodes to the same spec as its HCL twin, and the strict
//! decoder's errors (did-you-mean included) point into the JSON file.

use csi_agent::spec::{
    AgentConfig, FileKind, Job, Kept, Resources, Service, SpecFile, VolumeSpec, Warning,
};

use super::{assert_one_error, errors, fixture, ok, FILE, JSON_FILE};

/// Each JSON fixture and its HCL twin.
const TWINS: &[(&str, &str)] = &[
    ("agent.json", "agent.hcl"),
    ("agent-chroot.json", "agent-chroot.hcl"),
    ("volume-register.json", "volume-register.hcl"),
    ("volume-create.json", "volume-create.hcl"),
    ("volume-ebs.json", "volume-ebs.hcl"),
    ("job-per-alloc.json", "job-per-alloc.hcl"),
    ("job-plugin.json", "job-plugin.hcl"),
    ("job-web.json", "job-web.hcl"),
];

/// The warnings without their positions, which differ between the twins.
fn messages(warnings: &[Warning]) -> Vec<&str> {
    warnings.iter().map(|w| w.message.as_str()).collect()
}

/// Asserts that the error of `src` decoded as `test.json` is `expected`.
#[track_caller]
fn assert_one_json_error(src: &str, expected: &str) {
    let found = errors(SpecFile::decode(src, JSON_FILE));
    assert_eq!(found, vec![expected.to_string()], "in:\n{src}");
}

#[test]
fn json_agent_configs_decode_to_the_same_spec_as_their_hcl_twins() {
    for (json, hcl) in &TWINS[..2] {
        let from_json = ok(AgentConfig::decode(fixture(json), json));
        let from_hcl = ok(AgentConfig::decode(fixture(hcl), hcl));
        assert_eq!(from_json.spec, from_hcl.spec, "{json}");
        assert_eq!(from_json.warnings, Vec::new(), "{json}");
    }
}

#[test]
fn json_volume_specs_decode_to_the_same_spec_as_their_hcl_twins() {
    for (json, hcl) in &TWINS[2..5] {
        let from_json = ok(VolumeSpec::decode(fixture(json), json));
        let from_hcl = ok(VolumeSpec::decode(fixture(hcl), hcl));
        // Secrets and mount flags compare by value, not as redacted.
        assert_eq!(from_json.spec, from_hcl.spec, "{json}");
        assert!(
            from_json
                .spec
                .secrets
                .expose()
                .eq(from_hcl.spec.secrets.expose()),
            "{json}"
        );
        assert_eq!(
            messages(&from_json.warnings),
            messages(&from_hcl.warnings),
            "{json}"
        );
    }
}

#[test]
fn json_job_files_decode_to_the_same_spec_as_their_hcl_twins() {
    for (json, hcl) in &TWINS[5..] {
        let from_json = ok(Job::decode(fixture(json), json));
        let from_hcl = ok(Job::decode(fixture(hcl), hcl));
        // Something of the job is kept as written or decoded at job
        // level, so that the comparison covers it.
        assert!(
            !from_json.spec.ignored.is_empty() || !from_json.spec.placement.constraints.is_empty(),
            "{json}"
        );
        // Ignored items are kept as written, so their text is the one
        // difference: the same items are kept, in the same places.
        let (mut a, mut b) = (from_json.spec.clone(), from_hcl.spec.clone());
        blank_kept_text(&mut a);
        blank_kept_text(&mut b);
        assert_eq!(a, b, "{json}");
        assert_eq!(
            messages(&from_json.warnings),
            messages(&from_hcl.warnings),
            "{json}"
        );
    }
}

#[test]
fn ignored_json_items_are_kept_as_the_hcl_they_stand_for() {
    let web = ok(Job::decode(fixture("job-web.json"), "job-web.json")).spec;
    let kept: Vec<(&str, &str)> = web
        .ignored
        .iter()
        .map(|k| (k.name.as_str(), k.text.as_str()))
        .collect();
    assert_eq!(
        kept,
        [
            ("datacenters", "datacenters = [\"dc1\"]"),
            ("region", "region = \"global\""),
            ("priority", "priority = 60"),
            ("update", "update { max_parallel = 1 }"),
        ]
    );
    let sidecar = web.groups[0].services[0].connect.as_ref();
    let config = sidecar.and_then(|c| c.sidecar_task.as_ref()?.config.as_ref());
    assert_eq!(
        config.map(|k| k.text.as_str()),
        Some("config { image = \"envoyproxy/envoy:v1.29\" }")
    );
}

#[test]
fn json_specs_round_trip_through_hcl() {
    // `to_hcl` of a spec read from JSON is HCL that decodes to the same
    // spec, kept items included.
    for (json, _) in TWINS {
        let decoded = ok(SpecFile::decode(fixture(json), json)).spec;
        let text = match &decoded {
            SpecFile::Agent(config) => config.to_hcl(),
            SpecFile::Volume(volume) => volume.to_hcl(),
            SpecFile::Job(job) => job.to_hcl(),
        };
        let again = ok(SpecFile::decode(&text, FILE)).spec;
        assert_eq!(again, decoded, "{json}:\n{text}");
    }
}

#[test]
fn the_kind_of_a_json_file_is_told_from_its_top_level() {
    let kind = |name: &str| ok(SpecFile::decode(fixture(name), name)).spec.kind();
    assert_eq!(kind("agent.json"), FileKind::Agent);
    assert_eq!(kind("volume-create.json"), FileKind::Volume);
    assert_eq!(kind("job-plugin.json"), FileKind::Job);
}

#[test]
fn the_file_name_chooses_the_syntax() {
    // The same JSON text named `.hcl` is read as HCL, and fails there.
    let found = errors(SpecFile::decode(fixture("volume-ebs.json"), FILE));
    assert_eq!(
        found,
        ["test.hcl:1:1: expected an attribute or block name, found '{'"]
    );
    let found = errors(SpecFile::decode("id = \"x\"\n", JSON_FILE));
    assert_eq!(
        found,
        ["test.json:1:1: expected '{' (a JSON file holds one object), found 'i'"]
    );
}

#[test]
fn a_misspelt_json_key_suggests_the_nearest_name_at_its_position() {
    let src = r#"{
  "id": "db",
  "type": "csi",
  "plugin_id": "hostpath",
  "capability": [
    {
      "acess_mode": "single-node-writer",
      "attachment_mode": "file-system"
    }
  ]
}"#;
    assert_one_json_error(
        src,
        r#"test.json:7:7: unknown key "acess_mode" in capability in the volume spec (did you mean "access_mode"?)"#,
    );
}

#[test]
fn a_misspelt_json_key_in_a_labeled_block_names_the_block() {
    let src = r#"{"job": {"web": {"group": {"g": {"task": {"t": {
  "driver": "exec",
  "config": {"comand": "/bin/true"}
}}}}}}}"#;
    let found = errors(SpecFile::decode(src, JSON_FILE));
    assert_eq!(
        found,
        [r#"test.json:3:14: unknown key "comand" in config in task "t" (did you mean "command"?)"#,]
    );
}

#[test]
fn a_misspelt_json_block_key_suggests_the_block() {
    assert_one_json_error(
        "{\n  \"data_dir\": \"/var/lib/csi-agent\",\n  \"plugins\": {\"p\": {\"socket\": \"/run/p.sock\", \"type\": \"node\"}}\n}",
        r#"test.json:3:3: unknown key "plugins" in the agent config (did you mean "plugin"?)"#,
    );
}

#[test]
fn a_json_value_without_a_block_shape_is_an_error_at_the_value() {
    let spec = |capability: &str| {
        format!(
            "{{\"id\": \"db\", \"type\": \"csi\", \"plugin_id\": \"p\",\n \"capability\": {capability}}}"
        )
    };
    assert_one_json_error(
        &spec("[{\"access_mode\": \"single-node-writer\", \"attachment_mode\": \"file-system\"}, \"rw\"]"),
        r#"test.json:2:90: "capability" in the volume spec is a block: its value must be an object or a list of objects, found a string in the list"#,
    );
    let found = errors(SpecFile::decode(&spec("\"rw\""), JSON_FILE));
    assert_eq!(
        found,
        [
            "test.json:1:1: the volume spec needs at least one capability block",
            r#"test.json:2:16: "capability" in the volume spec is a block: its value must be an object or a list of objects, found a string"#,
        ]
    );
    assert_one_json_error(
        r#"{"plugin": {"p": "unix:///run/p.sock"}}"#,
        r#"test.json:1:18: "plugin" in the agent config holds blocks by name: the value of "p" must be an object or a list of objects, found a string"#,
    );
}

#[test]
fn json_values_are_type_checked_as_hcl_values_are() {
    assert_one_json_error(
        r#"{"data_dir": {"path": "/x"}}"#,
        r#"test.json:1:14: "data_dir" in the agent config must be a string, found an object"#,
    );
    assert_one_json_error(
        r#"{"data_dir": "/x", "chroot_env": ["/bin"]}"#,
        r#"test.json:1:34: "chroot_env" in the agent config must be an object, found a list"#,
    );
}

#[test]
fn json_errors_of_every_kind_are_all_reported_in_reading_order() {
    let src = r#"{
  "plugin": {
    "p": {"type": "nod", "socket": "/run/p.sock"},
    "q": {"socket": "/run/q.sock"}
  },
  "log_level": "loud"
}"#;
    let found = errors(AgentConfig::decode(src, JSON_FILE));
    assert_eq!(
        found,
        [
            r#"test.json:3:19: "type" in plugin "p": unknown plugin type "nod" (expected one of: node, controller, monolith)"#,
            r#"test.json:4:5: missing required attribute "type" in plugin "q""#,
            r#"test.json:6:16: unknown log level "loud" (expected one of: off, error, warn, info, debug, trace)"#,
        ]
    );
}

#[test]
fn ignored_json_keys_warn_at_their_position() {
    let decoded = ok(Job::decode(
        fixture("job-per-alloc.json"),
        "job-per-alloc.json",
    ));
    let warnings: Vec<String> = decoded.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        warnings,
        [
            "job-per-alloc.json:4:7: warning: \"datacenters\" in job \"example\" is ignored by csi-agent",
        ]
    );
}

#[test]
fn comments_in_json_bodies_are_not_keys() {
    let src = r#"{"//": "an agent", "data_dir": "/x", "plugin": {"//": "none yet"}}"#;
    let config = ok(AgentConfig::decode(src, JSON_FILE)).spec;
    assert!(config.plugins.is_empty());
    assert_one_error(
        "data_dir = \"/x\"\n\"//\" = \"not in HCL\"\n",
        r#"test.hcl:2:1: unknown attribute "//" in the agent config"#,
    );
}

/// Replaces the text of every kept item with nothing, leaving its name.
fn blank_kept_text(job: &mut Job) {
    blank(&mut job.ignored);
    for group in &mut job.groups {
        blank(&mut group.ignored);
        blank(&mut group.restart.ignored);
        for volume in &mut group.volumes {
            blank(&mut volume.ignored);
        }
        group.services.iter_mut().for_each(blank_service);
        for task in &mut group.tasks {
            blank(&mut task.ignored);
            blank(&mut task.config.ignored);
            task.resources.iter_mut().for_each(blank_resources);
            for mount in &mut task.volume_mounts {
                blank(&mut mount.ignored);
            }
            task.services.iter_mut().for_each(blank_service);
        }
    }
}

fn blank_service(service: &mut Service) {
    blank(&mut service.ignored);
    for check in &mut service.checks {
        blank(&mut check.ignored);
    }
    let Some(connect) = &mut service.connect else {
        return;
    };
    blank(&mut connect.ignored);
    if let Some(sidecar) = &mut connect.sidecar_service {
        blank(&mut sidecar.ignored);
        if let Some(proxy) = &mut sidecar.proxy {
            blank(&mut proxy.ignored);
            for upstream in &mut proxy.upstreams {
                blank(&mut upstream.ignored);
            }
        }
    }
    if let Some(task) = &mut connect.sidecar_task {
        blank(&mut task.ignored);
        blank(task.config.as_mut_slice());
        task.resources.iter_mut().for_each(blank_resources);
    }
}

fn blank_resources(resources: &mut Resources) {
    blank(&mut resources.ignored);
}

fn blank(kept: &mut [Kept]) {
    for item in kept {
        item.text.clear();
    }
}
