//! The agent as systemd runs it: `Type=notify` (READY=1 and STOPPING=1 on
//! a notify socket the test binds itself, as systemd does) and socket
//! activation, with Debian's `systemd-socket-activate` binding the
//! sockets and handing them over as a `.socket` unit does
//! (`LISTEN_FDS`, `LISTEN_FDNAMES`). Then the boot these exist for: a
//! private dockerd restoring `--restart always` containers before the
//! agent runs (`boot.rs`), the first Mount after a reboot answered
//! within 2 s with the default heartbeat (`first_mount.rs`), and, under
//! containers that write through their volumes all along
//! (`writers.rs`), an upgrade in place (`upgrade.rs`) and a dockerd
//! restarted with `--live-restore` (`live_restore.rs`).

mod activation;
mod boot;
mod first_mount;
mod live_restore;
mod notify;
mod upgrade;
mod writers;

use std::fs;
use std::os::fd::{AsRawFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::dockerd::Dockerd;
use crate::harness::text;
use crate::util::{bin, require_root, TestDir};

/// How long a test waits for the agent to start, answer or stop.
pub const LIMIT: Duration = Duration::from_secs(30);

/// Whether the systemd tests can run: as root, with
/// `systemd-socket-activate`; else a skip, or under CI a failure.
pub fn require_socket_activate() -> bool {
    if !require_root() {
        return false;
    }
    let present = Command::new("systemd-socket-activate")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("systemd-socket-activate is missing; `make deps` installs Debian's systemd");
        }
        eprintln!("skipping: systemd-socket-activate is missing (`make deps` installs systemd)");
    }
    present
}

/// The notify socket of a service manager: a datagram socket the test
/// binds, at a path or an abstract address, whose name goes to the agent
/// as `NOTIFY_SOCKET`.
pub struct NotifySocket {
    socket: UnixDatagram,
    /// The value of `NOTIFY_SOCKET`.
    pub address: String,
}

impl NotifySocket {
    /// Bound at `path`.
    pub fn at_path(path: &Path) -> NotifySocket {
        NotifySocket {
            socket: UnixDatagram::bind(path).unwrap(),
            address: path.display().to_string(),
        }
    }

    /// Bound at an abstract address named for the test dir.
    pub fn abstract_for(dir: &TestDir) -> NotifySocket {
        let name = format!("csi-agent-it-notify{}-{}", dir.path.display(), unique());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        NotifySocket {
            socket: UnixDatagram::bind_addr(&addr).unwrap(),
            address: format!("@{name}"),
        }
    }

    /// The next datagram within `limit`, as text.
    pub fn next(&self, limit: Duration) -> Option<String> {
        self.socket.set_read_timeout(Some(limit)).unwrap();
        let mut buf = [0u8; 4096];
        match self.socket.recv(&mut buf) {
            Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => None,
        }
    }

    /// The next datagram, which must come within [`LIMIT`].
    #[track_caller]
    pub fn expect(&self, what: &str, log: impl Fn() -> String) -> String {
        self.next(LIMIT)
            .unwrap_or_else(|| panic!("no {what} within {LIMIT:?}\n{}", log()))
    }
}

/// A socket `systemd-socket-activate` binds and hands over.
pub struct Listen {
    pub path: PathBuf,
    /// `--fdname`, if any.
    pub name: Option<&'static str>,
    /// A datagram socket (`--datagram`, which applies to all of them)
    /// rather than a stream one.
    pub datagram: bool,
}

impl Listen {
    pub fn stream(path: &Path, name: &'static str) -> Listen {
        Listen {
            path: path.to_path_buf(),
            name: Some(name),
            datagram: false,
        }
    }
}

/// A `csi-agent` command started as a service manager starts it: under
/// `systemd-socket-activate` with `listen` (none: the agent alone), with
/// `NOTIFY_SOCKET` set, in a process group of its own, its stderr in
/// `log`. Killed with its group when dropped.
pub struct Service {
    child: Option<Child>,
    pub log: PathBuf,
    started: Instant,
}

