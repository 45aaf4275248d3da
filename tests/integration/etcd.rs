//! The etcd client against real etcd processes (Debian's `etcd-server`,
//! which `make deps` installs): one member, or three on loopback ports of
//! the test's own, each in its test dir, killed in `Drop`. A cluster may
//! listen on another address of the root namespace instead
//! ([`Cluster::start_on`]): a [`crate::netns::Net`]'s bridge, for agents
//! in its namespaces. A cluster may speak TLS to its clients and ask them
//! for a certificate ([`Cluster::start_tls`]), with a CA and certificates
//! the test makes with the `openssl` CLI ([`Certs`]).
//!
//! What the cluster module builds on is checked here: keys and prefixes,
//! the revision-compared transaction that lets exactly one of two racing
//! writers win, leases that take their keys with them, watches that miss
//! nothing from a revision on, fail-over when a member dies, a clear
//! error (not a hang) when a majority is gone, and TLS with client
//! certificates: the right CA and certificate work, no certificate or
//! another CA is refused.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::cluster::etcd::{Error, Etcd, Event};
use csi_agent::cluster::tls::Tls;

use crate::util::TestDir;

/// Whether etcd is installed; under CI its absence is a failure.
pub fn require_etcd() -> bool {
    require_command("etcd", "--version", "etcd", "etcd-server")
}

/// Whether the `openssl` CLI is installed; under CI its absence is a
/// failure.
pub fn require_openssl() -> bool {
    require_command("openssl", "version", "openssl", "it")
}

/// Whether `text` carries the TLS library's reason for a server
/// certificate no trusted CA signed, as gRPC passes it on: BoringSSL's
/// `CERTIFICATE_VERIFY_FAILED` (the vendored gRPC core, `make static`) or
/// OpenSSL's `certificate verify failed` (the system's, `make build`).
pub fn names_a_failed_certificate_check(text: &str) -> bool {
    text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("certificate verify failed")
}

/// Whether `command arg` runs; else a skip, or under CI a failure saying
/// that `make deps` installs `package`.
fn require_command(command: &str, arg: &str, what: &str, package: &str) -> bool {
    let found = Command::new(command)
        .arg(arg)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{what} is not installed; `make deps` installs {package}");
        }
        eprintln!("skipping: {what} is not installed (`make deps` installs {package})");
    }
    found
}

/// A test CA, the certificates it signed for etcd's members and for a
/// client, and a CA that signed nothing of them; PEM files with P-256
/// keys, valid for two days.
pub struct Certs {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub other_ca: PathBuf,
}

impl Certs {
    /// Makes them in `dir`; the members' certificate names `addr` (and
    /// 127.0.0.1 and `localhost`), which is what a client checks it
    /// against. It serves any test's TLS server, too.
    pub fn make(dir: &Path, addr: IpAddr) -> Certs {
        let path = |name: &str| dir.join(name).display().to_string();
        let new_key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        for ca in ["ca", "other-ca"] {
            openssl(&format!(
                "req -x509 {new_key} -days 2 -subj /CN={ca} \
                 -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
                 -keyout {} -out {}",
                path(&format!("{ca}.key")),
                path(&format!("{ca}.pem")),
            ));
        }
        // etcd also presents its certificate as a client, to itself (its
        // gRPC gateway), so the members' certificate is for both.
        let server_ext = format!(
            "subjectAltName=IP:127.0.0.1,IP:{addr},DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
        );
        for (name, extensions) in [
            ("server", server_ext.as_str()),
            ("client", "extendedKeyUsage=clientAuth\n"),
        ] {
            std::fs::write(path(&format!("{name}.ext")), extensions).unwrap();
            openssl(&format!(
                "req -new {new_key} -subj /CN={name} -keyout {} -out {}",
                path(&format!("{name}.key")),
                path(&format!("{name}.csr")),
            ));
            openssl(&format!(
                "x509 -req -in {} -CA {} -CAkey {} -set_serial 2 -days 2 -extfile {} -out {}",
                path(&format!("{name}.csr")),
                path("ca.pem"),
                path("ca.key"),
                path(&format!("{name}.ext")),
                path(&format!("{name}.pem")),
            ));
        }
        Certs {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            other_ca: dir.join("other-ca.pem"),
        }
    }

