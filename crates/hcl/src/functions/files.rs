//! File and path functions: `file` reads what the job was sent with, or
//! beside the job file ([`FileSource`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::{Args, Function};
use crate::value::{within_string_limit, Value, MAX_STRING};

/// The files that `file()` may read: those given (what the agent was sent
/// with a job) and, when `dir` is set (the CLI, where the job file is),
/// any other, read relative to `dir` and recorded in `read` so that they
/// can be sent along.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileSource {
    pub given: BTreeMap<String, String>,
    pub dir: Option<PathBuf>,
    pub read: RefCell<BTreeMap<String, String>>,
    /// Files `file()` named and could not read from `dir` (missing, or
    /// past [`MAX_STRING`]): the CLI reports these itself, since they are
    /// not sent to the agent.
    pub unread: RefCell<BTreeSet<String>>,
}

impl FileSource {
    /// The text of `path` as `file()` was given it.
    pub(crate) fn text(&self, path: &str) -> Result<String, String> {
        if let Some(text) = self.given.get(path) {
            return Ok(text.clone());
        }
        if let Some(text) = self.read.borrow().get(path) {
            return Ok(text.clone());
        }
        let Some(dir) = &self.dir else {
            return Err(format!("file {path:?} was not sent with the job"));
        };
        // Read to one byte past the bound, so that a longer file (or
        // `/dev/zero`) is refused, not read whole.
        let mut text = String::new();
        let read = std::fs::File::open(dir.join(path))
            .and_then(|f| {
                std::io::Read::read_to_string(
                    &mut std::io::Read::take(f, MAX_STRING as u64 + 1),
                    &mut text,
                )
            })
            .map_err(|err| format!("cannot read {path:?}: {err}"))
            .and_then(|_| {
                within_string_limit(text.len()).map_err(|err| format!("{path:?}: {err}"))
            });
        if let Err(err) = read {
            self.unread.borrow_mut().insert(path.to_string());
            return Err(err);
        }
        self.read
            .borrow_mut()
            .insert(path.to_string(), text.clone());
        Ok(text)
    }
}

/// The file and path functions, by name, with how many arguments each takes (at least,
/// at most).
pub(super) const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("file", 1, 1, |a| {
        let Some(files) = a.files else {
            return Err("file: only job files may read files".to_string());
        };
        files
            .text(&a.string(0)?)
            .map(Value::String)
            .map_err(|err| format!("file: {err}"))
    }),
    ("basename", 1, 1, |a| {
        let path = a.string(0)?;
        Ok(Value::String(
            path.trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string(),
        ))
    }),
    ("dirname", 1, 1, |a| {
        let path = a.string(0)?;
        Ok(Value::String(match path.rsplit_once('/') {
            Some(("", _)) => "/".to_string(),
            Some((dir, _)) => dir.to_string(),
            None => ".".to_string(),
        }))
    }),
    ("pathexpand", 1, 1, pathexpand),
];

/// `pathexpand(path)`: a leading `~` replaced by the home directory
/// (`HOME` of the process that evaluates the job: the agent's when it
/// runs it), the result cleaned as Go's `filepath.Join` does; `~user` is
/// an error, as in Nomad.
fn pathexpand(a: &Args<'_>) -> Result<Value, String> {
    let path = a.string(0)?;
    let Some(rest) = path.strip_prefix('~') else {
        return Ok(Value::String(path));
    };
    if !(rest.is_empty() || rest.starts_with('/')) {
        return Err("pathexpand: cannot expand user-specific home dir".to_string());
    }
    let home = std::env::var("HOME")
        .ok()
        .filter(|home| !home.is_empty())
        .ok_or("pathexpand: HOME is not set")?;
    Ok(Value::String(clean(&format!("{home}/{rest}"))))
}

/// A path cleaned as Go's `filepath.Clean`: no empty or `.` elements, `..`
/// taking the element before it.
fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            ".." if rooted => {}
            part => parts.push(part),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}
