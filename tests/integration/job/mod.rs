//! Jobs: the built-in hostpath plugin run as a `csi_plugin` task, and
//! consumer tasks that mount its volumes, all real processes in real mount
//! namespaces and roots of their own. Each test checks what a task sees
//! from its own `/proc/<pid>/mountinfo` (paths of its root) or through
//! `/proc/<pid>/root`, and that nothing stays mounted once the jobs stop.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;
use csi_agent::mount::MountInfo;
use csi_agent::proto::agent::{AllocStatus, JobStatus, TaskStatus};

use crate::harness::{config_text, healthy, text, Agent, WAIT};
use crate::util::{bin, mounts_under, require_root, NODE};

mod alloc_exec;
mod alloc_fs;
mod alloc_ops;
mod alloc_stats;
mod artifacts;
mod big;
mod bounds;
mod constraints;
pub(crate) mod containers;
mod docker;
mod docker_demo;
mod docker_exec;
mod expressions;
mod freed;
mod isolation;
mod json;
mod keys;
mod leftovers;
mod lifecycle;
mod max_run;
mod nomad_e2e;
mod periodic;
mod placement;
mod plan;
mod ports;
mod poststop;
mod refit;
pub(crate) mod root;
mod services;
mod sockaddr;
mod templates;
mod untrusted;
mod variables;
mod watch;
mod watch_pull;

pub(crate) const PLUGIN_ID: &str = "hp";
const USAGE: &str = "rw-file-system-single-node-writer";
const USAGE_RO: &str = "ro-file-system-single-node-writer";

/// An agent with the hostpath plugin running as a job, and the volume `v1`
/// created on it.
struct Rig {
    agent: Agent,
    /// The plugin's base dir: volume `v1` is `backing/volumes/v1`.
    backing: PathBuf,
}

impl Rig {
    fn start() -> Rig {
        Rig::start_with_config("")
    }

    /// An agent with no jobs and no volumes.
    fn bare() -> Rig {
        let agent = Agent::start(&[]);
        Rig {
            backing: agent.dir.join("backing"),
            agent,
        }
    }

    /// Like [`Rig::bare`], with `extra` appended to the agent config.
    fn bare_with_config(extra: &str) -> Rig {
        let rig = Rig::bare();
        let mut config = config_text(&rig.agent.data_dir, &[]);
        config.push_str(extra);
        rig.agent.write_config(&config);
        rig.agent.sighup();
        rig.agent.wait_for_log("SIGHUP: reloaded", WAIT);
        rig
    }

    /// `extra` is appended to the agent config (host volumes).
    fn start_with_config(extra: &str) -> Rig {
        let rig = Rig::with_plugin_volumes(extra);
        rig.run_job("plugin.hcl", &rig.plugin_job("3", "1s"));
        rig.wait_plugin_healthy();
        let vol = rig.agent.dir.join("v1.hcl");
        fs::write(&vol, VOLUME).unwrap();
        rig.ok(&["volume", "create", &vol.display().to_string()]);
        rig
    }

    /// An agent with no jobs and no volumes, whose config has the host
    /// volumes a plugin task needs (see [`Rig::plugin_job`]), and `extra`.
    fn with_plugin_volumes(extra: &str) -> Rig {
        let agent = Agent::start(&[]);
        let backing = agent.dir.mkdir("backing");
        let mut config = config_text(&agent.data_dir, &[]);
        // The plugin task runs in a root of its own: its binary and its
        // base dir reach it as host volumes, as a Nomad user would give
        // them.
        config.push_str(&format!(
            "host_volume \"csi-agent-bin\" {{\n  path      = {:?}\n  read_only = true\n}}\nhost_volume \"hostpath-backing\" {{\n  path = {:?}\n}}\n",
            bin_dir().display().to_string(),
            backing.display().to_string(),
        ));
        config.push_str(extra);
        agent.write_config(&config);
        agent.sighup();
        agent.wait_for_log("SIGHUP: reloaded", WAIT);
        Rig { agent, backing }
    }

