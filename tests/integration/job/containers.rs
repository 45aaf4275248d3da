//! The docker driver against a private engine ([`Dockerd`]): containers
//! started from images made offline, their output in `alloc logs`, their
//! exits through the restart policy, their volumes, plugins run from an
//! image, and re-adoption after the agent is killed.

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::mount::MountInfo;
use csi_agent::proto::agent::JobStatus;

use super::{Rig, PLUGIN_ID, VOLUME};
use crate::dockerd::{busybox_rootfs, require_docker, Dockerd};
use crate::harness::{healthy, unhealthy, WAIT};
use crate::util::{bin, NODE};

/// The image of the test's busybox.
pub(super) const BUSYBOX: &str = "csi-test/busybox:1";

/// A rig whose agent uses `dockerd`, with `extra` in its docker block.
pub(super) fn rig(dockerd: &Dockerd, extra: &str) -> Rig {
    Rig::bare_with_config(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n{extra}}}\n",
        dockerd.socket.display()
    ))
}

/// A job of one docker task running `script` under `sh -c` in the
/// busybox image; `task_extra` goes in the task block.
pub(super) fn script_job(name: &str, job_type: &str, script: &str, task_extra: &str) -> String {
    format!(
        r#"
job "{name}" {{
  type = "{job_type}"
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "docker"
      config {{
        image   = "{BUSYBOX}"
        command = "sh"
        args    = ["-c", {script:?}]
      }}
{task_extra}    }}
  }}
}}
"#
    )
}

/// Waits until every alloc of `job` is complete or failed.
#[track_caller]
fn wait_done(rig: &Rig, job: &str, what: &str) -> JobStatus {
    rig.wait_job(job, what, |j| {
        j.allocs
            .iter()
            .all(|a| a.status == "complete" || a.status == "failed")
    })
}

/// Waits until every alloc of `job` has failed.
#[track_caller]
fn wait_failed(rig: &Rig, job: &str, what: &str) -> JobStatus {
    rig.wait_job(job, what, |j| j.allocs.iter().all(|a| a.status == "failed"))
}

/// The containers of the agent of `rig` that the engine has.
fn containers_of(dockerd: &Dockerd, rig: &Rig) -> Vec<String> {
    let label = format!("csi-agent.data_dir={}", rig.agent.data_dir.display());
    dockerd
        .engine()
        .list(&label)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect()
}

#[test]
fn a_container_task_runs_sees_nomads_dirs_and_its_output_reaches_alloc_logs() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    let script = "echo out-$NOMAD_TASK_NAME; echo err >&2; test -d /local && test -d /alloc/data && test -d /secrets && echo dirs-ok";
    let allocs = rig.run_job("b.hcl", &script_job("b", "batch", script, ""));
    let status = wait_done(&rig, "b", "the batch task to finish");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    let stdout = rig.ok(&["alloc", "logs", &allocs[0], "t"]);
    assert!(stdout.contains("out-t"), "{stdout}");
    assert!(stdout.contains("dirs-ok"), "{stdout}");
    let stderr = rig.ok(&["alloc", "logs", "-stderr", &allocs[0], "t"]);
    assert!(stderr.contains("err"), "{stderr}");
    // The finished container is removed.
    assert!(
        containers_of(&dockerd, &rig).is_empty(),
        "{:?}",
        containers_of(&dockerd, &rig)
    );
}

/// The image of the built-in hostpath plugin: the binary under test at
/// `/bin/csi-agent` with the shared libraries it links, on the busybox
/// root; made offline as a plugin vendor's image would be.
const HOSTPATH: &str = "csi-test/hostpath:1";

fn hostpath_image(dockerd: &Dockerd) {
    let rootfs = hostpath_rootfs(dockerd, "rootfs-hostpath");
    dockerd.import_image(HOSTPATH, &rootfs);
}

/// A root of the busybox, with the binary under test at `/bin/csi-agent`
/// and the shared libraries it links, in the engine's dir `name`.
pub(crate) fn hostpath_rootfs(dockerd: &Dockerd, name: &str) -> PathBuf {
    let rootfs = busybox_rootfs(&dockerd.dir.mkdir(name));
    fs::copy(bin(), rootfs.join("bin/csi-agent")).unwrap();
    let ldd = Command::new("ldd").arg(bin()).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, or the
        // loader's `/lib64/ld-linux-x86-64.so.2 (0x...)`.
        let path = line
            .split("=>")
            .last()
            .and_then(|rest| rest.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        if let Some(path) = path {
            let to = rootfs.join(path.trim_start_matches('/'));
            fs::create_dir_all(to.parent().unwrap()).unwrap();
            fs::copy(path, &to).unwrap();
        }
    }
    rootfs
}