    /// The CA and the client's certificate: what etcd accepts.
    pub fn client_tls(&self) -> Tls {
        Tls::load(&self.ca, Some((&self.client_cert, &self.client_key))).unwrap()
    }

    /// `tls { ... }` of a cluster block, with the client's certificate.
    pub fn tls_block(&self) -> String {
        format!(
            "  tls {{\n    ca_file   = {:?}\n    cert_file = {:?}\n    key_file  = {:?}\n  }}\n",
            self.ca, self.client_cert, self.client_key
        )
    }
}

/// Runs `openssl` with `args`, split at whitespace (the test's paths
/// have none).
fn openssl(args: &str) {
    let out = Command::new("openssl")
        .args(args.split_whitespace())
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A port of `addr` that nobody listens on now, and that nobody else in
/// this process is handed: ports come from below the kernel's ephemeral
/// range (32768 and up by default), so no outgoing connection's source
/// port and no other test's port can take it between now and etcd's bind.
pub fn free_port(addr: IpAddr) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id() * 61;
    for _ in 0..12_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + ((base + n) % 12_000) as u16;
        if TcpListener::bind((addr, port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000-31999");
}

/// etcd members on one address (loopback unless [`Cluster::start_on`]),
/// in a test dir.
pub struct Cluster {
    dir: TestDir,
    members: Vec<Option<Child>>,
    /// Each member's command line, to start it again.
    args: Vec<Vec<String>>,
    pub clients: Vec<String>,
    /// With TLS: the certificates, which the members ask clients for.
    pub certs: Option<Certs>,
}

impl Cluster {
    /// Starts `n` members on loopback and waits for a leader.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_on(n, Ipv4Addr::LOCALHOST.into())
    }

    /// Starts `n` members listening (for clients and peers) on `addr`, an
    /// address of the root namespace, e.g. [`crate::netns::Net::bridge_addr`],
    /// and waits for a leader.
    pub fn start_on(n: usize, addr: IpAddr) -> Cluster {
        Cluster::start_with(n, addr, false)
    }

    /// Starts `n` members on loopback that speak TLS to clients (peers
    /// stay plain) and ask each client for a certificate signed by the
    /// test's CA (etcd's `--client-cert-auth`); waits for a leader.
    pub fn start_tls(n: usize) -> Cluster {
        Cluster::start_with(n, Ipv4Addr::LOCALHOST.into(), true)
    }

    fn start_with(n: usize, addr: IpAddr, tls: bool) -> Cluster {
        let dir = TestDir::new();
        let certs = tls.then(|| Certs::make(&dir.path, addr));
        let peers: Vec<u16> = (0..n).map(|_| free_port(addr)).collect();
        let clients: Vec<u16> = (0..n).map(|_| free_port(addr)).collect();
        let url = |port: u16| format!("http://{}", SocketAddr::new(addr, port));
        let client_url = |port: u16| match tls {
            true => format!("https://{}", SocketAddr::new(addr, port)),
            false => url(port),
        };
        let initial: Vec<String> = peers
            .iter()
            .enumerate()
            .map(|(i, &p)| format!("m{i}={}", url(p)))
            .collect();
        let token = format!("csi-agent-test-{}", dir.path.display());
        let mut members = Vec::new();
        let mut all_args = Vec::new();
        for i in 0..n {
            let mut args: Vec<String> = [
                "--name",
                &format!("m{i}"),
                "--data-dir",
                &dir.join(&format!("m{i}")).display().to_string(),
                "--listen-client-urls",
                &client_url(clients[i]),
                "--advertise-client-urls",
                &client_url(clients[i]),
                "--listen-peer-urls",
                &url(peers[i]),
                "--initial-advertise-peer-urls",
                &url(peers[i]),
                "--initial-cluster",
                &initial.join(","),
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                &token,
                "--heartbeat-interval",
                "50",
                "--election-timeout",
                "500",
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            if let Some(certs) = &certs {
                for (flag, path) in [
                    ("--cert-file", &certs.server_cert),
                    ("--key-file", &certs.server_key),
                    ("--trusted-ca-file", &certs.ca),
                ] {
                    args.extend([flag.to_string(), path.display().to_string()]);
                }
                args.push("--client-cert-auth".into());
            }
            members.push(Some(spawn_member(&dir, i, &args)));
            all_args.push(args);
        }
        let cluster = Cluster {
            dir,
            members,
            args: all_args,
            clients: clients.iter().map(|&p| client_url(p)).collect(),
            certs,
        };
        cluster.wait_ready();
        cluster
    }

    /// Starts member `i` again after [`Cluster::kill`], on its data dir.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].is_none(), "member {i} is running");
        self.members[i] = Some(spawn_member(&self.dir, i, &self.args[i]));
    }

    /// A client of the cluster; with TLS, one with the test CA and the
    /// client's certificate.
    pub fn client(&self) -> Etcd {
        let tls = self.certs.as_ref().map(Certs::client_tls);
        self.client_with(tls.as_ref())
    }

    /// A client with these TLS settings.
    pub fn client_with(&self, tls: Option<&Tls>) -> Etcd {
        Etcd::new(&self.clients, tls)
            .unwrap()
            .with_timeout(Duration::from_secs(2))
    }

    /// Waits until a write goes through (a leader is elected).
    pub fn wait_ready(&self) {
        let client = self.client();
        let start = Instant::now();
        while let Err(err) = client.put(b"/ready", b"", 0) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd never became ready: {err}\n{}",
                self.logs()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn logs(&self) -> String {
        (0..self.members.len())
            .map(|i| {
                std::fs::read_to_string(self.dir.join(&format!("m{i}.log"))).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn spawn_member(dir: &TestDir, i: usize, args: &[String]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(&format!("m{i}.log")))
        .unwrap();
    Command::new("etcd")
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start etcd")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

#[test]
fn keys_prefixes_and_deletes_round_trip() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    assert_eq!(etcd.get(b"/csi/volumes/a").unwrap(), None);
    etcd.put(b"/csi/volumes/a", b"one", 0).unwrap();
    etcd.put(b"/csi/volumes/b", b"two", 0).unwrap();
    etcd.put(b"/csi/volumes0", b"outside", 0).unwrap();
    let a = etcd.get(b"/csi/volumes/a").unwrap().unwrap();
    assert_eq!(a.value, b"one");
    let (all, revision) = etcd.get_prefix(b"/csi/volumes/").unwrap();
    let keys: Vec<&[u8]> = all.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, [&b"/csi/volumes/a"[..], b"/csi/volumes/b"]);
    assert!(revision >= a.mod_revision);
    assert!(etcd.delete(b"/csi/volumes/a").unwrap());
    assert!(!etcd.delete(b"/csi/volumes/a").unwrap());
}

#[test]
fn of_two_writers_comparing_the_same_revision_exactly_one_wins_every_round() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let rounds = 100;
    let barrier = Arc::new(Barrier::new(2));
    let racers: Vec<_> = ["host-a", "host-b"]
        .into_iter()
        .map(|host| {
            let etcd = cluster.client();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut wins = Vec::new();
                for round in 0..rounds {
                    let key = format!("/csi/volumes/v{round}/claims");
                    // Both read "no claim" (revision 0), then both write.
                    barrier.wait();
                    if etcd
                        .put_if(key.as_bytes(), 0, host.as_bytes(), 0)
                        .unwrap()
                        .is_some()
                    {
                        wins.push(round);
                    }
                }
                wins
            })
        })
        .collect();
    let wins: Vec<Vec<usize>> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(wins[0].len() + wins[1].len(), rounds, "{wins:?}");
    assert!(wins[0].iter().all(|r| !wins[1].contains(r)));
    // A writer comparing a stale revision loses; the current one wins.
    let etcd = cluster.client();
    let current = etcd.get(b"/csi/volumes/v0/claims").unwrap().unwrap();
    assert_eq!(
        etcd.put_if(b"/csi/volumes/v0/claims", current.mod_revision - 1, b"x", 0)
            .unwrap(),
        None
    );
    assert!(etcd
        .put_if(b"/csi/volumes/v0/claims", current.mod_revision, b"x", 0)
        .unwrap()
        .is_some());
    assert!(!etcd
        .delete_if(b"/csi/volumes/v0/claims", current.mod_revision)
        .unwrap());
}

#[test]
fn a_lease_keeps_its_key_while_kept_alive_and_takes_it_when_it_ends() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    let (lease, ttl) = etcd.grant(Duration::from_secs(2)).unwrap();
    assert!(ttl >= 2);
    etcd.put(b"/csi/nodes/n1", b"alive", lease).unwrap();
    // Kept alive past its TTL, the key stays.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(ttl as u64 + 1) {
        assert!(etcd.keep_alive(lease).unwrap() > 0);
        thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(etcd.get(b"/csi/nodes/n1").unwrap().unwrap().lease, lease);
    // Left alone, the lease expires and takes the key.
    let start = Instant::now();
    while etcd.get(b"/csi/nodes/n1").unwrap().is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the lease never expired"
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(etcd.keep_alive(lease).unwrap(), 0, "an expired lease");
    // Revoking takes a key at once.
    let (lease, _) = etcd.grant(Duration::from_secs(60)).unwrap();
    etcd.put(b"/csi/nodes/n2", b"alive", lease).unwrap();
    etcd.revoke(lease).unwrap();
    assert_eq!(etcd.get(b"/csi/nodes/n2").unwrap(), None);
}

