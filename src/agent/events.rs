//! The agent's event stream: the ring of published events and the
//! `Events` calls waiting on it.
//!
//! Events are emitted where things happen (`crate::events`); the loop
//! takes them each turn and holds them with the turn's other effects
//! until its state is durable (`persist.rs`), then publishes them here. An
//! `Events` call with a wait and nothing to read yet is parked (a long
//! poll, as Nomad's blocking queries): answered by the next publish it
//! wants, or empty at its deadline. A parked call holds only its reply; a
//! reader that is slow between calls falls behind the ring and hears so
//! on its next call, so no reader ever holds the loop.

use std::time::Instant;

use crate::api::{EventsRequest, ReplyTo, Response};
use crate::call::{CallError, ErrorKind};
use crate::events::{Draft, Query, QueryError, Ring};

/// How many `Events` calls may wait at once; the next is answered at
/// once, empty (its reader asks again).
const MAX_WAITING: usize = 64;

/// An `Events` call waiting for an event.
struct Waiting {
    query: Query,
    reply: ReplyTo,
    deadline: Instant,
}

#[derive(Default)]
pub(super) struct EventLog {
    ring: Ring,
    waiting: Vec<Waiting>,
}

impl EventLog {
    /// Answers an `Events` call now, or parks it until an event it wants
    /// is published or its wait is over.
    pub(super) fn read(&mut self, req: EventsRequest, reply: ReplyTo, now: Instant) {
        match self.ring.query(&req.query) {
            Ok(page) if page.events.is_empty() && !req.wait.is_zero() => {
                if self.waiting.len() == MAX_WAITING {
                    return reply.send(Ok(Response::Events(page)));
                }
                self.waiting.push(Waiting {
                    query: req.query,
                    reply,
                    deadline: now + req.wait.min(crate::api::EVENTS_MAX_WAIT),
                });
            }
            Ok(page) => reply.send(Ok(Response::Events(page))),
            Err(err) => reply.send(Err(refusal(&err))),
        }
    }

    /// Publishes a durable turn's events and answers the calls waiting for
    /// any of them.
    pub(super) fn publish(&mut self, drafts: Vec<Draft>) {
        if drafts.is_empty() {
            return;
        }
        self.ring.publish(drafts);
        let ring = &self.ring;
        let mut still = Vec::with_capacity(self.waiting.len());
        for w in self.waiting.drain(..) {
            match ring.query(&w.query) {
                Ok(page) if page.events.is_empty() => still.push(w),
                Ok(page) => w.reply.send(Ok(Response::Events(page))),
                Err(err) => w.reply.send(Err(refusal(&err))),
            }
        }
        self.waiting = still;
    }

    /// Answers the calls whose wait is over: nothing new (yet).
    pub(super) fn expire(&mut self, now: Instant) {
        let last_index = self.ring.last_index();
        let (over, still): (Vec<_>, Vec<_>) =
            self.waiting.drain(..).partition(|w| w.deadline <= now);
        self.waiting = still;
        for w in over {
            let page = crate::events::Page {
                events: Vec::new(),
                last_index,
            };
            w.reply.send(Ok(Response::Events(page)));
        }
    }

    /// Answers every waiting call that the agent is stopping.
    pub(super) fn close(&mut self) {
        for w in self.waiting.drain(..) {
            w.reply.send(Err(CallError::new(
                ErrorKind::Unavailable,
                "the agent is shutting down",
            )));
        }
    }

    /// When the first waiting call's wait is over.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.deadline).min()
    }
}

