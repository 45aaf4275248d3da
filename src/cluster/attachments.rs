//! Attachments across hosts: a node that needs a volume attached writes an
//! intent, `<prefix>/attachments/<volume>/<node>` ([`pb::Attachment`] in
//! state REQUESTED); the agent leading the plugin's controller election
//! watches the intents, calls ControllerPublishVolume (or Unpublish for
//! DETACH_REQUESTED) and writes the outcome into the same record; the node
//! waits for it with a watch, not a poll, before NodeStage.
//!
//! Every write compares the record's revision, so a node changing its
//! intent and the leader writing an outcome never overwrite each other: a
//! leader's outcome for an intent that changed meanwhile is dropped, and
//! the new intent is served next.

use std::time::{Duration, Instant};

use super::etcd::{self, Condition, Etcd, Event, Kv, Watch};
use crate::proto::cluster as pb;

/// The prefix of every attachment.
pub fn attachments_prefix(prefix: &str) -> String {
    format!("{}/attachments/", prefix.trim_end_matches('/'))
}

/// The key of `volume`'s attachment to `node`.
pub fn attachment_key(prefix: &str, volume: &str, node: &str) -> Vec<u8> {
    format!("{}{volume}/{node}", attachments_prefix(prefix)).into_bytes()
}

fn decode(kv: &Kv) -> Option<pb::Attachment> {
    crate::message::decode::<pb::Attachment>(&kv.value).ok()
}

fn encode(a: &pb::Attachment) -> Vec<u8> {
    crate::message::encode(a).expect("encoding an attachment cannot fail")
}

/// Writes `volume`'s intent for `node`: attach (with the plugin's node ID
/// and read-only flag) or, with `attach` false, detach. Answers the
/// revision to wait from.
pub fn request(
    etcd: &Etcd,
    prefix: &str,
    volume: &str,
    node: &str,
    plugin_node_id: &str,
    read_only: bool,
    attach: bool,
) -> Result<i64, etcd::Error> {
    let record = pb::Attachment {
        state: if attach {
            pb::attachment::State::REQUESTED
        } else {
            pb::attachment::State::DETACH_REQUESTED
        }
        .into(),
        plugin_node_id: plugin_node_id.to_string(),
        read_only,
        ..Default::default()
    };
    etcd.put(&attachment_key(prefix, volume, node), &encode(&record), 0)
}

/// What a node's wait for its attachment found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Attached(std::collections::HashMap<String, String>),
    Detached,
    Failed(String),
}

/// The outcome an attachment record holds, if the leader has answered.
fn outcome(a: &pb::Attachment) -> Option<Outcome> {
    match a.state.enum_value_or_default() {
        pb::attachment::State::ATTACHED => Some(Outcome::Attached(a.publish_context.clone())),
        pb::attachment::State::DETACHED => Some(Outcome::Detached),
        pb::attachment::State::FAILED => Some(Outcome::Failed(a.error.clone())),
        _ => None,
    }
}

/// Waits (with a watch from `from_revision`) until the leader answered
/// the intent of `volume` for `node`, or `timeout`.
pub fn wait(
    etcd: &Etcd,
    prefix: &str,
    volume: &str,
    node: &str,
    from_revision: i64,
    timeout: Duration,
) -> Result<Outcome, etcd::Error> {
    let key = attachment_key(prefix, volume, node);
    // Answered before the watch starts: nothing to wait for.
    if let Some(a) = etcd.get(&key)?.as_ref().and_then(decode) {
        if let Some(done) = outcome(&a) {
            return Ok(done);
        }
    }
    let watch = etcd.watch_prefix(&key, from_revision)?;
    answer_on(&watch, &key, from_revision, timeout)
}

/// Waits on `watch` for the leader's answer to the intent at `key` that
/// was written at `revision`, or `timeout`.
fn answer_on(
    watch: &Watch,
    key: &[u8],
    revision: i64,
    timeout: Duration,
) -> Result<Outcome, etcd::Error> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(etcd::Error::Timeout);
        }
        let batch = watch.next(left)?;
        for event in batch.events {
            if let Event::Put(kv) = event {
                if kv.key != key || kv.mod_revision < revision {
                    continue;
                }
                if let Some(done) = decode(&kv).as_ref().and_then(outcome) {
                    return Ok(done);
                }
            }
        }
    }
}

/// The leader's side: the volume and node of an attachment key.
fn volume_and_node<'a>(prefix: &str, key: &'a [u8]) -> Option<(&'a str, &'a str)> {
    let rest = key.strip_prefix(attachments_prefix(prefix).as_bytes())?;
    let rest = std::str::from_utf8(rest).ok()?;
    rest.split_once('/')
}

/// One intent the leader must serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub volume: String,
    pub node: String,
    pub plugin_node_id: String,
    pub read_only: bool,
    /// Attach (ControllerPublish), or detach (ControllerUnpublish).
    pub attach: bool,
    mod_revision: i64,
}

