//! Job specs: `job "<name>" { group "<name>" { ... } }`, in Nomad's format.
//!
//! A job's `type` says what a task's exit means: a `service` (or `system`)
//! task is restarted on any exit, a `batch` (or `sysbatch`) task that exits
//! 0 is done; it also picks the default restart policy, as in Nomad.
//! A group holds its instance count, restart policy (`restart.rs`), the
//! volumes its tasks may mount (`group_volume.rs`, checked against the
//! group's count), services, and tasks (see `task.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use hcl::{Block, Body, Pos};

use super::constraint::{decode_placement, write_placement, Constraint, Inherited};
use super::decode::{Decoder, Fields};
use super::encode::Writer;
use super::group_volume::{decode_group_volume, write_group_volume, GroupVolume};
use super::job_type::JobType;
use super::network::{decode_network, write_network, Network};
use super::periodic::{decode_schedule, write_schedule, Parameterized, Periodic};
use super::restart::{decode_restart, write_restart, Restart};
use super::service::{decode_service, write_service, Service};
use super::task::{decode_task, write_task, OfGroup, Task};
use super::variables::JobInputs;
use super::{Decoded, Invalid, Kept};

/// Top-level blocks of Nomad job files (HCL2 variables) that csi-agent
/// ignores in HCL's JSON syntax; in the native syntax they are read
/// (`variables.rs`) and taken out before decoding.
pub(super) const FILE_IGNORED: &[&str] = &["locals", "variable", "variables"];

/// Keys of Nomad's `job` block that csi-agent ignores.
pub(super) const JOB_IGNORED: &[&str] = &[
    "affinity",
    "all_at_once",
    "consul",
    "consul_token",
    "datacenters",
    "id",
    "migrate",
    "multiregion",
    "name",
    "namespace",
    "node_pool",
    "priority",
    "region",
    "reschedule",
    "spread",
    "ui",
    "update",
    "vault",
    "vault_token",
];

/// Keys of Nomad's `group` block that csi-agent ignores.
pub(super) const GROUP_IGNORED: &[&str] = &[
    "affinity",
    "consul",
    "disconnect",
    "ephemeral_disk",
    "max_client_disconnect",
    "migrate",
    "prevent_reschedule_on_lost",
    "reschedule",
    "scaling",
    "shutdown_delay",
    "spread",
    "stop_after_client_disconnect",
    "update",
    "vault",
];

/// A job: its name and its groups.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub name: String,
    pub job_type: JobType,
    pub groups: Vec<Group>,
    /// The job block's `meta` and `constraint`s, which every group
    /// inherits ([`Group::inherited`]).
    pub placement: Inherited,
    /// `periodic`: the job launches children on a schedule, never runs.
    pub periodic: Option<Box<Periodic>>,
    /// `parameterized`: the job launches a child per `job dispatch`.
    pub parameterized: Option<Parameterized>,
    /// Nomad keys csi-agent does not act on, as written, from the file's
    /// top level and the job block.
    pub ignored: Vec<Kept>,
}

/// A group of tasks run together, `count` times.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub name: String,
    /// The job's type, which every task of the group follows.
    pub job_type: JobType,
    /// How many instances (allocations) to run; 1 unless set (always 1
    /// for `system` and `sysbatch` jobs).
    pub count: u64,
    /// The group's policy; each task has its own in [`Task::restart`].
    pub restart: Restart,
    /// The volumes tasks may mount, by alias, in file order.
    pub volumes: Vec<GroupVolume>,
    /// Registered while any task of the alloc runs when their provider is
    /// `nomad` (`services/`); their checks are not run.
    pub services: Vec<Service>,
    /// `network { mode port "label" { static to } }`: the ports docker
    /// tasks name in their `ports`.
    pub network: Option<Network>,
    pub tasks: Vec<Task>,
    /// `max_run_duration` (batch and sysbatch jobs only): the alloc is
    /// stopped once it has run this long since it was placed.
    pub max_run_duration: Option<Duration>,
    /// The group block's own `meta` and `constraint`s.
    pub placement: Inherited,
    /// The job block's, a copy of [`Job::placement`], so that an alloc's
    /// group holds all that applies to it.
    pub inherited: Inherited,
    pub ignored: Vec<Kept>,
}

impl Group {
    /// The volume with this alias.
    pub fn volume(&self, alias: &str) -> Option<&GroupVolume> {
        self.volumes.iter().find(|v| v.alias == alias)
    }

    /// Task `task`'s `meta` as Nomad merges it: the job's, then the
    /// group's, then the task's own, a later key replacing an earlier.
    pub fn task_meta(&self, task: &Task) -> BTreeMap<String, String> {
        let mut meta = self.inherited.meta.clone();
        meta.extend(self.placement.meta.clone());
        meta.extend(task.meta.clone());
        meta
    }

