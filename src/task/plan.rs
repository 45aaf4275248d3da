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
            order::sort_by(&mut diff.fields, |a, b| a.name.cmp(&b.name));
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
            for index in feasible::placed(group, unplaced) {
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
            group.updates = order::map(counts.iter().map(|(k, n)| (k.to_string(), *n)));
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    const NIGHTLY: &str = r#"
job "nightly" {
  type = "batch"
  periodic { crons = ["0 3 * * *"] }
  group "g" {
    count = 2
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
"#;

    /// 2026-11-28T02:59:00Z.
    fn before_three() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_834_740)
    }

    fn allocs(name: &str) -> (std::path::PathBuf, Allocs) {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-plan-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut allocs = Allocs::new(&dir, &dir.join("sock"));
        allocs.clock = before_three;
        (dir, allocs)
    }

    fn file(hcl: &str, check_index: Option<u64>) -> JobFile {
        JobFile {
            file: "nightly.hcl".into(),
            hcl: hcl.into(),
            inputs: Default::default(),
            check_index,
        }
    }

    #[test]
    fn a_periodic_job_plans_no_alloc_and_says_its_next_launch() {
        let (dir, allocs) = allocs("periodic");
        let plan = allocs.plan_job(&file(NIGHTLY, None)).unwrap();
        assert_eq!(plan.diff.kind, DiffType::Added);
        assert!(plan.diff.children[0].updates.is_empty(), "{plan:#?}");
        assert_eq!(plan.next_launch, Some(1_795_834_800));
        assert_eq!(plan.modify_index, 0);
        assert!(allocs.jobs.is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn check_index_refuses_a_job_changed_since_with_nomads_messages() {
        let (dir, mut allocs) = allocs("check");
        let err = allocs.run_job(&file(NIGHTLY, Some(3))).unwrap_err();
        assert_eq!(err.kind, ErrorKind::FailedPrecondition);
        assert_eq!(
            err.message,
            "Enforcing job modify index 3: job does not exist"
        );
        allocs.run_job(&file(NIGHTLY, Some(0))).unwrap();
        let index = allocs.jobs["nightly"].modify_index;
        assert_eq!(index, 1);
        let changed = NIGHTLY.replace("0 3 * * *", "0 4 * * *");
        let err = allocs.run_job(&file(&changed, Some(0))).unwrap_err();
        assert_eq!(
            err.message,
            "Enforcing job modify index 0: job already exists"
        );
        let err = allocs.run_job(&file(&changed, Some(9))).unwrap_err();
        assert_eq!(
            err.message,
            "Enforcing job modify index 9: job exists with conflicting job modify index: 1"
        );
        // Refused: the job is the one it was.
        assert_eq!(
            allocs.plan_job(&file(NIGHTLY, None)).unwrap().diff.kind,
            DiffType::None
        );
        allocs.run_job(&file(&changed, Some(1))).unwrap();
        assert_eq!(allocs.jobs["nightly"].modify_index, 2);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn changes_and_stops_take_new_indexes_and_a_restore_gives_none_twice() {
        let (dir, mut allocs) = allocs("index");
        allocs.run_job(&file(NIGHTLY, None)).unwrap();
        // The same job again changes nothing.
        allocs.run_job(&file(NIGHTLY, None)).unwrap();
        assert_eq!(allocs.jobs["nightly"].modify_index, 1);
        let stopped = allocs.plan_job(&file(NIGHTLY, None)).unwrap();
        assert_eq!(stopped.diff.kind, DiffType::None);
        allocs.stop_job("nightly", false).unwrap();
        assert_eq!(allocs.jobs["nightly"].modify_index, 2);
        // A stopped job's plan shows the stop undone.
        let plan = allocs.plan_job(&file(NIGHTLY, None)).unwrap();
        assert_eq!(plan.diff.kind, DiffType::Edited);
        let stop = plan.diff.fields.iter().find(|f| f.name == "Stop").unwrap();
        assert_eq!((stop.old.as_str(), stop.new.as_str()), ("true", "false"));
        assert_eq!(plan.modify_index, 2);

        // The counter is kept apart from the jobs: an index of a purged
        // job is not given again.
        let mut again = Allocs::new(&dir, &dir.join("sock"));
        again.restore(&allocs.jobs_to_proto(), &allocs.allocs_to_proto());
        again.restore_job_index(7);
        assert_eq!(again.jobs["nightly"].modify_index, 2);
        again.run_job(&file(NIGHTLY, None)).unwrap();
        assert_eq!(again.jobs["nightly"].modify_index, 8);
        // A snapshot from before the counter was kept starts after its
        // jobs' indexes.
        let mut old = Allocs::new(&dir, &dir.join("sock"));
        old.restore(&again.jobs_to_proto(), &[]);
        old.restore_job_index(0);
        assert_eq!(old.job_index(), 8);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn group(kind: DiffType, count: (&str, &str), task: DiffType) -> ObjectDiff {
        let object = |kind, name: &str| ObjectDiff {
            kind,
            name: name.to_string(),
            fields: Vec::new(),
            objects: Vec::new(),
            children: Vec::new(),
            annotations: Vec::new(),
            updates: BTreeMap::new(),
        };
        let mut g = object(kind, "g");
        g.fields.push(FieldDiff {
            kind: DiffType::Edited,
            name: "Count".into(),
            old: count.0.into(),
            new: count.1.into(),
            annotations: Vec::new(),
        });
        g.children.push(object(task, "t"));
        g.children.push(object(DiffType::None, "u"));
        let mut job = object(DiffType::Edited, "j");
        job.children.push(g);
        job
    }

    fn annotated(diff: &mut ObjectDiff, kind: &'static str) -> (Vec<String>, Vec<String>) {
        let updates = Updates::from([("g".to_string(), BTreeMap::from([(kind, 1)]))]);
        annotate(diff, &updates);
        let g = &diff.children[0];
        assert!(g.children[1].annotations.is_empty(), "an unchanged task");
        (
            g.fields[0].annotations.clone(),
            g.children[0].annotations.clone(),
        )
    }

    #[test]
    fn annotations_follow_nomads_rules() {
        let mut d = group(DiffType::Edited, ("1", "3"), DiffType::Edited);
        assert_eq!(
            annotated(&mut d, DESTRUCTIVE),
            (vec![FORCES_CREATE.into()], vec![FORCES_DESTRUCTIVE.into()])
        );
        assert_eq!(d.children[0].updates[DESTRUCTIVE], 1);
        let mut d = group(DiffType::Edited, ("3", "1"), DiffType::Edited);
        assert_eq!(
            annotated(&mut d, IN_PLACE),
            (vec![FORCES_DESTROY.into()], vec![FORCES_IN_PLACE.into()])
        );
        let mut d = group(DiffType::Added, ("", "1"), DiffType::Added);
        assert_eq!(annotated(&mut d, CREATE).1, vec![FORCES_CREATE.to_string()]);
        let mut d = group(DiffType::Deleted, ("1", ""), DiffType::Deleted);
        assert_eq!(
            annotated(&mut d, DESTROY).1,
            vec![FORCES_DESTROY.to_string()]
        );
    }
}
