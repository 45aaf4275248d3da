//! Docker's Volume Plugin protocol, served on a unix socket of its own, so
//! that containers started by `docker`, `docker compose` and `podman` use
//! the agent's CSI volumes: JSON over HTTP POST (`/Plugin.Activate`,
//! `/VolumeDriver.Create`, `.Remove`, `.Mount`, `.Unmount`, `.Path`,
//! `.Get`, `.List`, `.Capabilities`).
//!
//! This is an edge, as `api` is: Docker's JSON stays here. Each call is
//! mapped to the control API's own [`api::Request`] (a volume's status,
//! create, delete or deregister, a claim or a release) and sent to the main
//! loop as an [`api::Call`], exactly as `csi-agent volume ...` would send
//! it, so a volume made through docker is the same volume as one made with
//! `volume create`, with the same checks and messages, and the durability
//! of every claim is the volume manager's (a claim is journalled before its
//! first RPC, and nothing is answered before it is durable).
//!
//! # Threads
//!
//! [`crate::httpd`] serves the socket: one poll thread holds every
//! connection, and [`WORKERS`] threads run the handlers. A handler waits
//! for the loop's answer on a channel, at most `mount_timeout`; a Mount
//! holds its worker for as long as its claim takes, so this server has
//! more workers than httpd's default, and a silent or slow client holds a
//! connection slot, never a worker. The loop never waits on this server.
//!
//! # Mounts and claims
//!
//! Each `Mount(Name, ID)` is a claim of the volume by an alloc ID made of
//! the engine and the mount ID ([`claim_alloc_id`]): `docker-<ID>` for
//! dockerd (content type `v1.2` or none), `podman-<ID>` for Podman (which
//! sends `v1.1`). A repeat of the same Mount is the same claim (the manager
//! answers an idempotent repeat), and `Unmount` releases exactly that
//! claim. Docker does not tell the driver a `:ro`: every mount is a write
//! claim unless the volume was created with `-o read_only=true` (or allows
//! no writer), so a single-writer volume serves one writing container at a
//! time; for containers that share a volume, create it with
//! `access_mode=single-node-multi-writer`, or read-only.
//!
//! | file | does |
//! |---|---|
//! | `socket.rs` | the socket: made 0600 under a temporary name and renamed into place, a stale one replaced, anything else refused |
//! | `wire.rs` | Docker's requests and answers as JSON |
//! | `options.rs` | a Create's `-o KEY=VALUE` options as a volume spec, and their comparison with an existing volume |
//! | `secrets.rs` | the named secrets of `secrets_dir` that `-o secrets=NAME` chooses |
//! | `calls.rs` | each call: its requests to the loop and its answer |

mod calls;
mod mount_counts;
mod options;
pub mod reconcile;
mod secrets;
mod socket;
mod wire;

use std::fmt;
use std::io;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crossbeam_channel::Sender;

use crate::api;
use crate::httpd;
use crate::spec::VolumePluginConfig;

pub use options::{OptionError, ACCEPTED_OPTIONS};
pub use secrets::{SecretsError, MAX_KEYS as MAX_SECRET_KEYS, MAX_VALUE_BYTES as MAX_SECRET_BYTES};

/// The threads that run the handlers: more than httpd's default, because a
/// Mount or Create holds its worker while it waits for the loop (up to
/// `mount_timeout`), and Gets must still be answered meanwhile.
pub const WORKERS: usize = 16;

/// The content types accepted (besides none): dockerd's, Podman's, plain
/// JSON.
pub const CONTENT_TYPES: &[&str] = &[
    "application/vnd.docker.plugins.v1.2+json",
    "application/vnd.docker.plugins.v1.1+json",
    "application/json",
];

/// The container engine behind a mount, as its requests tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// dockerd (content type `...v1.2+json`, or none).
    Docker,
    /// Podman (content type `...v1.1+json`).
    Podman,
}

