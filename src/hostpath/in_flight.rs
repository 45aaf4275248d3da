//! Strict mode's record of the calls in flight, per volume: the CSI spec
//! lets a CO have at most one call in flight for a volume, and a plugin
//! that sees a second one has caught the CO breaking that rule.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::strict::{Rule, Violation};

/// One call in flight for a volume.
struct Running {
    rpc: &'static str,
    serial: u64,
    /// Whether its caller still waits for the answer: false once the
    /// call's deadline has passed, when the CO has given up on it.
    awaited: Box<dyn Fn() -> bool + Send>,
}

/// The volumes with a call in flight.
#[derive(Default)]
pub struct InFlight {
    running: Mutex<(u64, BTreeMap<String, Running>)>,
}

/// A call's place in [`InFlight`]; dropping it ends the call.
pub struct InFlightGuard<'a> {
    in_flight: &'a InFlight,
    volume: String,
    serial: u64,
}

impl InFlight {
    /// Enters a call of `rpc` for `volume`, refused while another call for
    /// it is in flight and still awaited. A call whose deadline has passed
    /// is not: the CO saw it fail (uncertain) and may send it again.
    pub fn enter(
        &self,
        rpc: &'static str,
        volume: &str,
        awaited: impl Fn() -> bool + Send + 'static,
    ) -> Result<InFlightGuard<'_>, Violation> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(other) = running.1.get(volume) {
            if (other.awaited)() {
                return Err(Violation {
                    rpc,
                    volume: Some(volume.to_string()),
                    rule: Rule::OneCallPerVolume,
                    detail: format!("{} of volume {volume} is still in flight", other.rpc),
                });
            }
        }
        running.0 += 1;
        let serial = running.0;
        running.1.insert(
            volume.to_string(),
            Running {
                rpc,
                serial,
                awaited: Box::new(awaited),
            },
        );
        Ok(InFlightGuard {
            in_flight: self,
            volume: volume.to_string(),
            serial,
        })
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        let mut running = self
            .in_flight
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // A later call may have taken the place of one the CO gave up on.
        if running.1.get(&self.volume).map(|r| r.serial) == Some(self.serial) {
            running.1.remove(&self.volume);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn two_calls_in_flight_for_one_volume_are_refused() {
        let in_flight = InFlight::default();
        let first = in_flight.enter("NodeStageVolume", "v", || true).unwrap();
        let err = in_flight
            .enter("NodeStageVolume", "v", || true)
            .err()
            .unwrap();
        assert_eq!(err.rule, Rule::OneCallPerVolume);
        assert_eq!(
            err.verdict_line(),
            "NodeStageVolume v: at most one call in flight per volume"
        );
        // Other volumes are independent.
        let other = in_flight.enter("NodeStageVolume", "w", || true).unwrap();
        drop(first);
        let again = in_flight.enter("NodePublishVolume", "v", || true).unwrap();
        drop((again, other));
    }

    #[test]
    fn a_call_past_its_deadline_is_no_longer_in_flight() {
        let in_flight = InFlight::default();
        let awaited = Arc::new(AtomicBool::new(true));
        let flag = awaited.clone();
        let abandoned = in_flight
            .enter("NodeStageVolume", "v", move || flag.load(Ordering::SeqCst))
            .unwrap();
        assert!(in_flight.enter("NodeStageVolume", "v", || true).is_err());
        awaited.store(false, Ordering::SeqCst);
        let retry = in_flight.enter("NodeStageVolume", "v", || true).unwrap();
        // The abandoned call ending does not end the retry.
        drop(abandoned);
        assert!(in_flight.enter("NodeStageVolume", "v", || true).is_err());
        drop(retry);
        assert!(in_flight.enter("NodeStageVolume", "v", || true).is_ok());
    }
}
