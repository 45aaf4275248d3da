//! `job dispatch`: a child of a parameterized job, with a payload and meta
//! checked against the parent's `parameterized` block; the payload written
//! into each task that has a `dispatch_payload` block, the meta put in its
//! environment.
//!
//! The child's name is Nomad's: `<parent>/dispatch-<unix seconds>-<8 hex
//! digits>`, or with `-id-prefix-template X`
//! `<parent>/dispatch-X-<unix seconds>-<8 hex digits>`. The payload is
//! bounded by [`MAX_DISPATCH_PAYLOAD`], Nomad's, and kept in the snapshot
//! with the child, so a task restarted after an agent restart gets it too.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::path::{Component, Path};

use super::calls::{DispatchRequest, JobRun};
use super::periodic::{unix_secs, ChildOf};
use super::user::User;
use super::{invalid, Alloc, Allocs};
use crate::call::CallError;
use crate::spec::PayloadRule;

/// The largest payload a dispatch may give, in bytes: Nomad's
/// `DispatchPayloadSizeLimit` (16 KiB).
pub const MAX_DISPATCH_PAYLOAD: usize = 16 * 1024;

impl Allocs {
    /// `job dispatch`: checks the request against the parent and launches
    /// the child.
    pub fn dispatch(&mut self, req: DispatchRequest) -> Result<JobRun, CallError> {
        let name = &req.job;
        let Some(job) = self.jobs.get(name) else {
            return Err(self.no_job(name));
        };
        let Some(params) = &job.spec.parameterized else {
            return Err(invalid(format!(
                "job {name:?} is not parameterized: only a job with a parameterized block is dispatched"
            )));
        };
        if job.stop_wanted {
            return Err(invalid(format!(
                "job {name:?} is stopped: run it again to dispatch it"
            )));
        }
        if req.payload.len() > MAX_DISPATCH_PAYLOAD {
            return Err(invalid(format!(
                "the payload is {} bytes, over the {MAX_DISPATCH_PAYLOAD} bytes a dispatch may give (MAX_DISPATCH_PAYLOAD, Nomad's limit)",
                req.payload.len()
            )));
        }
        match (params.payload, req.payload.is_empty()) {
            (PayloadRule::Required, true) => {
                return Err(invalid(format!(
                    "job {name:?} requires a payload (parameterized {{ payload = \"required\" }})"
                )))
            }
            (PayloadRule::Forbidden, false) => {
                return Err(invalid(format!(
                    "job {name:?} takes no payload (parameterized {{ payload = \"forbidden\" }})"
                )))
            }
            _ => {}
        }
        let missing: Vec<&str> = params
            .meta_required
            .iter()
            .filter(|k| !req.meta.contains_key(*k))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(invalid(format!(
                "job {name:?} requires meta keys missing from the dispatch: {} (give each with -meta KEY=VALUE)",
                missing.join(", ")
            )));
        }
        let unknown: Vec<&str> = req
            .meta
            .keys()
            .filter(|k| !params.meta_required.contains(k) && !params.meta_optional.contains(k))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            let allowed: Vec<&str> = params
                .meta_required
                .iter()
                .chain(&params.meta_optional)
                .map(String::as_str)
                .collect();
            return Err(invalid(format!(
                "job {name:?} does not take meta keys {} (meta_required and meta_optional allow: {})",
                unknown.join(", "),
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            )));
        }
        if !req.id_prefix_template.is_empty() {
            crate::id::validate("id prefix template", &req.id_prefix_template)
                .map_err(|e| invalid(e.to_string()))?;
        }
        let now = unix_secs((self.clock)());
        let suffix = format!("{:08x}", self.jitter.next_u64() as u32);
        let child = if req.id_prefix_template.is_empty() {
            format!("{name}/dispatch-{now}-{suffix}")
        } else {
            format!("{name}/dispatch-{}-{now}-{suffix}", req.id_prefix_template)
        };
        let run = self.launch_child(
            name,
            child,
            ChildOf {
                parent: name.clone(),
                payload: req.payload,
                meta: req.meta,
            },
        )?;
        log::info!("Job {name}: dispatched {}", run.job);
        Ok(run)
    }

    /// The payload task `i` of `alloc` is given, with the file it goes to
    /// under `local/`: for a dispatched child's task with a
    /// `dispatch_payload` block, when the dispatch gave one.
    pub(super) fn payload_for(&self, alloc: &Alloc, i: usize) -> Option<(String, Vec<u8>)> {
        let file = alloc.group.tasks[i].dispatch_payload.as_ref()?;
        let child = self.jobs.get(&alloc.job)?.child.as_ref()?;
        (!child.payload.is_empty()).then(|| (file.clone(), child.payload.clone()))
    }

    /// What a child's tasks find in their environment: its parent's name
    /// in `NOMAD_JOB_PARENT_ID`, and the dispatch's meta as
    /// `NOMAD_META_<key>`, under the key as given and in upper case, as
    /// Nomad sets both. An optional key the dispatch did not give is
    /// empty, so that a `${NOMAD_META_<key>}` of the task still resolves
    /// (Nomad leaves the text as written).
    pub(super) fn child_env(&self, alloc: &Alloc) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        let Some(child) = self.jobs.get(&alloc.job).and_then(|j| j.child.as_ref()) else {
            return env;
        };
        env.insert("NOMAD_JOB_PARENT_ID".into(), child.parent.clone());
        let optional = self
            .jobs
            .get(&child.parent)
            .and_then(|p| p.spec.parameterized.as_ref())
            .map(|p| p.meta_optional.as_slice())
            .unwrap_or_default();
        for key in optional {
            meta_env(&mut env, key, "");
        }
        for (key, value) in &child.meta {
            meta_env(&mut env, key, value);
        }
        env
    }
}

