//! Placement by resources, as Nomad's scheduler does on one node.
//!
//! The node is fingerprinted at start and on SIGHUP ([`fingerprint`]):
//! its memory is `/proc/meminfo`'s `MemTotal`, its CPU the count of
//! `/proc/cpuinfo`'s processors times the MHz of the first one
//! (`/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq` when present,
//! else `/proc/cpuinfo`'s `cpu MHz`; when neither gives a number, as in
//! some VMs, Nomad's fallback of 1000 MHz per core, logged). The agent
//! config's `client { cpu_total_compute memory_total_mb }` override the
//! fingerprint, and `client { reserved { cpu memory } }` is kept back.
//!
//! Each alloc asks for the sum of its tasks' `resources`: `cpu` (MHz;
//! `cores` count as that many cores' MHz instead), `memory` (MiB, not
//! `memory_max`) and `cores`; a task without them asks for Nomad's
//! defaults, 100 MHz and 300 MiB. (That is for placement only: the cgroup
//! of a task without `resources` stays unlimited.)
//!
//! A pending alloc is placed before it claims anything: it must fit next to
//! every live alloc already placed (running, stopping, or pending and
//! placed), checked per dimension in Nomad's order (`cpu`, `cores`,
//! `memory`, as its `ComparableResources.Superset`). One that does not fit
//! stays pending with Nomad's reason, `Dimension memory exhausted`, and
//! allocs waiting are placed in creation order as room frees. An alloc that
//! could not fit on the empty node is refused at `job run`, as is a job
//! with more allocs than `client { max_allocs_per_job }`.
//!
//! A round of placement runs when what it depends on changed: the allocs
//! waiting, the allocs holding room (and so ports), the `client` block.
//! Only a dynamic port that a process outside the agent holds can free
//! unseen, so an alloc waiting for one is tried again every
//! [`PORTS_RETRY`]; otherwise a loop turn costs no binds at all, however
//! long an alloc waits.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeSet;
use std::fs;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use super::ports::{self, PortsBlocked};
use super::{invalid, Alloc, AllocStatus, Allocs};
use crate::call::CallError;
use crate::spec::{ClientConfig, Group, Job, Task};

/// Nomad's `cpu` of a task without one, MHz.
pub const DEFAULT_TASK_CPU: u64 = 100;
/// Nomad's `memory` of a task without one, MiB.
pub const DEFAULT_TASK_MEMORY: u64 = 300;
/// Nomad's MHz per core when the CPU's frequency cannot be read
/// (its cpu fingerprinter's `defaultCPUTicks`).
pub const FALLBACK_MHZ: u64 = 1000;
/// How often an alloc waiting for a dynamic port looks again while the
/// agent's own allocs stay as they were.
pub const PORTS_RETRY: Duration = Duration::from_secs(2);

/// Amounts of each placement dimension: MHz, MiB and whole cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu: u64,
    pub memory: u64,
    pub cores: u64,
}

impl Amounts {
    fn add(self, other: Amounts) -> Amounts {
        Amounts {
            cpu: self.cpu.saturating_add(other.cpu),
            memory: self.memory.saturating_add(other.memory),
            cores: self.cores.saturating_add(other.cores),
        }
    }
}

/// What the node has, fingerprinted or from the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// Every core's MHz together.
    pub cpu: u64,
    /// MiB.
    pub memory: u64,
    pub cores: u64,
    /// The MHz of one core, which a task's `cores` count at.
    pub mhz_per_core: u64,
}

impl Default for Node {
    /// Before any fingerprint: room for anything.
    fn default() -> Node {
        Node {
            cpu: u64::MAX,
            memory: u64::MAX,
            cores: u64::MAX,
            mhz_per_core: FALLBACK_MHZ,
        }
    }
}

