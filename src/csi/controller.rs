//! A plugin's controller service: create, delete, publish, validate, list,
//! capacity, expand, snapshots. Each call builds the request as on the
//! wire, sends it, and reads the answer into our types; a failure is a
//! classified [`Error`].
//!
//! A [`Controller`] reaches the plugin's controller one of two ways:
//!
//! - over the plugin's socket: the controller service of a
//!   [`Client`](super::Client) ([`Client::controller`](super::Client::controller));
//! - through a [`Carrier`] ([`Controller::carried`]): whatever takes a
//!   call, encoded as on the wire, to a controller elsewhere and brings its
//!   encoded answer back. The controller at the other end makes exactly
//!   the call this side would have made ([`Controller::serve_encoded`]),
//!   and this side reads the answer, and classifies a failure by the CSI
//!   error table, exactly as if it had come over the socket.

use std::sync::Arc;
use std::time::Duration;

use grpcio::{CallOption, Channel, RpcStatus, RpcStatusCode};
use protobuf::Message;

use super::compare::Validation;
use super::convert::{self, ConvertError};
use super::error::{Error, Rpc};
use super::model::{Capability, Secrets};
use super::proto::csi as pb;
use super::rpc::{call, invalid, send, Sent, Stub};
use super::types::*;

/// Carries controller calls, encoded as on the wire, to a controller and
/// brings their encoded answers back.
pub trait Carrier: Send + Sync {
    /// How messages name the controller that answers through this
    /// carrier: `<answerer>'s answer to CreateVolume is unreadable`.
    fn answerer(&self) -> &str;

    /// Sends `request`, the encoded request of `rpc`, and waits at most
    /// about `timeout` for the encoded response; a failure is the status
    /// the controller answered, or one the carrier chose for its own
    /// failure (FAILED_PRECONDITION when nothing was sent,
    /// DEADLINE_EXCEEDED when the outcome is unknown).
    fn carry(&self, rpc: Rpc, request: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, RpcStatus>;
}

/// A plugin's controller service, with a deadline on every call.
#[derive(Clone)]
pub struct Controller {
    route: Route,
    timeout: Duration,
    /// The plugin's ID, for the metrics of its calls.
    driver: Arc<str>,
}

/// How a [`Controller`]'s calls reach the controller.
#[derive(Clone)]
enum Route {
    /// The plugin's socket.
    Socket(Stub),
    /// A carrier of encoded calls.
    Carried(Arc<dyn Carrier>),
}

impl Controller {
    /// The controller service on `channel`, a plugin's socket.
    pub(super) fn on_socket(channel: Channel, timeout: Duration) -> Controller {
        Controller {
            route: Route::Socket(Stub::new(channel)),
            timeout,
            driver: Arc::from(""),
        }
    }

    /// A controller reached through `carrier`, each call waiting at most
    /// about `timeout`.
    pub fn carried(carrier: Arc<dyn Carrier>, timeout: Duration) -> Controller {
        Controller {
            route: Route::Carried(carrier),
            timeout,
            driver: Arc::from(""),
        }
    }

    /// The same controller, its calls counted in the metrics as plugin
    /// `id`'s.
    pub fn for_plugin(self, id: &str) -> Controller {
        Controller {
            driver: Arc::from(id),
            ..self
        }
    }

    /// The same controller with another deadline for every call.
    pub(super) fn with_timeout(self, timeout: Duration) -> Controller {
        Controller { timeout, ..self }
    }

    fn opt(&self) -> CallOption {
        CallOption::default().timeout(self.timeout)
    }

    /// Controller RPC `rpc` with `wire`, on the plugin's socket or through
    /// the carrier.
    fn controller_call<Req: Message, Resp: Message>(
        &self,
        rpc: Rpc,
        wire: &Req,
    ) -> Result<Resp, Error> {
        call(rpc, &self.driver, || match &self.route {
            Route::Socket(stub) => stub.call(rpc, wire, self.opt()),
            Route::Carried(carrier) => carried(carrier.as_ref(), rpc, wire, self.timeout),
        })
    }

