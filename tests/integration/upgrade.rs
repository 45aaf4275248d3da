//! Upgrades: a data dir written by an earlier binary (its snapshot, its
//! journal, its task and plugin records) is read by this one with every
//! claim and every task intact, so that an upgrade never costs a user's
//! claims.
//!
//! The fixtures are `tests/fixtures/datadir-v1/{stopped,killed}`, written
//! by `scripts/upgrade-fixture.sh` with the binary of that format and
//! never rewritten (docs/development.md says when to add a new one): the
//! hostpath plugin run as a job's `csi_plugin` task, volumes created and
//! registered, a job whose exec task holds two claims, and two claims made
//! with `volume claim`, one of them at a host target. Each holds the data
//! dir and the plugin's base dir as a host keeps them after a reboot: the
//! old agent was stopped with SIGTERM, as `systemctl stop` does for an
//! upgrade (`stopped`: one snapshot, an empty journal), or killed after its
//! last claim (`killed`: the journal holds records the snapshot does not),
//! and then every task and mount of the old run went. A fixture cannot
//! keep processes or mounts; an agent restarted while its tasks and mounts
//! stay is `job::an_agent_restart_readopts_running_tasks`.
//!
//! The records hold absolute paths (the plugin's socket in the data dir, a
//! claim's host target, the job files' names), so each fixture is copied to
//! the path it was written at rather than rewritten ([`FixtureRoot`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;
use csi_agent::csi::AccessMode;
use csi_agent::proto::agent::{JobStatus, TaskStatus, VolumeStatus};
use csi_agent::proto::state as pb;
use csi_agent::proto::state::journal_record::Change;
use protobuf::Message;

use crate::harness::{healthy, text, Agent};
use crate::job::{bin_dir, task_mounts, task_processes_under};
use crate::util::{mount_state, mounts_under, require_root, TestDir};
use crate::volume_util::{released, volume, wait_volume, LONG};

/// The fixtures of format v1, in the repository.
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/datadir-v1");

/// The plugin ID the fixtures' plugin job registers.
const PLUGIN: &str = "hp";

/// The file a test leaves in a fixture root it placed, holding its pid: a
/// root without it is someone else's, never touched.
const OWNER_FILE: &str = ".upgrade-test-owner";

/// How the old agent's run ended before the reboot.
#[derive(Clone, Copy, Debug)]
enum Ending {
    /// SIGTERM: a last snapshot, the plugins marked unhealthy, the journal
    /// folded into the snapshot.
    Stopped,
    /// SIGKILL after the last claim: the claims made by hand are in the
    /// journal only, and the snapshot still calls the plugin healthy.
    Killed,
}

impl Ending {
    fn name(self) -> &'static str {
        match self {
            Ending::Stopped => "stopped",
            Ending::Killed => "killed",
        }
    }

    /// The fixture in the repository.
    fn source(self) -> PathBuf {
        Path::new(FIXTURES).join(self.name())
    }

    /// Where the fixture was written, and so where it must be used: the
    /// generator's root (`scripts/upgrade-fixture.sh`).
    fn root(self) -> PathBuf {
        PathBuf::from(format!("/tmp/csi-agent-upgrade-fixture-v1-{}", self.name()))
    }
}

/// What a fixture's files say, read as the old binary wrote them: the
/// snapshot, and the journal's records after it applied on top (the last
/// record of a volume wins).
struct Records {
    snapshot: pb::State,
    /// The IDs of the volumes the journal's records are about, in order.
    journalled: Vec<String>,
    /// Every volume as the agent is to load it, by ID.
    volumes: BTreeMap<String, pb::Volume>,
}

impl Records {
    fn read(fixture: &Path) -> Records {
        let data = fixture.join("data");
        let snapshot = pb::State::parse_from_bytes(&fs::read(data.join("state.pb")).unwrap())
            .expect("the fixture's state.pb decodes");
        let mut volumes: BTreeMap<String, pb::Volume> = snapshot
            .volumes
            .iter()
            .map(|v| (v.id.clone(), v.clone()))
            .collect();
        let mut journalled = Vec::new();
        for (seq, record) in journal_records(&fs::read(data.join("journal")).unwrap()) {
            if seq <= snapshot.journal_seq {
                continue;
            }
            match record.change {
                Some(Change::Volume(v)) => {
                    journalled.push(v.id.clone());
                    volumes.insert(v.id.clone(), v);
                }
                Some(Change::RemovedVolumeId(id)) => {
                    volumes.remove(&id);
                    journalled.push(id);
                }
                other => panic!("journal record {seq} is not a volume's: {other:?}"),
            }
        }
        Records {
            snapshot,
            journalled,
            volumes,
        }
    }

