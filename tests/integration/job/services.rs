//! Nomad's built-in service discovery with real tasks: `service {
//! provider = "nomad" }` blocks registered while their task (a group's:
//! its alloc) runs and gone when it stops, `service list`/`service info`
//! as Nomad prints them, templates that read the registry rendered again
//! with their `change_mode` when it changes, the registry rebuilt from
//! what runs after an agent restart, and Nomad's NFS demo's template
//! finding its server through the registry. In a cluster, every agent
//! sees every host's services, and a lost host's go with its lease.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use json::Value;

use super::Rig;
use crate::cluster_agents::cluster_block;
use crate::etcd::{require_etcd, Cluster};
use crate::harness::{Agent, WAIT};
use crate::util::require_root;

/// An exec job `name` that prints its port and sleeps, with a group
/// service and a task service (default name) on a dynamic port `nfs`,
/// restarted never.
fn server(name: &str, service: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "g" {{
    network {{
      port "nfs" {{}}
    }}
    service {{
      name     = "{service}"
      port     = "nfs"
      provider = "nomad"
      tags     = ["v1", "${{NOMAD_JOB_NAME}}"]
      meta {{
        alloc = "${{NOMAD_ALLOC_ID}}"
      }}
      check {{
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"
      }}
    }}
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "exec"
      service {{
        provider = "nomad"
        port     = 8080
      }}
      config {{
        command = "/bin/sh"
        args    = ["-c", "echo port=$NOMAD_PORT_nfs; exec sleep 600"]
      }}
    }}
  }}
}}
"#
    )
}

/// `service info -json NAME` (or `service list -json` without a name).
fn services_json(rig: &Rig, name: Option<&str>) -> Value {
    let mut args = vec!["service"];
    match name {
        Some(name) => args.extend(["info", "-json", name]),
        None => args.extend(["list", "-json"]),
    }
    json::parse(&rig.ok(&args)).unwrap()
}

/// Waits until `service list` names exactly `names`.
#[track_caller]
fn wait_listed(rig: &Rig, names: &[&str]) {
    let start = Instant::now();
    loop {
        let list = services_json(rig, None);
        let listed: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|ns| ns.get("Services").unwrap().as_array().unwrap().to_vec())
            .map(|s| s.get("ServiceName").unwrap().as_str().unwrap().to_string())
            .collect();
        if listed == names {
            return;
        }
        assert!(start.elapsed() < WAIT, "listed {listed:?}, not {names:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_running_alloc_s_services_are_listed_and_gone_when_it_stops() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    assert_eq!(
        rig.ok(&["service", "list"]),
        "No service registrations found\n"
    );
    let allocs = rig.run_job("s.hcl", &server("store", "nfs"));
    rig.wait_running("store", &allocs[0]);
    wait_listed(&rig, &["nfs", "store-g-t"]);

    let info = services_json(&rig, Some("nfs"));
    let nfs = &info.as_array().unwrap()[0];
    assert_eq!(
        nfs.get("AllocID").unwrap().as_str(),
        Some(allocs[0].as_str())
    );
    assert_eq!(nfs.get("JobID").unwrap().as_str(), Some("store"));
    assert_eq!(nfs.get("Namespace").unwrap().as_str(), Some("default"));
    let tags: Vec<&str> = nfs
        .get("Tags")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tags, ["v1", "store"]);
    let meta = nfs.get("Meta").unwrap();
    assert_eq!(
        meta.get("alloc").unwrap().as_str(),
        Some(allocs[0].as_str())
    );
    // The alloc's port, as NOMAD_PORT_nfs tells the task.
    let port = nfs.get("Port").unwrap().as_u64().unwrap();
    wait_for_log_end(&rig, &allocs[0], &format!("port={port}\n"));
    let address = nfs.get("Address").unwrap().as_str().unwrap().to_string();
    let text = rig.ok(&["service", "info", "nfs"]);
    assert!(text.starts_with("Job ID  Address"), "{text}");
    assert!(
        text.contains(&format!("store   {address}:{port}  [v1,store]")),
        "{text}"
    );
    let task = services_json(&rig, Some("store-g-t"));
    assert_eq!(
        task.as_array().unwrap()[0].get("Port").unwrap().as_u64(),
        Some(8080)
    );

    let out = rig.agent.cli(&["service", "info", "missing"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no service \"missing\""));

    rig.stop("store");
    wait_listed(&rig, &[]);
}