    /// Like [`Controller::controller_call`], but without waiting for the
    /// answer on the plugin's socket.
    fn controller_send<Req: Message, Resp: Message, T: 'static>(
        &self,
        rpc: Rpc,
        wire: &Req,
        convert: impl FnOnce(Resp) -> T + 'static,
    ) -> Sent<T> {
        match &self.route {
            Route::Socket(stub) => send(
                rpc,
                self.driver.clone(),
                stub.start(rpc, wire, self.opt()),
                convert,
            ),
            Route::Carried(carrier) => Sent::known(
                call(rpc, &self.driver, || {
                    carried(carrier.as_ref(), rpc, wire, self.timeout)
                })
                .map(convert),
            ),
        }
    }

    pub fn controller_capabilities(&self) -> Result<CapabilitySet<ControllerCapability>, Error> {
        let req = pb::ControllerGetCapabilitiesRequest::new();
        let resp = self.controller_call::<_, pb::ControllerGetCapabilitiesResponse>(
            Rpc::ControllerGetCapabilities,
            &req,
        )?;
        Ok(convert::controller_capabilities_from_proto(
            &resp.capabilities,
        ))
    }

    pub fn create_volume(&self, req: &CreateVolume) -> Result<Volume, Error> {
        let rpc = Rpc::CreateVolume;
        let mut wire = pb::CreateVolumeRequest::new();
        wire.name = req.name.clone();
        wire.capacity_range = convert::capacity_to_field(req.capacity);
        wire.volume_capabilities = req
            .capabilities
            .iter()
            .map(pb::VolumeCapability::from)
            .collect();
        wire.parameters = convert::to_hash_map(&req.parameters);
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        if let Some(topology) = &req.accessibility {
            wire.accessibility_requirements = protobuf::MessageField::some(topology.into());
        }
        if let Some(source) = &req.content_source {
            wire.volume_content_source = protobuf::MessageField::some(source.into());
        }
        let resp = self.controller_call::<_, pb::CreateVolumeResponse>(rpc, &wire)?;
        let volume = resp
            .volume
            .as_ref()
            .ok_or_else(|| invalid(rpc, ConvertError::new("volume", "is required")))?;
        Volume::try_from(volume).map_err(|e| invalid(rpc, e))
    }

    pub fn delete_volume(&self, volume_id: &str, secrets: &Secrets) -> Result<(), Error> {
        let mut wire = pb::DeleteVolumeRequest::new();
        wire.volume_id = volume_id.to_string();
        wire.secrets = convert::secrets_to_proto(secrets);
        self.controller_call::<_, pb::DeleteVolumeResponse>(Rpc::DeleteVolume, &wire)
            .map(drop)
    }

    /// ControllerPublishVolume; answers the publish context, which the
    /// caller must pass to NodeStage and NodePublish.
    pub fn controller_publish(&self, req: &ControllerPublish) -> Result<StringMap, Error> {
        self.send_controller_publish(req).wait()
    }

    /// ControllerPublishVolume, sent (through a carrier, answered);
    /// [`Sent::wait`] takes its answer.
    pub fn send_controller_publish(&self, req: &ControllerPublish) -> Sent<StringMap> {
        let mut wire = pb::ControllerPublishVolumeRequest::new();
        wire.volume_id = req.volume_id.clone();
        wire.node_id = req.node_id.clone();
        wire.volume_capability = convert::capability_to_field(&req.capability);
        wire.readonly = req.read_only;
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        wire.volume_context = convert::to_hash_map(&req.volume_context);
        self.controller_send::<_, pb::ControllerPublishVolumeResponse, _>(
            Rpc::ControllerPublishVolume,
            &wire,
            |resp| convert::from_hash_map(&resp.publish_context),
        )
    }

    pub fn controller_unpublish(
        &self,
        volume_id: &str,
        node_id: &str,
        secrets: &Secrets,
    ) -> Result<(), Error> {
        self.send_controller_unpublish(volume_id, node_id, secrets)
            .wait()
    }

