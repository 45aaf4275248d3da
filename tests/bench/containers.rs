//! What P8 needs of Docker: a private `dockerd` in the row's dir (its own
//! data root, exec root and socket, no bridge, no iptables rules; the
//! host's engine is never touched), and images made offline from a root
//! of the static busybox, imported through our own client
//! ([`Engine::import`]). The integration tests' `dockerd.rs` does the
//! same; a bench cannot import it.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::docker::Engine;

/// The static busybox that `busybox-static` installs.
const BUSYBOX: &str = "/bin/busybox";

/// Whether P8 can run: `dockerd` answers `--version` and the static
/// busybox is there.
pub fn available() -> bool {
    let dockerd = Command::new("dockerd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    dockerd && Path::new(BUSYBOX).exists()
}

/// A dockerd of the row, stopped in `Drop`.
pub struct Dockerd {
    pub socket: PathBuf,
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Dockerd {
    /// Starts it in `dir` and waits until `/_ping` answers.
    pub fn start(dir: &Path) -> Dockerd {
        fs::create_dir_all(dir).expect("create the engine dir");
        let mut dockerd = Dockerd {
            socket: dir.join("sock"),
            dir: dir.to_path_buf(),
            log: dir.join("dockerd.log"),
            child: None,
        };
        dockerd.launch();
        dockerd
    }

    /// Starts the engine on the row's dirs (again, after [`Dockerd::stop`]:
    /// it restores its containers from them) and waits until `/_ping`
    /// answers.
    pub fn launch(&mut self) {
        assert!(self.child.is_none(), "dockerd runs already");
        let path = |name: &str| self.dir.join(name).display().to_string();
        let log_file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the engine log");
        // Its containerd's namespaces name the run, in case another
        // engine's containerd is met.
        let namespace = format!("bench-{}", std::process::id());
        let child = Command::new("dockerd")
            .args(["--data-root", &path("data")])
            .args(["--exec-root", &path("exec")])
            .args(["--pidfile", &path("pid")])
            .args(["-H", &format!("unix://{}", self.socket.display())])
            .args(["--bridge=none", "--iptables=false", "--ip6tables=false"])
            .args(["--containerd-namespace", &namespace])
            .args(["--containerd-plugins-namespace", &format!("{namespace}-p")])
            .args(["--shutdown-timeout", "2"])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("the engine log"))
            .stderr(log_file)
            .spawn()
            .expect("start dockerd");
        self.child = Some(child);
        let engine = self.engine();
        let start = Instant::now();
        while engine.ping().is_err() {
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok()?);
            assert!(
                exited.is_none() && start.elapsed() < crate::rig::SETUP_LIMIT,
                "dockerd did not answer /_ping; its log:\n{}",
                fs::read_to_string(&self.log).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn engine(&self) -> Engine {
        Engine::new(&format!("unix://{}", self.socket.display())).expect("the engine's endpoint")
    }

    /// Imports image `tag` of a busybox root, with `bin` at
    /// `/bin/csi-agent` and the libraries `ldd` lists for it if given.
    pub fn import_busybox(&self, tag: &str, bin: Option<&Path>) {
        let rootfs = self
            .dir
            .join(format!("rootfs-{}", tag.replace([':', '/'], "-")));
        for sub in ["bin", "tmp", "proc", "sys", "dev", "etc"] {
            fs::create_dir_all(rootfs.join(sub)).expect("create the image's root");
        }
        fs::copy(BUSYBOX, rootfs.join("bin/busybox")).expect("copy busybox");
        for applet in ["sh", "sleep", "true"] {
            symlink("busybox", rootfs.join("bin").join(applet)).expect("link an applet");
        }
        if let Some(bin) = bin {
            fs::copy(bin, rootfs.join("bin/csi-agent")).expect("copy csi-agent");
            let ldd = Command::new("ldd").arg(bin).output().expect("run ldd");
            // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, or
            // the loader's `/lib64/ld-linux-x86-64.so.2 (0x...)`.
            for line in String::from_utf8_lossy(&ldd.stdout).lines() {
                let lib = line
                    .split("=>")
                    .last()
                    .and_then(|r| r.split_whitespace().next());
                if let Some(lib) = lib.filter(|p| p.starts_with('/')) {
                    let to = rootfs.join(lib.trim_start_matches('/'));
                    fs::create_dir_all(to.parent().expect("a dir")).expect("create a lib dir");
                    fs::copy(lib, &to).expect("copy a library");
                }
            }
        }
        let tar = Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .args(["-c", "."])
            .output()
            .expect("run tar");
        assert!(
            tar.status.success(),
            "tar: {}",
            String::from_utf8_lossy(&tar.stderr)
        );
        self.engine()
            .import(tag, tar.stdout, &[])
            .expect("import the image");
    }

    /// Removes every container, running or not, of the agent whose data
    /// dir is `data_dir`.
    pub fn remove_containers_of(&self, data_dir: &Path) {
        let engine = self.engine();
        let label = format!("csi-agent.data_dir={}", data_dir.display());
        for c in engine.list(&label).unwrap_or_default() {
            let _ = engine.remove(&c.id, true);
        }
    }
}

impl Dockerd {
    /// Stops the engine (SIGTERM: it stops its containers first) and
    /// waits for it, 20 s at most.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions; the child is
            // not reaped yet, so the pid is its own.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let start = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if start.elapsed() > Duration::from_secs(20) {
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
        // Its containerd or a shim that outlived it: each names the dir on
        // its command line.
        let needle = self.dir.display().to_string();
        let me = std::process::id();
        let pids = fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != me);
        for pid in pids {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle) {
                // SAFETY: as above; a pid that is gone is ESRCH, ignored.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        }
        // The row's BenchDir unmounts what is left under the dir.
    }
}