/// The intents waiting for a leader in `kvs` (a read or a watch's puts).
pub fn pending(prefix: &str, kvs: &[Kv]) -> Vec<Intent> {
    kvs.iter()
        .filter_map(|kv| {
            let (volume, node) = volume_and_node(prefix, &kv.key)?;
            let a = decode(kv)?;
            let attach = match a.state.enum_value_or_default() {
                pb::attachment::State::REQUESTED => true,
                pb::attachment::State::DETACH_REQUESTED => false,
                _ => return None,
            };
            Some(Intent {
                volume: volume.to_string(),
                node: node.to_string(),
                plugin_node_id: a.plugin_node_id,
                read_only: a.read_only,
                attach,
                mod_revision: kv.mod_revision,
            })
        })
        .collect()
}

/// Writes the leader's outcome for `intent`, unless the intent changed
/// since it was read (then the new one is served later): whether it was
/// written.
pub fn answer(
    etcd: &Etcd,
    prefix: &str,
    leader: &str,
    intent: &Intent,
    outcome: &Outcome,
    guard: &[Condition],
) -> Result<bool, etcd::Error> {
    let (state, publish_context, error) = match outcome {
        Outcome::Attached(context) => (
            pb::attachment::State::ATTACHED,
            context.clone(),
            String::new(),
        ),
        Outcome::Detached => (
            pb::attachment::State::DETACHED,
            Default::default(),
            String::new(),
        ),
        Outcome::Failed(error) => (
            pb::attachment::State::FAILED,
            Default::default(),
            error.clone(),
        ),
    };
    let record = pb::Attachment {
        state: state.into(),
        plugin_node_id: intent.plugin_node_id.clone(),
        read_only: intent.read_only,
        publish_context,
        error,
        served_by: leader.to_string(),
        ..Default::default()
    };
    Ok(etcd
        .put_guarded(
            &attachment_key(prefix, &intent.volume, &intent.node),
            intent.mod_revision,
            &encode(&record),
            0,
            guard,
        )?
        .is_some())
}

/// How long a node waits for the controller leader's answer before the
/// step is retried.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// A node's side of attachments: the ControllerPublish and Unpublish steps
/// of its claims, asked of the plugin's controller leader.
pub struct Attacher {
    etcd: std::sync::Arc<Etcd>,
    prefix: String,
    node: String,
}

impl Attacher {
    pub fn new(etcd: std::sync::Arc<Etcd>, prefix: &str, node: &str) -> Attacher {
        Attacher {
            etcd,
            prefix: prefix.to_string(),
            node: node.to_string(),
        }
    }

    /// Asks for `volume` to be attached to this node (the plugin knows it
    /// as `plugin_node_id`): the publish context, or why not.
    pub fn attach(
        &self,
        volume: &str,
        plugin_node_id: &str,
        read_only: bool,
    ) -> Result<std::collections::HashMap<String, String>, String> {
        match self.ask(volume, plugin_node_id, read_only, true)? {
            Outcome::Attached(context) => Ok(context),
            Outcome::Failed(error) => Err(format!("the controller leader failed: {error}")),
            Outcome::Detached => Err("the controller leader detached the volume instead".into()),
        }
    }

    /// Asks for `volume` to be detached from this node; once it is, the
    /// record goes.
    pub fn detach(&self, volume: &str, plugin_node_id: &str) -> Result<(), String> {
        match self.ask(volume, plugin_node_id, false, false)? {
            Outcome::Detached => {
                let key = attachment_key(&self.prefix, volume, &self.node);
                // A record left behind only costs a key: the next intent
                // replaces it.
                let _ = self.etcd.delete(&key);
                Ok(())
            }
            Outcome::Failed(error) => Err(format!("the controller leader failed: {error}")),
            Outcome::Attached(_) => Err("the controller leader attached the volume instead".into()),
        }
    }

    fn ask(
        &self,
        volume: &str,
        plugin_node_id: &str,
        read_only: bool,
        attach: bool,
    ) -> Result<Outcome, String> {
        let etcd_error = |err: etcd::Error| format!("etcd: {}", crate::error_chain(&err));
        // The watch is opened before the intent is written, from etcd's
        // next revision: a watch that starts in etcd's past is caught up
        // by its sync loop, every 100 ms, which a claim would wait for;
        // one in step with etcd gets the leader's answer at once.
        let key = attachment_key(&self.prefix, volume, &self.node);
        crate::trace::point("etcd-watch", "");
        let watch = self.etcd.watch_prefix(&key, 0).map_err(etcd_error)?;
        crate::trace::point("etcd-intent", "");
        let revision = request(
            &self.etcd,
            &self.prefix,
            volume,
            &self.node,
            plugin_node_id,
            read_only,
            attach,
        )
        .map_err(etcd_error)?;
        crate::trace::point("etcd-intent-written", "");
        let answer = answer_on(&watch, &key, revision, ANSWER_TIMEOUT);
        crate::trace::point("etcd-answered", "");
        match answer {
            Ok(outcome) => Ok(outcome),
            Err(etcd::Error::Timeout) => Err(format!(
                "no controller leader answered within {}s (is a healthy controller of the volume's plugin running on some agent?)",
                ANSWER_TIMEOUT.as_secs()
            )),
            Err(err) => Err(etcd_error(err)),
        }
    }
}