/// Waits until the engine has no container of the agent of `rig`.
pub(super) fn wait_no_containers(dockerd: &Dockerd, rig: &Rig) {
    let start = Instant::now();
    while !containers_of(dockerd, rig).is_empty() {
        assert!(
            start.elapsed() < WAIT,
            "containers left: {:?}",
            containers_of(dockerd, rig)
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The hostpath plugin as a privileged docker task of Nomad's form
/// (`csi_plugin` with `mount_dir = "/csi"`), in `mode`, its base dir the
/// rig's backing dir bound at `/backing`.
fn hostpath_container_job(rig: &Rig, name: &str, mode: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "nodes" {{
    restart {{
      attempts = 3
      interval = "5m"
      delay    = "1s"
      mode     = "fail"
    }}
    task "plugin" {{
      driver = "docker"
      config {{
        image      = "{HOSTPATH}"
        command    = "/bin/csi-agent"
        args       = ["hostpath", "-strict", "-mode", "{mode}", "-endpoint", "${{CSI_ENDPOINT}}", "-base-dir", "/backing", "-node-id", "{NODE}"]
        privileged = true
        volumes    = ["{backing}:/backing"]
      }}
      csi_plugin {{
        id             = "{PLUGIN_ID}"
        type           = "{mode}"
        mount_dir      = "/csi"
        health_timeout = "30s"
      }}
    }}
  }}
}}
"#,
        backing = rig.backing.display(),
    )
}

/// A docker consumer: busybox running `script` with volume `v1` at
/// `/data`.
fn container_consumer(name: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  type = "batch"
  group "app" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    volume "data" {{
      type            = "csi"
      source          = "v1"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "main" {{
      driver = "docker"
      config {{
        image   = "{BUSYBOX}"
        command = "sh"
        args    = ["-c", {script:?}]
      }}
      volume_mount {{
        volume      = "data"
        destination = "/data"
      }}
    }}
  }}
}}
"#
    )
}

