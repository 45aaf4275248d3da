//! Elections: of the agents that run a plugin's controller, only the one
//! holding `<prefix>/controllers/<plugin>` makes controller RPCs for the
//! cluster (at most one leader per plugin); of all agents, only the one
//! holding `<prefix>/fencer` fences lost nodes ([`super::fence`]). A key
//! is attached to its leader's lease: when the leader is lost, etcd
//! deletes the key and another candidate takes it.
//!
//! [`Candidacy::run`] is a candidate's whole life: it grants a lease,
//! campaigns, follows until the leader leaves, leads while the lease
//! lives, and starts over with backoff when etcd fails.

use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, RecvTimeoutError};

use super::etcd::{self, Condition, Etcd, Event};
use crate::csi::Backoff;
use crate::proto::cluster as pb;

const RETRY: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));

/// Who holds a plugin's controller election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// This candidate leads.
    Leader,
    /// Another node leads.
    Follower { leader: String },
}

/// The election key of `plugin`.
pub fn election_key(prefix: &str, plugin: &str) -> Vec<u8> {
    format!("{}/controllers/{plugin}", prefix.trim_end_matches('/')).into_bytes()
}

/// The key of the cluster's fencer election.
pub fn fencer_key(prefix: &str) -> Vec<u8> {
    format!("{}/fencer", prefix.trim_end_matches('/')).into_bytes()
}

/// Tries to take the election of `plugin` for `candidate` (a node name),
/// attached to `lease` (the node's lease): atomically, only if nobody
/// holds it. A candidate that already leads stays the leader.
pub fn campaign(
    etcd: &Etcd,
    prefix: &str,
    plugin: &str,
    candidate: &str,
    lease: i64,
) -> Result<Leadership, etcd::Error> {
    let record = pb::Leader {
        node: candidate.to_string(),
        ..Default::default()
    };
    campaign_for(etcd, &election_key(prefix, plugin), &record, lease)
}

/// Tries to take the election whose key is `key`, writing `record`.
fn campaign_for(
    etcd: &Etcd,
    key: &[u8],
    record: &pb::Leader,
    lease: i64,
) -> Result<Leadership, etcd::Error> {
    let value = crate::message::encode(record).expect("encoding a leader record cannot fail");
    if etcd.put_if(key, 0, &value, lease)?.is_some() {
        return Ok(Leadership::Leader);
    }
    match etcd.get(key)? {
        // Leadership is the lease, not the name: a key this node's
        // previous process left on its own lease is another leader's
        // until that lease expires.
        Some(kv) if kv.lease == lease => Ok(Leadership::Leader),
        Some(kv) => Ok(Leadership::Follower {
            leader: leader_of(&kv.value).node,
        }),
        // The leader left between the two calls: try again.
        None => campaign_for(etcd, key, record, lease),
    }
}

/// The record an election key holds. An unreadable one names nobody.
pub fn leader_of(value: &[u8]) -> pb::Leader {
    crate::message::decode::<pb::Leader>(value).unwrap_or_default()
}

/// The node that leads `plugin`'s controller, if any.
pub fn leader(etcd: &Etcd, prefix: &str, plugin: &str) -> Result<Option<String>, etcd::Error> {
    Ok(etcd
        .get(&election_key(prefix, plugin))?
        .map(|kv| leader_of(&kv.value).node))
}

/// Whether a watch batch of the election key says the leader left.
pub fn leader_left(events: &[Event]) -> bool {
    events.iter().any(|e| matches!(e, Event::Delete { .. }))
}

/// Why leading (or following) ended.
pub enum Ended {
    Stopped,
    /// Leadership lost or etcd failed: campaign again.
    Again(String),
}

impl From<etcd::Error> for Ended {
    fn from(err: etcd::Error) -> Ended {
        Ended::Again(crate::error_chain(&err))
    }
}

/// A leader's lease, kept alive from the leader's own loop.
pub struct Held {
    pub lease: i64,
    /// The election's key.
    key: Vec<u8>,
    ttl: Duration,
    last_alive: Instant,
}

impl Held {
    /// What every write of the leader compares: its election's key is
    /// still on its lease. A deposed leader's writes fail.
    pub fn guard(&self) -> Condition {
        Condition::OnLease {
            key: self.key.clone(),
            lease: self.lease,
        }
    }

