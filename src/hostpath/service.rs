//! The plugin as a grpcio service: each RPC is recorded in the call
//! trace, judged by strict mode (when on), given its injected fault, then
//! run on a thread of its own; and the Identity service.

use std::sync::Arc;
use std::thread;

use grpcio::{RpcContext, RpcStatus, UnarySink};

use super::faults::Action;
use super::strict::{Call, Service as CsiService};
use super::{status, Plugin, RpcResult, PLUGIN_NAME, PUBLISH_CONTEXT_KEY};
use crate::csi::convert;
use crate::csi::error::Code;
use crate::csi::proto::csi as pb;
use crate::csi::types::{PluginCapability, StringMap};
use crate::grpc::block_on;
use crate::message::{encode, Wire};

/// Where an RPC's answer goes: encoded, as the byte methods send it
/// (`methods.rs`).
pub(super) type Sink = UnarySink<Vec<u8>>;

/// The plugin as a grpcio service: cheap to clone, one per service.
#[derive(Clone)]
pub struct Service(pub(super) Arc<Plugin>);

/// The calls whose `skip` fault forgets the plugin's record of the mount
/// and leaves the mount, as a plugin that lost its records in a restart
/// answers them.
const RELEASES: &[&str] = &["NodeUnpublishVolume", "NodeUnstageVolume"];

/// What [`Service::serve`] needs of a request besides its work: its facts
/// for strict mode, and its fields for the call trace.
pub(crate) struct Received {
    call: Call,
    /// The request carries fields its message does not define.
    undeclared_fields: bool,
    fields: String,
}

impl Received {
    pub(crate) fn new(call: Call, req: &impl protobuf::Message, fields: String) -> Received {
        Received {
            call,
            undeclared_fields: req.unknown_fields().iter().next().is_some(),
            fields,
        }
    }

    pub(crate) fn rpc(&self) -> &'static str {
        self.call.rpc()
    }
}

impl Service {
    /// Records the call, then runs `work` on its own thread after strict
    /// mode admitted it (if on) and any injected fault applied, and answers
    /// through `sink`.
    pub(super) fn serve<Resp, F>(&self, ctx: &RpcContext, received: Received, sink: Sink, work: F)
    where
        Resp: protobuf::Message,
        F: FnOnce(&Plugin, Option<Action>) -> RpcResult<Resp> + Send + 'static,
    {
        self.serve_boxed(ctx, received, Box::new(Typed { sink, work }));
    }

    /// [`Service::serve`] with the call's types behind [`Reply`], so that
    /// the thread that runs a call is compiled once rather than for each
    /// RPC (twenty copies of it were 115 KB of the static binary).
    fn serve_boxed(&self, ctx: &RpcContext, received: Received, reply: Box<dyn Reply>) {
        let Received {
            call,
            undeclared_fields,
            fields,
        } = received;
        let method = call.rpc();
        self.0.trace.record(method, &fields);
        let plugin = self.0.clone();
        let deadline = ctx.deadline();
        let spawned = thread::Builder::new()
            .name(format!("rpc-{method}"))
            .spawn(move || {
                let admitted = match &plugin.strict {
                    Some(mode) => {
                        let shared = mode.is_split() || plugin.shares_base();
                        let recorded = shared.then(|| plugin.recorded()).flatten();
                        mode.admit(
                            &call,
                            undeclared_fields,
                            move || !deadline.exceeded(),
                            recorded,
                        )
                        .map(Some)
                        .map_err(|v| status(Code::FailedPrecondition, v.to_string()))
                    }
                    None => Ok(None),
                };
                let fault = plugin.faults.take(method);
                // `answer-empty` does the work as asked and empties only
                // the answer's bytes, here rather than in the code compiled
                // once per RPC.
                let empty = fault == Some(Action::AnswerEmpty);
                let fault = fault.filter(|_| !empty);
                match admitted {
                    Err(refusal) => reply.refuse(method, &fields, refusal),
                    Ok(in_flight) if !plugin.serves(call.service()) => {
                        drop(in_flight);
                        let refusal = status(
                            Code::Unimplemented,
                            format!(
                                "{method} is not served: this process of the plugin runs in {} mode",
                                plugin.config.mode
                            ),
                        );
                        reply.refuse(method, &fields, refusal);
                    }
                    Ok(in_flight) => {
                        if fault == Some(Action::Hang) {
                            // A call hung by an injected fault stands for
                            // one the plugin lost: the CO may die waiting
                            // and its successor send it again, which is no
                            // second call in flight.
                            drop(in_flight);
                            loop {
                                thread::park();
                            }
                        }
                        let mut in_flight = Some(in_flight);
                        let mut ended = |ok: bool| {
                            if let (true, Some(mode)) = (ok, &plugin.strict) {
                                mode.completed(&call);
                            }
                            // The call ends before its answer leaves: the
                            // CO may send the next one as soon as it has it.
                            drop(in_flight.take());
                        };
                        reply.run(&plugin, method, &fields, fault, empty, &mut ended);
                    }
                }
            });
        if let Err(err) = spawned {
            log::error!("cannot start a thread for {method}: {err}");
        }
    }
}

/// The part of a call that depends on its RPC's types: its work and the
/// sink of its answer.
trait Reply: Send {
    /// Runs the work with the fault to apply, tells `ended` whether it
    /// succeeded before the answer is sent, then sends it (`empty`: an
    /// empty message in its place, when it succeeded).
    fn run(
        self: Box<Self>,
        plugin: &Plugin,
        method: &str,
        fields: &str,
        fault: Option<Action>,
        empty: bool,
        ended: &mut dyn FnMut(bool),
    );

    /// Answers with `refusal`, without running the work.
    fn refuse(self: Box<Self>, method: &str, fields: &str, refusal: RpcStatus);
}

