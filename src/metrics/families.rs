//! Every metric family the agent exports. docs/metrics.md has each one's
//! meaning; a family's labels are IDs, names, codes and states only.

use super::Family;

/// Buckets of a CSI RPC's duration, in seconds: kubelet's
/// `csi_operations_seconds` buckets with finer ones below 100 ms, where a
/// local plugin answers.
pub const RPC_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0,
    600.0,
];

/// Buckets of a journal sync or a control API call, in seconds.
pub const FAST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

pub static CSI_OPERATIONS: Family = Family::histogram(
    "csi_agent_csi_operations_seconds",
    "Duration of the CSI RPCs the agent made, by plugin ID, full method name and gRPC status code (kubelet's csi_operations_seconds).",
    &["driver_name", "method_name", "grpc_status_code"],
    RPC_BUCKETS,
);

pub static PLUGIN_INSTANCES: Family = Family::gauge(
    "csi_agent_plugin_instances",
    "Plugin instances the agent supervises, by plugin ID, type (monolith, controller, node) and health (healthy, unhealthy).",
    &["plugin", "type", "health"],
);

pub static PLUGIN_HEARTBEAT_FAILURES: Family = Family::counter(
    "csi_agent_plugin_heartbeat_failures_total",
    "Heartbeat probes that did not find a plugin instance healthy.",
    &["plugin", "type"],
);

pub static PLUGIN_FINGERPRINT_FAILURES: Family = Family::counter(
    "csi_agent_plugin_fingerprint_failures_total",
    "Fingerprints of a plugin instance (plugin info, capabilities, node info) that failed.",
    &["plugin", "type"],
);

pub static CLAIMS: Family = Family::counter(
    "csi_agent_claims_total",
    "Claim and release requests answered, by operation (claim, release), outcome (ok, failed) and access mode.",
    &["operation", "outcome", "access_mode"],
);

pub static CLAIMS_NOW: Family = Family::gauge(
    "csi_agent_claims",
    "Claims the agent holds now, by state (claiming, taken, releasing, failed) and access mode.",
    &["state", "access_mode"],
);

pub static STEP_RETRIES: Family = Family::counter(
    "csi_agent_volume_step_retries_total",
    "Failed steps of the claim and release protocol that are retried after a backoff.",
    &[],
);

pub static STEP_GIVE_UPS: Family = Family::counter(
    "csi_agent_volume_step_give_ups_total",
    "Steps of the claim and release protocol given up on (a terminal error or the claim's deadline).",
    &[],
);

pub static JOURNAL_SYNC: Family = Family::histogram(
    "csi_agent_journal_sync_seconds",
    "Duration of one group commit of the state journal (write and fsync).",
    &[],
    FAST_BUCKETS,
);

pub static JOURNAL_BYTES: Family = Family::gauge(
    "csi_agent_journal_bytes",
    "Bytes the state journal holds (since the last snapshot).",
    &[],
);

pub static PERSIST_REFUSALS: Family = Family::counter(
    "csi_agent_persist_refusals_total",
    "Calls refused because the state could not be persisted (a full or failing disk).",
    &[],
);

pub static API_CALLS: Family = Family::histogram(
    "csi_agent_api_calls_seconds",
    "Duration of the control API's calls from their arrival to their answer, by method and gRPC status code; _count counts the calls.",
    &["method", "code"],
    FAST_BUCKETS,
);

pub static TASKS: Family = Family::gauge(
    "csi_agent_tasks",
    "Tasks of the agent's allocations now, by driver and state (pending, running, restarting, dead).",
    &["driver", "state"],
);

pub static TASK_STARTS: Family = Family::counter(
    "csi_agent_task_starts_total",
    "Tasks started, by driver.",
    &["driver"],
);

pub static TASK_RESTARTS: Family = Family::counter(
    "csi_agent_task_restarts_total",
    "Tasks restarted by their restart policy, by driver.",
    &["driver"],
);

pub static TASK_OOM_KILLS: Family = Family::counter(
    "csi_agent_task_oom_kills_total",
    "Tasks that the kernel's OOM killer ended, by driver.",
    &["driver"],
);

pub static TASK_EXITS: Family = Family::counter(
    "csi_agent_task_exits_total",
    "Task processes or containers that ended, by driver and outcome (success, failure, start_failed).",
    &["driver", "outcome"],
);

pub static ETCD_REQUESTS: Family = Family::histogram(
    "csi_agent_etcd_request_seconds",
    "Duration of the agent's etcd requests (across members, with fail-over), by operation (etcd's RPC name: Range, Txn, Put, LeaseGrant, ...) and outcome (ok, error).",
    &["operation", "outcome"],
    FAST_BUCKETS,
);

pub static LEASE_KEEPALIVE_FAILURES: Family = Family::counter(
    "csi_agent_etcd_lease_keepalive_failures_total",
    "Keep-alives of the node's lease that did not reach etcd.",
    &[],
);

