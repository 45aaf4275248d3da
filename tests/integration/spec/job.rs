//! Job specs: the fixtures, defaults, services, and how Nomad-only keys
//! and other drivers are handled.

use std::path::PathBuf;
use std::time::Duration;

use csi_agent::csi::{AccessMode, AttachmentMode};
use csi_agent::mount::Propagation;
use csi_agent::spec::{CheckType, Driver, NamespaceMode, PluginType, RestartMode, VolumeType};

use super::{assert_one_error, errors, fixture, job, ok, warnings};

/// A job whose group "g" holds `group_body`, from line 3, and then a
/// minimal exec task.
fn job_with(group_body: &str) -> String {
    format!(
        "job \"j\" {{\n  group \"g\" {{\n{group_body}\n    task \"t\" {{\n      driver = \"exec\"\n      config {{\n        command = \"/bin/true\"\n      }}\n    }}\n  }}\n}}\n"
    )
}

#[test]
fn the_per_alloc_example_decodes() {
    let decoded = ok(job(fixture("job-per-alloc.hcl")));
    let spec = decoded.spec;
    assert_eq!(spec.name, "example");
    let group = &spec.groups[0];
    assert_eq!((group.name.as_str(), group.count), ("cache", 2));
    let volume = &group.volumes[0];
    assert_eq!(volume.alias, "cache-volume");
    assert_eq!(volume.volume_type, VolumeType::Csi);
    assert_eq!(volume.source, "test-volume");
    assert!(volume.per_alloc);
    assert_eq!(volume.source_for(1), "test-volume[1]");
    assert_eq!(volume.access_mode, Some(AccessMode::SingleNodeWriter));
    assert_eq!(volume.attachment_mode, Some(AttachmentMode::FileSystem));
    assert_eq!(volume.mount_options.fs_type, "ext4");
    let task = &group.tasks[0];
    assert_eq!(task.config.command, "/usr/bin/redis-server");
    assert_eq!(task.config.args, ["--dir", "${NOMAD_ALLOC_DIR}/data"]);
    assert_eq!(task.env["MOUNT_PATH"], "${NOMAD_ALLOC_DIR}/data");
    let mount = &task.volume_mounts[0];
    assert_eq!(mount.volume, "cache-volume");
    assert_eq!(mount.destination, "${NOMAD_ALLOC_DIR}/data");
    let resources = task.resources.as_ref().unwrap();
    assert_eq!((resources.cpu, resources.memory), (Some(500), Some(256)));
}

#[test]
fn defaults_apply_where_nothing_is_written() {
    let src = r#"job "j" {
  group "g" {
    volume "v" {
      type            = "csi"
      source          = "vol"
      access_mode     = "multi-node-multi-writer"
      attachment_mode = "file-system"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
      volume_mount {
        volume      = "v"
        destination = "/data"
      }
      csi_plugin {
        id   = "p"
        type = "monolith"
      }
    }
  }
}
"#;
    let spec = ok(job(src)).spec;
    let group = &spec.groups[0];
    assert_eq!(group.count, 1);
    assert_eq!(group.restart.attempts, 2);
    assert_eq!(group.restart.interval, Duration::from_secs(1800));
    assert_eq!(group.restart.delay, Duration::from_secs(15));
    assert_eq!(group.restart.mode, RestartMode::Fail);
    let volume = &group.volumes[0];
    assert!(!volume.read_only && !volume.per_alloc);
    assert!(volume.mount_options.is_empty());
    let task = &group.tasks[0];
    assert!(task.config.args.is_empty());
    assert_eq!(task.kill_timeout, Duration::from_secs(5));
    assert_eq!(task.user, None);
    assert_eq!(task.resources, None);
    let mount = &task.volume_mounts[0];
    assert!(!mount.read_only);
    assert_eq!(mount.propagation, Propagation::Private);
    let plugin = task.csi_plugin.as_ref().unwrap();
    assert_eq!(plugin.plugin_type, PluginType::Monolith);
    assert_eq!(plugin.mount_dir, PathBuf::from("/csi"));
    assert_eq!(plugin.stage_publish_base_dir, PathBuf::from("/local/csi"));
    assert_eq!(plugin.health_timeout, Duration::from_secs(30));
}

#[test]
fn the_plugin_example_decodes() {
    let spec = ok(job(fixture("job-plugin.hcl"))).spec;
    let group = &spec.groups[0];
    assert_eq!(group.restart.attempts, 5);
    assert_eq!(group.restart.mode, RestartMode::Delay);
    let task = &group.tasks[0];
    assert_eq!(task.user.as_deref(), Some("root"));
    assert_eq!(task.kill_timeout, Duration::from_secs(30));
    let plugin = task.csi_plugin.as_ref().unwrap();
    assert_eq!(plugin.id, "hostpath");
    assert_eq!(plugin.plugin_type, PluginType::Node);
    assert_eq!(plugin.health_timeout, Duration::from_secs(90));
}

