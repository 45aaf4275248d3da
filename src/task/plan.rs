//! `job plan`: what `job run` of a job file would do, worked out without
//! doing it, and the job modify index `job run -check-index` checks.
//!
//! The plan takes the job runner by shared reference: it decodes and
//! checks the file as `job run` does, diffs it against the job the agent
//! has (`spec::diff`), and goes through `job run`'s decisions (the same
//! job left alone, templates changed in place, every other change
//! replacing the job's allocs, a periodic or parameterized job running
//! nothing itself) to count what would happen to each group's allocs, in
//! Nomad's kinds of update. Nothing is placed, claimed, stopped or
//! written.

use std::collections::BTreeMap;

use super::calls::{JobFile, JobPlanned};
use super::feasible;
use super::periodic::unix_secs;
use super::rerender::only_templates_differ;
use super::{invalid, Alloc, Allocs};
use crate::call::{CallError, ErrorKind};
use crate::spec::diff::{diff_jobs, DiffType, FieldDiff, ObjectDiff};
use crate::spec::Job;

/// Nomad's kinds of update of a group's allocs (`scheduler/annotate.go`).
pub const CREATE: &str = "create";
pub const DESTROY: &str = "destroy";
pub const IGNORE: &str = "ignore";
pub const IN_PLACE: &str = "in-place update";
pub const DESTRUCTIVE: &str = "create/destroy update";

/// Nomad's annotations of what a change forces.
const FORCES_CREATE: &str = "forces create";
const FORCES_DESTROY: &str = "forces destroy";
const FORCES_IN_PLACE: &str = "forces in-place update";
const FORCES_DESTRUCTIVE: &str = "forces create/destroy update";

/// Allocs by kind of update, by group.
type Updates = BTreeMap<String, BTreeMap<&'static str, u64>>;

impl Allocs {
    /// `job plan` of `req`: the diff, the updates `job run` would make,
    /// and the groups it could not place.
    pub fn plan_job(&self, req: &JobFile) -> Result<JobPlanned, CallError> {
        let decoded = crate::spec::Job::decode_with(&req.hcl, &req.file, &req.inputs)
            .map_err(|e| invalid(e.to_string().trim_end()))?;
        let spec = decoded.spec;
        self.check_job(&spec, &req.file)?;
        self.check_placement(&spec, &req.file, &req.hcl)?;
        let warnings = decoded.warnings.iter().map(|w| w.to_string()).collect();
        let existing = self.jobs.get(&spec.name);
        let mut diff = diff_jobs(existing.map(|j| &j.spec), &spec);
        if let Some(job) = existing {
            // Nomad's job has a `Stop` field, which `job run` clears.
            let stopped = job.stop_wanted.to_string();
            diff.fields.push(FieldDiff {
                kind: if job.stop_wanted {
                    DiffType::Edited
                } else {
                    DiffType::None
                },
                name: "Stop".to_string(),
                old: stopped,
                new: "false".to_string(),
                annotations: Vec::new(),
            });
            diff.fields.sort_by(|a, b| a.name.cmp(&b.name));
            if job.stop_wanted && diff.kind == DiffType::None {
                diff.kind = DiffType::Edited;
            }
        }
        let parent = spec.launches_children();
        let unplaced = if parent {
            Vec::new()
        } else {
            self.unplaced(&spec)
        };
        let updates = self.dry_run(&spec, &unplaced);
        annotate(&mut diff, &updates);
        let next_launch = spec
            .periodic
            .as_ref()
            .filter(|p| p.enabled)
            .and_then(|p| p.next_after(unix_secs((self.clock)())));
        Ok(JobPlanned {
            job: spec.name.clone(),
            diff,
            unplaced,
            modify_index: existing.map_or(0, |j| j.modify_index),
            warnings,
            next_launch,
        })
    }