    /// The hostpath plugin as an exec task: the test binary bound
    /// read-only at `/opt/csi-agent`, its base dir at `/backing`, logging
    /// at debug, restarted `attempts` times with `delay`.
    fn plugin_job(&self, attempts: &str, delay: &str) -> String {
        let restart = format!(
            "    restart {{\n      attempts = {attempts}\n      interval = \"5m\"\n      delay    = \"{delay}\"\n      mode     = \"fail\"\n    }}\n"
        );
        let env = "      env {\n        RUST_LOG = \"csi_agent=debug\"\n      }\n";
        hostpath_job("plugin", "nodes", "monolith", &restart, env)
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

    /// Writes `hcl` to `file` in the test dir and runs it; the alloc IDs.
    #[track_caller]
    fn run_job(&self, file: &str, hcl: &str) -> Vec<String> {
        let out = self.run_job_output(file, hcl);
        assert!(
            out.status.success(),
            "job run {file} failed:\n{}",
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("alloc ").map(str::to_string))
            .collect()
    }

    fn run_job_output(&self, file: &str, hcl: &str) -> Output {
        let path = self.agent.dir.join(file);
        fs::write(&path, hcl).unwrap();
        self.agent.cli(&["job", "run", &path.display().to_string()])
    }

    fn job(&self, name: &str) -> JobStatus {
        self.client()
            .job_status(name)
            .unwrap_or_else(|err| panic!("job status {name}: {err}"))
            .jobs
            .remove(0)
    }

    fn alloc(&self, job: &str, id: &str) -> AllocStatus {
        self.job(job)
            .allocs
            .into_iter()
            .find(|a| a.id == id)
            .unwrap_or_else(|| panic!("job {job} has no alloc {id}"))
    }

    fn task(&self, job: &str, alloc: &str) -> TaskStatus {
        self.alloc(job, alloc).tasks.remove(0)
    }

    /// Waits until `check` holds for the job's status.
    #[track_caller]
    fn wait_job(&self, name: &str, what: &str, check: impl Fn(&JobStatus) -> bool) -> JobStatus {
        let start = Instant::now();
        loop {
            let job = self.job(name);
            if check(&job) {
                return job;
            }
            if start.elapsed() > WAIT {
                panic!("job {name}: {what} did not happen within {WAIT:?}; last status:\n{job:#?}");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the agent with SIGTERM and starts it again: `job`'s first
    /// task must be adopted, the same process `pid`, with nothing of the
    /// job dropped on the way (its file decoded again from what the agent
    /// kept).
    #[track_caller]
    fn restart_adopts(&mut self, job: &str, pid: u32) {
        assert_eq!(self.agent.sigterm(), 0);
        self.agent.restart();
        let status = self.wait_job(job, "re-adoption", |j| {
            j.allocs[0].tasks[0]
                .events
                .iter()
                .any(|e| e.kind == "adopted")
        });
        assert_eq!(status.allocs[0].tasks[0].pid, pid);
        assert!(
            !self.agent.log().contains("Dropping"),
            "{}",
            self.agent.log()
        );
    }

    fn wait_plugin_healthy(&self) {
        self.agent.wait_for(PLUGIN_ID, healthy, WAIT);
    }

    /// Waits until the alloc's first task runs; its pid.
    #[track_caller]
    fn wait_running(&self, job: &str, alloc: &str) -> u32 {
        let job_status = self.wait_job(job, "the task to run", |j| {
            j.allocs
                .iter()
                .any(|a| a.id == alloc && a.tasks.first().is_some_and(|t| t.state == "running"))
        });
        let a = job_status.allocs.iter().find(|a| a.id == alloc).unwrap();
        a.tasks[0].pid
    }

    /// Stops a job and waits until its allocs are done and their claims
    /// released.
    fn stop(&self, job: &str) {
        self.ok(&["job", "stop", job]);
        let status = self.wait_job(job, "the job to stop", |j| j.status == "dead");
        for alloc in &status.allocs {
            self.wait_released(&alloc.id);
        }
    }

    /// Waits until no volume has a claim of `alloc`.
    #[track_caller]
    fn wait_released(&self, alloc: &str) {
        let start = Instant::now();
        loop {
            let volumes = self.client().volume_status("", false).unwrap().volumes;
            let held = volumes.iter().any(|v| {
                v.claims
                    .iter()
                    .chain(&v.past_claims)
                    .any(|c| c.alloc_id == alloc)
            });
            if !held {
                return;
            }
            if start.elapsed() > WAIT {
                panic!(
                    "the claims of alloc {alloc} were not released within {WAIT:?}: {volumes:#?}"
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn task_dir(&self, alloc: &str, task: &str) -> PathBuf {
        self.agent.data_dir.join("alloc").join(alloc).join(task)
    }

    fn publish_path(&self, alloc: &str, usage: &str) -> PathBuf {
        self.agent
            .data_dir
            .join("csi")
            .join(PLUGIN_ID)
            .join("per-alloc")
            .join(alloc)
            .join("v1")
            .join(usage)
    }

    /// Waits until [`Rig::mounts_left`] is empty: the last unstage follows
    /// the release of the last claim.
    #[track_caller]
    fn wait_no_mounts_left(&self) {
        let start = Instant::now();
        while !self.mounts_left().is_empty() {
            if start.elapsed() > WAIT {
                panic!("mounts left under the data dir: {:#?}", self.mounts_left());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Mounts under the data dir other than the shared `csi/` root that
    /// plugin tasks keep.
    fn mounts_left(&self) -> Vec<PathBuf> {
        let root = self.agent.data_dir.join("csi");
        mounts_under(&self.agent.data_dir)
            .into_iter()
            .filter(|p| *p != root)
            .collect()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // The agent first: alive, it would restart a plugin task killed
        // here, and that one would outlive the test.
        self.agent.kill_all();
        // Tasks run in sessions of their own, outside the agent's process
        // group that the harness kills.
        for pid in task_processes_under(&self.agent.dir.path) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
            // A task in a PID namespace of its own is not its group's
            // leader; its end ends the namespace.
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        remove_task_cgroups(&self.agent.data_dir);
        // The plugin task runs `-strict`: the agent, as its CO, must have
        // kept the spec.
        let verdict = self.backing.join("strict-violations");
        if !std::thread::panicking() {
            if let Ok(text) = fs::read_to_string(&verdict) {
                assert!(
                    text.is_empty(),
                    "the strict plugin saw the agent break the spec:\n{text}"
                );
            }
        }
    }
}

/// Removes the cgroups of the tasks of the allocs under `data_dir`: the
/// agent that would remove them when their tasks end is killed first.
fn remove_task_cgroups(data_dir: &Path) {
    let Ok(allocs) = fs::read_dir(data_dir.join("alloc")) else {
        return;
    };
    let allocs: Vec<String> = allocs
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for controller in ["memory", "cpu", "cpuset"] {
        let base = Path::new("/sys/fs/cgroup")
            .join(controller)
            .join("csi-agent");
        let Ok(groups) = fs::read_dir(&base) else {
            continue;
        };
        for group in groups.flatten() {
            let name = group.file_name().to_string_lossy().into_owned();
            if !allocs.iter().any(|a| name.starts_with(&format!("{a}."))) {
                continue;
            }
            let start = Instant::now();
            while fs::remove_dir(group.path()).is_err() && start.elapsed() < Duration::from_secs(2)
            {
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The directory of the binary under test, which plugin tasks get as a
/// host volume.
pub(crate) fn bin_dir() -> PathBuf {
    Path::new(bin()).parent().unwrap().to_path_buf()
}

/// Processes whose `CSI_AGENT_TASK_DIR` is under `dir`.
pub(crate) fn task_processes_under(dir: &Path) -> Vec<u32> {
    let prefix = format!("CSI_AGENT_TASK_DIR={}", dir.display());
    processes_with_env(|e| e.starts_with(prefix.as_bytes()))
}

/// The task's own process for the pid the agent tracks: in a PID
/// namespace of its own, the task is that process's child.
pub(crate) fn task_process(pid: u32) -> u32 {
    let ns = |kind: &str| fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok();
    if ns("pid") == ns("pid_for_children") {
        return pid;
    }
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()
        .and_then(|c| c.split_whitespace().next().and_then(|c| c.parse().ok()))
        .unwrap_or(pid)
}

/// Processes that belong to `alloc`.
fn alloc_processes(alloc: &str) -> Vec<u32> {
    let wanted = format!("CSI_AGENT_ALLOC_ID={alloc}");
    processes_with_env(|e| e == wanted.as_bytes())
}

/// Processes with an environment entry (`KEY=value`) that `matches`.
fn processes_with_env(matches: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A process may exit while we look; it is then not left over.
        let Ok(environ) = fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ.split(|&b| b == 0).any(&matches) {
            pids.push(pid);
        }
    }
    pids
}

pub(crate) const VOLUME: &str = r#"
id        = "v1"
name      = "v1"
type      = "csi"
plugin_id = "hp"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
"#;

/// A consumer job: one task running `script` under `sh -c`, with the
/// volume `v1` mounted at `/data`.
pub(crate) fn consumer(name: &str, script: &str, mount: &str, volume_read_only: bool) -> String {
    format!(
        r#"
job "{name}" {{
  type = "batch"
  group "app" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    volume "data" {{
      type            = "csi"
      source          = "v1"
      read_only       = {volume_read_only}
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "main" {{
      driver = "exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
      }}
      volume_mount {{
        volume      = "data"
        destination = "/data"
        {mount}
      }}
    }}
  }}
}}
"#
    )
}

/// Waits until `path` exists (a task writes it).
#[track_caller]
/// Waits for `path` to have content: a shell's `>` creates the file before
/// it writes, and a loaded machine may run the test in between.
fn wait_for_file(path: &Path) {
    let start = Instant::now();
    let written = || fs::metadata(path).is_ok_and(|m| m.len() > 0);
    while !written() && start.elapsed() < WAIT {
        thread::sleep(Duration::from_millis(20));
    }
}

/// The task's mount table, as the task sees it.
pub(crate) fn task_mounts(pid: u32) -> MountInfo {
    let text = fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    MountInfo::parse(&text).unwrap()
}

#[test]
fn a_task_writes_through_its_volume_mount_into_the_plugin_backing_dir() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    // What every Nomad example does: write to the destination as written.
    let script = "echo hello > /data/out.txt && echo written && sleep 600";
    let allocs = rig.run_job("app.hcl", &consumer("app", script, "", false));
    let alloc = &allocs[0];
    let pid = rig.wait_running("app", alloc);
    let out = rig.backing.join("volumes/v1/out.txt");
    wait_for_file(&out);
    assert_eq!(fs::read_to_string(&out).unwrap(), "hello\n");
    assert_eq!(rig.ok(&["alloc", "logs", alloc, "main"]), "written\n");
    // The task's view: the volume at /data of its root; nothing on the
    // host, and no host directory of that name written.
    let mounts = task_mounts(pid);
    let data = mounts.get(Path::new("/data")).expect("/data in the task");
    assert!(!data.is_read_only());
    let task_dir = rig.task_dir(alloc, "main");
    assert!(MountInfo::read().unwrap().under(&task_dir).next().is_none());

    rig.stop("app");
    let a = rig.alloc("app", alloc);
    assert_eq!(a.status, "complete", "{a:#?}");
    assert_eq!(a.volumes[0].state, "released");
    let status = rig.ok(&["volume", "status", "v1"]);
    assert!(
        !status.contains(alloc.as_str()),
        "the claim is gone:\n{status}"
    );
    rig.wait_no_mounts_left();

    rig.stop("plugin");
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
    assert!(
        rig.agent.try_plugin(PLUGIN_ID).is_err(),
        "the plugin is deregistered"
    );
}

#[test]
fn a_read_only_mount_refuses_writes() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let script = "if touch /data/x 2>$NOMAD_TASK_DIR/err; then echo wrote; else cat $NOMAD_TASK_DIR/err; fi; sleep 600";
    let allocs = rig.run_job("ro.hcl", &consumer("ro", script, "read_only = true", false));
    let alloc = &allocs[0];
    let pid = rig.wait_running("ro", alloc);
    let mount = task_mounts(pid)
        .get(Path::new("/data"))
        .cloned()
        .expect("the volume is mounted in the task");
    assert!(mount.is_read_only());
    let start = Instant::now();
    let mut log = String::new();
    while log.is_empty() && start.elapsed() < WAIT {
        log = rig.ok(&["alloc", "logs", alloc, "main"]);
        thread::sleep(Duration::from_millis(20));
    }
    assert!(log.contains("Read-only file system"), "{log}");
    assert!(!rig.backing.join("volumes/v1/x").exists());
    rig.stop("ro");
    // A read-only volume_mount of a read-write claim publishes read-write;
    // a read-only group volume claims read-only.
    let allocs = rig.run_job("rov.hcl", &consumer("rov", "sleep 600", "", true));
    let pid = rig.wait_running("rov", &allocs[0]);
    let mounts = task_mounts(pid);
    let mount = mounts.get(Path::new("/data")).unwrap();
    assert!(mount.is_read_only());
    assert!(rig.publish_path(&allocs[0], USAGE_RO).exists());
    rig.stop("rov");
    rig.wait_no_mounts_left();
}

/// Runs a consumer with `propagation`, then mounts a tmpfs on the host
/// inside the volume and one in the task inside its mount; says whether
/// each crossed over.
fn propagation(mode: &str) -> (bool, bool) {
    let rig = Rig::start();
    let script = "sleep 600";
    let mount = format!("propagation_mode = {mode:?}");
    let allocs = rig.run_job("p.hcl", &consumer("p", script, &mount, false));
    let alloc = &allocs[0];
    let pid = rig.wait_running("p", alloc);
    let publish = rig.publish_path(alloc, USAGE);
    // The task's view: nsenter enters its root along with its namespace.
    let task_data = Path::new("/data");

    // Host → task.
    fs::create_dir_all(publish.join("from-host")).unwrap();
    tmpfs(&publish.join("from-host"));
    let seen_in_task = task_mounts(pid).get(&task_data.join("from-host")).is_some();

    // Task → host: mount inside the task's namespace.
    // Made through the host's view of the volume, which the task shares.
    fs::create_dir_all(publish.join("from-task")).unwrap();
    let status = std::process::Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-m", "mount", "-t", "tmpfs", "t"])
        .arg(task_data.join("from-task"))
        .status()
        .unwrap();
    assert!(status.success());
    assert!(task_mounts(pid).get(&task_data.join("from-task")).is_some());
    let seen_on_host = MountInfo::read()
        .unwrap()
        .get(&publish.join("from-task"))
        .is_some();

    rig.stop("p");
    let _ = std::process::Command::new("umount")
        .arg(publish.join("from-host"))
        .status();
    rig.stop("plugin");
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
    (seen_in_task, seen_on_host)
}

pub(crate) fn tmpfs(at: &Path) {
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "t"])
        .arg(at)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn private_propagation_isolates_the_task() {
    if !require_root() {
        return;
    }
    assert_eq!(propagation("private"), (false, false));
}

#[test]
fn host_to_task_propagation_lets_host_mounts_in() {
    if !require_root() {
        return;
    }
    assert_eq!(propagation("host-to-task"), (true, false));
}

#[test]
fn bidirectional_propagation_goes_both_ways() {
    if !require_root() {
        return;
    }
    assert_eq!(propagation("bidirectional"), (true, true));
}

#[test]
fn bad_mounts_are_refused_at_job_run() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = rig.run_job_output(
        "bidi.hcl",
        &consumer("bidi", "true", "propagation_mode = \"bidirectional\"", true),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bidi.hcl:") && err.contains("bidirectional"),
        "{err}"
    );
    assert!(err.contains("read-only"), "{err}");

    let hcl = consumer("dots", "true", "", false).replace("\"/data\"", "\"/data/../../etc\"");
    let out = rig.run_job_output("dots.hcl", &hcl);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dots.hcl:") && err.contains("\"..\""), "{err}");

    let hcl = consumer("var", "true", "", false).replace("\"/data\"", "\"${NOPE}/data\"");
    let out = rig.run_job_output("var.hcl", &hcl);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("${NOPE} names no variable"), "{err}");
    let jobs = rig.client().job_status("").unwrap().jobs;
    assert!(jobs.is_empty(), "refused jobs leave no trace: {jobs:?}");
}

#[test]
fn a_killed_plugin_task_restarts_and_its_health_shows_in_job_status() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let job = rig.job("plugin");
    let alloc = job.allocs[0].id.clone();
    let pid = rig.task("plugin", &alloc).pid;
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let job = rig.wait_job("plugin", "a restart and healthy again", |j| {
        let t = &j.allocs[0].tasks[0];
        t.restarts == 1
            && t.state == "running"
            && t.events
                .last()
                .is_some_and(|e| e.message.contains("became healthy"))
    });
    let events: Vec<String> = job.allocs[0].tasks[0]
        .events
        .iter()
        .map(|e| format!("{}: {}", e.kind, e.message))
        .collect();
    let position = |needle: &str| {
        events
            .iter()
            .position(|e| e.contains(needle))
            .unwrap_or_else(|| panic!("no event {needle:?} in {events:#?}"))
    };
    assert!(position("killed by signal 9") < position("restart 1"));
    assert!(position("killed by signal 9") < position("became unhealthy"));
    assert!(position("became unhealthy") < events.len() - 1);
    assert_ne!(job.allocs[0].tasks[0].pid, pid);
    rig.wait_plugin_healthy();
    let status = rig.ok(&["job", "status", "plugin"]);
    assert!(status.contains("became unhealthy"), "{status}");
    rig.stop("plugin");
}

#[test]
fn a_plugin_job_stops_after_the_claims_on_its_volumes() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let allocs = rig.run_job("app.hcl", &consumer("app", "sleep 600", "", false));
    rig.wait_running("app", &allocs[0]);
    rig.ok(&["job", "stop", "plugin"]);
    let job = rig.wait_job("plugin", "the stop to wait for claims", |j| {
        j.allocs[0].message.contains("waiting for the claims")
    });
    assert_eq!(job.allocs[0].tasks[0].state, "running");
    assert!(job.allocs[0].message.contains(allocs[0].as_str()));
    rig.stop("app");
    rig.wait_job("plugin", "the plugin to stop", |j| j.status == "dead");
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
    let status = rig.ok(&["volume", "status", "v1"]);
    assert!(!status.contains(allocs[0].as_str()), "{status}");
}

#[test]
fn an_agent_restart_readopts_running_tasks() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    // `exec`: Debian's sh forks a `-c` script's last command, and it may
    // do so after the task is running, so that the processes counted below
    // would grow by the sleep with no task started twice (seen once in a
    // full run under load: [sh] before the restart, [sh, sleep] after).
    let allocs = rig.run_job("app.hcl", &consumer("app", "exec sleep 600", "", false));
    let app_pid = rig.wait_running("app", &allocs[0]);
    let plugin_alloc = rig.job("plugin").allocs[0].id.clone();
    let plugin_pid = rig.task("plugin", &plugin_alloc).pid;
    let app_processes = alloc_processes(&allocs[0]);
    let plugin_processes = alloc_processes(&plugin_alloc);

    rig.agent.sigkill();
    rig.agent.restart();
    rig.wait_plugin_healthy();
    let job = rig.wait_job("app", "re-adoption", |j| {
        j.allocs[0].tasks[0]
            .events
            .iter()
            .any(|e| e.kind == "adopted")
    });
    assert_eq!(job.allocs[0].tasks[0].pid, app_pid);
    assert_eq!(job.allocs[0].tasks[0].restarts, 0);
    assert_eq!(rig.task("plugin", &plugin_alloc).pid, plugin_pid);
    assert_eq!(
        alloc_processes(&allocs[0]),
        app_processes,
        "never started twice"
    );
    assert_eq!(alloc_processes(&plugin_alloc), plugin_processes);

    // A graceful restart too: the tasks keep running.
    assert_eq!(rig.agent.sigterm(), 0);
    rig.agent.restart();
    rig.wait_plugin_healthy();
    assert_eq!(rig.task("app", &allocs[0]).pid, app_pid);

    rig.stop("app");
    rig.stop("plugin");
    assert!(alloc_processes(&allocs[0]).is_empty());
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
}

#[test]
fn an_adopted_task_that_dies_is_noticed_while_a_client_keeps_asking() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::start();
    let allocs = rig.run_job("app.hcl", &consumer("app", "sleep 600", "", false));
    let app_pid = rig.wait_running("app", &allocs[0]);
    rig.agent.sigkill();
    rig.agent.restart();
    rig.wait_job("app", "re-adoption", |j| {
        j.allocs[0].tasks[0]
            .events
            .iter()
            .any(|e| e.kind == "adopted")
    });
    // Not the agent's child: no SIGCHLD tells of its end. `wait_job` asks
    // for the status every 20 ms, and each question is a turn of the
    // agent's loop; the look at adopted tasks must still come.
    let pid = libc::pid_t::try_from(app_pid).unwrap();
    // SAFETY: kill(2) with plain integers.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let job = rig.wait_job("app", "the adopted task's end to be noticed", |j| {
        j.allocs[0].tasks[0].state == "dead"
    });
    assert!(job.allocs[0].tasks[0].failed, "{job:#?}");
    rig.stop("app");
    rig.stop("plugin");
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
}

