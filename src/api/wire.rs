//! The control API's protobuf messages, mapped to and from the agent's
//! own request and answer types, and error kinds to gRPC codes: the one
//! place that knows both.

use std::collections::HashMap;
use std::time::SystemTime;

use grpcio::{RpcStatus, RpcStatusCode};
use protobuf::MessageField;

use crate::call::{CallError, ErrorKind};
use crate::cluster::node::NodeStatus;
use crate::csi::Secrets;
use crate::events::{Page, Query, Topic};
use crate::plugin::fingerprint::unix_ms;
use crate::plugin::{Fingerprint, Health, PluginRecord, StatusReport};
use crate::proto::agent as pb;
use crate::volume::calls as volume;

fn ms(time: Option<SystemTime>) -> i64 {
    time.map_or(0, unix_ms)
}

fn secrets(map: HashMap<String, String>) -> Secrets {
    map.into_iter().collect()
}

// ---- errors ----

/// The gRPC code an error kind is answered with.
fn grpc_code(kind: ErrorKind) -> RpcStatusCode {
    match kind {
        ErrorKind::NotFound => RpcStatusCode::NOT_FOUND,
        ErrorKind::InvalidArgument => RpcStatusCode::INVALID_ARGUMENT,
        ErrorKind::FailedPrecondition => RpcStatusCode::FAILED_PRECONDITION,
        ErrorKind::Unavailable => RpcStatusCode::UNAVAILABLE,
        ErrorKind::DeadlineExceeded => RpcStatusCode::DEADLINE_EXCEEDED,
        ErrorKind::Aborted => RpcStatusCode::ABORTED,
        ErrorKind::OutOfRange => RpcStatusCode::OUT_OF_RANGE,
        ErrorKind::Internal => RpcStatusCode::INTERNAL,
    }
}

/// An error as the status the control API answers it with.
pub fn status(err: &CallError) -> RpcStatus {
    RpcStatus::with_message(grpc_code(err.kind), err.message.clone())
}

/// The name of the gRPC code [`status`] answers `kind` with, for the
/// metrics' `code` label.
pub fn code_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NotFound => "NOT_FOUND",
        ErrorKind::InvalidArgument => "INVALID_ARGUMENT",
        ErrorKind::FailedPrecondition => "FAILED_PRECONDITION",
        ErrorKind::Unavailable => "UNAVAILABLE",
        ErrorKind::DeadlineExceeded => "DEADLINE_EXCEEDED",
        ErrorKind::Aborted => "ABORTED",
        ErrorKind::OutOfRange => "OUT_OF_RANGE",
        ErrorKind::Internal => "INTERNAL",
    }
}

// ---- requests ----

pub fn spec_request(req: pb::VolumeSpecRequest) -> volume::SpecRequest {
    volume::SpecRequest {
        file: req.file,
        hcl: req.hcl,
        settings: Default::default(),
    }
}

pub fn deregister_request(req: pb::VolumeDeregisterRequest) -> volume::DeregisterRequest {
    volume::DeregisterRequest {
        id: req.id,
        force: req.force,
    }
}

pub fn status_request(req: pb::VolumeStatusRequest) -> volume::StatusRequest {
    volume::StatusRequest {
        id: req.id,
        stats: req.stats,
        plugin_id: req.plugin_id,
    }
}

pub fn claim_request(req: pb::VolumeClaimRequest) -> volume::ClaimRequest {
    volume::ClaimRequest {
        volume_id: req.volume_id,
        alloc_id: req.alloc_id,
        read_only: req.read_only,
        target: req.target,
        propagation: req.propagation,
    }
}

pub fn release_request(req: pb::VolumeReleaseRequest) -> volume::ReleaseRequest {
    volume::ReleaseRequest {
        volume_id: req.volume_id,
        alloc_id: req.alloc_id,
    }
}

pub fn snapshot_create_request(req: pb::SnapshotCreateRequest) -> volume::SnapshotCreateRequest {
    volume::SnapshotCreateRequest {
        volume_id: req.volume_id,
        name: req.name,
        parameters: req.parameters.into_iter().collect(),
        secrets: secrets(req.secrets),
    }
}

pub fn snapshot_delete_request(req: pb::SnapshotDeleteRequest) -> volume::SnapshotDeleteRequest {
    volume::SnapshotDeleteRequest {
        plugin_id: req.plugin_id,
        snapshot_id: req.snapshot_id,
        secrets: secrets(req.secrets),
    }
}

pub fn snapshot_list_request(req: pb::SnapshotListRequest) -> volume::SnapshotListRequest {
    volume::SnapshotListRequest {
        plugin_id: req.plugin_id,
        secrets: secrets(req.secrets),
    }
}

// ---- plugins ----

fn plugin_capacity(c: crate::plugin::CapacityStatus) -> pb::PluginCapacity {
    let mut out = pb::PluginCapacity {
        error: c.error,
        ..Default::default()
    };
    if let Some((capacity, checked)) = c.reading {
        out.known = true;
        out.available_bytes = capacity.available_capacity;
        out.maximum_volume_bytes = capacity.maximum_volume_size.unwrap_or(0);
        out.minimum_volume_bytes = capacity.minimum_volume_size.unwrap_or(0);
        out.checked_unix_ms = unix_ms(checked);
    }
    out
}

