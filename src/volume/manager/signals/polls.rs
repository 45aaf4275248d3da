//! The manager's side of the polls: the calls sent when the schedule
//! says, and what their answers change.

use std::time::{Duration, Instant};

use crate::csi::types::{Capacity, VolumeStats};
use crate::plugin::CapacityStatus;
use crate::plugin::Registry;
use crate::volume::calls::Health;
use crate::volume::manager::{Dispatch, PendingOp, PluginView, Service, VolumeManager};
use crate::volume::model::Step;
use crate::volume::ops::{self, Job, OpResult};

impl VolumeManager {
    /// `volume_stats_interval` of the agent's config; zero stops the polls.
    pub fn set_stats_interval(&mut self, interval: Duration) {
        self.signals.set_interval(interval, Instant::now());
    }

    /// The polls due by `now`, to send at once: they are reads, not held
    /// behind the journal. A volume with a call in flight keeps its poll
    /// queued until it is idle.
    pub fn polls_due(&mut self, registry: &Registry, now: Instant) -> Vec<Dispatch> {
        let mut out = Vec::new();
        for id in self.signals.due_volumes(now) {
            let view = self
                .entries
                .get(&id)
                .and_then(|e| self.plugin_view(registry, &e.volume.plugin_id));
            match view.and_then(|view| self.stats_job(&id, &view)) {
                Some((token, job)) => {
                    let op = PendingOp::Stats { reply: None };
                    self.enqueue(&id, token, op, Service::Node, job);
                    out.extend(self.take_queued(&id));
                }
                None => self.signals.skipped(&id, now),
            }
        }
        for plugin in self.signals.due_plugins(now) {
            let view = self.plugin_view(registry, &plugin);
            let Some(view) = view else {
                self.signals.plugin_skipped(&plugin, true, now);
                continue;
            };
            // A controller elsewhere in the cluster answers through its
            // leader (the dispatch is relayed), still with this node's
            // topology.
            if !view.has_controller()
                || !view.get_capacity
                || view.unavailable(&plugin, Service::Controller).is_some()
            {
                self.signals.plugin_skipped(&plugin, false, now);
                continue;
            }
            let topology = view.topology.clone();
            let token = self.token();
            let job = ops::controller_job("", token, self.done.clone(), move |controller| {
                OpResult::Capacity(controller.capacity(&[], &Default::default(), topology.as_ref()))
            });
            self.pending.insert(
                token,
                PendingOp::Capacity {
                    plugin_id: plugin.clone(),
                },
            );
            out.push(Dispatch {
                plugin_id: plugin,
                service: Service::Controller,
                job,
            });
        }
        out
    }

    /// A NodeGetVolumeStats job for volume `id`, if `view`'s node can
    /// answer now: at the path of a claim published here (with its
    /// staging path, where the plugin stages), or else where it is
    /// staged.
    pub(in crate::volume::manager) fn stats_job(
        &mut self,
        id: &str,
        view: &PluginView,
    ) -> Option<(u64, Job)> {
        let v = &self.entries.get(id)?.volume;
        if !view.stats || view.unavailable(&v.plugin_id, Service::Node).is_some() {
            return None;
        }
        let base = view.base_dir.as_deref();
        let in_view = |p: std::path::PathBuf| self.paths.for_plugin(&v.plugin_id, &p, base);
        let published = v.claims.values().find(|c| c.published == Step::Done);
        let staged = v.stagings.iter().find(|(_, s)| s.step == Step::Done);
        let (path, staging) = match (published, staged) {
            (Some(claim), _) => {
                let path = in_view(self.paths.publish(v, &claim.alloc_id, &claim.usage));
                let staging = view
                    .protocol
                    .stage
                    .then(|| in_view(self.paths.staging(v, &claim.staging)));
                (path, staging)
            }
            (None, Some((key, _))) => {
                let staging = in_view(self.paths.staging(v, key));
                (staging.clone(), Some(staging))
            }
            (None, None) => return None,
        };
        let external = v.external_id.clone();
        let token = self.token();
        let job = ops::node_job(id, token, self.done.clone(), move |client| {
            OpResult::Stats(client.node_volume_stats(&external, &path, staging.as_deref()))
        });
        Some((token, job))
    }

    /// A NodeGetVolumeStats answered, for a poll or a status: the gauges
    /// and the condition follow it.
    pub(in crate::volume::manager) fn stats_answered(
        &mut self,
        id: &str,
        poll: bool,
        result: &Result<VolumeStats, crate::csi::Error>,
        registry: &Registry,
    ) {
        let condition = self
            .entries
            .get(id)
            .and_then(|e| self.plugin_view(registry, &e.volume.plugin_id))
            .is_some_and(|v| v.condition);
        self.signals
            .stats_answered(id, poll, condition, result, Instant::now());
    }

    /// GetCapacity of plugin `plugin_id` answered.
    pub(in crate::volume::manager) fn capacity_answered(
        &mut self,
        plugin_id: &str,
        result: Result<Capacity, crate::csi::Error>,
    ) {
        self.signals
            .capacity_answered(plugin_id, result, Instant::now());
    }

    /// Volume `id`'s condition as its plugin last said it, if it did.
    pub fn health(&self, id: &str) -> Option<&Health> {
        self.signals.health(id)
    }

    /// Plugin `id`'s capacity as its controller last said it, for `plugin
    /// status`; `None` while it was never asked.
    pub fn plugin_capacity(&self, id: &str) -> Option<&CapacityStatus> {
        self.signals.capacity(id)
    }
}