#[test]
fn a_task_gets_nomads_environment_and_never_sees_the_control_socket() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let control = rig.agent.socket.display().to_string();
    let hcl = format!(
        r#"
job "env" {{
  type = "batch"
  group "g" {{
    count = 2
    task "t" {{
      driver = "exec"
      env {{
        GREETING = "hi from ${{NOMAD_GROUP_NAME}}"
      }}
      config {{
        command = "/bin/sh"
        args    = ["-c", "echo $NOMAD_JOB_NAME $NOMAD_TASK_NAME $NOMAD_ALLOC_INDEX $1 \"$GREETING\"; pwd; test -S {control} && echo socket || echo no-socket", "sh", "${{NOMAD_ALLOC_ID}}"]
      }}
    }}
  }}
}}
"#
    );
    let allocs = rig.run_job("env.hcl", &hcl);
    assert_eq!(allocs.len(), 2);
    rig.wait_job("env", "both tasks to finish", |j| {
        j.allocs.iter().all(|a| a.status == "complete")
    });
    let mut indexes = Vec::new();
    for alloc in &allocs {
        let log = rig.ok(&["alloc", "logs", alloc, "t"]);
        let lines: Vec<&str> = log.lines().collect();
        let words: Vec<&str> = lines[0].split(' ').collect();
        assert_eq!(&words[..2], ["env", "t"]);
        indexes.push(words[2].to_string());
        assert_eq!(words[3], alloc.as_str());
        assert_eq!(&words[4..], ["hi", "from", "g"]);
        assert_eq!(lines[1], "/", "an exec task starts at its root");
        assert_eq!(lines[2], "no-socket");
    }
    indexes.sort();
    assert_eq!(indexes, ["0", "1"]);
    // The socket is still there for everyone else.
    assert!(rig.agent.try_status().is_ok());
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
}

