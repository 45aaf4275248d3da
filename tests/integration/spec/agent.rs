//! The agent configuration.

use std::path::PathBuf;
use std::time::Duration;

use csi_agent::csi::Endpoint;
use csi_agent::spec::{
    AgentConfig, ChrootEntry, ClientCert, ClusterTls, HostVolume, PluginConfig, PluginType,
};
use log::LevelFilter;

use super::{agent, assert_one_error, errors, fixture, ok};

#[test]
fn an_empty_config_takes_every_default() {
    let config = ok(agent("")).spec;
    assert_eq!(config, AgentConfig::default());
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/csi-agent"));
    assert_eq!(config.plugin_heartbeat, Duration::from_secs(30));
    assert_eq!(config.log_level, LevelFilter::Info);
    assert_eq!(config.node_name, None);
}

#[test]
fn the_agent_fixture_decodes_to_its_plugins_and_host_volumes() {
    let decoded = ok(agent(fixture("agent.hcl")));
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let expected = AgentConfig {
        data_dir: PathBuf::from("/var/lib/csi-agent"),
        csi_dir: None,
        node_name: Some("node-1".to_string()),
        log_level: LevelFilter::Debug,
        plugin_heartbeat: Duration::from_secs(60),
        rpc_timeout: Duration::from_secs(120),
        volume_stats_interval: Duration::from_secs(60),
        max_kill_timeout: Duration::from_secs(30),
        plugins: vec![
            PluginConfig {
                id: "hostpath".to_string(),
                socket: Endpoint::from_path("/run/csi/hostpath.sock").unwrap(),
                plugin_type: PluginType::Monolith,
                health_timeout: Duration::from_secs(30),
            },
            PluginConfig {
                id: "ebs".to_string(),
                socket: Endpoint::from_path("/run/csi/ebs-controller.sock").unwrap(),
                plugin_type: PluginType::Controller,
                health_timeout: Duration::from_secs(30),
            },
            PluginConfig {
                id: "ebs".to_string(),
                socket: Endpoint::from_path("/run/csi/ebs-node.sock").unwrap(),
                plugin_type: PluginType::Node,
                health_timeout: Duration::from_secs(30),
            },
        ],
        chroot_env: None,
        cluster: None,
        datacenter: "dc1".to_string(),
        region: "global".to_string(),
        meta: Default::default(),
        docker: Default::default(),
        exec: Default::default(),
        telemetry: Default::default(),
        client: Default::default(),
        volume_plugin: None,
        host_volumes: vec![
            HostVolume {
                name: "certs".to_string(),
                path: PathBuf::from("/etc/ssl/certs"),
                read_only: true,
            },
            HostVolume {
                name: "scratch".to_string(),
                path: PathBuf::from("/srv/scratch"),
                read_only: false,
            },
        ],
    };
    assert_eq!(decoded.spec, expected);
}

#[test]
fn the_agent_config_round_trips_through_hcl() {
    for name in ["agent.hcl", "agent-chroot.hcl"] {
        let config = ok(agent(fixture(name))).spec;
        let text = config.to_hcl();
        let again = ok(agent(&text)).spec;
        assert_eq!(again, config, "{text}");
        assert_eq!(again.to_hcl(), text);
    }
    let empty = ok(agent("chroot_env {}\n")).spec;
    assert_eq!(empty.chroot_env, Some(Vec::new()));
    assert_eq!(ok(agent(&empty.to_hcl())).spec, empty);
}

#[test]
fn datacenter_region_and_meta_are_read_and_written_back() {
    let config = ok(agent(
        "datacenter = \"eu-1\"\nregion = \"europe\"\nmeta {\n  rack = \"r7\"\n  \"zone.name\" = \"b\"\n}\n",
    ))
    .spec;
    assert_eq!(config.datacenter, "eu-1");
    assert_eq!(config.region, "europe");
    assert_eq!(config.meta["rack"], "r7");
    assert_eq!(config.meta["zone.name"], "b");
    assert_eq!(ok(agent(&config.to_hcl())).spec, config);
    assert_one_error(
        "datacenter = \"\"\n",
        "test.hcl:1:14: \"datacenter\" must not be empty (leave it out for Nomad's default)",
    );
}

