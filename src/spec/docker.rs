//! The `config` block of a `docker` task, with the keys and meanings of
//! Nomad's docker driver (`drivers/docker/config.go`), and the agent's
//! `docker` settings (`plugin "docker" { config { ... } }` or the short
//! `docker { ... }` block).
//!
//! Decoding checks what can be checked without the engine: the image is
//! given, capability names are Linux's (`SYS_ADMIN`, `sys_admin` or
//! `CAP_SYS_ADMIN`, or `all`), `volumes` are `host:container[:mode]`,
//! mounts have a known type and propagation, devices' cgroup permissions
//! are made of `r`, `w` and `m`, and each of `ports` names a port of the
//! group's `network` block. `${...}` stays as written: the runtime
//! interpolates, and `job run` checks that every variable exists. A
//! relative host path in `volumes` is relative to the task dir, as in
//! Nomad, and kept as written.
//!
//! Keys of Nomad's docker driver that tune what csi-agent does not do
//! (logging, image loading, IPv6, CPU tuning, runtimes) are accepted with
//! one warning each; any other key is an error with the nearest name.
//! Whether the agent allows `privileged` and `volumes` is checked at
//! `job run`, against the agent's [`DockerSettings`].

use std::collections::BTreeMap;
use std::fmt;

use super::decode::Fields;
use super::network::Network;
use super::{keywords, Kept};

mod settings;
mod write;

pub(crate) use settings::decode_docker_settings;
pub use settings::DockerSettings;
pub(crate) use write::write_docker_config;

/// Keys of Nomad's docker driver `config` that csi-agent accepts and does
/// not act on.
pub(super) const DOCKER_CONFIG_IGNORED: &[&str] = &[
    "advertise_ipv6_address",
    "auth_soft_fail",
    "healthchecks",
    "image_pull_timeout",
    "isolation",
];

/// Keys of Nomad's docker driver `config` that csi-agent refuses, with
/// what a job relying on each would lose.
const DOCKER_CONFIG_REFUSED: &[(&str, &str)] = &[
    ("ipv4_address", "csi-agent attaches no container to a network of its choosing, so it cannot give it an address there"),
    ("ipv6_address", "csi-agent attaches no container to a network of its choosing, so it cannot give it an address there"),
    ("load", "csi-agent loads no image from an artifact's archive: the engine must have or pull \"image\""),
    ("network_aliases", "csi-agent attaches no container to a network of its choosing, so it cannot give it aliases there"),
    ("port_map", "it is Nomad's pre-0.12 port mapping: name the group network's ports in \"ports\", with their \"to\""),
    ("volume_driver", "csi-agent configures none of the engine's volume plugins: use a volume_mount of a CSI or host volume"),
];

/// Keys of a mount's `volume_options` that csi-agent does not act on.
pub(super) const VOLUME_OPTIONS_IGNORED: &[&str] = &["driver_config"];

/// The Linux capability names, without their `CAP_` prefix.
pub const CAPABILITIES: &[&str] = &[
    "AUDIT_CONTROL",
    "AUDIT_READ",
    "AUDIT_WRITE",
    "BLOCK_SUSPEND",
    "BPF",
    "CHECKPOINT_RESTORE",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "IPC_LOCK",
    "IPC_OWNER",
    "KILL",
    "LEASE",
    "LINUX_IMMUTABLE",
    "MAC_ADMIN",
    "MAC_OVERRIDE",
    "MKNOD",
    "NET_ADMIN",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_RAW",
    "PERFMON",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYSLOG",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_CHROOT",
    "SYS_MODULE",
    "SYS_NICE",
    "SYS_PACCT",
    "SYS_PTRACE",
    "SYS_RAWIO",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "WAKE_ALARM",
];

