use super::*;
use crate::spec::{AgentConfig, Driver, Job};

/// A job whose one task is a docker task with `config` as given, in a group
/// with a network port "http" and a host volume "data".
fn job(config: &str) -> String {
    format!(
        r#"job "j" {{
  group "g" {{
    network {{
      mode = "bridge"
      port "http" {{
        static = 8080
        to     = 80
      }}
    }}
    volume "data" {{
      type   = "host"
      source = "data"
    }}
    task "t" {{
      driver = "docker"
      config {{
{config}
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

/// The line `config` starts on in [`job`]'s text.
const CONFIG_LINE: usize = 16;

fn decode(config: &str) -> DockerConfig {
    match Job::decode(&job(config), "job.hcl") {
        Ok(decoded) => decoded.spec.groups[0].tasks[0].docker.clone().unwrap(),
        Err(invalid) => panic!("{invalid}"),
    }
}

fn errors(config: &str) -> Vec<String> {
    match Job::decode(&job(config), "job.hcl") {
        Ok(decoded) => panic!("expected errors, got {:?}", decoded.spec),
        Err(invalid) => invalid.errors.iter().map(ToString::to_string).collect(),
    }
}

fn warnings(config: &str) -> Vec<String> {
    match Job::decode(&job(config), "job.hcl") {
        Ok(decoded) => decoded.warnings.iter().map(|w| w.message.clone()).collect(),
        Err(invalid) => panic!("{invalid}"),
    }
}

const EVERY_KEY: &str = r#"
        image       = "registry.example/app:1.2"
        command     = "/bin/app"
        entrypoint  = ["/init", "--"]
        args        = ["--port", "${NOMAD_PORT_http}"]
        work_dir    = "/srv"
        privileged  = true
        cap_add     = ["sys_admin", "CAP_NET_ADMIN"]
        cap_drop    = ["all"]
        network_mode = "host"
        ipc_mode    = "host"
        pid_mode    = "host"
        hostname    = "app-${NOMAD_ALLOC_INDEX}"
        labels {
          team = "storage"
        }
        devices = [
          {
            host_path          = "/dev/fuse"
            container_path     = "/dev/fuse"
            cgroup_permissions = "rw"
          },
          {
            host_path = "/dev/sda"
          },
        ]
        mount {
          type     = "bind"
          source   = "local/conf"
          target   = "/etc/app"
          readonly = true
          bind_options {
            propagation = "rshared"
          }
        }
        mount {
          type   = "tmpfs"
          target = "/scratch"
          tmpfs_options {
            size = 1000000
            mode = 1777
          }
        }
        mount {
          target = "/cache"
          source = "cache"
          volume_options {
            no_copy = true
            labels {
              a = "b"
            }
          }
        }
        volumes     = ["/var/lib/app:/data", "local/x:/x:ro", "/run:/run:rw,rshared"]
        force_pull  = true
        auth {
          username       = "me"
          password       = "hunter2"
          email          = "me@example.com"
          server_address = "registry.example"
        }
        ports       = ["http"]
        init        = true
        readonly_rootfs = true
        shm_size    = 67108864
        sysctl = {
          "net.core.somaxconn" = "16384"
        }
        ulimit {
          nofile = "4096:8192"
        }
        security_opt = ["no-new-privileges"]
        extra_hosts  = ["db:10.0.0.2"]
        dns_servers  = ["10.0.0.53"]
        mac_address  = "02:42:ac:11:65:43"
        userns_mode  = "host"
        uts_mode     = "host"
        storage_opt {
          size = "40G"
        }
        tty          = true
        interactive  = true
        oom_score_adj = -500
        memory_hard_limit = 512
        dns_search_domains = ["svc.local"]
        dns_options = ["ndots:2"]
        group_add   = ["video"]
        pids_limit  = 100
        cpu_hard_limit = true
        cpu_cfs_period = 50000
        cpuset_cpus = "0-1,3"
        runtime     = "runsc"
        logging {
          type = "syslog"
          config {
            tag = "app"
          }
        }
"#;

#[test]
fn every_key_decodes() {
    let c = decode(EVERY_KEY);
    assert_eq!(c.pids_limit, Some(100));
    assert_eq!(c.dns_search_domains, ["svc.local"]);
    assert_eq!(c.dns_options, ["ndots:2"]);
    assert_eq!(c.group_add, ["video"]);
    assert!(c.cpu_hard_limit);
    assert_eq!(c.cpu_cfs_period, Some(50000));
    assert_eq!(c.cpuset_cpus.as_deref(), Some("0-1,3"));
    assert_eq!(c.runtime.as_deref(), Some("runsc"));
    assert_eq!(
        c.logging,
        Some(DockerLogging {
            driver: "syslog".into(),
            config: [("tag".to_string(), "app".to_string())].into(),
        })
    );
    assert_eq!(c.image, "registry.example/app:1.2");
    assert_eq!(c.command.as_deref(), Some("/bin/app"));
    assert_eq!(c.entrypoint, ["/init", "--"]);
    assert_eq!(c.args, ["--port", "${NOMAD_PORT_http}"]);
    assert_eq!(c.work_dir.as_deref(), Some("/srv"));
    assert!(c.privileged);
    assert_eq!(c.cap_add, ["SYS_ADMIN", "NET_ADMIN"]);
    assert_eq!(c.cap_drop, ["ALL"]);
    assert_eq!(c.network_mode, "host");
    assert_eq!(c.ipc_mode.as_deref(), Some("host"));
    assert_eq!(c.pid_mode.as_deref(), Some("host"));
    assert_eq!(c.hostname.as_deref(), Some("app-${NOMAD_ALLOC_INDEX}"));
    assert_eq!(c.labels["team"], "storage");
    assert_eq!(
        c.devices,
        [
            DockerDevice {
                host_path: "/dev/fuse".into(),
                container_path: "/dev/fuse".into(),
                cgroup_permissions: "rw".into(),
            },
            DockerDevice {
                host_path: "/dev/sda".into(),
                container_path: "/dev/sda".into(),
                cgroup_permissions: "rwm".into(),
            },
        ]
    );
    assert_eq!(c.mounts.len(), 3);
    assert_eq!(c.mounts[0].mount_type, DockerMountType::Bind);
    assert_eq!(c.mounts[0].source, "local/conf");
    assert!(c.mounts[0].readonly);
    assert_eq!(c.mounts[0].propagation, Some(BindPropagation::Rshared));
    assert_eq!(c.mounts[1].mount_type, DockerMountType::Tmpfs);
    assert_eq!(c.mounts[1].tmpfs_size, Some(1_000_000));
    assert_eq!(c.mounts[1].tmpfs_mode, Some(1777));
    assert_eq!(c.mounts[2].mount_type, DockerMountType::Volume);
    let options = c.mounts[2].volume_options.as_ref().unwrap();
    assert!(options.no_copy);
    assert_eq!(options.labels["a"], "b");
    assert_eq!(
        c.volumes,
        [
            DockerVolume::parse("/var/lib/app:/data").unwrap(),
            DockerVolume {
                source: "local/x".into(),
                target: "/x".into(),
                mode: vec!["ro".into()],
            },
            DockerVolume::parse("/run:/run:rw,rshared").unwrap(),
        ]
    );
    assert!(c.volumes[1].read_only());
    assert!(!c.volumes[2].read_only());
    assert!(c.force_pull);
    let auth = c.auth.as_ref().unwrap();
    assert_eq!(auth.username.as_deref(), Some("me"));
    assert_eq!(auth.password.as_deref(), Some("hunter2"));
    assert_eq!(auth.email.as_deref(), Some("me@example.com"));
    assert_eq!(auth.server_address.as_deref(), Some("registry.example"));
    assert_eq!(c.ports, ["http"]);
    assert!(c.init && c.readonly_rootfs && c.tty && c.interactive);
    assert_eq!(c.shm_size, Some(67_108_864));
    assert_eq!(c.sysctl["net.core.somaxconn"], "16384");
    assert_eq!(c.ulimit["nofile"], "4096:8192");
    assert_eq!(c.security_opt, ["no-new-privileges"]);
    assert_eq!(c.extra_hosts, ["db:10.0.0.2"]);
    assert_eq!(c.dns_servers, ["10.0.0.53"]);
    assert_eq!(c.mac_address.as_deref(), Some("02:42:ac:11:65:43"));
    assert_eq!(c.userns_mode.as_deref(), Some("host"));
    assert_eq!(c.uts_mode.as_deref(), Some("host"));
    assert_eq!(c.storage_opt["size"], "40G");
    assert_eq!(c.oom_score_adj, Some(-500));
    assert_eq!(c.memory_hard_limit, Some(512));
    assert!(c.ignored.is_empty());
}

#[test]
fn the_task_and_its_group_network_around_a_docker_config() {
    let job = Job::decode(&job(EVERY_KEY), "job.hcl").unwrap().spec;
    let group = &job.groups[0];
    let network = group.network.as_ref().unwrap();
    assert_eq!(network.mode, "bridge");
    assert_eq!(network.ports[0].label, "http");
    assert_eq!(network.ports[0].static_port, Some(8080));
    assert_eq!(network.ports[0].to, Some(80));
    let task = &group.tasks[0];
    assert_eq!(task.driver, Driver::Docker);
    assert_eq!(task.config, crate::spec::ExecConfig::default());
    assert_eq!(task.volume_mounts.len(), 1);
}

#[test]
fn a_docker_job_round_trips_through_to_hcl() {
    let job = Job::decode(&job(EVERY_KEY), "job.hcl").unwrap().spec;
    let again = match Job::decode(&job.to_hcl(), "again.hcl") {
        Ok(decoded) => decoded.spec,
        Err(invalid) => panic!("{invalid}\n{}", job.to_hcl()),
    };
    assert_eq!(again, job);
    let minimal = Job::decode(&self::job("image = \"redis:7\""), "job.hcl")
        .unwrap()
        .spec;
    assert_eq!(
        Job::decode(&minimal.to_hcl(), "a.hcl").unwrap().spec,
        minimal
    );
}

#[test]
fn defaults_of_a_minimal_config() {
    let c = decode(r#"image = "redis:7""#);
    assert_eq!(
        c,
        DockerConfig {
            image: "redis:7".into(),
            ..DockerConfig::default()
        }
    );
    assert!(!c.privileged && !c.force_pull && c.network_mode.is_empty());
}

#[test]
fn the_password_stays_out_of_debug() {
    let c = decode(EVERY_KEY);
    let shown = format!("{c:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn a_missing_image_is_an_error_at_the_config_block() {
    assert_eq!(
        errors(r#"command = "x""#),
        [format!(
            "job.hcl:{}:7: missing required attribute \"image\" in config in task \"t\"",
            CONFIG_LINE
        )]
    );
}

#[test]
fn a_bad_capability_is_named_at_its_position() {
    assert_eq!(
        errors(
            r#"image = "x"
        cap_add = ["SYS_ADMIN", "CAP_SYS_ADMINN"]"#
        ),
        [format!(
            "job.hcl:{}:33: \"cap_add\" in config in task \"t\": \"CAP_SYS_ADMINN\" is not a Linux capability (such as \"SYS_ADMIN\", \"net_admin\" or \"all\")",
            CONFIG_LINE + 2
        )]
    );
}

#[test]
fn capability_names_are_taken_as_nomad_takes_them() {
    assert_eq!(capability("sys_admin").as_deref(), Some("SYS_ADMIN"));
    assert_eq!(capability("CAP_CHOWN").as_deref(), Some("CHOWN"));
    assert_eq!(capability("cap_bpf").as_deref(), Some("BPF"));
    assert_eq!(capability("ALL").as_deref(), Some("ALL"));
    assert_eq!(capability("root"), None);
    assert_eq!(CAPABILITIES.len(), 41);
}

#[test]
fn a_bad_volumes_string_is_named_at_its_position() {
    assert_eq!(
        errors(
            r#"image = "x"
        volumes = ["/ok:/ok", "/a:/b:c:d", "/a:rel", "/a:/b:rx"]"#
        ),
        [
            format!(
                "job.hcl:{}:31: volume \"/a:/b:c:d\" in \"volumes\" in config in task \"t\": expected \"host:container\" or \"host:container:mode\" with mode ro or rw",
                CONFIG_LINE + 2
            ),
            format!(
                "job.hcl:{}:44: volume \"/a:rel\" in \"volumes\" in config in task \"t\": the container path \"rel\" must be absolute",
                CONFIG_LINE + 2
            ),
            format!(
                "job.hcl:{}:54: volume \"/a:/b:rx\" in \"volumes\" in config in task \"t\": unknown mode \"rx\" (expected one of: ro, rw, z, Z, nocopy, rprivate, private, rslave, slave, rshared, shared)",
                CONFIG_LINE + 2
            ),
        ]
    );
}

#[test]
fn a_bad_propagation_is_an_error_at_its_value() {
    assert_eq!(
        errors(
            r#"image = "x"
        mount {
          type   = "bind"
          source = "/a"
          target = "/b"
          bind_options {
            propagation = "bidirectional"
          }
        }"#
        ),
        [format!(
            "job.hcl:{}:27: \"propagation\" in bind_options in task \"t\": unknown bind propagation \"bidirectional\" (expected one of: rprivate, private, rslave, slave, rshared, shared)",
            CONFIG_LINE + 7
        )]
    );
}

#[test]
fn mount_rules() {
    let errors = errors(
        r#"image = "x"
        mount {
          type   = "tmpfs"
          source = "/a"
          target = "/t"
        }
        mount {
          type   = "bind"
          target = "/b"
          tmpfs_options {
            size = 1
          }
        }
        mount {
          type = "nfs"
          target = "/n"
        }"#,
    );
    assert_eq!(errors.len(), 4, "{errors:#?}");
    assert!(errors[0].contains(
        "\"source\" in mount in task \"t\" must be empty for a tmpfs mount, found \"/a\""
    ));
    assert!(errors[1].contains("missing required attribute \"source\" in mount"));
    assert!(errors[2].contains(
        "tmpfs_options in mount in task \"t\" applies only to a tmpfs mount, and this one is bind"
    ));
    assert!(errors[3].contains("unknown mount type \"nfs\""));
}

#[test]
fn an_unknown_key_is_refused_with_the_nearest_name() {
    assert_eq!(
        errors(
            r#"image = "x"
        privilegd = true"#
        ),
        [format!(
            "job.hcl:{}:9: unknown attribute \"privilegd\" in config in task \"t\" (did you mean \"privileged\"?)",
            CONFIG_LINE + 2
        )]
    );
}

#[test]
fn a_port_label_must_name_a_port_of_the_group_network() {
    assert_eq!(
        errors(
            r#"image = "x"
        ports = ["http", "htp", "db"]"#
        ),
        [
            format!(
                "job.hcl:{}:26: port \"htp\" in \"ports\" in config in task \"t\": the group's network block has no port \"htp\" (did you mean \"http\"?)",
                CONFIG_LINE + 2
            ),
            format!(
                "job.hcl:{}:33: port \"db\" in \"ports\" in config in task \"t\": the group's network block has no port \"db\"",
                CONFIG_LINE + 2
            ),
        ]
    );
    let no_network = r#"job "j" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "x"
        ports = ["db"]
      }
    }
  }
}"#;
    let invalid = Job::decode(no_network, "job.hcl").unwrap_err();
    assert_eq!(
        invalid.errors[0].to_string(),
        "job.hcl:7:18: port \"db\" in \"ports\" in config in task \"t\": the group has no network block"
    );
}

#[test]
fn modes_and_limits_are_checked() {
    let errors = errors(
        r#"image = ""
        network_mode = "weave"
        pid_mode = "container:x"
        oom_score_adj = 1001
        devices = [{ host_path = "/dev/x", cgroup_permissions = "rx" }]"#,
    );
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert!(errors[0].contains("\"image\" in config in task \"t\" must not be empty"));
    assert!(errors[1].contains("\"network_mode\" in config in task \"t\" must be \"bridge\", \"host\", \"none\" or \"container:<name>\", found \"weave\""));
    assert!(errors[2].contains("\"pid_mode\" in config in task \"t\" must be \"host\" or \"\""));
    assert!(errors[3].contains(
        "\"oom_score_adj\" in config in task \"t\" must be from -1000 to 1000, found 1001"
    ));
    assert!(errors[4].contains(
        "\"cgroup_permissions\" in devices in task \"t\" must be made of r, w and m, found \"rx\""
    ));
    assert_eq!(
        decode(
            r#"image = "x"
        network_mode = "container:db""#
        )
        .network_mode,
        "container:db"
    );
}

#[test]
fn keys_csi_agent_does_not_act_on_are_warnings() {
    let warnings = warnings(
        r#"image = "x"
        auth_soft_fail = true
        image_pull_timeout = "10m"
        isolation = "process"
        mount {
          source = "v"
          target = "/v"
          volume_options {
            driver_config {
              name = "pxd"
            }
          }
        }"#,
    );
    assert_eq!(
        warnings,
        [
            "\"auth_soft_fail\" in config in task \"t\" is ignored by csi-agent",
            "\"image_pull_timeout\" in config in task \"t\" is ignored by csi-agent",
            "\"isolation\" in config in task \"t\" is ignored by csi-agent",
            "\"driver_config\" in volume_options in task \"t\" is ignored by csi-agent",
        ]
    );
}

#[test]
fn the_older_mounts_list_is_read_as_mount_blocks() {
    let c = decode(
        r#"image = "x"
        mounts = [
          {
            type   = "bind"
            source = "/a"
            target = "/b"
            bind_options = {
              propagation = "rslave"
            }
          }
        ]"#,
    );
    assert_eq!(c.mounts.len(), 1);
    assert_eq!(c.mounts[0].propagation, Some(BindPropagation::Rslave));
}

fn settings(src: &str) -> DockerSettings {
    match AgentConfig::decode(src, "agent.hcl") {
        Ok(decoded) => decoded.spec.docker,
        Err(invalid) => panic!("{invalid}"),
    }
}

#[test]
fn agent_settings_default_as_nomad() {
    assert_eq!(
        settings(""),
        DockerSettings {
            endpoint: "unix:///var/run/docker.sock".into(),
            allow_privileged: false,
            volumes_enabled: false,
            image_gc: false,
        }
    );
}

#[test]
fn agent_settings_in_nomad_s_plugin_form_and_the_short_form() {
    let expected = DockerSettings {
        endpoint: "unix:///run/docker.sock".into(),
        allow_privileged: true,
        volumes_enabled: true,
        image_gc: true,
    };
    let plugin = r#"
plugin "docker" {
  config {
    endpoint         = "unix:///run/docker.sock"
    allow_privileged = true
    volumes {
      enabled = true
    }
    gc {
      image = true
      image_delay = "3m"
    }
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
plugin "hostpath" {
  socket = "/run/csi/hostpath.sock"
  type   = "monolith"
}
"#;
    let decoded = AgentConfig::decode(plugin, "agent.hcl").unwrap();
    assert_eq!(decoded.spec.docker, expected);
    assert_eq!(decoded.spec.plugins.len(), 1);
    let warnings: Vec<&str> = decoded
        .warnings
        .iter()
        .map(|w| w.message.as_str())
        .collect();
    assert_eq!(
        warnings,
        [
            "\"image_delay\" in gc in plugin \"docker\" is ignored by csi-agent",
            "plugin \"raw_exec\" configures Nomad's \"raw_exec\" task driver, which csi-agent configures itself: ignored",
        ]
    );
    let short = r#"
docker {
  endpoint         = "/run/docker.sock"
  allow_privileged = true
  volumes {
    enabled = true
  }
  gc {
    image = true
  }
}
"#;
    let config = AgentConfig::decode(short, "agent.hcl").unwrap().spec;
    assert_eq!(config.docker, expected);
    assert_eq!(
        AgentConfig::decode(&config.to_hcl(), "again.hcl")
            .unwrap()
            .spec,
        config
    );
}

#[test]
fn agent_settings_errors() {
    let both = r#"plugin "docker" {
  config {
    allow_privileged = true
  }
}
docker {
  endpoint = "tcp://127.0.0.1:2375"
}
"#;
    let errors: Vec<String> = AgentConfig::decode(both, "agent.hcl")
        .unwrap_err()
        .errors
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        ["agent.hcl:6:1: the docker settings are given twice: as a docker block here and as plugin \"docker\" at 1:1; keep one"]
    );
    let errors: Vec<String> = AgentConfig::decode(
        "docker {\n  endpoint = \"docker.sock\"\n  alow_privileged = true\n}\n",
        "agent.hcl",
    )
    .unwrap_err()
    .errors
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(
        errors,
        [
            "agent.hcl:2:14: \"endpoint\" in docker in the agent config must be unix:///path/to/docker.sock or an absolute path, found \"docker.sock\"",
            "agent.hcl:3:3: unknown attribute \"alow_privileged\" in docker in the agent config (did you mean \"allow_privileged\"?)",
        ]
    );
}

#[test]
fn a_docker_job_in_hcl_s_json_syntax_decodes_the_same() {
    let src = r#"{
  "job": {
    "j": {
      "group": {
        "g": {
          "network": { "port": { "http": { "to": 80 } } },
          "task": {
            "t": {
              "driver": "docker",
              "config": {
                "image": "x",
                "ports": ["http"],
                "cap_add": ["net_admin"],
                "labels": { "a.b": "c" },
                "devices": [{ "host_path": "/dev/fuse" }],
                "mount": [
                  { "type": "bind", "source": "/a", "target": "/b",
                    "bind_options": { "propagation": "rslave" } },
                  { "type": "tmpfs", "target": "/t" }
                ]
              }
            }
          }
        }
      }
    }
  }
}"#;
    let job = match Job::decode(src, "job.json") {
        Ok(decoded) => decoded.spec,
        Err(invalid) => panic!("{invalid}"),
    };
    let c = job.groups[0].tasks[0].docker.as_ref().unwrap();
    assert_eq!(c.ports, ["http"]);
    assert_eq!(c.cap_add, ["NET_ADMIN"]);
    assert_eq!(c.labels["a.b"], "c");
    assert_eq!(c.devices[0].container_path, "/dev/fuse");
    assert_eq!(c.mounts.len(), 2);
    assert_eq!(c.mounts[0].propagation, Some(BindPropagation::Rslave));
    assert_eq!(c.mounts[1].mount_type, DockerMountType::Tmpfs);
    let again = Job::decode(&job.to_hcl(), "again.hcl").unwrap().spec;
    assert_eq!(again, job);
}

#[test]
fn a_string_holding_a_number_or_a_bool_converts_as_hcl_converts_it() {
    // Nomad's portworx demo writes `static = "9015"`.
    let src = job("image = \"redis:7\"\nprivileged = \"true\"")
        .replace("static = 8080", "static = \"9015\"");
    let job = Job::decode(&src, "job.hcl").unwrap().spec;
    let group = &job.groups[0];
    assert_eq!(
        group.network.as_ref().unwrap().ports[0].static_port,
        Some(9015)
    );
    assert!(group.tasks[0].docker.as_ref().unwrap().privileged);
    let src = job_text_with_static("\"90x15\"");
    let err = Job::decode(&src, "job.hcl").unwrap_err();
    assert_eq!(
        err.errors[0].to_string(),
        "job.hcl:6:18: \"static\" in port \"http\" must be a number, found a string"
    );
}

fn job_text_with_static(value: &str) -> String {
    job("image = \"redis:7\"").replace("static = 8080", &format!("static = {value}"))
}

#[test]
fn limits_out_of_range_are_errors_at_their_values() {
    let at = |n: usize| format!("job.hcl:{}:", CONFIG_LINE + 1 + n);
    let errors = errors(
        r#"image = "x"
        cpu_cfs_period = 999
        cpuset_cpus = "0-"
        runtime = ""
        logging {
          type   = "syslog"
          driver = "journald"
        }"#,
    );
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert!(errors[0].starts_with(&at(1)), "{errors:?}");
    assert!(
        errors[0].ends_with("\"cpu_cfs_period\" in config in task \"t\" must be from 1000 to 1000000 microseconds (the kernel's MIN_CFS_PERIOD and MAX_CFS_PERIOD), found 999"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with(&at(2)) && errors[1].contains("\"0-2,4\""),
        "{errors:?}"
    );
    assert!(
        errors[2].starts_with(&at(3)) && errors[2].contains("\"runtime\""),
        "{errors:?}"
    );
    assert!(
        errors[3].starts_with(&at(6)) && errors[3].contains("not both"),
        "{errors:?}"
    );
}

#[test]
fn keys_a_job_relies_on_that_csi_agent_lacks_are_refused_at_their_lines() {
    let errors = errors(
        r#"image = "x"
        load = "redis.tar"
        port_map {
          http = 80
        }"#,
    );
    assert_eq!(
        errors,
        [
            format!("job.hcl:{}:9: \"load\" in config in task \"t\" is not supported by csi-agent: csi-agent loads no image from an artifact's archive: the engine must have or pull \"image\"", CONFIG_LINE + 2),
            format!("job.hcl:{}:9: \"port_map\" in config in task \"t\" is not supported by csi-agent: it is Nomad's pre-0.12 port mapping: name the group network's ports in \"ports\", with their \"to\"", CONFIG_LINE + 3),
        ]
    );
}
