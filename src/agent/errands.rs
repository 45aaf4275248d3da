//! Errands: work the main loop hands to a thread of its own because it
//! waits on something the loop must never wait on: the API calls a
//! clustered agent answers from etcd (`cluster_calls.rs`), a controller
//! call relayed from a host without any instance of the plugin
//! (`cluster.rs`), the answer to `-dev`'s demo volume (`mod.rs`).
//!
//! The same owner keeps the threads the loop stops without waiting for
//! them: a stopped plugin instance's thread and its workers
//! (`plugins.rs`, `plugin_tasks.rs`, and every instance at shutdown), and
//! the relayed calls a stopped controller leader was still making
//! (`cluster.rs`). Each ends by a deadline of its own: the RPC in flight.
//!
//! Every such thread is named and owned by the agent's [`Errands`]: one
//! that has ended is joined when the next one is kept, and at shutdown
//! each is waited for until the shutdown's deadline. One still running
//! then (a relayed CreateVolume that waits for its deadline, a forced
//! detach that waits for the controller leader, a plugin that does not
//! answer) is left to end with the process, and the log says which.

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How often shutdown looks whether the errands still running ended.
const POLL: Duration = Duration::from_millis(20);

/// The threads of the errands under way.
#[derive(Default)]
pub(super) struct Errands {
    threads: Vec<JoinHandle<()>>,
}

impl Errands {
    /// Keeps the thread of an errand just started; joins those that
    /// ended.
    pub(super) fn keep(&mut self, thread: JoinHandle<()>) {
        self.join_ended();
        self.threads.push(thread);
    }

    /// Keeps `threads`, which the loop stopped without waiting for them:
    /// a stopped plugin instance's, a stopped controller leader's relayed
    /// calls.
    pub(super) fn keep_all(&mut self, threads: impl IntoIterator<Item = JoinHandle<()>>) {
        self.join_ended();
        self.threads.extend(threads);
    }

    /// Waits for every errand to end until `deadline`, joining each.
    pub(super) fn finish(&mut self, deadline: Instant) {
        loop {
            self.join_ended();
            if self.threads.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                let names: Vec<&str> = self
                    .threads
                    .iter()
                    .map(|t| t.thread().name().unwrap_or("unnamed"))
                    .collect();
                log::warn!(
                    "{} threads (errands, plugin instances, relayed calls) did not end in time, and end with the agent: {}",
                    names.len(),
                    names.join(", ")
                );
                return;
            }
            thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
        }
    }

    /// Joins the threads that ended.
    fn join_ended(&mut self) {
        let (ended, running) = std::mem::take(&mut self.threads)
            .into_iter()
            .partition::<Vec<_>, _>(JoinHandle::is_finished);
        self.threads = running;
        for thread in ended {
            let name = thread.thread().name().unwrap_or("unnamed").to_string();
            if thread.join().is_err() {
                log::error!("Thread {name} panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errand(name: &str, work: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
        thread::Builder::new()
            .name(name.into())
            .spawn(work)
            .unwrap()
    }

    #[test]
    fn an_errand_that_ended_is_joined_when_the_next_one_starts() {
        let mut errands = Errands::default();
        let first = errand("first", || {});
        while !first.is_finished() {
            thread::sleep(Duration::from_millis(1));
        }
        errands.keep(first);
        let (release, released) = crossbeam_channel::bounded::<()>(0);
        errands.keep(errand("second", move || {
            let _ = released.recv();
        }));
        let names: Vec<_> = errands.threads.iter().map(|t| t.thread().name()).collect();
        assert_eq!(names, [Some("second")]);
        drop(release);
        errands.finish(Instant::now() + Duration::from_secs(10));
        assert!(errands.threads.is_empty());
    }

    #[test]
    fn shutdown_waits_for_the_errands_no_longer_than_its_deadline() {
        let mut errands = Errands::default();
        let (release, released) = crossbeam_channel::bounded::<()>(0);
        errands.keep(errand("stuck", move || {
            let _ = released.recv();
        }));
        let start = Instant::now();
        errands.finish(start + Duration::from_millis(100));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(errands.threads.len(), 1);
        drop(release);
        errands.finish(Instant::now() + Duration::from_secs(10));
        assert!(errands.threads.is_empty());
    }
}
