//! The agent config's `client` block, Nomad's client options that place
//! allocations on this node:
//!
//! ```hcl
//! client {
//!   # Kept back for the host and the agent: allocs get the rest.
//!   reserved {
//!     cpu    = 500   # MHz
//!     memory = 512   # MiB
//!   }
//!   # Overrides of what the node is fingerprinted to have.
//!   cpu_total_compute = 8000  # MHz
//!   memory_total_mb   = 16384 # MiB
//!   # csi-agent's own: the most allocs one `job run` may create.
//!   max_allocs_per_job = 1000
//!   # Where the ports of a group's network block without `static` come
//!   # from (Nomad's defaults).
//!   min_dynamic_port = 20000
//!   max_dynamic_port = 32000
//!   # The node's own key/value pairs, `${meta.KEY}` in job files and
//!   # their constraints (merged over the top-level `meta`), and its
//!   # class and pool, `${node.class}` and `${node.pool}`.
//!   meta {
//!     rack = "r7"
//!   }
//!   node_class = "storage"
//!   node_pool  = "default"
//!   # How far an artifact's fetch and unpacking may go (Nomad's
//!   # defaults; the decompression limits take 0 for none).
//!   artifact {
//!     http_read_timeout              = "30m"
//!     http_max_size                  = "100GB"
//!     decompression_file_count_limit = 4096
//!     decompression_size_limit       = "100GB"
//!   }
//! }
//! ```
//!
//! Nomad's other client keys that may appear in a shared config (`enabled`,
//! `servers`, `node_class`, ...) are accepted with a warning.

use std::collections::BTreeMap;

use super::artifact::{decode_artifact_config, ArtifactConfig};
use super::decode::Fields;
use super::encode::Writer;

/// The most allocs one `job run` may create unless `max_allocs_per_job`
/// says otherwise.
pub const DEFAULT_MAX_ALLOCS_PER_JOB: u64 = 1000;

/// Nomad's default range of dynamic ports.
pub const DEFAULT_MIN_DYNAMIC_PORT: u16 = 20000;
pub const DEFAULT_MAX_DYNAMIC_PORT: u16 = 32000;

/// Nomad client keys csi-agent accepts in `client` but does not act on.
const CLIENT_IGNORED: &[&str] = &[
    "enabled",
    "servers",
    "server_join",
    "network_interface",
    "state_dir",
    "alloc_dir",
    "gc_interval",
    "options",
];

/// `client { reserved { cpu memory } cpu_total_compute memory_total_mb
/// max_allocs_per_job }`, defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// `reserved { cpu }`: MHz kept back from allocs.
    pub reserved_cpu: u64,
    /// `reserved { memory }`: MiB kept back from allocs.
    pub reserved_memory: u64,
    /// `cpu_total_compute`: the node's MHz, instead of its fingerprint.
    pub cpu_total_compute: Option<u64>,
    /// `memory_total_mb`: the node's MiB, instead of its fingerprint.
    pub memory_total_mb: Option<u64>,
    /// The most allocs a job may have on this node: a group's `count`, and
    /// the sum over a job's groups, are refused at `job run` past it.
    pub max_allocs_per_job: u64,
    /// `min_dynamic_port` and `max_dynamic_port`: the range, both ends in
    /// it, of the ports the agent picks for a group's dynamic ports.
    pub min_dynamic_port: u16,
    pub max_dynamic_port: u16,
    /// `artifact { ... }`: the bounds of tasks' artifact fetches.
    pub artifact: ArtifactConfig,
    /// `meta { ... }`: the node's key/value pairs, over the agent
    /// config's top-level `meta`.
    pub meta: BTreeMap<String, String>,
    /// `node_class`: `${node.class}`, empty unless set.
    pub node_class: String,
    /// `node_pool`: `${node.pool}`, Nomad's `default` unless set.
    pub node_pool: Option<String>,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            reserved_cpu: 0,
            reserved_memory: 0,
            cpu_total_compute: None,
            memory_total_mb: None,
            max_allocs_per_job: DEFAULT_MAX_ALLOCS_PER_JOB,
            min_dynamic_port: DEFAULT_MIN_DYNAMIC_PORT,
            max_dynamic_port: DEFAULT_MAX_DYNAMIC_PORT,
            artifact: ArtifactConfig::default(),
            meta: BTreeMap::new(),
            node_class: String::new(),
            node_pool: None,
        }
    }
}

