//! `constraint` and `meta` with real tasks: a job whose constraints the
//! node meets runs, one it does not is not placed and `job run`, `job
//! status` and the events name the constraint in Nomad's words; a task's
//! merged `meta` reaches its environment, its arguments and its templates.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::Rig;
use crate::harness::{text, Agent, WAIT};
use crate::util::{bin, require_root};

/// The node's `client` block in these tests.
const CLIENT: &str = r#"client {
  node_class = "storage"
  meta {
    rack  = "r7"
    zones = "a,b"
  }
}
"#;

/// Go's name for this machine's architecture, as `${attr.cpu.arch}` has it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn rig() -> Rig {
    let agent = Agent::start_with_config(CLIENT);
    Rig {
        backing: agent.dir.join("backing"),
        agent,
    }
}

/// A batch job `name` whose raw_exec task runs `script` with `sh -c`;
/// `levels` go into the job, group and task blocks.
fn batch(name: &str, levels: [&str; 3], script: &str) -> String {
    format!(
        r#"job "{name}" {{
  type = "batch"
{}
  group "g" {{
{}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
      }}
{}
    }}
  }}
}}
"#,
        levels[0], levels[1], levels[2]
    )
}

fn constraint(attribute: &str, operator: &str, value: &str) -> String {
    format!(
        "  constraint {{\n    attribute = {attribute:?}\n    operator  = {operator:?}\n    value     = {value:?}\n  }}\n"
    )
}

/// Waits for `path` to hold a line, and returns its text.
#[track_caller]
fn wait_text(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(start.elapsed() < WAIT, "{} was not written", path.display());
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_job_whose_constraints_the_node_meets_runs() {
    if !require_root() {
        return;
    }
    let rig = rig();
    let out = rig.agent.dir.join("fits");
    let job = batch(
        "fits",
        [
            &constraint("${attr.kernel.name}", "=", "linux"),
            &constraint("${attr.cpu.arch}", "==", go_arch()),
            &[
                constraint("${meta.rack}", "is", "r7"),
                constraint("${node.class}", "=", "storage"),
                constraint("${meta.zones}", "set_contains", "b"),
                constraint("${attr.kernel.version}", "regexp", "^[0-9]+\\.[0-9]+"),
                constraint("${attr.cpu.numcores}", ">=", "1"),
                constraint("${attr.memory.totalbytes}", ">", "1000000"),
                constraint("${attr.driver.raw_exec}", "=", "1"),
                constraint("${attr.os.signals}", "is_not_set", ""),
                constraint("${attr.unique.hostname}", "is_set", ""),
            ]
            .concat(),
        ],
        &format!("echo ok > {}", out.display()),
    );
    let run = rig.run_job_output("fits.hcl", &job);
    assert!(run.status.success(), "{}", text(&run));
    // Read and met, not ignored.
    assert!(!text(&run).contains("ignored"), "{}", text(&run));
    assert_eq!(wait_text(&out), "ok\n");
    let status = rig.wait_job("fits", "the alloc to complete", |j| {
        j.allocs.len() == 1 && j.allocs[0].status == "complete"
    });
    assert!(status.unplaced.is_empty(), "{status:#?}");
}

#[test]
fn a_job_constrained_to_windows_is_not_placed_and_says_which_constraint() {
    if !require_root() {
        return;
    }
    let rig = rig();
    let never = rig.agent.dir.join("never");
    let job = batch(
        "windows",
        [
            &constraint("${attr.kernel.name}", "=", "linux"),
            "",
            &constraint("${attr.kernel.name}", "=", "windows"),
        ],
        &format!("echo ran > {}", never.display()),
    );
    let out = rig.run_job_output("windows.hcl", &job);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = "Constraint \"${attr.kernel.name} = windows\": 1 nodes excluded by filter";
    assert!(
        stdout.contains(&format!(
            "  Task Group \"g\" (failed to place 1 allocation):\n    * {line}\n"
        )),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("job \"windows\": 1 task group could not be placed on this node"),
        "{}",
        text(&out)
    );

    // The job is known, pending, with no alloc: nothing started.
    let status = rig.job("windows");
    assert_eq!(status.status, "pending", "{status:#?}");
    assert!(status.allocs.is_empty(), "{status:#?}");
    assert_eq!(status.unplaced.len(), 1);
    assert_eq!(
        status.unplaced[0].constraint,
        "${attr.kernel.name} = windows"
    );
    assert_eq!(status.unplaced[0].message, line);
    let shown = rig.ok(&["job", "status", "windows"]);
    assert!(
        shown.contains(&format!(
            "Placement Failure\n  Task Group \"g\" (failed to place 1 allocation):\n    * {line}\n"
        )),
        "{shown}"
    );
    let events = rig.ok(&["events", "-topic", "job"]);
    assert!(
        events.contains("PlacementFailed") && events.contains(line),
        "{events}"
    );
    assert!(!never.exists());

    // Another architecture, and an attribute the node lacks, filter too.
    let other_arch = if go_arch() == "arm64" {
        "amd64"
    } else {
        "arm64"
    };
    for (name, c, shown) in [
        (
            "arm",
            constraint("${attr.cpu.arch}", "=", other_arch),
            format!("${{attr.cpu.arch}} = {other_arch}"),
        ),
        (
            "unset",
            constraint("${attr.nope}", "=", "1"),
            "${attr.nope} = 1".to_string(),
        ),
        (
            "old",
            constraint("${attr.kernel.version}", "version", "< 2.0"),
            "${attr.kernel.version} version < 2.0".to_string(),
        ),
    ] {
        let out = rig.run_job_output(&format!("{name}.hcl"), &batch(name, ["", &c, ""], "true"));
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            text(&out).contains(&format!("Constraint {shown:?}: 1 nodes excluded by filter")),
            "{}",
            text(&out)
        );
        assert!(rig.job(name).allocs.is_empty());
    }
}

