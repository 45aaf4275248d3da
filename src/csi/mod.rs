//! The orchestrator's side of the Container Storage Interface.
//!
//! - [`endpoint`]: where a plugin listens (unix sockets only).
//! - [`model`]: access and attachment modes, mount options and secrets, with
//!   redacting `Debug`/`Display`.
//! - [`types`]: our request and answer types for each RPC.
//! - [`client`]: a blocking client with a deadline on every call: the
//!   connection, and the identity and node services.
//! - [`controller`]: the controller service, over a plugin's socket or
//!   through a [`Carrier`] of calls encoded as on the wire.
//! - [`rpc`]: what every call shares: the gRPC environment, blocking on an
//!   answer, an RPC whose answer is taken later, error mapping.
//! - [`compare`]: checking a `ValidateVolumeCapabilities` answer.
//! - [`topology`]: where a volume can be used, and the bounds on
//!   topologies.
//! - [`error`]: one error type, classified by the spec's error tables.
//! - [`backoff`]: the one retry policy of the agent.
//!
//! Generated protobuf stays inside this module (and the hostpath plugin,
//! which is a CSI server); callers get our types.

pub mod backoff;
pub mod client;
pub mod compare;
pub mod controller;
pub mod convert;
pub mod endpoint;
pub mod error;
pub mod model;
pub mod proto;
pub mod rpc;
pub mod topology;
pub mod types;

#[cfg(test)]
mod bound_tests;

pub use backoff::Backoff;
pub use client::Client;
pub use compare::{check_validation, Mismatch, Validation};
pub use controller::{Carrier, Controller};
pub use endpoint::Endpoint;
pub use error::{Class, Code, Error, Rpc};
pub use model::{
    AccessMode, AttachmentMode, Capability, MountFlags, MountOptions, Secrets, REDACTED,
};
