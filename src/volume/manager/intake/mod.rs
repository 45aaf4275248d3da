//! Intake: what a request asks for, checked and admitted into the
//! records (claims and releases, register, deregister and delete, create,
//! expansion, snapshots). A request changes the records and leaves the
//! rest to the engine, or queues the one plugin call it needs on its
//! volume.

pub(super) mod claims;
pub(super) mod create;
pub(super) mod expand;
pub(super) mod requests;
pub(super) mod snapshots;