pub fn plugin_status(report: StatusReport) -> pb::PluginStatusResponse {
    pb::PluginStatusResponse {
        plugins: report
            .plugins
            .into_iter()
            .map(|p| pb::PluginStatus {
                id: p.id,
                provider: p.provider,
                version: p.version,
                controllers_healthy: p.controllers_healthy,
                controllers_expected: p.controllers_expected,
                nodes_healthy: p.nodes_healthy,
                nodes_expected: p.nodes_expected,
                health: health(p.health).into(),
                instances: p.instances.iter().map(instance).collect(),
                volumes: p.volumes,
                capacity: p.capacity.map(plugin_capacity).into(),
                ..Default::default()
            })
            .collect(),
        cluster_note: report.cluster_note,
        ..Default::default()
    }
}

fn health(health: Health) -> pb::Health {
    match health {
        Health::Pending => pb::Health::PENDING,
        Health::Healthy => pb::Health::HEALTHY,
        Health::Unhealthy => pb::Health::UNHEALTHY,
    }
}

fn instance(r: &PluginRecord) -> pb::Plugin {
    pb::Plugin {
        id: r.spec.id.clone(),
        socket: r.spec.endpoint.path().to_string_lossy().into_owned(),
        type_: r.spec.plugin_type.as_str().to_string(),
        source: r.spec.source.as_string(),
        health: health(r.health).into(),
        health_reason: r.reason.clone(),
        fingerprint: r.fingerprint.as_ref().map(fingerprint).into(),
        last_heartbeat_unix_ms: ms(r.last_heartbeat),
        events: r
            .events
            .iter()
            .map(|e| pb::HealthEvent {
                unix_ms: unix_ms(e.time),
                old_health: health(e.old).into(),
                new_health: health(e.new).into(),
                reason: e.reason.clone(),
                ..Default::default()
            })
            .collect(),
        registered_unix_ms: unix_ms(r.registered),
        stage_publish_base_dir: r
            .spec
            .stage_publish_base_dir
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        ..Default::default()
    }
}

fn fingerprint(f: &Fingerprint) -> pb::Fingerprint {
    let node = f.node.clone().unwrap_or_default();
    pb::Fingerprint {
        provider: f.info.name.clone(),
        version: f.info.vendor_version.clone(),
        manifest: f.info.manifest.clone().into_iter().collect(),
        plugin_capabilities: f
            .plugin_capabilities
            .iter()
            .map(|c| c.to_string())
            .collect(),
        controller_capabilities: f
            .controller_capabilities
            .iter()
            .map(|c| c.to_string())
            .collect(),
        node_capabilities: f.node_capabilities.iter().map(|c| c.to_string()).collect(),
        node_id: node.node_id,
        max_volumes: node.max_volumes_per_node,
        topology: node
            .accessible_topology
            .unwrap_or_default()
            .into_iter()
            .collect(),
        taken_unix_ms: unix_ms(f.taken),
        ..Default::default()
    }
}

// ---- volumes ----

pub fn volume_status(status: volume::Status) -> pb::VolumeStatusResponse {
    pb::VolumeStatusResponse {
        volumes: status.volumes.into_iter().map(volume_of).collect(),
        external: status
            .external
            .into_iter()
            .map(|e| pb::ExternalVolume {
                external_id: e.external_id,
                capacity_bytes: e.capacity_bytes,
                published_node_ids: e.published_node_ids,
                abnormal: e.abnormal,
                condition_message: e.condition_message,
                ..Default::default()
            })
            .collect(),
        external_error: status.external_error,
        ..Default::default()
    }
}

fn volume_of(v: volume::VolumeStatus) -> pb::VolumeStatus {
    pb::VolumeStatus {
        id: v.id,
        name: v.name,
        plugin_id: v.plugin_id,
        provider: v.provider,
        external_id: v.external_id,
        capabilities: v.capabilities,
        fs_type: v.fs_type,
        mount_flags: v.mount_flags,
        secret_keys: v.secret_keys,
        parameters: v.parameters.into_iter().collect(),
        context: v.context.into_iter().collect(),
        schedulable: v.schedulable,
        claims: v.claims.into_iter().map(claim).collect(),
        past_claims: v.past_claims.into_iter().map(claim).collect(),
        stats: v.stats.map(stats).into(),
        capacity_bytes: v.capacity_bytes,
        created: v.created,
        stagings: v
            .stagings
            .into_iter()
            .map(|s| pb::Staging {
                path: s.path,
                state: s.state,
                capability: s.capability,
                ..Default::default()
            })
            .collect(),
        creating: v.creating,
        create_error: v.create_error,
        mounts_read_only: v.mounts_read_only,
        mount_group: v.mount_group,
        topologies: v
            .topologies
            .into_iter()
            .map(|t| pb::Topology {
                segments: t.into_iter().collect(),
                ..Default::default()
            })
            .collect(),
        health: v
            .health
            .map(|h| pb::VolumeHealth {
                abnormal: h.abnormal,
                message: h.message,
                since_unix_ms: unix_ms(h.since),
                checked_unix_ms: unix_ms(h.checked),
                ..Default::default()
            })
            .into(),
        ..Default::default()
    }
}

