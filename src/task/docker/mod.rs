//! The `docker` driver: tasks run as containers of the host's container
//! engine (dockerd, or podman's service of the same API), as Nomad's
//! docker driver runs them.
//!
//! The main loop never waits on the engine. Each start is a thread of its
//! own ([`Docker::run`]) that makes the engine's calls one after the other
//! and tells the loop what happened ([`ContainerEvent`]): an earlier
//! container of the task's name is adopted if it runs and removed if not
//! (so a task is never started twice, even by an agent killed between the
//! engine's create and its own snapshot: the engine refuses a second
//! container of one name); the image is pulled when missing (or
//! `force_pull`), its progress told at most every [`PULL_REPORT`]; the container is created, started and found (its init's
//! pid on the host, which the writers' guard may kill); then the thread
//! copies the container's output to the task's logs until it ends, takes
//! its exit code (and whether the OOM killer ended it), removes it, and
//! reports the exit. Signals go by the container's name on short threads
//! of their own. After an agent restart, [`Docker::adopt`] finds a running
//! task's container by its name and watches it again; [`Docker::list_own`]
//! finds the containers this agent made that no task has any more, for
//! the loop to remove.
//!
//! Every thread is kept and joined once done ([`Docker::reap_threads`]).
//! `container.rs` turns a task into what the engine is asked to create.

mod container;
mod events;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, UNIX_EPOCH};

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::exit::Exit;
use crate::docker::{Auth, Container, ContainerSpec, Engine};

pub(super) use container::{container_spec, docker_strings, Inputs, Privileges, VolumeBind};

/// The label every container of this agent carries: its data dir, which
/// tells it from another agent's on the same engine.
pub(super) const LABEL_AGENT: &str = "csi-agent.data_dir";
pub(super) const LABEL_ALLOC: &str = "csi-agent.alloc";
pub(super) const LABEL_JOB: &str = "csi-agent.job";
pub(super) const LABEL_TASK: &str = "csi-agent.task";

/// How often at most a start tells the loop how far its image's pull is
/// (its first news, once a layer's size is known, at once).
pub(super) const PULL_REPORT: Duration = Duration::from_secs(1);

/// How long after a container's SIGKILL exit the engine may still learn
/// that the OOM killer sent it.
const OOM_NEWS: Duration = Duration::from_secs(2);

/// What happened to a task's container, for the main loop.
#[derive(Debug)]
pub struct ContainerEvent {
    pub(super) alloc: String,
    pub(super) task: String,
    /// Which start of the task it is about: events of an earlier one are
    /// stale.
    pub(super) run: u64,
    pub(super) what: Happened,
}

#[derive(Debug)]
pub(super) enum Happened {
    /// A step worth a task event (the image is being pulled, privileges
    /// granted otherwise).
    Note(String),
    /// How far the pull of `image` is; sent at most every
    /// [`PULL_REPORT`].
    Pulling {
        image: String,
        progress: crate::docker::PullProgress,
    },
    /// The container runs; `adopted` if it ran already.
    Running {
        id: String,
        pid: u32,
        start_ticks: u64,
        adopted: bool,
    },
    /// The container ended (and is removed), or never ran.
    Exited(Exit),
    /// The containers of this agent on the engine, by name (from
    /// [`Docker::list_own`]).
    Own(Vec<String>),
}

/// One start of a task's container.
pub(super) struct Run {
    pub alloc: String,
    pub task: String,
    pub run: u64,
    pub name: String,
    pub spec: ContainerSpec,
    pub force_pull: bool,
    pub auth: Option<Auth>,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// Set when the task is to stop: a start still on its way gives up.
    pub stopping: Arc<AtomicBool>,
}

/// The driver's side of the engine: its address, and the threads that
/// talk to it.
pub(super) struct Docker {
    /// The engine, or why its endpoint is not one.
    engine: Result<Engine, String>,
    events: Sender<ContainerEvent>,
    receiver: Receiver<ContainerEvent>,
    threads: Vec<JoinHandle<()>>,
    /// The next [`Run::run`].
    next_run: u64,
}

impl Docker {
    /// The driver of the engine at `endpoint`; nothing is connected yet.
    pub(super) fn new(endpoint: &str) -> Docker {
        let (events, receiver) = unbounded();
        Docker {
            engine: engine(endpoint),
            events,
            receiver,
            threads: Vec::new(),
            next_run: 1,
        }
    }

