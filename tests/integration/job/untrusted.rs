//! A task's artifacts and templates are worked on in the prepare helper
//! (`csi-agent __prepare-task <alloc> <task>`), not the agent: a helper
//! that crashes, is killed or blows its stack fails that task's start
//! with an event naming the cause, the restart policy follows, and the
//! agent, its other jobs and a restarted agent carry on.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;

use csi_agent::proto::agent::{JobStatus, TaskEvent};

use super::Rig;
use crate::harness::WAIT;
use crate::util::require_root;

/// A job whose task `t` fetches `http://127.0.0.1:PORT/FILE` (its mode and
/// destination `ARTIFACT`), renders `TEMPLATE`, and sleeps; tried
/// `ATTEMPTS` times more, a second apart.
const JOB: &str = r#"job "NAME" {
  group "g" {
    restart {
      attempts = ATTEMPTS
      interval = "1h"
      delay    = "1s"
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      artifact {
        source = "http://127.0.0.1:PORT/FILE"
ARTIFACT
      }
TEMPLATE
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
"#;

fn job(name: &str, port: u16, file: &str, attempts: u32, artifact: &str, template: &str) -> String {
    JOB.replace("NAME", name)
        .replace("PORT", &port.to_string())
        .replace("FILE", file)
        .replace("ATTEMPTS", &attempts.to_string())
        .replace("ARTIFACT", artifact)
        .replace("TEMPLATE", template)
}

/// The pids of the prepare helpers working for `alloc`, found by their
/// command line.
fn helpers_of(alloc: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if argv.get(1) == Some(&&b"__prepare-task"[..]) && argv.get(2) == Some(&alloc.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// The events of kind `kind` of the job's task `t`.
fn events(status: &JobStatus, kind: &str) -> Vec<TaskEvent> {
    status.allocs[0].tasks[0]
        .events
        .iter()
        .filter(|e| e.kind == kind)
        .cloned()
        .collect()
}

/// Kills the helper of `alloc` (the one fetching from `server`'s next
/// connection) with `signal`, once the fetch is under way; returns the
/// connection, which the helper no longer reads.
#[track_caller]
fn kill_fetching_helper(
    connections: &mpsc::Receiver<TcpStream>,
    alloc: &str,
    signal: libc::c_int,
) -> TcpStream {
    let held = connections
        .recv_timeout(WAIT)
        .expect("the helper's fetch connects");
    let helpers = helpers_of(alloc);
    assert_eq!(helpers.len(), 1, "one helper fetches for {alloc}");
    // SAFETY: kill(2) with plain integers.
    assert_eq!(unsafe { libc::kill(helpers[0] as libc::pid_t, signal) }, 0);
    held
}

#[test]
fn a_fetching_helper_killed_fails_the_start_and_the_agent_carries_on() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    // Accepts and never answers: each fetch waits for its answer.
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let (tx, connections) = mpsc::channel();
    thread::spawn(move || {
        for stream in server.incoming().flatten() {
            if tx.send(stream).is_err() {
                return;
            }
        }
    });
    let allocs = rig.run_job("stuck.hcl", &job("stuck", port, "never.txt", 1, "", ""));
    // What a crash ends a process with (a SIGSEGV that kill(2) sends is
    // caught once by Rust's handler for stack overflows, which returns).
    let _first = kill_fetching_helper(&connections, &allocs[0], libc::SIGABRT);
    let status = rig.wait_job("stuck", "the first start to fail", |j| {
        !events(j, "Failed Artifact Download").is_empty()
    });
    let failed = &events(&status, "Failed Artifact Download")[0];
    assert!(
        failed
            .message
            .contains("artifact fetch crashed: killed by signal 6 (SIGABRT)"),
        "{failed:?}"
    );
    // The agent answers, and starts other jobs, while the policy's second
    // start fetches again.
    let free = rig.run_job("free.hcl", &super::sleepers("free", 1, 100, 64));
    rig.wait_running("free", &free[0]);
    let _second = kill_fetching_helper(&connections, &allocs[0], libc::SIGKILL);
    let status = rig.wait_job("stuck", "the restart policy to give up", |j| {
        j.status == "dead"
    });
    assert_eq!(status.allocs[0].status, "failed", "{status:#?}");
    let failures = events(&status, "Failed Artifact Download");
    assert_eq!(failures.len(), 2, "{status:#?}");
    assert!(
        failures[1]
            .message
            .contains("artifact fetch crashed: killed by signal 9 (SIGKILL)"),
        "{failures:?}"
    );
    assert!(!events(&status, "restarting").is_empty(), "{status:#?}");
    assert!(helpers_of(&allocs[0]).is_empty());
    assert_eq!(rig.job("free").allocs[0].tasks[0].state, "running");
    rig.stop("free");
}

/// Serves `body` to every GET on a port of its own; the port.
fn serve(body: Vec<u8>) -> u16 {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    thread::spawn(move || {
        for mut stream in server.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    port
}

/// A template nested far past any stack: `{{if 1}}` 10,000 deep (800
/// overflowed the main thread of `csi-agent validate` before the engine
/// had a bound).
fn bomb() -> Vec<u8> {
    let depth = 10_000;
    let mut text = "{{if 1}}".repeat(depth);
    text.push_str(&"{{end}}".repeat(depth));
    text.into_bytes()
}

/// Fetched as an artifact and rendered as the template `local/out`, so
/// that no agent ever parses it: only the helper reads it.
const BOMB_ARTIFACT: &str =
    "        destination = \"local/bomb.tpl\"\n        mode        = \"file\"";
const BOMB_TEMPLATE: &str = "      template {\n        source      = \"local/bomb.tpl\"\n        destination = \"local/out\"\n      }";

/// Whether `message` is the bomb's start failing: the helper crashed
/// (its stack overflowed), or the engine refused the template by its
/// bound.
fn bomb_failed(message: &str) -> bool {
    message.contains("template render crashed: killed by signal")
        || message.contains("template \"local/out\"")
}

#[test]
fn a_template_bomb_fails_one_start_and_nothing_else() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let port = serve(bomb());
    let allocs = rig.run_job(
        "bomb.hcl",
        &job("bomb", port, "bomb.tpl", 0, BOMB_ARTIFACT, BOMB_TEMPLATE),
    );
    let status = rig.wait_job("bomb", "the start to fail", |j| j.status == "dead");
    assert_eq!(status.allocs[0].status, "failed", "{status:#?}");
    let failed = events(&status, "failed");
    assert!(
        failed.iter().any(|e| bomb_failed(&e.message)),
        "{status:#?}"
    );
    assert!(helpers_of(&allocs[0]).is_empty());
    // The agent is the same process, and starts other jobs.
    let free = rig.run_job("free.hcl", &super::sleepers("free", 1, 100, 64));
    rig.wait_running("free", &free[0]);
    assert!(
        !rig.agent.log().contains("overflowed"),
        "{}",
        rig.agent.log()
    );
    rig.stop("free");
}

#[test]
fn an_agent_restarted_with_a_template_bomb_in_its_data_dir_stays_up() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let port = serve(bomb());
    rig.run_job(
        "bomb.hcl",
        &job("bomb", port, "bomb.tpl", 100, BOMB_ARTIFACT, BOMB_TEMPLATE),
    );
    let failures = |j: &JobStatus| {
        events(j, "failed")
            .iter()
            .filter(|e| bomb_failed(&e.message))
            .count()
    };
    let status = rig.wait_job("bomb", "a start to fail", |j| failures(j) > 0);
    let before = failures(&status);
    let pid = rig.agent.pid();
    assert_eq!(rig.agent.sigterm(), 0);
    rig.agent.restart();
    assert_ne!(rig.agent.pid(), pid);
    // The restarted agent starts the job again, and fails it again, in a
    // helper: it stays up, and answers.
    rig.wait_job("bomb", "a start after the restart to fail", |j| {
        failures(j) > before
    });
    let free = rig.run_job("free.hcl", &super::sleepers("free", 1, 100, 64));
    rig.wait_running("free", &free[0]);
    assert!(rig.agent.try_status().is_ok());
    rig.stop("free");
    rig.ok(&["job", "stop", "bomb"]);
}

/// A job whose task `t` renders `{{range loop 1000000}}` twice nested
/// around 10 KiB of text into `local/out`: 10^16 bytes, unless something
/// stops it.
fn memory_bomb() -> String {
    let text = "x".repeat(10 * 1024);
    format!(
        r#"job "hog" {{
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "raw_exec"
      template {{
        data        = "{{{{range loop 1000000}}}}{{{{range loop 1000000}}}}{text}{{{{end}}}}{{{{end}}}}"
        destination = "local/out"
      }}
      config {{
        command = "/bin/sleep"
        args    = ["600"]
      }}
    }}
  }}
}}
"#
    )
}