impl Service {
    /// `args` of the binary; `delay` (whole seconds) passes between the
    /// activation and the agent's exec, as a unit slow to start.
    pub fn start(
        dir: &TestDir,
        listen: &[Listen],
        notify: Option<&NotifySocket>,
        delay: Option<u32>,
        args: &[&str],
    ) -> Service {
        let log = dir.join(&format!("service-{}.log", unique()));
        let mut env = vec![
            ("RUST_LOG".to_string(), "debug".to_string()),
            ("TMPDIR".to_string(), dir.path.display().to_string()),
        ];
        if let Some(notify) = notify {
            env.push(("NOTIFY_SOCKET".to_string(), notify.address.clone()));
        }
        let mut program: Vec<String> = Vec::new();
        if let Some(delay) = delay {
            // The shell keeps the pid LISTEN_PID names, and execs the agent.
            program.extend(
                [
                    "/bin/sh",
                    "-c",
                    &format!("sleep {delay}; exec \"$0\" \"$@\""),
                ]
                .map(String::from),
            );
        }
        program.push(bin().to_string());
        program.extend(args.iter().map(|a| a.to_string()));
        let cmd = if listen.is_empty() {
            let mut cmd = Command::new(&program[0]);
            cmd.args(&program[1..])
                .env_clear()
                .envs(env.iter().cloned());
            cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
            cmd
        } else {
            let mut cmd = Command::new("systemd-socket-activate");
            // One --datagram makes every socket a datagram socket.
            if listen.iter().any(|l| l.datagram) {
                cmd.arg("--datagram");
            }
            for socket in listen {
                cmd.arg("-l").arg(&socket.path);
            }
            // Names go in one list, by position; "unknown" is systemd's
            // name for a socket nobody named.
            if listen.iter().any(|l| l.name.is_some()) {
                let names: Vec<&str> = listen.iter().map(|l| l.name.unwrap_or("unknown")).collect();
                cmd.arg(format!("--fdname={}", names.join(":")));
            }
            // The activator gives the program only the variables named.
            for (key, value) in &env {
                cmd.arg("-E").arg(format!("{key}={value}"));
            }
            cmd.arg("-E").arg(format!(
                "PATH={}",
                std::env::var("PATH").unwrap_or_default()
            ));
            cmd.args(&program);
            cmd
        };
        let service = Service::spawn(cmd, log);
        // A client may connect once the activator listens on every path
        // (it replaces a socket file left there).
        for socket in listen {
            service.wait_for_log(&format!("Listening on {} as", socket.path.display()));
        }
        service
    }

    /// `binary ARGS` started as systemd starts a service whose sockets a
    /// `.socket` unit holds: `unit`'s listening sockets handed over as
    /// descriptors 3 on, named in `LISTEN_FDNAMES`, with `NOTIFY_SOCKET`;
    /// in a process group of its own, its stderr in a log of its own.
    pub fn start_on(
        dir: &TestDir,
        unit: &SocketUnit,
        notify: &NotifySocket,
        binary: &Path,
        args: &[&str],
    ) -> Service {
        let log = dir.join(&format!("service-{}.log", unique()));
        // LISTEN_PID must name the process that reads it: the shell's pid
        // is the agent's, since it execs it.
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg("LISTEN_PID=$$ exec \"$0\" \"$@\"")
            .arg(binary)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "debug")
            .env("TMPDIR", &dir.path)
            .env("NOTIFY_SOCKET", &notify.address)
            .env("LISTEN_FDS", unit.sockets.len().to_string())
            .env("LISTEN_FDNAMES", unit.names.join(":"));
        let fds: Vec<RawFd> = unit.sockets.iter().map(|s| s.as_raw_fd()).collect();
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only fcntl(2) and dup2(2), which are async-signal-safe; it
        // allocates nothing (the descriptors were collected before).
        unsafe {
            cmd.pre_exec(move || {
                // Out of the way first, so that no later dup2 onto 3, 4, ...
                // closes a socket not yet moved.
                let mut high = [0 as RawFd; 8];
                for (i, fd) in fds.iter().enumerate() {
                    high[i] = cvt(libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 100))?;
                }
                for (i, fd) in high.iter().take(fds.len()).enumerate() {
                    // dup2 leaves the copy without FD_CLOEXEC: it survives exec,
                    // where the high copy does not.
                    cvt(libc::dup2(*fd, 3 + i as RawFd))?;
                }
                Ok(())
            });
        }
        Service::spawn(cmd, log)
    }

    fn spawn(mut cmd: Command, log: PathBuf) -> Service {
        let log_file = fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .process_group(0)
            .spawn()
            .expect("start the service");
        Service {
            child: Some(child),
            log,
            started: Instant::now(),
        }
    }

    /// When it was started.
    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// What it logged (the activator's lines and the agent's).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log has `needle`.
    #[track_caller]
    pub fn wait_for_log(&self, needle: &str) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            assert!(
                start.elapsed() < LIMIT,
                "no {needle:?} in the log within {LIMIT:?}\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill has no memory preconditions; the pid is our child's,
        // not yet reaped.
        let ret = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(ret, 0);
    }

    /// Waits for the exit, within [`LIMIT`].
    #[track_caller]
    pub fn wait(&mut self) -> ExitStatus {
        let child = self.child.as_mut().expect("running");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(
                start.elapsed() < LIMIT,
                "the service did not exit within {LIMIT:?}\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: as in `signal`; the group is the one the child leads.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
        if thread::panicking() {
            eprintln!("--- service log ---\n{}--- end ---", self.log());
        }
    }
}

