//! How the control API's methods are registered with grpcio.
//!
//! grpcio compiles its server-side machinery (`Handler<F>::handle`, the
//! request decoding, `UnarySink<T>::complete`) once per handler closure
//! type, and the generated `create_agent` gives every method a closure of
//! its own: 28 copies for the control API alone. The unary methods that
//! go to the main loop are therefore registered here with one closure
//! type over plain bytes (a `Method<Vec<u8>, Vec<u8>>` per method, named
//! by the generated `METHOD_*` constants so the names cannot drift), and
//! one dispatcher decodes the request with protobuf, forwards it, and
//! encodes the answer. grpcio's machinery is then compiled once for all of
//! them: measured in the static profile (x86_64), `Handler<F>::handle`
//! went from 54 copies (116 KB) to 31 (84 KB), `UnarySink<T>::complete`
//! from 35 (24 KB) to 20 (14 KB), and the stripped binary lost 69 KB
//! (50 KB of `.text`, 16 KB of unwind tables).
//!
//! A request that does not decode is answered INVALID_ARGUMENT naming the
//! method. The session methods (`AllocExec`, `AllocFsFollow`, which
//! stream, and `AllocFs`, `AllocStats`, which run on session threads) keep
//! their generated typed constants.

use grpcio::ServiceBuilder;
use protobuf::Message;

use super::server::Service;
use super::{wire, wire_services, CallError, ErrorKind, Request, Response};
use crate::csi::rpc::bytes_method;
use crate::proto::{agent as api, agent_grpc as g};
use crate::volume::calls::Answer;

/// A unary method of the control API served through the byte handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unary {
    PluginStatus,
    VolumeRegister,
    VolumeCreate,
    VolumeDeregister,
    VolumeDelete,
    VolumeStatus,
    VolumeClaim,
    VolumeRelease,
    SnapshotCreate,
    SnapshotDelete,
    SnapshotList,
    VolumeForceDetach,
    NodeStatus,
    JobRun,
    JobPeriodicForce,
    JobDispatch,
    JobStop,
    JobStatus,
    AllocLogs,
    AllocControl,
    JobInspect,
    ServiceList,
    JobPlan,
    Events,
}

/// Every method of [`Unary`] with its full gRPC name.
pub(super) const UNARY: [(Unary, &str); 24] = [
    (Unary::PluginStatus, g::METHOD_AGENT_PLUGIN_STATUS.name),
    (Unary::VolumeRegister, g::METHOD_AGENT_VOLUME_REGISTER.name),
    (Unary::VolumeCreate, g::METHOD_AGENT_VOLUME_CREATE.name),
    (
        Unary::VolumeDeregister,
        g::METHOD_AGENT_VOLUME_DEREGISTER.name,
    ),
    (Unary::VolumeDelete, g::METHOD_AGENT_VOLUME_DELETE.name),
    (Unary::VolumeStatus, g::METHOD_AGENT_VOLUME_STATUS.name),
    (Unary::VolumeClaim, g::METHOD_AGENT_VOLUME_CLAIM.name),
    (Unary::VolumeRelease, g::METHOD_AGENT_VOLUME_RELEASE.name),
    (Unary::SnapshotCreate, g::METHOD_AGENT_SNAPSHOT_CREATE.name),
    (Unary::SnapshotDelete, g::METHOD_AGENT_SNAPSHOT_DELETE.name),
    (Unary::SnapshotList, g::METHOD_AGENT_SNAPSHOT_LIST.name),
    (
        Unary::VolumeForceDetach,
        g::METHOD_AGENT_VOLUME_FORCE_DETACH.name,
    ),
    (Unary::NodeStatus, g::METHOD_AGENT_NODE_STATUS.name),
    (Unary::JobRun, g::METHOD_AGENT_JOB_RUN.name),
    (
        Unary::JobPeriodicForce,
        g::METHOD_AGENT_JOB_PERIODIC_FORCE.name,
    ),
    (Unary::JobDispatch, g::METHOD_AGENT_JOB_DISPATCH.name),
    (Unary::JobStop, g::METHOD_AGENT_JOB_STOP.name),
    (Unary::JobStatus, g::METHOD_AGENT_JOB_STATUS.name),
    (Unary::AllocLogs, g::METHOD_AGENT_ALLOC_LOGS.name),
    (Unary::AllocControl, g::METHOD_AGENT_ALLOC_CONTROL.name),
    (Unary::JobInspect, g::METHOD_AGENT_JOB_INSPECT.name),
    (Unary::ServiceList, g::METHOD_AGENT_SERVICE_LIST.name),
    (Unary::JobPlan, g::METHOD_AGENT_JOB_PLAN.name),
    (Unary::Events, g::METHOD_AGENT_EVENTS.name),
];