impl ClientConfig {
    /// Writes the block, unless everything is the default.
    pub(crate) fn write(&self, w: &mut Writer) {
        if *self == ClientConfig::default() {
            return;
        }
        w.open("client", None);
        w.open("reserved", None);
        w.plain("cpu", self.reserved_cpu);
        w.plain("memory", self.reserved_memory);
        w.close();
        if let Some(cpu) = self.cpu_total_compute {
            w.plain("cpu_total_compute", cpu);
        }
        if let Some(memory) = self.memory_total_mb {
            w.plain("memory_total_mb", memory);
        }
        w.plain("max_allocs_per_job", self.max_allocs_per_job);
        w.plain("min_dynamic_port", self.min_dynamic_port);
        w.plain("max_dynamic_port", self.max_dynamic_port);
        self.artifact.write(w);
        w.map("meta", &self.meta);
        if !self.node_class.is_empty() {
            w.string("node_class", &self.node_class);
        }
        if let Some(pool) = &self.node_pool {
            w.string("node_pool", pool);
        }
        w.close();
    }
}

/// Decodes the `client` block of the agent config `f`, if any.
pub(crate) fn decode_client(f: &mut Fields<'_>) -> ClientConfig {
    let mut config = ClientConfig::default();
    let Some(block) = f.block("client") else {
        return config;
    };
    let mut c = f.nested(block);
    if let Some(reserved) = c.block("reserved") {
        let mut r = c.nested(reserved);
        config.reserved_cpu = r.u64("cpu").unwrap_or(0);
        config.reserved_memory = r.u64("memory").unwrap_or(0);
        r.ignore(&["disk", "reserved_ports", "cores"]);
        r.finish();
    }
    for (key, value) in [
        ("cpu_total_compute", &mut config.cpu_total_compute),
        ("memory_total_mb", &mut config.memory_total_mb),
    ] {
        if let Some((n, pos)) = c.u64_at(key) {
            if n == 0 {
                c.error(
                    pos,
                    format!(
                        "{key:?} in {} must be at least 1 (leave it out to fingerprint the node)",
                        c.what()
                    ),
                );
            }
            *value = Some(n);
        }
    }
    if let Some((n, pos)) = c.u64_at("max_allocs_per_job") {
        if n == 0 {
            c.error(
                pos,
                format!(
                    "\"max_allocs_per_job\" in {} must be at least 1 (default {DEFAULT_MAX_ALLOCS_PER_JOB})",
                    c.what()
                ),
            );
        }
        config.max_allocs_per_job = n;
    }
    if let Some(port) = c.port_number("min_dynamic_port") {
        config.min_dynamic_port = port;
    }
    if let Some(port) = c.port_number("max_dynamic_port") {
        config.max_dynamic_port = port;
    }
    if config.min_dynamic_port > config.max_dynamic_port {
        let pos = c
            .attr("max_dynamic_port")
            .or_else(|| c.attr("min_dynamic_port"))
            .map_or(c.pos(), |a| a.value.pos());
        c.error(
            pos,
            format!(
                "\"min_dynamic_port\" {} is above \"max_dynamic_port\" {} in {}",
                config.min_dynamic_port,
                config.max_dynamic_port,
                c.what()
            ),
        );
    }
    if let Some(block) = c.block("artifact") {
        config.artifact = decode_artifact_config(&mut c.nested(block));
    }
    config.meta = c.map("meta").unwrap_or_default();
    config.node_class = c.string("node_class").unwrap_or_default();
    config.node_pool = c.string("node_pool");
    c.ignore(CLIENT_IGNORED);
    c.finish();
    config
}

#[cfg(test)]
mod tests {
    use crate::spec::AgentConfig;

    #[test]
    fn the_client_block_decodes_and_writes_back() {
        let src = "client {\n  reserved {\n    cpu = 500\n    memory = 512\n  }\n  max_allocs_per_job = 4\n  enabled = true\n  node_class = \"storage\"\n  meta {\n    rack = \"r7\"\n  }\n}\n";
        let decoded = AgentConfig::decode(src, "agent.hcl").expect("valid");
        let client = &decoded.spec.client;
        assert_eq!((client.reserved_cpu, client.reserved_memory), (500, 512));
        assert_eq!(client.max_allocs_per_job, 4);
        assert_eq!(client.cpu_total_compute, None);
        assert_eq!(client.node_class, "storage");
        assert_eq!(client.node_pool, None);
        assert_eq!(client.meta["rack"], "r7");
        assert!(decoded.warnings[0].to_string().contains("\"enabled\""));
        let again = AgentConfig::decode(&decoded.spec.to_hcl(), "again.hcl").expect("valid");
        assert_eq!(again.spec.client, decoded.spec.client);
    }

