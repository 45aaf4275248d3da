//! The starter: a small pool of threads that does the slow part of every
//! task's start off the main loop, for every driver, and the slow part of
//! its end (removing a done task's control group, a purged alloc's dir),
//! so that a job of thousands of allocs does not make the control API,
//! claims and heartbeats wait for its tasks' forks, cgroups and dirs.
//!
//! The loop plans a start from its own state ([`StartPlan`], owned
//! values), marks the task `starting` and hands the plan over
//! ([`Starter::submit`]); a thread carries it out (`launch::prepare`: the
//! task dir, artifacts and templates in the prepare helper's process
//! (`prepare/`), mounts, the control group, the spawn, or a container's
//! spec) and reports what it started, or why it could not, on
//! a channel the loop selects on ([`StartReport`], taken in by
//! [`Allocs::started`]). At most [`IN_FLIGHT`] starts are handed over and
//! not yet reported: the rest wait as pending tasks in the loop's state,
//! never in the channel, so a `job stop` that comes meanwhile finds them
//! there and they never start.
//!
//! A task stopped while its start is on a thread stays `starting` until
//! the report comes; the loop then takes the process in and stops it as
//! any running task (its kill signal, SIGKILL after its `kill_timeout`),
//! so nothing it started is left behind. A report that finds no task
//! waiting for it (which the loop's states do not allow) has its process
//! killed at once.
//!
//! An agent killed while starts are on threads: each child writes its pid
//! file (`exec`) before anything of the task runs, and the snapshot keeps
//! a `starting` task as pending, so the next agent adopts the process of
//! its pid file, or starts the task again when there is none; its control
//! group is made afresh, which kills anything left in it. A container is
//! found again by its name. No task runs twice.
//!
//! A running task's changed templates are rendered again on the same
//! threads ([`Starter::rerender`], through the prepare helper too), so
//! that no template renders on the loop; the report says which changed.
//!
//! Cleanups and re-renders share the bound: those that find no room wait
//! in a queue of the loop's and go before new starts. A cleanup reports nothing but its
//! end. Until it runs, what is left of a done task in its group runs on.
//! An agent killed before then leaves the group (or the purged alloc's
//! dir) behind; the next one removes it at start-up if it is empty and no
//! task it runs owns it (`leftovers.rs`).
//!
//! Starts whose task has `artifact` blocks have a pool of their own
//! ([`Lane::Fetch`], threads `task-fetch-<n>`, the same bounds): a fetch
//! waits on a server outside the host, up to `http_read_timeout` for one
//! that never answers, and must not hold a thread other starts need. The
//! fetch itself runs in the prepare helper; the thread holds while it
//! waits for it. The cleanups go with the other starts.
//!
//! The threads (`task-start-<n>`) start with the first work; at
//! shutdown the queue is closed, the starts under way are waited for and
//! taken in (so the last snapshot has their pids), the cleanups left are
//! done on the loop, and the threads are joined within the shutdown's
//! deadline.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::PathBuf;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use super::cgroup;
use super::driver::Handle;
use super::exit::Exit;
use super::launch::{self, Runs, StartFailure, StartPlan, Started};
use super::lifecycle::Role;
use super::{exec, prepare, Alloc, Allocs, PluginEffect, Process, TaskState};
use crate::plugin::PluginSpec;
use crate::spec::{ChangeMode, TaskTemplate};
use crate::sys::cgroup::Group;

/// How many threads start tasks at once. A start is mostly system calls
/// that wait on the kernel (directories, mounts, cgroup files, the fork of
/// a large process): four overlap those waits on a host of a few cores
/// without swamping it, as the plugins' worker pools do.
pub(super) const STARTER_THREADS: usize = 4;

/// How much work (starts and cleanups) may be handed to the threads and
/// not yet reported: enough that a loop turn takes several reports into
/// one snapshot, few enough that a `job stop` waits for little more than
/// the threads hold. Measured with a 2,000-alloc start (debug build, 2
/// cores): 64 started it 15% sooner than 16, but the loop's turns grew
/// and the control API's worst wait more than doubled (0.5 s).
pub(super) const IN_FLIGHT: usize = 4 * STARTER_THREADS;

