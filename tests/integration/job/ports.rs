//! The ports of a group's `network` block, as Nomad's client gives them in
//! host mode: allocated by the agent when the alloc is placed, in every
//! task's `NOMAD_*` variables (and so in `${...}` and templates), kept
//! across an agent restart, and a `static` port held by one alloc at a
//! time.

use std::collections::BTreeMap;
use std::fs;
use std::net::TcpListener;
use std::thread;
use std::time::Instant;

use super::templates::wait_for_log;
use super::{processes_with_env, Rig};
use crate::harness::{text, POLL, WAIT};
use crate::util::require_root;

/// A server, a prestart sidecar that serves its `local/` dir on
/// `${NOMAD_PORT_http}` (Python's `http.server`), and the main task `t`,
/// which fetches a file from it through `NOMAD_ADDR_http` and prints it
/// with the host port its template rendered.
const CLIENT_AND_SERVER: &str = r#"job "web" {
  group "g" {
    network {
      mode = "host"
      port "http" {}
    }
    task "t" {
      driver = "raw_exec"
      template {
        destination = "local/port.txt"
        data        = "port={{ env \"NOMAD_HOST_PORT_http\" }}"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "until wget -q -O local/got.txt http://$NOMAD_ADDR_http/hello.txt; do sleep 0.2; done; cat local/got.txt local/port.txt; exec sleep 3600"]
      }
    }
    task "server" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "cd local && echo hello > hello.txt && exec python3 -m http.server ${NOMAD_PORT_http}"]
      }
    }
  }
}
"#;

/// One raw_exec task of `count` allocs that sleeps, with the group's
/// `network` block `network`.
fn sleeper(name: &str, count: u32, network: &str) -> String {
    format!(
        "job \"{name}\" {{\n  group \"g\" {{\n    count = {count}\n    network {{\n{network}\n    }}\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{\n        command = \"/bin/sleep\"\n        args    = [\"3600\"]\n      }}\n    }}\n  }}\n}}\n"
    )
}

/// The `NOMAD_*` port variables of task `t` of `alloc`, from the
/// environment of one of its processes. The task may be running by the
/// agent's word a moment before its command is exec'd with that
/// environment, so its process is waited for.
fn port_env(alloc: &str) -> BTreeMap<String, String> {
    let id = format!("CSI_AGENT_ALLOC_ID={alloc}");
    let deadline = Instant::now() + WAIT;
    let task = loop {
        let found = processes_with_env(|e| e == id.as_bytes())
            .into_iter()
            .find(|pid| {
                fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|e| e == b"NOMAD_TASK_NAME=t"))
            });
        match found {
            Some(pid) => break pid,
            None if Instant::now() < deadline => thread::sleep(POLL),
            None => panic!("no process of task t of alloc {alloc}"),
        }
    };
    let environ = fs::read(format!("/proc/{task}/environ")).unwrap();
    environ
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            let port_var = ["NOMAD_PORT_", "NOMAD_HOST_", "NOMAD_IP_", "NOMAD_ADDR_"]
                .iter()
                .any(|p| k.starts_with(p))
                || k.starts_with("NOMAD_ALLOC_PORT_");
            port_var.then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// A port no process of the host holds right now.
