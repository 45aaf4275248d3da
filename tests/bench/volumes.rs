//! P10, the agent as Docker's volume plugin, against a private dockerd
//! the row starts in its dir ([`crate::containers`]), with the busybox
//! image made offline and the hostpath plugin as a process behind the
//! agent.
//!
//! - **Container with a volume**: `docker run --rm -v VOL:/data IMAGE
//!   true` with the real `docker` CLI, from its start to its exit, with
//!   VOL a csi-agent volume (driver `csi-bench-<pid>`, the agent's
//!   `volume_plugin` socket in `/run/docker/plugins`) and with a docker
//!   `local` volume: the floor a user compares with. The two alternate,
//!   after one warm-up run each. With `--activated`, the agent runs as
//!   systemd's socket units start it: `systemd-socket-activate` binds the
//!   control and volume plugin sockets and hands them over.
//! - **Plugin calls per container**: what dockerd asks the driver while it
//!   runs one such container, and how long the agent takes to answer each,
//!   seen by a counting proxy on a second socket (driver
//!   `csi-bench-<pid>-count`, the same agent behind it) and a volume made
//!   through it; separate runs, so that the proxy's own hop is not in the
//!   timed ones.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

use crate::containers::Dockerd;
use crate::rig::{agent_config, wait_until, Agent, BenchDir, Delay, Plugin};
use crate::stats::Samples;
use crate::Options;

const BUSYBOX: &str = "csi-bench/busybox:1";
const PLUGIN_ID: &str = "hp";

/// Where dockerd looks for plugin sockets.
const DOCKER_PLUGIN_DIR: &str = "/run/docker/plugins";

/// Containers run through the counting proxy.
const COUNTED_RUNS: usize = 3;

pub struct VolumeResult {
    pub csi: Samples,
    pub local: Samples,
    /// Per plugin call (its path without `/VolumeDriver.`): how many a
    /// container makes, and their answer times.
    pub calls: BTreeMap<String, Samples>,
    pub counted_runs: usize,
}

/// Whether P10 can run: the `docker` CLI answers `--version`.
pub fn available() -> bool {
    Command::new("docker")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn run(opts: &Options, root: &Path) -> VolumeResult {
    let dir = BenchDir::new(root, "p10", opts.keep);
    let dockerd = Dockerd::start(&dir.join("engine"));
    dockerd.import_busybox(BUSYBOX, None);
    let mut plugin = Plugin::new(
        &opts.bin,
        &dir.join("plugin"),
        &dir.join("plugin/csi.sock"),
        Delay::None,
    );
    plugin.start();
    let driver = format!("csi-bench-{}", std::process::id());
    let socket = Path::new(DOCKER_PLUGIN_DIR).join(format!("{driver}.sock"));
    let counting = format!("{driver}-count");
    let counting_socket = Path::new(DOCKER_PLUGIN_DIR).join(format!("{counting}.sock"));
    let mut agent = Agent::new(&opts.agent_bin, &dir.join("agent"), |data| {
        format!(
            "{}\nvolume_plugin {{\n  name      = {driver:?}\n  plugin_id = {PLUGIN_ID:?}\n}}\n",
            agent_config(
                data,
                opts.heartbeat,
                &[(PLUGIN_ID.to_string(), plugin.socket.clone())]
            ),
        )
    });
    if opts.activated {
        agent.socket_activated(&[(socket.clone(), "volume-plugin")]);
    }
    agent.start();
    agent.wait_healthy(1);
    wait_until("the volume plugin socket", Duration::from_millis(2), || {
        UnixStream::connect(&socket).is_ok()
    });
    let (proxy, calls) = Proxy::start(&counting_socket, &socket);
    let cli = Cli {
        engine: dockerd.socket.clone(),
        config: dir.mkdir("docker-cli"),
    };
    cli.ok(&["volume", "create", "-d", &driver, "csi"]);
    cli.ok(&["volume", "create", "-d", "local", "local"]);
    cli.ok(&["volume", "create", "-d", &counting, "counted"]);

    let mut result = VolumeResult {
        csi: Samples::default(),
        local: Samples::default(),
        calls: BTreeMap::new(),
        counted_runs: COUNTED_RUNS,
    };
    for run in 0..=opts.volume_runs {
        for (volume, samples) in [("csi", &mut result.csi), ("local", &mut result.local)] {
            let took = cli.run_with(volume);
            if run > 0 {
                samples.push(took);
            }
        }
    }
    // The counted runs: drain what the volume's creation sent first.
    while calls.try_recv().is_ok() {}
    for _ in 0..COUNTED_RUNS {
        cli.run_with("counted");
    }
    // The last Unmount may still be on its way back to dockerd.
    thread::sleep(Duration::from_millis(100));
    while let Ok((path, took)) = calls.try_recv() {
        let name = path.trim_start_matches("/VolumeDriver.").to_string();
        result.calls.entry(name).or_default().push(took);
    }

    for volume in ["csi", "local", "counted"] {
        cli.ok(&["volume", "rm", volume]);
    }
    drop(proxy);
    agent.stop();
    plugin.stop();
    drop(dockerd);
    let _ = fs::remove_file(&socket);
    result
}

/// The `docker` CLI against the row's engine, with a config dir of its
/// own.
pub struct Cli {
    pub engine: PathBuf,
    pub config: PathBuf,
}

impl Cli {
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("docker");
        command
            .arg("-H")
            .arg(format!("unix://{}", self.engine.display()))
            .args(args)
            .env("DOCKER_CONFIG", &self.config)
            .stdin(Stdio::null());
        command
    }

    pub fn ok(&self, args: &[&str]) {
        let out = self.command(args).output().expect("run docker");
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `docker run --rm -v VOLUME:/data IMAGE true`, timed.
    fn run_with(&self, volume: &str) -> Duration {
        let mount = format!("{volume}:/data");
        let mut command = self.command(&["run", "--rm", "-v", &mount, BUSYBOX, "true"]);
        let start = Instant::now();
        let out = command.output().expect("run docker");
        let took = start.elapsed();
        assert!(
            out.status.success(),
            "docker run with {volume}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        took
    }
}

/// A socket that forwards every plugin call to the agent's, one request
/// a connection to the agent, and reports each call's path and the time
/// the agent took to answer it.
struct Proxy {
    socket: PathBuf,
    /// Told when the proxy goes; the listener then stops at its next
    /// connection, which `Drop` makes.
    stop: Sender<()>,
    listener: Option<thread::JoinHandle<()>>,
}

impl Proxy {
    fn start(socket: &Path, upstream: &Path) -> (Proxy, Receiver<(String, Duration)>) {
        let _ = fs::remove_file(socket);
        let listener = UnixListener::bind(socket).expect("bind the counting proxy");
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = mpsc::channel();
        let upstream = upstream.to_path_buf();
        let listener = thread::Builder::new()
            .name("p10-proxy".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stopped.try_recv().is_ok() {
                        break;
                    }
                    let Ok(conn) = conn else { break };
                    let tx = tx.clone();
                    let upstream = upstream.clone();
                    let _ = thread::Builder::new()
                        .name("p10-proxy-conn".into())
                        .spawn(move || serve(conn, &upstream, &tx));
                }
            })
            .expect("start the proxy thread");
        let proxy = Proxy {
            socket: socket.to_path_buf(),
            stop,
            listener: Some(listener),
        };
        (proxy, rx)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        // Wakes the listener from accept; it sees the stop and returns.
        let _ = UnixStream::connect(&self.socket);
        if let Some(listener) = self.listener.take() {
            let _ = listener.join();
        }
        let _ = fs::remove_file(&self.socket);
    }
}

