//! The ports of a group's `network` block, allocated as Nomad's client
//! allocates them on one node in host networking mode.
//!
//! Ports are part of an alloc's placement ([`super::placement`]): when the
//! alloc is placed, each `port "label"` gets a host port, a `static` one as
//! written, a dynamic one from Nomad's default range 20000-32000 that no
//! other live alloc of this agent holds and that binds on the host on TCP
//! and UDP at that moment (the agent config's `client { min_dynamic_port
//! max_dynamic_port }` change the range). The ports are kept in the alloc's snapshot
//! record, so a restarted agent gives its adopted tasks the same
//! environment, and are free again once the alloc is done. An alloc whose
//! `static` port another live alloc holds waits with Nomad's reason,
//! `network: reserved port collision <label>=<port>`.
//!
//! Every task of the group gets the ports in Nomad's variables (its
//! `client/taskenv` `addPorts`): `NOMAD_PORT_<label>` and
//! `NOMAD_ALLOC_PORT_<label>` (`to` when set, else the host port),
//! `NOMAD_HOST_PORT_<label>`, `NOMAD_IP_<label>` and
//! `NOMAD_HOST_IP_<label>` (the host's address), `NOMAD_ADDR_<label>` and
//! `NOMAD_HOST_ADDR_<label>` (`ip:port`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};

use crate::csi::backoff::SplitMix64;
use crate::spec::DEFAULT_MIN_DYNAMIC_PORT as MIN_DYNAMIC_PORT;
use crate::spec::{Group, Network};

/// One port of an alloc: its label and the host port it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocPort {
    pub label: String,
    pub host: u16,
}

/// Why an alloc's ports cannot be had now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortsBlocked {
    /// A `static` port another live alloc holds.
    Collision { label: String, port: u16 },
    /// No port of the dynamic range is free.
    NoDynamicPort,
}

impl PortsBlocked {
    /// The pending reason, in Nomad's words.
    pub fn message(&self) -> String {
        match self {
            PortsBlocked::Collision { label, port } => {
                format!("network: reserved port collision {label}={port}")
            }
            PortsBlocked::NoDynamicPort => "network: dynamic port selection failed".to_string(),
        }
    }

    /// Whether `message` is a reason this module gave.
    pub fn is_reason(message: &str) -> bool {
        message.starts_with("network: ")
    }
}

/// Whether `port` binds on the host's every address, on TCP and on UDP.
pub fn free_on_host(port: u16) -> bool {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
    TcpListener::bind(addr).is_ok() && UdpSocket::bind(addr).is_ok()
}

/// Host ports for every port of `network`, none of them in `held`. A
/// dynamic port starts its search at a random place of `range` and
/// takes the first one `free` says is free.
pub fn allocate(
    network: Option<&Network>,
    range: (u16, u16),
    held: &BTreeSet<u16>,
    rng: &mut SplitMix64,
    free: impl Fn(u16) -> bool,
) -> Result<Vec<AllocPort>, PortsBlocked> {
    let Some(network) = network else {
        return Ok(Vec::new());
    };
    let mut taken = held.clone();
    let mut out = Vec::new();
    // Static ports first, so a dynamic one never takes a static one's.
    for port in &network.ports {
        if let Some(host) = port.static_port {
            if !taken.insert(host) {
                return Err(PortsBlocked::Collision {
                    label: port.label.clone(),
                    port: host,
                });
            }
            out.push(AllocPort {
                label: port.label.clone(),
                host,
            });
        }
    }
    let (min, max) = range;
    let span = u64::from(max.saturating_sub(min)) + 1;
    for port in network.ports.iter().filter(|p| p.static_port.is_none()) {
        let start = rng.next_u64() % span;
        let host = (0..span)
            .map(|i| min + ((start + i) % span) as u16)
            .find(|p| !taken.contains(p) && free(*p))
            .ok_or(PortsBlocked::NoDynamicPort)?;
        taken.insert(host);
        out.push(AllocPort {
            label: port.label.clone(),
            host,
        });
    }
    // In the block's order.
    order::sort_by_key(&mut out, |p| {
        network.ports.iter().position(|n| n.label == p.label)
    });
    Ok(out)
}

/// The host's address for the ports' variables: the address of the
/// interface the default route leaves by, as Nomad's network fingerprint
/// picks by default, or 127.0.0.1 when there is no such route. (Connecting
/// a UDP socket sends nothing: it only asks the kernel for the route.)
pub fn host_ip() -> IpAddr {
    let routed = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|s| s.connect((Ipv4Addr::new(192, 0, 2, 1), 9)).map(|_| s))
        .and_then(|s| s.local_addr());
    match routed {
        Ok(addr) if !addr.ip().is_unspecified() => addr.ip(),
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

/// Nomad's variables for `ports` of `group`'s network, with the host's
/// address `ip`.
pub fn port_env(group: &Group, ports: &[AllocPort], ip: IpAddr) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for port in ports {
        let to = group
            .network
            .as_ref()
            .and_then(|n| n.ports.iter().find(|p| p.label == port.label))
            .and_then(|p| p.to);
        let label = &port.label;
        let host = port.host.to_string();
        let inside = to.map_or(host.clone(), |to| to.to_string());
        let addr = SocketAddr::new(ip, port.host).to_string();
        env.insert(format!("NOMAD_PORT_{label}"), inside.clone());
        env.insert(format!("NOMAD_ALLOC_PORT_{label}"), inside);
        env.insert(format!("NOMAD_HOST_PORT_{label}"), host);
        env.insert(format!("NOMAD_IP_{label}"), ip.to_string());
        env.insert(format!("NOMAD_HOST_IP_{label}"), ip.to_string());
        env.insert(format!("NOMAD_ADDR_{label}"), addr.clone());
        env.insert(format!("NOMAD_HOST_ADDR_{label}"), addr);
    }
    env
}

