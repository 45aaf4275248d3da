//! The agent config's `cluster` block: the etcd endpoints (`http://` or,
//! with a `tls` block, `https://`), the key prefix, the lease's TTL and
//! `stop_after_disconnect`.

use std::path::PathBuf;
use std::time::Duration;

use super::decode::Fields;

/// The lease TTL of a node unless `lease_ttl` says otherwise.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// The key prefix of a cluster unless `prefix` says otherwise.
pub const DEFAULT_CLUSTER_PREFIX: &str = "/csi-agent";

/// `cluster { etcd, prefix, lease_ttl, stop_after_disconnect, tls }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `http://host:port` of each etcd member (`https://` with `tls`).
    pub etcd: Vec<String>,
    /// Every key of the cluster starts with it.
    pub prefix: String,
    /// How long the node lives without a keep-alive reaching etcd.
    pub lease_ttl: Duration,
    /// Nomad's `disconnect.stop_on_client_after`: how long a disconnected
    /// agent keeps the tasks that hold single-writer claims.
    pub stop_after_disconnect: Option<Duration>,
    /// `tls { ca_file, cert_file, key_file }`: etcd over TLS.
    pub tls: Option<ClusterTls>,
}

/// The PEM files of a cluster's `tls` block, read when the agent
/// connects (so a renewed certificate is taken at the next start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTls {
    /// The CA certificates the etcd members' certificates chain to.
    pub ca_file: PathBuf,
    /// The agent's certificate and private key, for members that ask for
    /// one (etcd's `--client-cert-auth`).
    pub client_cert: Option<ClientCert>,
}

/// `cert_file` and `key_file`, given together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// The `cluster` block: at least one etcd endpoint, each `http://host:port`,
/// or with a `tls` block each `https://host:port`.
pub(super) fn decode_cluster(c: &mut Fields<'_>) -> Option<ClusterConfig> {
    // Whether TLS is wanted is known from the block's presence, even when
    // its fields are wrong: the endpoints are checked against it.
    let tls_block = c.block("tls");
    let tls = tls_block.and_then(|block| decode_cluster_tls(&mut c.nested(block)));
    let etcd = c.strings("etcd");
    let etcd = c.require("etcd", etcd);
    if let Some(endpoints) = &etcd {
        if endpoints.is_empty() {
            c.error(
                c.pos(),
                "\"etcd\" needs at least one endpoint (http://host:port)",
            );
        }
        for endpoint in endpoints {
            if let Err(reason) = etcd_target(endpoint, tls_block.is_some()) {
                c.error(
                    c.pos(),
                    format!("invalid etcd endpoint {endpoint:?}: {reason}"),
                );
            }
        }
    }
    let prefix = match c.string_at("prefix") {
        Some((prefix, pos)) if !prefix.starts_with('/') || prefix.len() < 2 => {
            c.error(
                pos,
                format!("\"prefix\" {prefix:?} must start with / and name something"),
            );
            None
        }
        Some((prefix, _)) => Some(prefix.trim_end_matches('/').to_string()),
        None => None,
    };
    let lease_ttl = c.duration("lease_ttl");
    if let Some(ttl) = lease_ttl {
        if ttl < Duration::from_secs(2) {
            c.error(c.pos(), "\"lease_ttl\" must be at least 2s");
        }
    }
    let stop_after_disconnect = c.duration("stop_after_disconnect");
    if let Some(after) = stop_after_disconnect {
        if let Err(rule) = check_stop_after(after, lease_ttl.unwrap_or(DEFAULT_LEASE_TTL)) {
            c.error(c.pos(), rule);
        }
    }
    c.finish();
    Some(ClusterConfig {
        etcd: etcd?,
        prefix: prefix.unwrap_or_else(|| DEFAULT_CLUSTER_PREFIX.to_string()),
        lease_ttl: lease_ttl.unwrap_or(DEFAULT_LEASE_TTL),
        stop_after_disconnect,
        tls,
    })
}

/// Whether a node may stop its writers `after` its last keep-alive that
/// went through, with leases of `ttl`: a keep-alive goes every third of
/// the TTL, so anything shorter than two of those periods stops the
/// writers of a node that is connected whenever one keep-alive is slow.
/// Longer is always safe: the fencer waits for whatever a node promises
/// (`cluster::fence`); it only keeps the volume from others longer.
pub fn check_stop_after(after: Duration, ttl: Duration) -> Result<(), String> {
    let least = ttl * 2 / 3;
    if after < least {
        return Err(format!(
            "\"stop_after_disconnect\" ({}) must be at least two keep-alive periods, 2/3 of \"lease_ttl\" ({}), that is {}: a node keeps its lease alive every third of the TTL, and a shorter stop would end its writers while it is connected",
            crate::units::format_duration(after),
            crate::units::format_duration(ttl),
            crate::units::format_duration(least),
        ));
    }
    Ok(())
}

/// The cluster's `tls` block: `ca_file`, and `cert_file` with `key_file`
/// or neither, absolute paths. The files are read when the agent
/// connects, on the host it runs on.
fn decode_cluster_tls(t: &mut Fields<'_>) -> Option<ClusterTls> {
    let ca_file = t.absolute_path("ca_file").map(|(path, _)| path);
    let ca_file = if t.has("ca_file") {
        ca_file
    } else {
        t.error(
            t.pos(),
            "missing required attribute \"ca_file\" in the cluster's tls block: the CA that etcd's certificates are checked against",
        );
        None
    };
    let cert = t.absolute_path("cert_file");
    let key = t.absolute_path("key_file");
    let client_cert = match (cert, key, t.has("cert_file"), t.has("key_file")) {
        (Some((cert_file, _)), Some((key_file, _)), _, _) => Some(ClientCert {
            cert_file,
            key_file,
        }),
        (_, _, true, false) => {
            t.error(
                t.pos(),
                "\"cert_file\" in the cluster's tls block needs \"key_file\", its private key",
            );
            None
        }
        (_, _, false, true) => {
            t.error(
                t.pos(),
                "\"key_file\" in the cluster's tls block needs \"cert_file\", the certificate it belongs to",
            );
            None
        }
        _ => None,
    };
    t.finish();
    Some(ClusterTls {
        ca_file: ca_file?,
        client_cert,
    })
}

/// An etcd endpoint as the `cluster` block writes it, `http://host:port`
/// (`https://` with a `tls` block), as a gRPC target (`host:port`); or why
/// it is not one.
pub fn etcd_target(endpoint: &str, tls: bool) -> Result<String, String> {
    let expected = if tls {
        "expected https://host:port"
    } else {
        "expected http://host:port"
    };
    let rest = if let Some(rest) = endpoint.strip_prefix("https://") {
        if !tls {
            return Err("https needs the cluster's tls block, with at least ca_file".into());
        }
        rest
    } else if let Some(rest) = endpoint.strip_prefix("http://") {
        if tls {
            return Err(
                "plain http, but the cluster has a tls block: every endpoint must be https://"
                    .into(),
            );
        }
        rest
    } else {
        return Err(expected.into());
    };
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            Ok(rest.to_string())
        }
        _ => Err(expected.into()),
    }
}
