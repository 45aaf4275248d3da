//! Snapshots of the hostpath plugin over real gRPC, against a strict
//! plugin: what a snapshot holds (on disk, and in a volume made from it,
//! read through real mounts and loop devices), and the spec's idempotency
//! and error codes of CreateSnapshot, DeleteSnapshot and ListSnapshots,
//! one rule a test. Volumes made from a source are `volume_sources.rs`'s.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use csi_agent::csi::types::*;
use csi_agent::csi::{Client, Code, Secrets};

use crate::block::{backing_file, read_direct, write_direct, BLOCK};
use crate::requests::{block_cap, create_from, create_req, mount_cap, snapshot_req, use_volume};
use crate::util::{require_root, Plugin};

pub(crate) const MIB: i64 = 1 << 20;

pub(crate) fn snapshot(client: &Client, name: &str, source: &str) -> Snapshot {
    client.create_snapshot(&snapshot_req(name, source)).unwrap()
}

/// The IDs ListSnapshots answers with these filters, over every page.
fn listed(client: &Client, snapshot_id: &str, source_volume_id: &str) -> Vec<String> {
    let page = client
        .list_snapshots(&ListSnapshots {
            snapshot_id: snapshot_id.into(),
            source_volume_id: source_volume_id.into(),
            ..ListSnapshots::default()
        })
        .unwrap();
    assert_eq!(page.next_token, "", "one page without max_entries");
    page.entries.into_iter().map(|s| s.snapshot_id).collect()
}

/// Whether every byte of `block` is `byte` (an assertion on it prints
/// little when it fails).
pub(crate) fn filled(block: &[u8], byte: u8) -> bool {
    block.iter().all(|b| *b == byte)
}

pub(crate) fn snapshot_source(id: &str) -> ContentSource {
    ContentSource::Snapshot(id.into())
}

pub(crate) fn volume_source(id: &str) -> ContentSource {
    ContentSource::Volume(id.into())
}

