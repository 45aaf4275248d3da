//! HCL2 variables through `job run`: values from `-var`, `-var-file` and
//! `NOMAD_VAR_` travel with the job to the agent, which keeps them, so
//! that it decodes the same job after a restart; `-` reads the job file
//! (and `volume create -` the volume spec) from standard input, as
//! Nomad's demos pipe them.

use std::fs;
use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::templates::wait_for_log;
use super::{consumer, wait_for_file, Rig, VOLUME};
use crate::harness::{text, Agent, WAIT};
use crate::util::{bin, require_root};

/// Runs the CLI against the rig's agent with `env` added and `stdin` fed
/// to it.
fn cli_with(rig: &Rig, args: &[&str], env: &[(&str, &str)], stdin: &str) -> Output {
    let mut child = Command::new(bin())
        .args(crate::harness::detached(args))
        .env(
            csi_agent::api::client::ADDRESS_ENV,
            format!("unix://{}", rig.agent.socket.display()),
        )
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .current_dir(&*rig.agent.dir.join(""))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A raw_exec job that prints its greeting, made of variables and locals.
const GREETER: &str = r#"variable "greeting" {
  type = string
}

variable "times" {
  type    = number
  default = 1
}

locals {
  line = "${upper(var.greeting)} x${var.times}"
}

job "greeter" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      env {
        LINE = local.line
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"$LINE\"; exec sleep 600"]
      }
    }
  }
}
"#;

#[test]
fn var_flags_win_over_the_environment_and_travel_with_the_job_across_a_restart() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let path = rig.agent.dir.join("greeter.hcl");
    fs::write(&path, GREETER).unwrap();
    let path = path.display().to_string();
    let out = cli_with(
        &rig,
        &[
            "job",
            "run",
            "-var",
            "greeting=hello",
            "-var=times=2",
            &path,
        ],
        &[("NOMAD_VAR_greeting", "from env"), ("NOMAD_VAR_times", "7")],
        "",
    );
    assert!(out.status.success(), "{}", text(&out));
    let alloc = rig.job("greeter").allocs[0].id.clone();
    let pid = rig.wait_running("greeter", &alloc);
    wait_for_log(&rig, &alloc, "HELLO x2\n");

    // The agent decodes the job again from what it kept: the same job,
    // its task adopted, nothing dropped for want of a variable.
    rig.restart_adopts("greeter", pid);

    // Running it again with the same values changes nothing.
    let out = cli_with(
        &rig,
        &[
            "job",
            "run",
            "-var",
            "greeting=hello",
            "-var=times=2",
            &path,
        ],
        &[],
        "",
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already running with this spec"),
        "{}",
        text(&out)
    );
    rig.stop("greeter");
}

#[test]
fn a_job_without_a_value_for_a_variable_is_refused_naming_it() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = rig.run_job_output("greeter.hcl", GREETER);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "greeter.hcl:1:10: variable \"greeting\" has no value: give it one with -var greeting=VALUE, in a -var-file, with NOMAD_VAR_greeting in the environment, or with a default"
        ),
        "{stderr}"
    );
    let path = rig.agent.dir.join("unknown.hcl");
    fs::write(
        &path,
        GREETER.replace("upper(var.greeting)", "title(var.greeting)"),
    )
    .unwrap();
    let out = cli_with(
        &rig,
        &[
            "job",
            "run",
            "-var",
            "greeting=hi",
            &path.display().to_string(),
        ],
        &[],
        "",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown.hcl:11:13: unknown function 'title'"),
        "{stderr}"
    );
    assert!(rig.client().job_status("").unwrap().jobs.is_empty());
}

#[test]
fn a_piped_volume_spec_and_a_piped_job_with_a_var_file_mount_the_volume() {
    if !require_root() {
        return;
    }
    let rig = Rig::with_plugin_volumes("");
    rig.run_job("plugin.hcl", &rig.plugin_job("3", "1s"));
    rig.wait_plugin_healthy();
    // `sed ... | nomad volume create -`, as Nomad's demos do.
    let out = cli_with(&rig, &["volume", "create", "-"], &[], VOLUME);
    assert!(out.status.success(), "{}", text(&out));

    let job = format!(
        "variable \"vol_id\" {{\n  type = string\n}}\n{}",
        consumer(
            "app",
            "echo hi > /data/out.txt && exec sleep 600",
            "",
            false
        )
        .replace(
            "source          = \"v1\"",
            "source          = \"${var.vol_id}\""
        )
    );
    let vars = rig.agent.dir.join("vars.hcl");
    fs::write(&vars, "vol_id = \"v1\"\n").unwrap();
    let out = cli_with(
        &rig,
        &["job", "run", "-var-file", &vars.display().to_string(), "-"],
        &[],
        &job,
    );
    assert!(out.status.success(), "{}", text(&out));
    let alloc = rig.job("app").allocs[0].id.clone();
    rig.wait_running("app", &alloc);
    wait_for_file(&rig.backing.join("volumes/v1/out.txt"));
    rig.stop("app");
    rig.stop("plugin");
}

