//! All integration tests, in one test binary: a real hostpath plugin process
//! on a real unix socket per test, real gRPC, real bind mounts; the spec
//! decoders on our fixtures; and `csi-agent validate` as a user runs it.

mod cli;
mod client;
mod spec;
mod util;
mod validate;
