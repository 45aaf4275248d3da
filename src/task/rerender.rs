//! A template changed in place: `job run` again of a running job whose
//! only change is in its tasks' `template` blocks keeps the allocations
//! and renders the new templates into the running tasks' dirs. A task
//! whose files changed then takes its templates' `change_mode` after a
//! random wait of up to their `splay`, as Nomad's template hook does when
//! a template's data changes: `noop` leaves it be, `signal` sends it
//! `change_signal`, `restart` stops it (its kill signal, then SIGKILL
//! after `kill_timeout`) and starts it again at once, outside its restart
//! policy. Of several changed templates the strongest mode wins (restart,
//! then signal, then noop) and the longest splay.
//!
//! The templates render in the prepare helper's process (`prepare/`),
//! waited for on a starter thread, never on the loop: the loop hands the
//! task's templates and environment to the starter and takes the report
//! ([`Allocs::rerendered`]) in a later turn. A render that fails or
//! crashes is an event, and the task keeps running on the files it has.
//!
//! A template with `once = true` keeps the file it rendered when the task
//! started: it is left out of the re-render. A template with `wait { min
//! max }` holds the re-render back until no change came for `min`, and at
//! most `max` after the first (the task's longest of each), so that several
//! `job run`s in a row render and take their change mode once.
//!
//! A task that is not running renders its new templates when it starts.
//! Any other change to the job replaces its allocations, as before. A
//! change waiting for its splay or its render, or a restart under way, is
//! not kept across an agent restart: the files written stay, and the next
//! change (or restart) of the task takes them.

use std::time::{Duration, Instant};

use super::calls::{JobFile, JobRun};
use super::starter::RerenderPlan;
use super::{Alloc, Allocs, TaskRun, TaskState};
use crate::csi::backoff::{Jitter, SplitMix64};
use crate::spec::{ChangeMode, Job};
use crate::units::format_duration;

impl Allocs {
    /// Takes job `spec` for the running job of its name in place, when
    /// its templates are all that changed: `None` when it is not so.
    pub(super) fn update_templates(
        &mut self,
        spec: &Job,
        req: &JobFile,
        live: &[String],
        warnings: &[String],
    ) -> Option<JobRun> {
        let job = self.jobs.get(&spec.name)?;
        if job.stop_wanted || live.is_empty() || !only_templates_differ(&job.spec, spec) {
            return None;
        }
        for id in live {
            let Some(mut alloc) = self.allocs.remove(id) else {
                continue;
            };
            if let Some(group) = spec.groups.iter().find(|g| g.name == alloc.group.name) {
                let old = std::mem::replace(&mut alloc.group, group.clone());
                alloc.job_hcl = req.hcl.clone();
                alloc.job_file = req.file.clone();
                alloc.job_inputs = req.inputs.clone();
                for i in 0..alloc.tasks.len() {
                    if old.tasks[i].templates != alloc.group.tasks[i].templates {
                        self.templates_changed(&mut alloc, i, Instant::now());
                    }
                }
            }
            self.allocs.insert(id.clone(), alloc);
        }
        log::info!(
            "Job {}: its templates changed; re-rendering them in place",
            spec.name
        );
        let index = self.next_job_index();
        let entry = self.jobs.get_mut(&spec.name).expect("looked up above");
        entry.modify_index = index;
        entry.spec = spec.clone();
        entry.hcl = req.hcl.clone();
        entry.file = req.file.clone();
        entry.inputs = req.inputs.clone();
        self.dirty = true;
        Some(JobRun {
            job: spec.name.clone(),
            alloc_ids: live.to_vec(),
            unchanged: false,
            warnings: warnings.to_vec(),
            unplaced: self.unplaced(spec),
        })
    }

