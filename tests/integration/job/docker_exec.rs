//! `alloc exec` into docker tasks against a private engine ([`Dockerd`]):
//! the command runs in the task's container through the engine's exec
//! API, with its output apart, its stdin, its exit code, a TTY driven
//! through a pty the test holds, and its end when its caller goes away.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use csi_agent::api::client::{self, AgentClient};
use csi_agent::grpc::block_on;
use csi_agent::proto::agent as api;
use futures_util::{SinkExt as _, StreamExt as _};

use super::alloc_exec::{exec, pty, read_until, resize_and_wait, stdout};
use super::containers::{rig, script_job, BUSYBOX};
use super::root::wait_for_log;
use super::Rig;
use crate::dockerd::{require_docker, Dockerd};
use crate::harness::{text, POLL, WAIT};
use crate::util::{bin, TestDir};

/// Starts a service job of one docker task that logs `ready` and sleeps:
/// its alloc's ID.
fn sleeper(rig: &Rig, name: &str) -> String {
    let hcl = script_job(name, "service", "echo ready; exec sleep 600", "");
    let alloc = rig.run_job(&format!("{name}.hcl"), &hcl).remove(0);
    wait_for_log(rig, &alloc, "ready");
    alloc
}

#[test]
fn exec_into_a_docker_task_runs_in_its_container_with_stdin_and_exit_code() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    let alloc = sleeper(&rig, "dx");
    // The container's PID 1 is the task's.
    let out = exec(
        &rig,
        &[&alloc[..8], "sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline"],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout(&out).contains("sleep 600"), "{}", text(&out));
    // stdout and stderr apart (the engine's frames), and the exit code.
    let out = exec(
        &rig,
        &[
            "-task",
            "t",
            &alloc,
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(stdout(&out), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    // stdin piped through, its end closing the command's.
    let piped = b"line one\nline two\n".repeat(5000);
    let out = exec(&rig, &[&alloc, "cat"], &piped);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(out.stdout.len(), piped.len());
    assert!(out.stdout == piped);
    let out = exec(&rig, &["-i=false", &alloc, "cat"], b"not passed");
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "{}",
        text(&out)
    );
    // A command the image does not have: the engine's code for an exec it
    // cannot start (126 from docker 20.10, 127 from later engines), and
    // its message.
    let out = exec(&rig, &[&alloc, "no-such-command-csi"], b"");
    assert!(
        matches!(out.status.code(), Some(126 | 127)),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("not found"), "{}", text(&out));
    // A task that ran and stopped is refused, saying so.
    let hcl = script_job("done", "batch", "echo ready", "");
    let done = rig.run_job("done.hcl", &hcl).remove(0);
    rig.wait_job("done", "the batch task to finish", |j| {
        j.allocs.iter().all(|a| a.status == "complete")
    });
    let out = exec(&rig, &[&done, "true"], b"");
    assert!(!out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("is not running"), "{said}");
}

#[test]
fn exec_into_a_docker_task_with_a_tty_follows_the_callers_window() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    let alloc = sleeper(&rig, "dt");
    let (mut master, slave) = pty(37, 101);
    // It says it runs, then looks at its size once a line is typed
    // (the size is set before any stdin is written), then again at each
    // line until it is 50x120.
    let script = "tty; echo go; read x; stty size; \
         while read x; do stty size | grep -qx '50 120' && break; done; echo resized; exit 5";
    let mut cli = Command::new(bin());
    cli.args(["alloc", "exec", "-t", &alloc, "sh", "-c", script])
        .env(
            client::ADDRESS_ENV,
            format!("unix://{}", rig.agent.socket.display()),
        )
        .env_remove("RUST_LOG")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()));
    let mut child = cli.spawn().unwrap();
    drop(cli);
    drop(slave);
    // A CLI that never ends is killed, which ends the reads below (the
    // last slave closed) and fails the test rather than hanging it.
    let pid = child.id();
    let (done, watched) = crossbeam_channel::bounded::<()>(0);
    let watchdog = std::thread::spawn(move || {
        let waited = watched.recv_timeout(3 * WAIT);
        if waited == Err(crossbeam_channel::RecvTimeoutError::Timeout) {
            // SAFETY: kill(2) of the CLI this test started and has not reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    });
    let mut typist = master.try_clone().unwrap();
    let mut seen = Vec::new();
    assert!(
        read_until(&mut master, &mut seen, "go\r\n"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    typist.write_all(b"\n").unwrap();
    assert!(
        read_until(&mut master, &mut seen, "37 101"),
        "not the caller's size:\n{}",
        String::from_utf8_lossy(&seen)
    );
    resize_and_wait(&child, &mut master, &mut typist, &mut seen);
    read_until(&mut master, &mut seen, "never printed");
    let status = child.wait().unwrap();
    drop(done);
    watchdog.join().unwrap();
    let seen = String::from_utf8_lossy(&seen);
    assert_eq!(status.code(), Some(5), "{seen}");
    assert!(seen.contains("/dev/pts/"), "no pty:\n{seen}");
}

/// The host's processes whose command line is `sleep SECONDS`.
fn sleepers(seconds: &str) -> Vec<String> {
    let want = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// A proxy in front of an engine's socket that, while told to stall,
/// holds every exec inspect (`GET /.../exec/ID/json`) unanswered, as an
/// engine under load may: each connection's first request head is read,
/// then the connection is spliced through to the engine.
struct StallingEngine {
    socket: PathBuf,
    stall: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
    _dir: TestDir,
}

impl StallingEngine {
    fn start(engine: &Path) -> StallingEngine {
        let dir = TestDir::new();
        let socket = dir.join("engine.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let stall = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicBool::new(false));
        let (engine, flags) = (engine.to_path_buf(), (stall.clone(), closed.clone()));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if flags.1.load(Ordering::SeqCst) {
                    return;
                }
                let (engine, flags) = (engine.clone(), flags.clone());
                std::thread::spawn(move || splice(client, &engine, &flags.0, &flags.1));
            }
        });
        StallingEngine {
            socket,
            stall,
            closed,
            _dir: dir,
        }
    }
}

impl Drop for StallingEngine {
    fn drop(&mut self) {
        self.stall.store(false, Ordering::SeqCst);
        self.closed.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then ends.
        let _ = UnixStream::connect(&self.socket);
    }
}

/// Passes `client`'s connection through to `engine`, holding an exec
/// inspect while `stall` is set.
fn splice(mut client: UnixStream, engine: &Path, stall: &AtomicBool, closed: &AtomicBool) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let line = String::from_utf8_lossy(&head[..head.iter().position(|&b| b == b'\r').unwrap_or(0)])
        .into_owned();
    let inspect = line.starts_with("GET ") && line.contains("/exec/") && line.contains("/json ");
    while inspect && stall.load(Ordering::SeqCst) && !closed.load(Ordering::SeqCst) {
        std::thread::sleep(POLL);
    }
    let Ok(mut upstream) = UnixStream::connect(engine) else {
        return;
    };
    if upstream.write_all(&head).is_err() {
        return;
    }
    let (mut from_client, mut to_client) = (client.try_clone().unwrap(), client);
    let mut to_upstream = upstream.try_clone().unwrap();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_upstream);
        let _ = to_upstream.shutdown(Shutdown::Write);
    });
    let _ = std::io::copy(&mut upstream, &mut to_client);
    let _ = to_client.shutdown(Shutdown::Write);
}