#[test]
fn chroot_env_defaults_to_nomads_and_the_example_replaces_it() {
    let default = AgentConfig::default().chroot_env();
    let destinations: Vec<&str> = default
        .iter()
        .map(|e| e.destination.to_str().unwrap())
        .collect();
    assert_eq!(
        destinations,
        [
            "/bin",
            "/etc",
            "/lib",
            "/lib32",
            "/lib64",
            "/run/resolvconf",
            "/sbin",
            "/usr"
        ]
    );
    assert!(default.iter().all(|e| e.source == e.destination));
    let config = ok(agent(fixture("agent-chroot.hcl"))).spec;
    let entries = config.chroot_env();
    assert_eq!(entries.len(), 7);
    assert_eq!(
        entries[0],
        ChrootEntry {
            source: PathBuf::from("/bin/ls"),
            destination: PathBuf::from("/bin/ls"),
        }
    );
    // As an object, and with a destination of its own.
    let config = ok(agent("chroot_env = { \"/opt/busybox/bin\" = \"/bin\" }\n")).spec;
    assert_eq!(
        config.chroot_env(),
        [ChrootEntry {
            source: PathBuf::from("/opt/busybox/bin"),
            destination: PathBuf::from("/bin"),
        }]
    );
}

#[test]
fn volume_stats_interval_is_bounded_at_both_edges_and_zero_turns_the_polls_off() {
    for (text, secs) in [("0s", 0), ("5s", 5), ("60s", 60), ("1h", 3600)] {
        let config = ok(agent(&format!("volume_stats_interval = {text:?}\n"))).spec;
        assert_eq!(config.volume_stats_interval, Duration::from_secs(secs));
        assert_eq!(ok(agent(&config.to_hcl())).spec, config);
    }
    for text in ["4s", "4999ms", "3601s", "2h"] {
        assert_one_error(
            &format!("volume_stats_interval = {text:?}\n"),
            "test.hcl:1:25: \"volume_stats_interval\" must be from 5s to 1h, or 0s to poll no volume",
        );
    }
}

#[test]
fn chroot_env_paths_are_absolute_and_stay_out_of_the_agents_dirs() {
    assert_one_error(
        "chroot_env {\n  \"bin\" = \"/bin\"\n}\n",
        r#"test.hcl:2:3: chroot_env source "bin" must be an absolute path (did you mean "/bin"?)"#,
    );
    assert_one_error(
        "chroot_env {\n  \"/usr\" = \"usr/../..\"\n}\n",
        r#"test.hcl:2:12: chroot_env destination "usr/../.." must be an absolute path (did you mean "/usr/../.."?)"#,
    );
    assert_one_error(
        "chroot_env {\n  \"/etc/../root\" = \"/etc\"\n}\n",
        r#"test.hcl:2:3: chroot_env source "/etc/../root" must not contain "..""#,
    );
    assert_one_error(
        "chroot_env {\n  \"/srv/root\" = \"/\"\n}\n",
        r#"test.hcl:2:17: chroot_env destination "/" of "/srv/root" would replace the task's whole root; bind it at a path inside the root"#,
    );
    assert_one_error(
        "chroot_env {\n  \"/dev\" = \"/dev\"\n}\n",
        r#"test.hcl:2:12: chroot_env destination "/dev" is inside /dev, the task's private /dev, which the agent makes for every exec task; leave it out"#,
    );
    assert_one_error(
        "chroot_env {\n  \"/srv/x\" = \"/secrets/x\"\n}\n",
        r#"test.hcl:2:14: chroot_env destination "/secrets/x" is inside /secrets, the task's secrets dir, which the agent makes for every exec task; leave it out"#,
    );
    assert_one_error(
        "chroot_env {\n  \"/usr/bin\" = \"/bin\"\n  \"/bin\" = \"/bin\"\n}\n",
        r#"test.hcl:3:12: chroot_env destination "/bin" is given twice (first at 2:16)"#,
    );
    // A typo of the block's name says what it meant.
    assert_one_error(
        "chroot_evn {\n  \"/bin\" = \"/bin\"\n}\n",
        r#"test.hcl:1:1: unknown block "chroot_evn" in the agent config (did you mean "chroot_env"?)"#,
    );
}

#[test]
fn one_plugin_id_takes_a_controller_block_and_a_node_block() {
    let src = "plugin \"p\" {\n  socket = \"/run/c.sock\"\n  type = \"controller\"\n}\nplugin \"p\" {\n  socket = \"/run/n.sock\"\n  type = \"node\"\n}\n";
    let plugins = ok(agent(src)).spec.plugins;
    let types: Vec<_> = plugins
        .iter()
        .map(|p| (p.id.as_str(), p.plugin_type))
        .collect();
    assert_eq!(
        types,
        [("p", PluginType::Controller), ("p", PluginType::Node)]
    );
}

