//! The options a Create keeps with its volume, through the real socket:
//! `read_only` (every Mount a reader claim, mounted read-only),
//! `mount_group` (VOLUME_MOUNT_GROUP where the node has it, refused before
//! any RPC where it does not), and `secrets=NAME` (a secret of the agent's
//! `secrets_dir`, shown nowhere).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::Host;
use crate::harness::{agent_refusing, config_text, healthy, text, unhealthy, WAIT};
use crate::util::{mount_state, require_root, Plugin, TestDir};
use crate::volume_util::{try_volume, volume, PLUGIN};

/// The value of the named secret: it must show nowhere but the plugin.
const SECRET: &str = "pa55-never-shown-8c1f";

#[test]
fn mount_group_gives_the_mount_to_the_group_and_is_kept_with_the_volume() {
    if !require_root() {
        return;
    }
    let mut host = Host::start();
    let docker = host.docker();
    docker.create("grp", &[("mount_group", "1000")]).ok();
    assert_eq!(volume(&host.agent, "grp").mount_group, "1000");
    let mountpoint = docker.mount("grp", "m1");
    let meta = fs::metadata(&mountpoint).unwrap();
    assert_eq!(meta.gid(), 1000, "{mountpoint:?}");
    assert_eq!(meta.mode() & 0o2070, 0o2070, "mode {:o}", meta.mode());
    let status = docker.named("Get", "grp").ok();
    let shown = json::to_string(&status.body);
    assert!(shown.contains(r#""mount_group":"1000""#), "{shown}");
    // The plugin got it in NodeStage and NodePublish; the Create before
    // it asked for none (the trace names the calls).
    let calls = host.plugin.trace_methods();
    for rpc in ["NodeStageVolume", "NodePublishVolume"] {
        assert!(calls.iter().any(|c| c == rpc), "{calls:?}");
    }
    // Other options than the volume's are refused, naming them.
    let message = docker.create("grp", &[("mount_group", "2000")]).failed();
    assert_eq!(
        message,
        "volume \"grp\" exists with other options: mount_group 2000 (the volume's is 1000)"
    );
    docker.create("grp", &[("mount_group", "1000")]).ok();
    docker.unmount("grp", "m1");
    // Kept through a restart.
    assert_eq!(host.agent.sigterm(), 0);
    host.agent.restart();
    host.agent.wait_for(
        crate::volume_util::PLUGIN,
        crate::harness::healthy,
        crate::harness::WAIT,
    );
    assert_eq!(volume(&host.agent, "grp").mount_group, "1000");
    let out = host.agent.cli(&["volume", "status", "grp"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with("Mount Group") && l.ends_with("1000")),
        "{}",
        text(&out)
    );
    // A bad GID is refused naming the option; nothing is made.
    let message = docker.create("g2", &[("mount_group", "staff")]).failed();
    assert_eq!(
        message,
        "volume \"g2\": option mount_group must be a numeric group ID (GID), found \"staff\""
    );
    assert!(try_volume(&host.agent, "g2").unwrap().is_none());
}

#[test]
fn mount_group_is_refused_before_any_rpc_where_the_node_lacks_it() {
    if !require_root() {
        return;
    }
    let host = Host::start_with_plugin("", &["-test-without", "volume-mount-group"]);
    let docker = host.docker();
    let message = docker.create("grp", &[("mount_group", "1000")]).failed();
    assert!(
        message.contains("its node does not have VOLUME_MOUNT_GROUP"),
        "{message}"
    );
    assert!(try_volume(&host.agent, "grp").unwrap().is_none());
    let calls = host.plugin.trace_methods();
    assert!(
        !calls.iter().any(|c| c == "CreateVolume"),
        "a CreateVolume went out: {calls:?}"
    );
    // Without the option, the same plugin serves as before.
    docker.create("grp", &[]).ok();
    let mountpoint = docker.mount("grp", "m1");
    assert_ne!(fs::metadata(&mountpoint).unwrap().gid(), 1000);
    docker.unmount("grp", "m1");
}

#[test]
fn a_mount_group_volume_is_not_mounted_by_a_node_that_lost_volume_mount_group() {
    if !require_root() {
        return;
    }
    let mut host = Host::start();
    let docker = host.docker();
    docker.create("grp", &[("mount_group", "1000")]).ok();
    // The plugin is replaced by a version without the capability.
    host.plugin.kill();
    host.agent.wait_for(PLUGIN, unhealthy, WAIT);
    host.plugin
        .restart_adding(&["-test-without", "volume-mount-group"]);
    // Healthy again, fingerprinted anew without it.
    let lost = |p: &csi_agent::proto::agent::Plugin| {
        healthy(p)
            && p.fingerprint.as_ref().is_some_and(|f| {
                !f.node_capabilities
                    .iter()
                    .any(|c| c == "volume-mount-group")
            })
    };
    host.agent.wait_for(PLUGIN, lost, WAIT);
    let message = docker.with_id("Mount", "grp", "m1").failed();
    assert_eq!(
        message,
        "volume \"grp\" gives its mounts group 1000 (mount_group), and plugin \"hp\"'s node does not have VOLUME_MOUNT_GROUP"
    );
    assert!(volume(&host.agent, "grp").claims.is_empty());
    let calls = host.plugin.trace_methods();
    assert!(
        !calls
            .iter()
            .any(|c| c == "NodeStageVolume" || c == "NodePublishVolume"),
        "the volume was staged or published: {calls:?}"
    );
}

#[test]
fn a_read_only_volume_takes_reader_claims_mounted_read_only() {
    if !require_root() {
        return;
    }
    let mut host = Host::start();
    let docker = host.docker();
    // A single-node-writer volume (the default): one writer at a time, but
    // any number of readers.
    docker.create("ro", &[("read_only", "true")]).ok();
    let first = docker.mount("ro", "c1");
    let second = docker.mount("ro", "c2");
    for mountpoint in [&first, &second] {
        assert_eq!(mount_state(mountpoint), Some(true), "{mountpoint:?} not ro");
        let err = fs::write(mountpoint.join("f"), "x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    }
    let status = volume(&host.agent, "ro");
    assert!(status.mounts_read_only);
    let modes: Vec<&str> = status.claims.iter().map(|c| c.mode.as_str()).collect();
    assert_eq!(modes, ["read", "read"]);
    let shown = json::to_string(&docker.named("Get", "ro").ok().body);
    assert!(shown.contains(r#""read_only":true"#), "{shown}");
    let message = docker.create("ro", &[("read_only", "false")]).failed();
    assert_eq!(
        message,
        "volume \"ro\" exists with other options: read_only false (the volume's is true)"
    );
    docker.unmount("ro", "c1");
    docker.unmount("ro", "c2");
    // Kept through a restart.
    assert_eq!(host.agent.sigterm(), 0);
    host.agent.restart();
    host.agent.wait_for(
        crate::volume_util::PLUGIN,
        crate::harness::healthy,
        crate::harness::WAIT,
    );
    let out = host.agent.cli(&["volume", "status", "ro"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("Docker Mounts") && l.ends_with("read-only (reader claims)")),
        "{}",
        text(&out)
    );
    let again = docker.mount("ro", "c3");
    assert_eq!(mount_state(&again), Some(true));
    docker.unmount("ro", "c3");

    // The default volume beside it: its second Mount is refused.
    docker.create("rw", &[("read_only", "false")]).ok();
    let writer = docker.mount("rw", "w1");
    assert_eq!(mount_state(&writer), Some(false));
    let message = docker.with_id("Mount", "rw", "w2").failed();
    assert!(message.contains("already has a writer"), "{message}");
    docker.unmount("rw", "w1");
    let message = docker.create("bad", &[("read_only", "yes")]).failed();
    assert_eq!(
        message,
        "volume \"bad\": option read_only must be true or false, found \"yes\""
    );
    assert!(try_volume(&host.agent, "bad").unwrap().is_none());
}

/// A root-only secrets dir holding secret `nfs` with `password`.
fn secrets_dir(dir: &TestDir) -> PathBuf {
    let root = dir.join("volume-secrets");
    for path in [root.clone(), root.join("nfs")] {
        fs::create_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
    }
    let value = root.join("nfs").join("password");
    fs::write(&value, SECRET).unwrap();
    fs::set_permissions(&value, fs::Permissions::from_mode(0o600)).unwrap();
    root
}

/// The hostpath flags that make it refuse every CreateVolume, NodeStage
/// and NodePublish without `password` = [`SECRET`].
fn requiring_the_secret(dir: &TestDir) -> PathBuf {
    let file = dir.join("required-secrets");
    fs::write(&file, format!("password={SECRET}\n")).unwrap();
    file
}

fn block_line(secrets: &Path) -> String {
    format!("  secrets_dir = {:?}\n", secrets.display().to_string())
}

#[test]
fn a_named_secret_reaches_the_plugin_and_shows_nowhere() {
    if !require_root() {
        return;
    }
    let dir = TestDir::new();
    let secrets = secrets_dir(&dir);
    let required = requiring_the_secret(&dir);
    let required = required.display().to_string();
    let host =
        Host::start_with_plugin(&block_line(&secrets), &["-test-require-secrets", &required]);
    let docker = host.docker();
    // Without the secret, the plugin refuses: the check is real.
    let message = docker.create("plain", &[]).failed();
    assert!(
        message.contains("secret \"password\" is missing or wrong"),
        "{message}"
    );
    docker.create("sec", &[("secrets", "nfs")]).ok();
    // NodeStage and NodePublish carry it too.
    let mountpoint = docker.mount("sec", "m1");
    fs::write(mountpoint.join("f"), "x").unwrap();
    let get = json::to_string(&docker.named("Get", "sec").ok().body);
    let list = json::to_string(&docker.call("/VolumeDriver.List", "{}").ok().body);
    let status = host.agent.cli(&["volume", "status", "sec"]);
    assert!(status.status.success(), "{}", text(&status));
    let status_json = host.agent.cli(&["volume", "status", "-json", "sec"]);
    for (what, shown) in [
        ("Get", get),
        ("List", list),
        ("volume status", text(&status)),
        ("volume status -json", text(&status_json)),
        ("the agent's debug log", host.agent.log()),
    ] {
        assert!(!shown.contains(SECRET), "{what} shows the secret: {shown}");
    }
    assert!(text(&status).contains("password"), "{}", text(&status));
    // The same secret again agrees; another secret's keys do not.
    docker.create("sec", &[("secrets", "nfs")]).ok();
    docker.unmount("sec", "m1");
    // An unknown name, and no value of it anywhere.
    let message = docker.create("other", &[("secrets", "smb")]).failed();
    assert_eq!(
        message,
        format!(
            "volume \"other\": option secrets: no secret {} (secrets_dir)",
            secrets.join("smb").display()
        )
    );
    // The inline form still works, with a warning in the log (naming the
    // key, never the value).
    docker
        .create("inline", &[("secrets.password", SECRET)])
        .ok();
    // Logged before the Create's answer.
    let log = host.agent.log();
    assert!(
        log.contains(
            "volume inline: option secrets.password passes its value through the container engine"
        ),
        "{log}"
    );
    assert!(!log.contains(SECRET));
    // A secret made readable by others is refused, naming the path.
    let value = secrets.join("nfs").join("password");
    fs::set_permissions(&value, fs::Permissions::from_mode(0o644)).unwrap();
    let message = docker.create("exposed", &[("secrets", "nfs")]).failed();
    assert_eq!(
        message,
        format!(
            "volume \"exposed\": option secrets: {} is open to group or others (mode 0644): secrets must be root's alone (0700 directories, 0600 files)",
            value.display()
        )
    );
    assert!(try_volume(&host.agent, "exposed").unwrap().is_none());
}

#[test]
fn a_secrets_dir_open_to_others_stops_the_agent_naming_it() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start();
    let dir = TestDir::new();
    let secrets = secrets_dir(&dir);
    fs::set_permissions(&secrets, fs::Permissions::from_mode(0o755)).unwrap();
    let socket = plugin.dir.join("csi-test.sock");
    let config = plugin.dir.join("agent.hcl");
    let mut text_of_config = config_text(&plugin.dir.join("data"), &[]);
    text_of_config.push_str(&super::config(&plugin, &socket, &block_line(&secrets)));
    fs::write(&config, text_of_config).unwrap();
    let out = agent_refusing(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "volume_plugin's secrets_dir: {} is open to group or others (mode 0755)",
            secrets.display()
        )),
        "{stderr}"
    );
}
