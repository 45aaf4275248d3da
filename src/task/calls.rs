//! What the job runner is asked and what it answers, in its own terms;
//! the control API (`api/`) maps these to and from its protobuf messages.

use std::time::SystemTime;

pub use super::feasible::Unplaced;
use crate::spec::JobInputs;

/// A job file to run: its path as the caller named it (for messages and
/// `job status`), its text, and the values the caller gave its variables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFile {
    pub file: String,
    pub hcl: String,
    pub inputs: JobInputs,
    /// `job run -check-index`: run only if the job's modify index is
    /// still this (0: only if there is no such job).
    pub check_index: Option<u64>,
}

/// `job run`'s answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobRun {
    pub job: String,
    /// The allocs made, or the live ones when nothing changed.
    pub alloc_ids: Vec<String>,
    /// The same job is running already: nothing was done.
    pub unchanged: bool,
    pub warnings: Vec<String>,
    /// The group instances the node's attributes keep off it, and the
    /// constraint that filtered each group.
    pub unplaced: Vec<Unplaced>,
}

/// A job, its allocs and their tasks, as `job status` shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobStatus {
    pub name: String,
    /// `running`, `stopping` or `dead`.
    pub status: String,
    pub file: String,
    /// `service`, `batch`, `system` or `sysbatch`.
    pub job_type: String,
    pub submitted: Option<SystemTime>,
    pub stop_wanted: bool,
    /// Oldest first.
    pub allocs: Vec<AllocStatus>,
    /// The group instances the node's constraints keep off it, checked
    /// again now; empty once the job is stopped.
    pub unplaced: Vec<Unplaced>,
    /// A child's parent; empty for any other job.
    pub parent: String,
    /// `periodic`, `parameterized`, or empty for a job that runs itself.
    pub parent_kind: String,
    /// A periodic parent's next launch, in seconds since the epoch.
    pub next_launch: Option<i64>,
    /// A parent's children, oldest first.
    pub children: Vec<ChildStatus>,
    /// Nomad's job modify index: changed by each change of the job.
    pub modify_index: u64,
}

/// A child of a periodic or parameterized job, as its parent's `job
/// status` lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChildStatus {
    pub name: String,
    /// `running`, `stopping` or `dead`.
    pub status: String,
    pub submitted: Option<SystemTime>,
}

/// `job dispatch`: a child of a parameterized job, with its meta and
/// payload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DispatchRequest {
    pub job: String,
    pub meta: std::collections::BTreeMap<String, String>,
    pub payload: Vec<u8>,
    /// Put in the child's name before its time (`-id-prefix-template`).
    pub id_prefix_template: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocStatus {
    pub id: String,
    pub group: String,
    pub index: u64,
    pub status: String,
    pub message: String,
    pub tasks: Vec<TaskStatus>,
    pub volumes: Vec<AllocVolume>,
    pub created: Option<SystemTime>,
    /// The host ports of its group's network: label and port.
    pub ports: Vec<(String, u16)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskStatus {
    pub name: String,
    pub state: String,
    pub failed: bool,
    pub restarts: u32,
    /// 0 when not running.
    pub pid: u32,
    /// The plugin the task serves, if it is a `csi_plugin` task.
    pub plugin_id: String,
    pub events: Vec<TaskEvent>,
    /// Its lifecycle hook; empty for a main task.
    pub lifecycle: String,
    /// What its `resources` ask for (0: not given).
    pub cpu_mhz: u64,
    pub memory_mb: u64,
}

/// Something that happened to a task (it started, exited, was
/// restarted, its plugin turned healthy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskEvent {
    pub time: SystemTime,
    pub kind: String,
    pub message: String,
}

/// A group volume as an alloc uses it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocVolume {
    pub alias: String,
    pub volume_id: String,
    pub read_only: bool,
    /// `host`, `claiming`, `claimed` or `released`.
    pub state: String,
    pub message: String,
}

/// `alloc logs`: which task's which stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogsRequest {
    /// The alloc's ID or a prefix of it that names one.
    pub alloc_id: String,
    pub task: String,
    pub stderr: bool,
}

/// What `alloc signal`, `alloc restart` and `alloc stop` ask of an alloc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocAction {
    Signal(crate::spec::KillSignal),
    Restart,
    Stop,
}

/// An [`AllocAction`] on an alloc (ID or unique prefix) and one task of
/// it, or every running task when `task` is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocControl {
    pub alloc_id: String,
    pub task: String,
    pub action: AllocAction,
}

/// What an [`AllocControl`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocControlled {
    pub alloc_id: String,
    /// The tasks signaled or restarted.
    pub tasks: Vec<String>,
    /// The alloc that replaces a stopped one.
    pub replacement: Option<String>,
}

/// `job inspect`: the job as submitted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobInspected {
    pub name: String,
    pub file: String,
    pub hcl: String,
    pub submitted: Option<SystemTime>,
    pub job_type: String,
    pub groups: Vec<String>,
    pub modify_index: u64,
}

/// `job plan`'s answer: what `job run` of the same file would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPlanned {
    pub job: String,
    /// The file's job against the agent's, each group with the updates
    /// of its allocs and each changed task with what it forces.
    pub diff: crate::spec::diff::ObjectDiff,
    pub unplaced: Vec<Unplaced>,
    /// The job's modify index now; 0 when there is no such job.
    pub modify_index: u64,
    pub warnings: Vec<String>,
    /// A periodic job's next launch were it run now, in seconds since the
    /// epoch.
    pub next_launch: Option<i64>,
}
