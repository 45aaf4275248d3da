//! The root of an `exec` task, as Nomad's exec driver builds it: what the
//! task sees at `/`, what a task running as `nobody` can reach, Nomad's
//! `chroot_env`, a block volume's device node, and `raw_exec`, which keeps
//! the host's root.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::mount::MountInfo;

use super::{alloc_processes, consumer, task_mounts, Rig, USAGE, USAGE_RO};
use crate::harness::{text, WAIT};
use crate::util::{mounts_under, require_root};

/// A job of one exec task running `script` under `sh -c`; `task_extra`
/// goes into the task block, `group_extra` into the group.
pub(crate) fn shell_job(name: &str, script: &str, group_extra: &str, task_extra: &str) -> String {
    format!(
        r#"
job "{name}" {{
  type = "batch"
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    {group_extra}
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
      }}
      {task_extra}
    }}
  }}
}}
"#
    )
}

/// Waits until the task's stdout holds `marker`; the whole log.
#[track_caller]
pub(super) fn wait_for_log(rig: &Rig, alloc: &str, marker: &str) -> String {
    let start = Instant::now();
    loop {
        let log = rig.ok(&["alloc", "logs", alloc, "t"]);
        if log.contains(marker) {
            return log;
        }
        if start.elapsed() > WAIT {
            let err = rig.ok(&["alloc", "logs", "-stderr", alloc, "t"]);
            panic!("no {marker:?} in the task's log within {WAIT:?}:\n{log}\nstderr:\n{err}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_exec_task_runs_in_a_root_of_its_own() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let script = "\
for p in /local /alloc /secrets /tmp /proc/self /dev/pts /dev/shm; do test -d $p || echo missing $p; done
for d in null zero full random urandom tty; do test -c /dev/$d || echo missing /dev/$d; done
head -c 4 /dev/zero | wc -c
echo $NOMAD_TASK_DIR $NOMAD_SECRETS_DIR $NOMAD_ALLOC_DIR $TMPDIR
touch /etc/x 2>/dev/null && echo etc-writable || echo etc-read-only
touch /usr/bin/x 2>/dev/null && echo usr-writable || echo usr-read-only
echo local > /local/f && echo alloc > /alloc/f && echo secret > /secrets/s
stat -c %a /secrets
echo ready
exec sleep 600";
    // A bare command name is found on the task's PATH, in its root.
    let hcl = shell_job("root", script, "", "").replace("\"/bin/sh\"", "\"sh\"");
    let allocs = rig.run_job("root.hcl", &hcl);
    let alloc = &allocs[0];
    let pid = rig.wait_running("root", alloc);
    let log = wait_for_log(&rig, alloc, "ready");
    assert_eq!(
        log,
        "4\n/local /secrets /alloc /tmp\netc-read-only\nusr-read-only\n700\nready\n"
    );

    // Its files: local/ and alloc/ are the task dir's and the alloc's on
    // the host; secrets/ is a tmpfs of its own namespace.
    let task_dir = rig.task_dir(alloc, "t");
    let alloc_dir = rig.agent.data_dir.join("alloc").join(alloc);
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    assert_eq!(
        fs::read_to_string(task_dir.join("local/f")).unwrap(),
        "local\n"
    );
    assert_eq!(
        fs::read_to_string(alloc_dir.join("alloc/f")).unwrap(),
        "alloc\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("secrets/s")).unwrap(),
        "secret\n"
    );
    assert!(!task_dir.join("secrets/s").exists());

    // Its mount table: the root and what it is built from, nothing of
    // the host's old root.
    let mounts = task_mounts(pid);
    let fs_type = |p: &str| mounts.get(Path::new(p)).map(|m| m.fs_type.clone());
    assert_eq!(fs_type("/dev").as_deref(), Some("tmpfs"));
    assert_eq!(fs_type("/dev/pts").as_deref(), Some("devpts"));
    assert_eq!(fs_type("/dev/shm").as_deref(), Some("tmpfs"));
    assert_eq!(fs_type("/proc").as_deref(), Some("proc"));
    assert_eq!(fs_type("/secrets").as_deref(), Some("tmpfs"));
    assert!(mounts.get(Path::new("/alloc")).is_some());
    assert!(mounts.get(Path::new("/")).is_some());
    for dir in ["/etc", "/usr"] {
        let m = mounts.get(Path::new(dir)).expect("chroot_env is bound");
        assert!(m.is_read_only(), "{dir} is read-only: {m:?}");
    }
    let agent_dir = &rig.agent.dir.path;
    assert!(
        mounts
            .entries()
            .iter()
            .all(|m| !m.mount_point.starts_with(agent_dir)),
        "the old root is detached: {:#?}",
        mounts.entries()
    );
    // None of it on the host.
    assert_eq!(
        MountInfo::read().unwrap().under(&task_dir).count(),
        0,
        "the host's mount table shows nothing of the task"
    );

    rig.stop("root");
    assert!(alloc_processes(alloc).is_empty());
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
    assert!(fs::read_dir(task_dir.join("secrets"))
        .unwrap()
        .next()
        .is_none());
}

#[test]
fn a_task_as_nobody_reads_its_read_only_volume_and_nothing_more() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let volume_dir = rig.backing.join("volumes/v1");
    fs::set_permissions(&volume_dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(volume_dir.join("seed.txt"), "seed\n").unwrap();
    fs::set_permissions(
        volume_dir.join("seed.txt"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();

    // Another task, as root, with a secret.
    let keeper = rig.run_job(
        "keeper.hcl",
        &shell_job(
            "keeper",
            "echo top secret > /secrets/token && echo ready && exec sleep 600",
            "",
            "",
        ),
    );
    let keeper_pid = rig.wait_running("keeper", &keeper[0]);
    wait_for_log(&rig, &keeper[0], "ready");
    assert_eq!(
        fs::read_to_string(format!("/proc/{keeper_pid}/root/secrets/token")).unwrap(),
        "top secret\n"
    );

    let socket = rig.agent.socket.display().to_string();
    let script = format!(
        "\
id -u
cat /data/seed.txt
touch /data/x 2>&1 | grep -o 'Read-only file system' || echo wrote
cat /proc/{keeper_pid}/root/secrets/token 2>&1 | grep -o 'Permission denied' || echo read-the-secret
cat /proc/[0-9]*/root/secrets/token 2>/dev/null || echo no-secret
ls /proc/[0-9]*/root{socket} 2>/dev/null || echo no-socket-through-proc
test -e {socket} && echo socket || echo no-socket
echo done
exec sleep 600"
    );
    // In the host's PID namespace, where the keeper's root is in its /proc:
    // its permissions are what keep the secret.
    let hcl = consumer("reader", &script, "", true)
        .replace(
            "driver = \"exec\"",
            "driver = \"exec\"\n      user   = \"nobody\"",
        )
        .replace("config {", "config {\n        pid_mode = \"host\"");
    let reader = rig.run_job("reader.hcl", &hcl);
    let alloc = &reader[0];
    let pid = rig.wait_running("reader", alloc);
    let log = {
        let start = Instant::now();
        loop {
            let log = rig.ok(&["alloc", "logs", alloc, "main"]);
            if log.contains("done") || start.elapsed() > WAIT {
                break log;
            }
            thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(
        log,
        "65534\nseed\nRead-only file system\nPermission denied\nno-secret\nno-socket-through-proc\nno-socket\ndone\n"
    );
    assert!(task_mounts(pid)
        .get(Path::new("/data"))
        .unwrap()
        .is_read_only());
    assert!(rig.publish_path(alloc, USAGE_RO).exists());
    assert!(!volume_dir.join("x").exists());

    rig.stop("reader");
    rig.stop("keeper");
    rig.wait_no_mounts_left();
}

#[test]
fn chroot_env_in_the_agent_config_replaces_nomads_default() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare_with_config(
        r#"
chroot_env {
  "/usr"   = "/usr"
  "/bin"   = "/bin"
  "/lib"   = "/lib"
  "/lib64" = "/lib64"
  "/etc"   = "/host-etc"
}
"#,
    );
    let script = "\
test -e /etc/passwd && echo etc || echo no-etc
test -f /host-etc/passwd && echo host-etc
test -e /sbin && echo sbin || echo no-sbin
echo done";
    let allocs = rig.run_job("chroot.hcl", &shell_job("chroot", script, "", ""));
    rig.wait_job("chroot", "the task to finish", |j| {
        j.allocs[0].status == "complete"
    });
    assert_eq!(
        rig.ok(&["alloc", "logs", &allocs[0], "t"]),
        "no-etc\nhost-etc\nno-sbin\ndone\n"
    );
    // A volume cannot be placed inside what chroot_env binds read-only.
    let hcl = shell_job(
        "inside",
        "true",
        "volume \"v\" {\n      type   = \"host\"\n      source = \"scratch\"\n    }",
        "volume_mount {\n        volume      = \"v\"\n        destination = \"/host-etc/app\"\n      }",
    );
    let scratch = rig.agent.dir.mkdir("scratch");
    let mut config = crate::harness::config_text(&rig.agent.data_dir, &[]);
    config.push_str(&format!(
        "chroot_env {{\n  \"/etc\" = \"/host-etc\"\n}}\nhost_volume \"scratch\" {{\n  path = {:?}\n}}\n",
        scratch.display().to_string()
    ));
    rig.agent.write_config(&config);
    rig.agent.sighup();
    let start = Instant::now();
    let out = loop {
        let out = rig.run_job_output("inside.hcl", &hcl);
        if !text(&out).contains("no host_volume") || start.elapsed() > WAIT {
            break out;
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(
            "volume_mount \"v\": destination \"/host-etc/app\" is inside /host-etc, which chroot_env binds read-only from the host's /etc"
        ),
        "{}",
        text(&out)
    );
}

#[test]
fn a_block_volume_is_a_device_file_at_its_destination() {
    if !require_root() {
        return;
    }
    // The hostpath plugin (strict) serves block volumes on loop devices;
    // its publish path is a device node, bound onto a file in the root.
    let rig = crate::volume_util::Rig::start();
    let spec = format!(
        "id        = \"blk\"\nname      = \"blk\"\ntype      = \"csi\"\nplugin_id = {:?}\n\
         capacity_min = \"16MiB\"\n\
         capability {{\n  access_mode     = \"single-node-writer\"\n  attachment_mode = \"block-device\"\n}}\n",
        crate::volume_util::PLUGIN
    );
    crate::volume_util::connect(&rig.agent)
        .volume_create("blk.hcl", &spec)
        .unwrap_or_else(|err| panic!("volume create: {err}"));
    let hcl = shell_job(
        "block",
        "test -b /srv/blk && echo block; printf csi-agent | dd of=/srv/blk bs=9 seek=100 conv=notrunc,fsync 2>/dev/null; dd if=/srv/blk bs=9 skip=100 count=1 2>/dev/null; echo; echo done; exec sleep 600",
        "volume \"disk\" {\n      type            = \"csi\"\n      source          = \"blk\"\n      access_mode     = \"single-node-writer\"\n      attachment_mode = \"block-device\"\n    }",
        "volume_mount {\n        volume      = \"disk\"\n        destination = \"/srv/blk\"\n      }",
    );
    let file = rig.agent.dir.join("block.hcl");
    fs::write(&file, hcl).unwrap();
    let out = rig.agent.cli(&["job", "run", &file.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let client = crate::volume_util::connect(&rig.agent);
    let (alloc, pid) = {
        let start = Instant::now();
        loop {
            let job = client.job_status("block").unwrap().jobs.remove(0);
            let a = &job.allocs[0];
            if a.tasks[0].state == "running" {
                break (a.id.clone(), a.tasks[0].pid);
            }
            assert!(start.elapsed() < WAIT, "the task did not start: {job:#?}");
            thread::sleep(Duration::from_millis(20));
        }
    };
    let log = {
        let start = Instant::now();
        loop {
            let out = rig.agent.cli(&["alloc", "logs", &alloc, "t"]);
            let log = String::from_utf8_lossy(&out.stdout).into_owned();
            if log.contains("done") || start.elapsed() > WAIT {
                break log;
            }
            thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(log, "block\ncsi-agent\ndone\n");
    assert!(task_mounts(pid).get(Path::new("/srv/blk")).is_some());
    // The mount point in the task dir is a regular file, not a directory,
    // and the host's mount table does not show it.
    let task_dir = rig.agent.data_dir.join("alloc").join(&alloc).join("t");
    assert!(fs::symlink_metadata(task_dir.join("srv/blk"))
        .unwrap()
        .is_file());
    assert_eq!(MountInfo::read().unwrap().under(&task_dir).count(), 0);

    let out = rig.agent.cli(&["job", "stop", "block"]);
    assert!(out.status.success(), "{}", text(&out));
    let start = Instant::now();
    while crate::volume_util::volume(&rig.agent, "blk")
        .claims
        .iter()
        .any(|c| c.alloc_id == alloc)
        || !crate::volume_util::volume(&rig.agent, "blk")
            .past_claims
            .is_empty()
    {
        assert!(start.elapsed() < WAIT, "the claim was not released");
        thread::sleep(Duration::from_millis(20));
    }
    let start = Instant::now();
    while !mounts_under(&rig.agent.data_dir).is_empty() {
        assert!(
            start.elapsed() < WAIT,
            "mounts left: {:?}",
            mounts_under(&rig.agent.data_dir)
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn raw_exec_runs_on_the_host_root_and_takes_no_volume_mounts() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let control = rig.agent.socket.display().to_string();
    let agent_dir = rig.agent.dir.path.display().to_string();
    let script = format!(
        "pwd; echo $NOMAD_TASK_DIR; test -d {agent_dir} && echo host; test -S {control} && echo socket || echo no-socket"
    );
    let hcl = shell_job("raw", &script, "", "").replace("\"exec\"", "\"raw_exec\"");
    let allocs = rig.run_job("raw.hcl", &hcl);
    rig.wait_job("raw", "the task to finish", |j| {
        j.allocs[0].status == "complete"
    });
    let task_dir = rig.task_dir(&allocs[0], "t");
    assert_eq!(
        rig.ok(&["alloc", "logs", &allocs[0], "t"]),
        format!(
            "{}\n{}\nhost\nno-socket\n",
            task_dir.display(),
            task_dir.join("local").display()
        )
    );
    // The control socket is still there for everyone else.
    assert!(rig.agent.try_status().is_ok());

    let hcl = shell_job(
        "rawvol",
        "true",
        "volume \"v\" {\n      type   = \"host\"\n      source = \"scratch\"\n    }",
        "volume_mount {\n        volume      = \"v\"\n        destination = \"/data\"\n      }",
    )
    .replace("\"exec\"", "\"raw_exec\"");
    let out = rig.run_job_output("rawvol.hcl", &hcl);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rawvol.hcl:19:7: volume_mount in task \"t\": task driver \"raw_exec\" does not support volume mounts"),
        "{err}"
    );
    let jobs = rig.client().job_status("").unwrap().jobs;
    assert_eq!(jobs.len(), 1, "the refused job leaves no trace: {jobs:?}");
    assert_eq!(mounts_under(&rig.agent.data_dir), Vec::<PathBuf>::new());
}

#[test]
fn a_plugin_task_gets_nomads_directory_contract() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let alloc = rig.job("plugin").allocs[0].id.clone();
    let pid = rig.task("plugin", &alloc).pid;
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let data_dir = &rig.agent.data_dir;
    // Its socket in mount_dir (/csi), as CSI_ENDPOINT says; the agent
    // reaches it in the alloc's socket dir.
    assert!(root.join("csi/csi.sock").exists());
    assert!(data_dir
        .join("plugins")
        .join(&alloc)
        .join("csi.sock")
        .exists());
    let environ = fs::read(format!("/proc/{}/environ", super::task_process(pid))).unwrap();
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|e| e == b"CSI_ENDPOINT=unix:///csi/csi.sock"),
        "{}",
        String::from_utf8_lossy(&environ)
    );
    // Nothing of the data dir at its host path.
    assert!(!root.join(data_dir.strip_prefix("/").unwrap()).exists());
    let status = rig.ok(&["plugin", "status", "hp"]);
    assert!(status.contains("under /local/csi"), "{status}");
    let mounts = task_mounts(pid);
    for dir in ["/csi", "/local/csi"] {
        let m = mounts.get(Path::new(dir)).expect("bound into the root");
        assert!(
            m.shared_peer_group().is_some(),
            "{dir} is bidirectional: {m:?}"
        );
    }

    // A volume: the plugin stages and publishes under /local/csi in its
    // root, which are the agent's csi/hp/... on the host.
    let allocs = rig.run_job("app.hcl", &consumer("app", "sleep 600", "", false));
    rig.wait_running("app", &allocs[0]);
    let staging = data_dir.join("csi/hp/staging/v1");
    let publish = rig.publish_path(&allocs[0], USAGE);
    let in_plugin =
        |p: &Path| Path::new("/local/csi").join(p.strip_prefix(data_dir.join("csi/hp")).unwrap());
    let host = MountInfo::read().unwrap();
    let mounts = task_mounts(pid);
    for path in [&staging, &publish] {
        assert!(host.get(path).is_some(), "{} on the host", path.display());
        assert!(
            mounts.get(&in_plugin(path)).is_some(),
            "{} in the plugin",
            in_plugin(path).display()
        );
    }
    let calls = rig.ok(&["alloc", "logs", "-stderr", &alloc, "hostpath"]);
    assert!(
        calls.contains(&format!("{}", in_plugin(&staging).display())),
        "{calls}"
    );
    assert!(!calls.contains(&data_dir.display().to_string()), "{calls}");
    rig.stop("app");
    rig.wait_no_mounts_left();
    rig.stop("plugin");
}

#[test]
fn a_plugin_task_may_choose_its_mount_dir_and_base_dir() {
    if !require_root() {
        return;
    }
    let rig = Rig::start();
    let job = rig.plugin_job("3", "1s").replace(
        "health_timeout = \"10s\"",
        "health_timeout = \"10s\"\n        mount_dir              = \"/run/csi\"\n        stage_publish_base_dir = \"/var/lib/csi\"",
    );
    let new = rig.run_job("plugin.hcl", &job);
    rig.wait_job("plugin", "the new plugin alloc to take over", |j| {
        j.allocs.iter().filter(|a| a.status == "running").count() == 1
            && j.allocs
                .iter()
                .any(|a| a.id == new[0] && a.status == "running")
    });
    rig.wait_plugin_healthy();
    let pid = rig.task("plugin", &new[0]).pid;
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    assert!(root.join("run/csi/csi.sock").exists());
    let allocs = rig.run_job(
        "app.hcl",
        &consumer(
            "app",
            "echo hello > /data/out.txt; exec sleep 600",
            "",
            false,
        ),
    );
    rig.wait_running("app", &allocs[0]);
    let out = rig.backing.join("volumes/v1/out.txt");
    let start = Instant::now();
    // The shell creates the file before it writes: wait for the line.
    while fs::read_to_string(&out).ok().as_deref() != Some("hello\n") && start.elapsed() < WAIT {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fs::read_to_string(&out).unwrap(), "hello\n");
    assert!(task_mounts(pid)
        .get(Path::new("/var/lib/csi/staging/v1"))
        .is_some());
    rig.stop("app");
    rig.wait_no_mounts_left();
    rig.stop("plugin");
}

#[test]
fn a_plugin_tasks_dirs_and_socket_are_checked_at_job_run() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let plugin = |extra: &str, env: &str| {
        format!(
            r#"
job "p" {{
  group "g" {{
    task "t" {{
      driver = "exec"
      {env}
      config {{
        command = "/bin/sleep"
        args    = ["600"]
      }}
      csi_plugin {{
        id   = "p"
        type = "node"
        {extra}
      }}
    }}
  }}
}}
"#
        )
    };
    let refused = |file: &str, hcl: &str, needle: &str| {
        let out = rig.run_job_output(file, hcl);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            text(&out).contains(needle),
            "no {needle:?} in {}",
            text(&out)
        );
    };
    refused(
        "dev.hcl",
        &plugin("mount_dir = \"/dev/csi\"", ""),
        "csi_plugin mount_dir: destination \"/dev/csi\" is inside /dev, the task's private /dev",
    );
    refused(
        "endpoint.hcl",
        &plugin("", "env {\n        CSI_ENDPOINT = \"unix:///tmp/plugin.sock\"\n      }"),
        "CSI_ENDPOINT /tmp/plugin.sock is not in mount_dir /csi, where the agent finds the plugin's socket",
    );
    // A socket of its own name in mount_dir is fine.
    let out = rig.run_job_output(
        "named.hcl",
        &plugin(
            "",
            "env {\n        CSI_ENDPOINT = \"unix:///csi/p.sock\"\n      }",
        ),
    );
    assert!(out.status.success(), "{}", text(&out));
    rig.ok(&["job", "stop", "p"]);
}

/// Runs a root task that plants `plant` (shell) in its root and exits 1;
/// its one restart must fail with `why`, leaving the host alone.
fn planted_link_fails_the_restart(plant: &str, why: &str) {
    let rig = Rig::bare();
    let script = format!("{plant}; exit 1");
    let hcl = shell_job("plant", &script, "", "").replace(
        "attempts = 0\n      mode     = \"fail\"",
        "attempts = 1\n      delay    = \"100ms\"\n      mode     = \"fail\"",
    );
    rig.run_job("plant.hcl", &hcl);
    let job = rig.wait_job("plant", "the alloc to fail", |j| {
        j.allocs[0].status == "failed"
    });
    let events: Vec<&str> = job.allocs[0].tasks[0]
        .events
        .iter()
        .map(|e| e.message.as_str())
        .collect();
    assert!(
        events.iter().any(|e| e.contains(why)),
        "no {why:?} in {events:#?}"
    );
}

#[test]
fn a_symlink_a_task_leaves_in_its_dirs_is_not_followed_by_the_agent() {
    if !require_root() {
        return;
    }
    let victims = crate::util::TestDir::new();
    let dir = victims.mkdir("dir");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    planted_link_fails_the_restart(
        &format!("rm -rf /local && ln -s {} /local", dir.display()),
        "local is not a directory (a symlink?)",
    );
    let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "the agent did not chmod the link's target");

    let file = victims.join("file");
    fs::write(&file, "precious\n").unwrap();
    planted_link_fails_the_restart(
        &format!("ln -sf {} /logs/stdout", file.display()),
        "cannot open the log",
    );
    assert_eq!(fs::read_to_string(&file).unwrap(), "precious\n");
}

#[test]
fn a_task_is_stopped_with_its_kill_signal_not_sigterm() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let script = "trap 'echo got INT; exit 0' INT; trap 'echo got TERM; exit 0' TERM; \
                  echo ready; while :; do sleep 0.1; done";
    let job = shell_job(
        "signalled",
        script,
        "",
        "kill_signal  = \"SIGINT\"\n      kill_timeout = \"30s\"",
    );
    rig.run_job("signalled.hcl", &job);
    let alloc = rig.job("signalled").allocs[0].id.clone();
    rig.wait_running("signalled", &alloc);
    wait_for_log(&rig, &alloc, "ready");
    rig.ok(&["job", "stop", "signalled"]);
    let log = wait_for_log(&rig, &alloc, "got ");
    assert!(
        log.contains("got INT") && !log.contains("got TERM"),
        "{log}"
    );
    let job = rig.wait_job("signalled", "the job to stop", |j| j.status == "dead");
    let events = &job.allocs[0].tasks[0].events;
    assert!(
        events
            .iter()
            .any(|e| e.message == "sent SIGINT; SIGKILL in 30s"),
        "{events:#?}"
    );
    // It ended by its own trap, not by the SIGKILL after its timeout.
    assert!(!events.iter().any(|e| e.kind == "killed"), "{events:#?}");
}

#[test]
fn a_task_s_kill_signal_waits_for_its_shutdown_delay() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let script = "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.1; done";
    let job = shell_job("delayed", script, "", "shutdown_delay = \"1s\"");
    rig.run_job("delayed.hcl", &job);
    let alloc = rig.job("delayed").allocs[0].id.clone();
    rig.wait_running("delayed", &alloc);
    wait_for_log(&rig, &alloc, "ready");
    rig.ok(&["job", "stop", "delayed"]);
    wait_for_log(&rig, &alloc, "got TERM");
    let job = rig.wait_job("delayed", "the job to stop", |j| j.status == "dead");
    let events = &job.allocs[0].tasks[0].events;
    let at = |message: &str| {
        events
            .iter()
            .find(|e| e.message.starts_with(message))
            .unwrap_or_else(|| panic!("no {message:?} in {events:#?}"))
            .unix_ms
    };
    let waited = at("sent SIGTERM") - at("SIGTERM in 1s (its shutdown_delay)");
    // Never before the delay is over.
    assert!(waited >= 1000, "the signal went {waited} ms after the stop");
}
