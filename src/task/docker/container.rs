//! A docker task as the container the engine is asked to create: its
//! `config`, with `${...}` taken in; the task's dirs at Nomad's paths
//! (`/alloc`, `/local`, `/secrets`); the claimed volumes at their
//! destinations, with their propagation (a block volume as a device); a
//! plugin's two dirs (its socket dir at `mount_dir`, the agent's
//! `csi/<plugin>` at `stage_publish_base_dir`, both `rshared`, so what it
//! mounts there reaches the host); its resources as Nomad maps them
//! (`memory` the hard limit, or the reservation under `memory_max`; `cpu`
//! the CPU shares, and with `cpu_hard_limit` a CFS quota); `pids_limit`,
//! `cpuset_cpus`, `runtime` and `logging` as the engine's own.
//!
//! `privileged = true` on a host where the agent itself lacks some
//! capability (it runs in a container or a sandbox) is refused by the
//! engine ("unable to apply caps"). The agent then grants what a
//! privileged container needs and it holds: every capability of its
//! bounding set that the engine knows, all devices (the host's `/dev` and
//! a device rule for all), the host's `/sys`, and unconfined seccomp and
//! AppArmor; and the task's events say so ([`Privileges`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::docker::{ContainerSpec, Device, Mount, PortBinding};
use crate::mount::Propagation;
use crate::spec::{
    BindPropagation, DockerConfig, DockerLogging, DockerMountType, MemoryMax, Network, Task,
};
use crate::task::env::interpolate;
use crate::task::exec::caps::{last_cap, BY_NUMBER};
use crate::task::root::PluginDir;

/// The capabilities the engines of Debian 12 (20.10) know, by number: the
/// first 38 (through `AUDIT_READ`); they refuse the later ones
/// (`PERFMON`, `BPF`, `CHECKPOINT_RESTORE`).
const CAPABILITIES: &[&str] = BY_NUMBER.split_at(38).0;

/// What a privileged container can be given here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Privileges {
    /// The agent holds every capability: the engine's privileged mode.
    Full,
    /// The agent's bounding set lacks these: privileges are granted one
    /// by one, from what it holds.
    Bounded {
        held: Vec<String>,
        lacked: Vec<String>,
    },
}

impl Privileges {
    /// What this process may grant: its bounding set
    /// (`/proc/self/status`) against every capability the kernel has.
    pub fn of_this_process() -> Privileges {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let bounding = status
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or(0);
        Privileges::from_bounding_set(bounding, last_cap())
    }

    /// From the bounding set's mask and the kernel's last capability.
    fn from_bounding_set(bounding: u64, last: u32) -> Privileges {
        let all = (0..=last.min(63)).fold(0u64, |mask, bit| mask | 1 << bit);
        if bounding & all == all {
            return Privileges::Full;
        }
        let (mut held, mut lacked) = (Vec::new(), Vec::new());
        for (bit, name) in CAPABILITIES.iter().enumerate() {
            if bit as u32 > last {
                break;
            }
            match bounding & (1 << bit) != 0 {
                true => held.push(name.to_string()),
                false => lacked.push(name.to_string()),
            }
        }
        Privileges::Bounded { held, lacked }
    }
}

/// A claimed volume, as a docker task gets it.
pub(in crate::task) struct VolumeBind {
    /// The publish path (or a host volume's dir) on the host.
    pub source: PathBuf,
    /// Where it appears in the container (interpolated).
    pub destination: String,
    pub read_only: bool,
    pub propagation: Propagation,
    /// A block volume: a device file, not a bind.
    pub block: bool,
}

/// Everything a docker task's container is made of.
pub(in crate::task) struct Inputs<'a> {
    pub task: &'a Task,
    pub config: &'a DockerConfig,
    /// What `${...}` may name.
    pub vars: &'a BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    /// `data_dir/alloc/<alloc>/<task>`.
    pub task_dir: &'a Path,
    /// `data_dir/alloc/<alloc>/alloc`, the group's shared dir.
    pub shared_dir: &'a Path,
    pub volumes: Vec<VolumeBind>,
    pub plugin_dirs: Vec<PluginDir>,
    pub labels: BTreeMap<String, String>,
    /// The group's `network { port }` blocks, which `ports` names.
    pub network: Option<&'a Network>,
    pub privileges: &'a Privileges,
    /// The agent config's `volumes { enabled }`: host paths outside the
    /// task dir may be bound.
    pub host_paths: bool,
    /// The MHz of one of the node's cores, which `cpu_hard_limit` turns
    /// `resources.cpu` into a share of.
    pub mhz_per_core: u64,
}

