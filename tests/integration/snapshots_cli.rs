//! Snapshots, restores, clones and expansion through the agent and its CLI,
//! against a real strict hostpath plugin, each effect checked on disk: the
//! data a claim wrote is in the snapshot, a volume restored from it or
//! cloned from the source holds that data, and an expanded block volume's
//! device grows.

use std::fs;
use std::path::Path;

use crate::harness::text;
use crate::util::require_root;
use crate::volume_util::*;

const MNMW: &str = "multi-node-multi-writer";

fn spec_with(id: &str, extra: &str) -> String {
    format!("{}{extra}", spec(id, &[MNMW], None))
}

/// Writes `text` to `file` in volume `id` through a claim's publish path.
fn write_through_claim(rig: &Rig, id: &str, file: &str, text: &str) {
    let resp = claimed(&rig.agent, &claim_req(id, "writer"));
    fs::write(Path::new(&resp.publish_path).join(file), text).unwrap();
    released(&rig.agent, id, "writer");
}

/// Reads `file` of volume `id` through a claim's publish path.
fn read_through_claim(rig: &Rig, id: &str, file: &str) -> Option<String> {
    let resp = claimed(&rig.agent, &claim_req(id, "reader"));
    let text = fs::read_to_string(Path::new(&resp.publish_path).join(file)).ok();
    released(&rig.agent, id, "reader");
    text
}

#[test]
fn a_snapshot_keeps_the_data_of_its_moment_and_restores_it_into_a_new_volume() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("src", MNMW);
    write_through_claim(&rig, "src", "data.txt", "before\n");

    let out = rig
        .agent
        .cli(&["volume", "snapshot", "create", "src", "snap-a"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = rig
        .agent
        .cli(&["volume", "snapshot", "create", "-json", "src", "snap-a"]);
    assert!(out.status.success(), "the same name again: {}", text(&out));
    let listed = connect(&rig.agent)
        .snapshot_list(&csi_agent::proto::agent::SnapshotListRequest {
            plugin_id: PLUGIN.into(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(listed.snapshots.len(), 1, "idempotent by name: {listed:?}");
    let snapshot = listed.snapshots[0].clone();
    assert_eq!(snapshot.volume_id, "src");
    assert!(snapshot.ready);
    let out = rig
        .agent
        .cli(&["volume", "snapshot", "list", "-plugin", PLUGIN]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.starts_with("Snapshot ID") && table.contains(&snapshot.id),
        "{table}"
    );

    // The source changes after the snapshot; the restore does not.
    write_through_claim(&rig, "src", "data.txt", "after\n");
    let restored = spec_with("restored", &format!("snapshot_id = {:?}\n", snapshot.id));
    connect(&rig.agent)
        .volume_create("restored.hcl", &restored)
        .unwrap_or_else(|err| panic!("create from a snapshot: {err}"));
    assert_eq!(
        read_through_claim(&rig, "restored", "data.txt").as_deref(),
        Some("before\n")
    );
    assert_eq!(
        read_through_claim(&rig, "src", "data.txt").as_deref(),
        Some("after\n")
    );

    // A clone copies the source as it is now.
    let source = volume(&rig.agent, "src").external_id;
    let clone = spec_with("copy", &format!("clone_id = {source:?}\n"));
    connect(&rig.agent)
        .volume_create("copy.hcl", &clone)
        .unwrap_or_else(|err| panic!("clone: {err}"));
    assert_eq!(
        read_through_claim(&rig, "copy", "data.txt").as_deref(),
        Some("after\n")
    );

    let out = rig
        .agent
        .cli(&["volume", "snapshot", "delete", PLUGIN, &snapshot.id]);
    assert!(out.status.success(), "{}", text(&out));
    let out = rig
        .agent
        .cli(&["volume", "snapshot", "list", "-plugin", PLUGIN]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "No snapshots\n");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_larger_capacity_min_expands_the_volume_and_a_smaller_one_is_refused() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let sized = |min: &str| spec_with("vol", &format!("capacity_min = {min:?}\n"));
    connect(&rig.agent)
        .volume_create("vol.hcl", &sized("16MiB"))
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(volume(&rig.agent, "vol").capacity_bytes, 16 << 20);
    // In use: the plugin expands online, so the claim stays.
    claimed(&rig.agent, &claim_req("vol", "a1"));
    let resp = connect(&rig.agent)
        .volume_create("vol.hcl", &sized("32MiB"))
        .unwrap_or_else(|err| panic!("expand: {err}"));
    assert_eq!(resp.volumes[0].capacity_bytes, 32 << 20);
    assert_eq!(volume(&rig.agent, "vol").capacity_bytes, 32 << 20);
    assert!(count(&rig.plugin, "ControllerExpandVolume") >= 1);
    let err = connect(&rig.agent)
        .volume_create("vol.hcl", &sized("8MiB"))
        .unwrap_err();
    assert!(err.to_string().contains("would shrink it"), "{err}");
    // The same size again is a duplicate, as before.
    let err = connect(&rig.agent)
        .volume_create("vol.hcl", &sized("32MiB"))
        .unwrap_err();
    assert!(err.to_string().contains("already registered"), "{err}");
    released(&rig.agent, "vol", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

/// The size in bytes of the block device `path` shows, from sysfs.
fn device_size(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let rdev = fs::metadata(path).unwrap().rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sectors: u64 = fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/size"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    sectors * 512
}

#[test]
fn an_expanded_block_volume_in_use_grows_its_device_on_the_node() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let block = |min: &str| {
        format!(
            "id = \"blk\"\nname = \"blk\"\ntype = \"csi\"\nplugin_id = {PLUGIN:?}\ncapacity_min = {min:?}\n\
             capability {{\n  access_mode     = \"single-node-writer\"\n  attachment_mode = \"block-device\"\n}}\n"
        )
    };
    connect(&rig.agent)
        .volume_create("blk.hcl", &block("16MiB"))
        .unwrap_or_else(|err| panic!("{err}"));
    let target = rig.agent.dir.join("dev/blk");
    claimed(&rig.agent, &claim_at("blk", "a1", &target));
    assert_eq!(device_size(&target), 16 << 20);
    connect(&rig.agent)
        .volume_create("blk.hcl", &block("32MiB"))
        .unwrap_or_else(|err| panic!("expand: {err}"));
    assert_eq!(
        device_size(&target),
        32 << 20,
        "the node step grew the device"
    );
    assert!(count(&rig.plugin, "NodeExpandVolume") >= 1);
    released(&rig.agent, "blk", "a1");
    rig.assert_spec_order();
    rig.assert_nothing_left();
}
