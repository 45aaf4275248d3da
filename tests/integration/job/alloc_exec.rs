//! `alloc exec` into real tasks: an exec task's root and PID namespace, a
//! raw_exec task's environment, stdin, stdout and stderr apart, exit
//! codes, a TTY driven through a pty the test holds, and the bound on
//! sessions.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Output, Stdio};

use csi_agent::api::client::{self, AgentClient};
use csi_agent::grpc::block_on;
use csi_agent::proto::agent as api;
use futures_util::{SinkExt as _, StreamExt as _};

use super::root::{shell_job, wait_for_log};
use super::Rig;
use crate::harness::text;
use crate::util::{bin, require_root};

/// A job of one raw_exec task running `script` under `sh -c`, with
/// `MARK=raw` in its environment.
fn raw_job(name: &str, script: &str) -> String {
    shell_job(name, script, "", "env {\n        MARK = \"raw\"\n      }")
        .replace("driver = \"exec\"", "driver = \"raw_exec\"")
}

/// Starts `hcl`'s one task and waits until it has logged `ready`: its
/// alloc's ID.
fn running(rig: &Rig, file: &str, hcl: &str) -> String {
    let alloc = rig.run_job(file, hcl).remove(0);
    wait_for_log(rig, &alloc, "ready");
    alloc
}

/// `csi-agent alloc exec ARGS` with `stdin` piped in.
pub(super) fn exec(rig: &Rig, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(bin())
        .arg("alloc")
        .arg("exec")
        .args(args)
        .env(
            client::ADDRESS_ENV,
            format!("unix://{}", rig.agent.socket.display()),
        )
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A CLI that never ends fails the test rather than hanging it.
    let pid = child.id();
    let (done, watched) = crossbeam_channel::bounded::<()>(0);
    let watchdog = std::thread::spawn(move || {
        let waited = watched.recv_timeout(3 * crate::harness::WAIT);
        if waited == Err(crossbeam_channel::RecvTimeoutError::Timeout) {
            // SAFETY: kill(2) of the CLI this test started and has not reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    });
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    drop(done);
    watchdog.join().unwrap();
    out
}

pub(super) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn exec_into_an_exec_task_runs_in_its_root_and_pid_namespace() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = running(
        &rig,
        "ex.hcl",
        &shell_job("ex", "echo ready; exec sleep 600", "", ""),
    );
    let host_dir = rig.agent.dir.path.display().to_string();
    let script = format!(
        "test -d /local && echo has-local; test -e {host_dir:?} && echo sees-host; \
         tr '\\0' ' ' < /proc/1/cmdline; echo; id -u"
    );
    let out = exec(&rig, &["-task", "t", &alloc[..8], "sh", "-c", &script], b"");
    assert!(out.status.success(), "{}", text(&out));
    let seen = stdout(&out);
    assert!(seen.contains("has-local"), "{seen}");
    assert!(!seen.contains("sees-host"), "{seen}");
    assert!(
        seen.contains("sleep 600"),
        "PID 1 is not the task's:\n{seen}"
    );
    // Without -task: the alloc's one task. Output apart, and the code.
    let out = exec(
        &rig,
        &[&alloc, "sh", "-c", "echo out; echo err >&2; exit 3"],
        b"",
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(stdout(&out), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    // A command the task's root does not have.
    let out = exec(&rig, &[&alloc, "no-such-command-csi"], b"");
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
}

#[test]
fn exec_into_a_raw_exec_task_has_its_env_and_passes_stdin() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = running(
        &rig,
        "raw.hcl",
        &raw_job("raw", "echo ready; exec sleep 600"),
    );
    let out = exec(&rig, &[&alloc, "sh", "-c", "echo $MARK; pwd"], b"");
    assert!(out.status.success(), "{}", text(&out));
    let seen = stdout(&out);
    assert!(seen.starts_with("raw\n"), "{seen}");
    assert!(seen.contains(&alloc), "the task's dir is the cwd:\n{seen}");
    let piped = b"line one\nline two\n".repeat(2000);
    let out = exec(&rig, &[&alloc, "cat"], &piped);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(out.stdout, piped);
    // -i=false: the command's stdin is empty at once.
    let out = exec(&rig, &["-i=false", &alloc, "cat"], b"not passed");
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "{}",
        text(&out)
    );
    let out = exec(&rig, &[&alloc, "no-such-command-csi"], b"");
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    // Unknown alloc and task.
    let out = exec(&rig, &["ffffffff", "true"], b"");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no alloc"),
        "{}",
        text(&out)
    );
    let out = exec(&rig, &["-task", "nope", &alloc, "true"], b"");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no task"),
        "{}",
        text(&out)
    );
}

/// A pseudo-terminal pair of `rows` x `cols`: the test's master, and the
/// slave the CLI gets as its stdin, stdout and stderr.
pub(super) fn pty(rows: u16, cols: u16) -> (File, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: live out pointers, no name or termios, a live winsize.
    let ret = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(ret, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty opened both; each is owned once.
    unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// Reads what `master` has (waiting for some) into `seen`; false at its
/// end (EIO once no one holds the slave).
pub(super) fn read_chunk(master: &mut File, seen: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 4096];
    match master.read(&mut buf) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            seen.extend_from_slice(&buf[..n]);
            true
        }
    }
}

