//! A plugin's answers are input too: one larger than the client reads is
//! refused by gRPC before it is decoded, and the call fails with an error
//! like any other; the agent goes on. (CSI's messages nest no message in
//! itself, so no answer can be deep: size is the bound that matters.)

use std::sync::Arc;

use grpcio::{RpcContext, UnarySink};

use super::client::{Client, MAX_ANSWER};
use super::endpoint::Endpoint;
use super::proto::{csi as pb, csi_grpc};
use crate::grpc::testing::serve_unix;

/// The size of the name a fake plugin answers GetPluginInfo with.
#[derive(Clone)]
struct Answering(Arc<usize>);

impl csi_grpc::Identity for Answering {
    fn get_plugin_info(
        &mut self,
        ctx: RpcContext,
        _: pb::GetPluginInfoRequest,
        sink: UnarySink<pb::GetPluginInfoResponse>,
    ) {
        let mut resp = pb::GetPluginInfoResponse::new();
        resp.name = "x".repeat(*self.0);
        resp.vendor_version = "1".into();
        ctx.spawn(async move {
            let _ = sink.success(resp).await;
        });
    }

    fn get_plugin_capabilities(
        &mut self,
        ctx: RpcContext,
        _: pb::GetPluginCapabilitiesRequest,
        sink: UnarySink<pb::GetPluginCapabilitiesResponse>,
    ) {
        ctx.spawn(async move {
            let _ = sink.success(pb::GetPluginCapabilitiesResponse::new()).await;
        });
    }

    fn probe(&mut self, ctx: RpcContext, _: pb::ProbeRequest, sink: UnarySink<pb::ProbeResponse>) {
        ctx.spawn(async move {
            let _ = sink.success(pb::ProbeResponse::new()).await;
        });
    }
}

/// GetPluginInfo of a fake plugin whose name is `len` bytes long.
fn plugin_info_with_name_of(len: usize) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!(
        "csi-agent-answer-bounds-{}-{len}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("plugin.sock");
    let server = serve_unix(&socket, csi_grpc::create_identity(Answering(Arc::new(len))));
    let client = Client::new(&Endpoint::from_path(&socket).unwrap());
    let result = client
        .plugin_info()
        .map(|info| info.name)
        .map_err(|err| crate::error_chain(&err));
    drop(client);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
    result
}

#[test]
fn an_answer_past_the_client_s_bound_fails_the_call_and_a_smaller_one_is_read() {
    // gRPC ends the call on the client's side (CANCELLED or
    // RESOURCE_EXHAUSTED, by version) without handing over the message.
    let err = plugin_info_with_name_of(MAX_ANSWER + 1).unwrap_err();
    assert!(err.starts_with("GetPluginInfo failed: "), "{err}");
    let name = plugin_info_with_name_of(MAX_ANSWER - 1024).unwrap();
    assert_eq!(name.len(), MAX_ANSWER - 1024);
}
