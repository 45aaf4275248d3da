//! Every generated protobuf module, built by `build.rs` from `proto/`:
//! `csi` and `csi_grpc` (CSI v1.12.0), `agent` and `agent_grpc` (the control
//! API), `state` (the persisted snapshot), and `etcd` and `etcd_grpc` (the
//! part of etcd v3's API that `cluster` speaks), and `cluster` (what agents
//! keep in etcd).

#![allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    unused_qualifications,
    renamed_and_removed_lints
)]

include!(concat!(env!("OUT_DIR"), "/proto/mod.rs"));
