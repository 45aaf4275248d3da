//! A task's `template` blocks, as Nomad's: what to render (`data`, or a
//! file at `source` in the task dir), where (`destination`, inside the
//! task dir), with which mode and owner, whether its `KEY=value` lines
//! become the task's environment (`env`), and what a change does
//! (`change_mode`, `change_signal`, `splay`).
//!
//! An inline template is parsed here, so that `validate` and `job run`
//! report its syntax errors and the functions csi-agent refuses (those
//! that need Consul, Vault or Nomad's variables) with the template's line.
//! `${...}` in `data` is HCL's, as in Nomad: the decoder's evaluation of
//! variables has already run; `{{ env "NOMAD_..." }}` is how a template
//! reads the task's environment. `once` keeps a running task's file as
//! first rendered; `wait { min max }` holds a re-render back until changes
//! settle (`task::rerender`). `vault_grace` (Vault's) and `change_script`
//! (for `change_mode = "script"`, refused) are kept with a warning.

use std::path::{Component, Path};
use std::time::Duration;

use super::decode::Fields;
use super::encode::Writer;
use super::signal::KillSignal;
use super::Kept;
use crate::nomad_template::{self, Context};
use template::Template;

/// `vault_grace` tunes Vault leases, which csi-agent never reads;
/// `change_script` only serves `change_mode = "script"`, which is refused.
pub(super) const TEMPLATE_IGNORED: &[&str] = &["vault_grace", "change_script"];

/// The longest `wait { max }` (and `min`) of a template: a re-render is
/// never held back longer than this.
pub const MAX_TEMPLATE_WAIT: Duration = Duration::from_secs(3600);

/// `wait { min max }` of a template: a change is rendered once no other
/// came for `min`, and at the latest `max` after the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateWait {
    pub min: Duration,
    pub max: Duration,
}

/// What a re-rendered template does to its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeMode {
    Noop,
    Restart,
    /// Sends the signal to the task.
    Signal(KillSignal),
}

/// `template { ... }` of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskTemplate {
    /// The template text, inline.
    pub data: Option<String>,
    /// Or a file in the task dir that holds it, read when it renders.
    pub source: Option<String>,
    /// Relative to the task dir (an absolute path is read inside it); may
    /// name `${NOMAD_...}` variables.
    pub destination: String,
    /// The file's mode (`perms = "644"`).
    pub perms: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub left_delimiter: String,
    pub right_delimiter: String,
    /// The rendered `KEY=value` lines become the task's environment.
    pub env: bool,
    pub change_mode: ChangeMode,
    pub splay: Duration,
    pub error_on_missing_key: bool,
    /// Rendered when the task starts, never re-rendered while it runs.
    pub once: bool,
    pub wait: Option<TemplateWait>,
    pub ignored: Vec<Kept>,
}

impl TaskTemplate {
    /// The template parsed with its delimiters: `None` for a `source`.
    pub fn parsed<'a>(&self) -> Option<Result<Template<Context<'a>>, template::Error>> {
        let data = self.data.as_deref()?;
        Some(nomad_template::parse(
            data,
            &self.left_delimiter,
            &self.right_delimiter,
        ))
    }

    /// Whether the destination is under the task's `secrets/` dir, whose
    /// files are never logged.
    pub fn is_secret(&self) -> bool {
        let dest = self.destination.trim_start_matches('/');
        dest.starts_with("secrets/") || dest.starts_with("${NOMAD_SECRETS_DIR}")
    }
}