fn free_port() -> u16 {
    TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_task_reaches_its_group_s_server_through_the_port_the_agent_allocated() {
    if !require_root() {
        return;
    }
    let mut rig = Rig::bare();
    let allocs = rig.run_job("web.hcl", CLIENT_AND_SERVER);
    let alloc = &allocs[0];
    let pid = rig.wait_running("web", alloc);
    let env = port_env(alloc);
    let port: u16 = env["NOMAD_PORT_http"].parse().unwrap();
    assert!((20000..=32000).contains(&port), "{env:?}");
    assert_eq!(env["NOMAD_HOST_PORT_http"], port.to_string());
    assert_eq!(env["NOMAD_ALLOC_PORT_http"], port.to_string());
    let ip = &env["NOMAD_IP_http"];
    assert_eq!(&env["NOMAD_HOST_IP_http"], ip);
    assert_eq!(env["NOMAD_ADDR_http"], format!("{ip}:{port}"));
    assert_eq!(env["NOMAD_HOST_ADDR_http"], format!("{ip}:{port}"));
    wait_for_log(&rig, alloc, &format!("hello\nport={port}"));

    // A killed agent's successor adopts the task with the same ports: the
    // port is still this alloc's, so a job that wants it as its static
    // port waits.
    rig.agent.sigkill();
    rig.agent.restart();
    let status = rig.wait_job("web", "re-adoption", |j| {
        j.allocs[0].tasks[0]
            .events
            .iter()
            .any(|e| e.kind == "adopted")
    });
    assert_eq!(status.allocs[0].tasks[0].pid, pid);
    assert_eq!(port_env(alloc), env);
    let placed = format!("Alloc {alloc}: placed");
    assert_eq!(rig.agent.log().matches(&placed).count(), 1);
    let wants = sleeper(
        "wants",
        1,
        &format!("      port \"http\" {{\n        static = {port}\n      }}"),
    );
    rig.run_job("wants.hcl", &wants);
    let reason = format!("network: reserved port collision http={port}");
    rig.wait_job("wants", "the alloc to wait", |j| {
        j.allocs[0].status == "pending" && j.allocs[0].message == reason
    });
    rig.ok(&["job", "stop", "web"]);
    rig.wait_job("web", "the job to stop", |j| j.status == "dead");
    rig.wait_job("wants", "the alloc to run", |j| {
        j.allocs[0].status == "running" && j.allocs[0].message.is_empty()
    });
    rig.ok(&["job", "stop", "wants"]);
    rig.wait_job("wants", "the job to stop", |j| j.status == "dead");
}

#[test]
fn a_static_port_is_held_by_one_alloc_at_a_time_and_dynamic_ones_differ() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let port = free_port();
    let network = format!(
        "      port \"db\" {{\n        static = {port}\n      }}\n      port \"http\" {{}}"
    );
    let first = rig.run_job("first.hcl", &sleeper("first", 1, &network));
    rig.wait_running("first", &first[0]);
    assert_eq!(port_env(&first[0])["NOMAD_PORT_db"], port.to_string());
    let second = rig.run_job("second.hcl", &sleeper("second", 1, &network));
    let reason = format!("network: reserved port collision db={port}");
    rig.wait_job("second", "the alloc to wait", |j| {
        j.allocs[0].status == "pending" && j.allocs[0].message == reason
    });
    let status = rig.ok(&["job", "status", "second"]);
    assert!(status.contains(&reason), "{status}");
    rig.ok(&["job", "stop", "first"]);
    rig.wait_job("first", "the job to stop", |j| j.status == "dead");
    rig.wait_running("second", &second[0]);
    let second_env = port_env(&second[0]);
    assert_eq!(second_env["NOMAD_HOST_PORT_db"], port.to_string());

    // Two allocs of one job get two dynamic ports.
    let pair = rig.run_job("pair.hcl", &sleeper("pair", 2, "      port \"http\" {}"));
    let ports: Vec<String> = pair
        .iter()
        .map(|a| {
            rig.wait_running("pair", a);
            port_env(a)["NOMAD_PORT_http"].clone()
        })
        .collect();
    assert_ne!(ports[0], ports[1], "{ports:?}");
    assert!(!ports.contains(&second_env["NOMAD_PORT_http"]), "{ports:?}");
    for job in ["second", "pair"] {
        rig.ok(&["job", "stop", job]);
        rig.wait_job(job, "the job to stop", |j| j.status == "dead");
    }
}

#[test]
fn job_run_refuses_a_network_namespace_and_a_bad_port_at_their_position() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let bridge = sleeper("bridge", 1, "      mode = \"bridge\"");
    let out = rig.run_job_output("bridge.hcl", &bridge);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out)
            .contains("bridge.hcl:5:14: network mode \"bridge\" in group \"g\" is not supported"),
        "{}",
        text(&out)
    );
    let bad = sleeper("bad", 1, "      port \"db\" {\n        static = 0\n      }");
    let out = rig.run_job_output("bad.hcl", &bad);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(
            "bad.hcl:6:18: \"static\" in port \"db\" must be a port from 1 to 65535, found 0"
        ),
        "{}",
        text(&out)
    );
}

