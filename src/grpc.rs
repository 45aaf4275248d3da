//! gRPC with no protobuf type in its machinery: grpcio compiles its
//! client and server code once per message type, so every service of the
//! agent (the CSI calls, the control API, the hostpath plugin) sends and
//! serves plain bytes and does the protobuf work itself (`crate::message`).
//! Here: the process-wide environment, methods over bytes
//! ([`bytes_method`]), a unary call over them ([`unary_bytes`]), and
//! blocking on an answer without an async runtime ([`block_on`]). Nothing
//! of it knows CSI.

use std::future::Future;
use std::io::Read;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;

use grpcio::{
    CallOption, EnvBuilder, Environment, GrpcSlice, Marshaller, MessageReader, Method, MethodType,
};
use protobuf::Message;

/// The process-wide gRPC environment: two completion-queue threads serve
/// every channel the process opens.
pub fn grpc_environment() -> Arc<Environment> {
    static ENV: OnceLock<Arc<Environment>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(EnvBuilder::new().cq_count(2).name_prefix("grpc-cq").build()))
        .clone()
}

/// Plain bytes in and out, for a server whose dispatcher does the
/// protobuf work: grpcio compiles its server machinery once per handler
/// closure type, and byte methods all share one.
pub const BYTES: Marshaller<Vec<u8>> = Marshaller {
    ser: ser_bytes,
    de: de_bytes,
};

fn ser_bytes(bytes: &Vec<u8>, buf: &mut GrpcSlice) -> grpcio::Result<()> {
    *buf = GrpcSlice::from(bytes.as_slice());
    Ok(())
}

fn de_bytes(mut reader: MessageReader) -> grpcio::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(reader.len());
    reader
        .read_to_end(&mut bytes)
        .map_err(|err| grpcio::Error::Codec(err.into()))?;
    Ok(bytes)
}

/// The unary method `name` (a full gRPC name) over plain bytes.
pub fn bytes_method(name: &'static str) -> Method<Vec<u8>, Vec<u8>> {
    Method {
        ty: MethodType::Unary,
        name,
        req_mar: BYTES,
        resp_mar: BYTES,
    }
}

/// Runs a future to completion on this thread: enough for the one future a
/// unary answer (of a grpcio server) returns, without an async runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}

/// The unary method `name` (a full gRPC name) with `req`, made over plain
/// bytes on `client` and waited for: the CSI stub's calls and the CLI's
/// calls to the agent both go through it.
pub fn unary_bytes<Req: Message, Resp: Message>(
    client: &grpcio::Client,
    name: &'static str,
    req: &Req,
    opt: CallOption,
) -> grpcio::Result<Resp> {
    decode(&client.unary_call(&bytes_method(name), &encode(req)?, opt)?)
}

/// `req`'s bytes; a failure is grpcio's codec error, as a typed stub's
/// would be.
pub fn encode<Req: Message>(req: &Req) -> grpcio::Result<Vec<u8>> {
    crate::message::encode(req).map_err(|err| grpcio::Error::Codec(Box::new(err)))
}

/// An answer's bytes as the message they encode; a failure is grpcio's
/// codec error, as a typed stub's would be.
pub fn decode<Resp: Message>(bytes: &[u8]) -> grpcio::Result<Resp> {
    crate::message::decode::<Resp>(bytes).map_err(|err| grpcio::Error::Codec(Box::new(err)))
}

/// For tests of gRPC servers and clients.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;

    use grpcio::{ChannelBuilder, Server, ServerBuilder, ServerCredentials};

    use super::grpc_environment;

    /// Serves `service` on the unix socket `socket`, sending answers of
    /// any size (a client's bound is what is tested).
    pub(crate) fn serve_unix(socket: &Path, service: grpcio::Service) -> Server {
        let args = ChannelBuilder::new(grpc_environment())
            .max_send_message_len(-1)
            .build_args();
        let mut server = ServerBuilder::new(grpc_environment())
            .channel_args(args)
            .register_service(service)
            .build()
            .unwrap();
        server
            .add_listening_port(
                format!("unix:{}", socket.display()),
                ServerCredentials::insecure(),
            )
            .unwrap();
        server.start();
        server
    }

    /// The names of the `rpc`s a `.proto` file declares, in order.
    pub(crate) fn rpcs_of(proto: &str) -> Vec<&str> {
        let mut declared: Vec<&str> = proto
            .lines()
            .filter_map(|line| line.trim().strip_prefix("rpc "))
            .map(|rest| rest.split('(').next().unwrap_or(rest).trim())
            .collect();
        order::sort(&mut declared);
        declared
    }
}
