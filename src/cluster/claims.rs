//! Claims shared by the agents of a cluster: one key per volume,
//! `<prefix>/volumes/<id>/claims`, holding every claim on the volume from
//! every node ([`pb::ClaimSet`]).
//!
//! A claim is admitted by reading the set, checking the access mode's
//! rule against every other claim in it, and writing the set back only if
//! nobody changed it since the read (a transaction comparing the key's
//! `mod_revision`); when somebody did, the admission starts over from a
//! fresh read. So of two agents admitting writers of a single-writer
//! volume at the same moment, exactly one wins, whichever host it runs on.
//!
//! The set is not attached to any lease: a node that vanishes leaves its
//! claims in place, to be fenced and freed deliberately, never silently.

use std::fmt;
use std::time::Duration;

use super::etcd::{self, Condition, Etcd};
use crate::csi::AccessMode;
use crate::proto::cluster as pb;

/// How many times an admission or release starts over because the set
/// changed under it: many agents writing one volume's set at once still
/// finish in a few rounds; this only bounds a pathological storm.
const MAX_ROUNDS: usize = 64;

/// Why a claim was not admitted, or the store failed.
#[derive(Debug)]
pub enum Error {
    /// The access mode does not allow this claim next to another.
    Refused(String),
    /// The set was changed by others every time it was written.
    Contended {
        volume: String,
    },
    /// The stored set does not decode.
    Corrupt {
        volume: String,
        reason: String,
    },
    /// A guarded write's condition no longer holds (the fencer was
    /// deposed, or the lost node is back; or the admitting node is not
    /// registered).
    Guard,
    Etcd(etcd::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused(reason) => f.write_str(reason),
            Error::Contended { volume } => write!(
                f,
                "the claims of volume {volume:?} kept changing while this claim was admitted"
            ),
            Error::Corrupt { volume, reason } => {
                write!(
                    f,
                    "the claims of volume {volume:?} in etcd are unreadable: {reason}"
                )
            }
            Error::Guard => f.write_str(
                "the write's condition no longer holds: this agent no longer leads, the lost node is back, or this node is not registered",
            ),
            Error::Etcd(_) => f.write_str("etcd failed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Etcd(err) => Some(err),
            _ => None,
        }
    }
}

impl From<etcd::Error> for Error {
    fn from(err: etcd::Error) -> Error {
        Error::Etcd(err)
    }
}

/// A claim as a node asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRequest {
    pub node: String,
    pub alloc_id: String,
    pub read_only: bool,
    pub access_mode: AccessMode,
    /// What the node promises should it be cut off (none without
    /// `stop_after_disconnect`).
    pub promise: Option<Promise>,
}

/// What a node promises to do with its write claims when it is cut off
/// from etcd, counted from its last keep-alive that went through: stop
/// their tasks after `stop_after`, and have them gone and the claims'
/// mounts released by `budget`. The fencer of lost nodes reads it from
/// each claim (the node's own key is gone with its lease by then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Promise {
    pub stop_after: Duration,
    pub budget: Duration,
    /// The TTL of the node's lease.
    pub lease_ttl: Duration,
}

/// How much faster than another host's clock a host's clock may run: the
/// fencer stretches what it waits by this much on each side. NTP keeps
/// clock rates within 500 ppm; this allows 2%.
pub const CLOCK_RATE_MARGIN: f64 = 0.02;

impl Promise {
    /// A claim's promise, if it carries one.
    pub fn of(c: &pb::ClusterClaim) -> Option<Promise> {
        (c.budget_ms > 0).then(|| Promise {
            stop_after: Duration::from_millis(c.stop_after_ms),
            budget: Duration::from_millis(c.budget_ms),
            lease_ttl: Duration::from_millis(c.lease_ttl_ms),
        })
    }

    fn write(&self, c: &mut pb::ClusterClaim) {
        c.stop_after_ms = self.stop_after.as_millis() as u64;
        c.budget_ms = self.budget.as_millis() as u64;
        c.lease_ttl_ms = self.lease_ttl.as_millis() as u64;
    }