/// The shape of Nomad's e2e `chroot_dl_exec` job: a prestart raw_exec
/// task packs a script its template wrote into the shared alloc dir, a
/// prestart sidecar serves that dir on `${NOMAD_PORT_http}`, and the main
/// exec task fetches the script with an `artifact` block.
const SERVED_SCRIPT: &str = r##"job "served" {
  type = "batch"
  group "g" {
    network {
      mode = "host"
      port "http" {}
    }
    task "pack" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      template {
        destination = "${NOMAD_ALLOC_DIR}/run.sh"
        data        = "#!/bin/sh\necho fetched\n"
        perms       = "755"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "cd ${NOMAD_ALLOC_DIR} && tar -czf run.tar.gz run.sh"]
      }
    }
    task "serve" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "${NOMAD_PORT_http}", "--directory", "${NOMAD_ALLOC_DIR}"]
      }
    }
    task "t" {
      driver = "exec"
      artifact {
        source = "http://localhost:${NOMAD_PORT_http}/run.tar.gz"
      }
      config {
        command = "local/run.sh"
      }
    }
  }
}
"##;

#[test]
fn a_sidecar_serves_the_shared_alloc_dir_on_its_port_for_the_main_task_s_artifact() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let allocs = rig.run_job("served.hcl", SERVED_SCRIPT);
    let status = rig.wait_job("served", "the job to finish", |j| j.status == "dead");
    // The main task fetched what the prestart task packed from the
    // sidecar, on the port the agent allocated, and ran it.
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    assert_eq!(rig.ok(&["alloc", "logs", &allocs[0], "t"]), "fetched\n");
}

#[test]
fn dynamic_ports_come_from_the_agent_config_s_range() {
    if !require_root() {
        return;
    }
    let port = free_port();
    let rig = Rig::bare_with_config(&format!(
        "client {{\n  min_dynamic_port = {port}\n  max_dynamic_port = {port}\n}}\n"
    ));
    let first = rig.run_job("first.hcl", &sleeper("first", 1, "      port \"http\" {}"));
    rig.wait_running("first", &first[0]);
    assert_eq!(port_env(&first[0])["NOMAD_PORT_http"], port.to_string());
    // The range's one port is taken: the next alloc waits for it.
    let second = rig.run_job(
        "second.hcl",
        &sleeper("second", 1, "      port \"http\" {}"),
    );
    rig.wait_job("second", "the alloc to wait", |j| {
        j.allocs[0].status == "pending"
            && j.allocs[0].message == "network: dynamic port selection failed"
    });
    rig.ok(&["job", "stop", "first"]);
    rig.wait_job("first", "the job to stop", |j| j.status == "dead");
    rig.wait_running("second", &second[0]);
    assert_eq!(port_env(&second[0])["NOMAD_PORT_http"], port.to_string());
    rig.ok(&["job", "stop", "second"]);
    rig.wait_job("second", "the job to stop", |j| j.status == "dead");
}

#[test]
fn an_alloc_waiting_for_a_port_held_outside_the_agent_runs_once_it_frees() {
    if !require_root() {
        return;
    }
    // The range's one port, held by this test: no alloc of the agent's
    // holds it, so only a later look finds it free.
    let outside = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = outside.local_addr().unwrap().port();
    let rig = Rig::bare_with_config(&format!(
        "client {{\n  min_dynamic_port = {port}\n  max_dynamic_port = {port}\n}}\n"
    ));
    let allocs = rig.run_job("held.hcl", &sleeper("held", 1, "      port \"http\" {}"));
    rig.wait_job("held", "the alloc to wait", |j| {
        j.allocs[0].status == "pending"
            && j.allocs[0].message == "network: dynamic port selection failed"
    });
    drop(outside);
    rig.wait_running("held", &allocs[0]);
    assert_eq!(port_env(&allocs[0])["NOMAD_PORT_http"], port.to_string());
    rig.ok(&["job", "stop", "held"]);
    rig.wait_job("held", "the job to stop", |j| j.status == "dead");
}
