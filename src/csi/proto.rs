//! The generated CSI v1.12.0 messages (`csi`) and grpcio stubs (`csi_grpc`).
//! Only `csi/` and the hostpath plugin use these directly; everything else
//! uses our own types.

pub use crate::proto::{csi, csi_grpc};