    /// `promise` into claim `c`, or none (zeros).
    fn write_or_clear(promise: Option<Promise>, c: &mut pb::ClusterClaim) {
        match promise {
            Some(p) => p.write(c),
            None => {
                c.stop_after_ms = 0;
                c.budget_ms = 0;
                c.lease_ttl_ms = 0;
            }
        }
    }

    /// How long after the fencer saw the node's lease expire its write
    /// claims may be freed. The node's budget runs on its clock from its
    /// last keep-alive; etcd expired the lease at least a TTL (on etcd's
    /// clock) after that keep-alive was sent; the fencer waits on its own
    /// clock. So with every clock off in rate by up to
    /// [`CLOCK_RATE_MARGIN`]: `(budget·(1+m) − ttl·(1−m)) / (1−m)`.
    /// Durations only: no two hosts' wall clocks are ever compared.
    pub fn wait_after_expiry(&self) -> Duration {
        let m = CLOCK_RATE_MARGIN;
        let slowest_end = self.budget.as_secs_f64() * (1.0 + m);
        let earliest_expiry = self.lease_ttl.as_secs_f64() * (1.0 - m);
        Duration::from_secs_f64(((slowest_end - earliest_expiry) / (1.0 - m)).max(0.0))
    }
}

/// Whether `access_mode` admits `req` next to the claims already in `set`
/// (wanted, or past but still attached somewhere): the reason if not.
pub fn check(set: &pb::ClaimSet, req: &ClaimRequest) -> Result<(), String> {
    let others = set
        .claims
        .iter()
        .filter(|c| !(c.node == req.node && c.alloc_id == req.alloc_id));
    let single_node = matches!(
        req.access_mode,
        AccessMode::SingleNodeWriter
            | AccessMode::SingleNodeReaderOnly
            | AccessMode::SingleNodeSingleWriter
            | AccessMode::SingleNodeMultiWriter
    );
    let single_writer = matches!(
        req.access_mode,
        AccessMode::SingleNodeWriter
            | AccessMode::SingleNodeSingleWriter
            | AccessMode::MultiNodeSingleWriter
    );
    for other in others {
        if single_node && other.node != req.node {
            return Err(format!(
                "the volume ({}) is claimed on node {} by alloc {}",
                req.access_mode, other.node, other.alloc_id
            ));
        }
        if single_writer && !req.read_only && !other.read_only {
            return Err(format!(
                "the volume ({}) already has a writer: alloc {} on node {}",
                req.access_mode, other.alloc_id, other.node
            ));
        }
    }
    if req.access_mode.is_read_only() && !req.read_only {
        return Err(format!(
            "the volume ({}) is read-only: it refuses write claims",
            req.access_mode
        ));
    }
    Ok(())
}

/// The claim sets of a cluster, under `prefix`.
pub struct ClaimSets<'a> {
    etcd: &'a Etcd,
    prefix: String,
    /// What every write also compares (see [`ClaimSets::guarded`]).
    guard: Vec<Condition>,
}

impl<'a> ClaimSets<'a> {
    pub fn new(etcd: &'a Etcd, prefix: &str) -> ClaimSets<'a> {
        ClaimSets {
            etcd,
            prefix: prefix.trim_end_matches('/').to_string(),
            guard: Vec::new(),
        }
    }

    /// The same sets, written only while every one of `guard` holds (the
    /// fencer's: it still leads, the lost node is still gone); a write
    /// whose guard fails is [`Error::Guard`].
    pub fn guarded(mut self, guard: Vec<Condition>) -> ClaimSets<'a> {
        self.guard = guard;
        self
    }

    fn key(&self, volume: &str) -> Vec<u8> {
        format!("{}/volumes/{volume}/claims", self.prefix).into_bytes()
    }

    /// The volume's claims, and the revision to compare when writing them.
    pub fn read(&self, volume: &str) -> Result<(pb::ClaimSet, i64), Error> {
        match self.etcd.get(&self.key(volume))? {
            None => Ok((pb::ClaimSet::new(), 0)),
            Some(kv) => crate::message::decode::<pb::ClaimSet>(&kv.value)
                .map(|set| (set, kv.mod_revision))
                .map_err(|err| Error::Corrupt {
                    volume: volume.to_string(),
                    reason: err.to_string(),
                }),
        }
    }

