//! `csi-agent job plan`: what `job run` of a job file would change, as
//! Nomad's `job plan` shows it: the diff between the file's job and the
//! one the agent has, the scheduler's dry run on this node, and the job
//! modify index that `job run -check-index` checks.
//!
//! The agent works the plan out (`task::plan`) and changes nothing; this
//! module only lays it out, with Nomad's markers (`+`, `-`, `+/-`), its
//! alignment of names and values, and its exit codes: 0 when no alloc
//! would be created or destroyed, 1 when some would, 255 on an error.

use super::args::{self, switch, value, Flag, UsageError};
use super::job_inputs::{self, VAR_FLAGS};
use super::json::from_message;
use super::{out, CliError};
use crate::api::client::{resolve_address, AgentClient};
use crate::proto::agent as api;

pub const USAGE: &str = "\
usage: csi-agent job plan [-diff=BOOL] [-verbose] [-json] [-var NAME=VALUE]...
       [-var-file FILE]... [-hcl2-strict=false] [-address ADDR] FILE

  What `job run` of FILE would do, with nothing changed: the diff between
  FILE's job and the one the agent runs (+ added, - deleted, +/- edited;
  -diff=false leaves it out), each group's allocs as the scheduler would
  treat them (create, destroy, in-place update, create/destroy update,
  ignore), the groups the node's constraints keep off it, and the job
  modify index to give `job run -check-index`.

  -verbose                also the fields that did not change, and those of
                          added and deleted tasks
  -json                   the plan as JSON
  -var, -var-file, -hcl2-strict
                          as for `job run`

  Exit codes: 0 no allocation created or destroyed, 1 some would be,
  255 an error (2 a usage error).";

const PLAN_FLAGS: &[Flag] = &[
    value("address"),
    VAR_FLAGS[0],
    VAR_FLAGS[1],
    VAR_FLAGS[2],
    switch("verbose"),
    switch("json"),
];

/// The exit code of a plan that would create or destroy allocs.
const EXIT_CHANGES: i32 = 1;

/// The exit code of a plan that could not be made, as Nomad's.
const EXIT_ERROR: i32 = 255;

/// Nomad's kinds of update that create or destroy an alloc.
const CREATES_OR_DESTROYS: [&str; 3] = ["create", "destroy", "create/destroy update"];

/// Runs `job plan` and exits with its code: it never returns but for a
/// usage error.
pub fn run(argv: &[String]) -> Result<(), CliError> {
    match plan(argv) {
        Ok(code) => std::process::exit(code),
        Err(CliError::Usage(e)) => Err(CliError::Usage(e)),
        Err(e) => {
            super::print_error(&e);
            std::process::exit(EXIT_ERROR)
        }
    }
}

fn plan(argv: &[String]) -> Result<i32, CliError> {
    let (show_diff, argv) = diff_flag(argv)?;
    let args = args::parse(PLAN_FLAGS, &argv)?;
    args.at_most(1)?;
    let path = args.positional(0, "the job FILE")?;
    let (file, hcl) = job_inputs::read_source(path, "job file")?;
    let mut inputs = job_inputs::gather(&args, path)?;
    super::validate::refuse_if_any(&job_inputs::undeclared(&inputs, &file, &hcl))?;
    super::validate::refuse_if_any(&job_inputs::read_job_files(&mut inputs, &file, &hcl))?;
    let client = AgentClient::connect(&resolve_address(args.value("address"))?)?;
    let resp = client.job_plan(&file, &hcl, job_inputs::to_api(&inputs))?;
    let code = if creates_or_destroys(&resp) {
        EXIT_CHANGES
    } else {
        0
    };
    if args.switch("json") {
        out::outln!("{}", from_message(&resp).pretty());
        return Ok(code);
    }
    for warning in &resp.warnings {
        eprintln!("{warning}");
    }
    let verbose = args.switch("verbose");
    if show_diff {
        if let Some(diff) = resp.diff.as_ref() {
            out::outln!("{}\n", format_job(diff, verbose).trim());
        }
    }
    out::outln!("Scheduler dry-run:");
    out::outln!("{}\n", dry_run(&resp));
    let mut run_args = String::new();
    for var in args.all("var") {
        run_args.push_str(&format!("-var={var:?} "));
    }
    for file in args.all("var-file") {
        run_args.push_str(&format!("-var-file={file:?} "));
    }
    out::outln!(
        "Job Modify Index: {index}\n\
         To submit the job with version verification run:\n\n\
         csi-agent job run -check-index {index} {run_args}{path}\n\n\
         When running the job with the check-index flag, the job will only be run if the\n\
         job modify index given matches the agent's. If the index has changed, another\n\
         user has modified the job and the plan's results are potentially invalid.",
        index = resp.job_modify_index
    );
    Ok(code)
}

