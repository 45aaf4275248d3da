//! Hosts for the cluster tests: network namespaces made by the test, so
//! that agents reach etcd as agents on several machines do, and a
//! partition is a link set down.
//!
//! A [`Net`] is one bridge in the root namespace, with the address `.1` of
//! a /24 of the test's own, and N namespaces, each joined to the bridge by
//! a veth pair and given the address `.2 + i`. Servers the hosts share
//! (etcd) listen on the bridge address in the root namespace;
//! [`Net::partition`] sets a namespace's end of its link down, which cuts
//! that host off from them (and from the other hosts), and [`Net::heal`]
//! sets it up again.
//!
//! A process is put in a host with [`enter`]: it joins the network
//! namespace and nothing else (not `ip netns exec`, which also gives it a
//! mount namespace of its own): its mounts are the test's, and unix
//! sockets, being paths, still reach it from the root namespace.
//!
//! Names are unique per process and per `Net` (the pid and a counter), and
//! the /24 is chosen under a lock among those no route of this machine
//! overlaps, so tests running in parallel never share a bridge or an
//! address. Everything is removed in `Drop`, even after a panic: the
//! processes still in the namespaces are killed, then the namespaces (and
//! with them the veth pairs) and the bridge are deleted. What a test
//! process killed before its `Drop` left behind is removed by the next
//! `Net` made on this machine.

use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::thread;
use std::time::Duration;

use crate::util::require_root;

/// Where `ip netns add` puts the namespaces it names.
const NETNS_DIR: &str = "/run/netns";

/// The start of every namespace name of these tests, followed by
/// `<pid>-<counter>-<host>`.
const NETNS_PREFIX: &str = "csi-agent-it-";

/// The start of every bridge name, followed by `<pid:x>-<counter:x>`.
const BRIDGE_PREFIX: &str = "cb";

/// The name of each host's end of its link, inside its namespace.
const HOST_LINK: &str = "eth0";

/// Bridges with no address yet: choosing a /24 and taking it are one step.
static CHOOSING: Mutex<()> = Mutex::new(());

/// A bridge and `hosts` network namespaces linked to it.
pub struct Net {
    /// `<pid:x>-<counter:x>`, in every name this `Net` makes.
    id: String,
    /// The process that made it, in namespace names.
    pid: u32,
    counter: usize,
    bridge: String,
    /// The first three octets of the /24.
    subnet: [u8; 3],
    hosts: usize,
}

impl Net {
    /// Makes the bridge and `hosts` namespaces (at most 10), each linked to
    /// the bridge and up. Panics naming the `ip` command that failed.
    pub fn new(hosts: usize) -> Net {
        assert!(hosts <= 10, "a Net has at most 10 hosts, not {hosts}");
        static SWEPT: Once = Once::new();
        SWEPT.call_once(remove_leftovers_of_dead_processes);
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let counter = COUNTER.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let id = format!("{pid:x}-{counter:x}");
        let bridge = format!("{BRIDGE_PREFIX}{id}");
        // Host links are `<bridge>-<i>`: at most 15 bytes, as IFNAMSIZ says.
        assert!(bridge.len() + 2 <= 15, "interface names too long: {bridge}");
        let mut net = Net {
            id,
            pid,
            counter,
            bridge,
            subnet: [0; 3],
            hosts: 0,
        };
        {
            let _choosing = CHOOSING.lock().unwrap_or_else(|e| e.into_inner());
            net.subnet = free_subnet(pid as usize * 64 + counter);
            ip(&["link", "add", &net.bridge, "type", "bridge"]);
            let cidr = format!("{}/24", net.bridge_addr());
            ip(&["addr", "add", &cidr, "dev", &net.bridge]);
        }
        ip(&["link", "set", &net.bridge, "up"]);
        for i in 0..hosts {
            net.add_host(i);
        }
        net
    }

