//! Nothing acknowledged that is not durable: the agent's
//! data dir on a small tmpfs that the test fills up, with a real hostpath
//! plugin, real claims and mounts, and SIGKILL.
//!
//! A full data dir must not lose what was acknowledged: a change whose
//! record cannot be written is neither answered nor acted on (no plugin
//! call, no mount) until space returns; later changes are refused at once
//! with the data dir and the errno; reads keep answering; the agent
//! resumes by itself; and after a SIGKILL every acknowledged create and
//! claim is still there. A CreateVolume cut short by a crash is sent
//! again and its volume kept.
//!
//! Volume records here carry a parameter of a few KiB, so that every
//! journal record of them needs a fresh page of the tmpfs: a record small
//! enough to fit in the room left in the journal's last page would be
//! written, full file system or not, and durable, as it should be.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::mpsc::Receiver;

use csi_agent::api::client::{self, AgentClient};
use csi_agent::proto::agent::{VolumeClaimResponse, VolumeStatus};

use crate::harness::{healthy, one_line_failure, output_within, Agent, WAIT};
use crate::util::{mount_state, mounts_under, require_root, TestDir};
use crate::volume_util::*;

const SNW: &str = "single-node-writer";

/// The log line of the agent entering the cannot-persist state.
pub const CANNOT_PERSIST: &str = "Cannot persist the state in";

/// The (debug) log line of each retry that failed again.
const STILL_CANNOT: &str = "Still cannot persist the state";