impl EngineKind {
    /// The prefix of the alloc IDs of its claims.
    pub fn claim_prefix(self) -> &'static str {
        match self {
            EngineKind::Docker => "docker-",
            EngineKind::Podman => "podman-",
        }
    }

    /// The engine that sends requests of this content type.
    fn of_content_type(content_type: Option<&str>) -> EngineKind {
        match content_type {
            Some(t) if media_type(t) == "application/vnd.docker.plugins.v1.1+json" => {
                EngineKind::Podman
            }
            _ => EngineKind::Docker,
        }
    }
}

/// A content type without its parameters (`; charset=utf-8`), lower case.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The alloc ID of the claim a Mount with `mount_id` makes: the engine's
/// prefix and the mount ID, or, when that is not a valid ID (too long, or
/// with other characters), the prefix and 32 hex digits of a digest of the
/// mount ID. The same mount ID always gives the same alloc ID.
pub fn claim_alloc_id(engine: EngineKind, mount_id: &str) -> String {
    let plain = format!("{}{mount_id}", engine.claim_prefix());
    if !mount_id.is_empty() && crate::id::validate("alloc ID", &plain).is_ok() {
        return plain;
    }
    format!(
        "{}{}",
        engine.claim_prefix(),
        crate::id::digest_hex(mount_id)
    )
}

/// The engine whose Mount made the claim of `alloc_id`, or `None` for a
/// claim of a task or of `volume claim`.
pub fn engine_of_claim(alloc_id: &str) -> Option<EngineKind> {
    [EngineKind::Docker, EngineKind::Podman]
        .into_iter()
        .find(|e| {
            alloc_id
                .strip_prefix(e.claim_prefix())
                .is_some_and(|rest| !rest.is_empty())
        })
}

/// Why the endpoint cannot start.
#[derive(Debug)]
pub enum Error {
    /// The socket's directory cannot be made.
    Dir {
        path: PathBuf,
        err: io::Error,
    },
    /// Something other than a socket is at the socket's path.
    NotASocket {
        path: PathBuf,
    },
    /// Another process answers on the socket.
    InUse {
        path: PathBuf,
    },
    /// The path cannot be looked at or a stale socket removed.
    Stale {
        path: PathBuf,
        err: io::Error,
    },
    Bind {
        path: PathBuf,
        err: io::Error,
    },
    Permissions {
        path: PathBuf,
        err: io::Error,
    },
    Rename {
        path: PathBuf,
        err: io::Error,
    },
    /// The server's threads cannot start.
    Serve {
        path: PathBuf,
        err: io::Error,
    },
    /// `secrets_dir` is missing, or open to others.
    SecretsDir(SecretsError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Dir { path, .. } => {
                write!(f, "cannot make the socket directory {}", path.display())
            }
            Error::NotASocket { path } => write!(
                f,
                "{} exists and is not a socket: remove it or set volume_plugin's \"socket\"",
                path.display()
            ),
            Error::InUse { path } => write!(
                f,
                "another process serves {}: stop it or give this agent another volume_plugin name",
                path.display()
            ),
            Error::Stale { path, .. } => {
                write!(f, "cannot replace the stale socket {}", path.display())
            }
            Error::Bind { path, .. } => write!(f, "cannot bind {}", path.display()),
            Error::Permissions { path, .. } => {
                write!(f, "cannot make {} private (0600)", path.display())
            }
            Error::Rename { path, .. } => {
                write!(
                    f,
                    "cannot rename the socket into place at {}",
                    path.display()
                )
            }
            Error::Serve { path, .. } => write!(f, "cannot serve {}", path.display()),
            Error::SecretsDir(err) => write!(f, "volume_plugin's secrets_dir: {err}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Dir { err, .. }
            | Error::Stale { err, .. }
            | Error::Bind { err, .. }
            | Error::Permissions { err, .. }
            | Error::Rename { err, .. }
            | Error::Serve { err, .. } => Some(err),
            Error::NotASocket { .. } | Error::InUse { .. } | Error::SecretsDir(_) => None,
        }
    }
}

/// The running endpoint; [`Server::stop`] ends its threads and removes
/// the socket.
pub struct Server {
    http: httpd::Server,
    socket: PathBuf,
}

