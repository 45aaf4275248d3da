//! The agent harness: a real `csi-agent agent` process with its config, data
//! dir and log in a test dir, reached through the real control API client,
//! and driven with real signals. The agent runs in a process group of its
//! own, so that `Drop` kills it together with any child it started (the
//! hostpath plugin of `-dev`), even when an assertion failed. An agent
//! may run in a host of a [`crate::netns::Net`] ([`Agent::start_in_netns`]):
//! in its network namespace only, so its control socket and mounts are
//! the test's.
//!
//! Also the checks the agent tests share: health predicates, the events of
//! a status, a command's one-line failure, a command run with a time limit,
//! hostpath processes in /proc, and a JSON syntax check.

use std::cell::OnceCell;
use std::fs;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::{self, AgentClient};
use csi_agent::proto::agent::{Health, Plugin, PluginStatus};

use crate::util::{bin, TestDir};

/// How long a test waits for something that should happen. Generous on
/// purpose: no test asserts how fast anything is.
pub const WAIT: Duration = Duration::from_secs(10);

/// How often [`Agent::wait_for`] and the tests that wait for a condition ask.
pub const POLL: Duration = Duration::from_millis(10);

/// The heartbeat of test configs: short, so that a killed plugin is noticed
/// soon, but not so short that heartbeats crowd the log.
pub const HEARTBEAT: &str = "200ms";

/// How long a graceful stop may take: the agent's own shutdown bound
/// (10 s for its plugin threads) plus the 5 s it gives its dev plugin.
const STOP_LIMIT: Duration = Duration::from_secs(30);

/// A `plugin "<id>" { ... }` block of a test config.
#[derive(Clone, Debug)]
pub struct PluginBlock {
    pub id: String,
    pub socket: PathBuf,
    pub health_timeout: Option<String>,
}

/// A monolith plugin block for the plugin at `socket`, with the default
/// `health_timeout`.
pub fn block(id: &str, socket: &Path) -> PluginBlock {
    PluginBlock {
        id: id.to_string(),
        socket: socket.to_path_buf(),
        health_timeout: None,
    }
}

impl PluginBlock {
    pub fn health_timeout(mut self, timeout: &str) -> PluginBlock {
        self.health_timeout = Some(timeout.to_string());
        self
    }
}

/// An agent config with `data_dir`, the test heartbeat and `plugins`.
pub fn config_text(data_dir: &Path, plugins: &[PluginBlock]) -> String {
    let mut text = format!(
        "data_dir         = {:?}\nplugin_heartbeat = {HEARTBEAT:?}\n",
        data_dir.display().to_string()
    );
    for p in plugins {
        text.push_str(&format!(
            "\nplugin {:?} {{\n  socket = {:?}\n  type   = \"monolith\"\n",
            p.id,
            p.socket.display().to_string()
        ));
        if let Some(timeout) = &p.health_timeout {
            text.push_str(&format!("  health_timeout = {timeout:?}\n"));
        }
        text.push_str("}\n");
    }
    text
}

/// True if the plugin is healthy.
pub fn healthy(p: &Plugin) -> bool {
    p.health.enum_value() == Ok(Health::HEALTHY)
}

/// True if the plugin is unhealthy.
pub fn unhealthy(p: &Plugin) -> bool {
    p.health.enum_value() == Ok(Health::UNHEALTHY)
}

/// True if the plugin is pending.
pub fn pending(p: &Plugin) -> bool {
    p.health.enum_value() == Ok(Health::PENDING)
}