/// Sets `NOMAD_META_<key>` and its upper-case twin, with what is not a
/// letter, digit or `_` in the key made `_`.
fn meta_env(env: &mut BTreeMap<String, String>, key: &str, value: &str) {
    let key: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    env.insert(format!("NOMAD_META_{key}"), value.to_string());
    env.insert(
        format!("NOMAD_META_{}", key.to_ascii_uppercase()),
        value.to_string(),
    );
}

/// The variables a child of `spec` adds to its tasks' environment, for
/// `job run`'s check of `${...}`: `NOMAD_JOB_PARENT_ID`, and the meta keys
/// of a parameterized job.
pub(super) fn child_env_names(spec: &crate::spec::Job) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    if !spec.launches_children() {
        return env;
    }
    env.insert("NOMAD_JOB_PARENT_ID".into(), spec.name.clone());
    if let Some(params) = &spec.parameterized {
        for key in params.meta_required.iter().chain(&params.meta_optional) {
            meta_env(&mut env, key, "");
        }
    }
    env
}

/// Writes a dispatch's payload to `file` under the task's `local/` dir,
/// making the dirs on its way, through no symlink (a task that ran before
/// may have left one there), owned by the task's user.
pub(super) fn write_payload(
    local: &Path,
    file: &str,
    payload: &[u8],
    user: Option<User>,
) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("dispatch_payload {file:?}: {e}");
    let mut dir = File::open(local).map_err(fail)?;
    let path = Path::new(file);
    let parts: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let Some((name, parents)) = parts.split_last() else {
        return Err(format!("dispatch_payload {file:?}: no file name"));
    };
    for part in parents {
        match crate::sys::beneath::mkdir_at(&dir, part, 0o755) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(fail(e)),
            _ => {}
        }
        dir = crate::sys::beneath::open_beneath(
            &dir,
            Path::new(part),
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )
        .map_err(fail)?;
    }
    let mut out = crate::sys::beneath::open_beneath(
        &dir,
        Path::new(name),
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        0o644,
    )
    .map_err(fail)?;
    out.write_all(payload).map_err(fail)?;
    if let Some(user) = user {
        std::os::unix::fs::fchown(&out, Some(user.uid), Some(user.gid)).map_err(fail)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-dispatch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_payload_is_written_under_local_making_its_dirs() {
        let local = temp("dirs");
        write_payload(&local, "in/put.json", b"{}", None).unwrap();
        assert_eq!(std::fs::read(local.join("in/put.json")).unwrap(), b"{}");
        write_payload(&local, "in/put.json", b"[]", None).unwrap();
        assert_eq!(std::fs::read(local.join("in/put.json")).unwrap(), b"[]");
        let _ = std::fs::remove_dir_all(&local);
    }

    #[test]
    fn the_payload_is_never_written_through_a_symlink() {
        let local = temp("symlink");
        let outside = temp("symlink-outside");
        std::os::unix::fs::symlink(outside.join("target"), local.join("input")).unwrap();
        let err = write_payload(&local, "input", b"x", None).unwrap_err();
        assert!(err.contains("dispatch_payload \"input\""), "{err}");
        assert!(!outside.join("target").exists());
        std::os::unix::fs::symlink(&outside, local.join("dir")).unwrap();
        assert!(write_payload(&local, "dir/input", b"x", None).is_err());
        assert!(!outside.join("input").exists());
        let _ = std::fs::remove_dir_all(&local);
        let _ = std::fs::remove_dir_all(&outside);
    }
}