/// The engine endpoint unless the agent config says otherwise.
pub const DEFAULT_DOCKER_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// `config { image ... }` of a `docker` task. Strings hold `${...}` as
/// written; lists and maps are empty and flags false when not given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DockerConfig {
    pub image: String,
    /// Overrides the image's `CMD`.
    pub command: Option<String>,
    /// Overrides the image's `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
    pub args: Vec<String>,
    pub work_dir: Option<String>,
    /// Needs the agent's `allow_privileged`.
    pub privileged: bool,
    /// Capability names, upper case without `CAP_`, or `ALL`.
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    /// `""` (the engine's default), `bridge`, `host`, `none` or
    /// `container:<name>`.
    pub network_mode: String,
    pub ipc_mode: Option<String>,
    /// `""` or `host`.
    pub pid_mode: Option<String>,
    pub hostname: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub devices: Vec<DockerDevice>,
    /// `mount` blocks (and the older `mounts` list), in file order.
    pub mounts: Vec<DockerMount>,
    /// `volumes`: host paths bound into the container; needs the agent's
    /// `volumes { enabled = true }`.
    pub volumes: Vec<DockerVolume>,
    pub force_pull: bool,
    pub auth: Option<DockerAuth>,
    /// Labels of ports of the group's `network` block.
    pub ports: Vec<String>,
    pub init: bool,
    pub readonly_rootfs: bool,
    /// `/dev/shm`'s size in bytes.
    pub shm_size: Option<u64>,
    pub sysctl: BTreeMap<String, String>,
    pub ulimit: BTreeMap<String, String>,
    pub security_opt: Vec<String>,
    pub extra_hosts: Vec<String>,
    pub dns_servers: Vec<String>,
    pub mac_address: Option<String>,
    /// `""` or `host`.
    pub userns_mode: Option<String>,
    /// `""` or `host`.
    pub uts_mode: Option<String>,
    pub storage_opt: BTreeMap<String, String>,
    pub tty: bool,
    pub interactive: bool,
    /// -1000 to 1000.
    pub oom_score_adj: Option<i64>,
    /// MiB the container may use above `resources.memory`: Nomad's older
    /// spelling of `resources.memory_max`.
    pub memory_hard_limit: Option<u64>,
    /// The container's resolver's search domains and options
    /// (`DnsSearch`, `DnsOptions`).
    pub dns_search_domains: Vec<String>,
    pub dns_options: Vec<String>,
    /// More groups for the container's user (`GroupAdd`).
    pub group_add: Vec<String>,
    /// The container's bound on its processes (`PidsLimit`; 0: none).
    pub pids_limit: Option<u64>,
    /// `resources.cpu` as a hard CFS quota, over `cpu_cfs_period`
    /// microseconds (the kernel's 100000 when not given).
    pub cpu_hard_limit: bool,
    pub cpu_cfs_period: Option<u64>,
    /// The CPUs the container may run on, Linux's list form (`0-2,4`).
    pub cpuset_cpus: Option<String>,
    /// The engine's runtime (`runc`, `runsc`, ...), which it must have.
    pub runtime: Option<String>,
    /// The engine's log driver for the container.
    pub logging: Option<DockerLogging>,
    pub ignored: Vec<Kept>,
}

/// `logging { type config { ... } }` (`driver` is Nomad's newer name for
/// `type`): the engine's log driver and its options.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DockerLogging {
    /// Empty: the engine's default driver, with `config` as its options.
    pub driver: String,
    pub config: BTreeMap<String, String>,
}

/// The longest CFS period the kernel takes, in microseconds (one second);
/// the shortest is [`MIN_CFS_PERIOD`].
pub const MAX_CFS_PERIOD: u64 = 1_000_000;
/// The shortest CFS period (and quota) the kernel takes: 1 ms.
pub const MIN_CFS_PERIOD: u64 = 1_000;

/// `auth { username password email server_address }`: registry
/// credentials. `Debug` does not show the password.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct DockerAuth {
    pub username: Option<String>,
    pub password: Option<String>,
    pub email: Option<String>,
    pub server_address: Option<String>,
}

impl fmt::Debug for DockerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DockerAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("email", &self.email)
            .field("server_address", &self.server_address)
            .finish()
    }
}

/// `devices = [{ host_path, container_path, cgroup_permissions }]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerDevice {
    pub host_path: String,
    /// The host path when not given, as Docker's CLI does.
    pub container_path: String,
    /// Made of `r`, `w` and `m`; `rwm` when not given.
    pub cgroup_permissions: String,
}

