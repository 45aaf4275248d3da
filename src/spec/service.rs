//! `service` blocks, in groups and tasks alike: name, port, tags, health
//! checks and Consul Connect sidecars.
//!
//! A `provider = "nomad"` service is registered in csi-agent's own
//! registry while its task (a group's: its alloc) runs (`services/`), with
//! its `address`, `address_mode`, tags and `meta`. csi-agent has no
//! Consul: a service of the default provider, `consul`, is decoded and
//! validated but registered nowhere, and the job says so in a warning.
//! Checks are decoded and validated but not run, and no sidecar runs.

use std::collections::BTreeMap;
use std::time::Duration;

use hcl::Expr;

use super::decode::Fields;
use super::encode::Writer;
use super::resources::{decode_resources, write_resources, Resources};
use super::{keywords, Kept};

const SERVICE_IGNORED: &[&str] = &[
    "canary_meta",
    "canary_tags",
    "check_restart",
    "cluster",
    "enable_tag_override",
    "identity",
    "kind",
    "on_update",
    "tagged_addresses",
    "task",
    "weights",
];

const CHECK_IGNORED: &[&str] = &[
    "address_mode",
    "body",
    "check_restart",
    "expose",
    "failures_before_critical",
    "failures_before_warning",
    "grpc_service",
    "grpc_use_tls",
    "header",
    "initial_status",
    "method",
    "on_update",
    "protocol",
    "success_before_passing",
    "task",
    "tls_server_name",
    "tls_skip_verify",
];

const CONNECT_IGNORED: &[&str] = &["gateway", "native"];

const SIDECAR_SERVICE_IGNORED: &[&str] = &["disable_default_tcp_check", "meta"];

const PROXY_IGNORED: &[&str] = &[
    "config",
    "expose",
    "local_service_address",
    "local_service_port",
    "transparent_proxy",
];

const UPSTREAM_IGNORED: &[&str] = &[
    "config",
    "datacenter",
    "destination_namespace",
    "destination_partition",
    "destination_peer",
    "destination_type",
    "local_bind_address",
    "local_bind_socket_mode",
    "local_bind_socket_path",
    "mesh_gateway",
];

const SIDECAR_TASK_IGNORED: &[&str] = &[
    "kill_signal",
    "kill_timeout",
    "logs",
    "meta",
    "shutdown_delay",
    "user",
    "volume_mount",
];

keywords! {
    /// Which registry a service goes to: Nomad's own (csi-agent's
    /// registry) or Consul (which csi-agent does not have).
    pub enum Provider ("service provider") {
        Consul = "consul",
        Nomad = "nomad",
    }
}

keywords! {
    /// Which address a service advertises: `auto` and `host` the node's,
    /// `alloc` the alloc's own (here the node's too: allocs share the
    /// host's network), `driver` the task driver's (a container's IP).
    pub enum AddressMode ("address_mode") {
        Auto = "auto",
        Host = "host",
        Alloc = "alloc",
        Driver = "driver",
    }
}

/// A service to register, with its checks, which are not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// `None` lets the registrar name it, as Nomad does.
    pub name: Option<String>,
    /// A port label or a port number, as written.
    pub port: Option<String>,
    /// Nomad's default is Consul.
    pub provider: Provider,
    /// An address to advertise instead of the one `address_mode` picks.
    pub address: Option<String>,
    pub address_mode: AddressMode,
    pub meta: BTreeMap<String, String>,
    pub tags: Vec<String>,
    pub checks: Vec<Check>,
    pub connect: Option<Connect>,
    pub ignored: Vec<Kept>,
}

keywords! {
    /// How a check probes the service.
    pub enum CheckType ("check type") {
        Http = "http",
        Tcp = "tcp",
        Grpc = "grpc",
        Script = "script",
    }
}

/// A health check of a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: Option<String>,
    pub check_type: CheckType,
    /// The HTTP path; set for `http` checks.
    pub path: Option<String>,
    pub port: Option<String>,
    /// The command; set for `script` checks.
    pub command: Option<String>,
    pub args: Vec<String>,
    pub interval: Duration,
    pub timeout: Duration,
    pub ignored: Vec<Kept>,
}

/// `connect { sidecar_service { ... } sidecar_task { ... } }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub sidecar_service: Option<SidecarService>,
    pub sidecar_task: Option<SidecarTask>,
    pub ignored: Vec<Kept>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarService {
    pub port: Option<String>,
    pub tags: Vec<String>,
    pub proxy: Option<Proxy>,
    pub ignored: Vec<Kept>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    pub upstreams: Vec<Upstream>,
    pub ignored: Vec<Kept>,
}