/// Waits until the agent entered the cannot-persist state and `n` of its
/// retries failed too. Were anything of the held turns let out, it would
/// have been by then: each retry is a turn.
#[track_caller]
fn wait_for_failed_retries(agent: &Agent, n: usize) {
    agent.wait_for_log(CANNOT_PERSIST, WAIT);
    let start = std::time::Instant::now();
    while agent.log().matches(STILL_CANNOT).count() < n {
        assert!(
            start.elapsed() < WAIT,
            "the agent did not retry {n} times\n{}",
            agent.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A small tmpfs for the agent's data dir, made by the test; unmounted
/// (with whatever the agent mounted below it) and removed on drop, even
/// after a failed assertion.
pub struct SmallFs {
    dir: TestDir,
    /// The mount point: the agent's data dir.
    pub path: PathBuf,
}

impl SmallFs {
    pub fn mount() -> SmallFs {
        let dir = TestDir::new();
        let path = dir.mkdir("data");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tmpfs: {status}");
        SmallFs { dir, path }
    }

    /// Fills the file system with a file, until ENOSPC.
    pub fn fill(&self) -> Filler {
        let path = self.dir.join("data/filler");
        let mut file = fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 << 10];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) if err.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(err) => panic!("filling {}: {err}", path.display()),
            }
        }
        Filler { path }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // Lazily, so that the mounts the agent made below go too; the test
        // dir's own drop then removes the directory.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// The file that fills the data dir; removing it returns the space.
pub struct Filler {
    path: PathBuf,
}

impl Filler {
    pub fn remove(self) {
        fs::remove_file(&self.path).unwrap();
    }
}

/// A spec whose records are larger than a page (see the module docs).
pub fn big_spec(id: &str) -> String {
    format!(
        "{}\nparameters {{\n  pad = {:?}\n}}\n",
        spec(id, &[SNW], None),
        "x".repeat(6000)
    )
}

/// Writes `id`'s spec into the test dir (not the full data dir).
fn spec_file(agent: &Agent, id: &str) -> String {
    let path = agent.dir.join(&format!("{id}.hcl"));
    fs::write(&path, big_spec(id)).unwrap();
    path.display().to_string()
}

/// `volume create`, which must succeed.
#[track_caller]
fn created(agent: &Agent, id: &str) -> VolumeStatus {
    connect(agent)
        .volume_create(&format!("{id}.hcl"), &big_spec(id))
        .unwrap_or_else(|err| panic!("volume create {id}: {err}\n{}", agent.log()))
        .volumes
        .remove(0)
}

/// `volume create` on a thread of its own: its answer arrives later.
fn create_later(agent: &Agent, id: &str) -> Receiver<Result<VolumeStatus, client::Error>> {
    let socket = agent.socket.clone();
    let (file, hcl) = (format!("{id}.hcl"), big_spec(id));
    spawn_call(move || {
        AgentClient::connect(&socket)?
            .volume_create(&file, &hcl)
            .map(|mut r| r.volumes.remove(0))
    })
}

/// `volume claim` with a target on a thread of its own.
fn claim_later(
    agent: &Agent,
    volume: &str,
    alloc: &str,
    target: &Path,
) -> Receiver<Result<VolumeClaimResponse, client::Error>> {
    let socket = agent.socket.clone();
    let req = claim_at(volume, alloc, target);
    spawn_call(move || AgentClient::connect(&socket)?.volume_claim(&req))
}

/// Runs `csi-agent ARGS` against `agent`; a call that should be refused
/// at once must not hang the suite.
fn cli_within(agent: &Agent, args: &[&str]) -> Output {
    let mut cmd = Command::new(crate::util::bin());
    cmd.args(args)
        .env(
            client::ADDRESS_ENV,
            format!("unix://{}", agent.socket.display()),
        )
        .env_remove("RUST_LOG");
    output_within(&mut cmd, WAIT)
}

/// The refusal every change gets while the data dir is full.
fn refusal(data_dir: &Path) -> String {
    format!(
        "error: cannot persist the state in {}: No space left on device (os error 28); nothing was changed",
        data_dir.display()
    )
}

/// The CreateVolume calls the plugin received for `name`.
fn create_calls(plugin: &impl Hostpath, name: &str) -> usize {
    plugin
        .calls()
        .iter()
        .filter_map(|l| Call::parse(l))
        .filter(|c| {
            c.method == "CreateVolume" && c.fields.get("name").map(String::as_str) == Some(name)
        })
        .count()
}

/// The IDs of every volume, created and not being created any more.
fn created_ids(agent: &Agent) -> BTreeSet<String> {
    connect(agent)
        .volume_status("", false)
        .unwrap()
        .volumes
        .into_iter()
        .inspect(|v| assert!(v.created && !v.creating, "{v:#?}"))
        .map(|v| v.id)
        .collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// Every mount under the data dir is a publish path of a current claim or
/// lies under the staging dir of a claimed volume: nothing the restarted
/// agent cannot attribute.
#[track_caller]
fn assert_every_mount_is_owned(rig: &Rig) {
    let data_dir = &rig.agent.data_dir;
    let volumes = connect(&rig.agent)
        .volume_status("", false)
        .unwrap()
        .volumes;
    let publishes: BTreeSet<PathBuf> = volumes
        .iter()
        .flat_map(|v| &v.claims)
        .map(|c| PathBuf::from(&c.publish_path))
        .collect();
    let stagings: Vec<PathBuf> = volumes
        .iter()
        .filter(|v| !v.claims.is_empty())
        .map(|v| {
            data_dir
                .join("csi")
                .join(PLUGIN)
                .join("staging")
                .join(&v.id)
        })
        .collect();
    for mount in mounts_under(data_dir) {
        if mount == *data_dir {
            continue;
        }
        assert!(
            publishes.contains(&mount) || stagings.iter().any(|s| mount.starts_with(s)),
            "{} is mounted, and no claim owns it; claims: {volumes:#?}",
            mount.display()
        );
    }
}

/// Waits until the plugin has `n` volumes.
#[track_caller]
fn wait_for_plugin_volumes(plugin: &impl Hostpath, n: usize) {
    let start = std::time::Instant::now();
    loop {
        let listed = plugin.csi_client().list_volumes(0, "").unwrap();
        if listed.entries.len() == n {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "the plugin never had {n} volumes: {listed:#?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_full_data_dir_refuses_changes_keeps_reads_and_loses_nothing_acknowledged() {
    if !require_root() {
        return;
    }
    let small = SmallFs::mount();
    let mut rig = Rig::start_in(&small.path);
    let data_dir = rig.agent.data_dir.clone();
    let target = rig.agent.dir.join("mnt/a1");

    // Acknowledged while there is room.
    created(&rig.agent, "v1");
    created(&rig.agent, "v2");
    claimed(&rig.agent, &claim_at("v1", "a1", &target));
    claimed(&rig.agent, &claim_req("v2", "a2"));

    let filler = small.fill();
    // The first change after that cannot be written: it is held.
    let held = create_later(&rig.agent, "v3");
    wait_for_failed_retries(&rig.agent, 2);

    // Changes are refused at once, naming the data dir and the errno.
    let v4 = spec_file(&rig.agent, "v4");
    for args in [
        &["volume", "create", v4.as_str()][..],
        &["volume", "claim", "-alloc", "a3", "v2"],
        &["volume", "release", "-alloc", "a2", "v2"],
        &["volume", "deregister", "v2"],
    ] {
        let out = cli_within(&rig.agent, args);
        assert_eq!(one_line_failure(&out), refusal(&data_dir), "{args:?}");
    }
    // Reads answer, from memory.
    let plugins = rig.agent.status();
    assert!(plugins.iter().any(|p| p.id == PLUGIN && healthy(p)));
    let v2 = volume(&rig.agent, "v2");
    assert!(taken(&v2, "a2"), "{v2:#?}");
    assert!(claim_of(&v2, "a3").is_none(), "{v2:#?}");
    for args in [&["volume", "status"][..], &["plugin", "status"]] {
        let out = cli_within(&rig.agent, args);
        assert!(out.status.success(), "{}", crate::harness::text(&out));
    }
    // The held create was neither answered nor sent to the plugin.
    assert_eq!(create_calls(&rig.plugin, "v3"), 0);
    assert!(
        held.try_recv().is_err(),
        "v3 was answered before it was durable"
    );

    // Space returns: the agent resumes by itself.
    filler.remove();
    let v3 = held
        .recv_timeout(LONG)
        .expect("the held create is answered once space returns")
        .unwrap_or_else(|err| panic!("volume create v3: {err}"));
    assert!(v3.created && !v3.external_id.is_empty(), "{v3:#?}");
    created(&rig.agent, "v5");
    assert_eq!(create_calls(&rig.plugin, "v4"), 0, "a refused create");

    // Everything acknowledged survives a SIGKILL.
    rig.agent.sigkill();
    rig.agent.restart();
    rig.agent.wait_for(PLUGIN, healthy, WAIT);
    assert_eq!(created_ids(&rig.agent), set(&["v1", "v2", "v3", "v5"]));
    let v1 = wait_volume(&rig.agent, "v1", "its claim", |v| taken(v, "a1"), LONG);
    assert_eq!(
        claim_of(&v1, "a1").unwrap().target,
        target.display().to_string()
    );
    assert!(taken(&volume(&rig.agent, "v2"), "a2"));
    assert!(
        mount_state(&target).is_some(),
        "the target of a1 is mounted"
    );
    assert_every_mount_is_owned(&rig);
    rig.assert_spec_order();
}

#[test]
fn a_claim_whose_record_could_not_be_written_is_answered_and_mounted_once_space_returns() {
    if !require_root() {
        return;
    }
    let small = SmallFs::mount();
    let mut rig = Rig::start_in(&small.path);
    let target = rig.agent.dir.join("mnt/a1");
    created(&rig.agent, "v1");

    let filler = small.fill();
    let held = claim_later(&rig.agent, "v1", "a1", &target);
    wait_for_failed_retries(&rig.agent, 3);
    assert_nothing_sent_for_the_claim(&rig, &target);
    assert!(
        held.try_recv().is_err(),
        "the claim was answered before it was durable"
    );
    // Nor is it told in the event stream (reads answer meanwhile).
    assert_eq!(claim_events(&rig.agent), "");

    filler.remove();
    let resp = held
        .recv_timeout(LONG)
        .expect("the held claim is answered once space returns")
        .unwrap_or_else(|err| panic!("claim: {err}"));
    assert_eq!(resp.target, target.display().to_string());
    assert!(mount_state(&target).is_some(), "the target is mounted");
    let told = claim_events(&rig.agent);
    assert!(
        told.contains("ClaimAsked") && told.contains("ClaimTaken"),
        "{told}"
    );

    rig.agent.sigkill();
    rig.agent.restart();
    let v1 = wait_volume(&rig.agent, "v1", "its claim", |v| taken(v, "a1"), LONG);
    assert_eq!(
        claim_of(&v1, "a1").unwrap().target,
        target.display().to_string()
    );
    assert!(
        mount_state(&target).is_some(),
        "the target is still mounted"
    );
    assert_every_mount_is_owned(&rig);
    rig.assert_spec_order();
}

/// `events -topic claim`: what the agent has told of claims.
#[track_caller]
fn claim_events(agent: &Agent) -> String {
    let out = cli_within(agent, &["events", "-topic", "claim"]);
    assert!(out.status.success(), "{}", one_line_failure(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// The claim and its target are not on disk: no RPC was sent for them,
/// and nothing is mounted at the target.
#[track_caller]
fn assert_nothing_sent_for_the_claim(rig: &Rig, target: &Path) {
    for method in PROTOCOL {
        assert_eq!(count(&rig.plugin, method), 0, "{method} was sent");
    }
    assert_eq!(mount_state(target), None, "the target is mounted");
}

#[test]
fn a_claim_held_when_the_agent_is_killed_leaves_no_mount_behind() {
    if !require_root() {
        return;
    }
    let small = SmallFs::mount();
    let mut rig = Rig::start_in(&small.path);
    let target = rig.agent.dir.join("mnt/a1");
    created(&rig.agent, "v1");

    let filler = small.fill();
    let held = claim_later(&rig.agent, "v1", "a1", &target);
    wait_for_failed_retries(&rig.agent, 3);
    rig.agent.sigkill();
    assert!(
        matches!(held.recv_timeout(WAIT), Ok(Err(_))),
        "the claim was acknowledged"
    );

    filler.remove();
    rig.agent.restart();
    rig.agent.wait_for(PLUGIN, healthy, WAIT);
    let v1 = volume(&rig.agent, "v1");
    assert!(unclaimed(&v1), "{v1:#?}");
    assert_nothing_sent_for_the_claim(&rig, &target);
    assert_every_mount_is_owned(&rig);
    rig.assert_nothing_left();
}

#[test]
fn a_create_the_plugin_did_not_answer_is_sent_again_until_the_volume_is_made() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    // No answer: the plugin may have made the volume. The caller is told
    // so, and the agent sends the same request again, by itself.
    rig.plugin
        .set_faults("CreateVolume code=DEADLINE_EXCEEDED count=1\n");
    let err = connect(&rig.agent)
        .volume_create("v1.hcl", &big_spec("v1"))
        .unwrap_err();
    assert!(err.to_string().contains("may have been created"), "{err}");
    let v1 = wait_volume(&rig.agent, "v1", "created", |v| v.created, LONG);
    assert!(!v1.creating && !v1.external_id.is_empty(), "{v1:#?}");
    assert_eq!(create_calls(&rig.plugin, "v1"), 2, "sent again, same name");
    connect(&rig.agent).volume_delete("v1").unwrap();
    rig.assert_nothing_left();
}

#[test]
fn a_create_answered_with_an_invalid_reply_keeps_its_record_and_is_sent_again() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    // The plugin makes the volume, then answers OK without it: a reply
    // the spec does not allow, from a plugin that did what it was asked.
    // Dropping the record would leave its volume where nobody knows of it.
    rig.plugin.set_faults("CreateVolume answer-empty count=1\n");
    let err = connect(&rig.agent)
        .volume_create("v1.hcl", &big_spec("v1"))
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("invalid reply"), "{text}");
    assert!(text.contains("may have been created"), "{text}");
    let v1 = wait_volume(&rig.agent, "v1", "created", |v| v.created, LONG);
    assert!(!v1.creating && !v1.external_id.is_empty(), "{v1:#?}");
    assert_eq!(create_calls(&rig.plugin, "v1"), 2, "sent again, same name");
    let listed = rig.plugin.csi_client().list_volumes(0, "").unwrap();
    assert_eq!(listed.entries.len(), 1, "one volume in the plugin");
    connect(&rig.agent).volume_delete("v1").unwrap();
    rig.assert_nothing_left();
}

#[test]
fn a_create_cut_short_by_a_crash_is_sent_again_and_its_volume_kept() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    // Long enough for the agent to be killed while the plugin works; the
    // plugin makes the volume anyway, as a real one would.
    rig.plugin.set_faults("CreateVolume sleep=2s count=1\n");
    let answer = create_later(&rig.agent, "v1");
    wait_for_calls(&rig.plugin, "CreateVolume", 1);
    rig.agent.sigkill();
    assert!(
        matches!(answer.recv_timeout(WAIT), Ok(Err(_))),
        "the killed agent answered the create"
    );
    // The plugin made the volume; the agent never recorded the answer.
    wait_for_plugin_volumes(&rig.plugin, 1);

    rig.agent.restart();
    let v1 = wait_volume(&rig.agent, "v1", "created", |v| v.created, LONG);
    assert!(!v1.creating && !v1.external_id.is_empty(), "{v1:#?}");
    assert_eq!(create_calls(&rig.plugin, "v1"), 2, "sent again, same name");
    let listed = rig.plugin.csi_client().list_volumes(0, "").unwrap();
    let ids: Vec<&str> = listed
        .entries
        .iter()
        .map(|e| e.volume.volume_id.as_str())
        .collect();
    assert_eq!(ids, [v1.external_id.as_str()], "one volume in the plugin");

    // A volume like any other: claimable, and deletable, so nothing is
    // orphaned.
    claimed(&rig.agent, &claim_req("v1", "a1"));
    released(&rig.agent, "v1", "a1");
    connect(&rig.agent).volume_delete("v1").unwrap();
    assert!(rig
        .plugin
        .csi_client()
        .list_volumes(0, "")
        .unwrap()
        .entries
        .is_empty());
    rig.assert_spec_order();
    rig.assert_nothing_left();
}