#[test]
fn a_snapshot_holds_the_volume_as_it_was_when_taken() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("src", &mount_cap(), MIB))
        .unwrap();
    let target = use_volume(&client, &plugin.dir, "src", &mount_cap()).target;
    fs::write(target.join("a.txt"), "before").unwrap();
    fs::create_dir(target.join("dir")).unwrap();
    fs::write(target.join("dir/b.txt"), "nested").unwrap();

    let before = SystemTime::now();
    let snap = snapshot(&client, "snap", "src");
    let after = SystemTime::now();
    assert_eq!(snap.snapshot_id, "snap");
    assert_eq!(snap.source_volume_id, "src");
    assert!(snap.ready_to_use);
    assert_eq!(snap.size_bytes, MIB, "the source's capacity");
    let taken = snap.creation_time.unwrap();
    assert!(before <= taken && taken <= after, "{taken:?}");

    fs::write(target.join("a.txt"), "after").unwrap();
    fs::write(target.join("new.txt"), "new").unwrap();
    let files = plugin.dir.join("base/snapshots/snap/files");
    assert_eq!(fs::read_to_string(files.join("a.txt")).unwrap(), "before");
    assert_eq!(
        fs::read_to_string(files.join("dir/b.txt")).unwrap(),
        "nested"
    );
    assert!(!files.join("new.txt").exists());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_snapshot_leaves_out_what_is_mounted_inside_the_volume() {
    if !require_root() {
        return;
    }
    use csi_agent::mount::{Mounter, SysMounter};
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    let volume = plugin.dir.join("base/volumes/v");
    fs::write(volume.join("own"), "mine").unwrap();
    let foreign = plugin.dir.mkdir("foreign");
    fs::write(foreign.join("theirs"), "not the volume's").unwrap();
    fs::create_dir(volume.join("mnt")).unwrap();
    // The same file system, bound: only the mount table tells.
    SysMounter
        .bind(&foreign, &volume.join("mnt"), false)
        .unwrap();

    snapshot(&client, "s", "v");
    let files = plugin.dir.join("base/snapshots/s/files");
    assert_eq!(fs::read_to_string(files.join("own")).unwrap(), "mine");
    assert!(files.join("mnt").is_dir(), "the mount point stays");
    assert_eq!(fs::read_dir(files.join("mnt")).unwrap().count(), 0);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_block_snapshot_holds_what_was_written_through_the_device() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("b", &block_cap(), MIB))
        .unwrap();
    let device = use_volume(&client, &plugin.dir, "b", &block_cap()).target;
    write_direct(&device, 0, 0xa1).unwrap();
    // A buffered write, neither synced nor closed: it sits in the device's
    // page cache until the plugin flushes the device for the snapshot.
    let unsynced = OpenOptions::new().write(true).open(&device).unwrap();
    unsynced.write_all_at(&[0xb2; BLOCK], BLOCK as u64).unwrap();

    let snap = snapshot(&client, "bsnap", "b");
    assert_eq!(snap.size_bytes, MIB);
    drop(unsynced);
    write_direct(&device, 0, 0xff).unwrap();

    let image = plugin.dir.join("base/snapshots/bsnap/block.img");
    let meta = fs::metadata(&image).unwrap();
    assert_eq!(meta.len(), MIB as u64);
    assert!(meta.blocks() * 512 < MIB as u64, "the copy is sparse");
    let mut block = vec![0; BLOCK];
    let image = fs::File::open(&image).unwrap();
    image.read_exact_at(&mut block, 0).unwrap();
    assert!(filled(&block, 0xa1), "the write after is not in it");
    image.read_exact_at(&mut block, BLOCK as u64).unwrap();
    assert!(filled(&block, 0xb2), "the buffered write is in it");

    // A larger volume from it: the snapshot's data, then zeros.
    let restored = client
        .create_volume(&create_from(
            "rb",
            &block_cap(),
            2 * MIB,
            snapshot_source("bsnap"),
        ))
        .unwrap();
    assert_eq!(restored.capacity_bytes, 2 * MIB);
    let in_use = use_volume(&client, &plugin.dir, "rb", &block_cap());
    let device = in_use.target;
    assert!(filled(&read_direct(&device, 0), 0xa1));
    assert!(filled(&read_direct(&device, BLOCK as u64), 0xb2));
    assert!(filled(&read_direct(&device, MIB as u64), 0));
    assert_eq!(
        fs::metadata(backing_file(&plugin, "rb")).unwrap().len(),
        2 << 20
    );
    let stats = client
        .node_volume_stats("rb", &in_use.staging, None)
        .unwrap();
    assert_eq!(stats.usage[0].total, 2 * MIB);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn create_snapshot_with_the_same_name_and_source_answers_the_same_snapshot() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    let first = snapshot(&client, "s", "v");
    fs::write(plugin.dir.join("base/volumes/v/later"), "x").unwrap();
    assert_eq!(snapshot(&client, "s", "v"), first);
    assert!(
        !plugin.dir.join("base/snapshots/s/files/later").exists(),
        "a repeat takes no new copy"
    );
    assert_eq!(listed(&client, "", ""), vec!["s"]);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn create_snapshot_with_the_same_name_and_another_source_already_exists() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    for volume in ["v", "w"] {
        client
            .create_volume(&create_req(volume, &mount_cap(), MIB))
            .unwrap();
    }
    snapshot(&client, "s", "v");
    let err = client.create_snapshot(&snapshot_req("s", "w")).unwrap_err();
    assert_eq!(err.code, Code::AlreadyExists, "{err}");
    assert_eq!(listed(&client, "", "w"), Vec::<String>::new());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn create_snapshot_of_an_unknown_volume_is_not_found() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    let err = client
        .create_snapshot(&snapshot_req("s", "ghost"))
        .unwrap_err();
    assert_eq!(err.code, Code::NotFound, "{err}");
    assert_eq!(listed(&client, "", ""), Vec::<String>::new());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_snapshot_that_cannot_be_copied_leaves_nothing_behind() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    fs::remove_dir_all(plugin.dir.join("base/volumes/v")).unwrap();
    let err = client.create_snapshot(&snapshot_req("s", "v")).unwrap_err();
    assert_eq!(err.code, Code::Internal, "{err}");
    assert!(err.message.starts_with("cannot copy: "), "{err}");
    assert_eq!(listed(&client, "", ""), Vec::<String>::new());
    let base = plugin.dir.join("base");
    assert!(!base.join("snapshots/s").exists());
    assert_eq!(
        fs::read_dir(base.join("tmp")).unwrap().count(),
        0,
        "no scratch left"
    );
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn create_snapshot_without_a_name_or_source_is_invalid() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    for (name, source) in [("", "v"), ("s", "")] {
        let err = client
            .create_snapshot(&snapshot_req(name, source))
            .unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument, "{err}");
    }
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn snapshot_ids_are_safe_path_components_derived_from_names() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    let snapshots = plugin.dir.join("base/snapshots");
    for (name, id) in [
        ("../../escape me", "..[2f]..[2f]escape[20]me"),
        ("..", "[2e][2e]"),
        ("snapshot-6f1e2", "snapshot-6f1e2"),
    ] {
        let snap = snapshot(&client, name, "v");
        assert_eq!(snap.snapshot_id, id, "{name:?}");
        assert!(snapshots.join(id).join("files").is_dir(), "{id}");
        assert_eq!(snapshot(&client, name, "v").snapshot_id, id, "stable");
    }
    let long = "/".repeat(128);
    let hashed = snapshot(&client, &long, "v").snapshot_id;
    assert!(hashed.len() <= 128, "{hashed}");
    assert!(snapshots.join(&hashed).is_dir());
    let mut on_disk: Vec<String> = fs::read_dir(&snapshots)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    assert_eq!(
        on_disk,
        listed(&client, "", ""),
        "all of them, and only there"
    );
    assert!(!plugin.dir.join("escape me").exists());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn delete_snapshot_removes_its_copy_and_an_unknown_id_is_fine() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    snapshot(&client, "s", "v");
    let copy = plugin.dir.join("base/snapshots/s");
    assert!(copy.is_dir());
    for _ in 0..2 {
        client.delete_snapshot("s", &Secrets::new()).unwrap();
    }
    assert!(!copy.exists());
    assert_eq!(listed(&client, "", ""), Vec::<String>::new());
    for unknown in ["never-was", "../volumes", "."] {
        client.delete_snapshot(unknown, &Secrets::new()).unwrap();
    }
    assert!(plugin.dir.join("base/volumes/v").is_dir());
    let err = client.delete_snapshot("", &Secrets::new()).unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument);
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn list_snapshots_filters_by_snapshot_and_by_source_volume() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    for volume in ["a", "b"] {
        client
            .create_volume(&create_req(volume, &mount_cap(), MIB))
            .unwrap();
    }
    for (name, volume) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        snapshot(&client, name, volume);
    }
    assert_eq!(listed(&client, "", ""), vec!["a1", "a2", "b1"]);
    assert_eq!(listed(&client, "a2", ""), vec!["a2"]);
    assert_eq!(listed(&client, "", "a"), vec!["a1", "a2"]);
    assert_eq!(listed(&client, "b1", "b"), vec!["b1"]);
    // Unknown IDs, or filters that exclude each other, list nothing.
    assert_eq!(listed(&client, "nope", ""), Vec::<String>::new());
    assert_eq!(listed(&client, "", "nope"), Vec::<String>::new());
    assert_eq!(listed(&client, "b1", "a"), Vec::<String>::new());
    assert_eq!(listed(&client, "../x", ""), Vec::<String>::new());
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn list_snapshots_pages_in_a_stable_order() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    for name in ["s3", "s1", "s4", "s0", "s2"] {
        snapshot(&client, name, "v");
    }
    let mut seen = Vec::new();
    let mut tokens = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_snapshots(&ListSnapshots {
                max_entries: 2,
                starting_token: token.clone(),
                ..ListSnapshots::default()
            })
            .unwrap();
        assert!(page.entries.len() <= 2);
        seen.extend(page.entries.into_iter().map(|s| s.snapshot_id));
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
        tokens.push(token.clone());
    }
    assert_eq!(tokens.len(), 2, "three pages");
    assert_eq!(seen, vec!["s0", "s1", "s2", "s3", "s4"]);
    assert_eq!(seen, listed(&client, "", ""));
    // A filtered list pages over what matches.
    let page = client
        .list_snapshots(&ListSnapshots {
            max_entries: 4,
            source_volume_id: "v".into(),
            starting_token: "3".into(),
            ..ListSnapshots::default()
        })
        .unwrap();
    let ids: Vec<String> = page.entries.into_iter().map(|s| s.snapshot_id).collect();
    assert_eq!(
        (ids, page.next_token),
        (vec!["s3".into(), "s4".into()], String::new())
    );
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn list_snapshots_with_an_invalid_starting_token_is_aborted() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    snapshot(&client, "s", "v");
    for token in ["bogus", "-1", "2"] {
        let err = client
            .list_snapshots(&ListSnapshots {
                starting_token: token.into(),
                ..ListSnapshots::default()
            })
            .unwrap_err();
        assert_eq!(err.code, Code::Aborted, "{token}: {err}");
    }
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn snapshots_outlive_their_source_volume_and_a_plugin_restart() {
    let mut plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    fs::write(plugin.dir.join("base/volumes/v/data"), "kept").unwrap();
    let taken = snapshot(&client, "s", "v");
    client.delete_volume("v", &Secrets::new()).unwrap();
    // A copy a crash interrupted is swept when the plugin starts.
    let interrupted = plugin.dir.join("base/tmp/snapshot-x");
    fs::create_dir_all(&interrupted).unwrap();

    plugin.kill();
    plugin.restart();
    let client = plugin.client();
    assert!(!interrupted.exists());
    assert_eq!(
        snapshot(&client, "s", "v"),
        taken,
        "the same, after a restart"
    );
    let listed = client.list_snapshots(&ListSnapshots::default()).unwrap();
    assert_eq!(listed.entries, vec![taken]);
    client
        .create_volume(&create_from("r", &mount_cap(), 0, snapshot_source("s")))
        .unwrap();
    let data = plugin.dir.join("base/volumes/r/data");
    assert_eq!(fs::read_to_string(data).unwrap(), "kept");
    assert_eq!(plugin.violations(), Vec::<String>::new());
}

