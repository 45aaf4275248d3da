//! The control API server.
//!
//! One thread ("control-api") owns the listening socket and the grpcio
//! server. It accepts each connection itself, checks the peer's uid with
//! `SO_PEERCRED`, and only then hands the connection to gRPC
//! (`add_channel_from_fd`): a refused peer is closed before it can send a
//! request. The socket is bound under a temporary name, made 0600, and
//! renamed into place, so it is never reachable with looser permissions.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use grpcio::{ChannelBuilder, RpcContext, ServerBuilder, UnarySink, UnarySinkResult};

use super::{wire, wire_services, Call, CallError, ErrorKind, ReplyTo, Request, Response};
use crate::csi::rpc::{block_on, grpc_environment};
use crate::proto::{agent as api, agent_grpc};
use crate::sys::peercred;
use crate::volume::calls::Answer;

pub use super::server_error::Error;

/// The running server; [`ControlServer::stop`] removes the socket.
pub struct ControlServer {
    path: PathBuf,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The `control-api-sent` thread, which ends once every answer the
    /// server's calls may still give is sent or dropped.
    sent: Option<JoinHandle<()>>,
}

/// The `control-api-sent` thread of a stopped server: it ends once the
/// answers still held elsewhere (the loop's pending replies) are sent or
/// dropped, so it is joined after them ([`SentThread::join_within`]).
pub struct SentThread(Option<JoinHandle<()>>);

impl SentThread {
    /// Joins the thread if it ends within `limit`; returns whether it did.
    /// One that does not is named in the log and ends with the process.
    pub fn join_within(mut self, limit: Duration) -> bool {
        let Some(thread) = self.0.take() else {
            return true;
        };
        let deadline = Instant::now() + limit;
        while !thread.is_finished() {
            if Instant::now() >= deadline {
                log::warn!(
                    "The control API's answers were still being sent after {limit:?}; leaving them"
                );
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        if thread.join().is_err() {
            log::error!("The control-api-sent thread panicked");
        }
        true
    }
}

/// The largest request the control API reads (gRPC's own default, named):
/// a job file with every file it reads travels in one, and a longer one is
/// refused before it is decoded.
pub const MAX_REQUEST: usize = 4 << 20;

impl ControlServer {
    /// Serves the control API at `path`, sending every call to `calls`.
    pub fn start(path: &Path, calls: Sender<Call>) -> Result<ControlServer, Error> {
        let listener = bind_private(path)?;
        let (sent, sending) = unbounded();
        let sent_thread = thread::Builder::new()
            .name("control-api-sent".into())
            .spawn(move || wait_until_sent(sending))
            .map_err(Error::Thread)?;
        let args = ChannelBuilder::new(grpc_environment())
            .max_receive_message_len(MAX_REQUEST as i32)
            .build_args();
        let sessions = super::session::Sessions::new(calls.clone());
        let mut server = ServerBuilder::new(grpc_environment())
            .channel_args(args)
            .register_service(agent_grpc::create_agent(Service {
                calls,
                sent,
                sessions,
            }))
            .build()
            .map_err(Error::Grpc)?;
        server.start();
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let stopping = stopping.clone();
            thread::Builder::new()
                .name("control-api".into())
                .spawn(move || {
                    accept_loop(&listener, &mut server, &stopping);
                    let _ = block_on(server.shutdown());
                })
                .map_err(Error::Thread)?
        };
        log::info!("Control API listening on {}", path.display());
        Ok(ControlServer {
            path: path.to_path_buf(),
            stopping,
            thread: Some(thread),
            sent: Some(sent_thread),
        })
    }

    /// Stops accepting, ends the server thread and removes the socket;
    /// the thread that sends answers is handed back, to be joined once
    /// the answers still pending are gone.
    #[must_use = "join the sent thread once the pending answers are gone"]
    pub fn stop(mut self) -> SentThread {
        self.shut();
        SentThread(self.sent.take())
    }

    fn shut(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        let _ = UnixStream::connect(&self.path);
        if thread.join().is_err() {
            log::error!("The control API thread panicked");
        }
        let _ = fs::remove_file(&self.path);
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Binds a temporary name next to `path`, makes it 0600, and renames it to
/// `path`, replacing a stale socket of an earlier run.
fn bind_private(path: &Path) -> Result<UnixListener, Error> {
    let temp = path.with_file_name(format!(".control-{}.sock", std::process::id()));
    let _ = fs::remove_file(&temp);
    let listener = UnixListener::bind(&temp).map_err(|err| Error::Bind {
        path: temp.clone(),
        err,
    })?;
    let restricted = fs::set_permissions(&temp, fs::Permissions::from_mode(0o600));
    if let Err(err) = restricted {
        let _ = fs::remove_file(&temp);
        return Err(Error::Permissions { path: temp, err });
    }
    if let Err(err) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(Error::Rename {
            path: path.to_path_buf(),
            err,
        });
    }
    Ok(listener)
}

fn accept_loop(listener: &UnixListener, server: &mut grpcio::Server, stopping: &AtomicBool) {
    let agent_uid = peercred::current_uid();
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => {
                log::error!("The control API cannot accept connections: {err}");
                return;
            }
        };
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        match peercred::peer_uid(stream.as_raw_fd()) {
            Ok(uid) if uid == 0 || uid == agent_uid => {}
            Ok(uid) => {
                log::warn!("Refused a control API connection from uid {uid}");
                continue;
            }
            Err(err) => {
                log::warn!("Refused a control API connection whose peer is unknown: {err}");
                continue;
            }
        }
        if let Err(err) = stream.set_nonblocking(true) {
            log::warn!("Dropped a control API connection: {err}");
            continue;
        }
        // SAFETY: the fd is a connected stream socket that we own, and
        // `into_raw_fd` gives up ownership: gRPC closes it.
        unsafe { server.add_channel_from_fd(stream.into_raw_fd()) };
    }
}

