//! HTTP/1.1 as RFC 9112 writes its messages, the subset a program needs
//! to serve its own sockets and to talk to the servers it fetches from,
//! and every part of it bounded, since the other end is someone else's:
//!
//! - [`server`]: a server of many clients at once on one poll thread and a
//!   pool of workers, within bounds on connections, time, head and body
//!   sizes, and workers;
//! - [`client`]: a client's codec over any `Read`/`Write` (a unix socket,
//!   TCP, TLS): requests written, answers' heads parsed and their bodies
//!   read by `Content-Length`, chunks or the connection's end, within
//!   bounds on the head, its lines and fields, and the body.
//!
//! The transports are the program's: the server binds TCP or unix
//! sockets but makes no system call the standard library does not offer
//! (its program supplies poll(2), [`server::System`]), and the client's
//! codec never connects anywhere.

pub mod client;
pub mod server;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

mod syntax;