/// A service the sidecar makes reachable on a local port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub destination_name: String,
    pub local_bind_port: u16,
    pub ignored: Vec<Kept>,
}

/// Overrides for the sidecar proxy's task. Its `config` belongs to its
/// driver and is kept as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarTask {
    pub name: Option<String>,
    pub driver: Option<String>,
    pub config: Option<Kept>,
    pub env: BTreeMap<String, String>,
    pub resources: Option<Resources>,
    pub ignored: Vec<Kept>,
}

pub(crate) fn decode_service(f: &mut Fields<'_>) -> Service {
    let name = non_empty(f, "name");
    let port = port(f, "port");
    let provider = f.parsed_at::<Provider>("provider");
    let address = non_empty(f, "address");
    let address_mode = f
        .parsed::<AddressMode>("address_mode")
        .unwrap_or(AddressMode::Auto);
    let meta = f.map("meta").unwrap_or_default();
    let tags = f.strings("tags").unwrap_or_default();
    let provider = match provider {
        Some((provider, _)) if provider == Provider::Nomad => provider,
        other => {
            let pos = other.map_or(f.pos(), |(_, pos)| pos);
            let what = f.what();
            let place = what.strip_prefix("service ").unwrap_or(what);
            let name = name.as_deref().unwrap_or("(default name)");
            f.dec().warn(
                pos,
                format!(
                    "service {name:?} {place} has provider \"consul\" (Nomad's default): csi-agent has no Consul and registers it nowhere (provider = \"nomad\" registers it in csi-agent's registry)"
                ),
            );
            Provider::Consul
        }
    };
    let checks = f
        .blocks("check")
        .into_iter()
        .filter_map(|block| decode_check(&mut f.nested(block)))
        .collect();
    let connect = f
        .block("connect")
        .map(|block| decode_connect(&mut f.nested(block)));
    let service = Service {
        name,
        port,
        provider,
        address,
        address_mode,
        meta,
        tags,
        checks,
        connect,
        ignored: f.ignore(SERVICE_IGNORED),
    };
    f.finish();
    service
}

fn decode_check(f: &mut Fields<'_>) -> Option<Check> {
    let name = non_empty(f, "name");
    let check_type = f.parsed::<CheckType>("type");
    let check_type = f.require("type", check_type);
    let path = f.string("path");
    let port = port(f, "port");
    let command = f.string("command");
    let args = f.strings("args").unwrap_or_default();
    let interval = f.duration("interval");
    let interval = f.require("interval", interval);
    let timeout = f.duration("timeout");
    let timeout = f.require("timeout", timeout);
    match check_type {
        Some(CheckType::Http) if path.is_none() => f.missing("path"),
        Some(CheckType::Script) if command.is_none() => f.missing("command"),
        _ => {}
    }
    let ignored = f.ignore(CHECK_IGNORED);
    f.finish();
    Some(Check {
        name,
        check_type: check_type?,
        path,
        port,
        command,
        args,
        interval: interval?,
        timeout: timeout?,
        ignored,
    })
}

fn decode_connect(f: &mut Fields<'_>) -> Connect {
    let sidecar_service = f.block("sidecar_service").map(|block| {
        let mut s = f.nested(block);
        let proxy = s.block("proxy").map(|block| {
            let mut p = s.nested(block);
            let upstreams = p
                .blocks("upstreams")
                .into_iter()
                .filter_map(|block| decode_upstream(&mut p.nested(block)))
                .collect();
            let proxy = Proxy {
                upstreams,
                ignored: p.ignore(PROXY_IGNORED),
            };
            p.finish();
            proxy
        });
        let service = SidecarService {
            port: port(&mut s, "port"),
            tags: s.strings("tags").unwrap_or_default(),
            proxy,
            ignored: s.ignore(SIDECAR_SERVICE_IGNORED),
        };
        s.finish();
        service
    });
    let sidecar_task = f.block("sidecar_task").map(|block| {
        let mut t = f.nested(block);
        // The config's keys belong to the sidecar's driver.
        t.block("config");
        let task = SidecarTask {
            name: non_empty(&mut t, "name"),
            driver: non_empty(&mut t, "driver"),
            config: t.keep_silently(&["config"]).into_iter().next(),
            env: t.map("env").unwrap_or_default(),
            resources: t
                .block("resources")
                .map(|block| decode_resources(&mut t.nested(block))),
            ignored: t.ignore(SIDECAR_TASK_IGNORED),
        };
        t.finish();
        task
    });
    let connect = Connect {
        sidecar_service,
        sidecar_task,
        ignored: f.ignore(CONNECT_IGNORED),
    };
    f.finish();
    connect
}