/// The grpcio service: forwards each call to the main loop, whose answer
/// goes straight into the call's sink from whichever thread gives it, so
/// that neither grpcio's completion queue nor a thread of the call's own
/// waits for the loop. grpcio starts sending the answer at once; the call
/// must live on until the send is done (gRPC cancels a server call let go
/// before it completes), which the `control-api-sent` thread waits for.
#[derive(Clone)]
struct Service {
    calls: Sender<Call>,
    sent: Sender<UnarySinkResult>,
    /// `alloc exec` and `alloc fs`, each on a thread of its own.
    sessions: super::session::Sessions,
}

impl Service {
    fn forward<Resp: Send + 'static>(
        &self,
        method: &'static str,
        request: Request,
        sink: UnarySink<Resp>,
        answer: fn(Response) -> Option<Resp>,
    ) {
        crate::trace::point("api-call", method);
        let arrived = Instant::now();
        let sent = self.sent.clone();
        let reply = ReplyTo::sink(move |result| {
            let (sending, code) = match result.map(answer) {
                Ok(Some(resp)) => (sink.success(resp), "OK"),
                Ok(None) => (
                    sink.fail(wire::status(&CallError::new(
                        ErrorKind::Internal,
                        format!("the agent answered {method} with another response"),
                    ))),
                    wire::code_name(ErrorKind::Internal),
                ),
                Err(err) => (sink.fail(wire::status(&err)), wire::code_name(err.kind)),
            };
            crate::metrics::API_CALLS.observe(&[method, code], arrived.elapsed().as_secs_f64());
            crate::trace::point("api-sent", method);
            let _ = sent.send(sending);
        });
        // A loop that is gone dropped the call, and its reply answers
        // that the agent is shutting down.
        let _ = self.calls.send(Call { request, reply });
    }
}

/// Holds each answer's call until gRPC has sent it; ends when the server
/// and every unanswered call are gone.
fn wait_until_sent(sent: Receiver<UnarySinkResult>) {
    for sending in sent {
        if let Err(err) = block_on(sending) {
            log::debug!("A control API answer was not delivered: {err}");
        }
    }
}

impl agent_grpc::Agent for Service {
    fn plugin_status(
        &mut self,
        _ctx: RpcContext,
        req: api::PluginStatusRequest,
        sink: UnarySink<api::PluginStatusResponse>,
    ) {
        self.forward(
            "PluginStatus",
            Request::PluginStatus { id: req.id },
            sink,
            |resp| match resp {
                Response::PluginStatus(report) => Some(wire::plugin_status(report)),
                _ => None,
            },
        );
    }

