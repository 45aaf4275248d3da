//! The volume requests that wait for one plugin call besides the
//! protocol's steps: register (ValidateVolumeCapabilities), delete
//! (DeleteVolume) and deregister, and the answers to them and to create
//! ([`super::create`]).

use std::collections::BTreeMap;

use crate::volume::manager::*;

impl VolumeManager {
    // ---- requests ----

    pub(in crate::volume::manager) fn decode(
        req: &calls::SpecRequest,
    ) -> Result<VolumeSpec, CallError> {
        match VolumeSpec::decode(&req.hcl, &req.file) {
            Ok(decoded) => Ok(decoded.spec),
            Err(invalid) => Err(error(ErrorKind::InvalidArgument, invalid.to_string())),
        }
    }

    pub(in crate::volume::manager) fn from_spec(spec: VolumeSpec) -> Volume {
        Volume {
            id: spec.id,
            name: spec.name,
            plugin_id: spec.plugin_id,
            external_id: spec.external_id.unwrap_or_default(),
            capabilities: spec.capabilities,
            mount_options: spec.mount_options,
            secrets: spec.secrets,
            parameters: spec.parameters,
            context: spec.context,
            capacity_bytes: 0,
            created: false,
            attachment: Step::Absent,
            publish_context: BTreeMap::new(),
            stagings: BTreeMap::new(),
            claims: BTreeMap::new(),
            creating: None,
            in_cluster: 0,
            plugin_settings: Default::default(),
            // Nomad's meaning of `volume register`'s `topology_request`:
            // the volume is accessible from its required topologies. A
            // created volume gets the plugin's answer instead.
            topologies: spec
                .topology_request
                .required
                .into_iter()
                .map(|t| t.segments)
                .collect(),
        }
    }

    /// Checks that a new volume may be registered under its ID, and that
    /// its plugin is registered; the caller checks the instance it needs.
    pub(in crate::volume::manager) fn check_new(
        &self,
        volume: &Volume,
        registry: &Registry,
    ) -> Result<PluginView, CallError> {
        if self
            .entries
            .get(&volume.id)
            .is_some_and(|e| e.volume.creating.is_some())
        {
            return Err(error(
                ErrorKind::FailedPrecondition,
                format!(
                    "volume {:?} is being created (see `volume status`)",
                    volume.id
                ),
            ));
        }
        if self.entries.contains_key(&volume.id) || self.reserved.contains(&volume.id) {
            return Err(error(
                ErrorKind::FailedPrecondition,
                format!(
                    "volume {:?} is already registered (deregister it first)",
                    volume.id
                ),
            ));
        }
        self.plugin_view(registry, &volume.plugin_id)
            .ok_or_else(|| {
                error(
                    ErrorKind::FailedPrecondition,
                    format!("plugin {:?} is not registered", volume.plugin_id),
                )
            })
    }