/// A running (or stopped) `csi-agent agent` in its own test dir.
pub struct Agent {
    pub dir: TestDir,
    pub data_dir: PathBuf,
    /// The config file (unused by `-dev` without a config).
    pub config: PathBuf,
    /// `data_dir/control.sock`.
    pub socket: PathBuf,
    log_path: PathBuf,
    args: Vec<String>,
    /// `-dev` without `-data-dir`: the agent picks the data dir, under
    /// `$TMPDIR` (the test dir) and named for its pid.
    temporary: bool,
    /// The network namespace every start joins, if not the test's.
    netns: Option<PathBuf>,
    child: Option<Child>,
    /// The process group of every start: each holds an agent and the
    /// children it started.
    groups: Vec<libc::pid_t>,
    client: OnceCell<AgentClient>,
    /// Environment variables every later start of the agent gets.
    pub env: Vec<(String, String)>,
}

impl Agent {
    /// Starts `csi-agent agent -config FILE` with `plugins`, and waits until
    /// its control socket accepts connections.
    pub fn start(plugins: &[PluginBlock]) -> Agent {
        let mut agent = Agent::new(|a| vec!["agent".into(), "-config".into(), a.config_arg()]);
        agent.rewrite_config(plugins);
        agent.launch();
        agent
    }

    /// Starts an agent whose config is the harness's (no plugins) with
    /// `extra` appended (e.g. a `cluster` block and a `node_name`).
    pub fn start_with_config(extra: &str) -> Agent {
        Agent::start_configured(None, &[], extra)
    }

    /// Starts an agent with `plugins` and `extra` (as
    /// [`Agent::start_with_config`]) in the network namespace at `netns`
    /// ([`crate::netns::Net::netns_path`]), and so again at every restart.
    pub fn start_in_netns(netns: &Path, plugins: &[PluginBlock], extra: &str) -> Agent {
        Agent::start_configured(Some(netns), plugins, extra)
    }

    fn start_configured(netns: Option<&Path>, plugins: &[PluginBlock], extra: &str) -> Agent {
        let mut agent = Agent::new(|a| vec!["agent".into(), "-config".into(), a.config_arg()]);
        agent.netns = netns.map(Path::to_path_buf);
        let mut text = config_text(&agent.data_dir, plugins);
        text.push_str(extra);
        agent.write_config(&text);
        agent.launch();
        agent
    }

    /// Like [`Agent::start`], with the data dir at `data_dir` (which may
    /// exist, e.g. a small file system the test mounted) rather than in
    /// the test dir.
    pub fn start_in(data_dir: &Path, plugins: &[PluginBlock]) -> Agent {
        let mut agent = Agent::new(|a| vec!["agent".into(), "-config".into(), a.config_arg()]);
        agent.data_dir = data_dir.to_path_buf();
        agent.socket = data_dir.join("control.sock");
        agent.rewrite_config(plugins);
        agent.launch();
        agent
    }

    /// Like [`Agent::start_in`], with no plugin blocks and `extra` appended
    /// to the config from the first start: an agent that starts on a data
    /// dir whose jobs use host volumes must know them at once, or it fails
    /// the tasks it starts again.
    pub fn start_in_with_config(data_dir: &Path, extra: &str) -> Agent {
        let mut agent = Agent::new(|a| vec!["agent".into(), "-config".into(), a.config_arg()]);
        agent.data_dir = data_dir.to_path_buf();
        agent.socket = data_dir.join("control.sock");
        let mut text = config_text(&agent.data_dir, &[]);
        text.push_str(extra);
        agent.write_config(&text);
        agent.launch();
        agent
    }

    /// Starts `csi-agent agent -dev -data-dir DIR`, and waits until its
    /// control socket accepts connections.
    pub fn start_dev() -> Agent {
        let mut agent = Agent::new(|a| {
            vec![
                "agent".into(),
                "-dev".into(),
                "-data-dir".into(),
                a.data_dir.display().to_string(),
            ]
        });
        agent.launch();
        agent
    }

    /// Starts `csi-agent agent -dev` with `$TMPDIR` set to the test dir,
    /// and waits until its control socket (in the temporary data dir it
    /// creates there) accepts connections.
    pub fn start_dev_temporary() -> Agent {
        let mut agent = Agent::new(|_| vec!["agent".into(), "-dev".into()]);
        agent.temporary = true;
        agent.launch();
        agent
    }

