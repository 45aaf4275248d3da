//! `alloc fs` on a real alloc: its dir listed as Nomad lists it, a task's
//! log printed, `-stat`, and no way out of the alloc dir.

use std::fs;

use super::root::{shell_job, wait_for_log};
use super::Rig;
use crate::harness::text;
use crate::util::require_root;

#[test]
fn alloc_fs_lists_prints_and_stats_beneath_the_alloc_dir() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = shell_job(
        "fs",
        "echo ready; echo kept > /local/note; exec sleep 600",
        "",
        "",
    );
    let alloc = rig.run_job("fs.hcl", &hcl).remove(0);
    wait_for_log(&rig, &alloc, "ready");
    let listing = rig.ok(&["alloc", "fs", &alloc]);
    assert!(listing.starts_with("Mode"), "{listing}");
    assert!(listing.contains(" alloc/\n"), "{listing}");
    assert!(listing.contains(" t/\n"), "{listing}");
    let local = rig.ok(&["alloc", "fs", &alloc[..8], "t/local"]);
    assert!(local.contains(" note\n"), "{local}");
    assert_eq!(rig.ok(&["alloc", "fs", &alloc, "t/local/note"]), "kept\n");
    assert!(rig
        .ok(&["alloc", "fs", &alloc, "/t/logs/stdout"])
        .contains("ready"));
    let stat = rig.ok(&["alloc", "fs", "-stat", &alloc, "t/local/note"]);
    let row = stat.lines().nth(1).unwrap_or_default();
    assert!(
        row.starts_with("-rw") && row.contains(" 5 ") && row.ends_with("note"),
        "{stat}"
    );

    // A symlink the task (or anyone) left pointing out is not followed.
    let shared = rig.agent.data_dir.join("alloc").join(&alloc).join("alloc");
    std::os::unix::fs::symlink("/etc", shared.join("out")).unwrap();
    let out = rig
        .agent
        .cli(&["alloc", "fs", &alloc, "alloc/out/hostname"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("symlink"), "{}", text(&out));
    let out = rig.agent.cli(&["alloc", "fs", &alloc, "../.."]);
    assert!(!out.status.success(), "{}", text(&out));
    let listed = rig.ok(&["alloc", "fs", &alloc, "alloc"]);
    assert!(listed.contains("out -> /etc"), "{listed}");
    let out = rig.agent.cli(&["alloc", "fs", "ffffffff"]);
    assert!(text(&out).contains("no alloc"), "{}", text(&out));
    fs::remove_file(shared.join("out")).unwrap();
}