/// The node and what the agent config keeps back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    pub node: Node,
    pub client: ClientConfig,
    /// The host's address in the ports' variables, found with the node's
    /// fingerprint ([`ports::host_ip`]); 127.0.0.1 before it.
    pub host_ip: Option<std::net::IpAddr>,
    /// The last round of placement; a new `Placement` (a new `client`
    /// block) has none, so its first turn places.
    pub last_round: Option<Round>,
}

/// What a round of placement saw when it ended, and when it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Round {
    seen: View,
    at: Instant,
}

/// What placement depends on among the allocs: which wait, which hold
/// room (a hash of their ids), and whether one waits for a dynamic port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct View {
    allocs: u64,
    waits_for_a_port: bool,
}

impl Round {
    /// Whether a round seeing `seen` at `now` can find anything this one
    /// did not.
    fn due(last: Option<Round>, seen: View, now: Instant) -> bool {
        match last {
            None => true,
            Some(last) if last.seen != seen => true,
            Some(last) => seen.waits_for_a_port && now >= last.at + PORTS_RETRY,
        }
    }
}

impl Placement {
    /// The `client` block's range of dynamic ports.
    fn dynamic_range(&self) -> (u16, u16) {
        (self.client.min_dynamic_port, self.client.max_dynamic_port)
    }

    /// What allocs may have: the node less `reserved`.
    pub fn available(&self) -> Amounts {
        Amounts {
            cpu: self.node.cpu.saturating_sub(self.client.reserved_cpu),
            memory: self.node.memory.saturating_sub(self.client.reserved_memory),
            cores: self.node.cores,
        }
    }

    /// What one task asks for.
    pub fn task_ask(&self, task: &Task) -> Amounts {
        let r = task.resources.as_ref();
        let cores = r.and_then(|r| r.cores).unwrap_or(0);
        let cpu = if cores > 0 {
            cores.saturating_mul(self.node.mhz_per_core)
        } else {
            r.and_then(|r| r.cpu).unwrap_or(DEFAULT_TASK_CPU)
        };
        Amounts {
            cpu,
            memory: r.and_then(|r| r.memory).unwrap_or(DEFAULT_TASK_MEMORY),
            cores,
        }
    }

    /// What an alloc of `group` asks for: the sum of its tasks'.
    pub fn ask(&self, group: &Group) -> Amounts {
        group
            .tasks
            .iter()
            .fold(Amounts::default(), |sum, t| sum.add(self.task_ask(t)))
    }
}

/// The first dimension in which `used` plus `ask` exceeds `available`, in
/// Nomad's order: `cpu`, `cores`, `memory`.
pub fn exhausted(available: Amounts, used: Amounts, ask: Amounts) -> Option<&'static str> {
    let want = used.add(ask);
    if want.cpu > available.cpu {
        Some("cpu")
    } else if ask.cores > 0 && want.cores > available.cores {
        Some("cores")
    } else if want.memory > available.memory {
        Some("memory")
    } else {
        None
    }
}

/// The pending reason of an alloc that does not fit, in Nomad's words.
pub fn exhausted_message(dimension: &str) -> String {
    format!("Dimension {dimension} exhausted")
}

/// MiB of a `/proc/meminfo` text's `MemTotal`.
pub fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    Some(kib / 1024)
}

/// A `/proc/cpuinfo` text's count of processors, and the `cpu MHz` of
/// the first one that says it.
pub fn parse_cpuinfo(text: &str) -> (u64, Option<u64>) {
    let mut cores = 0;
    let mut mhz = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "processor" => cores += 1,
            "cpu MHz" if mhz.is_none() => {
                mhz = value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|m| m.is_finite() && *m >= 1.0)
                    .map(|m| m.round() as u64);
            }
            _ => {}
        }
    }
    (cores, mhz)
}

/// MHz of a `cpuinfo_max_freq` text (kHz).
pub fn parse_max_freq(text: &str) -> Option<u64> {
    let khz: u64 = text.trim().parse().ok()?;
    Some(khz / 1000).filter(|mhz| *mhz > 0)
}

