//! A task's `template` blocks, rendered before it starts, for every
//! driver: each into its destination in the task dir, and the `KEY=value`
//! lines of an `env = true` template into the task's environment, over
//! its `env` block, as Nomad's task environment builder puts them. They
//! render in the prepare helper's process (`prepare/`), never the agent's:
//! `job run` only checks their destinations and the names they give.
//!
//! A template's `env` function sees the task's environment (Nomad's
//! variables and the `env` block); `file` and `source` read inside the
//! task dir only. A destination may name `${NOMAD_...}` variables; it is
//! refused if it leads outside the task dir (a raw_exec task's
//! `${NOMAD_ALLOC_DIR}/...`, the group's shared dir on the host, is
//! allowed too, as in Nomad). The file is written to a
//! fresh temporary file beside it (`O_CREAT|O_EXCL`, which follows no
//! symlink), given its mode and owner, then renamed over the destination
//! (a rename replaces a symlink there rather than following it); a
//! directory on the way that is a symlink, which a task's earlier run may
//! have left, is refused. Nothing rendered is logged: a template whose
//! destination is under `secrets/` has its render errors cut to the line
//! and the function, so no value reaches a log or an event.
//!
//! A later `job run` of a running job whose only change is in its
//! templates re-renders them in place ([`rerender`], `rerender.rs`): the
//! files whose text changed are written again, and the task's
//! `change_mode` is taken after its `splay`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use super::env::{interpolate, lookups};
use crate::nomad_template::{self, read_in_dir, Context, NomadService};
use crate::spec::{stays_inside, TaskTemplate};
use template::Options;

/// Where template `t` renders in `task_dir`: its destination with its
/// `${VAR}`s from `vars`, inside the task dir.
pub(super) fn destination(
    t: &TaskTemplate,
    task_dir: &Path,
    vars: &BTreeMap<String, String>,
) -> Result<PathBuf, String> {
    let dest = interpolate(&t.destination, vars).map_err(|e| e.to_string())?;
    // A raw_exec task's `${NOMAD_TASK_DIR}` and `${NOMAD_ALLOC_DIR}` are
    // the host's paths; the group's shared alloc dir is as good a place
    // as the task dir, as in Nomad.
    let shared = task_dir.parent().map(|alloc| alloc.join("alloc"));
    let in_shared = shared
        .as_deref()
        .and_then(|dir| Some((dir, Path::new(&dest).strip_prefix(dir).ok()?)));
    let (base, rel) = match (in_shared, Path::new(&dest).strip_prefix(task_dir)) {
        (_, Ok(rel)) => (task_dir, rel.to_string_lossy().into_owned()),
        (Some((dir, rel)), _) => (dir, rel.to_string_lossy().into_owned()),
        _ => (task_dir, dest.trim_start_matches('/').to_string()),
    };
    if !stays_inside(&rel) {
        return Err(format!("destination {dest:?} leads outside the task dir"));
    }
    let mut path = base.to_path_buf();
    for component in Path::new(&rel).components() {
        match component {
            Component::Normal(part) => path.push(part),
            Component::ParentDir => {
                path.pop();
            }
            _ => {}
        }
    }
    Ok(path)
}

/// Renders every template of a task into `task_dir`, and returns `env`
/// with the variables of its `env = true` templates over it, and the size
/// of each template's text.
pub(super) fn render_all(
    templates: &[TaskTemplate],
    task_dir: &Path,
    mut env: BTreeMap<String, String>,
    node: &BTreeMap<String, String>,
    services: &[NomadService],
) -> Result<(BTreeMap<String, String>, Vec<usize>), String> {
    let vars = lookups(&env, node);
    let mut added = BTreeMap::new();
    let mut sizes = Vec::with_capacity(templates.len());
    for t in templates {
        let name = &t.destination;
        let text =
            render(t, task_dir, &env, services).map_err(|e| format!("template {name:?}: {e}"))?;
        let path =
            destination(t, task_dir, &vars).map_err(|e| format!("template {name:?}: {e}"))?;
        write_file(task_dir, &path, &text, t).map_err(|e| format!("template {name:?}: {e}"))?;
        if t.env {
            added.extend(parse_env(&text).map_err(|e| format!("template {name:?}: {e}"))?);
        }
        sizes.push(text.len());
    }
    env.extend(added);
    Ok((env, sizes))
}

/// Renders `templates` again into a running task's `task_dir`: the
/// indexes of those whose text changed, which are written; the others
/// are left as they are.
pub(super) fn rerender(
    templates: &[TaskTemplate],
    task_dir: &Path,
    env: &BTreeMap<String, String>,
    node: &BTreeMap<String, String>,
    services: &[NomadService],
) -> Result<Vec<usize>, String> {
    let vars = lookups(env, node);
    let mut changed = Vec::new();
    for (i, t) in templates.iter().enumerate() {
        let name = &t.destination;
        let text =
            render(t, task_dir, env, services).map_err(|e| format!("template {name:?}: {e}"))?;
        let path =
            destination(t, task_dir, &vars).map_err(|e| format!("template {name:?}: {e}"))?;
        if fs::read(&path).is_ok_and(|old| old == text.as_bytes()) {
            continue;
        }
        write_file(task_dir, &path, &text, t).map_err(|e| format!("template {name:?}: {e}"))?;
        changed.push(i);
    }
    Ok(changed)
}

