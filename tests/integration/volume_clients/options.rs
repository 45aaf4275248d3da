//! The Create options people need, through the real dockerd and `docker`
//! CLI: `mount_group` lets a container running as a non-root user write a
//! fresh volume (and is refused, naming the capability, by a node plugin
//! without VOLUME_MOUNT_GROUP), `read_only` makes each container's mount a reader claim
//! (so containers share a single-writer volume, and none can write it),
//! and `secrets=NAME` reaches the plugin without its value passing through
//! dockerd.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::{require_docker_cli, Host, IMAGE};
use crate::harness::text;
use crate::util::TestDir;

/// The named secret's value: the plugin must get it, nothing may show it.
const SECRET: &str = "d0cker-never-sees-5e2a";

#[test]
fn a_non_root_container_writes_a_fresh_volume_made_with_mount_group() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start();
    let name = host.name.clone();
    host.docker_ok(&[
        "volume",
        "create",
        "-d",
        &name,
        "-o",
        "mount_group=1000",
        "grp",
    ]);
    let listed = host.docker_ok(&[
        "run",
        "--rm",
        "--user",
        "1000:1000",
        "-v",
        "grp:/data",
        IMAGE,
        "sh",
        "-c",
        "echo by-1000 > /data/f && ls -ln /data/f",
    ]);
    // `-rw-r--r-- 1 1000 1000 ...`: the file is the user's and the group's.
    let fields: Vec<&str> = listed.split_whitespace().collect();
    assert_eq!(fields.get(2..4), Some(&["1000", "1000"][..]), "{listed}");
    let shown = host.docker_ok(&["volume", "inspect", "-f", "{{json .Status}}", "grp"]);
    assert!(shown.contains(r#""mount_group":"1000""#), "{shown}");
    // Without the option, the same user cannot write a fresh volume: what
    // the option changes.
    host.docker_ok(&["volume", "create", "-d", &name, "plain"]);
    let refused = host.docker_refused(&[
        "run",
        "--rm",
        "--user",
        "1000:1000",
        "-v",
        "plain:/data",
        IMAGE,
        "sh",
        "-c",
        "echo by-1000 > /data/f",
    ]);
    assert!(refused.contains("Permission denied"), "{refused}");
    host.wait_claims("grp", 0);
    host.wait_claims("plain", 0);
    host.assert_nothing_mounted();
}

#[test]
fn mount_group_on_a_node_without_volume_mount_group_is_refused_naming_it() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start_with("", &["-test-without", "volume-mount-group"]);
    let name = host.name.clone();
    let refused = host.docker_refused(&[
        "volume",
        "create",
        "-d",
        &name,
        "-o",
        "mount_group=1000",
        "grp",
    ]);
    assert!(
        refused.contains("its node does not have VOLUME_MOUNT_GROUP"),
        "{refused}"
    );
    // Nothing is made: not in dockerd's list, not in the agent, not in
    // the plugin.
    assert_eq!(host.docker_volumes(), Vec::<String>::new());
    assert!(host.volume("grp").is_none());
    let calls = host.plugin.as_ref().unwrap().trace_methods();
    assert!(!calls.iter().any(|c| c == "CreateVolume"), "{calls:?}");
    // The same volume without the option is made and used as before.
    host.docker_ok(&["volume", "create", "-d", &name, "grp"]);
    host.docker_ok(&[
        "run",
        "--rm",
        "-v",
        "grp:/data",
        IMAGE,
        "sh",
        "-c",
        "echo x > /data/f",
    ]);
    host.wait_claims("grp", 0);
    host.assert_nothing_mounted();
}

#[test]
fn read_only_volume_containers_share_it_as_readers_and_cannot_write() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start();
    let name = host.name.clone();
    // Both single-node-writer (the default): one writer at a time.
    host.docker_ok(&[
        "volume",
        "create",
        "-d",
        &name,
        "-o",
        "read_only=true",
        "ro",
    ]);
    host.docker_ok(&["volume", "create", "-d", &name, "rw"]);
    for container in ["r1", "r2"] {
        host.docker_ok(&[
            "run", "-d", "--name", container, "-v", "ro:/data", IMAGE, "sleep", "1000",
        ]);
    }
    // Two running containers hold the volume at once, each as a reader.
    host.wait_claims("ro", 2);
    let status = host.volume("ro").unwrap();
    let modes: Vec<&str> = status.claims.iter().map(|c| c.mode.as_str()).collect();
    assert_eq!(modes, ["read", "read"], "{}", host.logs());
    let refused = host.docker(&["exec", "r1", "sh", "-c", "echo x > /data/f"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Read-only file system"),
        "{}",
        text(&refused)
    );
    let inspect = host.docker_ok(&["volume", "inspect", "-f", "{{json .Status}}", "ro"]);
    assert!(inspect.contains(r#""read_only":true"#), "{inspect}");
    // The default volume beside it: a second container is refused.
    host.docker_ok(&[
        "run", "-d", "--name", "w1", "-v", "rw:/data", IMAGE, "sleep", "1000",
    ]);
    let second = host.docker_refused(&[
        "run", "-d", "--name", "w2", "-v", "rw:/data", IMAGE, "sleep", "1000",
    ]);
    assert!(second.contains("already has a writer"), "{second}");
    host.docker_ok(&["rm", "-f", "r1", "r2", "w1", "w2"]);
    host.wait_claims("ro", 0);
    host.wait_claims("rw", 0);
    host.assert_nothing_mounted();
}

#[test]
fn a_named_secret_reaches_the_plugin_and_docker_never_holds_it() {
    if !require_docker_cli() {
        return;
    }
    let dir = TestDir::new();
    let secrets = dir.join("volume-secrets");
    for path in [secrets.clone(), secrets.join("nfs")] {
        fs::create_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
    }
    let value = secrets.join("nfs").join("password");
    fs::write(&value, SECRET).unwrap();
    fs::set_permissions(&value, fs::Permissions::from_mode(0o600)).unwrap();
    // The plugin refuses CreateVolume, NodeStage and NodePublish without it.
    let required = dir.join("required-secrets");
    fs::write(&required, format!("password={SECRET}\n")).unwrap();
    let required = required.display().to_string();
    let block = format!("  secrets_dir = {:?}\n", secrets.display().to_string());
    let host = Host::start_with(&block, &["-test-require-secrets", &required]);
    let name = host.name.clone();
    let refused = host.docker_refused(&["volume", "create", "-d", &name, "nosecret"]);
    assert!(
        refused.contains("secret \"password\" is missing or wrong"),
        "{refused}"
    );
    host.docker_ok(&["volume", "create", "-d", &name, "-o", "secrets=nfs", "sec"]);
    host.docker_ok(&[
        "run",
        "--rm",
        "-v",
        "sec:/data",
        IMAGE,
        "sh",
        "-c",
        "echo through > /data/f",
    ]);
    let inspect = host.docker_ok(&["volume", "inspect", "sec"]);
    // dockerd keeps the option as given: the name, not the value.
    assert!(inspect.contains(r#""secrets": "nfs""#), "{inspect}");
    let status = host.agent.cli(&["volume", "status", "sec"]);
    assert!(status.status.success(), "{}", text(&status));
    for (what, shown) in [
        ("docker volume inspect", inspect),
        ("volume status", text(&status)),
        ("the agent's debug log", host.agent.log()),
        ("dockerd's log", host.dockerd().log()),
    ] {
        assert!(!shown.contains(SECRET), "{what} shows the secret:\n{shown}");
    }
    host.wait_claims("sec", 0);
    host.assert_nothing_mounted();
}