/// A start, a re-render or a cleanup carried out, for the loop.
pub struct StartReport {
    pub(super) alloc: String,
    pub(super) task: String,
    /// The pool that did it, whose room it frees.
    pub(super) lane: Lane,
    pub(super) outcome: Outcome,
}

/// What a thread's work came to.
pub(super) enum Outcome {
    /// What the start made, or why it failed.
    Start(Result<Started, StartFailure>),
    /// The change mode and splay of each template a re-render changed,
    /// or why it failed.
    Rerender(Result<Vec<(ChangeMode, Duration)>, String>),
    Cleanup,
}

/// A running task's templates to render again (`rerender.rs`), with what
/// the prepare helper needs.
pub(super) struct RerenderPlan {
    pub alloc: String,
    pub task: String,
    pub templates: Vec<TaskTemplate>,
    pub task_dir: PathBuf,
    pub env: BTreeMap<String, String>,
    pub node: BTreeMap<String, String>,
    pub services: Vec<crate::nomad_template::NomadService>,
}

impl RerenderPlan {
    /// Renders in the prepare helper, waiting for it on this thread.
    fn carry_out(&self) -> Result<Vec<(ChangeMode, Duration)>, String> {
        let changed = prepare::rerender(
            &self.alloc,
            &self.task,
            &self.templates,
            &self.task_dir,
            self.env.clone(),
            &self.node,
            &self.services,
        )?;
        Ok(changed
            .into_iter()
            .filter_map(|i| self.templates.get(i))
            .map(|t| (t.change_mode, t.splay))
            .collect())
    }
}

/// Which of the starter's two pools does a start. One whose task has
/// artifacts waits on servers outside the host, as long as
/// `http_read_timeout` for a server that never answers: it has threads of
/// its own, so that it never holds one that other starts, a CSI plugin's
/// among them, need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lane {
    /// Starts without artifacts, and the cleanups.
    Start,
    /// Starts that fetch artifacts.
    Fetch,
}

impl Lane {
    pub(super) fn of(task: &crate::spec::Task) -> Lane {
        if task.artifacts.is_empty() {
            Lane::Start
        } else {
            Lane::Fetch
        }
    }
}

/// What the threads do.
enum Work {
    Start(Box<StartPlan>),
    Rerender(Box<RerenderPlan>),
    /// A done task's control group: what is left in it is killed, and it
    /// is removed.
    RemoveGroup {
        alloc: String,
        task: String,
        group: Group,
    },
    /// A purged alloc's dir.
    RemoveDir(PathBuf),
}

impl Work {
    /// Does a cleanup.
    fn clean(self) {
        match self {
            Work::Start(_) | Work::Rerender(_) => {}
            Work::RemoveGroup { alloc, task, group } => cgroup::remove(&alloc, &task, &group),
            Work::RemoveDir(dir) => {
                if let Err(err) = fs::remove_dir_all(&dir) {
                    log::warn!("Cannot remove {}: {err}", dir.display());
                }
            }
        }
    }
}

/// One pool: its queue, its threads, and the work handed over.
struct Pool {
    lane: Lane,
    /// `None` once closed (at shutdown).
    queue: Option<Sender<Work>>,
    jobs: Receiver<Work>,
    threads: Vec<JoinHandle<()>>,
    /// Work handed over and not yet reported.
    in_flight: usize,
}

impl Pool {
    fn new(lane: Lane) -> Pool {
        let (queue, jobs) = bounded(IN_FLIGHT);
        Pool {
            lane,
            queue: Some(queue),
            jobs,
            threads: Vec::new(),
            in_flight: 0,
        }
    }

    fn has_room(&self) -> bool {
        self.queue.is_some() && self.in_flight < IN_FLIGHT
    }

