//! A plugin instance's bounded worker pool for volume operations: a split
//! plugin's controller and node each have their own, and the manager
//! submits each job to the instance that serves its RPC's service.
//!
//! The main loop never calls a plugin: it submits a job, which runs on one
//! of at most [`WORKERS`] threads of that plugin and sends its result back
//! over a channel the job captured. Different volumes proceed in parallel;
//! the volume manager keeps at most one job per volume in flight.
//!
//! Each worker has its own connection and makes a new one when the
//! instance thread saw a new socket appear (a restarted plugin), so no job
//! waits out the old connection's reconnect backoff.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::InstanceKey;
use crate::csi::{Client, Endpoint};

/// Workers per plugin.
pub const WORKERS: usize = 4;

/// A unit of work for a plugin: it gets the connection and reports its own
/// result.
pub type Job = Box<dyn FnOnce(&Client) + Send>;

/// The pool; dropping it lets the workers finish their jobs and end.
pub struct Workers {
    jobs: Sender<Job>,
    spawned: usize,
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
            spawned: 0,
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
        while self.spawned < WORKERS {
            let receiver = self.receiver.clone();
            let endpoint = self.endpoint.clone();
            let connection = self.connection.clone();
            let timeout = self.timeout;
            let spawned = thread::Builder::new()
                .name(format!("{}-w{}", self.name, self.spawned))
                .spawn(move || work(&receiver, &endpoint, timeout, &connection));
            match spawned {
                Ok(_) => self.spawned += 1,
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
}

fn work(jobs: &Receiver<Job>, endpoint: &Endpoint, timeout: Duration, connection: &AtomicU64) {
    let mut generation = connection.load(Ordering::SeqCst);
    let mut client = Client::new(endpoint).with_timeout(timeout);
    for job in jobs.iter() {
        let now = connection.load(Ordering::SeqCst);
        if now != generation {
            generation = now;
            client = Client::new(endpoint).with_timeout(timeout);
        }
        job(&client);
    }
}