/// `csi-agent alloc fs ARGS` started, its stdout piped.
fn spawn_fs(rig: &Rig, args: &[&str]) -> std::process::Child {
    std::process::Command::new(crate::util::bin())
        .arg("alloc")
        .arg("fs")
        .args(args)
        .env(
            csi_agent::api::client::ADDRESS_ENV,
            format!("unix://{}", rig.agent.socket.display()),
        )
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn alloc_fs_tail_prints_the_last_lines_or_bytes() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = shell_job(
        "tail",
        "seq 1 30 > /local/lines; printf 'a\\nb\\nno-newline' > /local/open; echo ready; exec sleep 600",
        "",
        "",
    );
    let alloc = rig.run_job("tail.hcl", &hcl).remove(0);
    wait_for_log(&rig, &alloc, "ready");
    let last = |args: &[&str]| {
        let mut all = vec!["alloc", "fs"];
        all.extend_from_slice(args);
        all.push(&alloc);
        all.push("t/local/lines");
        rig.ok(&all)
    };
    let ten: String = (21..=30).map(|i| format!("{i}\n")).collect();
    assert_eq!(last(&["-tail"]), ten);
    assert_eq!(last(&["-tail", "-n", "3"]), "28\n29\n30\n");
    assert_eq!(last(&["-tail", "-n", "100"]).lines().count(), 30);
    assert_eq!(last(&["-tail", "-c", "6"]), "29\n30\n");
    assert_eq!(
        rig.ok(&["alloc", "fs", "-tail", "-n", "2", &alloc, "t/local/open"]),
        "b\nno-newline"
    );
    let out = rig
        .agent
        .cli(&["alloc", "fs", "-n", "2", &alloc, "t/local/lines"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let json = rig.ok(&["alloc", "fs", "-json", &alloc, "t/local"]);
    assert!(
        json.trim_start().starts_with('[') && json.contains("\"name\": \"lines\""),
        "{json}"
    );
    let json = rig.ok(&["alloc", "fs", "-stat", "-json", &alloc, "t/local/lines"]);
    assert!(json.contains("\"size\": 81"), "{json}");
}

#[test]
fn alloc_fs_follow_sees_appended_lines_and_ends_when_the_alloc_stops() {
    if !require_root() {
        return;
    }
    use std::io::{BufRead, BufReader};
    let rig = Rig::bare();
    let hcl = shell_job(
        "follow",
        "echo first > /alloc/data/log; echo ready; while [ ! -e /alloc/data/more ]; do sleep 0.05; done; echo second >> /alloc/data/log; exec sleep 600",
        "",
        "",
    );
    let alloc = rig.run_job("follow.hcl", &hcl).remove(0);
    wait_for_log(&rig, &alloc, "ready");
    let mut child = spawn_fs(&rig, &["-f", &alloc, "alloc/data/log"]);
    // A follow that never ends fails the test rather than hanging it.
    let pid = child.id();
    let (done, watched) = crossbeam_channel::bounded::<()>(0);
    let watchdog = std::thread::spawn(move || {
        if watched.recv_timeout(3 * crate::harness::WAIT)
            == Err(crossbeam_channel::RecvTimeoutError::Timeout)
        {
            // SAFETY: kill(2) of the CLI this test started and has not reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "first");
    let data = rig
        .agent
        .data_dir
        .join("alloc")
        .join(&alloc)
        .join("alloc/data");
    fs::write(data.join("more"), "").unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "second");
    // The alloc stops: the follow ends on its own.
    rig.ok(&["job", "stop", "follow"]);
    assert!(lines.next().is_none());
    let status = child.wait().unwrap();
    drop(done);
    watchdog.join().unwrap();
    assert!(status.success(), "{status:?}");

    // A symlink out of the alloc dir is not followed either.
    std::os::unix::fs::symlink("/etc/hostname", data.join("escape")).unwrap();
    let out = spawn_fs(&rig, &["-f", &alloc, "alloc/data/escape"])
        .wait_with_output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("symlink"), "{}", text(&out));
}

#[test]
fn follows_count_among_the_sessions_and_one_whose_caller_left_frees_its_place() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let hcl = shell_job("many", "echo ready; exec sleep 600", "", "");
    let alloc = rig.run_job("many.hcl", &hcl).remove(0);
    wait_for_log(&rig, &alloc, "ready");
    let mut follows: Vec<std::process::Child> = (0..8)
        .map(|_| spawn_fs(&rig, &["-f", &alloc, "t/logs/stdout"]))
        .collect();
    // Each has printed the log once it is admitted.
    for child in &mut follows {
        use std::io::Read;
        let mut first = [0u8; 5];
        if let Err(err) = child.stdout.as_mut().unwrap().read_exact(&mut first) {
            let mut said = String::new();
            let _ = child.stderr.as_mut().unwrap().read_to_string(&mut said);
            panic!("a follow printed no log ({err}): {said}");
        }
        assert_eq!(&first, b"ready");
    }
    let out = rig.agent.cli(&["alloc", "fs", &alloc]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("MAX_SESSIONS (8)"), "{}", text(&out));
    // A caller killed: its session ends at its next heartbeat at the
    // latest.
    let mut gone = follows.pop().unwrap();
    gone.kill().unwrap();
    gone.wait().unwrap();
    let start = std::time::Instant::now();
    loop {
        let out = rig.agent.cli(&["alloc", "fs", &alloc]);
        if out.status.success() {
            break;
        }
        assert!(
            start.elapsed() < csi_agent::api::FOLLOW_HEARTBEAT + crate::harness::WAIT,
            "{}",
            text(&out)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for mut child in follows {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
