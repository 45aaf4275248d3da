//! Usage, health and capacity as signals: the agent asks on its own
//! schedule what kubelet asks (NodeGetVolumeStats of every staged volume,
//! GetCapacity of every plugin's controller) and keeps the answers as
//! gauges, condition changes as events, and the last of each for `volume
//! status` and `plugin status`.
//!
//! # The schedule
//!
//! A volume is watched from the turn its record shows it staged or
//! published on this node to the turn it shows neither. Its first poll
//! falls due within a tenth of the interval (jittered, so that a thousand
//! volumes restored at start do not ask at once), each next one an
//! interval (give or take a tenth) after the last answer, each at the end
//! of its [`SLOT`], so that the polls due within one go out together. A poll is a
//! request queued on its volume like a `volume status -stats`: it goes
//! out when no other call for the volume is in flight, and no second
//! poll is made while one is queued or out, so a plugin that does not
//! answer costs one poll per volume, bounded by the RPC deadline. A
//! volume whose plugin cannot answer now (no GET_VOLUME_STATS, its node
//! not healthy) is looked at again an interval later.
//!
//! A plugin is watched from the first time it turns healthy; its
//! capacity is asked for where its controller has GET_CAPACITY, with this
//! node's topology: its controller on this host, or in a cluster, on a
//! host with only the plugin's node, the controller leader's on another
//! (relayed, as the other controller calls are). It is forgotten (its
//! gauges dropped) once the plugin is no longer registered.
//!
//! # What an answer may be
//!
//! At most one usage per unit, no negative figure; a condition message is
//! cut at [`MAX_MESSAGE`] bytes. Another answer is the plugin's fault: it
//! is counted as an `invalid` poll, logged once until the plugin answers
//! well again, and changes no gauge.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::{Duration, Instant, SystemTime};

use crate::csi::backoff::{Jitter, SplitMix64};
use crate::csi::types::{Capacity, VolumeStats};
use crate::plugin::CapacityStatus;
use crate::volume::calls::Health;
use crate::volume::model::{Step, Volume};

use sample::{check, drop_volume_gauges, export};

mod polls;
mod sample;
#[cfg(test)]
mod tests;

/// The longest condition message kept, in bytes; a longer one is cut.
pub const MAX_MESSAGE: usize = 1024;

/// Polls fall due on this grid: those due within one slot go out in one
/// wake-up of the loop, not one each (a thousand volumes at the default
/// interval would wake it 17 times a second).
pub const SLOT: Duration = Duration::from_millis(250);

/// One watched volume.
#[derive(Debug)]
struct Watched {
    plugin: String,
    /// A poll is queued or in flight: none other is made.
    polling: bool,
    /// When its next poll falls due: its one entry of the schedule that
    /// counts (others left behind, by an earlier watch or interval, are
    /// dropped when they pop). `None` while it polls, or polls are off.
    due: Option<Instant>,
    /// Whether its gauges are exported, to drop them when unwatched.
    exported: bool,
    health: Option<Health>,
    /// The last poll's failure, logged once until a poll succeeds.
    failing: Option<String>,
}

/// One watched plugin.
#[derive(Debug, Default)]
struct WatchedPlugin {
    capacity: CapacityStatus,
    polling: bool,
    /// As [`Watched::due`].
    due: Option<Instant>,
    exported: bool,
    failing: Option<String>,
}

/// The volumes and plugins watched, when each is asked next, and what
/// each last answered.
pub(super) struct Signals {
    /// Zero: nothing is polled (a `volume status -stats` still moves the
    /// gauges).
    interval: Duration,
    jitter: SplitMix64,
    /// Where the [`SLOT`] grid starts.
    origin: Instant,
    volumes: BTreeMap<String, Watched>,
    /// When each volume's next poll falls due; an entry that is not its
    /// volume's [`Watched::due`] (the volume is gone, watched anew, or
    /// polling) is dropped when it pops.
    due: BinaryHeap<Reverse<(Instant, String)>>,
    plugins: BTreeMap<String, WatchedPlugin>,
    plugins_due: BinaryHeap<Reverse<(Instant, String)>>,
}