    fn new(args: impl FnOnce(&Agent) -> Vec<String>) -> Agent {
        let dir = TestDir::new();
        let data_dir = dir.join("data");
        let mut agent = Agent {
            config: dir.join("agent.hcl"),
            socket: data_dir.join("control.sock"),
            log_path: dir.join("agent.log"),
            data_dir,
            dir,
            args: Vec::new(),
            temporary: false,
            netns: None,
            child: None,
            groups: Vec::new(),
            client: OnceCell::new(),
            env: Vec::new(),
        };
        agent.args = args(&agent);
        agent
    }

    fn config_arg(&self) -> String {
        self.config.display().to_string()
    }

    /// The command line of the agent, without the program.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Spawns the agent (its stderr appended to the log) and waits for its
    /// control socket.
    fn launch(&mut self) {
        assert!(self.child.is_none(), "the agent is already running");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap();
        let stale = socket_file(&self.socket);
        let mut cmd = Command::new(bin());
        if let Some(netns) = &self.netns {
            crate::netns::enter(&mut cmd, netns);
        }
        let child = cmd
            .args(&self.args)
            .env("RUST_LOG", "debug")
            .env("TMPDIR", &self.dir.path)
            .env_remove(client::ADDRESS_ENV)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start the agent");
        self.groups.push(child.id() as libc::pid_t);
        if self.temporary {
            // The name `agent::temp_data_dir` gives it.
            self.data_dir = self.dir.join(&format!("csi-agent-dev-{}", child.id()));
            self.socket = self.data_dir.join("control.sock");
        }
        self.child = Some(child);
        self.client = OnceCell::new();
        self.wait_for_socket(stale);
    }

    /// Waits until the control socket accepts connections. A socket left
    /// by a killed agent refuses them until the new agent binds its own,
    /// except while a child the killed agent was forking still holds it
    /// (until the child execs): so the socket must also be another file
    /// than `stale`, the one there before the launch.
    fn wait_for_socket(&mut self, stale: Option<(u64, u64, i64, i64)>) {
        let start = Instant::now();
        while (stale.is_some() && socket_file(&self.socket) == stale)
            || UnixStream::connect(&self.socket).is_err()
        {
            if let Some(status) = self.child_mut().try_wait().unwrap() {
                panic!(
                    "the agent exited before serving ({status})\n{}",
                    self.log_dump()
                );
            }
            if start.elapsed() > WAIT {
                panic!(
                    "the agent's control socket {} never accepted connections\n{}",
                    self.socket.display(),
                    self.log_dump()
                );
            }
            // The socket appears once: a short poll costs little.
            thread::sleep(POLL);
        }
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("the agent is not running")
    }

