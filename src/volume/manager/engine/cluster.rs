//! The manager in a cluster (an agent with a `cluster` block): claims
//! admitted by the cluster's claim sets, volumes shared with every agent.
//!
//! - A new claim is journalled [`Admission::Admitting`] and etcd is asked
//!   ([`Op::Admit`]) once that record is durable; the planner leaves it
//!   alone until etcd answers. Admitted, it goes ahead as any claim;
//!   refused (another node's claim is in the way), it is dropped and its
//!   waiters hear why; when etcd did not answer for sure, it is given up
//!   and freed in etcd, which it may have reached.
//! - A released claim, once nothing of it is left on this node, is
//!   journalled [`Admission::Freeing`] and etcd is told ([`Op::Free`]);
//!   it is forgotten (and its release answered) when etcd has dropped it.
//!   So etcd never holds a claim that this node has forgotten, crash or
//!   not: after a restart, what the records say is in flight is asked
//!   again.
//! - Each volume's record, as true on every host (spec, capabilities,
//!   secrets, external ID, capacity), is written to etcd when it changes
//!   here ([`Op::Share`]); a registration is answered once etcd has it.
//!   Records other agents write are adopted from the watch
//!   ([`VolumeEvent`]), and a record removed from etcd is forgotten here
//!   unless this node still has claims on it. What only this host knows
//!   (stagings, publishes, binds) never leaves the local journal.
//! - When the watch (re)starts it reports every record: etcd's wins. A
//!   local volume etcd does not have was deregistered by another host
//!   while this one was away if this etcd cluster held it before (each
//!   volume remembers the ID of the etcd cluster that held its record), and
//!   is forgotten here; otherwise (registered before the agent joined,
//!   while etcd was out of reach, or etcd is a new cluster) it is written
//!   to etcd.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::call::{CallError, ErrorKind};
use crate::cluster::attachments::Attacher;
use crate::cluster::claims::{ClaimRequest, Promise};
use crate::cluster::ops::{Answer, Op};
use crate::cluster::volumes::VolumeEvent;
use crate::csi::types::{CapabilitySet, ControllerCapability};
use crate::proto::cluster as pb;
use crate::proto::state as statepb;
use crate::volume::manager::engine::lost::LostClaims;
use crate::volume::manager::{
    error, local_plugin_view, volume_event, PluginView, Reply, ReplyTo, VolumeManager,
};
use crate::volume::model::{Admission, Volume};

/// What the manager keeps about its cluster.
pub(in crate::volume::manager) struct ClusterSide {
    /// This agent's node name.
    pub(in crate::volume::manager) node: String,
    /// What this node promises for its write claims should it be cut off
    /// (its `stop_after_disconnect`), written into each one it admits.
    promise: Option<Promise>,
    /// Ops for etcd, handed out once this turn is durable.
    ops: Vec<Op>,
    /// Each volume's record as etcd has it: written from here, or seen in
    /// the watch.
    shared: BTreeMap<String, statepb::Volume>,
    /// Registration answers waiting for the volume's record to be in etcd.
    sharing: BTreeMap<String, Vec<Reply>>,
    /// Every volume's claim set, as the watch last saw it.
    pub(in crate::volume::manager) claim_sets: BTreeMap<String, pb::ClaimSet>,
    /// Whether the watch has reported the records once.
    synced: bool,
    /// The ID of the etcd cluster, once the watch has read it.
    cluster_id: u64,
    /// Asks the controller leader to attach and detach.
    attacher: Arc<Attacher>,
    /// Claims the cluster took away.
    pub(in crate::volume::manager) lost: LostClaims,
    /// The capabilities of each plugin's controller leader, as its
    /// election last said (one led since this agent started): on a host
    /// without a controller of the plugin, the leader attaches its volumes
    /// (if it can) and makes its other controller calls, relayed.
    controllers: BTreeMap<String, CapabilitySet<ControllerCapability>>,
}

impl ClusterSide {
    /// Hands `op` out once this turn is durable.
    pub(in crate::volume::manager) fn push_op(&mut self, op: Op) {
        self.ops.push(op);
    }
}