    /// Hands task `i`'s new templates to the starter to render, if it
    /// runs: the prepare helper renders them off the loop, and
    /// [`Allocs::rerendered`] takes its report.
    pub(super) fn rerender_task(&mut self, alloc: &mut Alloc, i: usize) {
        if alloc.tasks[i].state != TaskState::Running {
            return;
        }
        let spec = &alloc.group.tasks[i];
        let once = spec.templates.iter().filter(|t| t.once).count();
        if once > 0 {
            alloc.tasks[i].event(
                "template",
                format!("{once} template(s) with once = true kept as first rendered"),
            );
        }
        let templates: Vec<_> = spec.templates.iter().filter(|t| !t.once).cloned().collect();
        if templates.is_empty() {
            self.dirty = true;
            return;
        }
        let env = match self.task_environment(alloc, i) {
            Ok(env) => env,
            Err(err) => {
                // The task keeps running on the files it has.
                alloc.tasks[i].event(
                    "template",
                    format!("cannot render the new templates: {err}"),
                );
                return;
            }
        };
        let services = self.services_for(&alloc.id, spec);
        self.starter.rerender(RerenderPlan {
            alloc: alloc.id.clone(),
            task: spec.name.clone(),
            templates,
            task_dir: self.alloc_dir(&alloc.id).join(&spec.name),
            env,
            node: self.node.attributes().clone(),
            services,
        });
    }

    /// Task `i`'s templates changed: rendered now, or once changes have
    /// settled for the longest `wait { min }` of its templates, and at
    /// the latest their longest `wait { max }` after the first change.
    fn templates_changed(&mut self, alloc: &mut Alloc, i: usize, now: Instant) {
        let waits = alloc.group.tasks[i]
            .templates
            .iter()
            .filter(|t| !t.once)
            .filter_map(|t| t.wait);
        let (min, max) = waits.fold((Duration::ZERO, Duration::ZERO), |(min, max), w| {
            (min.max(w.min), max.max(w.max))
        });
        if max.is_zero() || alloc.tasks[i].state != TaskState::Running {
            return self.rerender_task(alloc, i);
        }
        let task = &mut alloc.tasks[i];
        let deadline = task
            .template_render
            .map_or(now + max, |(_, deadline)| deadline);
        let at = (now + min).min(deadline);
        task.template_render = Some((at, deadline));
        task.event(
            "template",
            format!(
                "templates changed; rendering in {} unless another change comes (wait)",
                format_duration(round_ms(at - now))
            ),
        );
        self.dirty = true;
    }

    /// Takes in a re-render of task `task` of alloc `id`: the change mode
    /// and splay of each template whose file changed, which is scheduled
    /// if the task still runs, or why it failed.
    pub(super) fn rerendered(
        &mut self,
        id: &str,
        task: &str,
        changed: Result<Vec<(ChangeMode, Duration)>, String>,
        now: Instant,
    ) {
        let quiet = self.services.take_quiet(id, task);
        let Some(alloc) = self.allocs.get_mut(id) else {
            return;
        };
        let Some(task) = alloc.tasks.iter_mut().find(|t| t.name == task) else {
            return;
        };
        let changed = match changed {
            Ok(changed) => changed,
            Err(err) => {
                // The task keeps running on the files it has.
                task.event(
                    "template",
                    format!("cannot render the new templates: {err}"),
                );
                self.dirty = true;
                return;
            }
        };
        self.dirty = true;
        if changed.is_empty() {
            if !quiet {
                task.event("template", "templates re-rendered: no file changed");
            }
            return;
        }
        if task.state != TaskState::Running {
            // It starts again with the new files anyway.
            return;
        }
        let mode = changed
            .iter()
            .map(|(mode, _)| *mode)
            .max_by_key(|m| strength(*m))
            .expect("at least one changed");
        let splay = changed.iter().map(|(_, s)| *s).max().unwrap_or_default();
        let wait = splay.mul_f64(SplitMix64::from_entropy().unit());
        task.template_change = Some((now + wait, mode));
        task.event(
            "template",
            format!(
                "{} template(s) changed; {} in {}",
                changed.len(),
                describe(mode),
                format_duration(round_ms(wait))
            ),
        );
    }

    /// Takes the change modes whose splay is over. True if anything
    /// changed.
    pub(super) fn template_changes_due(&mut self, alloc: &mut Alloc, now: Instant) -> bool {
        let mut changed = false;
        for i in 0..alloc.tasks.len() {
            if let Some((at, _)) = alloc.tasks[i].template_render {
                if at <= now {
                    alloc.tasks[i].template_render = None;
                    changed = true;
                    if !alloc.stop_wanted {
                        self.rerender_task(alloc, i);
                    }
                }
            }
            let Some((at, mode)) = alloc.tasks[i].template_change else {
                continue;
            };
            if at > now {
                continue;
            }
            alloc.tasks[i].template_change = None;
            changed = true;
            if alloc.stop_wanted || alloc.tasks[i].state != TaskState::Running {
                continue;
            }
            match mode {
                ChangeMode::Noop => {}
                ChangeMode::Signal(signal) => {
                    let task = &mut alloc.tasks[i];
                    if let Some(p) = &mut task.process {
                        let _ = p.handle.signal(signal.number(), &mut self.docker);
                        task.event("signaling", format!("sent {signal}: a template changed"));
                    }
                }
                ChangeMode::Restart => {
                    alloc.tasks[i].template_restart = true;
                    alloc.tasks[i].event("restart signaled", "a template changed");
                    self.kill_task(alloc, i, now);
                }
            }
        }
        changed
    }

