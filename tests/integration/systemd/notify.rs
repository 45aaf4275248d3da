//! `Type=notify`: READY=1 once the agent's sockets are bound and its state
//! restored, STOPPING=1 at SIGTERM, and no process the agent starts
//! inheriting `NOTIFY_SOCKET` or the `LISTEN_*` variables.

use std::fs;
use std::os::unix::net::UnixStream;

use super::{config, require_socket_activate, Listen, NotifySocket, Service};
use crate::util::{Plugin, TestDir};
use crate::volume_plugin::Docker;

#[test]
fn ready_comes_once_the_sockets_are_bound_and_stopping_at_sigterm() {
    if !require_socket_activate() {
        return;
    }
    let dir = TestDir::new();
    let plugin = Plugin::start();
    let notify = NotifySocket::at_path(&dir.join("notify"));
    let data_dir = dir.join("data");
    let vp = dir.join("plugins/csi-notify.sock");
    fs::write(
        dir.join("agent.hcl"),
        config(&data_dir, Some(&plugin.socket), "csi-notify", &vp),
    )
    .unwrap();
    let config_path = dir.join("agent.hcl").display().to_string();
    let mut agent = Service::start(
        &dir,
        &[],
        Some(&notify),
        None,
        &["agent", "-config", &config_path],
    );

    let ready = notify.expect("READY=1", || agent.log());
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    // At that moment, not after a retry: both sockets accept, and the
    // state and plugins are in (the loop answers next).
    let log = agent.log();
    assert!(
        log.contains("Agent running"),
        "READY=1 before the agent runs:\n{log}"
    );
    UnixStream::connect(data_dir.join("control.sock"))
        .unwrap_or_else(|err| panic!("READY=1 but the control socket refuses: {err}\n{log}"));
    UnixStream::connect(&vp)
        .unwrap_or_else(|err| panic!("READY=1 but the volume plugin socket refuses: {err}\n{log}"));
    let list = Docker::dockerd(&vp).call("/VolumeDriver.List", "{}").ok();
    assert!(list.body.get("Volumes").is_some(), "{list:?}");

    agent.signal(libc::SIGTERM);
    let stopping = notify.expect("STOPPING=1", || agent.log());
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping:?}");
    assert_eq!(agent.wait().code(), Some(0), "{}", agent.log());
    // The agent bound them: it removes them.
    assert!(fs::symlink_metadata(&vp).is_err());
    assert!(fs::symlink_metadata(data_dir.join("control.sock")).is_err());
    drop(plugin);
}

/// The environment a process started with, as `KEY=VALUE` strings.
fn environ(pid: i32) -> Vec<String> {
    fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// The children of `pid`.
fn children(pid: i32) -> Vec<i32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn no_child_of_the_agent_inherits_notify_socket_or_the_listen_variables() {
    if !require_socket_activate() {
        return;
    }
    let dir = TestDir::new();
    let notify = NotifySocket::abstract_for(&dir);
    let data_dir = dir.mkdir("data");
    let control = data_dir.join("control.sock");
    let data_arg = data_dir.display().to_string();
    // `-dev` starts the built-in hostpath plugin as its child.
    let agent = Service::start(
        &dir,
        &[Listen::stream(&control, "control")],
        Some(&notify),
        None,
        &["agent", "-dev", "-data-dir", &data_arg],
    );
    // The first connection makes the activator exec the agent.
    let _first = UnixStream::connect(&control).unwrap();
    let ready = notify.expect("READY=1", || agent.log());
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    // The agent was given them (its own environment shows it)...
    let own = environ(agent.pid());
    for var in [
        "NOTIFY_SOCKET=",
        "LISTEN_FDS=",
        "LISTEN_PID=",
        "LISTEN_FDNAMES=",
    ] {
        assert!(
            own.iter().any(|v| v.starts_with(var)),
            "{var} not given: {own:?}"
        );
    }
    // ...and its child, started before READY=1, has none of them.
    let kids = children(agent.pid());
    assert!(!kids.is_empty(), "-dev started no plugin\n{}", agent.log());
    for kid in kids {
        let env = environ(kid);
        assert!(!env.is_empty(), "no environment for child {kid}");
        for var in [
            "NOTIFY_SOCKET=",
            "LISTEN_FDS=",
            "LISTEN_PID=",
            "LISTEN_FDNAMES=",
        ] {
            assert!(
                !env.iter().any(|v| v.starts_with(var)),
                "child {kid} inherited {var}: {env:?}"
            );
        }
        assert!(env.iter().any(|v| v.starts_with("RUST_LOG=")), "{env:?}");
    }
}
