//! The command line: dispatch, exit codes and error printing.
//!
//! `main.rs` only calls [`main`]. Exit codes follow ripgrep: 0 success,
//! 1 an operation failed, 2 the command line was wrong (with a usage line).
//! Errors print their whole `source()` chain, numbered.

pub mod agent_cmd;
pub mod alloc_cmd;
pub mod alloc_exec_cmd;
pub mod alloc_fs_cmd;
mod alloc_usage;
pub mod args;
pub mod csi_cmd;
pub mod events_cmd;
pub mod job_children;
pub mod job_cmd;
pub mod job_inputs;
pub mod job_plan;
pub mod job_watch;
pub mod json;
pub mod node_cmd;
pub mod out;
pub mod plugin_cmd;
pub mod service_cmd;
pub mod snapshot_cmd;
pub mod validate;
pub mod volume_cmd;
pub mod volume_init;

use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

use args::UsageError;

const USAGE: &str = "\
usage: csi-agent COMMAND [ARGS]

commands:
  agent      run the agent (-config FILE, or -dev to try it out)
  plugin     show the plugins the agent supervises (plugin status)
  volume     register, create, claim, release and show volumes
  node       show the agents of this agent's cluster (node status)
  job        run (and watch), stop, show and inspect jobs
  alloc      look at an alloc and its tasks' logs, signal, restart, stop it,
             run a command in a task (exec), read its dir (fs)
  service    show the services jobs registered (service list, service info)
  events     show the agent's events, or follow them (-follow)
  hostpath   run the built-in hostpath CSI plugin
  csi        call a CSI plugin directly (debugging, like csc)
  validate   check agent configs, volume specs and job files
  version    print the version

Run `csi-agent COMMAND -help` for a command's usage.";

