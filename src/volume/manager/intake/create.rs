//! `volume create`: CreateVolume on the plugin's controller, made durable.
//!
//! # Creating a volume durably
//!
//! A CreateVolume makes storage in the plugin that only the agent's record
//! lets anyone delete. So the record comes first: `volume create` inserts
//! the volume *being created* ([`Volume::creating`], with the request's
//! capacity and topology), and the main loop journals it before the RPC
//! goes out. The answer fills in the plugin's volume ID and clears the
//! intent, and the caller hears of it once that is journalled too.
//!
//! What an unanswered CreateVolume leaves, whoever waits for it:
//! - the plugin answered an error of class *terminal* or *retry*: it made
//!   nothing; the record is dropped and the caller gets the error (after a
//!   restart, with nobody waiting, only a terminal error drops it, and it
//!   is logged: a retry-class one, such as ABORTED for a CreateVolume of
//!   the same name still running, is retried);
//! - no answer (a timeout, UNAVAILABLE, or the agent was killed): the
//!   volume may exist. The record stays, `volume status` shows it as
//!   `creating` (with the last error), and the agent sends the same
//!   request again with [`RETRY`] backoff until the plugin answers, as
//!   Kubernetes' external-provisioner does for a claim it provisions. The
//!   volume is then registered as if the first answer had arrived: the
//!   user who asked for it, and may ask again, finds it in `volume status`
//!   rather than an orphan in the plugin. `volume deregister -force` gives
//!   up on it.
//!
//! A plugin without a controller cannot create volumes: Nomad's "plugin
//! has no controller", with a pointer to `volume register`.

use crate::csi::backoff::Jitter;
use crate::csi::Class;
use crate::volume::manager::*;
use crate::volume::model::CreateIntent;

