//! The protobuf messages of `service list` and `service info`, from the
//! registry's own [`Registration`]: `wire.rs`'s part for the service
//! registry, in a file of its own.

use crate::proto::agent as pb;
use crate::services::Registration;

pub fn services(found: Vec<Registration>) -> pb::ServiceListResponse {
    pb::ServiceListResponse {
        services: found.into_iter().map(registration).collect(),
        ..Default::default()
    }
}

fn registration(r: Registration) -> pb::ServiceRegistration {
    pb::ServiceRegistration {
        id: r.id,
        name: r.name,
        namespace: r.namespace,
        node_id: r.node_id,
        datacenter: r.datacenter,
        job_id: r.job_id,
        alloc_id: r.alloc_id,
        task: r.task,
        address: r.address,
        port: u32::from(r.port),
        tags: r.tags,
        meta: r.meta.into_iter().collect(),
        ..Default::default()
    }
}