/// The template's text rendered with the task's environment.
fn render(
    t: &TaskTemplate,
    task_dir: &Path,
    env: &BTreeMap<String, String>,
    services: &[NomadService],
) -> Result<String, String> {
    let parsed = match (&t.source, t.parsed()) {
        (_, Some(parsed)) => parsed,
        (Some(source), None) => {
            let text = read_in_dir(task_dir, source).map_err(|e| format!("source: {e}"))?;
            nomad_template::parse(&text, &t.left_delimiter, &t.right_delimiter)
        }
        (None, None) => return Err("no data and no source".into()),
    };
    let ctx = Context {
        env,
        task_dir: Some(task_dir),
        services,
    };
    let options = Options {
        error_on_missing_key: t.error_on_missing_key,
        now: SystemTime::now(),
    };
    parsed
        .and_then(|parsed| parsed.render(&ctx, &options))
        .map_err(|mut err| {
            if t.is_secret() {
                // `error calling f: <what the value was>`: keep the call.
                if let Some(at) = err.message.find(": ") {
                    err.message.truncate(at);
                    err.message
                        .push_str(" (the rest is withheld: the template renders a secret)");
                }
            }
            err.to_string()
        })
}

/// Writes `text` to `path` in `task_dir` through a temporary file and a
/// rename, with the template's mode and owner.
fn write_file(task_dir: &Path, path: &Path, text: &str, t: &TaskTemplate) -> Result<(), String> {
    let parent = path.parent().unwrap_or(task_dir);
    let rel = parent.strip_prefix(task_dir).unwrap_or(Path::new(""));
    let mut dir = task_dir.to_path_buf();
    for part in rel.components() {
        dir.push(part);
        match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(format!("{} is not a directory (a symlink?)", dir.display())),
            Err(_) => fs::DirBuilder::new()
                .mode(0o755)
                .create(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?,
        }
    }
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(format!("{} is a directory", path.display()));
    }
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = parent.join(format!(".{file_name}.csi-agent-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        if t.uid.is_some() || t.gid.is_some() {
            std::os::unix::fs::fchown(&file, t.uid, t.gid)?;
        }
        file.set_permissions(fs::Permissions::from_mode(t.perms))?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

/// The names an `env = true` template's lines give literally
/// (`NAME=...` with no action before the `=`), which a task's `${NAME}`s
/// may use: `job run` checks them before anything renders.
pub(super) fn env_names(t: &TaskTemplate) -> Vec<String> {
    let (true, Some(data)) = (t.env, &t.data) else {
        return Vec::new();
    };
    data.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            let (key, _) = line.split_once('=')?;
            let key = key.trim();
            let plain = !key.is_empty()
                && !key.contains(&t.left_delimiter)
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            plain.then(|| key.to_string())
        })
        .collect()
}

/// The variables of an `env = true` template's text: `KEY=value` lines,
/// with blank lines and `#` comments skipped, an optional `export`, space
/// around the `=` trimmed, and quotes around the value stripped.
pub(super) fn parse_env(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut vars = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!(
                "line {} of the rendered text is not KEY=value",
                n + 1
            ));
        };
        let key = key.trim();
        let valid = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
        if !valid {
            return Err(format!(
                "line {} of the rendered text: {key:?} is not a variable name",
                n + 1
            ));
        }
        let value = value.trim();
        let value = if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
            unquote(&value[1..value.len() - 1])
        } else if value.len() >= 2 && value.starts_with('\'') && value.ends_with('\'') {
            value[1..value.len() - 1].to_string()
        } else {
            // An unquoted value ends at a ` #` comment.
            value
                .split(" #")
                .next()
                .unwrap_or("")
                .trim_end()
                .to_string()
        };
        vars.insert(key.to_string(), value);
    }
    Ok(vars)
}

