//! A blocking etcd v3 client over gRPC, for the agent's threads.
//!
//! Every call has a deadline and goes to the member that answered last;
//! when that member cannot answer (it is down, cut off, or has no leader),
//! the call is tried on the next member, and only when none answers does
//! it fail, with every member's reason. A call the cluster refused (a
//! compacted revision, a lease that does not exist) is not retried.
//!
//! Streams (Watch, LeaseKeepAlive) are driven with the futures traits
//! grpcio implements; a watch's events arrive on a channel fed by a thread
//! of its own, so the caller waits with a timeout like on any channel.
//!
//! Members are spoken to in plain text (`http://`) or, given [`Tls`],
//! over TLS (`https://`, every member alike): the member's certificate
//! must chain to the given CA, and a client certificate, when given, is
//! presented to members that ask for one (etcd's `--client-cert-auth`);
//! [`super::tls`] reads the files.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use grpcio::{CallOption, ChannelBuilder, RpcStatusCode, WriteFlags};

#[cfg(test)]
mod bound_tests;
mod txn;
mod watch;

pub use txn::Condition;
pub use watch::{Batch, Watch};

use super::tls::{self, Tls};
use crate::grpc::{block_on, grpc_environment};
use crate::proto::etcd as pb;
use crate::proto::etcd_grpc::{KvClient, LeaseClient, WatchClient};

/// The largest answer read from etcd: gRPC refuses a longer message before
/// it is decoded (and the protobuf decoder bounds nesting at its own
/// recursion limit). A range of every volume and claim set of a large
/// cluster stays far below it.
pub const MAX_ANSWER: i32 = 64 << 20;

/// How long one call may take on one member by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an etcd call failed.
#[derive(Debug)]
pub enum Error {
    /// An endpoint is not `http://host:port`, or not `https://host:port`
    /// when the client has [`Tls`] settings.
    Endpoint { endpoint: String, reason: String },
    /// The cluster's TLS files cannot be used.
    Tls(tls::Error),
    /// No member answered `what`: each member's reason. `no_quorum`: a
    /// member was reached but gave no answer (it timed out, or said it has
    /// no leader), as members do while a majority of the cluster is gone.
    NoMember {
        what: &'static str,
        reasons: Vec<(String, String)>,
        no_quorum: bool,
    },
    /// A member answered `what` with an error that another member would
    /// answer too.
    Refused {
        what: &'static str,
        endpoint: String,
        code: RpcStatusCode,
        message: String,
    },
    /// The watch ended: the stream broke, or etcd canceled it (a compacted
    /// start revision: `compact_revision` is set, and the caller must read
    /// the state again and watch from there).
    WatchEnded {
        reason: String,
        compact_revision: i64,
    },
    /// The watch or keep-alive gave no answer in time.
    Timeout,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Endpoint { endpoint, reason } => {
                write!(f, "invalid etcd endpoint {endpoint:?}: {reason}")
            }
            Error::Tls(_) => f.write_str("cannot use the cluster's tls block"),
            Error::NoMember {
                what,
                reasons,
                no_quorum,
            } => {
                write!(f, "no etcd member answered {what}")?;
                if *no_quorum {
                    f.write_str(
                        ", likely for want of a quorum (a majority of the members down or cut off)",
                    )?;
                }
                for (i, (endpoint, reason)) in reasons.iter().enumerate() {
                    let sep = if i == 0 { ": " } else { "; " };
                    write!(f, "{sep}{endpoint}: {reason}")?;
                }
                Ok(())
            }
            Error::Refused {
                what,
                endpoint,
                code,
                message,
            } => write!(f, "etcd at {endpoint} refused {what}: {code:?} {message}"),
            Error::WatchEnded {
                reason,
                compact_revision,
            } if *compact_revision > 0 => write!(
                f,
                "the etcd watch ended: {reason} (revisions before {compact_revision} are compacted)"
            ),
            Error::WatchEnded { reason, .. } => write!(f, "the etcd watch ended: {reason}"),
            Error::Timeout => f.write_str("etcd gave no answer in time"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Tls(source) => Some(source),
            _ => None,
        }
    }
}

/// A key with its value and revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    /// The revision of the key's last change: what [`Etcd::put_if`]
    /// compares.
    pub mod_revision: i64,
    pub lease: i64,
}

impl From<pb::KeyValue> for Kv {
    fn from(kv: pb::KeyValue) -> Kv {
        Kv {
            key: kv.key,
            value: kv.value,
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            lease: kv.lease,
        }
    }
}

/// One change a watch saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Put(Kv),
    /// The key, and the revision of its deletion.
    Delete {
        key: Vec<u8>,
        revision: i64,
    },
}

impl Event {
    pub fn key(&self) -> &[u8] {
        match self {
            Event::Put(kv) => &kv.key,
            Event::Delete { key, .. } => key,
        }
    }
}