    /// Namespace `i`, with a veth pair whose outer end is on the bridge.
    fn add_host(&mut self, i: usize) {
        let netns = self.netns(i);
        ip(&["netns", "add", &netns]);
        // Counted before the links exist, so that Drop removes the namespace.
        self.hosts = i + 1;
        let outer = self.outer_link(i);
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", HOST_LINK, "netns", &netns,
        ]);
        ip(&["link", "set", &outer, "master", &self.bridge, "up"]);
        let cidr = format!("{}/24", self.addr(i));
        ip(&["-n", &netns, "addr", "add", &cidr, "dev", HOST_LINK]);
        ip(&["-n", &netns, "link", "set", HOST_LINK, "up"]);
        ip(&["-n", &netns, "link", "set", "lo", "up"]);
    }

    /// The root namespace's end of host `i`'s link, on the bridge.
    fn outer_link(&self, i: usize) -> String {
        format!("{}-{i}", self.bridge)
    }

    /// The bridge's address, in the root namespace: where shared servers
    /// listen.
    pub fn bridge_addr(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1)
    }

    /// Host `i`'s address, in its namespace.
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        assert!(i < self.hosts, "no host {i} in a Net of {}", self.hosts);
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 2 + i as u8)
    }

    /// Host `i`'s namespace name, as `ip netns` lists it.
    pub fn netns(&self, i: usize) -> String {
        format!("{NETNS_PREFIX}{}-{}-{i}", self.pid, self.counter)
    }

    /// Host `i`'s namespace file, for [`enter`] or `nsenter --net=`.
    pub fn netns_path(&self, i: usize) -> PathBuf {
        assert!(i < self.hosts, "no host {i} in a Net of {}", self.hosts);
        Path::new(NETNS_DIR).join(self.netns(i))
    }

    /// Cuts host `i` off: its end of the link goes down, and with it its
    /// route to the bridge.
    pub fn partition(&self, i: usize) {
        ip(&["-n", &self.netns(i), "link", "set", HOST_LINK, "down"]);
    }

    /// Joins host `i` again after [`Net::partition`]: its link comes up,
    /// with the address it kept.
    pub fn heal(&self, i: usize) {
        ip(&["-n", &self.netns(i), "link", "set", HOST_LINK, "up"]);
    }

    /// Runs `f` on a thread of its own in host `i`'s network namespace
    /// (a namespace is per thread): the sockets it opens are the host's.
    pub fn run_in<T: Send>(&self, i: usize, f: impl FnOnce() -> T + Send) -> T {
        let path = self.netns_path(i);
        thread::scope(|scope| {
            thread::Builder::new()
                .name(format!("netns-{i}"))
                .spawn_scoped(scope, || {
                    let file = open_netns(&path);
                    if let Err(err) = set_netns(&file) {
                        panic!(
                            "cannot enter the network namespace {}: {err}",
                            path.display()
                        );
                    }
                    f()
                })
                .expect("start a thread")
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// The pids of the processes in host `i`'s namespace.
    pub fn pids(&self, i: usize) -> Vec<libc::pid_t> {
        pids_in(&self.netns(i)).unwrap_or_else(|err| panic!("{err}"))
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let mut links = vec![self.bridge.clone()];
        for i in 0..self.hosts {
            if let Err(err) = remove_netns(&self.netns(i)) {
                eprintln!("Net {}: {err}", self.id);
            }
            links.push(self.outer_link(i));
        }
        // The kernel destroys a namespace later, and its links with it:
        // deleted here, the veth pairs are gone when Drop returns. A panic
        // while making the Net may have come before some link existed.
        for link in links.iter().rev() {
            if Path::new("/sys/class/net").join(link).exists() {
                if let Err(err) = try_ip(&["link", "del", link]) {
                    eprintln!("Net {}: {err}", self.id);
                }
            }
        }
    }
}

/// Makes `cmd`'s process join the network namespace at `netns` (a file of
/// [`Net::netns_path`]) before it executes, and no other namespace.
pub fn enter<'a>(cmd: &'a mut Command, netns: &Path) -> &'a mut Command {
    let file = open_netns(netns);
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are allowed: it makes one setns(2)
    // system call on a descriptor opened before the fork, and reads errno
    // when that fails (an `io::Error` of an OS error does not allocate).
    unsafe { cmd.pre_exec(move || set_netns(&file)) }
}

fn open_netns(path: &Path) -> File {
    File::open(path).unwrap_or_else(|err| {
        panic!(
            "cannot open the network namespace {}: {err}",
            path.display()
        )
    })
}