impl VolumeManager {
    pub fn create(
        &mut self,
        req: &calls::SpecRequest,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Option<Dispatch> {
        let reply = self.expand_instead(req, reply, registry)?;
        let result = Self::decode(req).and_then(|spec| {
            let capacity = crate::csi::types::CapacityRange {
                required_bytes: spec.capacity_min.unwrap_or(0) as i64,
                limit_bytes: spec.capacity_max.unwrap_or(0) as i64,
            };
            let requested = spec.topology_request.clone();
            for (kind, topologies) in [("required", &requested.required), ("preferred", &requested.preferred)] {
                let segments: Vec<_> = topologies.iter().map(|t| t.segments.clone()).collect();
                crate::csi::topology::check_all(&segments).map_err(|e| {
                    error(
                        ErrorKind::InvalidArgument,
                        format!("{}: topology_request.{kind}: {e}", req.file),
                    )
                })?;
            }
            let content_source = match (&spec.snapshot_id, &spec.clone_id) {
                (Some(id), _) => Some(crate::csi::types::ContentSource::Snapshot(id.clone())),
                (None, Some(id)) => Some(crate::csi::types::ContentSource::Volume(id.clone())),
                (None, None) => None,
            };
            let mut volume = Self::from_spec(spec);
            volume.plugin_settings = req.settings.clone();
            let view = self.check_new(&volume, registry)?;
            if !volume.plugin_settings.mount_group.is_empty() && !view.protocol.mount_group {
                // Refused before any RPC: the group would be dropped.
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "plugin {:?} cannot give its mounts a group: its node does not have VOLUME_MOUNT_GROUP",
                        volume.plugin_id
                    ),
                ));
            }
            if !view.has_controller() {
                // Nomad's "plugin has no controller".
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "plugin {:?} has no controller: volume create needs one to create the volume; register an existing volume with `volume register`",
                        volume.plugin_id
                    ),
                ));
            }
            if let Some(why) = view.unavailable(&volume.plugin_id, Service::Controller) {
                return Err(error(ErrorKind::FailedPrecondition, why));
            }
            if !view.create_delete {
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "plugin {:?} cannot create volumes (no CREATE_DELETE_VOLUME)",
                        volume.plugin_id
                    ),
                ));
            }
            match &content_source {
                Some(crate::csi::types::ContentSource::Snapshot(_)) if !view.snapshots => {
                    return Err(error(
                        ErrorKind::FailedPrecondition,
                        format!(
                            "plugin {:?} cannot create a volume from a snapshot (no CREATE_DELETE_SNAPSHOT)",
                            volume.plugin_id
                        ),
                    ))
                }
                Some(crate::csi::types::ContentSource::Volume(_)) if !view.clone => {
                    return Err(error(
                        ErrorKind::FailedPrecondition,
                        format!(
                            "plugin {:?} cannot clone volumes (no CLONE_VOLUME)",
                            volume.plugin_id
                        ),
                    ))
                }
                _ => {}
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
            // GetCapacity first, where the controller answers it (here,
            // or in a cluster its leader on another host, relayed).
            let check =
                view.get_capacity && view.has_controller() && capacity.required_bytes > 0;
            let volume = Volume {
                creating: Some(CreateIntent {
                    capacity,
                    accessibility,
                    content_source,
                }),
                ..volume
            };
            Ok((volume, check))
        });
        let (volume, check) = match result {
            Ok(volume) => volume,
            Err(err) => {
                self.outbox.push((reply, Err(err)));
                return None;
            }
        };
        log::info!(
            "Volume {}: creating it on plugin {}",
            volume.id,
            volume.plugin_id
        );
        // Journalled this turn, before the main loop submits the job.
        let id = volume.id.clone();
        self.insert(volume);
        Some(self.send_create(&id, Some(reply), check))
    }

    /// The CreateVolume of volume `id`, which is being created, for its
    /// plugin's workers; `reply` waits for it, if anyone does. With
    /// `check_capacity` (a first CreateVolume, never one sent again, which
    /// may find its own volume made), GetCapacity goes first, and a
    /// volume larger than the plugin says it has room for is refused
    /// without a CreateVolume (see [`capacity_refusal`]).
    fn send_create(&mut self, id: &str, reply: Option<ReplyTo>, check_capacity: bool) -> Dispatch {
        let token = self.token();
        self.being_created.remove(id);
        let entry = self.entries.get_mut(id).expect("being created");
        entry.busy = Some(token);
        let volume = &entry.volume;
        let intent = volume.creating.clone().expect("being created");
        let request = ops::create_request(
            volume,
            intent.capacity,
            intent.accessibility,
            intent.content_source,
        );
        let plugin_id = volume.plugin_id.clone();
        let plugin = plugin_id.clone();
        let job = ops::controller_job(id, token, self.done.clone(), move |controller| {
            if check_capacity {
                if let Some(refusal) = capacity_refusal(controller, &plugin, &request) {
                    return OpResult::Created(Err(refusal));
                }
            }
            OpResult::Created(controller.create_volume(&request))
        });
        self.pending.insert(
            token,
            PendingOp::Create {
                id: id.to_string(),
                reply,
            },
        );
        Dispatch {
            plugin_id,
            service: Service::Controller,
            job,
        }
    }

    /// Sends again the CreateVolume of every volume still being created
    /// whose plugin's controller is healthy and whose retry is due: after a restart,
    /// or after a CreateVolume that did not answer. Nobody waits for them.
    pub fn resume_creates(&mut self, registry: &Registry, now: Instant) -> Vec<Dispatch> {
        let entries = &self.entries;
        self.being_created
            .retain(|id| entries.get(id).is_some_and(|e| e.volume.creating.is_some()));
        let due: Vec<String> = self
            .being_created
            .iter()
            .map(|id| &self.entries[id])
            .filter(|e| e.busy.is_none())
            .filter(|e| e.retry.as_ref().map_or(true, |r| r.at <= now))
            .filter(|e| {
                self.plugin_view(registry, &e.volume.plugin_id)
                    .is_some_and(|v| {
                        v.unavailable(&e.volume.plugin_id, Service::Controller)
                            .is_none()
                    })
            })
            .map(|e| e.volume.id.clone())
            .collect();
        due.into_iter()
            .map(|id| {
                log::info!("Volume {id}: sending its CreateVolume again");
                self.send_create(&id, None, false)
            })
            .collect()
    }

    /// The answer to the CreateVolume of volume `id`.
    pub(in crate::volume::manager) fn created(
        &mut self,
        id: &str,
        token: u64,
        reply: Option<ReplyTo>,
        result: Result<crate::csi::types::Volume, crate::csi::Error>,
        registry: &Registry,
    ) {
        let Some(entry) = self
            .entries
            .get_mut(id)
            .filter(|e| e.volume.creating.is_some() && e.busy == Some(token))
        else {
            // Given up with `deregister -force` while the call was out.
            if let Ok(created) = &result {
                log::warn!(
                    "Volume {id}: CreateVolume answered after the volume was given up; the plugin's volume {:?} is not registered",
                    created.volume_id
                );
            }
            if let Some(reply) = reply {
                let err = error(ErrorKind::Aborted, format!("volume {id:?} was given up"));
                self.outbox.push((reply, Err(err)));
            }
            return;
        };
        entry.busy = None;
        let err = match result {
            Ok(created) => {
                let volume = &mut entry.volume;
                volume.external_id = created.volume_id;
                volume.capacity_bytes = created.capacity_bytes;
                volume.context.extend(created.volume_context);
                // Where the plugin made it is where it can be used; a
                // plugin that does not say keeps the request's required
                // topologies, where the user meant it to be used.
                if !created.accessible_topology.is_empty() {
                    volume.topologies = created.accessible_topology;
                }
                volume.created = true;
                volume.creating = None;
                entry.retry = None;
                log::info!(
                    "Volume {id} created on plugin {} as {}",
                    volume.plugin_id,
                    volume.external_id
                );
                volume_event(
                    "Created",
                    id,
                    format!(
                        "on plugin {} as {} ({} bytes)",
                        volume.plugin_id, volume.external_id, volume.capacity_bytes
                    ),
                );
                self.changed.insert(id.to_string());
                if let Some(reply) = reply {
                    let status = self.status_of_entry(&self.entries[id], registry);
                    let resp = calls::Status {
                        volumes: vec![status],
                        ..Default::default()
                    };
                    self.answer_registered(id, reply, Answer::Status(resp));
                }
                return;
            }
            Err(err) => err,
        };
        // A definite answer says the plugin made nothing; no answer leaves
        // it uncertain, and only the same request, answered, can tell.
        let gone = match err.class {
            Class::Terminal | Class::Ignorable => true,
            Class::Retry => reply.is_some(),
            Class::Uncertain => false,
        };
        if gone {
            self.remove(id);
            match reply {
                Some(reply) => {
                    // The agent's own refusal says it all.
                    let text = if err.rpc == crate::csi::error::Rpc::GetCapacity {
                        err.message.clone()
                    } else {
                        err.to_string()
                    };
                    let err = error(ErrorKind::FailedPrecondition, text);
                    self.outbox.push((reply, Err(err)));
                }
                None => log::error!("Volume {id}: {err}; the volume is not created"),
            }
            return;
        }
        let attempt = entry.retry.as_ref().map_or(0, |r| r.attempt);
        let delay = RETRY.delay(attempt, self.jitter.unit());
        let now = Instant::now();
        log::warn!(
            "Volume {id}: {err}; sending CreateVolume again in {}",
            crate::units::format_duration(delay)
        );
        entry.retry = Some(Retry {
            at: now + delay,
            attempt: attempt.saturating_add(1),
            error: err.to_string(),
            wall: SystemTime::now() + delay,
            left_mount: 0,
        });
        self.retries
            .push(std::cmp::Reverse((now + delay, id.to_string())));
        self.being_created.insert(id.to_string());
        if let Some(reply) = reply {
            // Not UNAVAILABLE: the CLI reads that as the agent refusing the
            // caller.
            let err = error(
                ErrorKind::FailedPrecondition,
                format!(
                    "{err}; the volume may have been created: the agent sends CreateVolume again until the plugin answers (see `volume status`; `volume deregister -force` gives up)"
                ),
            );
            self.outbox.push((reply, Err(err)));
        }
    }
}

