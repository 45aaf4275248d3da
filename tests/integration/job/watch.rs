//! `job run`'s watch: it follows the job's allocs until they run (a plugin
//! until healthy), complete, fail, or `-timeout` runs out, printing the
//! events it sees; `-detach` returns at once. Real tasks, real agent.

use std::fs;
use std::process::{Command, Output};

use super::Rig;
use crate::dockerd::{require_docker, Dockerd};
use crate::harness::text;
use crate::util::{bin, require_root};

/// A job of one raw_exec task running `script` under `sh -c`, never
/// restarted (unless `restart` says otherwise).
fn job(name: &str, job_type: &str, script: &str, restart: &str) -> String {
    let restart = if restart.is_empty() {
        "attempts = 0\n      mode = \"fail\""
    } else {
        restart
    };
    format!(
        r#"
job "{name}" {{
  type = "{job_type}"
  group "g" {{
    restart {{
      {restart}
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
      }}
    }}
  }}
}}
"#
    )
}

/// `job run FLAGS FILE` with the watch on (no `-detach` added).
fn watch(rig: &Rig, file: &str, hcl: &str, flags: &[&str]) -> Output {
    let path = rig.agent.dir.join(file);
    fs::write(&path, hcl).unwrap();
    let path = path.display().to_string();
    let args = [&["job", "run"][..], flags, &[path.as_str()]].concat();
    rig.agent.cli_watch(&args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn job_run_watches_a_service_job_until_its_task_runs() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = watch(
        &rig,
        "up.hcl",
        &job("up", "service", "exec sleep 600", ""),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let said = stdout(&out);
    let alloc = rig.job("up").allocs[0].id.clone();
    let short = &alloc[..8];
    assert!(
        said.contains(&format!("alloc {short} task \"t\": Started: started (pid")),
        "{said}"
    );
    assert!(
        said.contains("Job \"up\" is up: 1 alloc 1 running"),
        "{said}"
    );
    // Without -verbose, only the steps that matter: not "Received".
    assert!(!said.contains("Received"), "{said}");
    assert_eq!(rig.job("up").allocs[0].status, "running");
}

#[test]
fn job_run_verbose_shows_full_ids_and_every_event() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = watch(
        &rig,
        "v.hcl",
        &job("v", "service", "exec sleep 600", ""),
        &["-verbose"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let said = stdout(&out);
    let alloc = rig.job("v").allocs[0].id.clone();
    assert!(
        said.contains(&format!("alloc {alloc} task \"t\": Received")),
        "{said}"
    );
}

#[test]
fn job_run_exits_1_naming_the_event_of_a_task_that_fails() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = watch(&rig, "bad.hcl", &job("bad", "service", "exit 3", ""), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("Terminated: exited with status 3"), "{said}");
    assert!(
        said.contains("error: job \"bad\" failed: alloc ")
            && said.contains("task \"t\": Terminated: exited with status 3"),
        "{said}"
    );
}

#[test]
fn job_run_watches_a_batch_job_until_it_completes() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = watch(
        &rig,
        "b.hcl",
        &job("b", "batch", "sleep 0.3; exit 0", ""),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let said = stdout(&out);
    assert!(said.contains("task \"t\": Completed"), "{said}");
    assert!(
        said.contains("Job \"b\" is up: 1 alloc 1 complete"),
        "{said}"
    );
}

#[test]
fn job_run_detach_returns_at_once_whatever_becomes_of_the_job() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = watch(
        &rig,
        "d.hcl",
        &job("d", "service", "sleep 5; exit 3", ""),
        &["-detach"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let said = stdout(&out);
    let alloc = rig.job("d").allocs[0].id.clone();
    assert!(said.contains(&format!("  alloc {alloc}")), "{said}");
    assert!(!said.contains("Started"), "{said}");
    // It returned before the task failed.
    assert_ne!(rig.job("d").allocs[0].status, "failed");
}

#[test]
fn job_run_stops_watching_at_its_timeout_saying_what_is_pending() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    // The task fails and waits ten minutes before its next run.
    let restart =
        "attempts = 3\n      interval = \"1h\"\n      delay = \"10m\"\n      mode = \"delay\"";
    let hcl = job("slow", "service", "exit 1", restart);
    let out = watch(&rig, "slow.hcl", &hcl, &["-timeout", "5s"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("error: job \"slow\" is not up after 5s (-timeout); still pending: alloc ")
            && said.contains("task \"t\" (restarting)"),
        "{said}"
    );
    let out = watch(&rig, "slow.hcl", &hcl, &["-timeout", "soon"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("-timeout:"), "{}", text(&out));
}

#[test]
fn job_run_waits_for_a_plugin_task_to_be_healthy() {
    if !require_root() {
        return;
    }
    let rig = Rig::with_plugin_volumes("");
    let out = watch(&rig, "plugin.hcl", &rig.plugin_job("3", "1s"), &[]);
    assert!(out.status.success(), "{}", text(&out));
    let said = stdout(&out);
    assert!(said.contains("plugin hp: HealthChanged: healthy"), "{said}");
    let plugin = said.find("HealthChanged: healthy").unwrap();
    let up = said.find("is up").unwrap();
    assert!(plugin < up, "{said}");
}

#[test]
fn job_run_on_a_terminal_rewrites_a_progress_line() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let path = rig.agent.dir.join("tty.hcl");
    fs::write(&path, job("tty", "service", "sleep 1; exec sleep 600", "")).unwrap();
    // util-linux's script runs the command on a pty of its own.
    let command = format!("{} job run {}", bin(), path.display());
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env(
            csi_agent::api::client::ADDRESS_ENV,
            format!("unix://{}", rig.agent.socket.display()),
        )
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let said = stdout(&out);
    assert!(said.contains("\r\x1b[K1 alloc 1 "), "{said:?}");
    assert!(said.contains("waiting for alloc "), "{said:?}");
    assert!(said.contains("Job \"tty\" is up"), "{said:?}");
}

#[test]
fn job_run_fails_for_a_docker_image_the_engine_cannot_pull() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    let rig = Rig::bare_with_config(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n}}\n",
        dockerd.socket.display()
    ));
    let hcl = r#"
job "img" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "docker"
      config {
        image = "csi-test/no-such-image:1"
      }
    }
  }
}
"#;
    let out = watch(&rig, "img.hcl", hcl, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("Driver: pulling image csi-test/no-such-image:1"),
        "{said}"
    );
    assert!(said.contains("error: job \"img\" failed: alloc "), "{said}");
    assert!(said.contains("no-such-image"), "{said}");
}

#[test]
fn job_run_shows_the_claim_its_alloc_takes_before_its_task_starts() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let hcl = super::consumer("c", "echo hi > /data/hi", "", false);
    let out = watch(&rig, "c.hcl", &hcl, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let said = stdout(&out);
    let claim = said.find("volume \"v1\": ClaimTaken: alloc ");
    let started = said.find("task \"main\": Started");
    assert!(claim.is_some() && claim < started, "{said}");
    assert!(
        said.contains("Job \"c\" is up: 1 alloc 1 complete"),
        "{said}"
    );
}
