//! Watches: every change under a prefix from a revision on, in revision
//! order with nothing missed, on a channel fed by a thread of the watch's
//! own, so that its reader waits with a timeout or in a `select!` like on
//! any channel.

use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use futures_util::{SinkExt, StreamExt};
use grpcio::{CallOption, RpcStatusCode, WriteFlags};

use super::{prefix_end, reason, Error, Etcd, Event, Kv};
use crate::grpc::block_on;
use crate::proto::etcd as pb;

impl Etcd {
    /// Watches every key starting with `prefix` from `start_revision`
    /// (inclusive; 0: from now).
    pub fn watch_prefix(&self, prefix: &[u8], start_revision: i64) -> Result<Watch, Error> {
        let create = pb::WatchRequest {
            request_union: Some(pb::watch_request::Request_union::CreateRequest(
                pb::WatchCreateRequest {
                    key: prefix.to_vec(),
                    range_end: prefix_end(prefix),
                    start_revision,
                    progress_notify: true,
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        // A watch lives on: no deadline, only the member's own end.
        let (sink, answers) = self.call("Watch", |m, _| {
            let (mut sink, mut answers) = m.watch.watch_opt(CallOption::default())?;
            block_on(sink.send((create.clone(), WriteFlags::default())))?;
            // The first answer confirms the watch (or says why not).
            match block_on(answers.next()) {
                Some(Ok(first)) if first.created && !first.canceled => Ok((sink, answers)),
                Some(Ok(first)) => Err(grpcio::Error::RpcFailure(grpcio::RpcStatus::with_message(
                    RpcStatusCode::FAILED_PRECONDITION,
                    format!(
                        "watch not created: {} (compacted before {})",
                        first.cancel_reason, first.compact_revision
                    ),
                ))),
                Some(Err(err)) => Err(err),
                None => Err(grpcio::Error::RemoteStopped),
            }
        })?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let spawned = thread::Builder::new()
            .name("etcd-watch".into())
            .spawn(move || {
                let mut answers = answers;
                loop {
                    let item = match block_on(answers.next()) {
                        None => Err(Error::WatchEnded {
                            reason: "the stream ended".into(),
                            compact_revision: 0,
                        }),
                        Some(Err(err)) => Err(Error::WatchEnded {
                            reason: reason(&err),
                            compact_revision: 0,
                        }),
                        Some(Ok(resp)) if resp.canceled || resp.compact_revision > 0 => {
                            Err(Error::WatchEnded {
                                reason: if resp.cancel_reason.is_empty() {
                                    "canceled by etcd".into()
                                } else {
                                    resp.cancel_reason
                                },
                                compact_revision: resp.compact_revision,
                            })
                        }
                        Some(Ok(resp)) => Ok(batch(resp)),
                    };
                    let end = item.is_err();
                    if tx.send(item).is_err() || end {
                        return;
                    }
                }
            });
        if let Err(err) = spawned {
            return Err(Error::WatchEnded {
                reason: format!("cannot start its thread: {err}"),
                compact_revision: 0,
            });
        }
        Ok(Watch { events: rx, sink })
    }
}

/// The events of one watch answer, and the revision it reached.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub events: Vec<Event>,
    /// Every change up to this revision has been reported.
    pub revision: i64,
}

impl Batch {
    /// The keys the batch put, as they are now.
    pub fn puts(self) -> Vec<Kv> {
        self.events
            .into_iter()
            .filter_map(|e| match e {
                Event::Put(kv) => Some(kv),
                Event::Delete { .. } => None,
            })
            .collect()
    }
}

fn batch(resp: pb::WatchResponse) -> Batch {
    let revision = resp.header.as_ref().map_or(0, |h| h.revision);
    let events = resp
        .events
        .into_iter()
        .filter_map(|e| {
            let kv = e.kv.into_option()?;
            Some(match e.type_.enum_value_or_default() {
                pb::event::EventType::PUT => Event::Put(Kv::from(kv)),
                pb::event::EventType::DELETE => Event::Delete {
                    key: kv.key,
                    revision: kv.mod_revision,
                },
            })
        })
        .collect();
    Batch { events, revision }
}

/// A watch: its batches of events, in revision order, with nothing
/// missed, until it ends with an error (then read the state again and
/// watch from the revision read).
pub struct Watch {
    events: Receiver<Result<Batch, Error>>,
    sink: grpcio::ClientDuplexSender<pb::WatchRequest>,
}

impl Watch {
    /// The next batch (progress notifications come as empty batches).
    pub fn next(&self, timeout: Duration) -> Result<Batch, Error> {
        match self.events.recv_timeout(timeout) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => Err(Error::Timeout),
            Err(RecvTimeoutError::Disconnected) => Err(Error::WatchEnded {
                reason: "its thread ended".into(),
                compact_revision: 0,
            }),
        }
    }

    /// The receiver itself, for a `select!` with other channels.
    pub fn receiver(&self) -> &Receiver<Result<Batch, Error>> {
        &self.events
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // Ends the call, and with it the thread reading it.
        self.sink.cancel();
    }
}
