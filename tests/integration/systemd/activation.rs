//! Socket activation: the agent serves the sockets
//! `systemd-socket-activate` binds and hands it, by name or by path,
//! closes one it has no use for, leaves their files at exit, and refuses
//! a descriptor that is no listening unix stream socket or is bound
//! elsewhere, saying so.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::process::Command;

use super::{config, require_socket_activate, Listen, NotifySocket, Service};
use crate::harness::text;
use crate::util::{bin, TestDir};
use crate::volume_plugin::Docker;

#[test]
fn the_agent_serves_the_sockets_it_is_handed_and_leaves_their_files() {
    if !require_socket_activate() {
        return;
    }
    let dir = TestDir::new();
    let notify = NotifySocket::abstract_for(&dir);
    let data_dir = dir.mkdir("data");
    let control = data_dir.join("control.sock");
    let vp = dir.join("plugins/csi-handed.sock");
    let extra = dir.join("extra.sock");
    fs::write(
        dir.join("agent.hcl"),
        config(&data_dir, None, "csi-handed", &vp),
    )
    .unwrap();
    let config_path = dir.join("agent.hcl").display().to_string();
    let listen = [
        Listen::stream(&control, "control"),
        // Unnamed: found by the path it is bound to.
        Listen {
            path: vp.clone(),
            name: None,
            datagram: false,
        },
        Listen::stream(&extra, "metrics"),
    ];
    let mut agent = Service::start(
        &dir,
        &listen,
        Some(&notify),
        None,
        &["agent", "-config", &config_path],
    );

    // dockerd's call comes before the agent runs: it starts the agent and
    // waits in the socket's backlog, then is answered.
    let list = Docker::dockerd(&vp).call("/VolumeDriver.List", "{}").ok();
    assert!(list.body.get("Volumes").is_some(), "{list:?}");
    let ready = notify.expect("READY=1", || agent.log());
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    let log = agent.log();
    for line in [
        "serving the control socket on descriptor 3 (\"control\"",
        "serving the volume plugin socket on descriptor 4 (\"unknown\"",
        "closing descriptor 5 (\"metrics\"",
    ] {
        assert!(log.contains(line), "no {line:?} in the log:\n{log}");
    }
    // The CLI reaches the agent on the handed control socket.
    let status = Command::new(bin())
        .args(["plugin", "status"])
        .env("CSI_AGENT_ADDR", format!("unix://{}", control.display()))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", text(&status));
    // systemd-socket-activate binds them 0644; the agent's are root's alone.
    for socket in [&control, &vp] {
        let mode = fs::metadata(socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", socket.display());
    }

    agent.signal(libc::SIGTERM);
    let stopping = notify.expect("STOPPING=1", || agent.log());
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping:?}");
    assert_eq!(agent.wait().code(), Some(0), "{}", agent.log());
    // The service manager's sockets stay where it bound them.
    for socket in [&control, &vp, &extra] {
        assert!(
            fs::symlink_metadata(socket).is_ok(),
            "{} was removed",
            socket.display()
        );
    }
}

#[test]
fn a_handed_datagram_socket_is_refused_naming_what_it_is() {
    if !require_socket_activate() {
        return;
    }
    let dir = TestDir::new();
    let notify = NotifySocket::abstract_for(&dir);
    let data_dir = dir.mkdir("data");
    let control = data_dir.join("control.sock");
    fs::write(
        dir.join("agent.hcl"),
        format!("data_dir = {:?}\n", data_dir.display().to_string()),
    )
    .unwrap();
    let config_path = dir.join("agent.hcl").display().to_string();
    let listen = [Listen {
        path: control.clone(),
        name: Some("control"),
        datagram: true,
    }];
    let mut agent = Service::start(
        &dir,
        &listen,
        Some(&notify),
        None,
        &["agent", "-config", &config_path],
    );
    // A datagram starts it.
    UnixDatagram::unbound()
        .unwrap()
        .send_to(b"hello", &control)
        .unwrap();
    assert_eq!(agent.wait().code(), Some(1), "{}", agent.log());
    let log = agent.log();
    assert!(
        log.contains("descriptor 3 (\"control\") is a unix datagram socket, not a listening unix stream socket"),
        "{log}"
    );
    assert_eq!(
        notify.next(std::time::Duration::from_millis(100)),
        None,
        "{log}"
    );
}

#[test]
fn a_socket_named_control_but_bound_elsewhere_is_refused() {
    if !require_socket_activate() {
        return;
    }
    let dir = TestDir::new();
    let data_dir = dir.mkdir("data");
    let elsewhere = dir.join("elsewhere.sock");
    fs::write(
        dir.join("agent.hcl"),
        format!("data_dir = {:?}\n", data_dir.display().to_string()),
    )
    .unwrap();
    let config_path = dir.join("agent.hcl").display().to_string();
    let mut agent = Service::start(
        &dir,
        &[Listen::stream(&elsewhere, "control")],
        None,
        None,
        &["agent", "-config", &config_path],
    );
    let _first = UnixStream::connect(&elsewhere).unwrap();
    assert_eq!(agent.wait().code(), Some(1), "{}", agent.log());
    let log = agent.log();
    let expected = format!(
        "descriptor 3 for the control socket is bound to {}, not {}",
        elsewhere.display(),
        data_dir.join("control.sock").display()
    );
    assert!(log.contains(&expected), "no {expected:?} in:\n{log}");
}