/// The end of the range of every key starting with `prefix`: the prefix
/// with its last byte that is not 0xff incremented (etcd's convention);
/// `\0` (every key) when there is none.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// One member: its endpoint and the stubs on its channel.
struct Member {
    endpoint: String,
    kv: KvClient,
    lease: LeaseClient,
    watch: WatchClient,
}

/// A client of an etcd cluster.
pub struct Etcd {
    members: Vec<Member>,
    /// The member that answered last, tried first.
    current: AtomicUsize,
    timeout: Duration,
    /// Over TLS without a client certificate: a member that wants one
    /// ends the connection after the handshake, which gRPC reports only
    /// as a failed read, so the reason says what it likely means.
    without_client_cert: bool,
}

/// Checks that `endpoint` is one the client can use: `https://host:port`
/// when it has TLS settings (`tls`), `http://host:port` otherwise. Every
/// member is spoken to alike, so a cluster's endpoints cannot mix the two.
/// `http://host:port` (`https://` with `tls`) as a gRPC target; the
/// config's check (`spec`) reads endpoints the same way.
fn target(endpoint: &str, tls: bool) -> Result<String, Error> {
    crate::spec::etcd_target(endpoint, tls).map_err(|reason| Error::Endpoint {
        endpoint: endpoint.to_string(),
        reason,
    })
}

/// Whether another member may answer where this one could not.
fn fails_over(err: &grpcio::Error) -> bool {
    match err {
        grpcio::Error::RpcFailure(status) => matches!(
            status.code(),
            RpcStatusCode::UNAVAILABLE
                | RpcStatusCode::DEADLINE_EXCEEDED
                | RpcStatusCode::CANCELLED
                | RpcStatusCode::UNKNOWN
        ),
        // The transport failed: the call never reached a member.
        _ => true,
    }
}

/// Whether a member took the call but did not carry it out: it timed out
/// (a member without a leader holds requests until they expire; its own
/// context may expire first, which it answers as UNKNOWN `context
/// deadline exceeded`) or etcd itself refused (`etcdserver: no leader`,
/// `request timed out`); not a member that could not be reached at all.
fn reached_without_quorum(err: &grpcio::Error) -> bool {
    match err {
        grpcio::Error::RpcFailure(status) => {
            status.code() == RpcStatusCode::DEADLINE_EXCEEDED
                || status.message().starts_with("etcdserver:")
                || (status.code() == RpcStatusCode::UNKNOWN
                    && status.message().contains("context deadline exceeded"))
        }
        _ => false,
    }
}

fn reason(err: &grpcio::Error) -> String {
    match err {
        grpcio::Error::RpcFailure(status) => {
            format!("{:?} {}", status.code(), status.message())
        }
        other => other.to_string(),
    }
}

impl Etcd {
    /// A client of the cluster at `endpoints`: `http://host:port` each,
    /// or with `tls`, `https://host:port` each. Connecting is lazy: an
    /// unreachable member, or a TLS handshake a member refuses, shows up
    /// in a call.
    pub fn new(endpoints: &[String], tls: Option<&Tls>) -> Result<Etcd, Error> {
        if endpoints.is_empty() {
            return Err(Error::Endpoint {
                endpoint: String::new(),
                reason: "no endpoint given".into(),
            });
        }
        let mut members = Vec::new();
        for endpoint in endpoints {
            let target = target(endpoint, tls.is_some())?;
            let builder = ChannelBuilder::new(grpc_environment())
                .max_receive_message_len(MAX_ANSWER)
                .initial_reconnect_backoff(Duration::from_millis(100))
                .max_reconnect_backoff(Duration::from_secs(1))
                .use_local_subchannel_pool(true);
            let channel = match tls {
                Some(tls) => builder.set_credentials(tls.credentials()).connect(&target),
                None => builder.connect(&target),
            };
            members.push(Member {
                endpoint: endpoint.clone(),
                kv: KvClient::new(channel.clone()),
                lease: LeaseClient::new(channel.clone()),
                watch: WatchClient::new(channel),
            });
        }
        Ok(Etcd {
            members,
            current: AtomicUsize::new(0),
            timeout: DEFAULT_TIMEOUT,
            without_client_cert: tls.is_some_and(|tls| !tls.has_client_cert()),
        })
    }

    /// The same client with another deadline per call and member.
    pub fn with_timeout(mut self, timeout: Duration) -> Etcd {
        self.timeout = timeout;
        self
    }

    /// A member's `reason` for not answering, with a hint when this client
    /// has TLS but no certificate and the member ended the connection.
    fn explain(&self, reason: String) -> String {
        if self.without_client_cert && reason.contains("Endpoint read failed") {
            format!(
                "{reason} (it ended the TLS connection, as etcd does when it asks for a client certificate and gets none: give the tls block cert_file and key_file)"
            )
        } else {
            reason
        }
    }

