//! The node's attributes, with the names and values Nomad's client gives
//! them: what a task's `${...}` may name besides its environment
//! ([`super::env`]), and what a job's constraints are checked against
//! ([`super::feasible`]). Some come from the agent and its config
//! ([`node_attributes`]), the rest from the host's fingerprint
//! ([`host_attributes`]). [`NodeFacts`] owns them for the job runner,
//! with the CSI volumes the node cannot use.

use std::collections::BTreeMap;
use std::fs;

/// What the jobs know of this node, owned in one place: its attributes
/// (what tasks' `${...}` name and constraints are checked against) and the
/// CSI volumes it cannot use. The placement fingerprint (resources, the
/// host's address) is the placement's, and joins the attributes only for
/// the constraints ([`NodeFacts::for_constraints`]).
#[derive(Debug, Default)]
pub struct NodeFacts {
    /// The attributes tasks' `${...}` may name ([`node_attributes`]).
    attributes: BTreeMap<String, String>,
    /// The CSI volumes this node cannot use, by ID, with why: the volume
    /// manager's, given before each job call, since the job runner does
    /// not see the volumes (`VolumeManager::topology_misfits`).
    volume_misfits: BTreeMap<String, String>,
}

impl NodeFacts {
    /// The attributes tasks' `${...}` may name.
    pub fn attributes(&self) -> &BTreeMap<String, String> {
        &self.attributes
    }

    pub fn set_attributes(&mut self, attributes: BTreeMap<String, String>) {
        self.attributes = attributes;
    }

    /// The attributes again from a re-read agent config: those that come
    /// from it (`meta`, `client { meta node_class node_pool }`, the
    /// datacenter and region) and the host's fingerprint are taken again;
    /// the node's name, ID and host name stay those of the agent's start.
    pub fn reconfigure(&mut self, config: &crate::spec::AgentConfig) {
        let kept = |key: &str| self.attributes.get(key).cloned().unwrap_or_default();
        self.attributes = node_attributes(
            &kept("node.unique.id"),
            &kept("node.unique.name"),
            &kept("attr.unique.hostname"),
            config,
        );
    }

    /// Whether the node has attribute `key` (`attr.driver.docker`, ...).
    pub fn has(&self, key: &str) -> bool {
        self.attributes.contains_key(key)
    }

    pub fn set_volume_misfits(&mut self, misfits: BTreeMap<String, String>) {
        self.volume_misfits = misfits;
    }

    /// The group instances of `spec` this node cannot take, given the
    /// placement fingerprint ([`super::feasible::unplaced`]).
    pub fn unplaced(
        &self,
        spec: &crate::spec::Job,
        placement: &super::placement::Placement,
    ) -> Vec<super::feasible::Unplaced> {
        super::feasible::unplaced(spec, &self.for_constraints(placement), &self.volume_misfits)
    }

    /// What constraints see of the node: its attributes, and the
    /// placement fingerprint's `cpu.numcores`, `cpu.frequency`,
    /// `cpu.totalcompute`, `memory.totalbytes` and
    /// `unique.network.ip-address`.
    pub fn for_constraints(
        &self,
        placement: &super::placement::Placement,
    ) -> BTreeMap<String, String> {
        let mut node = self.attributes.clone();
        let n = placement.node;
        let known = |v: u64| v != u64::MAX;
        let mut put = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                node.insert(format!("attr.{key}"), value);
            }
        };
        put("cpu.numcores", known(n.cores).then(|| n.cores.to_string()));
        put("cpu.frequency", Some(n.mhz_per_core.to_string()));
        put("cpu.totalcompute", known(n.cpu).then(|| n.cpu.to_string()));
        put(
            "memory.totalbytes",
            known(n.memory).then(|| n.memory.saturating_mul(1024 * 1024).to_string()),
        );
        put(
            "unique.network.ip-address",
            placement.host_ip.map(|ip| ip.to_string()),
        );
        node
    }
}