/// A poll's outcome, for its counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Error,
    Invalid,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Invalid => "invalid",
        }
    }
}

/// Whether `volume` is staged or published on this node: what the polls
/// watch.
pub(super) fn on_node(volume: &Volume) -> bool {
    volume.stagings.values().any(|s| s.step == Step::Done)
        || volume.claims.values().any(|c| c.published == Step::Done)
}

impl Signals {
    pub(super) fn new(interval: Duration) -> Signals {
        Signals {
            interval,
            jitter: SplitMix64::from_entropy(),
            origin: Instant::now(),
            volumes: BTreeMap::new(),
            due: BinaryHeap::new(),
            plugins: BTreeMap::new(),
            plugins_due: BinaryHeap::new(),
        }
    }

    /// A new interval: every watched volume and plugin is asked again
    /// within a tenth of it, then on the new schedule.
    pub(super) fn set_interval(&mut self, interval: Duration, now: Instant) {
        if interval == self.interval {
            return;
        }
        self.interval = interval;
        self.due.clear();
        self.plugins_due.clear();
        let volumes: Vec<String> = self.volumes.keys().cloned().collect();
        for id in volumes {
            let watched = self.volumes.get_mut(&id).expect("listed");
            watched.due = None;
            if !watched.polling {
                let at = self.first_at(now);
                self.schedule(&id, at);
            }
        }
        let plugins: Vec<String> = self.plugins.keys().cloned().collect();
        for id in plugins {
            let watched = self.plugins.get_mut(&id).expect("listed");
            watched.due = None;
            if !watched.polling {
                let at = self.first_at(now);
                self.schedule_plugin(&id, at);
            }
        }
    }

    /// `at`, or the end of its [`SLOT`].
    fn slot(&self, at: Instant) -> Instant {
        let since = at.saturating_duration_since(self.origin).as_nanos();
        let slot = SLOT.as_nanos();
        let slots = since.div_ceil(slot);
        self.origin + Duration::from_nanos((slots * slot) as u64)
    }

    /// Volume `id`'s next poll at `at` (its slot's end), unless polls are
    /// off or it is not watched.
    fn schedule(&mut self, id: &str, at: Instant) {
        if self.interval.is_zero() {
            return;
        }
        let at = self.slot(at);
        if let Some(watched) = self.volumes.get_mut(id) {
            watched.due = Some(at);
            self.due.push(Reverse((at, id.to_string())));
        }
    }

    /// Plugin `id`'s next capacity poll at `at`, as [`Signals::schedule`].
    fn schedule_plugin(&mut self, id: &str, at: Instant) {
        if self.interval.is_zero() {
            return;
        }
        let at = self.slot(at);
        if let Some(watched) = self.plugins.get_mut(id) {
            watched.due = Some(at);
            self.plugins_due.push(Reverse((at, id.to_string())));
        }
    }

    /// A draw in `[0, span)`.
    fn draw(&mut self, span: Duration) -> Duration {
        span.mul_f64(self.jitter.unit())
    }

    /// The next poll after one at `now`: an interval, give or take a
    /// tenth.
    fn next_after(&mut self, now: Instant) -> Instant {
        let tenth = self.interval / 10;
        now + self.interval - tenth + self.draw(tenth * 2)
    }

    /// The first poll of a volume or plugin seen at `now`.
    fn first_at(&mut self, now: Instant) -> Instant {
        now + self.draw(self.interval / 10)
    }