    /// How often [`Held::renew`] is to be called.
    pub fn period(&self) -> Duration {
        self.ttl / 3
    }

    /// Keeps the lease alive: `Err` when the leader must stop leading (the
    /// lease expired, or could not be kept alive for half its TTL, so that
    /// it stops before a follower can take over).
    pub fn renew(&mut self, etcd: &Etcd) -> Result<(), Ended> {
        // The lease lives at least a TTL from when this call is sent, not
        // from when its answer comes back.
        let sent = Instant::now();
        match etcd.keep_alive_within(self.lease, self.period()) {
            Ok(ttl) if ttl > 0 => {
                self.last_alive = sent;
                Ok(())
            }
            Ok(_) => Err(Ended::Again("the leader's lease expired".into())),
            Err(_) if self.last_alive.elapsed() >= self.ttl / 2 => Err(Ended::Again(
                "the leader's lease could not be kept alive".into(),
            )),
            Err(_) => Ok(()),
        }
    }
}

/// A candidate in the election of `key`, writing `record` (its node name,
/// and what others learn of it), on leases of `ttl`. `what` names the
/// election in the log.
pub struct Candidacy<'a> {
    pub etcd: &'a Etcd,
    pub key: Vec<u8>,
    pub record: pb::Leader,
    pub ttl: Duration,
    pub what: &'a str,
}

impl Candidacy<'_> {
    /// Campaigns until `stop` is dropped; while this node leads, `lead`
    /// runs (and renews the [`Held`] lease it is given).
    pub fn run(&self, stop: &Receiver<()>, mut lead: impl FnMut(&mut Held) -> Ended) {
        let mut attempt = 0;
        loop {
            let ended = match self.etcd.grant(self.ttl) {
                Ok((lease, _)) => {
                    let mut held = Held {
                        lease,
                        key: self.key.clone(),
                        ttl: self.ttl,
                        last_alive: Instant::now(),
                    };
                    let ended = self.campaign(&mut held, stop, &mut lead);
                    let _ = self.etcd.revoke(lease);
                    ended
                }
                Err(err) => err.into(),
            };
            match ended {
                Ended::Stopped => return,
                Ended::Again(why) => {
                    log::debug!("Cluster: {}: {why}", self.what);
                    let delay = RETRY.delay(attempt, 1.0);
                    attempt = attempt.saturating_add(1).min(16);
                    match stop.recv_timeout(delay) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            }
        }
    }

    fn campaign(
        &self,
        held: &mut Held,
        stop: &Receiver<()>,
        lead: &mut impl FnMut(&mut Held) -> Ended,
    ) -> Ended {
        match campaign_for(self.etcd, &self.key, &self.record, held.lease) {
            Ok(Leadership::Leader) => {
                log::info!("Cluster: this node leads the {}", self.what);
                let ended = lead(held);
                log::info!("Cluster: this node no longer leads the {}", self.what);
                ended
            }
            Ok(Leadership::Follower { leader }) => {
                log::debug!("Cluster: node {leader} leads the {}", self.what);
                self.follow(held, stop).unwrap_or_else(Ended::from)
            }
            Err(err) => err.into(),
        }
    }

    /// Waits until the leader leaves (its key is deleted), keeping the
    /// candidate's lease alive meanwhile.
    fn follow(&self, held: &Held, stop: &Receiver<()>) -> Result<Ended, etcd::Error> {
        let Some(kv) = self.etcd.get(&self.key)? else {
            return Ok(Ended::Again("the leader left".into()));
        };
        let watch = self.etcd.watch_prefix(&self.key, kv.mod_revision + 1)?;
        let keep_alive = crossbeam_channel::tick(held.period());
        loop {
            select! {
                recv(stop) -> _ => return Ok(Ended::Stopped),
                recv(keep_alive) -> _ => {
                    if self.etcd.keep_alive(held.lease)? <= 0 {
                        return Ok(Ended::Again("the candidate's lease expired".into()));
                    }
                }
                recv(watch.receiver()) -> batch => {
                    let batch = batch.map_err(|_| etcd::Error::Timeout)??;
                    let left = batch.events.iter().any(|e| e.key() == self.key.as_slice())
                        && leader_left(&batch.events);
                    if left {
                        return Ok(Ended::Again("the leader left".into()));
                    }
                }
            }
        }
    }
}
