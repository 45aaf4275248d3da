//! Rootful `podman` (Debian's, 4.x) pointed at the agent's socket by a
//! containers.conf of the test's own (`[engine.volume_plugins]`), with
//! its own root, run root and tmp dir, offline: images are imported from
//! the busybox root the docker tests build, and no registry is searched.
//!
//! Podman sends one fixed ID with every Mount and Unmount
//! ([`PODMAN_MOUNT_ID`], its `pseudoCtrID`), counts a volume's users
//! itself, and calls Mount on the first and Unmount after the last: so a
//! volume has one `podman-` claim however many containers use it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::{kill_processes_under, require_client, Host};
use crate::dockerd::busybox_rootfs;
use crate::harness::text;
use crate::util::require_root;
use crate::volume_util::spec;

/// The ID Podman sends with every Mount and Unmount of a plugin volume
/// (`pseudoCtrID` in libpod's `volume_internal_linux.go`, seen on the
/// wire from Debian's podman 4.3).
const PODMAN_MOUNT_ID: &str = "2f73349cfc4630255319c6c8dfc1b46a8996ace9d14d8e07563b165915918ec2";

/// The busybox image, as Podman names an imported image.
const IMAGE: &str = "localhost/csi-test/busybox:1";

/// Podman's call timeout (`volume_plugin_timeout`, seconds): above the
/// agent's `mount_timeout` ([`super::MOUNT_TIMEOUT`], 25 s), so that a
/// Mount that waits gets the agent's answer rather than Podman's timeout.
const PLUGIN_TIMEOUT: u32 = 30;

/// A rootful podman whose every file is under `dir`, talking to the
/// agent's volume plugin socket under the host's driver name.
struct Podman {
    dir: PathBuf,
}

impl Podman {
    fn new(host: &Host) -> Podman {
        let dir = host.agent.dir.mkdir("podman");
        let path = |name: &str| dir.join(name).display().to_string();
        // Root lacks CAP_SYS_RESOURCE on these machines: runc cannot raise
        // the default ulimits (RLIMIT_NPROC and RLIMIT_NOFILE), so none are
        // set. No network (`netns = "none"`): none is needed, and the
        // host's network config is left alone.
        let containers_conf = format!(
            r#"[containers]
default_ulimits = []
netns = "none"

[network]
network_config_dir = {networks:?}

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = {events:?}
volume_plugin_timeout = {PLUGIN_TIMEOUT}

[engine.volume_plugins]
{name:?} = {socket:?}
"#,
            networks = path("networks"),
            events = path("events.log"),
            name = host.name,
            socket = host.socket.display().to_string(),
        );
        fs::write(dir.join("containers.conf"), containers_conf).unwrap();
        let storage_conf = format!(
            "[storage]\ndriver = \"vfs\"\nrunroot = {:?}\ngraphroot = {:?}\n",
            path("runroot"),
            path("root")
        );
        fs::write(dir.join("storage.conf"), storage_conf).unwrap();
        fs::write(
            dir.join("registries.conf"),
            "unqualified-search-registries = []\n",
        )
        .unwrap();
        let podman = Podman { dir };
        let rootfs = busybox_rootfs(&host.agent.dir.mkdir("podman-rootfs"));
        let tarball = podman.dir.join("busybox.tar");
        let tar = Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&tarball)
            .arg(".")
            .output()
            .unwrap();
        assert!(tar.status.success(), "tar: {}", text(&tar));
        podman.ok(&["import", &tarball.display().to_string(), IMAGE]);
        podman
    }

    fn run(&self, args: &[&str]) -> Output {
        let path = |name: &str| self.dir.join(name);
        Command::new("podman")
            .arg("--root")
            .arg(path("root"))
            .arg("--runroot")
            .arg(path("runroot"))
            .arg("--tmpdir")
            .arg(path("tmp"))
            .args(args)
            .env("CONTAINERS_CONF", path("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", path("storage.conf"))
            .env("CONTAINERS_REGISTRIES_CONF", path("registries.conf"))
            .stdin(Stdio::null())
            .output()
            .expect("run podman")
    }

    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {args:?} failed:\n{}",
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Containers go while the agent still answers their Unmounts.
        let _ = self.run(&["rm", "--all", "--force", "--time", "0"]);
        kill_processes_under(Path::new(&self.dir));
    }
}