/// A rig whose plugin `hp` runs from its image, with volume `v1`: one
/// monolith job, or a controller job and a node job.
fn plugin_rig(dockerd: &Dockerd, split: bool) -> Rig {
    dockerd.busybox_image(BUSYBOX);
    hostpath_image(dockerd);
    let rig = rig(
        dockerd,
        "  allow_privileged = true\n  volumes {\n    enabled = true\n  }\n",
    );
    fs::create_dir_all(&rig.backing).unwrap();
    let jobs: &[(&str, &str)] = match split {
        false => &[("plugin", "monolith")],
        true => &[("controller", "controller"), ("nodes", "node")],
    };
    let mut allocs = Vec::new();
    for (job, mode) in jobs {
        let file = format!("{job}.hcl");
        let alloc = rig.run_job(&file, &hostpath_container_job(&rig, job, mode));
        allocs.push((job.to_string(), alloc[0].clone()));
    }
    let start = Instant::now();
    let ready = || match split {
        false => rig.agent.try_plugin(PLUGIN_ID).is_ok_and(|p| healthy(&p)),
        true => rig
            .agent
            .try_plugin_status(PLUGIN_ID)
            .is_ok_and(|s| s.controllers_healthy == 1 && s.nodes_healthy == 1),
    };
    while !ready() {
        if start.elapsed() > WAIT {
            let mut why = String::new();
            for (job, alloc) in &allocs {
                why += &rig.ok(&["job", "status", job]);
                why += "--- its stderr ---\n";
                why += &rig.ok(&["alloc", "logs", "-stderr", alloc, "plugin"]);
            }
            panic!(
                "plugin {PLUGIN_ID} is not healthy after {WAIT:?}\n{why}\n--- the engine's log ---\n{}",
                dockerd.log(),
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
    let vol = rig.agent.dir.join("v1.hcl");
    fs::write(&vol, VOLUME).unwrap();
    rig.ok(&["volume", "create", &vol.display().to_string()]);
    rig
}

/// Runs the container consumer `name` writing `text` to `/data/<name>`,
/// and waits until it is done and its claim released.
fn write_through_a_container(rig: &Rig, name: &str, text: &str) {
    let script = format!("echo {text} > /data/{name}");
    rig.run_job(&format!("{name}.hcl"), &container_consumer(name, &script));
    let status = wait_done(rig, name, "the container consumer to finish");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    rig.wait_released(&status.allocs[0].id);
}

#[test]
fn a_plugin_from_an_image_serves_a_container_task_and_an_exec_task() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    let rig = plugin_rig(&dockerd, false);
    // A container writes through its volume_mount...
    write_through_a_container(&rig, "c", "from-container");
    let backing_file = rig.backing.join("volumes/v1/c");
    assert_eq!(
        fs::read_to_string(&backing_file).unwrap(),
        "from-container\n"
    );
    // ...and an exec task reads it through its own.
    rig.run_job(
        "e.hcl",
        &super::consumer("e", "cat /data/c > /data/e.txt", "", false),
    );
    let status = wait_done(&rig, "e", "the exec consumer to finish");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    rig.wait_released(&status.allocs[0].id);
    assert_eq!(
        fs::read_to_string(rig.backing.join("volumes/v1/e.txt")).unwrap(),
        "from-container\n"
    );
    rig.wait_no_mounts_left();
    rig.stop("plugin");
    assert!(containers_of(&dockerd, &rig).is_empty());
}

#[test]
fn a_controller_and_a_node_plugin_from_images_make_one_plugin() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    let rig = plugin_rig(&dockerd, true);
    let status = rig.agent.try_plugin_status(PLUGIN_ID).unwrap();
    assert_eq!(
        (status.controllers_healthy, status.nodes_healthy),
        (1, 1),
        "{status:#?}"
    );
    write_through_a_container(&rig, "c", "split");
    assert_eq!(
        fs::read_to_string(rig.backing.join("volumes/v1/c")).unwrap(),
        "split\n"
    );
    rig.wait_no_mounts_left();
    rig.stop("nodes");
    rig.stop("controller");
    assert!(containers_of(&dockerd, &rig).is_empty());
}

#[test]
fn a_plugin_container_killed_behind_the_agents_back_is_restarted_and_claims_hold() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    let rig = plugin_rig(&dockerd, false);
    // A service that holds its claim while the plugin dies.
    let holder = container_consumer("hold", "echo held > /data/h; exec sleep 1000")
        .replace("type = \"batch\"", "type = \"service\"");
    let held = rig.run_job("hold.hcl", &holder);
    rig.wait_running("hold", &held[0]);
    let publish = rig.publish_path(&held[0], "rw-file-system-single-node-writer");
    let engine = dockerd.engine();
    let plugin = engine
        .list("csi-agent.job=plugin")
        .unwrap()
        .pop()
        .expect("the plugin's container");
    engine.kill(&plugin.id, "SIGKILL").unwrap();
    rig.agent.wait_for(PLUGIN_ID, unhealthy, WAIT);
    rig.agent.wait_for(PLUGIN_ID, healthy, WAIT);
    let restarted = wait_container(&engine, &plugin.name);
    assert_ne!(restarted.id, plugin.id, "the plugin was not restarted");
    // The claim held: still claimed, still mounted, still written through.
    let volumes = rig.client().volume_status("v1", false).unwrap().volumes;
    assert!(
        volumes[0].claims.iter().any(|c| c.alloc_id == held[0]),
        "{volumes:#?}"
    );
    assert!(
        MountInfo::read().unwrap().get(&publish).is_some(),
        "{} is not mounted",
        publish.display()
    );
    assert_eq!(
        fs::read_to_string(rig.backing.join("volumes/v1/h")).unwrap(),
        "held\n"
    );
    rig.stop("hold");
    rig.wait_no_mounts_left();
    rig.stop("plugin");
}

/// The recent events of the alloc's first task, as `job status` prints
/// them.
fn job_text(rig: &Rig, job: &str) -> String {
    rig.ok(&["job", "status", job])
}

#[test]
fn a_missing_image_fails_the_task_with_the_engines_reason_and_leaves_nothing() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    let rig = rig(&dockerd, "");
    let job = script_job("m", "batch", "true", "").replace(BUSYBOX, "csi-test/missing:1");
    rig.run_job("m.hcl", &job);
    let status = wait_failed(&rig, "m", "the task to fail");
    let events = job_text(&rig, "m");
    assert!(
        events.contains("image csi-test/missing:1 is not present and cannot be pulled"),
        "{events}"
    );
    assert!(
        events.contains("pulling image csi-test/missing:1"),
        "{events}"
    );
    assert!(events.contains("\nType      = batch\n"), "{events}");
    assert!(
        status.allocs[0].message.contains("task \"t\" failed"),
        "{status:#?}"
    );
    assert!(containers_of(&dockerd, &rig).is_empty());
}

