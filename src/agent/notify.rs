//! Readiness for a service manager (`Type=notify`): `READY=1` once the
//! agent's state is restored, its plugins and tasks re-adopted and every
//! socket it serves bound, `STOPPING=1` when it begins to stop.
//!
//! systemd's `sd_notify(3)` protocol, written by hand: one datagram of
//! `KEY=VALUE` lines to the unix socket `$NOTIFY_SOCKET` names (a path, or
//! an abstract address written with a leading `@`). Nothing links
//! libsystemd. The variable is removed from the environment when read, so
//! that no process the agent starts (a task, a plugin, the guard) sends
//! its own notifications in the agent's name.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The variable that names the service manager's socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Where notifications go, if anywhere.
pub(super) struct Notifier {
    target: Option<(UnixDatagram, SocketAddr, String)>,
}

impl Notifier {
    /// Reads and removes `$NOTIFY_SOCKET`. Called before any thread
    /// starts: it changes the environment. An address that cannot be used
    /// is logged, and notifications go nowhere.
    pub(super) fn from_env() -> Notifier {
        let Some(value) = std::env::var_os(NOTIFY_SOCKET) else {
            return Notifier { target: None };
        };
        std::env::remove_var(NOTIFY_SOCKET);
        let text = value.to_string_lossy().into_owned();
        let target = address(&text).and_then(|addr| {
            let socket = UnixDatagram::unbound()?;
            Ok((socket, addr, text.clone()))
        });
        match target {
            Ok(target) => Notifier {
                target: Some(target),
            },
            Err(err) => {
                log::warn!("{NOTIFY_SOCKET}={text:?} cannot be used, so systemd will not hear that the agent is ready: {err}");
                Notifier { target: None }
            }
        }
    }

    /// `READY=1`, with a status line.
    pub(super) fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}\n"));
    }

    /// `STOPPING=1`.
    pub(super) fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=Stopping\n");
    }

    fn send(&self, message: &str) {
        let Some((socket, addr, text)) = &self.target else {
            return;
        };
        match socket.send_to_addr(message.as_bytes(), addr) {
            Ok(_) => log::debug!("Told {text}: {}", message.trim_end().replace('\n', " ")),
            Err(err) => log::warn!("Cannot notify {NOTIFY_SOCKET} {text}: {err}"),
        }
    }
}

/// `/path` or `@abstract` as a socket address.
fn address(text: &str) -> io::Result<SocketAddr> {
    if let Some(name) = text.strip_prefix('@') {
        SocketAddr::from_abstract_name(name.as_bytes())
    } else if text.starts_with('/') {
        SocketAddr::from_pathname(text)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "neither an absolute path nor an abstract address (@name)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_abstract_addresses_are_read_and_others_refused() {
        let path = address("/run/systemd/notify").unwrap();
        assert_eq!(
            path.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        let abstract_addr = address("@/org/freedesktop/systemd1/notify/123").unwrap();
        assert_eq!(
            abstract_addr.as_abstract_name(),
            Some(&b"/org/freedesktop/systemd1/notify/123"[..])
        );
        assert!(address("relative/notify").is_err());
        assert!(address("").is_err());
    }

    #[test]
    fn a_notification_reaches_an_abstract_socket_as_one_datagram() {
        let name = format!("csi-agent-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = UnixDatagram::bind_addr(&addr).unwrap();
        let notifier = Notifier {
            target: Some((
                UnixDatagram::unbound().unwrap(),
                address(&format!("@{name}")).unwrap(),
                format!("@{name}"),
            )),
        };
        notifier.ready("Running");
        notifier.stopping();
        let mut buf = [0u8; 256];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=Running\n");
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1\nSTATUS=Stopping\n");
    }
}
