//! Expansion, as Nomad does it: `volume create` (or `register`) of a spec
//! whose volume is registered with a larger `capacity_min` expands it.
//! ControllerExpandVolume when the controller has EXPAND_VOLUME, then
//! NodeExpandVolume once on this node when the volume is staged or
//! published here (and the node has EXPAND_VOLUME). A volume in use is
//! expanded only when the plugin says ONLINE expansion; otherwise the
//! request is refused naming the claims. Shrinking is refused. The new
//! capacity is journalled and shown by `volume status`.
//!
//! The calls are two jobs queued on the volume in turn, so they never
//! overlap another call for it: ControllerExpandVolume on the instance that
//! serves the controller, then, when the controller says the node must
//! expand too (or there is no controller expansion), NodeExpandVolume on
//! the instance that serves the node. The capacity the controller answered
//! is recorded before the node's call goes out.

use crate::csi::types::{CapacityRange, ControllerExpand, NodeExpand};
use crate::volume::manager::*;
use crate::volume::ops::{ControllerExpansion, Expansion};

/// NodeExpandVolume's request, kept while the controller's call is out.
pub struct NodeExpansion {
    external: String,
    volume_path: std::path::PathBuf,
    staging: Option<std::path::PathBuf>,
    capacity: CapacityRange,
    capability: Option<crate::csi::Capability>,
    secrets: crate::csi::Secrets,
}

