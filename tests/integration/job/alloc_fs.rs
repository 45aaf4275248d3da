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
