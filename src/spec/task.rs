//! Tasks: `task "<name>" { driver = "exec" ... }` and their volume mounts
//! (their `csi_plugin` block is `csi_plugin.rs`'s).
//!
//! csi-agent runs Nomad's `exec` tasks (in a root of their own),
//! `raw_exec` tasks (on the host's root) and `docker` tasks (whose `config`
//! is `docker.rs`'s). Any other driver is one error, and its `config`
//! block, whose keys belong to that driver, is not examined. A `raw_exec` task with a `volume_mount` is an error, as Nomad
//! refuses it: the driver has no root to mount a volume into.
//! Volume mounts are checked against the group's volumes: the volume must
//! be declared, and `bidirectional` propagation, which lets the task create
//! mounts visible on the host, needs a read-write volume and mount (a task
//! that can change the host's mount table must at least own a writable
//! volume).
//!
//! A task's `lifecycle { hook, sidecar }` puts it before the group's main
//! tasks (`prestart`), after they started (`poststart`) or after they
//! stopped (`poststop`); its `restart` block overrides the group's policy
//! field by field, as in Nomad.

use std::collections::BTreeMap;
use std::path::{Component, Path};
use std::time::Duration;

use crate::mount::Propagation;

use super::artifact::{decode_artifact, write_artifact, Artifact};
use super::csi_plugin::{decode_csi_plugin, write_csi_plugin, CsiPlugin};
use super::decode::Fields;
use super::docker::{capabilities, decode_docker_config, write_docker_config, DockerConfig};
use super::encode::Writer;
use super::group_volume::GroupVolume;
use super::network::Network;
use super::resources::{decode_resources, write_resources, Resources};
use super::restart::{decode_restart, write_restart, Restart};
use super::service::{decode_service, write_service, Service};
use super::signal::KillSignal;
use super::suggest::nearest;
use super::task_keys::{
    EXEC_CONFIG_IGNORED, RAW_EXEC_CONFIG_IGNORED, RAW_EXEC_CONFIG_REFUSED, TASK_IGNORED,
    TASK_REFUSED, VOLUME_MOUNT_IGNORED,
};
use super::template::{decode_template, write_template, TaskTemplate};
use super::{keywords, Kept};

/// How long a task has to exit after SIGTERM, as in Nomad.
const DEFAULT_KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// The task drivers csi-agent has, as Nomad names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// The task runs in a root of its own built from `chroot_env`, with its
    /// volumes at their destinations.
    Exec,
    /// The task runs on the host's root and takes no volume mounts.
    RawExec,
    /// The task runs in a container of the docker engine, from its image.
    Docker,
}

impl Driver {
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Exec => "exec",
            Driver::RawExec => "raw_exec",
            Driver::Docker => "docker",
        }
    }
}

keywords! {
    /// When a lifecycle task runs, relative to the group's main tasks.
    pub enum LifecycleHook ("lifecycle hook") {
        /// Before the main tasks start: they wait for it to exit 0 (or,
        /// for a sidecar, to run).
        Prestart = "prestart",
        /// Once the main tasks run.
        Poststart = "poststart",
        /// Once the main tasks have stopped.
        Poststop = "poststop",
    }
}

/// `lifecycle { hook, sidecar }`: a task that is not one of the group's
/// main tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifecycle {
    pub hook: LifecycleHook,
    /// Keeps running alongside the main tasks (restarted on any exit)
    /// instead of running to completion.
    pub sidecar: bool,
}