/// Reads until `seen` holds `marker` (true) or `master` ends (false).
pub(super) fn read_until(master: &mut File, seen: &mut Vec<u8>, marker: &str) -> bool {
    while !String::from_utf8_lossy(seen).contains(marker) {
        if !read_chunk(master, seen) {
            return false;
        }
    }
    true
}

/// Grows the caller's terminal (`master`'s pty) to 50x120 and tells the
/// CLI `child` with SIGWINCH, then waits until the command in the task
/// prints "resized": typing a line into `typist` (which the terminal
/// echoes) each round, so that the read has something to return.
pub(super) fn resize_and_wait(
    child: &std::process::Child,
    master: &mut File,
    typist: &mut File,
    seen: &mut Vec<u8>,
) {
    let size = libc::winsize {
        ws_row: 50,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one live winsize; the fd is the test's.
    let resized = unsafe { libc::ioctl(typist.as_raw_fd(), libc::TIOCSWINSZ, &size) };
    assert_eq!(resized, 0);
    // SAFETY: kill(2) of the CLI this test started and has not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGWINCH) };
    let deadline = std::time::Instant::now() + crate::harness::WAIT;
    while !String::from_utf8_lossy(seen).contains("resized") {
        assert!(
            std::time::Instant::now() < deadline,
            "the new size did not reach the command:\n{}",
            String::from_utf8_lossy(seen)
        );
        typist.write_all(b"\n").unwrap();
        if !read_chunk(master, seen) {
            break;
        }
    }
}

#[test]
fn exec_with_a_tty_has_a_terminal_of_the_callers_size() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = running(
        &rig,
        "ex.hcl",
        &shell_job("tty", "echo ready; exec sleep 600", "", ""),
    );
    let (mut master, slave) = pty(37, 101);
    // Each line typed, it looks at its size again, until it is 50x120.
    let script = "tty; stty size;         while read x; do stty size | grep -qx '50 120' && break; done; echo resized; exit 5";
    let mut cli = Command::new(bin());
    cli.args(["alloc", "exec", &alloc, "sh", "-c", script])
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
    let mut seen = Vec::new();
    assert!(
        read_until(&mut master, &mut seen, "37 101"),
        "not the caller's size:\n{}",
        String::from_utf8_lossy(&seen)
    );
    // The caller's terminal grows: SIGWINCH tells the CLI, which passes
    // the size on.
    let mut typist = master.try_clone().unwrap();
    resize_and_wait(&child, &mut master, &mut typist, &mut seen);
    // The rest, until the CLI's end closes the last slave (EIO).
    read_until(&mut master, &mut seen, "never printed");
    let status = child.wait().unwrap();
    let seen = String::from_utf8_lossy(&seen);
    assert_eq!(status.code(), Some(5), "{seen}");
    assert!(seen.contains("/dev/pts/"), "no pty:\n{seen}");
}

#[test]
fn exec_sessions_are_bounded_and_a_caller_gone_ends_its_command() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = running(
        &rig,
        "raw.hcl",
        &raw_job("bound", "echo ready; exec sleep 600"),
    );
    let baseline = super::alloc_processes(&alloc).len();
    let client = AgentClient::connect(&rig.agent.socket).unwrap();
    let start = |command: &str| api::AllocExecInput {
        start: protobuf::MessageField::some(api::AllocExecStart {
            alloc_id: alloc.clone(),
            command: vec!["sh".into(), "-c".into(), command.into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut open = Vec::new();
    for i in 0..csi_agent::api::MAX_SESSIONS {
        let (mut tx, mut rx) = client.alloc_exec().unwrap();
        let marker = format!("echo session-{i}; exec sleep 600");
        block_on(tx.send((start(&marker), grpcio::WriteFlags::default()))).unwrap();
        // Its first output: the session runs.
        let first = block_on(rx.next()).unwrap().unwrap();
        assert_eq!(first.stdout, format!("session-{i}\n").as_bytes());
        open.push((tx, rx));
    }
    let (mut tx, mut rx) = client.alloc_exec().unwrap();
    let _ = block_on(tx.send((start("echo one-too-many"), grpcio::WriteFlags::default())));
    let err = block_on(rx.next()).unwrap().unwrap_err();
    assert!(err.to_string().contains("MAX_SESSIONS"), "{err}");
    // Callers that go away take their commands with them, and free their
    // places.
    for (mut tx, _) in open.drain(..) {
        tx.cancel();
    }
    let wait = std::time::Instant::now();
    loop {
        let out = exec(&rig, &[&alloc, "sh", "-c", "echo back"], b"");
        if out.status.success() {
            assert_eq!(stdout(&out), "back\n");
            break;
        }
        assert!(wait.elapsed() < crate::harness::WAIT, "{}", text(&out));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The sessions' commands carry the task's environment: once their
    // callers are gone, only the task's own processes are left.
    let wait = std::time::Instant::now();
    loop {
        let left = super::alloc_processes(&alloc);
        if left.len() <= baseline {
            break;
        }
        assert!(
            wait.elapsed() < crate::harness::WAIT,
            "the sessions' commands outlived their callers: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
