//! CSI errors and what the CO does about them.
//!
//! Every failed RPC becomes one [`Error`]: which RPC, the gRPC code, the
//! plugin's message, and a [`Class`] taken from the spec's per-RPC error
//! tables. Callers never match on codes themselves: they ask the class,
//! so the policy lives in one table ([`classify`]) that is tested cell by
//! cell.

use std::fmt;

/// The CSI RPCs the agent calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rpc {
    GetPluginInfo,
    GetPluginCapabilities,
    Probe,
    NodeGetInfo,
    NodeGetCapabilities,
    NodeStageVolume,
    NodeUnstageVolume,
    NodePublishVolume,
    NodeUnpublishVolume,
    NodeGetVolumeStats,
    NodeExpandVolume,
    ControllerGetCapabilities,
    CreateVolume,
    DeleteVolume,
    ControllerPublishVolume,
    ControllerUnpublishVolume,
    ValidateVolumeCapabilities,
    ListVolumes,
    GetCapacity,
    ControllerExpandVolume,
    ControllerGetVolume,
    CreateSnapshot,
    DeleteSnapshot,
    ListSnapshots,
}

impl Rpc {
    pub const ALL: [Rpc; 24] = [
        Rpc::GetPluginInfo,
        Rpc::GetPluginCapabilities,
        Rpc::Probe,
        Rpc::NodeGetInfo,
        Rpc::NodeGetCapabilities,
        Rpc::NodeStageVolume,
        Rpc::NodeUnstageVolume,
        Rpc::NodePublishVolume,
        Rpc::NodeUnpublishVolume,
        Rpc::NodeGetVolumeStats,
        Rpc::NodeExpandVolume,
        Rpc::ControllerGetCapabilities,
        Rpc::CreateVolume,
        Rpc::DeleteVolume,
        Rpc::ControllerPublishVolume,
        Rpc::ControllerUnpublishVolume,
        Rpc::ValidateVolumeCapabilities,
        Rpc::ListVolumes,
        Rpc::GetCapacity,
        Rpc::ControllerExpandVolume,
        Rpc::ControllerGetVolume,
        Rpc::CreateSnapshot,
        Rpc::DeleteSnapshot,
        Rpc::ListSnapshots,
    ];

    /// The full gRPC method name, as kubelet's metrics label it:
    /// `/csi.v1.Node/NodeStageVolume`.
    pub fn method_name(self) -> &'static str {
        match self {
            Rpc::GetPluginInfo => "/csi.v1.Identity/GetPluginInfo",
            Rpc::GetPluginCapabilities => "/csi.v1.Identity/GetPluginCapabilities",
            Rpc::Probe => "/csi.v1.Identity/Probe",
            Rpc::NodeGetInfo => "/csi.v1.Node/NodeGetInfo",
            Rpc::NodeGetCapabilities => "/csi.v1.Node/NodeGetCapabilities",
            Rpc::NodeStageVolume => "/csi.v1.Node/NodeStageVolume",
            Rpc::NodeUnstageVolume => "/csi.v1.Node/NodeUnstageVolume",
            Rpc::NodePublishVolume => "/csi.v1.Node/NodePublishVolume",
            Rpc::NodeUnpublishVolume => "/csi.v1.Node/NodeUnpublishVolume",
            Rpc::NodeGetVolumeStats => "/csi.v1.Node/NodeGetVolumeStats",
            Rpc::NodeExpandVolume => "/csi.v1.Node/NodeExpandVolume",
            Rpc::ControllerGetCapabilities => "/csi.v1.Controller/ControllerGetCapabilities",
            Rpc::CreateVolume => "/csi.v1.Controller/CreateVolume",
            Rpc::DeleteVolume => "/csi.v1.Controller/DeleteVolume",
            Rpc::ControllerPublishVolume => "/csi.v1.Controller/ControllerPublishVolume",
            Rpc::ControllerUnpublishVolume => "/csi.v1.Controller/ControllerUnpublishVolume",
            Rpc::ValidateVolumeCapabilities => "/csi.v1.Controller/ValidateVolumeCapabilities",
            Rpc::ListVolumes => "/csi.v1.Controller/ListVolumes",
            Rpc::GetCapacity => "/csi.v1.Controller/GetCapacity",
            Rpc::ControllerExpandVolume => "/csi.v1.Controller/ControllerExpandVolume",
            Rpc::ControllerGetVolume => "/csi.v1.Controller/ControllerGetVolume",
            Rpc::CreateSnapshot => "/csi.v1.Controller/CreateSnapshot",
            Rpc::DeleteSnapshot => "/csi.v1.Controller/DeleteSnapshot",
            Rpc::ListSnapshots => "/csi.v1.Controller/ListSnapshots",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Rpc::GetPluginInfo => "GetPluginInfo",
            Rpc::GetPluginCapabilities => "GetPluginCapabilities",
            Rpc::Probe => "Probe",
            Rpc::NodeGetInfo => "NodeGetInfo",
            Rpc::NodeGetCapabilities => "NodeGetCapabilities",
            Rpc::NodeStageVolume => "NodeStageVolume",
            Rpc::NodeUnstageVolume => "NodeUnstageVolume",
            Rpc::NodePublishVolume => "NodePublishVolume",
            Rpc::NodeUnpublishVolume => "NodeUnpublishVolume",
            Rpc::NodeGetVolumeStats => "NodeGetVolumeStats",
            Rpc::NodeExpandVolume => "NodeExpandVolume",
            Rpc::ControllerGetCapabilities => "ControllerGetCapabilities",
            Rpc::CreateVolume => "CreateVolume",
            Rpc::DeleteVolume => "DeleteVolume",
            Rpc::ControllerPublishVolume => "ControllerPublishVolume",
            Rpc::ControllerUnpublishVolume => "ControllerUnpublishVolume",
            Rpc::ValidateVolumeCapabilities => "ValidateVolumeCapabilities",
            Rpc::ListVolumes => "ListVolumes",
            Rpc::GetCapacity => "GetCapacity",
            Rpc::ControllerExpandVolume => "ControllerExpandVolume",
            Rpc::ControllerGetVolume => "ControllerGetVolume",
            Rpc::CreateSnapshot => "CreateSnapshot",
            Rpc::DeleteSnapshot => "DeleteSnapshot",
            Rpc::ListSnapshots => "ListSnapshots",
        }
    }

    /// True for the RPCs that undo something: for them, "not found" means
    /// the work is already done.
    pub fn is_teardown(self) -> bool {
        matches!(
            self,
            Rpc::NodeUnpublishVolume
                | Rpc::NodeUnstageVolume
                | Rpc::ControllerUnpublishVolume
                | Rpc::DeleteVolume
                | Rpc::DeleteSnapshot
        )
    }

    /// Whether a failed call of this RPC may be retried in place by the
    /// caller's backoff loop.
    ///
    /// Probe is never retried in place: the health loop owns its cadence and
    /// a failed probe is a health fact to report, not to hide. Every other
    /// RPC is idempotent by the spec, so a retry re-sends the same request.
    pub fn retry_in_place(self) -> bool {
        !matches!(self, Rpc::Probe)
    }
}

