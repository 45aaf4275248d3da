//! An `exec` or `raw_exec` task's control group, as Nomad's executor makes
//! it: one group per task, `csi-agent/<alloc>.<task>` under each
//! hierarchy's root ([`crate::sys::cgroup`]), holding the task's limits
//! from its `resources` block:
//!
//! | `resources` | v1 | v2 |
//! |---|---|---|
//! | `memory` (MiB), no `memory_max` | `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`: no swap) | `memory.max` (and `memory.swap.max` 0) |
//! | `memory_max` with `memory` | hard limit `memory_max`, `memory.soft_limit_in_bytes` `memory` | `memory.max` `memory_max`, `memory.low` `memory` |
//! | `memory_max = -1` (Nomad's "no limit") with `memory` | no hard limit, `memory.soft_limit_in_bytes` `memory` | no `memory.max`, `memory.low` `memory` |
//! | `cpu` (MHz) | `cpu.shares` = MHz | `cpu.weight` mapped from the shares |
//! | `cores` | `cpuset.cpus`: that many CPUs, the first no other task holds | the same |
//!
//! Without a `resources` block (or a key of it) nothing is limited: Nomad's
//! defaults (100 MHz, 300 MiB) are not applied.
//!
//! The group is made before the task's fork, and the child joins it
//! before `exec` (`exec/child.rs`), so the task is limited from its first
//! instruction. When the task ends, its group tells whether the OOM killer
//! struck ([`Exit::OomKilled`], "OOM Killed" in its events, as Nomad says),
//! what is left in it is killed, and it is removed: at once when the task
//! restarts, on a starter thread (`starter.rs`) when it is done for good. Its name depends only
//! on the alloc and the task, so a task adopted after an agent restart
//! finds its group again. A host without the controllers (none mounted,
//! or not writable) runs the task without limits, and one task event says
//! why.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use super::exit::Exit;
use crate::spec::{MemoryMax, Resources};
use crate::sys::cgroup::{Group, Hierarchy, Limits};

/// How long the killed leftovers of a task have to leave its group.
const REMOVE_WAIT: Duration = Duration::from_secs(2);

const MIB: u64 = 1024 * 1024;

/// The kernel's limits for a task's `resources`, Nomad's mapping: with
/// `memory_max`, the hard limit is `memory_max` and `memory` the soft one;
/// without, `memory` is the hard limit.
pub(super) fn limits(resources: Option<&Resources>) -> Limits {
    let Some(r) = resources else {
        return Limits::default();
    };
    let (memory_max, memory_soft) = match (r.memory, r.memory_max) {
        (soft, Some(MemoryMax::MiB(hard))) if hard > 0 => (Some(hard), soft),
        (soft, Some(MemoryMax::Unlimited)) => (None, soft),
        (hard, _) => (hard, None),
    };
    Limits {
        memory_max: memory_max.map(|m| m.saturating_mul(MIB)),
        memory_soft: memory_soft.map(|m| m.saturating_mul(MIB)),
        cpu_shares: r.cpu,
        cores: r.cores.filter(|c| *c > 0),
    }
}

/// The group of task `task` of alloc `alloc` on this host, if it has
/// cgroups.
pub(super) fn group(alloc: &str, task: &str) -> Option<Group> {
    hierarchy().map(|h| h.group(&format!("{alloc}.{task}")))
}

/// The names of csi-agent's groups on this host (`<alloc>.<task>`, any
/// agent's).
pub(super) fn names() -> std::collections::BTreeSet<String> {
    hierarchy().map(|h| h.group_names()).unwrap_or_default()
}

/// The host's hierarchies, looked for once: every start and every exit
/// needs them, and reading the mount table each time is what made a big
/// job's stop slow.
fn hierarchy() -> Option<Hierarchy> {
    static DETECTED: OnceLock<Option<Hierarchy>> = OnceLock::new();
    DETECTED.get_or_init(Hierarchy::detect).clone()
}

/// What a start gets: the files its child writes itself to, and a note
/// for the task's events when it runs without limits.
pub(super) struct Prepared {
    pub procs: Vec<PathBuf>,
    pub note: Option<String>,
}

/// Makes the task's group afresh (a group left by an earlier run is
/// removed first, so its OOM count starts at zero).
pub(super) fn prepare(alloc: &str, task: &str, resources: Option<&Resources>) -> Prepared {
    prepare_in(hierarchy(), alloc, task, resources)
}