#[test]
fn a_failing_task_is_restarted_per_policy_then_fails_its_alloc() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = r#"
job "flaky" {
  group "g" {
    restart {
      attempts = 2
      interval = "1m"
      delay    = "100ms"
      mode     = "fail"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo run >> $NOMAD_ALLOC_DIR/runs; exit 3"]
      }
    }
  }
}
"#;
    let allocs = rig.run_job("flaky.hcl", hcl);
    let job = rig.wait_job("flaky", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    let task = &job.allocs[0].tasks[0];
    assert_eq!(task.restarts, 2);
    assert!(task.failed);
    assert!(
        job.allocs[0].message.contains("restart policy exhausted"),
        "{job:#?}"
    );
    let runs = fs::read_to_string(
        rig.agent
            .data_dir
            .join("alloc")
            .join(&allocs[0])
            .join("alloc/runs"),
    )
    .unwrap();
    assert_eq!(runs.lines().count(), 3);
    let kinds: Vec<&str> = task.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "terminated").count(),
        3,
        "{kinds:?}"
    );
}

#[test]
fn a_plugin_that_never_becomes_healthy_is_killed() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = r#"
job "mute" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      csi_plugin {
        id             = "mute"
        type           = "node"
        health_timeout = "1s"
      }
      kill_timeout = "1s"
    }
  }
}
"#;
    rig.run_job("mute.hcl", hcl);
    let job = rig.wait_job("mute", "the plugin to be killed", |j| {
        j.allocs[0].status == "failed"
    });
    let task = &job.allocs[0].tasks[0];
    assert!(
        task.events
            .iter()
            .any(|e| e.message.contains("did not become healthy within")),
        "{task:#?}"
    );
    assert!(rig.agent.try_plugin("mute").is_err(), "never registered");
}

