//! Strict mode at work: the checker of [`super::strict`] run around every
//! RPC, and its verdict file.
//!
//! A process of a split plugin (`-mode controller` or `-mode node`) checks
//! every rule it can judge with what it sees and what the other process
//! recorded in the shared state: before each call its model takes the other
//! side from the state's records (the controller's attachments, the node's
//! stagings and publishes), and the calls in flight are counted across the
//! processes ([`AcrossProcesses`]). The verdict file is the base dir's, so
//! both processes write to it.
//!
//! The verdict file, `<base-dir>/strict-violations`, is created (empty) when
//! a strict plugin starts and gets one line per refused request,
//! `<RPC> <volume>: <rule>`, written before the refusal is answered. It is
//! never truncated, so a restarted plugin adds to the verdict of its earlier
//! runs: a test that ends with the file empty saw a conforming CO.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::in_flight::{AcrossGuard, AcrossProcesses, InFlight, InFlightGuard};
use super::state::State;
use super::strict::{Advertised, Call, Strict, Violation};
use crate::spec::PluginType;

/// The verdict file's name in the base dir.
pub const VERDICT_FILE: &str = "strict-violations";

/// The checker, the calls in flight and the verdict file of a strict
/// plugin.
pub struct StrictMode {
    checker: Mutex<Strict>,
    in_flight: InFlight,
    /// A split plugin's process: the calls in flight of the other one.
    across: Option<AcrossProcesses>,
    verdict: Mutex<File>,
    path: PathBuf,
}

impl StrictMode {
    /// Opens (or creates) the verdict file in `base_dir`, and starts the
    /// checker's model from what the plugin recorded before a restart.
    /// `serves` is the process's mode.
    pub fn open(
        base_dir: &Path,
        advertised: Advertised,
        node_id: &str,
        state: &State,
        serves: PluginType,
    ) -> io::Result<StrictMode> {
        let path = base_dir.join(VERDICT_FILE);
        let verdict = OpenOptions::new().create(true).append(true).open(&path)?;
        let mut checker = Strict::new(advertised, node_id).serving(serves);
        for call in recorded_calls(state) {
            checker.completed(&call);
        }
        let across = match serves {
            PluginType::Monolith => None,
            PluginType::Controller | PluginType::Node => Some(AcrossProcesses::open(base_dir)?),
        };
        Ok(StrictMode {
            checker: Mutex::new(checker),
            in_flight: InFlight::default(),
            across,
            verdict: Mutex::new(verdict),
            path,
        })
    }

    /// Whether this is a process of a split plugin, which needs the other
    /// process's record ([`recorded_calls`]) with each call.
    pub fn is_split(&self) -> bool {
        self.across.is_some()
    }

    /// Admits `call` (entering it in flight when it names a volume), or
    /// records the violation in the verdict file and returns it.
    /// `awaited` says whether the caller still waits for the answer;
    /// `recorded` is the shared state's record, for a split plugin.
    pub fn admit(
        &self,
        call: &Call,
        undeclared_fields: bool,
        awaited: impl Fn() -> bool + Send + 'static,
        recorded: Option<Vec<Call>>,
    ) -> Result<Admitted<'_>, Violation> {
        let mut admitted = Admitted {
            _here: None,
            _across: None,
        };
        if let Some(volume) = call.volume() {
            admitted._here = Some(
                self.in_flight
                    .enter(call.rpc(), volume, awaited)
                    .map_err(|v| self.record(v))?,
            );
            if let Some(across) = &self.across {
                admitted._across = across
                    .enter(call.rpc(), volume)
                    .map_err(|v| self.record(v))?;
            }
        }
        let mut checker = self.checker();
        if let Some(recorded) = recorded {
            checker.adopt_recorded(&recorded);
        }
        checker
            .admit(call, undeclared_fields)
            .map_err(|v| self.record(v))?;
        Ok(admitted)
    }

    /// Records that `call` succeeded.
    pub fn completed(&self, call: &Call) {
        self.checker().completed(call);
    }

    fn checker(&self) -> std::sync::MutexGuard<'_, Strict> {
        self.checker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends the violation's line to the verdict file (a failure to write
    /// it is logged: the refusal itself still tells the CO).
    fn record(&self, violation: Violation) -> Violation {
        log::warn!(
            "{} {}: {violation}",
            violation.rpc,
            violation.volume.as_deref().unwrap_or("-")
        );
        let mut file = self.verdict.lock().unwrap_or_else(|e| e.into_inner());
        let line = format!("{}\n", violation.verdict_line());
        if let Err(err) = file
            .write_all(line.as_bytes())
            .and_then(|()| file.sync_data())
        {
            log::error!("cannot write the verdict {}: {err}", self.path.display());
        }
        violation
    }
}

