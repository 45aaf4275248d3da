//! `csi_agent_claims`: the claims the manager holds now, by state and
//! access mode, kept up to date from the volumes whose record changed in a
//! turn (the ones the journal writes), never from a walk of every volume
//! (but once, at start, over the restored ones).

use std::collections::BTreeMap;

use crate::volume::model::{Claim, Volume};

/// What one volume adds to the gauge: a (state, access mode) per claim.
type Counted = Vec<(&'static str, &'static str)>;

/// Each volume's claims as last counted.
#[derive(Debug, Default)]
pub(super) struct ClaimGauge {
    pub(super) counted: BTreeMap<String, Counted>,
}

/// A claim's state: `claiming` (wanted, its steps under way), `taken`,
/// `releasing` (no longer wanted, its steps under way) or `failed` (a
/// release that failed for good keeps its reason until released again).
fn state(claim: &Claim) -> &'static str {
    if claim.failure.is_some() {
        "failed"
    } else if !claim.wanted {
        "releasing"
    } else if claim.is_taken(claim.target.is_some()) {
        "taken"
    } else {
        "claiming"
    }
}

impl ClaimGauge {
    /// Counts volume `id` as it is now (`None`: gone) in place of what it
    /// was counted as before.
    pub(super) fn recount(&mut self, id: &str, volume: Option<&Volume>) {
        let now: Counted = volume.map_or_else(Vec::new, |v| {
            v.claims
                .values()
                .map(|c| (state(c), c.capability.access_mode.as_str()))
                .collect()
        });
        let before = match volume {
            Some(_) => self.counted.insert(id.to_string(), now.clone()),
            None => self.counted.remove(id),
        };
        for (state, mode) in before.unwrap_or_default() {
            crate::metrics::CLAIMS_NOW.add(&[state, mode], -1.0);
        }
        for (state, mode) in now {
            crate::metrics::CLAIMS_NOW.add(&[state, mode], 1.0);
        }
    }
}