#[test]
fn host_volumes_mount_without_csi() {
    if !require_root() {
        return;
    }
    let agent = Agent::start(&[]);
    let scratch = agent.dir.mkdir("scratch");
    let certs = agent.dir.mkdir("certs");
    fs::write(certs.join("ca.pem"), "cert\n").unwrap();
    let mut config = config_text(&agent.data_dir, &[]);
    config.push_str(&format!(
        "host_volume \"scratch\" {{\n  path = {:?}\n}}\nhost_volume \"certs\" {{\n  path = {:?}\n  read_only = true\n}}\n",
        scratch.display().to_string(),
        certs.display().to_string()
    ));
    agent.write_config(&config);
    agent.sighup();
    agent.wait_for_log("SIGHUP: reloaded", WAIT);
    let rig = Rig {
        backing: agent.dir.join("backing"),
        agent,
    };
    let hcl = r#"
job "host" {
  type = "batch"
  group "g" {
    volume "scratch" {
      type   = "host"
      source = "scratch"
    }
    volume "certs" {
      type   = "host"
      source = "certs"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "cat /srv/certs/ca.pem; echo data > /srv/scratch/out; touch /srv/certs/x 2>/dev/null || echo ro"]
      }
      volume_mount {
        volume      = "scratch"
        destination = "/srv/scratch"
      }
      volume_mount {
        volume      = "certs"
        destination = "${NOMAD_TASK_DIR}/../srv/certs"
      }
    }
  }
}
"#;
    // `..` is refused even after interpolation.
    let out = rig.run_job_output("host.hcl", hcl);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let hcl = hcl.replace("${NOMAD_TASK_DIR}/../srv/certs", "/srv/certs");
    let allocs = rig.run_job("host.hcl", &hcl);
    rig.wait_job("host", "the task to finish", |j| {
        j.allocs[0].status == "complete"
    });
    assert_eq!(rig.ok(&["alloc", "logs", &allocs[0], "t"]), "cert\nro\n");
    assert_eq!(fs::read_to_string(scratch.join("out")).unwrap(), "data\n");

    let missing = hcl.replace("source = \"scratch\"", "source = \"nope\"");
    let out = rig.run_job_output("missing.hcl", &missing);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("no host_volume \"nope\""),
        "{}",
        text(&out)
    );
}

