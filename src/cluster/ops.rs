//! What an agent's volume manager asks of the cluster, carried out off the
//! main loop: admitting and freeing claims in the volumes' claim sets
//! ([`super::claims`]) and sharing volume records ([`super::volumes`]).
//!
//! The loop hands [`Op`]s over once the local record they depend on is
//! durable, and hears [`Answer`]s on a channel. A few threads do the work;
//! every op about one volume goes to the same thread, in order, so a free
//! never overtakes the admission it undoes. An op that etcd did not take
//! (no member answered) is retried with backoff on its thread, without
//! holding up the others there, except an admission: its claim is
//! answered at once that the cluster is out of reach, since nobody should
//! wait for a majority to come back.
//!
//! An admission is written only while this node's key is in etcd. The
//! fencer frees a node's claims when its key goes away; a claim admitted
//! while the key is already gone (a node frozen or cut off past its
//! lease, writing as it thaws, before it has registered again) would be
//! fenced by nobody. So it is refused, and asked again once the node is
//! registered.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};

use super::claims::{self, ClaimRequest, ClaimSets};
use super::etcd::{Condition, Etcd};
use super::{node, volumes};
use crate::csi::Backoff;
use crate::proto::state as statepb;

/// Threads carrying out ops; a volume's ops all go to one of them.
const THREADS: usize = 4;

/// Backoff of an op etcd did not take.
const RETRY: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));

/// What the volume manager asks of the cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Add this node's claim to the volume's claim set.
    Admit {
        volume: String,
        request: ClaimRequest,
    },
    /// Remove this node's claim of `alloc` from the volume's claim set.
    Free { volume: String, alloc: String },
    /// Write the volume's shared record.
    Share {
        volume: String,
        record: Box<statepb::Volume>,
    },
    /// Remove the volume's record (it was deregistered or deleted here).
    Unshare { volume: String },
    /// Read whether this node's claim of `alloc` is still wanted in the
    /// claim set (the watch showed a set without it).
    Check { volume: String, alloc: String },
}

impl Op {
    fn volume(&self) -> &str {
        match self {
            Op::Admit { volume, .. }
            | Op::Free { volume, .. }
            | Op::Share { volume, .. }
            | Op::Unshare { volume }
            | Op::Check { volume, .. } => volume,
        }
    }
}

/// What the cluster answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The claim is in the claim set.
    Admitted { volume: String, alloc: String },
    /// The claim set refused the claim (another node's claim is in the
    /// way): it is not in the set.
    Refused {
        volume: String,
        alloc: String,
        reason: String,
    },
    /// etcd did not answer for sure: the claim may be in the set, and must
    /// be freed before it is forgotten.
    Unknown {
        volume: String,
        alloc: String,
        error: String,
    },
    /// This node is not registered (its key is gone: its lease expired,
    /// or it has not registered yet), so the claim was not admitted: it
    /// is not in the set.
    Unregistered { volume: String, alloc: String },
    /// The claim is no longer in the set.
    Freed { volume: String, alloc: String },
    /// The volume's record is in etcd.
    Shared { volume: String },
    /// etcd has not taken the volume's record yet (it is retried): what
    /// went wrong.
    NotShared { volume: String, error: String },
    /// The claim is still wanted in the set.
    Held { volume: String, alloc: String },
    /// The claim is no longer wanted in the set: the cluster fenced it
    /// (its node was lost) or an operator freed it. `reason` says which.
    Lost {
        volume: String,
        alloc: String,
        reason: String,
    },
}

/// The threads. Dropping it ends them once they have carried out what was
/// queued; an op still being retried is asked again after a restart (the
/// local records say what etcd has not been told).
pub struct Ops {
    queues: Vec<Sender<Op>>,
    threads: Vec<JoinHandle<()>>,
}

impl Ops {
    /// Starts the threads, answering on `answers`.
    pub fn start(
        etcd: Arc<Etcd>,
        prefix: &str,
        node: &str,
        answers: Sender<Answer>,
    ) -> std::io::Result<Ops> {
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for i in 0..THREADS {
            let (tx, rx) = unbounded();
            let worker = Worker {
                etcd: etcd.clone(),
                prefix: prefix.to_string(),
                node: node.to_string(),
                answers: answers.clone(),
            };
            threads.push(
                thread::Builder::new()
                    .name(format!("cluster-ops-{i}"))
                    .spawn(move || worker.run(&rx))?,
            );
            queues.push(tx);
        }
        Ok(Ops { queues, threads })
    }

    /// Queues `op` on its volume's thread.
    pub fn submit(&self, op: Op) {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        op.volume().hash(&mut hasher);
        let i = (hasher.finish() % self.queues.len() as u64) as usize;
        let _ = self.queues[i].send(op);
    }
}

