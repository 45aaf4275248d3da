//! The test harness: a directory per test, a real hostpath plugin process on
//! a real unix socket in it, and cleanup of every mount, loop device and
//! process in `Drop`, even when an assertion fails. Every plugin is started
//! `-strict` (unless a test of the plugin itself asks for a lenient one
//! with [`Plugin::start_lenient_with`]): it refuses what a conforming CO
//! never sends, and when it is dropped at the end of a test its verdict
//! must be "no violations", unless the test read it itself with
//! [`Plugin::violations`].

use std::fs;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::csi::proto::csi_grpc;
use csi_agent::csi::{Client, Endpoint};
use csi_agent::mount::{MountInfo, Mounter, SysMounter, UnmountMode};
use csi_agent::sys::loop_dev;

pub const NODE: &str = "node1";

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_csi-agent")
}

/// True if we may mount. Under CI (which runs as root) a non-root run is a
/// failure, not a skip.
pub fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("this test needs root; CI runs as root");
        }
        eprintln!("skipping: this test needs root (run `make test` as root)");
    }
    root
}

/// A fresh directory for one test; unmounts everything below it and
/// removes it when dropped.
pub struct TestDir {
    pub path: PathBuf,
}

impl TestDir {
    pub fn new() -> TestDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path = PathBuf::from(format!("/tmp/csi-agent-it/{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TestDir { path }
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }

    /// Creates `p` (and parents) under the test dir.
    pub fn mkdir(&self, p: &str) -> PathBuf {
        let path = self.join(p);
        fs::create_dir_all(&path).unwrap();
        path
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        // Deepest first, so nested mounts go before their parents.
        if let Ok(info) = MountInfo::read() {
            let mut points: Vec<PathBuf> = info
                .under(&self.path)
                .map(|m| m.mount_point.clone())
                .collect();
            points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            for p in points {
                let _ = SysMounter.unmount(&p, UnmountMode::Detach);
            }
        }
        // Then the loop devices of block volumes whose files are in here.
        for device in loop_devices_under(&self.path) {
            let _ = loop_dev::detach(&device);
        }
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Mount points currently under `dir`.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    MountInfo::read()
        .unwrap()
        .under(dir)
        .map(|m| m.mount_point.clone())
        .collect()
}

/// The loop devices that show a file under `dir` now.
pub fn loop_devices_under(dir: &Path) -> Vec<loop_dev::LoopDevice> {
    let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    loop_dev::list()
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, backing)| backing.starts_with(&dir))
        .map(|(device, _)| device)
        .collect()
}

/// The options of a call on a generated stub: the deadline
/// [`Plugin::client`] has.
pub fn call_opt() -> grpcio::CallOption {
    grpcio::CallOption::default().timeout(Duration::from_secs(10))
}

/// True if `path` is a mount point now; and whether it is read-only.
pub fn mount_state(path: &Path) -> Option<bool> {
    MountInfo::read()
        .unwrap()
        .get(path)
        .map(|m| m.is_read_only())
}

/// A hostpath plugin process serving in a test dir.
pub struct Plugin {
    pub dir: TestDir,
    pub socket: PathBuf,
    /// Its base dir: `dir/base`, or another plugin's for the second process
    /// of a split plugin ([`Plugin::start_sharing`]).
    pub base: PathBuf,
    env: Vec<(String, String)>,
    flags: Vec<String>,
    child: Child,
    /// Started `-strict`, and nobody has read its verdict yet: dropping it
    /// checks there is none.
    verdict_unread: std::cell::Cell<bool>,
}

impl Plugin {
    pub fn start() -> Plugin {
        Plugin::start_with_env(&[])
    }

    pub fn start_with_env(env: &[(&str, &str)]) -> Plugin {
        Plugin::start_with(env, &[])
    }

    /// Starts a plugin with `-strict`: it refuses what a CO that keeps the
    /// spec never sends, and records it (see [`Plugin::violations`]).
    pub fn start_strict() -> Plugin {
        Plugin::start_strict_with(&[])
    }

    /// Starts a strict plugin with extra `hostpath` flags (e.g.
    /// `-no-attach`).
    pub fn start_strict_with(flags: &[&str]) -> Plugin {
        let mut all = vec!["-strict"];
        all.extend_from_slice(flags);
        Plugin::start_with(&[], &all)
    }