/// A task, run by the `exec`, `raw_exec` or `docker` driver.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub name: String,
    pub driver: Driver,
    /// The `config` of an exec or raw_exec task; empty for docker.
    pub config: ExecConfig,
    /// The `config` of a docker task: `Some` exactly for driver docker.
    pub docker: Option<DockerConfig>,
    pub env: BTreeMap<String, String>,
    /// The user to run as; the agent's own user when `None`.
    pub user: Option<String>,
    /// How long a task to stop keeps running before its kill signal
    /// (Nomad's `shutdown_delay`, for its services to drain); zero by
    /// default.
    pub shutdown_delay: Duration,
    /// What the task is stopped with.
    pub kill_signal: KillSignal,
    /// How long the task has after its kill signal before SIGKILL.
    pub kill_timeout: Duration,
    /// `None` for a main task.
    pub lifecycle: Option<Lifecycle>,
    /// Nomad's `leader`: once this task is dead, the group's other tasks
    /// are stopped (`task::leader`).
    pub leader: bool,
    /// The group's policy, with the task's own `restart` block over it.
    pub restart: Restart,
    /// An exec or raw_exec task's control group limits (`task::cgroup`),
    /// a docker task's container limits.
    pub resources: Option<Resources>,
    pub volume_mounts: Vec<VolumeMount>,
    /// Set when the task is a CSI plugin.
    pub csi_plugin: Option<CsiPlugin>,
    /// Registered while the task runs when their provider is `nomad`
    /// (`services/`); their checks are not run.
    pub services: Vec<Service>,
    /// Rendered into the task dir before the task starts.
    pub templates: Vec<TaskTemplate>,
    /// Fetched into the task dir before its templates render.
    pub artifacts: Vec<Artifact>,
    /// The task's own `meta`, merged over its group's and job's in its
    /// `NOMAD_META_*` ([`super::Group::task_meta`]).
    pub meta: std::collections::BTreeMap<String, String>,
    /// The task's own `constraint`s, which its group's allocs must meet.
    pub constraints: Vec<super::Constraint>,
    /// `dispatch_payload { file }`: where, under the task's `local/` dir,
    /// a dispatched child's payload is written.
    pub dispatch_payload: Option<String>,
    pub ignored: Vec<Kept>,
}

/// `config { command, args }` of an exec or raw_exec task, and an exec
/// task's `pid_mode` and `ipc_mode`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecConfig {
    pub command: String,
    pub args: Vec<String>,
    /// An exec task's PID namespace: its own (the task is PID 1) unless
    /// `host`; a raw_exec task always has the host's.
    pub pid_mode: NamespaceMode,
    /// An exec task's IPC namespace: its own unless `host`.
    pub ipc_mode: NamespaceMode,
    /// Capabilities an exec task adds to Nomad's default set (each in the
    /// agent's `allow_caps`) and drops from it: upper case, without
    /// `CAP_`; `ALL` in `cap_drop` drops every one.
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    /// The task's working directory (`work_dir`): absolute, in the task's
    /// root for `exec` and on the host for `raw_exec`; may name
    /// `${NOMAD_...}` variables. `None`: `/` of an exec task's root, a
    /// raw_exec task's dir.
    pub work_dir: Option<String>,
    pub ignored: Vec<Kept>,
}

/// An exec task's `pid_mode` or `ipc_mode`: `private` (or `""`, Nomad's
/// default) or `host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NamespaceMode {
    #[default]
    Private,
    Host,
}

/// `volume_mount { volume, destination, read_only, propagation_mode }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMount {
    /// The alias of a volume of the task's group.
    pub volume: String,
    /// Where the volume appears for the task.
    pub destination: String,
    /// As written; the mount is read-only if this or the group volume's
    /// `read_only` is set.
    pub read_only: bool,
    pub propagation: Propagation,
    pub ignored: Vec<Kept>,
}

/// What a task's decoding needs of its group.
pub(crate) struct OfGroup<'g> {
    /// The volumes its tasks may mount.
    pub(crate) volumes: &'g [GroupVolume],
    /// How messages name the group.
    pub(crate) what: &'g str,
    /// The group's restart policy.
    pub(crate) restart: &'g Restart,
    /// The group's `network` block, whose ports docker tasks name.
    pub(crate) network: Option<&'g Network>,
}