/// The strings of a docker task's config that the runtime interpolates,
/// each with its key.
pub(in crate::task) fn docker_strings(c: &DockerConfig) -> Vec<(&'static str, &str)> {
    let mut out = vec![("image", c.image.as_str())];
    let lists = [("entrypoint", &c.entrypoint), ("args", &c.args)];
    for (key, list) in lists {
        out.extend(list.iter().map(|s| (key, s.as_str())));
    }
    for (key, value) in [
        ("command", &c.command),
        ("hostname", &c.hostname),
        ("work_dir", &c.work_dir),
    ] {
        out.extend(value.as_deref().map(|s| (key, s)));
    }
    for volume in &c.volumes {
        out.push(("volumes", volume.source.as_str()));
        out.push(("volumes", volume.target.as_str()));
    }
    for mount in &c.mounts {
        out.push(("mount.source", mount.source.as_str()));
        out.push(("mount.target", mount.target.as_str()));
    }
    out.extend(c.labels.values().map(|v| ("labels", v.as_str())));
    out
}

/// The CFS period of a container whose `cpu_cfs_period` is not given:
/// the kernel's default, 100 ms.
pub(in crate::task) const DEFAULT_CFS_PERIOD: u64 = 100_000;

/// `cpu_hard_limit`'s period and quota, as Nomad computes them: `cpu` MHz
/// is `cpu / mhz_per_core` cores' worth of each period (Nomad's share of
/// the node's MHz times its cores), at least the kernel's 1 ms.
pub(in crate::task) fn cfs_quota(cpu: u64, config: &DockerConfig, mhz_per_core: u64) -> (u64, u64) {
    let period = config.cpu_cfs_period.unwrap_or(DEFAULT_CFS_PERIOD);
    let quota = period.saturating_mul(cpu) / mhz_per_core.max(1);
    (period, quota.max(crate::spec::MIN_CFS_PERIOD))
}

/// What the task's events say of a log driver whose output the engine
/// cannot read back (`none`, or dual logging's cache turned off): the
/// task's logs stay empty.
fn unreadable_logs(logging: &DockerLogging) -> Option<String> {
    let cache_off = logging.config.get("cache-disabled").map(String::as_str) == Some("true");
    (logging.driver == "none" || cache_off).then(|| {
        format!(
            "logging driver {:?}{}: the engine cannot read the container's output back, so alloc logs shows none of it",
            logging.driver,
            if cache_off { " with cache-disabled" } else { "" }
        )
    })
}

