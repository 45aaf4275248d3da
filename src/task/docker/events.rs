//! What the driver's threads report, taken in by the main loop: a start's
//! steps, a container running, its exit; and the containers of this agent
//! that no task has any more.

use std::collections::BTreeSet;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::{container_name, ContainerEvent, Happened};
use crate::task::driver::Handle;
use crate::task::{Allocs, Process};

impl Allocs {
    /// Takes in a report of the docker driver. Returns whether anything
    /// changed.
    pub fn container_event(&mut self, event: ContainerEvent, now: Instant) -> bool {
        let ContainerEvent {
            alloc: id,
            task,
            run,
            what,
        } = event;
        if let Happened::Own(names) = what {
            self.remove_leftovers(names);
            return false;
        }
        let Some(mut alloc) = self.allocs.remove(&id) else {
            return false;
        };
        let current = alloc.tasks.iter().position(|t| {
            t.name == task
                && matches!(
                    &t.process,
                    Some(Process { handle: Handle::Container { run: r, .. }, .. }) if *r == run
                )
        });
        if let Some(i) = current {
            // A pull's progress is news for the event stream; the state
            // written to disk waits for the next step.
            self.dirty |= !matches!(what, Happened::Pulling { .. });
            match what {
                Happened::Note(message) => alloc.tasks[i].event("driver", message),
                Happened::Pulling { image, progress } => {
                    let message = format!(
                        "image {image}: {} of {} ({} of {} layers)",
                        crate::units::format_size(progress.done),
                        crate::units::format_size(progress.total),
                        progress.layers_done,
                        progress.layers
                    );
                    alloc.tasks[i].progress_event("pulling", message);
                }
                Happened::Running {
                    id: container,
                    pid,
                    start_ticks,
                    adopted,
                } => {
                    let t = &mut alloc.tasks[i];
                    if let Some(Process {
                        handle:
                            Handle::Container {
                                pid: p,
                                start_ticks: s,
                                ..
                            },
                        ..
                    }) = &mut t.process
                    {
                        *p = pid;
                        *s = start_ticks;
                    }
                    let short: String = container.chars().take(12).collect();
                    let message = match adopted {
                        true => format!("re-adopted container {short} (pid {pid})"),
                        false => format!("container {short} running (pid {pid})"),
                    };
                    log::info!("Alloc {id}: task {task}: {message}");
                    t.event(if adopted { "adopted" } else { "running" }, message);
                }
                Happened::Exited(exit) => {
                    log::info!("Alloc {id}: task {task} {}", exit.describe());
                    self.exited(&mut alloc, i, exit, now);
                }
                Happened::Own(_) => unreachable!("taken above"),
            }
        }
        self.allocs.insert(id, alloc);
        current.is_some()
    }

    /// Where the docker driver's reports arrive, for the main loop to
    /// hand to [`Allocs::container_event`].
    pub fn container_events(&self) -> Receiver<ContainerEvent> {
        self.docker.events()
    }

    /// Asks the engine for this agent's containers; those no task has are
    /// removed when the answer comes ([`Allocs::container_event`]).
    pub fn look_for_leftover_containers(&mut self) {
        self.docker.list_own(&self.data_dir);
    }

    /// Removes the containers in `names` that no live task has. A task
    /// started since the list was made has a container the list does not
    /// hold, so nothing of a live task is removed.
    fn remove_leftovers(&mut self, names: Vec<String>) {
        let live: BTreeSet<String> = order::set(
            self.allocs
                .values()
                .filter(|a| !a.status.is_terminal())
                .flat_map(|a| a.tasks.iter().map(|t| container_name(&a.id, &t.name))),
        );
        for name in names {
            if !live.contains(&name) {
                self.docker.remove(&name);
            }
        }
    }
}