    /// Hands `work` to the threads, or gives it back when there is no room.
    fn hand_over(&mut self, work: Work, reports: &Sender<StartReport>) -> Result<(), Work> {
        if !self.has_room() {
            return Err(work);
        }
        self.start_threads(reports);
        let Some(queue) = &self.queue else {
            return Err(work);
        };
        queue.try_send(work).map_err(|e| e.into_inner())?;
        self.in_flight += 1;
        Ok(())
    }

    /// Starts the threads, the first time.
    fn start_threads(&mut self, reports: &Sender<StartReport>) {
        let prefix = match self.lane {
            Lane::Start => "task-start",
            Lane::Fetch => "task-fetch",
        };
        while self.threads.len() < STARTER_THREADS {
            let (jobs, reports, lane) = (self.jobs.clone(), reports.clone(), self.lane);
            let name = format!("{prefix}-{}", self.threads.len());
            match thread::Builder::new()
                .name(name.clone())
                .spawn(move || work(&jobs, &reports, lane))
            {
                Ok(handle) => self.threads.push(handle),
                Err(err) => {
                    log::error!("Cannot start thread {name}: {err}");
                    break;
                }
            }
        }
    }

    /// Closes the queue: the threads end after the work they hold. The
    /// cleanups still queued are returned; the starts still queued are
    /// dropped (their tasks stay `starting`, which the snapshot keeps as
    /// pending), and so are the re-renders (their tasks keep the files
    /// they have until they start again).
    fn close(&mut self) -> Vec<Work> {
        self.queue = None;
        let mut left = Vec::new();
        while let Ok(work) = self.jobs.try_recv() {
            self.in_flight = self.in_flight.saturating_sub(1);
            if matches!(work, Work::RemoveGroup { .. } | Work::RemoveDir(_)) {
                left.push(work);
            }
        }
        left
    }
}

/// The two pools, and the cleanups waiting for room in the first.
pub(super) struct Starter {
    starts: Pool,
    fetches: Pool,
    /// Cleanups and re-renders that found no room yet.
    cleanups: VecDeque<Work>,
    /// The tasks (alloc, task) whose re-render is on a thread: the next
    /// waits for it, so that renders of one task are written in order.
    rerendering: BTreeSet<(String, String)>,
    reports_tx: Sender<StartReport>,
    reports: Receiver<StartReport>,
}

impl Starter {
    pub(super) fn new() -> Starter {
        let (reports_tx, reports) = unbounded();
        Starter {
            starts: Pool::new(Lane::Start),
            fetches: Pool::new(Lane::Fetch),
            cleanups: VecDeque::new(),
            rerendering: BTreeSet::new(),
            reports_tx,
            reports,
        }
    }

    /// Where the reports arrive.
    pub(super) fn reports(&self) -> Receiver<StartReport> {
        self.reports.clone()
    }

    fn pool(&self, lane: Lane) -> &Pool {
        match lane {
            Lane::Start => &self.starts,
            Lane::Fetch => &self.fetches,
        }
    }

    fn pool_mut(&mut self, lane: Lane) -> &mut Pool {
        match lane {
            Lane::Start => &mut self.starts,
            Lane::Fetch => &mut self.fetches,
        }
    }

    /// Whether a start of `lane` may be handed over now.
    pub(super) fn has_room(&self, lane: Lane) -> bool {
        self.pool(lane).has_room()
    }

    /// Work handed over to either pool and not yet reported.
    fn in_flight(&self) -> usize {
        self.starts.in_flight + self.fetches.in_flight
    }

    /// Hands `plan` to the threads of its lane; whether they took it (not
    /// when there is no room: see [`Starter::has_room`]).
    pub(super) fn submit(&mut self, plan: StartPlan) -> bool {
        let reports = self.reports_tx.clone();
        self.pool_mut(Lane::of(&plan.spec))
            .hand_over(Work::Start(Box::new(plan)), &reports)
            .is_ok()
    }

