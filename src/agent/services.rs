//! The loop's side of the service registry (`crate::services`): at the
//! end of each turn, the job runner's registrations go to the registry
//! (and, in a cluster, to the `service-sync` thread with the node's
//! lease); the registry's contents go back to the job runner when they
//! changed, for the templates that read them; and `service list`/`service
//! info` are answered from it.

use crate::api::{ReplyTo, Response};
use crate::call::{CallError, ErrorKind};
use crate::services::cluster::ServiceSync;
use crate::services::Registration;

use super::Agent;

impl Agent {
    /// Brings the registry up to date with what runs, and the templates
    /// that read it with the registry.
    pub(super) fn sync_services(&mut self) {
        if let Some(wanted) = self.allocs.service_registrations() {
            let (changed, refused) = self.services.sync_local(wanted);
            self.allocs.services_refused(refused);
            if changed {
                self.hand_services_over();
            }
        }
        let generation = self.services.generation();
        if generation != self.allocs.services_generation() {
            let all = self
                .services
                .all()
                .into_iter()
                .map(Registration::for_template)
                .collect();
            self.allocs.set_services(all, generation);
        }
        self.allocs.refresh_service_templates();
    }

    /// In a cluster: starts the thread that keeps this host's services in
    /// etcd and watches the others'.
    pub(super) fn start_service_sync(&mut self) -> std::io::Result<()> {
        if let Some(cluster) = &self.cluster {
            let sync = ServiceSync::start(cluster.member.etcd(), &cluster.prefix, &cluster.node)?;
            self.service_sync = Some(sync);
        }
        Ok(())
    }

    /// The node's lease, from its member thread: this host's services
    /// are put again on a new one.
    pub(super) fn service_lease(&mut self, lease: i64) {
        if lease != self.service_lease {
            self.service_lease = lease;
            self.hand_services_over();
        }
    }

    fn hand_services_over(&self) {
        if let Some(sync) = &self.service_sync {
            sync.set(self.services.local().clone(), self.service_lease);
        }
    }

    /// `service list` (no name) and `service info NAME`: the registered
    /// instances, sorted by name, then ID.
    pub(super) fn service_call(&self, name: Option<String>, reply: ReplyTo) {
        let found: Vec<Registration> = self
            .services
            .all()
            .into_iter()
            .filter(|r| name.as_ref().map_or(true, |n| &r.name == n))
            .cloned()
            .collect();
        if let (Some(name), true) = (&name, found.is_empty()) {
            return reply.send(Err(CallError::new(
                ErrorKind::NotFound,
                format!("no service {name:?} is registered"),
            )));
        }
        reply.send(Ok(Response::Services(found)));
    }
}
