//! What `job run` and `validate` read besides the job file: the values of
//! its HCL2 variables from `-var name=value`, `-var-file FILE` and
//! `NOMAD_VAR_<name>` in the environment, and the files its `file()` calls
//! read; and `-` for standard input, wherever Nomad takes it.
//!
//! The CLI only gathers the inputs as given: the job's variables are
//! resolved where it is decoded, by the same code on both sides, and the
//! agent keeps the inputs with the job so that it decodes the same job
//! after a restart.

use std::io::Read as _;
use std::path::Path;

use super::args::{repeated, value, Args, Flag, UsageError};
use super::CliError;
use crate::proto::agent as api;
use crate::spec::{Job, JobInputs};

/// The flags that give variables values, and Nomad's `-hcl2-strict`
/// (default true: a value for a variable the job file does not declare is
/// an error; `-hcl2-strict=false` makes it a warning).
pub const VAR_FLAGS: [Flag; 3] = [repeated("var"), repeated("var-file"), value("hcl2-strict")];

/// The prefix of the environment variables that give variables values.
const ENV_PREFIX: &str = "NOMAD_VAR_";

/// Reads `path`, or standard input for `-`; `what` names the file in the
/// error. Returns the name to give the agent (`<stdin>` for `-`) and the
/// text.
pub fn read_source(path: &str, what: &str) -> Result<(String, String), CliError> {
    if path == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|err| CliError::Io {
                what: format!("failed to read the {what} from standard input"),
                err,
            })?;
        return Ok(("<stdin>".to_string(), text));
    }
    let text = std::fs::read_to_string(path).map_err(|err| CliError::Io {
        what: format!("failed to read the {what} {path}"),
        err,
    })?;
    Ok((path.to_string(), text))
}

/// The inputs of the job file at `job_path` (`-` for standard input, whose
/// `file()` calls read relative to the working directory).
pub fn gather(args: &Args, job_path: &str) -> Result<JobInputs, CliError> {
    let mut inputs = JobInputs {
        env: std::env::vars()
            .filter_map(|(key, value)| Some((key.strip_prefix(ENV_PREFIX)?.to_string(), value)))
            .collect(),
        vars: args.pairs("var")?,
        strict: strict(args)?,
        ..Default::default()
    };
    for path in args.all("var-file") {
        inputs.var_files.push(read_source(path, "var file")?);
    }
    let dir = match Path::new(job_path).parent() {
        Some(parent) if job_path != "-" && !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    inputs.files.dir = Some(dir);
    Ok(inputs)
}

/// The value of `-hcl2-strict`, read as Go reads a bool flag; true when
/// it is not given, as in Nomad.
fn strict(args: &Args) -> Result<bool, UsageError> {
    match args.value("hcl2-strict") {
        None | Some("true" | "1" | "t" | "T" | "TRUE" | "True") => Ok(true),
        Some("false" | "0" | "f" | "F" | "FALSE" | "False") => Ok(false),
        Some(other) => Err(UsageError::new(format!(
            "-hcl2-strict takes true or false, not {other:?} (write -hcl2-strict=false)"
        ))),
    }
}

/// Under `-hcl2-strict` (the default), the values given for variables the
/// job file does not declare, as errors: `job run` refuses them before
/// sending the job, as Nomad's CLI does when it parses the file.
pub fn undeclared(inputs: &JobInputs, file: &str, hcl: &str) -> Vec<hcl::Error> {
    if inputs.strict {
        inputs.undeclared(hcl, file)
    } else {
        Vec::new()
    }
}

/// Decodes the job here once to read the files its `file()` calls name,
/// so that they travel with it: the agent does not read the caller's
/// files. Errors are left for the agent to report, with its checks. Only
/// the environment values of the job's own variables go with it.
///
/// A file that `file()` names and cannot be read here (missing, or too
/// long) would reach the agent only as "not sent": the decoding's errors
/// are returned instead, which name the call's place and the cause.
pub fn read_job_files(inputs: &mut JobInputs, file: &str, hcl: &str) -> Vec<hcl::Error> {
    inputs.keep_declared_env(hcl, file);
    let decoded = Job::decode_with(hcl, file, inputs);
    let unread = !inputs.files.unread.borrow().is_empty();
    inputs.files.given = inputs.files_read();
    inputs.files.dir = None;
    match decoded {
        Err(invalid) if unread => invalid.errors,
        _ => Vec::new(),
    }
}

/// The inputs as the control API carries them.
pub fn to_api(inputs: &JobInputs) -> api::JobInputs {
    let texts = |pairs: &[(String, String)]| -> Vec<api::NamedText> {
        pairs
            .iter()
            .map(|(name, text)| api::NamedText {
                name: name.clone(),
                text: text.clone(),
                ..Default::default()
            })
            .collect()
    };
    let files: Vec<(String, String)> = inputs.files_read().into_iter().collect();
    api::JobInputs {
        env: texts(&inputs.env),
        var_files: texts(&inputs.var_files),
        vars: texts(&inputs.vars),
        files: texts(&files),
        ..Default::default()
    }
}
