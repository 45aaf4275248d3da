//! etcd's answers are input too: one past [`MAX_ANSWER`] is refused by
//! gRPC before it is decoded and the call fails as any other; one just
//! under it is read. (etcd's messages nest no message in itself, so an
//! answer cannot be deep: its size is the bound that matters.)

use grpcio::{ChannelBuilder, RpcContext, ServerBuilder, ServerCredentials, UnarySink};

use super::{Etcd, MAX_ANSWER};
use crate::grpc::grpc_environment;
use crate::proto::etcd as pb;
use crate::proto::etcd_grpc;

/// A member whose every range holds one key with a value of this size.
#[derive(Clone)]
struct Answering(usize);

impl etcd_grpc::Kv for Answering {
    fn range(&mut self, ctx: RpcContext, _: pb::RangeRequest, sink: UnarySink<pb::RangeResponse>) {
        let mut kv = pb::KeyValue::new();
        kv.key = b"k".to_vec();
        kv.value = vec![b'v'; self.0];
        let mut resp = pb::RangeResponse::new();
        resp.kvs.push(kv);
        resp.count = 1;
        ctx.spawn(async move {
            let _ = sink.success(resp).await;
        });
    }
}

/// `get` of a key from a member that answers with a value of `len` bytes:
/// the value's length, or the error.
fn get_value_of(len: usize) -> Result<usize, String> {
    // A server sends as much as it is asked to: the bound is the client's.
    let args = ChannelBuilder::new(grpc_environment())
        .max_send_message_len(-1)
        .build_args();
    let mut server = ServerBuilder::new(grpc_environment())
        .channel_args(args)
        .register_service(etcd_grpc::create_kv(Answering(len)))
        .build()
        .unwrap();
    let port = server
        .add_listening_port("127.0.0.1:0", ServerCredentials::insecure())
        .unwrap();
    server.start();
    let etcd = Etcd::new(&[format!("http://127.0.0.1:{port}")], None).unwrap();
    let result = etcd
        .get(b"k")
        .map(|kv| kv.map_or(0, |kv| kv.value.len()))
        .map_err(|err| crate::error_chain(&err));
    drop(etcd);
    drop(server);
    result
}

#[test]
fn an_answer_past_the_bound_fails_the_call_and_one_under_it_is_read() {
    let err = get_value_of(MAX_ANSWER as usize + 1).unwrap_err();
    assert!(!err.is_empty());
    assert_eq!(
        get_value_of(MAX_ANSWER as usize - 1024),
        Ok(MAX_ANSWER as usize - 1024)
    );
}
