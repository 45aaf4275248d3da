//! Placement again when the node changes: a SIGHUP that re-reads `client
//! { meta node_class node_pool }` changes what the node offers its jobs'
//! constraints ([`feasible`]), and each job is looked at again as Nomad's
//! scheduler looks at it when a node is updated.
//!
//! - A group instance that got no alloc because the node did not meet a
//!   constraint (`job status` shows it under "Placement Failure", the job
//!   `pending` while nothing of it runs) is placed once the node meets
//!   them, whatever the job's type: Nomad's blocked evaluation is
//!   unblocked by the node's new class.
//! - An alloc that runs and no longer fits is left running for `service`,
//!   `batch` and `sysbatch` jobs: Nomad's generic scheduler does not
//!   re-check a running alloc's node until the job itself changes (a
//!   `job run` here checks again), and a `sysbatch` alloc runs to its end.
//! - A `system` job's alloc that no longer fits is stopped, as Nomad's
//!   system scheduler stops an alloc on a node it no longer targets; its
//!   instance is placed again when the node fits again.
//!
//! `alloc stop` of a system job's alloc is not undone here: that alloc was
//! replaced at once (`alloc_ops.rs`).

use std::time::SystemTime;

use super::calls::JobFile;
use super::feasible::{self, Unplaced};
use super::{Alloc, Allocs};
use crate::spec::{Group, JobType};

/// The message of a system job's alloc stopped because the node no longer
/// meets its constraints; the filter's words follow.
pub const NO_LONGER_FITS: &str = "the node no longer meets the job's constraints";

impl Allocs {
    /// Places the group instances the node now fits, and stops the system
    /// jobs' allocs it no longer fits; what changed is logged and in the
    /// agent's events.
    pub(super) fn refit(&mut self) {
        let now = SystemTime::now();
        let names: Vec<String> = self
            .jobs
            .values()
            .filter(|j| !j.stop_wanted && !j.spec.launches_children())
            .map(|j| j.name.clone())
            .collect();
        for name in names {
            let job = &self.jobs[&name];
            let spec = job.spec.clone();
            let req = JobFile {
                file: job.file.clone(),
                hcl: job.hcl.clone(),
                inputs: job.inputs.clone(),
                check_index: None,
            };
            let unplaced = self.unplaced(&spec);
            let system = spec.job_type == JobType::System;
            for group in &spec.groups {
                let fits = feasible::placed(group, &unplaced);
                if system {
                    self.stop_misfits(&name, group, &fits, &unplaced);
                }
                for index in fits {
                    if self
                        .allocs
                        .values()
                        .any(|a| holds(a, &name, group, index, system))
                    {
                        continue;
                    }
                    let id = self.new_alloc_id();
                    let alloc = self.new_alloc(&id, &spec, group, index, &req, now, None);
                    let message = format!(
                        "alloc {id} for group {:?} [{index}]: the node now meets the job's constraints",
                        group.name
                    );
                    log::info!("Job {name}: {message}");
                    crate::events::emit(
                        crate::events::Topic::Job,
                        "Placed",
                        format!("{name}/{}", group.name),
                        message,
                    );
                    self.allocs.insert(id, alloc);
                    self.dirty = true;
                }
            }
        }
    }

    /// Stops the live allocs of `group` of system job `job` but those of
    /// the instances the node now takes, `fits`.
    fn stop_misfits(&mut self, job: &str, group: &Group, fits: &[u64], unplaced: &[Unplaced]) {
        let why = unplaced
            .iter()
            .find(|u| u.group == group.name)
            .map(|u| format!("{NO_LONGER_FITS}: {}", u.message()))
            .unwrap_or_else(|| NO_LONGER_FITS.to_string());
        let misfits: Vec<String> = self
            .allocs
            .values()
            .filter(|a| a.job == job && a.group.name == group.name && !fits.contains(&a.index))
            .filter(|a| !a.stop_wanted && !a.status.is_terminal())
            .map(|a| a.id.clone())
            .collect();
        for id in misfits {
            self.stop_alloc(&id, &why);
            crate::events::emit(
                crate::events::Topic::Job,
                "AllocStopped",
                format!("{job}/{}", group.name),
                format!("alloc {id}: {why}"),
            );
        }
    }

    /// `unplaced` as `job status` shows it: the instances with no alloc
    /// that holds them (a service job's alloc that runs on though the
    /// node no longer fits it is not a placement failure).
    pub(super) fn still_unplaced(&self, job: &str, unplaced: Vec<Unplaced>) -> Vec<Unplaced> {
        let system = self
            .jobs
            .get(job)
            .is_some_and(|j| j.spec.job_type == JobType::System);
        unplaced
            .into_iter()
            .filter_map(|mut u| {
                let group = self
                    .jobs
                    .get(job)?
                    .spec
                    .groups
                    .iter()
                    .find(|g| g.name == u.group)?;
                u.instances.retain(|i| {
                    !self
                        .allocs
                        .values()
                        .any(|a| holds(a, job, group, *i, system))
                });
                u.count = u.instances.len() as u64;
                (u.count > 0).then_some(u)
            })
            .collect()
    }
}

/// Whether `alloc` holds instance `index` of `group` of job `job`, so that
/// none is placed for it: any alloc does (a batch job's done one too),
/// but a system job's stopped alloc does not (it was stopped for the node,
/// or replaced by one that holds the instance).
fn holds(alloc: &Alloc, job: &str, group: &Group, index: u64, system: bool) -> bool {
    alloc.job == job
        && alloc.group.name == group.name
        && alloc.index == index
        && !(system && alloc.stop_wanted)
}