/// Why `request` is refused before its CreateVolume, if it is: plugin
/// `plugin`'s controller answers GetCapacity (for the request's
/// capabilities and parameters, from its first required or preferred
/// topology) with less room than the request's required bytes, or a
/// largest volume below them. A GetCapacity that fails refuses nothing:
/// CreateVolume has the last word.
fn capacity_refusal(
    controller: &dyn crate::volume::controller::ControllerCalls,
    plugin: &str,
    request: &crate::csi::types::CreateVolume,
) -> Option<crate::csi::Error> {
    let topology = request
        .accessibility
        .as_ref()
        .and_then(|a| a.requisite.first().or(a.preferred.first()));
    let capacity = match controller.capacity(&request.capabilities, &request.parameters, topology) {
        Ok(capacity) => capacity,
        Err(err) => {
            log::info!(
                "Volume {}: {err}; sending CreateVolume without it",
                request.name
            );
            return None;
        }
    };
    let required = request.capacity.required_bytes;
    let size = |n: i64| format!("{} ({n} bytes)", crate::units::format_size(n.max(0) as u64));
    let why = if capacity.available_capacity < required {
        format!(
            "plugin {plugin:?} has {} available for new volumes (GetCapacity), and the volume asks for at least {}",
            size(capacity.available_capacity),
            size(required)
        )
    } else if let Some(max) = capacity.maximum_volume_size.filter(|max| *max < required) {
        format!(
            "plugin {plugin:?} makes volumes of at most {} (GetCapacity), and the volume asks for at least {}",
            size(max),
            size(required)
        )
    } else {
        return None;
    };
    Some(crate::csi::Error::new(
        crate::csi::error::Rpc::GetCapacity,
        crate::csi::error::Code::OutOfRange,
        format!("{why}: CreateVolume was not sent"),
    ))
}
