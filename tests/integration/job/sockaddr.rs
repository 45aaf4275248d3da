//! The templates' `sockaddr` on a network the test makes: a namespace of
//! its own with a private and a public address on veth interfaces (their
//! peers in the namespace too, without addresses), one that is down, and a default route the test chooses. The
//! renderer runs on a thread that joined the namespace, and a real
//! `raw_exec` task renders through an agent started inside it.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use csi_agent::nomad_template::{parse, Context};
use template::Options;

use super::templates::wait_for_log;
use super::Rig;
use crate::harness::Agent;
use crate::util::require_root;

/// The private address, on `eth0`, where the default route goes first.
const PRIVATE: &str = "10.77.0.5";
/// An address outside RFC 6890's blocks, on `wan0`.
const PUBLIC: &str = "81.2.69.161";
/// A private address on `eth9`, which is down.
const DOWN: &str = "192.168.9.9";

/// A network namespace made by the test, removed in `Drop`. Its name
/// starts as `netns.rs`'s do, so a test process killed before its `Drop`
/// has it removed by the next `Net`.
struct Host {
    name: String,
}

impl Host {
    fn new() -> Host {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "csi-agent-it-{}-sa{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        ip(&["netns", "add", &name]);
        let host = Host { name };
        host.ip(&["link", "set", "lo", "up"]);
        for (link, cidr) in [
            ("eth0", "10.77.0.5/24"),
            ("wan0", "81.2.69.161/28"),
            ("eth9", "192.168.9.9/24"),
        ] {
            let peer = format!("{link}p");
            host.ip(&["link", "add", link, "type", "veth", "peer", "name", &peer]);
            host.ip(&["addr", "add", cidr, "dev", link]);
            host.ip(&["link", "set", &peer, "up"]);
        }
        host.ip(&["link", "set", "eth0", "up"]);
        host.ip(&["link", "set", "wan0", "up"]);
        host.ip(&["route", "add", "default", "via", "10.77.0.1", "dev", "eth0"]);
        host
    }

    fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// Renders `text` on a thread that joined the namespace.
    fn render(&self, text: &str) -> Result<String, String> {
        let netns = File::open(self.path()).unwrap();
        let text = text.to_string();
        std::thread::spawn(move || {
            // SAFETY: setns has no memory-safety preconditions; the
            // descriptor is open for the call. It moves only this thread.
            let joined = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(joined, 0, "setns: {}", std::io::Error::last_os_error());
            let env = Default::default();
            let ctx = Context {
                env: &env,
                task_dir: None,
                services: &[],
            };
            let options = Options {
                error_on_missing_key: false,
                now: std::time::SystemTime::now(),
            };
            parse(&text, "", "")
                .map_err(|e| e.to_string())?
                .render(&ctx, &options)
                .map_err(|e| e.to_string())
        })
        .join()
        .unwrap()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[track_caller]
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sockaddr_finds_the_private_public_and_named_addresses_of_the_namespace() {
    if !require_root() {
        return;
    }
    let host = Host::new();
    let render = |expr: &str| {
        let text = format!("{{{{ sockaddr {expr:?} }}}}");
        host.render(&text).unwrap_or_else(|e| panic!("{expr}: {e}"))
    };
    assert_eq!(render("GetPrivateIP"), PRIVATE);
    assert_eq!(render("GetPublicIP"), PUBLIC);
    assert_eq!(render("GetPublicIPs"), PUBLIC);
    // Every private address, up or not, IPv4 first, wider networks first.
    assert_eq!(render("GetPrivateIPs"), format!("{PRIVATE} {DOWN}"));
    assert_eq!(render(r#"GetInterfaceIP "wan0""#), PUBLIC);
    assert_eq!(render(r#"GetInterfaceIP "eth9""#), DOWN);
    assert_eq!(
        render(r#"GetDefaultInterfaces | include "type" "IPv4" | join "name" ",""#),
        "eth0"
    );
    assert_eq!(
        render(
            r#"GetAllInterfaces | include "type" "IPv4" | include "flags" "up" | exclude "name" "lo" | sort "-address" | limit 1 | attr "address""#
        ),
        PUBLIC
    );
    assert_eq!(
        render(r#"GetPrivateInterfaces | include "type" "IPv4" | join "address" " ""#),
        PRIVATE
    );
    assert_eq!(
        render(r#"GetAllInterfaces | include "flags" "down" | attr "name""#),
        "eth9"
    );
}

#[test]
fn the_default_route_decides_the_default_interfaces_and_the_ceph_demos_mon_ip() {
    if !require_root() {
        return;
    }
    let host = Host::new();
    // The text of Nomad's Ceph demo (demo/csi/ceph-csi-plugin/ceph.nomad).
    let ceph = r#"MON_IP={{ sockaddr "with $ifAddrs := GetDefaultInterfaces | include \"type\" \"IPv4\" | limit 1 -}}{{- range $ifAddrs -}}{{ attr \"address\" . }}{{ end }}{{ end " }}"#;
    assert_eq!(host.render(ceph).unwrap(), format!("MON_IP={PRIVATE}"));

    host.ip(&[
        "route",
        "replace",
        "default",
        "via",
        "81.2.69.174",
        "dev",
        "wan0",
    ]);
    assert_eq!(host.render(ceph).unwrap(), format!("MON_IP={PUBLIC}"));
    let sorted = r#"{{ sockaddr "GetAllInterfaces | include \"type\" \"IPv4\" | exclude \"name\" \"lo\" | sort \"default,address\" | join \"address\" \",\"" }}"#;
    assert_eq!(
        host.render(sorted).unwrap(),
        format!("{PUBLIC},{PRIVATE},{DOWN}")
    );

    host.ip(&["route", "del", "default"]);
    let err = host.render(ceph).unwrap_err();
    assert!(err.contains("no default route"), "{err}");
}

#[test]
fn a_task_template_renders_the_hosts_addresses_with_sockaddr() {
    if !require_root() {
        return;
    }
    let host = Host::new();
    let agent = Agent::start_in_netns(&host.path(), &[], "");
    let rig = Rig {
        backing: agent.dir.join("backing"),
        agent,
    };
    let job = r#"
job "addrs" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      template {
        data        = <<-EOT
          private={{ sockaddr "GetPrivateIP" }} public={{ sockaddr "GetInterfaceIP \"wan0\"" }}
        EOT
        destination = "local/addrs"
      }
      config {
        command = "/bin/cat"
        args    = ["local/addrs"]
      }
    }
  }
}
"#;
    let allocs = rig.run_job("addrs.hcl", job);
    wait_for_log(
        &rig,
        &allocs[0],
        &format!("private={PRIVATE} public={PUBLIC}\n"),
    );
}