    /// Starts a strict plugin with `env` and extra `hostpath` flags (e.g.
    /// `-no-attach`), kept across restarts.
    pub fn start_with(env: &[(&str, &str)], flags: &[&str]) -> Plugin {
        let mut all = vec!["-strict"];
        all.extend(flags.iter().filter(|f| **f != "-strict"));
        Plugin::start_lenient_with(env, &all)
    }

    /// Starts a plugin with exactly these flags: without `-strict`, for the
    /// tests of the plugin's own answers to calls a conforming CO never
    /// makes (out of order, a second staging path).
    pub fn start_lenient_with(env: &[(&str, &str)], flags: &[&str]) -> Plugin {
        let dir = TestDir::new();
        let socket = dir.join("csi.sock");
        Plugin::launch(dir, socket, env, flags)
    }

    /// Starts a strict plugin serving on `socket` (whose directory must
    /// exist), with its base dir, faults, trace and log in a test dir of its
    /// own.
    pub fn start_at(socket: &Path) -> Plugin {
        Plugin::launch(TestDir::new(), socket.to_path_buf(), &[], &["-strict"])
    }

    /// Starts a strict plugin with `env` and `flags` (e.g. `-mode node`) on
    /// the base dir of `other`, as the second process of a split plugin;
    /// its socket, faults, trace and log are in a test dir of its own. Both
    /// write one verdict, which each checks when dropped: drop this one
    /// first, while `other` still keeps the base dir.
    pub fn start_sharing(other: &Plugin, env: &[(&str, &str)], flags: &[&str]) -> Plugin {
        let mut all = vec!["-strict"];
        all.extend(flags.iter().filter(|f| **f != "-strict"));
        let dir = TestDir::new();
        let socket = dir.join("csi.sock");
        Plugin::launch_on(dir, other.base.clone(), socket, env, &all)
    }

    /// Starts a plugin with exactly these flags (without `-strict`, unless
    /// given) on the base dir of `other`: one storage system seen from
    /// another host.
    pub fn start_sharing_lenient(other: &Plugin, flags: &[&str]) -> Plugin {
        let dir = TestDir::new();
        let socket = dir.join("csi.sock");
        Plugin::launch_on(dir, other.base.clone(), socket, &[], flags)
    }

    /// Starts a strict plugin with `env` and extra `flags` on base dir
    /// `base` (which must exist: a file system the test made, say).
    pub fn start_on(base: &Path, env: &[(&str, &str)], flags: &[&str]) -> Plugin {
        let mut all = vec!["-strict"];
        all.extend(flags.iter().filter(|f| **f != "-strict"));
        let dir = TestDir::new();
        let socket = dir.join("csi.sock");
        Plugin::launch_on(dir, base.to_path_buf(), socket, env, &all)
    }

    fn launch(dir: TestDir, socket: PathBuf, env: &[(&str, &str)], flags: &[&str]) -> Plugin {
        let base = dir.join("base");
        Plugin::launch_on(dir, base, socket, env, flags)
    }

    fn launch_on(
        dir: TestDir,
        base: PathBuf,
        socket: PathBuf,
        env: &[(&str, &str)],
        flags: &[&str],
    ) -> Plugin {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        let child = spawn_plugin(&dir, &base, &socket, &env, &flags);
        let plugin = Plugin {
            dir,
            socket,
            base,
            env,
            verdict_unread: std::cell::Cell::new(flags.iter().any(|f| f == "-strict")),
            flags,
            child,
        };
        plugin.wait_for_socket();
        plugin
    }

    /// Kills the plugin with SIGKILL, as a crash would, and reaps it; its
    /// socket file stays behind with nobody listening.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Starts the plugin again in the same dir, on the same socket, with the
    /// same faults, trace and state, after [`Plugin::kill`] or
    /// [`Plugin::stop`]; waits until it accepts connections.
    pub fn restart(&mut self) {
        assert!(
            self.child.try_wait().unwrap().is_some(),
            "restart() needs the plugin to have exited"
        );
        self.child = spawn_plugin(&self.dir, &self.base, &self.socket, &self.env, &self.flags);
        self.wait_for_socket();
    }

