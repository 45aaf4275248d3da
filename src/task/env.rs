//! A task's environment and `${VAR}` interpolation.
//!
//! Every task gets Nomad's own variables, so a Nomad job file runs with
//! only its driver changed, and csi-agent's (`CSI_AGENT_ALLOC_ID`, and
//! `CSI_AGENT_TASK_DIR`, the task dir on the host), and its `meta`,
//! merged job → group → task, as `NOMAD_META_<key>` and
//! `NOMAD_META_<KEY>` ([`meta_env`]). As in Nomad, the
//! directories are named as the task sees them: an `exec` task, in its own
//! root, has `NOMAD_TASK_DIR=/local`, `NOMAD_SECRETS_DIR=/secrets`,
//! `NOMAD_ALLOC_DIR=/alloc`; a `raw_exec` task, on the host's root, gets
//! their host paths. The task's `env { }` block comes on top; its
//! values, `config.args` and `volume_mount.destination` may name any of
//! these as `${NAME}`, and the node's attributes Nomad's clients give
//! (`${node.unique.name}`, `${node.unique.id}`, `${attr.unique.hostname}`,
//! `${attr.kernel.name}`, `${attr.cpu.arch}`), which are not environment
//! variables. An unknown
//! name is an error, found at `job run`: a silently empty path or argument
//! is worse than a refused job.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// What the environment of one task is built from.
#[derive(Clone, Debug)]
pub struct TaskContext<'a> {
    pub alloc_id: &'a str,
    pub alloc_index: u64,
    pub job: &'a str,
    pub group: &'a str,
    pub task: &'a str,
    /// `data_dir/alloc/<alloc>`.
    pub alloc_dir: &'a Path,
    /// Whether the task runs in its own root (`exec`), where its dirs are
    /// `/local`, `/secrets`, `/tmp` and `/alloc`.
    pub own_root: bool,
}

impl TaskContext<'_> {
    /// `data_dir/alloc/<alloc>/<task>`: the task's cwd.
    pub fn task_dir(&self) -> PathBuf {
        self.alloc_dir.join(self.task)
    }

    /// The variables the agent sets, before the task's `env` block.
    pub fn base(&self) -> BTreeMap<String, String> {
        let task_dir = self.task_dir();
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        // Where the task sees its dirs.
        let (view, alloc) = if self.own_root {
            (PathBuf::from("/"), PathBuf::from("/alloc"))
        } else {
            (task_dir.clone(), self.alloc_dir.join("alloc"))
        };
        let mut env = BTreeMap::new();
        env.insert("CSI_AGENT_ALLOC_ID".into(), self.alloc_id.into());
        env.insert("CSI_AGENT_TASK_DIR".into(), path(task_dir.clone()));
        env.insert("NOMAD_ALLOC_ID".into(), self.alloc_id.into());
        env.insert("NOMAD_ALLOC_INDEX".into(), self.alloc_index.to_string());
        env.insert("NOMAD_ALLOC_DIR".into(), path(alloc));
        env.insert("NOMAD_TASK_DIR".into(), path(view.join("local")));
        env.insert("NOMAD_SECRETS_DIR".into(), path(view.join("secrets")));
        env.insert("NOMAD_JOB_NAME".into(), self.job.into());
        env.insert("NOMAD_GROUP_NAME".into(), self.group.into());
        env.insert("NOMAD_TASK_NAME".into(), self.task.into());
        env.insert(
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        );
        env.insert("HOME".into(), path(view.join("local")));
        env.insert("TMPDIR".into(), path(view.join("tmp")));
        env
    }
}

/// What `${...}` may name in a task's arguments and destinations: its
/// environment, then the node's attributes.
pub fn lookups(
    env: &BTreeMap<String, String>,
    node: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut all = node.clone();
    all.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    all
}

/// A `${NAME}` that names no variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownVariable {
    pub name: String,
}

impl fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${{{}}} names no variable of the task", self.name)
    }
}

impl std::error::Error for UnknownVariable {}