#[test]
fn a_memory_bomb_ends_in_the_helper_s_address_space_not_the_host_s() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let allocs = rig.run_job("hog.hcl", &memory_bomb());
    let status = rig.wait_job("hog", "the start to fail", |j| j.status == "dead");
    let failed = events(&status, "failed");
    let crashed = failed.iter().any(|e| {
        e.message
            .contains("template render crashed: killed by signal 6 (SIGABRT)")
    });
    let refused = failed
        .iter()
        .any(|e| e.message.contains("template \"local/out\""));
    assert!(crashed || refused, "{status:#?}");
    if crashed {
        // Past RLIMIT_AS, an allocation failed: Rust's own last words.
        let log = fs::read_to_string(rig.task_dir(&allocs[0], "t").join("logs/stderr")).unwrap();
        assert!(log.contains("memory allocation of"), "{log}");
    }
    assert!(!rig.task_dir(&allocs[0], "t").join("local/out").exists());
    assert!(rig.agent.try_status().is_ok());
}

/// A running task whose template `local/in.tpl` (rendered from `FIRST`)
/// is itself the template of `local/out`.
const TWICE: &str = r#"job "twice" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      template {
        data        = "FIRST"
        destination = "local/in.tpl"
        change_mode = "noop"
      }
      template {
        source      = "local/in.tpl"
        destination = "local/out"
        change_mode = "noop"
      }
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
"#;