    /// What `job run` of `spec` would do to each group's allocs, by the
    /// rules of [`Allocs::run_job`].
    fn dry_run(&self, spec: &Job, unplaced: &[feasible::Unplaced]) -> Updates {
        let mut updates = Updates::new();
        let mut add = |group: &str, kind: &'static str| {
            *updates
                .entry(group.to_string())
                .or_default()
                .entry(kind)
                .or_default() += 1;
        };
        let live: Vec<&Alloc> = self
            .allocs
            .values()
            .filter(|a| a.job == spec.name && !a.status.is_terminal() && !a.stop_wanted)
            .collect();
        let running = self.jobs.get(&spec.name).filter(|j| !j.stop_wanted);
        let unchanged = running.is_some_and(|j| j.spec == *spec);
        if spec.launches_children() {
            // A parent runs nothing; a version that ran as a job stops.
            if !unchanged {
                live.iter().for_each(|a| add(&a.group.name, DESTROY));
            }
            return updates;
        }
        if unchanged && !live.is_empty() {
            live.iter().for_each(|a| add(&a.group.name, IGNORE));
            return updates;
        }
        if let Some(job) =
            running.filter(|j| !live.is_empty() && only_templates_differ(&j.spec, spec))
        {
            for a in &live {
                let new = spec.groups.iter().find(|g| g.name == a.group.name);
                let old = job.spec.groups.iter().find(|g| g.name == a.group.name);
                let kind = if templates(new) == templates(old) {
                    IGNORE
                } else {
                    IN_PLACE
                };
                add(&a.group.name, kind);
            }
            return updates;
        }
        let mut replaced = Vec::new();
        for group in &spec.groups {
            for index in 0..feasible::placeable(group, unplaced) {
                let old = live
                    .iter()
                    .find(|a| a.group.name == group.name && a.index == index);
                match old {
                    Some(a) => {
                        replaced.push(a.id.as_str());
                        add(&group.name, DESTRUCTIVE);
                    }
                    None => add(&group.name, CREATE),
                }
            }
        }
        for a in live.iter().filter(|a| !replaced.contains(&a.id.as_str())) {
            add(&a.group.name, DESTROY);
        }
        updates
    }

    /// `job run -check-index`'s check, with Nomad's messages: `index` is
    /// the job's modify index as the caller last saw it (0: no such job).
    pub(super) fn check_modify_index(
        &self,
        name: &str,
        index: Option<u64>,
    ) -> Result<(), CallError> {
        let Some(index) = index else {
            return Ok(());
        };
        let refuse = |why: String| {
            Err(CallError::new(
                ErrorKind::FailedPrecondition,
                format!("Enforcing job modify index {index}: {why}"),
            ))
        };
        match self.jobs.get(name) {
            Some(_) if index == 0 => refuse("job already exists".to_string()),
            Some(job) if job.modify_index != index => refuse(format!(
                "job exists with conflicting job modify index: {}",
                job.modify_index
            )),
            None if index != 0 => refuse("job does not exist".to_string()),
            _ => Ok(()),
        }
    }

    /// The next job modify index, taken for a change of a job.
    pub(super) fn next_job_index(&mut self) -> u64 {
        self.job_index += 1;
        self.job_index
    }
}

/// The templates of `group`'s tasks, in order.
fn templates(group: Option<&crate::spec::Group>) -> Option<Vec<&[crate::spec::TaskTemplate]>> {
    group.map(|g| g.tasks.iter().map(|t| t.templates.as_slice()).collect())
}

/// Puts the dry run's updates on the diff's groups, and on their `Count`
/// and tasks what they force, as Nomad's `scheduler.Annotate` does: a task
/// of an added group forces a create, of a deleted one a destroy; an
/// edited task forces an in-place update where its group's allocs are
/// updated in place (a change of templates), else a create/destroy update.
pub fn annotate(diff: &mut ObjectDiff, updates: &Updates) {
    for group in &mut diff.children {
        if let Some(counts) = updates.get(&group.name) {
            group.updates = counts.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        }
        if let Some(count) = group.fields.iter_mut().find(|f| f.name == "Count") {
            let n = |s: &str| s.parse::<u64>().unwrap_or(0);
            if n(&count.old) < n(&count.new) {
                count.annotations.push(FORCES_CREATE.to_string());
            } else if n(&count.new) < n(&count.old) {
                count.annotations.push(FORCES_DESTROY.to_string());
            }
        }
        let in_place = group.updates.contains_key(IN_PLACE);
        let group_kind = group.kind;
        for task in group.children.iter_mut().filter(|t| t.changed()) {
            let forces = match (group_kind, task.kind) {
                (DiffType::Added, _) => FORCES_CREATE,
                (DiffType::Deleted, _) => FORCES_DESTROY,
                _ if in_place => FORCES_IN_PLACE,
                _ => FORCES_DESTRUCTIVE,
            };
            task.annotations.push(forces.to_string());
        }
    }
}