    /// Volume `id` is now `volume` (`None`: gone): watched while it is
    /// on the node, its gauges dropped once it is not.
    pub(super) fn volume_changed(&mut self, id: &str, volume: Option<&Volume>, now: Instant) {
        match volume.filter(|v| on_node(v)) {
            Some(v) => {
                if let Some(watched) = self.volumes.get_mut(id) {
                    watched.plugin.clone_from(&v.plugin_id);
                    return;
                }
                self.volumes.insert(
                    id.to_string(),
                    Watched {
                        plugin: v.plugin_id.clone(),
                        polling: false,
                        due: None,
                        exported: false,
                        health: None,
                        failing: None,
                    },
                );
                let at = self.first_at(now);
                self.schedule(id, at);
            }
            None => {
                if let Some(watched) = self.volumes.remove(id) {
                    drop_volume_gauges(id, &watched);
                }
            }
        }
    }

    /// Plugin `id` turned healthy: watched for its capacity from now on.
    pub(super) fn plugin_seen(&mut self, id: &str, now: Instant) {
        if self.plugins.contains_key(id) {
            return;
        }
        self.plugins
            .insert(id.to_string(), WatchedPlugin::default());
        let at = self.first_at(now);
        self.schedule_plugin(id, at);
    }

    /// When the next poll falls due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let volume = self.due.peek().map(|Reverse((at, _))| *at);
        let plugin = self.plugins_due.peek().map(|Reverse((at, _))| *at);
        volume.into_iter().chain(plugin).min()
    }

    /// The volumes whose poll fell due by `now`, each marked polling; the
    /// caller sends each poll or, when it cannot now, calls
    /// [`Signals::skipped`].
    pub(super) fn due_volumes(&mut self, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        while self.due.peek().is_some_and(|Reverse((at, _))| *at <= now) {
            let Some(Reverse((at, id))) = self.due.pop() else {
                break;
            };
            if let Some(watched) = self.volumes.get_mut(&id) {
                if watched.due == Some(at) {
                    watched.due = None;
                    watched.polling = true;
                    out.push(id);
                }
            }
        }
        out
    }

    /// The plugins whose capacity poll fell due by `now`, each marked
    /// polling, as [`Signals::due_volumes`].
    pub(super) fn due_plugins(&mut self, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        while self
            .plugins_due
            .peek()
            .is_some_and(|Reverse((at, _))| *at <= now)
        {
            let Some(Reverse((at, id))) = self.plugins_due.pop() else {
                break;
            };
            if let Some(watched) = self.plugins.get_mut(&id) {
                if watched.due == Some(at) {
                    watched.due = None;
                    watched.polling = true;
                    out.push(id);
                }
            }
        }
        out
    }

    /// Volume `id`'s poll was not sent (its plugin cannot answer now): it
    /// is asked again an interval later.
    pub(super) fn skipped(&mut self, id: &str, now: Instant) {
        if let Some(watched) = self.volumes.get_mut(id) {
            watched.polling = false;
            let at = self.next_after(now);
            self.schedule(id, at);
        }
    }

    /// Plugin `id`'s capacity was not asked for: `gone` when the plugin
    /// is no longer registered (it is forgotten), else it is asked again
    /// an interval later.
    pub(super) fn plugin_skipped(&mut self, id: &str, gone: bool, now: Instant) {
        if gone {
            if let Some(watched) = self.plugins.remove(id) {
                if watched.exported {
                    crate::metrics::PLUGIN_CAPACITY.remove(&[id]);
                    crate::metrics::PLUGIN_MAXIMUM_VOLUME.remove(&[id]);
                }
            }
            return;
        }
        if let Some(watched) = self.plugins.get_mut(id) {
            watched.polling = false;
            let at = self.next_after(now);
            self.schedule_plugin(id, at);
        }
    }

    /// NodeGetVolumeStats of volume `id` answered `result`, for a poll
    /// (`poll`) or a `volume status -stats`. `condition` says whether the
    /// node has VOLUME_CONDITION: without it a condition is not read.
    pub(super) fn stats_answered(
        &mut self,
        id: &str,
        poll: bool,
        condition: bool,
        result: &Result<VolumeStats, crate::csi::Error>,
        now: Instant,
    ) {
        // A poll's answer schedules the next, unless the volume was
        // watched anew since (its first poll is scheduled already).
        let next = self.next_after(now);
        if poll && self.volumes.get(id).is_some_and(|w| w.polling) {
            self.volumes.get_mut(id).expect("watched").polling = false;
            self.schedule(id, next);
        }
        let Some(watched) = self.volumes.get_mut(id) else {
            return;
        };
        let outcome = match result.as_ref().map_err(|e| e.to_string()).and_then(check) {
            Ok(sample) => {
                if let Some(before) = watched.failing.take() {
                    log::info!(
                        "Volume {id}: NodeGetVolumeStats answers again (it failed: {before})"
                    );
                }
                export(id, watched, &sample, condition);
                Outcome::Ok
            }
            Err(why) => {
                let outcome = match result {
                    Ok(_) => Outcome::Invalid,
                    Err(_) => Outcome::Error,
                };
                if watched.failing.as_deref() != Some(why.as_str()) {
                    log::warn!(
                        "Volume {id} (plugin {:?}): {why}; its usage gauges keep their last values, and this is logged again only once it changes",
                        watched.plugin
                    );
                    watched.failing = Some(why);
                }
                outcome
            }
        };
        if poll {
            crate::metrics::VOLUME_STATS_POLLS.inc(&[&watched.plugin, outcome.as_str()]);
        }
    }

    /// GetCapacity of plugin `id` answered `result`.
    pub(super) fn capacity_answered(
        &mut self,
        id: &str,
        result: Result<Capacity, crate::csi::Error>,
        now: Instant,
    ) {
        let next = self.next_after(now);
        if self.plugins.get(id).is_some_and(|w| w.polling) {
            self.plugins.get_mut(id).expect("watched").polling = false;
            self.schedule_plugin(id, next);
        }
        let Some(watched) = self.plugins.get_mut(id) else {
            return;
        };
        let checked = result.map_err(|e| e.to_string()).and_then(|c| {
            let figures = [
                Some(c.available_capacity),
                c.maximum_volume_size,
                c.minimum_volume_size,
            ];
            if figures.iter().flatten().any(|n| *n < 0) {
                return Err(format!("GetCapacity answered a negative figure: {c:?}"));
            }
            Ok(c)
        });
        match checked {
            Ok(capacity) => {
                if let Some(before) = watched.failing.take() {
                    log::info!("Plugin {id}: GetCapacity answers again (it failed: {before})");
                }
                crate::metrics::PLUGIN_CAPACITY.set(&[id], capacity.available_capacity as f64);
                match capacity.maximum_volume_size {
                    Some(max) => crate::metrics::PLUGIN_MAXIMUM_VOLUME.set(&[id], max as f64),
                    None => crate::metrics::PLUGIN_MAXIMUM_VOLUME.remove(&[id]),
                }
                watched.exported = true;
                watched.capacity = CapacityStatus {
                    reading: Some((capacity, SystemTime::now())),
                    error: String::new(),
                };
            }
            Err(why) => {
                if watched.failing.as_deref() != Some(why.as_str()) {
                    log::warn!("Plugin {id}: {why}; logged again only once it changes");
                    watched.failing = Some(why.clone());
                }
                watched.capacity.error = why;
            }
        }
    }

    /// Volume `id`'s condition as last heard, if it was.
    pub(super) fn health(&self, id: &str) -> Option<&Health> {
        self.volumes.get(id)?.health.as_ref()
    }

    /// Plugin `id`'s capacity as last heard, if it is watched.
    pub(super) fn capacity(&self, id: &str) -> Option<&CapacityStatus> {
        self.plugins.get(id).map(|w| &w.capacity)
    }

    #[cfg(test)]
    pub(super) fn watched(&self) -> Vec<String> {
        self.volumes.keys().cloned().collect()
    }
}