    /// Removes a done task's group on a thread, once there is room.
    pub(super) fn remove_group(&mut self, alloc: &str, task: &str, group: Group) {
        self.cleanups.push_back(Work::RemoveGroup {
            alloc: alloc.to_string(),
            task: task.to_string(),
            group,
        });
        self.pump();
    }

    /// Removes a purged alloc's dir on a thread, once there is room.
    pub(super) fn remove_dir(&mut self, dir: PathBuf) {
        self.cleanups.push_back(Work::RemoveDir(dir));
        self.pump();
    }

    /// Renders a running task's templates again on a thread, once there is
    /// room and no other render of the task is under way; its report says
    /// which changed. One waiting for the same task is replaced: the newer
    /// templates are the task's.
    pub(super) fn rerender(&mut self, plan: RerenderPlan) {
        self.cleanups.retain(
            |w| !matches!(w, Work::Rerender(p) if p.alloc == plan.alloc && p.task == plan.task),
        );
        self.cleanups.push_back(Work::Rerender(Box::new(plan)));
        self.pump();
    }

    /// Hands over the cleanups and re-renders that wait, in their order,
    /// as far as there is room; a re-render of a task whose previous one
    /// is under way keeps its place.
    pub(super) fn pump(&mut self) {
        let mut held = VecDeque::new();
        while let Some(work) = self.cleanups.pop_front() {
            let key = match &work {
                Work::Rerender(p) => Some((p.alloc.clone(), p.task.clone())),
                _ => None,
            };
            if key.as_ref().is_some_and(|k| self.rerendering.contains(k)) {
                held.push_back(work);
                continue;
            }
            match self.starts.hand_over(work, &self.reports_tx) {
                Ok(()) => self.rerendering.extend(key),
                Err(work) => {
                    self.cleanups.push_front(work);
                    break;
                }
            }
        }
        while let Some(work) = held.pop_back() {
            self.cleanups.push_front(work);
        }
    }

    /// A re-render of task `task` of `alloc` came in: the next may go.
    pub(super) fn rerendered(&mut self, alloc: &str, task: &str) {
        self.rerendering
            .remove(&(alloc.to_string(), task.to_string()));
    }

    /// A report of `lane` came in.
    pub(super) fn received(&mut self, lane: Lane) {
        let pool = self.pool_mut(lane);
        pool.in_flight = pool.in_flight.saturating_sub(1);
    }

    /// Closes both queues. The cleanups not handed over yet are returned,
    /// for the caller to do.
    fn close(&mut self) -> Vec<Work> {
        let mut left: Vec<Work> = self
            .cleanups
            .drain(..)
            .filter(|w| !matches!(w, Work::Rerender(_)))
            .collect();
        left.extend(self.starts.close());
        left.extend(self.fetches.close());
        left
    }

    /// Both pools' threads, for the caller to join.
    fn take_threads(&mut self) -> Vec<JoinHandle<()>> {
        let mut threads = std::mem::take(&mut self.starts.threads);
        threads.append(&mut self.fetches.threads);
        threads
    }
}

/// A thread of the pool: does the work handed over until the queue is
/// closed.
fn work(jobs: &Receiver<Work>, reports: &Sender<StartReport>, lane: Lane) {
    for work in jobs {
        let report = match work {
            Work::Start(plan) => StartReport {
                alloc: plan.alloc.clone(),
                task: plan.spec.name.clone(),
                lane,
                outcome: Outcome::Start(launch::prepare(*plan)),
            },
            Work::Rerender(plan) => StartReport {
                outcome: Outcome::Rerender(plan.carry_out()),
                alloc: plan.alloc,
                task: plan.task,
                lane,
            },
            cleanup => {
                cleanup.clean();
                StartReport {
                    alloc: String::new(),
                    task: String::new(),
                    lane,
                    outcome: Outcome::Cleanup,
                }
            }
        };
        // With the loop gone, a started task outlives the agent, as every
        // task does: the next one adopts it by its pid file.
        let _ = reports.send(report);
    }
}

