//! The protocol's calls and errors, the socket's life, and volumes made
//! through the endpoint or with `csi-agent volume create`.

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use json::Value;

use super::{Docker, Host};
use crate::harness::{agent_refusing, config_text, text, Agent};
use crate::util::{require_root, Plugin};
use crate::volume_util::{
    connect, spawn_call, spec, try_volume, wait_for_calls, wait_volume, LONG,
};

#[test]
fn activate_says_volume_driver_and_capabilities_say_local() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    for docker in [
        host.docker(),
        host.podman(),
        Docker {
            content_type: None,
            ..host.docker()
        },
        Docker {
            content_type: Some("application/json"),
            ..host.docker()
        },
    ] {
        let answer = docker.call("/Plugin.Activate", "").ok();
        assert_eq!(
            answer.body.get("Implements"),
            Some(&Value::strings(["VolumeDriver"])),
            "{answer:?}"
        );
        let answer = docker.call("/VolumeDriver.Capabilities", "{}").ok();
        let scope = answer
            .body
            .get("Capabilities")
            .and_then(|c| c.get("Scope"))
            .and_then(Value::as_str);
        assert_eq!(scope, Some("local"), "{answer:?}");
    }
}

#[test]
fn an_unknown_call_is_404_and_a_foreign_content_type_refused() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let answer = host.docker().call("/VolumeDriver.Snapshot", "{}");
    assert_eq!(answer.status, 404, "{answer:?}");
    assert_eq!(answer.err(), "unknown call /VolumeDriver.Snapshot");
    let xml = Docker {
        content_type: Some("text/xml"),
        ..host.docker()
    };
    let answer = xml.call("/Plugin.Activate", "");
    assert_eq!(answer.status, 415, "{answer:?}");
    assert!(answer.err().contains("\"text/xml\""), "{answer:?}");
    // A body that is not JSON, and a call without its Name.
    let message = host.docker().call("/VolumeDriver.Get", "{").failed();
    assert!(
        message.starts_with("/VolumeDriver.Get: the body is not JSON"),
        "{message}"
    );
    let message = host.docker().call("/VolumeDriver.Mount", "{}").failed();
    assert_eq!(
        message,
        "/VolumeDriver.Mount: the request names no volume (Name)"
    );
}

#[test]
fn the_socket_is_private_replaces_a_stale_one_and_goes_at_shutdown() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start();
    let socket = plugin.dir.join("docker-plugins").join("csi-test.sock");
    fs::create_dir_all(socket.parent().unwrap()).unwrap();
    // A socket nobody answers on, as a killed agent leaves it.
    drop(UnixListener::bind(&socket).unwrap());
    assert!(UnixStream::connect(&socket).is_err());
    let mut agent = Agent::start_with_config(&super::config(&plugin, &socket, ""));
    let meta = fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    Docker::dockerd(&socket).call("/Plugin.Activate", "").ok();
    assert_eq!(agent.sigterm(), 0);
    assert!(
        fs::symlink_metadata(&socket).is_err(),
        "the socket outlived the agent"
    );
}

#[test]
fn a_file_at_the_socket_s_path_stops_the_agent_and_is_kept() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start();
    let socket = plugin.dir.join("csi-test.sock");
    fs::write(&socket, "mine").unwrap();
    let data_dir = plugin.dir.join("data");
    let config = plugin.dir.join("agent.hcl");
    let mut text_of_config = config_text(&data_dir, &[]);
    text_of_config.push_str(&super::config(&plugin, &socket, ""));
    fs::write(&config, text_of_config).unwrap();
    let out = agent_refusing(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{} exists and is not a socket", socket.display())),
        "{}",
        text(&out)
    );
    assert_eq!(fs::read_to_string(&socket).unwrap(), "mine");
}

