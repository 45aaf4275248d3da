//! What a killed agent left behind, swept at start-up.
//!
//! A done task's control group and a purged alloc's dir are removed by
//! cleanups on the starter's threads (`starter.rs`); an agent killed
//! while some were still queued leaves them. After restoring its state,
//! the next agent removes what it made and no live or known task owns:
//!
//! - the empty groups `csi-agent/<alloc>.<task>` of an alloc it knows, or
//!   whose dir is under its data dir, unless the task runs (or is being
//!   started); a group with a process in it is never touched (nothing is
//!   killed), nor one of an alloc that is not this agent's (another agent
//!   on the host shares the `csi-agent` parent);
//! - the dirs under `data_dir/alloc/` named as allocs are (8 hex digits)
//!   of allocs it no longer knows, on the starter's threads; one with a
//!   mount point under it, or with a task of its pid files still alive,
//!   is logged and left.

use std::fs;
use std::path::Path;

use super::{cgroup, exec, Allocs, TaskState};
use crate::mount::MountInfo;

impl Allocs {
    /// Removes the leftovers of an agent killed with cleanups queued.
    /// Called once the state is restored, before any task starts.
    pub(super) fn sweep_leftovers(&mut self) {
        self.sweep_groups();
        self.sweep_alloc_dirs();
    }

    fn sweep_groups(&self) {
        for name in cgroup::names() {
            let Some((alloc, task)) = name.split_once('.') else {
                continue;
            };
            let known = self.allocs.get(alloc);
            if known.is_none() && !self.alloc_dir(alloc).is_dir() {
                continue;
            }
            let live = known.is_some_and(|a| {
                a.tasks.iter().any(|t| {
                    t.name == task && matches!(t.state, TaskState::Running | TaskState::Starting)
                })
            });
            let Some(group) = cgroup::group(alloc, task).filter(|_| !live) else {
                continue;
            };
            match group.remove_if_empty() {
                Ok(true) => log::info!("Removed the empty control group {name} left behind"),
                Ok(false) => log::warn!(
                    "Leaving the control group {name}: processes of a task the agent does not run are in it"
                ),
                Err(err) => log::warn!("Cannot remove the control group {name}: {err}"),
            }
        }
    }

    fn sweep_alloc_dirs(&mut self) {
        let Ok(entries) = fs::read_dir(self.data_dir.join("alloc")) else {
            return;
        };
        let Ok(mounts) = MountInfo::read() else {
            return;
        };
        for entry in entries.flatten() {
            let Ok(id) = entry.file_name().into_string() else {
                continue;
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir || !is_alloc_id(&id) || self.allocs.contains_key(&id) {
                continue;
            }
            let dir = entry.path();
            if let Some(m) = mounts.under(&dir).next() {
                log::warn!(
                    "Leaving {} of an alloc the agent no longer knows: {} is mounted under it",
                    dir.display(),
                    m.mount_point.display()
                );
                continue;
            }
            if let Some(pid) = live_task(&dir, &id) {
                log::warn!(
                    "Leaving {} of an alloc the agent no longer knows: its task (pid {pid}) runs",
                    dir.display()
                );
                continue;
            }
            log::info!(
                "Removing {} of alloc {id}, which the agent no longer knows",
                dir.display()
            );
            self.starter.remove_dir(dir);
        }
    }
}

/// Whether `name` is an alloc ID as the agent makes them.
fn is_alloc_id(name: &str) -> bool {
    name.len() == 8 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A task of alloc `id` still running, by the pid files in its dir `dir`.
fn live_task(dir: &Path, id: &str) -> Option<u32> {
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pid"))
        .filter_map(|e| exec::read_pid_file(&e.path()))
        .find(|pid| exec::task_has_env(*pid, "CSI_AGENT_ALLOC_ID", id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_the_agent_makes_are_alloc_ids() {
        assert!(is_alloc_id("0a1b2c3d"));
        assert!(!is_alloc_id("0a1b2c3"));
        assert!(!is_alloc_id("0a1b2c3g"));
        assert!(!is_alloc_id("lost+found"));
    }
}
