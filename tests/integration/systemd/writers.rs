//! A host at work, for the fault tests: a private dockerd whose
//! containers each append a numbered line to their csi-agent volume every
//! 50 ms, the hostpath plugin, and the agent as systemd runs it, on
//! sockets a [`SocketUnit`] holds across its stops and starts. What the
//! tests compare before and after a fault: the agent's claims, the mounts
//! under its data dir (watched all along by a [`MountWatch`]), and each
//! volume's lines.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;
use csi_agent::mount::MountInfo;

use super::{config, docker, docker_ok, NotifySocket, Service, SocketUnit, LIMIT};
use crate::dockerd::Dockerd;
use crate::harness::text;
use crate::util::{bin, Plugin, TestDir};
use crate::volume_clients::{driver_name, IMAGE};

/// Each writer's command: the next number every 50 ms. A container that
/// started again would count from 1 again, which [`assert_consecutive`]
/// sees.
const WRITER: &str = "i=0; while :; do i=$((i+1)); echo $i >> /data/lines; sleep 0.05; done";

/// A claim as the tests compare it: alloc ID (the Mount's ID), mode,
/// state and publish path.
pub type ClaimView = (String, String, String, String);

/// The host. Fields drop in order: the engine first (its containers stop
/// and their Unmounts reach the agent), then the agent, the plugin, the
/// sockets and the dir.
pub struct Host {
    pub dockerd: Dockerd,
    pub agent: Option<Service>,
    pub plugin: Plugin,
    unit: SocketUnit,
    pub dir: TestDir,
    pub data_dir: PathBuf,
    pub control: PathBuf,
    /// The driver name.
    pub name: String,
    /// The volume plugin socket, in dockerd's plugin directory.
    pub vp: PathBuf,
    cli_config: PathBuf,
    config: String,
    /// The writers' names, `w0` on, each on volume `v0` on.
    pub writers: Vec<String>,
}

impl Host {
    /// A host whose dockerd runs with `dockerd_flags`, and the agent of
    /// this build started on it, ready.
    pub fn start(dockerd_flags: &[&str]) -> Host {
        let dir = TestDir::new();
        let name = driver_name(&dir);
        let vp = Path::new("/run/docker/plugins").join(format!("{name}.sock"));
        let plugin = Plugin::start();
        let data_dir = dir.mkdir("data");
        let control = data_dir.join("control.sock");
        let cli_config = dir.mkdir("docker-cli");
        let dockerd = Dockerd::start_with(dockerd_flags);
        dockerd.busybox_image(IMAGE);
        let mut text = config(&data_dir, Some(&plugin.socket), &name, &vp);
        // The engine whose containers the lost-unmount reconciler asks
        // about: it must release nothing while they run.
        text.push_str(&format!(
            "docker {{\n  endpoint = \"unix://{}\"\n}}\n",
            dockerd.socket.display()
        ));
        fs::write(dir.join("agent.hcl"), text).unwrap();
        let config = dir.join("agent.hcl").display().to_string();
        let unit = SocketUnit::bind(&[(&control, "control"), (&vp.clone(), "volume-plugin")]);
        let mut host = Host {
            dockerd,
            agent: None,
            plugin,
            unit,
            dir,
            data_dir,
            control,
            name,
            vp,
            cli_config,
            config,
            writers: Vec::new(),
        };
        host.start_agent(Path::new(bin()));
        host
    }

    /// Starts `binary` as the agent on the host's sockets and waits for
    /// its READY=1.
    pub fn start_agent(&mut self, binary: &Path) {
        assert!(self.agent.is_none(), "an agent runs");
        let notify = NotifySocket::abstract_for(&self.dir);
        let agent = Service::start_on(
            &self.dir,
            &self.unit,
            &notify,
            binary,
            &["agent", "-config", &self.config],
        );
        notify.expect("READY=1", || agent.log());
        self.agent = Some(agent);
    }

    /// Stops the agent as `systemctl stop` does (SIGTERM), which must
    /// exit 0.
    pub fn stop_agent(&mut self) {
        let mut agent = self.agent.take().expect("an agent runs");
        agent.signal(libc::SIGTERM);
        let status = agent.wait();
        assert_eq!(status.code(), Some(0), "{}", agent.log());
    }

    pub fn agent_log(&self) -> String {
        self.agent.as_ref().map(|a| a.log()).unwrap_or_default()
    }