/// [`prepare`] on the hierarchies `hierarchy` (`None`: none mounted).
fn prepare_in(
    hierarchy: Option<Hierarchy>,
    alloc: &str,
    task: &str,
    resources: Option<&Resources>,
) -> Prepared {
    let limits = limits(resources);
    let asks = limits != Limits::default();
    let without = |why: String| Prepared {
        procs: Vec::new(),
        note: asks.then(|| format!("the task runs without its resource limits: {why}")),
    };
    let Some(group) = hierarchy.map(|h| h.group(&format!("{alloc}.{task}"))) else {
        return without("no cgroup controllers are mounted on this host".to_string());
    };
    if group.exists() {
        if let Err(err) = group.remove(REMOVE_WAIT) {
            return without(err.to_string());
        }
    }
    match group.create(&limits) {
        Ok(procs) => Prepared { procs, note: None },
        Err(err) => {
            let _ = group.remove(Duration::ZERO);
            without(err.to_string())
        }
    }
}

/// The task's process ended: its exit as the group tells it (an OOM kill
/// named as such), and its group, which the caller removes with
/// [`remove`] (what is left of the task runs until then).
pub(super) fn outcome(alloc: &str, task: &str, exit: Exit) -> (Exit, Option<Group>) {
    let Some(group) = group(alloc, task).filter(Group::exists) else {
        return (exit, None);
    };
    let killed = match &exit {
        Exit::Status(status) => status.signal() == Some(libc::SIGKILL),
        Exit::Vanished => true,
        _ => false,
    };
    // A kernel that does not count OOM kills (v1 before 4.13) still counts
    // the times the limit was hit.
    let oom = match group.oom_kills() {
        Some(n) => n > 0,
        None => killed && group.limit_hits().is_some_and(|n| n > 0),
    };
    let exit = match exit {
        Exit::Status(status) if oom => Exit::OomKilled {
            status: Some(status),
        },
        Exit::Vanished if oom => Exit::OomKilled { status: None },
        other => other,
    };
    (exit, Some(group))
}

/// Kills what is left of task `task` of alloc `alloc` in its group
/// `group`, and removes the group.
pub(super) fn remove(alloc: &str, task: &str, group: &Group) {
    if let Err(err) = group.remove(REMOVE_WAIT) {
        log::warn!("Alloc {alloc}: task {task}: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources(cpu: Option<u64>, memory: Option<u64>, memory_max: Option<i64>) -> Resources {
        Resources {
            cpu,
            cores: None,
            memory,
            memory_max: memory_max.map(|max| match max {
                -1 => MemoryMax::Unlimited,
                mib => MemoryMax::MiB(mib as u64),
            }),
            ignored: Vec::new(),
        }
    }

    #[test]
    fn without_controllers_a_task_runs_unlimited_and_one_note_says_why() {
        let r = resources(None, Some(16), None);
        let none = prepare_in(None, "a1", "t", Some(&r));
        assert!(none.procs.is_empty());
        assert_eq!(
            none.note.as_deref(),
            Some("the task runs without its resource limits: no cgroup controllers are mounted on this host")
        );
        // Nothing asked, nothing to say.
        assert_eq!(prepare_in(None, "a1", "t", None).note, None);
        // Mounted but not writable (here: not there at all).
        let broken = Hierarchy::Legacy {
            memory: Some(PathBuf::from("/nonexistent/memory")),
            cpu: None,
            cpuset: None,
        };
        let prepared = prepare_in(Some(broken), "a1", "t", Some(&r));
        assert!(prepared.procs.is_empty());
        let note = prepared.note.unwrap_or_default();
        assert!(
            note.starts_with("the task runs without its resource limits: cannot create /nonexistent/memory/csi-agent"),
            "{note}"
        );
    }

    #[test]
    fn resources_map_to_limits_as_nomad_maps_them() {
        assert_eq!(limits(None), Limits::default());
        assert_eq!(
            limits(Some(&resources(Some(500), Some(16), None))),
            Limits {
                memory_max: Some(16 * MIB),
                memory_soft: None,
                cpu_shares: Some(500),
                cores: None,
            }
        );
        assert_eq!(
            limits(Some(&resources(None, Some(20), Some(30)))),
            Limits {
                memory_max: Some(30 * MIB),
                memory_soft: Some(20 * MIB),
                cpu_shares: None,
                cores: None,
            }
        );
        // Nomad's "no memory_max" is 0.
        assert_eq!(
            limits(Some(&resources(None, Some(20), Some(0)))).memory_max,
            Some(20 * MIB)
        );
        // Nomad's -1: no hard limit at all, `memory` the soft one.
        assert_eq!(
            limits(Some(&resources(None, Some(20), Some(-1)))),
            Limits {
                memory_max: None,
                memory_soft: Some(20 * MIB),
                cpu_shares: None,
                cores: None,
            }
        );
    }
}
