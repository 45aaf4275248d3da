//! The processes a benchmark measures: hostpath plugins and an agent, each
//! a real `csi-agent` process in a directory of the run, on real unix
//! sockets, mounting for real. `Drop` kills every process it started and
//! unmounts everything under the directory, also when a measurement
//! panics.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;
use csi_agent::csi::{Client, Endpoint};
use csi_agent::mount::{MountInfo, Mounter, Propagation, SysMounter, UnmountMode};
use csi_agent::proto::agent::{Health, PluginStatus};

/// The node ID every plugin reports.
pub const NODE: &str = "node1";

/// How long setup may wait for something that normally takes milliseconds
/// (a socket, a healthy plugin) before the benchmark gives up.
pub const SETUP_LIMIT: Duration = Duration::from_secs(60);

/// The directory of one benchmark, unmounted below and removed on drop.
pub struct BenchDir {
    pub path: PathBuf,
    keep: bool,
}

impl BenchDir {
    pub fn new(root: &Path, name: &str, keep: bool) -> BenchDir {
        let path = root.join(name);
        let dir = BenchDir { path, keep };
        dir.unmount_all();
        let _ = fs::remove_dir_all(&dir.path);
        fs::create_dir_all(&dir.path).expect("create the benchmark dir");
        dir
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }

    pub fn mkdir(&self, p: &str) -> PathBuf {
        let path = self.join(p);
        fs::create_dir_all(&path).expect("create a benchmark subdir");
        path
    }

    /// Unmounts everything under the directory, deepest first.
    pub fn unmount_all(&self) {
        let Ok(info) = MountInfo::read() else { return };
        let mut points: Vec<PathBuf> = info
            .under(&self.path)
            .map(|m| m.mount_point.clone())
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in points {
            let _ = SysMounter.unmount(&p, UnmountMode::Detach);
        }
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        self.unmount_all();
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
        // What the rig wrote and removed is on its way to the disk still
        // (with ext4's `discard`, the removal's discards too): flushed now,
        // it does not fall on the next row. After a storm's rig this takes
        // seconds.
        // SAFETY: sync(2) takes no arguments and cannot fail.
        unsafe { libc::sync() };
    }
}

/// Mount points under `dir` now.
pub fn mounts_under(dir: &Path) -> usize {
    MountInfo::read()
        .map(|info| info.under(dir).count())
        .unwrap_or(0)
}

/// Waits until `ready` holds, polling every `every`; panics with `what`
/// after [`SETUP_LIMIT`].
pub fn wait_until(what: &str, every: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < SETUP_LIMIT, "gave up waiting for {what}");
        thread::sleep(every);
    }
}

/// How a hostpath plugin slows down each RPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    None,
    /// `-test-faults` with the rule `* sleep=DUR`: every call sleeps on its
    /// own thread, so calls still overlap. The hook re-reads its rules file
    /// on each call; row C measures what that costs.
    Faults(Duration),
}

/// A `csi-agent hostpath` process.
pub struct Plugin {
    pub socket: PathBuf,
    pub base_dir: PathBuf,
    /// The node ID it reports: [`NODE`] unless [`Plugin::on_host`].
    node_id: String,
    log: PathBuf,
    faults: PathBuf,
    delay: Delay,
    bin: PathBuf,
    child: Option<Child>,
    /// Started with `-fence`: its detach of a node that still has the
    /// volume mounted cuts that node off.
    fence: bool,
}

impl Plugin {
    /// A plugin whose files live in `dir` and whose socket is `socket`;
    /// not started.
    pub fn new(bin: &Path, dir: &Path, socket: &Path, delay: Delay) -> Plugin {
        fs::create_dir_all(dir).expect("create the plugin dir");
        Plugin {
            socket: socket.to_path_buf(),
            base_dir: dir.join("base"),
            node_id: NODE.to_string(),
            log: dir.join("plugin.log"),
            faults: dir.join("faults"),
            delay,
            bin: bin.to_path_buf(),
            child: None,
            fence: false,
        }
    }

    /// The same plugin with `-fence`.
    pub fn fencing(mut self) -> Plugin {
        self.fence = true;
        self
    }