impl Drop for Ops {
    fn drop(&mut self) {
        self.queues.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

struct Worker {
    etcd: Arc<Etcd>,
    prefix: String,
    node: String,
    answers: Sender<Answer>,
}

/// An op waiting for its next attempt.
struct Delayed {
    op: Op,
    attempt: u32,
    at: Instant,
}

impl Worker {
    fn run(&self, ops: &Receiver<Op>) {
        // Ops etcd did not take, in the order they came: a volume's later
        // ops wait behind them, so the order per volume holds.
        let mut delayed: VecDeque<Delayed> = VecDeque::new();
        loop {
            let next = match delayed.front() {
                None => ops.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => ops.recv_timeout(d.at.saturating_duration_since(Instant::now())),
            };
            match next {
                Ok(op) => {
                    if delayed.iter().any(|d| d.op.volume() == op.volume()) {
                        delayed.push_back(Delayed {
                            op,
                            attempt: 0,
                            at: Instant::now(),
                        });
                    } else if let Some(op) = self.carry_out(op, 0) {
                        delayed.push_back(Delayed {
                            op,
                            attempt: 1,
                            at: Instant::now() + RETRY.delay(0, 1.0),
                        });
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                // Stopped: what was not taken is asked again after a restart
                // (the local records still say so).
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // Retry what is due, oldest first; one that fails again keeps
            // its place and the rest of its volume waits behind it.
            let now = Instant::now();
            let mut i = 0;
            let mut blocked: Vec<String> = Vec::new();
            while i < delayed.len() {
                let volume = delayed[i].op.volume().to_string();
                if delayed[i].at > now || blocked.contains(&volume) {
                    blocked.push(volume);
                    i += 1;
                    continue;
                }
                let d = delayed.remove(i).expect("in range");
                if let Some(op) = self.carry_out(d.op, d.attempt) {
                    delayed.insert(
                        i,
                        Delayed {
                            op,
                            attempt: d.attempt + 1,
                            at: Instant::now() + RETRY.delay(d.attempt, 1.0),
                        },
                    );
                    blocked.push(volume);
                    i += 1;
                }
            }
        }
    }

    /// Carries out `op`: the op back when etcd did not take it and it is
    /// to be retried.
    fn carry_out(&self, op: Op, attempt: u32) -> Option<Op> {
        let sets = ClaimSets::new(&self.etcd, &self.prefix);
        let answer = match &op {
            Op::Admit { volume, request } => match traced_admit(&self.admitting(), volume, request)
            {
                Ok(()) => Answer::Admitted {
                    volume: volume.clone(),
                    alloc: request.alloc_id.clone(),
                },
                Err(claims::Error::Guard) => Answer::Unregistered {
                    volume: volume.clone(),
                    alloc: request.alloc_id.clone(),
                },
                Err(claims::Error::Refused(reason)) => Answer::Refused {
                    volume: volume.clone(),
                    alloc: request.alloc_id.clone(),
                    reason,
                },
                Err(err) => Answer::Unknown {
                    volume: volume.clone(),
                    alloc: request.alloc_id.clone(),
                    // The answer says etcd did not answer: the etcd error
                    // itself, without "etcd failed" before it.
                    error: match &err {
                        claims::Error::Etcd(etcd) => crate::error_chain(etcd),
                        other => crate::error_chain(other),
                    },
                },
            },
            Op::Free { volume, alloc } => match sets.free(volume, &self.node, alloc) {
                Ok(()) => Answer::Freed {
                    volume: volume.clone(),
                    alloc: alloc.clone(),
                },
                Err(err) => {
                    log::warn!(
                        "Cluster: cannot free alloc {alloc}'s claim of volume {volume} in etcd (attempt {}): {}",
                        attempt + 1,
                        crate::error_chain(&err)
                    );
                    return Some(op);
                }
            },
            Op::Share { volume, record } => match volumes::put(&self.etcd, &self.prefix, record) {
                Ok(()) => Answer::Shared {
                    volume: volume.clone(),
                },
                Err(err) => {
                    let error = crate::error_chain(&err);
                    log::warn!("Cluster: cannot write volume {volume} to etcd: {error}");
                    if attempt == 0 {
                        let _ = self.answers.send(Answer::NotShared {
                            volume: volume.clone(),
                            error,
                        });
                    }
                    return Some(op);
                }
            },
            Op::Check { volume, alloc } => match sets.read(volume) {
                Ok((set, _)) => {
                    let mine = set
                        .claims
                        .iter()
                        .find(|c| c.node == self.node && c.alloc_id == *alloc);
                    match mine {
                        Some(c) if c.wanted => Answer::Held {
                            volume: volume.clone(),
                            alloc: alloc.clone(),
                        },
                        Some(c) => Answer::Lost {
                            volume: volume.clone(),
                            alloc: alloc.clone(),
                            reason: format!("the cluster made it a past claim: {}", c.reason),
                        },
                        None => Answer::Lost {
                            volume: volume.clone(),
                            alloc: alloc.clone(),
                            reason: "the cluster freed it (this node was lost and fenced, or an operator detached it)".into(),
                        },
                    }
                }
                Err(err) => {
                    log::debug!(
                        "Cluster: cannot read volume {volume}'s claims: {}",
                        crate::error_chain(&err)
                    );
                    return Some(op);
                }
            },
            Op::Unshare { volume } => match volumes::delete(&self.etcd, &self.prefix, volume) {
                Ok(()) => return None,
                Err(err) => {
                    log::warn!(
                        "Cluster: cannot remove volume {volume} from etcd: {}",
                        crate::error_chain(&err)
                    );
                    return Some(op);
                }
            },
        };
        let _ = self.answers.send(answer);
        None
    }
}

impl Worker {
    /// The claim sets as this node admits into them: only while its key
    /// is there for the fencer to see go.
    fn admitting(&self) -> ClaimSets<'_> {
        ClaimSets::new(&self.etcd, &self.prefix).guarded(vec![Condition::Present(node::node_key(
            &self.prefix,
            &self.node,
        ))])
    }
}

/// Admits `request`, between two trace points (P7's anatomy).
fn traced_admit(
    sets: &ClaimSets<'_>,
    volume: &str,
    request: &ClaimRequest,
) -> Result<(), claims::Error> {
    crate::trace::point("etcd-admit", "");
    let admitted = sets.admit(volume, request);
    crate::trace::point("etcd-admitted", "");
    admitted
}