/// The node attributes a task's `${...}` may name, with the values Nomad's
/// client gives them: `node.unique.name` is the agent's node name,
/// `node.unique.id` the UUID the agent made for its data dir once,
/// `attr.unique.hostname` the host's name, `attr.cpu.arch` Go's name for
/// the architecture; `node.datacenter`, `node.region`, `node.class`,
/// `node.pool` and `meta.<key>` (the top-level `meta`, then `client {
/// meta }`) come from the agent config; the rest of the host's fingerprint is
/// [`host_attributes`].
pub fn node_attributes(
    node_id: &str,
    node_name: &str,
    host_name: &str,
    config: &crate::spec::AgentConfig,
) -> BTreeMap<String, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    let mut attributes = BTreeMap::from([
        ("node.unique.name".to_string(), node_name.to_string()),
        ("node.unique.id".to_string(), node_id.to_string()),
        ("node.datacenter".to_string(), config.datacenter.clone()),
        ("node.region".to_string(), config.region.clone()),
        ("attr.unique.hostname".to_string(), host_name.to_string()),
        ("attr.kernel.name".to_string(), "linux".to_string()),
        ("attr.cpu.arch".to_string(), arch.to_string()),
    ]);
    for (key, value) in config.meta.iter().chain(&config.client.meta) {
        attributes.insert(format!("meta.{key}"), value.clone());
    }
    attributes.insert("node.class".into(), config.client.node_class.clone());
    if let Some(pool) = &config.client.node_pool {
        attributes.insert("node.pool".into(), pool.clone());
    }
    attributes.extend(host_attributes(&config.docker.endpoint));
    attributes
}

/// How long the fingerprint waits for the container engine's version. It
/// is taken at the agent's start, before it is ready, and at a SIGHUP, on
/// the main loop: neither may wait on an engine that is itself starting.
/// A dockerd restoring its containers at boot binds its API socket at once
/// but answers only once they are restored, and those wait on the volume
/// plugin socket the agent serves: waiting out the engine's call timeout
/// (30 s) held the agent's start, and dockerd's Mounts, for 30 s. An
/// engine that does not answer in time is asked again off the loop (the
/// agent's `engine-watch` thread), and the fingerprint taken again once
/// it answers.
pub const ENGINE_FINGERPRINT: std::time::Duration = std::time::Duration::from_secs(1);

/// What the host says of itself, read once, with Nomad's attribute names:
/// `kernel.version` and `kernel.arch` (`uname -r`, `-m`), `os.name` and
/// `os.version` (`/etc/os-release`'s `ID` and `VERSION_ID`),
/// `cpu.modelname`, and the drivers csi-agent has: `driver.raw_exec` and
/// `driver.exec` always, `driver.docker` (with `driver.docker.version`)
/// when the engine at `docker_endpoint` answers within
/// [`ENGINE_FINGERPRINT`].
pub fn host_attributes(docker_endpoint: &str) -> BTreeMap<String, String> {
    let mut attrs = BTreeMap::new();
    let mut put = |key: &str, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            attrs.insert(format!("attr.{key}"), value);
        }
    };
    let read = |path: &str| fs::read_to_string(path).ok().map(|t| t.trim().to_string());
    put("kernel.version", read("/proc/sys/kernel/osrelease"));
    put("kernel.arch", Some(std::env::consts::ARCH.to_string()));
    let os_release = fs::read_to_string("/etc/os-release").unwrap_or_default();
    put("os.name", os_release_value(&os_release, "ID"));
    put("os.version", os_release_value(&os_release, "VERSION_ID"));
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    put(
        "cpu.modelname",
        cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, name)| name.trim().to_string()),
    );
    put("driver.raw_exec", Some("1".into()));
    put("driver.exec", Some("1".into()));
    if let Ok(engine) = crate::docker::Engine::new(docker_endpoint) {
        match engine.version_within(ENGINE_FINGERPRINT) {
            Ok(version) => {
                put("driver.docker", Some("1".into()));
                put("driver.docker.version", Some(version.version));
            }
            Err(err) => log::info!(
                "No docker driver yet: the engine at {docker_endpoint} does not answer ({err})"
            ),
        }
    }
    attrs
}

/// The value of `key` in an `/etc/os-release` text, unquoted.
fn os_release_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix('=')?;
        Some(
            value
                .trim()
                .trim_matches('"')
                .trim_matches('\'')
                .to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_says_its_kernel_and_drivers_and_a_silent_engine_is_no_docker() {
        let attrs = host_attributes("unix:///nonexistent/docker.sock");
        assert_eq!(attrs["attr.driver.raw_exec"], "1");
        assert_eq!(attrs["attr.driver.exec"], "1");
        assert!(!attrs.contains_key("attr.driver.docker"), "{attrs:?}");
        let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        assert_eq!(attrs["attr.kernel.version"], release.trim());
        assert_eq!(attrs["attr.kernel.arch"], std::env::consts::ARCH);
    }

    #[test]
    fn os_release_values_are_unquoted() {
        let text = "NAME=\"Debian GNU/Linux\"\nID=debian\nVERSION_ID=\"12\"\n";
        assert_eq!(os_release_value(text, "ID").as_deref(), Some("debian"));
        assert_eq!(os_release_value(text, "VERSION_ID").as_deref(), Some("12"));
        assert_eq!(os_release_value(text, "ID_LIKE"), None);
    }
}