    /// Runs `call` on the member that answered last, then on each other
    /// member while they cannot answer.
    fn call<T>(
        &self,
        what: &'static str,
        call: impl Fn(&Member, CallOption) -> grpcio::Result<T>,
    ) -> Result<T, Error> {
        self.call_within(self.timeout, what, call)
    }

    /// [`Etcd::call`] with a deadline of `timeout` per member, its
    /// duration and outcome counted in the metrics by operation.
    fn call_within<T>(
        &self,
        timeout: Duration,
        what: &'static str,
        call: impl Fn(&Member, CallOption) -> grpcio::Result<T>,
    ) -> Result<T, Error> {
        let at = std::time::Instant::now();
        let result = self.call_members(timeout, what, call);
        let outcome = if result.is_ok() { "ok" } else { "error" };
        crate::metrics::ETCD_REQUESTS.observe(&[what, outcome], at.elapsed().as_secs_f64());
        result
    }

    fn call_members<T>(
        &self,
        timeout: Duration,
        what: &'static str,
        call: impl Fn(&Member, CallOption) -> grpcio::Result<T>,
    ) -> Result<T, Error> {
        let n = self.members.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut reasons = Vec::new();
        let mut no_quorum = false;
        for i in 0..n {
            let index = (first + i) % n;
            let member = &self.members[index];
            match call(member, CallOption::default().timeout(timeout)) {
                Ok(answer) => {
                    self.current.store(index, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(err) if fails_over(&err) => {
                    log::debug!("etcd {what} at {}: {}", member.endpoint, reason(&err));
                    reasons.push((member.endpoint.clone(), self.explain(reason(&err))));
                    no_quorum |= reached_without_quorum(&err);
                }
                Err(err) => {
                    let (code, message) = match &err {
                        grpcio::Error::RpcFailure(s) => (s.code(), s.message().to_string()),
                        other => (RpcStatusCode::UNKNOWN, other.to_string()),
                    };
                    return Err(Error::Refused {
                        what,
                        endpoint: member.endpoint.clone(),
                        code,
                        message,
                    });
                }
            }
        }
        Err(Error::NoMember {
            what,
            reasons,
            no_quorum,
        })
    }

    /// The key, if it exists.
    pub fn get(&self, key: &[u8]) -> Result<Option<Kv>, Error> {
        let req = pb::RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        };
        let resp = self.call("Range", |m, opt| m.kv.range_opt(&req, opt))?;
        Ok(resp.kvs.into_iter().next().map(Kv::from))
    }

    /// Every key starting with `prefix`, in key order, and the store's
    /// revision they are read at (a watch from the next revision misses
    /// nothing).
    pub fn get_prefix(&self, prefix: &[u8]) -> Result<(Vec<Kv>, i64), Error> {
        let req = pb::RangeRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            ..Default::default()
        };
        let resp = self.call("Range", |m, opt| m.kv.range_opt(&req, opt))?;
        let revision = resp.header.as_ref().map_or(0, |h| h.revision);
        Ok((resp.kvs.into_iter().map(Kv::from).collect(), revision))
    }

    /// The ID of the etcd cluster the members belong to (a new etcd
    /// cluster has a new one).
    pub fn cluster_id(&self) -> Result<u64, Error> {
        let req = pb::RangeRequest {
            key: b"\0".to_vec(),
            count_only: true,
            ..Default::default()
        };
        let resp = self.call("Range", |m, opt| m.kv.range_opt(&req, opt))?;
        Ok(resp.header.as_ref().map_or(0, |h| h.cluster_id))
    }