#[test]
fn get_of_an_unknown_name_is_an_error_and_fast() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let start = Instant::now();
    for name in ["nobody", "no/such", ""] {
        let message = host.docker().named("Get", name).failed();
        let expected = if name.is_empty() {
            "/VolumeDriver.Get: the request names no volume (Name)".to_string()
        } else {
            format!("volume {name:?} not found")
        };
        assert_eq!(message, expected);
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn neither_silent_clients_nor_a_waiting_mount_hold_up_a_get() {
    if !require_root() {
        return;
    }
    let host = Host::start_with("  mount_timeout = \"5s\"\n");
    host.docker().create("slow", &[]).ok();
    // A Mount whose publish hangs holds its worker until mount_timeout.
    host.plugin.set_faults("NodePublishVolume hang count=1\n");
    let docker = host.docker();
    let mount = spawn_call(move || docker.try_call_mount("slow", "m"));
    wait_for_calls(&host.plugin, "NodePublishVolume", 1);
    // More silent connections than the endpoint has workers.
    let silent: Vec<UnixStream> = (0..csi_agent::volume_plugin::WORKERS + 4)
        .map(|_| UnixStream::connect(&host.socket).unwrap())
        .collect();
    let start = Instant::now();
    let message = host.docker().named("Get", "nobody").failed();
    assert_eq!(message, "volume \"nobody\" not found");
    host.docker().named("Get", "slow").ok();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    drop(silent);
    let answer = mount.recv_timeout(LONG).unwrap().unwrap();
    assert!(answer.failed().contains("mount_timeout"));
}

#[test]
fn create_get_list_and_remove_a_volume() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let docker = host.docker();
    docker
        .create(
            "data",
            &[
                ("size", "64MiB"),
                ("parameters.tier", "fast"),
                ("secrets.token", "hunter2"),
            ],
        )
        .ok();
    let status = try_volume(&host.agent, "data").unwrap().unwrap();
    assert_eq!(status.plugin_id, "hp");
    assert_eq!(status.capabilities, ["single-node-writer/file-system"]);
    assert_eq!(status.parameters["tier"], "fast");
    assert!(status.created);

    let answer = docker.named("Get", "data").ok();
    let volume = answer.body.get("Volume").unwrap();
    assert_eq!(volume.get("Name").and_then(Value::as_str), Some("data"));
    assert_eq!(volume.get("Mountpoint").and_then(Value::as_str), Some(""));
    let status = volume.get("Status").unwrap();
    for (key, value) in [
        ("plugin_id", "hp"),
        ("capacity", "64.0 MiB"),
        ("access_mode", "single-node-writer"),
        ("attachment_mode", "file-system"),
        ("condition", "schedulable"),
    ] {
        assert_eq!(
            status.get(key).and_then(Value::as_str),
            Some(value),
            "{key} in {status:?}"
        );
    }
    let text = json::to_string(&answer.body);
    assert!(
        !text.contains("hunter2") && !text.contains("token"),
        "{text}"
    );
    assert!(!host.agent.log().contains("hunter2"));

    let answer = docker.call("/VolumeDriver.List", "{}").ok();
    let names: Vec<&str> = answer
        .body
        .get("Volumes")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .filter_map(|v| v.get("Name").and_then(Value::as_str))
        .collect();
    assert_eq!(names, ["data"]);
    assert_eq!(docker.named("Path", "data").ok().field("Mountpoint"), "");

    docker.named("Remove", "data").ok();
    assert!(try_volume(&host.agent, "data").unwrap().is_none());
    assert!(host
        .plugin
        .trace_methods()
        .contains(&"DeleteVolume".to_string()));
    assert_eq!(
        docker.named("Get", "data").failed(),
        "volume \"data\" not found"
    );
}

#[test]
fn create_again_succeeds_with_the_same_options_and_names_each_difference() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let docker = host.docker();
    let opts = [("size", "64MiB"), ("parameters.tier", "fast")];
    docker.create("data", &opts).ok();
    docker.create("data", &opts).ok();
    docker.create("data", &[]).ok();
    let message = docker
        .create(
            "data",
            &[
                ("access_mode", "single-node-multi-writer"),
                ("parameters.tier", "slow"),
            ],
        )
        .failed();
    assert_eq!(
        message,
        "volume \"data\" exists with other options: capability single-node-multi-writer/file-system (the volume's: single-node-writer/file-system); parameters.tier \"slow\" (the volume's is \"fast\")"
    );
    let creates = host
        .plugin
        .trace_methods()
        .iter()
        .filter(|m| *m == "CreateVolume")
        .count();
    assert_eq!(creates, 1);
}