/// The listening sockets of `.socket` units, bound and held by the test
/// as systemd holds them: across the stops and starts of the service, so
/// a client that connects while no agent runs waits in the backlog.
/// (`systemd-socket-activate` execs the service in its own place, so its
/// sockets close with the first agent that exits.) Their files are
/// removed when dropped.
pub struct SocketUnit {
    sockets: Vec<UnixListener>,
    names: Vec<&'static str>,
    paths: Vec<PathBuf>,
}

impl SocketUnit {
    /// Binds a stream socket at each path, named as given
    /// (`FileDescriptorName=`), replacing a file left there.
    pub fn bind(listen: &[(&Path, &'static str)]) -> SocketUnit {
        let mut unit = SocketUnit {
            sockets: Vec::new(),
            names: Vec::new(),
            paths: Vec::new(),
        };
        assert!(listen.len() <= 8, "at most 8 sockets");
        for (path, name) in listen {
            let _ = fs::remove_file(path);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).unwrap();
            }
            let socket = UnixListener::bind(path)
                .unwrap_or_else(|err| panic!("bind {}: {err}", path.display()));
            unit.sockets.push(socket);
            unit.names.push(name);
            unit.paths.push(path.to_path_buf());
        }
        unit
    }
}

impl Drop for SocketUnit {
    fn drop(&mut self) {
        for path in &self.paths {
            let _ = fs::remove_file(path);
        }
    }
}

/// A libc return value as a result: -1 is the thread's errno.
fn cvt(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn unique() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// An agent config: `data_dir`, the hostpath plugin at `plugin` (if any)
/// as plugin `hp` with the default heartbeat (30 s: none is set), and a
/// volume plugin block named `name` at `socket`.
pub fn config(data_dir: &Path, plugin: Option<&Path>, name: &str, socket: &Path) -> String {
    let mut text = format!("data_dir = {:?}\n", data_dir.display().to_string());
    if let Some(plugin) = plugin {
        text.push_str(&format!(
            "plugin \"hp\" {{\n  socket = {:?}\n  type   = \"monolith\"\n}}\n",
            plugin.display().to_string()
        ));
    }
    text.push_str(&format!(
        "volume_plugin {{\n  name      = {name:?}\n  socket    = {:?}\n  plugin_id = \"hp\"\n}}\n",
        socket.display().to_string()
    ));
    text
}

/// `docker ARGS` against `dockerd`.
pub fn docker(dockerd: &Dockerd, cli_config: &Path, args: &[&str]) -> Output {
    Command::new("docker")
        .arg("-H")
        .arg(format!("unix://{}", dockerd.socket.display()))
        .args(args)
        .env("DOCKER_CONFIG", cli_config)
        .stdin(Stdio::null())
        .output()
        .expect("run docker")
}

#[track_caller]
pub fn docker_ok(dockerd: &Dockerd, cli_config: &Path, args: &[&str]) -> String {
    let out = docker(dockerd, cli_config, args);
    assert!(
        out.status.success(),
        "docker {args:?}: {}\n--- engine log ---\n{}",
        text(&out),
        dockerd.log()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