impl fmt::Display for Rpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// gRPC status codes, by their wire numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    pub const ALL: [Code; 16] = [
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code for a wire number; anything out of range is `Unknown`, as
    /// gRPC itself maps it.
    pub fn from_number(n: i32) -> Code {
        Code::ALL
            .into_iter()
            .find(|c| *c as i32 == n)
            .unwrap_or(Code::Unknown)
    }

    pub fn name(self) -> &'static str {
        match self {
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// Parses a code name as written in fault-injection rules and tests
    /// (`UNAVAILABLE`, case-insensitive).
    pub fn from_name(name: &str) -> Option<Code> {
        Code::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the CO does with a failed RPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// The request itself is wrong, or the plugin cannot ever do it: retrying
    /// the same request cannot help. An operator has to act.
    Terminal,
    /// The plugin refused for now (busy, out of resources, a precondition
    /// another operation will resolve): retry with backoff.
    Retry,
    /// Transport failure or timeout: the operation may or may not have
    /// happened. Retry the same idempotent request until it answers.
    Uncertain,
    /// The goal is already reached (e.g. NOT_FOUND on an unpublish): treat as
    /// success.
    Ignorable,
}

impl Class {
    /// True if the caller's backoff loop should send the request again.
    pub fn is_retryable(self) -> bool {
        matches!(self, Class::Retry | Class::Uncertain)
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::Terminal => "terminal",
            Class::Retry => "retry",
            Class::Uncertain => "uncertain",
            Class::Ignorable => "ignorable",
        })
    }
}

/// The spec's error tables, as one function.
///
/// - UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED come from the transport or
///   our deadline: the plugin may have done the work, so they are uncertain.
/// - NOT_FOUND on a teardown RPC means it is already undone. Elsewhere it is
///   "volume or node gone": retry with backoff after the caller has checked.
/// - FAILED_PRECONDITION is "retry once resolved", except for
///   NodeExpandVolume, where the spec says the CO must not retry.
/// - ABORTED ("operation pending for volume") and RESOURCE_EXHAUSTED retry.
/// - INTERNAL and UNKNOWN are plugin bugs; some plugins answer INTERNAL
///   where UNIMPLEMENTED is meant, so they retry but within the caller's
///   bounded backoff.
/// - Everything else is a bad request or bad credentials: terminal.
pub fn classify(rpc: Rpc, code: Code) -> Class {
    match code {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => Class::Uncertain,
        Code::NotFound if rpc.is_teardown() => Class::Ignorable,
        Code::NotFound => Class::Retry,
        // NodeExpandVolume: "the CO MUST NOT retry" on FAILED_PRECONDITION.
        Code::FailedPrecondition if rpc == Rpc::NodeExpandVolume => Class::Terminal,
        Code::FailedPrecondition => Class::Retry,
        Code::Aborted | Code::ResourceExhausted => Class::Retry,
        Code::Internal | Code::Unknown => Class::Retry,
        Code::InvalidArgument
        | Code::AlreadyExists
        | Code::Unimplemented
        | Code::OutOfRange
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::DataLoss => Class::Terminal,
    }
}

