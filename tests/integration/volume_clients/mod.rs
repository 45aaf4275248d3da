//! The agent's Docker volume plugin socket driven by the clients users
//! have: the `docker` CLI against a private dockerd ([`Dockerd`]), Debian's
//! `docker-compose` with `DOCKER_HOST` at that engine, and rootful `podman`
//! with a root, run root and containers.conf of the test's own. The CSI
//! plugin behind the agent is the built-in hostpath plugin, as a process
//! of the test ([`Plugin`]) or as a `docker` task of the same agent; and
//! the agent itself as a managed Docker plugin (`managed_plugin`), with
//! the built-in plugin inside it.
//!
//! dockerd finds a plugin at `/run/docker/plugins/<name>.sock`, a
//! directory every dockerd on the host shares: each test's driver name is
//! its own ([`driver_name`]), and its socket is removed when the test ends
//! even if the agent could not remove it.

use std::fs;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::proto::agent::VolumeStatus;

use crate::dockerd::{require_docker, Dockerd};
use crate::harness::{healthy, text, Agent, WAIT};
use crate::util::{mounts_under, Plugin, TestDir};
use crate::volume_util::{try_volume, PLUGIN};

mod compose;
mod docker_cli;
mod managed_plugin;
mod options;
mod plugin_task;
mod podman;

/// Where dockerd looks for plugin sockets.
const DOCKER_PLUGIN_DIR: &str = "/run/docker/plugins";

/// The busybox image every test's containers run.
pub const IMAGE: &str = "csi-test/busybox:1";

/// How long a Mount may wait for its claim (the block's default); Podman's
/// `volume_plugin_timeout` is set above it.
const MOUNT_TIMEOUT: &str = "25s";

/// Whether `client` runs (`client --version`): else a skip, or under CI a
/// failure naming what installs it.
fn require_client(client: &str, package: &str) -> bool {
    let runs = Command::new(client)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{client} is missing; `make deps` installs Debian's {package}");
        }
        eprintln!("skipping: {client} is missing (`make deps` installs Debian's {package})");
    }
    runs
}

/// The docker tests' preconditions, and the `docker` CLI.
pub fn require_docker_cli() -> bool {
    require_docker() && require_client("docker", "docker.io")
}

/// A driver name no other test on this host uses: dockerd reads every
/// plugin socket of the shared directory by its file name.
pub fn driver_name(dir: &TestDir) -> String {
    let unique = dir
        .path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
    format!("csi-it-{unique}")
}

/// The agent config of a host: the hostpath plugin at `socket` as plugin
/// [`PLUGIN`], and a `volume_plugin` block named `name` whose Creates
/// default to it, with `block` lines in it; `extra` is appended (a
/// `docker` block).
pub fn agent_config_with(
    name: &str,
    plugin_socket: Option<&Path>,
    block: &str,
    extra: &str,
) -> String {
    let mut text = String::new();
    if let Some(socket) = plugin_socket {
        text.push_str(&format!(
            "\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = \"monolith\"\n}}\n",
            socket.display().to_string()
        ));
    }
    text.push_str(&format!(
        "\nvolume_plugin {{\n  name          = {name:?}\n  plugin_id     = {PLUGIN:?}\n  mount_timeout = {MOUNT_TIMEOUT:?}\n{block}}}\n"
    ));
    text.push_str(extra);
    text
}

/// An agent serving the volume plugin socket of driver `name`, with the
/// hostpath plugin behind it. Dropped in this order: the engine first (it
/// stops its containers, whose Unmounts reach the agent), then the agent,
/// then the plugin; the socket file last.
pub struct Host {
    pub dockerd: Option<Dockerd>,
    pub agent: Agent,
    pub plugin: Option<Plugin>,
    /// The driver name.
    pub name: String,
    /// `/run/docker/plugins/<name>.sock`.
    pub socket: PathBuf,
    /// The docker CLI's config dir: the host's `~/.docker` is not read.
    cli_config: PathBuf,
}

impl Host {
    /// A private dockerd with the busybox image [`IMAGE`], the hostpath
    /// plugin as a process, and an agent serving both.
    pub fn start() -> Host {
        let dockerd = Dockerd::start();
        dockerd.busybox_image(IMAGE);
        Host::around(Some(dockerd), "")
    }

    /// Like [`Host::start`] with no engine (Podman's tests).
    pub fn without_engine() -> Host {
        Host::around(None, "")
    }

    fn around(dockerd: Option<Dockerd>, extra: &str) -> Host {
        let plugin = Plugin::start_with(&[("RUST_LOG", "csi_agent=debug")], &[]);
        let host = Host::serving(dockerd, Some(plugin), extra);
        host.agent.wait_for(PLUGIN, healthy, WAIT);
        host
    }

    /// Like [`Host::start`], with `block` lines in the `volume_plugin`
    /// block and the hostpath plugin started with `flags`.
    pub fn start_with(block: &str, flags: &[&str]) -> Host {
        let dockerd = Dockerd::start();
        dockerd.busybox_image(IMAGE);
        let plugin = Plugin::start_with(&[("RUST_LOG", "csi_agent=debug")], flags);
        let host = Host::serving_with(Some(dockerd), Some(plugin), block, "");
        host.agent.wait_for(PLUGIN, healthy, WAIT);
        host
    }

