//! What an answer of NodeGetVolumeStats may be, and what a good one
//! moves: the volume's gauges, its condition and the events of its
//! changes.

use std::time::SystemTime;

use super::{Watched, MAX_MESSAGE};
use crate::csi::types::{UsageUnit, VolumeStats};
use crate::volume::calls::Health;
use crate::volume::manager::volume_event;

/// An answer's figures, checked.
pub(super) struct Sample {
    bytes: Option<[i64; 3]>,
    inodes: Option<[i64; 3]>,
    pub(super) condition: Option<(bool, String)>,
}

/// `stats` if it is a valid answer: at most one usage per unit, no
/// negative figure.
pub(super) fn check(stats: &VolumeStats) -> Result<Sample, String> {
    let mut sample = Sample {
        bytes: None,
        inodes: None,
        condition: None,
    };
    for usage in &stats.usage {
        let slot = match usage.unit {
            UsageUnit::Bytes => &mut sample.bytes,
            UsageUnit::Inodes => &mut sample.inodes,
        };
        if slot.is_some() {
            return Err(format!(
                "NodeGetVolumeStats answered more than one usage in {:?}",
                usage.unit
            ));
        }
        let figures = [usage.total, usage.available, usage.used];
        if figures.iter().any(|n| *n < 0) {
            return Err(format!(
                "NodeGetVolumeStats answered a negative figure in its usage {usage:?}"
            ));
        }
        *slot = Some(figures);
    }
    sample.condition = stats.condition.as_ref().map(|c| {
        let mut message = c.message.clone();
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" [cut]");
        }
        (c.abnormal, message)
    });
    Ok(sample)
}

/// Sets volume `id`'s gauges from `sample`, and its condition (when the
/// node reports conditions), with an event when it changes.
pub(super) fn export(id: &str, watched: &mut Watched, sample: &Sample, condition: bool) {
    use crate::metrics::{
        VOLUME_STATS_AVAILABLE, VOLUME_STATS_CAPACITY, VOLUME_STATS_INODES,
        VOLUME_STATS_INODES_FREE, VOLUME_STATS_INODES_USED, VOLUME_STATS_USED,
    };
    let labels = [id, watched.plugin.as_str()];
    if let Some([total, available, used]) = sample.bytes {
        VOLUME_STATS_CAPACITY.set(&labels, total as f64);
        VOLUME_STATS_AVAILABLE.set(&labels, available as f64);
        VOLUME_STATS_USED.set(&labels, used as f64);
        watched.exported = true;
    }
    if let Some([total, free, used]) = sample.inodes {
        VOLUME_STATS_INODES.set(&labels, total as f64);
        VOLUME_STATS_INODES_FREE.set(&labels, free as f64);
        VOLUME_STATS_INODES_USED.set(&labels, used as f64);
        watched.exported = true;
    }
    let Some((abnormal, message)) = sample.condition.clone().filter(|_| condition) else {
        return;
    };
    crate::metrics::VOLUME_ABNORMAL.set(&labels, if abnormal { 1.0 } else { 0.0 });
    watched.exported = true;
    let now = SystemTime::now();
    let changed = watched.health.as_ref().map(|h| h.abnormal) != Some(abnormal);
    match &mut watched.health {
        Some(health) if !changed => {
            health.message = message;
            health.checked = now;
        }
        _ => {
            let was = watched.health.as_ref().map(|h| h.abnormal);
            if abnormal {
                log::warn!(
                    "Volume {id}: plugin {:?} says its condition is abnormal: {message}",
                    watched.plugin
                );
                volume_event("VolumeUnhealthy", id, message.clone());
            } else if was == Some(true) {
                log::info!(
                    "Volume {id}: plugin {:?} says its condition is normal again: {message}",
                    watched.plugin
                );
                volume_event("VolumeHealthy", id, message.clone());
            }
            watched.health = Some(Health {
                abnormal,
                message,
                since: now,
                checked: now,
            });
        }
    }
}

/// Drops every gauge of volume `id`, no longer on the node.
pub(super) fn drop_volume_gauges(id: &str, watched: &Watched) {
    if !watched.exported {
        return;
    }
    let labels = [id, watched.plugin.as_str()];
    for family in [
        &crate::metrics::VOLUME_STATS_CAPACITY,
        &crate::metrics::VOLUME_STATS_AVAILABLE,
        &crate::metrics::VOLUME_STATS_USED,
        &crate::metrics::VOLUME_STATS_INODES,
        &crate::metrics::VOLUME_STATS_INODES_FREE,
        &crate::metrics::VOLUME_STATS_INODES_USED,
        &crate::metrics::VOLUME_ABNORMAL,
    ] {
        family.remove(&labels);
    }
}