    /// ControllerUnpublishVolume, sent (through a carrier, answered);
    /// [`Sent::wait`] takes its answer.
    pub fn send_controller_unpublish(
        &self,
        volume_id: &str,
        node_id: &str,
        secrets: &Secrets,
    ) -> Sent<()> {
        let mut wire = pb::ControllerUnpublishVolumeRequest::new();
        wire.volume_id = volume_id.to_string();
        wire.node_id = node_id.to_string();
        wire.secrets = convert::secrets_to_proto(secrets);
        self.controller_send::<_, pb::ControllerUnpublishVolumeResponse, _>(
            Rpc::ControllerUnpublishVolume,
            &wire,
            drop,
        )
    }

    /// ValidateVolumeCapabilities, answered as a [`Validation`]; check it
    /// with [`super::compare::check_validation`].
    pub fn validate_volume(&self, req: &ValidateVolume) -> Result<Validation, Error> {
        let rpc = Rpc::ValidateVolumeCapabilities;
        let mut wire = pb::ValidateVolumeCapabilitiesRequest::new();
        wire.volume_id = req.volume_id.clone();
        wire.volume_context = convert::to_hash_map(&req.volume_context);
        wire.volume_capabilities = req
            .capabilities
            .iter()
            .map(pb::VolumeCapability::from)
            .collect();
        wire.parameters = convert::to_hash_map(&req.parameters);
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        let resp = self.controller_call::<_, pb::ValidateVolumeCapabilitiesResponse>(rpc, &wire)?;
        match resp.confirmed.as_ref() {
            None => {
                log::debug!("{rpc}: plugin did not confirm: {}", resp.message);
                Ok(Validation::NotConfirmed {
                    message: resp.message,
                })
            }
            Some(confirmed) => convert::capabilities_from_proto(&confirmed.volume_capabilities)
                .map(Validation::Confirmed)
                .map_err(|e| invalid(rpc, e)),
        }
    }

    /// One page of ListVolumes; pass the answer's `next_token` for the next.
    pub fn list_volumes(
        &self,
        max_entries: i32,
        starting_token: &str,
    ) -> Result<VolumePage, Error> {
        let rpc = Rpc::ListVolumes;
        let mut wire = pb::ListVolumesRequest::new();
        wire.max_entries = max_entries;
        wire.starting_token = starting_token.to_string();
        let resp = self.controller_call::<_, pb::ListVolumesResponse>(rpc, &wire)?;
        let mut entries = Vec::with_capacity(resp.entries.len());
        for entry in &resp.entries {
            let status = entry.status.as_ref();
            entries.push(listed_volume(
                rpc,
                "entries.volume",
                entry.volume.as_ref(),
                status.map(|s| s.published_node_ids.as_slice()),
                status.and_then(|s| s.volume_condition.as_ref()),
            )?);
        }
        Ok(VolumePage {
            entries,
            next_token: resp.next_token,
        })
    }

    pub fn capacity(
        &self,
        capabilities: &[Capability],
        parameters: &StringMap,
        topology: Option<&Topology>,
    ) -> Result<Capacity, Error> {
        let mut wire = pb::GetCapacityRequest::new();
        wire.volume_capabilities = capabilities
            .iter()
            .map(pb::VolumeCapability::from)
            .collect();
        wire.parameters = convert::to_hash_map(parameters);
        if let Some(topology) = topology {
            wire.accessible_topology =
                protobuf::MessageField::some(convert::topology_to_proto(topology));
        }
        let resp = self.controller_call::<_, pb::GetCapacityResponse>(Rpc::GetCapacity, &wire)?;
        Ok(Capacity {
            available_capacity: resp.available_capacity,
            maximum_volume_size: resp.maximum_volume_size.as_ref().map(|v| v.value),
            minimum_volume_size: resp.minimum_volume_size.as_ref().map(|v| v.value),
        })
    }