#[test]
fn a_container_over_its_memory_limit_is_named_oom_killed_and_follows_its_policy() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    // The hog waits a moment: the engine watches the cgroup for OOM only
    // once the container has started.
    // The shell alone grows, so the OOM killer's one choice is the
    // container's PID 1.
    let hog = "sleep 0.5; x=a; while :; do x=$x$x; done";
    let resources = "      resources {\n        memory = 8\n      }\n";
    rig.run_job("h.hcl", &script_job("h", "batch", hog, resources));
    wait_failed(&rig, "h", "the hog to fail");
    let events = job_text(&rig, "h");
    assert!(
        events.contains("killed by the OOM killer: it reached its memory limit"),
        "{events}\n{}",
        dockerd.log()
    );
}

#[test]
fn an_agent_killed_and_restarted_re_adopts_its_container_and_removes_strays() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let mut rig = rig(&dockerd, "");
    let allocs = rig.run_job(
        "s.hcl",
        &script_job("s", "service", "echo up; exec sleep 1000", ""),
    );
    let name = format!("t-{}", allocs[0]);
    let engine = dockerd.engine();
    let first = wait_container(&engine, &name);
    rig.wait_running("s", &allocs[0]);
    // A container of this agent that no task has (an alloc it forgot).
    let stray = csi_agent::docker::ContainerSpec {
        image: BUSYBOX.into(),
        cmd: vec!["sleep".into(), "1000".into()],
        labels: [(
            "csi-agent.data_dir".to_string(),
            rig.agent.data_dir.display().to_string(),
        )]
        .into(),
        ..Default::default()
    };
    let stray = engine.create("t-00000000", &stray).unwrap();
    engine.start(&stray).unwrap();
    rig.agent.sigkill();
    rig.agent.restart();
    rig.wait_job("s", "the container to be re-adopted", |j| {
        j.allocs[0].tasks[0]
            .events
            .iter()
            .any(|e| e.kind == "adopted")
    });
    let again = engine.inspect(&name).unwrap().expect("the container runs");
    assert_eq!(again.id, first.id, "a second container was started");
    assert!(again.running);
    let start = Instant::now();
    while engine.inspect(&stray).unwrap().is_some() {
        assert!(
            start.elapsed() < WAIT,
            "the stray container was not removed"
        );
        thread::sleep(Duration::from_millis(50));
    }
    // Its output after the restart still reaches the logs, and a stop
    // stops and removes it.
    rig.stop("s");
    assert!(engine.inspect(&name).unwrap().is_none());
    let stdout = rig.ok(&["alloc", "logs", &allocs[0], "t"]);
    assert!(stdout.contains("up"), "{stdout}");
}

