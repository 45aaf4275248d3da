//! One table of bombs, one for each bound of the parsers and evaluators a
//! job file reaches: deep, wide, long and quadratic inputs to HCL, its
//! functions, its JSON syntax, the regex engine and the templates. Each
//! is refused with an error naming its limit by `csi-agent validate` and
//! by `job run`, or, when only rendering can find it, fails its task's
//! start with an event naming the limit; and the agent answers after
//! every one. The unit tests of each module hit the same bounds one by
//! one (`template::bounds_tests`, `hcl::tests`, `json`, `regex`).

use std::fs;
use std::process::Command;

use super::Rig;
use crate::harness::text;
use crate::util::{bin, require_root};

/// Where a bomb is found.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// `validate` and `job run` refuse the file.
    Parse,
    /// The file is accepted; the task's start fails when its template
    /// renders.
    Render,
}

struct Bomb {
    name: &'static str,
    /// A job file (`.json` when it starts with `{`).
    file: String,
    stage: Stage,
    /// What the error must say: the limit's name or number.
    limit: &'static str,
}

/// A job whose one raw_exec task has `extra` in its body.
fn job(name: &str, extra: &str) -> String {
    format!(
        "job {name:?} {{\n  group \"g\" {{\n    restart {{\n      attempts = 0\n      mode     = \"fail\"\n    }}\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{\n        command = \"/bin/sleep\"\n        args    = [\"600\"]\n      }}\n{extra}\n    }}\n  }}\n}}\n"
    )
}

/// A job whose task renders `data` (HCL-quoted) into `local/out`.
fn template_job(name: &str, data: &str) -> String {
    job(
        name,
        &format!("      template {{\n        data        = {data:?}\n        destination = \"local/out\"\n      }}"),
    )
}

fn bombs() -> Vec<Bomb> {
    let hcl_deep = format!(
        "job \"hcl-deep\" {{\n  meta {{\n    x = {}1{}\n  }}\n}}\n",
        "[".repeat(200),
        "]".repeat(200)
    );
    let json_deep = format!(
        "{{\"job\": {{\"json-deep\": {{\"meta\": {{\"x\": {}1{}}}}}}}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    let mut doubling = String::from("locals {\n  l0 = \"xxxxxxxxxxxxxxxx\"\n");
    for i in 1..40 {
        doubling.push_str(&format!(
            "  l{i} = \"${{local.l{}}}${{local.l{}}}\"\n",
            i - 1,
            i - 1
        ));
    }
    doubling.push_str("}\n");
    doubling.push_str(&job(
        "hcl-doubling",
        "      env {\n        X = local.l39\n      }",
    ));
    let mut wide_for = String::from("locals {\n  ten = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n");
    wide_for.push_str("  many = flatten([for a in local.ten : [for b in local.ten : [for c in local.ten : [for d in local.ten : [for e in local.ten : [for f in local.ten : [for g in local.ten : g]]]]]]])\n}\n");
    wide_for.push_str(&job(
        "hcl-wide-for",
        "      meta {\n        n = length(local.many)\n      }",
    ));
    vec![
        Bomb {
            name: "hcl-deep",
            file: hcl_deep,
            stage: Stage::Parse,
            limit: "nesting deeper than 64 levels",
        },
        Bomb {
            name: "json-deep",
            file: json_deep,
            stage: Stage::Parse,
            limit: "nesting deeper than 64 levels",
        },
        Bomb {
            name: "hcl-doubling",
            file: doubling,
            stage: Stage::Parse,
            limit: "the HCL string limit",
        },
        Bomb {
            name: "hcl-wide-for",
            file: wide_for,
            stage: Stage::Parse,
            limit: "more than 1000000 elements",
        },
        Bomb {
            name: "hcl-file-zero",
            file: job(
                "hcl-file-zero",
                "      env {\n        X = file(\"/dev/zero\")\n      }",
            ),
            stage: Stage::Parse,
            limit: "the HCL string limit",
        },
        Bomb {
            name: "hcl-replace",
            file: job(
                "hcl-replace",
                &format!(
                    "      env {{\n        X = {}\"abcdefghijklmnop\"{}\n      }}",
                    "replace(".repeat(4),
                    ", \"\", \"abcdefghijklmnopabcdefghijklmnop\")".repeat(4)
                ),
            ),
            stage: Stage::Parse,
            limit: "the HCL string limit",
        },
        Bomb {
            name: "regex-deep",
            file: job(
                "regex-deep",
                &format!(
                    "      env {{\n        X = regex(\"{}a{}\", \"a\")\n      }}",
                    "(".repeat(1000),
                    ")".repeat(1000)
                ),
            ),
            stage: Stage::Parse,
            limit: "100",
        },
        Bomb {
            name: "template-deep",
            file: template_job(
                "template-deep",
                &format!("{}x{}", "{{if 1}}".repeat(600), "{{end}}".repeat(600)),
            ),
            stage: Stage::Parse,
            limit: "the template nesting limit",
        },
        Bomb {
            name: "template-parens",
            file: template_job(
                "template-parens",
                &format!("{{{{ {}1{} }}}}", "(".repeat(800), ")".repeat(800)),
            ),
            stage: Stage::Parse,
            limit: "the template nesting limit",
        },
        Bomb {
            name: "template-unclosed",
            file: template_job("template-unclosed", &"{{ range 1 }}".repeat(50_000)),
            stage: Stage::Parse,
            limit: "the template nesting limit",
        },
        Bomb {
            name: "template-range",
            file: template_job("template-range", "{{ range 100000000000000 }}{{ end }}"),
            stage: Stage::Render,
            limit: "the template step limit",
        },
        Bomb {
            name: "template-recursion",
            file: template_job(
                "template-recursion",
                "{{ define \"r\" }}{{ template \"r\" }}{{ end }}{{ template \"r\" }}",
            ),
            stage: Stage::Render,
            limit: "the template render depth limit",
        },
        Bomb {
            name: "template-doubling",
            file: template_job(
                "template-doubling",
                "{{ $x := \"ab\" }}{{ range 64 }}{{ $x = print $x $x }}{{ end }}{{ $x }}",
            ),
            stage: Stage::Render,
            limit: "the template value limit",
        },
        Bomb {
            name: "template-indent",
            file: template_job("template-indent", "{{ indent 100000000000000 \"x\" }}"),
            stage: Stage::Render,
            limit: "the template value limit",
        },
    ]
}

#[test]
fn a_job_file_past_the_control_api_s_request_bound_is_refused_and_the_agent_answers() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let big = "x".repeat(csi_agent::api::server::MAX_REQUEST);
    let file = job(
        "too-big",
        &format!("      meta {{\n        big = \"{big}\"\n      }}"),
    );
    let out = rig.run_job_output("too-big.hcl", &file);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let says = text(&out);
    assert!(
        says.contains("RESOURCE_EXHAUSTED") || says.contains("larger than"),
        "{says}"
    );
    rig.ok(&["job", "status"]);
}

