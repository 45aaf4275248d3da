//! A call's answer, in the domain's terms: how a call fails
//! ([`CallError`], [`ErrorKind`]) and where its answer goes
//! ([`ReplyTo`]).
//!
//! The volume and task managers answer requests with their own types;
//! they neither know nor care whether the caller is a control API call
//! (`api/` maps the answer to its protobuf and the error kind to a gRPC
//! code) or the agent itself (a task claiming its volumes reads the answer
//! from a channel).

use std::fmt;

use crossbeam_channel::Sender;

/// What kind of failure a [`CallError`] is. The control API maps each to
/// a gRPC code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    InvalidArgument,
    /// The request is valid but the state does not allow it now.
    FailedPrecondition,
    /// Not now, maybe later: the agent is shutting down.
    Unavailable,
    /// A claim kept failing with retryable errors until its deadline.
    DeadlineExceeded,
    /// The operation failed for good and was undone (a claim whose step
    /// failed terminally).
    Aborted,
    /// Asked for what is past the end of what is kept (events that have
    /// fallen out of the agent's ring).
    OutOfRange,
    Internal,
}

/// A failed call, as the agent explains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallError {
    pub kind: ErrorKind,
    pub message: String,
}

impl CallError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> CallError {
        CallError {
            kind,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> CallError {
        CallError::new(ErrorKind::NotFound, message)
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CallError {}

/// The answer to a call whose success is a `T`.
pub type Answer<T> = Result<T, CallError>;

/// Where the answer to a call goes: a function that delivers it (the
/// control API call's gRPC sink, so that whichever thread answers, the
/// main loop or a worker, sends it on the wire at once, with no thread of
/// its own waiting for it), or a channel, for the agent's own calls (a
/// task's claims).
pub struct ReplyTo<T: 'static>(Target<T>);

/// Delivers an answer, or `None` when the [`ReplyTo`] is dropped
/// unanswered.
type Deliver<T> = Box<dyn FnOnce(Option<Answer<T>>) + Send>;

enum Target<T> {
    Channel(Sender<Answer<T>>),
    /// `None` once answered.
    Sink(Option<Deliver<T>>),
}

impl<T: 'static> ReplyTo<T> {
    /// An answer that `send` passes to `deliver`. Dropped unanswered (the
    /// agent stopping), it delivers `Unavailable`.
    pub fn sink(deliver: impl FnOnce(Answer<T>) + Send + 'static) -> ReplyTo<T> {
        ReplyTo(Target::Sink(Some(Box::new(move |answer| {
            deliver(answer.unwrap_or_else(|| {
                Err(CallError::new(
                    ErrorKind::Unavailable,
                    "the agent is shutting down",
                ))
            }))
        }))))
    }

    /// Sends the answer. The caller may have given up on it: that is not
    /// the answering side's problem, so nothing is returned.
    pub fn send(mut self, answer: Answer<T>) {
        match &mut self.0 {
            Target::Channel(sender) => {
                let _ = sender.send(answer);
            }
            Target::Sink(deliver) => {
                if let Some(deliver) = deliver.take() {
                    deliver(Some(answer));
                }
            }
        }
    }

    /// A `ReplyTo` for an answer of another type, turned into a `T` by
    /// `f` on its way here. Dropped unanswered, it drops this one, so the
    /// caller sees what it would have seen of this one.
    pub fn map<U: 'static>(self, f: impl FnOnce(U) -> T + Send + 'static) -> ReplyTo<U>
    where
        T: Send,
    {
        ReplyTo(Target::Sink(Some(Box::new(
            move |answer: Option<Answer<U>>| {
                if let Some(answer) = answer {
                    self.send(answer.map(f));
                }
            },
        ))))
    }
}

/// An answer bound to where it goes, of whichever type: held until the
/// state it reports is durable, then sent.
pub struct Reply(Box<dyn FnOnce() + Send>);

impl Reply {
    pub fn new<T: Send + 'static>(to: ReplyTo<T>, answer: Answer<T>) -> Reply {
        Reply(Box::new(move || to.send(answer)))
    }

    pub fn send(self) {
        (self.0)()
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Reply")
    }
}

impl<T> From<Sender<Answer<T>>> for ReplyTo<T> {
    fn from(sender: Sender<Answer<T>>) -> ReplyTo<T> {
        ReplyTo(Target::Channel(sender))
    }
}

impl<T> Drop for ReplyTo<T> {
    fn drop(&mut self) {
        // A channel's receiver sees the disconnection instead.
        if let Target::Sink(deliver) = &mut self.0 {
            if let Some(deliver) = deliver.take() {
                deliver(None);
            }
        }
    }
}

impl<T> fmt::Debug for ReplyTo<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Target::Channel(_) => f.write_str("ReplyTo(channel)"),
            Target::Sink(Some(_)) => f.write_str("ReplyTo(sink)"),
            Target::Sink(None) => f.write_str("ReplyTo(answered)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{unbounded, TryRecvError};

    #[test]
    fn a_sink_dropped_unanswered_tells_its_caller_the_agent_is_stopping() {
        let (tx, rx) = unbounded();
        drop(ReplyTo::<u32>::sink(move |answer| tx.send(answer).unwrap()));
        let err = rx.try_recv().unwrap().unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unavailable);
    }

    #[test]
    fn a_mapped_reply_delivers_through_the_function() {
        let (tx, rx) = unbounded::<Answer<String>>();
        let reply: ReplyTo<u32> = ReplyTo::from(tx).map(|n: u32| format!("n={n}"));
        reply.send(Ok(7));
        assert_eq!(rx.try_recv().unwrap().unwrap(), "n=7");
    }

    #[test]
    fn a_mapped_reply_dropped_unanswered_drops_the_one_beneath() {
        let (tx, rx) = unbounded::<Answer<String>>();
        let reply: ReplyTo<u32> = ReplyTo::from(tx).map(|n: u32| n.to_string());
        drop(reply);
        // The channel's receiver sees the disconnection, as it would have
        // without the map.
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));

        let (tx, rx) = unbounded();
        let sink = ReplyTo::<String>::sink(move |answer| tx.send(answer).unwrap());
        drop(sink.map(|n: u32| n.to_string()));
        assert_eq!(
            rx.try_recv().unwrap().unwrap_err().kind,
            ErrorKind::Unavailable
        );
    }
}