/// Waits until container `name` runs; it.
fn wait_container(engine: &csi_agent::docker::Engine, name: &str) -> csi_agent::docker::Container {
    let start = Instant::now();
    loop {
        if let Some(c) = engine.inspect(name).unwrap().filter(|c| c.running) {
            return c;
        }
        assert!(start.elapsed() < WAIT, "container {name} never ran");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_missing_engine_fails_only_the_task_that_needs_it_naming_the_endpoint() {
    if !require_docker() {
        return;
    }
    let rig = Rig::bare_with_config(
        "docker {\n  endpoint = \"unix:///run/csi-test-no-engine.sock\"\n}\n",
    );
    rig.run_job("m.hcl", &script_job("m", "batch", "true", ""));
    wait_failed(&rig, "m", "the task to fail");
    let events = job_text(&rig, "m");
    assert!(
        events.contains("cannot reach the container engine at unix:///run/csi-test-no-engine.sock"),
        "{events}"
    );
    // Nothing else needs the engine: an exec task runs.
    rig.run_job(
        "x.hcl",
        &script_job("x", "batch", "true", "")
            .replace("driver = \"docker\"", "driver = \"raw_exec\"")
            .replace(
                &format!("image   = \"{BUSYBOX}\"\n        command = \"sh\""),
                "command = \"/bin/sh\"",
            ),
    );
    let status = wait_done(&rig, "x", "the raw_exec task to finish");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
}

#[test]
fn job_stop_sends_the_kill_signal_then_kills_after_the_kill_timeout() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    // One task takes its SIGINT and exits; the other ignores it and is
    // killed once its kill_timeout has passed.
    let polite = "trap 'echo got-INT; exit 0' INT; echo ready; while true; do sleep 0.1; done";
    let deaf = "trap '' INT TERM; echo ready; while true; do sleep 0.1; done";
    let extra = "      kill_signal  = \"SIGINT\"\n      kill_timeout = \"1s\"\n";
    let p = rig.run_job("p.hcl", &script_job("p", "service", polite, extra));
    let d = rig.run_job("d.hcl", &script_job("d", "service", deaf, extra));
    for (job, alloc) in [("p", &p[0]), ("d", &d[0])] {
        rig.wait_running(job, alloc);
        let start = Instant::now();
        while !rig.ok(&["alloc", "logs", alloc, "t"]).contains("ready") {
            assert!(start.elapsed() < WAIT, "{job} never got ready");
            thread::sleep(Duration::from_millis(50));
        }
    }
    rig.stop("p");
    rig.stop("d");
    let logs = rig.ok(&["alloc", "logs", &p[0], "t"]);
    assert!(logs.contains("got-INT"), "{logs}");
    let events = job_text(&rig, "d");
    assert!(events.contains("sent SIGINT; SIGKILL in 1s"), "{events}");
    assert!(events.contains("sent SIGKILL"), "{events}");
    wait_no_containers(&dockerd, &rig);
}

#[test]
fn a_block_volume_is_a_device_at_its_destination_in_the_container() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    // The hostpath plugin (strict, a process of its own) serves block
    // volumes on loop devices; the publish path is a device node.
    let vrig = crate::volume_util::Rig::start();
    let mut config = fs::read_to_string(&vrig.agent.config).unwrap();
    config.push_str(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n}}\n",
        dockerd.socket.display()
    ));
    vrig.agent.write_config(&config);
    vrig.agent.sighup();
    vrig.agent.wait_for_log("SIGHUP: reloaded", WAIT);
    let spec = format!(
        "id        = \"blk\"\nname      = \"blk\"\ntype      = \"csi\"\nplugin_id = {:?}\n\
         capacity_min = \"16MiB\"\n\
         capability {{\n  access_mode     = \"single-node-writer\"\n  attachment_mode = \"block-device\"\n}}\n",
        crate::volume_util::PLUGIN
    );
    crate::volume_util::connect(&vrig.agent)
        .volume_create("blk.hcl", &spec)
        .unwrap_or_else(|err| panic!("volume create: {err}"));
    let script = "test -b /srv/blk && echo block; printf csi-agent | dd of=/srv/blk bs=9 seek=100 conv=notrunc,fsync 2>/dev/null; dd if=/srv/blk bs=9 skip=100 count=1 2>/dev/null; echo; echo done";
    let job = format!(
        r#"
job "block" {{
  type = "batch"
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    volume "disk" {{
      type            = "csi"
      source          = "blk"
      access_mode     = "single-node-writer"
      attachment_mode = "block-device"
    }}
    task "t" {{
      driver = "docker"
      config {{
        image   = "{BUSYBOX}"
        command = "sh"
        args    = ["-c", {script:?}]
      }}
      volume_mount {{
        volume      = "disk"
        destination = "/srv/blk"
      }}
    }}
  }}
}}
"#
    );
    let file = vrig.agent.dir.join("block.hcl");
    fs::write(&file, job).unwrap();
    let out = vrig.agent.cli(&["job", "run", &file.display().to_string()]);
    assert!(out.status.success(), "{}", crate::harness::text(&out));
    let client = crate::volume_util::connect(&vrig.agent);
    let start = Instant::now();
    let alloc = loop {
        let job = client.job_status("block").unwrap().jobs.remove(0);
        let a = &job.allocs[0];
        if a.status == "complete" || a.status == "failed" {
            assert_eq!(a.status, "complete", "{job:#?}");
            break a.id.clone();
        }
        assert!(start.elapsed() < WAIT, "the task did not finish: {job:#?}");
        thread::sleep(Duration::from_millis(20));
    };
    let out = vrig.agent.cli(&["alloc", "logs", &alloc, "t"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "block\ncsi-agent\ndone\n"
    );
    crate::volume_util::released(&vrig.agent, "blk", &alloc);
}

