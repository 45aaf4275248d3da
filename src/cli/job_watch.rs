//! `job run`'s watch: after the agent took the job, follow its allocs
//! until the job is up (every alloc running, a `csi_plugin` task's plugin
//! healthy, a batch alloc complete), one failed, or the bound ran out.
//!
//! What it shows comes from the agent's event stream (a long poll, as
//! `events -follow` reads it): the task events of the job's allocs, the
//! health changes of its plugins and the claims of its allocs, each once as
//! it happens. What it decides comes from `job status` (and `plugin
//! status` for plugin tasks), asked again after each answer of the stream,
//! so a missed or coalesced event never leaves it waiting. On a terminal
//! the last line is a progress line rewritten in place; otherwise every
//! line is plain.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use super::{out, CliError};
use crate::api::client::AgentClient;
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::units::{format_duration, format_timestamp};

/// How long `job run` watches when `-timeout` is not given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a service job's task must run before the watch calls it up:
/// Nomad's default `update { min_healthy_time }`, so that a task that
/// exits soon after it started is seen failing rather than up.
pub const MIN_HEALTHY_TIME: Duration = Duration::from_secs(10);

/// The longest one call of the stream waits: the status is looked at
/// again at least this often, whatever the stream says.
const POLL: Duration = Duration::from_secs(2);

/// How long a watch that has its verdict goes on reading events, until
/// one read waits this long for nothing: the events of the last turn
/// are published once it is durable, a moment after `job status` tells
/// of it.
const SETTLE: Duration = Duration::from_millis(300);

/// The topics a watch reads.
const TOPICS: [&str; 3] = ["job", "plugin", "claim"];

/// The events shown without `-verbose` (types of the `job` topic's task
/// events, and of the `plugin` and `claim` topics).
const SHOWN: &[&str] = &[
    "Driver",
    PULLING,
    "Started",
    "Running",
    "Adopted",
    "Terminated",
    "Restarting",
    "OOM Killed",
    "Failed Artifact Download",
    "Failed",
    "Completed",
    "Killed",
    "Leader dead",
    "Sibling failed",
    "Plugin",
    "HealthChanged",
    "ClaimTaken",
    "ClaimFailed",
];

/// The type of a task's image pull progress events, which come at most
/// every second (the docker driver's `PULL_REPORT`): on a terminal they
/// go in the progress line, otherwise a line of them at most every
/// [`PLAIN_PULL_EVERY`].
const PULLING: &str = "Pulling";

/// How often at most a watch without a terminal prints a task's pull
/// progress as a line of its own (the first one at once).
pub const PLAIN_PULL_EVERY: Duration = Duration::from_secs(10);

/// How a watch is to behave.
#[derive(Clone, Debug)]
pub struct Options {
    pub verbose: bool,
    pub timeout: Duration,
    /// Rewrite a progress line in place (standard output is a terminal).
    pub tty: bool,
}

impl Options {
    pub fn new(verbose: bool, timeout: Duration) -> Options {
        Options {
            verbose,
            timeout,
            tty: std::io::stdout().is_terminal(),
        }
    }
}

/// Where a job stands, for its watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every alloc runs (plugins healthy) or completed.
    Up,
    /// Why the job did not come up.
    Failed(String),
    /// What is still awaited, one item an alloc or task.
    Pending(Vec<String>),
}

/// `job run`'s watch flags: None with `-detach`.
pub fn options(args: &super::args::Args) -> Result<Option<Options>, CliError> {
    if args.switch("detach") {
        return Ok(None);
    }
    let timeout = match args.value("timeout") {
        None => DEFAULT_TIMEOUT,
        Some(text) => crate::units::parse_duration(text)
            .map_err(|err| super::args::UsageError::new(format!("-timeout: {err}")))?,
    };
    Ok(Some(Options::new(args.switch("verbose"), timeout)))
}