    pub fn controller_expand(&self, req: &ControllerExpand) -> Result<Expanded, Error> {
        let mut wire = pb::ControllerExpandVolumeRequest::new();
        wire.volume_id = req.volume_id.clone();
        wire.capacity_range = convert::capacity_to_field(req.capacity);
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        if let Some(cap) = &req.capability {
            wire.volume_capability = convert::capability_to_field(cap);
        }
        let resp = self.controller_call::<_, pb::ControllerExpandVolumeResponse>(
            Rpc::ControllerExpandVolume,
            &wire,
        )?;
        Ok(Expanded {
            capacity_bytes: resp.capacity_bytes,
            node_expansion_required: resp.node_expansion_required,
        })
    }
    /// ControllerGetVolume: the volume as the plugin sees it now, with the
    /// nodes it is published to and its condition.
    pub fn controller_get_volume(&self, volume_id: &str) -> Result<ListedVolume, Error> {
        let rpc = Rpc::ControllerGetVolume;
        let mut wire = pb::ControllerGetVolumeRequest::new();
        wire.volume_id = volume_id.to_string();
        let resp = self.controller_call::<_, pb::ControllerGetVolumeResponse>(rpc, &wire)?;
        let status = resp.status.as_ref();
        listed_volume(
            rpc,
            "volume",
            resp.volume.as_ref(),
            status.map(|s| s.published_node_ids.as_slice()),
            status.and_then(|s| s.volume_condition.as_ref()),
        )
    }

    /// CreateSnapshot; the same name and source answers the same snapshot.
    pub fn create_snapshot(&self, req: &CreateSnapshot) -> Result<Snapshot, Error> {
        let rpc = Rpc::CreateSnapshot;
        let mut wire = pb::CreateSnapshotRequest::new();
        wire.name = req.name.clone();
        wire.source_volume_id = req.source_volume_id.clone();
        wire.parameters = convert::to_hash_map(&req.parameters);
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        let resp = self.controller_call::<_, pb::CreateSnapshotResponse>(rpc, &wire)?;
        let snapshot = resp
            .snapshot
            .as_ref()
            .ok_or_else(|| invalid(rpc, ConvertError::new("snapshot", "is required")))?;
        Snapshot::try_from(snapshot).map_err(|e| invalid(rpc, e))
    }

    pub fn delete_snapshot(&self, snapshot_id: &str, secrets: &Secrets) -> Result<(), Error> {
        let mut wire = pb::DeleteSnapshotRequest::new();
        wire.snapshot_id = snapshot_id.to_string();
        wire.secrets = convert::secrets_to_proto(secrets);
        self.controller_call::<_, pb::DeleteSnapshotResponse>(Rpc::DeleteSnapshot, &wire)
            .map(drop)
    }

    /// One page of ListSnapshots; pass the answer's `next_token` for the
    /// next.
    pub fn list_snapshots(&self, req: &ListSnapshots) -> Result<SnapshotPage, Error> {
        let rpc = Rpc::ListSnapshots;
        let mut wire = pb::ListSnapshotsRequest::new();
        wire.max_entries = req.max_entries;
        wire.starting_token = req.starting_token.clone();
        wire.source_volume_id = req.source_volume_id.clone();
        wire.snapshot_id = req.snapshot_id.clone();
        wire.secrets = convert::secrets_to_proto(&req.secrets);
        let resp = self.controller_call::<_, pb::ListSnapshotsResponse>(rpc, &wire)?;
        let mut entries = Vec::with_capacity(resp.entries.len());
        for entry in &resp.entries {
            let snapshot = entry.snapshot.as_ref().ok_or_else(|| {
                invalid(rpc, ConvertError::new("entries.snapshot", "is required"))
            })?;
            entries.push(Snapshot::try_from(snapshot).map_err(|e| invalid(rpc, e))?);
        }
        Ok(SnapshotPage {
            entries,
            next_token: resp.next_token,
        })
    }

