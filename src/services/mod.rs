//! The service registry: Nomad's built-in service discovery, for
//! `service { provider = "nomad" }` blocks.
//!
//! The job runner says which services should be registered now (those of
//! running tasks, and of allocs with a running task for group services:
//! [`Registration`]s), and the agent loop, which owns the [`Registry`],
//! hands that list to [`Registry::sync_local`] at the end of each turn.
//! Nothing is persisted: after an agent restart the list is rebuilt from
//! the tasks it adopted, so no entry outlives what runs. What templates
//! read (`nomadService`) and `service list`/`service info` answer is
//! [`Registry::all`]: this host's registrations and, in a cluster, every
//! other host's (`cluster.rs`: kept in etcd under the cluster's prefix,
//! attached to each node's lease, so a lost host's services go with its
//! lease).
//!
//! Every registration is bounded: [`MAX_SERVICES`] in the registry,
//! names of at most [`MAX_NAME`] characters, [`MAX_TAGS`] tags and
//! [`MAX_META`] meta entries, each text at most [`MAX_TEXT`] bytes. A
//! registration past a bound is refused with an error that names it, and
//! the task's events say so.

pub mod cluster;

use std::collections::BTreeMap;

/// The most services the registry holds, this host's and the others'
/// together: far more than a host runs, few enough that every template
/// that reads the registry gets a copy of it.
pub const MAX_SERVICES: usize = 10_000;

/// The longest service name: Nomad's, an RFC 1123 label.
pub const MAX_NAME: usize = 63;

/// The most tags of one service.
pub const MAX_TAGS: usize = 64;

/// The most `meta` entries of one service.
pub const MAX_META: usize = 64;

/// The longest tag, address, or meta key or value.
pub const MAX_TEXT: usize = 1024;

/// One service instance, as Nomad's `ServiceRegistration`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Registration {
    /// `_nomad-task-<alloc>-<task or group-<group>>-<name>-<port label>`,
    /// Nomad's form.
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub node_id: String,
    pub datacenter: String,
    pub job_id: String,
    pub alloc_id: String,
    /// The task whose service it is; empty for a group's.
    pub task: String,
    pub address: String,
    pub port: u16,
    pub tags: Vec<String>,
    pub meta: BTreeMap<String, String>,
}

/// Why a service cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Name(String),
    TooMany(&'static str, usize, usize),
    TooLong(&'static str, usize),
    Full,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Name(name) => write!(
                f,
                "service name {name:?} is not valid: 1 to {MAX_NAME} (MAX_NAME) letters, digits and dashes, starting with a letter or digit"
            ),
            Refused::TooMany(what, n, limit) => {
                write!(f, "{n} {what} are more than the limit of {limit}")
            }
            Refused::TooLong(what, n) => write!(
                f,
                "a {what} of {n} bytes is longer than the limit of {MAX_TEXT} (MAX_TEXT)"
            ),
            Refused::Full => write!(
                f,
                "the registry holds {MAX_SERVICES} services (MAX_SERVICES): no more are registered"
            ),
        }
    }
}

impl std::error::Error for Refused {}

impl Registration {
    /// Whether it is within the bounds, with a name Nomad accepts.
    pub fn check(&self) -> Result<(), Refused> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= MAX_NAME
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !self.name.starts_with('-');
        if !name_ok {
            return Err(Refused::Name(self.name.clone()));
        }
        if self.tags.len() > MAX_TAGS {
            return Err(Refused::TooMany(
                "tags (MAX_TAGS)",
                self.tags.len(),
                MAX_TAGS,
            ));
        }
        if self.meta.len() > MAX_META {
            return Err(Refused::TooMany(
                "meta entries (MAX_META)",
                self.meta.len(),
                MAX_META,
            ));
        }
        let texts = self
            .tags
            .iter()
            .map(|t| ("tag", t))
            .chain(
                self.meta
                    .iter()
                    .flat_map(|(k, v)| [("meta key", k), ("meta value", v)]),
            )
            .chain([("address", &self.address)]);
        for (what, text) in texts {
            if text.len() > MAX_TEXT {
                return Err(Refused::TooLong(what, text.len()));
            }
        }
        Ok(())
    }

    /// What a template sees of it.
    pub fn for_template(&self) -> crate::nomad_template::NomadService {
        crate::nomad_template::NomadService {
            id: self.id.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            node_id: self.node_id.clone(),
            datacenter: self.datacenter.clone(),
            address: self.address.clone(),
            port: self.port,
            tags: self.tags.clone(),
            job_id: self.job_id.clone(),
            alloc_id: self.alloc_id.clone(),
        }
    }
}

/// The registry's face to the agent loop: this host's registrations, set
/// each turn, and the other hosts', set by the cluster's watch.
#[derive(Debug, Default)]
pub struct Registry {
    local: BTreeMap<String, Registration>,
    /// Other hosts' registrations by ID (in a cluster).
    remote: BTreeMap<String, Registration>,
    /// Counts the changes of [`Registry::all`]: a template that read the
    /// registry at an older one renders again.
    generation: u64,
}