#[test]
fn node_attributes_are_interpolated_when_the_task_starts() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let job = GREETER
        .replace("upper(var.greeting)", "var.greeting")
        .replace(
            "type = string\n",
            "type    = string\n  default = \"${attr.kernel.name}\"\n",
        )
        .replace(
            "echo \\\"$LINE\\\"",
            "echo \\\"$LINE $WHERE ${node.unique.name} ${attr.unique.hostname} ${node.unique.id}\\\"",
        )
        .replace(
            "LINE = local.line\n",
            "LINE  = local.line\n        WHERE = \"on ${attr.kernel.name}\"\n",
        );
    let out = rig.run_job_output("node.hcl", &job);
    assert!(out.status.success(), "{}", text(&out));
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();
    let alloc = rig.job("greeter").allocs[0].id.clone();
    rig.wait_running("greeter", &alloc);
    // The node's ID is the UUID the agent keeps in its data dir.
    let id = fs::read_to_string(rig.agent.data_dir.join("node-id")).unwrap();
    let id = id.trim();
    assert_eq!(id.len(), 36, "{id:?}");
    // A variable's default keeps the sequence for the agent, as Nomad does.
    wait_for_log(
        &rig,
        &alloc,
        &format!("linux x1 on linux {host} {host} {id}\n"),
    );
    rig.stop("greeter");
}

#[test]
fn the_agent_config_s_meta_datacenter_and_region_are_interpolated() {
    if !require_root() {
        return;
    }
    let agent = Agent::start_with_config(
        "datacenter = \"eu-1\"\nregion = \"europe\"\nmeta {\n  rack = \"r7\"\n}\n",
    );
    let rig = Rig {
        backing: agent.dir.join("backing"),
        agent,
    };
    let job = GREETER
        .replace("upper(var.greeting)", "var.greeting")
        .replace("type = string\n", "type    = string\n  default = \"hi\"\n")
        .replace(
            "echo \\\"$LINE\\\"",
            "echo \\\"$LINE ${meta.rack} ${node.datacenter} ${node.region}\\\"",
        );
    let out = rig.run_job_output("meta.hcl", &job);
    assert!(out.status.success(), "{}", text(&out));
    let alloc = rig.job("greeter").allocs[0].id.clone();
    rig.wait_running("greeter", &alloc);
    let start = Instant::now();
    loop {
        let log = rig.ok(&["alloc", "logs", &alloc, "t"]);
        if log.ends_with(" r7 eu-1 europe\n") {
            break;
        }
        assert!(start.elapsed() < WAIT, "log {log:?}");
        thread::sleep(Duration::from_millis(20));
    }
    rig.stop("greeter");
}

#[test]
fn a_value_for_an_undeclared_variable_is_refused_unless_hcl2_strict_is_false() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let path = rig.agent.dir.join("greeter.hcl");
    fs::write(&path, GREETER).unwrap();
    let path = path.display().to_string();
    let refused = format!(
        "{path}:1:1: -var nope: the job file declares no variable \"nope\" (with -hcl2-strict=false it is a warning)"
    );
    // As Nomad's -hcl2-strict, true unless told otherwise: job run sends
    // nothing, and validate says the same.
    for verb in [&["job", "run"][..], &["validate"][..]] {
        let args = [verb, &["-var", "greeting=hi", "-var", "nope=1", &path]].concat();
        let out = cli_with(&rig, &args, &[], "");
        assert!(!out.status.success(), "{verb:?}: {}", text(&out));
        assert!(text(&out).contains(&refused), "{verb:?}: {}", text(&out));
    }
    let out = cli_with(
        &rig,
        &[
            "job",
            "run",
            "-hcl2-strict=false",
            "-var",
            "greeting=hi",
            "-var=nope=1",
            &path,
        ],
        &[],
        "",
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("warning: -var nope: the job file declares no variable \"nope\""),
        "{}",
        text(&out)
    );
    let alloc = rig.job("greeter").allocs[0].id.clone();
    rig.wait_running("greeter", &alloc);
    wait_for_log(&rig, &alloc, "HI x1\n");
    rig.stop("greeter");
}