#[test]
fn one_plugin_id_with_one_type_twice_is_refused_naming_both_lines() {
    let src = "plugin \"p\" {\n  socket = \"/run/a.sock\"\n  type = \"node\"\n}\nplugin \"p\" {\n  socket = \"/run/b.sock\"\n  type = \"node\"\n}\n";
    assert_one_error(
        src,
        r#"test.hcl:5:8: plugin "p" of type "node" is declared twice (first at 1:8): one ID has at most one controller and one node, as blocks of type "controller" and "node" or a single "monolith""#,
    );
}

#[test]
fn a_monolith_block_stands_alone_under_its_id() {
    let src = "plugin \"p\" {\n  socket = \"/run/a.sock\"\n  type = \"monolith\"\n}\nplugin \"q\" {\n  socket = \"/run/q.sock\"\n  type = \"node\"\n}\nplugin \"p\" {\n  socket = \"/run/b.sock\"\n  type = \"controller\"\n}\n";
    assert_one_error(
        src,
        r#"test.hcl:9:8: plugin "p" of type "controller" overlaps its "monolith" block at 1:8: one ID has at most one controller and one node, as blocks of type "controller" and "node" or a single "monolith""#,
    );
}

#[test]
fn plugin_needs_a_type_of_node_controller_or_monolith() {
    assert_one_error(
        "plugin \"p\" {\n  socket = \"/run/p.sock\"\n}\n",
        r#"test.hcl:1:1: missing required attribute "type" in plugin "p""#,
    );
    assert_one_error(
        "plugin \"p\" {\n  socket = \"/run/p.sock\"\n  type = \"both\"\n}\n",
        r#"test.hcl:3:10: "type" in plugin "p": unknown plugin type "both" (expected one of: node, controller, monolith)"#,
    );
}

#[test]
fn plugin_socket_must_fit_a_unix_socket_address() {
    let long = format!("/run/{}.sock", "x".repeat(100));
    assert_one_error(
        &format!("plugin \"p\" {{\n  socket = {long:?}\n  type = \"node\"\n}}\n"),
        &format!(
            "test.hcl:2:12: \"socket\" in plugin \"p\": socket path {long:?} is 110 bytes, longer than the 107-byte limit of a unix socket address"
        ),
    );
}

#[test]
fn plugin_socket_must_be_a_unix_socket() {
    assert_one_error(
        "plugin \"p\" {\n  socket = \"tcp://127.0.0.1:9000\"\n  type = \"node\"\n}\n",
        r#"test.hcl:2:12: "socket" in plugin "p": unsupported endpoint "tcp://127.0.0.1:9000": scheme "tcp" is not supported, CSI plugins are reached over unix sockets (unix:///path/to/csi.sock)"#,
    );
}

#[test]
fn plugin_ids_become_paths_and_are_validated() {
    assert_one_error(
        "plugin \"..\" {\n  socket = \"/run/p.sock\"\n  type = \"node\"\n}\n",
        r#"test.hcl:1:8: invalid plugin ID "..": must not be . or .."#,
    );
}

#[test]
fn data_dir_must_be_absolute() {
    assert_one_error(
        "data_dir = \"var/lib\"\n",
        r#"test.hcl:1:12: "data_dir" in the agent config must be an absolute path, found "var/lib""#,
    );
}

#[test]
fn node_name_must_not_be_empty() {
    assert_one_error(
        "node_name = \"\"\n",
        r#"test.hcl:1:13: "node_name" must not be empty (leave it out to use the host name)"#,
    );
}

#[test]
fn csi_dir_defaults_to_the_data_dirs_csi_and_may_live_elsewhere() {
    let config = ok(agent("data_dir = \"/srv/agent\"\n")).spec;
    assert_eq!(config.csi_dir(), PathBuf::from("/srv/agent/csi"));
    let text = "data_dir = \"/var/lib/csi-agent\"\ncsi_dir = \"/mnt/csi-agent\"\n";
    let config = ok(agent(text)).spec;
    assert_eq!(config.csi_dir(), PathBuf::from("/mnt/csi-agent"));
    // And it survives the way back to HCL.
    assert_eq!(ok(agent(&config.to_hcl())).spec, config);
}

