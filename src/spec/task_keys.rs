//! The keys of Nomad's `task` block, its drivers' `config`, `resources`
//! and `volume_mount` that csi-agent accepts and ignores (each with a
//! warning; docs/jobs.md's table says why each is safe) or refuses (each
//! with what a job relying on it would lose).

/// Keys of Nomad's `task` block that csi-agent ignores.
pub(super) const TASK_IGNORED: &[&str] = &[
    "action", "affinity", "consul", "identity", "kind", "logs", "scaling", "vault",
];

/// Keys of Nomad's `task` block that csi-agent refuses, with what a job
/// relying on each would lose.
pub(super) const TASK_REFUSED: &[(&str, &str)] = &[(
    "schedule",
    "it runs the task only within its time windows (Nomad Enterprise), and csi-agent would run it at any time",
)];

/// Keys of Nomad's exec driver `config` that csi-agent ignores.
pub(super) const EXEC_CONFIG_IGNORED: &[&str] = &[];

/// Keys of Nomad's raw_exec driver `config` that csi-agent ignores.
pub(super) const RAW_EXEC_CONFIG_IGNORED: &[&str] = &["oom_score_adj"];

/// Keys of Nomad's raw_exec driver `config` that csi-agent refuses.
pub(super) const RAW_EXEC_CONFIG_REFUSED: &[(&str, &str)] = &[
    ("cgroup_v1_override", "the task runs in a control group of the agent's making (csi-agent/<alloc>.<task>), not one the job names"),
    ("cgroup_v2_override", "the task runs in a control group of the agent's making (csi-agent/<alloc>.<task>), not one the job names"),
    ("denied_envvars", "the task's environment would keep the variables it asks to scrub"),
];

pub(super) const RESOURCES_IGNORED: &[&str] = &["disk", "iops", "network", "numa"];

/// Keys of Nomad's `resources` block that csi-agent refuses.
pub(super) const RESOURCES_REFUSED: &[(&str, &str)] = &[(
    "device",
    "csi-agent fingerprints and reserves no devices (GPUs, FPGAs), so the task would start without the one it asks for",
)];

pub(super) const VOLUME_MOUNT_IGNORED: &[&str] = &["selinux_label"];