impl Allocs {
    /// Hands the start of task `i` of `alloc` to the starter, which
    /// reports to [`Allocs::started`]; the task is `starting` meanwhile. A
    /// start that cannot be planned counts as an exit. Returns whether
    /// that changed what the snapshot keeps: a start handed over does not
    /// (a `starting` task is kept as pending), so the turn writes no
    /// snapshot for it; with the starter full, the task waits as it is.
    pub(super) fn start_task(&mut self, alloc: &mut Alloc, i: usize, now: Instant) -> bool {
        if !self.starter.has_room(Lane::of(&alloc.group.tasks[i])) {
            return false;
        }
        match self.plan_start(alloc, i) {
            Ok(plan) => {
                if self.starter.submit(plan) {
                    alloc.tasks[i].state = TaskState::Starting;
                }
                false
            }
            Err(why) => {
                log::warn!("Alloc {}: task {}: {why}", alloc.id, alloc.tasks[i].name);
                self.exited(alloc, i, Exit::StartFailed(why), now);
                true
            }
        }
    }

    /// Task `i` of `alloc` runs, through `handle`; `plugin` is the spec
    /// to register for a plugin task, `notes` what its events say of the
    /// start.
    pub(super) fn running(
        &mut self,
        alloc: &mut Alloc,
        i: usize,
        handle: Handle,
        plugin: Option<(PluginSpec, Duration)>,
        notes: Vec<String>,
        now: Instant,
    ) {
        let what = handle.describe();
        let task = &mut alloc.tasks[i];
        for note in notes {
            task.event("driver", note);
        }
        task.process = Some(Process {
            handle,
            signal_at: None,
            kill_at: None,
            killed: false,
        });
        task.state = TaskState::Running;
        let driver = alloc.group.tasks[i].driver.as_str();
        crate::metrics::TASK_STARTS.inc(&[driver]);
        task.event("started", format!("started ({what})"));
        log::info!("Alloc {}: task {} started ({what})", alloc.id, task.name);
        if let (Some(task_plugin), Some((spec, health_timeout))) = (&mut task.plugin, plugin) {
            task_plugin.healthy = false;
            task_plugin.deadline = Some(now + health_timeout);
            self.effects.push(PluginEffect::Start {
                alloc: alloc.id.clone(),
                task: task.name.clone(),
                spec,
                health_timeout,
            });
        }
    }

    /// Where the starter's reports arrive, for the main loop to hand to
    /// [`Allocs::started`].
    pub fn start_reports(&self) -> Receiver<StartReport> {
        self.starter.reports()
    }

    /// Shutdown: no more starts; the starts under way are waited for
    /// until `deadline` and taken in, so that the last snapshot has their
    /// pids; the cleanups not handed over are done here. Returns the starter's threads, which end once their starts
    /// are done, for the caller to join.
    pub fn finish_starts(&mut self, deadline: Instant) -> Vec<JoinHandle<()>> {
        let cleanups = self.starter.close();
        let reports = self.starter.reports();
        while self.starter.in_flight() > 0 {
            match reports.recv_deadline(deadline) {
                Ok(report) => self.started(report, Instant::now()),
                Err(_) => {
                    log::warn!(
                        "{} task starts did not end in time; the next agent finds their tasks by their pid files",
                        self.starter.in_flight()
                    );
                    break;
                }
            }
        }
        for cleanup in cleanups {
            cleanup.clean();
        }
        self.starter.take_threads()
    }

