//! The controller election of a plugin: of the agents that run the
//! plugin's controller, only the one holding `<prefix>/controllers/<plugin>`
//! makes controller RPCs for the cluster (at most one leader per plugin).
//! The key is attached to the leader's node lease: when the leader's node
//! is lost, etcd deletes the key and another candidate takes it.

use super::etcd::{self, Etcd, Event};

/// Who holds a plugin's controller election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// This candidate leads.
    Leader,
    /// Another node leads.
    Follower { leader: String },
}

/// The election key of `plugin`.
pub fn election_key(prefix: &str, plugin: &str) -> Vec<u8> {
    format!("{}/controllers/{plugin}", prefix.trim_end_matches('/')).into_bytes()
}

/// Tries to take the election of `plugin` for `candidate` (a node name),
/// attached to `lease` (the node's lease): atomically, only if nobody
/// holds it. A candidate that already leads stays the leader.
pub fn campaign(
    etcd: &Etcd,
    prefix: &str,
    plugin: &str,
    candidate: &str,
    lease: i64,
) -> Result<Leadership, etcd::Error> {
    let key = election_key(prefix, plugin);
    if etcd.put_if(&key, 0, candidate.as_bytes(), lease)?.is_some() {
        return Ok(Leadership::Leader);
    }
    match etcd.get(&key)? {
        Some(kv) if kv.value == candidate.as_bytes() => Ok(Leadership::Leader),
        Some(kv) => Ok(Leadership::Follower {
            leader: String::from_utf8_lossy(&kv.value).into_owned(),
        }),
        // The leader left between the two calls: try again.
        None => campaign(etcd, prefix, plugin, candidate, lease),
    }
}

/// The node that leads `plugin`'s controller, if any.
pub fn leader(etcd: &Etcd, prefix: &str, plugin: &str) -> Result<Option<String>, etcd::Error> {
    Ok(etcd
        .get(&election_key(prefix, plugin))?
        .map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
}

/// Whether a watch batch of the election key says the leader left.
pub fn leader_left(events: &[Event]) -> bool {
    events.iter().any(|e| matches!(e, Event::Delete { .. }))
}
