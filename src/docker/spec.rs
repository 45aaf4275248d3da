//! What a container is asked to be ([`ContainerSpec`]), and the body of
//! `POST /containers/create` that asks for it (API 1.41's
//! `ContainerConfig` with its `HostConfig`).

use std::collections::BTreeMap;

use json::Value;

/// A container as the driver asks for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerSpec {
    /// The image, as pulled or imported: `busybox:1.36`, `repo@sha256:...`.
    pub image: String,
    /// Replaces the image's entrypoint when set (an empty list clears it).
    pub entrypoint: Option<Vec<String>>,
    /// The command (arguments to the entrypoint); empty: the image's.
    pub cmd: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub work_dir: Option<String>,
    /// `user`, `user:group`, `uid` or `uid:gid`.
    pub user: Option<String>,
    pub hostname: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub privileged: bool,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    /// E.g. `no-new-privileges`, `seccomp=unconfined`.
    pub security_opt: Vec<String>,
    /// `bridge`, `host`, `none`, `container:<id>`, or a network's name.
    pub network_mode: Option<String>,
    pub ipc_mode: Option<String>,
    pub pid_mode: Option<String>,
    pub devices: Vec<Device>,
    /// Rules of the device cgroup, e.g. `c 1:3 mr`.
    pub device_cgroup_rules: Vec<String>,
    pub mounts: Vec<Mount>,
    /// The memory limit in bytes (`HostConfig.Memory`); swap is held to
    /// it too (`MemorySwap` = `Memory`: no swap), as Nomad does.
    pub memory: Option<u64>,
    /// The soft limit in bytes (`HostConfig.MemoryReservation`).
    pub memory_reservation: Option<u64>,
    /// The relative CPU weight (`HostConfig.CpuShares`).
    pub cpu_shares: Option<u64>,
    pub ports: Vec<PortBinding>,
    /// Runs the engine's init (tini) as PID 1, to reap zombies and pass
    /// signals.
    pub init: bool,
    /// The container's root file system is mounted read-only.
    pub readonly_rootfs: bool,
    /// `/dev/shm`'s size in bytes (the engine's default, 64 MiB, when
    /// `None`).
    pub shm_size: Option<u64>,
    pub sysctls: BTreeMap<String, String>,
    /// Resource limits: name (`nofile`), soft and hard.
    pub ulimits: Vec<(String, i64, i64)>,
    /// `host:ip` lines added to the container's `/etc/hosts`.
    pub extra_hosts: Vec<String>,
    /// DNS servers of the container's `/etc/resolv.conf`.
    pub dns: Vec<String>,
    pub mac_address: Option<String>,
    /// `host` or the engine's default.
    pub userns_mode: Option<String>,
    /// `host` or the engine's default.
    pub uts_mode: Option<String>,
    pub storage_opt: BTreeMap<String, String>,
    /// -1000 to 1000.
    pub oom_score_adj: Option<i64>,
    pub dns_search: Vec<String>,
    pub dns_options: Vec<String>,
    pub group_add: Vec<String>,
    /// `PidsLimit`.
    pub pids_limit: Option<u64>,
    /// `CpuPeriod` and `CpuQuota`, microseconds.
    pub cpu_quota: Option<(u64, u64)>,
    pub cpuset_cpus: Option<String>,
    pub runtime: Option<String>,
    /// `LogConfig`: the log driver and its options.
    pub log_config: Option<(String, BTreeMap<String, String>)>,
}

/// A host device made visible in the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub host_path: String,
    pub container_path: String,
    /// Cgroup permissions: a subset of `rwm`.
    pub permissions: String,
}

/// A mount of the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mount {
    /// A host path bind-mounted; `propagation` is `rprivate`, `private`,
    /// `rslave`, `slave`, `rshared` or `shared` (the engine's default,
    /// `rprivate`, when `None`). The engine checks that a slave or shared
    /// bind's source is on a mount that propagates.
    Bind {
        source: String,
        target: String,
        read_only: bool,
        propagation: Option<String>,
    },
    /// A tmpfs of `size` bytes (the kernel's default when `None`) with
    /// `mode` (e.g. `0o1777`).
    Tmpfs {
        target: String,
        size: Option<u64>,
        mode: Option<u32>,
    },
    /// A named volume of the engine.
    Volume {
        source: String,
        target: String,
        read_only: bool,
    },
}

/// A container port published on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortBinding {
    /// The host's address; empty: all.
    pub host_ip: String,
    /// The host's port; 0: one the engine picks.
    pub host_port: u16,
    pub container_port: u16,
    /// `tcp` or `udp`.
    pub protocol: String,
}

