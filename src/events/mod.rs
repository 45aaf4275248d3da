//! The agent's events: what happened, in the order the agent
//! made it durable, for `csi-agent events` and its `-follow`.
//!
//! The part of the agent that does a thing says so where it happens:
//! [`emit`] with a [`Topic`], a type (`HealthChanged`, `ClaimTaken`, ...),
//! the key of what it concerns (a plugin instance, a volume ID, a job's
//! alloc and task, a node) and a message. The same call is what fills the
//! recent-event lists of `plugin status` and `job status` (the registry
//! and the task runner record an event and emit it in one place), so an
//! event has one source.
//!
//! Emitted events wait in a process-wide outbox, like the metrics'
//! registry, so that no layer plumbs a handle. The main loop takes them at
//! each turn ([`take`]) and publishes them only once the state of that
//! turn is durable, in a [`Ring`]: an event never tells of a claim or a
//! volume the agent could still lose in a crash. The ring keeps the last
//! [`RING_SIZE`] events, each with an index (from 1, counted since the
//! agent started) and the time it happened.
//!
//! The outbox is bounded too: a process in which no loop takes the events
//! drops the oldest. (Under `cfg(test)` each thread has its own, so that
//! unit tests running side by side see their own events.)
//!
//! Messages are written for operators: IDs, names, states and reasons;
//! never a secret, a mount flag or a volume context value.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::SystemTime;

/// How many events the ring keeps: enough for a few minutes of a busy
/// agent (a claim is about five events), small enough to answer from
/// memory (an event is ~200 bytes: under a megabyte).
pub const RING_SIZE: usize = 4096;

/// What an event is about, as `-topic` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Topic {
    /// Plugin instances: health and fingerprint changes, notes.
    Plugin,
    /// Volumes: registered, created, expanded, snapshotted, deleted.
    Volume,
    /// Claims: taken, released, failed, and each protocol step.
    Claim,
    /// Jobs: their allocs' task events.
    Job,
    /// The cluster's nodes.
    Node,
}

impl Topic {
    pub const ALL: [Topic; 5] = [
        Topic::Plugin,
        Topic::Volume,
        Topic::Claim,
        Topic::Job,
        Topic::Node,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Plugin => "plugin",
            Topic::Volume => "volume",
            Topic::Claim => "claim",
            Topic::Job => "job",
            Topic::Node => "node",
        }
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Topic {
    type Err = String;

    fn from_str(s: &str) -> Result<Topic, String> {
        Topic::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Topic::ALL.iter().map(|t| t.as_str()).collect();
                format!("unknown topic {s:?} (one of {})", names.join(", "))
            })
    }
}

/// An event as its source tells it, before the loop publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Draft {
    pub time: SystemTime,
    pub topic: Topic,
    /// What happened, in CamelCase: `HealthChanged`, `ClaimTaken`, ...
    pub kind: String,
    /// What it concerns: `plugin/type` for a plugin instance, a volume
    /// ID, `job/alloc/task`, a node name.
    pub key: String,
    pub message: String,
}

/// A published event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// From 1, one more than the event before it.
    pub index: u64,
    pub time: SystemTime,
    pub topic: Topic,
    pub kind: String,
    pub key: String,
    pub message: String,
}

#[cfg(not(test))]
static OUTBOX: Mutex<VecDeque<Draft>> = Mutex::new(VecDeque::new());

// Unit tests run side by side in one process, each on its own thread: one
// outbox per thread keeps a test's events its own.
#[cfg(test)]
thread_local! {
    static OUTBOX: Mutex<VecDeque<Draft>> = const { Mutex::new(VecDeque::new()) };
}