/// The agent's last event index: a watch shows the events after it.
pub fn start_index(client: &AgentClient) -> Result<u64, CliError> {
    // An answer to "every event" names the last index too.
    Ok(client.events(0, &[], Duration::ZERO)?.last_index)
}

/// Watches `job`'s allocs `ids` from event `since` on; Ok when the job
/// came up, a [`CliError::Failed`] when it failed or the bound ran out.
pub fn watch(
    client: &AgentClient,
    job: &str,
    ids: &[String],
    mut since: u64,
    options: &Options,
) -> Result<(), CliError> {
    let started = Instant::now();
    let deadline = started + options.timeout;
    let mut progress = Progress::new(options.tty);
    loop {
        let status = client.job_status(job)?;
        let Some(job_status) = status.jobs.into_iter().find(|j| j.name == job) else {
            progress.clear();
            return Err(CliError::Failed(format!("job {job:?} is gone")));
        };
        let plugins = plugin_health(client, &job_status, ids)?;
        let now_ms = unix_ms_now();
        let verdict = judge(&job_status, ids, now_ms, &|id| {
            plugins.contains(&id.to_string())
        });
        let now = Instant::now();
        let pending = match verdict {
            Verdict::Pending(what) if now < deadline => what,
            _ => {
                // `job status` answers from memory while events wait for
                // their turn to be durable: the last ones may be a moment
                // behind. They are shown before the verdict.
                let settle = Instant::now() + SETTLE;
                let mut wait = Duration::ZERO;
                loop {
                    let (next, shown) = show_events(
                        client,
                        since,
                        wait,
                        job,
                        ids,
                        &job_status,
                        options,
                        &mut progress,
                    )?;
                    since = next;
                    let now = Instant::now();
                    if (shown == 0 && !wait.is_zero()) || now >= settle {
                        break;
                    }
                    wait = SETTLE.min(settle - now);
                }
                progress.clear();
                return match verdict {
                    Verdict::Up => {
                        out::outln!("Job {job:?} is up: {}", summary(&job_status, ids));
                        Ok(())
                    }
                    Verdict::Failed(why) => {
                        Err(CliError::Failed(format!("job {job:?} failed: {why}")))
                    }
                    Verdict::Pending(what) => Err(CliError::Failed(format!(
                        "job {job:?} is not up after {} (-timeout); still pending: {}",
                        format_duration(options.timeout),
                        what.join("; ")
                    ))),
                };
            }
        };
        progress.show(&format!(
            "{} after {}s: waiting for {}",
            summary(&job_status, ids),
            started.elapsed().as_secs(),
            pending.join("; ")
        ));
        let wait = POLL.min(deadline - now);
        since = show_events(
            client,
            since,
            wait,
            job,
            ids,
            &job_status,
            options,
            &mut progress,
        )?
        .0;
    }
}

/// Prints the events after `since` that concern the job (waiting up to
/// `wait` for one); the index to go on from, and how many events came.
#[allow(clippy::too_many_arguments)]
fn show_events(
    client: &AgentClient,
    since: u64,
    wait: Duration,
    job: &str,
    ids: &[String],
    status: &api::JobStatus,
    options: &Options,
    progress: &mut Progress,
) -> Result<(u64, usize), CliError> {
    let topics: Vec<String> = TOPICS.iter().map(|t| t.to_string()).collect();
    let resp = client.events(since, &topics, wait)?;
    for event in &resp.events {
        if let Some(line) = describe(event, job, ids, status, options.verbose) {
            if event.type_ == PULLING {
                progress.pulling(&event.key, &line);
            } else {
                progress.end_pull(&event.key);
                progress.line(&line);
            }
        }
    }
    let next = resp
        .last_index
        .max(resp.events.last().map_or(since, |e| e.index));
    Ok((next, resp.events.len()))
}

fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The plugin IDs of the job's plugin tasks that are healthy.
fn plugin_health(
    client: &AgentClient,
    job: &api::JobStatus,
    ids: &[String],
) -> Result<Vec<String>, CliError> {
    let mut healthy = Vec::new();
    for task in ours(job, ids).flat_map(|a| &a.tasks) {
        if task.plugin_id.is_empty() || task.state != "running" {
            continue;
        }
        let resp = client.plugin_status(&task.plugin_id);
        let Ok(resp) = resp else { continue };
        if resp
            .plugins
            .iter()
            .any(|p| p.id == task.plugin_id && p.health == api::Health::HEALTHY.into())
        {
            healthy.push(task.plugin_id.clone());
        }
    }
    Ok(healthy)
}

/// The allocs of `job` the watch follows: `ids`, or all when empty.
fn ours<'a>(
    job: &'a api::JobStatus,
    ids: &'a [String],
) -> impl Iterator<Item = &'a api::AllocStatus> + 'a {
    job.allocs
        .iter()
        .filter(move |a| ids.is_empty() || ids.contains(&a.id))
}

/// Whether `job`'s allocs `ids` are up, failed or still pending at
/// `now_ms` (Unix milliseconds); `healthy` tells whether a plugin ID is
/// healthy in the registry.
///
/// A main task of a service job is up once it has run for
/// [`MIN_HEALTHY_TIME`] since it last started (a plugin task once its
/// plugin is healthy); one of a batch job once it completed.
pub fn judge(
    job: &api::JobStatus,
    ids: &[String],
    now_ms: i64,
    healthy: &dyn Fn(&str) -> bool,
) -> Verdict {
    let batch = matches!(job.type_.as_str(), "batch" | "sysbatch");
    let mut pending = Vec::new();
    for alloc in ours(job, ids) {
        let name = short(&alloc.id);
        match alloc.status.as_str() {
            "complete" => continue,
            "failed" => return Verdict::Failed(failure(alloc)),
            "stopping" => return Verdict::Failed(format!("alloc {name} is being stopped")),
            "pending" => {
                pending.push(if alloc.message.is_empty() {
                    format!("alloc {name} to start")
                } else {
                    format!("alloc {name}: {}", alloc.message)
                });
                continue;
            }
            _ => {}
        }
        for task in &alloc.tasks {
            // Lifecycle tasks run before, beside or after the main ones:
            // an alloc is up without them.
            let main = task.lifecycle.is_empty();
            let label = format!("alloc {name} task {:?}", task.name);
            match task.state.as_str() {
                "running" if !task.plugin_id.is_empty() && !healthy(&task.plugin_id) => {
                    pending.push(format!(
                        "{label}: plugin {:?} to be healthy",
                        task.plugin_id
                    ));
                }
                "running" if !task.plugin_id.is_empty() => {}
                "running" if main && batch => pending.push(format!("{label} to complete")),
                "running" if main => {
                    let ran = now_ms.saturating_sub(last_start(task).unwrap_or(now_ms));
                    let min = MIN_HEALTHY_TIME.as_millis() as i64;
                    if ran < min {
                        pending.push(format!(
                            "{label} to run for {} ({}s so far)",
                            format_duration(MIN_HEALTHY_TIME),
                            ran / 1000
                        ));
                    }
                }
                "running" => {}
                "dead" if task.failed && main => return Verdict::Failed(failure(alloc)),
                "dead" => {}
                state if main => pending.push(format!("{label} ({state})")),
                _ => {}
            }
        }
        // A batch alloc whose tasks are done settles (its claims are
        // released) before it is complete.
        if batch
            && !pending
                .iter()
                .any(|p| p.starts_with(&format!("alloc {name} ")))
        {
            pending.push(format!("alloc {name} to complete"));
        }
    }
    if pending.is_empty() {
        Verdict::Up
    } else {
        Verdict::Pending(pending)
    }
}

/// When a task last started (Unix milliseconds), from its events.
fn last_start(task: &api::TaskStatus) -> Option<i64> {
    task.events
        .iter()
        .rev()
        .find(|e| matches!(e.kind.as_str(), "started" | "running" | "adopted"))
        .map(|e| e.unix_ms)
}