    /// The agent's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the agent is not running").id()
    }

    fn client(&self) -> Result<&AgentClient, client::Error> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let client = AgentClient::connect(&self.socket)?;
        Ok(self.client.get_or_init(|| client))
    }

    /// Every registered plugin instance, or the client's error.
    pub fn try_status(&self) -> Result<Vec<Plugin>, client::Error> {
        let plugins = self.client()?.plugin_status("")?.plugins;
        Ok(plugins.into_iter().flat_map(|p| p.instances).collect())
    }

    /// Plugin `id` with its instances, or the client's error (`Refused`
    /// with `NOT_FOUND` for an unknown ID).
    pub fn try_plugin_status(&self, id: &str) -> Result<PluginStatus, client::Error> {
        let mut plugins = self.client()?.plugin_status(id)?.plugins;
        assert_eq!(plugins.len(), 1, "a status for {id:?} names one plugin");
        Ok(plugins.remove(0))
    }

    /// The one instance of plugin `id` (a monolith, or a plugin with one
    /// instance), or the client's error.
    pub fn try_plugin(&self, id: &str) -> Result<Plugin, client::Error> {
        let mut instances = self.try_plugin_status(id)?.instances;
        assert_eq!(instances.len(), 1, "plugin {id:?} has one instance");
        Ok(instances.remove(0))
    }

    /// Every registered plugin.
    #[track_caller]
    pub fn status(&self) -> Vec<Plugin> {
        self.try_status()
            .unwrap_or_else(|err| panic!("plugin status: {err}\n{}", self.log_dump()))
    }

    /// One plugin.
    #[track_caller]
    pub fn plugin(&self, id: &str) -> Plugin {
        self.try_plugin(id)
            .unwrap_or_else(|err| panic!("plugin status {id}: {err}\n{}", self.log_dump()))
    }

    /// Polls plugin `id` until `predicate` holds, and returns it; panics
    /// with the last status and the agent's log after `timeout`. A plugin
    /// that is not registered (yet) does not satisfy any predicate.
    #[track_caller]
    pub fn wait_for(
        &self,
        id: &str,
        predicate: impl Fn(&Plugin) -> bool,
        timeout: Duration,
    ) -> Plugin {
        let start = Instant::now();
        loop {
            let last = match self.try_plugin(id) {
                Ok(p) if predicate(&p) => return p,
                Ok(p) => format!("{p:#?}"),
                Err(err) => format!("error: {err}"),
            };
            if start.elapsed() > timeout {
                panic!(
                    "plugin {id} did not get there within {timeout:?}; last status:\n{last}\n{}",
                    self.log_dump()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Polls plugin `id`'s status (all its instances) until `predicate`
    /// holds, and returns it; panics with the last status and the agent's
    /// log after `timeout`.
    #[track_caller]
    pub fn wait_for_status(
        &self,
        id: &str,
        predicate: impl Fn(&PluginStatus) -> bool,
        timeout: Duration,
    ) -> PluginStatus {
        let start = Instant::now();
        loop {
            let last = match self.try_plugin_status(id) {
                Ok(p) if predicate(&p) => return p,
                Ok(p) => format!("{p:#?}"),
                Err(err) => format!("error: {err}"),
            };
            if start.elapsed() > timeout {
                panic!(
                    "plugin {id} did not get there within {timeout:?}; last status:\n{last}\n{}",
                    self.log_dump()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Polls the agent's log until it contains `needle`; panics with the
    /// log after `timeout`.
    #[track_caller]
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            if start.elapsed() > timeout {
                panic!("the agent never logged {needle:?}\n{}", self.log_dump());
            }
            thread::sleep(POLL);
        }
    }

    /// Writes a new config with `plugins` (the same data dir); the agent
    /// reads it at the next start or SIGHUP.
    pub fn rewrite_config(&self, plugins: &[PluginBlock]) {
        self.write_config(&config_text(&self.data_dir, plugins));
    }

    /// Writes `text` as the config file.
    pub fn write_config(&self, text: &str) {
        fs::write(&self.config, text).unwrap();
    }

    /// Sends `signal` to the agent alone.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill has no memory-safety preconditions; the pid is our
        // child's, not yet reaped, so it cannot name another process.
        let ret = unsafe { libc::kill(pid, signal) };
        assert_eq!(ret, 0, "kill({pid}, {signal}) failed");
    }

    /// Sends SIGHUP: the agent reloads its config.
    pub fn sighup(&self) {
        self.signal(libc::SIGHUP);
    }

    /// Sends SIGTERM and waits for the agent to exit; its exit code. Panics
    /// if it does not exit within [`STOP_LIMIT`] or dies of a signal.
    #[track_caller]
    pub fn sigterm(&mut self) -> i32 {
        self.signal(libc::SIGTERM);
        self.exit_code()
    }

    /// Waits for the agent to exit, up to [`STOP_LIMIT`]; its exit code.
    /// Panics if it does not exit in time or dies of a signal.
    #[track_caller]
    pub fn exit_code(&mut self) -> i32 {
        let status = self.wait_exit(STOP_LIMIT);
        status
            .code()
            .unwrap_or_else(|| panic!("the agent died of {status}\n{}", self.log_dump()))
    }

    /// Kills the agent with SIGKILL (alone: a child it started keeps
    /// running) and reaps it.
    pub fn sigkill(&mut self) {
        self.signal(libc::SIGKILL);
        self.wait_exit(STOP_LIMIT);
    }

    #[track_caller]
    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child_mut().try_wait().unwrap() {
                self.child = None;
                self.client = OnceCell::new();
                return status;
            }
            if start.elapsed() > limit {
                panic!(
                    "the agent did not exit within {limit:?}\n{}",
                    self.log_dump()
                );
            }
            // A child's exit has no channel to wait on with a timeout.
            thread::sleep(POLL);
        }
    }

    /// Starts the agent again with the same command line, on the same data
    /// dir and config, after it exited. (An agent of
    /// [`Agent::start_dev_temporary`] picks a new data dir.)
    pub fn restart(&mut self) {
        self.launch();
    }

    /// Runs `csi-agent ARGS` with `CSI_AGENT_ADDR` pointing at this agent;
    /// `RUST_LOG` is cleared so that stderr holds only what the command
    /// itself says.
    /// Runs `csi-agent ARGS` against this agent. `job run` gets
    /// `-detach`: a test that wants its watch runs [`Agent::cli_watch`].
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_watch(&detached(args))
    }

    /// Runs `csi-agent ARGS` as given, `job run` watching.
    pub fn cli_watch(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .args(args)
            .env(
                client::ADDRESS_ENV,
                format!("unix://{}", self.socket.display()),
            )
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    }

    /// Everything the agent logged, over every start.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn log_dump(&self) -> String {
        format!("--- agent log ---\n{}--- end of agent log ---", self.log())
    }
}