    /// The same plugin as a host of a cluster sees it: reporting
    /// `node_id`, on `base_dir` shared with the other hosts' plugins (one
    /// storage system).
    pub fn on_host(mut self, base_dir: &Path, node_id: &str) -> Plugin {
        self.base_dir = base_dir.to_path_buf();
        self.node_id = node_id.to_string();
        self
    }

    /// Starts the plugin and waits until its socket is there.
    pub fn start(&mut self) {
        self.spawn();
        let socket = self.socket.clone();
        wait_until("a plugin socket", Duration::from_millis(2), || {
            socket.exists()
        });
    }

    /// Starts the plugin process without waiting for anything.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the plugin is running already");
        own_mount(&self.base_dir.join("volumes"));
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the plugin log");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("hostpath")
            .arg("-endpoint")
            .arg(format!("unix://{}", self.socket.display()))
            .arg("-base-dir")
            .arg(&self.base_dir)
            .arg("-node-id")
            .arg(&self.node_id)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if self.fence {
            cmd.arg("-fence");
        }
        if let Delay::Faults(d) = self.delay {
            fs::write(&self.faults, format!("* sleep={}us\n", d.as_micros()))
                .expect("write the faults file");
            cmd.arg("-test-faults").arg(&self.faults);
        }
        self.child = Some(cmd.spawn().expect("start the hostpath plugin"));
    }

    /// SIGTERM, and waits: the plugin removes its socket.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions; the child is
            // not reaped yet, so the pid is its own.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
        }
    }

    pub fn client(&self) -> Client {
        Client::new(&Endpoint::from_path(&self.socket).expect("a valid socket path"))
            .with_timeout(Duration::from_secs(30))
    }
}

/// Makes `dir` (hostpath's volumes) a mount of its own, private, unless
/// it is one: as a storage system's volumes are, rather than directories
/// of `/`. hostpath's NodeStage bind-mounts a volume's directory, and the
/// kernel's bind walks every mount below the source's mount, under the
/// mount namespace's lock (`has_locked_children`): from `/`, that is every
/// mount the agent made, 20,000 at P2L's scale, where `perf` put 40% of
/// all CPU in that walk and in waiting for its lock. No real plugin binds
/// its volumes from `/`. [`BenchDir`]'s drop unmounts it with the rest.
fn own_mount(dir: &Path) {
    fs::create_dir_all(dir).expect("create the plugin's volumes dir");
    if csi_agent::mount::is_mount_point(dir).expect("check the plugin's volumes dir") {
        return;
    }
    SysMounter
        .bind(dir, dir, false)
        .expect("bind the plugin's volumes dir onto itself");
    SysMounter
        .set_propagation(dir, Propagation::Private)
        .expect("make the plugin's volumes dir private");
}

impl Drop for Plugin {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The config of an agent with `data_dir`, `heartbeat` and a monolith
/// plugin block per `(id, socket)`.
pub fn agent_config(data_dir: &Path, heartbeat: Duration, plugins: &[(String, PathBuf)]) -> String {
    let mut text = format!(
        "data_dir         = {:?}\nplugin_heartbeat = \"{}ms\"\n",
        data_dir.display().to_string(),
        heartbeat.as_millis()
    );
    for (id, socket) in plugins {
        text.push_str(&format!(
            "\nplugin {id:?} {{\n  socket = {:?}\n  type   = \"monolith\"\n}}\n",
            socket.display().to_string()
        ));
    }
    text
}

/// A `csi-agent agent -config FILE` process in a process group of its own.
pub struct Agent {
    pub data_dir: PathBuf,
    pub socket: PathBuf,
    config: PathBuf,
    log: PathBuf,
    bin: PathBuf,
    child: Option<Child>,
    /// Where the agent records its trace points, if it does.
    trace: Option<PathBuf>,
    /// The sockets `systemd-socket-activate` binds and hands the agent,
    /// by path and name; none: the agent binds its own.
    handed: Vec<(PathBuf, &'static str)>,
}

impl Agent {
    /// An agent whose config, data dir and log live in `dir`; not started.
    pub fn new(bin: &Path, dir: &Path, config_text: impl FnOnce(&Path) -> String) -> Agent {
        fs::create_dir_all(dir).expect("create the agent dir");
        let data_dir = dir.join("data");
        let config = dir.join("agent.hcl");
        fs::write(&config, config_text(&data_dir)).expect("write the agent config");
        Agent {
            socket: data_dir.join("control.sock"),
            data_dir,
            config,
            log: dir.join("agent.log"),
            bin: bin.to_path_buf(),
            child: None,
            trace: None,
            handed: Vec::new(),
        }
    }