/// Why an alloc failed: its message and its failed task's last event.
fn failure(alloc: &api::AllocStatus) -> String {
    let mut why = format!("alloc {}", short(&alloc.id));
    if !alloc.message.is_empty() {
        why.push_str(&format!(": {}", alloc.message));
    }
    let failed = alloc
        .tasks
        .iter()
        .find(|t| t.failed)
        .or_else(|| alloc.tasks.first());
    if let Some(task) = failed {
        // The task's last event other than the alloc-wide verdict says
        // what happened to it.
        let event = task
            .events
            .iter()
            .rev()
            .find(|e| !matches!(e.kind.as_str(), "failed" | "killing" | "killed"))
            .or(task.events.last());
        if let Some(e) = event {
            why.push_str(&format!(
                "; task {:?}: {}: {}",
                task.name,
                capitalized(&e.kind),
                e.message
            ));
        }
    }
    why
}

/// Counts of the followed allocs by status: "1 running, 1 pending".
fn summary(job: &api::JobStatus, ids: &[String]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for alloc in ours(job, ids) {
        match counts.iter_mut().find(|(s, _)| *s == alloc.status) {
            Some((_, n)) => *n += 1,
            None => counts.push((alloc.status.clone(), 1)),
        }
    }
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    if parts.is_empty() {
        "no allocs".to_string()
    } else {
        format!(
            "{} alloc{} {}",
            ours(job, ids).count(),
            if ours(job, ids).count() == 1 { "" } else { "s" },
            parts.join(", ")
        )
    }
}

/// The line a watch prints for `event`, if it concerns the job and is
/// shown (every event that concerns it with `verbose`).
fn describe(
    event: &api::Event,
    job: &str,
    ids: &[String],
    status: &api::JobStatus,
    verbose: bool,
) -> Option<String> {
    let what = match event.topic.as_str() {
        "job" => {
            let mut parts = event.key.splitn(3, '/');
            let (name, alloc, task) = (parts.next()?, parts.next()?, parts.next()?);
            if name != job || !(ids.is_empty() || ids.iter().any(|id| id == alloc)) {
                return None;
            }
            let alloc = if verbose { alloc } else { short(alloc) };
            format!("alloc {alloc} task {task:?}")
        }
        "plugin" => {
            let plugin = event.key.split(' ').next().unwrap_or_default();
            let ours = ours(status, ids)
                .flat_map(|a| &a.tasks)
                .any(|t| !t.plugin_id.is_empty() && t.plugin_id == plugin);
            if !ours {
                return None;
            }
            format!("plugin {}", event.key)
        }
        "claim" => {
            let alloc = ours(status, ids).find(|a| event.message.contains(&a.id))?;
            let alloc = if verbose { &alloc.id } else { short(&alloc.id) };
            format!("alloc {alloc} volume {:?}", event.key)
        }
        _ => return None,
    };
    if !verbose && !SHOWN.contains(&event.type_.as_str()) {
        return None;
    }
    let time = format_timestamp(from_unix_ms(event.unix_ms));
    let mut line = format!("{time}  {what}: {}", event.type_);
    if !event.message.is_empty() {
        line.push_str(": ");
        line.push_str(&event.message);
    }
    Some(line)
}

/// An alloc ID as Nomad shows it without `-verbose`: its first 8
/// characters.
pub fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

