//! A group's `network` block in Nomad's format: its mode and the ports
//! the agent allocates to each alloc (`task::ports` does the allocating).

use super::decode::Fields;
use super::encode::Writer;
use super::Kept;

/// Keys of Nomad's group `network` block, and of its ports, that csi-agent
/// ignores.
pub(super) const NETWORK_IGNORED: &[&str] = &["cni", "dns", "hostname", "mbits"];
pub(super) const PORT_IGNORED: &[&str] = &["host_network", "ignore_collision"];

/// A group's `network` block: the ports the agent allocates to each alloc
/// (see `task::ports`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Network {
    /// `host`, `bridge`, ... as written; empty when not given.
    pub mode: String,
    pub ports: Vec<NetworkPort>,
    pub ignored: Vec<Kept>,
}

/// `port "label" { static to }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkPort {
    pub label: String,
    /// The host port; a dynamic one when `None`.
    pub static_port: Option<u16>,
    /// The port inside the task's network namespace; the host's port when
    /// `None` (left out, or Nomad's -1).
    pub to: Option<u16>,
    pub ignored: Vec<Kept>,
}

pub(crate) fn decode_network(f: &mut Fields<'_>) -> Network {
    let mode = f.string("mode").unwrap_or_default();
    let mut ports = Vec::new();
    for (block, label) in f.labeled_blocks("port") {
        let mut p = f.labeled(block, &label);
        ports.push(NetworkPort {
            label,
            static_port: p.port_number("static"),
            to: p.port_inside("to"),
            ignored: p.ignore(PORT_IGNORED),
        });
        p.finish();
    }
    let ignored = f.ignore(NETWORK_IGNORED);
    f.finish();
    Network {
        mode,
        ports,
        ignored,
    }
}

pub(crate) fn write_network(w: &mut Writer, network: &Network) {
    w.open("network", None);
    if !network.mode.is_empty() {
        w.string("mode", &network.mode);
    }
    for port in &network.ports {
        w.open("port", Some(&port.label));
        for (key, value) in [("static", port.static_port), ("to", port.to)] {
            if let Some(value) = value {
                w.plain(key, value);
            }
        }
        w.kept(&port.ignored);
        w.close();
    }
    w.kept(&network.ignored);
    w.close();
}