/// A volume's record as every host sees it: without what only this host
/// knows.
pub(in crate::volume::manager) fn shared_record(v: &Volume) -> statepb::Volume {
    let mut record = v.to_proto();
    record.attachment = Default::default();
    record.publish_context.clear();
    record.stagings.clear();
    record.claims.clear();
    record.create_intent = Default::default();
    record.in_cluster = 0;
    record
}

/// `shared` with this host's state of the volume from `local`.
fn with_host_state(mut shared: Volume, local: &Volume) -> Volume {
    shared.attachment = local.attachment;
    shared.publish_context = local.publish_context.clone();
    shared.stagings = local.stagings.clone();
    shared.claims = local.claims.clone();
    shared.creating = local.creating.clone();
    shared.in_cluster = local.in_cluster;
    shared
}

impl VolumeManager {
    /// Joins the cluster as node `node`: from now on claims go through its
    /// claim sets and volumes are shared. What the records say is in
    /// flight with etcd is asked again; claims made before the agent
    /// joined a cluster are admitted like new ones.
    pub fn join_cluster(&mut self, node: &str, attacher: Attacher, promise: Option<Promise>) {
        let mut side = ClusterSide {
            attacher: Arc::new(attacher),
            node: node.to_string(),
            promise,
            ops: Vec::new(),
            shared: BTreeMap::new(),
            sharing: BTreeMap::new(),
            claim_sets: BTreeMap::new(),
            synced: false,
            cluster_id: 0,
            lost: LostClaims::default(),
            controllers: BTreeMap::new(),
        };
        for entry in self.entries.values_mut() {
            let v = &mut entry.volume;
            for claim in v.claims.values_mut() {
                if claim.admission == Admission::Local && claim.wanted {
                    claim.admission = Admission::Admitting;
                    self.changed.insert(v.id.clone());
                }
                // A released local claim goes without the cluster.
                match claim.admission {
                    Admission::Admitting => side.ops.push(Op::Admit {
                        volume: v.id.clone(),
                        request: request(node, promise, claim),
                    }),
                    Admission::Freeing => side.ops.push(Op::Free {
                        volume: v.id.clone(),
                        alloc: claim.alloc_id.clone(),
                    }),
                    Admission::Local | Admission::Admitted => {}
                }
            }
        }
        self.cluster = Some(side);
    }

    /// In a cluster, the ControllerPublish and Unpublish steps go to the
    /// controller leader through this.
    pub(in crate::volume::manager) fn attacher(&self) -> Option<Arc<Attacher>> {
        self.cluster.as_ref().map(|c| c.attacher.clone())
    }

    /// Plugin `id` as this host sees it: [`local_plugin_view`], and in a
    /// cluster, a plugin without a controller here (or without any
    /// instance here) whose controller leads elsewhere has that controller,
    /// reached through the leader.
    pub(in crate::volume::manager) fn plugin_view(
        &self,
        registry: &crate::plugin::Registry,
        id: &str,
    ) -> Option<PluginView> {
        let local = local_plugin_view(registry, id);
        let Some(capabilities) = self.cluster.as_ref().and_then(|c| c.controllers.get(id)) else {
            return local;
        };
        let mut view = match local {
            Some(view) if view.controller.is_some() => return Some(view),
            Some(view) => view,
            None => PluginView::default(),
        };
        view.remote_controller = true;
        view.set_controller_features(|c| capabilities.contains(&c));
        Some(view)
    }

    /// The node name this agent has in its cluster, if it is in one.
    pub fn cluster_node(&self) -> Option<&str> {
        self.cluster.as_ref().map(|c| c.node.as_str())
    }

    /// Ops for etcd; to be carried out once this turn is durable.
    pub(in crate::volume::manager) fn take_cluster_ops(&mut self) -> Vec<Op> {
        self.cluster
            .as_mut()
            .map(|c| std::mem::take(&mut c.ops))
            .unwrap_or_default()
    }