    /// Every claim, with its volume's ID.
    fn claims(&self) -> impl Iterator<Item = (&str, &pb::VolumeClaim)> {
        self.volumes
            .values()
            .flat_map(|v| v.claims.iter().map(move |c| (v.id.as_str(), c)))
    }

    /// The one alloc of `job`.
    fn alloc(&self, job: &str) -> &pb::Alloc {
        let allocs: Vec<&pb::Alloc> = self
            .snapshot
            .allocs
            .iter()
            .filter(|a| a.job == job)
            .collect();
        assert_eq!(allocs.len(), 1, "job {job} has one alloc: {allocs:#?}");
        allocs[0]
    }
}

/// The records of a journal, with their sequence numbers. Its frames are
/// `len: u32 | crc: u32 | seq: u64 | payload` (little-endian, see
/// `src/state/journal.rs`), read here by hand so that what the fixture
/// holds does not depend on the code under test.
fn journal_records(mut bytes: &[u8]) -> Vec<(u64, pb::JournalRecord)> {
    const HEADER: usize = 16;
    let mut records = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= HEADER, "a torn frame at the journal's end");
        let len = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
        let seq = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        let payload = &bytes[HEADER..HEADER + len];
        let record = pb::JournalRecord::parse_from_bytes(payload)
            .unwrap_or_else(|err| panic!("journal record {seq} does not decode: {err}"));
        records.push((seq, record));
        bytes = &bytes[HEADER + len..];
    }
    records
}

/// `access-mode/attachment-mode`, as `volume status` writes a capability.
fn capability_name(c: &pb::Capability) -> String {
    let access = AccessMode::from_number(c.access_mode).expect("a known access mode");
    let attachment = match c.attachment_mode {
        1 => "block-device",
        2 => "file-system",
        other => panic!("attachment mode {other}"),
    };
    format!("{access}/{attachment}")
}

fn is_done(step: protobuf::EnumOrUnknown<pb::Step>) -> bool {
    step.enum_value() == Ok(pb::Step::DONE)
}

/// A fixture copied to the absolute path it was written at. A root that is
/// already there is refused, unless a run of this test that is gone left it
/// (its owner file names a pid that no longer runs): that one is cleaned
/// up first. When dropped, the fixture's tasks are killed, what is mounted
/// under it unmounted, and it is removed.
struct FixtureRoot {
    /// Unmounts everything under the root and removes it, when dropped.
    dir: TestDir,
}

impl FixtureRoot {
    fn place(ending: Ending) -> FixtureRoot {
        let path = ending.root();
        if path.exists() {
            let owner = fs::read_to_string(path.join(OWNER_FILE))
                .ok()
                .and_then(|pid| pid.trim().parse::<u32>().ok());
            match owner {
                // What a run of this test that was killed left behind.
                Some(pid) if !Path::new(&format!("/proc/{pid}")).exists() => {
                    drop(FixtureRoot {
                        dir: TestDir { path: path.clone() },
                    });
                }
                _ => panic!(
                    "{} exists and is not what this test left: remove it (nothing may be mounted under it) to run the test",
                    path.display()
                ),
            }
        }
        fs::create_dir(&path).unwrap();
        let root = FixtureRoot {
            dir: TestDir { path },
        };
        fs::write(root.path().join(OWNER_FILE), std::process::id().to_string()).unwrap();
        copy_tree(&ending.source(), root.path());
        // The old agent made its data dir private; git keeps no modes of
        // directories.
        fs::set_permissions(root.data_dir(), fs::Permissions::from_mode(0o700)).unwrap();
        root
    }