#[test]
fn csi_dir_may_not_cover_the_data_dir_or_a_system_tree() {
    assert_one_error(
        "data_dir = \"/var/lib/csi-agent\"\ncsi_dir = \"/var/lib\"\n",
        "test.hcl:2:11: csi_dir /var/lib is the data dir /var/lib/csi-agent or contains it: the volumes mounted there would cover the agent's state",
    );
    assert_one_error(
        "csi_dir = \"/var/lib/csi-agent\"\n",
        "test.hcl:1:11: csi_dir /var/lib/csi-agent is the data dir /var/lib/csi-agent or contains it: the volumes mounted there would cover the agent's state",
    );
    assert_one_error(
        "csi_dir = \"/proc/mounts\"\n",
        r#"test.hcl:1:11: "csi_dir" must not be inside /proc"#,
    );
    assert_one_error(
        "csi_dir = \"/mnt/../var\"\n",
        r#"test.hcl:1:11: "csi_dir" must not contain `.` or `..`"#,
    );
}

#[test]
fn log_levels_are_the_log_crates() {
    let config = ok(agent("log_level = \"WARN\"\n")).spec;
    assert_eq!(config.log_level, LevelFilter::Warn);
}

#[test]
fn host_volume_needs_an_absolute_path() {
    assert_one_error(
        "host_volume \"h\" {\n  read_only = true\n}\n",
        r#"test.hcl:1:1: missing required attribute "path" in host_volume "h""#,
    );
    assert_one_error(
        "host_volume \"h\" {\n  path = \"srv\"\n}\n",
        r#"test.hcl:2:10: "path" in host_volume "h" must be an absolute path, found "srv""#,
    );
}

#[test]
fn the_cluster_fixture_decodes_its_etcd_members_with_defaults_filled() {
    let decoded = ok(agent(fixture("agent-cluster.hcl")));
    let cluster = decoded.spec.cluster.clone().expect("a cluster block");
    assert_eq!(
        cluster.etcd,
        [
            "http://10.1.0.1:2379",
            "http://10.1.0.2:2379",
            "http://10.1.0.3:2379"
        ]
    );
    assert_eq!(cluster.prefix, "/csi-agent");
    assert_eq!(cluster.lease_ttl, Duration::from_secs(10));
    assert_eq!(cluster.stop_after_disconnect, Some(Duration::from_secs(7)));
    // It writes back as it reads.
    let again = ok(agent(&decoded.spec.to_hcl())).spec;
    assert_eq!(again.cluster.unwrap().etcd.len(), 3);
}

#[test]
fn a_cluster_block_needs_usable_etcd_endpoints() {
    let errs = errors(agent("cluster {\n  prefix = \"x\"\n}\n"));
    assert!(errs.iter().any(|e| e.contains("\"etcd\"")), "{errs:?}");
    assert!(
        errs.iter().any(|e| e.contains("must start with /")),
        "{errs:?}"
    );
}

#[test]
fn a_stop_after_disconnect_shorter_than_two_keep_alives_is_refused_naming_both_values() {
    let cluster = |ttl: &str, after: &str| {
        format!(
            "cluster {{\n  etcd = [\"http://10.1.0.1:2379\"]\n{ttl}  stop_after_disconnect = {after:?}\n}}\n"
        )
    };
    // The default lease (10s): its floor is 6.67s.
    let errs = errors(agent(&cluster("", "6s")));
    assert!(
        errs.iter().any(|e| e.contains("\"stop_after_disconnect\" (6s) must be at least two keep-alive periods, 2/3 of \"lease_ttl\" (10s)")),
        "{errs:?}"
    );
    let at = |ttl: &str, after: &str| agent(&cluster(&format!("  lease_ttl = {ttl:?}\n"), after));
    // At the floor, and above it: longer than the lease is safe too.
    assert!(at("3s", "2s").is_ok());
    assert!(at("2s", "1m").is_ok());
    assert!(ok(agent(&cluster("", "7s"))).spec.cluster.is_some());
    let errs = errors(at("3s", "1999ms"));
    assert!(
        errs.iter()
            .any(|e| e.contains("(3s)") && e.contains("stop_after_disconnect")),
        "{errs:?}"
    );
}

#[test]
fn max_kill_timeout_defaults_to_nomad_s_and_is_read() {
    assert_eq!(ok(agent("")).spec.max_kill_timeout, Duration::from_secs(30));
    let decoded = ok(agent("max_kill_timeout = \"2s\"\n")).spec;
    assert_eq!(decoded.max_kill_timeout, Duration::from_secs(2));
    assert_eq!(
        ok(agent(&decoded.to_hcl())).spec.max_kill_timeout,
        Duration::from_secs(2)
    );
}

/// A cluster block with `etcd` and `tls` bodies as given.
fn tls_cluster(etcd: &str, tls: &str) -> String {
    format!("cluster {{\n  etcd = [{etcd}]\n  tls {{\n{tls}  }}\n}}\n")
}

