//! Typed, validated specs decoded from HCL: the agent configuration, volume
//! specs (what `volume register` and `volume create` read) and job specs.
//!
//! The formats are Nomad's, so that a Nomad user's files work as they are,
//! and decoding is strict, so that a typo is an error and not a setting
//! silently left at its default. Every error carries `file:line:col` and
//! every error of a file is reported, not only the first: `unknown attribute
//! "acess_mode" in volume "data" (did you mean "access_mode"?)`.
//!
//! A file named `*.json` is read in HCL's JSON syntax, as Nomad reads it,
//! by the same decoders with the same errors, at their `line:col` in the
//! JSON (see `decode.rs`); any other file in the native syntax. Ignored
//! items of a JSON file are kept as the HCL they stand for, so that
//! `to_hcl` always writes HCL.
//!
//! Real Nomad files hold much that csi-agent does not do (scheduling,
//! networking, updates, templates). Those keys parse, are kept as written in
//! the spec's `ignored` lists, and produce one warning each ("ignored by
//! csi-agent") instead of drowning the user in errors. Services, checks and
//! Consul Connect sidecars are decoded and validated like everything else
//! and kept in the spec, but the agent does not run them. A task driver
//! other than `exec`, `raw_exec` and `docker` is one error, and its
//! driver-specific `config` is not examined.
//!
//! Validation happens during decoding, while positions are at hand: the
//! specs themselves hold no positions, only values with defaults applied,
//! in the crate's domain types ([`AccessMode`](crate::csi::AccessMode),
//! [`MountOptions`](crate::csi::MountOptions), [`Secrets`](crate::csi::Secrets),
//! [`Propagation`](crate::mount::Propagation), [`Duration`](std::time::Duration),
//! sizes in bytes). Secrets and mount flags keep their redacting `Debug` and
//! `Display` inside the specs. Each spec writes itself back as HCL with
//! `to_hcl`, which decodes to the same spec.
//!
//! | file | owns |
//! |---|---|
//! | `decode.rs` | the strict decoder: seen keys, block getters, collected errors and warnings |
//! | `decode/values.rs` | the decoder's typed getters of attribute values: strings, absolute paths, numbers, durations, lists, maps |
//! | `suggest.rs` | did-you-mean by edit distance |
//! | `encode.rs` | the HCL writer behind `to_hcl` |
//! | `agent.rs` | [`AgentConfig`]: `data_dir`, `plugin` and `host_volume` blocks, `chroot_env` |
//! | `telemetry.rs` | the agent config's `telemetry` block: the Prometheus metrics endpoint |
//! | `volume_plugin.rs` | the agent config's `volume_plugin` block: Docker's volume plugin protocol |
//! | `cluster.rs` | [`ClusterConfig`]: the agent config's `cluster` block, etcd endpoints, TLS files, `stop_after_disconnect` |
//! | `placement.rs` | [`ClientConfig`]: the agent config's `client` block (`reserved`, `max_allocs_per_job`) |
//! | `volume.rs` | [`VolumeSpec`]: capabilities, mount options, secrets, topology |
//! | `job.rs` | [`Job`] and [`Group`]: a group's count, volumes, services, network and tasks; `meta` and `constraint`s handed down |
//! | `job_type.rs` | [`JobType`]: what a task's exit means, which the restart defaults and the `periodic` and `parameterized` blocks follow |
//! | `restart.rs` | [`Restart`]: a group's or task's `restart` block, its defaults by job type |
//! | `group_volume.rs` | [`GroupVolume`]: a group's `volume` blocks, checked against its count |
//! | `constraint.rs` | [`Constraint`]: a job's, group's or task's `constraint` blocks, checked as Nomad checks them; `meta` and constraints handed down ([`Inherited`]) |
//! | `version.rs` | [`Version`] and [`VersionConstraint`]: go-version's and SemVer's rules for the `version` and `semver` operators |
//! | `task.rs` | [`Task`]: exec config, lifecycle, volume mounts |
//! | `resources.rs` | [`Resources`]: a task's or a sidecar task's `resources` block |
//! | `signal.rs` | [`KillSignal`]: the signals of a task's `kill_signal` and a template's `change_signal` |
//! | `csi_plugin.rs` | [`CsiPlugin`]: a task's `csi_plugin` block |
//! | `docker.rs` | [`DockerConfig`], a docker task's `config`; [`DockerSettings`], the agent's |
//! | `variables.rs` | a job file's `variable` and `locals` blocks, the values a caller gives them ([`JobInputs`]), and the evaluation of its expressions |
//! | `periodic.rs` | [`Periodic`] and [`Parameterized`], a job's `periodic` and `parameterized` blocks |
//! | `cron.rs` | [`CronExpr`]: Nomad's cron expressions and the next time one matches |
//! | `zone.rs` | [`Zone`]: a `time_zone`'s offsets, read from the host's TZif zone files |
//! | `service.rs` | [`Service`]: checks and Connect sidecars, shared by groups and tasks |
//! | `task_keys.rs` | the keys of a task (its config, resources, volume mounts) ignored or refused |
//! | `ignored_keys.rs` | (test) the keys accepted and ignored, held to docs/jobs.md's table of them |

