//! An `alloc exec` session's output side, whoever runs its command: the
//! call's sink, the most bytes one message carries, and how often the
//! session looks whether the command ended. A host command's session
//! (`session.rs`) and a container's (`session_docker.rs`) both stream
//! through them.

use std::time::Duration;

use grpcio::DuplexSink;

use super::outbound::Outbound;
use crate::proto::agent as pb;

/// The most bytes of output one message carries.
pub(super) const CHUNK: usize = 32 * 1024;

/// How often the output loop looks whether the command ended while
/// something else (a background process) holds its output open.
pub(super) const EXIT_CHECK: Duration = Duration::from_millis(100);

/// An `alloc exec` call's output side.
pub(super) type ExecSink = Outbound<DuplexSink<pb::AllocExecOutput>>;