    /// A new claim, in a cluster: it waits for etcd's admission.
    pub(in crate::volume::manager) fn admit_in_cluster(&mut self, volume: &str, alloc: &str) {
        let Some(side) = &mut self.cluster else {
            return;
        };
        let Some(claim) = self
            .entries
            .get_mut(volume)
            .and_then(|e| e.volume.claims.get_mut(alloc))
        else {
            return;
        };
        claim.admission = Admission::Admitting;
        side.ops.push(Op::Admit {
            volume: volume.to_string(),
            request: request(&side.node, side.promise, claim),
        });
    }

    /// A released claim with nothing left on this node: whether etcd must
    /// drop it first (then it is journalled `Freeing` and etcd is told).
    pub(in crate::volume::manager) fn free_in_cluster(
        &mut self,
        volume: &str,
        alloc: &str,
    ) -> bool {
        let Some(side) = &mut self.cluster else {
            return false;
        };
        let Some(claim) = self
            .entries
            .get_mut(volume)
            .and_then(|e| e.volume.claims.get_mut(alloc))
        else {
            return false;
        };
        if claim.admission != Admission::Admitted {
            return false;
        }
        claim.admission = Admission::Freeing;
        self.changed.insert(volume.to_string());
        side.ops.push(Op::Free {
            volume: volume.to_string(),
            alloc: alloc.to_string(),
        });
        true
    }

    /// A registration's answer: in a cluster, once etcd has the volume.
    pub(in crate::volume::manager) fn answer_registered(
        &mut self,
        id: &str,
        reply: ReplyTo,
        answer: crate::volume::calls::Answer,
    ) {
        match &mut self.cluster {
            Some(side) => side
                .sharing
                .entry(id.to_string())
                .or_default()
                .push((reply, Ok(answer))),
            None => self.outbox.push((reply, Ok(answer))),
        }
    }

    /// Why volume `id` may not be deregistered because of claims on other
    /// nodes, if it may not.
    pub(in crate::volume::manager) fn claimed_elsewhere(&self, id: &str) -> Option<CallError> {
        let side = self.cluster.as_ref()?;
        let set = side.claim_sets.get(id)?;
        let others: Vec<String> = set
            .claims
            .iter()
            .filter(|c| c.node != side.node)
            .map(|c| format!("alloc {} on node {}", c.alloc_id, c.node))
            .collect();
        (!others.is_empty()).then(|| {
            error(
                ErrorKind::FailedPrecondition,
                format!(
                    "volume {id:?} is claimed on other nodes of the cluster: {} (release them there first)",
                    others.join(", ")
                ),
            )
        })
    }

