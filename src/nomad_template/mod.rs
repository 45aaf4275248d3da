//! Nomad's `template` blocks as csi-agent renders them: the template
//! engine (`crates/template`, Go's `text/template` with consul-template's
//! functions that read nothing but their arguments) with csi-agent's own
//! functions registered into it, over the task a template renders for
//! ([`Context`]).
//!
//! csi-agent's functions are those that read what only the agent knows:
//! the task's environment (`env`, `mustEnv`, `envOrDefault`) and the files
//! of its task dir (`file`, `environment.rs`), the service registry's
//! snapshot (`nomadService`, `nomadServices`, `nomad.rs`), and the host's
//! interface addresses (`sockaddr`, whose text is a template of its own
//! over go-sockaddr's functions, `sockaddr/`, at most
//! [`MAX_SOCKADDR_TEXT`] bytes). A template that calls `key`, `service`,
//! `secret`, `nomadVar` or the like is refused when it is parsed, naming
//! the function, its line and what it needs (`refused.rs`); so is any
//! unknown name.
//!
//! The engine's bounds hold for every function here too: each value they
//! return is held to the engine's value limits, and `file` (and a
//! template's `source`, [`read_in_dir`]) reads at most
//! [`template::MAX_OUTPUT`] bytes.

mod environment;
mod nomad;
mod refused;
mod sockaddr;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use template::{Functions, Template};

pub use sockaddr::MAX_SOCKADDR_TEXT;

/// What csi-agent's functions read while a template renders: the task's.
pub struct Context<'a> {
    /// What `env` reads: the task's environment.
    pub env: &'a BTreeMap<String, String>,
    /// Where `file` reads, relative to which, and nowhere outside it;
    /// `None` refuses `file`.
    pub task_dir: Option<&'a Path>,
    /// What `nomadService` and `nomadServices` read: the registered
    /// services, in any order.
    pub services: &'a [NomadService],
}

/// A registered service instance as consul-template's `NomadService`
/// shows it to a template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NomadService {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub node_id: String,
    pub datacenter: String,
    pub address: String,
    pub port: u16,
    pub tags: Vec<String>,
    pub job_id: String,
    pub alloc_id: String,
}

/// Parses a `template` block's `text` with the action delimiters `left`
/// and `right` (Go's `{{` and `}}` when empty), for csi-agent's functions
/// and consul-template's.
pub fn parse<'a>(
    text: &str,
    left: &str,
    right: &str,
) -> Result<Template<Context<'a>>, template::Error> {
    Template::parse(text, left, right, &functions())
}

/// consul-template's functions and csi-agent's, by name, with how many
/// arguments each takes; every other name is refused as `refused.rs`
/// explains. Made for each parse: the engine's tables are static, and
/// csi-agent's functions are plain functions, so this copies a few names.
fn functions<'a>() -> Arc<Functions<Context<'a>>> {
    let mut functions = Functions::consul_template();
    functions
        .register("env", 1, environment::env)
        .register("mustEnv", 1, environment::must_env)
        .register("envOrDefault", 2, environment::env_or_default)
        .register("file", 1, environment::file)
        .register("nomadService", 1..=3, nomad::service)
        .register("nomadServices", 0.., nomad::services)
        .register("sockaddr", 1.., sockaddr::sockaddr)
        .explain_unknown(refused::explain);
    Arc::new(functions)
}

/// The text of `path` in `dir`, for `file` and a template's `source`:
/// relative to `dir` (an absolute path is read as the task sees it,
/// inside `dir`, unless it already names a path in `dir`), and refused if
/// it leads outside, through `..` or a symlink, or if it is longer than
/// [`template::MAX_OUTPUT`].
pub fn read_in_dir(dir: &Path, path: &str) -> Result<String, String> {
    let full = if Path::new(path).starts_with(dir) {
        Path::new(path).to_path_buf()
    } else {
        dir.join(path.trim_start_matches('/'))
    };
    let root = dir
        .canonicalize()
        .map_err(|e| format!("file {path:?}: {}: {e}", dir.display()))?;
    let real = full
        .canonicalize()
        .map_err(|e| format!("file {path:?}: {e}"))?;
    if !real.starts_with(&root) {
        return Err(format!("file {path:?} is outside the task dir"));
    }
    // Read to one byte past the bound, so a longer file is refused rather
    // than read whole.
    let limit = template::MAX_OUTPUT;
    let mut text = String::new();
    std::fs::File::open(&real)
        .and_then(|file| {
            std::io::Read::read_to_string(
                &mut std::io::Read::take(file, limit as u64 + 1),
                &mut text,
            )
        })
        .map_err(|e| format!("file {path:?}: {e}"))?;
    if text.len() > limit {
        return Err(format!(
            "file {path:?} is larger than the template value limit of {} MiB",
            limit >> 20
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod service_tests;
#[cfg(test)]
mod tests;
