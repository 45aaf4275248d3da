//! The signal thread: SIGTERM and SIGINT (stop), SIGHUP (reload) and
//! SIGCHLD (a task exited) become messages for the main loop.
//!
//! One named thread iterates `signal_hook`'s signals and forwards each; at
//! shutdown its handle is closed and the thread joined, as Cloud
//! Hypervisor does.

use std::thread::{self, JoinHandle};

use crossbeam_channel::{bounded, Receiver};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};

use super::Error;

/// The thread that turns signals into messages for the main loop.
pub(super) struct SignalThread {
    pub(super) events: Receiver<i32>,
    handle: Handle,
    thread: JoinHandle<()>,
}

impl SignalThread {
    pub(super) fn start() -> Result<SignalThread, Error> {
        let mut signals =
            Signals::new([SIGTERM, SIGINT, SIGHUP, SIGCHLD]).map_err(Error::Signals)?;
        let handle = signals.handle();
        let (tx, events) = bounded(16);
        let thread = thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if tx.send(signal).is_err() {
                        break;
                    }
                }
            })
            .map_err(Error::Signals)?;
        Ok(SignalThread {
            events,
            handle,
            thread,
        })
    }

    pub(super) fn stop(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}