fn decode_upstream(f: &mut Fields<'_>) -> Option<Upstream> {
    let destination_name = non_empty(f, "destination_name");
    let destination_name = f.require("destination_name", destination_name);
    let local_bind_port = f.port_number("local_bind_port");
    let local_bind_port = f.require("local_bind_port", local_bind_port);
    let ignored = f.ignore(UPSTREAM_IGNORED);
    f.finish();
    Some(Upstream {
        destination_name: destination_name?,
        local_bind_port: local_bind_port?,
        ignored,
    })
}

/// A string that, when given, must not be empty.
fn non_empty(f: &mut Fields<'_>, key: &'static str) -> Option<String> {
    let (value, pos) = f.string_at(key)?;
    if value.is_empty() {
        f.error(pos, format!("{key:?} in {} must not be empty", f.what()));
    }
    Some(value)
}

/// A port: a label of the group's network (`"http"`) or a number.
fn port(f: &mut Fields<'_>, key: &'static str) -> Option<String> {
    match f.attr(key).map(|attr| &attr.value) {
        Some(Expr::Number { .. }) => f.port_number(key).map(|port| port.to_string()),
        Some(_) => non_empty(f, key),
        None => None,
    }
}

pub(crate) fn write_service(w: &mut Writer, service: &Service) {
    w.open("service", None);
    w.opt_string("name", service.name.as_deref());
    write_port(w, service.port.as_deref());
    w.string("provider", service.provider.as_str());
    w.opt_string("address", service.address.as_deref());
    if service.address_mode != AddressMode::Auto {
        w.string("address_mode", service.address_mode.as_str());
    }
    if !service.meta.is_empty() {
        w.map("meta", &service.meta);
    }
    w.strings("tags", &service.tags);
    for check in &service.checks {
        w.open("check", None);
        w.opt_string("name", check.name.as_deref());
        w.string("type", check.check_type.as_str());
        w.opt_string("path", check.path.as_deref());
        write_port(w, check.port.as_deref());
        w.opt_string("command", check.command.as_deref());
        if !check.args.is_empty() {
            w.strings("args", &check.args);
        }
        w.duration("interval", check.interval);
        w.duration("timeout", check.timeout);
        w.kept(&check.ignored);
        w.close();
    }
    if let Some(connect) = &service.connect {
        write_connect(w, connect);
    }
    w.kept(&service.ignored);
    w.close();
}

fn write_connect(w: &mut Writer, connect: &Connect) {
    w.open("connect", None);
    if let Some(sidecar) = &connect.sidecar_service {
        w.open("sidecar_service", None);
        write_port(w, sidecar.port.as_deref());
        w.strings("tags", &sidecar.tags);
        if let Some(proxy) = &sidecar.proxy {
            w.open("proxy", None);
            for upstream in &proxy.upstreams {
                w.open("upstreams", None);
                w.string("destination_name", &upstream.destination_name);
                w.plain("local_bind_port", upstream.local_bind_port);
                w.kept(&upstream.ignored);
                w.close();
            }
            w.kept(&proxy.ignored);
            w.close();
        }
        w.kept(&sidecar.ignored);
        w.close();
    }
    if let Some(task) = &connect.sidecar_task {
        w.open("sidecar_task", None);
        w.opt_string("name", task.name.as_deref());
        w.opt_string("driver", task.driver.as_deref());
        if let Some(config) = &task.config {
            w.kept(std::slice::from_ref(config));
        }
        w.map("env", &task.env);
        if let Some(resources) = &task.resources {
            write_resources(w, resources);
        }
        w.kept(&task.ignored);
        w.close();
    }
    w.kept(&connect.ignored);
    w.close();
}

/// Writes a port back as a number if it is one, else as a label.
fn write_port(w: &mut Writer, port: Option<&str>) {
    match port {
        Some(port) if port.parse::<u16>().is_ok_and(|n| n.to_string() == port) => {
            w.plain("port", port)
        }
        Some(port) => w.string("port", port),
        None => {}
    }
}