    /// When the first change mode waiting for its splay is due.
    pub(super) fn next_template_change(alloc: &Alloc) -> Option<Instant> {
        alloc
            .tasks
            .iter()
            .flat_map(|t| {
                let change = t.template_change.map(|(at, _)| at);
                change
                    .into_iter()
                    .chain(t.template_render.map(|(at, _)| at))
            })
            .min()
    }
}

impl TaskRun {
    /// A task stopped for a changed template (or by `alloc restart`, which
    /// uses the same flag) starts again at once, outside its restart
    /// policy: true if this exit was that.
    pub(super) fn restarts_for_template(&mut self, now: Instant) -> bool {
        if !std::mem::take(&mut self.template_restart) {
            return false;
        }
        self.state = TaskState::Restarting { at: now };
        // The last "restart signaled" says who asked: a changed template
        // or `alloc restart`.
        let asked = self
            .events
            .iter()
            .rev()
            .find(|e| e.kind == "restart signaled")
            .is_some_and(|e| e.message == super::alloc_ops::RESTART_ASKED);
        if asked {
            self.event(
                "restarting",
                "starting again at once, outside its restart policy: asked by alloc restart",
            );
        } else {
            self.event("restarting", "starting again with its changed templates");
        }
        true
    }
}

/// Whether `old` and `new` differ in their tasks' templates only.
pub(super) fn only_templates_differ(old: &Job, new: &Job) -> bool {
    if old.groups.len() != new.groups.len() {
        return false;
    }
    let mut patched = old.clone();
    for (group, new_group) in patched.groups.iter_mut().zip(&new.groups) {
        if group.tasks.len() != new_group.tasks.len() {
            return false;
        }
        for (task, new_task) in group.tasks.iter_mut().zip(&new_group.tasks) {
            task.templates = new_task.templates.clone();
        }
    }
    patched == *new
}

/// Restart over signal over noop.
fn strength(mode: ChangeMode) -> u8 {
    match mode {
        ChangeMode::Noop => 0,
        ChangeMode::Signal(_) => 1,
        ChangeMode::Restart => 2,
    }
}

fn describe(mode: ChangeMode) -> String {
    match mode {
        ChangeMode::Noop => "nothing to do (change_mode noop)".to_string(),
        ChangeMode::Signal(signal) => format!("{signal}"),
        ChangeMode::Restart => "restart".to_string(),
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(template: &str) -> Job {
        let hcl = format!(
            r#"
job "j" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["600"]
      }}
      template {{
        data        = "{template}"
        destination = "local/a.txt"
        change_mode = "noop"
      }}
    }}
  }}
}}
"#
        );
        Job::decode_with(&hcl, "j.hcl", &Default::default())
            .unwrap()
            .spec
    }

    #[test]
    fn a_job_whose_templates_alone_changed_is_told_apart_from_other_changes() {
        let old = job("one");
        assert!(only_templates_differ(&old, &job("two")));
        assert!(only_templates_differ(&old, &old));
        let mut other = job("two");
        other.groups[0].tasks[0].config.args = vec!["700".into()];
        assert!(!only_templates_differ(&old, &other));
        let mut more = job("one");
        more.groups[0].count = 2;
        assert!(!only_templates_differ(&old, &more));
    }

    #[test]
    fn the_strongest_change_mode_wins() {
        let sig = ChangeMode::Signal(crate::spec::KillSignal::Hup);
        let modes = [ChangeMode::Noop, ChangeMode::Restart, sig];
        assert_eq!(
            modes.into_iter().max_by_key(|m| strength(*m)),
            Some(ChangeMode::Restart)
        );
        assert!(strength(sig) > strength(ChangeMode::Noop));
    }
}