/// Fingerprints this node, with the config's overrides.
pub fn fingerprint(client: &ClientConfig) -> Node {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (mut cores, cpuinfo_mhz) = parse_cpuinfo(&cpuinfo);
    if cores == 0 {
        cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    }
    let max_freq = fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        .ok()
        .and_then(|t| parse_max_freq(&t));
    let mhz = max_freq.or(cpuinfo_mhz).unwrap_or_else(|| {
        log::warn!(
            "Cannot read the CPU's frequency; counting {FALLBACK_MHZ} MHz per core, as Nomad does (set client {{ cpu_total_compute }} to say otherwise)"
        );
        FALLBACK_MHZ
    });
    let memory = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_meminfo(&t));
    let node = Node {
        cpu: client
            .cpu_total_compute
            .unwrap_or(cores.saturating_mul(mhz)),
        memory: client.memory_total_mb.or(memory).unwrap_or_else(|| {
            log::warn!("Cannot read MemTotal of /proc/meminfo; memory is not counted");
            u64::MAX
        }),
        cores,
        mhz_per_core: mhz,
    };
    log::info!(
        "Node: {} MHz ({cores} cores), {} MiB; reserved {} MHz, {} MiB",
        node.cpu,
        node.memory,
        client.reserved_cpu,
        client.reserved_memory
    );
    node
}

/// Whether alloc `a` holds room on the node: placed and not done. (An
/// alloc runs only once placed, and restore counts one that ran as placed;
/// one stopped while it waited never held any.)
fn holds_room(a: &Alloc) -> bool {
    !a.status.is_terminal() && a.placed
}

fn waits_for_room(a: &Alloc) -> bool {
    a.status == AllocStatus::Pending && !a.placed && !a.stop_wanted
}

impl Allocs {
    /// The agent config's `client` block: fingerprints the node again.
    pub fn set_client(&mut self, client: &ClientConfig) {
        self.placement = Placement {
            node: fingerprint(client),
            client: client.clone(),
            host_ip: Some(ports::host_ip()),
            last_round: None,
        };
        self.artifact_limits = super::artifact::ArtifactLimits::from_config(&client.artifact);
    }

    /// The node's capacity, what is kept back, and what live allocs hold.
    pub fn resources(&self) -> (Node, Amounts, Amounts) {
        let used = self
            .allocs
            .values()
            .filter(|a| holds_room(a))
            .fold(Amounts::default(), |sum, a| {
                sum.add(self.placement.ask(&a.group))
            });
        let reserved = Amounts {
            cpu: self.placement.client.reserved_cpu,
            memory: self.placement.client.reserved_memory,
            cores: 0,
        };
        (self.placement.node, reserved, used)
    }

    /// The host ports of the allocs that hold room.
    fn held_ports(&self) -> BTreeSet<u16> {
        order::set(
            self.allocs
                .values()
                .filter(|a| holds_room(a))
                .flat_map(|a| a.ports.iter().map(|p| p.host)),
        )
    }

    /// What placement depends on among the allocs now.
    fn placement_view(&self) -> View {
        let mut hasher = DefaultHasher::new();
        let mut waits_for_a_port = false;
        for a in self.allocs.values() {
            if waits_for_room(a) {
                (0u8, &a.id).hash(&mut hasher);
                waits_for_a_port |= PortsBlocked::is_reason(&a.message);
            } else if holds_room(a) {
                (1u8, &a.id).hash(&mut hasher);
            }
        }
        View {
            allocs: hasher.finish(),
            waits_for_a_port,
        }
    }

    /// When an alloc waiting for a dynamic port looks again, if one does.
    pub(super) fn placement_retry_at(&self) -> Option<Instant> {
        let last = self.placement.last_round?;
        last.seen.waits_for_a_port.then_some(last.at + PORTS_RETRY)
    }

