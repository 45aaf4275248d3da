//! Periodic and parameterized parents: jobs that never run themselves but
//! launch children, each a job of its own with the parent's groups.
//!
//! A child is named as Nomad names it: `<parent>/periodic-<unix seconds>`
//! for a launch on the schedule or by `job periodic force` (with `-<n>`
//! after it for a second launch in one second, see
//! [`Allocs::periodic_child_name`]),
//! `<parent>/dispatch-<unix seconds>-<8 hex digits>` for a `job dispatch`.
//! Job names are never path components here (alloc dirs, cgroups and
//! containers are named after allocs and tasks), so the `/` a child's name
//! holds needs no mapping; `job status` and `job stop` take the name as is.
//!
//! The schedule, in the wall clock's seconds ([`Allocs::clock`], which
//! unit tests set): a parent's next launch counts from the time it was run
//! or the agent started, then from each launch. A launch records its time
//! in the parent's entry, which the snapshot keeps with the child it made
//! (one write), so no launch is made twice across a restart. A launch due
//! while the agent was down is made once, at start, when the first time
//! the schedule matched after the last launch (or after the job was run)
//! has passed; the others missed are not made up. This is Nomad's rule
//! when a server takes over the schedule (`restorePeriodicDispatcher`).
//! With `prohibit_overlap`, a launch due while a child still runs is
//! skipped; `job periodic force` launches anyway, as Nomad's does.
//!
//! Stopping a parent ends its launches and dispatches; its children go on,
//! as in Nomad, and are stopped by name. A parent keeps its last
//! [`MAX_DEAD_CHILDREN`] finished children; older ones are forgotten with
//! their allocs and alloc dirs (as a purged job is), as Nomad's garbage
//! collector forgets dead jobs, so a launch every second does not grow the
//! state without end.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::calls::{ChildStatus, JobFile, JobRun};
use super::{invalid, Allocs, JobEntry};
use crate::call::CallError;
use crate::spec::Job;

/// How many finished (dead) children a parent keeps; at each launch the
/// oldest ones past it are purged.
pub const MAX_DEAD_CHILDREN: usize = 50;

/// What makes a job a child.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ChildOf {
    pub parent: String,
    /// A dispatched child's payload, written into the tasks that ask for
    /// it (`dispatch.rs`).
    pub payload: Vec<u8>,
    /// A dispatched child's meta, in its tasks' `NOMAD_META_*`.
    pub meta: BTreeMap<String, String>,
}