#[test]
fn a_docker_exec_whose_caller_goes_away_is_killed_even_by_an_engine_slow_to_answer() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let engine = StallingEngine::start(&dockerd.socket);
    let rig = Rig::bare_with_config(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n}}\n",
        engine.socket.display()
    ));
    let alloc = sleeper(&rig, "dg");
    let client = AgentClient::connect(&rig.agent.socket).unwrap();
    let (mut tx, mut rx) = client.alloc_exec().unwrap();
    let start = api::AllocExecInput {
        start: protobuf::MessageField::some(api::AllocExecStart {
            alloc_id: alloc.clone(),
            command: vec!["sh".into(), "-c".into(), "echo up; exec sleep 777".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    block_on(tx.send((start, grpcio::WriteFlags::default()))).unwrap();
    let first = block_on(rx.next()).unwrap().unwrap();
    assert_eq!(first.stdout, b"up\n");
    // The shell prints before it execs the sleep: wait for the sleep.
    let deadline = Instant::now() + WAIT;
    while sleepers("777").is_empty() && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    assert_eq!(sleepers("777").len(), 1, "the exec's command runs");
    rig.agent
        .wait_for_log(&format!("pinned its process {}", sleepers("777")[0]), WAIT);
    // The engine answers no exec inspect from now on, for longer than
    // this test waits: the caller's leaving alone must end the command.
    engine.stall.store(true, Ordering::SeqCst);
    tx.cancel();
    let deadline = Instant::now() + WAIT;
    while !sleepers("777").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the exec outlived its caller: {:?}",
            sleepers("777")
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