#[test]
fn an_updated_plugin_job_replaces_the_old_alloc_once_healthy() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let old = rig.job("plugin").allocs[0].id.clone();
    let allocs = rig.run_job("app.hcl", &consumer("app", "sleep 600", "", false));
    rig.wait_running("app", &allocs[0]);
    // A new version of the job: one more restart attempt.
    let new = rig.run_job("plugin.hcl", &rig.plugin_job("4", "1s"));
    assert_eq!(new.len(), 1);
    assert_ne!(new[0], old);
    let job = rig.wait_job("plugin", "the old alloc to stop", |j| {
        j.allocs
            .iter()
            .any(|a| a.id == old && a.status == "complete")
    });
    let replacement = job.allocs.iter().find(|a| a.id == new[0]).unwrap();
    assert_eq!(replacement.status, "running");
    let plugin = rig.agent.plugin(PLUGIN_ID);
    assert!(healthy(&plugin));
    assert_eq!(plugin.source, format!("task {}/hostpath", new[0]));
    // The claim made through the old alloc is released through the new.
    rig.stop("app");
    rig.wait_no_mounts_left();
    // Running the same spec again changes nothing.
    let out = rig.run_job_output("plugin.hcl", &rig.plugin_job("4", "1s"));
    assert!(text(&out).contains("already running"), "{}", text(&out));
    rig.stop("plugin");
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
}

