//! Job files in HCL's JSON syntax through `job run`: the agent decodes a
//! file by its name, both when it is run and when it reads the job back
//! from its state after a restart.

use super::templates::wait_for_log;
use super::Rig;
use crate::harness::text;
use crate::util::require_root;

/// A raw_exec job that greets and sleeps, in HCL's JSON syntax.
const JOB: &str = r#"{
  "job": {
    "hello": {
      "datacenters": ["dc1"],
      "group": {
        "g": {
          "restart": {"attempts": 0, "mode": "fail"},
          "task": {
            "t": {
              "driver": "raw_exec",
              "env": {"GREETING": "hello from ${NOMAD_GROUP_NAME}"},
              "config": {
                "command": "/bin/sh",
                "args": ["-c", "echo \"$GREETING\"; exec sleep 600"]
              }
            }
          }
        }
      }
    }
  }
}
"#;

#[test]
fn a_json_job_file_runs_and_is_read_again_after_a_restart() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let out = rig.run_job_output("hello.json", JOB);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("hello.json:4:7: warning: \"datacenters\" in job \"hello\" is ignored"),
        "{}",
        text(&out)
    );
    let alloc = rig.job("hello").allocs[0].id.clone();
    let pid = rig.wait_running("hello", &alloc);
    wait_for_log(&rig, &alloc, "hello from g\n");

    // The agent keeps the file's name with its text, and reads the job
    // back as JSON: the task is adopted, not dropped.
    rig.restart_adopts("hello", pid);
    rig.stop("hello");
}

#[test]
fn a_json_job_file_with_a_typo_is_refused_at_its_position() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = rig.run_job_output("typo.json", &JOB.replace("\"command\"", "\"comand\""));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "typo.json:13:17: unknown key \"comand\" in config in task \"t\" (did you mean \"command\"?)"
        ),
        "{stderr}"
    );
    assert!(rig.client().job_status("").unwrap().jobs.is_empty());
}

/// A raw_exec job in HCL's JSON syntax whose greeting is made of a
/// variable, a local and a `%{ for }` directive.
const VARIABLES_JOB: &str = r#"{
  "variable": {
    "names": {"type": "list(string)", "default": ["x"]},
    "greeting": {
      "type": "string",
      "validation": {
        "condition": "${var.greeting != \"\"}",
        "error_message": "The greeting must not be empty."
      }
    }
  },
  "locals": {"who": "%{ for n in var.names }${upper(n)} %{ endfor }"},
  "job": {
    "greeter": {
      "group": {
        "g": {
          "restart": {"attempts": 0, "mode": "fail"},
          "task": {
            "t": {
              "driver": "raw_exec",
              "env": {"LINE": "${var.greeting} ${local.who}from ${NOMAD_GROUP_NAME}"},
              "config": {
                "command": "/bin/sh",
                "args": ["-c", "echo \"$LINE\"; exec sleep 600"]
              }
            }
          }
        }
      }
    }
  }
}
"#;

#[test]
fn a_json_job_file_s_variables_take_var_flags_and_the_environment() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let path = rig.agent.dir.join("greeter.json");
    std::fs::write(&path, VARIABLES_JOB).unwrap();
    let path = path.display().to_string();

    // Without a greeting, validate names the variable's line and column.
    let out = rig.agent.cli(&["validate", &path]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{path}:4:5: variable \"greeting\" has no value")),
        "{}",
        text(&out)
    );
    let out = rig.agent.cli(&["validate", "-var", "greeting=", &path]);
    assert!(
        text(&out).contains(&format!(
            "{path}:4:5: invalid value for variable \"greeting\": The greeting must not be empty."
        )),
        "{}",
        text(&out)
    );

    let out = std::process::Command::new(crate::util::bin())
        .args(["job", "run", "-detach", "-var", "greeting=hello", &path])
        .env(
            csi_agent::api::client::ADDRESS_ENV,
            format!("unix://{}", rig.agent.socket.display()),
        )
        .env("NOMAD_VAR_names", r#"["a", "b"]"#)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("warning"), "{}", text(&out));
    let alloc = rig.job("greeter").allocs[0].id.clone();
    let pid = rig.wait_running("greeter", &alloc);
    wait_for_log(&rig, &alloc, "hello A B from g\n");

    // The values travel with the job: after a restart the agent decodes
    // the same job from its JSON and adopts the task.
    rig.restart_adopts("greeter", pid);
    rig.stop("greeter");
}

/// A JSON job whose templates come from a `"dynamic"` property over a
/// variable, in a task written right in the job's object.
const DYNAMIC_JOB: &str = r#"{
  "variable": {"names": {"default": ["one", "two"]}},
  "job": {
    "dyn": {
      "task": {
        "t": {
          "driver": "raw_exec",
          "dynamic": {
            "template": {
              "for_each": "${var.names}",
              "iterator": "n",
              "content": {
                "data": "${upper(n.value)}=${n.key}\n",
                "destination": "local/${n.value}.env",
                "env": true
              }
            }
          },
          "config": {
            "command": "/bin/sh",
            "args": ["-c", "echo \"$ONE|$TWO|$NOMAD_GROUP_NAME\"; exec sleep 600"]
          }
        }
      }
    }
  }
}
"#;

#[test]
fn a_json_job_s_dynamic_templates_render_in_its_job_level_task() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = rig.run_job_output("dyn.json", DYNAMIC_JOB);
    assert!(out.status.success(), "{}", text(&out));
    let alloc = rig.job("dyn").allocs[0].id.clone();
    rig.wait_running("dyn", &alloc);
    wait_for_log(&rig, &alloc, "0|1|t\n");
    rig.stop("dyn");
}
