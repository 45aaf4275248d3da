//! The `csi-agent` command line as a user runs it: exit codes, usage
//! errors, and secrets that never reach any output.

use std::process::{Command, Output};

use crate::util::{bin, require_root, Plugin, NODE};

const SECRET: &str = "s3cr3t-Value-9f2c";
const FLAG_SECRET: &str = "password=flag-s3cr3t-77";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

#[test]
fn the_demo_cycle_runs_through_the_cli() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start();
    let cap = "single-node-writer,file-system";
    let out = plugin.cli(
        &["controller", "create", "demo", "-cap", cap, "-size", "1GiB"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "demo\t1073741824"
    );
    let out = plugin.cli(
        &["controller", "publish", "demo", "-node", NODE, "-cap", cap],
        &[],
    );
    let ctx = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        ctx.starts_with("hostpath.csi-agent/attached-node="),
        "{ctx}"
    );
    let staging = plugin.dir.mkdir("staging");
    let target = plugin.dir.mkdir("pub").join("target");
    let (staging, target) = (staging.to_str().unwrap(), target.to_str().unwrap());
    let out = plugin.cli(
        &[
            "node",
            "stage",
            "demo",
            "-staging",
            staging,
            "-cap",
            cap,
            "--publish-context",
            &ctx,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = plugin.cli(
        &[
            "node",
            "publish",
            "demo",
            "-staging",
            staging,
            "-target",
            target,
            "-cap",
            cap,
            "-publish-context",
            &ctx,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(format!("{target}/hello"), "hi").unwrap();
    let out = plugin.cli(&["-json", "node", "stats", "demo", "-path", target], &[]);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("{\"usage\":[{\"unit\":\"bytes\""),
        "{}",
        text(&out)
    );
    for args in [
        vec!["node", "unpublish", "demo", "-target", target],
        vec!["node", "unstage", "demo", "-staging", staging],
        vec!["controller", "unpublish", "demo", "-node", NODE],
        vec!["controller", "delete", "demo"],
    ] {
        let out = plugin.cli(&args, &[]);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    assert!(crate::util::mounts_under(&plugin.dir.path).is_empty());
}

#[test]
fn secrets_and_mount_flags_never_reach_any_output_even_at_trace() {
    if !require_root() {
        return;
    }
    let plugin = Plugin::start_lenient_with(&[("RUST_LOG", "trace")], &[]);
    let trace = [("RUST_LOG", "trace")];
    let cap = format!("single-node-writer,file-system,ext4,{FLAG_SECRET}");
    let secret = format!("password={SECRET}");
    let mut outputs = Vec::new();
    outputs.push(plugin.cli(
        &[
            "controller",
            "create",
            "v",
            "-cap",
            &cap,
            "-secret",
            &secret,
        ],
        &trace,
    ));
    outputs.push(plugin.cli(
        &[
            "controller",
            "validate",
            "v",
            "-cap",
            &cap,
            "-secret",
            &secret,
        ],
        &trace,
    ));
    outputs.push(plugin.cli(
        &[
            "-json",
            "controller",
            "validate",
            "v",
            "-cap",
            &cap,
            "-secret",
            &secret,
        ],
        &trace,
    ));
    let out = plugin.cli(
        &[
            "controller",
            "publish",
            "v",
            "-node",
            NODE,
            "-cap",
            &cap,
            "-secret",
            &secret,
        ],
        &trace,
    );
    let ctx = String::from_utf8_lossy(&out.stdout).trim().to_string();
    outputs.push(out);
    let staging = plugin.dir.mkdir("staging");
    let staging = staging.to_str().unwrap();
    // A successful stage, then a failing one (unknown volume), both with secrets.
    let stage = |volume: &str| {
        let args = ["node", "stage", volume, "-staging", staging, "-cap", &cap];
        let more = ["-publish-context", &ctx, "-secret", &secret];
        plugin.cli(&[&args[..], &more[..]].concat(), &trace)
    };
    outputs.push(stage("v"));
    outputs.push(stage("nope"));
    // A malformed secret flag.
    outputs.push(plugin.cli(
        &[
            "node", "stage", "v", "-staging", staging, "-cap", &cap, "-secret", SECRET,
        ],
        &trace,
    ));
    assert!(outputs[0].status.success(), "{}", text(&outputs[0]));
    assert!(outputs[1].status.success(), "{}", text(&outputs[1]));
    assert!(outputs[4].status.success(), "{}", text(&outputs[4]));
    assert_eq!(outputs[5].status.code(), Some(1));
    assert_eq!(outputs[6].status.code(), Some(2));
    let mut everything: String = outputs.iter().map(text).collect();
    everything.push_str(&plugin.log());
    everything.push_str(&plugin.trace().join("\n"));
    assert!(
        everything.contains("TRACE") || everything.contains("DEBUG"),
        "trace logging was on"
    );
    assert!(
        everything.contains("[REDACTED]"),
        "flags print redacted: {everything}"
    );
    assert!(
        !everything.contains(SECRET),
        "a secret leaked:\n{everything}"
    );
    assert!(
        !everything.contains("flag-s3cr3t"),
        "a mount flag leaked:\n{everything}"
    );
}

#[test]
fn plugin_errors_exit_1_with_rpc_code_and_message() {
    let plugin = Plugin::start();
    let out = plugin.cli(
        &[
            "controller",
            "validate",
            "ghost",
            "-cap",
            "single-node-writer,file-system",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "error: ValidateVolumeCapabilities failed: NOT_FOUND: volume ghost does not exist"
        ),
        "{stderr}"
    );
}

#[test]
fn usage_errors_exit_2_with_a_usage_line() {
    let plugin = Plugin::start();
    for (args, message) in [
        (
            vec![
                "node",
                "stage",
                "v",
                "-cap",
                "single-node-writer,file-system",
            ],
            "-staging is required",
        ),
        (
            vec![
                "node",
                "stage",
                "v",
                "-staging",
                "/x",
                "-cap",
                "rw,file-system",
            ],
            "unknown access mode \"rw\"",
        ),
        (
            vec!["node", "frobnicate"],
            "unknown command \"node\" \"frobnicate\"",
        ),
        (vec!["-bogus", "identity", "info"], "unknown flag -bogus"),
        (vec!["identity"], "missing VERB"),
    ] {
        let out = plugin.cli(&args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(
            stderr.contains("usage: csi-agent csi"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn bad_endpoints_are_usage_errors() {
    let out = run(&[
        "csi",
        "-endpoint",
        "tcp://127.0.0.1:9000",
        "identity",
        "info",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("unix sockets"), "{}", text(&out));
    let long = format!("unix:///{}", "x".repeat(120));
    let out = run(&["hostpath", "-endpoint", &long, "-base-dir", "/tmp/x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("107-byte limit"), "{}", text(&out));
    let out = run(&["frob"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_plugin_that_is_not_running_is_one_line_not_a_stack() {
    let dir = crate::util::TestDir::new();
    let ep = format!("unix://{}", dir.join("none.sock").display());
    let out = run(&[
        "csi",
        "-endpoint",
        &ep,
        "-timeout",
        "2s",
        "identity",
        "probe",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: Probe failed: UNAVAILABLE"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// Runs the binary with its standard output a pipe nobody reads: the
/// reader end is closed before the command starts, so its first write
/// fails with EPIPE (as `csi-agent ... | head -1` does once head is done).
fn run_into_closed_pipe(args: &[&str]) -> Output {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two file descriptors for pipe(2)
    // to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just made by pipe2 and are owned here
    // alone.
    let (reader, writer) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(reader);
    Command::new(bin())
        .args(args)
        .stdout(std::process::Stdio::from(writer))
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn output_into_a_closed_pipe_ends_quietly_with_the_command_s_own_code() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/job-web.hcl");
    let broken = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/nomad-podman-job.hcl"
    );
    for (args, code) in [
        (vec!["csi", "-help"], 0),
        (vec!["-help"], 0),
        (vec!["version"], 0),
        (vec!["validate", fixture], 0),
        (vec!["validate", fixture, broken], 1),
    ] {
        let out = run_into_closed_pipe(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}

/// The start helper's hidden argument, which only the agent uses.
const START_HELPER: &str = "__start-task";

#[test]
fn the_start_helper_is_hidden_and_refuses_to_run_by_hand() {
    let help = run(&["-help"]);
    assert!(!text(&help).contains(START_HELPER), "{}", text(&help));
    let out = Command::new(bin())
        .arg(START_HELPER)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not run by hand"), "{stderr}");
}

/// A start that is not one fails as a failing step does: a `csi-agent: `
/// line on its stderr, and its errno to the agent on the socket.
#[test]
fn the_start_helper_refuses_a_corrupt_or_truncated_start() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    for (input, reason) in [
        (&b"garbage, not a start"[..], "not a start from this agent"),
        (&b"CSIs\x40\0\0\0\x07\0"[..], "truncated or corrupt"),
        (&b""[..], "no start was sent"),
    ] {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let child = Command::new(bin())
            .arg(START_HELPER)
            .stdin(std::os::fd::OwnedFd::from(theirs))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        ours.write_all(input).unwrap();
        ours.shutdown(std::net::Shutdown::Write).unwrap();
        let out = child.wait_with_output().unwrap();
        let mut status = Vec::new();
        ours.read_to_end(&mut status).unwrap();
        assert_eq!(out.status.code(), Some(1), "{reason}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("csi-agent: cannot read the start from the agent: "),
            "{stderr}"
        );
        assert!(stderr.contains(reason), "{stderr}");
        assert_eq!(status, libc::EINVAL.to_le_bytes());
    }
}