keywords! {
    /// What a docker `mount` is.
    pub enum DockerMountType ("mount type") {
        /// A host path (relative to the task dir) bound in.
        Bind = "bind",
        /// A memory-backed file system.
        Tmpfs = "tmpfs",
        /// A volume of the engine, by name.
        Volume = "volume",
    }
}

keywords! {
    /// `bind_options { propagation }` of a bind mount, Docker's names.
    pub enum BindPropagation ("bind propagation") {
        Rprivate = "rprivate",
        Private = "private",
        Rslave = "rslave",
        Slave = "slave",
        Rshared = "rshared",
        Shared = "shared",
    }
}

/// `mount { type target source readonly ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerMount {
    /// `volume` when not given, as in Nomad.
    pub mount_type: DockerMountType,
    pub target: String,
    /// Empty for tmpfs.
    pub source: String,
    pub readonly: bool,
    /// `bind_options { propagation }`.
    pub propagation: Option<BindPropagation>,
    /// `tmpfs_options { size }`, bytes.
    pub tmpfs_size: Option<u64>,
    /// `tmpfs_options { mode }`.
    pub tmpfs_mode: Option<u64>,
    /// `volume_options { no_copy labels }`; its `driver_config` is kept in
    /// `ignored` with a warning.
    pub volume_options: Option<DockerVolumeOptions>,
}

/// A volume mount's `volume_options`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DockerVolumeOptions {
    pub no_copy: bool,
    pub labels: BTreeMap<String, String>,
    pub ignored: Vec<Kept>,
}

/// One of `volumes`: `host:container[:mode]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerVolume {
    /// Absolute, or relative to the task dir (as written).
    pub source: String,
    pub target: String,
    /// The comma-separated options after the second colon, such as `ro`
    /// or `rw,z`; empty when not given.
    pub mode: Vec<String>,
}

/// The options a `volumes` entry may end with.
const VOLUME_MODES: &[&str] = &[
    "ro", "rw", "z", "Z", "nocopy", "rprivate", "private", "rslave", "slave", "rshared", "shared",
];

impl DockerVolume {
    /// Parses `host:container[:mode]`, or says why it is not one.
    pub fn parse(text: &str) -> Result<DockerVolume, String> {
        let form = "expected \"host:container\" or \"host:container:mode\" with mode ro or rw";
        let parts: Vec<&str> = text.split(':').collect();
        let (source, target, mode) = match parts.as_slice() {
            [source, target] => (*source, *target, ""),
            [source, target, mode] => (*source, *target, *mode),
            _ => return Err(form.to_string()),
        };
        if source.is_empty() || target.is_empty() {
            return Err(form.to_string());
        }
        if !target.starts_with('/') && !target.starts_with("${") {
            return Err(format!("the container path {target:?} must be absolute"));
        }
        let mode: Vec<String> = if mode.is_empty() {
            Vec::new()
        } else {
            mode.split(',').map(str::to_string).collect()
        };
        if let Some(bad) = mode.iter().find(|m| !VOLUME_MODES.contains(&m.as_str())) {
            return Err(format!(
                "unknown mode {bad:?} (expected one of: {})",
                VOLUME_MODES.join(", ")
            ));
        }
        if mode.iter().any(|m| m == "ro") && mode.iter().any(|m| m == "rw") {
            return Err("mode says both ro and rw".to_string());
        }
        Ok(DockerVolume {
            source: source.to_string(),
            target: target.to_string(),
            mode,
        })
    }

    /// Whether the container sees it read-only.
    pub fn read_only(&self) -> bool {
        self.mode.iter().any(|m| m == "ro")
    }
}

impl fmt::Display for DockerVolume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source, self.target)?;
        if !self.mode.is_empty() {
            write!(f, ":{}", self.mode.join(","))?;
        }
        Ok(())
    }
}

/// A capability name as Nomad takes it (`sys_admin`, `CAP_SYS_ADMIN`,
/// `all`), upper case without `CAP_`; or `None` if Linux has no such
/// capability.
pub fn capability(name: &str) -> Option<String> {
    let upper = name.to_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    (bare == "ALL" || CAPABILITIES.contains(&bare)).then(|| bare.to_string())
}

