//! How the control API's methods are registered with grpcio.
//!
//! grpcio compiles its server-side machinery (`Handler<F>::handle`, the
//! request decoding, `UnarySink<T>::complete`) once per handler closure
//! type, and the generated `create_agent` gives every method a closure of
//! its own: 28 copies for the control API alone. The unary methods that
//! go to the main loop are therefore registered here with one closure
//! type over plain bytes (a `Method<Vec<u8>, Vec<u8>>` per method, named
//! by the generated `METHOD_*` constants so the names cannot drift), and
//! each method's entry decodes the request with protobuf and encodes the
//! answer, the server forwarding between them. grpcio's machinery is then compiled once for all of
//! them: measured in the static profile (x86_64), `Handler<F>::handle`
//! went from 54 copies (116 KB) to 31 (84 KB), `UnarySink<T>::complete`
//! from 35 (24 KB) to 20 (14 KB), and the stripped binary lost 69 KB
//! (50 KB of `.text`, 16 KB of unwind tables).
//!
//! Each such method is declared once, in [`UNARY`]: its name, its
//! request and its answer side by side, so that a method cannot be
//! registered without both.
//!
//! A request that does not decode is answered INVALID_ARGUMENT naming the
//! method. The session methods (`AllocExec`, `AllocFsFollow`, which
//! stream, and `AllocFs`, `AllocStats`, which run on session threads) keep
//! their generated typed constants.

use grpcio::{ServiceBuilder, UnarySink};
use protobuf::Message;

use super::session::Sessions;
use super::{wire, wire_jobs, wire_services, CallError, ErrorKind, Request, Response};
use crate::grpc::bytes_method;
use crate::message::encode;
use crate::proto::{agent as api, agent_grpc as g};
use crate::volume::calls::Answer;

/// A unary method of the control API that the main loop answers: its
/// full gRPC name, how its request becomes the loop's [`Request`], and how
/// the loop's [`Response`] to it is encoded (`None` for a response of
/// another kind, which the server refuses as INTERNAL).
pub(super) struct Unary {
    pub name: &'static str,
    pub request: fn(&str, &[u8]) -> Result<Request, CallError>,
    pub answer: fn(Response) -> Option<protobuf::Result<Vec<u8>>>,
}

/// An entry of [`UNARY`], the only place a method is named: its generated
/// method constant; its request, built from `$bytes` (decoded with
/// [`decode`], which names the method `$name` when they do not decode);
/// and the response it is answered with, encoded.
macro_rules! unary {
    ($method:ident, |$name:ident, $bytes:ident| $request:expr, $response:pat => $encoded:expr) => {
        Unary {
            name: g::$method.name,
            request: |$name, $bytes| Ok($request),
            answer: |response| match response {
                $response => Some($encoded),
                _ => None,
            },
        }
    };
}