/// The task's whole environment: `base`, then its `meta` as
/// `NOMAD_META_*` ([`meta_env`]), then `env` with its values interpolated
/// from those and the `node`'s attributes.
pub fn task_env(
    base: &BTreeMap<String, String>,
    node: &BTreeMap<String, String>,
    meta: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, (String, UnknownVariable)> {
    let mut all = base.clone();
    all.extend(meta_env(meta, &lookups(base, node))?);
    let vars = lookups(&all, node);
    for (key, value) in env {
        let value = interpolate(value, &vars).map_err(|e| (format!("env {key}"), e))?;
        all.insert(key.clone(), value);
    }
    Ok(all)
}

/// Nomad's variables of a task's merged `meta`: for each key, its value
/// (interpolated from `vars`) as `NOMAD_META_<key>` and, upper-cased,
/// `NOMAD_META_<KEY>`; in both names a character other than a letter, a
/// digit or `_` becomes `_`, as Nomad cleans them.
pub fn meta_env(
    meta: &BTreeMap<String, String>,
    vars: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, (String, UnknownVariable)> {
    let mut env = BTreeMap::new();
    for (key, value) in meta {
        let value = interpolate(value, vars).map_err(|e| (format!("meta {key}"), e))?;
        for name in [key.to_uppercase(), key.clone()] {
            env.insert(clean_env_name(&format!("NOMAD_META_{name}")), value.clone());
        }
    }
    Ok(env)
}

/// `name` with every character but ASCII letters, digits and `_` made `_`.
fn clean_env_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Replaces every `${NAME}` in `text` with the variable's value. A `$` not
/// followed by `{` is kept as it is.
pub fn interpolate(text: &str, vars: &BTreeMap<String, String>) -> Result<String, UnknownVariable> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            // An unterminated `${` is text.
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = after[..end].trim();
        match vars.get(name) {
            Some(value) => out.push_str(value),
            None => {
                return Err(UnknownVariable {
                    name: name.to_string(),
                })
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::node::node_attributes;

    fn context(own_root: bool) -> TaskContext<'static> {
        TaskContext {
            alloc_id: "a1b2c3d4",
            alloc_index: 2,
            job: "web",
            group: "frontend",
            task: "server",
            alloc_dir: Path::new("/var/lib/csi-agent/alloc/a1b2c3d4"),
            own_root,
        }
    }

    fn vars() -> BTreeMap<String, String> {
        context(true).base()
    }

    #[test]
    fn an_exec_task_sees_its_dirs_at_nomads_paths() {
        let v = vars();
        assert_eq!(v["NOMAD_TASK_DIR"], "/local");
        assert_eq!(v["NOMAD_SECRETS_DIR"], "/secrets");
        assert_eq!(v["NOMAD_ALLOC_DIR"], "/alloc");
        assert_eq!(v["HOME"], "/local");
        assert_eq!(v["TMPDIR"], "/tmp");
        assert_eq!(
            v["CSI_AGENT_TASK_DIR"],
            "/var/lib/csi-agent/alloc/a1b2c3d4/server"
        );
    }

    #[test]
    fn nomad_variables_name_the_task_dirs() {
        let v = context(false).base();
        assert_eq!(v["NOMAD_ALLOC_ID"], "a1b2c3d4");
        assert_eq!(v["NOMAD_ALLOC_INDEX"], "2");
        assert_eq!(v["NOMAD_JOB_NAME"], "web");
        assert_eq!(v["NOMAD_GROUP_NAME"], "frontend");
        assert_eq!(v["NOMAD_TASK_NAME"], "server");
        assert_eq!(
            v["CSI_AGENT_TASK_DIR"],
            "/var/lib/csi-agent/alloc/a1b2c3d4/server"
        );
        assert_eq!(
            v["NOMAD_TASK_DIR"],
            "/var/lib/csi-agent/alloc/a1b2c3d4/server/local"
        );
        assert_eq!(
            v["NOMAD_SECRETS_DIR"],
            "/var/lib/csi-agent/alloc/a1b2c3d4/server/secrets"
        );
        assert_eq!(
            v["NOMAD_ALLOC_DIR"],
            "/var/lib/csi-agent/alloc/a1b2c3d4/alloc"
        );
    }

    #[test]
    fn interpolation_replaces_known_variables() {
        let v = vars();
        assert_eq!(
            interpolate("${NOMAD_TASK_DIR}/data", &v).unwrap(),
            "/local/data"
        );
        assert_eq!(
            interpolate("-index=${NOMAD_ALLOC_INDEX}-${ NOMAD_JOB_NAME }", &v).unwrap(),
            "-index=2-web"
        );
        assert_eq!(interpolate("$HOME and $", &v).unwrap(), "$HOME and $");
        assert_eq!(interpolate("open ${", &v).unwrap(), "open ${");
    }

    #[test]
    fn an_unknown_variable_is_an_error() {
        let err = interpolate("${NOMAD_META_owner}", &vars()).unwrap_err();
        assert_eq!(err.name, "NOMAD_META_owner");
        assert_eq!(
            err.to_string(),
            "${NOMAD_META_owner} names no variable of the task"
        );
    }

    #[test]
    fn env_values_see_the_base_and_override_it() {
        let base = vars();
        let mut env = BTreeMap::new();
        env.insert("DATA".to_string(), "${NOMAD_TASK_DIR}/data".to_string());
        env.insert("PATH".to_string(), "/opt/bin".to_string());
        let all = task_env(&base, &BTreeMap::new(), &BTreeMap::new(), &env).unwrap();
        assert_eq!(all["DATA"], "/local/data");
        assert_eq!(all["PATH"], "/opt/bin");
        env.insert("BAD".to_string(), "${NOPE}".to_string());
        let (key, err) = task_env(&base, &BTreeMap::new(), &BTreeMap::new(), &env).unwrap_err();
        assert_eq!(key, "env BAD");
        assert_eq!(err.name, "NOPE");
    }

    #[test]
    fn node_attributes_interpolate_but_are_not_in_the_environment() {
        let node = node_attributes(
            "id-1",
            "node-1",
            "host-a",
            &crate::spec::AgentConfig::default(),
        );
        let mut env = BTreeMap::new();
        env.insert(
            "WHERE".to_string(),
            "${node.unique.name}@${attr.unique.hostname}".to_string(),
        );
        let all = task_env(&vars(), &node, &BTreeMap::new(), &env).unwrap();
        assert_eq!(all["WHERE"], "node-1@host-a");
        assert!(!all.contains_key("node.unique.name"));
        let arg = interpolate(
            "${attr.kernel.name}/${ attr.cpu.arch }",
            &lookups(&all, &node),
        );
        assert!(arg.unwrap().starts_with("linux/"));
        assert_eq!(
            interpolate("${meta.rack}", &lookups(&all, &node))
                .unwrap_err()
                .name,
            "meta.rack"
        );
    }

    #[test]
    fn the_agent_config_s_datacenter_region_and_meta_are_node_attributes() {
        let defaults = node_attributes("i", "n", "h", &crate::spec::AgentConfig::default());
        assert_eq!(defaults["node.datacenter"], "dc1");
        assert_eq!(defaults["node.region"], "global");
        let config = crate::spec::AgentConfig {
            datacenter: "eu-1".into(),
            region: "europe".into(),
            meta: BTreeMap::from([("rack".to_string(), "r7".to_string())]),
            ..Default::default()
        };
        let node = node_attributes("i", "n", "h", &config);
        let arg = interpolate(
            "${node.region}/${node.datacenter}/${meta.rack}",
            &lookups(&vars(), &node),
        );
        assert_eq!(arg.unwrap(), "europe/eu-1/r7");
    }

    #[test]
    fn meta_is_in_the_environment_as_given_and_upper_cased() {
        let meta = BTreeMap::from([
            ("owner".to_string(), "ops".to_string()),
            ("build.id".to_string(), "${NOMAD_JOB_NAME}-7".to_string()),
        ]);
        let mut env = BTreeMap::new();
        env.insert("WHO".to_string(), "${NOMAD_META_owner}".to_string());
        let all = task_env(&vars(), &BTreeMap::new(), &meta, &env).unwrap();
        assert_eq!(all["NOMAD_META_owner"], "ops");
        assert_eq!(all["NOMAD_META_OWNER"], "ops");
        // Nomad cleans what may not be in a variable's name.
        assert_eq!(all["NOMAD_META_build_id"], "web-7");
        assert_eq!(all["NOMAD_META_BUILD_ID"], "web-7");
        assert_eq!(all["WHO"], "ops");
        let bad = BTreeMap::from([("x".to_string(), "${nope}".to_string())]);
        let (key, err) = task_env(&vars(), &BTreeMap::new(), &bad, &env).unwrap_err();
        assert_eq!((key.as_str(), err.name.as_str()), ("meta x", "nope"));
    }
}
