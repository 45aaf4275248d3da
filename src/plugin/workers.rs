//! A plugin instance's bounded worker pool for volume operations: a split
//! plugin's controller and node each have their own, and the manager
//! submits each job to the instance that serves its RPC's service.
//!
//! The main loop never calls a plugin: it submits a job, which runs on one
//! of at most [`WORKERS`] threads of that plugin and sends its result back
//! over a channel the job captured. Different volumes proceed in parallel;
//! the volume manager keeps at most one job per volume in flight.
//!
//! The pool owns its threads: [`Workers::finish`] closes the queue and
//! hands them over, and each ends once the jobs queued are done, every one
//! within the RPC deadline its connection was made with.
//!
//! Each worker has its own connection and makes a new one when the
//! instance thread saw a new socket appear (a restarted plugin), so no job
//! waits out the old connection's reconnect backoff.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::InstanceKey;
use crate::csi::{Client, Endpoint};

/// Workers per plugin.
pub const WORKERS: usize = 4;

/// A unit of work for a plugin: it gets the connection and reports its own
/// result.
pub type Job = Box<dyn FnOnce(&Client) + Send>;

/// The pool; dropping it (or [`Workers::finish`]) lets the workers finish
/// their jobs and end.
pub struct Workers {
    jobs: Sender<Job>,
    /// The workers started so far.
    threads: Vec<JoinHandle<()>>,
    receiver: Receiver<Job>,
    endpoint: Endpoint,
    timeout: Duration,
    /// Names the threads: `<thread name of the instance>-w<n>`.
    name: String,
    key: InstanceKey,
    connection: Arc<AtomicU64>,
}

impl Workers {
    pub fn new(
        key: &InstanceKey,
        endpoint: &Endpoint,
        timeout: Duration,
        connection: Arc<AtomicU64>,
    ) -> Workers {
        let (jobs, receiver) = unbounded();
        Workers {
            jobs,
            threads: Vec::new(),
            receiver,
            endpoint: endpoint.clone(),
            timeout,
            name: key.thread_name(),
            key: key.clone(),
            connection,
        }
    }

    /// Queues `job`; the workers start on first use.
    pub fn submit(&mut self, job: Job) {
        while self.threads.len() < WORKERS {
            let receiver = self.receiver.clone();
            let endpoint = self.endpoint.clone();
            let connection = self.connection.clone();
            let timeout = self.timeout;
            let plugin = self.key.plugin_id.clone();
            let spawned = thread::Builder::new()
                .name(format!("{}-w{}", self.name, self.threads.len()))
                .spawn(move || work(&receiver, &plugin, &endpoint, timeout, &connection));
            match spawned {
                Ok(thread) => self.threads.push(thread),
                Err(err) => {
                    log::error!("Cannot start a worker for plugin {}: {err}", self.key);
                    break;
                }
            }
        }
        // With no worker at all the job is dropped, and its sender with it:
        // the manager sees the result channel close for that job.
        let _ = self.jobs.send(job);
    }

    /// Closes the queue and hands over the workers: each ends after the
    /// jobs queued, for the caller to join.
    pub fn finish(self) -> Vec<JoinHandle<()>> {
        let Workers { jobs, threads, .. } = self;
        drop(jobs);
        threads
    }
}

fn work(
    jobs: &Receiver<Job>,
    plugin: &str,
    endpoint: &Endpoint,
    timeout: Duration,
    connection: &AtomicU64,
) {
    let mut generation = connection.load(Ordering::SeqCst);
    let new_client = || {
        Client::new(endpoint)
            .with_timeout(timeout)
            .for_plugin(plugin)
    };
    let mut client = new_client();
    for job in jobs.iter() {
        let now = connection.load(Ordering::SeqCst);
        if now != generation {
            generation = now;
            client = new_client();
        }
        job(&client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::PluginType;

    #[test]
    fn finished_workers_are_handed_over_and_end_after_the_jobs_queued() {
        let key = InstanceKey::new("pool", PluginType::Monolith);
        let endpoint = Endpoint::from_path("/nonexistent/pool.sock").unwrap();
        let connection = Arc::new(AtomicU64::new(0));
        let mut workers = Workers::new(&key, &endpoint, Duration::from_secs(1), connection);
        let (release, released) = crossbeam_channel::bounded::<()>(0);
        let (done_tx, done) = crossbeam_channel::unbounded::<u32>();
        for n in 0..6 {
            let (released, done_tx) = (released.clone(), done_tx.clone());
            workers.submit(Box::new(move |_: &Client| {
                let _ = released.recv();
                let _ = done_tx.send(n);
            }));
        }
        drop(done_tx);
        let threads = workers.finish();
        assert_eq!(threads.len(), WORKERS);
        assert!(threads.iter().all(|t| !t.is_finished()));
        drop(release);
        for thread in threads {
            thread.join().unwrap();
        }
        let mut ran: Vec<u32> = done.iter().collect();
        ran.sort_unstable();
        assert_eq!(ran, [0, 1, 2, 3, 4, 5]);
    }
}