/// `args` with `-detach` after `job run`, so that it returns once the job
/// is submitted, as before `job run` watched.
pub fn detached<'a>(args: &[&'a str]) -> Vec<&'a str> {
    match args {
        ["job", "run", rest @ ..] => [&["job", "run", "-detach"][..], rest].concat(),
        _ => args.to_vec(),
    }
}

impl Agent {
    /// Kills every agent of this test (and what shares their process
    /// groups) and reaps the one running, if any: once it is gone, no
    /// restart policy can start a task the test is about to kill.
    pub fn kill_all(&mut self) {
        for &group in &self.groups {
            // SAFETY: kill has no memory-safety preconditions. The group is
            // one an agent of this test led: it holds that agent, if not yet
            // reaped, and the children it started, if any outlived it.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill_all();
        if thread::panicking() {
            eprintln!("{}", self.log_dump());
            return;
        }
        // `-dev`'s plugin runs strict: the agent must have kept the spec.
        let verdict = self.data_dir.join("hostpath/strict-violations");
        if let Ok(text) = fs::read_to_string(&verdict) {
            assert!(
                text.is_empty(),
                "the dev plugin saw the agent break the spec:\n{text}"
            );
        }
    }
}

/// The health changes of a plugin's recent events, oldest first.
pub fn changes(p: &Plugin) -> Vec<(Health, Health)> {
    p.events
        .iter()
        .map(|e| {
            (
                e.old_health.enum_value().unwrap(),
                e.new_health.enum_value().unwrap(),
            )
        })
        .collect()
}

pub fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Checks that a command failed with exit code 1 and said why in exactly
/// one line on stderr, and nothing on stdout; returns that line.
#[track_caller]
pub fn one_line_failure(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", text(out));
    assert!(out.stdout.is_empty(), "{}", text(out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", text(out));
    lines[0].to_string()
}

/// Runs `csi-agent agent -config CONFIG`, which must refuse to start:
/// it exits 1 within [`WAIT`]. Its output, for the reason.
#[track_caller]
pub fn agent_refusing(config: &Path) -> Output {
    let out = output_within(
        Command::new(bin()).args(["agent", "-config", &config.display().to_string()]),
        WAIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    out
}

/// Runs `cmd` to completion, like `Command::output`, but kills it if it
/// takes longer than `limit`: a command that should fail at once must not
/// hang the suite.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: kill has no memory-safety preconditions; the child
            // has not been reaped (its waiter has not answered), so the
            // pid is still its own.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let out = rx.recv().unwrap().unwrap();
            panic!("the command did not exit within {limit:?}\n{}", text(&out));
        }
    };
    waiter.join().unwrap();
    out
}

/// The pids of hostpath plugin processes whose command line mentions
/// `dir`, from /proc.
pub fn hostpath_processes_under(dir: &Path) -> Vec<u32> {
    let dir = dir.display().to_string();
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A process may exit while we look; it is then not left over.
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "hostpath") && args.iter().any(|a| a.contains(&dir)) {
            pids.push(pid);
        }
    }
    pids
}