impl Registry {
    /// Makes `wanted` this host's registrations: those within bounds, up
    /// to [`MAX_SERVICES`] in all. The ones refused, with why (the caller
    /// tells their tasks); and whether anything changed.
    pub fn sync_local(
        &mut self,
        wanted: Vec<Registration>,
    ) -> (bool, Vec<(Registration, Refused)>) {
        let mut refused = Vec::new();
        let mut local = BTreeMap::new();
        let room = MAX_SERVICES.saturating_sub(self.remote.len());
        for r in wanted {
            if let Err(why) = r.check() {
                refused.push((r, why));
            } else if local.len() >= room && !local.contains_key(&r.id) {
                refused.push((r, Refused::Full));
            } else {
                local.insert(r.id.clone(), r);
            }
        }
        let changed = local != self.local;
        if changed {
            self.local = local;
            self.generation += 1;
        }
        (changed, refused)
    }

    /// Makes `others` the other hosts' registrations: at most as many as
    /// leave room for this host's, within [`MAX_SERVICES`]. True if
    /// anything changed.
    pub fn set_remote(&mut self, others: BTreeMap<String, Registration>) -> bool {
        let room = MAX_SERVICES.saturating_sub(self.local.len());
        let others: BTreeMap<String, Registration> = order::map(
            others
                .into_iter()
                .filter(|(id, r)| !self.local.contains_key(id) && r.check().is_ok())
                .take(room),
        );
        if others == self.remote {
            return false;
        }
        self.remote = others;
        self.generation += 1;
        true
    }

    /// This host's registrations, by ID.
    pub fn local(&self) -> &BTreeMap<String, Registration> {
        &self.local
    }

    /// Every registration, this host's and the others', sorted by name,
    /// then ID.
    pub fn all(&self) -> Vec<&Registration> {
        let mut all: Vec<&Registration> = self.local.values().chain(self.remote.values()).collect();
        order::sort_by(&mut all, |a, b| (&a.name, &a.id).cmp(&(&b.name, &b.id)));
        all
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn registration(id: &str, name: &str) -> Registration {
        Registration {
            id: id.into(),
            name: name.into(),
            namespace: "default".into(),
            node_id: "n".into(),
            datacenter: "dc1".into(),
            job_id: "j".into(),
            alloc_id: "a".into(),
            task: String::new(),
            address: "10.0.0.1".into(),
            port: 80,
            tags: Vec::new(),
            meta: BTreeMap::new(),
        }
    }

    #[test]
    fn a_sync_changes_the_generation_only_when_the_services_change() {
        let mut registry = Registry::default();
        let (changed, refused) = registry.sync_local(vec![registration("a", "web")]);
        assert!(changed && refused.is_empty());
        assert_eq!(registry.generation(), 1);
        assert!(!registry.sync_local(vec![registration("a", "web")]).0);
        assert_eq!(registry.generation(), 1);
        assert!(registry.sync_local(Vec::new()).0);
        assert!(registry.all().is_empty());
        assert_eq!(registry.generation(), 2);
    }

    #[test]
    fn every_host_s_services_are_listed_by_name() {
        let mut registry = Registry::default();
        registry.sync_local(vec![registration("x", "web")]);
        assert!(registry.set_remote(BTreeMap::from([("y".to_string(), registration("y", "db"))])));
        let names: Vec<&str> = registry.all().iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["db", "web"]);
        assert!(!registry.set_remote(BTreeMap::from([("y".to_string(), registration("y", "db"))])));
    }

    #[test]
    fn names_past_max_name_or_not_rfc_1123_are_refused() {
        let mut registry = Registry::default();
        let long = "a".repeat(MAX_NAME + 1);
        let (_, refused) = registry.sync_local(vec![
            registration("1", &long),
            registration("2", "under_score"),
            registration("3", &"a".repeat(MAX_NAME)),
        ]);
        assert_eq!(refused.len(), 2);
        assert!(refused[0].1.to_string().contains("MAX_NAME"));
        assert_eq!(registry.all().len(), 1);
    }

    #[test]
    fn tags_meta_and_texts_past_their_bounds_are_refused() {
        let mut tags = registration("t", "web");
        tags.tags = vec!["x".into(); MAX_TAGS + 1];
        assert!(tags.check().unwrap_err().to_string().contains("MAX_TAGS"));
        tags.tags.pop();
        assert!(tags.check().is_ok());
        let mut meta = registration("m", "web");
        meta.meta = (0..=MAX_META)
            .map(|i| (i.to_string(), String::new()))
            .collect();
        assert!(meta.check().unwrap_err().to_string().contains("MAX_META"));
        let mut text = registration("x", "web");
        text.tags = vec!["x".repeat(MAX_TEXT + 1)];
        assert!(text.check().unwrap_err().to_string().contains("MAX_TEXT"));
    }

    #[test]
    fn the_registry_holds_at_most_max_services() {
        let mut registry = Registry::default();
        registry.set_remote(BTreeMap::from([("r".to_string(), registration("r", "db"))]));
        let wanted = (0..MAX_SERVICES)
            .map(|i| registration(&format!("{i:05}"), "web"))
            .collect();
        let (_, refused) = registry.sync_local(wanted);
        assert_eq!(refused.len(), 1);
        assert!(refused[0].1.to_string().contains("MAX_SERVICES"));
        assert_eq!(registry.all().len(), MAX_SERVICES);
    }
}