    /// Takes in a start the starter carried out: the task runs (or failed
    /// to start, which counts as an exit). A task stopped meanwhile is
    /// stopped now like any running one.
    pub fn started(&mut self, report: StartReport, now: Instant) {
        self.starter.received(report.lane);
        let StartReport {
            alloc: id,
            task,
            outcome,
            ..
        } = report;
        let outcome = match outcome {
            Outcome::Start(outcome) => outcome,
            Outcome::Rerender(changed) => {
                self.starter.rerendered(&id, &task);
                return self.rerendered(&id, &task, changed, now);
            }
            // A cleanup ended: its room is taken by the next turn's step.
            Outcome::Cleanup => return,
        };
        let Some(mut alloc) = self.allocs.remove(&id) else {
            return discard(&id, &task, outcome);
        };
        match alloc.tasks.iter().position(|t| t.name == task) {
            Some(i) if alloc.tasks[i].state == TaskState::Starting => {
                match outcome {
                    Ok(started) => {
                        let handle = match started.runs {
                            Runs::Process(child) => Handle::spawned(child),
                            Runs::Container(run) => {
                                let handle = Handle::Container {
                                    name: run.name.clone(),
                                    run: run.run,
                                    pid: 0,
                                    start_ticks: 0,
                                    stopping: run.stopping.clone(),
                                };
                                self.docker.run(*run);
                                handle
                            }
                        };
                        self.running(&mut alloc, i, handle, started.plugin, started.notes, now);
                        // Its SIGCHLD may have come before this report,
                        // when the loop had no process to look at.
                        let ended = alloc.tasks[i]
                            .process
                            .as_mut()
                            .and_then(|p| p.handle.poll());
                        if let Some(exit) = ended {
                            log::info!("Alloc {id}: task {task} {}", exit.describe());
                            self.exited(&mut alloc, i, exit, now);
                        }
                        // A task restarted on any exit may wait for the
                        // snapshot to have its pid: an agent killed
                        // meanwhile finds the process by its pid file, or
                        // starts the task again, which its policy would do
                        // anyway. One an exit 0 completes needs its pid
                        // kept now, so that the next agent takes its exit
                        // record rather than running it twice.
                        if Role::in_group(&alloc.group, i).restarts_on_success(alloc.group.job_type)
                        {
                            self.unsaved_starts = true;
                        } else {
                            self.dirty = true;
                        }
                    }
                    Err(why) => {
                        let exit = why.into_exit();
                        log::warn!("Alloc {id}: task {task}: {}", exit.describe());
                        self.exited(&mut alloc, i, exit, now);
                        self.dirty = true;
                    }
                }
            }
            _ => discard(&id, &task, outcome),
        }
        self.allocs.insert(id, alloc);
    }
}

/// A start no task waits for: what it started is killed.
fn discard(alloc: &str, task: &str, outcome: Result<Started, StartFailure>) {
    let Ok(started) = outcome else { return };
    log::warn!("Alloc {alloc}: task {task} started, but nothing waits for it: killing it");
    match started.runs {
        Runs::Process(mut child) => {
            let _ = exec::signal_group(child.id(), libc::SIGKILL);
            let _ = child.wait();
        }
        // Never handed to the driver: no container was made.
        Runs::Container(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn cleanups_past_the_bound_wait_their_turn_and_every_one_is_done() {
        let dir = std::env::temp_dir().join(format!("csi-agent-starter-{}", std::process::id()));
        let dirs: Vec<PathBuf> = (0..IN_FLIGHT + 3)
            .map(|i| dir.join(i.to_string()))
            .collect();
        for d in &dirs {
            fs::create_dir_all(d.join("inner")).unwrap();
        }
        let mut starter = Starter::new();
        for d in &dirs {
            starter.remove_dir(d.clone());
        }
        // The bound holds: the rest wait in the loop's queue.
        assert_eq!(starter.starts.in_flight, IN_FLIGHT);
        assert_eq!(starter.cleanups.len(), 3);
        assert!(!starter.has_room(Lane::Start));
        let reports = starter.reports();
        while starter.starts.in_flight > 0 || !starter.cleanups.is_empty() {
            let report = reports
                .recv_timeout(Duration::from_secs(10))
                .expect("a cleanup's end");
            assert!(matches!(report.outcome, Outcome::Cleanup));
            starter.received(Lane::Start);
            starter.pump();
        }
        assert!(dirs.iter().all(|d| !d.exists()));
        // Closed, it takes nothing more, and its threads end.
        assert!(starter.close().is_empty());
        assert!(!starter.has_room(Lane::Start));
        for thread in starter.take_threads() {
            thread.join().unwrap();
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
