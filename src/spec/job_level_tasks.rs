//! Tasks written right in a `job` block, as Nomad still reads them: each
//! becomes a group of its own name holding it (`job "j" { task "t" {...} }`
//! is `job "j" { group "t" { task "t" {...} } }`), as Nomad's job parser
//! makes one, before the groups the job declares. The rewrite is done on the tree before decoding, so the task
//! decodes, and its errors are placed, as any other. In HCL's JSON syntax
//! the same holds of a `"task"` property of a job's object
//! (`{"job": {"j": {"task": {"t": {...}}}}}`), which moves into the job's
//! `"group"` property as `{"t": {"task": {"t": {...}}}}`.

use hcl::{Attribute, Block, Body, Expr, Ident, Item, Key, Syntax};

/// Wraps each `task` block of each `job` block of `body` in a group of
/// its name.
pub(crate) fn group_job_level_tasks(body: &mut Body) {
    if body.syntax == Syntax::Json {
        group_json_job_level_tasks(body);
        return;
    }
    for item in &mut body.items {
        let Item::Block(job) = item else { continue };
        if job.kind.name != "job" {
            continue;
        }
        // Nomad puts these groups before those the job declares.
        let (tasks, others): (Vec<Item>, Vec<Item>) = std::mem::take(&mut job.body.items)
            .into_iter()
            .partition(|item| matches!(item, Item::Block(b) if b.kind.name == "task"));
        job.body.items = tasks;
        job.body.items.extend(others);
        for inner in &mut job.body.items {
            let Item::Block(task) = inner else { continue };
            if task.kind.name != "task" {
                continue;
            }
            let group = Block {
                kind: Ident {
                    name: "group".to_string(),
                    span: task.kind.span,
                },
                labels: task.labels.clone(),
                body: Body {
                    items: Vec::new(),
                    syntax: Syntax::Native,
                },
                span: task.span,
            };
            let task = std::mem::replace(task, group);
            task_group_body(inner).items.push(Item::Block(task));
        }
    }
}

/// The body of the group block `item` just became.
fn task_group_body(item: &mut Item) -> &mut Body {
    match item {
        Item::Block(group) => &mut group.body,
        Item::Attribute(_) => unreachable!("the item was just made a block"),
    }
}

/// [`group_job_level_tasks`] for a body in HCL's JSON syntax: each job
/// object's `"task"` property becomes groups in its `"group"` property.
fn group_json_job_level_tasks(body: &mut Body) {
    for item in &mut body.items {
        let Item::Attribute(attr) = item else {
            continue;
        };
        if attr.key.name != "job" {
            continue;
        }
        let mut value = attr.value.clone();
        // `{"j": {...}}`, or a list of such objects.
        let jobs: Vec<&mut Expr> = match &mut value {
            Expr::List { items, .. } => items.iter_mut().collect(),
            other => vec![other],
        };
        let mut moved = false;
        for labelled in jobs {
            let Expr::Object { entries, .. } = labelled else {
                continue;
            };
            for (_, job) in entries {
                if let Expr::Object { entries, .. } = job {
                    moved |= tasks_to_groups(entries);
                }
            }
        }
        if moved {
            // A new attribute: the old one may have kept its blocks.
            *attr = Attribute::new(attr.key.clone(), value, attr.span);
        }
    }
}