#[test]
fn a_template_bomb_in_a_re_render_leaves_the_task_and_the_agent_running() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let allocs = rig.run_job("twice.hcl", &TWICE.replace("FIRST", "ok"));
    let pid = rig.wait_running("twice", &allocs[0]);
    let task_dir = rig.task_dir(&allocs[0], "t");
    assert_eq!(
        fs::read_to_string(task_dir.join("local/out")).unwrap(),
        "ok"
    );
    // The new first template copies the bomb into the second's source:
    // the agent parses only `file`'s call.
    fs::write(task_dir.join("local/bomb.tpl"), bomb()).unwrap();
    let changed = TWICE.replace("FIRST", "{{ file \\\"local/bomb.tpl\\\" }}");
    rig.run_job("twice.hcl", &changed);
    let status = rig.wait_job("twice", "the re-render to fail", |j| {
        events(j, "template")
            .iter()
            .any(|e| e.message.starts_with("cannot render the new templates"))
    });
    let failed = events(&status, "template");
    assert!(
        failed
            .iter()
            .any(|e| bomb_failed(&e.message) || e.message.contains("template \"local/out\"")),
        "{failed:?}"
    );
    // The task runs on, on the files it had; the agent answers.
    let task = rig.task("twice", &allocs[0]);
    assert_eq!((task.state.as_str(), task.pid), ("running", pid));
    assert_eq!(
        fs::read_to_string(task_dir.join("local/out")).unwrap(),
        "ok"
    );
    assert!(rig.agent.try_status().is_ok());
    rig.stop("twice");
}

/// The CPU time process `pid` has used, in clock ticks (user and system).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(end) = stat.rfind(')') else { return 0 };
    let fields: Vec<&str> = stat[end + 1..].split_whitespace().collect();
    // Fields 14 and 15 (utime, stime); `fields` starts at field 3.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    tick(11) + tick(12)
}

#[test]
fn a_rendering_helper_killed_fails_the_start_naming_the_render() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    // Renders until the engine's step bound, seconds of work: long enough
    // to be killed in the middle of it.
    let job = memory_bomb()
        .replace("hog", "slow")
        .replace(&"x".repeat(10 * 1024), "");
    let allocs = rig.run_job("slow.hcl", &job);
    let start = std::time::Instant::now();
    let helper = loop {
        // Past its setup (reading a few KiB): rendering, on the CPU.
        if let Some(&pid) = helpers_of(&allocs[0]).iter().find(|p| cpu_ticks(**p) >= 10) {
            break pid;
        }
        assert!(
            start.elapsed() < WAIT,
            "no helper renders for {}",
            allocs[0]
        );
        thread::yield_now();
    };
    // SAFETY: kill(2) with plain integers.
    let killed = unsafe { libc::kill(helper as libc::pid_t, libc::SIGKILL) };
    assert_eq!(killed, 0);
    let status = rig.wait_job("slow", "the start to fail", |j| j.status == "dead");
    let failed = events(&status, "failed");
    assert!(
        failed.iter().any(|e| e
            .message
            .contains("template render crashed: killed by signal 9 (SIGKILL)")),
        "{status:#?}"
    );
    assert!(rig.agent.try_status().is_ok());
}
