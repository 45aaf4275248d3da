//! The agent touches only the mounts it made: claim targets that would
//! cover the root, the data dir or a system tree are refused, a host mount
//! point is never "adopted", a release leaves a mount that is not the
//! agent's bind alone (and says so, once, without retrying forever), and a
//! plugin that answers NodeUnpublish with success but leaves its mount is
//! contained. One staging path per volume, whoever claims it; with a
//! `csi_dir`, every staging and publish lies under it, and no target may.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use crate::harness::healthy;
use crate::util::{mount_state, require_root};
use crate::volume_util::*;

const SNW: &str = "single-node-writer";
const MNMW: &str = "multi-node-multi-writer";

/// Mounts a tmpfs at `path` (made if missing) holding `file`, as the
/// host's own file system that the agent must not touch.
fn mount_host_tmpfs(path: &Path, file: &str) {
    fs::create_dir_all(path).unwrap();
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "host-tmpfs"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount tmpfs: {out:?}");
    fs::write(path.join(file), "the host's data\n").unwrap();
}

/// The claim error's message; panics if the claim succeeded.
#[track_caller]
fn refusal(rig: &Rig, volume: &str, alloc: &str, target: &Path) -> String {
    match claim(&rig.agent, &claim_at(volume, alloc, target)) {
        Ok(resp) => panic!("a claim at {} succeeded: {resp:?}", target.display()),
        Err(err) => err.to_string(),
    }
}

#[test]
fn targets_that_would_cover_the_root_the_data_dir_or_a_system_tree_are_refused() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    let data_dir = fs::canonicalize(&rig.agent.data_dir).unwrap();
    let link = rig.agent.dir.join("link");
    symlink(rig.agent.dir.join("elsewhere"), &link).unwrap();
    let cases = [
        (Path::new("/").to_path_buf(), "is the root file system"),
        (data_dir.clone(), "is the agent's data dir"),
        (data_dir.join("csi/x"), "is inside the agent's data dir"),
        (
            data_dir.parent().unwrap().to_path_buf(),
            "contains the agent's data dir",
        ),
        (
            Path::new("/proc/csi-agent-test").to_path_buf(),
            "is inside /proc",
        ),
        (
            Path::new("/sys/csi-agent-test").to_path_buf(),
            "is inside /sys",
        ),
        (
            Path::new("/dev/csi-agent-test").to_path_buf(),
            "is inside /dev",
        ),
        (link.clone(), "is a symlink"),
    ];
    for (target, reason) in cases {
        let message = refusal(&rig, "vol", "a1", &target);
        assert!(
            message.contains(&format!("the target {} {reason}", target.display())),
            "{target:?}: {message}"
        );
        let v = volume(&rig.agent, "vol");
        assert!(unclaimed(&v), "a refused claim left state: {v:#?}");
    }
    assert!(!rig.agent.dir.join("elsewhere").exists());
    assert!(rig.plugin.calls().iter().all(|c| !c.contains("Publish")));
    rig.assert_nothing_left();
}

#[test]
fn a_host_mount_point_is_refused_as_a_target_and_left_as_it_was() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    let host = rig.agent.dir.join("host-mnt");
    mount_host_tmpfs(&host, "keep.txt");
    let message = refusal(&rig, "vol", "a1", &host);
    assert!(
        message.contains("is already a mount point of host-tmpfs (tmpfs"),
        "{message}"
    );
    assert_eq!(mount_state(&host), Some(false), "the host's tmpfs stays");
    assert_eq!(
        fs::read_to_string(host.join("keep.txt")).unwrap(),
        "the host's data\n"
    );
    assert!(unclaimed(&volume(&rig.agent, "vol")));
    // A claim's target, once bound, is a mount point like any other; a
    // path inside it is another claim's target no more than it is.
    let target = rig.agent.dir.join("mnt/vol");
    rig.create("other", MNMW);
    claimed(&rig.agent, &claim_at("vol", "a1", &target));
    let message = refusal(&rig, "other", "a2", &target);
    assert!(
        message.contains("is already a mount point of "),
        "{message}"
    );
    let message = refusal(&rig, "other", "a2", &target.join("sub"));
    assert!(
        message.contains(&format!(
            "overlaps the target {} of alloc a1's claim of volume \"vol\"",
            target.display()
        )),
        "{message}"
    );
    released(&rig.agent, "vol", "a1");
    assert!(!target.exists(), "the target the agent made is removed");
    rig.assert_spec_order();
}

