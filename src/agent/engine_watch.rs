//! The container engine's part of the node's fingerprint, taken again once
//! the engine answers.
//!
//! The start asks the engine's version within
//! [`ENGINE_FINGERPRINT`](crate::task::node::ENGINE_FINGERPRINT), and
//! the systemd install orders the agent before `docker.service`: at boot
//! the engine is not up yet, so the node starts without `driver.docker`
//! and docker tasks could not be placed. The `engine-watch` thread asks
//! the engine until it answers (every [`RETRY`], doubling to its ceiling,
//! for at most [`GIVE_UP`]) and says so once; the loop then takes the
//! node's fingerprint again, as a SIGHUP does. It runs only when the
//! start's fingerprint had no `driver.docker`.

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, Sender};

use super::Agent;
use crate::csi::Backoff;
use crate::docker::Engine;

/// How often the engine is asked: from 1 s, doubling up to 30 s.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// After this long without an answer the host has no engine to wait for;
/// a SIGHUP takes the fingerprint again.
const GIVE_UP: Duration = Duration::from_secs(600);

/// The running thread.
pub(super) struct EngineWatch {
    /// One message once the engine answered.
    pub(super) answered: Receiver<()>,
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl EngineWatch {
    /// Ends the thread (after the call in flight, within the engine's call
    /// timeout) and hands it over to be joined.
    pub(super) fn stop(self) -> JoinHandle<()> {
        drop(self.stop);
        self.thread
    }
}

impl Agent {
    /// Starts the watch when the node has no `driver.docker`.
    pub(super) fn watch_engine(&self) -> Option<EngineWatch> {
        if self.allocs.node_has("attr.driver.docker") {
            return None;
        }
        let engine = Engine::new(&self.options.config.docker.endpoint).ok()?;
        let (answered_tx, answered) = bounded(1);
        let (stop, stopped) = bounded::<()>(0);
        let spawned = thread::Builder::new()
            .name("engine-watch".into())
            .spawn(move || watch(&engine, &answered_tx, &stopped));
        match spawned {
            Ok(thread) => Some(EngineWatch {
                answered,
                stop,
                thread,
            }),
            Err(err) => {
                log::warn!("Cannot watch for the container engine: {err}");
                None
            }
        }
    }

    /// The engine answered: the node's fingerprint again, with it.
    pub(super) fn engine_answered(&mut self) {
        self.allocs.reconfigure_node(&self.options.config);
        if self.allocs.node_has("attr.driver.docker") {
            log::info!("The container engine answers: docker tasks can be placed");
        }
    }
}

fn watch(engine: &Engine, answered: &Sender<()>, stopped: &Receiver<()>) {
    let start = Instant::now();
    let mut attempt = 0;
    loop {
        select! {
            recv(stopped) -> _ => return,
            default(RETRY.ceiling(attempt)) => {}
        }
        if engine.version().is_ok() {
            let _ = answered.send(());
            return;
        }
        if start.elapsed() >= GIVE_UP {
            log::info!(
                "No container engine answered at {} within {}; SIGHUP takes the fingerprint again",
                engine.endpoint(),
                crate::units::format_duration(GIVE_UP)
            );
            return;
        }
        attempt += 1;
    }
}