/// Decodes a task of the group `of`.
pub(crate) fn decode_task(f: &mut Fields<'_>, name: String, of: &OfGroup<'_>) -> Task {
    let (volumes, group, restart) = (of.volumes, of.what, of.restart);
    let driver_at = f.string_at("driver");
    let driver_at = f.require("driver", driver_at);
    let driver = match driver_at.as_ref().map(|(d, pos)| (d.as_str(), *pos)) {
        Some(("exec", _)) => Some(Driver::Exec),
        Some(("raw_exec", _)) => Some(Driver::RawExec),
        Some(("docker", _)) => Some(Driver::Docker),
        Some((other, pos)) => {
            f.error(
                pos,
                format!(
                    "driver {other:?} is not supported: csi-agent runs \"exec\", \"raw_exec\" and \"docker\" tasks"
                ),
            );
            None
        }
        None => None,
    };
    let mut docker = None;
    let config = match driver {
        Some(driver) => {
            let block = f.block("config");
            let block = f.require_block("config", block);
            let ignored = match driver {
                Driver::Exec => EXEC_CONFIG_IGNORED,
                Driver::RawExec => RAW_EXEC_CONFIG_IGNORED,
                Driver::Docker => {
                    docker = Some(
                        block
                            .map(|block| decode_docker_config(&mut f.nested(block), of.network))
                            .unwrap_or_default(),
                    );
                    &[]
                }
            };
            block
                .filter(|_| driver != Driver::Docker)
                .map(|block| decode_exec_config(&mut f.nested(block), driver, ignored))
        }
        None => {
            f.keep_silently(&["config"]);
            None
        }
    };
    let env = f.map("env").unwrap_or_default();
    let user = f.string("user");
    let shutdown_delay = f.duration("shutdown_delay").unwrap_or(Duration::ZERO);
    let kill_signal = f.parsed("kill_signal").unwrap_or(KillSignal::Term);
    let kill_timeout = f.duration("kill_timeout").unwrap_or(DEFAULT_KILL_TIMEOUT);
    let lifecycle = f
        .block("lifecycle")
        .and_then(|block| decode_lifecycle(&mut f.nested(block)));
    let leader = f.bool("leader").unwrap_or(false);
    let restart = f
        .block("restart")
        .map(|block| decode_restart(&mut f.nested(block), restart))
        .unwrap_or_else(|| restart.clone());
    let resources = f
        .block("resources")
        .map(|block| decode_resources(&mut f.nested(block)));
    let mount_blocks = f.blocks("volume_mount");
    if driver == Some(Driver::RawExec) {
        // Nomad: `task driver "raw_exec" for "t" does not support host
        // volumes` (or CSI), when the alloc starts; here at `job run`.
        for block in &mount_blocks {
            f.error(
                block.kind.span.start,
                format!(
                    "volume_mount in task {name:?}: task driver \"raw_exec\" does not support volume mounts (it runs the task on the host's root); use driver \"exec\""
                ),
            );
        }
    }
    let volume_mounts = mount_blocks
        .into_iter()
        .filter_map(|block| decode_volume_mount(&mut f.nested(block), volumes, group))
        .collect();
    let csi_plugin = f
        .block("csi_plugin")
        .and_then(|block| decode_csi_plugin(&mut f.nested(block)));
    let services = f
        .blocks("service")
        .into_iter()
        .map(|block| decode_service(&mut f.nested(block)))
        .collect();
    let templates = f
        .blocks("template")
        .into_iter()
        .filter_map(|block| decode_template(&mut f.nested(block)))
        .collect();
    let artifacts = f
        .blocks("artifact")
        .into_iter()
        .filter_map(|block| decode_artifact(&mut f.nested(block)))
        .collect();
    let placement = super::constraint::decode_task_placement(f);
    let dispatch_payload = f
        .block("dispatch_payload")
        .and_then(|block| decode_dispatch_payload(&mut f.nested(block)));
    f.refuse(TASK_REFUSED);
    let ignored = f.ignore(TASK_IGNORED);
    f.finish();
    Task {
        name,
        driver: driver.unwrap_or(Driver::Exec),
        config: config.unwrap_or_default(),
        docker,
        env,
        user,
        shutdown_delay,
        kill_signal,
        kill_timeout,
        lifecycle,
        leader,
        restart,
        resources,
        volume_mounts,
        csi_plugin,
        services,
        templates,
        artifacts,
        meta: placement.meta,
        constraints: placement.constraints,
        dispatch_payload,
        ignored,
    }
}