    fn volume_register(
        &mut self,
        _ctx: RpcContext,
        req: api::VolumeSpecRequest,
        sink: UnarySink<api::VolumeStatusResponse>,
    ) {
        self.forward(
            "VolumeRegister",
            Request::VolumeRegister(wire::spec_request(req)),
            sink,
            status_response,
        );
    }

    fn volume_create(
        &mut self,
        _ctx: RpcContext,
        req: api::VolumeSpecRequest,
        sink: UnarySink<api::VolumeStatusResponse>,
    ) {
        self.forward(
            "VolumeCreate",
            Request::VolumeCreate(wire::spec_request(req)),
            sink,
            status_response,
        );
    }

    fn volume_deregister(
        &mut self,
        _ctx: RpcContext,
        req: api::VolumeDeregisterRequest,
        sink: UnarySink<api::VolumeDeregisterResponse>,
    ) {
        self.forward(
            "VolumeDeregister",
            Request::VolumeDeregister(wire::deregister_request(req)),
            sink,
            |resp| match resp {
                Response::Volume(Answer::Deregistered) => Some(Default::default()),
                _ => None,
            },
        );
    }

    fn volume_delete(
        &mut self,
        _ctx: RpcContext,
        req: api::VolumeDeregisterRequest,
        sink: UnarySink<api::VolumeDeregisterResponse>,
    ) {
        self.forward(
            "VolumeDelete",
            Request::VolumeDelete(wire::deregister_request(req)),
            sink,
            |resp| match resp {
                Response::Volume(Answer::Deregistered) => Some(Default::default()),
                _ => None,
            },
        );
    }

    fn volume_status(
        &mut self,
        _ctx: RpcContext,
        req: api::VolumeStatusRequest,
        sink: UnarySink<api::VolumeStatusResponse>,
    ) {
        self.forward(
            "VolumeStatus",
            Request::VolumeStatus(wire::status_request(req)),
            sink,
            status_response,
        );
    }

    fn volume_claim(
        &mut self,
        _ctx: RpcContext,
        req: api::VolumeClaimRequest,
        sink: UnarySink<api::VolumeClaimResponse>,
    ) {
        self.forward(
            "VolumeClaim",
            Request::VolumeClaim(wire::claim_request(req)),
            sink,
            |resp| match resp {
                Response::Volume(Answer::Claimed(c)) => Some(wire::claimed(c)),
                _ => None,
            },
        );
    }

    fn volume_release(
        &mut self,
        _ctx: RpcContext,
        req: api::VolumeReleaseRequest,
        sink: UnarySink<api::VolumeReleaseResponse>,
    ) {
        self.forward(
            "VolumeRelease",
            Request::VolumeRelease(wire::release_request(req)),
            sink,
            |resp| match resp {
                Response::Volume(Answer::Released(r)) => Some(wire::released(r)),
                _ => None,
            },
        );
    }

    fn snapshot_create(
        &mut self,
        _ctx: RpcContext,
        req: api::SnapshotCreateRequest,
        sink: UnarySink<api::SnapshotCreateResponse>,
    ) {
        self.forward(
            "SnapshotCreate",
            Request::SnapshotCreate(wire::snapshot_create_request(req)),
            sink,
            |resp| match resp {
                Response::Volume(Answer::SnapshotCreated(s)) => Some(wire::snapshot_created(s)),
                _ => None,
            },
        );
    }

    fn snapshot_delete(
        &mut self,
        _ctx: RpcContext,
        req: api::SnapshotDeleteRequest,
        sink: UnarySink<api::SnapshotDeleteResponse>,
    ) {
        self.forward(
            "SnapshotDelete",
            Request::SnapshotDelete(wire::snapshot_delete_request(req)),
            sink,
            |resp| match resp {
                Response::Volume(Answer::SnapshotDeleted) => Some(Default::default()),
                _ => None,
            },
        );
    }

