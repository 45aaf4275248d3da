//! The sessions that only read (`session.rs` has the others): `alloc
//! status`'s resource usage (`AllocStats`: two samples of each task's
//! counters, `task::alloc_stats`) and `alloc fs -f` (`AllocFsFollow`: a
//! file's bytes, then what is appended to it). Each runs on an
//! `api-session` thread of its own, counted in `MAX_SESSIONS`.
//!
//! A follow reads at most `MAX_FS_READ` bytes per message; it looks for
//! new bytes every [`FOLLOW_POLL`], sends an empty message after
//! [`FOLLOW_HEARTBEAT`] without any (so that a caller gone is noticed),
//! and ends once the alloc is done and the file read to its end, or when
//! the caller goes away.

use std::thread;
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use grpcio::{RpcContext, ServerStreamingSink, UnarySink};

use super::outbound::Outbound;
use super::session::{other_response, Sessions};
use super::{wire, wire_session, CallError, ErrorKind, Request, Response};
use crate::proto::agent as pb;
use crate::task::alloc_fs::{self, FsRequest};
use crate::task::exec_target::{SessionLookup, SessionTarget};

/// How often `alloc fs -f` looks for new bytes.
pub const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// How long `alloc fs -f` goes without sending before an empty message.
pub const FOLLOW_HEARTBEAT: Duration = Duration::from_secs(5);

impl Sessions {
    pub(super) fn stats(
        &self,
        ctx: &RpcContext,
        req: pb::AllocStatsRequest,
        sink: UnarySink<pb::AllocStatsResponse>,
    ) {
        crate::trace::point("api-call", "AllocStats");
        self.unary(ctx, sink, "alloc stats", move |sessions| {
            let lookup = SessionLookup::Stats {
                alloc_id: req.alloc_id.clone(),
            };
            match sessions.ask(Request::Session(lookup))? {
                Response::Session(SessionTarget::Stats(target)) => {
                    let usage = crate::task::alloc_stats::sample(&target);
                    Ok(wire_session::stats(&target.alloc_id, usage))
                }
                _ => Err(other_response()),
            }
        });
    }

    pub(super) fn fs_follow(
        &self,
        ctx: &RpcContext,
        req: pb::AllocFsRequest,
        sink: ServerStreamingSink<pb::AllocFsResponse>,
    ) {
        crate::trace::point("api-call", "AllocFsFollow");
        let sessions = self.clone();
        let started = self.start(sink, move |admitted, sink| {
            let mut sink = Outbound::new(sink);
            let followed = sessions.follow(&req, &mut sink);
            // Freed before the stream's end goes out, as a unary
            // session's place is before its answer (`Sessions::unary`).
            drop(admitted);
            match followed {
                Ok(()) => sink.close(),
                Err(Some(err)) => sink.fail(wire::status(&err)),
                // The caller went away.
                Err(None) => {}
            }
        });
        if let Err((sink, err)) = started {
            ctx.spawn(sink.fail(wire::status(&err)).map(drop));
        }
    }

    /// Sends the file's bytes from `req.offset` as they come, until the
    /// alloc is done and they are all sent; `Err(None)` when the caller
    /// went away.
    fn follow(
        &self,
        req: &pb::AllocFsRequest,
        sink: &mut FollowSink,
    ) -> Result<(), Option<CallError>> {
        let root = match self.ask(Request::Session(SessionLookup::Fs {
            alloc_id: req.alloc_id.clone(),
        }))? {
            Response::Session(SessionTarget::Fs(root)) => root,
            _ => return Err(Some(other_response())),
        };
        // The alloc dir is named by the full ID.
        let alloc_id = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut offset = req.offset;
        let mut sent = Instant::now();
        loop {
            let done = match self.ask(Request::Session(SessionLookup::Done {
                alloc_id: alloc_id.clone(),
            }))? {
                Response::Session(SessionTarget::Done(done)) => done,
                _ => return Err(Some(other_response())),
            };
            let fs_req = FsRequest {
                path: req.path.clone(),
                stat: false,
                offset,
            };
            let answer = alloc_fs::read(&root, &fs_req)?;
            if answer.entry.is_dir {
                return Err(Some(CallError::new(
                    ErrorKind::InvalidArgument,
                    format!("{:?} is a dir: alloc fs -f follows a file", req.path),
                )));
            }
            if answer.entry.size < offset {
                // Truncated: from its start again, as tail -f does.
                offset = 0;
                continue;
            }
            if !answer.data.is_empty() {
                offset += answer.data.len() as u64;
                send(sink, wire_session::fs_answer(answer))?;
                sent = Instant::now();
                continue;
            }
            if done {
                return Ok(());
            }
            if sent.elapsed() >= FOLLOW_HEARTBEAT {
                send(sink, pb::AllocFsResponse::default())?;
                sent = Instant::now();
            }
            thread::sleep(FOLLOW_POLL);
        }
    }
}

/// An `alloc fs -f` call's output side.
type FollowSink = Outbound<ServerStreamingSink<pb::AllocFsResponse>>;

/// Sends `msg`: `Err(None)` if the caller is gone.
fn send(sink: &mut FollowSink, msg: pb::AllocFsResponse) -> Result<(), Option<CallError>> {
    sink.send(msg).then_some(()).ok_or(None)
}