/// Decodes the `config` block of a docker task; `network` is its group's,
/// which `ports` must name.
pub(crate) fn decode_docker_config(f: &mut Fields<'_>, network: Option<&Network>) -> DockerConfig {
    let image = f.string_at("image");
    let image = f.require("image", image);
    if let Some((image, pos)) = &image {
        if image.is_empty() {
            f.error(*pos, format!("\"image\" in {} must not be empty", f.what()));
        }
    }
    let mut c = DockerConfig {
        image: image.map(|(image, _)| image).unwrap_or_default(),
        command: f.string("command"),
        entrypoint: f.strings("entrypoint").unwrap_or_default(),
        args: f.strings("args").unwrap_or_default(),
        work_dir: f.string("work_dir"),
        privileged: f.bool("privileged").unwrap_or(false),
        cap_add: capabilities(f, "cap_add"),
        cap_drop: capabilities(f, "cap_drop"),
        network_mode: network_mode(f),
        ipc_mode: f.string("ipc_mode"),
        pid_mode: host_or_empty(f, "pid_mode"),
        hostname: f.string("hostname"),
        labels: f.map("labels").unwrap_or_default(),
        force_pull: f.bool("force_pull").unwrap_or(false),
        init: f.bool("init").unwrap_or(false),
        readonly_rootfs: f.bool("readonly_rootfs").unwrap_or(false),
        shm_size: f.u64("shm_size"),
        sysctl: f.map("sysctl").unwrap_or_default(),
        ulimit: f.map("ulimit").unwrap_or_default(),
        security_opt: f.strings("security_opt").unwrap_or_default(),
        extra_hosts: f.strings("extra_hosts").unwrap_or_default(),
        dns_servers: f.strings("dns_servers").unwrap_or_default(),
        dns_search_domains: f.strings("dns_search_domains").unwrap_or_default(),
        dns_options: f.strings("dns_options").unwrap_or_default(),
        group_add: f.strings("group_add").unwrap_or_default(),
        mac_address: f.string("mac_address"),
        userns_mode: host_or_empty(f, "userns_mode"),
        uts_mode: host_or_empty(f, "uts_mode"),
        storage_opt: f.map("storage_opt").unwrap_or_default(),
        tty: f.bool("tty").unwrap_or(false),
        interactive: f.bool("interactive").unwrap_or(false),
        memory_hard_limit: f.u64("memory_hard_limit"),
        ..DockerConfig::default()
    };
    if let Some((score, pos)) = f.i64_at("oom_score_adj") {
        if !(-1000..=1000).contains(&score) {
            f.error(
                pos,
                format!(
                    "\"oom_score_adj\" in {} must be from -1000 to 1000, found {score}",
                    f.what()
                ),
            );
        }
        c.oom_score_adj = Some(score);
    }
    for (text, pos) in f.strings_at("volumes").unwrap_or_default() {
        match DockerVolume::parse(&text) {
            Ok(volume) => c.volumes.push(volume),
            Err(why) => f.error(
                pos,
                format!("volume {text:?} in \"volumes\" in {}: {why}", f.what()),
            ),
        }
    }
    for block in f.blocks_or_objects("devices") {
        if let Some(device) = decode_device(&mut f.nested(block)) {
            c.devices.push(device);
        }
    }
    for kind in ["mount", "mounts"] {
        for block in f.blocks_or_objects(kind) {
            if let Some(mount) = decode_mount(&mut f.nested(block)) {
                c.mounts.push(mount);
            }
        }
    }
    if let Some(block) = f.block("auth") {
        let mut a = f.nested(block);
        c.auth = Some(DockerAuth {
            username: a.string("username"),
            password: a.string("password"),
            email: a.string("email"),
            server_address: a.string("server_address"),
        });
        a.finish();
    }
    for (label, pos) in f.strings_at("ports").unwrap_or_default() {
        let labels: Vec<&str> = network
            .map(|n| n.ports.iter().map(|p| p.label.as_str()).collect())
            .unwrap_or_default();
        if !labels.contains(&label.as_str()) {
            let why = match network {
                None => "the group has no network block".to_string(),
                Some(_) => match super::suggest::nearest(&label, &labels) {
                    Some(near) => format!(
                        "the group's network block has no port {label:?} (did you mean {near:?}?)"
                    ),
                    None => format!("the group's network block has no port {label:?}"),
                },
            };
            f.error(
                pos,
                format!("port {label:?} in \"ports\" in {}: {why}", f.what()),
            );
        }
        c.ports.push(label);
    }
    decode_limits(f, &mut c);
    f.refuse(DOCKER_CONFIG_REFUSED);
    c.ignored = f.ignore(DOCKER_CONFIG_IGNORED);
    f.finish();
    c
}

