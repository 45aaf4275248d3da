//! Claims the cluster took away: this node held them, and etcd no longer
//! has them wanted, because the node was lost (cut off past the lease TTL)
//! and fenced, or an operator detached them. The node must give them up
//! too, its tasks first: a lost claim is handed to the agent
//! ([`VolumeManager::take_lost_claims`]), which stops the alloc holding it
//! (its release follows the tasks) or, for a claim made with `volume
//! claim`, releases it.
//!
//! The watch of the claim sets may show a set older than an admission the
//! loop has already heard of, so a set without this node's claim is only a
//! hint: the claim is read again from etcd ([`Op::Check`]), after the
//! admission, and given up only when that read does not have it wanted.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::ops::Op;
use crate::volume::manager::{claim_event, VolumeManager};
use crate::volume::model::Admission;

/// A claim the cluster took away, for the agent to give up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostClaim {
    pub volume: String,
    pub alloc: String,
    pub reason: String,
}

/// The manager's account of lost claims.
#[derive(Default)]
pub(in crate::volume::manager) struct LostClaims {
    /// Claims being read again from etcd.
    checking: BTreeSet<(String, String)>,
    /// Why each lost claim was lost, until it is forgotten.
    reasons: BTreeMap<(String, String), String>,
    /// Lost since the agent last took them.
    new: Vec<LostClaim>,
}

fn key(volume: &str, alloc: &str) -> (String, String) {
    (volume.to_string(), alloc.to_string())
}

impl VolumeManager {
    /// The watch saw volume `id`'s claim set (kept in the cluster side;
    /// none when the volume has no claims): each admitted claim of this
    /// node that it lacks is read again.
    pub(in crate::volume::manager) fn check_claims_held(&mut self, id: &str) {
        let Some(side) = &mut self.cluster else {
            return;
        };
        let Some(entry) = self.entries.get(id) else {
            return;
        };
        let set = side.claim_sets.get(id);
        let held = |alloc: &str| {
            set.is_some_and(|set| {
                set.claims
                    .iter()
                    .any(|c| c.node == side.node && c.alloc_id == alloc && c.wanted)
            })
        };
        let unheld: Vec<String> = entry
            .volume
            .claims
            .values()
            .filter(|c| c.admission == Admission::Admitted && c.wanted && !held(&c.alloc_id))
            .map(|c| c.alloc_id.clone())
            .collect();
        for alloc in unheld {
            let k = key(id, &alloc);
            if side.lost.reasons.contains_key(&k) || !side.lost.checking.insert(k) {
                continue;
            }
            side.push_op(Op::Check {
                volume: id.to_string(),
                alloc,
            });
        }
    }

    /// etcd still has the claim wanted.
    pub(in crate::volume::manager) fn claim_held(&mut self, volume: &str, alloc: &str) {
        if let Some(side) = &mut self.cluster {
            side.lost.checking.remove(&key(volume, alloc));
        }
    }

    /// etcd no longer has the claim wanted: it is lost, unless it was
    /// released meanwhile.
    pub(in crate::volume::manager) fn claim_lost(
        &mut self,
        volume: &str,
        alloc: &str,
        reason: String,
    ) {
        let Some(side) = &mut self.cluster else {
            return;
        };
        let k = key(volume, alloc);
        side.lost.checking.remove(&k);
        let wanted = self
            .entries
            .get(volume)
            .and_then(|e| e.volume.claims.get(alloc))
            .is_some_and(|c| c.wanted && c.admission == Admission::Admitted);
        if !wanted {
            return;
        }
        log::warn!("Volume {volume}: alloc {alloc}'s claim is lost: {reason}; giving it up");
        claim_event("ClaimLost", volume, format!("alloc {alloc}: {reason}"));
        side.lost.reasons.insert(k, reason.clone());
        side.lost.new.push(LostClaim {
            volume: volume.to_string(),
            alloc: alloc.to_string(),
            reason,
        });
    }

    /// Claims lost since the last call, for the agent to give up.
    pub fn take_lost_claims(&mut self) -> Vec<LostClaim> {
        self.cluster
            .as_mut()
            .map(|side| std::mem::take(&mut side.lost.new))
            .unwrap_or_default()
    }

    /// Why the claim was lost, if the cluster took it away.
    pub(in crate::volume::manager) fn lost_reason(
        &self,
        volume: &str,
        alloc: &str,
    ) -> Option<&str> {
        let side = self.cluster.as_ref()?;
        side.lost
            .reasons
            .get(&key(volume, alloc))
            .map(String::as_str)
    }

    /// A claim is forgotten: so is its loss.
    pub(in crate::volume::manager) fn forget_lost(&mut self, volume: &str, alloc: &str) {
        if let Some(side) = &mut self.cluster {
            side.lost.reasons.remove(&key(volume, alloc));
        }
    }

    /// Gives up a lost claim that no alloc of this agent holds (one made
    /// with `volume claim`): it is released like any other.
    pub fn release_lost(&mut self, volume: &str, alloc: &str) {
        let (reply, _) = crossbeam_channel::bounded(1);
        self.release(volume, alloc, reply.into());
    }
}

impl VolumeManager {
    /// The strictest promise this node's write claims hold in etcd (as
    /// the watch last saw them): the shortest `stop_after_disconnect`, and
    /// the shortest time its tasks may then take to die. A node keeps the
    /// promise each claim was admitted with, even after its config
    /// changed.
    pub fn promised(&self) -> Option<(std::time::Duration, std::time::Duration)> {
        let side = self.cluster.as_ref()?;
        side.claim_sets
            .values()
            .flat_map(|set| &set.claims)
            .filter(|c| c.node == side.node && !c.read_only)
            .filter_map(crate::cluster::claims::Promise::of)
            .map(|p| (p.stop_after, p.budget.saturating_sub(p.stop_after)))
            .reduce(|(s1, k1), (s2, k2)| (s1.min(s2), k1.min(k2)))
    }

    /// The allocs holding a write claim that no other node may share
    /// (every write claim but a MULTI_NODE_MULTI_WRITER volume's): what a
    /// node cut off from its cluster stops, since the cluster may fence
    /// its claims and give the volume to another node.
    pub fn exclusive_writers(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for entry in self.entries.values() {
            for claim in entry.volume.claims.values() {
                let exclusive = !claim.read_only
                    && claim.capability.access_mode != crate::csi::AccessMode::MultiNodeMultiWriter;
                if claim.wanted && exclusive {
                    out.push((entry.volume.id.clone(), claim.alloc_id.clone()));
                }
            }
        }
        out
    }
}
