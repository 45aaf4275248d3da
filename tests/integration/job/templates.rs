//! Nomad's `template` blocks through `job run`: rendered into the task dir
//! before the task starts (a script the task runs, an `env = true` file
//! whose variables the task gets, Nomad's variables through `env`), and
//! refused at `job run` when a template calls a function that needs
//! Consul or leads outside the task dir; a template that fails to render
//! fails the task's start with an event naming it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::thread;
use std::time::{Duration, Instant};

use super::Rig;
use crate::harness::WAIT;
use crate::util::require_root;

/// An exec task whose command is a script its first template writes; the
/// second template's variables and the third's rendered alloc ID are what
/// the script prints.
const RENDERED: &str = r#"
job "rendered" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "exec"
      env {
        GREETING = "from the env block"
        KEPT     = "kept"
      }
      template {
        data        = <<-EOT
          #!/bin/sh
          echo "greeting=$GREETING kept=$KEPT"
          echo "id=$(cat /local/id.txt)"
          exec sleep 600
        EOT
        destination = "local/run.sh"
        perms       = "755"
      }
      template {
        data        = <<-EOT
          # comments and blank lines are skipped

          export GREETING="hello from a template"
        EOT
        destination = "secrets/app.env"
        env         = true
      }
      template {
        data        = "{{ env \"NOMAD_ALLOC_ID\" | toUpper }}"
        destination = "$${NOMAD_TASK_DIR}/id.txt"
        change_mode = "noop"
      }
      config {
        command = "/local/run.sh"
      }
    }
  }
}
"#;

/// Waits until task `t` of `alloc` has logged exactly `want`.
#[track_caller]
pub(super) fn wait_for_log(rig: &Rig, alloc: &str, want: &str) {
    let start = Instant::now();
    loop {
        let log = rig.ok(&["alloc", "logs", alloc, "t"]);
        if log == want {
            return;
        }
        assert!(start.elapsed() < WAIT, "log {log:?}, not {want:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn templates_render_a_script_its_environment_and_nomads_variables_before_the_task_starts() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let allocs = rig.run_job("rendered.hcl", RENDERED);
    let alloc = &allocs[0];
    rig.wait_running("rendered", alloc);
    wait_for_log(
        &rig,
        alloc,
        &format!(
            "greeting=hello from a template kept=kept\nid={}\n",
            alloc.to_uppercase()
        ),
    );
    let dir = rig.task_dir(alloc, "t");
    let mode = fs::metadata(dir.join("local/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    let mode = fs::metadata(dir.join("secrets/app.env"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
    // What a secrets/ template renders is never logged.
    let log = rig.agent.log();
    assert!(!log.contains("hello from a template"), "{log}");
    rig.ok(&["job", "stop", "rendered"]);
}

/// A job with one exec task holding `template`.
fn with_template(name: &str, template: &str) -> String {
    format!(
        "job {name:?} {{\n  group \"g\" {{\n    restart {{\n      attempts = 0\n      mode     = \"fail\"\n    }}\n    task \"t\" {{\n      driver = \"exec\"\n      config {{\n        command = \"/bin/sleep\"\n        args    = [\"600\"]\n      }}\n      template {{\n{template}\n      }}\n    }}\n  }}\n}}\n"
    )
}

#[test]
fn job_run_refuses_consul_functions_and_destinations_outside_the_task_dir() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = with_template(
        "consul",
        "        data        = <<-EOT\n          line one\n          {{ key \"service/db/host\" }}\n        EOT\n        destination = \"local/db.conf\"",
    );
    let out = rig.run_job_output("consul.hcl", &hcl);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("consul.hcl:14:23: template \"local/db.conf\": line 2:4: function \"key\" needs Consul, which csi-agent does not have"),
        "{err}"
    );

    let hcl = with_template(
        "outside",
        "        data        = \"x\"\n        destination = \"../../../etc/csi-agent-test\"",
    );
    let out = rig.run_job_output("outside.hcl", &hcl);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("outside.hcl:") && err.contains("leads outside the task dir"),
        "{err}"
    );

    let hcl = with_template(
        "outside-var",
        "        data        = \"x\"\n        destination = \"$${NOMAD_ALLOC_DIR}/../../x\"",
    );
    let out = rig.run_job_output("outside-var.hcl", &hcl);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("leads outside the task dir"), "{err}");
    let jobs = rig.client().job_status("").unwrap().jobs;
    assert!(jobs.is_empty(), "refused jobs leave no trace: {jobs:?}");
}

#[test]
fn a_template_that_fails_to_render_fails_the_start_with_an_event_naming_it() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = with_template(
        "broken",
        "        data        = \"port {{ env \\\"NOMAD_JOB_NAME\\\" | parseInt }}\"\n        destination = \"local/port.conf\"",
    );
    rig.run_job("broken.hcl", &hcl);
    let job = rig.wait_job("broken", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    let task = &job.allocs[0].tasks[0];
    let failed: Vec<&str> = task
        .events
        .iter()
        .filter(|e| e.kind == "failed")
        .map(|e| e.message.as_str())
        .collect();
    assert!(
        failed.iter().any(|m| m.contains(
            "template \"local/port.conf\": line 1:32: error calling parseInt: parsing \"broken\": invalid syntax"
        )),
        "{:#?}",
        task.events
    );
    assert!(!rig
        .task_dir(&job.allocs[0].id, "t")
        .join("local/port.conf")
        .exists());
}

