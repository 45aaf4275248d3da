//! An operator's hand on one alloc: `alloc signal` (a signal to its running
//! tasks), `alloc restart` (its running tasks stopped and started again at
//! once, in place, outside their restart policy, as Nomad's is) and `alloc
//! stop` (the alloc stopped; a service or system job's is replaced by a
//! new alloc of the same group instance, as Nomad's scheduler replaces it,
//! while a batch job's stays stopped); and `job inspect`.

use std::time::{Instant, SystemTime};

use super::calls::{AllocAction, AllocControl, AllocControlled, JobFile, JobInspected};
use super::{invalid, Alloc, Allocs, TaskState};
use crate::call::CallError;
use crate::spec::JobType;

impl Allocs {
    /// Carries out `req` on the alloc it names.
    pub fn control(
        &mut self,
        req: &AllocControl,
        now: Instant,
    ) -> Result<AllocControlled, CallError> {
        let id = self.alloc_by_prefix(&req.alloc_id)?;
        let alloc = &self.allocs[&id];
        if alloc.stop_wanted || alloc.status.is_terminal() {
            return Err(CallError::new(
                crate::call::ErrorKind::FailedPrecondition,
                format!(
                    "alloc {id} is {}{}: nothing to {}",
                    alloc.status.as_str(),
                    if alloc.stop_wanted { " (stopping)" } else { "" },
                    verb(req.action)
                ),
            ));
        }
        if !req.task.is_empty() && !alloc.tasks.iter().any(|t| t.name == req.task) {
            let names: Vec<&str> = alloc.tasks.iter().map(|t| t.name.as_str()).collect();
            return Err(CallError::not_found(format!(
                "alloc {id} has no task {:?} (tasks: {})",
                req.task,
                names.join(", ")
            )));
        }
        match req.action {
            AllocAction::Stop => self.stop_by_operator(&id),
            action => self.signal_tasks(&id, &req.task, action, now),
        }
    }

    pub(super) fn alloc_by_prefix(&self, prefix: &str) -> Result<String, CallError> {
        let matches: Vec<&Alloc> = self
            .allocs
            .values()
            .filter(|a| !prefix.is_empty() && a.id.starts_with(prefix))
            .collect();
        match matches.as_slice() {
            [one] => Ok(one.id.clone()),
            [] => Err(CallError::not_found(format!("no alloc {prefix:?}"))),
            _ => Err(invalid(format!(
                "alloc ID prefix {prefix:?} is ambiguous ({} allocs)",
                matches.len()
            ))),
        }
    }

    /// Signals or restarts the running tasks of alloc `id` (`task`, or
    /// every running one when empty).
    fn signal_tasks(
        &mut self,
        id: &str,
        task: &str,
        action: AllocAction,
        now: Instant,
    ) -> Result<AllocControlled, CallError> {
        let mut alloc = self.allocs.remove(id).expect("looked up");
        let mut done = Vec::new();
        for i in 0..alloc.tasks.len() {
            let t = &alloc.tasks[i];
            if (!task.is_empty() && t.name != task) || t.state != TaskState::Running {
                continue;
            }
            match action {
                AllocAction::Signal(signal) => {
                    let t = &mut alloc.tasks[i];
                    let Some(p) = &mut t.process else { continue };
                    if let Err(err) = p.handle.signal(signal.number(), &mut self.docker) {
                        log::warn!("Alloc {id}: task {}: {signal}: {err}", t.name);
                        continue;
                    }
                    t.event("signaling", format!("sent {signal}: asked by alloc signal"));
                }
                AllocAction::Restart => {
                    alloc.tasks[i].template_restart = true;
                    alloc.tasks[i].event("restart signaled", RESTART_ASKED);
                    self.kill_task(&mut alloc, i, now);
                }
                AllocAction::Stop => unreachable!("stops are not per task"),
            }
            done.push(alloc.tasks[i].name.clone());
        }
        self.allocs.insert(id.to_string(), alloc);
        if done.is_empty() {
            return Err(CallError::new(
                crate::call::ErrorKind::FailedPrecondition,
                if task.is_empty() {
                    format!("alloc {id} has no running task to {}", verb(action))
                } else {
                    format!("task {task:?} of alloc {id} is not running")
                },
            ));
        }
        self.dirty = true;
        Ok(AllocControlled {
            alloc_id: id.to_string(),
            tasks: done,
            replacement: None,
        })
    }

    /// Stops alloc `id`; a service or system job gets a new alloc of the
    /// same group instance, which waits for this one to stop (its volumes
    /// may be single-writer) as a `job run` update's does.
    fn stop_by_operator(&mut self, id: &str) -> Result<AllocControlled, CallError> {
        let alloc = &self.allocs[id];
        let job = self.jobs.get(&alloc.job);
        let replace = job.is_some_and(|j| {
            !j.stop_wanted && matches!(j.spec.job_type, JobType::Service | JobType::System)
        });
        let replacement = match (replace, job) {
            (true, Some(job)) => {
                let spec = job.spec.clone();
                let req = JobFile {
                    file: alloc.job_file.clone(),
                    hcl: alloc.job_hcl.clone(),
                    inputs: alloc.job_inputs.clone(),
                    check_index: None,
                };
                let (group, index) = (alloc.group.clone(), alloc.index);
                let new_id = self.new_alloc_id();
                let new = self.new_alloc(
                    &new_id,
                    &spec,
                    &group,
                    index,
                    &req,
                    SystemTime::now(),
                    Some(id.to_string()),
                );
                log::info!(
                    "Job {}: alloc {new_id} for group {} [{index}] replaces alloc {id}",
                    spec.name,
                    group.name
                );
                self.allocs.insert(new_id.clone(), new);
                Some(new_id)
            }
            _ => None,
        };
        self.stop_alloc(id, "stopped by alloc stop");
        self.dirty = true;
        Ok(AllocControlled {
            alloc_id: id.to_string(),
            tasks: Vec::new(),
            replacement,
        })
    }

    /// `job inspect`: job `name` as it was submitted.
    pub fn inspect(&self, name: &str) -> Result<JobInspected, CallError> {
        let job = self.jobs.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.jobs.keys().map(String::as_str).collect();
            CallError::not_found(format!(
                "no job {name:?} (known: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        Ok(JobInspected {
            name: job.name.clone(),
            file: job.file.clone(),
            hcl: job.hcl.clone(),
            submitted: Some(job.submitted),
            job_type: job.spec.job_type.as_str().to_string(),
            groups: job.spec.groups.iter().map(|g| g.name.clone()).collect(),
            modify_index: job.modify_index,
        })
    }
}

/// The "restart signaled" event of a task `alloc restart` restarts.
pub(super) const RESTART_ASKED: &str = "asked by alloc restart";

fn verb(action: AllocAction) -> &'static str {
    match action {
        AllocAction::Signal(_) => "signal",
        AllocAction::Restart => "restart",
        AllocAction::Stop => "stop",
    }
}