    /// Changes the volume's set with `change` (which may refuse), written
    /// back (when it changed) only over the set it read; starts over when
    /// another agent wrote first. Answers what `change` answered.
    fn update<T>(
        &self,
        volume: &str,
        mut change: impl FnMut(&mut pb::ClaimSet) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let key = self.key(volume);
        for _ in 0..MAX_ROUNDS {
            let (mut set, revision) = self.read(volume)?;
            let before = set.clone();
            let answer = change(&mut set)?;
            if set == before {
                return Ok(answer);
            }
            let bytes = crate::message::encode(&set).expect("encoding a claim set cannot fail");
            let written = if set.claims.is_empty() && revision != 0 {
                self.etcd.delete_guarded(&key, revision, &self.guard)?
            } else {
                self.etcd
                    .put_guarded(&key, revision, &bytes, 0, &self.guard)?
                    .is_some()
            };
            if written {
                return Ok(answer);
            }
            if !self.guard.is_empty() && !self.etcd.holds(&self.guard)? {
                return Err(Error::Guard);
            }
        }
        Err(Error::Contended {
            volume: volume.to_string(),
        })
    }

    /// Admits a claim; a repeat of a wanted claim is admitted again.
    pub fn admit(&self, volume: &str, req: &ClaimRequest) -> Result<(), Error> {
        self.update(volume, |set| {
            let existing = set
                .claims
                .iter()
                .position(|c| c.node == req.node && c.alloc_id == req.alloc_id);
            if let Some(i) = existing {
                let c = &mut set.claims[i];
                if c.wanted && c.read_only == req.read_only {
                    // A repeat carries the node's promise as it is now.
                    let promise = req.promise.filter(|_| !req.read_only);
                    Promise::write_or_clear(promise, c);
                    return Ok(());
                }
                return Err(Error::Refused(format!(
                    "alloc {} on node {} already has a claim on the volume (release it first)",
                    req.alloc_id, req.node
                )));
            }
            check(set, req).map_err(Error::Refused)?;
            let mut claim = pb::ClusterClaim {
                node: req.node.clone(),
                alloc_id: req.alloc_id.clone(),
                read_only: req.read_only,
                access_mode: req.access_mode.number(),
                wanted: true,
                ..Default::default()
            };
            Promise::write_or_clear(req.promise.filter(|_| !req.read_only), &mut claim);
            set.claims.push(claim);
            Ok(())
        })
    }

    /// Marks a claim past, with `reason`: it still counts against others
    /// until [`ClaimSets::free`] once its node has detached it.
    pub fn release(
        &self,
        volume: &str,
        node: &str,
        alloc: &str,
        reason: &str,
    ) -> Result<(), Error> {
        self.update(volume, |set| {
            for c in &mut set.claims {
                if c.node == node && c.alloc_id == alloc {
                    c.wanted = false;
                    c.reason = reason.to_string();
                }
            }
            Ok(())
        })
    }

    /// Every volume that has claims, with its set and revision.
    pub fn all(&self) -> Result<Vec<(String, pb::ClaimSet)>, Error> {
        let volumes = format!("{}/volumes/", self.prefix);
        let (kvs, _) = self.etcd.get_prefix(volumes.as_bytes())?;
        let mut out = Vec::new();
        for kv in kvs {
            let key = String::from_utf8_lossy(&kv.key).into_owned();
            let Some(volume) = key
                .strip_prefix(&volumes)
                .and_then(|rest| rest.strip_suffix("/claims"))
            else {
                continue;
            };
            let set = crate::message::decode::<pb::ClaimSet>(&kv.value).map_err(|err| {
                Error::Corrupt {
                    volume: volume.to_string(),
                    reason: err.to_string(),
                }
            })?;
            out.push((volume.to_string(), set));
        }
        Ok(out)
    }

    /// A node is lost (its key expired): each of its claims on `volume`
    /// becomes a past claim with `reason` ("node lost", and what its
    /// fencing waits for). Nothing is freed: a lost node's claims go only
    /// once fenced, or by an operator. Whether anything changed.
    pub fn mark_lost(&self, volume: &str, node: &str, reason: &str) -> Result<bool, Error> {
        self.update(volume, |set| {
            let mut changed = false;
            for c in set.claims.iter_mut().filter(|c| c.node == node) {
                if c.wanted || c.reason != reason {
                    c.wanted = false;
                    c.reason = reason.to_string();
                    changed = true;
                }
            }
            Ok(changed)
        })
    }