    fn path(&self) -> &Path {
        &self.dir.path
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The plugin's base dir, a host volume of its job.
    fn backing(&self) -> PathBuf {
        self.dir.join("backing")
    }
}

impl Drop for FixtureRoot {
    fn drop(&mut self) {
        // Tasks run in sessions of their own and outlive the agent.
        for pid in task_processes_under(self.path()) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
            // A task in a PID namespace of its own is not its group's
            // leader; its end ends the namespace.
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// Copies the files and directories under `from` into `to`, which exists.
fn copy_tree(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            fs::create_dir(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A fixture at its root and an agent of this binary started on it, with
/// the config the generator's agent had: its data dir, node name and host
/// volumes (the binary's directory is this build's). Dropped agent first,
/// so that nothing starts a task again while the root goes.
struct Upgrade {
    agent: Agent,
    records: Records,
    root: FixtureRoot,
}

impl Upgrade {
    fn start(ending: Ending) -> Upgrade {
        let records = Records::read(&ending.source());
        let root = FixtureRoot::place(ending);
        let config = format!(
            "node_name = \"upgrade-node\"\n\nhost_volume \"csi-agent-bin\" {{\n  path      = {:?}\n  read_only = true\n}}\n\nhost_volume \"hostpath-backing\" {{\n  path = {:?}\n}}\n",
            bin_dir().display().to_string(),
            root.backing().display().to_string(),
        );
        let agent = Agent::start_in_with_config(&root.data_dir(), &config);
        Upgrade {
            agent,
            records,
            root,
        }
    }

    fn client(&self) -> AgentClient {
        AgentClient::connect(&self.agent.socket).unwrap()
    }

    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        let out = self.agent.cli(args);
        assert!(out.status.success(), "{args:?} failed:\n{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `data_dir/csi/<plugin>/...`: where the agent stages and publishes.
    fn csi_dir(&self) -> PathBuf {
        self.root.data_dir().join("csi").join(PLUGIN)
    }

    fn staging_path(&self, volume: &str) -> PathBuf {
        self.csi_dir().join("staging").join(volume)
    }

    fn publish_path(&self, volume: &str, claim: &pb::VolumeClaim) -> PathBuf {
        self.csi_dir()
            .join("per-alloc")
            .join(&claim.alloc_id)
            .join(volume)
            .join(&claim.usage)
    }

    /// The new binary on the fixture: the plugin, every volume and claim,
    /// the mounts and the app task are back, and every claim releases.
    fn assert_everything_back(&self) {
        self.assert_plugin_back();
        self.assert_volumes_kept();
        self.wait_claims_taken();
        self.assert_claims_kept(|state| state == "taken");
        self.assert_mounted_again();
        self.assert_app_task_runs_again();
        self.release_every_claim();
        self.assert_plugin_saw_no_violation();
    }

    /// The plugin's task came back, at the socket its record names, and
    /// is healthy.
    #[track_caller]
    fn assert_plugin_back(&self) {
        let record = &self.records.snapshot.plugins[0];
        let plugin = self.agent.wait_for(PLUGIN, healthy, LONG);
        assert_eq!(plugin.socket, record.socket);
        assert_eq!(plugin.source, record.source);
        let alloc = self.records.alloc("plugin");
        let task = self.wait_task("plugin", &alloc.id, |t| t.state == "running");
        assert_ne!(task.pid, alloc.tasks[0].pid, "a new process");
    }

    /// Every volume of the records is registered with the same fields, and
    /// no other.
    #[track_caller]
    fn assert_volumes_kept(&self) {
        let statuses = self.client().volume_status("", false).unwrap().volumes;
        let ids: Vec<&str> = statuses.iter().map(|v| v.id.as_str()).collect();
        let recorded: Vec<&str> = self.records.volumes.keys().map(String::as_str).collect();
        assert_eq!(ids, recorded);
        for (id, record) in &self.records.volumes {
            let status = volume(&self.agent, id);
            assert_eq!(status.name, record.name, "volume {id}");
            assert_eq!(status.plugin_id, record.plugin_id, "volume {id}");
            assert_eq!(status.external_id, record.external_id, "volume {id}");
            let capabilities: Vec<String> =
                record.capabilities.iter().map(capability_name).collect();
            assert_eq!(status.capabilities, capabilities, "volume {id}");
            assert_eq!(status.fs_type, record.fs_type, "volume {id}");
            assert_eq!(
                status.mount_flags as usize,
                record.mount_flags.len(),
                "volume {id}"
            );
            let secret_keys: BTreeSet<&String> = record.secrets.keys().collect();
            assert_eq!(
                status.secret_keys.iter().collect::<BTreeSet<_>>(),
                secret_keys,
                "volume {id}"
            );
            assert_eq!(status.parameters, record.parameters, "volume {id}");
            assert_eq!(status.context, record.context, "volume {id}");
            assert_eq!(status.capacity_bytes, record.capacity_bytes, "volume {id}");
            assert_eq!(status.created, record.created, "volume {id}");
        }
    }

    /// Every claim of the records is there, with its alloc, mode, usage,
    /// target, propagation and publish path, in a state `state` accepts;
    /// and no other.
    #[track_caller]
    fn assert_claims_kept(&self, state: impl Fn(&str) -> bool) {
        type Shown = (String, String, String, String, String, PathBuf);
        for (id, record) in &self.records.volumes {
            let status = volume(&self.agent, id);
            let mut got: Vec<Shown> = status
                .claims
                .iter()
                .map(|c| {
                    assert!(state(&c.state), "volume {id}: claim {c:#?}");
                    (
                        c.alloc_id.clone(),
                        c.mode.clone(),
                        c.usage.clone(),
                        c.target.clone(),
                        c.propagation.clone(),
                        PathBuf::from(&c.publish_path),
                    )
                })
                .collect();
            let mut want: Vec<Shown> = record
                .claims
                .iter()
                .map(|c| {
                    let mode = if c.read_only { "read" } else { "write" };
                    (
                        c.alloc_id.clone(),
                        mode.to_string(),
                        c.usage.clone(),
                        c.target.clone(),
                        c.propagation.clone(),
                        self.publish_path(id, c),
                    )
                })
                .collect();
            got.sort();
            want.sort();
            assert_eq!(got, want, "volume {id}: claims");
            assert!(status.past_claims.is_empty(), "volume {id}: {status:#?}");
        }
    }

    /// Waits until every volume of the records has all its claims taken.
    #[track_caller]
    fn wait_claims_taken(&self) {
        for (id, record) in &self.records.volumes {
            wait_volume(
                &self.agent,
                id,
                "its claims taken again",
                |v| {
                    v.claims.len() == record.claims.len()
                        && v.claims.iter().all(|c| c.state == "taken")
                },
                LONG,
            );
        }
    }

    fn job(&self, name: &str) -> JobStatus {
        self.client().job_status(name).unwrap().jobs.remove(0)
    }

    /// Waits until the first task of `job`'s alloc `alloc` satisfies
    /// `check`; that task's status.
    #[track_caller]
    fn wait_task(&self, job: &str, alloc: &str, check: impl Fn(&TaskStatus) -> bool) -> TaskStatus {
        self.wait_job(job, "its task", |j| {
            j.allocs
                .iter()
                .any(|a| a.id == alloc && a.tasks.first().is_some_and(&check))
        })
        .allocs
        .into_iter()
        .find(|a| a.id == alloc)
        .unwrap()
        .tasks
        .remove(0)
    }

    #[track_caller]
    fn wait_job(&self, name: &str, what: &str, check: impl Fn(&JobStatus) -> bool) -> JobStatus {
        let start = Instant::now();
        loop {
            let job = self.job(name);
            if check(&job) {
                return job;
            }
            if start.elapsed() > LONG {
                panic!("job {name}: {what} did not come within {LONG:?}; last status:\n{job:#?}");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops `job` and waits until it is dead and its allocs hold no claim.
    #[track_caller]
    fn stop_job(&self, name: &str) {
        self.ok(&["job", "stop", name]);
        let job = self.wait_job(name, "the stop", |j| j.status == "dead");
        let allocs: BTreeSet<String> = job.allocs.into_iter().map(|a| a.id).collect();
        for id in self.records.volumes.keys() {
            wait_volume(
                &self.agent,
                id,
                "the job's claims released",
                |v: &VolumeStatus| {
                    v.claims
                        .iter()
                        .chain(&v.past_claims)
                        .all(|c| !allocs.contains(&c.alloc_id))
                },
                LONG,
            );
        }
    }

    /// Every staging, publish and host target of the records is mounted
    /// again, as the host's mount table shows it, and the data written
    /// through the target before the upgrade is there. (A reader's publish
    /// is read-only in the plugin task's mount namespace only, since a
    /// remount does not propagate: the task's read-only view is checked
    /// in [`Upgrade::assert_app_task_runs_again`].)
    #[track_caller]
    fn assert_mounted_again(&self) {
        for id in self.records.volumes.keys() {
            assert_eq!(mount_state(&self.staging_path(id)), Some(false), "{id}");
        }
        for (id, claim) in self.records.claims() {
            let publish = self.publish_path(id, claim);
            assert!(mount_state(&publish).is_some(), "{}", publish.display());
        }
        let target = self.backup_target();
        assert_eq!(mount_state(&target), Some(false));
        assert_eq!(
            fs::read_to_string(target.join("latest")).unwrap(),
            "written through the host target\n"
        );
    }

    /// The host target of backup-1's claim, made by hand.
    fn backup_target(&self) -> PathBuf {
        self.root.path().join("mnt/backups")
    }

    /// The app job's task runs again, as a new process with its volumes
    /// mounted (the reader's read-only), and writes through them: each run
    /// appends its pid as it sees it (`$$`) to `runs` in v1 and prints v3's
    /// README.
    #[track_caller]
    fn assert_app_task_runs_again(&self) {
        let app = self.records.alloc("app");
        let old_pid = app.tasks[0].pid;
        let task = self.wait_task("app", &app.id, |t| t.state == "running");
        assert_ne!(task.pid, old_pid);
        let runs = self.root.backing().join("volumes/app-data/runs");
        let logs = || self.ok(&["alloc", "logs", &app.id, "server"]);
        let start = Instant::now();
        while (fs::read_to_string(&runs).unwrap().lines().count() < 2 || logs().is_empty())
            && start.elapsed() < LONG
        {
            thread::sleep(Duration::from_millis(20));
        }
        // The old binary ran exec tasks in the host's PID namespace; the
        // new one gives them their own (Nomad's default), where the task
        // is PID 1.
        assert_eq!(
            fs::read_to_string(&runs).unwrap(),
            format!("{old_pid}\n1\n")
        );
        assert_eq!(logs(), "reference data\n");
        let mounts = task_mounts(task.pid);
        let data = mounts.get(Path::new("/data")).expect("/data in the task");
        assert!(!data.is_read_only());
        let reference = mounts.get(Path::new("/reference")).expect("/reference");
        assert!(reference.is_read_only());
    }

    /// Releases every claim: those made by hand with `volume release`, the
    /// app's by stopping its job; then the plugin's job stops. Each release
    /// unmounts what it mounted, and nothing is left mounted at the end.
    #[track_caller]
    fn release_every_claim(&self) {
        let app = &self.records.alloc("app").id;
        released(&self.agent, "v2", "backup-1");
        let target = self.backup_target();
        assert_eq!(mount_state(&target), None);
        assert!(!target.exists(), "the target the old agent made is removed");
        released(&self.agent, "v3", "reader-1");
        for (id, claim) in self.records.claims() {
            if claim.alloc_id != *app {
                assert_eq!(mount_state(&self.publish_path(id, claim)), None, "{id}");
            }
        }
        self.stop_job("app");
        self.stop_job("plugin");
        assert_eq!(mounts_under(self.root.path()), Vec::<PathBuf>::new());
        let volumes = self.client().volume_status("", false).unwrap().volumes;
        assert_eq!(volumes.len(), self.records.volumes.len());
        assert!(volumes.iter().all(|v| v.claims.is_empty()), "{volumes:#?}");
    }

    /// The plugin task runs `-strict`: the new agent, as its CO, must have
    /// kept the spec with what the old one left.
    #[track_caller]
    fn assert_plugin_saw_no_violation(&self) {
        let verdict = fs::read_to_string(self.root.backing().join("strict-violations"))
            .expect("the strict plugin's verdict");
        assert!(verdict.is_empty(), "the plugin saw:\n{verdict}");
    }
}

#[test]
fn each_v1_fixture_holds_three_volumes_four_claims_and_two_running_tasks() {
    for ending in [Ending::Stopped, Ending::Killed] {
        let records = Records::read(&ending.source());
        let root = ending.root();
        let data = root.join("data");

        let ids: Vec<&str> = records.volumes.keys().map(String::as_str).collect();
        assert_eq!(ids, ["v1", "v2", "v3"], "{ending:?}");
        let v1 = &records.volumes["v1"];
        assert_eq!(v1.name, "app-data");
        assert!(v1.created);
        assert_eq!(v1.parameters["tier"], "fast");
        assert_eq!(v1.mount_flags, ["noatime"]);
        assert_eq!(v1.capacity_bytes, 1 << 20);
        let v2 = &records.volumes["v2"];
        assert_eq!((v2.name.as_str(), v2.created), ("backups", true));
        let v3 = &records.volumes["v3"];
        assert_eq!((v3.name.as_str(), v3.created), ("reference", false));
        assert_eq!(v3.external_id, "reference");
        assert_eq!(v3.context["origin"], "registered");
        assert_eq!(
            capability_name(&v3.capabilities[0]),
            "multi-node-reader-only/file-system"
        );

        // The job's alloc holds v1 for writing and v3 for reading; the
        // claims made by hand are backup-1's at a host target and
        // reader-1's.
        let app = records.alloc("app");
        let mut claims: Vec<(&str, &str, bool, &str)> = records
            .claims()
            .map(|(v, c)| (v, c.alloc_id.as_str(), c.read_only, c.target.as_str()))
            .collect();
        claims.sort();
        let target = root.join("mnt/backups").display().to_string();
        let mut want = vec![
            ("v1", app.id.as_str(), false, ""),
            ("v2", "backup-1", false, target.as_str()),
            ("v3", app.id.as_str(), true, ""),
            ("v3", "reader-1", true, ""),
        ];
        want.sort();
        assert_eq!(claims, want, "{ending:?}");
        for (volume, claim) in records.claims() {
            assert!(claim.wanted, "{volume}: {claim:#?}");
            assert!(is_done(claim.published), "{volume}: {claim:#?}");
            // The agent made backup-1's target, and removes it on release.
            assert_eq!(
                claim.target.is_empty(),
                !claim.target_created,
                "{volume}: {claim:#?}"
            );
            assert!(
                claim.target.is_empty() || is_done(claim.target_mounted),
                "{volume}: {claim:#?}"
            );
        }
        for v in records.volumes.values() {
            assert!(
                v.stagings.iter().all(|s| is_done(s.step)),
                "{}: {v:#?}",
                v.id
            );
        }

        // Two jobs, each with one alloc whose one task was running, its pid
        // in the record and in the pid file its process wrote.
        let jobs: Vec<&str> = records
            .snapshot
            .jobs
            .iter()
            .map(|j| j.name.as_str())
            .collect();
        assert_eq!(jobs, ["app", "plugin"], "{ending:?}");
        for job in ["app", "plugin"] {
            let alloc = records.alloc(job);
            assert_eq!(alloc.status, "running", "{alloc:#?}");
            let task = &alloc.tasks[0];
            assert_eq!(task.state, "running", "{alloc:#?}");
            let pid_file = ending
                .source()
                .join("data/alloc")
                .join(&alloc.id)
                .join(format!("{}.pid", task.name));
            assert_eq!(
                fs::read_to_string(&pid_file).unwrap().trim(),
                task.pid.to_string()
            );
        }

        // The plugin's record: its socket under the data dir, by absolute
        // path.
        let plugin_alloc = records.alloc("plugin");
        assert_eq!(records.snapshot.plugins.len(), 1);
        let plugin = &records.snapshot.plugins[0];
        assert_eq!(plugin.id, PLUGIN);
        assert_eq!(
            plugin.socket,
            data.join("plugins")
                .join(&plugin_alloc.id)
                .join("csi.sock")
                .display()
                .to_string()
        );
        assert_eq!(plugin.source, format!("task {}/hostpath", plugin_alloc.id));

        let health = plugin.health.enum_value().unwrap();
        match ending {
            Ending::Stopped => {
                assert!(records.journalled.is_empty(), "{:?}", records.journalled);
                assert_eq!(health, pb::PluginHealth::PLUGIN_UNHEALTHY);
            }
            Ending::Killed => {
                // The claims made by hand are in the journal only.
                let journalled: BTreeSet<&str> =
                    records.journalled.iter().map(String::as_str).collect();
                assert_eq!(journalled, BTreeSet::from(["v2", "v3"]));
                let snapshot_v2 = records.snapshot.volumes.iter().find(|v| v.id == "v2");
                assert!(snapshot_v2.unwrap().claims.is_empty());
                assert_eq!(health, pb::PluginHealth::PLUGIN_HEALTHY);
            }
        }
    }
}

#[test]
fn after_a_stop_and_a_reboot_the_new_binary_mounts_every_claim_and_runs_the_tasks_again() {
    if !require_root() {
        return;
    }
    Upgrade::start(Ending::Stopped).assert_everything_back();
}

#[test]
fn after_a_kill_and_a_reboot_the_new_binary_mounts_the_claims_of_the_journal_too() {
    if !require_root() {
        return;
    }
    // The killed agent's snapshot still calls the plugin task healthy:
    // the claims wait for its instance to run again, not for a job sent
    // to an instance that is not there.
    Upgrade::start(Ending::Killed).assert_everything_back();
}
