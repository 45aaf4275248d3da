//! Mount and Unmount: a claim per mount ID, files written through the
//! mount point, repeats, Podman's fixed ID, the access-mode rule, and a
//! Mount past `mount_timeout`.

use std::fs;
use std::path::Path;

use super::{Docker, Host};
use crate::util::{mount_state, require_root};
use crate::volume_util::{assert_nothing_mounted, try_volume, volume, wait_volume, LONG};

/// The alloc IDs of the volume's claims.
fn claims(host: &Host, name: &str) -> Vec<String> {
    volume(&host.agent, name)
        .claims
        .iter()
        .map(|c| c.alloc_id.clone())
        .collect()
}

#[test]
fn a_mount_is_a_claim_whose_files_outlive_it_and_unmount_releases_it() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let docker = host.docker();
    docker.create("data", &[("size", "16MiB")]).ok();
    let id = "4f0c3a5e9b7d2c1a0f9e8d7c6b5a49382716051f4e3d2c1b0a9f8e7d6c5b4a39";
    let mountpoint = docker.mount("data", id);
    assert!(
        mountpoint.starts_with(&host.agent.data_dir),
        "{mountpoint:?}"
    );
    assert_eq!(mount_state(&mountpoint), Some(false), "not mounted rw");
    fs::write(mountpoint.join("note"), "written through docker").unwrap();
    assert_eq!(claims(&host, "data"), [format!("docker-{id}")]);
    // Path and Get show where it is mounted.
    assert_eq!(
        Path::new(docker.named("Path", "data").ok().field("Mountpoint")),
        mountpoint
    );
    // The same Mount again (docker cp on a running container sends the
    // container's own ID) is the same claim, held until its Unmount too.
    assert_eq!(docker.mount("data", id), mountpoint);
    assert_eq!(claims(&host, "data"), [format!("docker-{id}")]);
    docker.unmount("data", id);
    assert_eq!(claims(&host, "data"), [format!("docker-{id}")]);
    assert_eq!(mount_state(&mountpoint), Some(false), "unmounted too soon");

    docker.unmount("data", id);
    assert!(claims(&host, "data").is_empty());
    assert_eq!(mount_state(&mountpoint), None);
    // dockerd may send it again: still a success.
    docker.unmount("data", id);
    docker.unmount("nowhere", id);

    // The next container finds the file.
    let again = docker.mount("data", "second");
    assert_eq!(
        fs::read_to_string(again.join("note")).unwrap(),
        "written through docker"
    );
    docker.unmount("data", "second");
    docker.named("Remove", "data").ok();
    assert_nothing_mounted(&host.agent.dir.path);
    assert_nothing_mounted(&host.plugin.dir.path);
}

#[test]
fn podman_s_fixed_mount_id_is_one_claim_named_for_podman() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    host.docker().create("pod", &[]).ok();
    let podman = host.podman();
    // Podman sends the same placeholder ID for every mount.
    // Podman counts its users itself: Mount on the first, Unmount after
    // the last. Mounts of the one ID are one claim, which the Unmount
    // matching the last of them releases.
    let first = podman.mount("pod", "placeholder");
    let second = podman.mount("pod", "placeholder");
    assert_eq!(first, second);
    assert_eq!(claims(&host, "pod"), ["podman-placeholder"]);
    podman.unmount("pod", "placeholder");
    assert_eq!(claims(&host, "pod"), ["podman-placeholder"]);
    podman.unmount("pod", "placeholder");
    assert!(claims(&host, "pod").is_empty());
}

#[test]
fn podman_s_fixed_mount_id_on_two_volumes_is_released_per_volume() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    host.docker().create("a", &[]).ok();
    host.docker().create("b", &[]).ok();
    let podman = host.podman();
    podman.mount("a", "placeholder");
    podman.mount("b", "placeholder");
    // The Unmount of one volume is not a Mount of the other's.
    podman.unmount("a", "placeholder");
    assert!(claims(&host, "a").is_empty(), "{}", host.agent.log());
    assert_eq!(claims(&host, "b"), ["podman-placeholder"]);
    podman.unmount("b", "placeholder");
    assert!(claims(&host, "b").is_empty());
}

#[test]
fn a_single_writer_volume_serves_one_container_and_multi_writer_shares() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let docker = host.docker();
    docker.create("solo", &[]).ok();
    docker.mount("solo", "first");
    let message = docker.with_id("Mount", "solo", "second").failed();
    assert!(
        message.contains("already has a writer: alloc docker-first"),
        "{message}"
    );
    assert!(message.contains("\"solo\""), "{message}");
    docker.unmount("solo", "first");
    docker.mount("solo", "second");
    docker.unmount("solo", "second");

    docker
        .create("shared", &[("access_mode", "single-node-multi-writer")])
        .ok();
    let a = docker.mount("shared", "a");
    let b = docker.mount("shared", "b");
    fs::write(a.join("from-a"), "a").unwrap();
    assert_eq!(fs::read_to_string(b.join("from-a")).unwrap(), "a");
    let mut held = claims(&host, "shared");
    held.sort();
    assert_eq!(held, ["docker-a", "docker-b"]);
    docker.unmount("shared", "a");
    docker.unmount("shared", "b");
}

#[test]
fn remove_refuses_a_volume_with_claims_naming_them() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let docker = host.docker();
    docker.create("busy", &[]).ok();
    docker.mount("busy", "c1");
    let message = docker.named("Remove", "busy").failed();
    assert_eq!(message, "volume \"busy\" is in use: claims of docker-c1");
    docker.unmount("busy", "c1");
    docker.named("Remove", "busy").ok();
}

#[test]
fn a_mount_past_mount_timeout_fails_and_leaves_no_claim() {
    if !require_root() {
        return;
    }
    let host = Host::start_with("  mount_timeout = \"1s\"\n");
    let docker = host.docker();
    docker.create("slow", &[]).ok();
    host.plugin
        .set_faults("NodePublishVolume sleep=3s count=1\n");
    let message = docker.with_id("Mount", "slow", "late").failed();
    assert_eq!(
        message,
        "the mount of volume \"slow\" (claim of alloc docker-late) was not done within 1s (volume_plugin's mount_timeout): its claim is released"
    );
    // The publish finishes, then the release undoes it.
    wait_volume(
        &host.agent,
        "slow",
        "no claim",
        |v| v.claims.is_empty() && v.past_claims.is_empty(),
        LONG,
    );
    assert_nothing_mounted(&host.agent.dir.path);
    // dockerd's next start of the container mounts it.
    let again = Docker::dockerd(&host.socket).mount("slow", "late");
    assert!(again.is_dir());
    host.docker().unmount("slow", "late");
    assert!(try_volume(&host.agent, "slow").unwrap().is_some());
}

#[test]
fn a_block_only_volume_is_refused_at_mount() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let spec = "id = \"raw\"\nname = \"raw\"\ntype = \"csi\"\nplugin_id = \"hp\"\ncapacity_min = \"1MiB\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"block-device\"\n}\n";
    crate::volume_util::connect(&host.agent)
        .volume_create("raw.hcl", spec)
        .unwrap();
    let message = host.docker().with_id("Mount", "raw", "x").failed();
    assert_eq!(
        message,
        "volume \"raw\" has no file-system capability (single-node-writer/block-device): a docker volume is a directory"
    );
    assert!(volume(&host.agent, "raw").claims.is_empty());
}
