//! The agent's HTTP/1.1 servers besides the control API's gRPC (the
//! metrics endpoint, Docker's volume plugin protocol) are the `http`
//! crate's bounded server (`crates/http`); this module hands it the system
//! calls it does not make itself, the agent's own in `sys`: poll(2) on
//! many descriptors, and `SO_PEERCRED` for the process that connected to a
//! unix socket.

use std::io;
use std::os::fd::AsRawFd;
use std::os::fd::BorrowedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

use http::server::Want;

use crate::sys::{peercred, poll};

pub use http::server::{Limits, Listen, Request, Response, Server, SocketFile, REQUEST_TIMEOUT};

/// Binds `listen` and serves it with `handler` within `limits`
/// ([`Server::start`] with the agent's system calls).
pub fn start(
    name: &str,
    listen: &Listen,
    limits: Limits,
    handler: impl Fn(&Request) -> Response + Send + Sync + 'static,
) -> io::Result<Server> {
    Server::start(name, listen, limits, AgentSystem, handler)
}

/// Serves a unix socket the caller bound at `path` ([`Server::serve_unix`]
/// with the agent's system calls).
pub fn serve_unix(
    name: &str,
    listener: UnixListener,
    path: PathBuf,
    file: SocketFile,
    limits: Limits,
    handler: impl Fn(&Request) -> Response + Send + Sync + 'static,
) -> io::Result<Server> {
    Server::serve_unix(name, listener, path, file, limits, AgentSystem, handler)
}

/// The server's system calls, through `sys`.
struct AgentSystem;

impl http::server::System for AgentSystem {
    fn poll(
        &self,
        fds: &[(BorrowedFd<'_>, Want)],
        timeout: Option<Duration>,
    ) -> io::Result<Vec<bool>> {
        let fds: Vec<(BorrowedFd<'_>, poll::Want)> = fds
            .iter()
            .map(|&(fd, want)| {
                let want = match want {
                    Want::Read => poll::Want::Read,
                    Want::Write => poll::Want::Write,
                };
                (fd, want)
            })
            .collect();
        poll::poll_many(&fds, timeout)
    }

    fn peer_pid(&self, stream: &UnixStream) -> Option<u32> {
        peercred::peer_pid(stream.as_raw_fd()).ok().flatten()
    }
}