    /// The engine's endpoint, or why the config's is not one.
    pub(super) fn endpoint(&self) -> Result<String, String> {
        self.engine
            .as_ref()
            .map(|e| e.endpoint().to_string())
            .map_err(Clone::clone)
    }

    /// Uses another engine from now on (the agent config changed).
    pub(super) fn set_engine(&mut self, endpoint: &str) {
        self.engine = engine(endpoint);
    }

    /// Where the events of the driver's threads arrive.
    pub(super) fn events(&self) -> Receiver<ContainerEvent> {
        self.receiver.clone()
    }

    /// A number for the next start of a task.
    pub(super) fn next_run(&mut self) -> u64 {
        let run = self.next_run;
        self.next_run += 1;
        run
    }

    /// Starts `run` on a thread of its own.
    pub(super) fn run(&mut self, run: Run) {
        let engine = self.engine.clone();
        let events = self.events.clone();
        self.spawn(&format!("docker-{}", run.name), move || {
            let report = Reporter::new(&events, &run.alloc, &run.task, run.run);
            match engine {
                Ok(engine) => start_and_watch(&engine, &run, &report),
                Err(why) => report.send(Happened::Exited(Exit::StartFailed(why))),
            }
        });
    }

    /// Watches the container `name` of a task that ran when the agent
    /// stopped: reported running if it still is, else its exit.
    pub(super) fn adopt(
        &mut self,
        alloc: &str,
        task: &str,
        run: u64,
        name: &str,
        logs: [PathBuf; 2],
    ) {
        let engine = self.engine.clone();
        let events = self.events.clone();
        let (alloc, task, name) = (alloc.to_string(), task.to_string(), name.to_string());
        self.spawn(&format!("docker-{name}"), move || {
            let report = Reporter::new(&events, &alloc, &task, run);
            let engine = match engine {
                Ok(engine) => engine,
                Err(why) => return report.send(Happened::Exited(Exit::Lost(why))),
            };
            match engine.inspect(&name) {
                Ok(Some(c)) if c.running => watch_adopted(&engine, &c, &logs, &report),
                Ok(Some(c)) => report.send(Happened::Exited(finish(&engine, &c.id))),
                Ok(None) => report.send(Happened::Exited(Exit::Vanished)),
                Err(err) => report.send(Happened::Exited(Exit::Lost(err.to_string()))),
            }
        });
    }

    /// Sends `signal` to container `name`; `stopping` (the task's) says a
    /// start on its way should give up.
    pub(super) fn signal(&mut self, name: &str, signal: libc::c_int, stopping: &AtomicBool) {
        stopping.store(true, Ordering::SeqCst);
        let engine = self.engine.clone();
        let name = name.to_string();
        self.spawn(&format!("docker-kill-{name}"), move || {
            let Ok(engine) = engine else { return };
            if let Err(err) = engine.kill(&name, &signal.to_string()) {
                log::warn!("Cannot signal container {name}: {err}");
            }
        });
    }

    /// Lists this agent's containers (those labelled with `data_dir`) on a
    /// thread; the names come back as [`Happened::Own`].
    pub(super) fn list_own(&mut self, data_dir: &Path) {
        let engine = self.engine.clone();
        let events = self.events.clone();
        let label = format!("{LABEL_AGENT}={}", data_dir.display());
        let Ok(engine) = engine else { return };
        self.spawn("docker-list", move || match engine.list(&label) {
            Ok(containers) => {
                let names = containers
                    .into_iter()
                    .map(|c| c.name.trim_start_matches('/').to_string())
                    .collect();
                Reporter::new(&events, "", "", 0).send(Happened::Own(names));
            }
            // No engine is no error until a task needs one.
            Err(err) => log::debug!("Not looking for leftover containers: {err}"),
        });
    }

    /// Stops and removes container `name`, which no task has.
    pub(super) fn remove(&mut self, name: &str) {
        let engine = self.engine.clone();
        let name = name.to_string();
        let Ok(engine) = engine else { return };
        self.spawn(&format!("docker-rm-{name}"), move || {
            match engine.remove(&name, true) {
                Ok(()) => log::warn!("Removed container {name}: no task of this agent has it"),
                Err(err) => log::warn!("Cannot remove container {name}: {err}"),
            }
        });
    }

