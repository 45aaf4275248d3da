//! Socket activation: the listening sockets a service manager (systemd's
//! `.socket` units, or `systemd-socket-activate`) binds before the agent
//! starts and hands it at exec, so that a client that comes first (dockerd
//! restoring its containers at boot) connects at once and its calls wait
//! in the socket's backlog until the agent answers.
//!
//! The protocol is systemd's `sd_listen_fds(3)`: `LISTEN_PID` names this
//! process, `LISTEN_FDS` counts the descriptors from 3 on, and
//! `LISTEN_FDNAMES` (optional) names them, colon-separated, as the units'
//! `FileDescriptorName=` say. Each descriptor is taken for the socket its
//! name says ([`CONTROL_NAME`], [`VOLUME_PLUGIN_NAME`]) or, under any other
//! name, for the socket whose path it is bound to. Every descriptor must be
//! a listening unix stream socket, and one taken for a socket must be bound
//! at that socket's path (where the CLI and dockerd look): anything else is
//! refused with what it is. Descriptors left over are closed, each named in
//! the log. The variables are removed from the environment, so that no
//! process the agent starts believes they are its own.
//!
//! A socket handed over is the service manager's: the agent never removes
//! its file, at shutdown or otherwise.

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::spec::AgentConfig;
use crate::sys::listen_fd;

/// The name (`FileDescriptorName=`) of the control socket's descriptor.
pub const CONTROL_NAME: &str = "control";

/// The name of the volume plugin socket's descriptor.
pub const VOLUME_PLUGIN_NAME: &str = "volume-plugin";

/// The first descriptor handed over (`SD_LISTEN_FDS_START`).
const FIRST_FD: RawFd = 3;

/// More descriptors than this is a mistake in the units, not a use.
const MAX_FDS: usize = 64;

/// The sockets the agent serves that a service manager may hand over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Control,
    VolumePlugin,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Control => "the control socket",
            Role::VolumePlugin => "the volume plugin socket",
        })
    }
}

/// The sockets handed over, taken for their roles.
#[derive(Debug, Default)]
pub struct Handed {
    pub control: Option<UnixListener>,
    pub volume_plugin: Option<UnixListener>,
}

