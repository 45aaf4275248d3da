//! The generated CSI v1.12.0 messages (`csi`) and grpcio stubs (`csi_grpc`),
//! built by `build.rs` from `proto/csi.proto`. Only `csi/` and the hostpath
//! plugin use these directly; everything else uses our own types.

#![allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    unused_qualifications,
    renamed_and_removed_lints
)]

include!(concat!(env!("OUT_DIR"), "/proto/mod.rs"));
