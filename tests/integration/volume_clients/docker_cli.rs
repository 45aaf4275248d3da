//! The `docker` CLI against a private dockerd that finds the agent's
//! volume plugin socket: volumes made, listed, inspected, used by
//! containers in turn and at once, and removed; options refused with the
//! agent's message in the CLI's stderr.

use std::fs;

use super::{find_files, require_docker_cli, Host, IMAGE};
use crate::harness::text;
use crate::volume_util::spec;

/// What `-o secrets.token=...` carries: never shown by inspect.
const SECRET: &str = "s3cret-never-shown";

#[test]
fn a_docker_volume_is_created_listed_inspected_used_in_turn_and_removed() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start();
    let secret = format!("secrets.token={SECRET}");
    host.docker_ok(&[
        "volume",
        "create",
        "-d",
        &host.name,
        "-o",
        "size=64MiB",
        "-o",
        "access_mode=single-node-writer",
        "-o",
        &secret,
        "data1",
    ]);
    assert_eq!(host.docker_volumes(), ["data1"]);
    let agent_side = host.volume("data1").expect("the agent has the volume");
    assert_eq!(agent_side.plugin_id, crate::volume_util::PLUGIN);

    // Inspect shows the driver's Status (from Get), without the secret.
    // (The engine itself keeps the create's `-o` options and shows them
    // as `Options`, secrets too: that part is not the driver's to hide.)
    let inspect = host.docker_ok(&["volume", "inspect", "data1"]);
    let status = host.docker_ok(&["volume", "inspect", "-f", "{{json .Status}}", "data1"]);
    assert!(
        status.trim().starts_with('{') && status.trim() != "{}",
        "no Status in inspect: {inspect}"
    );
    assert!(!status.contains(SECRET), "{status}");
    assert!(
        status.contains(crate::volume_util::PLUGIN),
        "Status names no plugin: {status}"
    );
    assert!(
        status.contains("single-node-writer"),
        "Status names no access mode: {status}"
    );
    let driver = host.docker_ok(&["volume", "inspect", "-f", "{{.Driver}}", "data1"]);
    assert_eq!(driver.trim(), host.name);

    // One container writes, the next one reads.
    host.docker_ok(&[
        "run",
        "--rm",
        "-v",
        "data1:/data",
        IMAGE,
        "sh",
        "-c",
        "echo written-by-first > /data/f",
    ]);
    assert_eq!(host.claims("data1"), Vec::<String>::new());
    let read = host.docker_ok(&["run", "--rm", "-v", "data1:/data", IMAGE, "cat", "/data/f"]);
    assert_eq!(read, "written-by-first\n");
    // The file is the plugin's: in its base dir, not a copy of the engine's.
    let plugin = host.plugin.as_ref().unwrap();
    let backing = find_files(&plugin.base, "f");
    assert_eq!(backing.len(), 1, "{backing:?}");
    assert_eq!(
        fs::read_to_string(&backing[0]).unwrap(),
        "written-by-first\n"
    );
    host.wait_claims("data1", 0);
    host.assert_nothing_mounted();

    host.docker_ok(&["volume", "rm", "data1"]);
    assert_eq!(host.docker_volumes(), Vec::<String>::new());
    assert!(host.volume("data1").is_none(), "{}", host.logs());
    assert!(find_files(&plugin.base, "f").is_empty());
}

#[test]
fn a_volume_made_with_csi_agent_volume_create_is_used_by_its_name() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start();
    let file = host.agent.dir.join("prepared.hcl");
    fs::write(&file, spec("prepared", &["single-node-writer"], None)).unwrap();
    let out = host
        .agent
        .cli(&["volume", "create", &file.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    // Listed by the engine without a docker create...
    assert_eq!(host.docker_volumes(), ["prepared"]);
    // ...and found by name by a container that names no driver.
    host.docker_ok(&[
        "run",
        "--rm",
        "-v",
        "prepared:/data",
        IMAGE,
        "sh",
        "-c",
        "echo by-name > /data/g",
    ]);
    let read = host.docker_ok(&[
        "run",
        "--rm",
        "-v",
        "prepared:/data",
        IMAGE,
        "cat",
        "/data/g",
    ]);
    assert_eq!(read, "by-name\n");
    host.wait_claims("prepared", 0);
    host.assert_nothing_mounted();
}

#[test]
fn bad_options_and_block_volumes_are_refused_with_the_agents_message() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start();
    // (option, what the message must name)
    let cases: &[(&str, &[&str])] = &[
        ("colour=blue", &["colour", "access_mode", "capacity_min"]),
        ("size=lots", &["size", "lots"]),
        (
            "access_mode=everyone-writes",
            &["access_mode", "everyone-writes"],
        ),
        ("attachment_mode=block-device", &["block-device"]),
    ];
    for (n, (option, named)) in cases.iter().enumerate() {
        let name = format!("bad{n}");
        let stderr =
            host.docker_refused(&["volume", "create", "-d", &host.name, "-o", option, &name]);
        for word in *named {
            assert!(
                stderr.contains(word),
                "-o {option}: the CLI's stderr does not name {word:?}:\n{stderr}"
            );
        }
        assert!(host.volume(&name).is_none(), "-o {option} made {name}");
    }
    assert_eq!(host.docker_volumes(), Vec::<String>::new());
}