/// The container to create for a task, and what the task's events must
/// say about it.
pub(in crate::task) fn container_spec(
    inputs: Inputs<'_>,
) -> Result<(ContainerSpec, Vec<String>), String> {
    let config = inputs.config;
    let text = |what: &str, value: &str| {
        interpolate(value, inputs.vars).map_err(|e| format!("config.{what}: {e}"))
    };
    let list = |what: &str, values: &[String]| -> Result<Vec<String>, String> {
        values.iter().map(|v| text(what, v)).collect()
    };
    let optional = |what: &str, value: &Option<String>| -> Result<Option<String>, String> {
        value.as_deref().map(|v| text(what, v)).transpose()
    };
    let mut notes = Vec::new();
    // `command` and `args` (or `args` alone, after the image's
    // entrypoint), as Nomad's driver builds the command.
    let mut cmd = optional("command", &config.command)?
        .into_iter()
        .collect::<Vec<_>>();
    cmd.extend(list("args", &config.args)?);
    let mut spec = ContainerSpec {
        image: text("image", &config.image)?,
        entrypoint: (!config.entrypoint.is_empty())
            .then(|| list("entrypoint", &config.entrypoint))
            .transpose()?,
        cmd,
        env: BTreeMap::new(),
        work_dir: optional("work_dir", &config.work_dir)?,
        user: inputs.task.user.clone(),
        hostname: optional("hostname", &config.hostname)?,
        labels: BTreeMap::new(),
        privileged: false,
        cap_add: config.cap_add.clone(),
        cap_drop: config.cap_drop.clone(),
        security_opt: config.security_opt.clone(),
        network_mode: (!config.network_mode.is_empty()).then(|| config.network_mode.clone()),
        ipc_mode: config.ipc_mode.clone().filter(|m| !m.is_empty()),
        pid_mode: config.pid_mode.clone().filter(|m| !m.is_empty()),
        devices: Vec::new(),
        device_cgroup_rules: Vec::new(),
        mounts: Vec::new(),
        memory: None,
        memory_reservation: None,
        cpu_shares: None,
        ports: Vec::new(),
        init: config.init,
        readonly_rootfs: config.readonly_rootfs,
        shm_size: config.shm_size,
        sysctls: config.sysctl.clone(),
        ulimits: config
            .ulimit
            .iter()
            .map(|(name, limit)| ulimit(name, limit))
            .collect::<Result<_, _>>()?,
        extra_hosts: config.extra_hosts.clone(),
        dns: config.dns_servers.clone(),
        mac_address: config.mac_address.clone(),
        userns_mode: config.userns_mode.clone().filter(|m| !m.is_empty()),
        uts_mode: config.uts_mode.clone().filter(|m| !m.is_empty()),
        storage_opt: config.storage_opt.clone(),
        oom_score_adj: config.oom_score_adj,
        dns_search: config.dns_search_domains.clone(),
        dns_options: config.dns_options.clone(),
        group_add: config.group_add.clone(),
        pids_limit: config.pids_limit,
        cpu_quota: None,
        cpuset_cpus: config.cpuset_cpus.clone(),
        runtime: config.runtime.clone(),
        log_config: config
            .logging
            .as_ref()
            .map(|l| (l.driver.clone(), l.config.clone())),
    };
    if let Some(note) = config.logging.as_ref().and_then(unreadable_logs) {
        notes.push(note);
    }
    if config.tty || config.interactive {
        notes.push(
            "tty and interactive are not given to the container: its output is kept as the task's logs, stdout and stderr apart, which a terminal would merge".to_string(),
        );
    }
    spec.env = inputs.env;
    ports(&mut spec, config, inputs.network)?;
    for (key, value) in &config.labels {
        spec.labels.insert(key.clone(), text("labels", value)?);
    }
    // Ours last: a task's labels cannot pass for the agent's.
    spec.labels.extend(inputs.labels);
    // The task's dirs at Nomad's paths.
    for (source, target) in [
        (inputs.shared_dir.to_path_buf(), "/alloc"),
        (inputs.task_dir.join("local"), "/local"),
        (inputs.task_dir.join("secrets"), "/secrets"),
    ] {
        spec.mounts.push(bind(source, target, false, None));
    }
    for mount in &config.mounts {
        let target = text("mount.target", &mount.target)?;
        spec.mounts.push(match mount.mount_type {
            DockerMountType::Bind => {
                let source = host_path(
                    inputs.task_dir,
                    &text("mount.source", &mount.source)?,
                    inputs.host_paths,
                )
                .map_err(|e| format!("config.mount {target:?}: {e}"))?;
                let propagation = mount.propagation.map(propagation_name);
                bind(source, &target, mount.readonly, propagation)
            }
            DockerMountType::Tmpfs => Mount::Tmpfs {
                target,
                size: mount.tmpfs_size,
                mode: mount.tmpfs_mode.map(|m| m as u32),
            },
            DockerMountType::Volume => Mount::Volume {
                source: text("mount.source", &mount.source)?,
                target,
                read_only: mount.readonly,
            },
        });
    }
    for volume in &config.volumes {
        let target = text("volumes", &volume.target)?;
        let source = host_path(
            inputs.task_dir,
            &text("volumes", &volume.source)?,
            inputs.host_paths,
        )
        .map_err(|e| format!("config.volumes {target:?}: {e}"))?;
        let read_only = volume.mode.iter().any(|m| m == "ro");
        let propagation = volume
            .mode
            .iter()
            .find(|m| m.ends_with("private") || m.ends_with("slave") || m.ends_with("shared"))
            .cloned();
        spec.mounts
            .push(bind(source, &target, read_only, propagation));
    }
    for device in &config.devices {
        spec.devices.push(Device {
            host_path: device.host_path.clone(),
            container_path: device.container_path.clone(),
            permissions: device.cgroup_permissions.clone(),
        });
    }
    for volume in inputs.volumes {
        if volume.block {
            spec.devices.push(Device {
                host_path: volume.source.display().to_string(),
                container_path: volume.destination,
                permissions: if volume.read_only { "r" } else { "rw" }.to_string(),
            });
            continue;
        }
        spec.mounts.push(bind(
            volume.source,
            &volume.destination,
            volume.read_only,
            Some(propagation(volume.propagation).to_string()),
        ));
    }
    for dir in inputs.plugin_dirs {
        let target = dir.destination.display().to_string();
        let propagation = propagation(dir.propagation).to_string();
        spec.mounts
            .push(bind(dir.source, &target, false, Some(propagation)));
    }
    if let Some(resources) = &inputs.task.resources {
        let mib = |m: u64| m * 1024 * 1024;
        let max = resources
            .memory_max
            .or(config.memory_hard_limit.map(MemoryMax::MiB));
        match (resources.memory, max) {
            // Nomad's -1: the engine's default, no limit, with `memory`
            // as the reservation.
            (memory, Some(MemoryMax::Unlimited)) => spec.memory_reservation = memory.map(mib),
            (Some(memory), Some(MemoryMax::MiB(max))) if max > memory => {
                spec.memory = Some(mib(max));
                spec.memory_reservation = Some(mib(memory));
            }
            (Some(memory), _) => spec.memory = Some(mib(memory)),
            (None, Some(MemoryMax::MiB(max))) => spec.memory = Some(mib(max)),
            (None, None) => {}
        }
        spec.cpu_shares = resources.cpu;
    }
    if config.cpu_hard_limit {
        let cpu = inputs.task.resources.as_ref().and_then(|r| r.cpu);
        match cpu {
            Some(cpu) => spec.cpu_quota = Some(cfs_quota(cpu, config, inputs.mhz_per_core)),
            None => notes.push(
                "cpu_hard_limit without resources.cpu: the container's CPU time is not bounded"
                    .to_string(),
            ),
        }
    }
    if config.privileged {
        match inputs.privileges {
            Privileges::Full => spec.privileged = true,
            Privileges::Bounded { held, lacked } => {
                spec.cap_add = held.clone();
                spec.security_opt.extend([
                    "seccomp=unconfined".to_string(),
                    "apparmor=unconfined".to_string(),
                ]);
                spec.device_cgroup_rules.push("a *:* rwm".to_string());
                // Private binds: the engine refuses a slave of a mount
                // that is not shared, and a device node made later on the
                // host is in the same devtmpfs anyway.
                spec.mounts.push(bind("/dev".into(), "/dev", false, None));
                spec.mounts.push(bind("/sys".into(), "/sys", false, None));
                notes.push(format!(
                    "privileged: this agent lacks {} in its bounding set, so the engine's privileged mode would fail; granted instead every capability the agent holds, all devices, the host's /dev and /sys, and unconfined seccomp and AppArmor",
                    lacked.join(", ")
                ));
            }
        }
    }
    Ok((spec, notes))
}

