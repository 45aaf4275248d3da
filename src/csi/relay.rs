//! Controller RPCs made by a controller elsewhere.
//!
//! In a cluster, a host that runs only a plugin's node still creates,
//! deletes, snapshots, expands and validates its volumes: a [`Relay`]
//! carries each controller RPC to the plugin's controller leader on
//! another host (through etcd, `cluster/relay.rs`), which makes it with its
//! own controller ([`Client::serve_relayed`]) and sends the answer back.
//! Requests and answers travel encoded as on the wire, so the leader
//! makes exactly the call this host would have made, and this host reads
//! the answer, and classifies a failure by the CSI error table, exactly as
//! if its own controller had answered.
//!
//! ControllerPublish and ControllerUnpublish are not relayed: an attachment
//! is a record of its own (`cluster/attachments.rs`), which the fencer of
//! lost nodes reads too.

use std::sync::Arc;
use std::time::Duration;

use grpcio::{RpcStatus, RpcStatusCode};
use protobuf::Message;

use super::client::Client;
use super::endpoint::Endpoint;
use super::error::Rpc;
use super::proto::csi as pb;

/// Carries encoded controller requests to a controller elsewhere.
pub trait Relay: Send + Sync {
    /// Sends `request`, the encoded request of `rpc`, and waits at most
    /// about `timeout` for the encoded response; a failure is the status
    /// the controller answered, or one the relay chose for its own failure
    /// (FAILED_PRECONDITION when nothing was sent, DEADLINE_EXCEEDED when
    /// the outcome is unknown).
    fn relay(&self, rpc: Rpc, request: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, RpcStatus>;
}

/// Whether `rpc` is one a relay carries.
pub fn relayable(rpc: Rpc) -> bool {
    matches!(
        rpc,
        Rpc::ControllerGetCapabilities
            | Rpc::CreateVolume
            | Rpc::DeleteVolume
            | Rpc::ValidateVolumeCapabilities
            | Rpc::ListVolumes
            | Rpc::GetCapacity
            | Rpc::ControllerExpandVolume
            | Rpc::ControllerGetVolume
            | Rpc::CreateSnapshot
            | Rpc::DeleteSnapshot
            | Rpc::ListSnapshots
    )
}

/// The RPC named `name` ([`Rpc::name`]), if a relay carries it.
pub fn relayable_named(name: &str) -> Option<Rpc> {
    Rpc::ALL
        .into_iter()
        .find(|rpc| rpc.name() == name)
        .filter(|rpc| relayable(*rpc))
}

/// `rpc` with `wire` through `relay`: the answer as the controller's stub
/// would have given it.
pub(super) fn call<Req: Message, Resp: Message>(
    relay: &dyn Relay,
    rpc: Rpc,
    wire: &Req,
    timeout: Duration,
) -> grpcio::Result<Resp> {
    if !relayable(rpc) {
        let why = format!("{rpc} is not relayed to a controller leader");
        return Err(failure(RpcStatusCode::INVALID_ARGUMENT, why));
    }
    let request = wire.write_to_bytes().map_err(|err| {
        failure(
            RpcStatusCode::INTERNAL,
            format!("cannot encode {rpc}: {err}"),
        )
    })?;
    let answer = relay
        .relay(rpc, request, timeout)
        .map_err(grpcio::Error::RpcFailure)?;
    Resp::parse_from_bytes(&answer).map_err(|err| {
        failure(
            RpcStatusCode::INTERNAL,
            format!("the controller leader's answer to {rpc} is unreadable: {err}"),
        )
    })
}

fn failure(code: RpcStatusCode, message: String) -> grpcio::Error {
    grpcio::Error::RpcFailure(RpcStatus::with_message(code, message))
}

/// A failed call's status: the plugin's, or UNAVAILABLE when the
/// transport failed (the outcome is unknown).
fn status_of(err: grpcio::Error) -> RpcStatus {
    match err {
        grpcio::Error::RpcFailure(status) => status,
        other => RpcStatus::with_message(RpcStatusCode::UNAVAILABLE, other.to_string()),
    }
}

impl Client {
    /// A client for a host without any instance of the plugin: its
    /// controller calls go through `relay`; it has no plugin socket (its
    /// endpoint is `/dev/null`, where nothing listens), so a node or
    /// identity call fails with UNAVAILABLE.
    pub fn relay_only(relay: Arc<dyn Relay>) -> Client {
        let nowhere = Endpoint::from_path("/dev/null").expect("an absolute, short path");
        Client::new(&nowhere).relayed(relay)
    }