mod agent;
mod artifact;
mod cluster;
mod constraint;
mod cron;
mod csi_plugin;
mod decode;
pub mod diff;
mod docker;
mod encode;
mod exec_settings;
mod group_volume;
#[cfg(test)]
mod ignored_keys;
mod job;
mod job_level_tasks;
mod job_type;
mod network;
mod periodic;
mod placement;
mod resources;
mod restart;
mod service;
mod signal;
mod suggest;
mod task;
mod task_keys;
mod telemetry;
mod template;
mod variables;
mod version;
mod volume;
mod volume_plugin;
mod zone;

use std::fmt;

use hcl::{Body, Pos, Syntax};

pub use agent::{
    AgentConfig, ChrootEntry, HostVolume, PluginConfig, DEFAULT_CHROOT_ENV, DEFAULT_DATA_DIR,
    DEFAULT_HEALTH_TIMEOUT, DEFAULT_MAX_KILL_TIMEOUT, DEFAULT_VOLUME_STATS_INTERVAL,
    VOLUME_STATS_INTERVAL_BOUNDS,
};
pub use artifact::{
    archive_kind, check_source, parse_checksum, redacted, split_source, url_path, ArchiveKind,
    Artifact, ArtifactConfig, ArtifactMode, Checksum, DigestKind, SourceUrl,
};
pub use cluster::{
    etcd_target, ClientCert, ClusterConfig, ClusterTls, DEFAULT_CLUSTER_PREFIX, DEFAULT_LEASE_TTL,
};
pub use constraint::{Constraint, Inherited, Operator};
pub use cron::{format_utc, CronError, CronExpr, MAX_EXPRESSION_LEN, MAX_SEARCH_YEARS};
pub use csi_plugin::CsiPlugin;
pub use docker::{
    capability, BindPropagation, DockerAuth, DockerConfig, DockerDevice, DockerLogging,
    DockerMount, DockerMountType, DockerSettings, DockerVolume, DockerVolumeOptions, CAPABILITIES,
    DEFAULT_DOCKER_ENDPOINT, MAX_CFS_PERIOD, MIN_CFS_PERIOD,
};
pub use exec_settings::{ExecSettings, NOMAD_EXEC_CAPS, TASK_ROOT_DIRS};
pub use group_volume::{GroupVolume, VolumeType};
pub use job::{Group, Job};
pub use job_type::JobType;
pub use network::{Network, NetworkPort};
pub use periodic::{Parameterized, PayloadRule, Periodic};
pub use placement::{
    ClientConfig, DEFAULT_MAX_ALLOCS_PER_JOB, DEFAULT_MAX_DYNAMIC_PORT, DEFAULT_MIN_DYNAMIC_PORT,
};
pub use resources::{MemoryMax, Resources};
pub use restart::{Restart, RestartMode};
pub use service::{
    AddressMode, Check, CheckType, Connect, Provider, Proxy, Service, SidecarService, SidecarTask,
    Upstream,
};
pub use signal::KillSignal;
pub use task::{Driver, ExecConfig, Lifecycle, LifecycleHook, NamespaceMode, Task, VolumeMount};
pub use telemetry::{TelemetryConfig, DEFAULT_METRICS_LISTEN};
pub use template::{stays_inside, ChangeMode, TaskTemplate};
pub use variables::JobInputs;
pub use version::{Flavor, Version, VersionConstraint};
pub use volume::{parse_capacity, Topology, TopologyRequest, VolumeSpec};
pub use volume_plugin::{
    VolumePluginConfig, DEFAULT_MOUNT_TIMEOUT, DEFAULT_UNMOUNT_GRACE, DEFAULT_VOLUME_PLUGIN_NAME,
    DOCKERD_PLUGIN_TIMEOUT, DOCKER_PLUGIN_DIR,
};
pub use zone::{Zone, ZoneError, MAX_ZONE_FILE, ZONEINFO};

/// A spec decoded without errors, with the warnings found on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<T> {
    pub spec: T,
    pub warnings: Vec<Warning>,
}

/// A file that did not decode: every error found, each with its position,
/// in reading order, and the warnings found on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    pub errors: Vec<hcl::Error>,
    pub warnings: Vec<Warning>,
}