/// Moves the calling thread into the network namespace of `file`.
fn set_netns(file: &File) -> io::Result<()> {
    // SAFETY: setns has no memory-safety preconditions; the descriptor is
    // open for as long as `file` lives.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `ip ARGS`; panics naming the command and what it said.
#[track_caller]
fn ip(args: &[&str]) -> String {
    try_ip(args).unwrap_or_else(|err| panic!("{err}"))
}

/// Runs `ip ARGS`: its stdout, or an error naming the command and its
/// stderr.
fn try_ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|err| format!("cannot run `ip {}`: {err}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The processes whose network namespace is the named one.
fn pids_in(netns: &str) -> Result<Vec<libc::pid_t>, String> {
    let out = try_ip(&["netns", "pids", netns])?;
    Ok(out.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// Kills what still runs in the namespace, then deletes it; the veth pair
/// goes with it. A namespace that is not there is not an error.
fn remove_netns(netns: &str) -> Result<(), String> {
    if !Path::new(NETNS_DIR).join(netns).exists() {
        return Ok(());
    }
    for pid in pids_in(netns)? {
        // SAFETY: kill has no memory-safety preconditions. The process is
        // in a namespace this test harness made, so the test started it.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    try_ip(&["netns", "del", netns]).map(drop)
}

/// The first three octets of a /24 in 10.128.0.0/10 that no route of this
/// machine overlaps, starting from one derived from `seed`.
fn free_subnet(seed: usize) -> [u8; 3] {
    let routes = ip(&["-4", "route", "show", "table", "all"]);
    let taken: Vec<(Ipv4Addr, u8)> = routes.lines().filter_map(route_prefix).collect();
    for k in 0..1024 {
        let n = seed.wrapping_mul(7919).wrapping_add(k) % (64 * 256);
        let subnet = [10, 128 + (n / 256) as u8, (n % 256) as u8];
        let ours = u32::from(Ipv4Addr::new(subnet[0], subnet[1], subnet[2], 0));
        let overlaps = taken.iter().any(|&(addr, len)| {
            let len = len.min(24);
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(addr) & mask == ours & mask
        });
        if !overlaps {
            return subnet;
        }
    }
    panic!("no /24 in 10.128.0.0/10 is free of this machine's routes:\n{routes}");
}

/// The destination of a line of `ip route show table all`, when it is an
/// address or a prefix (`default` is not: it overlaps everything).
fn route_prefix(line: &str) -> Option<(Ipv4Addr, u8)> {
    let mut words = line.split_whitespace();
    let first = words.next()?;
    // Lines of the local table start with their type (`local`, `broadcast`).
    let dest = if first.starts_with(|c: char| c.is_ascii_digit()) {
        first
    } else {
        words.next()?
    };
    let (addr, len) = dest.split_once('/').unwrap_or((dest, "32"));
    Some((addr.parse().ok()?, len.parse().ok()?))
}

/// Removes the namespaces and bridges of these tests whose process is
/// gone (killed before its `Drop` ran).
fn remove_leftovers_of_dead_processes() {
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    for entry in fs::read_dir(NETNS_DIR).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(NETNS_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse().ok())
        else {
            continue;
        };
        if !alive(pid) {
            if let Err(err) = remove_netns(&name) {
                eprintln!("a leftover namespace: {err}");
            }
        }
    }
    let links = try_ip(&["-o", "link", "show", "type", "bridge"]).unwrap_or_default();
    for line in links.lines() {
        // `<index>: <name>: <flags> ...`
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix(BRIDGE_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .filter(|(_, counter)| usize::from_str_radix(counter, 16).is_ok())
            .and_then(|(pid, _)| u32::from_str_radix(pid, 16).ok())
        else {
            continue;
        };
        if !alive(pid) {
            if let Err(err) = try_ip(&["link", "del", name]) {
                eprintln!("a leftover bridge: {err}");
            }
        }
    }
}

fn can_connect(net: &Net, i: usize, to: SocketAddr) -> io::Result<()> {
    net.run_in(i, || {
        TcpStream::connect_timeout(&to, Duration::from_secs(2)).map(drop)
    })
}

#[test]
fn hosts_reach_the_bridge_until_partitioned_and_again_when_healed() {
    if !require_root() {
        return;
    }
    let net = Net::new(2);
    let listener = TcpListener::bind((net.bridge_addr(), 0)).unwrap();
    let server = listener.local_addr().unwrap();
    can_connect(&net, 0, server).unwrap();
    can_connect(&net, 1, server).unwrap();
    net.partition(0);
    let err = can_connect(&net, 0, server).unwrap_err();
    eprintln!("partitioned: {err}");
    can_connect(&net, 1, server).unwrap();
    net.heal(0);
    can_connect(&net, 0, server).unwrap();
}

#[test]
fn a_process_entered_in_a_host_is_in_its_network_namespace_only() {
    if !require_root() {
        return;
    }
    let net = Net::new(1);
    let mut child = enter(&mut Command::new("sleep"), &net.netns_path(0))
        .arg("60")
        .spawn()
        .unwrap();
    let pid = child.id();
    let ns = |pid: &str, kind: &str| fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap();
    let netns_of_host = fs::metadata(net.netns_path(0)).unwrap();
    let netns_of_child = fs::metadata(format!("/proc/{pid}/ns/net")).unwrap();
    assert_eq!(netns_of_child.ino(), netns_of_host.ino());
    assert_eq!(net.pids(0), [pid as libc::pid_t]);
    // The mounts are the test's: the same mount namespace.
    assert_eq!(ns(&pid.to_string(), "mnt"), ns("self", "mnt"));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn everything_is_removed_on_drop_even_after_a_panic() {
    if !require_root() {
        return;
    }
    let (names, bridge, mut child) = {
        let net = Net::new(2);
        let child = enter(&mut Command::new("sleep"), &net.netns_path(1))
            .arg("60")
            .spawn()
            .unwrap();
        let names = [net.netns(0), net.netns(1)];
        let bridge = net.bridge.clone();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _net = net;
            panic!("a failed assertion");
        }));
        assert!(panicked.is_err());
        (names, bridge, child)
    };
    // The process left in a namespace was killed.
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let namespaces = ip(&["netns", "list"]);
    for name in names {
        assert!(!namespaces.contains(&name), "{name} is left:\n{namespaces}");
    }
    assert!(
        try_ip(&["link", "show", &bridge]).is_err(),
        "{bridge} is left"
    );
    let links = ip(&["-o", "link", "show"]);
    assert!(
        !links.contains(&format!(" {bridge}-")),
        "{bridge}:\n{links}"
    );
}