#[test]
fn distinct_hosts_places_one_alloc_of_the_group_on_this_host() {
    if !require_root() {
        return;
    }
    let rig = rig();
    let job = batch(
        "distinct",
        [
            "",
            "    count = 3\n    constraint {\n      distinct_hosts = true\n    }\n",
            "",
        ],
        "true",
    );
    let out = rig.run_job_output("distinct.hcl", &job);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(
            "Task Group \"g\" (failed to place 2 allocations):\n    * Constraint \"distinct_hosts\": 1 nodes excluded by filter"
        ),
        "{}",
        text(&out)
    );
    let status = rig.wait_job("distinct", "the one alloc to complete", |j| {
        j.allocs.len() == 1 && j.allocs[0].status == "complete"
    });
    assert_eq!(status.allocs[0].index, 0);
}

#[test]
fn meta_reaches_the_environment_the_arguments_and_the_templates() {
    if !require_root() {
        return;
    }
    let rig = rig();
    let dir = rig.agent.dir.join("meta");
    fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let script = format!(
        "env > {d}/env.tmp && mv {d}/env.tmp {d}/env; cp local/meta.txt {d}/template; echo \"$1\" > {d}/arg"
    );
    let job = batch(
        "meta",
        [
            "  meta {\n    owner = \"job\"\n    tier  = \"1\"\n  }\n",
            "    meta {\n      owner = \"group\"\n    }\n",
            r#"      meta = {
        team       = "storage"
        "build.id" = "${NOMAD_JOB_NAME}-7"
      }
      template {
        destination = "local/meta.txt"
        data        = "owner={{ env \"NOMAD_META_owner\" }} tier={{ env \"NOMAD_META_TIER\" }}\n"
      }
"#,
        ],
        &script,
    )
    .replace(
        &format!("args    = [\"-c\", {script:?}]"),
        &format!(
            "args    = [\"-c\", {script:?}, \"sh\", \"${{NOMAD_META_owner}}-${{meta.rack}}\"]"
        ),
    );
    rig.run_job("meta.hcl", &job);
    let arg = wait_text(&dir.join("arg"));
    assert_eq!(arg, "group-r7\n");
    let env = fs::read_to_string(dir.join("env")).unwrap();
    for line in [
        "NOMAD_META_owner=group",
        "NOMAD_META_OWNER=group",
        "NOMAD_META_tier=1",
        "NOMAD_META_TIER=1",
        "NOMAD_META_team=storage",
        "NOMAD_META_TEAM=storage",
        "NOMAD_META_build_id=meta-7",
        "NOMAD_META_BUILD_ID=meta-7",
    ] {
        assert!(env.lines().any(|l| l == line), "no {line} in:\n{env}");
    }
    assert_eq!(
        fs::read_to_string(dir.join("template")).unwrap(),
        "owner=group tier=1\n"
    );
}

