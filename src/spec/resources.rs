//! `resources` blocks: a task's (and a Connect sidecar task's) CPU and
//! memory, as Nomad writes them.

use super::decode::Fields;
use super::encode::Writer;
use super::task_keys::{RESOURCES_IGNORED, RESOURCES_REFUSED};
use super::Kept;

/// `resources { cpu, cores, memory, memory_max }`, as Nomad writes them
/// (MHz, cores, MiB).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resources {
    pub cpu: Option<u64>,
    pub cores: Option<u64>,
    pub memory: Option<u64>,
    pub memory_max: Option<MemoryMax>,
    pub ignored: Vec<Kept>,
}

/// `memory_max`: a hard limit above `memory`, or none at all (Nomad's -1,
/// for tasks that must not be OOM-killed by their group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryMax {
    MiB(u64),
    Unlimited,
}

impl MemoryMax {
    /// The value as a job file writes it.
    pub fn as_i64(self) -> i64 {
        match self {
            MemoryMax::MiB(mib) => i64::try_from(mib).unwrap_or(i64::MAX),
            MemoryMax::Unlimited => -1,
        }
    }
}

/// Decodes a `resources` block; the keys csi-agent cannot honour are
/// refused, those it need not are kept with a warning.
pub(crate) fn decode_resources(f: &mut Fields<'_>) -> Resources {
    let resources = Resources {
        cpu: f.u64("cpu"),
        cores: f.u64("cores"),
        memory: f.u64("memory"),
        memory_max: f.memory_max("memory_max"),
        ignored: {
            f.refuse(RESOURCES_REFUSED);
            f.ignore(RESOURCES_IGNORED)
        },
    };
    f.finish();
    resources
}

/// Writes a `resources` block back as HCL that decodes to it.
pub(crate) fn write_resources(w: &mut Writer, resources: &Resources) {
    w.open("resources", None);
    for (key, value) in [
        ("cpu", resources.cpu),
        ("cores", resources.cores),
        ("memory", resources.memory),
    ] {
        if let Some(value) = value {
            w.plain(key, value);
        }
    }
    if let Some(max) = resources.memory_max {
        w.plain("memory_max", max.as_i64());
    }
    w.kept(&resources.ignored);
    w.close();
}
