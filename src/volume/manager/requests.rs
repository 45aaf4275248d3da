//! The volume requests that wait for one plugin call besides the
//! protocol's steps: register (ValidateVolumeCapabilities), create
//! (CreateVolume), delete (DeleteVolume), and deregister.

use std::collections::BTreeMap;

use super::*;

impl VolumeManager {
    // ---- requests ----

    pub(super) fn decode(req: &api::VolumeSpecRequest) -> Result<VolumeSpec, ApiError> {
        match VolumeSpec::decode(&req.hcl, &req.file) {
            Ok(decoded) => Ok(decoded.spec),
            Err(invalid) => Err(error(ErrorKind::InvalidArgument, invalid.to_string())),
        }
    }

    pub(super) fn from_spec(spec: VolumeSpec) -> Volume {
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
        }
    }

    /// Checks that a new volume may be registered under its ID.
    pub(super) fn check_new(
        &self,
        volume: &Volume,
        registry: &Registry,
    ) -> Result<PluginView, ApiError> {
        if self.entries.contains_key(&volume.id) || self.reserved.contains(&volume.id) {
            return Err(error(
                ErrorKind::FailedPrecondition,
                format!(
                    "volume {:?} is already registered (deregister it first)",
                    volume.id
                ),
            ));
        }
        let view = plugin_view(registry, &volume.plugin_id).ok_or_else(|| {
            error(
                ErrorKind::FailedPrecondition,
                format!("plugin {:?} is not registered", volume.plugin_id),
            )
        })?;
        if !view.healthy {
            return Err(error(
                ErrorKind::FailedPrecondition,
                format!("plugin {:?} is not healthy", volume.plugin_id),
            ));
        }
        Ok(view)
    }

    pub fn register(
        &mut self,
        req: &api::VolumeSpecRequest,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Option<Dispatch> {
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
            let view = self.check_new(&volume, registry)?;
            Ok((volume, view))
        });
        let (volume, view) = match result {
            Ok(ok) => ok,
            Err(err) => {
                self.outbox.push((reply, Err(err)));
                return None;
            }
        };
        if !view.has_controller {
            // Nothing to validate against: register as written.
            let status = self.status_of(&volume, registry);
            log::info!(
                "Volume {} registered on plugin {}",
                volume.id,
                volume.plugin_id
            );
            self.insert(volume);
            self.outbox
                .push((reply, Ok(Response::VolumeStatus(status))));
            return None;
        }
        let token = self.token();
        let request = ops::validate_request(&volume);
        let plugin_id = volume.plugin_id.clone();
        let job = ops::job(&volume.id, token, self.done.clone(), move |client| {
            OpResult::Validated(client.validate_volume(&request))
        });
        self.reserved.insert(volume.id.clone());
        self.pending
            .insert(token, PendingOp::Register { volume, reply });
        Some(Dispatch { plugin_id, job })
    }

    pub fn create(
        &mut self,
        req: &api::VolumeSpecRequest,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Option<Dispatch> {
        let result = Self::decode(req).and_then(|spec| {
            let capacity = crate::csi::types::CapacityRange {
                required_bytes: spec.capacity_min.unwrap_or(0) as i64,
                limit_bytes: spec.capacity_max.unwrap_or(0) as i64,
            };
            let requested = spec.topology_request.clone();
            let volume = Self::from_spec(spec);
            let view = self.check_new(&volume, registry)?;
            if !view.create_delete {
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "plugin {:?} cannot create volumes (no CREATE_DELETE_VOLUME)",
                        volume.plugin_id
                    ),
                ));
            }
            let accessibility = if !requested.is_empty() {
                Some(crate::csi::types::TopologyRequirement {
                    requisite: requested.required.into_iter().map(|t| t.segments).collect(),
                    preferred: requested
                        .preferred
                        .into_iter()
                        .map(|t| t.segments)
                        .collect(),
                })
            } else if view.accessibility {
                view.topology
                    .clone()
                    .map(|t| crate::csi::types::TopologyRequirement {
                        requisite: vec![t.clone()],
                        preferred: vec![t],
                    })
            } else {
                None
            };
            Ok((
                ops::create_request(&volume, capacity, accessibility),
                volume,
            ))
        });
        let (request, volume) = match result {
            Ok(ok) => ok,
            Err(err) => {
                self.outbox.push((reply, Err(err)));
                return None;
            }
        };
        let token = self.token();
        let plugin_id = volume.plugin_id.clone();
        let job = ops::job(&volume.id, token, self.done.clone(), move |client| {
            OpResult::Created(client.create_volume(&request))
        });
        self.reserved.insert(volume.id.clone());
        self.pending
            .insert(token, PendingOp::Create { volume, reply });
        Some(Dispatch { plugin_id, job })
    }

    pub(super) fn entry(&self, id: &str) -> Result<&Entry, ApiError> {
        self.entries.get(id).ok_or_else(|| {
            error(
                ErrorKind::NotFound,
                format!("no volume {id:?} is registered"),
            )
        })
    }

    pub fn deregister(&mut self, id: &str, force: bool, reply: ReplyTo) {
        let entry = match self.entry(id) {
            Ok(entry) => entry,
            Err(err) => return self.outbox.push((reply, Err(err))),
        };
        if entry.volume.claims.is_empty() {
            log::info!("Volume {id} deregistered");
            self.remove(id);
            self.outbox
                .push((reply, Ok(Response::VolumeDeregister(Default::default()))));
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
            if !entry.volume.claims.is_empty() {
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!("volume {id:?} is claimed; release its claims first"),
                ));
            }
            let view = plugin_view(registry, &entry.volume.plugin_id)
                .filter(|v| v.healthy)
                .ok_or_else(|| {
                    error(
                        ErrorKind::FailedPrecondition,
                        format!("plugin {:?} is not healthy", entry.volume.plugin_id),
                    )
                })?;
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
        let job = ops::job(&volume.id, token, self.done.clone(), move |client| {
            OpResult::Deleted(client.delete_volume(&external, &secrets))
        });
        self.pending.insert(token, PendingOp::Delete { reply });
        Some(Dispatch {
            plugin_id: volume.plugin_id,
            job,
        })
    }

    pub(super) fn completed_request(&mut self, op: PendingOp, done: OpDone, registry: &Registry) {
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
                        let status = self.status_of(&volume, registry);
                        self.insert(volume);
                        self.outbox
                            .push((reply, Ok(Response::VolumeStatus(status))));
                    }
                    Err(err) => self.outbox.push((reply, Err(err))),
                }
            }
            (PendingOp::Create { mut volume, reply }, OpResult::Created(result)) => {
                self.reserved.remove(&volume.id);
                match result {
                    Ok(created) => {
                        volume.external_id = created.volume_id;
                        volume.capacity_bytes = created.capacity_bytes;
                        volume.context.extend(created.volume_context);
                        volume.created = true;
                        log::info!(
                            "Volume {} created on plugin {} as {}",
                            volume.id,
                            volume.plugin_id,
                            volume.external_id
                        );
                        let status = self.status_of(&volume, registry);
                        self.insert(volume);
                        self.outbox
                            .push((reply, Ok(Response::VolumeStatus(status))));
                    }
                    Err(err) => self.outbox.push((
                        reply,
                        Err(error(ErrorKind::FailedPrecondition, err.to_string())),
                    )),
                }
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
                        self.remove(&id);
                        self.outbox
                            .push((reply, Ok(Response::VolumeDeregister(Default::default()))));
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
                // A read: answered at once, like the status it completes.
                let Some(entry) = self.entries.get(&done.volume_id) else {
                    let err = error(ErrorKind::NotFound, "the volume was deregistered");
                    let _ = reply.send(Err(err));
                    return;
                };
                let mut status = self.status_of_entry(entry, registry);
                let stats = status.stats.mut_or_insert_default();
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
                let resp = api::VolumeStatusResponse {
                    volumes: vec![status],
                    ..Default::default()
                };
                let _ = reply.send(Ok(Response::VolumeStatus(resp)));
            }
            (op, result) => {
                log::error!("Mismatched operation result {result:?}");
                let reply = match op {
                    PendingOp::Register { reply, volume } | PendingOp::Create { reply, volume } => {
                        self.reserved.remove(&volume.id);
                        reply
                    }
                    PendingOp::Delete { reply } | PendingOp::Stats { reply } => reply,
                };
                self.outbox
                    .push((reply, Err(error(ErrorKind::Internal, "mismatched result"))));
            }
        }
    }
}
