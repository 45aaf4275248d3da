//! All integration tests, in one test binary: a real hostpath plugin process
//! on a real unix socket per test, real gRPC, real bind mounts.

mod cli;
mod client;
mod util;
