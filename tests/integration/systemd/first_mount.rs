//! A reboot with the default `plugin_heartbeat` (30 s): every mount is
//! gone, the agent starts on its handed sockets, and dockerd's first
//! Mount, sent as the agent starts, is answered with the volume mounted
//! within 2 s: of the agent's start when its plugin already serves, of
//! the plugin's start when the plugin comes later. The agent before it
//! stopped cleanly (its snapshot calls the plugin unhealthy) or was
//! killed (its snapshot calls it healthy).

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::{config, require_socket_activate, Listen, NotifySocket, Service};
use crate::util::{mount_state, mounts_under, Plugin, TestDir};
use crate::volume_plugin::{Answer, Docker};

/// What the issue asks of the first Mount after a boot.
const FIRST_MOUNT_LIMIT: Duration = Duration::from_secs(2);

/// How long after the agent the plugin starts.
const PLUGIN_LATE: Duration = Duration::from_secs(10);

const MOUNT_ID: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// A host: the hostpath plugin, and the agent's dirs and sockets.
struct Host {
    dir: TestDir,
    plugin: Plugin,
    data_dir: PathBuf,
    control: PathBuf,
    vp: PathBuf,
    config: String,
}

impl Host {
    fn new() -> Host {
        let dir = TestDir::new();
        let plugin = Plugin::start();
        let data_dir = dir.mkdir("data");
        let control = data_dir.join("control.sock");
        let vp = dir.join("plugins/csi-boot.sock");
        fs::write(
            dir.join("agent.hcl"),
            config(&data_dir, Some(&plugin.socket), "csi-boot", &vp),
        )
        .unwrap();
        let config = dir.join("agent.hcl").display().to_string();
        Host {
            dir,
            plugin,
            data_dir,
            control,
            vp,
            config,
        }
    }

    /// The agent as systemd starts it, on both sockets.
    fn start(&self, notify: &NotifySocket) -> Service {
        Service::start(
            &self.dir,
            &[
                Listen::stream(&self.control, "control"),
                Listen::stream(&self.vp, "volume-plugin"),
            ],
            Some(notify),
            None,
            &["agent", "-config", &self.config],
        )
    }

    fn docker(&self) -> Docker {
        Docker::dockerd(&self.vp)
    }

    /// Every mount under the data dir goes, as at a reboot.
    fn reboot(&self) {
        let mut points = mounts_under(&self.data_dir);
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for point in points {
            let path = std::ffi::CString::new(point.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a NUL-terminated path; umount2 touches no memory of ours.
            let ret = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            assert_eq!(ret, 0, "umount {}", point.display());
        }
        assert_eq!(mounts_under(&self.data_dir), Vec::<PathBuf>::new());
    }
}

/// Makes volume `vol`, mounts it for [`MOUNT_ID`] and writes a file, then
/// stops the agent with `signal`.
fn mounted_then_stopped(host: &Host, signal: libc::c_int) -> PathBuf {
    let notify = NotifySocket::abstract_for(&host.dir);
    let mut agent = host.start(&notify);
    host.docker().create("vol", &[]).ok();
    notify.expect("READY=1", || agent.log());
    let mountpoint = host.docker().mount("vol", MOUNT_ID);
    fs::write(mountpoint.join("before"), "the boot before").unwrap();
    agent.signal(signal);
    agent.wait();
    mountpoint
}

/// The Mount dockerd sends again at its start, on a thread: when it was
/// answered, and how.
fn mount_in_background(docker: Docker) -> thread::JoinHandle<(Instant, std::io::Result<Answer>)> {
    thread::spawn(move || {
        let answer = docker.try_call_mount("vol", MOUNT_ID);
        (Instant::now(), answer)
    })
}

#[track_caller]
fn assert_mounted_with_data(answer: std::io::Result<Answer>, mountpoint: &Path, log: &str) {
    let answer = answer.unwrap_or_else(|err| panic!("no answer: {err}\n{log}"));
    assert_eq!(answer.status, 200, "{answer:?}\n{log}");
    assert_eq!(answer.field("Mountpoint"), mountpoint.display().to_string());
    assert!(
        mount_state(mountpoint).is_some(),
        "answered, but not mounted\n{log}"
    );
    assert_eq!(
        fs::read_to_string(mountpoint.join("before")).unwrap(),
        "the boot before"
    );
}

fn first_mount_with_the_plugin_serving(signal: libc::c_int) {
    let host = Host::new();
    let mountpoint = mounted_then_stopped(&host, signal);
    host.reboot();

    let notify = NotifySocket::abstract_for(&host.dir);
    let agent = host.start(&notify);
    let mount = mount_in_background(host.docker());
    let (answered, answer) = mount.join().unwrap();
    let took = answered - agent.started();
    assert_mounted_with_data(answer, &mountpoint, &agent.log());
    assert!(
        took < FIRST_MOUNT_LIMIT,
        "the first Mount took {took:?} from the agent's start\n{}",
        agent.log()
    );
    eprintln!("first Mount answered {took:?} after the agent's start");
    drop(agent);
    drop(host);
}

#[test]
fn after_a_clean_stop_and_a_reboot_the_first_mount_is_answered_within_2s() {
    if !require_socket_activate() {
        return;
    }
    first_mount_with_the_plugin_serving(libc::SIGTERM);
}

#[test]
fn after_a_kill_and_a_reboot_the_first_mount_is_answered_within_2s() {
    if !require_socket_activate() {
        return;
    }
    first_mount_with_the_plugin_serving(libc::SIGKILL);
}

#[test]
fn a_plugin_that_comes_after_the_agent_is_used_within_2s_of_its_start() {
    if !require_socket_activate() {
        return;
    }
    let mut host = Host::new();
    // Killed: the snapshot still calls the plugin healthy.
    let mountpoint = mounted_then_stopped(&host, libc::SIGKILL);
    host.plugin.kill();
    host.reboot();

    let notify = NotifySocket::abstract_for(&host.dir);
    let agent = host.start(&notify);
    let mount = mount_in_background(host.docker());
    notify.expect("READY=1", || agent.log());
    // The agent tries to stage again, fails, and backs off meanwhile
    // (1 s, doubling): long enough for a retry to be seconds away.
    thread::sleep(PLUGIN_LATE);
    host.plugin.restart();
    let plugin_up = Instant::now();
    let (answered, answer) = mount.join().unwrap();
    assert_mounted_with_data(answer, &mountpoint, &agent.log());
    let took = answered.saturating_duration_since(plugin_up);
    assert!(
        took < FIRST_MOUNT_LIMIT,
        "the first Mount took {took:?} from the plugin's start\n{}",
        agent.log()
    );
    eprintln!("first Mount answered {took:?} after the plugin's start");
}
