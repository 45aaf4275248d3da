//! The difference between two versions of a job, as Nomad's `job plan`
//! shows it: the job, its groups and their tasks, each with the fields
//! and nested objects that were added, deleted or edited.
//!
//! Both versions are compared as the agent understood them: each is
//! written back as HCL by [`Job::to_hcl`] (which writes every key the
//! agent honours, and the ignored ones as they were written) and read
//! again, so a key that decodes is a key that is compared, and two files
//! that differ only in their spelling (a variable, a default written out,
//! a comment) are the same job.
//!
//! The shape follows Nomad's `structs.JobDiff`: a field is a scalar with
//! an old and a new value, shown by Nomad's name for it (`Count`,
//! `KillTimeout`, `Meta[owner]`, a template's `EmbeddedTmpl`); lists and
//! maps are flattened into fields (`args[0]`, `Env[FOO]`); a block is an
//! object, matched with its old self by its label, by the attribute that
//! names it (a template's destination) or, when it is one of its kind,
//! by its kind. A task's `config` is flattened whole, keys as written, as
//! Nomad flattens a driver's config. Constraints are a set, as Nomad's:
//! a changed one is one deleted and one added.
//!
//! Secrets are compared but never shown: a docker task's registry
//! `password` and a volume's `mount_flags` read `[REDACTED]` on both
//! sides, edited or not.

use std::collections::BTreeMap;

use super::Job;
use hcl::{Body, Expr};

/// What happened to a field or an object between the two versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffType {
    None,
    Added,
    Deleted,
    Edited,
}

impl DiffType {
    /// Nomad's name for it, as its API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            DiffType::None => "None",
            DiffType::Added => "Added",
            DiffType::Deleted => "Deleted",
            DiffType::Edited => "Edited",
        }
    }
}

/// A scalar and its two values ("" where it is not set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDiff {
    pub kind: DiffType,
    pub name: String,
    pub old: String,
    pub new: String,
    /// What the change makes the scheduler do (`forces create`).
    pub annotations: Vec<String>,
}

/// A job, group, task or nested block: its fields and objects, and for a
/// job its groups, for a group its tasks (`children`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectDiff {
    pub kind: DiffType,
    pub name: String,
    pub fields: Vec<FieldDiff>,
    pub objects: Vec<ObjectDiff>,
    pub children: Vec<ObjectDiff>,
    /// A task's: what its change makes the scheduler do.
    pub annotations: Vec<String>,
    /// A group's: how many allocs of each kind of update (Nomad's
    /// `create`, `destroy`, `in-place update`, `create/destroy update`,
    /// `ignore`), by kind.
    pub updates: BTreeMap<String, u64>,
}

impl ObjectDiff {
    /// Whether anything in it changed.
    pub fn changed(&self) -> bool {
        self.kind != DiffType::None
    }
}

/// Job `new` against `old`, the version the agent has (`None` for a job
/// it does not know: everything is added).
pub fn diff_jobs(old: Option<&Job>, new: &Job) -> ObjectDiff {
    let new_tree = Tree::of_job(new);
    let old_tree = old.map(Tree::of_job);
    diff_with_children(old_tree.as_ref(), Some(&new_tree), &new.name)
}

/// A block as the diff sees it: flattened fields, nested objects, and the
/// groups of a job or tasks of a group.
#[derive(Clone, Debug, Default, PartialEq)]
struct Tree {
    /// Nomad's name for the object (`Template`, `RestartPolicy`).
    name: String,
    /// What matches it with its old self among its kind ("" for none).
    key: String,
    /// Whether it is matched as a member of a set (constraints).
    set: bool,
    fields: BTreeMap<String, String>,
    objects: Vec<Tree>,
    children: Vec<Tree>,
}

impl Tree {
    fn of_job(job: &Job) -> Tree {
        let hcl = job.to_hcl();
        // `to_hcl` writes HCL that decodes to the job: it parses.
        let body = hcl::parse(&hcl, "job").unwrap_or_default();
        let job_block = body.blocks_named("job").next();
        job_block.map_or_else(Tree::default, |b| Tree::of_body("job", &b.body))
    }