#[test]
fn a_release_leaves_a_mount_that_is_not_its_bind_alone_and_fails_once_with_the_reason() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    let target = rig.agent.dir.join("mnt/vol");
    claimed(&rig.agent, &claim_at("vol", "a1", &target));
    // Someone mounts their own file system over the agent's bind.
    mount_host_tmpfs(&target, "theirs.txt");
    let (done, message) = release(&rig.agent, "vol", "a1");
    assert!(!done, "{message}");
    assert!(
        message.contains("is not the bind csi-agent made; it is left alone"),
        "{message}"
    );
    let v = volume(&rig.agent, "vol");
    let past = &v.past_claims[0];
    assert_eq!(past.state, "failed", "{v:#?}");
    assert!(past.failure.contains("host-tmpfs (tmpfs"), "{v:#?}");
    assert_eq!(
        fs::read_to_string(target.join("theirs.txt")).unwrap(),
        "the host's data\n",
        "the host's mount is untouched"
    );
    // Not retried: nothing is unpublished while the failure stands.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(!rig
        .plugin
        .calls()
        .iter()
        .any(|c| c.starts_with("NodeUnpublishVolume")));
    // Mended by the user, released again: the release goes on.
    let out = Command::new("umount").arg(&target).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    released(&rig.agent, "vol", "a1");
    assert_eq!(mount_state(&target), None);
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn a_plugin_that_says_it_unpublished_but_left_the_mount_is_contained() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", SNW);
    claimed(&rig.agent, &claim_req("vol", "a1"));
    let publish = rig.publish_path("vol", "a1", &rw_usage(SNW));
    assert_eq!(mount_state(&publish), Some(false));
    // Like csi-driver-host-path after a restart: OK, nothing to do.
    rig.plugin.set_faults("NodeUnpublishVolume skip\n");
    let (done, message) = release(&rig.agent, "vol", "a1");
    assert!(!done, "{message}");
    assert!(message.contains("is still a mount point"), "{message}");
    wait_volume(&rig.agent, "vol", "the claim freed", unclaimed, LONG);
    assert_eq!(mount_state(&publish), None, "the agent unmounted it");
    let unpublishes = rig
        .plugin
        .calls()
        .iter()
        .filter(|c| c.starts_with("NodeUnpublishVolume"))
        .count();
    assert!(
        unpublishes >= 4,
        "asked again before containing: {unpublishes}"
    );
    let plugin = rig.agent.plugin(PLUGIN);
    assert!(healthy(&plugin));
    let note = format!(
        "left a mount at {} after NodeUnpublishVolume; unmounted by the agent",
        publish.display()
    );
    assert!(
        plugin.events.iter().any(|e| e.reason == note),
        "{:#?}",
        plugin.events
    );
    rig.plugin.set_faults("");
    rig.assert_nothing_left();
}

#[test]
fn a_writer_and_a_reader_are_published_through_the_volume_s_one_staging() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    rig.create("vol", MNMW);
    claimed(&rig.agent, &claim_req("vol", "w1"));
    let mut reader = claim_req("vol", "r1");
    reader.read_only = true;
    claimed(&rig.agent, &reader);
    let staging = rig
        .agent
        .data_dir
        .join("csi")
        .join(PLUGIN)
        .join("staging/vol");
    assert_eq!(
        mount_state(&staging),
        Some(false),
        "staged at csi/<plugin>/staging/<volume>"
    );
    let stages: Vec<String> = rig
        .plugin
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("NodeStageVolume"))
        .collect();
    assert_eq!(stages.len(), 1, "{stages:#?}");
    let v = volume(&rig.agent, "vol");
    assert_eq!(v.stagings.len(), 1, "{v:#?}");
    assert_eq!(v.stagings[0].path, staging.display().to_string());
    assert_eq!(v.stagings[0].state, "staged");
    assert_eq!(v.stagings[0].capability, format!("{MNMW}/file-system"));
    assert_eq!(
        mount_state(&rig.publish_path("vol", "r1", &ro_usage(MNMW))),
        Some(true),
        "the reader's publish is read-only"
    );
    assert_eq!(
        mount_state(&rig.publish_path("vol", "w1", &rw_usage(MNMW))),
        Some(false)
    );
    released(&rig.agent, "vol", "w1");
    assert_eq!(
        mount_state(&staging),
        Some(false),
        "the reader still uses it"
    );
    released(&rig.agent, "vol", "r1");
    assert_eq!(mount_state(&staging), None);
    rig.assert_spec_order();
    rig.assert_nothing_left();
}

#[test]
fn with_a_csi_dir_every_staging_and_publish_lies_under_it_and_targets_there_are_refused() {
    if !require_root() {
        return;
    }
    let plugin = crate::util::Plugin::start();
    let elsewhere = crate::util::TestDir::new();
    let csi_dir = elsewhere.join("mounts");
    let agent = crate::harness::Agent::start_with_config(&format!(
        "csi_dir = {:?}\n\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = \"monolith\"\n}}\n",
        csi_dir.display().to_string(),
        plugin.socket().display().to_string(),
    ));
    agent.wait_for(PLUGIN, healthy, crate::harness::WAIT);
    let rig = Rig { agent, plugin };
    rig.create("vol", SNW);

    let answer = claimed(&rig.agent, &claim_req("vol", "a1"));
    let publish = Path::new(&answer.publish_path);
    let csi_dir = fs::canonicalize(&csi_dir).unwrap();
    assert!(publish.starts_with(&csi_dir), "{}", publish.display());
    let under = crate::util::mounts_under(&csi_dir);
    assert!(under.iter().any(|m| m == publish), "{under:?}");
    assert!(
        under.iter().any(|m| m.ends_with("staging/vol")),
        "the staging is there too: {under:?}"
    );
    // Nothing of the volume's is mounted under the data dir any more.
    assert_eq!(
        crate::util::mounts_under(&rig.agent.data_dir),
        Vec::<std::path::PathBuf>::new()
    );

    // A target in it, or above it, would cover the agent's own mounts.
    for target in [csi_dir.join("x"), elsewhere.path.clone()] {
        let message = refusal(&rig, "vol", "a2", &target);
        assert!(
            message.contains(&format!(
                "the target {} is the agent's csi_dir {}, inside it or above it",
                target.display(),
                csi_dir.display()
            )),
            "{target:?}: {message}"
        );
    }

    released(&rig.agent, "vol", "a1");
    assert_eq!(
        crate::util::mounts_under(&csi_dir),
        Vec::<std::path::PathBuf>::new()
    );
}