#[test]
fn per_alloc_volumes_give_each_instance_its_own() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    for i in 0..2 {
        let spec = VOLUME.replace("\"v1\"", &format!("\"w[{i}]\""));
        let path = rig.agent.dir.join(&format!("w{i}.hcl"));
        fs::write(&path, spec).unwrap();
        rig.ok(&["volume", "create", &path.display().to_string()]);
    }
    let hcl = consumer(
        "many",
        "echo $NOMAD_ALLOC_INDEX > /data/index; sleep 600",
        "",
        false,
    )
    .replace("group \"app\" {", "group \"app\" {\n    count = 2")
    .replace(
        "source          = \"v1\"",
        "source          = \"w\"\n      per_alloc       = true",
    );
    let allocs = rig.run_job("many.hcl", &hcl);
    assert_eq!(allocs.len(), 2);
    for alloc in &allocs {
        rig.wait_running("many", alloc);
    }
    for i in 0..2 {
        // The shell creates the file before it writes the line: wait for
        // the whole line.
        let index = rig.backing.join(format!("volumes/w[{i}]/index"));
        let read = || fs::read_to_string(&index).unwrap_or_default();
        let start = Instant::now();
        while !read().ends_with('\n') && start.elapsed() < WAIT {
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(read(), format!("{i}\n"));
    }
    rig.stop("many");
    rig.wait_no_mounts_left();
}

#[test]
fn refused_claims_are_retried_and_terminal_ones_fail_the_alloc() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let first = rig.run_job("a.hcl", &consumer("a", "sleep 600", "", false));
    rig.wait_running("a", &first[0]);
    // v1 is single-node-writer: a second writer waits for the first.
    let second = rig.run_job("b.hcl", &consumer("b", "sleep 600", "", false));
    let job = rig.wait_job("b", "a refused claim", |j| {
        j.allocs[0].tasks[0].events.iter().any(|e| {
            e.message.contains("already has a writer") && e.message.contains("retrying in")
        })
    });
    assert_eq!(job.allocs[0].status, "pending");
    assert_eq!(job.allocs[0].tasks[0].state, "pending");
    rig.stop("a");
    // Retries back off for at most 30 s; the first ones are short.
    rig.wait_running("b", &second[0]);
    rig.stop("b");

    let missing = consumer("c", "sleep 600", "", false).replace("\"v1\"", "\"nope\"");
    rig.run_job("c.hcl", &missing);
    let job = rig.wait_job("c", "the alloc to fail", |j| j.allocs[0].status == "failed");
    assert!(
        job.allocs[0]
            .message
            .contains("claim of volume \"nope\" failed"),
        "{job:#?}"
    );
    assert!(job.allocs[0].tasks.iter().all(|t| t.pid == 0 && t.failed));

    // A stopped job can be purged: it and its alloc dirs go.
    rig.ok(&["job", "stop", "-purge", "c"]);
    let start = Instant::now();
    while rig.client().job_status("c").is_ok() && start.elapsed() < WAIT {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(rig.client().job_status("c").is_err());
    assert!(!rig
        .agent
        .data_dir
        .join("alloc")
        .join(&job.allocs[0].id)
        .exists());
    rig.stop("plugin");
}

