//! Nomad's `volume` commands through the CLI, against a real agent and a
//! real (strict) hostpath plugin: `detach`, `init` (HCL and `-json`), specs
//! in HCL's JSON syntax for `create` and `register`, `status -plugin` with
//! the plugin's unregistered volumes, and the refusals of snapshot
//! commands a plugin cannot serve. Snapshots, restores, clones and
//! expansion themselves are in `snapshots_cli.rs`.

use std::fs;

use csi_agent::csi::types::CreateVolume;
use csi_agent::csi::{AccessMode, AttachmentMode, Capability};

use crate::harness::text;
use crate::util::{bin, mount_state, require_root};
use crate::volume_util::*;

const MNMW: &str = "multi-node-multi-writer";

#[test]
fn detach_without_an_alloc_releases_every_claim_of_the_volume_and_waits() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", MNMW);
    claimed(&rig.agent, &claim_req("vol", "a1"));
    claimed(&rig.agent, &claim_req("vol", "a2"));
    let out = rig.agent.cli(&["volume", "detach", "vol"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("the claim of alloc \"a1\" is released"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the claim of alloc \"a2\" is released"),
        "{stdout}"
    );
    assert!(unclaimed(&volume(&rig.agent, "vol")));
    assert_eq!(mount_state(&rig.staging_path("vol")), None);
    // With -alloc, Nomad's detach of one claim; none left is not an error.
    claimed(&rig.agent, &claim_req("vol", "a3"));
    let out = rig.agent.cli(&["volume", "detach", "-alloc", "a3", "vol"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = rig.agent.cli(&["volume", "detach", "vol"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("has no claims"),
        "{}",
        text(&out)
    );
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn init_writes_a_spec_that_validates_and_never_overwrites() {
    let dir = crate::util::TestDir::new();
    let run = |args: &[&str]| {
        std::process::Command::new(bin())
            .args(args)
            .current_dir(&dir.path)
            .output()
            .unwrap()
    };
    let out = run(&["volume", "init"]);
    assert!(out.status.success(), "{}", text(&out));
    let written = fs::read_to_string(dir.join("volume.hcl")).unwrap();
    assert!(written.contains("capability {"));
    let out = run(&["validate", "volume.hcl"]);
    assert!(out.status.success(), "{}", text(&out));
    fs::write(dir.join("volume.hcl"), "mine\n").unwrap();
    let out = run(&["volume", "init"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    assert_eq!(
        fs::read_to_string(dir.join("volume.hcl")).unwrap(),
        "mine\n"
    );
    let out = run(&["volume", "init", "other.hcl"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(dir.join("other.hcl").exists());
}

#[test]
fn init_json_writes_a_json_spec_that_validates_and_never_overwrites() {
    let dir = crate::util::TestDir::new();
    let run = |args: &[&str]| {
        std::process::Command::new(bin())
            .args(args)
            .current_dir(&dir.path)
            .output()
            .unwrap()
    };
    let out = run(&["volume", "init", "-json"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Example volume specification written to volume.json\n"
    );
    let written = fs::read_to_string(dir.join("volume.json")).unwrap();
    assert!(
        written.starts_with("{\n  \"id\": \"database\","),
        "{written}"
    );
    let out = run(&["validate", "volume.json"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with(
            "volume.json: volume spec: csi volume \"database\" (\"database\") on plugin \"hostpath\"\n"
        ),
        "{}",
        text(&out)
    );
    // The same spec as the HCL example's.
    let out = run(&["volume", "init"]);
    assert!(out.status.success(), "{}", text(&out));
    let hcl = run(&["validate", "volume.hcl"]);
    let json = run(&["validate", "volume.json"]);
    assert_eq!(
        String::from_utf8_lossy(&json.stdout).replace("volume.json", "FILE"),
        String::from_utf8_lossy(&hcl.stdout).replace("volume.hcl", "FILE")
    );

    fs::write(dir.join("volume.json"), "{}\n").unwrap();
    let out = run(&["volume", "init", "-json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    assert_eq!(fs::read_to_string(dir.join("volume.json")).unwrap(), "{}\n");
    let out = run(&["volume", "init", "-json", "other.json"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(dir.join("other.json").exists());

    // A name that csi-agent would read in the other syntax is refused.
    for args in [
        &["volume", "init", "-json", "spec.hcl"][..],
        &["volume", "init", "spec.json"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(!dir.join(args[args.len() - 1]).exists(), "{args:?}");
    }
}

#[test]
fn a_json_spec_is_created_and_registered_through_the_cli() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let dir = &rig.agent.dir;
    let out = std::process::Command::new(bin())
        .args(["volume", "init", "-json"])
        .current_dir(&dir.path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let path = dir.join("volume.json");
    let example = fs::read_to_string(&path).unwrap();
    let spec = example
        .replace("\"hostpath\"", &format!("{PLUGIN:?}"))
        .replace("\"database\"", "\"db\"");
    fs::write(&path, &spec).unwrap();
    let file = path.display().to_string();
    let out = rig.agent.cli(&["volume", "create", &file]);
    assert!(out.status.success(), "{}", text(&out));
    let created = volume(&rig.agent, "db");
    assert_eq!(created.plugin_id, PLUGIN);
    assert_eq!(created.capabilities.len(), 2);
    assert_eq!(created.fs_type, "ext4");

    // Registration reads JSON too; its errors point into the JSON file.
    let external_id = created.external_id.clone();
    let out = rig.agent.cli(&["volume", "deregister", "db"]);
    assert!(out.status.success(), "{}", text(&out));
    let register = spec.replace(
        "\"type\": \"csi\",",
        &format!(
            "\"type\": \"csi\",\n  \"external_id\": {external_id:?},\n  \"namespce\": \"default\","
        ),
    );
    fs::write(&path, &register).unwrap();
    let out = rig.agent.cli(&["volume", "register", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{file}:6:3: unknown key \"namespce\" in the volume spec (did you mean \"namespace\"?)"
        )),
        "{stderr}"
    );
    fs::write(&path, register.replace("namespce", "namespace")).unwrap();
    let out = rig.agent.cli(&["volume", "register", &file]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(volume(&rig.agent, "db").external_id, external_id);
    rig.assert_nothing_left();
}

#[test]
fn status_of_a_plugin_lists_its_volumes_that_are_not_registered() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let registered = rig.create("vol", MNMW).external_id;
    let unregistered = rig
        .plugin
        .csi_client()
        .create_volume(&CreateVolume {
            name: "stray".into(),
            capabilities: vec![Capability::new(
                AccessMode::MultiNodeMultiWriter,
                AttachmentMode::FileSystem,
            )],
            ..Default::default()
        })
        .unwrap()
        .volume_id;
    let resp = connect(&rig.agent).volume_status_of_plugin(PLUGIN).unwrap();
    assert_eq!(resp.volumes.len(), 1);
    let external: Vec<&str> = resp
        .external
        .iter()
        .map(|v| v.external_id.as_str())
        .collect();
    assert_eq!(external, [unregistered.as_str()], "not {registered}");
    let out = rig.agent.cli(&["volume", "status", "-plugin", PLUGIN]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("External Volumes") && stdout.contains(&unregistered),
        "{stdout}"
    );
    // A plugin that is not registered says so.
    let out = rig.agent.cli(&["volume", "status", "-plugin", "nope"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("plugin \"nope\" is not registered"),
        "{}",
        text(&out)
    );
}

#[test]
fn snapshot_commands_are_refused_for_a_plugin_without_a_controller() {
    if !require_root() {
        return;
    }
    let rig = Rig::start_with(PluginType::Node, None);
    let spec = spec("vol", &[MNMW], Some("ext-1"));
    connect(&rig.agent)
        .volume_register("vol.hcl", &spec)
        .unwrap_or_else(|err| panic!("{err}"));
    for args in [
        &["volume", "snapshot", "create", "vol", "s1"][..],
        &["volume", "snapshot", "list", "-plugin", PLUGIN],
        &["volume", "snapshot", "delete", PLUGIN, "s1"],
    ] {
        let out = rig.agent.cli(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("has no controller"),
            "{args:?}: {}",
            text(&out)
        );
    }
    let out = rig.agent.cli(&["volume", "snapshot", "list"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "-plugin is required: {}",
        text(&out)
    );
}

#[test]
fn plugin_status_of_one_plugin_lists_the_volumes_registered_on_it() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol-b", MNMW);
    rig.create("vol-a", MNMW);
    let out = rig.agent.cli(&["plugin", "status", PLUGIN]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Volumes"))
        .unwrap_or_else(|| panic!("{}", text(&out)));
    assert!(line.ends_with("= vol-a, vol-b"), "{line}");
    let out = rig.agent.cli(&["plugin", "status", "-json", PLUGIN]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"vol-a\""),
        "{}",
        text(&out)
    );
}

#[test]
fn what_a_plugin_cannot_do_is_refused_naming_the_capability_it_lacks() {
    if !require_root() {
        return;
    }
    let plugin = crate::util::Plugin::start_with(
        &[("RUST_LOG", "csi_agent=debug")],
        &[
            "-test-without",
            "create-delete-snapshot,list-snapshots,clone-volume,online-expansion",
        ],
    );
    let rig = Rig::around(plugin, PluginType::Monolith, None);
    let sized = |min: &str, extra: &str| {
        format!(
            "{}capacity_min = {min:?}\n{extra}",
            spec("vol", &[MNMW], None)
        )
    };
    connect(&rig.agent)
        .volume_create("vol.hcl", &sized("16MiB", ""))
        .unwrap_or_else(|err| panic!("{err}"));
    let refused = |args: &[&str], needle: &str| {
        let out = rig.agent.cli(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {}",
            text(&out)
        );
    };
    refused(
        &["volume", "snapshot", "create", "vol", "s1"],
        "lacks CREATE_DELETE_SNAPSHOT",
    );
    refused(
        &["volume", "snapshot", "list", "-plugin", PLUGIN],
        "lacks LIST_SNAPSHOTS",
    );
    let external = volume(&rig.agent, "vol").external_id;
    let clone = format!("{}clone_id = {external:?}\n", spec("copy", &[MNMW], None));
    let err = connect(&rig.agent)
        .volume_create("copy.hcl", &clone)
        .unwrap_err();
    assert!(err.to_string().contains("(no CLONE_VOLUME)"), "{err}");
    let restore = format!("{}snapshot_id = \"s1\"\n", spec("copy", &[MNMW], None));
    let err = connect(&rig.agent)
        .volume_create("copy.hcl", &restore)
        .unwrap_err();
    assert!(
        err.to_string().contains("(no CREATE_DELETE_SNAPSHOT)"),
        "{err}"
    );
    // Offline expansion only: refused while claimed, naming the claim;
    // done once released.
    claimed(&rig.agent, &claim_req("vol", "a1"));
    let err = connect(&rig.agent)
        .volume_create("vol.hcl", &sized("32MiB", ""))
        .unwrap_err();
    assert!(
        err.to_string().contains("claimed by alloc a1") && err.to_string().contains("no ONLINE"),
        "{err}"
    );
    released(&rig.agent, "vol", "a1");
    let resp = connect(&rig.agent)
        .volume_create("vol.hcl", &sized("32MiB", ""))
        .unwrap_or_else(|err| panic!("offline expansion: {err}"));
    assert_eq!(resp.volumes[0].capacity_bytes, 32 << 20);
    rig.assert_nothing_left();
}