/// Whether `destination`, joined to a task dir, stays inside it.
pub fn stays_inside(destination: &str) -> bool {
    let mut depth: usize = 0;
    for component in Path::new(destination.trim_start_matches('/')).components() {
        match component {
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    depth > 0
}

pub(crate) fn decode_template(f: &mut Fields<'_>) -> Option<TaskTemplate> {
    let destination = f.string_at("destination");
    let destination = f.require("destination", destination);
    let data = f.string_at("data");
    let source = f.string_at("source");
    let left = f.string("left_delimiter").unwrap_or_else(|| "{{".into());
    let right = f.string("right_delimiter").unwrap_or_else(|| "}}".into());
    let perms = f.string_at("perms");
    let uid = owner(f, "uid");
    let gid = owner(f, "gid");
    let env = f.bool("env").unwrap_or(false);
    let mode = f.string_at("change_mode");
    let signal = f.parsed_at::<KillSignal>("change_signal");
    let splay = f.duration("splay").unwrap_or(Duration::from_secs(5));
    let error_on_missing_key = f.bool("error_on_missing_key").unwrap_or(false);
    let once = f.bool("once").unwrap_or(false);
    let wait = f
        .block("wait")
        .and_then(|block| decode_wait(&mut f.nested(block)));
    let ignored = f.ignore(TEMPLATE_IGNORED);
    let what = f.what().to_string();
    if let Some((dest, pos)) = &destination {
        if dest.is_empty() {
            f.error(*pos, format!("\"destination\" in {what} must not be empty"));
        } else if !dest.contains("${") && !stays_inside(dest) {
            f.error(
                *pos,
                format!("\"destination\" {dest:?} in {what} leads outside the task dir"),
            );
        }
    }
    let name = destination.as_ref().map_or("", |(d, _)| d.as_str());
    match (&data, &source) {
        (Some(_), Some((_, pos))) => f.error(
            *pos,
            format!("template {name:?}: give \"data\" or \"source\", not both"),
        ),
        (None, None) => f.error(
            f.pos(),
            format!("template {name:?}: \"data\" or \"source\" is required"),
        ),
        (Some((text, pos)), None) => {
            if left.is_empty() || right.is_empty() {
                f.error(
                    *pos,
                    format!("template {name:?}: delimiters must not be empty"),
                );
            } else if let Err(err) = nomad_template::parse(text, &left, &right) {
                f.error(*pos, format!("template {name:?}: {err}"));
            }
        }
        (None, Some((src, pos))) => {
            if !stays_inside(src) {
                f.error(
                    *pos,
                    format!("\"source\" {src:?} in {what} leads outside the task dir"),
                );
            }
        }
    }
    let perms = match perms {
        None => Some(0o644),
        Some((text, pos)) => {
            let value = u32::from_str_radix(&text, 8).ok().filter(|p| *p <= 0o7777);
            if value.is_none() {
                f.error(
                    pos,
                    format!(
                        "\"perms\" in {what} must be an octal mode such as \"644\", found {text:?}"
                    ),
                );
            }
            value
        }
    };
    let change_mode = match mode.as_ref().map(|(m, pos)| (m.as_str(), *pos)) {
        None | Some(("restart", _)) => Some(ChangeMode::Restart),
        Some(("noop", _)) => Some(ChangeMode::Noop),
        Some(("signal", pos)) => match signal {
            Some((signal, _)) => Some(ChangeMode::Signal(signal)),
            None => {
                if !f.has("change_signal") {
                    f.error(
                        pos,
                        format!("change_mode \"signal\" in {what} needs \"change_signal\""),
                    );
                }
                None
            }
        },
        Some(("script", pos)) => {
            f.error(
                pos,
                format!("change_mode \"script\" in {what} is not supported by csi-agent: use \"noop\", \"restart\" or \"signal\""),
            );
            None
        }
        Some((other, pos)) => {
            f.error(
                pos,
                format!(
                    "change_mode {other:?} in {what} must be \"noop\", \"restart\" or \"signal\""
                ),
            );
            None
        }
    };
    f.finish();
    Some(TaskTemplate {
        data: data.map(|(d, _)| d),
        source: source.map(|(s, _)| s),
        destination: destination?.0,
        perms: perms?,
        uid,
        gid,
        left_delimiter: left,
        right_delimiter: right,
        env,
        change_mode: change_mode?,
        splay,
        error_on_missing_key,
        once,
        wait,
        ignored,
    })
}

/// `wait { min max }`: `max` defaults to `min` (and `min` to 0), `min`
/// is at most `max`, both at most [`MAX_TEMPLATE_WAIT`].
fn decode_wait(f: &mut Fields<'_>) -> Option<TemplateWait> {
    let min = f.duration_at("min");
    let max = f.duration_at("max");
    let what = f.what().to_string();
    let mut ok = true;
    for (key, value) in [("min", &min), ("max", &max)] {
        if let Some((d, pos)) = value {
            if *d > MAX_TEMPLATE_WAIT {
                f.error(
                    *pos,
                    format!(
                        "{key:?} in {what} is over MAX_TEMPLATE_WAIT ({})",
                        crate::units::format_duration(MAX_TEMPLATE_WAIT)
                    ),
                );
                ok = false;
            }
        }
    }
    let min_d = min.as_ref().map_or(Duration::ZERO, |(d, _)| *d);
    let max_d = max.as_ref().map_or(min_d, |(d, _)| *d);
    if let (Some((_, pos)), true) = (&max, max_d < min_d) {
        f.error(*pos, format!("\"max\" in {what} is shorter than \"min\""));
        ok = false;
    }
    f.finish();
    ok.then_some(TemplateWait {
        min: min_d,
        max: max_d,
    })
}

/// `uid`/`gid`: a number, where Nomad's `-1` means unset.
fn owner(f: &mut Fields<'_>, key: &'static str) -> Option<u32> {
    let (value, pos) = f.i64_at(key)?;
    if value < 0 {
        return None;
    }
    let id = u32::try_from(value).ok();
    if id.is_none() {
        f.error(pos, format!("{key:?} in {} is too large", f.what()));
    }
    id
}

pub(crate) fn write_template(w: &mut Writer, t: &TaskTemplate) {
    w.open("template", None);
    w.opt_string("data", t.data.as_deref());
    w.opt_string("source", t.source.as_deref());
    w.string("destination", &t.destination);
    w.string("perms", &format!("{:o}", t.perms));
    if let Some(uid) = t.uid {
        w.plain("uid", uid);
    }
    if let Some(gid) = t.gid {
        w.plain("gid", gid);
    }
    w.string("left_delimiter", &t.left_delimiter);
    w.string("right_delimiter", &t.right_delimiter);
    w.plain("env", t.env);
    match t.change_mode {
        ChangeMode::Noop => w.string("change_mode", "noop"),
        ChangeMode::Restart => w.string("change_mode", "restart"),
        ChangeMode::Signal(signal) => {
            w.string("change_mode", "signal");
            w.string("change_signal", signal.as_str());
        }
    }
    w.duration("splay", t.splay);
    w.plain("error_on_missing_key", t.error_on_missing_key);
    if t.once {
        w.plain("once", true);
    }
    if let Some(wait) = t.wait {
        w.open("wait", None);
        w.duration("min", wait.min);
        w.duration("max", wait.max);
        w.close();
    }
    w.kept(&t.ignored);
    w.close();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Job;

    /// A job whose task "t" has `body` from line 7.
    fn job(body: &str) -> String {
        format!("job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"exec\"\n      config {{ command = \"/bin/true\" }}\n      env {{ A = \"1\" }}\n{body}\n    }}\n  }}\n}}\n")
    }

    fn errors(body: &str) -> Vec<String> {
        match Job::decode(&job(body), "j.hcl") {
            Ok(decoded) => panic!("decoded: {:?}", decoded.spec.groups[0].tasks[0].templates),
            Err(invalid) => invalid.errors.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_template_decodes_with_nomads_defaults_and_round_trips() {
        let src = job("      template {\n        data = <<EOH\nID={{ env \"NOMAD_ALLOC_ID\" }} ${NOMAD_TASK_DIR}\nEOH\n        destination = \"local/app.env\"\n        env = true\n      }\n      template {\n        data = \"x\"\n        destination = \"secrets/key\"\n        perms = \"600\"\n        uid = 10\n        gid = -1\n        change_mode = \"signal\"\n        change_signal = \"SIGHUP\"\n        splay = \"1s\"\n        left_delimiter = \"[[\"\n        right_delimiter = \"]]\"\n      }");
        let decoded = Job::decode(&src, "j.hcl").unwrap();
        let task = &decoded.spec.groups[0].tasks[0];
        let [first, second] = task.templates.as_slice() else {
            panic!("{:?}", task.templates)
        };
        assert_eq!(
            first.data.as_deref(),
            Some("ID={{ env \"NOMAD_ALLOC_ID\" }} ${NOMAD_TASK_DIR}\n")
        );
        assert_eq!(first.perms, 0o644);
        assert_eq!(first.change_mode, ChangeMode::Restart);
        assert_eq!(first.splay, Duration::from_secs(5));
        assert!(first.env && !first.is_secret());
        assert_eq!(second.perms, 0o600);
        assert_eq!((second.uid, second.gid), (Some(10), None));
        assert_eq!(second.change_mode, ChangeMode::Signal(KillSignal::Hup));
        assert_eq!(second.left_delimiter, "[[");
        assert!(second.is_secret());
        assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
        let again = Job::decode(&decoded.spec.to_hcl(), "again.hcl").unwrap();
        assert_eq!(again.spec, decoded.spec);
    }

    #[test]
    fn refused_functions_and_syntax_errors_name_the_template_and_line() {
        let errs = errors("      template {\n        data = <<EOH\nok\n{{ key \"service/x\" }}\nEOH\n        destination = \"local/x\"\n      }");
        assert_eq!(
            errs,
            [
                r#"j.hcl:8:16: template "local/x": line 2:4: function "key" needs Consul, which csi-agent does not have"#
            ]
        );
        let errs = errors("      template {\n        data = \"{{ if }}\"\n        destination = \"local/x\"\n      }");
        assert!(
            errs[0].contains("template \"local/x\": line 1:1: missing value for if"),
            "{errs:?}"
        );
    }

    #[test]
    fn destinations_and_sources_stay_in_the_task_dir() {
        for dest in ["../../etc/passwd", "/local/../../x", ".."] {
            let errs = errors(&format!(
                "      template {{\n        data = \"x\"\n        destination = {dest:?}\n      }}"
            ));
            assert!(
                errs[0].contains("leads outside the task dir"),
                "{dest}: {errs:?}"
            );
        }
        let errs = errors("      template {\n        source = \"../x.tpl\"\n        destination = \"local/x\"\n      }");
        assert!(errs[0].contains("\"source\" \"../x.tpl\""), "{errs:?}");
        assert!(stays_inside("/local/a/../b") && stays_inside("${NOMAD_SECRETS_DIR}/x"));
    }

    #[test]
    fn bad_fields_are_errors_and_tuning_is_a_warning() {
        let cases = [
            (
                "data = \"x\"\n        destination = \"local/x\"\n        change_mode = \"script\"",
                "change_mode \"script\"",
            ),
            (
                "data = \"x\"\n        destination = \"local/x\"\n        change_mode = \"signal\"",
                "needs \"change_signal\"",
            ),
            (
                "data = \"x\"\n        destination = \"local/x\"\n        perms = \"9\"",
                "octal mode",
            ),
            (
                "destination = \"local/x\"",
                "\"data\" or \"source\" is required",
            ),
            (
                "data = \"x\"\n        source = \"a\"\n        destination = \"local/x\"",
                "not both",
            ),
            ("data = \"x\"", "missing required attribute \"destination\""),
        ];
        for (body, want) in cases {
            let errs = errors(&format!("      template {{\n        {body}\n      }}"));
            assert!(errs.iter().any(|e| e.contains(want)), "{body}: {errs:?}");
        }
        let src = job("      template {\n        data = \"x\"\n        destination = \"local/x\"\n        vault_grace = \"15s\"\n      }");
        let decoded = Job::decode(&src, "j.hcl").unwrap();
        assert_eq!(decoded.warnings.len(), 1, "{:?}", decoded.warnings);
        assert!(decoded.warnings[0].message.contains("\"vault_grace\""));
    }

    #[test]
    fn once_and_wait_decode_and_wait_is_bounded() {
        let template = |extra: &str| {
            format!("      template {{\n        data = \"x\"\n        destination = \"local/x\"\n{extra}\n      }}")
        };
        let src = job(&template(
            "        once = true\n        wait {\n          min = \"2s\"\n        }",
        ));
        let decoded = Job::decode(&src, "j.hcl").unwrap();
        assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
        let t = &decoded.spec.groups[0].tasks[0].templates[0];
        assert!(t.once);
        let two = Duration::from_secs(2);
        assert_eq!(t.wait, Some(TemplateWait { min: two, max: two }));
        let errs = errors(&template(
            "        wait {\n          min = \"1h1s\"\n        }",
        ));
        assert_eq!(
            errs,
            ["j.hcl:11:17: \"min\" in wait in task \"t\" is over MAX_TEMPLATE_WAIT (1h)"]
        );
        let errs = errors(&template(
            "        wait {\n          min = \"5s\"\n          max = \"1s\"\n        }",
        ));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("j.hcl:12:17:") && errs[0].contains("shorter than \"min\""),
            "{errs:?}"
        );
    }
}
