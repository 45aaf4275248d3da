//! The loop's side of the job and alloc calls of the control API: each
//! goes to the job runner (`task::Allocs`); a change's answer waits in the
//! gate for the state it made to be durable, a read (and `job plan`, which
//! changes nothing) is answered at once.

use std::time::Instant;

use super::persist::Effect;
use super::Agent;
use crate::api::{ReplyTo, Request, Response};
use crate::call::Reply;

impl Agent {
    /// Answers `request`, one of the job and alloc calls.
    pub(super) fn job_call(&mut self, request: Request, reply: ReplyTo) {
        // Placement sees the volumes as they are now.
        self.allocs
            .set_volume_misfits(self.volumes.topology_misfits(&self.registry));
        let change = match request {
            Request::JobRun(req) => self.allocs.run_job(&req).map(Response::JobRun),
            Request::JobStop { name, purge } => {
                self.allocs.stop_job(&name, purge).map(Response::JobStop)
            }
            Request::JobPeriodicForce { name } => {
                self.allocs.force_periodic(&name).map(Response::JobRun)
            }
            Request::JobDispatch(req) => self.allocs.dispatch(req).map(Response::JobRun),
            Request::AllocControl(req) => self
                .allocs
                .control(&req, Instant::now())
                .map(Response::AllocControl),
            Request::JobStatus { name } => {
                return reply.send(self.allocs.status(&name).map(Response::JobStatus))
            }
            Request::AllocLogs(req) => {
                return reply.send(self.allocs.logs(&req).map(Response::AllocLogs))
            }
            Request::JobInspect { name } => {
                return reply.send(self.allocs.inspect(&name).map(Response::JobInspect))
            }
            // A plan changes nothing: answered at once, as a read.
            Request::JobPlan(req) => {
                return reply.send(self.allocs.plan_job(&req).map(Response::JobPlan))
            }
            other => unreachable!("not a job call: {other:?}"),
        };
        self.gate.hold(Effect::Reply(Reply::new(reply, change)));
    }
}
