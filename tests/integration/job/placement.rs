//! Placement by resources: allocs that do not fit next to the live ones
//! stay pending with Nomad's reason until room frees, and `job run`
//! refuses what could never fit or passes `max_allocs_per_job`.

use std::fs;

use super::{sleepers, Rig};
use crate::harness::text;
use crate::util::require_root;

/// This node's memory as the agent fingerprints it, MiB.
fn node_memory() -> u64 {
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("MemTotal in /proc/meminfo");
    kib / 1024
}

#[test]
fn allocs_that_do_not_fit_stay_pending_until_room_frees() {
    if !require_root() {
        return;
    }
    // Room for one 256 MiB alloc, not two.
    let reserved = node_memory() - 400;
    let mut rig = Rig::bare_with_config(&format!(
        "client {{\n  reserved {{\n    memory = {reserved}\n  }}\n  max_allocs_per_job = 2\n}}\n"
    ));
    rig.run_job("first.hcl", &sleepers("first", 2, 100, 256));
    let first = rig.wait_job("first", "one alloc to run, one to wait", |j| {
        j.allocs.iter().any(|a| a.status == "running")
            && j.allocs
                .iter()
                .any(|a| a.status == "pending" && a.message == "Dimension memory exhausted")
    });
    // The first alloc created is the one placed.
    let running = first.allocs.iter().find(|a| a.status == "running");
    assert_eq!(running.map(|a| a.index), Some(0), "{first:#?}");
    let status = rig.ok(&["job", "status", "first"]);
    assert!(status.contains("Dimension memory exhausted"), "{status}");

    // Across a restart the placed alloc keeps its place, and the other
    // keeps waiting.
    assert_eq!(rig.agent.sigterm(), 0);
    rig.agent.restart();
    let again = rig.wait_job("first", "re-adoption", |j| {
        j.allocs
            .iter()
            .any(|a| a.status == "running" && a.tasks[0].events.iter().any(|e| e.kind == "adopted"))
    });
    let waiting: Vec<_> = again
        .allocs
        .iter()
        .filter(|a| a.status == "pending")
        .collect();
    assert_eq!(waiting.len(), 1, "{again:#?}");
    assert_eq!(waiting[0].message, "Dimension memory exhausted");

    // Another job waits too, and runs once the first one is gone.
    rig.run_job("second.hcl", &sleepers("second", 1, 100, 256));
    rig.wait_job("second", "the alloc to wait", |j| {
        j.allocs[0].status == "pending" && j.allocs[0].message == "Dimension memory exhausted"
    });
    rig.ok(&["job", "stop", "first"]);
    rig.wait_job("first", "the job to stop", |j| j.status == "dead");
    let second = rig.wait_job("second", "the alloc to run", |j| {
        j.allocs[0].status == "running"
    });
    assert_eq!(second.allocs[0].message, "", "{second:#?}");

    // What could never fit, and a count past the bound, are refused.
    let out = rig.run_job_output("huge.hcl", &sleepers("huge", 1, 100, 1000));
    assert!(!out.status.success(), "{}", text(&out));
    let err = text(&out);
    assert!(
        err.contains("group \"g\" can never be placed: Dimension memory exhausted: an alloc asks for 1000 MiB, and the node has 400 MiB"),
        "{err}"
    );
    let out = rig.run_job_output("many.hcl", &sleepers("many", 3, 100, 16));
    assert!(!out.status.success(), "{}", text(&out));
    let err = text(&out);
    assert!(
        err.contains("many.hcl:3:13: job \"many\" group \"g\" has count = 3, more than the agent's max_allocs_per_job = 2"),
        "{err}"
    );
    rig.ok(&["job", "stop", "second"]);
    rig.wait_job("second", "the job to stop", |j| j.status == "dead");
}