/// `network` with each port's host port the alloc's, as a `static` one:
/// what a docker task publishes, so the engine picks none of them.
pub fn as_allocated(network: &Network, ports: &[AllocPort]) -> Network {
    let mut network = network.clone();
    for port in &mut network.ports {
        if let Some(held) = ports.iter().find(|p| p.label == port.label) {
            port.static_port = Some(held.host);
        }
    }
    network
}

/// Stand-ins for an alloc's ports at `job run`, before any is allocated:
/// the `static` port, or the range's first, so `${...}` checks find every
/// name.
pub fn placeholder_ports(group: &Group) -> Vec<AllocPort> {
    group
        .network
        .iter()
        .flat_map(|n| &n.ports)
        .map(|p| AllocPort {
            label: p.label.clone(),
            host: p.static_port.unwrap_or(MIN_DYNAMIC_PORT),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::NetworkPort;

    use crate::spec::DEFAULT_MAX_DYNAMIC_PORT as MAX_DYNAMIC_PORT;

    const RANGE: (u16, u16) = (MIN_DYNAMIC_PORT, MAX_DYNAMIC_PORT);

    fn network(ports: &[(&str, Option<u16>, Option<u16>)]) -> Network {
        Network {
            mode: "host".into(),
            ports: ports
                .iter()
                .map(|(label, static_port, to)| NetworkPort {
                    label: label.to_string(),
                    static_port: *static_port,
                    to: *to,
                    ignored: Vec::new(),
                })
                .collect(),
            ignored: Vec::new(),
        }
    }

    #[test]
    fn a_static_port_held_by_another_alloc_is_a_collision() {
        let n = network(&[("http", None, None), ("db", Some(5432), None)]);
        let mut rng = SplitMix64::seeded(1);
        let held = BTreeSet::from([5432]);
        let blocked = allocate(Some(&n), RANGE, &held, &mut rng, |_| true).unwrap_err();
        assert_eq!(
            blocked.message(),
            "network: reserved port collision db=5432"
        );
        assert!(PortsBlocked::is_reason(&blocked.message()));
    }

    #[test]
    fn dynamic_ports_skip_held_and_busy_ports_and_stay_in_range() {
        let n = network(&[
            ("a", None, None),
            ("b", None, None),
            ("db", Some(5432), None),
        ]);
        let mut rng = SplitMix64::seeded(7);
        let held: BTreeSet<u16> = (MIN_DYNAMIC_PORT..MAX_DYNAMIC_PORT).step_by(2).collect();
        let ports = allocate(Some(&n), RANGE, &held, &mut rng, |p| p % 3 != 0).unwrap();
        let labels: Vec<&str> = ports.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels, ["a", "b", "db"]);
        assert_eq!(ports[2].host, 5432);
        for p in &ports[..2] {
            assert!((MIN_DYNAMIC_PORT..=MAX_DYNAMIC_PORT).contains(&p.host));
            assert!(!held.contains(&p.host) && p.host % 3 != 0, "{p:?}");
        }
        assert_ne!(ports[0].host, ports[1].host);
        let none_free = allocate(Some(&n), RANGE, &BTreeSet::new(), &mut rng, |_| false);
        assert_eq!(none_free, Err(PortsBlocked::NoDynamicPort));
    }

    #[test]
    fn the_environment_has_nomad_s_port_variables() {
        let job = "job \"j\" {\n  group \"g\" {\n    network {\n      port \"http\" {}\n      port \"db\" {\n        static = 5432\n        to = 6000\n      }\n    }\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n";
        let decoded = crate::spec::Job::decode(job, "j.hcl").expect("valid job");
        let group = &decoded.spec.groups[0];
        let ports = [
            AllocPort {
                label: "http".into(),
                host: 23456,
            },
            AllocPort {
                label: "db".into(),
                host: 5432,
            },
        ];
        let env = port_env(group, &ports, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5)));
        assert_eq!(env["NOMAD_PORT_http"], "23456");
        assert_eq!(env["NOMAD_ALLOC_PORT_http"], "23456");
        assert_eq!(env["NOMAD_HOST_PORT_http"], "23456");
        assert_eq!(env["NOMAD_IP_http"], "10.0.0.5");
        assert_eq!(env["NOMAD_HOST_IP_http"], "10.0.0.5");
        assert_eq!(env["NOMAD_ADDR_http"], "10.0.0.5:23456");
        assert_eq!(env["NOMAD_HOST_ADDR_http"], "10.0.0.5:23456");
        assert_eq!(env["NOMAD_PORT_db"], "6000");
        assert_eq!(env["NOMAD_HOST_PORT_db"], "5432");
        assert_eq!(env["NOMAD_ADDR_db"], "10.0.0.5:5432");
        assert_eq!(env.len(), 14);
    }
}