/// Seconds since the epoch of `time` (0 before it).
pub(super) fn unix_secs(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A child's spec: the parent's groups under the child's name.
pub(super) fn child_spec(parent: &Job, name: &str) -> Job {
    let mut spec = parent.clone();
    spec.name = name.to_string();
    spec.periodic = None;
    spec.parameterized = None;
    spec
}

impl Allocs {
    /// `job run` of a periodic or parameterized job: it is kept, and runs
    /// nothing itself. A version of it that ran as an ordinary job stops.
    pub(super) fn run_parent(
        &mut self,
        spec: Job,
        req: &JobFile,
        live: &[String],
        warnings: Vec<String>,
    ) -> JobRun {
        let now = (self.clock)();
        let previous = self.jobs.get(&spec.name);
        if let Some(job) = previous {
            if job.spec == spec && !job.stop_wanted {
                return JobRun {
                    job: spec.name.clone(),
                    alloc_ids: Vec::new(),
                    unchanged: true,
                    warnings,
                    unplaced: Vec::new(),
                };
            }
        }
        // Nomad keeps the last launch across a new version of the job.
        let last_launch = previous
            .and_then(|j| j.last_launch)
            .unwrap_or_else(|| unix_secs(now));
        for id in live {
            self.stop_alloc(id, "the job was updated");
        }
        let next_launch = spec
            .periodic
            .as_ref()
            .filter(|p| p.enabled)
            .and_then(|p| p.next_after(unix_secs(now)));
        if let Some(at) = next_launch {
            log::info!(
                "Job {}: next launch at {}",
                spec.name,
                crate::spec::format_utc(at)
            );
        }
        let index = self.next_job_index();
        let mut entry = JobEntry::submitted(spec.clone(), req, now, index);
        entry.last_launch = spec.periodic.is_some().then_some(last_launch);
        entry.next_launch = next_launch;
        self.jobs.insert(spec.name.clone(), entry);
        self.dirty = true;
        JobRun {
            job: spec.name,
            alloc_ids: Vec::new(),
            unchanged: false,
            warnings,
            unplaced: Vec::new(),
        }
    }

    /// Makes child `name` of `parent` with its allocs: the parent's groups
    /// under the child's name.
    pub(super) fn launch_child(
        &mut self,
        parent: &str,
        name: String,
        child: ChildOf,
    ) -> Result<JobRun, CallError> {
        if self.jobs.contains_key(&name) {
            return Err(CallError::new(
                crate::call::ErrorKind::FailedPrecondition,
                format!("job {name:?} exists already"),
            ));
        }
        let Some(entry) = self.jobs.get(parent) else {
            return Err(invalid(format!("no job {parent:?}")));
        };
        let now = (self.clock)();
        let mut spec = child_spec(&entry.spec, &name);
        // A dispatch's meta is the child's job-level meta, as in Nomad: a
        // group's or task's own keys still win.
        spec.extend_meta(&child.meta);
        let req = JobFile {
            file: entry.file.clone(),
            hcl: entry.hcl.clone(),
            inputs: entry.inputs.clone(),
            check_index: None,
        };
        // A child is placed as any job is: the node must meet its
        // constraints.
        let unplaced = self.unplaced(&spec);
        super::feasible::report_unplaced(&name, &unplaced);
        let mut created = Vec::new();
        for group in &spec.groups {
            for index in super::feasible::placed(group, &unplaced) {
                let id = self.new_alloc_id();
                let alloc = self.new_alloc(&id, &spec, group, index, &req, now, None);
                log::info!("Job {name}: alloc {id} for group {} [{index}]", group.name);
                self.allocs.insert(id.clone(), alloc);
                created.push(id);
            }
        }
        let index = self.next_job_index();
        let mut entry = JobEntry::submitted(spec, &req, now, index);
        entry.child = Some(child);
        self.jobs.insert(name.clone(), entry);
        self.forget_old_children(parent);
        self.dirty = true;
        Ok(JobRun {
            job: name,
            alloc_ids: created,
            unchanged: false,
            warnings: Vec::new(),
            unplaced,
        })
    }

    /// Purges the oldest finished children of `parent` past
    /// [`MAX_DEAD_CHILDREN`] (`runner.rs` forgets them once marked).
    fn forget_old_children(&mut self, parent: &str) {
        let mut dead: Vec<(SystemTime, String)> = self
            .jobs
            .values()
            .filter(|j| j.child.as_ref().is_some_and(|c| c.parent == parent))
            .filter(|j| !j.purge && self.job_state(j) == "dead")
            .map(|j| (j.submitted, j.name.clone()))
            .collect();
        if dead.len() <= MAX_DEAD_CHILDREN {
            return;
        }
        order::sort(&mut dead);
        let past = dead.len() - MAX_DEAD_CHILDREN;
        for (_, name) in dead.into_iter().take(past) {
            if let Some(job) = self.jobs.get_mut(&name) {
                log::info!("Job {name}: forgotten, past the {MAX_DEAD_CHILDREN} finished children its parent keeps");
                job.stop_wanted = true;
                job.purge = true;
            }
        }
    }

    /// `job periodic force`: launches the periodic job `name` now, whatever
    /// its schedule and `prohibit_overlap`.
    pub fn force_periodic(&mut self, name: &str) -> Result<JobRun, CallError> {
        let Some(job) = self.jobs.get(name) else {
            return Err(self.no_job(name));
        };
        let Some(periodic) = &job.spec.periodic else {
            return Err(invalid(format!("job {name:?} is not periodic")));
        };
        if job.stop_wanted {
            return Err(invalid(format!(
                "job {name:?} is stopped: run it again to launch it"
            )));
        }
        if !periodic.enabled {
            return Err(invalid(format!(
                "job {name:?} has periodic {{ enabled = false }}: nothing of it is launched"
            )));
        }
        let at = unix_secs((self.clock)());
        self.launch_periodic(name, at)
    }

    fn launch_periodic(&mut self, name: &str, at: i64) -> Result<JobRun, CallError> {
        let child = self.periodic_child_name(name, at);
        let run = self.launch_child(
            name,
            child,
            ChildOf {
                parent: name.to_string(),
                ..Default::default()
            },
        )?;
        if let Some(job) = self.jobs.get_mut(name) {
            job.last_launch = Some(at);
        }
        log::info!("Job {name}: launched {}", run.job);
        Ok(run)
    }

    /// The name of `parent`'s launch at second `at`: Nomad's
    /// `<parent>/periodic-<at>`, or, when a launch of that second exists
    /// already (a force in the second of a scheduled launch, or two
    /// forces in one second), `<parent>/periodic-<at>-<n>` with the
    /// smallest `n` from 2 that is free. Nomad would register the second
    /// launch over the first; here each launch is a job of its own.
    fn periodic_child_name(&self, parent: &str, at: i64) -> String {
        let first = format!("{parent}/periodic-{at}");
        if !self.jobs.contains_key(&first) {
            return first;
        }
        // At most one name per job is taken, so one of the first
        // `jobs.len() + 2` is free.
        (2..)
            .map(|n| format!("{first}-{n}"))
            .find(|name| !self.jobs.contains_key(name))
            .expect("a free name among more candidates than jobs")
    }

    /// At start: each periodic parent's next launch, and the one launch
    /// due while the agent was down (see the module's doc).
    pub(super) fn restore_schedule(&mut self) {
        let now = unix_secs((self.clock)());
        let parents: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.spec.periodic.as_ref().is_some_and(|p| p.enabled) && !j.stop_wanted)
            .map(|j| j.name.clone())
            .collect();
        for name in parents {
            let Some(job) = self.jobs.get_mut(&name) else {
                continue;
            };
            let Some(periodic) = &job.spec.periodic else {
                continue;
            };
            let missed = job
                .last_launch
                .and_then(|last| periodic.next_after(last))
                .is_some_and(|due| due <= now);
            job.next_launch = periodic.next_after(now);
            if missed {
                log::info!("Job {name}: a launch was due while the agent was down: launching it");
                if let Err(err) = self.launch_periodic(&name, now) {
                    log::warn!("Job {name}: the launch missed failed: {err}");
                }
            }
        }
    }

    /// The launches due by the clock's now, each parent's once; then each
    /// parent's next launch counts from the one due.
    pub fn launch_due(&mut self) {
        let now = unix_secs((self.clock)());
        let due: Vec<(String, i64)> = self
            .jobs
            .values()
            .filter(|j| !j.stop_wanted)
            .filter_map(|j| Some((j.name.clone(), j.next_launch.filter(|at| *at <= now)?)))
            .collect();
        for (name, at) in due {
            let Some(job) = self.jobs.get_mut(&name) else {
                continue;
            };
            let Some(periodic) = job.spec.periodic.clone() else {
                continue;
            };
            job.next_launch = periodic.next_after(at);
            if periodic.prohibit_overlap && self.child_runs(&name) {
                log::info!(
                    "Job {name}: launch at {} skipped: a child still runs (prohibit_overlap)",
                    crate::spec::format_utc(at)
                );
                continue;
            }
            if let Err(err) = self.launch_periodic(&name, at) {
                log::warn!("Job {name}: launch failed: {err}");
            }
        }
    }

    /// When the loop must wake up for the next periodic launch, `now`
    /// being the monotonic clock's reading of the wall clock's now.
    pub fn next_launch_wakeup(&self, now: Instant) -> Option<Instant> {
        let next = self
            .jobs
            .values()
            .filter(|j| !j.stop_wanted)
            .filter_map(|j| j.next_launch)
            .min()?;
        let wall = (self.clock)()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let at = Duration::from_secs(u64::try_from(next).unwrap_or(0));
        Some(now + at.saturating_sub(wall))
    }

    /// Whether a child of `parent` has an alloc not done yet.
    fn child_runs(&self, parent: &str) -> bool {
        self.allocs.values().any(|a| {
            !a.status.is_terminal()
                && self
                    .jobs
                    .get(&a.job)
                    .and_then(|j| j.child.as_ref())
                    .is_some_and(|c| c.parent == parent)
        })
    }

    /// The children of `parent`, oldest first, as `job status` lists them.
    pub(super) fn children_of(&self, parent: &str) -> Vec<ChildStatus> {
        let mut children: Vec<ChildStatus> = self
            .jobs
            .values()
            .filter(|j| j.child.as_ref().is_some_and(|c| c.parent == parent))
            .map(|j| ChildStatus {
                name: j.name.clone(),
                status: self.job_state(j).to_string(),
                submitted: Some(j.submitted),
            })
            .collect();
        order::sort_by_key(&mut children, |c| c.submitted);
        children
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;
    use crate::task::calls::JobFile;

    fn job_file(hcl: &str) -> JobFile {
        JobFile {
            file: "nightly.hcl".into(),
            hcl: hcl.into(),
            inputs: Default::default(),
            check_index: None,
        }
    }

    const NIGHTLY: &str = r#"
job "nightly" {
  type = "batch"
  periodic {
    crons = ["0 3 * * *"]
    prohibit_overlap = true
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
"#;

    /// 2026-11-28T02:59:00Z.
    const BEFORE_THREE: i64 = 1_795_834_740;

    fn allocs(clock: fn() -> SystemTime) -> (tempfile_dir::Dir, Allocs) {
        let dir = tempfile_dir::Dir::new();
        let mut allocs = Allocs::new(dir.path(), &dir.path().join("sock"));
        allocs.clock = clock;
        (dir, allocs)
    }

    fn children(allocs: &Allocs) -> Vec<String> {
        allocs
            .children_of("nightly")
            .into_iter()
            .map(|c| c.name)
            .collect()
    }

    mod tempfile_dir {
        use std::path::{Path, PathBuf};
        use std::sync::atomic::{AtomicU32, Ordering};

        static COUNT: AtomicU32 = AtomicU32::new(0);

        pub struct Dir(PathBuf);

        impl Dir {
            pub fn new() -> Dir {
                let n = COUNT.fetch_add(1, Ordering::Relaxed);
                let path = std::env::temp_dir()
                    .join(format!("csi-agent-periodic-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }

            pub fn path(&self) -> &Path {
                &self.0
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn a_periodic_parent_runs_nothing_and_launches_on_its_schedule() {
        static NOW: AtomicI64 = AtomicI64::new(BEFORE_THREE);
        fn clock() -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(NOW.load(Ordering::SeqCst) as u64)
        }
        let (_dir, mut allocs) = allocs(clock);
        let run = allocs.run_job(&job_file(NIGHTLY)).unwrap();
        assert!(run.alloc_ids.is_empty(), "the parent itself never runs");
        assert!(allocs.allocs.is_empty());
        let status = &allocs.status("nightly").unwrap()[0];
        assert_eq!(status.next_launch, Some(BEFORE_THREE + 60));
        // Not yet due.
        NOW.store(BEFORE_THREE + 59, Ordering::SeqCst);
        allocs.launch_due();
        assert!(children(&allocs).is_empty());
        // The wake-up is the launch's second, a second from now.
        let now = Instant::now();
        assert_eq!(
            allocs.next_launch_wakeup(now),
            Some(now + Duration::from_secs(1))
        );
        NOW.store(BEFORE_THREE + 60, Ordering::SeqCst);
        allocs.launch_due();
        let three = BEFORE_THREE + 60;
        assert_eq!(children(&allocs), [format!("nightly/periodic-{three}")]);
        let child = &allocs.jobs[&format!("nightly/periodic-{three}")];
        assert_eq!(child.spec.groups, allocs.jobs["nightly"].spec.groups);
        assert_eq!(allocs.allocs.len(), 1);
        assert_eq!(allocs.jobs["nightly"].last_launch, Some(three));
        assert_eq!(allocs.jobs["nightly"].next_launch, Some(three + 86_400));
    }

    #[test]
    fn prohibit_overlap_skips_a_launch_while_a_child_runs() {
        static NOW: AtomicI64 = AtomicI64::new(BEFORE_THREE);
        fn clock() -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(NOW.load(Ordering::SeqCst) as u64)
        }
        let (_dir, mut allocs) = allocs(clock);
        allocs.run_job(&job_file(NIGHTLY)).unwrap();
        let forced = allocs.force_periodic("nightly").unwrap();
        assert_eq!(forced.job, format!("nightly/periodic-{BEFORE_THREE}"));
        // The forced child's alloc is pending: it runs, for overlap.
        NOW.store(BEFORE_THREE + 60, Ordering::SeqCst);
        allocs.launch_due();
        assert_eq!(children(&allocs).len(), 1, "{:?}", children(&allocs));
        assert_eq!(
            allocs.jobs["nightly"].next_launch,
            Some(BEFORE_THREE + 60 + 86_400)
        );
    }

    #[test]
    fn a_force_in_the_second_of_a_scheduled_launch_is_a_child_of_its_own() {
        static NOW: AtomicI64 = AtomicI64::new(BEFORE_THREE);
        fn clock() -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(NOW.load(Ordering::SeqCst) as u64)
        }
        let (_dir, mut allocs) = allocs(clock);
        let every_second = NIGHTLY
            .replace("0 3 * * *", "* * * * * * *")
            .replace("prohibit_overlap = true", "");
        allocs.run_job(&job_file(&every_second)).unwrap();
        let at = BEFORE_THREE + 1;
        NOW.store(at, Ordering::SeqCst);
        allocs.launch_due();
        let scheduled = format!("nightly/periodic-{at}");
        assert_eq!(children(&allocs), std::slice::from_ref(&scheduled));
        // Forced twice in the second the schedule launched in.
        let forced = allocs.force_periodic("nightly").unwrap();
        assert_eq!(forced.job, format!("{scheduled}-2"));
        assert_eq!(forced.alloc_ids.len(), 1);
        let again = allocs.force_periodic("nightly").unwrap();
        assert_eq!(again.job, format!("{scheduled}-3"));
        assert_eq!(allocs.jobs["nightly"].last_launch, Some(at));
        // A force first, then the schedule's launch of the same second.
        let next = at + 1;
        NOW.store(next, Ordering::SeqCst);
        let forced = allocs.force_periodic("nightly").unwrap();
        assert_eq!(forced.job, format!("nightly/periodic-{next}"));
        allocs.launch_due();
        let names = children(&allocs);
        assert!(
            names.contains(&format!("nightly/periodic-{next}-2")),
            "the scheduled launch was lost: {names:?}"
        );
        assert_eq!(names.len(), 5, "{names:?}");
        assert_eq!(allocs.allocs.len(), 5);
    }

    #[test]
    fn a_restart_launches_a_missed_launch_once_and_never_again() {
        static NOW: AtomicI64 = AtomicI64::new(BEFORE_THREE);
        fn clock() -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(NOW.load(Ordering::SeqCst) as u64)
        }
        let (dir, mut allocs) = allocs(clock);
        allocs.run_job(&job_file(NIGHTLY)).unwrap();
        let (jobs, allocs_pb) = (allocs.jobs_to_proto(), allocs.allocs_to_proto());
        // Down over 3:00 and the next two nights.
        NOW.store(BEFORE_THREE + 2 * 86_400 + 3600, Ordering::SeqCst);
        let mut again = Allocs::new(dir.path(), &dir.path().join("sock"));
        again.clock = clock;
        again.restore(&jobs, &allocs_pb);
        let now = BEFORE_THREE + 2 * 86_400 + 3600;
        assert_eq!(children(&again), [format!("nightly/periodic-{now}")]);
        assert_eq!(again.jobs["nightly"].last_launch, Some(now));
        // Restarted again at once: the launch is in the snapshot.
        let (jobs, allocs_pb) = (again.jobs_to_proto(), again.allocs_to_proto());
        let mut third = Allocs::new(dir.path(), &dir.path().join("sock"));
        third.clock = clock;
        third.restore(&jobs, &allocs_pb);
        assert_eq!(children(&third), [format!("nightly/periodic-{now}")]);
        assert_eq!(
            third.jobs[&format!("nightly/periodic-{now}")]
                .child
                .as_ref()
                .unwrap()
                .parent,
            "nightly"
        );
        assert_eq!(third.allocs.len(), 1);
    }

    #[test]
    fn a_parent_keeps_its_last_max_dead_children_finished_children() {
        static NOW: AtomicI64 = AtomicI64::new(BEFORE_THREE);
        fn clock() -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(NOW.load(Ordering::SeqCst) as u64)
        }
        let (_dir, mut allocs) = allocs(clock);
        allocs.run_job(&job_file(NIGHTLY)).unwrap();
        let mut launched = Vec::new();
        for n in 0..MAX_DEAD_CHILDREN as i64 + 4 {
            NOW.store(BEFORE_THREE + n, Ordering::SeqCst);
            let run = allocs.force_periodic("nightly").unwrap();
            for id in &run.alloc_ids {
                allocs.allocs.get_mut(id).unwrap().status = super::super::AllocStatus::Complete;
            }
            launched.push(run.job);
        }
        let purged: Vec<&String> = launched
            .iter()
            .filter(|name| allocs.jobs[name.as_str()].purge)
            .collect();
        // The last launch found MAX_DEAD_CHILDREN + 3 finished before it.
        assert_eq!(purged, launched.iter().take(3).collect::<Vec<_>>());
        assert!(!allocs.jobs["nightly"].purge);
    }

    #[test]
    fn a_restart_before_the_first_launch_is_due_launches_nothing() {
        static NOW: AtomicI64 = AtomicI64::new(BEFORE_THREE);
        fn clock() -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(NOW.load(Ordering::SeqCst) as u64)
        }
        let (dir, mut allocs) = allocs(clock);
        allocs.run_job(&job_file(NIGHTLY)).unwrap();
        NOW.store(BEFORE_THREE + 30, Ordering::SeqCst);
        let mut again = Allocs::new(dir.path(), &dir.path().join("sock"));
        again.clock = clock;
        again.restore(&allocs.jobs_to_proto(), &allocs.allocs_to_proto());
        assert!(children(&again).is_empty());
        assert_eq!(again.jobs["nightly"].next_launch, Some(BEFORE_THREE + 60));
    }

    #[test]
    fn a_stopped_or_disabled_parent_launches_nothing() {
        static NOW: AtomicI64 = AtomicI64::new(BEFORE_THREE);
        fn clock() -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(NOW.load(Ordering::SeqCst) as u64)
        }
        let (_dir, mut allocs) = allocs(clock);
        let disabled = NIGHTLY.replace("prohibit_overlap = true", "enabled = false");
        allocs.run_job(&job_file(&disabled)).unwrap();
        assert_eq!(allocs.jobs["nightly"].next_launch, None);
        let err = allocs.force_periodic("nightly").unwrap_err();
        assert!(err.to_string().contains("enabled = false"), "{err}");
        allocs.run_job(&job_file(NIGHTLY)).unwrap();
        allocs.stop_job("nightly", false).unwrap();
        NOW.store(BEFORE_THREE + 60, Ordering::SeqCst);
        allocs.launch_due();
        assert!(children(&allocs).is_empty());
        assert!(allocs.force_periodic("nightly").is_err());
    }
}
