//! Starting one task: the task dir, the environment, the driver mounts,
//! the root of an `exec` task and the namespace plan, the spawn; for a
//! plugin task, its socket dir, the shared `csi/` root, and the spec the
//! agent registers. Also the checks `job run` makes on a task's `${VAR}`s
//! and destinations (a template's too). A task's artifacts are fetched and
//! its templates render once its dirs exist, before any driver starts it,
//! in the prepare helper's process (`prepare/`).
//!
//! A start has two halves: [`Allocs::plan_start`], on the main loop, takes
//! what the start needs from the loop's state as owned values (a
//! [`StartPlan`]); [`prepare`], on a starter thread (`starter.rs`), does
//! the slow part with them alone (directories, artifacts and templates
//! through the prepare helper, mounts, the control group, the spawn; for a
//! docker task, the container's spec) and
//! returns what it [`Started`], for the loop to take in.
//!
//! A plugin task in its own root gets Nomad's directory contract: its
//! socket dir (`data_dir/plugins/<alloc>`) at `mount_dir`, with
//! `CSI_ENDPOINT=unix://<mount_dir>/csi.sock`, and the agent's
//! `csi/<plugin>` dir at `stage_publish_base_dir`, both bidirectional
//! binds; the spec it is registered with records that base dir, so the
//! volume manager names staging and publish paths in the plugin's view
//! ([`crate::volume::layout::Paths::for_plugin`]). A `raw_exec` plugin task,
//! on the host's root, gets host paths, as external plugins do.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use super::artifact::{self, ArtifactLimits};
use super::cgroup;
use super::destination::{prepare_target, resolve_destination};
use super::docker::{self, VolumeBind};
use super::env::{interpolate, lookups, task_env, TaskContext};
use super::exec::{self, Launch};
use super::exit::Exit;
use super::mounts::{DriverMount, NamespacePlan};
use super::plugin_endpoint::{host_endpoint, plugin_spec, task_endpoint};
use super::ports;
use super::prepare;
use super::root::{check_destination, PluginDir, RootPlan};
use super::templates;
use super::user::{self, User};
use super::{Alloc, Allocs, UseState, VolumeSource};
use crate::mount::{MountInfo, Mounter, Propagation, SysMounter};
use crate::plugin::PluginSpec;
use crate::spec::{ChrootEntry, Driver, Group, NamespaceMode, Network, Task};

/// Checks, at `job run`, that every `${VAR}` of a task names a variable
/// (in a docker task's config too) and that every destination has room in
/// the task's root (an exec task's; a container's root is its image).
/// `children` is what a child of the job adds to the environment
/// (`dispatch::child_env_names`).
pub(super) fn check_interpolation(
    group: &Group,
    task: &Task,
    job: &str,
    chroot_env: &[ChrootEntry],
    node: &BTreeMap<String, String>,
    children: &BTreeMap<String, String>,
) -> Result<(), String> {
    let alloc_dir = Path::new("/alloc/00000000");
    let ctx = TaskContext {
        alloc_id: "00000000",
        alloc_index: 0,
        job,
        group: &group.name,
        task: &task.name,
        alloc_dir,
        // A container, like an exec task, sees /alloc and /local.
        own_root: task.driver != Driver::RawExec,
    };
    let mut base = ctx.base();
    base.extend(children.clone());
    let host_ip = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    base.extend(ports::port_env(
        group,
        &ports::placeholder_ports(group),
        host_ip,
    ));
    let socket_dir = Path::new("/plugins/00000000");
    if let Some(csi) = &task.csi_plugin {
        base.insert("CSI_ENDPOINT".into(), task_endpoint(task, csi, socket_dir));
        if task.driver == Driver::Exec {
            for (key, dir) in [
                ("mount_dir", &csi.mount_dir),
                ("stage_publish_base_dir", &csi.stage_publish_base_dir),
            ] {
                check_destination(&dir.to_string_lossy(), chroot_env)
                    .map_err(|e| format!("csi_plugin {key}: {e}"))?;
            }
        }
    }
    let meta = group.task_meta(task);
    let mut env =
        task_env(&base, node, &meta, &task.env).map_err(|(key, e)| format!("{key}: {e}"))?;
    for t in &task.templates {
        for name in templates::env_names(t) {
            env.entry(name).or_default();
        }
    }
    if let Some(csi) = &task.csi_plugin {
        host_endpoint(task, csi, &env["CSI_ENDPOINT"], socket_dir)?;
    }
    let vars = lookups(&env, node);
    for arg in &task.config.args {
        interpolate(arg, &vars).map_err(|e| format!("config.args: {e}"))?;
    }
    work_dir(task, &vars)?;
    if let Some(docker) = &task.docker {
        for (key, text) in docker::docker_strings(docker) {
            interpolate(text, &vars).map_err(|e| format!("config.{key}: {e}"))?;
        }
    }
    // A container's root is its image, which a volume may cover anywhere.
    let chroot_env = if task.driver == Driver::Docker {
        None
    } else {
        Some(chroot_env)
    };
    for t in &task.templates {
        templates::destination(t, &ctx.task_dir(), &vars)
            .map_err(|e| format!("template {:?}: {e}", t.destination))?;
    }
    artifact::check(&task.artifacts, &vars, &ctx.task_dir())?;
    for vm in &task.volume_mounts {
        let dest = interpolate(&vm.destination, &vars)
            .map_err(|e| format!("volume_mount {:?}: {e}", vm.volume))?;
        resolve_destination(&ctx.task_dir(), &dest)
            .and_then(|_| chroot_env.map_or(Ok(()), |env| check_destination(&dest, env)))
            .map_err(|e| format!("volume_mount {:?}: {e}", vm.volume))?;
    }
    Ok(())
}