    /// Forgets the claims of `node` on `volume` that `fenced` picks: the
    /// node can no longer reach the volume through them. Answers how many
    /// are left.
    pub fn free_fenced(
        &self,
        volume: &str,
        node: &str,
        fenced: impl Fn(&pb::ClusterClaim) -> bool,
    ) -> Result<usize, Error> {
        self.update(volume, |set| {
            set.claims.retain(|c| !(c.node == node && fenced(c)));
            Ok(set.claims.iter().filter(|c| c.node == node).count())
        })
    }

    /// Forgets a claim whose node has detached the volume.
    pub fn free(&self, volume: &str, node: &str, alloc: &str) -> Result<(), Error> {
        self.update(volume, |set| {
            set.claims
                .retain(|c| !(c.node == node && c.alloc_id == alloc));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(node: &str, alloc: &str, read_only: bool, mode: AccessMode) -> ClaimRequest {
        ClaimRequest {
            node: node.into(),
            alloc_id: alloc.into(),
            read_only,
            access_mode: mode,
            promise: None,
        }
    }

    fn set_of(claims: &[ClaimRequest]) -> pb::ClaimSet {
        pb::ClaimSet {
            claims: claims
                .iter()
                .map(|r| pb::ClusterClaim {
                    node: r.node.clone(),
                    alloc_id: r.alloc_id.clone(),
                    read_only: r.read_only,
                    access_mode: r.access_mode.number(),
                    wanted: true,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_fencer_waits_the_budget_less_the_lease_stretched_by_the_clock_margin() {
        let promise = Promise {
            stop_after: Duration::from_secs(4),
            budget: Duration::from_secs(11),
            lease_ttl: Duration::from_secs(10),
        };
        let wait = promise.wait_after_expiry().as_secs_f64();
        // (11·1.02 − 10·0.98) / 0.98 = 1.448...
        assert!((wait - (11.0 * 1.02 - 9.8) / 0.98).abs() < 1e-9, "{wait}");
        // Never less than the budget less the TTL, whatever the margin.
        assert!(wait > 1.0);
        // A budget well within the TTL still waits out the rate margin.
        let short = Promise {
            budget: Duration::from_secs(5),
            ..promise
        };
        assert_eq!(short.wait_after_expiry(), Duration::ZERO);
        let claim = {
            let mut c = pb::ClusterClaim::new();
            promise.write(&mut c);
            c
        };
        assert_eq!(Promise::of(&claim), Some(promise));
        assert_eq!(Promise::of(&pb::ClusterClaim::new()), None);
    }

    #[test]
    fn a_single_writer_volume_has_one_writer_across_nodes() {
        let mode = AccessMode::MultiNodeSingleWriter;
        let set = set_of(&[req("a", "w1", false, mode)]);
        let err = check(&set, &req("b", "w2", false, mode)).unwrap_err();
        assert!(
            err.contains("already has a writer: alloc w1 on node a"),
            "{err}"
        );
        assert!(check(&set, &req("b", "r1", true, mode)).is_ok());
    }

    #[test]
    fn a_single_node_volume_stays_on_its_node() {
        let mode = AccessMode::SingleNodeMultiWriter;
        let set = set_of(&[req("a", "w1", false, mode)]);
        assert!(check(&set, &req("a", "w2", false, mode)).is_ok());
        let err = check(&set, &req("b", "w3", false, mode)).unwrap_err();
        assert!(err.contains("claimed on node a by alloc w1"), "{err}");
    }

    #[test]
    fn readers_of_a_multi_node_reader_volume_all_fit_and_writers_do_not() {
        let mode = AccessMode::MultiNodeReaderOnly;
        let set = set_of(&[req("a", "r1", true, mode), req("b", "r2", true, mode)]);
        assert!(check(&set, &req("c", "r3", true, mode)).is_ok());
        assert!(check(&set, &req("c", "w1", false, mode)).is_err());
    }
}
