//! Many control API calls in flight at once, from one thread: a boot
//! storm's claims all arrive together, and a thread per call in the
//! benchmark would take CPU from the agent it measures (two cores).
//!
//! [`join_all`] drives grpcio's futures with a waker per call that queues
//! the call's index, so each wake-up polls only the call that finished.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use csi_agent::grpc::grpc_environment;
use csi_agent::proto::agent_grpc::AgentClient;
use grpcio::{CallOption, ChannelBuilder};

/// Calls one connection carries at most, so that no call waits for a
/// stream behind a server's concurrent-stream limit.
const CALLS_PER_CONNECTION: usize = 100;

/// The deadline of each call: a storm of 1,000 claims at 5 ms per RPC
/// must fit with room to spare.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(300);

pub fn option() -> CallOption {
    CallOption::default().timeout(CALL_TIMEOUT)
}

/// Enough raw control API clients (one connection each) for `calls`
/// concurrent calls; call `i` goes to `clients[i % len]`.
pub fn clients(socket: &Path, calls: usize) -> Vec<AgentClient> {
    let n = calls.div_ceil(CALLS_PER_CONNECTION).max(1);
    (0..n)
        .map(|_| {
            let channel = ChannelBuilder::new(grpc_environment())
                .use_local_subchannel_pool(true)
                .connect(&format!("unix:{}", socket.display()));
            AgentClient::new(channel)
        })
        .collect()
}

/// Sends call `i` of `n` on `clients[i % clients.len()]`, all of them at
/// once, and runs them to completion: each answer with the moment it
/// came, in the order of `i`.
pub fn all_at_once<F: Future + Unpin>(
    clients: &[AgentClient],
    n: usize,
    call: impl Fn(&AgentClient, usize) -> grpcio::Result<F>,
) -> Vec<(F::Output, Instant)> {
    let futures = (0..n)
        .map(|i| call(&clients[i % clients.len()], i).expect("send a control API call"))
        .collect();
    join_all(futures)
}

struct CallWaker {
    index: usize,
    ready: Arc<Mutex<Vec<usize>>>,
    thread: Thread,
}

impl Wake for CallWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.index);
        self.thread.unpark();
    }
}

/// Runs every future to completion; each output with the moment it was
/// ready, in the order of `futures`.
pub fn join_all<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<(F::Output, Instant)> {
    let ready = Arc::new(Mutex::new((0..futures.len()).collect::<Vec<_>>()));
    let wakers: Vec<Waker> = (0..futures.len())
        .map(|index| {
            Waker::from(Arc::new(CallWaker {
                index,
                ready: ready.clone(),
                thread: thread::current(),
            }))
        })
        .collect();
    let mut outputs: Vec<Option<(F::Output, Instant)>> = futures.iter().map(|_| None).collect();
    let mut pending = futures.len();
    while pending > 0 {
        let woken = std::mem::take(&mut *ready.lock().unwrap_or_else(|e| e.into_inner()));
        if woken.is_empty() {
            thread::park();
            continue;
        }
        for index in woken {
            if outputs[index].is_some() {
                continue;
            }
            let mut cx = Context::from_waker(&wakers[index]);
            if let Poll::Ready(output) = Pin::new(&mut futures[index]).poll(&mut cx) {
                outputs[index] = Some((output, Instant::now()));
                pending -= 1;
            }
        }
    }
    outputs
        .into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}
