//! The job runner's side of the service registry: which `service {
//! provider = "nomad" }` blocks are registered now, and the templates that
//! read the registry rendered again when it changes.
//!
//! A task's services are registered while it runs; a group's while any
//! task of its alloc runs; none once the alloc is to stop. The name is
//! interpolated (Nomad's default: `<job>-<group>` for a group's,
//! `<job>-<group>-<task>` for a task's), as are the tags, the meta and an
//! `address`; the port is the alloc's host port of the label (`driver`
//! mode: the label's `to`, the port inside the task), or the number
//! given; the address is the node's (every mode: tasks share the host's
//! network here) unless `address` names one. The agent loop asks for the
//! list each turn ([`Allocs::service_registrations`], `None` when no task
//! started or stopped since) and hands the registry's whole contents back
//! when they change ([`Allocs::set_services`]).
//!
//! Templates: a task whose templates call `nomadService` or
//! `nomadServices` (or come from a `source` file, which may) gets the
//! registry's snapshot when it renders, and renders again, through the
//! re-render of `rerender.rs` with its templates' `change_mode`, once
//! the registry has changed since: whether its own results changed is
//! the rendered text's to say (a file whose text is the same is not
//! written, and nothing is done).

use std::collections::{BTreeMap, BTreeSet};

use super::env::{interpolate, lookups};
use super::{Alloc, Allocs, TaskState};
use crate::nomad_template::NomadService;
use crate::services::{Refused, Registration};
use crate::spec::{AddressMode, Provider, Service, Task};

/// The registry as templates read it, and who read which version.
#[derive(Default)]
pub(super) struct RegistryView {
    snapshot: Vec<NomadService>,
    generation: u64,
    /// The generation each registry-reading task last rendered with, by
    /// (alloc, task).
    rendered: BTreeMap<(String, String), u64>,
    /// The generation the sweep last looked for adopted readers at.
    swept: u64,
    /// Which tasks run, by alloc with services, at the last
    /// [`Allocs::service_registrations`].
    running: Vec<(String, Vec<bool>)>,
    /// Problems already told in a task's events, not to repeat them.
    told: BTreeSet<(String, String)>,
    /// How many re-renders of each task, by (alloc, task), were for a
    /// change of the registry: such a re-render that changes no file says
    /// nothing, since the registry's changes are mostly other services'.
    quiet: BTreeMap<(String, String), u32>,
}

impl RegistryView {
    /// Whether the re-render of `task` of `alloc` was the registry's
    /// (and forgets it).
    pub(super) fn take_quiet(&mut self, alloc: &str, task: &str) -> bool {
        let key = (alloc.to_string(), task.to_string());
        match self.quiet.get_mut(&key) {
            Some(1) => self.quiet.remove(&key).is_some(),
            Some(n) => {
                *n -= 1;
                true
            }
            None => false,
        }
    }
}

impl Allocs {
    /// The services that should be registered now, or `None` if no task
    /// with services started or stopped since the last call.
    pub fn service_registrations(&mut self) -> Option<Vec<Registration>> {
        let running: Vec<(String, Vec<bool>)> = self
            .allocs
            .values()
            .filter(|a| has_nomad_services(a))
            .map(|a| {
                let up = a
                    .tasks
                    .iter()
                    .map(|t| t.state == TaskState::Running && !a.stop_wanted)
                    .collect();
                (a.id.clone(), up)
            })
            .collect();
        if running == self.services.running {
            return None;
        }
        let mut wanted = Vec::new();
        let mut problems = Vec::new();
        for (id, up) in &running {
            let alloc = &self.allocs[id];
            if up.iter().any(|u| *u) {
                for s in nomad(&alloc.group.services) {
                    match self.registration(alloc, None, s) {
                        Ok(r) => wanted.push(r),
                        Err(e) => problems.push((id.clone(), 0, e)),
                    }
                }
            }
            for (i, task) in alloc.group.tasks.iter().enumerate() {
                if !up[i] {
                    continue;
                }
                for s in nomad(&task.services) {
                    match self.registration(alloc, Some(i), s) {
                        Ok(r) => wanted.push(r),
                        Err(e) => problems.push((id.clone(), i, e)),
                    }
                }
            }
        }
        self.services.running = running;
        for (alloc, i, message) in problems {
            self.tell(&alloc, i, message);
        }
        Some(wanted)
    }

    /// Tells each refused registration's task why, once.
    pub fn services_refused(&mut self, refused: Vec<(Registration, Refused)>) {
        for (r, why) in refused {
            let i = self
                .allocs
                .get(&r.alloc_id)
                .and_then(|a| a.group.tasks.iter().position(|t| t.name == r.task));
            self.tell(
                &r.alloc_id,
                i.unwrap_or(0),
                format!("service {:?} not registered: {why}", r.name),
            );
        }
    }

    fn tell(&mut self, alloc: &str, i: usize, message: String) {
        let key = (alloc.to_string(), message.clone());
        if self.services.told.contains(&key) {
            return;
        }
        let allocs = &self.allocs;
        self.services.told.retain(|(a, _)| allocs.contains_key(a));
        if let Some(task) = self.allocs.get_mut(alloc).and_then(|a| a.tasks.get_mut(i)) {
            task.event("service", message);
            self.services.told.insert(key);
            self.dirty = true;
        }
    }