/// Every method the loop answers, each declared once.
pub(super) const UNARY: [Unary; 24] = [
    unary!(
        METHOD_AGENT_PLUGIN_STATUS,
        |n, b| Request::PluginStatus {
            id: decode::<api::PluginStatusRequest>(n, b)?.id
        },
        Response::PluginStatus(report) => encode(&wire::plugin_status(report))
    ),
    unary!(
        METHOD_AGENT_VOLUME_REGISTER,
        |n, b| Request::VolumeRegister(wire::spec_request(decode(n, b)?)),
        Response::Volume(Answer::Status(status)) => encode(&wire::volume_status(status))
    ),
    unary!(
        METHOD_AGENT_VOLUME_CREATE,
        |n, b| Request::VolumeCreate(wire::spec_request(decode(n, b)?)),
        Response::Volume(Answer::Status(status)) => encode(&wire::volume_status(status))
    ),
    unary!(
        METHOD_AGENT_VOLUME_DEREGISTER,
        |n, b| Request::VolumeDeregister(wire::deregister_request(decode(n, b)?)),
        Response::Volume(Answer::Deregistered) => encode(&api::VolumeDeregisterResponse::new())
    ),
    unary!(
        METHOD_AGENT_VOLUME_DELETE,
        |n, b| Request::VolumeDelete(wire::deregister_request(decode(n, b)?)),
        Response::Volume(Answer::Deregistered) => encode(&api::VolumeDeregisterResponse::new())
    ),
    unary!(
        METHOD_AGENT_VOLUME_STATUS,
        |n, b| Request::VolumeStatus(wire::status_request(decode(n, b)?)),
        Response::Volume(Answer::Status(status)) => encode(&wire::volume_status(status))
    ),
    unary!(
        METHOD_AGENT_VOLUME_CLAIM,
        |n, b| Request::VolumeClaim(wire::claim_request(decode(n, b)?)),
        Response::Volume(Answer::Claimed(claimed)) => encode(&wire::claimed(claimed))
    ),
    unary!(
        METHOD_AGENT_VOLUME_RELEASE,
        |n, b| Request::VolumeRelease(wire::release_request(decode(n, b)?)),
        Response::Volume(Answer::Released(released)) => encode(&wire::released(released))
    ),
    unary!(
        METHOD_AGENT_SNAPSHOT_CREATE,
        |n, b| Request::SnapshotCreate(wire::snapshot_create_request(decode(n, b)?)),
        Response::Volume(Answer::SnapshotCreated(s)) => encode(&wire::snapshot_created(s))
    ),
    unary!(
        METHOD_AGENT_SNAPSHOT_DELETE,
        |n, b| Request::SnapshotDelete(wire::snapshot_delete_request(decode(n, b)?)),
        Response::Volume(Answer::SnapshotDeleted) => encode(&api::SnapshotDeleteResponse::new())
    ),
    unary!(
        METHOD_AGENT_SNAPSHOT_LIST,
        |n, b| Request::SnapshotList(wire::snapshot_list_request(decode(n, b)?)),
        Response::Volume(Answer::Snapshots(all)) => encode(&wire::snapshots(all))
    ),
    unary!(
        METHOD_AGENT_VOLUME_FORCE_DETACH,
        |n, b| {
            let req: api::VolumeForceDetachRequest = decode(n, b)?;
            Request::VolumeForceDetach {
                volume_id: req.volume_id,
                node: req.node,
            }
        },
        Response::VolumeForceDetach => encode(&api::VolumeForceDetachResponse::new())
    ),
    unary!(
        METHOD_AGENT_NODE_STATUS,
        |n, b| {
            decode::<api::NodeStatusRequest>(n, b)?;
            Request::NodeStatus
        },
        Response::NodeStatus(status) => encode(&wire::node_status(status))
    ),
    unary!(
        METHOD_AGENT_JOB_RUN,
        |n, b| Request::JobRun(wire_jobs::job_file(decode(n, b)?)),
        Response::JobRun(run) => encode(&wire_jobs::job_run(run))
    ),
    unary!(
        METHOD_AGENT_JOB_PERIODIC_FORCE,
        |n, b| Request::JobPeriodicForce {
            name: decode::<api::JobPeriodicForceRequest>(n, b)?.name
        },
        Response::JobRun(run) => encode(&wire_jobs::job_run(run))
    ),
    unary!(
        METHOD_AGENT_JOB_DISPATCH,
        |n, b| Request::JobDispatch(wire_jobs::dispatch_request(decode(n, b)?)),
        Response::JobRun(run) => encode(&wire_jobs::job_run(run))
    ),
    unary!(
        METHOD_AGENT_JOB_STOP,
        |n, b| {
            let req: api::JobStopRequest = decode(n, b)?;
            Request::JobStop {
                name: req.name,
                purge: req.purge,
            }
        },
        Response::JobStop(ids) => encode(&wire_jobs::job_stop(ids))
    ),
    unary!(
        METHOD_AGENT_JOB_STATUS,
        |n, b| Request::JobStatus {
            name: decode::<api::JobStatusRequest>(n, b)?.name
        },
        Response::JobStatus(jobs) => encode(&wire_jobs::job_status(jobs))
    ),
    unary!(
        METHOD_AGENT_ALLOC_LOGS,
        |n, b| Request::AllocLogs(wire_jobs::logs_request(decode(n, b)?)),
        Response::AllocLogs(path) => encode(&wire_jobs::logs(path))
    ),
    unary!(
        METHOD_AGENT_ALLOC_CONTROL,
        |n, b| Request::AllocControl(wire_jobs::alloc_control(decode(n, b)?)?),
        Response::AllocControl(done) => encode(&wire_jobs::alloc_controlled(done))
    ),
    unary!(
        METHOD_AGENT_JOB_INSPECT,
        |n, b| Request::JobInspect {
            name: decode::<api::JobInspectRequest>(n, b)?.name
        },
        Response::JobInspect(job) => encode(&wire_jobs::job_inspected(job))
    ),
    unary!(
        METHOD_AGENT_SERVICE_LIST,
        |n, b| {
            let req: api::ServiceListRequest = decode(n, b)?;
            Request::Services {
                name: Some(req.name).filter(|n| !n.is_empty()),
            }
        },
        Response::Services(found) => encode(&wire_services::services(found))
    ),
    unary!(
        METHOD_AGENT_JOB_PLAN,
        |n, b| Request::JobPlan(wire_jobs::job_file(decode(n, b)?)),
        Response::JobPlan(plan) => encode(&super::wire_plan::job_planned(plan))
    ),
    unary!(
        METHOD_AGENT_EVENTS,
        |n, b| Request::Events(wire::events_request(decode(n, b)?)?),
        Response::Events(page) => encode(&wire::events(page))
    ),
];