impl Server {
    /// Serves the protocol on the config's socket, sending each call to
    /// the main loop on `calls`. `cluster`: the agent shares its volumes
    /// through etcd, so the volumes' scope is `global`.
    ///
    /// `handed` is a listening socket a service manager bound at the
    /// socket's path and handed over (socket activation): it is served
    /// as it is, and its file is never removed.
    pub fn start(
        config: &VolumePluginConfig,
        handed: Option<UnixListener>,
        calls: Sender<api::Call>,
        cluster: bool,
    ) -> Result<Server, Error> {
        if let Some(dir) = &config.secrets_dir {
            secrets::SecretsDir::open(dir).map_err(Error::SecretsDir)?;
        }
        let path = config.socket_path();
        let (listener, file) = match handed {
            Some(listener) => (listener, httpd::SocketFile::Kept),
            None => (socket::bind_private(&path)?, httpd::SocketFile::Removed),
        };
        let plugin = calls::Plugin::new(config, calls, cluster);
        let limits = httpd::Limits {
            workers: WORKERS,
            ..httpd::Limits::default()
        };
        let http = httpd::serve_unix(
            "volume-plugin",
            listener,
            path.clone(),
            file,
            limits,
            move |request| plugin.handle(request),
        )
        .map_err(|err| {
            if file == httpd::SocketFile::Removed {
                let _ = std::fs::remove_file(&path);
            }
            Error::Serve {
                path: path.clone(),
                err,
            }
        })?;
        Ok(Server { http, socket: path })
    }

    /// The socket served.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Closes every connection, joins the threads (once the handlers
    /// running have their answers) and removes the socket, unless it was
    /// handed over.
    pub fn stop(self) {
        self.http.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_and_podman_claims_are_named_for_their_engine() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(
            claim_alloc_id(EngineKind::Docker, id),
            format!("docker-{id}")
        );
        assert_eq!(claim_alloc_id(EngineKind::Podman, "x"), "podman-x");
        assert_eq!(
            engine_of_claim(&format!("docker-{id}")),
            Some(EngineKind::Docker)
        );
        assert_eq!(engine_of_claim("podman-x"), Some(EngineKind::Podman));
        assert_eq!(engine_of_claim("a1b2c3d4"), None);
        assert_eq!(engine_of_claim("docker-"), None);
    }

    #[test]
    fn a_mount_id_that_is_no_valid_id_is_digested() {
        for odd in ["a/b", "", &"x".repeat(200), "über"] {
            let alloc = claim_alloc_id(EngineKind::Docker, odd);
            assert!(crate::id::validate("alloc ID", &alloc).is_ok(), "{alloc}");
            assert_eq!(alloc.len(), "docker-".len() + 32, "{alloc}");
            assert_eq!(alloc, claim_alloc_id(EngineKind::Docker, odd));
            assert_eq!(engine_of_claim(&alloc), Some(EngineKind::Docker));
        }
        assert_ne!(
            claim_alloc_id(EngineKind::Podman, "a/b"),
            claim_alloc_id(EngineKind::Podman, "a/c")
        );
        // 121 bytes fit with the prefix; 122 do not.
        let fits = "y".repeat(121);
        assert_eq!(
            claim_alloc_id(EngineKind::Docker, &fits),
            format!("docker-{fits}")
        );
        assert_eq!(
            claim_alloc_id(EngineKind::Docker, &"y".repeat(122)).len(),
            39
        );
    }

    #[test]
    fn the_content_type_tells_the_engine() {
        let of = EngineKind::of_content_type;
        assert_eq!(of(None), EngineKind::Docker);
        assert_eq!(
            of(Some("application/vnd.docker.plugins.v1.2+json")),
            EngineKind::Docker
        );
        assert_eq!(
            of(Some("application/vnd.docker.plugins.v1.1+json")),
            EngineKind::Podman
        );
        assert_eq!(
            of(Some(
                "Application/VND.docker.plugins.v1.1+json; charset=utf-8"
            )),
            EngineKind::Podman
        );
        assert_eq!(of(Some("application/json")), EngineKind::Docker);
    }
}