/// The group's ports that `config.ports` names, published as Nomad's
/// driver publishes them (TCP and UDP; the host port is the one the agent
/// allocated to the alloc, handed here as the `static` one; the container's
/// is `to`, else the host port), with `NOMAD_PORT_<label>` (the port in the
/// container) in the task's environment.
fn ports(
    spec: &mut ContainerSpec,
    config: &DockerConfig,
    network: Option<&Network>,
) -> Result<(), String> {
    for label in &config.ports {
        let port = network
            .and_then(|n| n.ports.iter().find(|p| p.label == *label))
            .ok_or_else(|| {
                format!("config.ports: no port {label:?} in the group's network block")
            })?;
        let Some(inside) = port.to.filter(|p| *p != 0).or(port.static_port) else {
            return Err(format!(
                "config.ports: port {label:?} has neither `to` nor `static`, so the container's port is unknown"
            ));
        };
        for protocol in ["tcp", "udp"] {
            spec.ports.push(PortBinding {
                host_ip: String::new(),
                host_port: port.static_port.unwrap_or(0),
                container_port: inside,
                protocol: protocol.to_string(),
            });
        }
        spec.env
            .insert(format!("NOMAD_PORT_{label}"), inside.to_string());
    }
    Ok(())
}

/// A `ulimit` entry as Nomad writes it: `"soft:hard"`, or one number for
/// both.
fn ulimit(name: &str, limit: &str) -> Result<(String, i64, i64), String> {
    let number = |text: &str| {
        text.trim().parse::<i64>().map_err(|_| {
            format!("config.ulimit {name:?}: {limit:?} is not \"soft:hard\" or a number")
        })
    };
    let (soft, hard) = match limit.split_once(':') {
        Some((soft, hard)) => (number(soft)?, number(hard)?),
        None => (number(limit)?, number(limit)?),
    };
    if soft > hard {
        return Err(format!(
            "config.ulimit {name:?}: the soft limit {soft} is above the hard limit {hard}"
        ));
    }
    Ok((name.to_string(), soft, hard))
}