impl ContainerSpec {
    /// The body of `POST /containers/create`.
    pub(super) fn to_json(&self) -> Value {
        let mut config = Value::object([("Image", Value::from(self.image.as_str()))]);
        if let Some(entrypoint) = &self.entrypoint {
            config.push("Entrypoint", Value::strings(entrypoint));
        }
        if !self.cmd.is_empty() {
            config.push("Cmd", Value::strings(&self.cmd));
        }
        let env = self.env.iter().map(|(k, v)| format!("{k}={v}"));
        config.push("Env", Value::strings(env));
        optional(&mut config, "WorkingDir", &self.work_dir);
        optional(&mut config, "User", &self.user);
        optional(&mut config, "Hostname", &self.hostname);
        optional(&mut config, "MacAddress", &self.mac_address);
        config.push("Labels", string_map(&self.labels));
        // No TTY and no stdin: the log stream is multiplexed (`logs.rs`).
        config.push("Tty", false.into());
        config.push("OpenStdin", false.into());
        config.push("AttachStdin", false.into());
        let ports = self
            .ports
            .iter()
            .map(|p| (port_key(p), Value::object::<&str>([])));
        config.push("ExposedPorts", Value::object(ports));
        config.push("HostConfig", self.host_config());
        config
    }

    fn host_config(&self) -> Value {
        let mut host = Value::object([("Privileged", Value::from(self.privileged))]);
        host.push("CapAdd", Value::strings(&self.cap_add));
        host.push("CapDrop", Value::strings(&self.cap_drop));
        host.push("SecurityOpt", Value::strings(&self.security_opt));
        optional(&mut host, "NetworkMode", &self.network_mode);
        optional(&mut host, "IpcMode", &self.ipc_mode);
        optional(&mut host, "PidMode", &self.pid_mode);
        let devices = self.devices.iter().map(|d| {
            Value::object([
                ("PathOnHost", Value::from(d.host_path.as_str())),
                ("PathInContainer", Value::from(d.container_path.as_str())),
                ("CgroupPermissions", Value::from(d.permissions.as_str())),
            ])
        });
        host.push("Devices", Value::array(devices));
        host.push(
            "DeviceCgroupRules",
            Value::strings(&self.device_cgroup_rules),
        );
        host.push("Mounts", Value::array(self.mounts.iter().map(mount_json)));
        if let Some(memory) = self.memory {
            host.push("Memory", memory.into());
            host.push("MemorySwap", memory.into());
        }
        if let Some(reservation) = self.memory_reservation {
            host.push("MemoryReservation", reservation.into());
        }
        if let Some(shares) = self.cpu_shares {
            host.push("CpuShares", shares.into());
        }
        let mut bindings: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for port in &self.ports {
            let host_port = match port.host_port {
                0 => String::new(),
                n => n.to_string(),
            };
            bindings
                .entry(port_key(port))
                .or_default()
                .push(Value::object([
                    ("HostIp", Value::from(port.host_ip.as_str())),
                    ("HostPort", Value::from(host_port)),
                ]));
        }
        let bindings = bindings.into_iter().map(|(k, v)| (k, Value::Array(v)));
        host.push("PortBindings", Value::object(bindings));
        if self.init {
            host.push("Init", true.into());
        }
        host.push("ReadonlyRootfs", self.readonly_rootfs.into());
        if let Some(size) = self.shm_size {
            host.push("ShmSize", size.into());
        }
        host.push("Sysctls", string_map(&self.sysctls));
        let ulimits = self.ulimits.iter().map(|(name, soft, hard)| {
            Value::object([
                ("Name", Value::from(name.as_str())),
                ("Soft", Value::from(*soft)),
                ("Hard", Value::from(*hard)),
            ])
        });
        host.push("Ulimits", Value::array(ulimits));
        host.push("ExtraHosts", Value::strings(&self.extra_hosts));
        host.push("Dns", Value::strings(&self.dns));
        host.push("DnsSearch", Value::strings(&self.dns_search));
        host.push("DnsOptions", Value::strings(&self.dns_options));
        host.push("GroupAdd", Value::strings(&self.group_add));
        optional(&mut host, "UsernsMode", &self.userns_mode);
        optional(&mut host, "UTSMode", &self.uts_mode);
        if !self.storage_opt.is_empty() {
            host.push("StorageOpt", string_map(&self.storage_opt));
        }
        if let Some(adj) = self.oom_score_adj {
            host.push("OomScoreAdj", adj.into());
        }
        if let Some(limit) = self.pids_limit {
            host.push("PidsLimit", limit.into());
        }
        if let Some((period, quota)) = self.cpu_quota {
            host.push("CpuPeriod", period.into());
            host.push("CpuQuota", quota.into());
        }
        optional(&mut host, "CpusetCpus", &self.cpuset_cpus);
        optional(&mut host, "Runtime", &self.runtime);
        if let Some((driver, config)) = &self.log_config {
            host.push(
                "LogConfig",
                Value::object([
                    ("Type", Value::from(driver.as_str())),
                    ("Config", string_map(config)),
                ]),
            );
        }
        host
    }
}

