//! The control API server.
//!
//! One thread ("control-api") owns the listening socket and the grpcio
//! server. It accepts each connection itself, checks the peer's uid with
//! `SO_PEERCRED`, and only then hands the connection to gRPC
//! (`add_channel_from_fd`): a refused peer is closed before it can send a
//! request. The socket is bound under a temporary name, made 0600, and
//! renamed into place, so it is never reachable with looser permissions
//! (`listen.rs`).

use std::fs;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use grpcio::{ChannelBuilder, ServerBuilder, UnarySink, UnarySinkResult};

use super::methods::{self, Unary};
use super::{wire, Call, CallError, ErrorKind, ReplyTo};
use crate::grpc::{block_on, grpc_environment};

pub use super::server_error::Error;

/// The running server; [`ControlServer::stop`] removes the socket it
/// bound (never one a service manager handed over).
pub struct ControlServer {
    path: PathBuf,
    /// The socket was handed over (socket activation): its file is the
    /// service manager's, and stays.
    handed: bool,
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
    /// Serves the control API at `path`, sending every call to `calls`:
    /// on `handed`, a listening socket a service manager bound at `path`,
    /// or else on a socket bound here.
    pub fn start(
        path: &Path,
        handed: Option<UnixListener>,
        calls: Sender<Call>,
    ) -> Result<ControlServer, Error> {
        let is_handed = handed.is_some();
        let listener = match handed {
            Some(listener) => listener,
            None => super::listen::bind_private(path)?,
        };
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
            .register_service({
                let service = Service { calls, sent };
                methods::create(
                    move |method, bytes, sink| service.unary(method, bytes, sink),
                    sessions,
                )
            })
            .build()
            .map_err(Error::Grpc)?;
        server.start();
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let stopping = stopping.clone();
            thread::Builder::new()
                .name("control-api".into())
                .spawn(move || {
                    super::listen::accept_loop(&listener, &mut server, &stopping);
                    let _ = block_on(server.shutdown());
                })
                .map_err(Error::Thread)?
        };
        log::info!("Control API listening on {}", path.display());
        Ok(ControlServer {
            path: path.to_path_buf(),
            handed: is_handed,
            stopping,
            thread: Some(thread),
            sent: Some(sent_thread),
        })
    }

    /// Stops accepting, ends the server thread and removes the socket
    /// (unless it was handed over);
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
        if !self.handed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.shut();
    }
}

/// The unary methods' side of the grpcio service (the sessions are
/// `session.rs`'s): forwards each call to the main loop, whose answer
/// goes straight into the call's sink from whichever thread gives it, so
/// that neither grpcio's completion queue nor a thread of the call's own
/// waits for the loop. grpcio starts sending the answer at once; the call
/// must live on until the send is done (gRPC cancels a server call let go
/// before it completes), which the `control-api-sent` thread waits for.
#[derive(Clone)]
pub(super) struct Service {
    calls: Sender<Call>,
    sent: Sender<UnarySinkResult>,
}

impl Service {
    /// Serves the unary method `method` (named by its short name in
    /// metrics and traces): decodes `bytes` and forwards the request to
    /// the loop, or refuses one that does not decode, through the same
    /// reply.
    pub(super) fn unary(&self, method: &'static Unary, bytes: &[u8], sink: UnarySink<Vec<u8>>) {
        let name = methods::short_name(method.name);
        crate::trace::point("api-call", name);
        let arrived = Instant::now();
        let sent = self.sent.clone();
        let reply = ReplyTo::sink(move |result| {
            let encoded = result.and_then(|resp| match (method.answer)(resp) {
                Some(Ok(bytes)) => Ok(bytes),
                Some(Err(err)) => Err(CallError::new(
                    ErrorKind::Internal,
                    format!("{name}: the answer does not encode: {err}"),
                )),
                None => Err(CallError::new(
                    ErrorKind::Internal,
                    format!("the agent answered {name} with another response"),
                )),
            });
            let (sending, code) = match encoded {
                Ok(bytes) => (sink.success(bytes), "OK"),
                Err(err) => (sink.fail(wire::status(&err)), wire::code_name(err.kind)),
            };
            crate::metrics::API_CALLS.observe(&[name, code], arrived.elapsed().as_secs_f64());
            crate::trace::point("api-sent", name);
            let _ = sent.send(sending);
        });
        match (method.request)(name, bytes) {
            // A loop that is gone dropped the call, and its reply answers
            // that the agent is shutting down.
            Ok(request) => {
                let _ = self.calls.send(Call { request, reply });
            }
            Err(err) => reply.send(Err(err)),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_server_hands_over_its_sent_thread_which_ends() {
        let dir = std::env::temp_dir().join(format!("csi-agent-api-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (calls, _calls) = unbounded();
        let server = ControlServer::start(&dir.join("control.sock"), None, calls).unwrap();
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
        let server = ControlServer::start(&socket, None, calls_tx).unwrap();
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

    #[test]
    fn an_undecodable_request_is_refused_naming_its_method() {
        use grpcio::RpcStatusCode;
        let dir = std::env::temp_dir().join(format!("csi-agent-api-d-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("control.sock");
        let (calls_tx, calls) = unbounded();
        let server = ControlServer::start(&socket, None, calls_tx).unwrap();
        let channel = ChannelBuilder::new(grpc_environment())
            .use_local_subchannel_pool(true)
            .connect(&format!("unix:{}", socket.display()));
        // Field 1 with wire type 7, which protobuf does not have.
        let garbage = vec![0x0f, 0xff, 0xff];
        let name = crate::proto::agent_grpc::METHOD_AGENT_VOLUME_CLAIM.name;
        match methods::call_raw(channel, name, &garbage) {
            Err(grpcio::Error::RpcFailure(status)) => {
                assert_eq!(status.code(), RpcStatusCode::INVALID_ARGUMENT);
                assert!(
                    status.message().starts_with("VolumeClaim: "),
                    "{}",
                    status.message()
                );
            }
            other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
        }
        assert!(calls.try_recv().is_err(), "the request reached the loop");
        assert!(server.stop().join_within(Duration::from_secs(10)));
        fs::remove_dir_all(&dir).unwrap();
    }
}