pub static CLUSTER_CONNECTED: Family = Family::gauge(
    "csi_agent_cluster_connected",
    "1 while this agent is connected to its cluster, 0 while cut off or without one.",
    &[],
);

pub static FENCED_CLAIMS: Family = Family::counter(
    "csi_agent_fenced_claims_total",
    "Volumes on which this agent's fencer released the claims of a lost node.",
    &[],
);

pub static RELAYED_CALLS: Family = Family::counter(
    "csi_agent_relayed_controller_calls_total",
    "Controller calls relayed through the cluster, by direction (sent, served) and outcome (ok, error).",
    &["direction", "outcome"],
);

pub static VOLUME_STATS_CAPACITY: Family = Family::gauge(
    "csi_agent_volume_stats_capacity_bytes",
    "A staged volume's size in bytes, as its plugin's NodeGetVolumeStats last said (kubelet's kubelet_volume_stats_capacity_bytes).",
    &["volume", "plugin"],
);

pub static VOLUME_STATS_AVAILABLE: Family = Family::gauge(
    "csi_agent_volume_stats_available_bytes",
    "Bytes a staged volume has free for its users, as NodeGetVolumeStats last said (kubelet's kubelet_volume_stats_available_bytes).",
    &["volume", "plugin"],
);

pub static VOLUME_STATS_USED: Family = Family::gauge(
    "csi_agent_volume_stats_used_bytes",
    "Bytes a staged volume has in use, as NodeGetVolumeStats last said (kubelet's kubelet_volume_stats_used_bytes).",
    &["volume", "plugin"],
);

pub static VOLUME_STATS_INODES: Family = Family::gauge(
    "csi_agent_volume_stats_inodes",
    "Inodes of a staged volume's file system, as NodeGetVolumeStats last said (kubelet's kubelet_volume_stats_inodes).",
    &["volume", "plugin"],
);

pub static VOLUME_STATS_INODES_FREE: Family = Family::gauge(
    "csi_agent_volume_stats_inodes_free",
    "Free inodes of a staged volume's file system (kubelet's kubelet_volume_stats_inodes_free).",
    &["volume", "plugin"],
);

pub static VOLUME_STATS_INODES_USED: Family = Family::gauge(
    "csi_agent_volume_stats_inodes_used",
    "Inodes in use on a staged volume's file system (kubelet's kubelet_volume_stats_inodes_used).",
    &["volume", "plugin"],
);

pub static VOLUME_ABNORMAL: Family = Family::gauge(
    "csi_agent_volume_stats_health_status_abnormal",
    "1 while the plugin says a staged volume's condition is abnormal, 0 while it says it is normal (kubelet's kubelet_volume_stats_health_status_abnormal).",
    &["volume", "plugin"],
);

pub static VOLUME_STATS_POLLS: Family = Family::counter(
    "csi_agent_volume_stats_polls_total",
    "NodeGetVolumeStats calls of the agent's own schedule, by plugin and outcome (ok, error, invalid).",
    &["plugin", "outcome"],
);

pub static PLUGIN_CAPACITY: Family = Family::gauge(
    "csi_agent_plugin_capacity_available_bytes",
    "Bytes a plugin's controller says it can give new volumes accessible from this node (GetCapacity's available_capacity, with the node's topology).",
    &["plugin"],
);

pub static PLUGIN_MAXIMUM_VOLUME: Family = Family::gauge(
    "csi_agent_plugin_capacity_maximum_volume_bytes",
    "The largest volume a plugin's controller says it can create from this node (GetCapacity's maximum_volume_size), where it says one.",
    &["plugin"],
);

/// Every family, for a scrape and for the docs' test.
pub static ALL: &[&Family] = &[
    &CSI_OPERATIONS,
    &PLUGIN_INSTANCES,
    &PLUGIN_HEARTBEAT_FAILURES,
    &PLUGIN_FINGERPRINT_FAILURES,
    &CLAIMS,
    &CLAIMS_NOW,
    &STEP_RETRIES,
    &STEP_GIVE_UPS,
    &JOURNAL_SYNC,
    &JOURNAL_BYTES,
    &PERSIST_REFUSALS,
    &API_CALLS,
    &TASKS,
    &TASK_STARTS,
    &TASK_RESTARTS,
    &TASK_OOM_KILLS,
    &TASK_EXITS,
    &ETCD_REQUESTS,
    &LEASE_KEEPALIVE_FAILURES,
    &CLUSTER_CONNECTED,
    &FENCED_CLAIMS,
    &RELAYED_CALLS,
    &VOLUME_STATS_CAPACITY,
    &VOLUME_STATS_AVAILABLE,
    &VOLUME_STATS_USED,
    &VOLUME_STATS_INODES,
    &VOLUME_STATS_INODES_FREE,
    &VOLUME_STATS_INODES_USED,
    &VOLUME_ABNORMAL,
    &VOLUME_STATS_POLLS,
    &PLUGIN_CAPACITY,
    &PLUGIN_MAXIMUM_VOLUME,
];