    /// Puts `key`; with a `lease` (not 0) it goes when the lease does.
    /// Answers the store's revision after the put.
    pub fn put(&self, key: &[u8], value: &[u8], lease: i64) -> Result<i64, Error> {
        let req = pb::PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            lease,
            ..Default::default()
        };
        let resp = self.call("Put", |m, opt| m.kv.put_opt(&req, opt))?;
        Ok(resp.header.as_ref().map_or(0, |h| h.revision))
    }

    /// Deletes `key`; answers whether it existed.
    pub fn delete(&self, key: &[u8]) -> Result<bool, Error> {
        let req = pb::DeleteRangeRequest {
            key: key.to_vec(),
            ..Default::default()
        };
        let resp = self.call("DeleteRange", |m, opt| m.kv.delete_range_opt(&req, opt))?;
        Ok(resp.deleted > 0)
    }

    /// A lease of `ttl`, in whole seconds rounded up (etcd may round it up
    /// further, never down): its ID and TTL in seconds.
    pub fn grant(&self, ttl: Duration) -> Result<(i64, i64), Error> {
        let req = pb::LeaseGrantRequest {
            TTL: (ttl.as_secs_f64().ceil() as i64).max(1),
            ..Default::default()
        };
        let resp = self.call("LeaseGrant", |m, opt| m.lease.lease_grant_opt(&req, opt))?;
        if !resp.error.is_empty() {
            return Err(Error::Refused {
                what: "LeaseGrant",
                endpoint: self.members[self.current.load(Ordering::Relaxed)]
                    .endpoint
                    .clone(),
                code: RpcStatusCode::UNKNOWN,
                message: resp.error,
            });
        }
        Ok((resp.ID, resp.TTL))
    }

    /// Revokes a lease: every key attached to it is deleted.
    pub fn revoke(&self, lease: i64) -> Result<(), Error> {
        let req = pb::LeaseRevokeRequest {
            ID: lease,
            ..Default::default()
        };
        self.call("LeaseRevoke", |m, opt| m.lease.lease_revoke_opt(&req, opt))
            .map(drop)
    }

    /// Keeps a lease alive once (one exchange on the LeaseKeepAlive
    /// stream): its remaining TTL in seconds, or 0 when it has expired.
    pub fn keep_alive(&self, lease: i64) -> Result<i64, Error> {
        self.keep_alive_within(lease, self.timeout)
    }

    /// [`Etcd::keep_alive`] with a deadline of `timeout` per member.
    pub fn keep_alive_within(&self, lease: i64, timeout: Duration) -> Result<i64, Error> {
        let resp = self.call_within(timeout, "LeaseKeepAlive", |m, opt| {
            let (mut sink, mut answers) = m.lease.lease_keep_alive_opt(opt)?;
            let req = pb::LeaseKeepAliveRequest {
                ID: lease,
                ..Default::default()
            };
            block_on(sink.send((req, WriteFlags::default())))?;
            let answer = block_on(answers.next());
            let _ = block_on(sink.close());
            match answer {
                Some(answer) => answer,
                None => Err(grpcio::Error::RemoteStopped),
            }
        })?;
        Ok(resp.TTL.max(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_where_its_last_byte_below_ff_is_incremented() {
        assert_eq!(prefix_end(b"/csi/volumes/"), b"/csi/volumes0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }

    #[test]
    fn endpoints_are_http_host_port() {
        assert_eq!(
            target("http://10.1.0.1:2379", false).unwrap(),
            "10.1.0.1:2379"
        );
        assert_eq!(target("http://etcd-1:2379/", false).unwrap(), "etcd-1:2379");
        for bad in ["10.1.0.1:2379", "http://host", "http://:2379", "ftp://h:1"] {
            assert!(target(bad, false).is_err(), "{bad}");
        }
    }

    #[test]
    fn with_tls_endpoints_are_https_host_port_and_only_then() {
        assert_eq!(target("https://etcd-1:2379", true).unwrap(), "etcd-1:2379");
        assert!(target("https://h", true).is_err());
        let err = target("https://h:2379", false).unwrap_err();
        assert!(
            err.to_string().contains("needs the cluster's tls block"),
            "{err}"
        );
        let err = target("http://h:2379", true).unwrap_err();
        assert!(err.to_string().contains("must be https://"), "{err}");
    }

    #[test]
    fn a_member_whose_own_deadline_expired_was_reached_without_a_quorum() {
        let failure = |code, message: &str| {
            grpcio::Error::RpcFailure(grpcio::RpcStatus::with_message(code, message.into()))
        };
        assert!(reached_without_quorum(&failure(
            RpcStatusCode::UNKNOWN,
            "context deadline exceeded"
        )));
        assert!(reached_without_quorum(&failure(
            RpcStatusCode::DEADLINE_EXCEEDED,
            "Deadline Exceeded"
        )));
        assert!(reached_without_quorum(&failure(
            RpcStatusCode::UNAVAILABLE,
            "etcdserver: no leader"
        )));
        assert!(!reached_without_quorum(&failure(
            RpcStatusCode::UNAVAILABLE,
            "failed to connect to all addresses"
        )));
        assert!(!reached_without_quorum(&failure(
            RpcStatusCode::UNKNOWN,
            "something else"
        )));
    }

    #[test]
    fn no_member_names_every_member_s_reason() {
        let err = Error::NoMember {
            what: "Put",
            reasons: vec![
                ("http://a:1".into(), "UNAVAILABLE down".into()),
                (
                    "http://b:1".into(),
                    "UNAVAILABLE etcdserver: no leader".into(),
                ),
            ],
            no_quorum: true,
        };
        assert_eq!(
            err.to_string(),
            "no etcd member answered Put, likely for want of a quorum (a majority of the members down or cut off): http://a:1: UNAVAILABLE down; http://b:1: UNAVAILABLE etcdserver: no leader"
        );
    }
}