    fn of_body(kind: &str, body: &Body) -> Tree {
        let mut tree = Tree {
            name: nomad_name(None, kind),
            ..Default::default()
        };
        for attr in body.attributes() {
            let name = nomad_name(Some(kind), &attr.key.name);
            flatten(&name, &attr.value, &mut tree.fields);
        }
        for block in body.blocks() {
            let child_kind = block.kind.name.as_str();
            match child_kind {
                "group" | "task" => {
                    let mut child = Tree::of_body(child_kind, &block.body);
                    child.name = block.label(0).unwrap_or_default().to_string();
                    tree.children.push(child);
                }
                "env" | "meta" => {
                    let prefix = nomad_name(Some(kind), child_kind);
                    for attr in block.body.attributes() {
                        let name = format!("{prefix}[{}]", attr.key.name);
                        flatten(&name, &attr.value, &mut tree.fields);
                    }
                }
                "config" if kind == "task" => {
                    let mut config = Tree {
                        name: "Config".to_string(),
                        ..Default::default()
                    };
                    flatten_body("", &block.body, &mut config.fields);
                    tree.objects.push(config);
                }
                _ => {
                    let mut child = Tree::of_body(child_kind, &block.body);
                    let labels: Vec<&str> = block.labels.iter().map(|l| l.value.as_str()).collect();
                    child.set = SET_KINDS.contains(&child_kind);
                    child.key = if labels.is_empty() {
                        key_attribute(child_kind)
                            .and_then(|a| child.fields.get(&nomad_name(Some(child_kind), a)))
                            .cloned()
                            .unwrap_or_default()
                    } else {
                        labels.join(" ")
                    };
                    if !labels.is_empty() {
                        // Nomad shows a labelled block's label as its name.
                        child.fields.insert("Name".to_string(), labels.join(" "));
                    }
                    tree.objects.push(child);
                }
            }
        }
        tree
    }
}

/// The blocks Nomad diffs as sets: a changed one is deleted and added.
const SET_KINDS: &[&str] = &["constraint", "affinity", "spread", "artifact"];

/// The attribute that tells apart the unlabelled blocks of a kind.
fn key_attribute(kind: &str) -> Option<&'static str> {
    match kind {
        "template" | "volume_mount" => Some("destination"),
        "service" => Some("name"),
        _ => None,
    }
}

/// Nomad's name for key `key` of a block of kind `parent` (`None` for a
/// block's own name): its Go field's where it differs from the key in
/// camel case.
fn nomad_name(parent: Option<&str>, key: &str) -> String {
    let renamed = match (parent, key) {
        (None, "restart") => "RestartPolicy",
        (None, "parameterized") => "ParameterizedJob",
        (None, "resources") => "Resources",
        (Some("constraint" | "affinity" | "spread"), "attribute") => "LTarget",
        (Some("constraint" | "affinity"), "value") => "RTarget",
        (Some("constraint" | "affinity"), "operator") => "Operand",
        (Some("template"), "data") => "EmbeddedTmpl",
        (Some("template"), "destination") => "DestPath",
        (Some("template"), "source") => "SourcePath",
        (Some("template"), "left_delimiter") => "LeftDelim",
        (Some("template"), "right_delimiter") => "RightDelim",
        (Some("template"), "env") => "Envvars",
        (Some("resources"), "cpu") => "CPU",
        (Some("resources"), "memory") => "MemoryMB",
        (Some("resources"), "memory_max") => "MemoryMaxMB",
        (Some("periodic"), "crons") => "Specs",
        (Some("periodic"), "cron") => "Spec",
        (Some("periodic"), "time_zone") => "TimeZone",
        _ => "",
    };
    if !renamed.is_empty() {
        return renamed.to_string();
    }
    key.split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect()
}

/// Puts value `value` of field `name` into `fields`, a list's items as
/// `name[0]`, a map's entries as `name[key]`; a null is not set.
fn flatten(name: &str, value: &Expr, fields: &mut BTreeMap<String, String>) {
    let text = match value {
        Expr::String { value, .. } | Expr::Heredoc { value, .. } => value.clone(),
        Expr::Number { value, .. } => value.text().to_string(),
        Expr::Bool { value, .. } => value.to_string(),
        Expr::Null { .. } => return,
        Expr::List { items, .. } => {
            for (i, item) in items.iter().enumerate() {
                flatten(&format!("{name}[{i}]"), item, fields);
            }
            return;
        }
        Expr::Object { entries, .. } => {
            for (key, item) in entries {
                flatten(&format!("{name}[{}]", key.name), item, fields);
            }
            return;
        }
        // `to_hcl` writes an ignored key as it was written, unevaluated.
        other => super::encode::kept_text("x", other)
            .trim_start_matches("x = ")
            .to_string(),
    };
    fields.insert(name.to_string(), text);
}