/// A raw_exec task that prints its template's file at start and on each
/// SIGHUP: the template lists service `nfs`'s instances.
const READER: &str = r#"
job "reader" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo hup; cat local/nfs.conf' HUP; echo start; cat local/nfs.conf; while :; do sleep 0.1; done"]
      }
      template {
        data          = "servers:{{ range nomadService \"nfs\" }} {{ .Address }}:{{ .Port }}{{ end }}\n"
        destination   = "local/nfs.conf"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }
    }
  }
}
"#;

#[track_caller]
fn wait_for_log_end(rig: &Rig, alloc: &str, end: &str) -> String {
    let start = Instant::now();
    loop {
        let log = rig.ok(&["alloc", "logs", alloc, "t"]);
        if log.ends_with(end) {
            return log;
        }
        assert!(
            start.elapsed() < WAIT,
            "log {log:?} does not end with {end:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The address and port of the one instance of `name`.
fn instance(rig: &Rig, name: &str) -> String {
    let info = services_json(rig, Some(name));
    let s = &info.as_array().unwrap()[0];
    format!(
        "{}:{}",
        s.get("Address").unwrap().as_str().unwrap(),
        s.get("Port").unwrap().as_u64().unwrap()
    )
}

#[test]
fn a_template_that_reads_a_service_renders_again_with_its_change_mode_when_it_changes() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let reader = rig.run_job("r.hcl", READER);
    let pid = rig.wait_running("reader", &reader[0]);
    wait_for_log_end(&rig, &reader[0], "start\nservers:\n");

    let store = rig.run_job("s.hcl", &server("store", "nfs"));
    rig.wait_running("store", &store[0]);
    wait_listed(&rig, &["nfs", "store-g-t"]);
    let first = instance(&rig, "nfs");
    wait_for_log_end(&rig, &reader[0], &format!("hup\nservers: {first}\n"));

    // An unrelated service changes the registry, not the file: no signal.
    let other = rig.run_job("o.hcl", &server("other", "db"));
    rig.wait_running("other", &other[0]);
    wait_listed(&rig, &["db", "nfs", "other-g-t", "store-g-t"]);
    rig.stop("other");
    wait_listed(&rig, &["nfs", "store-g-t"]);

    rig.stop("store");
    let log = wait_for_log_end(&rig, &reader[0], "hup\nservers:\n");
    assert_eq!(
        log,
        format!("start\nservers:\nhup\nservers: {first}\nhup\nservers:\n")
    );
    assert_eq!(rig.wait_running("reader", &reader[0]), pid);
    // The registry's changes that left the file as it was are not events.
    let task = rig.task("reader", &reader[0]);
    assert!(
        !task
            .events
            .iter()
            .any(|e| e.message.contains("no file changed")),
        "{task:#?}"
    );
}

#[test]
fn after_an_agent_restart_the_registry_holds_what_runs_and_nothing_else() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let kept = rig.run_job("k.hcl", &server("kept", "kept"));
    let lost = rig.run_job("l.hcl", &server("lost", "lost"));
    let kept_pid = rig.wait_running("kept", &kept[0]);
    let lost_pid = rig.wait_running("lost", &lost[0]);
    wait_listed(&rig, &["kept", "kept-g-t", "lost", "lost-g-t"]);

    assert_eq!(rig.agent.sigterm(), 0);
    // A task that dies while no agent runs is not running when one
    // comes back: its services are not listed again.
    // SAFETY: a plain kill(2) of the task's pid, which this test started.
    assert_eq!(unsafe { libc::kill(lost_pid as i32, libc::SIGKILL) }, 0);
    rig.agent.restart();
    wait_listed(&rig, &["kept", "kept-g-t"]);
    assert_eq!(rig.wait_running("kept", &kept[0]), kept_pid);
    let lost_status = rig.job("lost");
    assert_ne!(lost_status.allocs[0].tasks[0].state, "running");
}

/// The demo's plugin jobs find their NFS server with this template: its
/// text is read from the demo's file, rendered by the real renderer in a
/// raw_exec task (the demo's images are not fetched), with a stand-in
/// for the demo's server registering the service its job declares.
#[test]
fn the_nfs_demo_s_plugin_template_finds_the_server_through_the_registry() {
    if !require_root() {
        return;
    }
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nomad/nfs/");
    let plugin = fs::read_to_string(format!("{demo}node-plugin.nomad.hcl")).unwrap();
    let data = plugin
        .lines()
        .find_map(|l| l.trim().strip_prefix("data        = "))
        .expect("the demo's template data");
    let nfs = fs::read_to_string(format!("{demo}nfs.nomad.hcl")).unwrap();
    let service_block =
        &nfs[nfs.find("    service {").unwrap()..nfs.find("    network {").unwrap()];
    assert!(
        service_block.contains("provider = \"nomad\""),
        "{service_block}"
    );

    let rig = Rig::bare();
    let stand_in = format!(
        "job \"nfs\" {{\n  group \"nfs\" {{\n{service_block}    network {{\n      port \"nfs\" {{\n        to = 2049\n      }}\n    }}\n    task \"nfs\" {{\n      driver = \"raw_exec\"\n      config {{\n        command = \"/bin/sleep\"\n        args    = [\"600\"]\n      }}\n    }}\n  }}\n}}\n"
    );
    let server = rig.run_job("nfs.hcl", &stand_in);
    rig.wait_running("nfs", &server[0]);
    wait_listed(&rig, &["nfs"]);
    let address = instance(&rig, "nfs");
    let address = address.rsplit_once(':').unwrap().0.to_string();

    let node = format!(
        "job \"node\" {{\n  group \"node\" {{\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{\n        command = \"/bin/sh\"\n        args    = [\"-c\", \"echo nfs-server=$NFS_ADDRESS:/srv/nfs; exec sleep 600\"]\n      }}\n      template {{\n        data        = {data}\n        destination = \"local/nfs.addy\"\n        env         = true\n      }}\n    }}\n  }}\n}}\n"
    );
    let allocs = rig.run_job("node.hcl", &node);
    rig.wait_running("node", &allocs[0]);
    wait_for_log_end(
        &rig,
        &allocs[0],
        &format!("nfs-server={address}:/srv/nfs\n"),
    );
}

/// An agent of `cluster` named `node`, in a rig of its own.
fn cluster_rig(cluster: &Cluster, node: &str) -> Rig {
    let agent = Agent::start_with_config(&cluster_block(cluster, node));
    Rig {
        backing: agent.dir.join("backing"),
        agent,
    }
}

#[test]
fn in_a_cluster_every_host_sees_the_services_and_a_lost_host_s_go_with_its_lease() {
    if !require_root() || !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let mut a = cluster_rig(&cluster, "node-a");
    let b = cluster_rig(&cluster, "node-b");
    let reader = b.run_job("r.hcl", READER);
    b.wait_running("reader", &reader[0]);
    wait_for_log_end(&b, &reader[0], "start\nservers:\n");

    // Registered on node-a, read on node-b.
    let store = a.run_job("s.hcl", &server("store", "nfs"));
    a.wait_running("store", &store[0]);
    wait_listed(&b, &["nfs", "store-g-t"]);
    let first = instance(&b, "nfs");
    assert_eq!(first, instance(&a, "nfs"));
    wait_for_log_end(&b, &reader[0], &format!("hup\nservers: {first}\n"));

    // node-a is lost (its task runs on): its lease expires, its services
    // are gone from node-b's registry and template.
    a.agent.sigkill();
    wait_listed(&b, &[]);
    wait_for_log_end(&b, &reader[0], "hup\nservers:\n");
}

#[test]
fn a_service_past_a_bound_is_not_registered_and_its_task_says_why() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let job = server("bad", "under_score");
    let allocs = rig.run_job("b.hcl", &job);
    rig.wait_running("bad", &allocs[0]);
    wait_listed(&rig, &["bad-g-t"]);
    let status = rig.wait_job("bad", "the refusal's event", |j| {
        j.allocs[0].tasks[0]
            .events
            .iter()
            .any(|e| e.kind == "service")
    });
    let event = status.allocs[0].tasks[0]
        .events
        .iter()
        .find(|e| e.kind == "service")
        .unwrap();
    assert!(
        event
            .message
            .starts_with("service \"under_score\" not registered")
            && event.message.contains("MAX_NAME"),
        "{}",
        event.message
    );
}