/// Why the handed descriptors cannot be used.
#[derive(Debug)]
pub enum Error {
    /// `LISTEN_FDS` or `LISTEN_FDNAMES` cannot be read.
    Variables(String),
    /// A descriptor is not open, or the kernel will not say what it is.
    Descriptor {
        fd: RawFd,
        name: String,
        err: io::Error,
    },
    /// A descriptor is no listening unix stream socket.
    NotAListener {
        fd: RawFd,
        name: String,
        what: String,
    },
    /// A descriptor named for a socket is bound elsewhere.
    WrongPath {
        fd: RawFd,
        role: Role,
        bound: String,
        expected: PathBuf,
    },
    /// Two descriptors for one socket.
    Twice {
        role: Role,
        first: RawFd,
        second: RawFd,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Variables(message) => write!(f, "socket activation: {message}"),
            Error::Descriptor { fd, name, .. } => {
                write!(f, "socket activation: cannot use descriptor {fd} ({name:?})")
            }
            Error::NotAListener { fd, name, what } => write!(
                f,
                "socket activation: descriptor {fd} ({name:?}) is {what}, not a listening unix stream socket (ListenStream= of a path)"
            ),
            Error::WrongPath { fd, role, bound, expected } => write!(
                f,
                "socket activation: descriptor {fd} for {role} is bound to {bound}, not {}",
                expected.display()
            ),
            Error::Twice { role, first, second } => write!(
                f,
                "socket activation: descriptors {first} and {second} are both for {role}"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Descriptor { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// What the environment says was handed over: descriptors 3.. with names.
#[derive(Debug, PartialEq, Eq)]
struct Listed {
    names: Vec<String>,
}

/// Reads and removes `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES`.
/// `None` when nothing was handed to this process (no variables, or
/// another process's). Called before any thread starts: it changes the
/// environment.
fn listed_in_env() -> Result<Option<Listed>, Error> {
    let var = |name: &str| std::env::var(name).ok();
    let (pid, fds, names) = (var("LISTEN_PID"), var("LISTEN_FDS"), var("LISTEN_FDNAMES"));
    for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(name);
    }
    listed(
        std::process::id(),
        pid.as_deref(),
        fds.as_deref(),
        names.as_deref(),
    )
}

/// The pure part of [`listed_in_env`].
fn listed(
    me: u32,
    pid: Option<&str>,
    fds: Option<&str>,
    names: Option<&str>,
) -> Result<Option<Listed>, Error> {
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(None);
    };
    if pid.trim().parse::<u32>().ok() != Some(me) {
        // Meant for the process that execed us, or a parent's leftovers.
        log::debug!("LISTEN_PID={pid} is not this process ({me}): no sockets handed over");
        return Ok(None);
    }
    let count: usize = fds
        .trim()
        .parse()
        .map_err(|_| Error::Variables(format!("LISTEN_FDS={fds:?} is not a count")))?;
    if count > MAX_FDS {
        return Err(Error::Variables(format!(
            "LISTEN_FDS={count} is more than {MAX_FDS} descriptors"
        )));
    }
    let mut listed: Vec<String> = match names {
        Some(names) if !names.is_empty() => names.split(':').map(str::to_string).collect(),
        _ => Vec::new(),
    };
    if !listed.is_empty() && listed.len() != count {
        return Err(Error::Variables(format!(
            "LISTEN_FDNAMES names {} descriptors, LISTEN_FDS counts {count}",
            listed.len()
        )));
    }
    // systemd's own name for a descriptor nobody named.
    listed.resize(count, "unknown".to_string());
    Ok(Some(Listed { names: listed }))
}

/// What one descriptor is for, from its name and the path it is bound to.
fn role_of(
    name: &str,
    bound: Option<&Path>,
    control: &Path,
    volume_plugin: Option<&Path>,
) -> Option<Role> {
    match name {
        CONTROL_NAME => Some(Role::Control),
        VOLUME_PLUGIN_NAME => Some(Role::VolumePlugin),
        _ => {
            let bound = bound?;
            if same_path(bound, control) {
                Some(Role::Control)
            } else if volume_plugin.is_some_and(|p| same_path(bound, p)) {
                Some(Role::VolumePlugin)
            } else {
                None
            }
        }
    }
}

/// Whether two socket paths name the same file: their directories
/// resolved (the data dir may be reached through a symlink), their names
/// equal.
fn same_path(a: &Path, b: &Path) -> bool {
    let resolve = |p: &Path| -> Option<PathBuf> {
        let dir = fs::canonicalize(p.parent()?).ok()?;
        Some(dir.join(p.file_name()?))
    };
    a == b || matches!((resolve(a), resolve(b)), (Some(x), Some(y)) if x == y)
}

/// Takes the sockets handed to this process for the control socket in
/// `config`'s data dir and the `volume_plugin` block's socket.
pub fn take_for(config: &AgentConfig) -> Result<Handed, Error> {
    // The data dir may not exist yet (a unit's socket in it makes it):
    // paths are compared as they resolve, where they do.
    let control = config.data_dir.join(crate::api::SOCKET_NAME);
    let volume_plugin = config.volume_plugin.as_ref().map(|b| b.socket_path());
    take(&control, volume_plugin.as_deref())
}

/// Takes the sockets handed to this process: the control socket at
/// `control`, the volume plugin socket at `volume_plugin` (when the
/// config has the block). Nothing handed over is `Handed::default()`.
pub fn take(control: &Path, volume_plugin: Option<&Path>) -> Result<Handed, Error> {
    let Some(listed) = listed_in_env()? else {
        return Ok(Handed::default());
    };
    // Every descriptor is ours from here on, even if one is refused: all
    // are taken first, so that an error closes them all.
    let mut fds = Vec::with_capacity(listed.names.len());
    for (n, name) in listed.names.iter().enumerate() {
        let fd = FIRST_FD + n as RawFd;
        let owned = listen_fd::take_inherited(fd).map_err(|err| Error::Descriptor {
            fd,
            name: name.clone(),
            err,
        })?;
        fds.push((fd, name.clone(), owned));
    }
    let mut handed = Handed::default();
    let mut taken: Vec<(Role, RawFd)> = Vec::new();
    for (fd, name, owned) in fds {
        let listener = listener(fd, &name, owned)?;
        let bound = listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(Path::to_path_buf));
        let shown = bound.as_ref().map_or_else(
            || "an unnamed or abstract address".to_string(),
            |p| p.display().to_string(),
        );
        let Some(role) = role_of(&name, bound.as_deref(), control, volume_plugin) else {
            log::warn!(
                "Socket activation: closing descriptor {fd} ({name:?}, bound to {shown}): it is none of the agent's sockets"
            );
            continue;
        };
        let expected = match role {
            Role::Control => Some(control),
            Role::VolumePlugin => volume_plugin,
        };
        let Some(expected) = expected else {
            log::warn!(
                "Socket activation: closing descriptor {fd} ({name:?}, bound to {shown}): the config has no volume_plugin block"
            );
            continue;
        };
        if !bound.as_deref().is_some_and(|b| same_path(b, expected)) {
            return Err(Error::WrongPath {
                fd,
                role,
                bound: shown,
                expected: expected.to_path_buf(),
            });
        }
        if let Some((_, first)) = taken.iter().find(|(r, _)| *r == role) {
            return Err(Error::Twice {
                role,
                first: *first,
                second: fd,
            });
        }
        taken.push((role, fd));
        keep_private(expected);
        log::info!("Socket activation: serving {role} on descriptor {fd} ({name:?}, {shown})");
        match role {
            Role::Control => handed.control = Some(listener),
            Role::VolumePlugin => handed.volume_plugin = Some(listener),
        }
    }
    Ok(handed)
}

/// The descriptor as a listener, if it is a listening unix stream socket.
fn listener(fd: RawFd, name: &str, owned: OwnedFd) -> Result<UnixListener, Error> {
    let kind = listen_fd::socket_kind(owned.as_fd()).map_err(|err| match err.raw_os_error() {
        Some(libc::ENOTSOCK) => Error::NotAListener {
            fd,
            name: name.to_string(),
            what: "no socket".to_string(),
        },
        _ => Error::Descriptor {
            fd,
            name: name.to_string(),
            err,
        },
    })?;
    if !kind.is_unix_listener() {
        let family = match kind.domain {
            libc::AF_UNIX => "a unix",
            libc::AF_INET => "an IPv4",
            libc::AF_INET6 => "an IPv6",
            _ => "another family's",
        };
        let sort = match (kind.sock_type, kind.listening) {
            (libc::SOCK_STREAM, true) => "listening stream socket",
            (libc::SOCK_STREAM, false) => "stream socket that is not listening",
            (libc::SOCK_DGRAM, _) => "datagram socket",
            (libc::SOCK_SEQPACKET, _) => "seqpacket socket",
            _ => "socket",
        };
        return Err(Error::NotAListener {
            fd,
            name: name.to_string(),
            what: format!("{family} {sort}"),
        });
    }
    let listener = UnixListener::from(owned);
    // A unit's NonBlocking=yes hands it non-blocking; the servers set the
    // mode they need from a known one.
    listener
        .set_nonblocking(false)
        .map_err(|err| Error::Descriptor {
            fd,
            name: name.to_string(),
            err,
        })?;
    Ok(listener)
}

/// The agent's sockets are root's alone (0600), as it binds them itself;
/// a unit without `SocketMode=0600` leaves 0666, which is tightened here.
fn keep_private(path: &Path) {
    let Ok(meta) = fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        log::warn!(
            "Socket activation: {} had mode {mode:03o}; making it 0600 (set SocketMode=0600 in its unit)",
            path.display()
        );
        if let Err(err) = fs::set_permissions(path, fs::Permissions::from_mode(0o600)) {
            log::warn!("Cannot make {} 0600: {err}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_for_another_process_or_none_hand_nothing_over() {
        assert_eq!(listed(7, None, None, None).unwrap(), None);
        assert_eq!(listed(7, Some("8"), Some("2"), None).unwrap(), None);
        assert_eq!(listed(7, Some("x"), Some("2"), None).unwrap(), None);
    }

    #[test]
    fn names_are_read_and_missing_ones_are_unknown() {
        let named = listed(7, Some("7"), Some("2"), Some("control:volume-plugin")).unwrap();
        assert_eq!(named.unwrap().names, ["control", "volume-plugin"]);
        let unnamed = listed(7, Some("7"), Some("2"), None).unwrap();
        assert_eq!(unnamed.unwrap().names, ["unknown", "unknown"]);
        let empty = listed(7, Some("7"), Some("0"), Some("")).unwrap();
        assert_eq!(empty.unwrap().names, Vec::<String>::new());
    }

    #[test]
    fn bad_counts_and_names_are_refused_naming_the_variable() {
        let err = listed(7, Some("7"), Some("two"), None).unwrap_err();
        assert!(err.to_string().contains("LISTEN_FDS=\"two\""), "{err}");
        let err = listed(7, Some("7"), Some("2"), Some("control")).unwrap_err();
        assert!(err.to_string().contains("LISTEN_FDNAMES names 1"), "{err}");
        let err = listed(7, Some("7"), Some("1000"), None).unwrap_err();
        assert!(err.to_string().contains("more than 64"), "{err}");
    }

    #[test]
    fn a_descriptor_is_for_the_socket_its_name_says_or_else_its_path() {
        let control = Path::new("/var/lib/csi-agent/control.sock");
        let vp = Path::new("/run/docker/plugins/csi.sock");
        assert_eq!(
            role_of("control", None, control, Some(vp)),
            Some(Role::Control)
        );
        assert_eq!(
            role_of("volume-plugin", Some(control), control, Some(vp)),
            Some(Role::VolumePlugin)
        );
        assert_eq!(
            role_of("csi-agent.socket", Some(vp), control, Some(vp)),
            Some(Role::VolumePlugin)
        );
        assert_eq!(
            role_of("unknown", Some(control), control, None),
            Some(Role::Control)
        );
        assert_eq!(role_of("unknown", Some(vp), control, None), None);
        assert_eq!(role_of("metrics", None, control, Some(vp)), None);
    }
}