    /// The claims of other nodes on volume `id`, as the watch last saw
    /// them.
    pub(in crate::volume::manager) fn claims_elsewhere(&self, id: &str) -> Vec<pb::ClusterClaim> {
        let Some(side) = &self.cluster else {
            return Vec::new();
        };
        side.claim_sets
            .get(id)
            .map(|set| {
                set.claims
                    .iter()
                    .filter(|c| c.node != side.node)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A changed volume, at the end of the turn: its record goes to etcd
    /// when what every host sees of it changed here.
    pub(in crate::volume::manager) fn share_change(&mut self, id: &str) {
        let Some(side) = &mut self.cluster else {
            return;
        };
        if !side.synced {
            // The first read of etcd decides (see `volume_event`).
            return;
        }
        match self.entries.get(id) {
            Some(entry) if entry.volume.creating.is_none() => {
                let record = shared_record(&entry.volume);
                if side.shared.get(id) != Some(&record) {
                    side.shared.insert(id.to_string(), record.clone());
                    side.ops.push(Op::Share {
                        volume: id.to_string(),
                        record: Box::new(record),
                    });
                }
            }
            Some(_) => {}
            None => {
                if side.shared.remove(id).is_some() {
                    side.ops.push(Op::Unshare {
                        volume: id.to_string(),
                    });
                }
            }
        }
    }

    /// etcd's answer to an op.
    pub fn cluster_answer(&mut self, answer: Answer) {
        match answer {
            Answer::Admitted { volume, alloc } => {
                self.touch(&volume);
                let node_side_empty = match self
                    .entries
                    .get_mut(&volume)
                    .and_then(|e| e.volume.claims.get_mut(&alloc))
                {
                    Some(claim) if claim.admission == Admission::Admitting => {
                        claim.admission = Admission::Admitted;
                        false
                    }
                    Some(_) => return,
                    None => true,
                };
                if node_side_empty {
                    // Forgotten meanwhile: etcd must forget it too.
                    if let Some(side) = &mut self.cluster {
                        side.ops.push(Op::Free { volume, alloc });
                    }
                    return;
                }
                log::info!("Volume {volume}: the cluster admitted alloc {alloc}'s claim");
                self.changed.insert(volume);
            }
            Answer::Refused {
                volume,
                alloc,
                reason,
            } => {
                log::info!("Volume {volume}: the cluster refused alloc {alloc}'s claim: {reason}");
                self.give_up_claim(&volume, &alloc, Admission::Local);
                self.fail_claim_waiters(&volume, &alloc, ErrorKind::FailedPrecondition, &reason);
            }
            Answer::Unknown {
                volume,
                alloc,
                error,
            } => {
                log::warn!(
                    "Volume {volume}: etcd did not admit alloc {alloc}'s claim for sure: {error}"
                );
                if self.give_up_claim(&volume, &alloc, Admission::Freeing) {
                    if let Some(side) = &mut self.cluster {
                        side.ops.push(Op::Free {
                            volume: volume.clone(),
                            alloc: alloc.clone(),
                        });
                    }
                }
                let reason = format!("the cluster's etcd did not answer: {error}");
                self.fail_claim_waiters(&volume, &alloc, ErrorKind::Unavailable, &reason);
            }
            Answer::Unregistered { volume, alloc } => {
                log::warn!(
                    "Volume {volume}: alloc {alloc}'s claim was not admitted: this node is not registered in the cluster"
                );
                self.give_up_claim(&volume, &alloc, Admission::Local);
                let reason = "this node is not registered in the cluster (its lease expired while it was stopped or cut off, or it has not registered yet): no claim is admitted until it is, since the cluster could not fence it";
                self.fail_claim_waiters(&volume, &alloc, ErrorKind::Unavailable, reason);
            }
            Answer::Freed { volume, alloc } => {
                self.touch(&volume);
                let Some(claim) = self
                    .entries
                    .get_mut(&volume)
                    .and_then(|e| e.volume.claims.get_mut(&alloc))
                else {
                    return;
                };
                if claim.admission != Admission::Freeing {
                    return;
                }
                if !claim.is_on_node() {
                    self.forget_claim(&volume, &alloc);
                } else {
                    // The node side is still being released: it goes on
                    // without the cluster.
                    claim.admission = Admission::Local;
                    self.changed.insert(volume);
                }
            }
            Answer::Held { volume, alloc } => self.claim_held(&volume, &alloc),
            Answer::Lost {
                volume,
                alloc,
                reason,
            } => self.claim_lost(&volume, &alloc, reason),
            Answer::Shared { volume } => {
                self.held_by_etcd(&volume);
                if let Some(side) = &mut self.cluster {
                    for reply in side.sharing.remove(&volume).unwrap_or_default() {
                        self.outbox.push(reply);
                    }
                }
            }
            Answer::NotShared { volume, error: why } => {
                if let Some(side) = &mut self.cluster {
                    for (reply, _) in side.sharing.remove(&volume).unwrap_or_default() {
                        let err = error(
                            ErrorKind::Unavailable,
                            format!(
                                "volume {volume:?} is registered on this host, but the cluster's etcd has not taken it yet (the agent keeps trying): {why}"
                            ),
                        );
                        self.outbox.push((reply, Err(err)));
                    }
                }
            }
        }
    }

    /// A claim the cluster did not admit: dropped when nothing of it is on
    /// this node, else released. `admission` is what it is left with:
    /// `Freeing` when etcd may hold it. Whether the claim was there.
    fn give_up_claim(&mut self, volume: &str, alloc: &str, admission: Admission) -> bool {
        self.touch(volume);
        let Some(entry) = self.entries.get_mut(volume) else {
            return false;
        };
        let Some(claim) = entry.volume.claims.get_mut(alloc) else {
            return false;
        };
        if claim.admission != Admission::Admitting {
            return false;
        }
        self.changed.insert(volume.to_string());
        let nothing_here = !claim.is_on_node();
        if nothing_here && admission == Admission::Local {
            entry.volume.claims.remove(alloc);
            return true;
        }
        // Mounted here (a claim from before the agent joined the cluster),
        // or maybe in etcd: released, then freed.
        claim.wanted = false;
        claim.admission = admission;
        true
    }

    /// What the watch of the cluster's volumes saw.
    pub fn volume_event(&mut self, event: VolumeEvent) {
        let Some(side) = &mut self.cluster else {
            return;
        };
        match event {
            VolumeEvent::Sync {
                records,
                claims,
                cluster_id,
            } => {
                let claims = order::map(claims);
                for (id, set) in &side.claim_sets {
                    if lost_a_claim(set, claims.get(id)) {
                        self.freed.insert(id.clone());
                    }
                }
                side.claim_sets = claims;
                side.synced = true;
                side.cluster_id = cluster_id;
                let in_etcd: std::collections::BTreeSet<String> =
                    order::set(records.iter().map(|r| r.id.clone()));
                for record in records {
                    self.adopt(record);
                }
                // Local volumes etcd does not have: deregistered by another
                // host while this one was away if this etcd held them,
                // else (registered before etcd took them, or a new etcd)
                // shared now.
                let local: Vec<(String, u64)> = self
                    .entries
                    .values()
                    .filter(|e| !in_etcd.contains(&e.volume.id))
                    .map(|e| (e.volume.id.clone(), e.volume.in_cluster))
                    .collect();
                for (id, held_by) in local {
                    if held_by != 0 && held_by == cluster_id {
                        log::info!(
                            "Volume {id} was deregistered in the cluster while this agent was away"
                        );
                        self.forget_shared(&id);
                    } else {
                        self.share_change(&id);
                    }
                }
                let ids: Vec<String> = self.entries.keys().cloned().collect();
                for id in ids {
                    self.check_claims_held(&id);
                }
            }
            VolumeEvent::Put(record) => self.adopt(*record),
            VolumeEvent::Controller {
                plugin,
                capabilities,
            } => {
                if side.controllers.get(&plugin) != Some(&capabilities) {
                    let names: Vec<&str> = capabilities.iter().map(|c| c.as_str()).collect();
                    log::info!(
                        "Cluster: plugin {plugin}'s controller leads in the cluster ({})",
                        names.join(", ")
                    );
                    side.controllers.insert(plugin.clone(), capabilities);
                    let ids: Vec<String> = self
                        .entries
                        .values()
                        .filter(|e| e.volume.plugin_id == plugin)
                        .map(|e| e.volume.id.clone())
                        .collect();
                    for id in ids {
                        self.touch(&id);
                    }
                }
            }
            VolumeEvent::Removed(id) => self.forget_shared(&id),
            VolumeEvent::Claims { volume, set } => {
                if let Some(old) = side.claim_sets.get(&volume) {
                    if lost_a_claim(old, Some(&set)) {
                        self.freed.insert(volume.clone());
                    }
                }
                if set.claims.is_empty() {
                    side.claim_sets.remove(&volume);
                } else {
                    side.claim_sets.insert(volume.clone(), set);
                }
                self.check_claims_held(&volume);
            }
        }
    }

    /// etcd holds volume `id`'s record: remembered with the volume, so
    /// that its absence from this etcd later means a deregistration.
    fn held_by_etcd(&mut self, id: &str) {
        let Some(cluster_id) = self.cluster.as_ref().map(|c| c.cluster_id) else {
            return;
        };
        if let Some(entry) = self.entries.get_mut(id) {
            if cluster_id != 0 && entry.volume.in_cluster != cluster_id {
                entry.volume.in_cluster = cluster_id;
                self.changed.insert(id.to_string());
            }
        }
    }

    /// A volume's record from etcd: added here, or this host's copy
    /// brought up to date.
    fn adopt(&mut self, record: statepb::Volume) {
        let Some(side) = &mut self.cluster else {
            return;
        };
        let id = record.id.clone();
        side.shared.insert(id.clone(), record.clone());
        let shared = match Volume::from_proto(&record) {
            Ok(v) => v,
            Err(err) => {
                log::error!("Cluster: ignoring the volume record of {id:?} in etcd: {err}");
                return;
            }
        };
        match self.entries.get_mut(&id) {
            None => {
                log::info!(
                    "Volume {id} (plugin {}) registered by the cluster",
                    shared.plugin_id
                );
                self.insert(shared);
                self.touch(&id);
            }
            // Being created here: its record goes out once it is.
            Some(entry) if entry.volume.creating.is_some() => return,
            Some(entry) => {
                if shared_record(&entry.volume) != record {
                    entry.volume = with_host_state(shared, &entry.volume);
                    self.changed.insert(id.clone());
                    self.touch(&id);
                }
            }
        }
        self.held_by_etcd(&id);
    }

    /// A volume removed from etcd: forgotten here, unless this node still
    /// has claims on it (it stays until they are released).
    fn forget_shared(&mut self, id: &str) {
        if let Some(side) = &mut self.cluster {
            side.shared.remove(id);
        }
        let Some(entry) = self.entries.get(id) else {
            return;
        };
        if !entry.volume.claims.is_empty() || entry.busy.is_some() {
            log::warn!(
                "Volume {id} was removed from the cluster while this node has claims on it; it stays here until they are released"
            );
            return;
        }
        if entry.volume.creating.is_some() {
            return;
        }
        log::info!("Volume {id} deregistered by the cluster");
        volume_event("Deregistered", id, "by the cluster");
        self.remove(id);
    }
}

/// Whether a claim of `old`, a volume's claim set, is not in `new` (or
/// there is no set any more): released, or freed by the fencer or an
/// operator. Claims that wait for the volume may be taken now.
fn lost_a_claim(old: &pb::ClaimSet, new: Option<&pb::ClaimSet>) -> bool {
    old.claims.iter().any(|gone| {
        !new.is_some_and(|set| {
            set.claims
                .iter()
                .any(|c| c.node == gone.node && c.alloc_id == gone.alloc_id)
        })
    })
}

/// The claim set's view of `claim`.
fn request(
    node: &str,
    promise: Option<Promise>,
    claim: &crate::volume::model::Claim,
) -> ClaimRequest {
    ClaimRequest {
        node: node.to_string(),
        alloc_id: claim.alloc_id.clone(),
        read_only: claim.read_only,
        access_mode: claim.capability.access_mode,
        promise,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(claims: &[(&str, &str)]) -> pb::ClaimSet {
        pb::ClaimSet {
            claims: claims
                .iter()
                .map(|(node, alloc)| pb::ClusterClaim {
                    node: node.to_string(),
                    alloc_id: alloc.to_string(),
                    wanted: true,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_set_lost_a_claim_when_one_of_its_claims_is_gone() {
        let before = set(&[("a", "1"), ("b", "2")]);
        assert!(lost_a_claim(&before, Some(&set(&[("b", "2")]))));
        assert!(lost_a_claim(&before, Some(&set(&[]))));
        assert!(lost_a_claim(&before, None), "the set's key removed");
        // The same alloc ID on another node is another claim.
        assert!(lost_a_claim(&before, Some(&set(&[("c", "1"), ("b", "2")]))));
    }

    #[test]
    fn a_set_that_grew_or_marked_a_claim_past_lost_none() {
        let before = set(&[("a", "1")]);
        assert!(!lost_a_claim(
            &before,
            Some(&set(&[("a", "1"), ("b", "2")]))
        ));
        let mut past = set(&[("a", "1")]);
        past.claims[0].wanted = false;
        past.claims[0].reason = "node lost".into();
        assert!(!lost_a_claim(&before, Some(&past)), "still in the way");
        assert!(!lost_a_claim(&set(&[]), None));
    }
}