    fn snapshot_list(
        &mut self,
        _ctx: RpcContext,
        req: api::SnapshotListRequest,
        sink: UnarySink<api::SnapshotListResponse>,
    ) {
        self.forward(
            "SnapshotList",
            Request::SnapshotList(wire::snapshot_list_request(req)),
            sink,
            |resp| match resp {
                Response::Volume(Answer::Snapshots(all)) => Some(wire::snapshots(all)),
                _ => None,
            },
        );
    }

    fn volume_force_detach(
        &mut self,
        _ctx: RpcContext,
        req: api::VolumeForceDetachRequest,
        sink: UnarySink<api::VolumeForceDetachResponse>,
    ) {
        self.forward(
            "VolumeForceDetach",
            Request::VolumeForceDetach {
                volume_id: req.volume_id,
                node: req.node,
            },
            sink,
            |resp| match resp {
                Response::VolumeForceDetach => Some(Default::default()),
                _ => None,
            },
        );
    }

    fn node_status(
        &mut self,
        _ctx: RpcContext,
        _req: api::NodeStatusRequest,
        sink: UnarySink<api::NodeStatusResponse>,
    ) {
        self.forward("NodeStatus", Request::NodeStatus, sink, |resp| match resp {
            Response::NodeStatus(status) => Some(wire::node_status(status)),
            _ => None,
        });
    }

    fn job_run(
        &mut self,
        _ctx: RpcContext,
        req: api::JobRunRequest,
        sink: UnarySink<api::JobRunResponse>,
    ) {
        self.forward(
            "JobRun",
            Request::JobRun(wire::job_file(req)),
            sink,
            |resp| match resp {
                Response::JobRun(run) => Some(wire::job_run(run)),
                _ => None,
            },
        );
    }

    fn job_periodic_force(
        &mut self,
        _ctx: RpcContext,
        req: api::JobPeriodicForceRequest,
        sink: UnarySink<api::JobRunResponse>,
    ) {
        self.forward(
            "JobPeriodicForce",
            Request::JobPeriodicForce { name: req.name },
            sink,
            |resp| match resp {
                Response::JobRun(run) => Some(wire::job_run(run)),
                _ => None,
            },
        );
    }

    fn job_dispatch(
        &mut self,
        _ctx: RpcContext,
        req: api::JobDispatchRequest,
        sink: UnarySink<api::JobRunResponse>,
    ) {
        self.forward(
            "JobDispatch",
            Request::JobDispatch(wire::dispatch_request(req)),
            sink,
            |resp| match resp {
                Response::JobRun(run) => Some(wire::job_run(run)),
                _ => None,
            },
        );
    }

    fn job_stop(
        &mut self,
        _ctx: RpcContext,
        req: api::JobStopRequest,
        sink: UnarySink<api::JobStopResponse>,
    ) {
        self.forward(
            "JobStop",
            Request::JobStop {
                name: req.name,
                purge: req.purge,
            },
            sink,
            |resp| match resp {
                Response::JobStop(ids) => Some(wire::job_stop(ids)),
                _ => None,
            },
        );
    }

    fn job_status(
        &mut self,
        _ctx: RpcContext,
        req: api::JobStatusRequest,
        sink: UnarySink<api::JobStatusResponse>,
    ) {
        self.forward(
            "JobStatus",
            Request::JobStatus { name: req.name },
            sink,
            |resp| match resp {
                Response::JobStatus(jobs) => Some(wire::job_status(jobs)),
                _ => None,
            },
        );
    }

    fn alloc_logs(
        &mut self,
        _ctx: RpcContext,
        req: api::AllocLogsRequest,
        sink: UnarySink<api::AllocLogsResponse>,
    ) {
        self.forward(
            "AllocLogs",
            Request::AllocLogs(wire::logs_request(req)),
            sink,
            |resp| match resp {
                Response::AllocLogs(path) => Some(wire::logs(path)),
                _ => None,
            },
        );
    }

