//! Snapshots (`volume snapshot create|delete|list`): CreateSnapshot of a
//! registered volume on its plugin's controller, DeleteSnapshot and
//! ListSnapshots (every page) of a plugin. The agent keeps no record of
//! snapshots: they live in the plugin.
//!
//! CreateSnapshot names the volume, so it waits, like every call about a
//! volume, until no other call for that volume is in flight (see
//! [`VolumeManager::enqueue`]).

use crate::csi::types::{CreateSnapshot, ListSnapshots, Snapshot};
use crate::volume::manager::*;

/// At most this many pages of ListSnapshots (or ListVolumes) are read: a
/// plugin whose `next_token` never ends is cut off rather than followed
/// forever.
pub(in crate::volume::manager) const MAX_PAGES: usize = 1000;

impl VolumeManager {
    /// Queues a request that calls the plugin about volume `id`: it is
    /// sent once nothing else is in flight for the volume.
    /// `service` names the instance of the volume's plugin that runs it.
    pub(in crate::volume::manager) fn enqueue(
        &mut self,
        id: &str,
        token: u64,
        op: PendingOp,
        service: Service,
        job: Job,
    ) {
        let entry = self.entries.get_mut(id).expect("queued for a known volume");
        entry.queued.push_back(Queued {
            token,
            op,
            service,
            job,
        });
        self.touch(id);
    }

    /// The next queued request of an idle volume, marked in flight.
    pub(in crate::volume::manager) fn take_queued(&mut self, id: &str) -> Option<Dispatch> {
        let entry = self.entries.get_mut(id)?;
        if entry.busy.is_some() {
            return None;
        }
        let queued = entry.queued.pop_front()?;
        entry.busy = Some(queued.token);
        self.pending.insert(queued.token, queued.op);
        Some(Dispatch {
            plugin_id: entry.volume.plugin_id.clone(),
            service: queued.service,
            job: queued.job,
        })
    }

    /// A plugin's healthy controller view, or why it cannot serve.
    fn controller_of(&self, plugin_id: &str, registry: &Registry) -> Result<PluginView, CallError> {
        let view = self.plugin_view(registry, plugin_id).ok_or_else(|| {
            error(
                ErrorKind::NotFound,
                format!("plugin {plugin_id:?} is not registered"),
            )
        })?;
        if let Some(why) = view.unavailable(plugin_id, Service::Controller) {
            return Err(error(ErrorKind::FailedPrecondition, why));
        }
        Ok(view)
    }