/// A host path of the task's: relative ones are in the task dir; others
/// need the agent config's `volumes { enabled = true }`, as in Nomad.
fn host_path(task_dir: &Path, path: &str, host_paths: bool) -> Result<PathBuf, String> {
    let path = Path::new(path);
    if path.is_relative() {
        let joined = task_dir.join(path);
        if path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(format!("{} leaves the task dir", path.display()));
        }
        return Ok(joined);
    }
    match host_paths {
        true => Ok(path.to_path_buf()),
        false => Err(format!(
            "host path {} is outside the task dir, and the agent config's docker volumes are disabled (set `volumes {{ enabled = true }}`)",
            path.display()
        )),
    }
}

fn bind(source: PathBuf, target: &str, read_only: bool, propagation: Option<String>) -> Mount {
    Mount::Bind {
        source: source.display().to_string(),
        target: target.to_string(),
        read_only,
        propagation,
    }
}

/// The engine's name of a propagation: recursive, as Nomad asks for.
fn propagation(p: Propagation) -> &'static str {
    match p {
        Propagation::Private => "rprivate",
        Propagation::HostToTask => "rslave",
        Propagation::Bidirectional => "rshared",
    }
}

fn propagation_name(p: BindPropagation) -> String {
    p.as_str().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bounding_set_is_full_privilege() {
        assert_eq!(
            Privileges::from_bounding_set(0x1ff_ffff_ffff, 40),
            Privileges::Full
        );
    }

    #[test]
    fn a_lacking_bounding_set_grants_what_it_holds() {
        // This sandbox's: every capability but SYS_RESOURCE (24).
        let Privileges::Bounded { held, lacked } =
            Privileges::from_bounding_set(0x1ff_feff_ffff, 40)
        else {
            panic!("not full");
        };
        assert_eq!(lacked, ["SYS_RESOURCE"]);
        assert!(held.contains(&"SYS_ADMIN".to_string()));
        assert!(held.contains(&"AUDIT_READ".to_string()));
        assert_eq!(held.len(), CAPABILITIES.len() - 1);
    }

    #[test]
    fn ulimits_are_soft_and_hard_or_one_number() {
        assert_eq!(
            ulimit("nofile", "1024:4096").unwrap(),
            ("nofile".into(), 1024, 4096)
        );
        assert_eq!(ulimit("nproc", "64").unwrap(), ("nproc".into(), 64, 64));
        assert!(ulimit("nofile", "a:b")
            .unwrap_err()
            .contains("not \"soft:hard\""));
        assert!(ulimit("nofile", "10:5")
            .unwrap_err()
            .contains("above the hard limit"));
    }

    #[test]
    fn host_paths_stay_in_the_task_dir_unless_allowed() {
        let dir = Path::new("/data/alloc/a/t");
        assert_eq!(
            host_path(dir, "local/x", false).unwrap(),
            dir.join("local/x")
        );
        assert!(host_path(dir, "../x", false)
            .unwrap_err()
            .contains("leaves the task dir"));
        assert!(host_path(dir, "/etc", false)
            .unwrap_err()
            .contains("volumes"));
        assert_eq!(host_path(dir, "/etc", true).unwrap(), Path::new("/etc"));
    }

    #[test]
    fn a_port_is_published_on_the_host_port_the_agent_allocated() {
        use crate::spec::NetworkPort;
        use crate::task::ports::{as_allocated, AllocPort};
        let port = |label: &str, to: Option<u16>| NetworkPort {
            label: label.into(),
            static_port: None,
            to,
            ignored: Vec::new(),
        };
        let network = Network {
            mode: String::new(),
            ports: vec![port("http", None), port("db", Some(6379))],
            ignored: Vec::new(),
        };
        let held = [
            AllocPort {
                label: "http".into(),
                host: 24001,
            },
            AllocPort {
                label: "db".into(),
                host: 24002,
            },
        ];
        let config = DockerConfig {
            ports: vec!["http".into(), "db".into()],
            ..DockerConfig::default()
        };
        let mut spec = ContainerSpec::default();
        ports(&mut spec, &config, Some(&as_allocated(&network, &held))).unwrap();
        let published: Vec<(u16, u16, &str)> = spec
            .ports
            .iter()
            .map(|p| (p.host_port, p.container_port, p.protocol.as_str()))
            .collect();
        assert_eq!(
            published,
            [
                (24001, 24001, "tcp"),
                (24001, 24001, "udp"),
                (24002, 6379, "tcp"),
                (24002, 6379, "udp")
            ]
        );
        assert_eq!(spec.env["NOMAD_PORT_http"], "24001");
        assert_eq!(spec.env["NOMAD_PORT_db"], "6379");
    }
}