/// An exec or raw_exec task's `work_dir`, interpolated: absolute, as
/// Nomad's drivers take it.
fn work_dir(task: &Task, vars: &BTreeMap<String, String>) -> Result<Option<PathBuf>, String> {
    let Some(dir) = task.config.work_dir.as_deref() else {
        return Ok(None);
    };
    let dir = interpolate(dir, vars).map_err(|e| format!("config.work_dir: {e}"))?;
    if !dir.starts_with('/') {
        return Err(format!("config.work_dir: {dir:?} is not an absolute path"));
    }
    Ok(Some(PathBuf::from(dir)))
}

/// A task started on a starter thread (`starter.rs`): what runs it; for a
/// plugin task, the spec the agent registers and its health timeout; what
/// its events must say of the start.
pub(super) struct Started {
    pub runs: Runs,
    pub plugin: Option<(PluginSpec, Duration)>,
    pub notes: Vec<String>,
}

/// What a start made.
pub(super) enum Runs {
    /// An `exec` or `raw_exec` task's process, forked.
    Process(Child),
    /// A docker task's container, which the driver's thread creates and
    /// starts once the loop hands it over.
    Container(Box<docker::Run>),
}

/// Everything one start of a task needs, owned: taken from the loop's
/// state ([`Allocs::plan_start`]), so that a starter thread carries it out
/// ([`prepare`]) while the loop goes on.
pub(super) struct StartPlan {
    pub alloc: String,
    pub index: u64,
    pub job: String,
    pub group: String,
    pub network: Option<Network>,
    pub spec: Task,
    /// Where volumes are staged and published (`data_dir/csi` unless the
    /// config's `csi_dir` says otherwise).
    pub csi_root: PathBuf,
    pub alloc_dir: PathBuf,
    /// A plugin task's socket dir, `data_dir/plugins/<alloc>`.
    pub socket_dir: PathBuf,
    /// The agent's control socket, hidden from `raw_exec` tasks.
    pub control_socket: PathBuf,
    /// The environment before the templates render.
    pub env: BTreeMap<String, String>,
    pub node: BTreeMap<String, String>,
    pub services: Vec<crate::nomad_template::NomadService>,
    pub plugin: Option<(PluginSpec, Duration)>,
    /// The source of each of the task's `volume_mount`s, in their order.
    pub volumes: Vec<MountSource>,
    pub chroot_env: Vec<ChrootEntry>,
    pub caps: Option<u64>,
    pub docker: Option<ContainerPlan>,
    /// The agent's bounds on fetching the task's artifacts.
    pub artifact_limits: ArtifactLimits,
    /// A dispatched child's payload and the file under `local/` it goes
    /// to (`dispatch.rs`).
    pub payload: Option<(String, Vec<u8>)>,
}