#[test]
fn a_container_gets_what_its_config_asks_for() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    let script = "hostname; ulimit -n; grep -c db.internal /etc/hosts; touch /x 2>/dev/null && echo rw-root || echo ro-root; echo $GREETING; grep CapEff /proc/self/status";
    let job = script_job("cfg", "batch", script, "      env {\n        GREETING = \"hello-${NOMAD_JOB_NAME}\"\n      }\n")
        .replace(
            "        command = \"sh\"\n",
            "        command = \"sh\"\n        hostname = \"box-${NOMAD_ALLOC_INDEX}\"\n        ulimit = { nofile = \"512:1024\" }\n        extra_hosts = [\"db.internal:10.0.0.9\"]\n        readonly_rootfs = true\n        cap_drop = [\"all\"]\n        labels { team = \"storage\" }\n",
        );
    let allocs = rig.run_job("cfg.hcl", &job);
    let status = wait_done(&rig, "cfg", "the task to finish");
    assert_eq!(
        status.allocs[0].status,
        "complete",
        "{status:#?}\n{}",
        job_text(&rig, "cfg")
    );
    let out = rig.ok(&["alloc", "logs", &allocs[0], "t"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "box-0",
            "512",
            "1",
            "ro-root",
            "hello-cfg",
            "CapEff:\t0000000000000000"
        ],
        "{out}"
    );
}

#[test]
fn an_engine_going_down_makes_its_plugin_unhealthy_saying_why() {
    if !require_docker() {
        return;
    }
    let mut dockerd = Dockerd::start();
    let rig = plugin_rig(&dockerd, false);
    let endpoint = format!("unix://{}", dockerd.socket.display());
    dockerd.stop();
    // The plugin's container stopped with its engine; the agent cannot
    // start it again, and both status views say why.
    let plugin = rig.agent.wait_for(
        PLUGIN_ID,
        |p| {
            unhealthy(p)
                && p.health_reason
                    .contains("cannot reach the container engine")
        },
        WAIT,
    );
    assert!(plugin.health_reason.contains(&endpoint), "{plugin:#?}");
    let events = job_text(&rig, "plugin");
    assert!(
        events.contains(&format!("cannot reach the container engine at {endpoint}")),
        "{events}"
    );
}

#[test]
fn a_container_runs_what_its_templates_render() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let rig = rig(&dockerd, "");
    let templates = r#"      template {
        destination = "local/run.sh"
        perms       = "755"
        data        = <<EOT
#!/bin/sh
echo "alloc {{ env "NOMAD_ALLOC_ID" }} in {{ env "NOMAD_TASK_DIR" }}"
echo "color $COLOR"
EOT
      }
      template {
        destination = "secrets/app.env"
        env         = true
        data        = "COLOR=blue\n"
      }
"#;
    let job = script_job("tpl", "batch", "exec /local/run.sh", templates);
    let allocs = rig.run_job("tpl.hcl", &job);
    let status = wait_done(&rig, "tpl", "the task to finish");
    assert_eq!(
        status.allocs[0].status,
        "complete",
        "{}",
        job_text(&rig, "tpl")
    );
    let out = rig.ok(&["alloc", "logs", &allocs[0], "t"]);
    assert_eq!(out, format!("alloc {} in /local\ncolor blue\n", allocs[0]));
}

#[test]
fn a_container_that_exits_while_the_agent_is_killed_keeps_its_exit_code() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(BUSYBOX);
    let mut rig = rig(&dockerd, "");
    let script =
        "echo run >> /alloc/data/runs; while [ ! -e /alloc/data/go ]; do sleep 0.05; done; exit 3";
    let allocs = rig.run_job("e.hcl", &script_job("e", "batch", script, ""));
    let name = format!("t-{}", allocs[0]);
    let engine = dockerd.engine();
    wait_container(&engine, &name);
    rig.wait_running("e", &allocs[0]);
    rig.agent.sigkill();
    let shared = rig
        .agent
        .data_dir
        .join("alloc")
        .join(&allocs[0])
        .join("alloc/data");
    fs::write(shared.join("go"), "").unwrap();
    let start = Instant::now();
    while engine.inspect(&name).unwrap().is_some_and(|c| c.running) {
        assert!(start.elapsed() < WAIT, "container {name} did not exit");
        thread::sleep(Duration::from_millis(50));
    }
    rig.agent.restart();
    let j = wait_failed(&rig, "e", "the alloc to fail with the container's code");
    let a = &j.allocs[0];
    assert!(
        a.message
            .starts_with("task \"t\" failed: exited with status 3; restart policy exhausted"),
        "{a:#?}"
    );
    assert_eq!(a.tasks[0].restarts, 0);
    assert_eq!(fs::read_to_string(shared.join("runs")).unwrap(), "run\n");
    wait_no_containers(&dockerd, &rig);
}