fn claim(c: volume::ClaimStatus) -> pb::Claim {
    pb::Claim {
        alloc_id: c.alloc_id,
        mode: c.mode,
        state: c.state,
        target: c.target,
        propagation: c.propagation,
        publish_path: c.publish_path,
        usage: c.usage,
        last_error: c.last_error,
        next_retry_unix_ms: ms(c.next_retry),
        attempts: c.attempts,
        failure: c.failure,
        device: c.device,
        node: c.node,
        ..Default::default()
    }
}

fn stats(s: volume::VolumeStats) -> pb::VolumeStats {
    pb::VolumeStats {
        available: s.available,
        error: s.error,
        bytes_total: s.bytes_total,
        bytes_used: s.bytes_used,
        bytes_available: s.bytes_available,
        inodes_total: s.inodes_total,
        inodes_used: s.inodes_used,
        inodes_available: s.inodes_available,
        abnormal: s.abnormal,
        condition_message: s.condition_message,
        ..Default::default()
    }
}

pub fn claimed(c: volume::Claimed) -> pb::VolumeClaimResponse {
    pb::VolumeClaimResponse {
        publish_path: c.publish_path,
        target: c.target,
        ..Default::default()
    }
}

pub fn released(r: volume::Released) -> pb::VolumeReleaseResponse {
    pb::VolumeReleaseResponse {
        released: r.released,
        message: r.message,
        ..Default::default()
    }
}

pub fn snapshot(s: volume::Snapshot) -> pb::Snapshot {
    pb::Snapshot {
        id: s.id,
        source_volume_id: s.source_volume_id,
        volume_id: s.volume_id,
        size_bytes: s.size_bytes,
        created_unix_ms: ms(s.created),
        ready: s.ready,
        ..Default::default()
    }
}

pub fn snapshot_created(s: volume::Snapshot) -> pb::SnapshotCreateResponse {
    pb::SnapshotCreateResponse {
        snapshot: MessageField::some(snapshot(s)),
        ..Default::default()
    }
}

pub fn snapshots(all: Vec<volume::Snapshot>) -> pb::SnapshotListResponse {
    pb::SnapshotListResponse {
        snapshots: all.into_iter().map(snapshot).collect(),
        ..Default::default()
    }
}

// ---- the cluster ----

pub fn node_status(status: NodeStatus) -> pb::NodeStatusResponse {
    let this_node_plugins = status.plugins.into_iter();
    pb::NodeStatusResponse {
        this_node: status.this_node,
        connection: status.connection,
        reason: status.reason,
        resources: protobuf::MessageField::some(pb::NodeResources {
            cpu: status.resources.cpu,
            memory: status.resources.memory,
            cores: status.resources.cores,
            reserved_cpu: status.resources.reserved_cpu,
            reserved_memory: status.resources.reserved_memory,
            allocated_cpu: status.resources.allocated_cpu,
            allocated_memory: status.resources.allocated_memory,
            ..Default::default()
        }),
        nodes: status
            .nodes
            .into_iter()
            .map(|n| pb::ClusterNode {
                name: n.name,
                registered_unix_ms: unix_ms(n.registered),
                plugins: n.plugins.into_iter().map(cluster_node_plugin).collect(),
                ..Default::default()
            })
            .collect(),
        plugins: this_node_plugins.map(cluster_node_plugin).collect(),
        ..Default::default()
    }
}

fn cluster_node_plugin(p: crate::cluster::node::ClusterNodePlugin) -> pb::ClusterNodePlugin {
    pb::ClusterNodePlugin {
        id: p.id,
        node_id: p.node_id,
        healthy: p.healthy,
        topology: p.topology.into_iter().collect(),
        ..Default::default()
    }
}

// ---- events ----

pub fn events_request(req: pb::EventsRequest) -> Result<crate::api::EventsRequest, CallError> {
    let topics = req
        .topics
        .iter()
        .map(|t| t.parse::<Topic>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| CallError::new(ErrorKind::InvalidArgument, format!("topics: {err}")))?;
    let limit = match req.limit as usize {
        0 => crate::api::EVENTS_MAX_PAGE,
        n => n.min(crate::api::EVENTS_MAX_PAGE),
    };
    Ok(crate::api::EventsRequest {
        query: Query {
            since: req.since,
            topics,
            limit,
        },
        wait: std::time::Duration::from_millis(req.wait_ms.into()).min(crate::api::EVENTS_MAX_WAIT),
    })
}

pub fn events(page: Page) -> pb::EventsResponse {
    pb::EventsResponse {
        events: page
            .events
            .into_iter()
            .map(|e| pb::Event {
                index: e.index,
                unix_ms: unix_ms(e.time),
                topic: e.topic.as_str().to_string(),
                type_: e.kind,
                key: e.key,
                message: e.message,
                ..Default::default()
            })
            .collect(),
        last_index: page.last_index,
        ..Default::default()
    }
}