impl VolumeManager {
    /// Expands the registered volume `spec` names when it asks for more
    /// capacity (or refuses why not); hands `reply` back when the spec is
    /// no expansion, for the caller to refuse as a duplicate.
    pub(in crate::volume::manager) fn try_expand(
        &mut self,
        spec: &VolumeSpec,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Result<(), ReplyTo> {
        let Some(entry) = self.entries.get(&spec.id) else {
            return Err(reply);
        };
        let v = &entry.volume;
        let Some(wanted) = spec.capacity_min.map(|b| b as i64) else {
            return Err(reply);
        };
        // A capacity the agent does not know (0: a registered volume whose
        // plugin never said) is not expanded from a spec: its capacity_min
        // would be a guess, not an expansion.
        if v.creating.is_some() || v.capacity_bytes == 0 || wanted == v.capacity_bytes {
            return Err(reply);
        }
        let refuse = |m: String| error(ErrorKind::FailedPrecondition, m);
        let check = (|| {
            if v.plugin_id != spec.plugin_id {
                return Err(refuse(format!(
                    "volume {:?} is registered on plugin {:?}, not {:?}",
                    v.id, v.plugin_id, spec.plugin_id
                )));
            }
            if wanted < v.capacity_bytes {
                return Err(error(
                    ErrorKind::InvalidArgument,
                    format!(
                        "volume {:?} has {} bytes; capacity_min {} would shrink it, which CSI cannot do",
                        v.id, v.capacity_bytes, wanted
                    ),
                ));
            }
            let view = self
                .plugin_view(registry, &v.plugin_id)
                .ok_or_else(|| refuse(format!("plugin {:?} is not registered", v.plugin_id)))?;
            if !view.controller_expand && !view.node_expand {
                return Err(refuse(format!(
                    "plugin {:?} cannot expand volumes (no EXPAND_VOLUME)",
                    v.plugin_id
                )));
            }
            let in_use: Vec<&str> = v
                .claims
                .values()
                .filter(|c| c.wanted || c.published != Step::Absent)
                .map(|c| c.alloc_id.as_str())
                .collect();
            if !in_use.is_empty() && !view.online_expansion {
                return Err(refuse(format!(
                    "volume {:?} is claimed by alloc {}: plugin {:?} expands only volumes not in use (no ONLINE expansion); release the claims first",
                    v.id,
                    in_use.join(", "),
                    v.plugin_id
                )));
            }
            Ok(view)
        })();
        let view = match check {
            Ok(view) => view,
            Err(err) => {
                self.outbox.push((reply, Err(err)));
                return Ok(());
            }
        };
        // The path for NodeExpandVolume: a publish on this node, else the
        // staging, else none (the node expands at its next stage).
        let published = v.claims.values().find(|c| c.published == Step::Done);
        let staged = v
            .stagings
            .iter()
            .find(|(_, s)| s.step == Step::Done)
            .map(|(k, _)| k.clone());
        let in_view = |p: std::path::PathBuf| {
            self.paths
                .for_plugin(&v.plugin_id, &p, view.base_dir.as_deref())
        };
        let node_paths = match (published, &staged) {
            (Some(c), _) => Some((
                in_view(self.paths.publish(v, &c.alloc_id, &c.usage)),
                view.protocol
                    .stage
                    .then(|| in_view(self.paths.staging(v, &c.staging))),
            )),
            (None, Some(key)) => Some((
                in_view(self.paths.staging(v, key)),
                Some(in_view(self.paths.staging(v, key))),
            )),
            (None, None) => None,
        };
        let capacity = CapacityRange {
            required_bytes: wanted,
            limit_bytes: spec.capacity_max.unwrap_or(0) as i64,
        };
        let capability = v.node_capability().map(|c| v.with_mount_options(c));
        let node = node_paths
            .filter(|_| view.node_expand)
            .map(|(volume_path, staging)| NodeExpansion {
                external: v.external_id.clone(),
                volume_path,
                staging,
                capacity,
                capability: capability.clone(),
                secrets: v.secrets.clone(),
            });
        // Each call needs its instance healthy now.
        let needed = [
            view.controller_expand.then_some(Service::Controller),
            node.as_ref().map(|_| Service::Node),
        ];
        let unavailable = needed
            .into_iter()
            .flatten()
            .find_map(|service| view.unavailable(&v.plugin_id, service));
        if let Some(why) = unavailable {
            self.outbox.push((reply, Err(refuse(why))));
            return Ok(());
        }
        log::info!(
            "Volume {}: expanding from {} to {} bytes",
            v.id,
            v.capacity_bytes,
            wanted
        );
        let id = v.id.clone();
        let request = view.controller_expand.then(|| ControllerExpand {
            volume_id: v.external_id.clone(),
            capacity,
            secrets: v.secrets.clone(),
            capability,
        });
        let token = self.token();
        if let Some(request) = request {
            let job = ops::controller_job(&id, token, self.done.clone(), move |controller| {
                OpResult::ControllerExpanded(controller.controller_expand(&request))
            });
            let op = PendingOp::Expand {
                reply,
                required: wanted,
                node: node.map(Box::new),
            };
            self.enqueue(&id, token, op, Service::Controller, job);
        } else if let Some(node) = node {
            self.enqueue_node_expansion(&id, token, reply, node, wanted);
        } else {
            // Not staged here: the node expands at its next stage.
            self.completed_expand(&id, reply, Ok(wanted), registry);
        }
        Ok(())
    }

    /// Queues NodeExpandVolume; `bytes` is the capacity known so far.
    fn enqueue_node_expansion(
        &mut self,
        id: &str,
        token: u64,
        reply: ReplyTo,
        node: NodeExpansion,
        bytes: i64,
    ) {
        let job = ops::node_job(id, token, self.done.clone(), move |client| {
            OpResult::Expanded(node_expand(client, node, bytes))
        });
        let op = PendingOp::Expand {
            reply,
            required: bytes,
            node: None,
        };
        self.enqueue(id, token, op, Service::Node, job);
    }

    /// ControllerExpandVolume answered: the capacity is recorded, and the
    /// node's call follows when the controller says it must, before any
    /// other call for the volume.
    pub(in crate::volume::manager) fn completed_controller_expand(
        &mut self,
        id: &str,
        reply: ReplyTo,
        required: i64,
        node: Option<NodeExpansion>,
        result: ControllerExpansion,
        registry: &Registry,
    ) {
        let expanded = match result {
            Ok(expanded) => expanded,
            Err(err) => return self.completed_expand(id, reply, Err(err), registry),
        };
        let bytes = expanded.capacity_bytes.max(required);
        let Some(node) = node.filter(|_| expanded.node_expansion_required) else {
            return self.completed_expand(id, reply, Ok(bytes), registry);
        };
        let Some(entry) = self.entries.get_mut(id) else {
            return self.completed_expand(id, reply, Ok(bytes), registry);
        };
        log::info!(
            "Volume {id}: the controller expanded it to {bytes} bytes; the node expands it next"
        );
        entry.volume.capacity_bytes = bytes;
        self.changed.insert(id.to_string());
        let token = self.token();
        self.enqueue_node_expansion(id, token, reply, node, bytes);
        // First in line: the node's half of this expansion.
        let entry = self.entries.get_mut(id).expect("present");
        let queued = entry.queued.pop_back().expect("just queued");
        entry.queued.push_front(queued);
    }

    /// Records an expansion's result and answers its caller.
    pub(in crate::volume::manager) fn completed_expand(
        &mut self,
        id: &str,
        reply: ReplyTo,
        result: Expansion,
        registry: &Registry,
    ) {
        let Some(entry) = self.entries.get_mut(id) else {
            let err = error(ErrorKind::NotFound, "the volume was deregistered");
            return self.outbox.push((reply, Err(err)));
        };
        match result {
            Ok(capacity) => {
                log::info!("Volume {id}: expanded to {capacity} bytes");
                volume_event("Expanded", id, format!("to {capacity} bytes"));
                entry.volume.capacity_bytes = capacity;
                self.changed.insert(id.to_string());
                let status = self.status_of_entry(&self.entries[id], registry);
                let resp = calls::Status {
                    volumes: vec![status],
                    ..Default::default()
                };
                self.outbox.push((reply, Ok(Answer::Status(resp))));
            }
            Err(err) => {
                let err = error(ErrorKind::FailedPrecondition, err.to_string());
                self.outbox.push((reply, Err(err)));
            }
        }
    }
}

/// The node's expansion job: NodeExpandVolume, and the capacity it
/// answered (or `bytes`, the capacity known before, when it answers none).
fn node_expand(client: &crate::csi::Client, node: NodeExpansion, bytes: i64) -> Expansion {
    let answered = client.node_expand(&NodeExpand {
        volume_id: node.external,
        volume_path: node.volume_path,
        capacity: node.capacity,
        staging_target_path: node.staging,
        capability: node.capability,
        secrets: node.secrets,
    })?;
    Ok(if answered > 0 { answered } else { bytes })
}