#[test]
fn a_second_writer_container_is_refused_naming_the_first() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start();
    host.docker_ok(&["volume", "create", "-d", &host.name, "solo"]);
    let first = host.docker_ok(&[
        "run",
        "-d",
        "--name",
        "first",
        "-v",
        "solo:/data",
        IMAGE,
        "sleep",
        "1000",
    ]);
    let holder = host.wait_claims("solo", 1).remove(0);
    assert!(holder.starts_with("docker-"), "{holder}");
    let stderr = host.docker_refused(&[
        "run",
        "--rm",
        "--name",
        "second",
        "-v",
        "solo:/data",
        IMAGE,
        "true",
    ]);
    // The engine names the volume by the mount point Get answers, which
    // has the holder's claim in it: the driver's own message, after the
    // call's name, must name the holder.
    let (_, driver_says) = stderr
        .split_once("VolumeDriver.Mount:")
        .unwrap_or_else(|| panic!("not the driver's refusal:\n{stderr}"));
    assert!(
        driver_says.contains("\"solo\"") && driver_says.contains(&holder),
        "the refusal names neither the volume nor the holder {holder}:\n{stderr}"
    );
    // The refusal left the holder's claim alone, and no other.
    assert_eq!(host.claims("solo"), std::slice::from_ref(&holder));
    host.docker_ok(&["rm", "-f", first.trim()]);
    host.wait_claims("solo", 0);
    // Once the first is gone, the next writer mounts it.
    host.docker_ok(&["run", "--rm", "-v", "solo:/data", IMAGE, "true"]);
    host.wait_claims("solo", 0);
    host.assert_nothing_mounted();
}

#[test]
fn a_multi_writer_volume_is_shared_by_two_running_containers() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start();
    host.docker_ok(&[
        "volume",
        "create",
        "-d",
        &host.name,
        "-o",
        "access_mode=single-node-multi-writer",
        "shared",
    ]);
    // Each writes its own file, then waits for the other's.
    let script = |me: &str, other: &str| {
        format!("echo {me} > /data/{me}; while ! test -f /data/{other}; do sleep 0.05; done; cat /data/{other}; exec sleep 1000")
    };
    let mut ids = Vec::new();
    for (me, other) in [("a", "b"), ("b", "a")] {
        let id = host.docker_ok(&[
            "run",
            "-d",
            "-v",
            "shared:/data",
            IMAGE,
            "sh",
            "-c",
            &script(me, other),
        ]);
        ids.push(id.trim().to_string());
    }
    let claims = host.wait_claims("shared", 2);
    assert!(
        claims.iter().all(|c| c.starts_with("docker-")),
        "{claims:?}"
    );
    assert_ne!(claims[0], claims[1]);
    for (id, other) in ids.iter().zip(["b", "a"]) {
        let start = std::time::Instant::now();
        loop {
            let logs = host.docker_ok(&["logs", id]);
            if logs.trim() == other {
                break;
            }
            assert!(
                start.elapsed() < crate::harness::WAIT,
                "container {id} never read {other}: {logs:?}\n{}",
                host.logs()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    for id in &ids {
        host.docker_ok(&["rm", "-f", id]);
    }
    host.wait_claims("shared", 0);
    host.assert_nothing_mounted();
}

#[test]
fn a_name_the_agent_does_not_know_stays_the_engines_local_volume() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start();
    // No driver named: the engine asks every plugin's Get about the name,
    // the agent's among them, and makes a `local` volume when none has it.
    host.docker_ok(&[
        "run",
        "--rm",
        "-v",
        "nobodys:/data",
        IMAGE,
        "sh",
        "-c",
        "echo local > /data/l",
    ]);
    let driver = host.docker_ok(&["volume", "inspect", "-f", "{{.Driver}}", "nobodys"]);
    assert_eq!(driver.trim(), "local");
    assert!(host.volume("nobodys").is_none(), "{}", host.logs());
    assert_eq!(host.docker_volumes(), Vec::<String>::new());
}

#[test]
fn a_second_docker_create_with_other_options_is_the_engines_old_volume() {
    if !require_docker_cli() {
        return;
    }
    let host = Host::start();
    let create = |mode: &str| {
        let option = format!("access_mode={mode}");
        host.docker(&["volume", "create", "-d", &host.name, "-o", &option, "again"])
    };
    assert!(create("single-node-writer").status.success());
    let creates = |host: &Host| host.agent.log().matches("/VolumeDriver.Create").count();
    assert_eq!(creates(&host), 1, "{}", host.logs());
    // The engine answers a create of a name its store has by itself: the
    // driver is not asked, so the agent cannot refuse other options, and
    // the volume keeps the first ones.
    let again = create("single-node-multi-writer");
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(creates(&host), 1, "{}", host.logs());
    let volume = host.volume("again").unwrap();
    assert_eq!(volume.capabilities, ["single-node-writer/file-system"]);
}
