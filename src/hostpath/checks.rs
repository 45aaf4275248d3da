//! The checks that the controller's code, the node's and the block
//! volumes' share, as RPC results: that an expansion never shrinks a
//! volume, and whether a path is a mount point.

use std::path::Path;

use super::{internal, status, RpcResult};
use crate::csi::error::Code;
use crate::csi::types::CapacityRange;
use crate::mount;

/// OUT_OF_RANGE if volume `id` of `capacity` bytes would have to shrink
/// to fit `range`.
pub(super) fn check_no_shrink(id: &str, capacity: i64, range: &CapacityRange) -> RpcResult<()> {
    if range.limit_bytes > 0 && capacity > range.limit_bytes {
        return Err(status(
            Code::OutOfRange,
            format!(
                "volume {id} has {capacity} bytes, more than limit_bytes {}: volumes do not shrink",
                range.limit_bytes
            ),
        ));
    }
    Ok(())
}

/// Whether `path` is a mount point; a path that does not exist (or
/// dangles) is not one.
pub(super) fn is_mount_point(path: &Path) -> RpcResult<bool> {
    mount::is_mount_point_if_present(path).map_err(|e| {
        internal(
            "cannot tell whether the path is a mount point",
            crate::error_chain(&e),
        )
    })
}