    pub fn snapshot_create(
        &mut self,
        req: &calls::SnapshotCreateRequest,
        reply: ReplyTo,
        registry: &Registry,
    ) {
        let check = self.entry(&req.volume_id).and_then(|entry| {
            let v = &entry.volume;
            if v.creating.is_some() {
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!("volume {:?} is being created", v.id),
                ));
            }
            let view = self.controller_of(&v.plugin_id, registry)?;
            if !view.snapshots {
                return Err(error(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "plugin {:?} cannot take snapshots (its controller lacks CREATE_DELETE_SNAPSHOT)",
                        v.plugin_id
                    ),
                ));
            }
            crate::id::validate("snapshot name", &req.name)
                .map_err(|e| error(ErrorKind::InvalidArgument, e.to_string()))?;
            let mut secrets = v.secrets.clone();
            for (k, val) in req.secrets.expose() {
                secrets.insert(k.to_string(), val.to_string());
            }
            Ok(CreateSnapshot {
                name: req.name.clone(),
                source_volume_id: v.external_id.clone(),
                parameters: req.parameters.clone().into_iter().collect(),
                secrets,
            })
        });
        let request = match check {
            Ok(request) => request,
            Err(err) => return self.outbox.push((reply, Err(err))),
        };
        let token = self.token();
        let job = ops::controller_job(
            &req.volume_id,
            token,
            self.done.clone(),
            move |controller| OpResult::Snapshot(controller.create_snapshot(&request)),
        );
        log::info!(
            "Volume {}: snapshot {:?} asked for",
            req.volume_id,
            req.name
        );
        let plugin_id = self.entries[&req.volume_id].volume.plugin_id.clone();
        self.enqueue(
            &req.volume_id,
            token,
            PendingOp::SnapshotCreate { plugin_id, reply },
            Service::Controller,
            job,
        );
    }

    pub fn snapshot_delete(
        &mut self,
        req: &calls::SnapshotDeleteRequest,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Option<Dispatch> {
        let check = self.controller_of(&req.plugin_id, registry).and_then(|view| {
            if view.snapshots {
                Ok(())
            } else {
                Err(error(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "plugin {:?} cannot delete snapshots (its controller lacks CREATE_DELETE_SNAPSHOT)",
                        req.plugin_id
                    ),
                ))
            }
        });
        if let Err(err) = check {
            self.outbox.push((reply, Err(err)));
            return None;
        }
        if req.snapshot_id.is_empty() {
            let err = error(ErrorKind::InvalidArgument, "a snapshot ID is required");
            self.outbox.push((reply, Err(err)));
            return None;
        }
        let token = self.token();
        let (id, secrets) = (req.snapshot_id.clone(), req.secrets.clone());
        let job = ops::controller_job("", token, self.done.clone(), move |controller| {
            OpResult::SnapshotDeleted(controller.delete_snapshot(&id, &secrets))
        });
        self.pending
            .insert(token, PendingOp::SnapshotDelete { reply });
        Some(Dispatch {
            plugin_id: req.plugin_id.clone(),
            service: Service::Controller,
            job,
        })
    }

    pub fn snapshot_list(
        &mut self,
        req: &calls::SnapshotListRequest,
        reply: ReplyTo,
        registry: &Registry,
    ) -> Option<Dispatch> {
        let check = self
            .controller_of(&req.plugin_id, registry)
            .and_then(|view| {
                if view.list_snapshots {
                    Ok(())
                } else {
                    Err(error(
                        ErrorKind::FailedPrecondition,
                        format!(
                        "plugin {:?} cannot list snapshots (its controller lacks LIST_SNAPSHOTS)",
                        req.plugin_id
                    ),
                    ))
                }
            });
        if let Err(err) = check {
            self.outbox.push((reply, Err(err)));
            return None;
        }
        let token = self.token();
        let secrets = req.secrets.clone();
        let job = ops::controller_job("", token, self.done.clone(), move |controller| {
            let mut all = Vec::new();
            let mut token = String::new();
            for _ in 0..MAX_PAGES {
                let page = match controller.list_snapshots(&ListSnapshots {
                    starting_token: token.clone(),
                    secrets: secrets.clone(),
                    ..Default::default()
                }) {
                    Ok(page) => page,
                    Err(err) => return OpResult::Snapshots(Err(err)),
                };
                all.extend(page.entries);
                if page.next_token.is_empty() {
                    break;
                }
                token = page.next_token;
            }
            OpResult::Snapshots(Ok(all))
        });
        let plugin_id = req.plugin_id.clone();
        self.pending
            .insert(token, PendingOp::SnapshotList { plugin_id, reply });
        Some(Dispatch {
            plugin_id: req.plugin_id.clone(),
            service: Service::Controller,
            job,
        })
    }

    /// Answers a snapshot request whose plugin call came back.
    pub(in crate::volume::manager) fn completed_snapshot(
        &mut self,
        op: PendingOp,
        result: OpResult,
    ) {
        let refused =
            |err: crate::csi::Error| error(ErrorKind::FailedPrecondition, err.to_string());
        match (op, result) {
            (PendingOp::SnapshotCreate { plugin_id, reply }, OpResult::Snapshot(result)) => {
                let answer = result.map_err(refused).map(|s| {
                    log::info!("Snapshot {} taken of {}", s.snapshot_id, s.source_volume_id);
                    volume_event(
                        "Snapshotted",
                        &s.source_volume_id,
                        format!("snapshot {}", s.snapshot_id),
                    );
                    Answer::SnapshotCreated(self.snapshot_to_api(&plugin_id, &s))
                });
                reply.send(answer);
            }
            (PendingOp::SnapshotDelete { reply }, OpResult::SnapshotDeleted(result)) => {
                let answer = result.map_err(refused).map(|()| Answer::SnapshotDeleted);
                reply.send(answer);
            }
            (PendingOp::SnapshotList { plugin_id, reply }, OpResult::Snapshots(result)) => {
                let answer = result.map_err(refused).map(|all| {
                    Answer::Snapshots(
                        all.iter()
                            .map(|s| self.snapshot_to_api(&plugin_id, s))
                            .collect(),
                    )
                });
                reply.send(answer);
            }
            (
                PendingOp::External {
                    mut response,
                    reply,
                },
                OpResult::External(result),
            ) => {
                match result {
                    Ok(listed) => {
                        let known: std::collections::BTreeSet<&str> =
                            order::set(response.volumes.iter().map(|v| v.external_id.as_str()));
                        response.external = listed
                            .into_iter()
                            .filter(|l| !known.contains(l.volume.volume_id.as_str()))
                            .map(|l| calls::ExternalVolume {
                                external_id: l.volume.volume_id,
                                capacity_bytes: l.volume.capacity_bytes,
                                published_node_ids: l.published_node_ids,
                                abnormal: l.condition.as_ref().is_some_and(|c| c.abnormal),
                                condition_message: l
                                    .condition
                                    .map(|c| c.message)
                                    .unwrap_or_default(),
                            })
                            .collect();
                    }
                    Err(err) => response.external_error = err.to_string(),
                }
                reply.send(Ok(Answer::Status(response)));
            }
            (op, result) => {
                log::error!("Mismatched operation result {result:?}");
                if let PendingOp::SnapshotCreate { reply, .. }
                | PendingOp::SnapshotDelete { reply }
                | PendingOp::SnapshotList { reply, .. }
                | PendingOp::External { reply, .. } = op
                {
                    reply.send(Err(error(ErrorKind::Internal, "mismatched result")));
                }
            }
        }
    }

    /// A snapshot as the API shows it, with the registered volume it was
    /// taken of when the agent knows it.
    pub(in crate::volume::manager) fn snapshot_to_api(
        &self,
        plugin_id: &str,
        s: &Snapshot,
    ) -> calls::Snapshot {
        let volume_id = self
            .entries
            .values()
            .find(|e| e.volume.plugin_id == plugin_id && e.volume.external_id == s.source_volume_id)
            .map(|e| e.volume.id.clone())
            .unwrap_or_default();
        calls::Snapshot {
            id: s.snapshot_id.clone(),
            source_volume_id: s.source_volume_id.clone(),
            volume_id,
            size_bytes: s.size_bytes,
            created: s.creation_time,
            ready: s.ready_to_use,
        }
    }
}