fn optional(object: &mut Value, key: &str, value: &Option<String>) {
    if let Some(value) = value {
        object.push(key, Value::from(value.as_str()));
    }
}

fn string_map(map: &BTreeMap<String, String>) -> Value {
    Value::object(
        map.iter()
            .map(|(k, v)| (k.as_str(), Value::from(v.as_str()))),
    )
}

/// `80/tcp`.
fn port_key(port: &PortBinding) -> String {
    let protocol = match port.protocol.as_str() {
        "" => "tcp",
        p => p,
    };
    format!("{}/{protocol}", port.container_port)
}

fn mount_json(mount: &Mount) -> Value {
    match mount {
        Mount::Bind {
            source,
            target,
            read_only,
            propagation,
        } => {
            let mut m = Value::object([
                ("Type", Value::from("bind")),
                ("Source", Value::from(source.as_str())),
                ("Target", Value::from(target.as_str())),
                ("ReadOnly", Value::from(*read_only)),
            ]);
            if let Some(propagation) = propagation {
                let options = [("Propagation", Value::from(propagation.as_str()))];
                m.push("BindOptions", Value::object(options));
            }
            m
        }
        Mount::Tmpfs { target, size, mode } => {
            let mut m = Value::object([
                ("Type", Value::from("tmpfs")),
                ("Target", Value::from(target.as_str())),
            ]);
            let mut options = Value::object::<&str>([]);
            if let Some(size) = size {
                options.push("SizeBytes", (*size).into());
            }
            if let Some(mode) = mode {
                options.push("Mode", (*mode).into());
            }
            m.push("TmpfsOptions", options);
            m
        }
        Mount::Volume {
            source,
            target,
            read_only,
        } => Value::object([
            ("Type", Value::from("volume")),
            ("Source", Value::from(source.as_str())),
            ("Target", Value::from(target.as_str())),
            ("ReadOnly", Value::from(*read_only)),
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use json::to_string;

    #[test]
    fn a_minimal_spec_asks_for_the_image_and_no_tty() {
        let spec = ContainerSpec {
            image: "busybox:1".into(),
            ..ContainerSpec::default()
        };
        let body = spec.to_json();
        assert_eq!(body.get("Image").unwrap().as_str(), Some("busybox:1"));
        assert_eq!(body.get("Tty").unwrap().as_bool(), Some(false));
        assert_eq!(body.get("Cmd"), None);
        assert_eq!(body.get("Entrypoint"), None);
        let host = body.get("HostConfig").unwrap();
        assert_eq!(host.get("Memory"), None);
        assert_eq!(host.get("Init"), None);
    }

    #[test]
    fn a_full_spec_becomes_the_engines_fields() {
        let spec = ContainerSpec {
            image: "img".into(),
            entrypoint: Some(vec!["/bin/sh".into()]),
            cmd: vec!["-c".into(), "echo \"hi\"".into()],
            env: [("A".to_string(), "1=2".to_string())].into(),
            labels: [("k".to_string(), "v".to_string())].into(),
            memory: Some(8 << 20),
            devices: vec![Device {
                host_path: "/dev/fuse".into(),
                container_path: "/dev/fuse".into(),
                permissions: "rwm".into(),
            }],
            mounts: vec![
                Mount::Bind {
                    source: "/s".into(),
                    target: "/t".into(),
                    read_only: true,
                    propagation: Some("rslave".into()),
                },
                Mount::Tmpfs {
                    target: "/tmp".into(),
                    size: Some(1 << 20),
                    mode: Some(0o1777),
                },
            ],
            ports: vec![PortBinding {
                host_ip: "127.0.0.1".into(),
                host_port: 8080,
                container_port: 80,
                protocol: "tcp".into(),
            }],
            init: true,
            ..ContainerSpec::default()
        };
        let body = to_string(&spec.to_json());
        for part in [
            r#""Entrypoint":["/bin/sh"]"#,
            r#""Cmd":["-c","echo \"hi\""]"#,
            r#""Env":["A=1=2"]"#,
            r#""Labels":{"k":"v"}"#,
            r#""ExposedPorts":{"80/tcp":{}}"#,
            r#""Memory":8388608,"MemorySwap":8388608"#,
            r#""Devices":[{"PathOnHost":"/dev/fuse","PathInContainer":"/dev/fuse","CgroupPermissions":"rwm"}]"#,
            r#"{"Type":"bind","Source":"/s","Target":"/t","ReadOnly":true,"BindOptions":{"Propagation":"rslave"}}"#,
            r#"{"Type":"tmpfs","Target":"/tmp","TmpfsOptions":{"SizeBytes":1048576,"Mode":1023}}"#,
            r#""PortBindings":{"80/tcp":[{"HostIp":"127.0.0.1","HostPort":"8080"}]}"#,
            r#""Init":true"#,
        ] {
            assert!(body.contains(part), "{part} not in {body}");
        }
    }
}