fn with_outbox<T>(f: impl FnOnce(&mut VecDeque<Draft>) -> T) -> T {
    #[cfg(not(test))]
    {
        f(&mut OUTBOX.lock().unwrap_or_else(|e| e.into_inner()))
    }
    #[cfg(test)]
    {
        OUTBOX.with(|outbox| f(&mut outbox.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

/// Tells of something that happened now.
pub fn emit(
    topic: Topic,
    kind: impl Into<String>,
    key: impl Into<String>,
    message: impl Into<String>,
) {
    let draft = Draft {
        time: SystemTime::now(),
        topic,
        kind: kind.into(),
        key: key.into(),
        message: message.into(),
    };
    with_outbox(|outbox| {
        if outbox.len() == RING_SIZE {
            outbox.pop_front();
        }
        outbox.push_back(draft);
    });
}

/// The events emitted since the last call, oldest first.
pub fn take() -> Vec<Draft> {
    with_outbox(|outbox| outbox.drain(..).collect())
}

/// Which events a reader wants: those after `since`, of `topics` (all
/// when empty), at most `limit`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    pub since: u64,
    pub topics: Vec<Topic>,
    pub limit: usize,
}

impl Query {
    fn wants(&self, event: &Event) -> bool {
        event.index > self.since && (self.topics.is_empty() || self.topics.contains(&event.topic))
    }
}

/// An answer to a [`Query`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub events: Vec<Event>,
    /// The index of the last event published (of any topic): where the
    /// next query resumes when `events` is empty or the last of them is
    /// older.
    pub last_index: u64,
}

/// Why a query cannot be answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// Events after `since` have fallen out of the ring: the oldest kept
    /// is `oldest`.
    FellBehind { since: u64, oldest: u64 },
    /// `since` is past the last event: not this agent's index (it
    /// restarted since, and counts from 1 again).
    Ahead { since: u64, last: u64 },
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::FellBehind { since, oldest } => write!(
                f,
                "the events after index {since} are gone: the agent keeps the last {RING_SIZE}, from index {oldest} on ({} were missed)",
                oldest - since - 1
            ),
            QueryError::Ahead { since, last } => write!(
                f,
                "index {since} is past the agent's last event ({last}); indexes count from 1 each time the agent starts"
            ),
        }
    }
}

/// The last [`RING_SIZE`] published events.
#[derive(Debug)]
pub struct Ring {
    events: VecDeque<Event>,
    capacity: usize,
    last_index: u64,
}

impl Default for Ring {
    fn default() -> Ring {
        Ring::new(RING_SIZE)
    }
}

impl Ring {
    pub fn new(capacity: usize) -> Ring {
        Ring {
            events: VecDeque::with_capacity(capacity.min(RING_SIZE)),
            capacity: capacity.max(1),
            last_index: 0,
        }
    }

    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// Publishes `drafts` in their order, each with the next index.
    pub fn publish(&mut self, drafts: Vec<Draft>) {
        for d in drafts {
            self.last_index += 1;
            if self.events.len() == self.capacity {
                self.events.pop_front();
            }
            self.events.push_back(Event {
                index: self.last_index,
                time: d.time,
                topic: d.topic,
                kind: d.kind,
                key: d.key,
                message: d.message,
            });
        }
    }