fn capitalized(kind: &str) -> String {
    let mut chars = kind.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

/// The progress line of a terminal: lines are printed above it, and it
/// is rewritten in place. Without a terminal it prints nothing.
struct Progress {
    tty: bool,
    shown: bool,
    last: String,
    /// The last pull progress of each task (by its events' key) whose
    /// pull goes on: on a terminal, part of the progress line.
    pulls: std::collections::BTreeMap<String, String>,
    /// Without a terminal: when each task's pull progress was last
    /// printed.
    pull_printed: std::collections::BTreeMap<String, Instant>,
}

impl Progress {
    fn new(tty: bool) -> Progress {
        Progress {
            tty,
            shown: false,
            last: String::new(),
            pulls: Default::default(),
            pull_printed: Default::default(),
        }
    }

    /// Shows `text` as the progress line, with the pulls going on.
    fn show(&mut self, text: &str) {
        if !self.tty {
            return;
        }
        let mut text = text.to_string();
        for pull in self.pulls.values() {
            text.push_str(" | ");
            text.push_str(pull);
        }
        out::out!("\r\x1b[K{text}");
        self.last = text;
        self.shown = true;
    }

    /// A task's other news ends what its pull showed: the progress line
    /// goes on without it.
    fn end_pull(&mut self, key: &str) {
        if self.pulls.remove(key).is_some() {
            let mut last = self
                .last
                .split(" | ")
                .next()
                .unwrap_or_default()
                .to_string();
            for pull in self.pulls.values() {
                last.push_str(" | ");
                last.push_str(pull);
            }
            self.last = last;
        }
    }

    /// A task's pull progress, `line` as [`describe`] wrote it: on a
    /// terminal the progress line shows it at once; otherwise it is a line
    /// if the task's last was [`PLAIN_PULL_EVERY`] ago.
    fn pulling(&mut self, key: &str, line: &str) {
        if self.tty {
            // The progress line has no room for the time.
            let text = line.split_once("  ").map_or(line, |(_, rest)| rest);
            self.pulls.insert(key.to_string(), text.to_string());
            let last = self
                .last
                .split(" | ")
                .next()
                .unwrap_or_default()
                .to_string();
            self.show(&last);
            return;
        }
        let now = Instant::now();
        let due = self
            .pull_printed
            .get(key)
            .map_or(true, |at| now.duration_since(*at) >= PLAIN_PULL_EVERY);
        if due {
            self.pull_printed.insert(key.to_string(), now);
            self.line(line);
        }
    }

    /// Prints `text` as a line of its own, above the progress line.
    fn line(&mut self, text: &str) {
        if self.shown {
            out::out!("\r\x1b[K{text}\n{}", self.last);
        } else {
            out::outln!("{text}");
        }
    }

    fn clear(&mut self) {
        if self.shown {
            out::out!("\r\x1b[K");
            self.shown = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    /// A task in `state`, started a minute before [`NOW`].
    fn task(name: &str, state: &str, failed: bool) -> api::TaskStatus {
        api::TaskStatus {
            name: name.into(),
            state: state.into(),
            failed,
            events: vec![started(NOW - 60_000)],
            ..Default::default()
        }
    }

    fn started(unix_ms: i64) -> api::TaskEvent {
        api::TaskEvent {
            unix_ms,
            kind: "started".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_service_task_is_up_once_it_ran_for_the_min_healthy_time_and_a_batch_one_once_complete() {
        let mut fresh = task("web", "running", false);
        fresh.events.push(started(NOW - 3_000));
        let service = job(vec![alloc("running", vec![fresh])]);
        assert_eq!(
            judge(&service, &[], NOW, &|_| true),
            Verdict::Pending(vec![
                "alloc 01234567 task \"web\" to run for 10s (3s so far)".into()
            ])
        );
        assert_eq!(judge(&service, &[], NOW + 7_000, &|_| true), Verdict::Up);
        let mut batch = job(vec![alloc("running", vec![task("t", "running", false)])]);
        batch.type_ = "batch".into();
        assert_eq!(
            judge(&batch, &[], NOW, &|_| true),
            Verdict::Pending(vec!["alloc 01234567 task \"t\" to complete".into()])
        );
        // Its task done, the alloc still releases its claims.
        batch.allocs[0].tasks[0].state = "dead".into();
        assert_eq!(
            judge(&batch, &[], NOW, &|_| true),
            Verdict::Pending(vec!["alloc 01234567 to complete".into()])
        );
    }

    fn job(allocs: Vec<api::AllocStatus>) -> api::JobStatus {
        api::JobStatus {
            name: "web".into(),
            allocs,
            ..Default::default()
        }
    }

    fn alloc(status: &str, tasks: Vec<api::TaskStatus>) -> api::AllocStatus {
        api::AllocStatus {
            id: "0123456789abcdef".into(),
            status: status.into(),
            tasks,
            ..Default::default()
        }
    }

    #[test]
    fn a_job_is_up_when_its_main_tasks_run_and_its_plugins_are_healthy() {
        let mut poststop = task("cleanup", "pending", false);
        poststop.lifecycle = "poststop".into();
        let up = job(vec![alloc(
            "running",
            vec![task("web", "running", false), poststop],
        )]);
        assert_eq!(judge(&up, &[], NOW, &|_| true), Verdict::Up);

        let mut plugin = task("plugin", "running", false);
        plugin.plugin_id = "hp".into();
        let waiting = job(vec![alloc("running", vec![plugin])]);
        assert_eq!(
            judge(&waiting, &[], NOW, &|_| false),
            Verdict::Pending(vec![
                "alloc 01234567 task \"plugin\": plugin \"hp\" to be healthy".into()
            ])
        );
        assert_eq!(judge(&waiting, &[], NOW, &|id| id == "hp"), Verdict::Up);

        let batch = job(vec![alloc("complete", vec![task("t", "dead", false)])]);
        assert_eq!(judge(&batch, &[], NOW, &|_| true), Verdict::Up);
    }

    #[test]
    fn a_failed_alloc_names_its_task_and_event() {
        let mut failed = task("web", "dead", true);
        failed.events.extend([
            api::TaskEvent {
                kind: "terminated".into(),
                message: "exit code 3".into(),
                ..Default::default()
            },
            api::TaskEvent {
                kind: "failed".into(),
                message: "no restarts left".into(),
                ..Default::default()
            },
        ]);
        let mut a = alloc("failed", vec![failed]);
        a.message = "task \"web\" failed".into();
        let Verdict::Failed(why) = judge(&job(vec![a]), &[], NOW, &|_| true) else {
            panic!("not failed");
        };
        assert_eq!(
            why,
            "alloc 01234567: task \"web\" failed; task \"web\": Terminated: exit code 3"
        );
    }

    #[test]
    fn only_the_followed_allocs_are_judged_and_pending_says_what_it_waits_for() {
        let mut other = alloc("failed", vec![]);
        other.id = "ffffffff0000".into();
        let pending = alloc("running", vec![task("web", "restarting", false)]);
        let j = job(vec![other, pending]);
        assert_eq!(
            judge(&j, &["0123456789abcdef".into()], NOW, &|_| true),
            Verdict::Pending(vec!["alloc 01234567 task \"web\" (restarting)".into()])
        );
    }

    #[test]
    fn events_of_other_jobs_are_not_shown_and_quiet_ones_only_when_verbose() {
        let status = job(vec![alloc("running", vec![])]);
        let event = |key: &str, type_: &str| api::Event {
            topic: "job".into(),
            key: key.into(),
            type_: type_.into(),
            message: "m".into(),
            ..Default::default()
        };
        let ours = event("web/0123456789abcdef/t", "Started");
        let line = describe(&ours, "web", &[], &status, false).unwrap();
        assert!(
            line.ends_with("alloc 01234567 task \"t\": Started: m"),
            "{line}"
        );
        let other = event("db/0123456789abcdef/t", "Started");
        assert_eq!(describe(&other, "web", &[], &status, false), None);
        let quiet = event("web/0123456789abcdef/t", "Received");
        assert_eq!(describe(&quiet, "web", &[], &status, false), None);
        let line = describe(&quiet, "web", &[], &status, true).unwrap();
        assert!(line.contains("alloc 0123456789abcdef task"), "{line}");
    }
}