    /// Every constraint an alloc of the group must meet: the job's, the
    /// group's, then each task's.
    pub fn constraints(&self) -> impl Iterator<Item = &Constraint> {
        self.inherited
            .constraints
            .iter()
            .chain(&self.placement.constraints)
            .chain(self.tasks.iter().flat_map(|t| &t.constraints))
    }
}

impl Job {
    /// Decodes and validates a job file; `file` names it in messages.
    pub fn decode(src: &str, file: &str) -> Result<Decoded<Job>, Invalid> {
        Job::decode_with(src, file, &JobInputs::default())
    }

    /// Decodes a job file whose variables get their values from `inputs`.
    pub fn decode_with(src: &str, file: &str, inputs: &JobInputs) -> Result<Decoded<Job>, Invalid> {
        Decoder::run_with(src, file, Some(inputs), decode_job)
    }

    /// Adds `meta` at job level, over what the job block says, as Nomad's
    /// `job dispatch -meta` does: every group inherits it, and a group's or
    /// task's own keys still win.
    pub fn extend_meta(&mut self, meta: &BTreeMap<String, String>) {
        self.placement.meta.extend(meta.clone());
        for group in &mut self.groups {
            group.inherited.meta = self.placement.meta.clone();
        }
    }

    /// Whether the job is a periodic or parameterized parent, which runs
    /// nothing itself and launches children.
    pub fn launches_children(&self) -> bool {
        self.periodic.is_some() || self.parameterized.is_some()
    }

    /// The job as HCL that decodes to it, environment and mount flags
    /// included.
    pub fn to_hcl(&self) -> String {
        let mut w = Writer::new();
        let (top, inside): (Vec<Kept>, Vec<Kept>) = self
            .ignored
            .iter()
            .cloned()
            .partition(|kept| FILE_IGNORED.contains(&kept.name.as_str()));
        w.kept(&top);
        w.open("job", Some(&self.name));
        w.string("type", self.job_type.as_str());
        write_placement(&mut w, &self.placement);
        w.kept(&inside);
        write_schedule(
            &mut w,
            self.periodic.as_deref(),
            self.parameterized.as_ref(),
        );
        for group in &self.groups {
            write_group(&mut w, group);
        }
        w.close();
        w.finish()
    }
}

fn decode_job(dec: &Decoder<'_>, body: &Body) -> Job {
    let mut f = dec.top(body, "the job file");
    let mut ignored = f.ignore(FILE_IGNORED);
    let jobs = f.labeled_blocks("job");
    f.finish();
    let Some(&(block, ref name)) = jobs.first() else {
        dec.error(
            first_item_pos(body),
            "a job file needs a job block: job \"NAME\" { ... }",
        );
        return Job {
            name: String::new(),
            job_type: JobType::Service,
            groups: Vec::new(),
            placement: Inherited::default(),
            periodic: None,
            parameterized: None,
            ignored,
        };
    };
    for (extra, _) in &jobs[1..] {
        dec.error(
            extra.kind.span.start,
            format!(
                "a job file holds one job, and job {name:?} is declared at {}",
                block.kind.span.start
            ),
        );
    }
    dec.check_id(block.labels[0].span.start, "job ID", name);
    let mut j = f.labeled(block, name);
    let job_type = j.parsed("type").unwrap_or(JobType::Service);
    let placement = decode_placement(&mut j);
    let (periodic, parameterized) = decode_schedule(&mut j, job_type);
    let mut groups = Vec::new();
    for (group, group_name) in j.labeled_blocks("group") {
        groups.push(decode_group(&j, group, group_name, job_type, &placement));
    }
    if groups.is_empty() {
        j.error(j.pos(), format!("{} needs at least one group", j.what()));
    }
    ignored.extend(j.ignore(JOB_IGNORED));
    j.finish();
    Job {
        name: name.clone(),
        job_type,
        groups,
        placement,
        periodic,
        parameterized,
        ignored,
    }
}

/// Where "the file has no job" is reported: its first item, or its start.
fn first_item_pos(body: &Body) -> Pos {
    body.items
        .first()
        .map_or(Pos::new(1, 1), |item| item.span().start)
}

