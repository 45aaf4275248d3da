//! `volume status`: the records as the control API shows them, without
//! secrets or mount flags, with usage from NodeGetVolumeStats on request.
//!
//! A status is a read: it is answered at once, from memory, never held
//! behind the journal like the answers to changes (it acknowledges
//! nothing, and must keep working while the state cannot be persisted).

use std::path::Path;

use super::*;
use crate::volume::model::{Admission, Claim, Step};

impl VolumeManager {
    /// The volumes this node cannot use, by ID, with why: its plugin's
    /// topology here is in none of theirs. Job placement filters the node
    /// for a group that needs one (`task::feasible`), as the claim itself
    /// would be refused.
    pub fn topology_misfits(&self, registry: &Registry) -> BTreeMap<String, String> {
        let mut views = BTreeMap::new();
        let mut out = BTreeMap::new();
        for entry in self.entries.values() {
            let v = &entry.volume;
            if v.topologies.is_empty() {
                continue;
            }
            let view = views
                .entry(v.plugin_id.as_str())
                .or_insert_with(|| self.plugin_view(registry, &v.plugin_id));
            if let Some(why) = view.as_ref().and_then(|view| view.topology_misfit(v)) {
                out.insert(v.id.clone(), why);
            }
        }
        out
    }

    pub fn status(
        &mut self,
        req: &calls::StatusRequest,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Option<Dispatch> {
        if req.id.is_empty() {
            let volumes = self
                .entries
                .values()
                .filter(|e| req.plugin_id.is_empty() || e.volume.plugin_id == req.plugin_id)
                .map(|e| self.status_of_entry(e, registry))
                .collect();
            let response = calls::Status {
                volumes,
                ..Default::default()
            };
            if !req.plugin_id.is_empty() {
                return self.external_volumes(&req.plugin_id, response, reply, registry);
            }
            reply.send(Ok(Answer::Status(response)));
            return None;
        }
        let entry = match self.entry(&req.id) {
            Ok(entry) => entry,
            Err(err) => {
                reply.send(Err(err));
                return None;
            }
        };
        let view = self.plugin_view(registry, &entry.volume.plugin_id);
        let published = entry
            .volume
            .claims
            .values()
            .any(|c| c.published == Step::Done);
        let id = entry.volume.id.clone();
        let job = match &view {
            Some(view) if req.stats && published => self.stats_job(&id, view),
            _ => None,
        };
        match job {
            Some((token, job)) => {
                // One call per volume in flight: sent now when the volume
                // is idle, else once it is.
                let op = PendingOp::Stats { reply: Some(reply) };
                self.enqueue(&id, token, op, Service::Node, job);
                self.take_queued(&id)
            }
            None => {
                let entry = self.entries.get(&id)?;
                let mut status = self.status_of_entry(entry, registry);
                if req.stats {
                    status.stats.get_or_insert_with(Default::default).error = if !published {
                        "the volume is not published on this node".into()
                    } else {
                        "the plugin does not report volume stats".into()
                    };
                }
                let resp = calls::Status {
                    volumes: vec![status],
                    ..Default::default()
                };
                reply.send(Ok(Answer::Status(resp)));
                None
            }
        }
    }

    /// `volume status -plugin ID`: the plugin's registered volumes, and
    /// the volumes its controller lists (every page) that are not
    /// registered, for `volume register`.
    fn external_volumes(
        &mut self,
        plugin_id: &str,
        response: calls::Status,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Option<Dispatch> {
        let view = self.plugin_view(registry, plugin_id);
        let why_not = match &view {
            None => Some(format!("plugin {plugin_id:?} is not registered")),
            Some(v) if v.unavailable(plugin_id, Service::Controller).is_some() => {
                v.unavailable(plugin_id, Service::Controller)
            }
            Some(v) if !v.list_volumes => Some(format!(
                "plugin {plugin_id:?} cannot list its volumes (no LIST_VOLUMES)"
            )),
            Some(_) => None,
        };
        if let Some(why) = why_not {
            let mut response = response;
            response.external_error = why;
            reply.send(Ok(Answer::Status(response)));
            return None;
        }
        let token = self.token();
        let job = ops::controller_job("", token, self.done.clone(), move |controller| {
            let mut all = Vec::new();
            let mut next = String::new();
            for _ in 0..intake::snapshots::MAX_PAGES {
                let page = match controller.list_volumes(0, &next) {
                    Ok(page) => page,
                    Err(err) => return OpResult::External(Err(err)),
                };
                all.extend(page.entries);
                if page.next_token.is_empty() {
                    break;
                }
                next = page.next_token;
            }
            OpResult::External(Ok(all))
        });
        self.pending
            .insert(token, PendingOp::External { response, reply });
        Some(Dispatch {
            plugin_id: plugin_id.to_string(),
            service: Service::Controller,
            job,
        })
    }

    // ---- status ----

    pub(super) fn status_of(&self, volume: &Volume, registry: &Registry) -> calls::Status {
        let entry = Entry::new(volume.clone());
        calls::Status {
            volumes: vec![self.status_of_entry(&entry, registry)],
            ..Default::default()
        }
    }

    pub(super) fn status_of_entry(
        &self,
        entry: &Entry,
        registry: &Registry,
    ) -> calls::VolumeStatus {
        let v = &entry.volume;
        // The view claims are admitted by: schedulable means the same.
        let view = self.plugin_view(registry, &v.plugin_id);
        let mut status = calls::VolumeStatus {
            id: v.id.clone(),
            name: v.name.clone(),
            plugin_id: v.plugin_id.clone(),
            provider: view
                .as_ref()
                .map(|p| p.provider.clone())
                .unwrap_or_default(),
            external_id: v.external_id.clone(),
            capabilities: v
                .capabilities
                .iter()
                .map(|c| format!("{}/{}", c.access_mode, c.attachment_mode))
                .collect(),
            fs_type: v.mount_options.fs_type.clone(),
            mount_flags: v.mount_options.mount_flags.len() as u32,
            secret_keys: v.secrets.keys().map(str::to_string).collect(),
            parameters: v.parameters.clone().into_iter().collect(),
            context: v.context.clone().into_iter().collect(),
            schedulable: view.as_ref().is_some_and(|p| p.unschedulable(v).is_none())
                && v.creating.is_none(),
            capacity_bytes: v.capacity_bytes,
            created: v.created,
            creating: v.creating.is_some(),
            mounts_read_only: v.plugin_settings.read_only,
            mount_group: v.plugin_settings.mount_group.clone(),
            topologies: v.topologies.clone(),
            health: self.signals.health(&v.id).cloned(),
            ..Default::default()
        };
        if v.creating.is_some() {
            if let Some(retry) = &entry.retry {
                status.create_error = retry.error.clone();
            }
        }
        for (key, staging) in &v.stagings {
            status.stagings.push(calls::StagingStatus {
                path: self.paths.staging(v, key).to_string_lossy().into_owned(),
                state: match staging.step {
                    Step::Done if v.staging_in_use(key) => "staged",
                    Step::Pending if v.staging_in_use(key) => "staging",
                    _ => "unstaging",
                }
                .to_string(),
                capability: format!(
                    "{}/{}",
                    staging.capability.access_mode, staging.capability.attachment_mode
                ),
            });
        }
        for claim in v.claims.values() {
            let mut c = calls::ClaimStatus {
                alloc_id: claim.alloc_id.clone(),
                mode: if claim.read_only { "read" } else { "write" }.to_string(),
                state: claim_state(v, claim).to_string(),
                target: claim
                    .target
                    .as_ref()
                    .map(|t| t.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                propagation: claim.propagation.as_str().to_string(),
                publish_path: self
                    .paths
                    .publish(v, &claim.alloc_id, &claim.usage)
                    .to_string_lossy()
                    .into_owned(),
                usage: claim.usage.clone(),
                node: self.cluster_node().unwrap_or_default().to_string(),
                ..Default::default()
            };
            if let Some(reason) = self.lost_reason(&v.id, &claim.alloc_id) {
                c.state = format!("{} (lost: {reason})", c.state);
            }
            if let Some(retry) = &entry.retry {
                c.last_error = retry.error.clone();
                c.next_retry = Some(retry.wall);
                c.attempts = retry.attempt;
            } else if let Some(waiting) = &entry.waiting {
                c.last_error = waiting.clone();
            }
            if let Some(failure) = &claim.failure {
                c.failure = failure.clone();
            }
            if claim.capability.attachment_mode == crate::csi::AttachmentMode::BlockDevice
                && claim.published == Step::Done
            {
                c.device = device_of(Path::new(&c.publish_path));
            }
            if claim.wanted {
                status.claims.push(c);
            } else {
                status.past_claims.push(c);
            }
        }
        // Other nodes' claims, as the cluster's watch last saw them.
        for other in self.claims_elsewhere(&v.id) {
            let c = calls::ClaimStatus {
                alloc_id: other.alloc_id,
                mode: if other.read_only { "read" } else { "write" }.to_string(),
                state: if other.wanted {
                    "held".to_string()
                } else {
                    format!("past ({})", other.reason)
                },
                node: other.node,
                ..Default::default()
            };
            if other.wanted {
                status.claims.push(c);
            } else {
                status.past_claims.push(c);
            }
        }
        status
    }
}

/// The device node a block volume's publish path shows:
/// `/dev/loop3 (7:3)`, or `7:3` when sysfs does not name it.
fn device_of(path: &Path) -> String {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(meta) = std::fs::metadata(path) else {
        return String::new();
    };
    if !meta.file_type().is_block_device() {
        return String::new();
    }
    let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    let name = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))
        });
    match name {
        Some(name) => format!("/dev/{name} ({major}:{minor})"),
        None => format!("{major}:{minor}"),
    }
}

/// The claim's state in the words of the docs and Nomad.
fn claim_state(v: &Volume, claim: &Claim) -> &'static str {
    if claim.failure.is_some() {
        return "failed";
    }
    match claim.admission {
        Admission::Admitting => return "admitting",
        Admission::Freeing if !claim.is_on_node() => return "freeing",
        _ => {}
    }
    if claim.wanted {
        if claim.is_taken(claim.target.is_some()) {
            "taken"
        } else {
            "claiming"
        }
    } else if claim.is_on_node() {
        "unpublishing"
    } else if v
        .stagings
        .get(&claim.staging)
        .is_some_and(|s| s.step != Step::Absent)
        || v.attachment != Step::Absent
    {
        "node-detached"
    } else {
        "ready-to-free"
    }
}
