//! Persisting each loop turn: plan, commit, then act.
//!
//! Every loop turn ends in [`Agent::end_turn`]: the volumes' next steps are
//! planned, the turn's changes are made durable (the changed volume records
//! in one journal sync, or a whole new snapshot when something outside the
//! journal changed or the journal has grown large), and only then are the
//! planned plugin jobs submitted and the turn's replies sent.

use std::time::Instant;

use super::Agent;
use crate::plugin::PluginRecord;
use crate::proto::state as statepb;

/// Fold the journal into a new snapshot once it is this large.
const COMPACT_JOURNAL_BYTES: u64 = 1 << 20;

impl Agent {
    /// The end of every loop turn: plan the volumes' next steps, make this
    /// turn's changes durable (one journal sync, or a new snapshot), then
    /// submit the planned jobs and send the replies.
    pub(super) fn end_turn(&mut self) {
        // Tasks may claim or release volumes, which plans and journals
        // again; each round makes progress, and a few always suffice.
        for _ in 0..8 {
            self.commit_turn();
            let progressed = self
                .allocs
                .step(&mut self.volumes, &self.registry, Instant::now());
            self.plugin_effects();
            if self.allocs.take_dirty() {
                self.dirty = true;
            }
            if !progressed && !self.dirty {
                break;
            }
        }
    }

    pub(super) fn commit_turn(&mut self) {
        let now = Instant::now();
        let planned = self.volumes.plan(&self.registry, now);
        self.dispatches.extend(planned);
        let records = self.volumes.take_journal();
        if self.dirty || self.store.journal_bytes() > COMPACT_JOURNAL_BYTES {
            self.dirty = true;
            self.persist();
        } else if !records.is_empty() {
            if let Err(err) = self.store.append(&records) {
                log::error!("Cannot journal the state: {}", crate::error_chain(&err));
                // A snapshot next turn covers what the journal could not.
                self.dirty = true;
            }
        }
        for dispatch in std::mem::take(&mut self.dispatches) {
            match self.instances.get_mut(&dispatch.plugin_id) {
                Some(running) => running.instance.submit(dispatch.job),
                None => log::error!(
                    "No running plugin {} for a volume operation",
                    dispatch.plugin_id
                ),
            }
        }
        for (reply, result) in self.volumes.take_outbox() {
            let _ = reply.send(result);
        }
    }

    pub(super) fn state(&self) -> statepb::State {
        statepb::State {
            plugins: self.registry.list().map(PluginRecord::to_proto).collect(),
            volumes: self.volumes.to_proto(),
            jobs: self.allocs.jobs_to_proto(),
            allocs: self.allocs.allocs_to_proto(),
            ..Default::default()
        }
    }

    pub(super) fn persist(&mut self) {
        if !self.dirty {
            return;
        }
        match self.store.save(&self.state()) {
            Ok(()) => self.dirty = false,
            // Kept dirty: the next turn tries again.
            Err(err) => log::error!("Cannot persist the state: {}", crate::error_chain(&err)),
        }
    }
}
