//! Tasks written right in a `job` block, as Nomad still reads them: each
//! becomes a group of its own name holding it (`job "j" { task "t" {...} }`
//! is `job "j" { group "t" { task "t" {...} } }`), as Nomad's job parser
//! makes one, before the groups the job declares. The rewrite is done on the tree before decoding, so the task
//! decodes, and its errors are placed, as any other.

use crate::hcl::{Block, Body, Ident, Item, Syntax};

/// Wraps each `task` block of each native `job` block of `body` in a group
/// of its name. JSON bodies are left as they are.
pub(crate) fn group_job_level_tasks(body: &mut Body) {
    if body.syntax != Syntax::Native {
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
}
