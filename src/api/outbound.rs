//! A streaming call's sink, which is left alone once a send has failed.
//!
//! grpcio's server sinks (`DuplexSink`, `ServerStreamingSink`) must not be
//! polled again after a send fails. A send first polls the call's end,
//! and a failed write leaves its batch behind. Both are futures that
//! resolve once, and grpcio panics when either is polled again ("Resolved
//! future is not supposed to be polled again"). A caller that goes away
//! mid-session used to make a session thread send its last words (an
//! error line, then the exit code) into such a sink, and the thread
//! panicked.
//!
//! [`Outbound`] remembers the first failed send. After it, every later
//! send, close or fail is refused without touching the sink, so whatever
//! order a session's exits take, the sink is never polled after a failure.
//! A sink dropped unclosed cancels its call, which is what a caller who
//! went away gets.

use futures_util::SinkExt as _;
use grpcio::{DuplexSink, RpcStatus, ServerStreamingSink, WriteFlags};

use crate::grpc::block_on;

/// A streaming call's sink, and whether its caller is gone.
pub(super) struct Outbound<S> {
    sink: S,
    gone: bool,
}

impl<S> Outbound<S> {
    pub(super) fn new(sink: S) -> Self {
        Outbound { sink, gone: false }
    }

    /// Sends `msg`: false if the caller is gone, now or before.
    pub(super) fn send<T>(&mut self, msg: T) -> bool
    where
        S: futures_util::Sink<(T, WriteFlags), Error = grpcio::Error> + Unpin,
    {
        if self.gone {
            return false;
        }
        let sent = block_on(self.sink.send((msg, WriteFlags::default())));
        self.gone = sent.is_err();
        !self.gone
    }

    /// Ends the call with OK, unless its caller is gone.
    pub(super) fn close<T>(mut self)
    where
        S: futures_util::Sink<(T, WriteFlags), Error = grpcio::Error> + Unpin,
    {
        if !self.gone {
            let _ = block_on(self.sink.close());
        }
    }
}

impl<T> Outbound<DuplexSink<T>> {
    /// Ends the call with `status`, unless its caller is gone.
    pub(super) fn fail(self, status: RpcStatus) {
        if !self.gone {
            let _ = block_on(self.sink.fail(status));
        }
    }
}

impl<T> Outbound<ServerStreamingSink<T>> {
    /// Ends the call with `status`, unless its caller is gone.
    pub(super) fn fail(self, status: RpcStatus) {
        if !self.gone {
            let _ = block_on(self.sink.fail(status));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::thread::{self, JoinHandle};
    use std::time::Duration;

    use crossbeam_channel::{bounded, Sender};
    use futures_util::{SinkExt as _, StreamExt as _};
    use grpcio::{CallOption, ChannelBuilder, Client, Method, MethodType, ServiceBuilder};

    use super::*;
    use crate::grpc::grpc_environment;
    use crate::grpc::testing::serve_unix;
    use crate::grpc::BYTES;

    const ECHO: Method<Vec<u8>, Vec<u8>> = Method {
        ty: MethodType::Duplex,
        name: "/outbound.Test/Echo",
        req_mar: BYTES,
        resp_mar: BYTES,
    };

    /// The most sends a session makes before its caller's cancel reaches
    /// it: far more than a cancel takes, and a bound if it never does.
    const SENDS: usize = 100_000;

    /// What the session saw: how many sends went through before one
    /// failed, and what the sends and the close after it did.
    #[derive(Debug, PartialEq)]
    struct Seen {
        failed_after: Option<usize>,
        later_sends: [bool; 2],
    }

    /// Serves ECHO on `socket`: each call's session runs on a thread of its
    /// own, as the agent's do, whose handle goes to `sessions`.
    fn serve(socket: &std::path::Path, sessions: Sender<JoinHandle<Seen>>) -> grpcio::Server {
        let service = ServiceBuilder::new()
            .add_duplex_streaming_handler(&ECHO, move |_ctx, mut stream, sink| {
                let session = thread::spawn(move || {
                    let mut out = Outbound::new(sink);
                    // The caller's first message, then sends until the
                    // caller's cancel makes one fail.
                    let _ = block_on(stream.next());
                    let failed_after = (0..SENDS).find(|_| !out.send(vec![7u8; 64]));
                    // A session's exits send their last words and close:
                    // after a failure, none of it touches the sink.
                    let later_sends = [out.send(b"error".to_vec()), out.send(b"exit".to_vec())];
                    out.close();
                    Seen {
                        failed_after,
                        later_sends,
                    }
                });
                let _ = sessions.send(session);
            })
            .build();
        serve_unix(socket, service)
    }

    #[test]
    fn a_session_whose_caller_went_away_sends_and_closes_without_touching_the_sink() {
        let dir = std::env::temp_dir().join(format!("csi-agent-outbound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("echo.sock");
        let (sessions, session) = bounded(1);
        let _server = serve(&socket, sessions);
        let channel =
            ChannelBuilder::new(grpc_environment()).connect(&format!("unix:{}", socket.display()));
        let client = Client::new(channel);
        let (mut tx, mut rx) = client
            .duplex_streaming(&ECHO, CallOption::default())
            .unwrap();
        block_on(tx.send((b"start".to_vec(), WriteFlags::default()))).unwrap();
        // The session is sending: the caller takes one message, then goes.
        let first = block_on(rx.next()).unwrap().unwrap();
        assert_eq!(first, vec![7u8; 64]);
        tx.cancel();
        drop((tx, rx));
        let seen = session
            .recv_timeout(Duration::from_secs(30))
            .map(JoinHandle::join);
        let _ = std::fs::remove_dir_all(&dir);
        let seen = seen
            .expect("the call reaches the server")
            .expect("the session thread ends without a panic");
        assert!(
            seen.failed_after.is_some(),
            "a send fails once the caller is gone: {seen:?}"
        );
        assert_eq!(seen.later_sends, [false, false], "{seen:?}");
    }
}