impl fmt::Display for Invalid {
    /// One error per line, as `file:line:col: message`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, err) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{err}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Invalid {}

/// Something csi-agent accepted but will not act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub file: String,
    pub pos: Pos,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: warning: {}",
            self.file, self.pos.line, self.pos.col, self.message
        )
    }
}

/// An attribute or block that csi-agent does not act on, kept as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The attribute key or block type, such as `datacenters`.
    pub name: String,
    /// The item's source text, from its name to the end of its value or
    /// its closing brace.
    pub text: String,
}

/// The three kinds of file csi-agent reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Agent,
    Volume,
    Job,
}

impl FileKind {
    /// Tells the kind from the top level of a file: a `job` block (in JSON,
    /// a `job` property) makes a job file, a `plugin_id` attribute a volume
    /// spec, anything else an agent configuration.
    pub fn of(body: &Body) -> FileKind {
        let job = match body.syntax {
            Syntax::Native => body.blocks_named("job").next().is_some(),
            Syntax::Json => body.attribute("job").is_some(),
        };
        if job {
            FileKind::Job
        } else if body.attribute("plugin_id").is_some() {
            FileKind::Volume
        } else {
            FileKind::Agent
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Agent => "agent config",
            FileKind::Volume => "volume spec",
            FileKind::Job => "job",
        })
    }
}

/// A spec of any of the three kinds.
#[derive(Debug, Clone, PartialEq)]
pub enum SpecFile {
    Agent(Box<AgentConfig>),
    Volume(Box<VolumeSpec>),
    Job(Job),
}

impl SpecFile {
    /// Decodes `src` as whichever kind of file [`FileKind::of`] says it is,
    /// in the syntax its name says (JSON for `*.json`).
    pub fn decode(src: &str, file: &str) -> Result<Decoded<SpecFile>, Invalid> {
        SpecFile::decode_with(src, file, &JobInputs::default())
    }

    /// [`SpecFile::decode`], a job's variables taking their values from
    /// `inputs`.
    pub fn decode_with(
        src: &str,
        file: &str,
        inputs: &JobInputs,
    ) -> Result<Decoded<SpecFile>, Invalid> {
        let kind = match hcl::parse_file(src, file) {
            Ok(body) => FileKind::of(&body),
            Err(err) => {
                return Err(Invalid {
                    errors: vec![err],
                    warnings: Vec::new(),
                })
            }
        };
        fn wrap<T>(
            decoded: Result<Decoded<T>, Invalid>,
            make: fn(T) -> SpecFile,
        ) -> Result<Decoded<SpecFile>, Invalid> {
            decoded.map(|d| Decoded {
                spec: make(d.spec),
                warnings: d.warnings,
            })
        }
        match kind {
            FileKind::Agent => wrap(AgentConfig::decode(src, file), |c| {
                SpecFile::Agent(Box::new(c))
            }),
            FileKind::Volume => wrap(VolumeSpec::decode(src, file), |v| {
                SpecFile::Volume(Box::new(v))
            }),
            FileKind::Job => wrap(Job::decode_with(src, file, inputs), SpecFile::Job),
        }
    }

    pub fn kind(&self) -> FileKind {
        match self {
            SpecFile::Agent(_) => FileKind::Agent,
            SpecFile::Volume(_) => FileKind::Volume,
            SpecFile::Job(_) => FileKind::Job,
        }
    }
}

/// Defines an enum of keywords with its user-facing names, `Display` and a
/// `FromStr` whose error lists the accepted names.
macro_rules! keywords {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order the documentation lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The name users write.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = crate::csi::model::ParseError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|value| value.as_str() == s)
                    .ok_or_else(|| crate::csi::model::ParseError {
                        what: $what,
                        value: s.to_string(),
                        accepted: $name::ALL.iter().map(|value| value.as_str()).collect(),
                    })
            }
        }
    };
}
pub(crate) use keywords;

keywords! {
    /// What a CSI plugin serves: the node service, the controller service,
    /// or both (a monolith).
    pub enum PluginType ("plugin type") {
        Node = "node",
        Controller = "controller",
        Monolith = "monolith",
    }
}

impl PluginType {
    /// Whether the plugin serves the node service.
    pub fn has_node(self) -> bool {
        matches!(self, PluginType::Node | PluginType::Monolith)
    }

    /// Whether the plugin serves the controller service.
    pub fn has_controller(self) -> bool {
        matches!(self, PluginType::Controller | PluginType::Monolith)
    }

    /// Whether two instances of one plugin ID would serve a service twice:
    /// an ID has at most one controller and one node on a host, so two of
    /// one type, or a monolith and anything, conflict.
    pub fn conflicts(self, other: PluginType) -> bool {
        (self.has_controller() && other.has_controller()) || (self.has_node() && other.has_node())
    }
}