fn decode_group(
    f: &Fields<'_>,
    block: &Block,
    name: String,
    job_type: JobType,
    inherited: &Inherited,
) -> Group {
    let mut g = f.labeled(block, &name);
    let placement = decode_placement(&mut g);
    g.dec()
        .check_id(block.labels[0].span.start, "group name", &name);
    let count_at = g.u64_at("count");
    let mut count = count_at.map_or(1, |(count, _)| count);
    if let (JobType::System | JobType::Sysbatch, Some((_, pos))) = (job_type, count_at) {
        if count > 1 {
            // Nomad's rule for system jobs; a sysbatch job, like a system
            // one, runs once per node, and this agent is one node.
            g.error(
                pos,
                format!(
                    "{} has count = {count}, but a {job_type} job runs one instance per node: remove count or set it to 1",
                    g.what()
                ),
            );
        }
        count = count.min(1);
    }
    let defaults = Restart::for_type(job_type);
    let restart = g
        .block("restart")
        .map(|block| decode_restart(&mut g.nested(block), &defaults))
        .unwrap_or(defaults);
    let mut volumes = Vec::new();
    for (block, alias) in g.labeled_blocks("volume") {
        let mut v = g.labeled(block, &alias);
        if alias.is_empty() {
            v.error(block.labels[0].span.start, "volume name must not be empty");
        }
        volumes.push(decode_group_volume(&mut v, alias, count, g.what()));
    }
    let services = g
        .blocks("service")
        .into_iter()
        .map(|block| decode_service(&mut g.nested(block)))
        .collect();
    let network_block = g.block("network");
    let network = network_block.map(|block| decode_network(&mut g.nested(block)));
    let max_run_duration = decode_max_run_duration(&mut g, job_type);
    let mut tasks = Vec::new();
    for (block, task_name) in g.labeled_blocks("task") {
        let mut t = g.labeled(block, &task_name);
        g.dec()
            .check_id(block.labels[0].span.start, "task name", &task_name);
        let of_group = OfGroup {
            volumes: &volumes,
            what: g.what(),
            restart: &restart,
            network: network.as_ref(),
        };
        tasks.push(decode_task(&mut t, task_name, &of_group));
    }
    if tasks.is_empty() {
        g.error(g.pos(), format!("{} needs at least one task", g.what()));
    }
    // A network namespace of the agent's making is not built: an exec or
    // raw_exec task runs in the host's network, as in Nomad's host mode.
    if let (Some(block), Some(network)) = (network_block, &network) {
        let host = network.mode.is_empty() || network.mode == "host";
        if !host && tasks.iter().any(|t| t.docker.is_none()) {
            let pos = block
                .body
                .attribute("mode")
                .map_or(block.kind.span.start, |a| a.value.pos());
            g.error(
                pos,
                format!(
                    "network mode {:?} in {} is not supported: csi-agent runs exec and raw_exec tasks in the host's network (mode = \"host\")",
                    network.mode,
                    g.what()
                ),
            );
        }
    }
    // One node holds a static port for one alloc at a time: the rest of
    // the count waits, as Nomad's scheduler fails to place them.
    if let (Some(block), true) = (network_block, count > 1) {
        let fixed = block
            .body
            .blocks_named("port")
            .find_map(|port| Some((port.body.attribute("static")?.value.pos(), port.label(0)?)));
        if let Some((at, label)) = fixed {
            g.dec().warn(
                at,
                format!(
                    "{} has count = {count} and a static port {label:?}: this node runs one of its allocs at a time, and the others wait for the port (\"network: reserved port collision\"), as Nomad's scheduler places one per node",
                    g.what()
                ),
            );
        }
    }
    let ignored = g.ignore(GROUP_IGNORED);
    g.finish();
    Group {
        name,
        job_type,
        count,
        restart,
        volumes,
        services,
        network,
        tasks,
        max_run_duration,
        placement,
        inherited: inherited.clone(),
        ignored,
    }
}

/// A group's `max_run_duration`: Nomad bounds only batch and sysbatch
/// allocs with it, so in a service or system job, which it would not
/// bound, it is refused rather than dropped.
fn decode_max_run_duration(g: &mut Fields<'_>, job_type: JobType) -> Option<Duration> {
    let (text, pos) = g.string_at("max_run_duration")?;
    let value = match crate::units::parse_duration(&text) {
        Ok(value) => value,
        Err(err) => {
            g.error(pos, format!("\"max_run_duration\" in {}: {err}", g.what()));
            return None;
        }
    };
    if !job_type.runs_to_completion() {
        g.error(
            pos,
            format!(
                "max_run_duration in {} bounds batch and sysbatch jobs only, and this is a {job_type} job",
                g.what()
            ),
        );
        return None;
    }
    if value.is_zero() {
        g.error(
            pos,
            format!("max_run_duration in {} must be longer than zero", g.what()),
        );
        return None;
    }
    Some(value)
}

fn write_group(w: &mut Writer, group: &Group) {
    w.open("group", Some(&group.name));
    w.plain("count", group.count);
    if let Some(bound) = group.max_run_duration {
        w.duration("max_run_duration", bound);
    }
    write_placement(w, &group.placement);
    write_restart(w, &group.restart);
    for volume in &group.volumes {
        write_group_volume(w, volume);
    }
    for service in &group.services {
        write_service(w, service);
    }
    if let Some(network) = &group.network {
        write_network(w, network);
    }
    for task in &group.tasks {
        write_task(w, task);
    }
    w.kept(&group.ignored);
    w.close();
}