    pub fn register(
        &mut self,
        req: &calls::SpecRequest,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Option<Dispatch> {
        let reply = self.expand_instead(req, reply, registry)?;
        let result = Self::decode(req).and_then(|spec| {
            if spec.external_id.is_none() {
                return Err(error(
                    ErrorKind::InvalidArgument,
                    format!(
                        "{}: \"external_id\" is required to register a volume (use `volume create` to create one)",
                        req.file
                    ),
                ));
            }
            let volume = Self::from_spec(spec);
            crate::csi::topology::check_all(&volume.topologies).map_err(|e| {
                error(
                    ErrorKind::InvalidArgument,
                    format!("{}: topology_request.required: {e}", req.file),
                )
            })?;
            let view = self.check_new(&volume, registry)?;
            // The controller validates the volume; without one, the node
            // tells the protocol.
            let service = if view.has_controller() {
                Service::Controller
            } else {
                Service::Node
            };
            if let Some(why) = view.unavailable(&volume.plugin_id, service) {
                return Err(error(ErrorKind::FailedPrecondition, why));
            }
            Ok((volume, view))
        });
        let (volume, view) = match result {
            Ok(ok) => ok,
            Err(err) => {
                self.outbox.push((reply, Err(err)));
                return None;
            }
        };
        if !view.has_controller() {
            // Nothing to validate against: register as written.
            let status = self.status_of(&volume, registry);
            log::info!(
                "Volume {} registered on plugin {}",
                volume.id,
                volume.plugin_id
            );
            volume_event(
                "Registered",
                &volume.id,
                format!("on plugin {}", volume.plugin_id),
            );
            let id = volume.id.clone();
            self.insert(volume);
            self.answer_registered(&id, reply, Answer::Status(status));
            return None;
        }
        let token = self.token();
        let request = ops::validate_request(&volume);
        let plugin_id = volume.plugin_id.clone();
        let job = ops::controller_job(&volume.id, token, self.done.clone(), move |controller| {
            OpResult::Validated(controller.validate_volume(&request))
        });
        self.reserved.insert(volume.id.clone());
        self.pending.insert(
            token,
            PendingOp::Register {
                volume: Box::new(volume),
                reply,
            },
        );
        Some(Dispatch {
            plugin_id,
            service: Service::Controller,
            job,
        })
    }

    /// A spec of a registered volume with a larger `capacity_min` expands
    /// it (Nomad's behaviour): the expansion takes the reply. Otherwise
    /// the reply comes back for the request to go on.
    pub(in crate::volume::manager) fn expand_instead(
        &mut self,
        req: &calls::SpecRequest,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Option<ReplyTo> {
        match Self::decode(req) {
            Ok(spec) if self.entries.contains_key(&spec.id) => {
                self.try_expand(&spec, reply, registry).err()
            }
            _ => Some(reply),
        }
    }

    pub(in crate::volume::manager) fn entry(&self, id: &str) -> Result<&Entry, CallError> {
        self.entries.get(id).ok_or_else(|| {
            error(
                ErrorKind::NotFound,
                format!("no volume {id:?} is registered"),
            )
        })
    }

    pub fn deregister(&mut self, id: &str, force: bool, reply: ReplyTo) {
        if self.entries.contains_key(id) {
            self.touch(id);
        }
        let entry = match self.entry(id) {
            Ok(entry) => entry,
            Err(err) => return self.outbox.push((reply, Err(err))),
        };
        if entry.volume.creating.is_some() {
            if !force {
                let err = error(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "volume {id:?} is being created: wait for it, or use -force to give up on it (the plugin may keep what it made)"
                    ),
                );
                return self.outbox.push((reply, Err(err)));
            }
            log::warn!(
                "Volume {id}: giving up on creating it; the plugin may keep a volume named {:?}",
                entry.volume.name
            );
            self.remove(id);
            self.outbox.push((reply, Ok(Answer::Deregistered)));
            return;
        }
        if let Some(err) = self.claimed_elsewhere(id) {
            return self.outbox.push((reply, Err(err)));
        }
        let entry = self.entry(id).expect("checked above");
        if entry.volume.claims.is_empty() {
            log::info!("Volume {id} deregistered");
            volume_event("Deregistered", id, "");
            self.remove(id);
            self.outbox.push((reply, Ok(Answer::Deregistered)));
            return;
        }
        if !force {
            let allocs: Vec<&str> = entry.volume.claims.keys().map(String::as_str).collect();
            let err = error(
                ErrorKind::FailedPrecondition,
                format!(
                    "volume {id:?} is claimed by {} (release the claims, or use -force)",
                    allocs.join(", ")
                ),
            );
            return self.outbox.push((reply, Err(err)));
        }
        let entry = self.entries.get_mut(id).expect("checked above");
        for claim in entry.volume.claims.values_mut() {
            claim.wanted = false;
        }
        entry.deregistering = true;
        entry.waiters.deregister.push(reply);
        self.changed.insert(id.to_string());
    }

    pub fn delete(&mut self, id: &str, reply: ReplyTo, registry: &Registry) -> Option<Dispatch> {
        let check = self.entry(id).and_then(|entry| {
            if entry.volume.creating.is_some() {
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!("volume {id:?} is being created; delete it once it is"),
                ));
            }
            if !entry.volume.claims.is_empty() {
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!("volume {id:?} is claimed; release its claims first"),
                ));
            }
            let plugin_id = &entry.volume.plugin_id;
            let view = self.plugin_view(registry, plugin_id).ok_or_else(|| {
                error(
                    ErrorKind::FailedPrecondition,
                    format!("plugin {plugin_id:?} is not registered"),
                )
            })?;
            if !view.has_controller() {
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!("plugin {plugin_id:?} has no controller to delete volumes with; use deregister"),
                ));
            }
            if let Some(why) = view.unavailable(plugin_id, Service::Controller) {
                return Err(error(ErrorKind::FailedPrecondition, why));
            }
            if !view.create_delete {
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "plugin {:?} cannot delete volumes (no CREATE_DELETE_VOLUME); use deregister",
                        entry.volume.plugin_id
                    ),
                ));
            }
            Ok(entry.volume.clone())
        });
        let volume = match check {
            Ok(volume) => volume,
            Err(err) => {
                self.outbox.push((reply, Err(err)));
                return None;
            }
        };
        let token = self.token();
        let (external, secrets) = (volume.external_id.clone(), volume.secrets.clone());
        let job = ops::controller_job(&volume.id, token, self.done.clone(), move |controller| {
            OpResult::Deleted(controller.delete_volume(&external, &secrets))
        });
        self.pending.insert(token, PendingOp::Delete { reply });
        Some(Dispatch {
            plugin_id: volume.plugin_id,
            service: Service::Controller,
            job,
        })
    }

    pub(in crate::volume::manager) fn completed_request(
        &mut self,
        op: PendingOp,
        done: OpDone,
        registry: &Registry,
    ) {
        // A request queued on its volume held the volume while in flight
        // (CreateVolume's own completion checks and clears its mark).
        let queued = matches!(
            op,
            PendingOp::Stats { .. } | PendingOp::SnapshotCreate { .. } | PendingOp::Expand { .. }
        );
        if let Some(entry) = self.entries.get_mut(&done.volume_id) {
            if queued && entry.busy == Some(done.token) {
                entry.busy = None;
            }
        }
        if let PendingOp::Expand {
            reply,
            required,
            node,
        } = op
        {
            return match done.result {
                OpResult::ControllerExpanded(result) => self.completed_controller_expand(
                    &done.volume_id,
                    reply,
                    required,
                    node.map(|n| *n),
                    result,
                    registry,
                ),
                OpResult::Expanded(result) => {
                    self.completed_expand(&done.volume_id, reply, result, registry)
                }
                other => {
                    log::error!("Mismatched operation result {other:?}");
                    self.outbox
                        .push((reply, Err(error(ErrorKind::Internal, "mismatched result"))));
                }
            };
        }
        if matches!(
            op,
            PendingOp::SnapshotCreate { .. }
                | PendingOp::SnapshotDelete { .. }
                | PendingOp::SnapshotList { .. }
                | PendingOp::External { .. }
        ) {
            return self.completed_snapshot(op, done.result);
        }
        match (op, done.result) {
            (PendingOp::Register { volume, reply }, OpResult::Validated(result)) => {
                self.reserved.remove(&volume.id);
                let checked = result
                    .map_err(|e| error(ErrorKind::FailedPrecondition, e.to_string()))
                    .and_then(|validation| {
                        let requested: Vec<_> = volume
                            .capabilities
                            .iter()
                            .map(|c| volume.with_mount_options(c))
                            .collect();
                        crate::csi::check_validation(&requested, &validation).map_err(|m| {
                            error(
                                ErrorKind::FailedPrecondition,
                                format!("ValidateVolumeCapabilities: {m}"),
                            )
                        })
                    });
                match checked {
                    Ok(()) => {
                        log::info!(
                            "Volume {} registered on plugin {}",
                            volume.id,
                            volume.plugin_id
                        );
                        volume_event(
                            "Registered",
                            &volume.id,
                            format!("on plugin {}", volume.plugin_id),
                        );
                        let status = self.status_of(&volume, registry);
                        let id = volume.id.clone();
                        self.insert(*volume);
                        self.answer_registered(&id, reply, Answer::Status(status));
                    }
                    Err(err) => self.outbox.push((reply, Err(err))),
                }
            }
            (PendingOp::Create { id, reply }, OpResult::Created(result)) => {
                self.created(&id, done.token, reply, result, registry);
            }
            (PendingOp::Delete { reply }, OpResult::Deleted(result)) => {
                let id = done.volume_id;
                let result = match result {
                    Ok(()) => Ok(()),
                    Err(err) if err.code == crate::csi::Code::NotFound => Ok(()),
                    Err(err) => Err(err),
                };
                match result {
                    Ok(())
                        if self
                            .entries
                            .get(&id)
                            .is_some_and(|e| e.volume.claims.is_empty()) =>
                    {
                        log::info!("Volume {id} deleted");
                        volume_event("Deleted", &id, "");
                        self.remove(&id);
                        self.outbox.push((reply, Ok(Answer::Deregistered)));
                    }
                    Ok(()) => self.outbox.push((
                        reply,
                        Err(error(
                            ErrorKind::FailedPrecondition,
                            format!("volume {id:?} was claimed while it was being deleted"),
                        )),
                    )),
                    Err(err) => self.outbox.push((
                        reply,
                        Err(error(ErrorKind::FailedPrecondition, err.to_string())),
                    )),
                }
            }
            (PendingOp::Stats { reply }, OpResult::Stats(result)) => {
                self.stats_answered(&done.volume_id, reply.is_none(), &result, registry);
                let Some(reply) = reply else {
                    return;
                };
                // A read: answered at once, like the status it completes.
                let Some(entry) = self.entries.get(&done.volume_id) else {
                    let err = error(ErrorKind::NotFound, "the volume was deregistered");
                    reply.send(Err(err));
                    return;
                };
                let mut status = self.status_of_entry(entry, registry);
                let stats = status.stats.get_or_insert_with(Default::default);
                match result {
                    Ok(s) => {
                        stats.available = true;
                        for usage in s.usage {
                            use crate::csi::types::UsageUnit;
                            match usage.unit {
                                UsageUnit::Bytes => {
                                    stats.bytes_total = usage.total;
                                    stats.bytes_used = usage.used;
                                    stats.bytes_available = usage.available;
                                }
                                UsageUnit::Inodes => {
                                    stats.inodes_total = usage.total;
                                    stats.inodes_used = usage.used;
                                    stats.inodes_available = usage.available;
                                }
                            }
                        }
                        if let Some(condition) = s.condition {
                            stats.abnormal = condition.abnormal;
                            stats.condition_message = condition.message;
                        }
                    }
                    Err(err) => stats.error = err.to_string(),
                }
                let resp = calls::Status {
                    volumes: vec![status],
                    ..Default::default()
                };
                reply.send(Ok(Answer::Status(resp)));
            }
            (PendingOp::Capacity { plugin_id }, OpResult::Capacity(result)) => {
                self.capacity_answered(&plugin_id, result);
            }
            (op, result) => {
                log::error!("Mismatched operation result {result:?}");
                let reply = match op {
                    PendingOp::Register { reply, volume } => {
                        self.reserved.remove(&volume.id);
                        Some(reply)
                    }
                    PendingOp::Create { id, reply } => {
                        if let Some(entry) = self.entries.get_mut(&id) {
                            entry.busy = None;
                        }
                        reply
                    }
                    PendingOp::Delete { reply } => Some(reply),
                    PendingOp::Stats { reply } => reply,
                    PendingOp::Capacity { .. } => None,
                    PendingOp::Expand { reply, .. } => Some(reply),
                    PendingOp::SnapshotCreate { reply, .. }
                    | PendingOp::SnapshotDelete { reply }
                    | PendingOp::SnapshotList { reply, .. }
                    | PendingOp::External { reply, .. } => Some(reply),
                };
                if let Some(reply) = reply {
                    self.outbox
                        .push((reply, Err(error(ErrorKind::Internal, "mismatched result"))));
                }
            }
        }
    }
}