    /// Places the pending allocs that fit, in creation order; those that
    /// do not say why. Returns whether anything changed. A round runs only
    /// when it can find something the last one did not (see the module's
    /// docs).
    pub(super) fn place(&mut self, now: Instant) -> bool {
        self.place_with(now, ports::free_on_host)
    }

    /// [`Allocs::place`], with `free` saying whether a host port is free.
    fn place_with(&mut self, now: Instant, free: impl Fn(u16) -> bool) -> bool {
        if !Round::due(self.placement.last_round, self.placement_view(), now) {
            return false;
        }
        let changed = self.place_round(free);
        self.placement.last_round = Some(Round {
            seen: self.placement_view(),
            at: now,
        });
        changed
    }

    fn place_round(&mut self, free: impl Fn(u16) -> bool) -> bool {
        let available = self.placement.available();
        let (_, _, mut used) = self.resources();
        let mut waiting: Vec<(std::time::SystemTime, u64, String)> = self
            .allocs
            .values()
            .filter(|a| waits_for_room(a))
            .map(|a| (a.created, a.index, a.id.clone()))
            .collect();
        order::sort(&mut waiting);
        let mut held = self.held_ports();
        let mut changed = false;
        for (_, _, id) in waiting {
            let Some(alloc) = self.allocs.get_mut(&id) else {
                continue;
            };
            let ask = self.placement.ask(&alloc.group);
            let fit = match exhausted(available, used, ask) {
                None => ports::allocate(
                    alloc.group.network.as_ref(),
                    self.placement.dynamic_range(),
                    &held,
                    &mut self.jitter,
                    &free,
                )
                .map_err(|blocked| blocked.message()),
                Some(dimension) => Err(exhausted_message(dimension)),
            };
            match fit {
                Ok(alloc_ports) => {
                    used = used.add(ask);
                    held.extend(alloc_ports.iter().map(|p| p.host));
                    alloc.placed = true;
                    if alloc.message.starts_with("Dimension ")
                        || PortsBlocked::is_reason(&alloc.message)
                    {
                        alloc.message.clear();
                    }
                    let shown: Vec<String> = alloc_ports
                        .iter()
                        .map(|p| format!("{}={}", p.label, p.host))
                        .collect();
                    log::info!(
                        "Alloc {id}: placed ({} MHz, {} MiB{}{})",
                        ask.cpu,
                        ask.memory,
                        if shown.is_empty() { "" } else { ", ports " },
                        shown.join(" ")
                    );
                    alloc.ports = alloc_ports;
                    changed = true;
                }
                Err(message) => {
                    if alloc.message != message {
                        log::info!("Alloc {id}: pending: {message}");
                        alloc.message = message;
                        changed = true;
                    }
                }
            }
        }
        changed
    }

    /// Allocs an agent placed before it kept group ports have none: gives
    /// each live one the ports its network asks for, so a task restarted
    /// after the upgrade finds its `NOMAD_PORT_<label>`. A `static` port
    /// is taken as written, even if another alloc of that agent holds it
    /// too (both ran so before); a dynamic one as placement picks it.
    pub(super) fn ports_for_upgraded_allocs(&mut self) {
        let range = self.placement.dynamic_range();
        let mut held = self.held_ports();
        for alloc in self.allocs.values_mut().filter(|a| holds_room(a)) {
            let Some(network) = &alloc.group.network else {
                continue;
            };
            if network.ports.is_empty() || !alloc.ports.is_empty() {
                continue;
            }
            let (fixed, dynamic): (Vec<_>, Vec<_>) = network
                .ports
                .iter()
                .cloned()
                .partition(|p| p.static_port.is_some());
            let mut taken = held.clone();
            taken.extend(fixed.iter().filter_map(|p| p.static_port));
            let dynamic = crate::spec::Network {
                ports: dynamic,
                ..network.clone()
            };
            match ports::allocate(
                Some(&dynamic),
                range,
                &taken,
                &mut self.jitter,
                ports::free_on_host,
            ) {
                Ok(picked) => {
                    let mut all: Vec<ports::AllocPort> = fixed
                        .iter()
                        .filter_map(|p| {
                            Some(ports::AllocPort {
                                label: p.label.clone(),
                                host: p.static_port?,
                            })
                        })
                        .chain(picked)
                        .collect();
                    order::sort_by_key(&mut all, |p| network.ports.iter().position(|n| n.label == p.label));
                    held.extend(all.iter().map(|p| p.host));
                    log::info!(
                        "Alloc {}: given the ports of its group's network, which the agent that placed it did not keep: {}",
                        alloc.id,
                        all.iter()
                            .map(|p| format!("{}={}", p.label, p.host))
                            .collect::<Vec<_>>()
                            .join(" ")
                    );
                    alloc.ports = all;
                }
                Err(blocked) => log::error!(
                    "Alloc {}: no ports for its group's network after the upgrade ({}); a task restarted will not find its NOMAD_PORT_ variables",
                    alloc.id,
                    blocked.message()
                ),
            }
        }
    }