/// `pids_limit`, `cpu_hard_limit`, `cpu_cfs_period`, `cpuset_cpus`,
/// `runtime` and `logging`.
fn decode_limits(f: &mut Fields<'_>, c: &mut DockerConfig) {
    c.pids_limit = f.u64("pids_limit");
    c.cpu_hard_limit = f.bool("cpu_hard_limit").unwrap_or(false);
    if let Some((period, pos)) = f.u64_at("cpu_cfs_period") {
        if !(MIN_CFS_PERIOD..=MAX_CFS_PERIOD).contains(&period) {
            f.error(
                pos,
                format!(
                    "\"cpu_cfs_period\" in {} must be from {MIN_CFS_PERIOD} to {MAX_CFS_PERIOD} microseconds (the kernel's MIN_CFS_PERIOD and MAX_CFS_PERIOD), found {period}",
                    f.what()
                ),
            );
        }
        c.cpu_cfs_period = Some(period);
    }
    if let Some((cpus, pos)) = f.string_at("cpuset_cpus") {
        if !is_cpu_list(&cpus) {
            f.error(
                pos,
                format!(
                    "\"cpuset_cpus\" in {} must be a list of CPUs such as \"0-2,4\", found {cpus:?}",
                    f.what()
                ),
            );
        }
        c.cpuset_cpus = Some(cpus);
    }
    if let Some((runtime, pos)) = f.string_at("runtime") {
        if runtime.is_empty() {
            f.error(
                pos,
                format!("\"runtime\" in {} must not be empty", f.what()),
            );
        }
        c.runtime = Some(runtime);
    }
    if let Some(block) = f.block("logging") {
        let mut l = f.nested(block);
        let driver = l.string_at("type");
        let newer = l.string_at("driver");
        if let (Some(_), Some((_, pos))) = (&driver, &newer) {
            l.error(
                *pos,
                format!("{} takes \"type\" or \"driver\", not both", l.what()),
            );
        }
        c.logging = Some(DockerLogging {
            driver: driver.or(newer).map(|(d, _)| d).unwrap_or_default(),
            config: l.map("config").unwrap_or_default(),
        });
        l.finish();
    }
}

/// Whether `text` is a CPU list as cpuset takes it: `0`, `0-3`, `0,2-4`.
fn is_cpu_list(text: &str) -> bool {
    let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    !text.is_empty()
        && text.split(',').all(|part| match part.split_once('-') {
            Some((low, high)) => number(low) && number(high),
            None => number(part),
        })
}

/// `cap_add` or `cap_drop`, each name checked and normalized.
pub(crate) fn capabilities(f: &mut Fields<'_>, key: &'static str) -> Vec<String> {
    let mut out = Vec::new();
    for (name, pos) in f.strings_at(key).unwrap_or_default() {
        match capability(&name) {
            Some(cap) => out.push(cap),
            None => f.error(
                pos,
                format!(
                    "{key:?} in {}: {name:?} is not a Linux capability (such as \"SYS_ADMIN\", \"net_admin\" or \"all\")",
                    f.what()
                ),
            ),
        }
    }
    out
}

