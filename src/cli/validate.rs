//! `csi-agent validate FILE...`: decodes agent configs, volume specs and
//! job files, and prints what each holds or every error found in it.
//!
//! A file named `*.json` is read in HCL's JSON syntax, as Nomad does. The
//! kind of each file is told from its top level (see
//! [`FileKind::of`](crate::spec::FileKind::of)). A summary of each valid
//! file goes to stdout; errors and warnings go to stderr as
//! `file:line:col: ...`, the form editors jump to. The summary never shows
//! secret values, mount flags, environment values or command arguments:
//! any of them may hold a credential.

use super::out;
use std::fmt;
use std::fmt::Write as _;
use std::io::Read as _;

use super::args::{self, UsageError};
use super::job_inputs::{self, VAR_FLAGS};
use super::CliError;
use crate::csi::Capability;
use crate::spec::{AgentConfig, Group, Job, Service, SpecFile, Task, VolumeSpec};
use crate::units::format_duration;
use crate::units::format_size;

pub const USAGE: &str = "\
usage: csi-agent validate [-var NAME=VALUE]... [-var-file FILE]... [-hcl2-strict=false] FILE...

Checks agent configs, volume specs and job files (\"-\" reads stdin); a
file named *.json is read in HCL's JSON syntax. A file with a job block is
a job, one with a top-level plugin_id a volume spec, any other an agent
config. Prints a summary of each valid file, or every error found, as
file:line:col; exits 1 if any file has an error. -var, -var-file and
NOMAD_VAR_<NAME> in the environment give a job's variables values, as
for job run; a value for a variable a job does not declare is an error,
a warning with -hcl2-strict=false.";

/// Some files did not validate; their errors are already printed.
#[derive(Debug)]
pub struct Failed {
    pub invalid: usize,
    pub total: usize,
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let noun = if self.total == 1 { "file" } else { "files" };
        write!(
            f,
            "{} of {} {noun} did not validate",
            self.invalid, self.total
        )
    }
}

impl std::error::Error for Failed {}

/// Prints `errors`, one a line, and fails as `validate` fails one file,
/// if there are any: how `job run` and `job plan` refuse a job file whose
/// inputs do not fit it before they send it.
pub(super) fn refuse_if_any(errors: &[impl std::fmt::Display]) -> Result<(), CliError> {
    if errors.is_empty() {
        return Ok(());
    }
    for err in errors {
        eprintln!("{err}");
    }
    Err(CliError::Validate(Failed {
        invalid: 1,
        total: 1,
    }))
}

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(&VAR_FLAGS, argv)?;
    if args.positional.is_empty() {
        return Err(UsageError::new("missing FILE").into());
    }
    let mut invalid = 0;
    for path in &args.positional {
        if !validate_file(&args, path)? {
            invalid += 1;
        }
    }
    if invalid > 0 {
        return Err(CliError::Validate(Failed {
            invalid,
            total: args.positional.len(),
        }));
    }
    Ok(())
}

/// Validates one file, printing its summary or its errors; whether it is
/// valid. An error reading a var file ends the command.
fn validate_file(args: &args::Args, path: &str) -> Result<bool, CliError> {
    let inputs = job_inputs::gather(args, path)?;
    let (name, read) = if path == "-" {
        let mut src = String::new();
        let read = std::io::stdin().read_to_string(&mut src).map(|_| src);
        ("<stdin>", read)
    } else {
        (path, std::fs::read_to_string(path))
    };
    let src = match read {
        Ok(src) => src,
        Err(err) => {
            eprintln!("error: failed to read {name}: {err}");
            return Ok(false);
        }
    };
    Ok(match SpecFile::decode_with(&src, name, &inputs) {
        Ok(decoded) => {
            out::out!("{}", summary(name, &decoded.spec));
            for warning in &decoded.warnings {
                eprintln!("{warning}");
            }
            true
        }
        Err(invalid) => {
            for err in &invalid.errors {
                eprintln!("{err}");
            }
            for warning in &invalid.warnings {
                eprintln!("{warning}");
            }
            false
        }
    })
}