/// A failed CSI RPC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub rpc: Rpc,
    pub code: Code,
    pub message: String,
    pub class: Class,
}

impl Error {
    pub fn new(rpc: Rpc, code: Code, message: impl Into<String>) -> Error {
        Error {
            rpc,
            code,
            message: message.into(),
            class: classify(rpc, code),
        }
    }

    /// True when the operation may have happened anyway (timeout, transport).
    pub fn is_uncertain(&self) -> bool {
        self.class == Class::Uncertain
    }

    pub fn is_retryable(&self) -> bool {
        self.rpc.retry_in_place() && self.class.is_retryable()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.rpc, self.code)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;
    use Class::*;

    /// The whole table, written out: one row per RPC, one column per code in
    /// `Code::ALL` order (CANCELLED, UNKNOWN, INVALID_ARGUMENT,
    /// DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
    /// RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE,
    /// UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS, UNAUTHENTICATED).
    const U: Class = Uncertain;
    const R: Class = Retry;
    const T: Class = Terminal;
    const I: Class = Ignorable;
    const ORDINARY: [Class; 16] = [U, R, T, U, R, T, T, R, R, R, T, T, R, U, T, T];
    const TEARDOWN: [Class; 16] = [U, R, T, U, I, T, T, R, R, R, T, T, R, U, T, T];
    const NODE_EXPAND: [Class; 16] = [U, R, T, U, R, T, T, R, T, R, T, T, R, U, T, T];

    fn expected_row(rpc: Rpc) -> [Class; 16] {
        match rpc {
            Rpc::NodeUnpublishVolume
            | Rpc::NodeUnstageVolume
            | Rpc::ControllerUnpublishVolume
            | Rpc::DeleteVolume
            | Rpc::DeleteSnapshot => TEARDOWN,
            Rpc::NodeExpandVolume => NODE_EXPAND,
            _ => ORDINARY,
        }
    }

    #[test]
    fn every_rpc_and_code_is_classified_as_the_spec_says() {
        for rpc in Rpc::ALL {
            let row = expected_row(rpc);
            for (code, want) in Code::ALL.into_iter().zip(row) {
                assert_eq!(classify(rpc, code), want, "{rpc} {code}");
            }
        }
    }

    #[test]
    fn not_found_on_unpublish_and_unstage_is_success() {
        for rpc in [
            Rpc::NodeUnpublishVolume,
            Rpc::NodeUnstageVolume,
            Rpc::ControllerUnpublishVolume,
        ] {
            assert_eq!(Error::new(rpc, Code::NotFound, "gone").class, Ignorable);
        }
        assert_eq!(
            Error::new(Rpc::NodePublishVolume, Code::NotFound, "gone").class,
            Retry
        );
    }

    #[test]
    fn timeouts_and_unavailable_are_uncertain() {
        for code in [Code::DeadlineExceeded, Code::Unavailable, Code::Cancelled] {
            let err = Error::new(Rpc::NodeStageVolume, code, "");
            assert!(err.is_uncertain(), "{code}");
            assert!(err.is_retryable(), "{code}");
        }
    }

    #[test]
    fn probe_is_never_retried_in_place() {
        let err = Error::new(Rpc::Probe, Code::Unavailable, "down");
        assert_eq!(err.class, Uncertain);
        assert!(!err.is_retryable());
    }

    #[test]
    fn node_expand_failed_precondition_is_terminal() {
        assert_eq!(
            classify(Rpc::NodeExpandVolume, Code::FailedPrecondition),
            Terminal
        );
        assert_eq!(
            classify(Rpc::ControllerExpandVolume, Code::FailedPrecondition),
            Retry
        );
    }

    #[test]
    fn codes_round_trip_through_numbers_and_names() {
        for code in Code::ALL {
            assert_eq!(Code::from_number(code as i32), code);
            assert_eq!(Code::from_name(code.name()), Some(code));
            assert_eq!(Code::from_name(&code.name().to_lowercase()), Some(code));
        }
        assert_eq!(Code::from_number(99), Code::Unknown);
        assert_eq!(Code::from_name("NOPE"), None);
    }

    #[test]
    fn display_names_rpc_code_and_message() {
        let err = Error::new(Rpc::NodeStageVolume, Code::Aborted, "operation pending");
        assert_eq!(
            err.to_string(),
            "NodeStageVolume failed: ABORTED: operation pending"
        );
        let bare = Error::new(Rpc::Probe, Code::Unavailable, "");
        assert_eq!(bare.to_string(), "Probe failed: UNAVAILABLE");
    }
}