#[test]
fn validate_reads_nomads_constraints_without_warnings_and_refuses_bad_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nomad");
    let files: Vec<String> = [
        "e2e/isolation/exec.nomad",
        "e2e/isolation/exec_host.nomad",
        "e2e/isolation/echo_pid.nomad",
        "e2e/isolation/exec_cores.nomad",
        "chroot_dl_exec.nomad",
        "cephrbd-node.nomad",
    ]
    .iter()
    .map(|f| root.join(f).display().to_string())
    .collect();
    let out = std::process::Command::new(bin())
        .arg("validate")
        .args(&files)
        .output()
        .unwrap();
    let all = text(&out);
    assert!(!all.contains("\"constraint\""), "{all}");
    assert!(!all.contains("\"meta\""), "{all}");
    // The summary names each constraint as Nomad does.
    assert!(
        all.contains(&format!(
            "{}: job \"exec\"\n  constraint ${{attr.kernel.name}} = linux\n",
            files[0]
        )),
        "{all}"
    );

    let dir = crate::util::TestDir::new();
    let bad = dir.join("bad.hcl");
    fs::write(
        &bad,
        batch(
            "bad",
            [
                "",
                &constraint("${attr.kernel.version}", "semver", "~> 5.4"),
                "",
            ],
            "true",
        ),
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .arg("validate")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "{}:8:17: malformed semver constraint \"~> 5.4\"",
            bad.display()
        )),
        "{}",
        text(&out)
    );
}

#[test]
fn client_meta_given_on_sighup_is_what_the_next_job_run_matches() {
    if !require_root() {
        return;
    }
    // Started without a client block; the block comes with SIGHUP.
    let rig = Rig::bare_with_config(CLIENT);
    let out = rig.agent.dir.join("reloaded");
    let job = batch(
        "reloaded",
        ["", "", &constraint("${meta.rack}", "=", "r7")],
        &format!("echo ok > {}", out.display()),
    );
    rig.run_job("reloaded.hcl", &job);
    assert_eq!(wait_text(&out), "ok\n");
}

/// An agent whose `docker` block names the engine at `endpoint`.
fn docker_rig(endpoint: &str) -> Rig {
    let agent = Agent::start_with_config(&format!("docker {{\n  endpoint = {endpoint:?}\n}}\n"));
    Rig {
        backing: agent.dir.join("backing"),
        agent,
    }
}

/// A batch job `name` that may run only where the docker driver is.
fn needs_docker(name: &str) -> String {
    batch(
        name,
        ["", &constraint("${attr.driver.docker}", "=", "1"), ""],
        "true",
    )
}

#[test]
fn the_docker_driver_is_an_attribute_while_the_engine_answers() {
    if !crate::dockerd::require_docker() {
        return;
    }
    let dockerd = crate::dockerd::Dockerd::start();
    let endpoint = format!("unix://{}", dockerd.socket.display());
    let rig = docker_rig(&endpoint);
    let out = rig.agent.dir.join("docker");
    rig.run_job(
        "docker.hcl",
        &needs_docker("docker").replace("\"true\"", &format!("\"echo ok > {}\"", out.display())),
    );
    assert_eq!(wait_text(&out), "ok\n");

    // The engine gone, SIGHUP fingerprints the node again without it.
    drop(dockerd);
    rig.agent.sighup();
    rig.agent.wait_for_log("SIGHUP: reloaded", WAIT);
    let run = rig.run_job_output("gone.hcl", &needs_docker("gone"));
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    assert!(
        text(&run).contains("Constraint \"${attr.driver.docker} = 1\": 1 nodes excluded by filter"),
        "{}",
        text(&run)
    );
}

#[test]
fn the_docker_driver_appears_once_an_engine_that_was_down_at_the_start_answers() {
    if !crate::dockerd::require_docker() {
        return;
    }
    // As at a boot under systemd: the agent starts before the engine.
    let mut dockerd = crate::dockerd::Dockerd::start();
    let endpoint = format!("unix://{}", dockerd.socket.display());
    dockerd.stop();
    let rig = docker_rig(&endpoint);
    let run = rig.run_job_output("early.hcl", &needs_docker("early"));
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));

    // The engine comes up: no SIGHUP needed.
    dockerd.launch();
    rig.agent.wait_for_log(
        "The container engine answers: docker tasks can be placed",
        Duration::from_secs(60),
    );
    let out = rig.agent.dir.join("late");
    rig.run_job(
        "late.hcl",
        &needs_docker("late").replace("\"true\"", &format!("\"echo ok > {}\"", out.display())),
    );
    assert_eq!(wait_text(&out), "ok\n");
}