/// A raw_exec task's `${NOMAD_SECRETS_DIR}` is a host path in its task
/// dir: its template renders there, and the task reads it where its
/// variable says.
#[test]
fn a_raw_exec_task_s_template_renders_where_its_variables_say() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = r#"
job "raw" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      template {
        data        = "token-{{ env \"NOMAD_TASK_NAME\" }}"
        destination = "${NOMAD_SECRETS_DIR}/token"
        perms       = "600"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "cat \"$NOMAD_SECRETS_DIR/token\"; echo; exec sleep 600"]
      }
    }
  }
}
"#;
    let allocs = rig.run_job("raw.hcl", hcl);
    rig.wait_running("raw", &allocs[0]);
    wait_for_log(&rig, &allocs[0], "token-t\n");
    let token = rig.task_dir(&allocs[0], "t").join("secrets/token");
    let mode = fs::metadata(&token).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    rig.ok(&["job", "stop", "raw"]);
}

/// A raw_exec task that prints its config file each time it starts and
/// each time it gets SIGHUP; its template's change mode is `MODE`.
pub(super) fn reloading(data: &str, mode: &str) -> String {
    r#"
job "reloading" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo hup; cat local/app.conf' HUP; echo start; cat local/app.conf; while :; do sleep 0.1; done"]
      }
      template {
        data        = "DATA\n"
        destination = "local/app.conf"
        MODE
        splay       = "100ms"
      }
    }
  }
}
"#
    .replace("DATA", data)
    .replace("MODE", mode)
}

/// The output of `job`'s only task so far.
pub(super) fn log_of(rig: &Rig, alloc: &str) -> String {
    rig.ok(&["alloc", "logs", alloc, "t"])
}

#[track_caller]
pub(super) fn wait_for_log_end(rig: &Rig, alloc: &str, end: &str) -> String {
    let start = Instant::now();
    loop {
        let log = log_of(rig, alloc);
        if log.ends_with(end) {
            return log;
        }
        assert!(
            start.elapsed() < WAIT,
            "log {log:?} does not end with {end:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_changed_template_is_rendered_in_place_and_its_change_mode_taken() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    // signal: the same alloc and process, the new file, a SIGHUP.
    let signal = "change_mode = \"signal\"\n        change_signal = \"SIGHUP\"";
    let allocs = rig.run_job("r.hcl", &reloading("one", signal));
    let alloc = &allocs[0];
    let pid = rig.wait_running("reloading", alloc);
    wait_for_log_end(&rig, alloc, "start\none\n");
    let again = rig.run_job("r.hcl", &reloading("two", signal));
    assert_eq!(&again, &allocs, "the alloc was replaced");
    wait_for_log_end(&rig, alloc, "start\none\nhup\ntwo\n");
    assert_eq!(rig.wait_running("reloading", alloc), pid);
    let conf = rig.task_dir(alloc, "t").join("local/app.conf");
    assert_eq!(fs::read_to_string(&conf).unwrap(), "two\n");

    // The same text again: nothing changed, nothing sent.
    rig.run_job(
        "r.hcl",
        &reloading("two", &signal.replace("SIGHUP", "SIGUSR1")),
    );
    // Rendered off the agent's loop: the event follows the answer.
    rig.wait_job("reloading", "a re-render that changes no file", |j| {
        j.allocs.iter().any(|a| {
            a.id == *alloc
                && a.tasks[0]
                    .events
                    .iter()
                    .any(|e| e.message == "templates re-rendered: no file changed")
        })
    });

    // restart: a new process of the same alloc, outside the restart
    // policy, reading the new file at its start.
    let restart = "change_mode = \"restart\"";
    rig.run_job("r.hcl", &reloading("two", restart));
    rig.run_job("r.hcl", &reloading("three", restart));
    let log = wait_for_log_end(&rig, alloc, "start\nthree\n");
    assert!(log.starts_with("start\none\nhup\ntwo\n"), "{log}");
    let new_pid = rig.wait_running("reloading", alloc);
    assert_ne!(new_pid, pid);
    let task = rig.task("reloading", alloc);
    assert_eq!(task.restarts, 0, "{task:#?}");

    // noop: the file changes, the process does not hear of it.
    rig.run_job("r.hcl", &reloading("three", "change_mode = \"noop\""));
    rig.run_job("r.hcl", &reloading("four", "change_mode = \"noop\""));
    let start = Instant::now();
    while fs::read_to_string(&conf).unwrap() != "four\n" {
        assert!(start.elapsed() < WAIT, "the file was not rendered again");
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(300));
    assert_eq!(rig.wait_running("reloading", alloc), new_pid);
    assert!(log_of(&rig, alloc).ends_with("start\nthree\n"));

    // Any other change replaces the alloc, as before.
    let other = reloading("four", "change_mode = \"noop\"").replace("sleep 0.1", "sleep 0.2");
    let replaced = rig.run_job("r.hcl", &other);
    assert_ne!(&replaced, &allocs);
}