#[test]
fn podman_creates_mounts_with_its_fixed_id_and_removes_a_volume() {
    if !(require_root() && require_client("podman", "podman")) {
        return;
    }
    let host = Host::without_engine();
    let podman = Podman::new(&host);
    podman.ok(&[
        "volume",
        "create",
        "--driver",
        &host.name,
        "-o",
        "size=32MiB",
        "pvol",
    ]);
    assert!(host.volume("pvol").is_some(), "{}", host.logs());
    let listed = podman.ok(&["volume", "ls", "--format", "{{.Name}} {{.Driver}}"]);
    assert_eq!(listed.trim(), format!("pvol {}", host.name));

    podman.ok(&[
        "run",
        "--rm",
        "-v",
        "pvol:/data",
        IMAGE,
        "sh",
        "-c",
        "echo from-podman > /data/f",
    ]);
    host.wait_claims("pvol", 0);

    // While a container holds it: one claim, of Podman's fixed ID...
    podman.ok(&[
        "run",
        "-d",
        "--name",
        "holder",
        "-v",
        "pvol:/data",
        IMAGE,
        "sleep",
        "1000",
    ]);
    let claims = host.wait_claims("pvol", 1);
    assert_eq!(claims, [format!("podman-{PODMAN_MOUNT_ID}")]);
    // `volume status` lists one claim, Podman's.
    let shown = host.agent.cli(&["volume", "status", "pvol"]);
    assert!(shown.status.success(), "{}", text(&shown));
    let shown = String::from_utf8_lossy(&shown.stdout);
    let claim_lines = shown.lines().filter(|l| l.starts_with("podman-")).count();
    assert_eq!(claim_lines, 1, "{shown}");
    // ...also with a second container reading it at once: Podman counts
    // the users of the mount itself.
    let read = podman.ok(&["run", "--rm", "-v", "pvol:/data", IMAGE, "cat", "/data/f"]);
    assert_eq!(read, "from-podman\n");
    assert_eq!(host.claims("pvol"), claims);
    // The last user gone, the claim goes.
    podman.ok(&["rm", "--force", "--time", "0", "holder"]);
    host.wait_claims("pvol", 0);
    host.assert_nothing_mounted();
    let shown = host.agent.cli(&["volume", "status", "pvol"]);
    assert!(
        !String::from_utf8_lossy(&shown.stdout).contains("podman-"),
        "{}",
        text(&shown)
    );

    podman.ok(&["volume", "rm", "pvol"]);
    assert!(host.volume("pvol").is_none(), "{}", host.logs());
}

#[test]
fn a_volume_made_with_csi_agent_is_adopted_by_podman_volume_create() {
    if !(require_root() && require_client("podman", "podman")) {
        return;
    }
    let host = Host::without_engine();
    let podman = Podman::new(&host);
    let file = host.agent.dir.join("prepared.hcl");
    fs::write(&file, spec("prepared", &["single-node-writer"], None)).unwrap();
    let out = host
        .agent
        .cli(&["volume", "create", &file.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    // Podman asks no plugin about a name it does not know at `run`: the
    // name is made Podman's with `volume create --driver`, whose Get finds
    // the volume, so no Create is sent and the options given are not
    // compared: the volume keeps its own.
    podman.ok(&[
        "volume",
        "create",
        "--driver",
        &host.name,
        "-o",
        "access_mode=single-node-multi-writer",
        "prepared",
    ]);
    let creates = host.agent.log().matches("/VolumeDriver.Create").count();
    assert_eq!(creates, 0, "{}", host.logs());
    let volume = host.volume("prepared").unwrap();
    assert_eq!(volume.capabilities, ["single-node-writer/file-system"]);
    podman.ok(&[
        "run",
        "--rm",
        "-v",
        "prepared:/data",
        IMAGE,
        "sh",
        "-c",
        "echo adopted > /data/a",
    ]);
    let read = podman.ok(&[
        "run",
        "--rm",
        "-v",
        "prepared:/data",
        IMAGE,
        "cat",
        "/data/a",
    ]);
    assert_eq!(read, "adopted\n");
    host.wait_claims("prepared", 0);
    host.assert_nothing_mounted();
}