#[test]
fn services_checks_and_sidecars_are_decoded_and_kept() {
    let spec = ok(job(fixture("job-web.hcl"))).spec;
    let group = &spec.groups[0];
    let service = &group.services[0];
    assert_eq!(service.name.as_deref(), Some("web"));
    assert_eq!(service.port.as_deref(), Some("http"));
    assert_eq!(service.tags, ["frontend", "v2"]);
    let check = &service.checks[0];
    assert_eq!(check.check_type, CheckType::Http);
    assert_eq!(check.path.as_deref(), Some("/health"));
    assert_eq!(check.interval, Duration::from_secs(10));
    assert_eq!(check.timeout, Duration::from_secs(2));
    let connect = service.connect.as_ref().unwrap();
    let proxy = connect
        .sidecar_service
        .as_ref()
        .unwrap()
        .proxy
        .as_ref()
        .unwrap();
    assert_eq!(proxy.upstreams[0].destination_name, "api");
    assert_eq!(proxy.upstreams[0].local_bind_port, 8080);
    let sidecar = connect.sidecar_task.as_ref().unwrap();
    assert_eq!(sidecar.driver.as_deref(), Some("docker"));
    let config = sidecar.config.as_ref().unwrap();
    assert!(
        config.text.contains("envoyproxy/envoy:v1.29"),
        "{}",
        config.text
    );
    assert_eq!(sidecar.resources.as_ref().unwrap().memory, Some(64));
    let task_service = &group.tasks[0].services[0];
    assert_eq!(task_service.port.as_deref(), Some("9000"));
    assert_eq!(task_service.checks[0].check_type, CheckType::Tcp);
}

#[test]
fn host_volumes_and_read_only_mounts_decode() {
    let spec = ok(job(fixture("job-web.hcl"))).spec;
    let group = &spec.groups[0];
    let sessions = group.volume("sessions").unwrap();
    assert_eq!(sessions.volume_type, VolumeType::Host);
    assert_eq!(sessions.capability(), None);
    let mounts = &group.tasks[0].volume_mounts;
    assert!(mounts[0].read_only);
    assert_eq!(mounts[1].propagation, Propagation::HostToTask);
}

#[test]
fn job_specs_round_trip_through_hcl() {
    for name in ["job-per-alloc.hcl", "job-plugin.hcl", "job-web.hcl"] {
        let decoded = ok(job(fixture(name)));
        let text = decoded.spec.to_hcl();
        let again = ok(job(&text));
        assert_eq!(again.spec, decoded.spec, "{name}:\n{text}");
        assert_eq!(again.spec.to_hcl(), text, "{name}");
        assert_eq!(again.warnings.len(), decoded.warnings.len(), "{name}");
    }
}

#[test]
fn nomad_keys_csi_agent_does_not_act_on_warn_once_each_and_are_kept() {
    let decoded = ok(job(fixture("job-web.hcl")));
    assert_eq!(
        warnings(&decoded.warnings),
        [
            r#"test.hcl:7:3: warning: "datacenters" in job "web" is ignored by csi-agent"#,
            r#"test.hcl:8:3: warning: "region" in job "web" is ignored by csi-agent"#,
            r#"test.hcl:9:3: warning: "priority" in job "web" is ignored by csi-agent"#,
            r#"test.hcl:11:3: warning: "update" in job "web" is ignored by csi-agent"#,
            r#"test.hcl:31:5: warning: service "web" in group "frontend" has provider "consul" (Nomad's default): csi-agent has no Consul and registers it nowhere (provider = "nomad" registers it in csi-agent's registry)"#,
            r#"test.hcl:86:7: warning: service "web-admin" in task "server" has provider "consul" (Nomad's default): csi-agent has no Consul and registers it nowhere (provider = "nomad" registers it in csi-agent's registry)"#,
        ]
    );
    let kept: Vec<(&str, &str)> = decoded
        .spec
        .ignored
        .iter()
        .map(|k| (k.name.as_str(), k.text.as_str()))
        .collect();
    assert_eq!(
        kept,
        [
            ("datacenters", "datacenters = [\"dc1\"]"),
            ("region", "region      = \"global\""),
            ("priority", "priority    = 60"),
            ("update", "update {\n    max_parallel = 1\n  }"),
        ]
    );
}