/// A double-quoted value's escapes: `\n`, `\"`, `\\`.
fn unquote(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('n')) => {
                out.push('\n');
                chars.next();
            }
            ('\\', Some(e @ ('"' | '\\'))) => {
                out.push(e);
                chars.next();
            }
            (c, _) => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ChangeMode;
    use std::time::Duration;

    fn template(data: &str, destination: &str) -> TaskTemplate {
        TaskTemplate {
            data: Some(data.into()),
            source: None,
            destination: destination.into(),
            perms: 0o640,
            uid: None,
            gid: None,
            left_delimiter: "{{".into(),
            right_delimiter: "}}".into(),
            env: false,
            change_mode: ChangeMode::Restart,
            splay: Duration::from_secs(5),
            error_on_missing_key: false,
            once: false,
            wait: None,
            ignored: Vec::new(),
        }
    }

    fn task_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-tmpl-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("local")).unwrap();
        dir
    }

    fn env() -> BTreeMap<String, String> {
        [
            ("NOMAD_TASK_DIR", "/local"),
            ("NOMAD_ALLOC_ID", "0a1b2c3d"),
            ("A", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn templates_render_into_the_task_dir_with_their_mode() {
        let dir = task_dir("render");
        let mut vars = template(
            "A={{ env \"A\" }}-override\nexport B='two'\n# c\n\nC = \"x\\\"y\"\n",
            "${NOMAD_TASK_DIR}/sub/app.env",
        );
        vars.env = true;
        let plain = template("id {{ env \"NOMAD_ALLOC_ID\" }}\n", "/local/id");
        let (got, sizes) = render_all(&[vars, plain], &dir, env(), &BTreeMap::new(), &[]).unwrap();
        assert_eq!(sizes, [44, 12]);
        assert_eq!(got["A"], "1-override");
        assert_eq!(got["B"], "two");
        assert_eq!(got["C"], "x\"y");
        assert_eq!(
            fs::read_to_string(dir.join("local/id")).unwrap(),
            "id 0a1b2c3d\n"
        );
        let meta = fs::metadata(dir.join("local/sub/app.env")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
        // A second render replaces the file.
        render_all(
            &[template("new", "local/id")],
            &dir,
            env(),
            &BTreeMap::new(),
            &[],
        )
        .unwrap();
        assert_eq!(fs::read_to_string(dir.join("local/id")).unwrap(), "new");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn env_templates_give_the_names_their_lines_spell_out() {
        let mut t = template(
            "A=1\nexport B={{ env \"X\" }}\n{{ env \"K\" }}=v\n# C=3\n",
            "local/e",
        );
        assert!(
            env_names(&t).is_empty(),
            "only env = true templates give names"
        );
        t.env = true;
        assert_eq!(env_names(&t), ["A", "B"]);
    }

    #[test]
    fn symlinks_left_in_the_task_dir_are_not_followed() {
        let dir = task_dir("links");
        let outside = task_dir("links-outside");
        std::os::unix::fs::symlink(&outside, dir.join("local/link")).unwrap();
        let err = render_all(
            &[template("x", "local/link/f")],
            &dir,
            env(),
            &BTreeMap::new(),
            &[],
        )
        .unwrap_err();
        assert!(err.contains("is not a directory (a symlink?)"), "{err}");
        std::os::unix::fs::symlink(outside.join("target"), dir.join("local/f")).unwrap();
        render_all(
            &[template("x", "local/f")],
            &dir,
            env(),
            &BTreeMap::new(),
            &[],
        )
        .unwrap();
        assert!(!outside.join("target").exists());
        assert!(fs::symlink_metadata(dir.join("local/f")).unwrap().is_file());
        let err = render_all(
            &[template("x", "${NOMAD_TASK_DIR}/../../x")],
            &dir,
            env(),
            &BTreeMap::new(),
            &[],
        )
        .unwrap_err();
        assert!(err.contains("leads outside the task dir"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn render_errors_name_the_template_and_withhold_secrets() {
        let dir = task_dir("errors");
        let err = render_all(
            &[template("a\n{{ parseInt \"x1\" }}", "local/x")],
            &dir,
            env(),
            &BTreeMap::new(),
            &[],
        )
        .unwrap_err();
        assert_eq!(err, "template \"local/x\": line 2:4: error calling parseInt: parsing \"x1\": invalid syntax");
        let err = render_all(
            &[template("{{ parseInt \"hunter2\" }}", "secrets/x")],
            &dir,
            env(),
            &BTreeMap::new(),
            &[],
        )
        .unwrap_err();
        assert!(
            err.starts_with("template \"secrets/x\": line 1:4: error calling parseInt (the rest"),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
        let mut bad = template("not a variable line", "local/e");
        bad.env = true;
        let err = render_all(&[bad], &dir, env(), &BTreeMap::new(), &[]).unwrap_err();
        assert!(
            err.contains("line 1 of the rendered text is not KEY=value"),
            "{err}"
        );
        let mut source = template("", "local/from-source");
        source.data = None;
        source.source = Some("local/in.tpl".into());
        fs::write(dir.join("local/in.tpl"), "from {{ \"source\" }}").unwrap();
        render_all(&[source], &dir, env(), &BTreeMap::new(), &[]).unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("local/from-source")).unwrap(),
            "from source"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_raw_exec_destination_in_the_shared_alloc_dir_renders_there() {
        let alloc = Path::new("/data/alloc/0a1b2c3d");
        let task = alloc.join("t");
        let vars = BTreeMap::from([(
            "NOMAD_ALLOC_DIR".to_string(),
            alloc.join("alloc").display().to_string(),
        )]);
        let t = template("x", "${NOMAD_ALLOC_DIR}/script.sh");
        assert_eq!(
            destination(&t, &task, &vars).unwrap(),
            alloc.join("alloc/script.sh")
        );
        let out = template("x", "${NOMAD_ALLOC_DIR}/../../x");
        assert!(destination(&out, &task, &vars)
            .unwrap_err()
            .contains("leads outside"));
        // Anything else absolute stays under the task dir.
        let other = template("x", "/etc/x");
        assert_eq!(
            destination(&other, &task, &vars).unwrap(),
            task.join("etc/x")
        );
    }
}
