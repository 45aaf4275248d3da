//! `csi-agent agent`: runs the daemon.

use std::path::{Path, PathBuf};

use super::args::{self, switch, value, Flag, UsageError};
use super::CliError;
use crate::agent::{self, Options};
use crate::spec::AgentConfig;

pub const USAGE: &str = "\
usage: csi-agent agent (-config FILE | -dev) [-hostpath] [-data-dir DIR]

Runs the agent: supervises the configured CSI plugins and serves the
control API on DATA_DIR/control.sock.

  -config FILE    the agent config (HCL); SIGHUP reloads it
  -dev            development mode: a fresh temporary data dir and the
                  built-in hostpath plugin, registered as plugin `hostpath`,
                  with a volume `demo`
  -hostpath       run the built-in hostpath plugin, registered as plugin
                  `hostpath`, its volumes under DATA_DIR/hostpath
  -data-dir DIR   use DIR as the data dir (overrides the config and -dev's
                  temporary dir)";

const FLAGS: &[Flag] = &[
    value("config"),
    switch("dev"),
    switch("hostpath"),
    value("data-dir"),
];

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(FLAGS, argv)?;
    args.at_most(0)?;
    let dev = args.switch("dev");
    let config_path = args.value("config").map(PathBuf::from);
    if config_path.is_none() && !dev {
        return Err(UsageError::new("one of -config or -dev is required").into());
    }
    let mut config = match &config_path {
        Some(path) => agent::load_config(path).map_err(|reason| CliError::Config {
            path: path.clone(),
            reason,
        })?,
        None => AgentConfig::default(),
    };
    let explicit_dir = args.value("data-dir").map(PathBuf::from);
    if let Some(dir) = &explicit_dir {
        if !Path::new(dir).is_absolute() {
            return Err(UsageError::new(format!(
                "-data-dir must be an absolute path, found {}",
                dir.display()
            ))
            .into());
        }
        config.data_dir = dir.clone();
    } else if dev {
        config.data_dir = agent::temp_data_dir().map_err(|err| CliError::Io {
            what: "cannot create a temporary data dir".into(),
            err,
        })?;
    }
    let level = config.log_level.as_str().to_lowercase();
    if dev {
        eprintln!(
            "csi-agent: dev mode, data dir {}\n  export {}=unix://{}",
            config.data_dir.display(),
            crate::api::client::ADDRESS_ENV,
            config.data_dir.join(crate::api::SOCKET_NAME).display()
        );
    }
    let options = Options {
        config,
        config_path,
        dev,
        hostpath: args.switch("hostpath"),
        temporary_data_dir: dev && explicit_dir.is_none(),
    };
    super::with_logging(&level, || agent::run(options)).map_err(CliError::Agent)
}