#[test]
fn another_driver_is_one_error_and_its_config_is_not_examined() {
    let decoded = job(fixture("nomad-podman-job.hcl"));
    let invalid = decoded.as_ref().unwrap_err();
    assert_eq!(
        errors(decoded.clone()),
        [
            r#"test.hcl:24:16: driver "podman" is not supported: csi-agent runs "exec", "raw_exec" and "docker" tasks"#
        ]
    );
    assert_eq!(
        warnings(&invalid.warnings),
        [r#"test.hcl:6:3: warning: "datacenters" in job "redis" is ignored by csi-agent"#,]
    );
}

#[test]
fn a_typo_among_ignored_keys_is_still_an_error() {
    let src = fixture("job-web.hcl").replace("priority    = 60", "priorty = 60");
    assert_one_error(
        &src,
        r#"test.hcl:9:3: unknown attribute "priorty" in job "web" (did you mean "priority"?)"#,
    );
}

#[test]
fn a_job_file_holds_one_job_with_groups_and_tasks() {
    assert_one_error(
        "job \"j\" {\n}\n",
        r#"test.hcl:1:1: job "j" needs at least one group"#,
    );
    assert_one_error(
        "job \"j\" {\n  group \"g\" {\n  }\n}\n",
        r#"test.hcl:2:3: group "g" needs at least one task"#,
    );
    let plugin = fixture("job-plugin.hcl");
    let src = format!("{plugin}job \"k\" {{\n}}\n");
    let line = plugin.lines().count() + 1;
    assert_eq!(
        errors(job(&src)),
        [format!(
            r#"test.hcl:{line}:1: a job file holds one job, and job "plugin-hostpath" is declared at 5:1"#
        )]
    );
}

#[test]
fn an_exec_task_needs_a_command() {
    assert_one_error(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n    }\n  }\n}\n",
        r#"test.hcl:3:5: missing required block "config" in task "t""#,
    );
    assert_one_error(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        args = []\n      }\n    }\n  }\n}\n",
        r#"test.hcl:5:7: missing required attribute "command" in config in task "t""#,
    );
}

#[test]
fn a_check_needs_what_its_type_probes() {
    let src = job_with(
        "    service {\n      check {\n        type = \"script\"\n        interval = \"10s\"\n        timeout = \"1s\"\n      }\n    }",
    );
    assert_one_error(
        &src,
        r#"test.hcl:4:7: missing required attribute "command" in check in group "g""#,
    );
}

#[test]
fn an_upstream_needs_a_valid_local_port() {
    let src = job_with(
        "    service {\n      connect {\n        sidecar_service {\n          proxy {\n            upstreams {\n              destination_name = \"api\"\n              local_bind_port = 70000\n            }\n          }\n        }\n      }\n    }",
    );
    assert_one_error(
        &src,
        r#"test.hcl:9:33: "local_bind_port" in upstreams in group "g" must be a port from 1 to 65535, found 70000"#,
    );
}

#[test]
fn hcl2_variables_at_the_top_level_are_read_and_left_out_of_the_spec() {
    let src = format!(
        "variables {{\n  path = \"x\"\n}}\n{}",
        fixture("job-plugin.hcl")
    );
    let decoded = ok(job(&src));
    assert!(
        !warnings(&decoded.warnings)
            .iter()
            .any(|w| w.contains("variables")),
        "{:?}",
        decoded.warnings
    );
    assert!(!decoded.spec.to_hcl().contains("variables"));
    let again = ok(job(&decoded.spec.to_hcl())).spec;
    assert_eq!(again, decoded.spec);
}