#[test]
fn a_watch_from_a_revision_sees_every_change_after_it_in_order() {
    if !require_etcd() {
        return;
    }
    let cluster = Cluster::start(1);
    let etcd = cluster.client();
    etcd.put(b"/csi/attachments/v1/n1", b"before", 0).unwrap();
    let (_, revision) = etcd.get_prefix(b"/csi/attachments/").unwrap();
    // Changes between the read and the watch are not missed.
    etcd.put(b"/csi/attachments/v1/n1", b"intent", 0).unwrap();
    let watch = etcd
        .watch_prefix(b"/csi/attachments/", revision + 1)
        .unwrap();
    etcd.put(b"/csi/attachments/v1/n2", b"intent", 0).unwrap();
    etcd.put(b"/csi/elsewhere", b"not watched", 0).unwrap();
    etcd.delete(b"/csi/attachments/v1/n1").unwrap();
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.len() < 3 {
        assert!(start.elapsed() < Duration::from_secs(10), "{seen:?}");
        match watch.next(Duration::from_secs(5)) {
            Ok(batch) => seen.extend(batch.events),
            Err(Error::Timeout) => {}
            Err(err) => panic!("{err}"),
        }
    }
    match &seen[..] {
        [Event::Put(a), Event::Put(b), Event::Delete { key, .. }] => {
            assert_eq!(
                (a.key.as_slice(), a.value.as_slice()),
                (&b"/csi/attachments/v1/n1"[..], &b"intent"[..])
            );
            assert_eq!(b.key, b"/csi/attachments/v1/n2");
            assert_eq!(key, b"/csi/attachments/v1/n1");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_dead_member_is_failed_over_and_a_lost_majority_is_a_clear_error() {
    if !require_etcd() {
        return;
    }
    let mut cluster = Cluster::start(3);
    let etcd = cluster.client();
    etcd.put(b"/csi/k", b"1", 0).unwrap();
    // Whichever member the client used, one down leaves a quorum.
    cluster.kill(0);
    let start = Instant::now();
    loop {
        match etcd.put(b"/csi/k", b"2", 0) {
            Ok(_) => break,
            // A new leader may take an election.
            Err(err) if start.elapsed() < Duration::from_secs(20) => {
                eprintln!("waiting for a leader: {err}");
                thread::sleep(Duration::from_millis(100));
            }
            Err(err) => panic!("{err}\n{}", cluster.logs()),
        }
    }
    assert_eq!(etcd.get(b"/csi/k").unwrap().unwrap().value, b"2");
    // Two of three down: no quorum. The call fails within its deadlines,
    // naming every member, instead of hanging.
    cluster.kill(1);
    let start = Instant::now();
    let err = etcd.put(b"/csi/k", b"3", 0).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let text = err.to_string();
    assert!(text.starts_with("no etcd member answered Put"), "{text}");
    for endpoint in &cluster.clients {
        assert!(text.contains(endpoint.as_str()), "{text}");
    }
}

#[test]
fn over_tls_a_client_with_the_ca_and_a_certificate_reads_writes_and_watches() {
    if !require_etcd() || !require_openssl() {
        return;
    }
    let cluster = Cluster::start_tls(1);
    assert!(cluster.clients[0].starts_with("https://"));
    let etcd = cluster.client();
    let revision = etcd.put(b"/csi/tls/a", b"one", 0).unwrap();
    let watch = etcd.watch_prefix(b"/csi/tls/", revision + 1).unwrap();
    etcd.put(b"/csi/tls/b", b"two", 0).unwrap();
    assert_eq!(etcd.get(b"/csi/tls/a").unwrap().unwrap().value, b"one");
    let (all, _) = etcd.get_prefix(b"/csi/tls/").unwrap();
    assert_eq!(all.len(), 2);
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < Duration::from_secs(10), "no watch event");
        match watch.next(Duration::from_secs(5)) {
            Ok(batch) if batch.events.is_empty() => {}
            Ok(batch) => {
                assert_eq!(batch.events[0].key(), b"/csi/tls/b");
                break;
            }
            Err(Error::Timeout) => {}
            Err(err) => panic!("{err}"),
        }
    }
    // A lease too: the keep-alive is a stream of its own.
    let (lease, _) = etcd.grant(Duration::from_secs(5)).unwrap();
    assert!(etcd.keep_alive(lease).unwrap() > 0);
}

/// The text of a refused Range: every member's reason.
fn refused(etcd: &Etcd) -> String {
    let err = etcd.get(b"/csi/tls/a").unwrap_err();
    assert!(matches!(err, Error::NoMember { .. }), "{err:?}");
    err.to_string()
}

#[test]
fn over_tls_a_client_without_a_certificate_is_refused() {
    if !require_etcd() || !require_openssl() {
        return;
    }
    let cluster = Cluster::start_tls(1);
    let certs = cluster.certs.as_ref().unwrap();
    let tls = Tls::load(&certs.ca, None).unwrap();
    let text = refused(&cluster.client_with(Some(&tls)));
    assert!(
        text.starts_with(&format!(
            "no etcd member answered Range: {}: 14-UNAVAILABLE",
            cluster.clients[0]
        )),
        "{text}"
    );
    assert!(
        text.ends_with("(it ended the TLS connection, as etcd does when it asks for a client certificate and gets none: give the tls block cert_file and key_file)"),
        "{text}"
    );
    // The client with a certificate is let in by the same member.
    cluster.client().get(b"/csi/tls/a").unwrap();
}

#[test]
fn over_tls_a_client_trusting_another_ca_refuses_the_member() {
    if !require_etcd() || !require_openssl() {
        return;
    }
    let cluster = Cluster::start_tls(1);
    let certs = cluster.certs.as_ref().unwrap();
    let tls = Tls::load(
        &certs.other_ca,
        Some((&certs.client_cert, &certs.client_key)),
    )
    .unwrap();
    let text = refused(&cluster.client_with(Some(&tls)));
    assert!(
        text.starts_with(&format!(
            "no etcd member answered Range: {}: 14-UNAVAILABLE",
            cluster.clients[0]
        )),
        "{text}"
    );
    assert!(names_a_failed_certificate_check(&text), "{text}");
}

#[test]
fn a_plain_client_of_a_tls_member_is_refused_by_its_endpoints() {
    if !require_etcd() || !require_openssl() {
        return;
    }
    let cluster = Cluster::start_tls(1);
    let err = Etcd::new(&cluster.clients, None).err().unwrap();
    assert!(
        err.to_string()
            .contains("https needs the cluster's tls block"),
        "{err}"
    );
}