/// Flattens a whole body (a driver's config) into `fields`, keys as
/// written: its blocks as `kind[i][key]`, in file order.
fn flatten_body(prefix: &str, body: &Body, fields: &mut BTreeMap<String, String>) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}[{key}]")
        }
    };
    for attr in body.attributes() {
        flatten(&join(&attr.key.name), &attr.value, fields);
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for block in body.blocks() {
        let kind = block.kind.name.as_str();
        let n = counts.entry(kind).or_default();
        let mut name = format!("{}[{n}]", join(kind));
        *n += 1;
        for label in &block.labels {
            name = format!("{name}[{}]", label.value);
        }
        flatten_body(&name, &block.body, fields);
    }
}

/// The diff of one object, `name` naming it; `None` on a side where it is
/// absent.
fn diff_trees(old: Option<&Tree>, new: Option<&Tree>, name: &str) -> ObjectDiff {
    let empty = Tree::default();
    let (o, n) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let fields = diff_fields(&o.fields, &n.fields);
    let objects = diff_objects(&o.objects, &n.objects);
    let kind = match (old, new) {
        (None, _) => DiffType::Added,
        (_, None) => DiffType::Deleted,
        _ if fields.iter().any(|f| f.kind != DiffType::None)
            || objects.iter().any(ObjectDiff::changed) =>
        {
            DiffType::Edited
        }
        _ => DiffType::None,
    };
    ObjectDiff {
        kind,
        name: name.to_string(),
        fields,
        objects,
        children: Vec::new(),
        annotations: Vec::new(),
        updates: BTreeMap::new(),
    }
}

/// Every field of either side, sorted by name, with what happened to it.
fn diff_fields(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<FieldDiff> {
    let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
    order::sort(&mut names);
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let (o, n) = (old.get(name), new.get(name));
            let kind = match (o, n) {
                (None, _) => DiffType::Added,
                (_, None) => DiffType::Deleted,
                (Some(o), Some(n)) if o != n => DiffType::Edited,
                _ => DiffType::None,
            };
            let shown = |value: Option<&String>| match value {
                Some(_) if is_secret(name) => REDACTED.to_string(),
                value => value.cloned().unwrap_or_default(),
            };
            FieldDiff {
                kind,
                name: name.clone(),
                old: shown(o),
                new: shown(n),
                annotations: Vec::new(),
            }
        })
        .collect()
}

/// What a secret's value is shown as.
const REDACTED: &str = "[REDACTED]";

/// Whether field `name` holds a secret: a docker config's registry
/// password (`auth[0][password]`) or a volume's mount flags.
fn is_secret(name: &str) -> bool {
    (name.starts_with("auth[") && name.ends_with("[password]")) || name.starts_with("MountFlags[")
}

/// The nested objects of both sides, matched by kind and key; a set's
/// members by their whole content. Sorted by name, then as found.
fn diff_objects(old: &[Tree], new: &[Tree]) -> Vec<ObjectDiff> {
    let mut out = Vec::new();
    let mut old_used = vec![false; old.len()];
    for n in new {
        let found = old.iter().enumerate().position(|(i, o)| {
            !old_used[i] && o.name == n.name && if n.set { o == n } else { o.key == n.key }
        });
        match found {
            Some(i) => {
                old_used[i] = true;
                out.push(diff_trees(Some(&old[i]), Some(n), &n.name));
            }
            None => out.push(diff_trees(None, Some(n), &n.name)),
        }
    }
    for (o, used) in old.iter().zip(old_used) {
        if !used {
            out.push(diff_trees(Some(o), None, &o.name));
        }
    }
    order::sort_by(&mut out, |a, b| a.name.cmp(&b.name));
    out
}