/// What a valid file holds, one line per item, indented by nesting.
pub fn summary(name: &str, spec: &SpecFile) -> String {
    let mut out = String::new();
    match spec {
        SpecFile::Agent(config) => agent_summary(&mut out, name, config),
        SpecFile::Volume(volume) => volume_summary(&mut out, name, volume),
        SpecFile::Job(job) => job_summary(&mut out, name, job),
    }
    out
}

fn agent_summary(out: &mut String, name: &str, config: &AgentConfig) {
    let _ = writeln!(
        out,
        "{name}: agent config: data_dir {}, node_name {}, log_level {}, plugin_heartbeat {}",
        config.data_dir.display(),
        config.node_name.as_deref().unwrap_or("(host name)"),
        config.log_level.as_str().to_lowercase(),
        format_duration(config.plugin_heartbeat),
    );
    for plugin in &config.plugins {
        let _ = writeln!(
            out,
            "  plugin {:?}: {} at {}",
            plugin.id, plugin.plugin_type, plugin.socket
        );
    }
    for volume in &config.host_volumes {
        let mode = usage(volume.read_only);
        let _ = writeln!(
            out,
            "  host_volume {:?}: {} ({mode})",
            volume.name,
            volume.path.display()
        );
    }
    if let Some(entries) = &config.chroot_env {
        let paths: Vec<String> = entries
            .iter()
            .map(|e| {
                if e.source == e.destination {
                    e.source.display().to_string()
                } else {
                    format!("{} at {}", e.source.display(), e.destination.display())
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "  chroot_env: {}",
            if paths.is_empty() {
                "nothing from the host".to_string()
            } else {
                paths.join(", ")
            }
        );
    }
}

fn volume_summary(out: &mut String, name: &str, volume: &VolumeSpec) {
    let _ = writeln!(
        out,
        "{name}: volume spec: csi volume {:?} ({:?}) on plugin {:?}",
        volume.id, volume.name, volume.plugin_id
    );
    if let Some(external_id) = &volume.external_id {
        let _ = writeln!(out, "  external_id {external_id:?}");
    }
    for capability in &volume.capabilities {
        let _ = writeln!(out, "  capability {capability}");
    }
    if !volume.mount_options.is_empty() {
        // MountOptions prints its flags redacted.
        let _ = writeln!(out, "  mount_options {}", volume.mount_options);
    }
    if volume.capacity_min.is_some() || volume.capacity_max.is_some() {
        let show = |bytes: Option<u64>| bytes.map_or("-".to_string(), format_size);
        let _ = writeln!(
            out,
            "  capacity {} to {}",
            show(volume.capacity_min),
            show(volume.capacity_max)
        );
    }
    keys_line(out, "  secrets", volume.secrets.keys());
    keys_line(
        out,
        "  parameters",
        volume.parameters.keys().map(String::as_str),
    );
    keys_line(out, "  context", volume.context.keys().map(String::as_str));
    let topology = &volume.topology_request;
    if !topology.is_empty() {
        let _ = writeln!(
            out,
            "  topology_request: {} required, {} preferred",
            topology.required.len(),
            topology.preferred.len()
        );
    }
}

fn job_summary(out: &mut String, name: &str, job: &Job) {
    let _ = writeln!(out, "{name}: job {:?}", job.name);
    placement_summary(out, "  ", &job.placement.meta, &job.placement.constraints);
    for group in &job.groups {
        group_summary(out, group);
    }
}

fn group_summary(out: &mut String, group: &Group) {
    let restart = &group.restart;
    let _ = writeln!(
        out,
        "  group {:?}: count {}, restart {} attempts in {} ({} apart, then {})",
        group.name,
        group.count,
        restart.attempts,
        format_duration(restart.interval),
        format_duration(restart.delay),
        restart.mode
    );
    placement_summary(
        out,
        "    ",
        &group.placement.meta,
        &group.placement.constraints,
    );
    for volume in &group.volumes {
        let source = if volume.per_alloc && group.count > 0 {
            format!("{}[0..{}]", volume.source, group.count - 1)
        } else {
            volume.source.clone()
        };
        let access = volume
            .capability()
            .as_ref()
            .map_or(String::new(), |c: &Capability| format!(" {c}"));
        let mode = usage(volume.read_only);
        let _ = writeln!(
            out,
            "    volume {:?}: {} {source:?}{access} ({mode})",
            volume.alias, volume.volume_type
        );
    }
    for service in &group.services {
        service_summary(out, "    ", service);
    }
    for task in &group.tasks {
        task_summary(out, task);
    }
}

/// A level's `meta` keys (not their values, as for `env`) and its
/// constraints as Nomad names them.
fn placement_summary(
    out: &mut String,
    indent: &str,
    meta: &std::collections::BTreeMap<String, String>,
    constraints: &[crate::spec::Constraint],
) {
    if !meta.is_empty() {
        let keys: Vec<&str> = meta.keys().map(String::as_str).collect();
        let _ = writeln!(out, "{indent}meta: {}", keys.join(", "));
    }
    for c in constraints {
        let _ = writeln!(out, "{indent}constraint {}", c.describe());
    }
}

fn task_summary(out: &mut String, task: &Task) {
    // A docker task runs its image; an exec or raw_exec task its command.
    let (what, args) = match &task.docker {
        Some(docker) => (format!("image {}", docker.image), docker.args.len()),
        None => (task.config.command.clone(), task.config.args.len()),
    };
    let args = match args {
        0 => String::new(),
        1 => " (1 argument)".to_string(),
        n => format!(" ({n} arguments)"),
    };
    let _ = writeln!(
        out,
        "    task {:?}: {} {what}{args}",
        task.name,
        task.driver.as_str(),
    );
    placement_summary(out, "      ", &task.meta, &task.constraints);
    if let Some(docker) = &task.docker {
        if docker.privileged {
            let _ = writeln!(out, "      privileged (needs the agent's allow_privileged)");
        }
        keys_line(out, "      ports", docker.ports.iter().map(String::as_str));
    }
    keys_line(out, "      env", task.env.keys().map(String::as_str));
    for mount in &task.volume_mounts {
        let mode = usage(mount.read_only);
        let _ = writeln!(
            out,
            "      volume_mount {:?} at {} ({mode}, {})",
            mount.volume, mount.destination, mount.propagation
        );
    }
    for template in &task.templates {
        // Where it renders and how, never what.
        let from = if template.source.is_some() {
            "source"
        } else {
            "data"
        };
        let env = if template.env { ", env" } else { "" };
        let _ = writeln!(
            out,
            "      template {:?} from {from}: perms {:o}{env}",
            template.destination, template.perms
        );
    }
    for artifact in &task.artifacts {
        // The URL without its query, where tokens live; never the headers.
        let sum =
            if artifact.options.contains_key("checksum") || artifact.source.contains("checksum=") {
                ", checksum"
            } else {
                ""
            };
        let _ = writeln!(
            out,
            "      artifact {} into {:?} (mode {}{sum})",
            crate::spec::redacted(&artifact.source),
            artifact.destination,
            artifact.mode.as_str()
        );
    }
    if let Some(plugin) = &task.csi_plugin {
        let _ = writeln!(
            out,
            "      csi_plugin {:?}: {}, mount_dir {}, stage_publish_base_dir {}",
            plugin.id,
            plugin.plugin_type,
            plugin.mount_dir.display(),
            plugin.stage_publish_base_dir.display()
        );
    }
    for service in &task.services {
        service_summary(out, "      ", service);
    }
}

fn service_summary(out: &mut String, indent: &str, service: &Service) {
    let name = service.name.as_deref().unwrap_or("(unnamed)");
    let checks = match service.checks.len() {
        1 => ", 1 check".to_string(),
        0 => String::new(),
        n => format!(", {n} checks"),
    };
    let sidecar = if service.connect.is_some() {
        ", connect"
    } else {
        ""
    };
    let what = match service.provider {
        crate::spec::Provider::Nomad => "registered while it runs; checks not run",
        crate::spec::Provider::Consul => "provider consul: registered nowhere",
    };
    let _ = writeln!(out, "{indent}service {name:?}{checks}{sidecar} ({what})");
}

/// `label: a, b` for a non-empty list of keys.
fn keys_line<'k>(out: &mut String, label: &str, keys: impl Iterator<Item = &'k str>) {
    let keys: Vec<&str> = keys.collect();
    if !keys.is_empty() {
        let _ = writeln!(out, "{label}: {}", keys.join(", "));
    }
}

/// How a volume or mount may be used, in words.
fn usage(read_only: bool) -> &'static str {
    if read_only {
        "read-only"
    } else {
        "read-write"
    }
}