/// True if `text` is one well-formed JSON value: a syntax check, no more.
pub fn is_json(text: &str) -> bool {
    struct Parser<'a>(&'a [u8], usize);
    impl Parser<'_> {
        fn peek(&mut self) -> Option<u8> {
            while self.0.get(self.1).is_some_and(u8::is_ascii_whitespace) {
                self.1 += 1;
            }
            self.0.get(self.1).copied()
        }
        fn eat(&mut self, c: u8) -> bool {
            let found = self.peek() == Some(c);
            self.1 += usize::from(found);
            found
        }
        /// The rest of an object or array, after its opening bracket.
        fn items(&mut self, close: u8, item: fn(&mut Self) -> bool) -> bool {
            if self.eat(close) {
                return true;
            }
            loop {
                if !item(self) {
                    return false;
                }
                if self.eat(close) {
                    return true;
                }
                if !self.eat(b',') {
                    return false;
                }
            }
        }
        fn string(&mut self) -> bool {
            if !self.eat(b'"') {
                return false;
            }
            while let Some(&c) = self.0.get(self.1) {
                self.1 += 1;
                match c {
                    b'"' => return true,
                    b'\\' => self.1 += 1,
                    c if c < 0x20 => return false,
                    _ => {}
                }
            }
            false
        }
        fn value(&mut self) -> bool {
            if self.eat(b'{') {
                return self.items(b'}', |p| p.string() && p.eat(b':') && p.value());
            }
            if self.eat(b'[') {
                return self.items(b']', Self::value);
            }
            if self.peek() == Some(b'"') {
                return self.string();
            }
            let rest = &self.0[self.1..];
            let len = rest
                .iter()
                .position(|c| !(c.is_ascii_alphanumeric() || b"+-.".contains(c)))
                .unwrap_or(rest.len());
            let word = String::from_utf8_lossy(&rest[..len]);
            self.1 += len;
            matches!(&*word, "true" | "false" | "null")
                || (word.starts_with(|c: char| c == '-' || c.is_ascii_digit())
                    && word.parse::<f64>().is_ok())
        }
    }
    let mut parser = Parser(text.as_bytes(), 0);
    parser.value() && parser.peek().is_none()
}

#[test]
fn the_json_check_tells_json_from_near_misses() {
    assert!(is_json(
        "{\"a\": [1, -2.5e3, true, null, \"x\\\"y\"], \"b\": {}}\n"
    ));
    for bad in [
        "{\"a\": 1,}",
        "[1 2]",
        "{a: 1}",
        "\"open",
        "inf",
        "{} {}",
        "",
    ] {
        assert!(!is_json(bad), "{bad}");
    }
}

/// Which file `socket` is: device, inode and change time, so that a socket
/// bound again (even on a reused inode number) is told from the old one.
fn socket_file(socket: &Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(socket).ok()?;
    Some((meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()))
}