/// The short name of a method (`PluginStatus`), as metrics and traces
/// name it.
pub(super) fn short_name(full: &'static str) -> &'static str {
    full.rsplit('/').next().unwrap_or(full)
}

/// The grpcio service of the control API: the [`UNARY`] methods through
/// one byte handler, the session methods typed.
pub(super) fn create(service: Service) -> grpcio::Service {
    let mut builder = ServiceBuilder::new();
    for (method, name) in UNARY {
        let service = service.clone();
        let short = short_name(name);
        builder = builder.add_unary_handler(&bytes_method(name), move |_ctx, bytes, sink| {
            service.unary(method, short, &bytes, sink);
        });
    }
    let s = service.clone();
    builder = builder
        .add_duplex_streaming_handler(&g::METHOD_AGENT_ALLOC_EXEC, move |ctx, stream, sink| {
            s.sessions.exec(&ctx, stream, sink)
        });
    let s = service.clone();
    builder = builder.add_unary_handler(&g::METHOD_AGENT_ALLOC_FS, move |ctx, req, sink| {
        s.sessions.fs(&ctx, req, sink);
    });
    let s = service.clone();
    builder = builder.add_unary_handler(&g::METHOD_AGENT_ALLOC_STATS, move |ctx, req, sink| {
        s.sessions.stats(&ctx, req, sink);
    });
    builder = builder
        .add_server_streaming_handler(&g::METHOD_AGENT_ALLOC_FS_FOLLOW, move |ctx, req, sink| {
            service.sessions.fs_follow(&ctx, req, sink)
        });
    builder.build()
}

/// Decodes the request of `method` into the loop's [`Request`].
pub(super) fn request(method: Unary, name: &str, bytes: &[u8]) -> Result<Request, CallError> {
    use Unary as U;
    Ok(match method {
        U::PluginStatus => Request::PluginStatus {
            id: decode::<api::PluginStatusRequest>(name, bytes)?.id,
        },
        U::VolumeRegister => Request::VolumeRegister(wire::spec_request(decode(name, bytes)?)),
        U::VolumeCreate => Request::VolumeCreate(wire::spec_request(decode(name, bytes)?)),
        U::VolumeDeregister => {
            Request::VolumeDeregister(wire::deregister_request(decode(name, bytes)?))
        }
        U::VolumeDelete => Request::VolumeDelete(wire::deregister_request(decode(name, bytes)?)),
        U::VolumeStatus => Request::VolumeStatus(wire::status_request(decode(name, bytes)?)),
        U::VolumeClaim => Request::VolumeClaim(wire::claim_request(decode(name, bytes)?)),
        U::VolumeRelease => Request::VolumeRelease(wire::release_request(decode(name, bytes)?)),
        U::SnapshotCreate => {
            Request::SnapshotCreate(wire::snapshot_create_request(decode(name, bytes)?))
        }
        U::SnapshotDelete => {
            Request::SnapshotDelete(wire::snapshot_delete_request(decode(name, bytes)?))
        }
        U::SnapshotList => Request::SnapshotList(wire::snapshot_list_request(decode(name, bytes)?)),
        U::VolumeForceDetach => {
            let req: api::VolumeForceDetachRequest = decode(name, bytes)?;
            Request::VolumeForceDetach {
                volume_id: req.volume_id,
                node: req.node,
            }
        }
        U::NodeStatus => {
            decode::<api::NodeStatusRequest>(name, bytes)?;
            Request::NodeStatus
        }
        U::JobRun => Request::JobRun(wire::job_file(decode(name, bytes)?)),
        U::JobPeriodicForce => Request::JobPeriodicForce {
            name: decode::<api::JobPeriodicForceRequest>(name, bytes)?.name,
        },
        U::JobDispatch => Request::JobDispatch(wire::dispatch_request(decode(name, bytes)?)),
        U::JobStop => {
            let req: api::JobStopRequest = decode(name, bytes)?;
            Request::JobStop {
                name: req.name,
                purge: req.purge,
            }
        }
        U::JobStatus => Request::JobStatus {
            name: decode::<api::JobStatusRequest>(name, bytes)?.name,
        },
        U::AllocLogs => Request::AllocLogs(wire::logs_request(decode(name, bytes)?)),
        U::AllocControl => Request::AllocControl(wire::alloc_control(decode(name, bytes)?)?),
        U::JobInspect => Request::JobInspect {
            name: decode::<api::JobInspectRequest>(name, bytes)?.name,
        },
        U::ServiceList => {
            let req: api::ServiceListRequest = decode(name, bytes)?;
            Request::Services {
                name: Some(req.name).filter(|n| !n.is_empty()),
            }
        }
        U::JobPlan => Request::JobPlan(wire::job_file(decode(name, bytes)?)),
        U::Events => Request::Events(wire::events_request(decode(name, bytes)?)?),
    })
}

/// Encodes the loop's answer to `method`; `None` for an answer of
/// another kind.
pub(super) fn answer(method: Unary, resp: Response) -> Option<protobuf::Result<Vec<u8>>> {
    use Unary as U;
    Some(match (method, resp) {
        (U::PluginStatus, Response::PluginStatus(report)) => {
            wire::plugin_status(report).write_to_bytes()
        }
        (
            U::VolumeRegister | U::VolumeCreate | U::VolumeStatus,
            Response::Volume(Answer::Status(status)),
        ) => wire::volume_status(status).write_to_bytes(),
        (U::VolumeDeregister | U::VolumeDelete, Response::Volume(Answer::Deregistered)) => {
            api::VolumeDeregisterResponse::new().write_to_bytes()
        }
        (U::VolumeClaim, Response::Volume(Answer::Claimed(c))) => wire::claimed(c).write_to_bytes(),
        (U::VolumeRelease, Response::Volume(Answer::Released(r))) => {
            wire::released(r).write_to_bytes()
        }
        (U::SnapshotCreate, Response::Volume(Answer::SnapshotCreated(s))) => {
            wire::snapshot_created(s).write_to_bytes()
        }
        (U::SnapshotDelete, Response::Volume(Answer::SnapshotDeleted)) => {
            api::SnapshotDeleteResponse::new().write_to_bytes()
        }
        (U::SnapshotList, Response::Volume(Answer::Snapshots(all))) => {
            wire::snapshots(all).write_to_bytes()
        }
        (U::VolumeForceDetach, Response::VolumeForceDetach) => {
            api::VolumeForceDetachResponse::new().write_to_bytes()
        }
        (U::NodeStatus, Response::NodeStatus(status)) => wire::node_status(status).write_to_bytes(),
        (U::JobRun | U::JobPeriodicForce | U::JobDispatch, Response::JobRun(run)) => {
            wire::job_run(run).write_to_bytes()
        }
        (U::JobStop, Response::JobStop(ids)) => wire::job_stop(ids).write_to_bytes(),
        (U::JobStatus, Response::JobStatus(jobs)) => wire::job_status(jobs).write_to_bytes(),
        (U::AllocLogs, Response::AllocLogs(path)) => wire::logs(path).write_to_bytes(),
        (U::AllocControl, Response::AllocControl(done)) => {
            wire::alloc_controlled(done).write_to_bytes()
        }
        (U::JobInspect, Response::JobInspect(job)) => wire::job_inspected(job).write_to_bytes(),
        (U::ServiceList, Response::Services(found)) => {
            wire_services::services(found).write_to_bytes()
        }
        (U::JobPlan, Response::JobPlan(plan)) => {
            super::wire_plan::job_planned(plan).write_to_bytes()
        }
        (U::Events, Response::Events(page)) => wire::events(page).write_to_bytes(),
        _ => return None,
    })
}

fn decode<M: Message>(name: &str, bytes: &[u8]) -> Result<M, CallError> {
    M::parse_from_bytes(bytes).map_err(|err| {
        CallError::new(
            ErrorKind::InvalidArgument,
            format!("{name}: the request does not decode: {err}"),
        )
    })
}

/// A byte-level client of the control API's [`UNARY`] methods, for tests
/// that send what the generated client cannot.
#[cfg(test)]
pub(super) fn call_raw(
    channel: grpcio::Channel,
    name: &'static str,
    bytes: &Vec<u8>,
) -> grpcio::Result<Vec<u8>> {
    grpcio::Client::new(channel).unary_call(
        &bytes_method(name),
        bytes,
        grpcio::CallOption::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::rpc::testing::rpcs_of;

    /// The methods [`create`] registers with their typed handlers.
    const SESSIONS: [&str; 4] = ["AllocExec", "AllocFs", "AllocStats", "AllocFsFollow"];

    /// A method added to `agent.proto` but not here would be answered
    /// UNIMPLEMENTED: every `rpc` of the service is served, once.
    #[test]
    fn every_rpc_of_the_agent_service_is_registered_once() {
        let declared = rpcs_of(include_str!("../../proto/agent.proto"));
        let mut served: Vec<&str> = UNARY
            .iter()
            .map(|(_, name)| short_name(name))
            .chain(SESSIONS)
            .collect();
        crate::order::sort(&mut served);
        assert_eq!(served, declared);
        for (_, name) in UNARY {
            assert!(name.starts_with("/csi_agent.v1.Agent/"), "{name}");
        }
    }
}