fn refusal(err: &QueryError) -> CallError {
    let kind = match err {
        QueryError::FellBehind { .. } => ErrorKind::OutOfRange,
        QueryError::Ahead { .. } => ErrorKind::InvalidArgument,
    };
    CallError::new(kind, err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Topic;
    use crossbeam_channel::{bounded, Receiver};
    use std::time::{Duration, SystemTime};

    fn draft(topic: Topic, key: &str) -> Draft {
        Draft {
            time: SystemTime::now(),
            topic,
            kind: "Test".into(),
            key: key.into(),
            message: String::new(),
        }
    }

    fn call(
        log: &mut EventLog,
        since: u64,
        topics: Vec<Topic>,
        wait: Duration,
        now: Instant,
    ) -> Receiver<Result<Response, CallError>> {
        let (tx, rx) = bounded(1);
        let req = EventsRequest {
            query: Query {
                since,
                topics,
                limit: 0,
            },
            wait,
        };
        log.read(req, ReplyTo::from(tx), now);
        rx
    }

    fn keys(answer: Result<Response, CallError>) -> Vec<String> {
        match answer {
            Ok(Response::Events(page)) => page.events.into_iter().map(|e| e.key).collect(),
            other => panic!("not events: {other:?}"),
        }
    }

    #[test]
    fn a_call_with_nothing_to_read_waits_for_an_event_it_wants() {
        let mut log = EventLog::default();
        let now = Instant::now();
        let rx = call(&mut log, 0, vec![Topic::Claim], Duration::from_secs(5), now);
        assert!(rx.try_recv().is_err(), "answered before any event");
        log.publish(vec![draft(Topic::Plugin, "p")]);
        assert!(rx.try_recv().is_err(), "answered for another topic");
        log.publish(vec![draft(Topic::Claim, "v1")]);
        assert_eq!(keys(rx.try_recv().unwrap()), ["v1"]);
        assert_eq!(log.next_deadline(), None);
    }

    #[test]
    fn a_waiting_call_is_answered_empty_at_its_deadline() {
        let mut log = EventLog::default();
        let now = Instant::now();
        let rx = call(&mut log, 0, vec![], Duration::from_secs(5), now);
        assert_eq!(log.next_deadline(), Some(now + Duration::from_secs(5)));
        log.expire(now + Duration::from_secs(4));
        assert!(rx.try_recv().is_err());
        log.expire(now + Duration::from_secs(5));
        assert!(keys(rx.try_recv().unwrap()).is_empty());
    }

    #[test]
    fn a_call_without_a_wait_or_with_events_is_answered_at_once() {
        let mut log = EventLog::default();
        let now = Instant::now();
        assert!(keys(
            call(&mut log, 0, vec![], Duration::ZERO, now)
                .try_recv()
                .unwrap()
        )
        .is_empty());
        log.publish(vec![draft(Topic::Job, "j/a/t")]);
        let rx = call(&mut log, 0, vec![], Duration::from_secs(5), now);
        assert_eq!(keys(rx.try_recv().unwrap()), ["j/a/t"]);
    }

    #[test]
    fn a_reader_that_fell_behind_the_ring_is_told_so() {
        let mut log = EventLog {
            ring: Ring::new(2),
            waiting: Vec::new(),
        };
        log.publish(
            (0..5)
                .map(|i| draft(Topic::Claim, &i.to_string()))
                .collect(),
        );
        let answer = call(&mut log, 1, vec![], Duration::ZERO, Instant::now())
            .try_recv()
            .unwrap();
        let err = answer.unwrap_err();
        assert_eq!(err.kind, ErrorKind::OutOfRange);
        assert!(err.message.contains("from index 4 on"), "{}", err.message);
    }

    #[test]
    fn past_the_bound_a_call_is_answered_empty_instead_of_waiting() {
        let mut log = EventLog::default();
        let now = Instant::now();
        let waiting: Vec<_> = (0..MAX_WAITING)
            .map(|_| call(&mut log, 0, vec![], Duration::from_secs(5), now))
            .collect();
        let extra = call(&mut log, 0, vec![], Duration::from_secs(5), now);
        assert!(keys(extra.try_recv().unwrap()).is_empty());
        assert!(waiting.iter().all(|rx| rx.try_recv().is_err()));
    }
}