/// `dispatch_payload { file }`: a path that stays inside `local/`.
fn decode_dispatch_payload(f: &mut Fields<'_>) -> Option<String> {
    let file = f.string_at("file");
    let (file, pos) = f.require("file", file)?;
    f.finish();
    if file.is_empty() || !super::template::stays_inside(&file) || file.starts_with('/') {
        f.error(
            pos,
            format!(
                "file {file:?} in {} must be a relative path that stays inside the task's local/ dir",
                f.what()
            ),
        );
        return None;
    }
    Some(file)
}

fn decode_lifecycle(f: &mut Fields<'_>) -> Option<Lifecycle> {
    let hook = f.parsed("hook");
    let hook = f.require("hook", hook);
    let sidecar = f.bool("sidecar").unwrap_or(false);
    f.finish();
    Some(Lifecycle {
        hook: hook?,
        sidecar,
    })
}

fn decode_exec_config(f: &mut Fields<'_>, driver: Driver, ignored: &[&'static str]) -> ExecConfig {
    let command = f.string_at("command");
    let command = f.require("command", command);
    if let Some((command, pos)) = &command {
        if command.is_empty() {
            f.error(
                *pos,
                format!("\"command\" in {} must not be empty", f.what()),
            );
        }
    }
    let (mut pid_mode, mut ipc_mode) = (NamespaceMode::Private, NamespaceMode::Private);
    let (mut cap_add, mut cap_drop) = (Vec::new(), Vec::new());
    if driver == Driver::Exec {
        pid_mode = namespace_mode(f, "pid_mode");
        ipc_mode = namespace_mode(f, "ipc_mode");
        cap_add = capabilities(f, "cap_add");
        cap_drop = capabilities(f, "cap_drop");
    }
    let config = ExecConfig {
        command: command.map(|(command, _)| command).unwrap_or_default(),
        args: f.strings("args").unwrap_or_default(),
        pid_mode,
        ipc_mode,
        cap_add,
        cap_drop,
        work_dir: work_dir(f),
        ignored: {
            if driver == Driver::RawExec {
                f.refuse(RAW_EXEC_CONFIG_REFUSED);
            }
            f.ignore(ignored)
        },
    };
    f.finish();
    config
}

/// `work_dir` of an exec or raw_exec task's config: an absolute path, as
/// Nomad's drivers take it, or one that starts with a `${...}` variable
/// (checked once interpolated, at `job run` and at each start).
fn work_dir(f: &mut Fields<'_>) -> Option<String> {
    let (dir, pos) = f.string_at("work_dir")?;
    if !dir.starts_with('/') && !dir.starts_with("${") {
        f.error(
            pos,
            format!(
                "\"work_dir\" in {} must be an absolute path, found {dir:?}",
                f.what()
            ),
        );
    }
    Some(dir)
}

/// `key` of an exec task's config: `private`, `""` or `host`.
fn namespace_mode(f: &mut Fields<'_>, key: &'static str) -> NamespaceMode {
    match f.string_at(key) {
        None => NamespaceMode::Private,
        Some((mode, pos)) => match mode.as_str() {
            "" | "private" => NamespaceMode::Private,
            "host" => NamespaceMode::Host,
            other => {
                f.error(
                    pos,
                    format!(
                        "{key:?} in {} must be \"private\" or \"host\", found {other:?}",
                        f.what()
                    ),
                );
                NamespaceMode::Private
            }
        },
    }
}