const HOSTPATH_USAGE: &str = "usage: csi-agent hostpath -endpoint unix:///path/csi.sock -base-dir DIR [-node-id ID] [-mode MODE] [-no-attach] [-fence] [-strict] [-shared]

  -mode MODE   monolith (the default: Identity, Controller and Node), or
               controller or node for one half of a split plugin: run a
               controller process and a node process on one DIR (and one
               node ID) and configure both under one plugin ID

  -no-attach   behave like a plugin without attachments (no
               PUBLISH_UNPUBLISH_VOLUME; nodes do not wait for one)
  -fence       ControllerUnpublishVolume detaches a volume from a node that
               still has it staged or published, as a storage system
               fencing a lost node does (by default it is refused)
  -strict      refuse (FAILED_PRECONDITION, \"strict: <rule>\") every request
               a CO that keeps the CSI spec never sends, and append
               \"<RPC> <volume>: <rule>\" to DIR/strict-violations
  -shared      DIR is shared by several hosts (standing in for network
               storage): report DIR's topology, which every host sharing it
               has, instead of this node's, so volumes can be claimed from
               each of them";

/// Every way a command can fail.
#[derive(Debug)]
pub enum CliError {
    Usage(UsageError),
    Csi(crate::csi::Error),
    Mismatch(crate::csi::Mismatch),
    Hostpath(crate::hostpath::Error),
    Validate(validate::Failed),
    Agent(crate::agent::Error),
    Api(crate::api::client::Error),
    Config {
        path: PathBuf,
        reason: String,
    },
    Io {
        what: String,
        err: std::io::Error,
    },
    /// `job run` left groups unplaced: the node does not meet their
    /// constraints.
    NotPlaced {
        job: String,
        groups: usize,
    },
    /// An operation failed for the reason given (`job run`'s watch saw the
    /// job fail or gave up waiting, no alloc has the ID asked for).
    Failed(String),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(e) => e.fmt(f),
            CliError::Csi(e) => e.fmt(f),
            CliError::Mismatch(e) => write!(f, "capability check failed: {e}"),
            CliError::Hostpath(e) => write!(f, "hostpath plugin: {e}"),
            CliError::Validate(e) => e.fmt(f),
            CliError::Agent(e) => e.fmt(f),
            CliError::Api(e) => e.fmt(f),
            CliError::Config { path, reason } => {
                write!(f, "invalid agent config {}: {reason}", path.display())
            }
            CliError::Io { what, .. } => f.write_str(what),
            CliError::NotPlaced { job, groups } => write!(
                f,
                "job {job:?}: {groups} task group{} could not be placed on this node",
                if *groups == 1 { "" } else { "s" }
            ),
            CliError::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Hostpath(e) => e.source(),
            CliError::Agent(e) => e.source(),
            CliError::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}

impl From<UsageError> for CliError {
    fn from(e: UsageError) -> CliError {
        CliError::Usage(e)
    }
}

impl From<crate::api::client::Error> for CliError {
    fn from(e: crate::api::client::Error) -> CliError {
        CliError::Api(e)
    }
}

impl From<crate::csi::Error> for CliError {
    fn from(e: crate::csi::Error) -> CliError {
        CliError::Csi(e)
    }
}

/// Runs the command line `argv` (without the program name).
pub fn main(argv: Vec<String>) -> ExitCode {
    let Some((command, rest)) = argv.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let wants_help = rest
        .iter()
        .any(|a| matches!(a.as_str(), "-h" | "-help" | "--help"));
    let (usage, result) = match command.as_str() {
        "hostpath" => (
            HOSTPATH_USAGE,
            if wants_help {
                None
            } else {
                Some(hostpath(rest))
            },
        ),
        "csi" => (
            csi_cmd::USAGE,
            if wants_help {
                None
            } else {
                Some(with_logging("warn", || csi_cmd::run(rest)))
            },
        ),
        "agent" => (
            agent_cmd::USAGE,
            if wants_help {
                None
            } else {
                Some(agent_cmd::run(rest))
            },
        ),
        "plugin" => (
            plugin_cmd::USAGE,
            if wants_help {
                None
            } else {
                Some(with_logging("warn", || plugin_cmd::run(rest)))
            },
        ),
        "volume" => (
            if rest.first().map(String::as_str) == Some("snapshot") {
                snapshot_cmd::USAGE
            } else {
                volume_cmd::USAGE
            },
            if wants_help {
                None
            } else {
                Some(with_logging("warn", || volume_cmd::run(rest)))
            },
        ),
        "node" => (
            node_cmd::USAGE,
            if wants_help {
                None
            } else {
                Some(with_logging("warn", || node_cmd::run(rest)))
            },
        ),
        "job" => (
            if rest.first().map(String::as_str) == Some("plan") {
                job_plan::USAGE
            } else {
                job_cmd::USAGE
            },
            if wants_help {
                None
            } else {
                Some(with_logging("warn", || job_cmd::run(rest)))
            },
        ),
        "alloc" => {
            let (usage, wants_help) = match rest.first().map(String::as_str) {
                // The command's own flags are not ours.
                Some("exec") => (
                    alloc_exec_cmd::USAGE,
                    alloc_exec_cmd::wants_help(&rest[1..]),
                ),
                Some("fs") => (alloc_fs_cmd::USAGE, wants_help),
                _ => (job_cmd::ALLOC_USAGE, wants_help),
            };
            (
                usage,
                if wants_help {
                    None
                } else {
                    Some(with_logging("warn", || job_cmd::alloc(rest)))
                },
            )
        }
        "service" => (
            service_cmd::USAGE,
            if wants_help {
                None
            } else {
                Some(with_logging("warn", || service_cmd::run(rest)))
            },
        ),
        "events" => (
            events_cmd::USAGE,
            if wants_help {
                None
            } else {
                Some(with_logging("warn", || events_cmd::run(rest)))
            },
        ),
        "validate" => (
            validate::USAGE,
            if wants_help {
                None
            } else {
                Some(validate::run(rest))
            },
        ),
        // Started by the agent itself (see `agent::guard`); not for people.
        "guard" => (
            "usage: csi-agent guard -data-dir DIR -agent PID:TICKS",
            Some(with_logging("info", || guard(rest))),
        ),
        "version" | "-version" | "--version" => {
            out::outln!("csi-agent {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        "help" | "-h" | "-help" | "--help" => {
            out::outln!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("error: unknown command {other:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        None => {
            out::outln!("{usage}");
            ExitCode::SUCCESS
        }
        Some(Ok(())) => ExitCode::SUCCESS,
        Some(Err(CliError::Usage(e))) => {
            eprintln!("error: {e}\n{usage}");
            ExitCode::from(2)
        }
        Some(Err(e)) => {
            print_error(&e);
            ExitCode::from(1)
        }
    }
}

/// Prints an error and its numbered causes.
pub(super) fn print_error(err: &dyn std::error::Error) {
    eprintln!("error: {err}");
    let mut source = err.source();
    let mut n = 1;
    while let Some(cause) = source {
        eprintln!("  {n}: {cause}");
        source = cause.source();
        n += 1;
    }
}

/// Logs to stderr at `RUST_LOG`, or `default` when unset.
fn with_logging<T>(default: &str, f: impl FnOnce() -> T) -> T {
    let installed =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default))
            .format(|out, record| crate::units::log_line(out, record))
            .try_init();
    if installed.is_ok() {
        // gRPC's C core logs its errors (a failed TLS handshake, say)
        // through ours, in its format, instead of writing raw lines to
        // stderr; only errors: its debug output floods a debug log.
        let level = log::max_level();
        log::set_max_level(log::LevelFilter::Error);
        grpcio::redirect_log();
        log::set_max_level(level);
    }
    f()
}

fn hostpath(argv: &[String]) -> Result<(), CliError> {
    use args::{switch, value, Flag};
    const FLAGS: &[Flag] = &[
        value("endpoint"),
        value("base-dir"),
        value("node-id"),
        value("test-faults"),
        value("test-trace"),
        value("test-without"),
        value("test-require-secrets"),
        value("mode"),
        switch("no-attach"),
        switch("fence"),
        switch("strict"),
        switch("shared"),
    ];
    let args = args::parse(FLAGS, argv)?;
    args.at_most(0)?;
    let endpoint = args
        .required("endpoint")?
        .parse()
        .map_err(|e: crate::csi::endpoint::EndpointError| UsageError::new(e.to_string()))?;
    let mode = match args.value("mode") {
        Some(mode) => mode
            .parse()
            .map_err(|e: crate::csi::model::ParseError| UsageError::new(e.to_string()))?,
        None => crate::spec::PluginType::Monolith,
    };
    let node_id = match args.value("node-id") {
        Some(id) => id.to_string(),
        None => crate::agent::host_name(),
    };
    let config = crate::hostpath::Config {
        endpoint,
        base_dir: PathBuf::from(args.required("base-dir")?),
        node_id,
        faults: args.value("test-faults").map(PathBuf::from),
        trace: args.value("test-trace").map(PathBuf::from),
        no_attach: args.switch("no-attach"),
        fence: args.switch("fence"),
        without: args
            .value("test-without")
            .map(|list| list.split(',').map(str::to_string).collect())
            .unwrap_or_default(),
        strict: args.switch("strict"),
        require_secrets: args.value("test-require-secrets").map(PathBuf::from),
        mode,
        shared: args.switch("shared"),
    };
    with_logging("info", || crate::hostpath::run(config)).map_err(CliError::Hostpath)
}

/// `csi-agent guard -data-dir DIR -agent PID:TICKS`: the writers' guard
/// of the agent with that pid and start time.
fn guard(args: &[String]) -> Result<(), CliError> {
    let mut data_dir = None;
    let mut agent = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| UsageError::new(format!("{flag} needs a value")))?;
        match flag.as_str() {
            "-data-dir" => data_dir = Some(PathBuf::from(value)),
            "-agent" => {
                agent = value
                    .split_once(':')
                    .and_then(|(pid, ticks)| Some((pid.parse().ok()?, ticks.parse().ok()?)))
            }
            other => return Err(UsageError::new(format!("unknown flag {other}")).into()),
        }
    }
    let (Some(data_dir), Some(agent)) = (data_dir, agent) else {
        return Err(UsageError::new("guard needs -data-dir DIR and -agent PID:TICKS").into());
    };
    crate::agent::guard::run(&data_dir, agent).map_err(|err| CliError::Io {
        what: format!("the writers' guard of {} failed", data_dir.display()),
        err,
    })
}