/// Takes Nomad's `-diff` (a bool flag, true unless `-diff=false`) out of
/// `argv`, which the flag parser would refuse with a value.
fn diff_flag(argv: &[String]) -> Result<(bool, Vec<String>), UsageError> {
    let mut show = true;
    let mut rest = Vec::new();
    for (i, arg) in argv.iter().enumerate() {
        if arg == "--" {
            rest.extend(argv[i..].iter().cloned());
            break;
        }
        let body = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'));
        match body.map(|b| b.split_once('=').unwrap_or((b, "true"))) {
            Some(("diff", value)) => {
                show = match value {
                    "true" | "1" | "t" | "T" | "TRUE" | "True" => true,
                    "false" | "0" | "f" | "F" | "FALSE" | "False" => false,
                    other => {
                        return Err(UsageError::new(format!(
                            "-diff takes true or false, not {other:?}"
                        )))
                    }
                }
            }
            _ => rest.push(arg.clone()),
        }
    }
    Ok((show, rest))
}

/// Whether some group's allocs would be created or destroyed.
fn creates_or_destroys(resp: &api::JobPlanResponse) -> bool {
    resp.diff.as_ref().is_some_and(|diff| {
        diff.children.iter().any(|group| {
            group
                .updates
                .iter()
                .any(|u| u.count > 0 && CREATES_OR_DESTROYS.contains(&u.kind.as_str()))
        })
    })
}

/// Nomad's "Scheduler dry-run:" lines.
fn dry_run(resp: &api::JobPlanResponse) -> String {
    let mut out = String::new();
    let system = resp.diff.as_ref().is_some_and(|d| {
        d.fields
            .iter()
            .any(|f| f.name == "Type" && f.new == "system")
    });
    if resp.unplaced.is_empty() {
        out.push_str("- All tasks successfully allocated.\n");
    } else {
        out.push_str(if system {
            "- WARNING: Failed to place allocations on all nodes.\n"
        } else {
            "- WARNING: Failed to place all allocations.\n"
        });
        for u in &resp.unplaced {
            out.push_str(&format!(
                "  Task Group {:?} (failed to place {} allocation{}):\n    * {}\n\n",
                u.group,
                u.count,
                if u.count == 1 { "" } else { "s" },
                u.message
            ));
        }
        out.truncate(out.trim_end_matches('\n').len() + 1);
    }
    if resp.next_periodic_launch_unix != 0 {
        let at = resp.next_periodic_launch_unix;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let from_now = u64::try_from(at).unwrap_or(0).saturating_sub(now);
        out.push_str(&format!(
            "- If submitted now, next periodic launch would be at {} ({} from now).\n",
            crate::spec::format_utc(at),
            crate::units::format_duration(std::time::Duration::from_secs(from_now))
        ));
    }
    out.trim_end_matches('\n').to_string()
}

/// Nomad's marker of a diff type and its width.
fn marker(kind: &str) -> &'static str {
    match kind {
        "Added" => "+ ",
        "Deleted" => "- ",
        "Edited" => "+/- ",
        _ => "",
    }
}

fn spaces(n: usize) -> String {
    " ".repeat(n)
}