fn decode_volume_mount(
    f: &mut Fields<'_>,
    volumes: &[GroupVolume],
    group: &str,
) -> Option<VolumeMount> {
    let volume = f.string_at("volume");
    let volume = f.require("volume", volume);
    let destination = f.string_at("destination");
    let destination = f.require("destination", destination);
    let read_only = f.bool("read_only").unwrap_or(false);
    let propagation_at = f.parsed_at("propagation_mode");
    let propagation = propagation_at.map(|(propagation, _)| propagation);
    let ignored = f.ignore(VOLUME_MOUNT_IGNORED);
    let mut declared = None;
    if let Some((alias, pos)) = &volume {
        declared = volumes.iter().find(|v| &v.alias == alias);
        if declared.is_none() {
            let aliases: Vec<&str> = volumes.iter().map(|v| v.alias.as_str()).collect();
            let hint = match nearest(alias, &aliases) {
                Some(near) => format!(" (did you mean {near:?}?)"),
                None => String::new(),
            };
            f.error(
                *pos,
                format!(
                    "{} names volume {alias:?}, which {group} does not declare{hint}",
                    f.what()
                ),
            );
        }
    }
    if let Some((destination, pos)) = &destination {
        if destination.is_empty() {
            f.error(
                *pos,
                format!("\"destination\" in {} must not be empty", f.what()),
            );
        } else if Path::new(destination)
            .components()
            .any(|c| c == Component::ParentDir)
        {
            f.error(
                *pos,
                format!(
                    "\"destination\" in {} must not contain \"..\", found {destination:?}",
                    f.what()
                ),
            );
        }
    }
    if let Some((Propagation::Bidirectional, pos)) = propagation_at {
        let volume_read_only = declared.is_some_and(|v| v.read_only);
        if read_only || volume_read_only {
            let which = if read_only { "the mount" } else { "the volume" };
            f.error(
                pos,
                format!(
                    "propagation_mode \"bidirectional\" in {} needs a read-write volume and mount, and {which} is read-only",
                    f.what()
                ),
            );
        }
    }
    f.finish();
    Some(VolumeMount {
        volume: volume?.0,
        destination: destination?.0,
        read_only,
        propagation: propagation.unwrap_or(Propagation::Private),
        ignored,
    })
}

pub(crate) fn write_task(w: &mut Writer, task: &Task) {
    w.open("task", Some(&task.name));
    w.string("driver", task.driver.as_str());
    w.map("meta", &task.meta);
    super::constraint::write_constraints(w, &task.constraints);
    if let Some(docker) = &task.docker {
        write_docker_config(w, docker);
    } else {
        w.open("config", None);
        w.string("command", &task.config.command);
        w.strings("args", &task.config.args);
        for (key, mode) in [
            ("pid_mode", task.config.pid_mode),
            ("ipc_mode", task.config.ipc_mode),
        ] {
            if mode == NamespaceMode::Host {
                w.string(key, "host");
            }
        }
        w.opt_string("work_dir", task.config.work_dir.as_deref());
        for (key, caps) in [
            ("cap_add", &task.config.cap_add),
            ("cap_drop", &task.config.cap_drop),
        ] {
            if !caps.is_empty() {
                w.strings(key, caps);
            }
        }
        w.kept(&task.config.ignored);
        w.close();
    }
    w.map("env", &task.env);
    w.opt_string("user", task.user.as_deref());
    if !task.shutdown_delay.is_zero() {
        w.duration("shutdown_delay", task.shutdown_delay);
    }
    if task.kill_signal != KillSignal::Term {
        w.string("kill_signal", task.kill_signal.as_str());
    }
    w.duration("kill_timeout", task.kill_timeout);
    if let Some(lifecycle) = &task.lifecycle {
        w.open("lifecycle", None);
        w.string("hook", lifecycle.hook.as_str());
        w.plain("sidecar", lifecycle.sidecar);
        w.close();
    }
    if task.leader {
        w.plain("leader", true);
    }
    if let Some(file) = &task.dispatch_payload {
        w.open("dispatch_payload", None);
        w.string("file", file);
        w.close();
    }
    write_restart(w, &task.restart);
    if let Some(resources) = &task.resources {
        write_resources(w, resources);
    }
    for mount in &task.volume_mounts {
        w.open("volume_mount", None);
        w.string("volume", &mount.volume);
        w.string("destination", &mount.destination);
        w.plain("read_only", mount.read_only);
        w.string("propagation_mode", mount.propagation.as_str());
        w.kept(&mount.ignored);
        w.close();
    }
    if let Some(plugin) = &task.csi_plugin {
        write_csi_plugin(w, plugin);
    }
    for service in &task.services {
        write_service(w, service);
    }
    for template in &task.templates {
        write_template(w, template);
    }
    for artifact in &task.artifacts {
        write_artifact(w, artifact);
    }
    w.kept(&task.ignored);
    w.close();
}