/// An admitted call's place among the calls in flight; dropping it ends
/// the call.
pub struct Admitted<'a> {
    _here: Option<InFlightGuard<'a>>,
    _across: Option<AcrossGuard<'a>>,
}

/// The calls that made the plugin's recorded state: attachments, stagings
/// and publishes, as their successful calls.
pub fn recorded_calls(state: &State) -> Vec<Call> {
    let mut calls = Vec::new();
    for (volume, record) in &state.volumes {
        if let Some((node, read_only)) = &record.attached {
            calls.push(Call::ControllerPublishVolume {
                volume: volume.clone(),
                node: node.clone(),
                read_only: *read_only,
                answer: super::publish_context(node),
            });
        }
    }
    for (staging, staged) in &state.staged {
        calls.push(Call::NodeStageVolume {
            volume: staged.volume_id.clone(),
            staging: staging.clone(),
            publish_context: Default::default(),
        });
    }
    for (target, (volume, _)) in &state.published {
        calls.push(Call::NodePublishVolume {
            volume: volume.clone(),
            staging: PathBuf::new(),
            target: target.clone(),
            publish_context: Default::default(),
        });
    }
    calls
}

/// Removes a verdict file, for a plugin started without `-strict`: a stale
/// verdict must not be read as this run's.
pub fn remove_stale(base_dir: &Path) -> io::Result<()> {
    match fs::remove_file(base_dir.join(VERDICT_FILE)) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::types::{ControllerCapability, NodeCapability};
    use crate::hostpath::state::{Staged, VolumeRecord};

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-verdict-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn advertised() -> Advertised {
        Advertised {
            controller: [ControllerCapability::PublishUnpublishVolume].into(),
            node: [NodeCapability::StageUnstageVolume].into(),
        }
    }

    #[test]
    fn violations_are_appended_as_lines_and_survive_a_restart() {
        let dir = dir("lines");
        let state = State::default();
        let mode =
            StrictMode::open(&dir, advertised(), "n1", &state, PluginType::Monolith).unwrap();
        assert_eq!(fs::read_to_string(dir.join(VERDICT_FILE)).unwrap(), "");
        let publish_first = Call::NodePublishVolume {
            volume: "v".into(),
            staging: "/s".into(),
            target: "/t".into(),
            publish_context: super::super::publish_context("n1"),
        };
        let err = mode
            .admit(&publish_first, false, || true, None)
            .err()
            .unwrap();
        assert!(err.to_string().starts_with("strict: "), "{err}");
        drop(mode);
        let mode =
            StrictMode::open(&dir, advertised(), "n1", &state, PluginType::Monolith).unwrap();
        assert!(mode.admit(&Call::NodeGetInfo, true, || true, None).is_err());
        assert_eq!(
            fs::read_to_string(dir.join(VERDICT_FILE)).unwrap(),
            "NodePublishVolume v: NodeStageVolume and NodePublishVolume pass \
             ControllerPublishVolume's publish_context\n\
             NodeGetInfo -: secrets only on RPCs that take them\n"
        );
        remove_stale(&dir).unwrap();
        assert!(!dir.join(VERDICT_FILE).exists());
        remove_stale(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_model_starts_from_the_recorded_state() {
        let dir = dir("seed");
        let mut state = State::default();
        state.volumes.insert(
            "v".into(),
            VolumeRecord {
                capacity_bytes: 0,
                attached: Some(("n1".into(), false)),
                kind: Default::default(),
                content_source: None,
            },
        );
        state.staged.insert(
            "/s".into(),
            Staged {
                volume_id: "v".into(),
                capability: String::new(),
            },
        );
        state.published.insert("/t".into(), ("v".into(), false));
        let mode =
            StrictMode::open(&dir, advertised(), "n1", &state, PluginType::Monolith).unwrap();
        let publish = Call::NodePublishVolume {
            volume: "v".into(),
            staging: "/s".into(),
            target: "/t2".into(),
            publish_context: super::super::publish_context("n1"),
        };
        assert!(mode.admit(&publish, false, || true, None).is_ok());
        let unstage = Call::NodeUnstageVolume {
            volume: "v".into(),
            staging: "/s".into(),
        };
        assert!(
            mode.admit(&unstage, false, || true, None).is_err(),
            "still published at /t"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