    /// Makes `rpc` with this controller from `request`, its request
    /// encoded as on the wire, within `timeout`: the other end of a
    /// [`Carrier`]. Answers the encoded response, or the status of the
    /// failure.
    pub fn serve_encoded(
        &self,
        rpc: Rpc,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, RpcStatus> {
        let stub = match &self.route {
            Route::Socket(stub) => stub,
            Route::Carried(carrier) => return carrier.carry(rpc, request.to_vec(), timeout),
        };
        // The request is checked to be one of `rpc`'s, then sent as it
        // came; the answer goes back as the plugin encoded it, for the
        // caller to read as it would have over the socket.
        let readable: fn(Rpc, &[u8]) -> Result<(), RpcStatus> = match rpc {
            Rpc::ControllerGetCapabilities => readable::<pb::ControllerGetCapabilitiesRequest>,
            Rpc::CreateVolume => readable::<pb::CreateVolumeRequest>,
            Rpc::DeleteVolume => readable::<pb::DeleteVolumeRequest>,
            Rpc::ControllerPublishVolume => readable::<pb::ControllerPublishVolumeRequest>,
            Rpc::ControllerUnpublishVolume => readable::<pb::ControllerUnpublishVolumeRequest>,
            Rpc::ValidateVolumeCapabilities => readable::<pb::ValidateVolumeCapabilitiesRequest>,
            Rpc::ListVolumes => readable::<pb::ListVolumesRequest>,
            Rpc::GetCapacity => readable::<pb::GetCapacityRequest>,
            Rpc::ControllerExpandVolume => readable::<pb::ControllerExpandVolumeRequest>,
            Rpc::ControllerGetVolume => readable::<pb::ControllerGetVolumeRequest>,
            Rpc::CreateSnapshot => readable::<pb::CreateSnapshotRequest>,
            Rpc::DeleteSnapshot => readable::<pb::DeleteSnapshotRequest>,
            Rpc::ListSnapshots => readable::<pb::ListSnapshotsRequest>,
            other => {
                return Err(RpcStatus::with_message(
                    RpcStatusCode::INVALID_ARGUMENT,
                    format!("{other} is not a controller call"),
                ))
            }
        };
        readable(rpc, request)?;
        let opt = CallOption::default().timeout(timeout);
        stub.call_encoded(rpc, &request.to_vec(), opt)
            .map_err(status_of)
    }
}

/// Whether `request` decodes as a `Req`, the request of `rpc`.
fn readable<Req: Message>(rpc: Rpc, request: &[u8]) -> Result<(), RpcStatus> {
    crate::message::decode::<Req>(request)
        .map(drop)
        .map_err(|err| {
            RpcStatus::with_message(
                RpcStatusCode::INVALID_ARGUMENT,
                format!("the encoded {rpc} request is unreadable: {err}"),
            )
        })
}

/// A volume with its status, as ListVolumes and ControllerGetVolume
/// answer it; `field` names the volume in an invalid reply.
fn listed_volume(
    rpc: Rpc,
    field: &'static str,
    volume: Option<&pb::Volume>,
    published: Option<&[String]>,
    condition: Option<&pb::VolumeCondition>,
) -> Result<ListedVolume, Error> {
    let volume = volume.ok_or_else(|| invalid(rpc, ConvertError::new(field, "is required")))?;
    Ok(ListedVolume {
        volume: Volume::try_from(volume).map_err(|e| invalid(rpc, e))?,
        published_node_ids: published.map(<[String]>::to_vec).unwrap_or_default(),
        condition: condition.map(VolumeCondition::from),
    })
}

/// `rpc` with `wire` through `carrier`: the answer as the controller's
/// stub would have given it.
fn carried<Req: Message, Resp: Message>(
    carrier: &dyn Carrier,
    rpc: Rpc,
    wire: &Req,
    timeout: Duration,
) -> grpcio::Result<Resp> {
    let request = crate::message::encode(wire).map_err(|err| {
        failure(
            RpcStatusCode::INTERNAL,
            format!("cannot encode {rpc}: {err}"),
        )
    })?;
    let answer = carrier
        .carry(rpc, request, timeout)
        .map_err(grpcio::Error::RpcFailure)?;
    crate::message::decode::<Resp>(&answer).map_err(|err| {
        failure(
            RpcStatusCode::INTERNAL,
            format!(
                "{}'s answer to {rpc} is unreadable: {err}",
                carrier.answerer()
            ),
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A carrier that answers each request with `answer(request)` and
    /// remembers what it was sent.
    struct Fake {
        sent: Mutex<Vec<(Rpc, Vec<u8>)>>,
        answer: fn(&[u8]) -> Result<Vec<u8>, RpcStatus>,
    }

    impl Carrier for Fake {
        fn answerer(&self) -> &str {
            "the controller leader"
        }

        fn carry(&self, rpc: Rpc, request: Vec<u8>, _: Duration) -> Result<Vec<u8>, RpcStatus> {
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

    /// The status of a carried CreateVolume that must fail.
    fn failed_create(carrier: &Fake) -> RpcStatus {
        let result: grpcio::Result<pb::CreateVolumeResponse> = carried(
            carrier,
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
    fn a_carried_call_sends_the_wire_request_and_reads_the_wire_answer() {
        let carrier = fake(|request| {
            let req = pb::CreateVolumeRequest::parse_from_bytes(request).unwrap();
            let mut volume = pb::Volume::new();
            volume.volume_id = format!("id-of-{}", req.name);
            let resp = pb::CreateVolumeResponse {
                volume: protobuf::MessageField::some(volume),
                ..Default::default()
            };
            Ok(resp.write_to_bytes().unwrap())
        });
        let resp: pb::CreateVolumeResponse = carried(
            &carrier,
            Rpc::CreateVolume,
            &create("v1"),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(resp.volume.volume_id, "id-of-v1");
        let sent = carrier.sent.lock().unwrap();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, Rpc::CreateVolume);
    }

    #[test]
    fn the_controller_s_refusal_comes_back_with_its_code_and_message() {
        let carrier = fake(|_| {
            Err(RpcStatus::with_message(
                RpcStatusCode::RESOURCE_EXHAUSTED,
                "no room".into(),
            ))
        });
        let status = failed_create(&carrier);
        assert_eq!(status.code(), RpcStatusCode::RESOURCE_EXHAUSTED);
        assert_eq!(status.message(), "no room");
    }

    #[test]
    fn an_unreadable_answer_is_an_internal_error_naming_who_answered() {
        let carrier = fake(|_| Ok(vec![0xff, 0xff, 0xff]));
        let status = failed_create(&carrier);
        assert_eq!(status.code(), RpcStatusCode::INTERNAL);
        assert!(status.message().contains("controller leader"), "{status:?}");
    }
    #[test]
    fn every_call_is_counted_by_plugin_method_and_code() {
        use crate::metrics::CSI_OPERATIONS;
        let labels = |code| ["metrics-test", "/csi.v1.Controller/DeleteVolume", code];
        let (ok, refused) = (
            CSI_OPERATIONS.value(&labels("OK")),
            CSI_OPERATIONS.value(&labels("INTERNAL")),
        );
        let carrier = Arc::new(fake(|_| Ok(Vec::new())));
        let controller =
            Controller::carried(carrier, Duration::from_secs(1)).for_plugin("metrics-test");
        controller.delete_volume("v1", &Secrets::default()).unwrap();
        assert_eq!(CSI_OPERATIONS.value(&labels("OK")), ok + 1.0);
        let carrier = Arc::new(fake(|_| {
            Err(RpcStatus::with_message(
                RpcStatusCode::INTERNAL,
                "no".into(),
            ))
        }));
        let controller =
            Controller::carried(carrier, Duration::from_secs(1)).for_plugin("metrics-test");
        controller
            .delete_volume("v1", &Secrets::default())
            .unwrap_err();
        assert_eq!(CSI_OPERATIONS.value(&labels("INTERNAL")), refused + 1.0);
    }
}
