//! The agent config's `telemetry` block, Nomad's name for it:
//!
//! ```hcl
//! telemetry {
//!   prometheus_metrics = true
//!   listen             = "127.0.0.1:9108"   # or "/run/csi-agent/metrics.sock"
//! }
//! ```
//!
//! Off unless `prometheus_metrics = true`. Nomad's other telemetry keys
//! (statsd, datadog, circonus, collection intervals, what to publish) are
//! accepted with one warning each.

use crate::metrics::http::Listen;

use super::decode::Fields;
use super::encode::Writer;
use super::Kept;

/// Where the metrics are served unless `listen` says otherwise.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9108";

/// Keys of Nomad's `telemetry` block that csi-agent accepts and does not
/// act on.
const TELEMETRY_IGNORED: &[&str] = &[
    "circonus_api_app",
    "circonus_api_token",
    "circonus_api_url",
    "circonus_broker_id",
    "circonus_broker_select_tag",
    "circonus_check_display_name",
    "circonus_check_force_metric_activation",
    "circonus_check_id",
    "circonus_check_instance_id",
    "circonus_check_search_tag",
    "circonus_check_tags",
    "circonus_submission_interval",
    "circonus_submission_url",
    "collection_interval",
    "datadog_address",
    "datadog_tags",
    "disable_allocation_hook_metrics",
    "disable_dispatched_job_summary_metrics",
    "disable_hostname",
    "disable_quota_utilization_publishing",
    "disable_rpc_rate_metrics_labels",
    "filter_default",
    "in_memory_collection_interval",
    "in_memory_retention_period",
    "prefix_filter",
    "publish_allocation_metrics",
    "publish_node_metrics",
    "statsd_address",
    "statsite_address",
    "use_node_name",
];

/// `telemetry { prometheus_metrics, listen }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Whether `GET /metrics` is served.
    pub prometheus_metrics: bool,
    /// Where: `ip:port`, or a unix socket's absolute path.
    pub listen: Listen,
    /// Nomad's keys kept as written, each warned about.
    pub ignored: Vec<Kept>,
}

impl Default for TelemetryConfig {
    fn default() -> TelemetryConfig {
        TelemetryConfig {
            prometheus_metrics: false,
            listen: Listen::parse(DEFAULT_METRICS_LISTEN).expect("the default address parses"),
            ignored: Vec::new(),
        }
    }
}

impl TelemetryConfig {
    /// The listen address when metrics are on.
    pub fn metrics_listen(&self) -> Option<&Listen> {
        self.prometheus_metrics.then_some(&self.listen)
    }

    /// The block as HCL, when it differs from the default.
    pub(super) fn write(&self, w: &mut Writer) {
        if *self == TelemetryConfig::default() {
            return;
        }
        w.open("telemetry", None);
        w.plain("prometheus_metrics", self.prometheus_metrics);
        w.string("listen", &self.listen.to_string());
        w.kept(&self.ignored);
        w.close();
    }
}

/// Decodes the block's fields.
pub(super) fn decode_telemetry(t: &mut Fields<'_>) -> TelemetryConfig {
    let mut config = TelemetryConfig::default();
    if let Some(on) = t.bool("prometheus_metrics") {
        config.prometheus_metrics = on;
    }
    if let Some((text, pos)) = t.string_at("listen") {
        match Listen::parse(&text) {
            Ok(listen) => config.listen = listen,
            Err(reason) => t.error(pos, format!("\"listen\" in {}: {reason}", t.what())),
        }
    }
    config.ignored = t.ignore(TELEMETRY_IGNORED);
    t.finish();
    config
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::spec::AgentConfig;

    use super::*;

    #[test]
    fn telemetry_is_off_by_default() {
        let config = AgentConfig::decode("", "agent.hcl").unwrap().spec;
        assert_eq!(config.telemetry.metrics_listen(), None);
    }

    #[test]
    fn the_block_turns_metrics_on_at_an_address_or_a_socket() {
        let src = "telemetry {\n  prometheus_metrics = true\n  listen = \"127.0.0.1:19108\"\n}\n";
        let decoded = AgentConfig::decode(src, "agent.hcl").unwrap();
        assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
        let config = decoded.spec;
        assert_eq!(
            config.telemetry.metrics_listen(),
            Some(&Listen::Tcp("127.0.0.1:19108".parse().unwrap()))
        );
        let again = AgentConfig::decode(&config.to_hcl(), "agent.hcl").unwrap();
        assert_eq!(again.spec, config);

        let src = "telemetry {\n  prometheus_metrics = true\n  listen = \"/run/m.sock\"\n}\n";
        let config = AgentConfig::decode(src, "agent.hcl").unwrap().spec;
        assert_eq!(
            config.telemetry.metrics_listen(),
            Some(&Listen::Unix(PathBuf::from("/run/m.sock")))
        );
        let on = "telemetry {\n  prometheus_metrics = true\n}\n";
        let config = AgentConfig::decode(on, "agent.hcl").unwrap().spec;
        assert_eq!(
            config.telemetry.metrics_listen(),
            Some(&Listen::Tcp(DEFAULT_METRICS_LISTEN.parse().unwrap()))
        );
    }

    #[test]
    fn nomad_s_other_keys_are_warned_about_and_kept() {
        let src = "telemetry {\n  collection_interval = \"1s\"\n  publish_node_metrics = true\n}\n";
        let decoded = AgentConfig::decode(src, "agent.hcl").unwrap();
        assert_eq!(decoded.warnings.len(), 2, "{:?}", decoded.warnings);
        let config = decoded.spec;
        assert!(!config.telemetry.prometheus_metrics);
        assert_eq!(config.telemetry.ignored.len(), 2);
        let again = AgentConfig::decode(&config.to_hcl(), "agent.hcl").unwrap();
        assert_eq!(again.spec, config);
    }

    #[test]
    fn a_bad_address_or_key_is_an_error() {
        for src in [
            "telemetry {\n  listen = \"localhost:9108\"\n}\n",
            "telemetry {\n  listen = \"metrics.sock\"\n}\n",
            "telemetry {\n  prometheus_metric = true\n}\n",
        ] {
            let err = AgentConfig::decode(src, "agent.hcl").unwrap_err();
            assert!(err.to_string().contains("agent.hcl:2:"), "{err}");
        }
    }
}
