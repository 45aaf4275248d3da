//! When the main loop wakes up without a message: at the earliest
//! deadline one of its parts keeps, and at no other time, so that an idle
//! agent sleeps until a message comes.
//!
//! The deadlines are a volume step's retry and a claim waiter's deadline
//! (the volume manager keeps both in heaps), a task's restart, kill or
//! plugin health timer, the next try to write a state that could not be
//! persisted, the restart of `-dev`'s plugin, `stop_after_disconnect`
//! while the node is cut off from its cluster, and a periodic job's next
//! launch (a time of the wall clock, turned into the monotonic clock's
//! each turn, so a wall clock set back or forth moves it). The exit of a child
//! (a task, `-dev`'s plugin) comes as SIGCHLD. Only the exit of a task
//! adopted after an agent restart has neither a deadline nor a message (it
//! is not the agent's child): while there is one, the loop looks every
//! [`ADOPTED_POLL`]. That deadline counts from the last look, not from the
//! turn: a turn comes with every message, and a client asking for status
//! every few milliseconds must not put the look off for ever.
//!
//! The agent's side is here too: gathering each part's deadline
//! ([`Agent::deadlines`]) and doing what is due when one passes.

use std::time::{Duration, Instant};

use super::dev::DevPlugin;
use super::Agent;

/// How often the loop looks whether an adopted task still runs.
pub(super) const ADOPTED_POLL: Duration = Duration::from_millis(500);

/// What the loop's parts wait for, gathered once per turn.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Deadlines {
    /// A volume step's retry or a claim waiter's deadline.
    pub volumes: Option<Instant>,
    /// A task's restart, kill or plugin health timer.
    pub tasks: Option<Instant>,
    /// The next try to write the state after a failed write.
    pub state_write: Option<Instant>,
    /// The restart of `-dev`'s plugin after it exited.
    pub dev_restart: Option<Instant>,
    /// The next look at tasks adopted after an agent restart, while one
    /// runs.
    pub adopted_tasks: Option<Instant>,
    /// `stop_after_disconnect`, while this node is cut off from its
    /// cluster.
    pub cluster: Option<Instant>,
    /// The end of the first waiting `Events` call's wait.
    pub events: Option<Instant>,
    /// The snapshot that must have the pids of tasks started since the
    /// last one.
    pub starts_saved: Option<Instant>,
    /// A periodic job's next launch.
    pub periodic: Option<Instant>,
}

impl Deadlines {
    /// When the loop must wake up, `None` when only a message can wake it.
    pub(super) fn next(&self) -> Option<Instant> {
        [
            self.volumes,
            self.tasks,
            self.state_write,
            self.dev_restart,
            self.cluster,
            self.adopted_tasks,
            self.events,
            self.starts_saved,
            self.periodic,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

impl Agent {
    /// What the loop waits for besides messages.
    pub(super) fn deadlines(&self) -> Deadlines {
        Deadlines {
            volumes: self.volumes.next_wakeup(),
            tasks: self.allocs.next_wakeup(),
            periodic: self.allocs.next_launch_wakeup(Instant::now()),
            state_write: self.gate.next_retry(),
            dev_restart: self.dev.as_ref().and_then(DevPlugin::restart_at),
            adopted_tasks: self
                .allocs
                .watches_adopted()
                .then(|| self.adopted_looked + ADOPTED_POLL),
            cluster: self.disconnect_deadline(),
            events: self.events.next_deadline(),
            starts_saved: self.starts_due,
        }
    }

    /// The earliest of [`Agent::deadlines`] passed: do what is due. Retries
    /// and task timers are taken up by the end of the turn.
    pub(super) fn deadline_passed(&mut self) {
        let now = Instant::now();
        if let Some(dev) = &mut self.dev {
            dev.supervise();
        }
        // Adopted tasks' exits are noticed here.
        self.adopted_looked = now;
        self.allocs.reap(now);
        self.allocs.launch_due();
        self.volumes.expire_claims(now);
        // Usage and capacity polls are reads: out now, not held behind
        // the journal.
        for poll in self.volumes.polls_due(&self.registry, now) {
            self.submit(poll);
        }
        self.stop_if_disconnected(now);
        self.events.expire(now);
        // Due: the pids are now what the next write must keep (with a
        // full disk, until a write succeeds; the due time itself is gone,
        // so the loop does not wake for it again).
        if self.starts_due.is_some_and(|at| at <= now) {
            self.starts_due = None;
            self.dirty = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_agent_has_no_deadline() {
        assert_eq!(Deadlines::default().next(), None);
    }

    #[test]
    fn the_earliest_deadline_wakes_the_loop() {
        let now = Instant::now();
        let deadlines = Deadlines {
            volumes: Some(now + Duration::from_secs(3)),
            tasks: Some(now + Duration::from_secs(2)),
            state_write: Some(now + Duration::from_secs(5)),
            dev_restart: Some(now + Duration::from_secs(4)),
            adopted_tasks: None,
            cluster: None,
            events: None,
            starts_saved: None,
            periodic: None,
        };
        assert_eq!(deadlines.next(), Some(now + Duration::from_secs(2)));
    }

    #[test]
    fn each_deadline_alone_wakes_the_loop() {
        let now = Instant::now();
        let at = now + Duration::from_secs(7);
        let alone = [
            Deadlines {
                volumes: Some(at),
                ..Default::default()
            },
            Deadlines {
                tasks: Some(at),
                ..Default::default()
            },
            Deadlines {
                state_write: Some(at),
                ..Default::default()
            },
            Deadlines {
                dev_restart: Some(at),
                ..Default::default()
            },
            Deadlines {
                cluster: Some(at),
                ..Default::default()
            },
            Deadlines {
                adopted_tasks: Some(at),
                ..Default::default()
            },
            Deadlines {
                events: Some(at),
                ..Default::default()
            },
            Deadlines {
                starts_saved: Some(at),
                ..Default::default()
            },
            Deadlines {
                periodic: Some(at),
                ..Default::default()
            },
        ];
        for deadlines in alone {
            assert_eq!(deadlines.next(), Some(at), "{deadlines:?}");
        }
    }

    #[test]
    fn a_passed_deadline_wakes_the_loop_at_once() {
        let now = Instant::now();
        let deadlines = Deadlines {
            volumes: Some(now - Duration::from_millis(1)),
            ..Default::default()
        };
        assert!(deadlines.next().is_some_and(|at| at <= now));
    }
}