    /// Joins the threads that are done.
    pub(super) fn reap_threads(&mut self) {
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.threads)
            .into_iter()
            .partition(|t| t.is_finished());
        self.threads = running;
        for thread in done {
            if thread.join().is_err() {
                log::error!("A docker driver thread panicked");
            }
        }
    }

    fn spawn(&mut self, name: &str, f: impl FnOnce() + Send + 'static) {
        self.reap_threads();
        match thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(f)
        {
            Ok(handle) => self.threads.push(handle),
            Err(err) => log::error!("Cannot start a thread for {name}: {err}"),
        }
    }
}

/// The engine at `endpoint`, or why it is not one.
fn engine(endpoint: &str) -> Result<Engine, String> {
    Engine::new(endpoint).map_err(|e| e.to_string())
}

/// Sends one task's events to the loop.
struct Reporter<'a> {
    events: &'a Sender<ContainerEvent>,
    alloc: &'a str,
    task: &'a str,
    run: u64,
}

impl<'a> Reporter<'a> {
    fn new(events: &'a Sender<ContainerEvent>, alloc: &'a str, task: &'a str, run: u64) -> Self {
        Reporter {
            events,
            alloc,
            task,
            run,
        }
    }

    fn send(&self, what: Happened) {
        // The loop gone means the agent is stopping; the task outlives it.
        let _ = self.events.send(ContainerEvent {
            alloc: self.alloc.to_string(),
            task: self.task.to_string(),
            run: self.run,
            what,
        });
    }
}

/// The thread of one start: see the module's doc.
fn start_and_watch(engine: &Engine, run: &Run, report: &Reporter<'_>) {
    let logs = [run.stdout.clone(), run.stderr.clone()];
    let failed = |why: String| report.send(Happened::Exited(Exit::StartFailed(why)));
    match engine.inspect(&run.name) {
        Ok(Some(c)) if c.running => return watch_adopted(engine, &c, &logs, report),
        Ok(Some(c)) => {
            if let Err(err) = engine.remove(&c.id, true) {
                return failed(format!(
                    "cannot remove the earlier container {}: {err}",
                    run.name
                ));
            }
        }
        Ok(None) => {}
        Err(err) => return failed(err.to_string()),
    }
    let image = &run.spec.image;
    let present = match engine.image_present(image) {
        Ok(present) => present,
        Err(err) => return failed(err.to_string()),
    };
    if run.force_pull || !present {
        report.send(Happened::Note(format!("pulling image {image}")));
        let mut last: Option<Instant> = None;
        let mut progress = |progress: crate::docker::PullProgress| {
            // Nothing to tell before a layer's size is known.
            if progress.total == 0 || last.is_some_and(|at| at.elapsed() < PULL_REPORT) {
                return;
            }
            last = Some(Instant::now());
            report.send(Happened::Pulling {
                image: image.clone(),
                progress,
            });
        };
        match engine.pull(image, run.auth.as_ref(), &mut progress) {
            Ok(pulled) => report.send(Happened::Note(format!(
                "pulled image {image} ({} in {} layers)",
                crate::units::format_size(pulled.total),
                pulled.layers
            ))),
            Err(err) => return failed(err.to_string()),
        }
    }
    if run.stopping.load(Ordering::SeqCst) {
        return failed("stopped before it started".to_string());
    }
    if let Some(runtime) = &run.spec.runtime {
        match engine.runtimes() {
            Ok(known) if !known.contains(runtime) => {
                return failed(format!(
                    "config.runtime: the engine at {} has no runtime {runtime:?} (it has {})",
                    engine.endpoint(),
                    known.join(", ")
                ))
            }
            Ok(_) => {}
            Err(err) => return failed(err.to_string()),
        }
    }
    let id = match engine.create(&run.name, &run.spec) {
        Ok(id) => id,
        Err(err) => return failed(err.to_string()),
    };
    if run.stopping.load(Ordering::SeqCst) {
        let _ = engine.remove(&id, true);
        return failed("stopped before it started".to_string());
    }
    if let Err(err) = engine.start(&id) {
        let _ = engine.remove(&id, true);
        return failed(err.to_string());
    }
    let pid = match engine.inspect(&id) {
        Ok(Some(c)) => c.pid,
        Ok(None) => return report.send(Happened::Exited(Exit::Vanished)),
        Err(err) => {
            log::warn!("Cannot inspect container {}: {err}", run.name);
            0
        }
    };
    report.send(running(&id, pid, false));
    report.send(Happened::Exited(watch(engine, &id, &logs, 0)));
}

