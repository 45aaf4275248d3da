//! The agent SIGKILLed while a Mount's NodePublishVolume is in flight,
//! and while an Unmount's NodeUnpublishVolume is: after a restart,
//! dockerd's retry of the same call succeeds, with one claim at most and,
//! once unmounted, no claim and no mount left (mountinfo).

use std::fs;

use super::Host;
use crate::util::{mount_state, mounts_under, require_root};
use crate::volume_util::{
    assert_nothing_mounted, count, spawn_call, volume, wait_for_calls, wait_volume, LONG,
};

const MOUNT_ID: &str = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9";

#[test]
fn an_agent_killed_during_mount_keeps_one_claim_and_the_retry_mounts() {
    if !require_root() {
        return;
    }
    let mut host = Host::start();
    host.docker().create("vol", &[]).ok();
    host.plugin.set_faults("NodePublishVolume hang count=1\n");
    let docker = host.docker();
    let answer = spawn_call(move || docker.try_call_mount("vol", MOUNT_ID));
    wait_for_calls(&host.plugin, "NodePublishVolume", 1);
    host.agent.sigkill();
    host.plugin.set_faults("");
    let lost = answer
        .recv_timeout(LONG)
        .expect("the Mount ends with the agent");
    assert!(lost.is_err(), "{lost:?}");

    host.agent.restart();
    // dockerd retries the Mount with the same ID.
    let mountpoint = host.docker().mount("vol", MOUNT_ID);
    let v = volume(&host.agent, "vol");
    let allocs: Vec<&str> = v.claims.iter().map(|c| c.alloc_id.as_str()).collect();
    assert_eq!(allocs, [format!("docker-{MOUNT_ID}")], "{v:#?}");
    assert!(v.past_claims.is_empty(), "{v:#?}");
    assert_eq!(mount_state(&mountpoint), Some(false));
    fs::write(mountpoint.join("after"), "crash").unwrap();
    assert_eq!(count(&host.plugin, "NodePublishVolume"), 2);

    host.docker().unmount("vol", MOUNT_ID);
    let v = volume(&host.agent, "vol");
    assert!(v.claims.is_empty() && v.past_claims.is_empty(), "{v:#?}");
    assert_nothing_mounted(&host.agent.dir.path);
    assert_nothing_mounted(&host.plugin.dir.path);
}

#[test]
fn an_agent_killed_during_unmount_leaves_nothing_once_it_is_sent_again() {
    if !require_root() {
        return;
    }
    let mut host = Host::start();
    host.docker().create("vol", &[]).ok();
    let mountpoint = host.docker().mount("vol", MOUNT_ID);
    assert_eq!(mount_state(&mountpoint), Some(false));
    host.plugin.set_faults("NodeUnpublishVolume hang count=1\n");
    let docker = host.docker();
    let answer = spawn_call(move || docker.try_call_unmount("vol", MOUNT_ID));
    wait_for_calls(&host.plugin, "NodeUnpublishVolume", 1);
    host.agent.sigkill();
    host.plugin.set_faults("");
    let lost = answer
        .recv_timeout(LONG)
        .expect("the Unmount ends with the agent");
    assert!(lost.is_err(), "{lost:?}");

    host.agent.restart();
    // dockerd sends the Unmount again.
    host.docker().unmount("vol", MOUNT_ID);
    let v = wait_volume(
        &host.agent,
        "vol",
        "no claim",
        |v| v.claims.is_empty() && v.past_claims.is_empty(),
        LONG,
    );
    assert!(v.stagings.is_empty(), "{v:#?}");
    assert_eq!(
        mounts_under(&host.agent.data_dir),
        Vec::<std::path::PathBuf>::new()
    );
    assert_nothing_mounted(&host.plugin.dir.path);
    // And a later Mount with the same ID is a new claim that works.
    let again = host.docker().mount("vol", MOUNT_ID);
    assert_eq!(mount_state(&again), Some(false));
    host.docker().unmount("vol", MOUNT_ID);
}

#[test]
fn a_mount_waiting_when_the_agent_stops_hears_so_and_holds_up_nothing() {
    if !require_root() {
        return;
    }
    let mut host = Host::start();
    host.docker().create("vol", &[]).ok();
    host.plugin.set_faults("NodePublishVolume hang count=1\n");
    let docker = host.docker();
    let answer = spawn_call(move || docker.try_call_mount("vol", MOUNT_ID));
    wait_for_calls(&host.plugin, "NodePublishVolume", 1);
    let start = std::time::Instant::now();
    assert_eq!(host.agent.sigterm(), 0);
    let answer = answer
        .recv_timeout(LONG)
        .expect("the Mount is answered")
        .expect("an answer, not a broken connection");
    assert_eq!(
        answer.failed(),
        "the mount of volume \"vol\": the agent is shutting down"
    );
    // Not held until mount_timeout (25 s) past the agent's own shutdown.
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert!(fs::symlink_metadata(&host.socket).is_err());
}