/// One HTTP/1.1 message: its start line and headers as read, and its body.
struct Message {
    head: Vec<String>,
    body: Vec<u8>,
}

/// Reads one message with a `Content-Length` body (or none); `None` at
/// the end of the stream. Without a length, a response is read to the end
/// (the proxy asks the agent to close).
fn read_message(reader: &mut impl BufRead, response: bool) -> Option<Message> {
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end().to_string();
        if line.is_empty() {
            break;
        }
        head.push(line);
    }
    let length = head.iter().find_map(|h| {
        let (name, value) = h.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    let mut body = Vec::new();
    match length {
        Some(n) => {
            body.resize(n, 0);
            reader.read_exact(&mut body).ok()?;
        }
        None if response => {
            reader.read_to_end(&mut body).ok()?;
        }
        None => {}
    }
    Some(Message { head, body })
}

/// Writes `message` with its headers but `Connection` and
/// `Content-Length`, then `add`, then the length of the body as read
/// (unless the body is chunked, and so sent as read).
fn write_message(to: &mut impl Write, message: &Message, add: &[&str]) {
    let named = |h: &str, name: &str| {
        h.split_once(':')
            .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case(name))
    };
    let chunked = message
        .head
        .iter()
        .any(|h| named(h, "transfer-encoding") && h.to_ascii_lowercase().contains("chunked"));
    let mut bytes = Vec::new();
    for line in message
        .head
        .iter()
        .filter(|h| !named(h, "connection") && !named(h, "content-length"))
    {
        bytes.extend_from_slice(line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
    }
    for line in add {
        bytes.extend_from_slice(line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
    }
    if !chunked {
        bytes.extend_from_slice(format!("Content-Length: {}\r\n", message.body.len()).as_bytes());
    }
    bytes.extend_from_slice(b"\r\n");
    bytes.extend_from_slice(&message.body);
    let _ = to.write_all(&bytes);
}

/// Serves one client connection: each request goes to the agent on a
/// connection of its own (`Connection: close`), and its answer back.
fn serve(conn: UnixStream, upstream: &Path, calls: &Sender<(String, Duration)>) {
    let mut writer = conn.try_clone().expect("clone the client connection");
    let mut reader = BufReader::new(conn);
    while let Some(request) = read_message(&mut reader, false) {
        let path = request.head[0]
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        let start = Instant::now();
        let Ok(mut agent) = UnixStream::connect(upstream) else {
            return;
        };
        write_message(&mut agent, &request, &["Connection: close"]);
        let Some(response) = read_message(&mut BufReader::new(agent), true) else {
            return;
        };
        let took = start.elapsed();
        let _ = calls.send((path, took));
        write_message(&mut writer, &response, &[]);
    }
}