    /// Checks a job against the node at `job run`: no group's `count`, nor
    /// their sum, past `max_allocs_per_job`, and no alloc that could not
    /// fit on the empty node.
    pub(super) fn check_placement(
        &self,
        spec: &Job,
        file: &str,
        hcl: &str,
    ) -> Result<(), CallError> {
        let bound = self.placement.client.max_allocs_per_job;
        let mut total: u64 = 0;
        for group in &spec.groups {
            total = total.saturating_add(group.count);
            if group.count > bound {
                let at = count_pos(hcl, file, &group.name)
                    .map_or(String::new(), |pos| format!(":{pos}"));
                return Err(invalid(format!(
                    "{file}{at}: job {:?} group {:?} has count = {}, more than the agent's max_allocs_per_job = {bound} (client {{ max_allocs_per_job }} in the agent config)",
                    spec.name, group.name, group.count
                )));
            }
            let ask = self.placement.ask(group);
            let available = self.placement.available();
            if let Some(dimension) = exhausted(available, Amounts::default(), ask) {
                let (asked, has, unit) = match dimension {
                    "cpu" => (ask.cpu, available.cpu, "MHz"),
                    "cores" => (ask.cores, available.cores, "cores"),
                    _ => (ask.memory, available.memory, "MiB"),
                };
                return Err(invalid(format!(
                    "{file}: job {:?} group {:?} can never be placed: Dimension {dimension} exhausted: an alloc asks for {asked} {unit}, and the node has {has} {unit} for allocs (after client {{ reserved }})",
                    spec.name, group.name
                )));
            }
        }
        if total > bound {
            return Err(invalid(format!(
                "{file}: job {:?} would have {total} allocs, more than the agent's max_allocs_per_job = {bound} (client {{ max_allocs_per_job }} in the agent config)",
                spec.name
            )));
        }
        Ok(())
    }
}