    /// The events `query` wants, oldest first.
    pub fn query(&self, query: &Query) -> Result<Page, QueryError> {
        if query.since > self.last_index {
            return Err(QueryError::Ahead {
                since: query.since,
                last: self.last_index,
            });
        }
        let oldest = self.events.front().map_or(self.last_index + 1, |e| e.index);
        // `since` 0 asks for whatever is kept; a later one for everything
        // after it, which must all still be here.
        if query.since > 0 && query.since + 1 < oldest {
            return Err(QueryError::FellBehind {
                since: query.since,
                oldest,
            });
        }
        // The ring is in index order: skip what is not after `since`.
        let skip = (query.since + 1).saturating_sub(oldest) as usize;
        let limit = if query.limit == 0 {
            usize::MAX
        } else {
            query.limit
        };
        let events = self
            .events
            .iter()
            .skip(skip)
            .filter(|e| query.wants(e))
            .take(limit)
            .cloned()
            .collect();
        Ok(Page {
            events,
            last_index: self.last_index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(topic: Topic, key: &str) -> Draft {
        Draft {
            time: SystemTime::UNIX_EPOCH,
            topic,
            kind: "Test".to_string(),
            key: key.to_string(),
            message: String::new(),
        }
    }

    fn keys(page: &Page) -> Vec<(u64, &str)> {
        page.events
            .iter()
            .map(|e| (e.index, e.key.as_str()))
            .collect()
    }

    fn query(since: u64) -> Query {
        Query {
            since,
            ..Query::default()
        }
    }

    #[test]
    fn events_get_consecutive_indexes_from_one() {
        let mut ring = Ring::new(8);
        ring.publish(vec![draft(Topic::Claim, "a"), draft(Topic::Volume, "b")]);
        ring.publish(vec![draft(Topic::Job, "c")]);
        let page = ring.query(&query(0)).unwrap();
        assert_eq!(keys(&page), [(1, "a"), (2, "b"), (3, "c")]);
        assert_eq!(page.last_index, 3);
    }

    #[test]
    fn a_query_resumes_after_its_index_and_filters_by_topic() {
        let mut ring = Ring::new(8);
        ring.publish(vec![
            draft(Topic::Claim, "a"),
            draft(Topic::Volume, "b"),
            draft(Topic::Claim, "c"),
            draft(Topic::Plugin, "d"),
        ]);
        let page = ring.query(&query(1)).unwrap();
        assert_eq!(keys(&page), [(2, "b"), (3, "c"), (4, "d")]);
        let claims = Query {
            since: 1,
            topics: vec![Topic::Claim, Topic::Plugin],
            limit: 0,
        };
        assert_eq!(keys(&ring.query(&claims).unwrap()), [(3, "c"), (4, "d")]);
        let one = Query { limit: 1, ..claims };
        assert_eq!(keys(&ring.query(&one).unwrap()), [(3, "c")]);
    }

    #[test]
    fn the_ring_keeps_the_last_events_and_says_when_a_reader_fell_behind() {
        let mut ring = Ring::new(3);
        for key in ["a", "b", "c", "d", "e"] {
            ring.publish(vec![draft(Topic::Claim, key)]);
        }
        assert_eq!(
            keys(&ring.query(&query(0)).unwrap()),
            [(3, "c"), (4, "d"), (5, "e")]
        );
        // After 2, everything is still there; after 1, event 2 is gone.
        assert_eq!(
            keys(&ring.query(&query(2)).unwrap()),
            [(3, "c"), (4, "d"), (5, "e")]
        );
        let err = ring.query(&query(1)).unwrap_err();
        assert_eq!(
            err,
            QueryError::FellBehind {
                since: 1,
                oldest: 3
            }
        );
        assert!(err.to_string().contains("1 were missed"), "{err}");
    }

    #[test]
    fn a_query_at_the_last_index_is_empty_and_one_past_it_is_refused() {
        let mut ring = Ring::new(3);
        assert_eq!(ring.query(&query(0)).unwrap(), Page::default());
        ring.publish(vec![draft(Topic::Node, "n")]);
        let page = ring.query(&query(1)).unwrap();
        assert!(page.events.is_empty());
        assert_eq!(page.last_index, 1);
        assert_eq!(
            ring.query(&query(5)).unwrap_err(),
            QueryError::Ahead { since: 5, last: 1 }
        );
    }

    #[test]
    fn topics_parse_by_name_and_refuse_others() {
        for topic in Topic::ALL {
            assert_eq!(topic.as_str().parse::<Topic>(), Ok(topic));
        }
        let err = "claims".parse::<Topic>().unwrap_err();
        assert!(err.contains("plugin, volume, claim, job, node"), "{err}");
    }

    #[test]
    fn emitted_events_wait_in_the_outbox_until_taken() {
        emit(Topic::Volume, "Test", "v1", "made");
        emit(Topic::Claim, "Test", "v1", "claimed");
        let taken = take();
        let messages: Vec<_> = taken.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(messages, ["made", "claimed"]);
        assert!(take().is_empty());
    }
}