#[test]
fn bad_options_and_block_volumes_are_refused_naming_the_volume() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let docker = host.docker();
    for (opts, expected) in [
        (
            vec![("colour", "red")],
            "volume \"v\": unknown option \"colour\" (accepted: plugin_id, capacity_min, size,",
        ),
        (
            vec![("attachment_mode", "block-device")],
            "volume \"v\": option attachment_mode \"block-device\" is refused: a docker volume is a directory",
        ),
        (
            vec![("size", "huge")],
            "volume \"v\": option size: invalid size \"huge\"",
        ),
        (
            vec![("plugin_id", "nfs")],
            "volume \"v\": ",
        ),
    ] {
        let message = docker.create("v", &opts).failed();
        assert!(message.starts_with(expected), "{opts:?}: {message}");
    }
    let message = docker.create("a b", &[]).failed();
    assert!(
        message.starts_with("invalid volume name \"a b\""),
        "{message}"
    );
    assert!(try_volume(&host.agent, "v").unwrap().is_none());
}

#[test]
fn a_volume_made_with_volume_create_is_used_by_its_id() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    connect(&host.agent)
        .volume_create(
            "shared.hcl",
            &spec("shared", &["single-node-multi-writer"], None),
        )
        .unwrap();
    let docker = host.docker();
    let answer = docker.named("Get", "shared").ok();
    assert_eq!(
        answer
            .body
            .get("Volume")
            .and_then(|v| v.get("Status"))
            .and_then(|s| s.get("access_mode"))
            .and_then(Value::as_str),
        Some("single-node-multi-writer")
    );
    let mountpoint = docker.mount("shared", "m1");
    fs::write(mountpoint.join("hello"), "from docker").unwrap();
    docker.unmount("shared", "m1");
    // Created by the agent: Remove deletes it in the plugin.
    docker.named("Remove", "shared").ok();
    assert!(try_volume(&host.agent, "shared").unwrap().is_none());
}

#[test]
fn remove_of_a_registered_volume_only_deregisters_it() {
    if !require_root() {
        return;
    }
    let host = Host::start();
    let external = host
        .plugin
        .client()
        .create_volume(&csi_agent::csi::types::CreateVolume {
            name: "outside".into(),
            capabilities: vec![csi_agent::csi::Capability::new(
                csi_agent::csi::AccessMode::SingleNodeWriter,
                csi_agent::csi::AttachmentMode::FileSystem,
            )],
            ..Default::default()
        })
        .unwrap();
    connect(&host.agent)
        .volume_register(
            "outside.hcl",
            &spec(
                "outside",
                &["single-node-writer"],
                Some(&external.volume_id),
            ),
        )
        .unwrap();
    host.docker().named("Remove", "outside").ok();
    assert!(try_volume(&host.agent, "outside").unwrap().is_none());
    assert!(!host
        .plugin
        .trace_methods()
        .contains(&"DeleteVolume".to_string()));
}

#[test]
fn a_create_past_mount_timeout_says_it_goes_on_and_a_later_create_finds_it() {
    if !require_root() {
        return;
    }
    let host = Host::start_with("  mount_timeout = \"1s\"\n");
    host.plugin.set_faults("CreateVolume sleep=3s count=1\n");
    let message = host.docker().create("late", &[("size", "1MiB")]).failed();
    assert_eq!(
        message,
        "volume \"late\" is still being created (see `csi-agent volume status late`) after 1s (volume_plugin's mount_timeout)"
    );
    wait_volume(
        &host.agent,
        "late",
        "created",
        |v| v.created && !v.creating,
        LONG,
    );
    host.docker().create("late", &[("size", "1MiB")]).ok();
    let creates = host
        .plugin
        .trace_methods()
        .iter()
        .filter(|m| *m == "CreateVolume")
        .count();
    assert_eq!(creates, 1);
}