/// What of `fields` and `objects` is shown: all with `verbose`, else what
/// changed.
fn shown<'d>(
    fields: &'d [api::PlanField],
    objects: &'d [api::PlanDiff],
    verbose: bool,
) -> (Vec<&'d api::PlanField>, Vec<&'d api::PlanDiff>) {
    (
        fields
            .iter()
            .filter(|f| verbose || f.type_ != "None")
            .collect(),
        objects
            .iter()
            .filter(|o| verbose || o.type_ != "None")
            .collect(),
    )
}

/// The longest field name and marker among `fields` and `objects`.
fn longest(fields: &[&api::PlanField], objects: &[&api::PlanDiff]) -> (usize, usize) {
    let name = fields.iter().map(|f| f.name.len()).max().unwrap_or(0);
    let mark = fields
        .iter()
        .map(|f| marker(&f.type_).len())
        .chain(objects.iter().map(|o| marker(&o.type_).len()))
        .max()
        .unwrap_or(0);
    (name, mark)
}

/// The job's diff: its fields and objects where it was edited (or
/// `verbose`), then each group.
pub fn format_job(job: &api::PlanDiff, verbose: bool) -> String {
    let mut out = format!("{}Job: {:?}\n", marker(&job.type_), job.name);
    let (fields, objects) = shown(&job.fields, &job.objects, verbose);
    let (long_field, mut long_mark) = longest(&fields, &objects);
    for g in &job.children {
        long_mark = long_mark.max(marker(&g.type_).len());
    }
    if job.type_ == "Edited" || verbose {
        let fo = aligned(&fields, &objects, 0, long_field, long_mark, verbose);
        out.push_str(&fo);
        if !fo.is_empty() {
            out.push('\n');
        }
    }
    for g in &job.children {
        let prefix = long_mark - marker(&g.type_).len();
        out.push_str(&format_group(g, prefix, verbose));
        out.push('\n');
    }
    out
}

fn format_group(group: &api::PlanDiff, prefix: usize, verbose: bool) -> String {
    let mut out = format!(
        "{}{}Task Group: {:?}",
        marker(&group.type_),
        spaces(prefix),
        group.name
    );
    let mut updates: Vec<&api::PlanUpdate> = group.updates.iter().collect();
    order::sort_by(&mut updates, |a, b| a.kind.cmp(&b.kind));
    if updates.is_empty() {
        out.push('\n');
    } else {
        let counts: Vec<String> = updates
            .iter()
            .map(|u| format!("{} {}", u.count, u.kind))
            .collect();
        out.push_str(&format!(" ({})\n", counts.join(", ")));
    }
    let (fields, objects) = shown(&group.fields, &group.objects, verbose);
    let (long_field, mut long_mark) = longest(&fields, &objects);
    for t in &group.children {
        long_mark = long_mark.max(marker(&t.type_).len());
    }
    let start = prefix + 2;
    if group.type_ == "Edited" || verbose {
        let fo = aligned(&fields, &objects, start, long_field, long_mark, verbose);
        out.push_str(&fo);
        if !fo.is_empty() {
            out.push('\n');
        }
    }
    for t in &group.children {
        let task_prefix = long_mark - marker(&t.type_).len();
        out.push_str(&format_task(t, start, task_prefix, verbose));
        out.push('\n');
    }
    out
}

fn format_task(task: &api::PlanDiff, start: usize, prefix: usize, verbose: bool) -> String {
    let mut out = format!(
        "{}{}{}Task: {:?}",
        spaces(start),
        marker(&task.type_),
        spaces(prefix),
        task.name
    );
    if !task.annotations.is_empty() {
        out.push_str(&format!(" ({})", task.annotations.join(", ")));
    }
    let added_or_deleted = task.type_ == "Added" || task.type_ == "Deleted";
    if task.type_ == "None" || (added_or_deleted && !verbose) {
        return out;
    }
    out.push('\n');
    let (fields, objects) = shown(&task.fields, &task.objects, verbose);
    let (long_field, long_mark) = longest(&fields, &objects);
    out.push_str(&aligned(
        &fields,
        &objects,
        start + 2,
        long_field,
        long_mark,
        verbose,
    ));
    out
}

