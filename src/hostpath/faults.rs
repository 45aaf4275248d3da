//! Test-only fault injection and call tracing for the hostpath plugin.
//!
//! Both are off unless the plugin is started with `-test-faults FILE` or
//! `-test-trace FILE`; nothing in the agent passes them. The faults file is
//! re-read whenever its content changes, so a test can change the plugin's
//! behaviour while it runs. One rule per line, `#` starts a comment:
//!
//! ```text
//! NodeStageVolume code=UNAVAILABLE count=2 message=disk busy
//! Probe sleep=2s
//! CreateVolume hang
//! NodePublishVolume exit
//! Probe not-ready
//! NodeUnpublishVolume skip
//! ValidateVolumeCapabilities omit-confirmed
//! ValidateVolumeCapabilities confirm=multi-node-reader-only,xfs
//! ControllerExpandVolume node-expansion-required
//! CreateVolume answer-empty
//! * code=INTERNAL count=1
//! ```
//!
//! A rule applies to the method named (or `*`, every method) for its next
//! `count` calls, or forever without `count`. The first matching rule that
//! still has calls left wins. `message=` takes the rest of the line.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crate::csi::error::Code;

/// What a rule does to a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Fail the call with this code and message.
    Fail(Code, String),
    /// Sleep, then serve the call normally.
    Sleep(Duration),
    /// Never answer.
    Hang,
    /// Exit the plugin process at once, as a crash would.
    Exit,
    /// Probe: answer `ready = false` (still starting).
    NotReady,
    /// Answer success without doing anything, as some real plugins do
    /// after a restart ("not published, nothing to do").
    Skip,
    /// ValidateVolumeCapabilities: leave `confirmed` unset.
    OmitConfirmed,
    /// ValidateVolumeCapabilities: confirm this access mode and fs type
    /// instead of the requested ones (an older plugin's mistake).
    Confirm {
        access_mode: String,
        fs_type: String,
    },
    /// ControllerExpandVolume: answer `node_expansion_required`, as a
    /// plugin whose file systems grow on the node does.
    NodeExpansionRequired,
    /// Do the call's work, then answer its empty response: an invalid
    /// reply where the answer has a required field (CreateVolume's
    /// `volume`), from a plugin that did what it was asked.
    AnswerEmpty,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub method: String,
    pub action: Action,
    /// Calls left; `None` is forever.
    pub remaining: Option<u32>,
}

/// Parses a faults file. Errors name the line.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |msg: String| format!("faults line {}: {msg}", index + 1);
        let (head, message) = match line.split_once(" message=") {
            Some((head, message)) => (head, message.to_string()),
            None => (line, String::new()),
        };
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or_default().to_string();
        let mut action = None;
        let mut remaining = None;
        for word in words {
            let (key, value) = word.split_once('=').unwrap_or((word, ""));
            match key {
                "code" => {
                    let code = Code::from_name(value)
                        .ok_or_else(|| at(format!("unknown code {value:?}")))?;
                    action = Some(Action::Fail(code, String::new()));
                }
                "count" => {
                    remaining = Some(
                        value
                            .parse()
                            .map_err(|_| at(format!("count {value:?} is not a number")))?,
                    )
                }
                "sleep" => {
                    let d = crate::units::parse_duration(value).map_err(|e| at(e.to_string()))?;
                    action = Some(Action::Sleep(d));
                }
                "hang" => action = Some(Action::Hang),
                "exit" => action = Some(Action::Exit),
                "not-ready" => action = Some(Action::NotReady),
                "skip" => action = Some(Action::Skip),
                "omit-confirmed" => action = Some(Action::OmitConfirmed),
                "node-expansion-required" => action = Some(Action::NodeExpansionRequired),
                "answer-empty" => action = Some(Action::AnswerEmpty),
                "confirm" => {
                    let (mode, fs) = value.split_once(',').unwrap_or((value, ""));
                    action = Some(Action::Confirm {
                        access_mode: mode.to_string(),
                        fs_type: fs.to_string(),
                    });
                }
                other => return Err(at(format!("unknown word {other:?}"))),
            }
        }
        let mut action =
            action.ok_or_else(|| at("no action (code=, sleep=, hang, exit, ...)".to_string()))?;
        if let Action::Fail(_, msg) = &mut action {
            *msg = message;
        }
        rules.push(Rule {
            method,
            action,
            remaining,
        });
    }
    Ok(rules)
}

/// The faults file and the rules read from it.
pub struct Faults {
    path: Option<PathBuf>,
    state: Mutex<(String, Vec<Rule>)>,
}