    /// Service `s` of alloc `alloc` (of its task `task`, or its group's)
    /// as it is registered.
    fn registration(
        &self,
        alloc: &Alloc,
        task: Option<usize>,
        s: &Service,
    ) -> Result<Registration, String> {
        let env = self.task_environment(alloc, task.unwrap_or(0))?;
        let vars = lookups(&env, self.node.attributes());
        let text =
            |what: &str, t: &str| interpolate(t, &vars).map_err(|e| format!("service {what}: {e}"));
        let task_name = task.map(|i| alloc.group.tasks[i].name.as_str());
        let name = match (&s.name, task_name) {
            (Some(name), _) => text("name", name)?,
            (None, None) => format!("{}-{}", alloc.job, alloc.group.name),
            (None, Some(t)) => format!("{}-{}-{t}", alloc.job, alloc.group.name),
        };
        let label = s.port.clone().unwrap_or_default();
        let port = match label.parse::<u16>() {
            Ok(number) => number,
            Err(_) if label.is_empty() => 0,
            Err(_) => {
                let to = alloc
                    .group
                    .network
                    .as_ref()
                    .and_then(|n| n.ports.iter().find(|p| p.label == label))
                    .and_then(|p| p.to);
                match (s.address_mode, to) {
                    (AddressMode::Driver, Some(to)) => to,
                    _ => alloc
                        .ports
                        .iter()
                        .find(|p| p.label == label)
                        .map(|p| p.host)
                        .ok_or_else(|| {
                            format!("service {name:?}: port {label:?} is not a port of the group's network")
                        })?,
                }
            }
        };
        let address = match &s.address {
            Some(address) => text("address", address)?,
            None => self
                .placement
                .host_ip
                .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
                .to_string(),
        };
        let owner = task_name.map_or(format!("group-{}", alloc.group.name), str::to_string);
        let attribute = |key: &str| self.node.attributes().get(key).cloned().unwrap_or_default();
        Ok(Registration {
            id: format!("_nomad-task-{}-{owner}-{name}-{label}", alloc.id),
            namespace: "default".into(),
            node_id: attribute("node.unique.id"),
            datacenter: attribute("node.datacenter"),
            job_id: alloc.job.clone(),
            alloc_id: alloc.id.clone(),
            task: task_name.unwrap_or_default().to_string(),
            address,
            port,
            tags: s
                .tags
                .iter()
                .map(|t| text("tag", t))
                .collect::<Result<_, _>>()?,
            meta: s
                .meta
                .iter()
                .map(|(k, v)| Ok((k.clone(), text("meta", v)?)))
                .collect::<Result<_, String>>()?,
            name,
        })
    }

    /// Takes the registry's whole contents at `generation`: templates that
    /// read an older one render again ([`Allocs::refresh_service_templates`]).
    pub fn set_services(&mut self, all: Vec<NomadService>, generation: u64) {
        self.services.snapshot = all;
        self.services.generation = generation;
    }

    /// The registry's generation the tasks' templates are given.
    pub fn services_generation(&self) -> u64 {
        self.services.generation
    }

    /// Renders again the templates of running tasks that read the
    /// registry at an older generation.
    pub fn refresh_service_templates(&mut self) {
        let generation = self.services.generation;
        if self.services.swept != generation {
            self.services.swept = generation;
            // Tasks adopted after a restart read the registry before it.
            for alloc in self.allocs.values() {
                for (i, task) in alloc.group.tasks.iter().enumerate() {
                    if reads_registry(task) && alloc.tasks[i].state == TaskState::Running {
                        let key = (alloc.id.clone(), task.name.clone());
                        self.services.rendered.entry(key).or_insert(0);
                    }
                }
            }
        }
        let behind: Vec<(String, String)> = self
            .services
            .rendered
            .iter()
            .filter(|(_, seen)| **seen < generation)
            .map(|(key, _)| key.clone())
            .collect();
        for (id, task) in behind {
            let Some(mut alloc) = self.allocs.remove(&id) else {
                self.services.rendered.remove(&(id, task));
                continue;
            };
            match alloc.group.tasks.iter().position(|t| t.name == task) {
                Some(i) if alloc.tasks[i].state == TaskState::Running && !alloc.stop_wanted => {
                    let key = (id.clone(), task);
                    self.services.rendered.insert(key.clone(), generation);
                    *self.services.quiet.entry(key).or_default() += 1;
                    self.rerender_task(&mut alloc, i);
                }
                Some(i) if alloc.tasks[i].state != TaskState::Dead && !alloc.stop_wanted => {
                    // Its start renders with the registry of then.
                }
                _ => {
                    self.services.rendered.remove(&(id.clone(), task));
                }
            }
            self.allocs.insert(id, alloc);
        }
    }

    /// What task `spec` of alloc `alloc` renders its templates with: the
    /// registry's snapshot if they read it (noted, so that a change of
    /// the registry renders them again), else nothing.
    pub(super) fn services_for(&mut self, alloc: &str, spec: &Task) -> Vec<NomadService> {
        if !reads_registry(spec) {
            return Vec::new();
        }
        let key = (alloc.to_string(), spec.name.clone());
        self.services.rendered.insert(key, self.services.generation);
        self.services.snapshot.clone()
    }
}

fn nomad(services: &[Service]) -> impl Iterator<Item = &Service> {
    services.iter().filter(|s| s.provider == Provider::Nomad)
}

fn has_nomad_services(alloc: &Alloc) -> bool {
    nomad(&alloc.group.services).next().is_some()
        || alloc
            .group
            .tasks
            .iter()
            .any(|t| nomad(&t.services).next().is_some())
}

/// Whether the templates of `spec` may read the registry.
fn reads_registry(spec: &Task) -> bool {
    spec.templates.iter().any(|t| {
        t.source.is_some()
            || t.data
                .as_deref()
                .is_some_and(|d| d.contains("nomadService"))
    })
}