/// `network_mode`: `""`, `bridge`, `host`, `none` or `container:<name>`.
fn network_mode(f: &mut Fields<'_>) -> String {
    let Some((mode, pos)) = f.string_at("network_mode") else {
        return String::new();
    };
    let ok = match mode.strip_prefix("container:") {
        Some(name) => !name.is_empty(),
        None => matches!(mode.as_str(), "" | "bridge" | "host" | "none"),
    };
    if !ok {
        f.error(
            pos,
            format!(
                "\"network_mode\" in {} must be \"bridge\", \"host\", \"none\" or \"container:<name>\", found {mode:?}",
                f.what()
            ),
        );
    }
    mode
}

/// A mode that is `host` or empty (`pid_mode`, `userns_mode`, `uts_mode`).
fn host_or_empty(f: &mut Fields<'_>, key: &'static str) -> Option<String> {
    let (mode, pos) = f.string_at(key)?;
    if !matches!(mode.as_str(), "" | "host") {
        f.error(
            pos,
            format!(
                "{key:?} in {} must be \"host\" or \"\", found {mode:?}",
                f.what()
            ),
        );
    }
    Some(mode)
}

fn decode_device(f: &mut Fields<'_>) -> Option<DockerDevice> {
    let host_path = f.string("host_path");
    let host_path = f.require("host_path", host_path);
    let container_path = f.string("container_path");
    let permissions = f.string_at("cgroup_permissions");
    if let Some((perms, pos)) = &permissions {
        if perms.is_empty() || !perms.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
            f.error(
                *pos,
                format!(
                    "\"cgroup_permissions\" in {} must be made of r, w and m, found {perms:?}",
                    f.what()
                ),
            );
        }
    }
    f.finish();
    let host_path = host_path?;
    Some(DockerDevice {
        container_path: container_path.unwrap_or_else(|| host_path.clone()),
        host_path,
        cgroup_permissions: permissions.map_or_else(|| "rwm".to_string(), |(p, _)| p),
    })
}

fn decode_mount(f: &mut Fields<'_>) -> Option<DockerMount> {
    let mount_type = f.parsed("type").unwrap_or(DockerMountType::Volume);
    let target = f.string("target");
    let target = f.require("target", target);
    let source = f.string_at("source");
    let readonly = f.bool("readonly").unwrap_or(false);
    let mut mount = DockerMount {
        mount_type,
        target: target.unwrap_or_default(),
        source: String::new(),
        readonly,
        propagation: None,
        tmpfs_size: None,
        tmpfs_mode: None,
        volume_options: None,
    };
    match (mount_type, source) {
        (DockerMountType::Tmpfs, Some((source, pos))) if !source.is_empty() => f.error(
            pos,
            format!(
                "\"source\" in {} must be empty for a tmpfs mount, found {source:?}",
                f.what()
            ),
        ),
        (DockerMountType::Bind, None) => f.missing("source"),
        (_, source) => mount.source = source.map(|(s, _)| s).unwrap_or_default(),
    }
    let what = f.what().to_string();
    let only = |f: &Fields<'_>, block: &hcl::Block, kind: DockerMountType| {
        if mount_type != kind {
            f.error(
                block.kind.span.start,
                format!(
                    "{} in {what} applies only to a {kind} mount, and this one is {mount_type}",
                    block.kind.name
                ),
            );
        }
    };
    if let Some(block) = f.block("bind_options") {
        only(f, block, DockerMountType::Bind);
        let mut b = f.nested(block);
        mount.propagation = b.parsed("propagation");
        b.finish();
    }
    if let Some(block) = f.block("tmpfs_options") {
        only(f, block, DockerMountType::Tmpfs);
        let mut t = f.nested(block);
        mount.tmpfs_size = t.u64("size");
        mount.tmpfs_mode = t.u64("mode");
        t.finish();
    }
    if let Some(block) = f.block("volume_options") {
        only(f, block, DockerMountType::Volume);
        let mut v = f.nested(block);
        mount.volume_options = Some(DockerVolumeOptions {
            no_copy: v.bool("no_copy").unwrap_or(false),
            labels: v.map("labels").unwrap_or_default(),
            ignored: v.ignore(VOLUME_OPTIONS_IGNORED),
        });
        v.finish();
    }
    f.finish();
    Some(mount)
}

#[cfg(test)]
mod tests;
