//! What every CSI call shares, whichever service it goes to: an RPC sent
//! whose answer is taken later ([`Sent`]), the stub that makes the calls
//! over plain bytes (`crate::grpc`), and a grpcio failure mapped to a
//! classified [`Error`].

use std::sync::Arc;
use std::time::Instant;

use grpcio::{CallOption, Channel, ClientUnaryReceiver};
use protobuf::Message;

use super::convert::ConvertError;
use super::error::{Class, Code, Error, Rpc};
use crate::grpc::{block_on, bytes_method, decode, encode, unary_bytes};

/// An RPC sent whose answer is not taken yet: whatever its caller does
/// before [`Sent::wait`] runs while the plugin works on the call.
#[must_use = "an RPC's answer is waited for"]
pub struct Sent<T> {
    answer: Box<dyn FnOnce() -> Result<T, Error>>,
}

impl<T: 'static> Sent<T> {
    /// Waits for the answer (within the client's deadline).
    pub fn wait(self) -> Result<T, Error> {
        (self.answer)()
    }

    /// An RPC made already (through a carrier).
    pub(super) fn known(result: Result<T, Error>) -> Sent<T> {
        Sent {
            answer: Box::new(move || result),
        }
    }
}

/// The RPC `rpc` to plugin `driver`, started as `started`, its answer
/// decoded and converted by `convert`.
pub(super) fn send<Resp: Message, T: 'static>(
    rpc: Rpc,
    driver: Arc<str>,
    started: grpcio::Result<ClientUnaryReceiver<Vec<u8>>>,
    convert: impl FnOnce(Resp) -> T + 'static,
) -> Sent<T> {
    let at = Instant::now();
    Sent {
        answer: Box::new(move || {
            let decoded = started.and_then(block_on).and_then(|bytes| decode(&bytes));
            let result = answer(rpc, decoded);
            observe(&driver, rpc, at, &result);
            result.map(convert)
        }),
    }
}

/// A plugin's services over one channel. Every RPC is made as a method
/// over plain bytes ([`bytes_method`]), encoded and decoded here, so that
/// grpcio's client machinery is compiled once rather than for each RPC's
/// pair of types, as the generated stubs have it.
#[derive(Clone)]
pub(super) struct Stub(grpcio::Client);

impl Stub {
    pub(super) fn new(channel: Channel) -> Stub {
        Stub(grpcio::Client::new(channel))
    }

    /// `rpc` with `req`, waited for.
    pub(super) fn call<Req: Message, Resp: Message>(
        &self,
        rpc: Rpc,
        req: &Req,
        opt: CallOption,
    ) -> grpcio::Result<Resp> {
        unary_bytes(&self.0, rpc.method_name(), req, opt)
    }

    /// `rpc` with its request encoded as on the wire: the encoded answer.
    pub(super) fn call_encoded(
        &self,
        rpc: Rpc,
        request: &Vec<u8>,
        opt: CallOption,
    ) -> grpcio::Result<Vec<u8>> {
        self.0
            .unary_call(&bytes_method(rpc.method_name()), request, opt)
    }

    /// `rpc` with `req`, sent: [`send`] takes its answer.
    pub(super) fn start<Req: Message>(
        &self,
        rpc: Rpc,
        req: &Req,
        opt: CallOption,
    ) -> grpcio::Result<ClientUnaryReceiver<Vec<u8>>> {
        self.0
            .unary_call_async(&bytes_method(rpc.method_name()), &encode(req)?, opt)
    }
}

/// The RPC `rpc` to plugin `driver`, made by `make`: its answer mapped to
/// ours, and its duration and code counted in the metrics.
pub(super) fn call<T>(
    rpc: Rpc,
    driver: &str,
    make: impl FnOnce() -> grpcio::Result<T>,
) -> Result<T, Error> {
    let at = Instant::now();
    let result = answer(rpc, make());
    observe(driver, rpc, at, &result);
    result
}

/// Counts an RPC in `csi_agent_csi_operations_seconds`, by kubelet's
/// labels: the plugin, the full method name and the gRPC code.
fn observe<T>(driver: &str, rpc: Rpc, at: Instant, result: &Result<T, Error>) {
    let code = match result {
        Ok(_) => "OK",
        Err(err) => err.code.name(),
    };
    crate::metrics::CSI_OPERATIONS.observe(
        &[driver, rpc.method_name(), code],
        at.elapsed().as_secs_f64(),
    );
}

/// Maps a grpcio result to ours, logging the call (never its payload).
fn answer<T>(rpc: Rpc, result: grpcio::Result<T>) -> Result<T, Error> {
    match result {
        Ok(resp) => {
            log::trace!("{rpc}: ok");
            Ok(resp)
        }
        Err(err) => {
            let err = from_grpc(rpc, err);
            log::debug!("{err}");
            Err(err)
        }
    }
}

fn from_grpc(rpc: Rpc, err: grpcio::Error) -> Error {
    match err {
        grpcio::Error::RpcFailure(status) => Error::new(
            rpc,
            Code::from_number(i32::from(status.code())),
            status.message().to_string(),
        ),
        // The call never produced a status: the transport failed, so the
        // outcome is unknown.
        other => Error::new(rpc, Code::Unavailable, other.to_string()),
    }
}

/// A reply that breaks the spec: the plugin is wrong. It answered OK,
/// though, so it did what it was asked, and what that was the reply does
/// not say: as after a call that was not answered, the outcome is
/// uncertain (a CreateVolume's record stays, and the same request, sent
/// again, tells).
pub(super) fn invalid(rpc: Rpc, err: ConvertError) -> Error {
    let mut error = Error::new(
        rpc,
        Code::Internal,
        format!("plugin sent an invalid reply: {err}"),
    );
    error.class = Class::Uncertain;
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::testing::rpcs_of;

    /// The byte methods are named by `Rpc::method_name`: each must be an
    /// rpc of `csi.proto`'s services, or the plugin answers UNIMPLEMENTED.
    #[test]
    fn every_rpc_is_named_as_csi_proto_declares_it() {
        let declared = rpcs_of(include_str!("../../proto/csi.proto"));
        for rpc in Rpc::ALL {
            let name = rpc.method_name();
            let (service, method) = name.rsplit_once('/').unwrap();
            assert!(
                ["/csi.v1.Identity", "/csi.v1.Controller", "/csi.v1.Node"].contains(&service),
                "{name}"
            );
            assert_eq!(method, rpc.name(), "{name}");
            assert!(declared.contains(&method), "{name} is not in csi.proto");
        }
    }
}