struct Typed<F> {
    sink: Sink,
    work: F,
}

impl<Resp, F> Reply for Typed<F>
where
    Resp: protobuf::Message,
    F: FnOnce(&Plugin, Option<Action>) -> RpcResult<Resp> + Send + 'static,
{
    // Only the work's call and its answer's type are compiled per RPC:
    // the fault, the encoding and the sending are not.
    fn run(
        self: Box<Self>,
        plugin: &Plugin,
        method: &str,
        fields: &str,
        fault: Option<Action>,
        empty: bool,
        ended: &mut dyn FnMut(bool),
    ) {
        let result = match before_work(method, fault) {
            Start::Work(fault) => {
                (self.work)(plugin, fault).map(|resp| Box::new(resp) as Box<dyn Wire>)
            }
            Start::Default => Ok(Box::new(Resp::default()) as Box<dyn Wire>),
            Start::Refuse(refusal) => Err(refusal),
        };
        ended(result.is_ok());
        let encoded = result.and_then(|resp| {
            encode(&*resp).map_err(|err| {
                status(
                    Code::Internal,
                    format!("{method}: the answer does not encode: {err}"),
                )
            })
        });
        answer(self.sink, method, fields, encoded, empty);
    }

    fn refuse(self: Box<Self>, method: &str, fields: &str, refusal: RpcStatus) {
        answer(self.sink, method, fields, Err(refusal), false);
    }
}

/// Logs a call's result and sends it, waiting until it is sent: dropping
/// the last reference to a call whose final batch is still in flight
/// makes gRPC core cancel it, and the client would see CANCELLED.
fn answer(sink: Sink, method: &str, fields: &str, result: RpcResult<Vec<u8>>, empty: bool) {
    // An empty message is no bytes.
    let result = result.map(|bytes| if empty { Vec::new() } else { bytes });
    match &result {
        Ok(_) => log::debug!("{method} {fields}: OK"),
        Err(s) => log::debug!("{method} {fields}: {:?} {}", s.code(), s.message()),
    }
    let sent = match result {
        Ok(resp) => block_on(sink.success(resp)),
        Err(s) => block_on(sink.fail(s)),
    };
    if let Err(err) = sent {
        log::debug!("{method}: the answer was not delivered: {err}");
    }
}

/// What a call does after its injected fault, if any, applied.
enum Start {
    /// Runs the work, which is given the fault it applies itself.
    Work(Option<Action>),
    /// Answers the empty message without the work.
    Default,
    /// Answers this error without the work.
    Refuse(RpcStatus),
}

/// Applies `method`'s injected `fault`, as far as it comes before the
/// work.
fn before_work(method: &str, fault: Option<Action>) -> Start {
    match fault {
        Some(Action::Fail(code, message)) => {
            let message = if message.is_empty() {
                format!("injected {code}")
            } else {
                message
            };
            Start::Refuse(status(code, message))
        }
        Some(Action::Sleep(delay)) => {
            thread::sleep(delay);
            Start::Work(None)
        }
        Some(Action::Hang) => loop {
            thread::park();
        },
        Some(Action::Exit) => {
            log::warn!("exiting on an injected fault in {method}");
            std::process::exit(3)
        }
        // The node's release calls forget their record too (see
        // `node.rs`); any other call just answers.
        Some(Action::Skip) if !RELEASES.contains(&method) => Start::Default,
        other => Start::Work(other),
    }
}

/// The publish context ControllerPublishVolume answers for `node`.
pub(crate) fn publish_context(node: &str) -> StringMap {
    [(PUBLISH_CONTEXT_KEY.to_string(), node.to_string())].into()
}

impl Service {
    pub(super) fn get_plugin_info(
        &self,
        ctx: &RpcContext,
        req: pb::GetPluginInfoRequest,
        sink: Sink,
    ) {
        let received = Received::new(Call::GetPluginInfo, &req, String::new());
        self.serve(ctx, received, sink, |_, _| {
            let mut resp = pb::GetPluginInfoResponse::new();
            resp.name = PLUGIN_NAME.to_string();
            resp.vendor_version = env!("CARGO_PKG_VERSION").to_string();
            Ok(resp)
        });
    }

    pub(super) fn get_plugin_capabilities(
        &self,
        ctx: &RpcContext,
        req: pb::GetPluginCapabilitiesRequest,
        sink: Sink,
    ) {
        let received = Received::new(Call::GetPluginCapabilities, &req, String::new());
        self.serve(ctx, received, sink, |plugin, _| {
            let mut resp = pb::GetPluginCapabilitiesResponse::new();
            // A node process does not serve the controller service, and
            // says so; the others are the whole plugin's.
            let controller = plugin
                .serves(CsiService::Controller)
                .then_some(PluginCapability::ControllerService);
            resp.capabilities = controller
                .into_iter()
                .chain([
                    PluginCapability::VolumeAccessibilityConstraints,
                    PluginCapability::OnlineExpansion,
                ])
                .filter(|c| !plugin.config.without.iter().any(|w| *w == c.to_string()))
                .map(convert::plugin_capability_to_proto)
                .collect();
            Ok(resp)
        });
    }

    pub(super) fn probe(&self, ctx: &RpcContext, req: pb::ProbeRequest, sink: Sink) {
        let received = Received::new(Call::Probe, &req, String::new());
        self.serve(ctx, received, sink, |_, fault| {
            let mut resp = pb::ProbeResponse::new();
            resp.ready =
                protobuf::MessageField::some(protobuf::well_known_types::wrappers::BoolValue {
                    value: fault != Some(Action::NotReady),
                    ..Default::default()
                });
            Ok(resp)
        });
    }
}

/// `key=value` fields for the call trace; empty values are left out.
pub(crate) fn trace_fields(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}