/// Moves the `"task"` property of a job object's `entries` into its
/// `"group"` property, one group per task before the job's own groups;
/// whether there was one.
fn tasks_to_groups(entries: &mut Vec<(Key, Expr)>) -> bool {
    let Some(at) = entries.iter().position(|(k, _)| k.name == "task") else {
        return false;
    };
    let labelled: Vec<Expr> = match &entries[at].1 {
        Expr::List { items, .. } => items.clone(),
        other => vec![other.clone()],
    };
    if !labelled.iter().all(|t| matches!(t, Expr::Object { .. })) {
        // Not the shape of task blocks: left for the decoder to refuse.
        return false;
    }
    let (task_key, _) = entries.remove(at);
    let mut groups = Vec::new();
    for task in labelled {
        let Expr::Object {
            entries: named,
            span,
        } = task
        else {
            continue;
        };
        for (name, body) in named {
            let one = Expr::Object {
                entries: vec![(name.clone(), body)],
                span,
            };
            let group = Expr::Object {
                entries: vec![(
                    Key {
                        name: "task".into(),
                        ..task_key.clone()
                    },
                    one,
                )],
                span,
            };
            groups.push(Expr::Object {
                entries: vec![(name, group)],
                span,
            });
        }
    }
    match entries.iter().position(|(k, _)| k.name == "group") {
        Some(g) => {
            let declared = std::mem::replace(
                &mut entries[g].1,
                Expr::Null {
                    span: task_key.span,
                },
            );
            let span = declared.span();
            match declared {
                Expr::List { items, .. } => groups.extend(items),
                other => groups.push(other),
            }
            entries[g].1 = Expr::List {
                items: groups,
                span,
            };
        }
        None => {
            let span = task_key.span;
            let key = Key {
                name: "group".into(),
                ..task_key
            };
            entries.push((
                key,
                Expr::List {
                    items: groups,
                    span,
                },
            ));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use crate::spec::Job;

    #[test]
    fn a_task_in_the_job_block_runs_in_a_group_of_its_name() {
        // Nomad's own jobspec2 fixture, job-with-kill-signal.hcl.
        let src = "job \"foo\" {\n  task \"bar\" {\n    driver      = \"docker\"\n    kill_signal = \"SIGQUIT\"\n\n    config {\n      image = \"hashicorp/image\"\n    }\n  }\n}\n";
        let job = Job::decode(src, "job.hcl").unwrap().spec;
        assert_eq!(job.groups.len(), 1);
        assert_eq!(job.groups[0].name, "bar");
        assert_eq!(job.groups[0].tasks[0].name, "bar");
        let src = "job \"j\" {\n  group \"g\" {\n    task \"a\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"/bin/true\"\n      }\n    }\n  }\n  task \"b\" {\n    driver = \"raw_exec\"\n    config {\n      command = \"/bin/true\"\n    }\n  }\n}\n";
        let job = Job::decode(src, "job.hcl").unwrap().spec;
        let names: Vec<&str> = job.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["b", "g"]);
    }

    #[test]
    fn an_error_in_a_job_level_task_is_placed_in_the_task() {
        let src = "job \"foo\" {\n  task \"bar\" {\n    driver = \"exec\"\n    config {\n      comand = \"/bin/true\"\n    }\n  }\n}\n";
        let err = Job::decode(src, "job.hcl").unwrap_err();
        assert!(
            err.errors[0]
                .to_string()
                .starts_with("job.hcl:5:7: unknown attribute \"comand\""),
            "{}",
            err.errors[0]
        );
    }

    #[test]
    fn a_task_in_a_json_job_runs_in_a_group_of_its_name_before_the_declared_ones() {
        let src = r#"{"job": {"j": {
  "group": {"g": {"task": {"a": {"driver": "raw_exec", "config": {"command": "/bin/true"}}}}},
  "task": {"b": {"driver": "raw_exec", "kill_signal": "SIGQUIT", "config": {"command": "/bin/true"}}}
}}}"#;
        let job = Job::decode(src, "job.json").unwrap().spec;
        let names: Vec<&str> = job.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["b", "g"]);
        assert_eq!(job.groups[0].tasks[0].name, "b");
        assert_eq!(job.groups[0].tasks[0].kill_signal.as_str(), "SIGQUIT");
        let src = r#"{"job": [{"j": {"task": {"t": {"driver": "raw_exec", "config": {"command": "/bin/true"}}}}}]}"#;
        let job = Job::decode(src, "job.json").unwrap().spec;
        assert_eq!(job.groups[0].name, "t");
        assert_eq!(job.groups[0].tasks[0].name, "t");
    }

    #[test]
    fn an_error_in_a_json_job_level_task_is_placed_in_the_task() {
        let src = "{\"job\": {\"foo\": {\"task\": {\"bar\": {\n  \"driver\": \"exec\",\n  \"config\": {\"comand\": \"/bin/true\"}\n}}}}}";
        let err = Job::decode(src, "job.json").unwrap_err();
        assert!(
            err.errors[0]
                .to_string()
                .starts_with("job.json:3:14: unknown key \"comand\" in config in task \"bar\""),
            "{}",
            err.errors[0]
        );
    }
}