/// A nested object: its name, then all its fields (the unchanged ones as
/// context), then its objects, in braces.
fn format_object(object: &api::PlanDiff, start: usize, prefix: usize, verbose: bool) -> String {
    let mark = marker(&object.type_);
    let mut out = format!(
        "{}{}{}{} {{\n",
        spaces(start),
        mark,
        spaces(prefix),
        object.name
    );
    let fields: Vec<&api::PlanField> = object.fields.iter().collect();
    let (_, objects) = shown(&[], &object.objects, verbose || object.type_ != "Edited");
    let (long_field, long_mark) = longest(&fields, &objects);
    out.push_str(&aligned(
        &fields,
        &objects,
        start + prefix + 2,
        long_field,
        long_mark,
        verbose,
    ));
    format!("{out}\n{}}}", spaces(start + mark.len() + prefix))
}

fn format_field(
    field: &api::PlanField,
    start: usize,
    prefix: usize,
    value_prefix: usize,
) -> String {
    let mut out = format!(
        "{}{}{}{}: {}",
        spaces(start),
        marker(&field.type_),
        spaces(prefix),
        field.name,
        spaces(value_prefix)
    );
    match field.type_.as_str() {
        "Deleted" => out.push_str(&format!("{:?}", field.old)),
        "Edited" => out.push_str(&format!("{:?} => {:?}", field.old, field.new)),
        _ => out.push_str(&format!("{:?}", field.new)),
    }
    if !field.annotations.is_empty() {
        out.push_str(&format!(" ({})", field.annotations.join(", ")));
    }
    out
}

