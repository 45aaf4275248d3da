//! When the main loop wakes up without a message: at the earliest
//! deadline one of its parts keeps, and at no other time, so that an idle
//! agent sleeps until a message comes.
//!
//! The deadlines are a volume step's retry and a claim waiter's deadline
//! (the volume manager keeps both in heaps), a task's restart, kill or
//! plugin health timer, the next try to write a state that could not be
//! persisted, the restart of `-dev`'s plugin, and `stop_after_disconnect`
//! while the node is cut off from its cluster. The exit of a child
//! (a task, `-dev`'s plugin) comes as SIGCHLD. Only the exit of a task
//! adopted after an agent restart has neither a deadline nor a message (it
//! is not the agent's child): while there is one, the loop looks every
//! [`ADOPTED_POLL`]. That deadline counts from the last look, not from the
//! turn: a turn comes with every message, and a client asking for status
//! every few milliseconds must not put the look off for ever.

use std::time::{Duration, Instant};

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
        ]
        .into_iter()
        .flatten()
        .min()
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