/// The short name of a method (`PluginStatus`), as metrics and traces
/// name it.
pub(super) fn short_name(full: &'static str) -> &'static str {
    full.rsplit('/').next().unwrap_or(full)
}

/// The grpcio service of the control API: the [`UNARY`] methods through
/// one byte handler, each call handed to `unary` (the server, which
/// forwards it to the loop), and the session methods typed.
pub(super) fn create<F>(unary: F, sessions: Sessions) -> grpcio::Service
where
    F: Fn(&'static Unary, &[u8], UnarySink<Vec<u8>>) + Clone + Send + 'static,
{
    let mut builder = ServiceBuilder::new();
    for method in &UNARY {
        let unary = unary.clone();
        builder =
            builder.add_unary_handler(&bytes_method(method.name), move |_ctx, bytes, sink| {
                unary(method, &bytes, sink);
            });
    }
    let s = sessions.clone();
    builder = builder
        .add_duplex_streaming_handler(&g::METHOD_AGENT_ALLOC_EXEC, move |ctx, stream, sink| {
            s.exec(&ctx, stream, sink)
        });
    let s = sessions.clone();
    builder = builder.add_unary_handler(&g::METHOD_AGENT_ALLOC_FS, move |ctx, req, sink| {
        s.fs(&ctx, req, sink);
    });
    let s = sessions.clone();
    builder = builder.add_unary_handler(&g::METHOD_AGENT_ALLOC_STATS, move |ctx, req, sink| {
        s.stats(&ctx, req, sink);
    });
    builder = builder
        .add_server_streaming_handler(&g::METHOD_AGENT_ALLOC_FS_FOLLOW, move |ctx, req, sink| {
            sessions.fs_follow(&ctx, req, sink)
        });
    builder.build()
}

fn decode<M: Message>(name: &str, bytes: &[u8]) -> Result<M, CallError> {
    crate::message::decode::<M>(bytes).map_err(|err| {
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
    use crate::grpc::testing::rpcs_of;

    /// The methods [`create`] registers with their typed handlers.
    const SESSIONS: [&str; 4] = ["AllocExec", "AllocFs", "AllocStats", "AllocFsFollow"];

    /// A method added to `agent.proto` but not here would be answered
    /// UNIMPLEMENTED: every `rpc` of the service is served, once.
    #[test]
    fn every_rpc_of_the_agent_service_is_registered_once() {
        let declared = rpcs_of(include_str!("../../proto/agent.proto"));
        let mut served: Vec<&str> = UNARY
            .iter()
            .map(|method| short_name(method.name))
            .chain(SESSIONS)
            .collect();
        order::sort(&mut served);
        assert_eq!(served, declared);
        for method in &UNARY {
            assert!(
                method.name.starts_with("/csi_agent.v1.Agent/"),
                "{}",
                method.name
            );
        }
    }
}