#[test]
fn raw_exec_tasks_decode_with_their_own_config_keys() {
    let src = job_with(
        "task \"r\" {\n      driver = \"raw_exec\"\n      config {\n        command       = \"/usr/bin/env\"\n        oom_score_adj = 10\n      }\n    }",
    );
    let decoded = ok(job(&src));
    let task = &decoded.spec.groups[0].tasks[0];
    assert_eq!(task.name, "r");
    assert_eq!(task.driver, Driver::RawExec);
    assert_eq!(task.config.command, "/usr/bin/env");
    assert_eq!(
        warnings(&decoded.warnings),
        [r#"test.hcl:7:9: warning: "oom_score_adj" in config in task "r" is ignored by csi-agent"#]
    );
    let again = ok(job(&decoded.spec.to_hcl())).spec;
    assert_eq!(again, decoded.spec);
    // The exec driver's keys are not raw_exec's.
    let src = src.replace("oom_score_adj", "pid_mode");
    assert_one_error(
        &src,
        r#"test.hcl:7:9: unknown attribute "pid_mode" in config in task "r""#,
    );
}

#[test]
fn exec_tasks_take_pid_mode_ipc_mode_and_capabilities() {
    let src = job_with(
        "task \"e\" {\n      driver = \"exec\"\n      config {\n        command  = \"/bin/true\"\n        pid_mode = \"host\"\n        ipc_mode = \"private\"\n        cap_add  = [\"sys_admin\"]\n        cap_drop = [\"all\"]\n      }\n    }",
    );
    let decoded = ok(job(&src));
    let task = &decoded.spec.groups[0].tasks[0];
    assert_eq!(task.config.pid_mode, NamespaceMode::Host);
    assert_eq!(task.config.ipc_mode, NamespaceMode::Private);
    assert_eq!(task.config.cap_add, ["SYS_ADMIN"]);
    assert_eq!(task.config.cap_drop, ["ALL"]);
    assert!(
        decoded.warnings.is_empty(),
        "{:?}",
        warnings(&decoded.warnings)
    );
    let again = ok(job(&decoded.spec.to_hcl())).spec;
    assert_eq!(again, decoded.spec);
    assert_one_error(
        &src.replace("\"host\"", "\"container\""),
        r#"test.hcl:7:20: "pid_mode" in config in task "e" must be "private" or "host", found "container""#,
    );
}

#[test]
fn a_raw_exec_task_cannot_mount_volumes() {
    let src = job_with(
        "volume \"data\" {\n      type   = \"host\"\n      source = \"data\"\n    }\n    task \"r\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"/bin/true\"\n      }\n      volume_mount {\n        volume      = \"data\"\n        destination = \"/data\"\n      }\n    }",
    );
    assert_one_error(
        &src,
        r#"test.hcl:12:7: volume_mount in task "r": task driver "raw_exec" does not support volume mounts (it runs the task on the host's root); use driver "exec""#,
    );
}

#[test]
fn a_network_namespace_of_the_agent_s_making_is_refused_for_exec_tasks() {
    for mode in ["bridge", "cni/mynet", "none"] {
        assert_one_error(
            &job_with(&format!("    network {{\n      mode = \"{mode}\"\n    }}")),
            &format!(
                "test.hcl:4:14: network mode \"{mode}\" in group \"g\" is not supported: csi-agent runs exec and raw_exec tasks in the host's network (mode = \"host\")"
            ),
        );
    }
    let host = job_with("    network {\n      mode = \"host\"\n      port \"http\" {}\n    }");
    let decoded = job(&host);
    assert!(decoded.is_ok(), "{decoded:?}");
    assert!(warnings(&decoded.unwrap().warnings).is_empty());
}

#[test]
fn a_bad_port_is_an_error_at_its_position() {
    assert_one_error(
        &job_with("    network {\n      port \"db\" {\n        static = 70000\n      }\n    }"),
        r#"test.hcl:5:18: "static" in port "db" must be a port from 1 to 65535, found 70000"#,
    );
    let twice = job_with("    network {\n      port \"db\" {}\n      port \"db\" {}\n    }");
    assert_one_error(
        &twice,
        r#"test.hcl:5:12: port "db" is declared twice in network in group "g" (first at 4:12)"#,
    );
}

#[test]
fn nomads_minus_one_means_the_host_s_port_for_to_and_no_limit_for_memory_max() {
    let src = job_with("    network {\n      port \"http\" {\n        to = -1\n      }\n    }")
        .replace(
            "        command = \"/bin/true\"\n      }",
            "        command = \"/bin/true\"\n      }\n      resources {\n        memory     = 64\n        memory_max = -1\n      }",
        );
    let spec = job(&src).unwrap().spec;
    let group = &spec.groups[0];
    assert_eq!(group.network.as_ref().unwrap().ports[0].to, None);
    let resources = group.tasks[0].resources.as_ref().unwrap();
    assert_eq!(
        resources.memory_max,
        Some(csi_agent::spec::MemoryMax::Unlimited)
    );
    // Any other negative number is still refused, at its position.
    assert_one_error(
        &job_with("    network {\n      port \"db\" {\n        to = -2\n      }\n    }"),
        r#"test.hcl:5:14: "to" in port "db" must be a port from 1 to 65535 (or -1, the host's port), found -2"#,
    );
}

#[test]
fn a_static_port_in_a_group_of_more_than_one_alloc_is_warned_about_at_its_position() {
    let src = job_with(
        "    count = 2\n    network {\n      port \"http\" {}\n      port \"db\" {\n        static = 5432\n      }\n    }",
    );
    let decoded = ok(job(&src));
    assert_eq!(
        warnings(&decoded.warnings),
        [
            r#"test.hcl:7:18: warning: group "g" has count = 2 and a static port "db": this node runs one of its allocs at a time, and the others wait for the port ("network: reserved port collision"), as Nomad's scheduler places one per node"#
        ]
    );
    // One alloc, or no static port: nothing to say.
    for quiet in [
        src.replace("count = 2", "count = 1"),
        src.replace("static = 5432", "to = 5432"),
    ] {
        assert!(warnings(&ok(job(&quiet)).warnings).is_empty(), "{quiet}");
    }
}