const CLIENT_CERT: &str = "    ca_file   = \"/etc/csi-agent/etcd-ca.pem\"\n    cert_file = \"/etc/csi-agent/etcd-client.pem\"\n    key_file  = \"/etc/csi-agent/etcd-client.key\"\n";

#[test]
fn a_tls_block_decodes_its_files_and_writes_back_as_it_reads() {
    let decoded = ok(agent(&tls_cluster(
        "\"https://10.1.0.1:2379\", \"https://10.1.0.2:2379\"",
        CLIENT_CERT,
    )));
    let cluster = decoded.spec.cluster.clone().unwrap();
    assert_eq!(
        cluster.tls,
        Some(ClusterTls {
            ca_file: PathBuf::from("/etc/csi-agent/etcd-ca.pem"),
            client_cert: Some(ClientCert {
                cert_file: PathBuf::from("/etc/csi-agent/etcd-client.pem"),
                key_file: PathBuf::from("/etc/csi-agent/etcd-client.key"),
            }),
        })
    );
    assert_eq!(ok(agent(&decoded.spec.to_hcl())).spec, decoded.spec);
}

#[test]
fn a_tls_block_with_only_a_ca_presents_no_client_certificate() {
    let decoded = ok(agent(&tls_cluster(
        "\"https://etcd:2379\"",
        "    ca_file = \"/ca.pem\"\n",
    )));
    let tls = decoded.spec.cluster.clone().unwrap().tls.unwrap();
    assert_eq!(tls.ca_file, PathBuf::from("/ca.pem"));
    assert_eq!(tls.client_cert, None);
    assert_eq!(ok(agent(&decoded.spec.to_hcl())).spec, decoded.spec);
}

#[test]
fn https_endpoints_need_a_tls_block() {
    let errs = errors(agent(
        "cluster {\n  etcd = [\"https://10.1.0.1:2379\"]\n}\n",
    ));
    assert_eq!(
        errs,
        ["test.hcl:1:1: invalid etcd endpoint \"https://10.1.0.1:2379\": https needs the cluster's tls block, with at least ca_file"]
    );
}

#[test]
fn a_tls_block_refuses_each_http_endpoint_naming_it() {
    let errs = errors(agent(&tls_cluster(
        "\"https://10.1.0.1:2379\", \"http://10.1.0.2:2379\"",
        CLIENT_CERT,
    )));
    assert_eq!(
        errs,
        ["test.hcl:1:1: invalid etcd endpoint \"http://10.1.0.2:2379\": plain http, but the cluster has a tls block: every endpoint must be https://"]
    );
}

#[test]
fn without_a_tls_block_http_and_https_do_not_mix() {
    let errs = errors(agent(
        "cluster {\n  etcd = [\"http://10.1.0.1:2379\", \"https://10.1.0.2:2379\"]\n}\n",
    ));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].contains("\"https://10.1.0.2:2379\""), "{errs:?}");
}

#[test]
fn a_tls_block_needs_a_ca_file() {
    let errs = errors(agent(&tls_cluster(
        "\"https://etcd:2379\"",
        "    cert_file = \"/c.pem\"\n    key_file = \"/c.key\"\n",
    )));
    assert_eq!(
        errs,
        ["test.hcl:3:3: missing required attribute \"ca_file\" in the cluster's tls block: the CA that etcd's certificates are checked against"]
    );
}

#[test]
fn a_client_certificate_needs_its_key_and_a_key_its_certificate() {
    let errs = errors(agent(&tls_cluster(
        "\"https://etcd:2379\"",
        "    ca_file = \"/ca.pem\"\n    cert_file = \"/c.pem\"\n",
    )));
    assert_eq!(
        errs,
        ["test.hcl:3:3: \"cert_file\" in the cluster's tls block needs \"key_file\", its private key"]
    );
    let errs = errors(agent(&tls_cluster(
        "\"https://etcd:2379\"",
        "    ca_file = \"/ca.pem\"\n    key_file = \"/c.key\"\n",
    )));
    assert_eq!(
        errs,
        ["test.hcl:3:3: \"key_file\" in the cluster's tls block needs \"cert_file\", the certificate it belongs to"]
    );
}

#[test]
fn tls_files_are_absolute_paths_and_the_block_knows_no_other_field() {
    let errs = errors(agent(&tls_cluster(
        "\"https://etcd:2379\"",
        "    ca_file = \"ca.pem\"\n    insecure = true\n",
    )));
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0].contains(
            "\"ca_file\" in tls in the agent config must be an absolute path, found \"ca.pem\""
        ),
        "{errs:?}"
    );
    assert!(errs[1].contains("insecure"), "{errs:?}");
}
