//! Expansion, as Nomad does it: `volume create` (or `register`) of a spec
//! whose volume is registered with a larger `capacity_min` expands it.
//! ControllerExpandVolume when the controller has EXPAND_VOLUME, then
//! NodeExpandVolume once on this node when the volume is staged or
//! published here (and the node has EXPAND_VOLUME). A volume in use is
//! expanded only when the plugin says ONLINE expansion; otherwise the
//! request is refused naming the claims. Shrinking is refused. The new
//! capacity is journalled and shown by `volume status`.
//!
//! The calls run as one job queued on the volume, so they never overlap
//! another call for it.

use super::*;
use crate::csi::types::{CapacityRange, ControllerExpand, NodeExpand};

/// What the expansion job found: the new capacity, or the failed call.
pub type Expansion = Result<i64, crate::csi::Error>;

impl VolumeManager {
    /// Expands the registered volume `spec` names when it asks for more
    /// capacity (or refuses why not); hands `reply` back when the spec is
    /// no expansion, for the caller to refuse as a duplicate.
    pub(super) fn try_expand(
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
            let view = plugin_view(registry, &v.plugin_id)
                .filter(|p| p.healthy)
                .ok_or_else(|| refuse(format!("plugin {:?} is not healthy", v.plugin_id)))?;
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
        let external = v.external_id.clone();
        let secrets = v.secrets.clone();
        let capability = v.node_capability().map(|c| v.with_mount_options(c));
        let controller = view.controller_expand;
        let node = view.node_expand;
        log::info!(
            "Volume {}: expanding from {} to {} bytes",
            v.id,
            v.capacity_bytes,
            wanted
        );
        let id = v.id.clone();
        let token = self.token();
        let job = ops::job(&id, token, self.done.clone(), move |client| {
            OpResult::Expanded(expand(
                client,
                &external,
                capacity,
                &secrets,
                capability,
                controller,
                node.then_some(node_paths).flatten(),
            ))
        });
        self.enqueue(&id, token, PendingOp::Expand { reply }, job);
        Ok(())
    }

    /// Records an expansion's result and answers its caller.
    pub(super) fn completed_expand(
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
                entry.volume.capacity_bytes = capacity;
                self.changed.insert(id.to_string());
                let status = self.status_of_entry(&self.entries[id], registry);
                let resp = api::VolumeStatusResponse {
                    volumes: vec![status],
                    ..Default::default()
                };
                self.outbox.push((reply, Ok(Response::VolumeStatus(resp))));
            }
            Err(err) => {
                let err = error(ErrorKind::FailedPrecondition, err.to_string());
                self.outbox.push((reply, Err(err)));
            }
        }
    }
}

/// The expansion job: ControllerExpandVolume, then NodeExpandVolume on
/// `node_paths` (volume path, staging path) when the node expands.
fn expand(
    client: &crate::csi::Client,
    external: &str,
    capacity: CapacityRange,
    secrets: &crate::csi::Secrets,
    capability: Option<crate::csi::Capability>,
    controller: bool,
    node_paths: Option<(std::path::PathBuf, Option<std::path::PathBuf>)>,
) -> Expansion {
    let mut bytes = capacity.required_bytes;
    let mut node_needed = true;
    if controller {
        let expanded = client.controller_expand(&ControllerExpand {
            volume_id: external.to_string(),
            capacity,
            secrets: secrets.clone(),
            capability: capability.clone(),
        })?;
        bytes = expanded.capacity_bytes.max(bytes);
        node_needed = expanded.node_expansion_required;
    }
    if let (true, Some((volume_path, staging))) = (node_needed, node_paths) {
        let answered = client.node_expand(&NodeExpand {
            volume_id: external.to_string(),
            volume_path,
            capacity,
            staging_target_path: staging,
            capability,
            secrets: secrets.clone(),
        })?;
        if answered > 0 {
            bytes = answered;
        }
    }
    Ok(bytes)
}
