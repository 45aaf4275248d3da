//! The engine: the claim protocol driven from the records (the planner's
//! steps sent as jobs, their reports, retries and give-ups), the mount
//! table read back at start, and the cluster's side of claims (admission
//! through etcd, lost claims, attachments).

pub(super) mod cluster;
pub(super) mod lost;
pub(super) mod protocol;
pub(super) mod reconcile;