    fn alloc_control(
        &mut self,
        _ctx: RpcContext,
        req: api::AllocControlRequest,
        sink: UnarySink<api::AllocControlResponse>,
    ) {
        let request = match wire::alloc_control(req) {
            Ok(request) => request,
            Err(err) => {
                crate::metrics::API_CALLS
                    .observe(&["AllocControl", wire::code_name(err.kind)], 0.0);
                let _ = self.sent.send(sink.fail(wire::status(&err)));
                return;
            }
        };
        self.forward(
            "AllocControl",
            Request::AllocControl(request),
            sink,
            |resp| match resp {
                Response::AllocControl(done) => Some(wire::alloc_controlled(done)),
                _ => None,
            },
        );
    }

    fn job_inspect(
        &mut self,
        _ctx: RpcContext,
        req: api::JobInspectRequest,
        sink: UnarySink<api::JobInspectResponse>,
    ) {
        self.forward(
            "JobInspect",
            Request::JobInspect { name: req.name },
            sink,
            |resp| match resp {
                Response::JobInspect(job) => Some(wire::job_inspected(job)),
                _ => None,
            },
        );
    }

    fn service_list(
        &mut self,
        _ctx: RpcContext,
        req: api::ServiceListRequest,
        sink: UnarySink<api::ServiceListResponse>,
    ) {
        let name = Some(req.name).filter(|n| !n.is_empty());
        self.forward(
            "ServiceList",
            Request::Services { name },
            sink,
            |resp| match resp {
                Response::Services(found) => Some(wire_services::services(found)),
                _ => None,
            },
        );
    }

    fn events(
        &mut self,
        _ctx: RpcContext,
        req: api::EventsRequest,
        sink: UnarySink<api::EventsResponse>,
    ) {
        match wire::events_request(req) {
            Ok(req) => self.forward("Events", Request::Events(req), sink, |resp| match resp {
                Response::Events(page) => Some(wire::events(page)),
                _ => None,
            }),
            Err(err) => {
                crate::metrics::API_CALLS.observe(&["Events", wire::code_name(err.kind)], 0.0);
                let _ = self.sent.send(sink.fail(wire::status(&err)));
            }
        }
    }

    fn alloc_exec(
        &mut self,
        ctx: RpcContext,
        stream: grpcio::RequestStream<api::AllocExecInput>,
        sink: grpcio::DuplexSink<api::AllocExecOutput>,
    ) {
        self.sessions.exec(&ctx, stream, sink);
    }

    fn alloc_fs(
        &mut self,
        ctx: RpcContext,
        req: api::AllocFsRequest,
        sink: UnarySink<api::AllocFsResponse>,
    ) {
        self.sessions.fs(&ctx, req, sink);
    }
}

fn status_response(resp: Response) -> Option<api::VolumeStatusResponse> {
    match resp {
        Response::Volume(Answer::Status(status)) => Some(wire::volume_status(status)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_server_hands_over_its_sent_thread_which_ends() {
        let dir = std::env::temp_dir().join(format!("csi-agent-api-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (calls, _calls) = unbounded();
        let server = ControlServer::start(&dir.join("control.sock"), calls).unwrap();
        let sent = server.stop();
        assert!(!dir.join("control.sock").exists());
        assert!(sent.join_within(Duration::from_secs(10)));
        fs::remove_dir_all(&dir).unwrap();
    }
    #[test]
    fn every_call_is_counted_by_method_and_code_when_answered() {
        use crate::metrics::API_CALLS;
        let dir = std::env::temp_dir().join(format!("csi-agent-api-m-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("control.sock");
        let (calls_tx, calls) = unbounded();
        let server = ControlServer::start(&socket, calls_tx).unwrap();
        let before = API_CALLS.value(&["PluginStatus", "NOT_FOUND"]);
        let answering = std::thread::spawn(move || {
            let call: Call = calls.recv().unwrap();
            call.reply
                .send(Err(CallError::new(ErrorKind::NotFound, "no plugin")));
        });
        let client = super::super::client::AgentClient::connect(&socket).unwrap();
        client.plugin_status("x").unwrap_err();
        answering.join().unwrap();
        assert_eq!(
            API_CALLS.value(&["PluginStatus", "NOT_FOUND"]),
            before + 1.0
        );
        drop(client);
        assert!(server.stop().join_within(Duration::from_secs(10)));
        fs::remove_dir_all(&dir).unwrap();
    }
}