fn file_name(bomb: &Bomb) -> String {
    let ext = if bomb.file.starts_with('{') {
        "json"
    } else {
        "hcl"
    };
    format!("{}.{ext}", bomb.name)
}

#[test]
fn every_bomb_is_refused_naming_its_limit_and_the_agent_answers_after_each() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let mut failures = Vec::new();
    for bomb in bombs() {
        let path = rig.agent.dir.join(&file_name(&bomb));
        fs::write(&path, &bomb.file).unwrap();
        let validated = Command::new(bin())
            .arg("validate")
            .arg(&path)
            .output()
            .unwrap();
        let validate_says = text(&validated);
        let run = rig.run_job_output(&file_name(&bomb), &bomb.file);
        let run_says = text(&run);
        match bomb.stage {
            Stage::Parse => {
                if validated.status.code() != Some(1) || !validate_says.contains(bomb.limit) {
                    failures.push(format!("{}: validate: {validate_says}", bomb.name));
                }
                if run.status.code() != Some(1) || !run_says.contains(bomb.limit) {
                    failures.push(format!("{}: job run: {run_says}", bomb.name));
                }
            }
            Stage::Render => {
                if !validated.status.success() {
                    failures.push(format!("{}: validate refused: {validate_says}", bomb.name));
                }
                if !run.status.success() {
                    failures.push(format!("{}: job run refused: {run_says}", bomb.name));
                    continue;
                }
                let job = rig.wait_job(bomb.name, "the alloc to fail", |j| {
                    j.allocs.first().is_some_and(|a| a.status == "failed")
                });
                let events = &job.allocs[0].tasks[0].events;
                if !events
                    .iter()
                    .any(|e| e.kind == "failed" && e.message.contains(bomb.limit))
                {
                    failures.push(format!("{}: events: {events:#?}", bomb.name));
                }
            }
        }
        // The agent is up and answers after each bomb.
        rig.ok(&["job", "status"]);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