/// Where a `volume_mount`'s volume is on the host.
pub(super) struct MountSource {
    pub source: PathBuf,
    pub read_only: bool,
    /// A CSI volume (its publish path), not a host volume.
    pub csi: bool,
}

/// What the loop gives a docker task's start.
pub(super) struct ContainerPlan {
    pub run: u64,
    pub labels: BTreeMap<String, String>,
    pub privileges: docker::Privileges,
    pub host_paths: bool,
    /// The node's MHz (`cpu_total_compute` or its fingerprint) per core,
    /// for `cpu_hard_limit`.
    pub mhz_per_core: u64,
}

impl Allocs {
    /// What starting task `i` of `alloc` needs, from the loop's state;
    /// what is wrong with it already (an unclaimed volume, a bad
    /// `${VAR}` in its env) fails the start here.
    pub(super) fn plan_start(&mut self, alloc: &Alloc, i: usize) -> Result<StartPlan, String> {
        let spec = &alloc.group.tasks[i];
        let socket_dir = self.plugin_socket_dir(&alloc.id);
        let env = self.task_environment(alloc, i)?;
        // The socket the agent watches comes from the environment before
        // templates, as after a restart, when it is read again without
        // rendering: an env template's CSI_ENDPOINT is the task's view.
        let plugin = plugin_spec(alloc, i, &env, &socket_dir)?;
        let volumes = spec
            .volume_mounts
            .iter()
            .map(|vm| mount_source(alloc, &vm.volume))
            .collect::<Result<Vec<_>, _>>()?;
        let docker = spec.docker.as_ref().map(|_| ContainerPlan {
            run: self.docker.next_run(),
            labels: docker::labels(&self.data_dir, &alloc.id, &alloc.job, &spec.name),
            privileges: self.privileges.clone(),
            host_paths: self.docker_settings.volumes_enabled,
            // Nomad's share of the node's MHz times its cores.
            mhz_per_core: self.placement.node.cpu / self.placement.node.cores.max(1),
        });
        Ok(StartPlan {
            alloc: alloc.id.clone(),
            index: alloc.index,
            job: alloc.job.clone(),
            group: alloc.group.name.clone(),
            network: alloc
                .group
                .network
                .as_ref()
                .map(|n| ports::as_allocated(n, &alloc.ports)),
            spec: spec.clone(),
            csi_root: self.csi_root.clone(),
            alloc_dir: self.alloc_dir(&alloc.id),
            socket_dir,
            control_socket: self.control_socket.clone(),
            env,
            node: self.node.attributes().clone(),
            services: self.services_for(&alloc.id, spec),
            plugin,
            volumes,
            chroot_env: self.chroot_env.clone(),
            caps: self.task_caps(spec),
            docker,
            artifact_limits: self.artifact_limits,
            payload: self.payload_for(alloc, i),
        })
    }
}

/// The source of alloc `alloc`'s group volume `alias`: a host volume's
/// path, a claimed CSI volume's publish path.
fn mount_source(alloc: &Alloc, alias: &str) -> Result<MountSource, String> {
    let used = alloc
        .volumes
        .iter()
        .find(|v| v.alias == alias)
        .ok_or_else(|| format!("volume_mount {alias:?}: no such group volume"))?;
    let source = match (&used.source, &used.state) {
        (VolumeSource::Host { path }, _) => path.clone(),
        (VolumeSource::Csi, UseState::Claimed { publish_path }) => publish_path.clone(),
        _ => return Err(format!("volume {:?} is not claimed", used.volume_id)),
    };
    Ok(MountSource {
        source,
        read_only: used.read_only,
        csi: used.source == VolumeSource::Csi,
    })
}

/// Why a start failed: fetching its artifacts, or any other step.
#[derive(Debug)]
pub(super) enum StartFailure {
    Artifact(String),
    Other(String),
}