/// Where group `group`'s `count` is written in the job file, if it can be
/// found.
fn count_pos(hcl: &str, file: &str, group: &str) -> Option<hcl::Pos> {
    let body = hcl::parse_file(hcl, file).ok()?;
    let pos = body
        .blocks_named("job")
        .flat_map(|job| job.body.blocks_named("group"))
        .find(|g| g.label(0) == Some(group))?
        .body
        .attribute("count")
        .map(|attr| attr.value.pos());
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str =
        "MemTotal:        8025444 kB\nMemFree:         1203400 kB\nMemAvailable:    5120000 kB\n";
    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu MHz\t\t: 2800.512\n\nprocessor\t: 1\ncpu MHz\t\t: 1200.000\n";

    #[test]
    fn meminfo_gives_mem_total_in_mib() {
        assert_eq!(parse_meminfo(MEMINFO), Some(7837));
        assert_eq!(parse_meminfo("MemFree: 10 kB\n"), None);
        assert_eq!(parse_meminfo("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn cpuinfo_gives_processors_and_the_first_mhz() {
        assert_eq!(parse_cpuinfo(CPUINFO), (2, Some(2801)));
        // arm64 says no MHz.
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\n";
        assert_eq!(parse_cpuinfo(arm), (2, None));
        assert_eq!(parse_cpuinfo("processor : 0\ncpu MHz : 0.000\n"), (1, None));
        assert_eq!(parse_max_freq("3400000\n"), Some(3400));
        assert_eq!(parse_max_freq("0\n"), None);
        assert_eq!(parse_max_freq("n/a"), None);
    }

    fn amounts(cpu: u64, memory: u64, cores: u64) -> Amounts {
        Amounts { cpu, memory, cores }
    }

    #[test]
    fn a_fit_is_checked_per_dimension_cpu_first() {
        let available = amounts(4000, 1024, 4);
        let none = Amounts::default();
        assert_eq!(exhausted(available, none, amounts(4000, 1024, 0)), None);
        assert_eq!(
            exhausted(available, amounts(100, 800, 0), amounts(100, 256, 0)),
            Some("memory")
        );
        assert_eq!(
            exhausted(available, amounts(3950, 800, 0), amounts(100, 256, 0)),
            Some("cpu")
        );
        assert_eq!(
            exhausted(available, amounts(0, 0, 4), amounts(100, 1, 1)),
            Some("cores")
        );
        // Cores are counted only when asked for.
        assert_eq!(
            exhausted(available, amounts(0, 0, 4), amounts(100, 1, 0)),
            None
        );
        assert_eq!(exhausted_message("memory"), "Dimension memory exhausted");
    }

    fn group(src: &str) -> Group {
        let job = format!("job \"j\" {{\n  group \"g\" {{\n{src}  }}\n}}\n");
        let decoded = Job::decode_with(&job, "j.hcl", &Default::default()).expect("valid job");
        decoded.spec.groups.into_iter().next().expect("a group")
    }

    #[test]
    fn an_alloc_asks_for_its_tasks_resources_or_nomad_s_defaults() {
        let placement = Placement {
            node: Node {
                cpu: 8000,
                memory: 4096,
                cores: 4,
                mhz_per_core: 2000,
            },
            client: ClientConfig {
                reserved_cpu: 500,
                reserved_memory: 512,
                ..ClientConfig::default()
            },
            host_ip: None,
            last_round: None,
        };
        assert_eq!(placement.available(), amounts(7500, 3584, 4));
        let g = group(
            "    task \"a\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n      resources {\n        cpu = 250\n        memory = 256\n      }\n    }\n    task \"b\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n    task \"c\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n      resources {\n        cores = 2\n      }\n    }\n",
        );
        // 250 + 100 (default) + 2 cores at 2000 MHz; 256 + 300 + 300.
        assert_eq!(placement.ask(&g), amounts(4350, 856, 2));
    }

    /// Allocs of an agent whose data dir is a temporary one named for
    /// `test`, with the dynamic port range `range`.
    fn allocs_with_ports(test: &str, range: (u16, u16)) -> (std::path::PathBuf, Allocs) {
        let dir = std::env::temp_dir().join(format!("csi-agent-{test}-{}", std::process::id()));
        let mut allocs = Allocs::new(&dir, &dir.join("control.sock"));
        allocs.placement.client.min_dynamic_port = range.0;
        allocs.placement.client.max_dynamic_port = range.1;
        (dir, allocs)
    }

    #[test]
    fn a_wait_for_a_port_binds_again_only_when_allocs_change_or_the_retry_is_due() {
        let (dir, mut allocs) = allocs_with_ports("placement", (30000, 30009));
        let text = "job \"j\" {\n  group \"g\" {\n    network {\n      port \"http\" {}\n    }\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n";
        let spec = Job::decode_with(text, "j.hcl", &Default::default())
            .expect("valid job")
            .spec;
        let req = super::super::calls::JobFile {
            file: "j.hcl".to_string(),
            hcl: text.to_string(),
            inputs: Default::default(),
            check_index: None,
        };
        let add = |allocs: &mut Allocs, id: &str| {
            let alloc = allocs.new_alloc(
                id,
                &spec,
                &spec.groups[0],
                0,
                &req,
                std::time::SystemTime::now(),
                None,
            );
            allocs.allocs.insert(id.to_string(), alloc);
        };
        add(&mut allocs, "a1");
        // Every port of the range is held outside the agent.
        let binds = std::cell::Cell::new(0);
        let held_outside = |_| {
            binds.set(binds.get() + 1);
            false
        };
        let t0 = Instant::now();
        assert!(allocs.place_with(t0, held_outside));
        assert_eq!(
            allocs.allocs["a1"].message,
            "network: dynamic port selection failed"
        );
        let round = binds.get();
        assert!(round > 0);
        // Turns in which nothing of the agent's changed bind nothing...
        for ms in [0, 1, 500, 1999] {
            assert!(!allocs.place_with(t0 + Duration::from_millis(ms), held_outside));
        }
        assert_eq!(binds.get(), round);
        // ...until the retry is due, and the loop wakes for it.
        assert_eq!(allocs.placement_retry_at(), Some(t0 + PORTS_RETRY));
        assert!(!allocs.place_with(t0 + PORTS_RETRY, held_outside));
        assert_eq!(binds.get(), 2 * round);
        // A new alloc waiting is a change: a round runs at once.
        add(&mut allocs, "a2");
        allocs.place_with(t0 + PORTS_RETRY, held_outside);
        assert_eq!(binds.get(), 4 * round);
        // The port frees: the next retry places the first alloc.
        let t1 = t0 + 2 * PORTS_RETRY;
        assert!(allocs.place_with(t1, |_| true));
        for id in ["a1", "a2"] {
            assert!(allocs.allocs[id].placed, "{id}");
            assert!(allocs.allocs[id].message.is_empty(), "{id}");
        }
        // Nothing waits: no retry.
        assert_eq!(allocs.placement_retry_at(), None);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_alloc_placed_before_ports_were_kept_is_given_them_when_restored() {
        let (dir, mut allocs) = allocs_with_ports("upgrade", (31000, 31999));
        let text = "job \"j\" {\n  group \"g\" {\n    network {\n      port \"http\" {}\n      port \"db\" {\n        static = 5432\n      }\n    }\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n";
        // What an agent before group ports wrote: placed and running, no ports.
        let saved = |id: &str, status: &str| crate::proto::state::Alloc {
            id: id.to_string(),
            job: "j".to_string(),
            group: "g".to_string(),
            status: status.to_string(),
            placed: true,
            job_hcl: text.to_string(),
            job_file: "j.hcl".to_string(),
            ..Default::default()
        };
        let (a, b, done) = ("upgraded-a", "upgraded-b", "upgraded-done");
        allocs.restore(
            &[],
            &[
                saved(a, "running"),
                saved(b, "running"),
                saved(done, "complete"),
            ],
        );
        let ports = |id: &str| -> Vec<(String, u16)> {
            allocs.allocs[id]
                .ports
                .iter()
                .map(|p| (p.label.clone(), p.host))
                .collect()
        };
        let (pa, pb) = (ports(a), ports(b));
        for p in [&pa, &pb] {
            assert_eq!(p.len(), 2, "{p:?}");
            assert_eq!(p[0].0, "http");
            assert!((31000..=31999).contains(&p[0].1), "{p:?}");
            // Both ran with the static port before: both keep it.
            assert_eq!(p[1], ("db".to_string(), 5432));
        }
        assert_ne!(pa[0].1, pb[0].1, "two allocs, one dynamic port");
        // A dead alloc holds nothing and gets nothing.
        assert!(ports(done).is_empty());
        let _ = fs::remove_dir_all(&dir);
    }
}
