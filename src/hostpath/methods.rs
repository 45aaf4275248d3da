//! How the plugin's 26 RPCs are registered with grpcio.
//!
//! grpcio compiles its server machinery (`Handler<F>::handle`, the
//! request's decoding, `UnarySink<T>::complete`) once per handler closure
//! type, and the generated `create_identity`, `create_controller` and
//! `create_node` give each RPC a closure of its own. Here every RPC is a
//! method over plain bytes ([`bytes_method`], named by the generated
//! `METHOD_*` constants so that the names cannot drift), registered with
//! one closure type, and its entry in [`RPCS`] decodes the request with
//! protobuf and hands it to the RPC's method on [`Service`]; the answer is
//! encoded where it is sent (`service.rs`).
//!
//! A request that does not decode is answered INVALID_ARGUMENT naming the
//! RPC, and is neither traced nor judged by strict mode: it never became a
//! call.

use futures_util::FutureExt as _;
use grpcio::{RpcContext, ServiceBuilder};
use protobuf::Message;

use super::service::{Service, Sink};
use super::status;
use crate::csi::error::Code;
use crate::csi::proto::csi_grpc as g;
use crate::grpc::bytes_method;

/// An RPC's entry: decodes its request and serves it.
type Entry = fn(&Service, &RpcContext, &[u8], Sink);

/// An entry of [`RPCS`]: the RPC's generated method constant and its
/// method on [`Service`].
macro_rules! rpc {
    ($method:ident, $serve:ident) => {
        (g::$method.name, |service, ctx, bytes, sink| {
            decoded(service, ctx, bytes, sink, Service::$serve)
        })
    };
}

/// Every RPC of the three services with its full gRPC name.
const RPCS: [(&str, Entry); 26] = [
    rpc!(METHOD_IDENTITY_GET_PLUGIN_INFO, get_plugin_info),
    rpc!(
        METHOD_IDENTITY_GET_PLUGIN_CAPABILITIES,
        get_plugin_capabilities
    ),
    rpc!(METHOD_IDENTITY_PROBE, probe),
    rpc!(METHOD_CONTROLLER_CREATE_VOLUME, create_volume),
    rpc!(METHOD_CONTROLLER_DELETE_VOLUME, delete_volume),
    rpc!(
        METHOD_CONTROLLER_CONTROLLER_PUBLISH_VOLUME,
        controller_publish_volume
    ),
    rpc!(
        METHOD_CONTROLLER_CONTROLLER_UNPUBLISH_VOLUME,
        controller_unpublish_volume
    ),
    rpc!(
        METHOD_CONTROLLER_VALIDATE_VOLUME_CAPABILITIES,
        validate_volume_capabilities
    ),
    rpc!(METHOD_CONTROLLER_LIST_VOLUMES, list_volumes),
    rpc!(METHOD_CONTROLLER_GET_CAPACITY, get_capacity),
    rpc!(
        METHOD_CONTROLLER_CONTROLLER_GET_CAPABILITIES,
        controller_get_capabilities
    ),
    rpc!(METHOD_CONTROLLER_CREATE_SNAPSHOT, create_snapshot),
    rpc!(METHOD_CONTROLLER_DELETE_SNAPSHOT, delete_snapshot),
    rpc!(METHOD_CONTROLLER_LIST_SNAPSHOTS, list_snapshots),
    rpc!(METHOD_CONTROLLER_GET_SNAPSHOT, get_snapshot),
    rpc!(
        METHOD_CONTROLLER_CONTROLLER_EXPAND_VOLUME,
        controller_expand_volume
    ),
    rpc!(
        METHOD_CONTROLLER_CONTROLLER_GET_VOLUME,
        controller_get_volume
    ),
    rpc!(
        METHOD_CONTROLLER_CONTROLLER_MODIFY_VOLUME,
        controller_modify_volume
    ),
    rpc!(METHOD_NODE_NODE_STAGE_VOLUME, node_stage_volume),
    rpc!(METHOD_NODE_NODE_UNSTAGE_VOLUME, node_unstage_volume),
    rpc!(METHOD_NODE_NODE_PUBLISH_VOLUME, node_publish_volume),
    rpc!(METHOD_NODE_NODE_UNPUBLISH_VOLUME, node_unpublish_volume),
    rpc!(METHOD_NODE_NODE_GET_VOLUME_STATS, node_get_volume_stats),
    rpc!(METHOD_NODE_NODE_EXPAND_VOLUME, node_expand_volume),
    rpc!(METHOD_NODE_NODE_GET_CAPABILITIES, node_get_capabilities),
    rpc!(METHOD_NODE_NODE_GET_INFO, node_get_info),
];

/// The plugin's Identity, Controller and Node services, as one grpcio
/// service of byte methods.
pub(super) fn create(service: Service) -> grpcio::Service {
    let mut builder = ServiceBuilder::new();
    for (name, entry) in RPCS {
        let service = service.clone();
        builder = builder.add_unary_handler(&bytes_method(name), move |ctx, bytes, sink| {
            entry(&service, &ctx, &bytes, sink)
        });
    }
    builder.build()
}

/// Decodes `bytes` as `serve`'s request and serves it; a request that
/// does not decode is refused.
fn decoded<Req: Message>(
    service: &Service,
    ctx: &RpcContext,
    bytes: &[u8],
    sink: Sink,
    serve: fn(&Service, &RpcContext, Req, Sink),
) {
    match crate::message::decode::<Req>(bytes) {
        Ok(req) => serve(service, ctx, req, sink),
        Err(err) => {
            let method = String::from_utf8_lossy(ctx.method()).into_owned();
            let refusal = status(
                Code::InvalidArgument,
                format!("{method}: the request does not decode: {err}"),
            );
            log::debug!("{method}: refused: the request does not decode: {err}");
            // Sent from the grpcio thread: a refusal does no work first.
            ctx.spawn(sink.fail(refusal).map(drop));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::testing::rpcs_of;

    /// An RPC added to `csi.proto` but not here would be answered
    /// UNIMPLEMENTED by grpcio: every `rpc` of the three services is
    /// registered, once.
    #[test]
    fn every_rpc_of_the_csi_services_is_registered_once() {
        let declared = rpcs_of(include_str!("../../proto/csi.proto"));
        let mut registered: Vec<&str> = RPCS
            .iter()
            .map(|(name, _)| name.rsplit('/').next().unwrap_or(name))
            .collect();
        order::sort(&mut registered);
        assert_eq!(registered, declared);
        for (name, _) in RPCS {
            assert!(name.starts_with("/csi.v1."), "{name}");
        }
    }
}