    /// Every later start runs the agent as systemd's socket units do:
    /// under `systemd-socket-activate`, which binds the control socket
    /// and `others` (path and `FileDescriptorName=`) and hands them over.
    pub fn socket_activated(&mut self, others: &[(PathBuf, &'static str)]) {
        self.handed = vec![(self.socket.clone(), "control")];
        self.handed.extend(others.iter().cloned());
    }

    /// Starts the agent and waits until its control socket answers.
    pub fn start(&mut self) {
        self.spawn();
        let socket = self.socket.clone();
        wait_until("the control socket", Duration::from_millis(2), || {
            AgentClient::connect(&socket)
                .and_then(|c| c.plugin_status(""))
                .is_ok()
        });
    }

    /// Starts the agent process without waiting for anything.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the agent is running already");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the agent log");
        let mut command = if self.handed.is_empty() {
            let mut command = Command::new(&self.bin);
            if let Some(trace) = &self.trace {
                command.env(csi_agent::trace::TRACE_ENV, trace);
            }
            command
        } else {
            // The activator binds the sockets at once and starts the agent
            // at the first connection; it passes on only the variables
            // named with -E.
            fs::create_dir_all(&self.data_dir).expect("create the data dir");
            let mut command = Command::new("systemd-socket-activate");
            for (path, _) in &self.handed {
                command.arg("-l").arg(path);
            }
            let names: Vec<&str> = self.handed.iter().map(|(_, name)| *name).collect();
            command.arg(format!("--fdname={}", names.join(":")));
            for name in ["RUST_LOG", "PATH"] {
                if let Ok(value) = std::env::var(name) {
                    command.arg("-E").arg(format!("{name}={value}"));
                }
            }
            if let Some(trace) = &self.trace {
                command.arg("-E").arg(format!(
                    "{}={}",
                    csi_agent::trace::TRACE_ENV,
                    trace.display()
                ));
            }
            command.arg(&self.bin);
            command
        };
        let child = command
            .arg("agent")
            .arg("-config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start the agent");
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the agent runs").id()
    }

    /// The agent started next records its trace points to `file` (see
    /// `csi_agent::trace`), written when it stops.
    pub fn trace_to(&mut self, file: &Path) {
        self.trace = Some(file.to_path_buf());
    }

    /// SIGTERM, and waits until the agent has shut down.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions; the child
            // is not reaped yet, so its PID is still its own.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
        }
    }

    /// Adds `text` to the agent's config file, for the next start or
    /// SIGHUP.
    pub fn append_config(&self, text: &str) {
        let mut config = fs::read_to_string(&self.config).expect("read the agent config");
        config.push_str(text);
        fs::write(&self.config, config).expect("write the agent config");
    }

    /// Sends `signal` to the running agent (SIGSTOP freezes it as a host
    /// cut off: no keep-alive leaves it; SIGCONT thaws it).
    pub fn signal(&self, signal: libc::c_int) {
        if let Some(child) = &self.child {
            // SAFETY: kill has no memory-safety preconditions; the child
            // is not reaped yet, so its PID is still its own.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        }
    }

    /// SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn client(&self) -> AgentClient {
        AgentClient::connect(&self.socket).expect("connect to the agent")
    }

    /// Every registered plugin ID, with its instances.
    pub fn plugins(&self) -> Vec<PluginStatus> {
        self.client()
            .plugin_status("")
            .map(|r| r.plugins)
            .unwrap_or_default()
    }

    /// Waits until `n` plugins are registered and healthy.
    pub fn wait_healthy(&self, n: usize) {
        wait_until(
            &format!("{n} healthy plugins"),
            Duration::from_millis(5),
            || self.plugins().iter().filter(|p| is_healthy(p)).count() == n,
        );
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions; the group is
            // the one this agent leads, and it is not reaped yet.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
        }
    }
}

pub fn is_healthy(p: &PluginStatus) -> bool {
    p.health.enum_value() == Ok(Health::HEALTHY)
}