    /// Makes a relayed call with this client's controller: `request` is
    /// the encoded request of `rpc`; answers the encoded response.
    pub fn serve_relayed(&self, rpc: Rpc, request: &[u8]) -> Result<Vec<u8>, RpcStatus> {
        macro_rules! serve {
            ($request:ty, $method:ident) => {{
                let req = <$request>::parse_from_bytes(request).map_err(|err| {
                    RpcStatus::with_message(
                        RpcStatusCode::INVALID_ARGUMENT,
                        format!("the relayed {rpc} request is unreadable: {err}"),
                    )
                })?;
                let resp = self
                    .controller
                    .$method(&req, self.opt())
                    .map_err(status_of)?;
                resp.write_to_bytes().map_err(|err| {
                    RpcStatus::with_message(
                        RpcStatusCode::INTERNAL,
                        format!("cannot encode the answer to {rpc}: {err}"),
                    )
                })
            }};
        }
        match rpc {
            Rpc::ControllerGetCapabilities => serve!(
                pb::ControllerGetCapabilitiesRequest,
                controller_get_capabilities_opt
            ),
            Rpc::CreateVolume => serve!(pb::CreateVolumeRequest, create_volume_opt),
            Rpc::DeleteVolume => serve!(pb::DeleteVolumeRequest, delete_volume_opt),
            Rpc::ValidateVolumeCapabilities => serve!(
                pb::ValidateVolumeCapabilitiesRequest,
                validate_volume_capabilities_opt
            ),
            Rpc::ListVolumes => serve!(pb::ListVolumesRequest, list_volumes_opt),
            Rpc::GetCapacity => serve!(pb::GetCapacityRequest, get_capacity_opt),
            Rpc::ControllerExpandVolume => serve!(
                pb::ControllerExpandVolumeRequest,
                controller_expand_volume_opt
            ),
            Rpc::ControllerGetVolume => {
                serve!(pb::ControllerGetVolumeRequest, controller_get_volume_opt)
            }
            Rpc::CreateSnapshot => serve!(pb::CreateSnapshotRequest, create_snapshot_opt),
            Rpc::DeleteSnapshot => serve!(pb::DeleteSnapshotRequest, delete_snapshot_opt),
            Rpc::ListSnapshots => serve!(pb::ListSnapshotsRequest, list_snapshots_opt),
            other => Err(RpcStatus::with_message(
                RpcStatusCode::INVALID_ARGUMENT,
                format!("{other} is not relayed to a controller leader"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A relay that answers each request with `answer(request)` and
    /// remembers what it was sent.
    struct Fake {
        sent: Mutex<Vec<(Rpc, Vec<u8>)>>,
        answer: fn(&[u8]) -> Result<Vec<u8>, RpcStatus>,
    }

    impl Relay for Fake {
        fn relay(&self, rpc: Rpc, request: Vec<u8>, _: Duration) -> Result<Vec<u8>, RpcStatus> {
            let answer = (self.answer)(&request);
            self.sent.lock().unwrap().push((rpc, request));
            answer
        }
    }

    fn fake(answer: fn(&[u8]) -> Result<Vec<u8>, RpcStatus>) -> Fake {
        Fake {
            sent: Mutex::new(Vec::new()),
            answer,
        }
    }

    fn create(name: &str) -> pb::CreateVolumeRequest {
        pb::CreateVolumeRequest {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The status of a relayed CreateVolume that must fail.
    fn failed_create(relay: &Fake) -> RpcStatus {
        let result: grpcio::Result<pb::CreateVolumeResponse> = call(
            relay,
            Rpc::CreateVolume,
            &create("v1"),
            Duration::from_secs(1),
        );
        match result {
            Err(grpcio::Error::RpcFailure(status)) => status,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_relayed_call_sends_the_wire_request_and_reads_the_wire_answer() {
        let relay = fake(|request| {
            let req = pb::CreateVolumeRequest::parse_from_bytes(request).unwrap();
            let mut volume = pb::Volume::new();
            volume.volume_id = format!("id-of-{}", req.name);
            let resp = pb::CreateVolumeResponse {
                volume: protobuf::MessageField::some(volume),
                ..Default::default()
            };
            Ok(resp.write_to_bytes().unwrap())
        });
        let resp: pb::CreateVolumeResponse = call(
            &relay,
            Rpc::CreateVolume,
            &create("v1"),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(resp.volume.volume_id, "id-of-v1");
        let sent = relay.sent.lock().unwrap();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, Rpc::CreateVolume);
    }

    #[test]
    fn the_controller_s_refusal_comes_back_with_its_code_and_message() {
        let relay = fake(|_| {
            Err(RpcStatus::with_message(
                RpcStatusCode::RESOURCE_EXHAUSTED,
                "no room".into(),
            ))
        });
        let status = failed_create(&relay);
        assert_eq!(status.code(), RpcStatusCode::RESOURCE_EXHAUSTED);
        assert_eq!(status.message(), "no room");
    }

    #[test]
    fn an_unreadable_answer_is_an_internal_error_naming_the_leader() {
        let relay = fake(|_| Ok(vec![0xff, 0xff, 0xff]));
        let status = failed_create(&relay);
        assert_eq!(status.code(), RpcStatusCode::INTERNAL);
        assert!(status.message().contains("controller leader"), "{status:?}");
    }

    #[test]
    fn attachments_and_node_calls_are_never_relayed() {
        for rpc in [
            Rpc::ControllerPublishVolume,
            Rpc::ControllerUnpublishVolume,
            Rpc::NodeStageVolume,
            Rpc::Probe,
        ] {
            assert!(!relayable(rpc), "{rpc}");
            assert_eq!(relayable_named(rpc.name()), None);
        }
        let relay = fake(|_| panic!("sent"));
        let result: grpcio::Result<pb::ControllerPublishVolumeResponse> = call(
            &relay,
            Rpc::ControllerPublishVolume,
            &pb::ControllerPublishVolumeRequest::new(),
            Duration::from_secs(1),
        );
        assert!(result.is_err());
        assert!(relay.sent.lock().unwrap().is_empty());
        assert_eq!(relayable_named("CreateVolume"), Some(Rpc::CreateVolume));
        assert_eq!(relayable_named("NoSuchCall"), None);
    }
}
