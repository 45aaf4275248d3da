//! Whole files: a realistic Nomad job and an agent configuration.

use super::{parse_ok, render};
use crate::{Expr, Pos};

/// A Nomad job with a CSI volume, in the style users write.
pub(super) const JOB: &str = r#"# A web service with a CSI volume.
job "web" {
  datacenters = ["dc1"]
  type        = "service"

  group "g" {
    count = 2

    restart {
      attempts = 3
      interval = "30m"
      delay    = "15s"
      mode     = "fail"
    }

    volume "data" {
      type            = "csi"
      source          = "vol"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"

      mount_options {
        fs_type     = "ext4"
        mount_flags = ["noatime"]
      }
    }

    task "web" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo ${NOMAD_TASK_DIR}"]
      }

      env {
        FOO = "bar"
      }

      volume_mount {
        volume      = "data"
        destination = "/srv"
      }

      csi_plugin {
        id        = "hostpath"
        type      = "monolith"
        mount_dir = "/csi"
      }
    }
  }
}
"#;

/// The tree `JOB` must parse into, as rendered by `render`.
const JOB_TREE: &str = r#"job "web" {
  datacenters = ["dc1"]
  type = "service"
  group "g" {
    count = 2
    restart {
      attempts = 3
      interval = "30m"
      delay = "15s"
      mode = "fail"
    }
    volume "data" {
      type = "csi"
      source = "vol"
      access_mode = "single-node-writer"
      attachment_mode = "file-system"
      mount_options {
        fs_type = "ext4"
        mount_flags = ["noatime"]
      }
    }
    task "web" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args = ["-c", "echo ${NOMAD_TASK_DIR}"]
      }
      env {
        FOO = "bar"
      }
      volume_mount {
        volume = "data"
        destination = "/srv"
      }
      csi_plugin {
        id = "hostpath"
        type = "monolith"
        mount_dir = "/csi"
      }
    }
  }
}
"#;

/// An agent configuration file with a plugin block and durations as strings.
pub(super) const AGENT_CONFIG: &str = r#"data_dir  = "/var/lib/csi-agent"
log_level = "info"

plugin "hostpath" {
  socket = "/run/x.sock"
  type   = "monolith"

  // Durations are strings; the decoder parses them.
  health_timeout = "5s"
  restart_delay  = "1m30s"
}

client {
  gc_interval = "1h"
}
"#;

const AGENT_CONFIG_TREE: &str = r#"data_dir = "/var/lib/csi-agent"
log_level = "info"
plugin "hostpath" {
  socket = "/run/x.sock"
  type = "monolith"
  health_timeout = "5s"
  restart_delay = "1m30s"
}
client {
  gc_interval = "1h"
}
"#;

#[test]
fn nomad_job_parses_into_the_expected_tree() {
    assert_eq!(render(&parse_ok(JOB)), JOB_TREE);
}

#[test]
fn nomad_job_nodes_carry_their_start_positions() {
    let body = parse_ok(JOB);
    let Some(job) = body.blocks_named("job").next() else {
        panic!("no job block");
    };
    assert_eq!(job.span.start, Pos::new(2, 1));
    assert_eq!(job.span.end, Pos::new(52, 2));
    assert_eq!(job.labels[0].span.start, Pos::new(2, 5));

    let Some(group) = job.body.blocks_named("group").next() else {
        panic!("no group block");
    };
    assert_eq!(group.kind.span.start, Pos::new(6, 3));
    assert_eq!(group.labels[0].span.start, Pos::new(6, 9));

    let Some(count) = group.body.attribute("count") else {
        panic!("no count attribute");
    };
    assert_eq!(count.key.span.start, Pos::new(7, 5));
    assert_eq!(count.value.pos(), Pos::new(7, 13));
    assert_eq!(count.span.end, Pos::new(7, 14));

    let Some(task) = group.body.blocks_named("task").next() else {
        panic!("no task block");
    };
    let Some(config) = task.body.blocks_named("config").next() else {
        panic!("no config block");
    };
    let Some(args) = config.body.attribute("args") else {
        panic!("no args attribute");
    };
    let Some(items) = args.value.as_list() else {
        panic!("args is not a list");
    };
    assert_eq!(args.value.span().start, Pos::new(33, 19));
    assert_eq!(items[1].pos(), Pos::new(33, 26));
    assert_eq!(args.value.span().end, Pos::new(33, 51));
}

#[test]
fn nomad_job_helpers_find_blocks_and_attributes() {
    let body = parse_ok(JOB);
    let Some(job) = body.blocks().next() else {
        panic!("no block");
    };
    assert_eq!(job.label(0), Some("web"));
    let names: Vec<&str> = job.body.attributes().map(|a| a.key.name.as_str()).collect();
    assert_eq!(names, ["datacenters", "type"]);
    let Some(group) = job.body.blocks_named("group").next() else {
        panic!("no group block");
    };
    let kinds: Vec<&str> = group.body.blocks().map(|b| b.kind.name.as_str()).collect();
    assert_eq!(kinds, ["restart", "volume", "task"]);
    assert_eq!(group.body.blocks_named("volume").count(), 1);
    assert!(group.body.attribute("missing").is_none());
    let count = group.body.attribute("count").map(|a| &a.value);
    assert_eq!(
        count.and_then(Expr::as_number).and_then(|n| n.as_i64()),
        Some(2)
    );
}

#[test]
fn agent_config_parses_plugin_block_and_duration_strings() {
    let body = parse_ok(AGENT_CONFIG);
    assert_eq!(render(&body), AGENT_CONFIG_TREE);
    let Some(plugin) = body.blocks_named("plugin").next() else {
        panic!("no plugin block");
    };
    assert_eq!(plugin.label(0), Some("hostpath"));
    let timeout = plugin.body.attribute("health_timeout").map(|a| &a.value);
    assert_eq!(timeout.and_then(Expr::as_str), Some("5s"));
    assert_eq!(timeout.map(Expr::kind_name), Some("string"));
}