impl Faults {
    pub fn new(path: Option<PathBuf>) -> Faults {
        Faults {
            path,
            state: Mutex::new((String::new(), Vec::new())),
        }
    }

    /// The action for this call of `method`, if a rule applies; uses up one
    /// of the rule's calls.
    pub fn take(&self, method: &str) -> Option<Action> {
        let path = self.path.as_ref()?;
        let text = fs::read_to_string(path).unwrap_or_default();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.0 != text {
            match parse_rules(&text) {
                Ok(rules) => *state = (text, rules),
                Err(err) => {
                    log::error!("{err}");
                    *state = (text, Vec::new());
                }
            }
        }
        let rule = state
            .1
            .iter_mut()
            .find(|r| (r.method == method || r.method == "*") && r.remaining != Some(0))?;
        if let Some(n) = rule.remaining.as_mut() {
            *n -= 1;
        }
        Some(rule.action.clone())
    }
}

/// The call trace: one line per RPC received, appended as it arrives.
pub struct Trace {
    file: Option<Mutex<fs::File>>,
}

impl Trace {
    pub fn open(path: Option<PathBuf>) -> std::io::Result<Trace> {
        let file = match path {
            None => None,
            Some(path) => Some(Mutex::new(
                OpenOptions::new().create(true).append(true).open(path)?,
            )),
        };
        Ok(Trace { file })
    }

    /// Records `method` with its fields (`volume=v1 staging=/x`). Callers
    /// never pass secrets or mount flags.
    pub fn record(&self, method: &str, fields: &str) {
        if let Some(file) = &self.file {
            let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
            let line = if fields.is_empty() {
                format!("{method}\n")
            } else {
                format!("{method} {fields}\n")
            };
            if let Err(err) = file.write_all(line.as_bytes()) {
                log::warn!("cannot write the call trace: {err}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_rule_form() {
        let rules = parse_rules(
            "# comment\nNodeStageVolume code=UNAVAILABLE count=2 message=disk is busy\n\
             Probe sleep=250ms\nCreateVolume hang\nNodePublishVolume exit count=1\n\
             ValidateVolumeCapabilities omit-confirmed\n\
             ValidateVolumeCapabilities confirm=multi-node-reader-only,xfs\n* code=internal\n\
             ControllerExpandVolume node-expansion-required\n",
        )
        .unwrap();
        assert_eq!(rules.len(), 8);
        assert_eq!(
            rules[0],
            Rule {
                method: "NodeStageVolume".into(),
                action: Action::Fail(Code::Unavailable, "disk is busy".into()),
                remaining: Some(2)
            }
        );
        assert_eq!(rules[1].action, Action::Sleep(Duration::from_millis(250)));
        assert_eq!(rules[2].action, Action::Hang);
        assert_eq!(rules[3].remaining, Some(1));
        assert_eq!(rules[4].action, Action::OmitConfirmed);
        assert_eq!(
            rules[5].action,
            Action::Confirm {
                access_mode: "multi-node-reader-only".into(),
                fs_type: "xfs".into()
            }
        );
        assert_eq!(rules[6].action, Action::Fail(Code::Internal, String::new()));
        assert_eq!(rules[7].action, Action::NodeExpansionRequired);
    }

    #[test]
    fn bad_rules_name_their_line() {
        assert_eq!(
            parse_rules("\nProbe code=NOPE").unwrap_err(),
            "faults line 2: unknown code \"NOPE\""
        );
        assert!(parse_rules("Probe").unwrap_err().contains("no action"));
        assert!(parse_rules("Probe sleep=5x")
            .unwrap_err()
            .contains("invalid duration"));
    }

    #[test]
    fn counted_rules_expire_and_reload_on_change() {
        let dir = std::env::temp_dir().join(format!("csi-agent-faults-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("faults");
        fs::write(&path, "NodeStageVolume code=ABORTED count=2\n").unwrap();
        let faults = Faults::new(Some(path.clone()));
        assert!(faults.take("NodePublishVolume").is_none());
        assert!(matches!(
            faults.take("NodeStageVolume"),
            Some(Action::Fail(Code::Aborted, _))
        ));
        assert!(matches!(
            faults.take("NodeStageVolume"),
            Some(Action::Fail(Code::Aborted, _))
        ));
        assert!(faults.take("NodeStageVolume").is_none());
        fs::write(&path, "* exit count=1\n").unwrap();
        assert_eq!(faults.take("Probe"), Some(Action::Exit));
        assert!(faults.take("Probe").is_none());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_file_means_no_faults() {
        assert!(Faults::new(None).take("Probe").is_none());
    }
}