/// Fields then objects, one a line, names and values aligned.
fn aligned(
    fields: &[&api::PlanField],
    objects: &[&api::PlanDiff],
    start: usize,
    long_field: usize,
    long_mark: usize,
    verbose: bool,
) -> String {
    let mut lines = Vec::new();
    for f in fields {
        let prefix = long_mark - marker(&f.type_).len();
        lines.push(format_field(f, start, prefix, long_field - f.name.len()));
    }
    for o in objects {
        let prefix = long_mark - marker(&o.type_).len();
        lines.push(format_object(o, start, prefix, verbose));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(kind: &str, name: &str, old: &str, new: &str) -> api::PlanField {
        api::PlanField {
            type_: kind.into(),
            name: name.into(),
            old: old.into(),
            new: new.into(),
            ..Default::default()
        }
    }

    fn object(kind: &str, name: &str) -> api::PlanDiff {
        api::PlanDiff {
            type_: kind.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    /// Nomad's documented example: an image changed in a docker task.
    fn edited_image() -> api::PlanDiff {
        let mut config = object("Edited", "Config");
        config.fields = vec![
            field("Edited", "image", "redis:3.2", "redis:4.0"),
            field("None", "port_map[0][db]", "6379", "6379"),
        ];
        let mut task = object("Edited", "redis");
        task.annotations = vec!["forces create/destroy update".into()];
        task.fields = vec![field("None", "Driver", "docker", "docker")];
        task.objects = vec![config];
        let mut group = object("Edited", "cache");
        group.updates = vec![api::PlanUpdate {
            kind: "create/destroy update".into(),
            count: 1,
            ..Default::default()
        }];
        group.children = vec![task];
        let mut job = object("Edited", "example");
        job.children = vec![group];
        job
    }

    #[test]
    fn an_edited_job_is_laid_out_as_nomads_example() {
        assert_eq!(
            format_job(&edited_image(), false).trim(),
            "\
+/- Job: \"example\"
+/- Task Group: \"cache\" (1 create/destroy update)
  +/- Task: \"redis\" (forces create/destroy update)
    +/- Config {
      +/- image:           \"redis:3.2\" => \"redis:4.0\"
          port_map[0][db]: \"6379\"
        }"
        );
    }

    #[test]
    fn verbose_shows_the_unchanged_fields_too() {
        let out = format_job(&edited_image(), true);
        assert!(out.contains("\n        Driver: \"docker\"\n"), "{out}");
        assert!(!format_job(&edited_image(), false).contains("Driver"));
    }

    #[test]
    fn added_tasks_are_one_line_unless_verbose() {
        let mut task = object("Added", "web");
        task.annotations = vec!["forces create".into()];
        task.fields = vec![field("Added", "Driver", "", "exec")];
        let mut group = object("Added", "g");
        group.updates = vec![api::PlanUpdate {
            kind: "create".into(),
            count: 2,
            ..Default::default()
        }];
        group.children = vec![task];
        let mut job = object("Added", "j");
        job.children = vec![group];
        assert_eq!(
            format_job(&job, false).trim(),
            "+ Job: \"j\"\n+ Task Group: \"g\" (2 create)\n  + Task: \"web\" (forces create)"
        );
        assert!(format_job(&job, true).contains("\n    + Driver: \"exec\""));
    }

    #[test]
    fn deleted_and_count_fields_carry_their_values_and_annotations() {
        let mut count = field("Edited", "Count", "1", "3");
        count.annotations = vec!["forces create".into()];
        assert_eq!(
            format_field(&count, 2, 0, 0),
            "  +/- Count: \"1\" => \"3\" (forces create)"
        );
        assert_eq!(
            format_field(&field("Deleted", "Env[A]", "1", ""), 0, 2, 1),
            "-   Env[A]:  \"1\""
        );
    }

    #[test]
    fn the_dry_run_names_each_group_that_cannot_be_placed() {
        let mut resp = api::JobPlanResponse::default();
        assert_eq!(dry_run(&resp), "- All tasks successfully allocated.");
        resp.unplaced = vec![api::Unplaced {
            group: "g".into(),
            count: 2,
            message: "Constraint \"${attr.kernel.name} = windows\": 1 nodes excluded by filter"
                .into(),
            ..Default::default()
        }];
        assert_eq!(
            dry_run(&resp),
            "- WARNING: Failed to place all allocations.\n  Task Group \"g\" (failed to place 2 allocations):\n    * Constraint \"${attr.kernel.name} = windows\": 1 nodes excluded by filter"
        );
        let mut job = object("Added", "j");
        job.fields = vec![field("Added", "Type", "", "system")];
        resp.diff = protobuf::MessageField::some(job);
        assert!(
            dry_run(&resp).starts_with("- WARNING: Failed to place allocations on all nodes.\n")
        );
        resp.unplaced.clear();
        resp.next_periodic_launch_unix = 4_102_444_800;
        assert!(
            dry_run(&resp).starts_with(
                "- All tasks successfully allocated.\n- If submitted now, next periodic launch would be at 2100-01-01T00:00:00Z ("
            ),
            "{}",
            dry_run(&resp)
        );
    }

    #[test]
    fn diff_false_is_taken_out_of_the_flags() {
        let argv: Vec<String> = ["-diff=false", "-verbose", "job.hcl"]
            .map(String::from)
            .to_vec();
        let (show, rest) = diff_flag(&argv).unwrap();
        assert!(!show);
        assert_eq!(rest, ["-verbose", "job.hcl"]);
        assert!(diff_flag(&["-diff".to_string()]).unwrap().0);
        assert!(diff_flag(&["-diff=maybe".to_string()]).is_err());
    }

    #[test]
    fn exit_code_one_only_for_creates_and_destroys() {
        let mut resp = api::JobPlanResponse::default();
        let mut group = object("None", "g");
        group.updates = vec![api::PlanUpdate {
            kind: "ignore".into(),
            count: 1,
            ..Default::default()
        }];
        let mut job = object("None", "j");
        job.children = vec![group.clone()];
        resp.diff = protobuf::MessageField::some(job.clone());
        assert!(!creates_or_destroys(&resp));
        group.updates[0].kind = "in-place update".into();
        job.children = vec![group.clone()];
        resp.diff = protobuf::MessageField::some(job.clone());
        assert!(!creates_or_destroys(&resp));
        group.updates[0].kind = "create/destroy update".into();
        job.children = vec![group];
        resp.diff = protobuf::MessageField::some(job);
        assert!(creates_or_destroys(&resp));
    }
}