/// A container found running: reported as adopted, then watched, its
/// output copied from where the task's logs stopped.
fn watch_adopted(engine: &Engine, c: &Container, logs: &[PathBuf; 2], report: &Reporter<'_>) {
    report.send(running(&c.id, c.pid, true));
    let since = logged_until(logs);
    report.send(Happened::Exited(watch(engine, &c.id, logs, since)));
}

/// The report of container `id` running as host pid `pid` (0: unknown).
fn running(id: &str, pid: u32, adopted: bool) -> Happened {
    Happened::Running {
        id: id.to_string(),
        pid,
        start_ticks: super::exec::start_ticks(pid).unwrap_or(0),
        adopted,
    }
}

/// Copies the container's output to the task's logs until it ends, then
/// takes its exit and removes it.
fn watch(engine: &Engine, id: &str, logs: &[PathBuf; 2], since: i64) -> Exit {
    match (open_log(&logs[0]), open_log(&logs[1])) {
        (Ok(mut out), Ok(mut err)) => {
            if let Err(e) = engine.logs(id, since, &mut out, &mut err) {
                log::warn!("Lost the output of container {id}: {e}");
            }
        }
        (Err(e), _) | (_, Err(e)) => log::warn!("Cannot keep the output of container {id}: {e}"),
    }
    if let Err(err) = engine.wait(id) {
        return Exit::Lost(err.to_string());
    }
    finish(engine, id)
}

/// The exit of stopped container `id`, which is then removed.
fn finish(engine: &Engine, id: &str) -> Exit {
    let mut inspected = engine.inspect(id);
    // The engine hears of an OOM kill from the cgroup, which may come
    // after the exit that ended the wait: a container killed by SIGKILL
    // is looked at again for a while before it is said not to be one.
    let deadline = Instant::now() + OOM_NEWS;
    while matches!(&inspected, Ok(Some(c)) if c.exit_code == 137 && !c.oom_killed)
        && Instant::now() < deadline
    {
        thread::sleep(Duration::from_millis(20));
        inspected = engine.inspect(id);
    }
    let exit = match inspected {
        Ok(Some(c)) => Exit::Container {
            code: c.exit_code,
            oom_killed: c.oom_killed,
        },
        Ok(None) => Exit::Vanished,
        Err(err) => Exit::Lost(err.to_string()),
    };
    if let Err(err) = engine.remove(id, true) {
        log::warn!("Cannot remove container {id}: {err}");
    }
    exit
}

/// Opens a task log for appending; a symlink there is refused.
fn open_log(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Where the copy of an adopted container's output resumes: the second
/// the logs were last written (a line or two may come twice; none is
/// lost).
fn logged_until(logs: &[PathBuf; 2]) -> i64 {
    logs.iter()
        .filter_map(|p| p.metadata().and_then(|m| m.modified()).ok())
        .max()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs() as i64)
}

/// The labels of a task's container.
pub(super) fn labels(
    data_dir: &Path,
    alloc: &str,
    job: &str,
    task: &str,
) -> BTreeMap<String, String> {
    order::map(
        [
            (LABEL_AGENT, data_dir.display().to_string()),
            (LABEL_ALLOC, alloc.to_string()),
            (LABEL_JOB, job.to_string()),
            (LABEL_TASK, task.to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    )
}

/// The name of a task's container, as Nomad names it: `<task>-<alloc>`.
pub(super) fn container_name(alloc: &str, task: &str) -> String {
    format!("{task}-{alloc}")
}

/// Registry credentials for the engine's pull, from a task's `auth`.
pub(super) fn auth(auth: &crate::spec::DockerAuth) -> Auth {
    Auth {
        username: auth.username.clone().unwrap_or_default(),
        password: auth.password.clone().unwrap_or_default(),
        server_address: auth.server_address.clone().unwrap_or_default(),
    }
}
