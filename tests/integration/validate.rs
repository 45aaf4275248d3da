//! `csi-agent validate` as a user runs it: summaries, every error with its
//! position, warnings, exit codes, and no secret in any output.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::util::{bin, TestDir};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    path.to_string_lossy().into_owned()
}

fn validate(files: &[&str]) -> Output {
    Command::new(bin())
        .arg("validate")
        .args(files)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn validate_summarizes_each_kind_of_file() {
    let (agent, volume, job) = (
        fixture("agent.hcl"),
        fixture("volume-register.hcl"),
        fixture("job-per-alloc.hcl"),
    );
    let out = validate(&[&agent, &volume, &job]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        format!("{agent}: agent config: data_dir /var/lib/csi-agent, node_name node-1, log_level debug, plugin_heartbeat 1m\n"),
        "  plugin \"hostpath\": monolith at unix:///run/csi/hostpath.sock\n".to_string(),
        "  host_volume \"certs\": /etc/ssl/certs (read-only)\n".to_string(),
        format!("{volume}: volume spec: csi volume \"ebs_prod_db1\" (\"database\") on plugin \"ebs-prod\"\n"),
        "  capability single-node-writer/file-system\n".to_string(),
        "  secrets: example_secret\n".to_string(),
        format!("{job}: job \"example\"\n"),
        "  group \"cache\": count 2, restart 2 attempts in 30m (15s apart, then fail)\n".to_string(),
        "    volume \"cache-volume\": csi \"test-volume[0..1]\" single-node-writer/file-system (fs_type=ext4 mount_flags=[REDACTED]) (read-write)\n".to_string(),
        "    task \"redis\": exec /usr/bin/redis-server (2 arguments)\n".to_string(),
        "      volume_mount \"cache-volume\" at ${NOMAD_ALLOC_DIR}/data (read-write, private)\n".to_string(),
    ] {
        assert!(text.contains(&expected), "no {expected:?} in:\n{text}");
    }
}

#[test]
fn validate_says_which_services_are_registered() {
    let out = validate(&[&fixture("job-web.hcl")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "    service \"web\", 1 check, connect (provider consul: registered nowhere)\n"
        ),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("csi-agent has no Consul"),
        "{}",
        stderr(&out)
    );
}

/// Nomad's NFS demo (`demo/csi/nfs/jobs/`): every job validates as it is,
/// the server's service registered by provider `nomad`.
#[test]
fn nomad_s_nfs_demo_validates_with_its_services_registered() {
    let dir = fixture("nomad/nfs");
    for file in ["nfs", "controller-plugin", "node-plugin", "web"] {
        let out = validate(&[&format!("{dir}/{file}.nomad.hcl")]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", stderr(&out));
    }
    let out = validate(&[&format!("{dir}/nfs.nomad.hcl")]);
    assert!(
        stdout(&out).contains("    service \"nfs\" (registered while it runs; checks not run)\n"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn validate_prints_a_warning_for_each_ignored_nomad_key() {
    let job = fixture("job-per-alloc.hcl");
    let out = validate(&[&job]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stderr(&out),
        format!("{job}:7:3: warning: \"datacenters\" in job \"example\" is ignored by csi-agent\n")
    );
}

#[test]
fn validate_reports_every_error_with_its_position_and_exits_1() {
    let dir = TestDir::new();
    let path = dir.join("job.hcl");
    std::fs::write(
        &path,
        "job \"j\" {\n  group \"g\" {\n    cuont = 2\n    task \"t\" {\n      driver = \"exec\"\n      kill_timeout = 30\n      config {\n        comand = \"/bin/true\"\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    let path = path.to_string_lossy().into_owned();
    let out = validate(&[&path]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out),
        format!(
            "{path}:3:5: unknown attribute \"cuont\" in group \"g\" (did you mean \"count\"?)\n\
             {path}:6:22: \"kill_timeout\" in task \"t\" must be a string, found a number\n\
             {path}:8:9: unknown attribute \"comand\" in config in task \"t\" (did you mean \"command\"?)\n\
             error: 1 of 1 file did not validate\n"
        )
    );
}

#[test]
fn validate_reads_json_files_in_hcls_json_syntax_by_their_name() {
    // Each JSON fixture has the summary of its HCL twin.
    for (json, hcl) in [
        ("agent.json", "agent.hcl"),
        ("volume-register.json", "volume-register.hcl"),
        ("volume-create.json", "volume-create.hcl"),
        ("job-per-alloc.json", "job-per-alloc.hcl"),
        ("job-web.json", "job-web.hcl"),
    ] {
        let (json, hcl) = (fixture(json), fixture(hcl));
        let from_json = validate(&[&json]);
        let from_hcl = validate(&[&hcl]);
        assert_eq!(from_json.status.code(), Some(0), "{}", stderr(&from_json));
        assert_eq!(
            stdout(&from_json).replace(&json, "FILE"),
            stdout(&from_hcl).replace(&hcl, "FILE")
        );
    }
}

#[test]
fn validate_reports_json_errors_at_their_position() {
    let dir = TestDir::new();
    let path = dir.join("job.json");
    std::fs::write(
        &path,
        r#"{
  "job": {
    "j": {
      "group": {
        "g": {
          "cuont": 2,
          "task": {
            "t": {
              "driver": "exec",
              "kill_timeout": 30,
              "config": {"comand": "/bin/true"}
            }
          }
        }
      }
    }
  }
}
"#,
    )
    .unwrap();
    let path = path.to_string_lossy().into_owned();
    let out = validate(&[&path]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out),
        format!(
            "{path}:6:11: unknown key \"cuont\" in group \"g\" (did you mean \"count\"?)\n\
             {path}:10:31: \"kill_timeout\" in task \"t\" must be a string, found a number\n\
             {path}:11:26: unknown key \"comand\" in config in task \"t\" (did you mean \"command\"?)\n\
             error: 1 of 1 file did not validate\n"
        )
    );
    // A JSON syntax error stops there, at its position.
    std::fs::write(dir.join("bad.json"), "{\n  \"id\": \"x\",\n}\n").unwrap();
    let bad = dir.join("bad.json").to_string_lossy().into_owned();
    let out = validate(&[&bad]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "{bad}:3:1: expected a key (a quoted string) after ',' (JSON has no trailing commas), found '}}'\n\
             error: 1 of 1 file did not validate\n"
        )
    );
}

#[test]
fn validate_checks_every_file_after_a_failure() {
    let podman = fixture("nomad-podman-job.hcl");
    let agent = fixture("agent.hcl");
    let out = validate(&[&podman, &agent]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with(&format!("{agent}: agent config")));
    let errors = stderr(&out);
    assert!(
        errors.contains(&format!(
            "{podman}:24:16: driver \"podman\" is not supported: csi-agent runs \"exec\", \"raw_exec\" and \"docker\" tasks\n"
        )),
        "{errors}"
    );
    assert!(!errors.contains("image"), "{errors}");
    assert!(
        errors.ends_with("error: 1 of 2 files did not validate\n"),
        "{errors}"
    );
}

#[test]
fn validate_never_prints_secrets_mount_flags_or_environment_values() {
    let out = validate(&[
        &fixture("volume-register.hcl"),
        &fixture("job-per-alloc.hcl"),
    ]);
    let all = format!("{}{}", stdout(&out), stderr(&out));
    for secret in ["plugh", "noatime", "nodiratime", "--dir"] {
        assert!(!all.contains(secret), "{secret:?} in:\n{all}");
    }
    assert!(all.contains("example_secret"), "{all}");
    assert!(all.contains("env: MOUNT_PATH"), "{all}");
}

/// `csi-agent validate -` with `text` on its standard input.
fn validate_stdin(text: &[u8]) -> Output {
    let mut child = Command::new(bin())
        .args(["validate", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn validate_reads_stdin_for_a_dash() {
    let out = validate_stdin(b"log_level = \"warn\"\n");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("<stdin>: agent config: data_dir /var/lib/csi-agent"));
}

#[test]
fn validate_reports_a_file_it_cannot_read() {
    let dir = TestDir::new();
    let missing = dir.join("missing.hcl").to_string_lossy().into_owned();
    let out = validate(&[&missing]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(&format!("error: failed to read {missing}: ")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn validate_without_files_is_a_usage_error() {
    let out = validate(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("error: missing FILE\nusage: csi-agent validate [-var NAME=VALUE]... [-var-file FILE]... [-hcl2-strict=false] FILE..."));
    let out = validate(&["-strict", "x.hcl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("error: unknown flag -strict\n"));
}

#[test]
fn validate_refuses_a_stop_after_disconnect_that_would_stop_a_connected_node() {
    let out = validate_stdin(
        b"cluster {\n  etcd = [\"http://10.1.0.1:2379\"]\n  lease_ttl = \"9s\"\n  stop_after_disconnect = \"3s\"\n}\n",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(
            "\"stop_after_disconnect\" (3s) must be at least two keep-alive periods, 2/3 of \"lease_ttl\" (9s), that is 6s"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn validate_reports_a_misspelled_lifecycle_hook_at_its_position() {
    let dir = TestDir::new();
    let path = dir.join("job.hcl");
    std::fs::write(
        &path,
        "job \"j\" {\n  group \"g\" {\n    task \"prep\" {\n      driver = \"exec\"\n      lifecycle {\n        hook = \"prestrat\"\n      }\n      config {\n        command = \"/bin/true\"\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    let path = path.to_string_lossy().into_owned();
    let out = validate(&[&path]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "{path}:6:16: \"hook\" in lifecycle in task \"prep\": unknown lifecycle hook \"prestrat\" (expected one of: prestart, poststart, poststop)\n\
             error: 1 of 1 file did not validate\n"
        )
    );
}

/// A job whose volume's source is the variable `vol_id`, declared with
/// `decl`.
fn job_with_variable(decl: &str) -> String {
    format!(
        r#"{decl}
job "app" {{
  group "g" {{
    volume "data" {{
      type            = "csi"
      source          = "${{var.vol_id}}"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/true"
      }}
    }}
  }}
}}
"#
    )
}

const VOL_ID: &str = "variable \"vol_id\" {\n  type = string\n}";

/// `csi-agent validate ARGS` with `env` added to its environment.
fn validate_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin())
        .arg("validate")
        .args(args)
        .env_remove("NOMAD_VAR_vol_id")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The source of the volume in `validate`'s summary, or its errors.
fn volume_source(out: &Output) -> String {
    if out.status.code() != Some(0) {
        return stderr(out);
    }
    let text = stdout(out);
    let line = text
        .lines()
        .find(|l| l.contains("volume \"data\""))
        .unwrap_or_else(|| panic!("no volume in:\n{text}"));
    line.split('"').nth(3).unwrap_or_default().to_string()
}

#[test]
fn validate_gives_a_variable_its_value_from_each_source() {
    let dir = TestDir::new();
    let job = dir.join("job.hcl");
    std::fs::write(&job, job_with_variable(VOL_ID)).unwrap();
    let job = job.to_string_lossy().into_owned();
    let hcl_vars = dir.join("vars.hcl");
    std::fs::write(&hcl_vars, "vol_id = \"from-hcl-file\"\n").unwrap();
    let json_vars = dir.join("vars.json");
    std::fs::write(&json_vars, "{\"vol_id\": \"from-json-file\"}\n").unwrap();
    let (hcl_vars, json_vars) = (
        hcl_vars.to_string_lossy().into_owned(),
        json_vars.to_string_lossy().into_owned(),
    );

    let by_flag = validate_env(&["-var", "vol_id=from-flag", &job], &[]);
    assert_eq!(volume_source(&by_flag), "from-flag");
    let by_file = validate_env(&["-var-file", &hcl_vars, &job], &[]);
    assert_eq!(volume_source(&by_file), "from-hcl-file");
    let by_json = validate_env(&["-var-file", &json_vars, &job], &[]);
    assert_eq!(volume_source(&by_json), "from-json-file");
    let by_env = validate_env(&[&job], &[("NOMAD_VAR_vol_id", "from-env")]);
    assert_eq!(volume_source(&by_env), "from-env");

    let defaulted = dir.join("default.hcl");
    std::fs::write(
        &defaulted,
        job_with_variable("variable \"vol_id\" {\n  default = \"from-default\"\n}"),
    )
    .unwrap();
    let by_default = validate_env(&[&defaulted.to_string_lossy()], &[]);
    assert_eq!(volume_source(&by_default), "from-default");
}

#[test]
fn validate_applies_nomads_precedence_flags_then_files_then_env() {
    let dir = TestDir::new();
    let job = dir.join("job.hcl");
    std::fs::write(&job, job_with_variable(VOL_ID)).unwrap();
    let job = job.to_string_lossy().into_owned();
    let (a, b) = (dir.join("a.hcl"), dir.join("b.hcl"));
    std::fs::write(&a, "vol_id = \"from-a\"\n").unwrap();
    std::fs::write(&b, "vol_id = \"from-b\"\n").unwrap();
    let (a, b) = (a.to_string_lossy(), b.to_string_lossy());
    let env = [("NOMAD_VAR_vol_id", "from-env")];

    // The flag is given first on the command line, and still wins.
    let all = validate_env(&["-var", "vol_id=from-flag", "-var-file", &a, &job], &env);
    assert_eq!(volume_source(&all), "from-flag");
    let files = validate_env(&["-var-file", &a, "-var-file", &b, &job], &env);
    assert_eq!(volume_source(&files), "from-b");
    let file_over_env = validate_env(&["-var-file", &a, &job], &env);
    assert_eq!(volume_source(&file_over_env), "from-a");
}

#[test]
fn validate_refuses_a_variable_without_a_value_and_an_unknown_function_at_their_positions() {
    let dir = TestDir::new();
    let job = dir.join("job.hcl");
    std::fs::write(&job, job_with_variable(VOL_ID)).unwrap();
    let job = job.to_string_lossy().into_owned();
    let out = validate_env(&[&job], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!("{job}:1:10: variable \"vol_id\" has no value: give it one with -var vol_id=VALUE, in a -var-file, with NOMAD_VAR_vol_id in the environment, or with a default\nerror: 1 of 1 file did not validate\n")
    );

    let undeclared = dir.join("undeclared.hcl");
    std::fs::write(&undeclared, job_with_variable("")).unwrap();
    let undeclared = undeclared.to_string_lossy().into_owned();
    let out = validate_env(&[&undeclared], &[]);
    assert!(
        stderr(&out).starts_with(&format!(
            "{undeclared}:6:28: no variable \"vol_id\" is declared"
        )),
        "{}",
        stderr(&out)
    );

    let unknown = dir.join("unknown.hcl");
    std::fs::write(
        &unknown,
        job_with_variable(VOL_ID).replace("${var.vol_id}", "${bcrypt(\"a\", var.vol_id)}"),
    )
    .unwrap();
    let unknown = unknown.to_string_lossy().into_owned();
    let out = validate_env(&["-var", "vol_id=x", &unknown], &[]);
    assert!(
        stderr(&out).starts_with(&format!("{unknown}:8:28: unknown function 'bcrypt'\n")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn validate_reads_a_job_with_variables_from_stdin() {
    let mut child = Command::new(bin())
        .args(["validate", "-var", "vol_id=piped", "-"])
        .env_remove("NOMAD_VAR_vol_id")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(job_with_variable(VOL_ID).as_bytes())
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(volume_source(&out), "piped");
}

#[test]
fn nomads_kadalu_demo_job_reads_its_variables_and_validates() {
    let job = fixture("nomad-kadalu-app.nomad");
    let out = validate_env(&[&job], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "{job}:17:3: warning: \"datacenters\" in job \"sample-pv-check\" is ignored by csi-agent\n"
        )
    );
    assert!(
        stdout(&out).contains("task \"sample\": docker image "),
        "{}",
        stdout(&out)
    );
}

#[test]
fn nomads_csi_demo_docker_jobs_validate_with_warnings_only() {
    for name in [
        "nomad/hostpath-plugin.nomad",
        "nomad/hostpath-redis.nomad",
        "nomad/kadalu-nodeplugin.nomad",
        "nomad/cephrbd-node.nomad",
        "nomad-docker-job.hcl",
    ] {
        let job = fixture(name);
        let out = validate(&[&job]);
        let errors = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{name}:\n{errors}");
        assert!(
            errors.lines().all(|line| line.contains(": warning: ")),
            "{name}:\n{errors}"
        );
        assert!(!errors.contains("not supported"), "{name}:\n{errors}");
        assert!(stdout(&out).contains(": docker image "), "{name}");
    }
    let out = validate(&[&fixture("nomad/cephrbd-node.nomad")]);
    assert!(
        stdout(&out)
            .contains("      template \"${NOMAD_TASK_DIR}/env\" from data: perms 644, env\n"),
        "{}",
        stdout(&out)
    );
    let out = validate(&[&fixture("nomad/hostpath-plugin.nomad")]);
    assert!(
        stdout(&out).contains(
            "task \"plugin\": docker image registry.k8s.io/sig-storage/hostpathplugin:v1.9.0 (4 arguments)\n      privileged (needs the agent's allow_privileged)\n      csi_plugin \"hostpath-plugin0\": monolith"
        ),
        "{}",
        stdout(&out)
    );
}

/// Nomad's EBS demo renders AWS credentials from Vault: csi-agent has no
/// Vault, and says so at the template's function rather than starting a
/// plugin without its credentials.
#[test]
fn nomads_ebs_demo_job_is_refused_for_its_vault_template() {
    let job = fixture("nomad/aws-ebs-nodes.nomad");
    let out = validate(&[&job]);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    let errors: Vec<&str> = text
        .lines()
        .filter(|line| !line.contains(": warning: "))
        .collect();
    assert_eq!(
        errors,
        [
            format!("{job}:57:16: template \"secrets/file.env\": line 1:9: function \"secret\" needs Vault, which csi-agent does not have").as_str(),
            "error: 1 of 1 file did not validate",
        ]
    );
}

#[test]
fn validate_refuses_a_docker_config_mistake_at_its_position() {
    let dir = TestDir::new();
    let path = dir.join("bad.hcl");
    std::fs::write(
        &path,
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"docker\"\n      config {\n        image   = \"x\"\n        cap_add = [\"SYS_ADMN\"]\n        volumes = [\"/a\"]\n        ports   = [\"http\"]\n        privilegd = true\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    let file = path.to_string_lossy().into_owned();
    let out = validate(&[&file]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "{file}:7:20: \"cap_add\" in config in task \"t\": \"SYS_ADMN\" is not a Linux capability (such as \"SYS_ADMIN\", \"net_admin\" or \"all\")\n\
             {file}:8:20: volume \"/a\" in \"volumes\" in config in task \"t\": expected \"host:container\" or \"host:container:mode\" with mode ro or rw\n\
             {file}:9:20: port \"http\" in \"ports\" in config in task \"t\": the group has no network block\n\
             {file}:10:9: unknown attribute \"privilegd\" in config in task \"t\" (did you mean \"privileged\"?)\n\
             error: 1 of 1 file did not validate\n"
        )
    );
}