impl From<String> for StartFailure {
    fn from(why: String) -> StartFailure {
        StartFailure::Other(why)
    }
}

impl From<prepare::Failure> for StartFailure {
    fn from(failure: prepare::Failure) -> StartFailure {
        if failure.fetching() {
            StartFailure::Artifact(failure.message)
        } else {
            StartFailure::Other(failure.message)
        }
    }
}

impl StartFailure {
    /// The task's end this failure is.
    pub(super) fn into_exit(self) -> Exit {
        match self {
            StartFailure::Artifact(why) => Exit::ArtifactFailed(why),
            StartFailure::Other(why) => Exit::StartFailed(why),
        }
    }
}

/// Carries out `plan`, off the loop: prepares the task dir, renders the
/// templates, prepares the mounts, and starts the task with its driver (a
/// docker task up to the container the driver's thread is to start).
pub(super) fn prepare(plan: StartPlan) -> Result<Started, StartFailure> {
    let spec = &plan.spec;
    let alloc_dir = &plan.alloc_dir;
    let ctx = TaskContext {
        alloc_id: &plan.alloc,
        alloc_index: plan.index,
        job: &plan.job,
        group: &plan.group,
        task: &spec.name,
        alloc_dir,
        own_root: spec.driver != Driver::RawExec,
    };
    let task_dir = ctx.task_dir();
    // A container's user is the image's to resolve.
    let user = match &spec.user {
        Some(name) if spec.driver != Driver::Docker => {
            Some(user::lookup_user(name).map_err(|e| format!("user {name:?}: {e}"))?)
        }
        _ => None,
    };
    make_dir(alloc_dir, 0o711)?;
    make_dir(&alloc_dir.join("alloc"), 0o755)?;
    // As Nomad's: where the group's tasks, whatever their users, share
    // data.
    make_dir(&alloc_dir.join("alloc/data"), 0o777)?;
    make_dir(&alloc_dir.join("alloc/tmp"), 0o777)?;
    make_dir(&task_dir, 0o755)?;
    for (dir, mode) in [("local", 0o755), ("secrets", 0o700), ("tmp", 0o1777)] {
        let path = task_dir.join(dir);
        make_dir(&path, mode)?;
        if let Some(user) = user {
            chown(&path, user)?;
        }
    }
    // The logs stay the agent's: it opens them on the host.
    make_dir(&task_dir.join("logs"), 0o755)?;
    // Before the artifacts and templates, which may read it, as Nomad's
    // dispatch hook.
    if let Some((file, payload)) = &plan.payload {
        super::dispatch::write_payload(&task_dir.join("local"), file, payload, user)?;
    }
    let socket_dir = &plan.socket_dir;
    // Fetched, then rendered, before the driver starts (Nomad's artifact
    // hook, then its template hook), in a process of their own.
    let env = prepare::for_start(
        &plan.alloc,
        spec,
        &task_dir,
        user,
        plan.env,
        prepare::Reads(&plan.node, &plan.services),
        plan.artifact_limits,
    )?;
    let vars = lookups(&env, &plan.node);
    let args = spec
        .config
        .args
        .iter()
        .map(|a| interpolate(a, &vars))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("config.args: {e}"))?;
    let work_dir = work_dir(spec, &vars)?;
    let mut mounts = Vec::new();
    let mut binds = Vec::new();
    for (vm, used) in spec.volume_mounts.iter().zip(&plan.volumes) {
        let source = used.source.clone();
        let dest = interpolate(&vm.destination, &vars)
            .map_err(|e| format!("volume_mount {:?}: {e}", vm.volume))?;
        if vm.propagation != Propagation::Private && used.csi {
            make_shared(&source)?;
        }
        let read_only = vm.read_only || used.read_only;
        if spec.driver == Driver::Docker {
            binds.push(VolumeBind {
                block: !source.is_dir(),
                source,
                destination: dest,
                read_only,
                propagation: vm.propagation,
            });
            continue;
        }
        let target = resolve_destination(&task_dir, &dest)
            .and_then(|target| check_destination(&dest, &plan.chroot_env).map(|()| target))
            .map_err(|e| format!("volume_mount {:?}: {e}", vm.volume))?;
        prepare_target(&task_dir, &dest, &target, source.is_dir())
            .map_err(|e| format!("volume_mount {:?}: {}", vm.volume, crate::error_chain(&e)))?;
        mounts.push(DriverMount {
            source,
            target,
            read_only,
            propagation: vm.propagation,
        });
    }
    let plugin = plan.plugin;
    let mut keep = Vec::new();
    let mut plugin_dirs = Vec::new();
    if let (Some(p), Some((registered, _))) = (&spec.csi_plugin, &plugin) {
        let root = plan.csi_root.clone();
        ensure_shared_root(&root)?;
        make_dir(&root.join(&p.id), 0o700)?;
        keep.push(root.clone());
        make_dir(socket_dir, 0o700)?;
        if let Some(user) = user {
            chown(socket_dir, user)?;
        }
        let _ = fs::remove_file(registered.endpoint.path());
        // Nomad's contract: both bidirectional, so that what the
        // plugin mounts under its base dir (a peer of the shared
        // `csi/` root) is mounted on the host too.
        plugin_dirs.push(PluginDir {
            source: socket_dir.clone(),
            destination: p.mount_dir.clone(),
            // A socket crosses a bind whatever its propagation; the
            // engine refuses a shared bind of a dir on a private
            // mount, which the socket dir may well be.
            propagation: match spec.driver {
                Driver::Docker => Propagation::Private,
                _ => Propagation::Bidirectional,
            },
        });
        plugin_dirs.push(PluginDir {
            source: root.join(&p.id),
            destination: p.stage_publish_base_dir.clone(),
            propagation: Propagation::Bidirectional,
        });
    }
    if let (Some(config), Some(container)) = (&spec.docker, plan.docker) {
        let name = docker::container_name(&plan.alloc, &spec.name);
        let (container_spec, notes) = docker::container_spec(docker::Inputs {
            task: spec,
            config,
            vars: &vars,
            env,
            task_dir: &task_dir,
            shared_dir: &alloc_dir.join("alloc"),
            volumes: binds,
            plugin_dirs,
            labels: container.labels,
            network: plan.network.as_ref(),
            privileges: &container.privileges,
            host_paths: container.host_paths,
            mhz_per_core: container.mhz_per_core,
        })?;
        let run = docker::Run {
            alloc: plan.alloc.clone(),
            task: spec.name.clone(),
            run: container.run,
            name,
            spec: container_spec,
            force_pull: config.force_pull,
            auth: config.auth.as_ref().map(docker::auth),
            stdout: task_dir.join("logs/stdout"),
            stderr: task_dir.join("logs/stderr"),
            stopping: Arc::new(AtomicBool::new(false)),
        };
        return Ok(Started {
            runs: Runs::Container(Box::new(run)),
            plugin,
            notes,
        });
    }
    let host = MountInfo::read().map_err(|e| e.to_string())?;
    let (root, hide) = match spec.driver {
        Driver::RawExec => (None, vec![plan.control_socket.clone()]),
        _ => {
            let owner = user.unwrap_or(User { uid: 0, gid: 0 });
            let root = RootPlan::new(
                &task_dir,
                &alloc_dir.join("alloc"),
                &plan.chroot_env,
                owner,
                plugin_dirs,
            );
            root.prepare().map_err(|e| crate::error_chain(&e))?;
            (Some(root), Vec::new())
        }
    };
    let cgroup = cgroup::prepare(&plan.alloc, &spec.name, spec.resources.as_ref());
    let launch = Launch {
        command: spec.config.command.clone(),
        args,
        env,
        cwd: task_dir.clone(),
        work_dir,
        stdout: task_dir.join("logs/stdout"),
        stderr: task_dir.join("logs/stderr"),
        pid_file: alloc_dir.join(format!("{}.pid", spec.name)),
        exit_record: exec::exit_record::path(alloc_dir, &spec.name),
        user,
        namespace: NamespacePlan::new(&host, keep, mounts, hide),
        root,
        cgroup_procs: cgroup.procs,
        caps: plan.caps,
        no_new_privs: spec.driver == Driver::Exec,
        pid_ns: spec.driver == Driver::Exec && spec.config.pid_mode == NamespaceMode::Private,
        ipc_ns: spec.driver == Driver::Exec && spec.config.ipc_mode == NamespaceMode::Private,
    };
    let child = exec::spawn(&launch).map_err(|e| crate::error_chain(&e))?;
    Ok(Started {
        runs: Runs::Process(child),
        plugin,
        notes: cgroup.note.into_iter().collect(),
    })
}

