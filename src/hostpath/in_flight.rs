//! Strict mode's record of the calls in flight, per volume: the CSI spec
//! lets a CO have at most one call in flight for a volume, and a plugin
//! that sees a second one has caught the CO breaking that rule.
//!
//! [`InFlight`] sees the calls of this process. A split plugin's controller
//! and node processes each see half of the calls for a volume, so they also
//! keep [`AcrossProcesses`]: while a process has a call in flight for a
//! volume it holds an exclusive `flock` of `<base-dir>/in-flight/<volume>`,
//! and a call that finds the other process holding it is the second call
//! in flight. A lock dies with its process, so a crash leaves none behind.
//! Unlike [`InFlight`], it cannot tell whether the other process's call is
//! still awaited: a call past its deadline there still counts (a CO that
//! gave up on a ControllerPublishVolume and sends a node call for the
//! volume meanwhile would be reported, which the agent never does: it
//! retries the same call).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::strict::{Rule, Violation};
use crate::sys::flock;

/// The directory of the per-volume locks in the base dir.
pub const IN_FLIGHT_DIR: &str = "in-flight";

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

/// The volumes this process has calls in flight for, as the plugin's other
/// processes see them: a held lock per volume, and how many of this
/// process's calls hold it.
pub struct AcrossProcesses {
    dir: PathBuf,
    held: Mutex<BTreeMap<String, (File, usize)>>,
}

/// A call's hold on its volume's lock; dropping it lets go.
pub struct AcrossGuard<'a> {
    across: &'a AcrossProcesses,
    volume: String,
}

impl AcrossProcesses {
    /// The locks in `base_dir/in-flight`.
    pub fn open(base_dir: &Path) -> io::Result<AcrossProcesses> {
        let dir = base_dir.join(IN_FLIGHT_DIR);
        std::fs::create_dir_all(&dir)?;
        Ok(AcrossProcesses {
            dir,
            held: Mutex::new(BTreeMap::new()),
        })
    }

    /// Enters a call of `rpc` for `volume`, refused while another process
    /// of the plugin has a call in flight for it. `None` when the volume ID
    /// cannot name a file (the call fails its own checks anyway) or the
    /// lock cannot be taken for another reason (logged: the check is
    /// skipped, not failed).
    pub fn enter(
        &self,
        rpc: &'static str,
        volume: &str,
    ) -> Result<Option<AcrossGuard<'_>>, Violation> {
        if crate::id::validate("volume ID", volume).is_err() {
            return Ok(None);
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let guard = || AcrossGuard {
            across: self,
            volume: volume.to_string(),
        };
        if let Some((_, calls)) = held.get_mut(volume) {
            // This process's own second call: `InFlight` judged it.
            *calls += 1;
            return Ok(Some(guard()));
        }
        let path = self.dir.join(volume);
        let locked = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .and_then(|file| Ok((flock::try_lock_exclusive(&file)?, file)));
        match locked {
            Ok((true, file)) => {
                held.insert(volume.to_string(), (file, 1));
                Ok(Some(guard()))
            }
            Ok((false, _)) => Err(Violation {
                rpc,
                volume: Some(volume.to_string()),
                rule: Rule::OneCallPerVolume,
                detail: format!(
                    "a call for volume {volume} is in flight in another process of the plugin"
                ),
            }),
            Err(err) => {
                log::error!("cannot lock {}: {err}", path.display());
                Ok(None)
            }
        }
    }
}

impl Drop for AcrossGuard<'_> {
    fn drop(&mut self) {
        let mut held = self.across.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, calls)) = held.get_mut(&self.volume) {
            *calls -= 1;
            if *calls == 0 {
                // Closing the file releases the lock.
                held.remove(&self.volume);
            }
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

    #[test]
    fn a_call_in_flight_in_one_process_refuses_a_call_for_its_volume_in_the_other() {
        let dir = std::env::temp_dir().join(format!("csi-agent-across-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Two instances stand for two processes: each opens its own locks.
        let controller = AcrossProcesses::open(&dir).unwrap();
        let node = AcrossProcesses::open(&dir).unwrap();
        let publish = controller.enter("ControllerPublishVolume", "v").unwrap();
        // The same process's calls share its hold.
        let again = controller.enter("ControllerPublishVolume", "v").unwrap();
        let err = node.enter("NodeStageVolume", "v").err().unwrap();
        assert_eq!(err.rule, Rule::OneCallPerVolume);
        assert_eq!(
            err.detail,
            "a call for volume v is in flight in another process of the plugin"
        );
        assert!(node.enter("NodeStageVolume", "w").unwrap().is_some());
        drop(publish);
        assert!(node.enter("NodeStageVolume", "v").is_err());
        drop(again);
        let stage = node.enter("NodeStageVolume", "v").unwrap();
        assert!(controller.enter("ControllerUnpublishVolume", "v").is_err());
        drop(stage);
        assert!(controller.enter("ControllerUnpublishVolume", "v").is_ok());
        // A name that is no file name is not checked.
        assert!(node.enter("NodeStageVolume", "../x").unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