/// The diff of a job or group with its groups or tasks: those of both
/// sides matched by name, sorted by name as Nomad sorts them. A job or
/// group whose children changed is edited.
fn diff_with_children(old: Option<&Tree>, new: Option<&Tree>, name: &str) -> ObjectDiff {
    let mut diff = diff_trees(old, new, name);
    let (old_children, new_children) = (
        old.map_or(&[][..], |t| &t.children),
        new.map_or(&[][..], |t| &t.children),
    );
    for n in new_children {
        let o = old_children.iter().find(|o| o.name == n.name);
        diff.children.push(diff_with_children(o, Some(n), &n.name));
    }
    for o in old_children {
        if !new_children.iter().any(|n| n.name == o.name) {
            diff.children
                .push(diff_with_children(Some(o), None, &o.name));
        }
    }
    order::sort_by(&mut diff.children, |a, b| a.name.cmp(&b.name));
    if diff.kind == DiffType::None && diff.children.iter().any(ObjectDiff::changed) {
        diff.kind = DiffType::Edited;
    }
    diff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(src: &str) -> Job {
        Job::decode(src, "job.hcl").unwrap().spec
    }

    /// A job of one group of one raw_exec task, with `task` and `group`
    /// spliced into their blocks.
    fn web(group: &str, task: &str) -> Job {
        job(&format!(
            r#"job "web" {{
  group "g" {{
    {group}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args = ["1000"]
      }}
      {task}
    }}
  }}
}}"#
        ))
    }

    fn field<'d>(diff: &'d ObjectDiff, name: &str) -> &'d FieldDiff {
        diff.fields
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no field {name} in {diff:#?}"))
    }

    fn object<'d>(diff: &'d ObjectDiff, name: &str) -> &'d ObjectDiff {
        diff.objects
            .iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("no object {name} in {diff:#?}"))
    }

    fn task(diff: &ObjectDiff) -> &ObjectDiff {
        &diff.children[0].children[0]
    }

    #[test]
    fn a_new_job_is_added_with_every_group_and_task() {
        let diff = diff_jobs(None, &web("", ""));
        assert_eq!(diff.kind, DiffType::Added);
        assert_eq!(diff.name, "web");
        assert_eq!(diff.children[0].kind, DiffType::Added);
        assert_eq!(diff.children[0].name, "g");
        let t = task(&diff);
        assert_eq!((t.kind, t.name.as_str()), (DiffType::Added, "t"));
        let driver = field(t, "Driver");
        assert_eq!(
            (driver.kind, driver.new.as_str()),
            (DiffType::Added, "raw_exec")
        );
        assert_eq!(field(object(t, "Config"), "args[0]").new, "1000");
    }

    #[test]
    fn the_same_job_is_none_throughout_even_written_otherwise() {
        let old = web("count = 1", "");
        // The default written out, and a variable for the command.
        let new = job(r#"
variable "cmd" { default = "/bin/sleep" }
job "web" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = var.cmd
        args = ["1000"]
      }
    }
  }
}"#);
        let diff = diff_jobs(Some(&old), &new);
        assert_eq!(diff.kind, DiffType::None, "{diff:#?}");
        assert!(!diff.children[0].changed());
        assert!(!task(&diff).changed());
        // Every field is there, unchanged, for -verbose.
        assert_eq!(field(task(&diff), "Driver").kind, DiffType::None);
    }

    #[test]
    fn an_edited_config_value_is_edited_down_to_its_field() {
        let old = web("", "");
        let new = job(&web("", "").to_hcl().replace("\"1000\"", "\"2000\""));
        let diff = diff_jobs(Some(&old), &new);
        assert_eq!(diff.kind, DiffType::Edited);
        assert_eq!(diff.children[0].kind, DiffType::Edited);
        let t = task(&diff);
        assert_eq!(t.kind, DiffType::Edited);
        let config = object(t, "Config");
        assert_eq!(config.kind, DiffType::Edited);
        let args = field(config, "args[0]");
        assert_eq!(
            (args.kind, args.old.as_str(), args.new.as_str()),
            (DiffType::Edited, "1000", "2000")
        );
        // The unchanged ones stay, as context.
        assert_eq!(field(config, "command").kind, DiffType::None);
    }

    #[test]
    fn env_and_meta_are_fields_by_key_added_and_deleted() {
        let old = web("", r#"env { A = "1" }"#);
        let new = web(
            "",
            r#"env { B = "2" }
      meta { owner = "me" }"#,
        );
        let diff = diff_jobs(Some(&old), &new);
        let t = task(&diff);
        assert_eq!(field(t, "Env[A]").kind, DiffType::Deleted);
        assert_eq!(field(t, "Env[A]").old, "1");
        assert_eq!(field(t, "Env[B]").kind, DiffType::Added);
        assert_eq!(field(t, "Meta[owner]").new, "me");
    }

    #[test]
    fn templates_are_matched_by_destination_and_named_as_nomad_names_them() {
        let tmpl = |data: &str, dest: &str| {
            format!("template {{\n data = \"{data}\"\n destination = \"{dest}\"\n }}")
        };
        let old = web(
            "",
            &format!("{}\n{}", tmpl("a", "local/a"), tmpl("b", "local/b")),
        );
        // In another order: matched by destination, not by place.
        let new = web(
            "",
            &format!("{}\n{}", tmpl("c", "local/b"), tmpl("a", "local/a")),
        );
        let diff = diff_jobs(Some(&old), &new);
        let templates: Vec<&ObjectDiff> = task(&diff)
            .objects
            .iter()
            .filter(|o| o.name == "Template")
            .collect();
        assert_eq!(templates.len(), 2);
        assert_eq!(templates.iter().filter(|t| t.changed()).count(), 1);
        let edited = templates.iter().find(|t| t.changed()).unwrap();
        assert_eq!(edited.kind, DiffType::Edited);
        let data = field(edited, "EmbeddedTmpl");
        assert_eq!((data.old.as_str(), data.new.as_str()), ("b", "c"));
        assert_eq!(field(edited, "DestPath").kind, DiffType::None);
    }

    #[test]
    fn secrets_are_compared_but_never_shown() {
        let docker = |password: &str, flag: &str| {
            job(&format!(
                r#"job "web" {{
  group "g" {{
    volume "v" {{
      type            = "csi"
      source          = "vol"
      attachment_mode = "file-system"
      access_mode     = "single-node-writer"
      mount_options {{ mount_flags = [{flag:?}] }}
    }}
    task "t" {{
      driver = "docker"
      config {{
        image = "busybox"
        auth {{
          username = "me"
          password = {password:?}
        }}
      }}
    }}
  }}
}}"#
            ))
        };
        let diff = diff_jobs(
            Some(&docker("hunter2", "noatime")),
            &docker("hunter3", "nodev"),
        );
        let shown = format!("{diff:?}");
        for secret in ["hunter2", "hunter3", "noatime", "nodev"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        let password = field(object(task(&diff), "Config"), "auth[0][password]");
        assert_eq!(
            (password.kind, password.old.as_str(), password.new.as_str()),
            (DiffType::Edited, REDACTED, REDACTED)
        );
        let options = object(object(&diff.children[0], "Volume"), "MountOptions");
        assert_eq!(field(options, "MountFlags[0]").kind, DiffType::Edited);
        assert_eq!(
            field(object(task(&diff), "Config"), "auth[0][username]").new,
            "me"
        );
    }

    #[test]
    fn a_changed_constraint_is_one_deleted_and_one_added() {
        let c = |v: &str| {
            format!("constraint {{\n attribute = \"${{attr.kernel.name}}\"\n value = \"{v}\"\n }}")
        };
        let diff = diff_jobs(Some(&web(&c("linux"), "")), &web(&c("windows"), ""));
        let group = &diff.children[0];
        let kinds: Vec<DiffType> = group
            .objects
            .iter()
            .filter(|o| o.name == "Constraint")
            .map(|o| o.kind)
            .collect();
        assert_eq!(kinds, [DiffType::Added, DiffType::Deleted]);
        assert_eq!(group.kind, DiffType::Edited);
        assert!(!task(&diff).changed());
    }

    #[test]
    fn nested_blocks_are_objects_within_objects() {
        let old = web(
            r#"volume "data" {
      type = "host"
      source = "a"
    }
    restart { attempts = 1 }"#,
            "",
        );
        let new = web(
            r#"volume "data" {
      type = "host"
      source = "b"
    }
    restart { attempts = 1 }"#,
            "",
        );
        let diff = diff_jobs(Some(&old), &new);
        let group = &diff.children[0];
        let volume = object(group, "Volume");
        assert_eq!(volume.kind, DiffType::Edited);
        assert_eq!(field(volume, "Name").new, "data");
        assert_eq!(field(volume, "Source").old, "a");
        assert_eq!(object(group, "RestartPolicy").kind, DiffType::None);
    }

    #[test]
    fn groups_and_tasks_added_and_deleted_by_name_sorted_by_name() {
        let old = job(r#"job "web" {
  group "b" {
    task "x" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
  group "c" {
    task "x" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#);
        let new = job(&old.to_hcl().replace("group \"c\"", "group \"a\""));
        let diff = diff_jobs(Some(&old), &new);
        let groups: Vec<(&str, DiffType)> = diff
            .children
            .iter()
            .map(|g| (g.name.as_str(), g.kind))
            .collect();
        assert_eq!(
            groups,
            [
                ("a", DiffType::Added),
                ("b", DiffType::None),
                ("c", DiffType::Deleted)
            ]
        );
        assert_eq!(diff.children[2].children[0].kind, DiffType::Deleted);
    }

    #[test]
    fn periodic_and_job_fields_are_the_jobs() {
        let old = job(r#"job "backup" {
  type = "batch"
  periodic { crons = ["0 3 * * *"] }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#);
        let new = job(&old.to_hcl().replace("0 3 * * *", "0 4 * * *"));
        let diff = diff_jobs(Some(&old), &new);
        assert_eq!(diff.kind, DiffType::Edited);
        let periodic = object(&diff, "Periodic");
        let spec = field(periodic, "Specs[0]");
        assert_eq!(
            (spec.old.as_str(), spec.new.as_str()),
            ("0 3 * * *", "0 4 * * *")
        );
        assert_eq!(field(&diff, "Type").kind, DiffType::None);
        assert!(!diff.children[0].changed());
    }
}