impl Allocs {
    /// An exec task's capabilities ([`exec::caps`]). A plugin task that
    /// says nothing of them keeps the agent's: a node plugin mounts.
    fn task_caps(&self, spec: &Task) -> Option<u64> {
        let config = &spec.config;
        let plugin_as_is =
            spec.csi_plugin.is_some() && config.cap_add.is_empty() && config.cap_drop.is_empty();
        (spec.driver == Driver::Exec && !plugin_as_is).then(|| {
            exec::caps::task_caps(
                &self.exec_settings.allow_caps,
                &config.cap_add,
                &config.cap_drop,
                exec::caps::last_cap(),
            )
        })
    }

    /// The whole environment of task `i` of `alloc`: the agent's variables
    /// (with a plugin task's `CSI_ENDPOINT`), then the task's `env` block.
    pub(super) fn task_environment(
        &self,
        alloc: &Alloc,
        i: usize,
    ) -> Result<BTreeMap<String, String>, String> {
        let spec = &alloc.group.tasks[i];
        let alloc_dir = self.alloc_dir(&alloc.id);
        let ctx = TaskContext {
            alloc_id: &alloc.id,
            alloc_index: alloc.index,
            job: &alloc.job,
            group: &alloc.group.name,
            task: &spec.name,
            alloc_dir: &alloc_dir,
            own_root: spec.driver != Driver::RawExec,
        };
        let mut base = ctx.base();
        let host_ip = self
            .placement
            .host_ip
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        base.extend(ports::port_env(&alloc.group, &alloc.ports, host_ip));
        base.extend(self.child_env(alloc));
        if let Some(csi) = &spec.csi_plugin {
            let socket_dir = self.plugin_socket_dir(&alloc.id);
            base.insert("CSI_ENDPOINT".into(), task_endpoint(spec, csi, &socket_dir));
        }
        let meta = alloc.group.task_meta(spec);
        task_env(&base, self.node.attributes(), &meta, &spec.env)
            .map_err(|(key, e)| format!("{key}: {e}"))
    }
}