#[test]
fn an_updated_job_stops_the_old_alloc_before_the_new_one_claims() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let old = rig.run_job("app.hcl", &consumer("app", "exec sleep 600", "", false));
    let old_pid = rig.wait_running("app", &old[0]);
    let new = rig.run_job("app.hcl", &consumer("app", "exec sleep 601", "", false));
    assert_ne!(new, old);
    let new_pid = rig.wait_running("app", &new[0]);
    assert_ne!(new_pid, old_pid);
    assert_eq!(rig.alloc("app", &old[0]).status, "complete");
    assert!(alloc_processes(&old[0]).is_empty());
    rig.stop("app");
    rig.stop("plugin");
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
}

/// A job running one half of a split hostpath plugin (`mode` is
/// `controller` or `node`) as instance `mode` of plugin [`PLUGIN_ID`], on
/// the rig's base dir; in its own root, as [`Rig::plugin_job`]'s.
fn split_plugin_job(name: &str, mode: &str) -> String {
    hostpath_job(name, "plugin", mode, "", "")
}

/// Job `name` whose group `group` runs the hostpath plugin as an exec task
/// in `mode` (`monolith`, `controller` or `node`), as instance `mode` of
/// plugin [`PLUGIN_ID`]: the test binary bound read-only at
/// `/opt/csi-agent`, the rig's base dir at `/backing`. `group_extra` and
/// `task_extra` are inserted as written (a restart block, an env block).
fn hostpath_job(
    name: &str,
    group: &str,
    mode: &str,
    group_extra: &str,
    task_extra: &str,
) -> String {
    format!(
        r#"
job "{name}" {{
  group "{group}" {{
{group_extra}    volume "bin" {{
      type      = "host"
      source    = "csi-agent-bin"
      read_only = true
    }}
    volume "backing" {{
      type   = "host"
      source = "hostpath-backing"
    }}
    task "hostpath" {{
      driver = "exec"
{task_extra}      config {{
        command = "/opt/csi-agent/{bin}"
        args    = ["hostpath", "-strict", "-mode", "{mode}", "-endpoint", "${{CSI_ENDPOINT}}", "-base-dir", "/backing", "-node-id", "{NODE}"]
      }}
      volume_mount {{
        volume      = "bin"
        destination = "/opt/csi-agent"
      }}
      volume_mount {{
        volume      = "backing"
        destination = "/backing"
      }}
      csi_plugin {{
        id             = "{PLUGIN_ID}"
        type           = "{mode}"
        health_timeout = "10s"
      }}
    }}
  }}
}}
"#,
        bin = Path::new(bin()).file_name().unwrap().to_string_lossy(),
    )
}

#[test]
fn a_controller_job_and_a_node_job_make_one_plugin_that_a_task_s_volume_goes_through() {
    if !require_root() {
        return;
    }
    let rig = Rig::with_plugin_volumes("");
    rig.run_job(
        "controller.hcl",
        &split_plugin_job("controller", "controller"),
    );
    rig.run_job("nodes.hcl", &split_plugin_job("nodes", "node"));
    let status = rig.agent.wait_for_status(
        PLUGIN_ID,
        |s| s.controllers_healthy == 1 && s.nodes_healthy == 1,
        WAIT,
    );
    let sources: Vec<&str> = status.instances.iter().map(|i| i.source.as_str()).collect();
    assert_eq!(sources.len(), 2, "{status:#?}");
    assert!(
        sources.iter().all(|s| s.starts_with("task ")),
        "{sources:?}"
    );
    // A second node of the plugin is refused; it names the job that has it.
    let out = rig.run_job_output("more.hcl", &split_plugin_job("more", "node"));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "plugin \"{PLUGIN_ID}\" (node) is already provided by job \"nodes\""
        )),
        "{}",
        text(&out)
    );

    let vol = rig.agent.dir.join("v1.hcl");
    fs::write(&vol, VOLUME).unwrap();
    rig.ok(&["volume", "create", &vol.display().to_string()]);
    let script = "echo hello > /data/hello && sleep 600";
    let allocs = rig.run_job("app.hcl", &consumer("app", script, "", false));
    rig.wait_running("app", &allocs[0]);
    // The shell makes the file before it writes the line: wait for the
    // line, not the file.
    let hello = rig.backing.join("volumes/v1/hello");
    let start = Instant::now();
    while fs::read_to_string(&hello).unwrap_or_default() != "hello\n" && start.elapsed() < WAIT {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fs::read_to_string(&hello).unwrap(), "hello\n");
    rig.stop("app");
    rig.wait_no_mounts_left();

    // Each half stops with its job; the other stays.
    rig.stop("nodes");
    let status = rig
        .agent
        .wait_for_status(PLUGIN_ID, |s| s.instances.len() == 1, WAIT);
    assert_eq!(status.instances[0].type_, "controller");
    rig.stop("controller");
    assert!(rig.agent.try_plugin_status(PLUGIN_ID).is_err());
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
}

/// A job of `count` raw_exec sleeps, each asking for `cpu` MHz and
/// `memory` MiB.
fn sleepers(name: &str, count: u32, cpu: u32, memory: u64) -> String {
    format!(
        r#"job "{name}" {{
  group "g" {{
    count = {count}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["3600"]
      }}
      resources {{
        cpu    = {cpu}
        memory = {memory}
      }}
    }}
  }}
}}
"#
    )
}
