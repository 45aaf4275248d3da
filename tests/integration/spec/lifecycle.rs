//! Job types, task lifecycles and task-level restart policies.

use std::time::Duration;

use csi_agent::spec::{JobType, KillSignal, Lifecycle, LifecycleHook, RestartMode, SpecFile};

use super::{assert_one_error, job, ok, JSON_FILE};

/// A job of type `job_type` whose group "g" has `group_body` from line 4
/// and a task "t" with `task_body` from line 10.
fn typed_job(job_type: &str, group_body: &str, task_body: &str) -> String {
    format!(
        "job \"j\" {{\n  type = {job_type:?}\n  group \"g\" {{\n{group_body}\n    task \"t\" {{\n      driver = \"exec\"\n      config {{\n        command = \"/bin/true\"\n      }}\n{task_body}\n    }}\n    task \"main\" {{\n      driver = \"exec\"\n      config {{\n        command = \"/bin/true\"\n      }}\n    }}\n  }}\n}}\n"
    )
}

#[test]
fn lifecycle_blocks_decode_with_their_hook_and_sidecar() {
    let src = typed_job(
        "service",
        "",
        "      lifecycle {\n        hook    = \"prestart\"\n        sidecar = true\n      }",
    );
    let spec = ok(job(&src)).spec;
    let tasks = &spec.groups[0].tasks;
    assert_eq!(
        tasks[0].lifecycle,
        Some(Lifecycle {
            hook: LifecycleHook::Prestart,
            sidecar: true
        })
    );
    assert_eq!(tasks[1].lifecycle, None);
    let again = ok(job(&spec.to_hcl())).spec;
    assert_eq!(again, spec);
}

#[test]
fn a_misspelled_hook_is_an_error_at_its_position() {
    let src = typed_job(
        "service",
        "",
        "      lifecycle {\n        hook = \"prestrat\"\n      }",
    );
    assert_one_error(
        &src,
        r#"test.hcl:11:16: "hook" in lifecycle in task "t": unknown lifecycle hook "prestrat" (expected one of: prestart, poststart, poststop)"#,
    );
}

#[test]
fn a_lifecycle_block_needs_a_hook() {
    let src = typed_job(
        "service",
        "",
        "      lifecycle {\n        sidecar = true\n      }",
    );
    assert_eq!(
        super::errors(job(&src)).len(),
        1,
        "a lifecycle without a hook is refused"
    );
}

#[test]
fn the_job_type_picks_nomads_default_restart_policy() {
    let service = ok(job(&typed_job("service", "", ""))).spec;
    assert_eq!(service.job_type, JobType::Service);
    assert_eq!(service.groups[0].restart.attempts, 2);
    assert_eq!(
        service.groups[0].restart.interval,
        Duration::from_secs(30 * 60)
    );
    let batch = ok(job(&typed_job("batch", "", ""))).spec;
    assert_eq!(batch.job_type, JobType::Batch);
    assert_eq!(batch.groups[0].restart.attempts, 3);
    assert_eq!(
        batch.groups[0].restart.interval,
        Duration::from_secs(24 * 60 * 60)
    );
    assert_eq!(batch.groups[0].tasks[0].restart, batch.groups[0].restart);
}

#[test]
fn an_unknown_job_type_is_an_error() {
    let src = typed_job("bach", "", "");
    let found = super::errors(job(&src));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("test.hcl:2:10: "), "{found:?}");
    assert!(found[0].contains("\"bach\""), "{found:?}");
}

#[test]
fn a_task_restart_block_overrides_the_groups_field_by_field() {
    let src = typed_job(
        "batch",
        "    restart {\n      attempts = 5\n      delay    = \"1s\"\n      mode     = \"delay\"\n    }",
        "      restart {\n        attempts = 0\n        mode     = \"fail\"\n      }",
    );
    let spec = ok(job(&src)).spec;
    let group = &spec.groups[0];
    let task = &group.tasks[0].restart;
    assert_eq!(task.attempts, 0);
    assert_eq!(task.mode, RestartMode::Fail);
    assert_eq!(task.delay, Duration::from_secs(1), "from the group");
    assert_eq!(task.interval, Duration::from_secs(24 * 60 * 60));
    assert_eq!(
        group.tasks[1].restart, group.restart,
        "no block: the group's"
    );
    let again = ok(job(&spec.to_hcl())).spec;
    assert_eq!(again, spec);
}

#[test]
fn a_system_job_runs_one_instance() {
    let src = typed_job("system", "    count = 2", "");
    assert_one_error(
        &src,
        r#"test.hcl:4:13: group "g" has count = 2, but a system job runs one instance per node: remove count or set it to 1"#,
    );
    let spec = ok(job(&typed_job("sysbatch", "    count = 1", ""))).spec;
    assert_eq!(spec.groups[0].count, 1);
}

#[test]
fn lifecycle_and_type_read_the_same_from_json() {
    let src = r#"{
  "job": {
    "j": {
      "type": "batch",
      "group": {
        "g": {
          "task": {
            "prep": {
              "driver": "exec",
              "lifecycle": {"hook": "prestart", "sidecar": false},
              "restart": {"attempts": 0},
              "config": {"command": "/bin/true"}
            },
            "main": {
              "driver": "exec",
              "config": {"command": "/bin/true"}
            }
          }
        }
      }
    }
  }
}
"#;
    let spec = match ok(SpecFile::decode(src, JSON_FILE)).spec {
        SpecFile::Job(job) => job,
        other => panic!("not a job: {other:?}"),
    };
    assert_eq!(spec.job_type, JobType::Batch);
    let prep = &spec.groups[0].tasks[0];
    assert_eq!(
        prep.lifecycle,
        Some(Lifecycle {
            hook: LifecycleHook::Prestart,
            sidecar: false
        })
    );
    assert_eq!(prep.restart.attempts, 0);
    assert_eq!(prep.restart.interval, Duration::from_secs(24 * 60 * 60));
}

#[test]
fn kill_signal_and_shutdown_delay_decode_round_trip_and_default() {
    let src = typed_job(
        "service",
        "",
        "      kill_signal    = \"SIGINT\"\n      shutdown_delay = \"5s\"",
    );
    let spec = ok(job(&src)).spec;
    let tasks = &spec.groups[0].tasks;
    assert_eq!(tasks[0].kill_signal, KillSignal::Int);
    assert_eq!(tasks[1].kill_signal, KillSignal::Term);
    assert_eq!(tasks[0].shutdown_delay, Duration::from_secs(5));
    assert_eq!(tasks[1].shutdown_delay, Duration::ZERO);
    assert_eq!(ok(job(&spec.to_hcl())).spec, spec);
}

#[test]
fn an_unknown_kill_signal_is_an_error_at_its_position() {
    let src = typed_job("service", "", "      kill_signal = \"SIGINTT\"");
    assert_one_error(
        &src,
        r#"test.hcl:10:21: "kill_signal" in task "t": unknown kill signal "SIGINTT" (expected one of: SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGABRT, SIGALRM, SIGWINCH, SIGKILL)"#,
    );
}