    #[test]
    fn the_artifact_bounds_decode_with_nomads_defaults_and_are_checked_at_their_position() {
        let src = "client {\n  artifact {\n    http_read_timeout = \"5m\"\n    http_max_size = \"2GB\"\n    decompression_file_count_limit = 10\n    decompression_size_limit = 0\n    git_timeout = \"1m\"\n  }\n}\n";
        let decoded = AgentConfig::decode(src, "agent.hcl").expect("valid");
        let a = decoded.spec.client.artifact;
        assert_eq!(a.http_read_timeout, std::time::Duration::from_secs(300));
        assert_eq!(a.http_max_size, 2_000_000_000);
        assert_eq!(a.decompression_file_count_limit, 10);
        assert_eq!(a.decompression_size_limit, 0);
        assert!(decoded.warnings[0].to_string().contains("\"git_timeout\""));
        let again = AgentConfig::decode(&decoded.spec.to_hcl(), "again.hcl").expect("valid");
        assert_eq!(again.spec.client, decoded.spec.client);
        let defaults = AgentConfig::decode("client {}\n", "agent.hcl").expect("valid");
        assert_eq!(
            defaults.spec.client.artifact.decompression_file_count_limit,
            4096
        );
        assert_eq!(defaults.spec.client.artifact.http_max_size, 100_000_000_000);
        for (body, want) in [
            (
                "http_max_size = \"lots\"",
                "agent.hcl:3:21: \"http_max_size\" in artifact",
            ),
            (
                "http_read_timeout = \"0s\"",
                "agent.hcl:3:25: \"http_read_timeout\"",
            ),
            ("decompression_file_count_limit = -1", "agent.hcl:3:38:"),
            ("http_timeout = \"1m\"", "agent.hcl:3:5:"),
        ] {
            let src = format!("client {{\n  artifact {{\n    {body}\n  }}\n}}\n");
            let errs = AgentConfig::decode(&src, "agent.hcl").unwrap_err().errors;
            assert!(errs[0].to_string().starts_with(want), "{body}: {errs:?}");
        }
    }

    #[test]
    fn the_dynamic_port_range_is_set_and_checked_at_its_position() {
        let src = "client {\n  min_dynamic_port = 40000\n  max_dynamic_port = 40010\n}\n";
        let decoded = AgentConfig::decode(src, "agent.hcl").expect("valid");
        let client = &decoded.spec.client;
        assert_eq!(
            (client.min_dynamic_port, client.max_dynamic_port),
            (40000, 40010)
        );
        let again = AgentConfig::decode(&decoded.spec.to_hcl(), "again.hcl").expect("valid");
        assert_eq!(again.spec.client, decoded.spec.client);
        let err = AgentConfig::decode("client {\n  max_dynamic_port = 100\n}\n", "agent.hcl")
            .expect_err("invalid")
            .to_string();
        assert!(
            err.contains(
                "agent.hcl:2:22: \"min_dynamic_port\" 20000 is above \"max_dynamic_port\" 100"
            ),
            "{err}"
        );
    }

    #[test]
    fn no_client_block_is_the_default() {
        let decoded = AgentConfig::decode("", "agent.hcl").expect("valid");
        assert_eq!(decoded.spec.client, super::ClientConfig::default());
        assert!(!decoded.spec.to_hcl().contains("client"));
    }

    #[test]
    fn a_zero_bound_or_total_is_refused_at_its_position() {
        let err = AgentConfig::decode("client {\n  max_allocs_per_job = 0\n}\n", "agent.hcl")
            .expect_err("invalid")
            .to_string();
        assert!(err.contains("agent.hcl:2:24"), "{err}");
        assert!(err.contains("max_allocs_per_job"), "{err}");
        let err = AgentConfig::decode("client {\n  memory_total_mb = 0\n}\n", "agent.hcl")
            .expect_err("invalid")
            .to_string();
        assert!(err.contains("memory_total_mb"), "{err}");
        let err = AgentConfig::decode("client {\n  reserved {\n    memory = \"x\"\n  }\n}\n", "a")
            .expect_err("invalid")
            .to_string();
        assert!(err.contains("memory"), "{err}");
    }
}
