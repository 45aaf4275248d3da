//! Fingerprinting: what a plugin says about itself, asked the way the CSI
//! spec expects a CO to ask (identity first, then the services the plugin
//! type says it serves).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::csi::types::{
    CapabilitySet, ControllerCapability, NodeCapability, NodeInfo, PluginCapability, PluginInfo,
};
use crate::csi::Client;
use crate::proto::state as pb;
use crate::spec::PluginType;

/// One fingerprint of a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// GetPluginInfo: the name is shown as *provider*, the vendor version as
    /// *version*.
    pub info: PluginInfo,
    pub plugin_capabilities: CapabilitySet<PluginCapability>,
    /// Empty unless the plugin serves the controller service.
    pub controller_capabilities: CapabilitySet<ControllerCapability>,
    /// Empty unless the plugin type includes the node service.
    pub node_capabilities: CapabilitySet<NodeCapability>,
    /// NodeGetInfo, for plugins whose type includes the node service.
    pub node: Option<NodeInfo>,
    pub taken: SystemTime,
}

/// Why a fingerprint could not be taken.
#[derive(Debug)]
pub enum Error {
    Rpc(crate::csi::Error),
    /// NodeGetInfo answered without a node ID, which the spec requires.
    EmptyNodeId,
    /// The plugin is configured as a controller but does not serve one.
    NoControllerService,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Rpc(err) => err.fmt(f),
            Error::EmptyNodeId => f.write_str("NodeGetInfo returned an empty node_id"),
            Error::NoControllerService => f.write_str(
                "the plugin type is controller, but the plugin does not advertise CONTROLLER_SERVICE",
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::csi::Error> for Error {
    fn from(err: crate::csi::Error) -> Error {
        Error::Rpc(err)
    }
}

impl Fingerprint {
    /// Asks the plugin: GetPluginInfo, GetPluginCapabilities, then
    /// NodeGetInfo and NodeGetCapabilities when `plugin_type` has the node
    /// service, and ControllerGetCapabilities when the plugin advertises the
    /// controller service (never an RPC of a service it does not serve).
    pub fn take(client: &Client, plugin_type: PluginType) -> Result<Fingerprint, Error> {
        let info = client.plugin_info()?;
        let plugin_capabilities = client.plugin_capabilities()?;
        let serves_controller = plugin_capabilities.contains(&PluginCapability::ControllerService);
        if plugin_type == PluginType::Controller && !serves_controller {
            return Err(Error::NoControllerService);
        }
        let controller_capabilities = if plugin_type.has_controller() && serves_controller {
            client.controller_capabilities()?
        } else {
            CapabilitySet::new()
        };
        let (node, node_capabilities) = if plugin_type.has_node() {
            let node = client.node_info()?;
            if node.node_id.is_empty() {
                return Err(Error::EmptyNodeId);
            }
            (Some(node), client.node_capabilities()?)
        } else {
            (None, CapabilitySet::new())
        };
        Ok(Fingerprint {
            info,
            plugin_capabilities,
            controller_capabilities,
            node_capabilities,
            node,
            taken: SystemTime::now(),
        })
    }

    /// Whether the plugin serves the controller service.
    pub fn has_controller(&self) -> bool {
        self.plugin_capabilities
            .contains(&PluginCapability::ControllerService)
    }

    /// Whether two fingerprints say the same, whenever they were taken.
    pub fn same_as(&self, other: &Fingerprint) -> bool {
        Fingerprint {
            taken: other.taken,
            ..self.clone()
        } == *other
    }

    pub fn to_proto(&self) -> pb::Fingerprint {
        let node = self.node.clone().unwrap_or_default();
        pb::Fingerprint {
            provider: self.info.name.clone(),
            version: self.info.vendor_version.clone(),
            manifest: self.info.manifest.clone().into_iter().collect(),
            plugin_capabilities: names(&self.plugin_capabilities, PluginCapability::as_str),
            controller_capabilities: names(
                &self.controller_capabilities,
                ControllerCapability::as_str,
            ),
            node_capabilities: names(&self.node_capabilities, NodeCapability::as_str),
            node_id: node.node_id,
            max_volumes: node.max_volumes_per_node,
            topology: node
                .accessible_topology
                .unwrap_or_default()
                .into_iter()
                .collect(),
            taken_unix_ms: unix_ms(self.taken),
            ..Default::default()
        }
    }

    /// The fingerprint a snapshot recorded. Capability names this binary
    /// does not know are dropped: the next heartbeat asks again anyway.
    pub fn from_proto(p: &pb::Fingerprint) -> Fingerprint {
        let node = (!p.node_id.is_empty()).then(|| NodeInfo {
            node_id: p.node_id.clone(),
            max_volumes_per_node: p.max_volumes,
            accessible_topology: (!p.topology.is_empty())
                .then(|| p.topology.clone().into_iter().collect()),
        });
        Fingerprint {
            info: PluginInfo {
                name: p.provider.clone(),
                vendor_version: p.version.clone(),
                manifest: p.manifest.clone().into_iter().collect(),
            },
            plugin_capabilities: parse_names(&p.plugin_capabilities, PluginCapability::ALL),
            controller_capabilities: parse_names(
                &p.controller_capabilities,
                ControllerCapability::ALL,
            ),
            node_capabilities: parse_names(&p.node_capabilities, NodeCapability::ALL),
            node,
            taken: from_unix_ms(p.taken_unix_ms),
        }
    }
}

fn names<T: Copy>(set: &CapabilitySet<T>, name: fn(T) -> &'static str) -> Vec<String> {
    set.iter().map(|c| name(*c).to_string()).collect()
}

fn parse_names<T: Copy + Ord + fmt::Display>(names: &[String], all: &[T]) -> CapabilitySet<T> {
    order::set(
        all.iter()
            .copied()
            .filter(|c| names.iter().any(|n| *n == c.to_string())),
    )
}

/// Milliseconds since the Unix epoch; 0 for times before it.
pub fn unix_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

pub fn from_unix_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Fingerprint {
        Fingerprint {
            info: PluginInfo {
                name: "hostpath.csi-agent".into(),
                vendor_version: "0.1.0".into(),
                manifest: [("commit".to_string(), "abc".to_string())].into(),
            },
            plugin_capabilities: [
                PluginCapability::ControllerService,
                PluginCapability::VolumeAccessibilityConstraints,
            ]
            .into(),
            controller_capabilities: [ControllerCapability::PublishUnpublishVolume].into(),
            node_capabilities: [
                NodeCapability::StageUnstageVolume,
                NodeCapability::GetVolumeStats,
            ]
            .into(),
            node: Some(NodeInfo {
                node_id: "n1".into(),
                max_volumes_per_node: 7,
                accessible_topology: Some([("zone".to_string(), "a".to_string())].into()),
            }),
            taken: from_unix_ms(1_700_000_000_123),
        }
    }

    #[test]
    fn survives_a_round_trip_through_the_snapshot_message() {
        let fp = sample();
        assert_eq!(Fingerprint::from_proto(&fp.to_proto()), fp);
    }

    #[test]
    fn capability_names_are_the_printed_ones() {
        let p = sample().to_proto();
        assert_eq!(
            p.plugin_capabilities,
            ["controller-service", "volume-accessibility-constraints"]
        );
        assert_eq!(
            p.node_capabilities,
            ["stage-unstage-volume", "get-volume-stats"]
        );
        assert_eq!(p.provider, "hostpath.csi-agent");
        assert_eq!(p.max_volumes, 7);
    }

    #[test]
    fn the_time_taken_does_not_make_a_fingerprint_different() {
        let a = sample();
        let mut b = sample();
        b.taken = SystemTime::now();
        assert!(a.same_as(&b));
        b.node_capabilities.clear();
        assert!(!a.same_as(&b));
    }
}