    /// The agent's and the engine's logs, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "--- agent log ---\n{}--- engine log ---\n{}",
            self.agent_log(),
            self.dockerd.log()
        )
    }

    /// `docker ARGS`, which must succeed; its stdout.
    #[track_caller]
    pub fn docker_ok(&self, args: &[&str]) -> String {
        docker_ok(&self.dockerd, &self.cli_config, args)
    }

    /// `docker ARGS`, whatever it answers.
    pub fn docker(&self, args: &[&str]) -> std::process::Output {
        docker(&self.dockerd, &self.cli_config, args)
    }

    /// Makes `n` volumes of the driver with Create options `options`
    /// (`-o` each) and a writer container on each, and waits until every
    /// writer has written.
    pub fn run_writers(&mut self, n: usize, options: &[&str]) {
        for i in 0..n {
            let (writer, volume) = (format!("w{i}"), format!("v{i}"));
            let name = self.name.clone();
            let mut create = vec!["volume", "create", "-d", &name];
            for option in options {
                create.extend(["-o", option]);
            }
            create.push(&volume);
            self.docker_ok(&create);
            let mount = format!("{volume}:/data");
            self.docker_ok(&[
                "run", "-d", "--name", &writer, "-v", &mount, IMAGE, "sh", "-c", WRITER,
            ]);
            self.writers.push(writer);
        }
        for i in 0..n {
            self.wait_lines(i, 1);
        }
    }

    /// The plugin's ID of volume `id`, as the call trace names it.
    pub fn external_id(&self, id: &str) -> String {
        let client = AgentClient::connect(&self.control).unwrap();
        let status = client
            .volume_status(id, false)
            .unwrap_or_else(|err| panic!("volume status {id}: {err}\n{}", self.logs()));
        status.volumes[0].external_id.clone()
    }

    /// The calls of the trace from line `from` on that are `rpc` for
    /// volume `id`.
    pub fn calls_for(&self, from: usize, rpc: &str, id: &str) -> Vec<String> {
        let volume = format!("volume={}", self.external_id(id));
        self.trace_since(from)
            .into_iter()
            .filter(|call| {
                let mut fields = call.split_whitespace();
                fields.next() == Some(rpc) && fields.any(|f| f == volume)
            })
            .collect()
    }

    /// The claims of every volume of the driver, by volume.
    pub fn claims(&self) -> BTreeMap<String, Vec<ClaimView>> {
        let client = AgentClient::connect(&self.control)
            .unwrap_or_else(|err| panic!("the control socket: {err}\n{}", self.logs()));
        let volumes = client
            .volume_status("", false)
            .unwrap_or_else(|err| panic!("volume status: {err}\n{}", self.logs()));
        volumes
            .volumes
            .into_iter()
            .map(|v| {
                let claims = v
                    .claims
                    .into_iter()
                    .map(|c| (c.alloc_id, c.mode, c.state, c.publish_path))
                    .collect();
                (v.id, claims)
            })
            .collect()
    }

    /// Waits until every volume has `n` claims in state `taken`.
    #[track_caller]
    pub fn wait_claims(&self, n: usize) -> BTreeMap<String, Vec<ClaimView>> {
        let start = Instant::now();
        loop {
            let claims = self.claims();
            let settled = claims.len() == self.writers.len()
                && claims
                    .values()
                    .all(|c| c.len() == n && c.iter().all(|c| c.2 == "taken"));
            if settled {
                return claims;
            }
            assert!(
                start.elapsed() < LIMIT,
                "claims {claims:#?}, not {n} taken per volume\n{}",
                self.logs()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The lines writer `i` has written to its volume, read through the
    /// volume's mount on the host (its claim's publish path).
    pub fn lines(&self, i: usize) -> Vec<String> {
        let claims = self.claims();
        let claim = claims
            .get(&format!("v{i}"))
            .and_then(|c| c.first())
            .unwrap_or_else(|| panic!("v{i} has no claim: {claims:#?}\n{}", self.logs()));
        let file = Path::new(&claim.3).join("lines");
        fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Waits until writer `i` has written at least `n` lines.
    #[track_caller]
    pub fn wait_lines(&self, i: usize, n: usize) {
        let start = Instant::now();
        while self.lines(i).len() < n {
            if start.elapsed() > LIMIT {
                let state = self.docker(&["inspect", "-f", "{{json .State}}", &self.writers[i]]);
                panic!(
                    "w{i} has not written {n} lines within {LIMIT:?}; its state: {}\n{}",
                    text(&state),
                    self.logs()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The mounts under the data dir, by mount point: their mount IDs
    /// (two for a path mounted twice).
    pub fn mounts(&self) -> BTreeMap<PathBuf, Vec<u32>> {
        mounts_by_point(&self.data_dir)
    }

    /// The plugin's call trace from line `from` on, as `RPC volume=...`.
    pub fn trace_since(&self, from: usize) -> Vec<String> {
        self.plugin.trace().into_iter().skip(from).collect()
    }
}

fn mounts_by_point(dir: &Path) -> BTreeMap<PathBuf, Vec<u32>> {
    let mut mounts: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    for entry in MountInfo::read().unwrap().under(dir) {
        mounts
            .entry(entry.mount_point.clone())
            .or_default()
            .push(entry.mount_id);
    }
    mounts
}

/// Asserts that `lines` are the numbers 1, 2, ... with none missing,
/// repeated or out of order, and at least `at_least` of them.
#[track_caller]
pub fn assert_consecutive(what: &str, lines: &[String], at_least: usize) {
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(
            line.parse::<usize>().ok(),
            Some(i + 1),
            "{what}: line {} is {line:?}, not {}",
            i + 1,
            i + 1
        );
    }
    assert!(
        lines.len() >= at_least,
        "{what}: {} lines, fewer than {at_least}",
        lines.len()
    );
}

/// A thread that reads `/proc/self/mountinfo` every 10 ms and records the
/// first moment the mounts under a dir are not what they were when it
/// started: a mount dropped, made again (a new mount ID) or stacked, even
/// for a moment between two looks of the test.
pub struct MountWatch {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<(usize, Option<String>)>>,
}

impl MountWatch {
    pub fn start(dir: &Path, expected: BTreeMap<PathBuf, Vec<u32>>) -> MountWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let dir = dir.to_path_buf();
        let stopped = stop.clone();
        let thread = thread::Builder::new()
            .name("mount-watch".into())
            .spawn(move || {
                let mut looks = 0;
                while !stopped.load(Ordering::SeqCst) {
                    let now = mounts_by_point(&dir);
                    looks += 1;
                    if now != expected {
                        return (
                            looks,
                            Some(format!("expected {expected:#?}\nfound {now:#?}")),
                        );
                    }
                    thread::sleep(Duration::from_millis(10));
                }
                (looks, None)
            })
            .unwrap();
        MountWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the watch: how many looks it took, and the first change it
    /// saw, if any.
    pub fn finish(mut self) -> (usize, Option<String>) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for MountWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