    /// Like [`Plugin::restart`], with `flags` added to those it was
    /// started with: another version of the plugin, on the same socket
    /// and state.
    pub fn restart_adding(&mut self, flags: &[&str]) {
        self.flags.extend(flags.iter().map(|f| f.to_string()));
        self.restart();
    }

    /// Waits until the socket accepts connections: a socket file left by a
    /// killed plugin refuses them until the new process renames its own
    /// socket into place.
    fn wait_for_socket(&self) {
        let start = Instant::now();
        while UnixStream::connect(&self.socket).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "plugin socket never accepted connections\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::from_path(&self.socket).unwrap()
    }

    pub fn client(&self) -> Client {
        Client::new(&self.endpoint()).with_timeout(Duration::from_secs(10))
    }

    /// The generated Controller stub on a channel of its own, for the
    /// fields our client does not return (a volume's content source).
    pub fn controller_stub(&self) -> csi_grpc::ControllerClient {
        let channel = grpcio::ChannelBuilder::new(csi_agent::grpc::grpc_environment())
            .connect(&self.endpoint().grpc_target());
        csi_grpc::ControllerClient::new(channel)
    }

    /// Replaces the fault-injection rules.
    pub fn set_faults(&self, rules: &str) {
        fs::write(self.dir.join("faults"), rules).unwrap();
    }

    /// The call trace so far, one line per RPC.
    pub fn trace(&self) -> Vec<String> {
        fs::read_to_string(self.dir.join("trace"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The RPC names of the call trace, for order assertions.
    pub fn trace_methods(&self) -> Vec<String> {
        self.trace()
            .iter()
            .map(|l| l.split(' ').next().unwrap_or("").to_string())
            .collect()
    }

    /// The strict plugin's verdict so far: one `<RPC> <volume>: <rule>`
    /// line per request it refused, across restarts. A test that ends with
    /// `assert_eq!(plugin.violations(), Vec::<String>::new())` saw a CO
    /// that kept the spec. Panics if the plugin is not strict (it has no
    /// verdict file), so that such an assertion cannot pass by mistake.
    pub fn violations(&self) -> Vec<String> {
        self.verdict_unread.set(false);
        let path = self.base.join("strict-violations");
        match fs::read_to_string(&path) {
            Ok(text) => text.lines().map(str::to_string).collect(),
            Err(err) => panic!(
                "no verdict at {} ({err}): was the plugin started strict?",
                path.display()
            ),
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("plugin.log")).unwrap_or_default()
    }

    /// Waits for the plugin process to exit on its own; its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Sends SIGTERM and waits; the plugin removes its socket.
    pub fn stop(&mut self) -> Option<i32> {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.wait_exit(Duration::from_secs(10))
    }

    /// Runs the CLI against this plugin.
    pub fn cli(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(bin());
        cmd.arg("csi")
            .arg("-endpoint")
            .arg(format!("unix://{}", self.socket.display()))
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }
}

/// Starts `csi-agent hostpath` serving on `socket`, with its base dir
/// `base`, its faults, trace and log in `dir` and any extra `flags`; the
/// log is appended to across restarts.
fn spawn_plugin(
    dir: &TestDir,
    base: &Path,
    socket: &Path,
    env: &[(String, String)],
    flags: &[String],
) -> Child {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("plugin.log"))
        .unwrap();
    let mut cmd = Command::new(bin());
    cmd.arg("hostpath")
        .arg("-endpoint")
        .arg(format!("unix://{}", socket.display()))
        .arg("-base-dir")
        .arg(base)
        .args(
            // A plugin of a host of its own says its node ID in `flags`.
            (!flags.iter().any(|f| f == "-node-id"))
                .then_some(["-node-id", NODE])
                .into_iter()
                .flatten(),
        )
        .arg("-test-faults")
        .arg(dir.join("faults"))
        .arg("-test-trace")
        .arg(dir.join("trace"))
        .args(flags)
        .stdout(Stdio::null())
        .stderr(log);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("start the hostpath plugin")
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.verdict_unread.get() && !thread::panicking() {
            let violations = self.violations();
            assert!(
                violations.is_empty(),
                "the strict plugin saw the CO break the spec:\n{}\n--- plugin log ---\n{}",
                violations.join("\n"),
                self.log()
            );
        }
        if thread::panicking() {
            eprintln!(
                "--- hostpath plugin log ---\n{}--- end of plugin log ---",
                self.log()
            );
        }
    }
}
