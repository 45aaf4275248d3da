//! A private Docker engine for one test: Debian's `dockerd` (docker.io
//! 20.10, which `make deps` installs) with its data root, exec root,
//! socket and pid file in the test's dir, no bridge and no iptables rules,
//! and its own containerd (dockerd starts one when not given
//! `--containerd`; its socket and state live under the exec root, so two
//! tests' engines do not meet). The host's engine
//! (`/var/run/docker.sock`) is never touched.
//!
//! Images are built offline: [`busybox_rootfs`] assembles a root of the
//! static busybox, and [`Dockerd::import_image`] imports its tarball
//! through our own client (`POST /images/create?fromSrc=-`).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::docker::Engine;

use crate::util::{require_root, TestDir};

/// The static busybox that `busybox-static` installs.
const BUSYBOX: &str = "/bin/busybox";

/// The applets the test images have as commands.
const APPLETS: &[&str] = &[
    "sh", "sleep", "echo", "cat", "ls", "mount", "grep", "head", "tr", "true", "test", "[", "dd",
    "printf", "touch", "mkdir", "hostname", "rm", "stty", "tty",
];

/// Whether the docker tests can run: as root, with dockerd and a static
/// busybox; else a skip, or under CI a failure saying what installs them.
pub fn require_docker() -> bool {
    if !require_root() {
        return false;
    }
    let dockerd = Command::new("dockerd")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let busybox = Path::new(BUSYBOX).exists();
    if !(dockerd && busybox) {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("dockerd or {BUSYBOX} is missing; `make deps` installs docker.io and busybox-static");
        }
        eprintln!("skipping: dockerd or {BUSYBOX} is missing (`make deps` installs them)");
        return false;
    }
    true
}

/// A root filesystem in `dir`: the static busybox as `/bin/busybox`, its
/// [`APPLETS`] as symlinks, and the empty directories a container needs.
pub fn busybox_rootfs(dir: &Path) -> PathBuf {
    for sub in ["bin", "tmp", "proc", "sys", "dev", "etc"] {
        fs::create_dir_all(dir.join(sub)).unwrap();
    }
    fs::copy(BUSYBOX, dir.join("bin/busybox")).unwrap();
    for applet in APPLETS {
        symlink("busybox", dir.join("bin").join(applet)).unwrap();
    }
    dir.to_path_buf()
}

/// A dockerd of one test, stopped in `Drop`.
pub struct Dockerd {
    pub dir: TestDir,
    pub socket: PathBuf,
    log: PathBuf,
    /// Flags every launch adds (`--live-restore`).
    flags: Vec<String>,
    child: Option<Child>,
}

impl Dockerd {
    /// Starts it and waits until `/_ping` answers (60 s at most).
    pub fn start() -> Dockerd {
        Dockerd::start_with(&[])
    }

    /// Like [`Dockerd::start`], with `flags` at this and every later
    /// launch.
    pub fn start_with(flags: &[&str]) -> Dockerd {
        let dir = TestDir::new();
        let socket = dir.join("sock");
        let log = dir.join("dockerd.log");
        let mut dockerd = Dockerd {
            dir,
            socket,
            log,
            flags: flags.iter().map(|f| f.to_string()).collect(),
            child: None,
        };
        dockerd.launch();
        dockerd
    }

    /// Starts the engine on the test's dirs (again, after
    /// [`Dockerd::stop`] or [`Dockerd::sigkill`]: it finds its containers
    /// there) and waits until it answers.
    pub fn launch(&mut self) {
        assert!(self.child.is_none(), "dockerd is running");
        // The containerd namespaces name the run, in case two engines
        // ever share a containerd.
        let namespace = self
            .dir
            .path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
        let path = |name: &str| self.dir.join(name).display().to_string();
        let log_file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new("dockerd")
            .args(["--data-root", &path("data")])
            .args(["--exec-root", &path("exec")])
            .args(["--pidfile", &path("pid")])
            .args(["-H", &format!("unix://{}", self.socket.display())])
            .args(["--bridge=none", "--iptables=false", "--ip6tables=false"])
            .args(["--containerd-namespace", &format!("it-{namespace}")])
            .args([
                "--containerd-plugins-namespace",
                &format!("it-{namespace}-p"),
            ])
            // Containers still running at the end stop within 2 s.
            .args(["--shutdown-timeout", "2"])
            .args(&self.flags)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("start dockerd");
        self.child = Some(child);
        self.wait_ready();
    }

    /// Kills the engine with SIGKILL and reaps it, as a crash does: it
    /// sends no plugin call on its way out, and its containers live on in
    /// their shims. Its containerd dies with it (dockerd starts it with a
    /// parent-death signal): this waits until that process is reaped, or a
    /// [`Dockerd::launch`] would find its pid alive and wait for a
    /// containerd that is no more.
    pub fn sigkill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let pid_file = self.dir.join("exec/containerd/containerd.pid");
        let Some(pid) = fs::read_to_string(pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
        else {
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                Instant::now() < deadline,
                "dockerd's containerd (pid {pid}) outlived it by 20 s"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_ready(&mut self) {
        let engine = self.engine();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if engine.ping().is_ok() {
                return;
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                panic!(
                    "dockerd did not answer /_ping ({}); its log:\n{}",
                    match exited {
                        Some(status) => format!("it exited: {status}"),
                        None => "in 60 s".to_string(),
                    },
                    fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// A client of this engine.
    pub fn engine(&self) -> Engine {
        Engine::new(&format!("unix://{}", self.socket.display())).unwrap()
    }

    /// Makes image `tag` of the directory `rootfs`, offline: its tarball
    /// (`tar -C rootfs -c .`) imported through our own client.
    pub fn import_image(&self, tag: &str, rootfs: &Path) {
        self.import_image_with(tag, rootfs, &[]);
    }

    /// Like [`Dockerd::import_image`], with Dockerfile instructions
    /// (`ENTRYPOINT [...]`) applied to the image.
    pub fn import_image_with(&self, tag: &str, rootfs: &Path, changes: &[&str]) {
        let tar = Command::new("tar")
            .arg("-C")
            .arg(rootfs)
            .args(["-c", "."])
            .output()
            .expect("run tar");
        assert!(
            tar.status.success(),
            "tar: {}",
            String::from_utf8_lossy(&tar.stderr)
        );
        self.engine().import(tag, tar.stdout, changes).unwrap();
    }

    /// Imports the busybox image `tag` (its root in the test's dir).
    pub fn busybox_image(&self, tag: &str) {
        let rootfs = busybox_rootfs(
            &self
                .dir
                .mkdir(&format!("rootfs-{}", tag.replace([':', '/'], "-"))),
        );
        self.import_image(tag, &rootfs);
    }

    /// The engine's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Processes whose command line names `dir`: this run's dockerd, its
/// containerd and their shims.
fn processes_under(dir: &Path) -> Vec<i32> {
    let needle = dir.display().to_string();
    let me = std::process::id() as i32;
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

impl Dockerd {
    /// Stops the engine (SIGTERM; it stops its containers first) and waits
    /// for it, as an engine that goes down under the agent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory preconditions; the pid is our child's,
            // not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        self.stop();
        // A containerd or a shim that outlived its dockerd.
        for pid in processes_under(&self.dir.path) {
            // SAFETY: as above; a pid that is gone is ESRCH, ignored.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // The TestDir unmounts what is left under the dir and removes it.
    }
}