#[test]
fn a_snapshot_is_a_call_in_flight_on_its_source_volume() {
    let plugin = Plugin::start_strict();
    let client = plugin.client();
    client
        .create_volume(&create_req("v", &mount_cap(), MIB))
        .unwrap();
    plugin.set_faults("CreateSnapshot sleep=3s count=1\n");
    let slow = {
        let client = client.clone();
        thread::spawn(move || client.create_snapshot(&snapshot_req("s", "v")))
    };
    // Wait until the slow call has arrived (it is traced before it runs).
    let start = Instant::now();
    while !plugin
        .trace_methods()
        .contains(&"CreateSnapshot".to_string())
    {
        assert!(start.elapsed() < Duration::from_secs(5), "never arrived");
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(300));
    let err = client
        .controller_expand(&ControllerExpand {
            volume_id: "v".into(),
            capacity: CapacityRange {
                required_bytes: 2 * MIB,
                limit_bytes: 0,
            },
            secrets: Secrets::new(),
            capability: None,
        })
        .unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    assert!(err
        .message
        .starts_with("strict: at most one call in flight per volume: "));
    slow.join().unwrap().unwrap();
    assert_eq!(
        plugin.violations(),
        vec!["ControllerExpandVolume v: at most one call in flight per volume"]
    );
}