    /// An agent with the volume plugin block and `extra`, its hostpath
    /// plugin `plugin` (or none: a plugin task brings it).
    pub fn serving(dockerd: Option<Dockerd>, plugin: Option<Plugin>, extra: &str) -> Host {
        Host::serving_with(dockerd, plugin, "", extra)
    }

    /// [`Host::serving`] with `block` lines in the `volume_plugin` block.
    pub fn serving_with(
        dockerd: Option<Dockerd>,
        plugin: Option<Plugin>,
        block: &str,
        extra: &str,
    ) -> Host {
        let dir = TestDir::new();
        let name = driver_name(&dir);
        let socket = Path::new(DOCKER_PLUGIN_DIR).join(format!("{name}.sock"));
        let _ = fs::remove_file(&socket);
        let config = agent_config_with(
            &name,
            plugin.as_ref().map(|p| p.socket.as_path()),
            block,
            extra,
        );
        let agent = Agent::start_with_config(&config);
        let cli_config = agent.dir.mkdir("docker-cli");
        let host = Host {
            dockerd,
            agent,
            plugin,
            name,
            socket,
            cli_config,
        };
        host.wait_for_socket();
        drop(dir);
        host
    }

    fn wait_for_socket(&self) {
        let start = Instant::now();
        while UnixStream::connect(&self.socket).is_err() {
            if start.elapsed() > WAIT {
                panic!(
                    "the agent never served {}\n{}",
                    self.socket.display(),
                    self.agent.log()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn dockerd(&self) -> &Dockerd {
        self.dockerd.as_ref().expect("a host with an engine")
    }

    /// `docker ARGS` against the private engine.
    pub fn docker(&self, args: &[&str]) -> Output {
        Command::new("docker")
            .arg("-H")
            .arg(format!("unix://{}", self.dockerd().socket.display()))
            .args(args)
            .env("DOCKER_CONFIG", &self.cli_config)
            .stdin(Stdio::null())
            .output()
            .expect("run docker")
    }

    /// `docker ARGS`, which must succeed; its stdout.
    #[track_caller]
    pub fn docker_ok(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        if !out.status.success() {
            panic!("docker {args:?} failed:\n{}\n{}", text(&out), self.logs());
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `docker ARGS`, which must fail; its stderr.
    #[track_caller]
    pub fn docker_refused(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        if out.status.success() {
            panic!(
                "docker {args:?} succeeded:\n{}\n{}",
                text(&out),
                self.logs()
            );
        }
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// The names `docker volume ls` lists for this host's driver.
    pub fn docker_volumes(&self) -> Vec<String> {
        let filter = format!("driver={}", self.name);
        self.docker_ok(&["volume", "ls", "-q", "--filter", &filter])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The agent's and the engine's logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut logs = format!("--- agent log ---\n{}", self.agent.log());
        if let Some(dockerd) = &self.dockerd {
            logs += &format!("--- engine log ---\n{}", dockerd.log());
        }
        logs
    }

    /// Volume `id` as the agent has it, if registered.
    pub fn volume(&self, id: &str) -> Option<VolumeStatus> {
        try_volume(&self.agent, id).unwrap_or_else(|err| panic!("volume status {id}: {err}"))
    }

    /// The alloc IDs of `id`'s current claims.
    pub fn claims(&self, id: &str) -> Vec<String> {
        let volume = self
            .volume(id)
            .unwrap_or_else(|| panic!("volume {id} is not registered\n{}", self.logs()));
        volume.claims.into_iter().map(|c| c.alloc_id).collect()
    }

    /// Waits until `id` has `n` current claims; their alloc IDs.
    #[track_caller]
    pub fn wait_claims(&self, id: &str, n: usize) -> Vec<String> {
        let start = Instant::now();
        loop {
            let claims = self.claims(id);
            if claims.len() == n {
                return claims;
            }
            if start.elapsed() > WAIT {
                panic!(
                    "volume {id} has claims {claims:?}, not {n}, after {WAIT:?}\n{}",
                    self.logs()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Nothing is mounted under the agent's data dir but the plugin
    /// tasks' shared `csi/` root (none without a `docker` block).
    #[track_caller]
    pub fn assert_nothing_mounted(&self) {
        let start = Instant::now();
        loop {
            let root = self.agent.data_dir.join("csi");
            let left: Vec<PathBuf> = mounts_under(&self.agent.data_dir)
                .into_iter()
                .filter(|m| *m != root)
                .collect();
            if left.is_empty() {
                return;
            }
            if start.elapsed() > WAIT {
                panic!("mounts left under the data dir: {left:#?}\n{}", self.logs());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // The engine first: its containers stop and their Unmounts reach
        // a running agent.
        drop(self.dockerd.take());
        // The agent's own Drop kills it; the plugin goes after it.
        self.agent.kill_all();
        drop(self.plugin.take());
        let _ = fs::remove_file(&self.socket);
    }
}

/// Files named `name` under `dir`, at any depth.
pub fn find_files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(find_files(&path, name));
        } else if entry.file_name() == name {
            found.push(path);
        }
    }
    found
}

/// Processes whose command line names `dir` (a client's conmon, a
/// container's shim), killed at the end of a test.
pub fn kill_processes_under(dir: &Path) {
    let needle = dir.display().to_string();
    let me = std::process::id() as i32;
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        let names_dir = fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(&needle));
        if pid != me && names_dir {
            // SAFETY: kill has no memory preconditions; a pid gone since
            // is ESRCH, ignored.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}