/// Creates `path` (and its parents) with `mode`. A symlink there is
/// refused: a task may have left one in its dirs, and the agent must not
/// change the mode or owner of what it points to.
fn make_dir(path: &Path, mode: u32) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let meta =
        fs::symlink_metadata(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "{} is not a directory (a symlink?)",
            path.display()
        ));
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))
}

fn chown(path: &Path, user: User) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
        .map_err(|e| format!("cannot give {} to uid {}: {e}", path.display(), user.uid))
}

/// Makes the host's mount at `path` shared, so a task's slave or shared
/// bind of it receives (and for shared, sends) mount events.
fn make_shared(path: &Path) -> Result<(), String> {
    let info = MountInfo::read().map_err(|e| e.to_string())?;
    match info.get(path) {
        Some(m) if m.shared_peer_group().is_some() => Ok(()),
        Some(_) => SysMounter
            .set_propagation(path, Propagation::Bidirectional)
            .map_err(|e| crate::error_chain(&e)),
        None => Err(format!("{} is not a mount point", path.display())),
    }
}

/// The agent's `csi/` root as a shared mount of its own, so mounts a
/// plugin task makes under it (in its namespace) appear on the host.
fn ensure_shared_root(root: &Path) -> Result<(), String> {
    make_dir(root, 0o700)?;
    let info = MountInfo::read().map_err(|e| e.to_string())?;
    if info.get(root).is_none() {
        SysMounter
            .bind(root, root, false)
            .map_err(|e| crate::error_chain(&e))?;
    }
    make_shared(root)
}
