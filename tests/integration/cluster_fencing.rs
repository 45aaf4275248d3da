//! A host cut off from its cluster (scenario 3 of the many-hosts issue):
//! two agents in network namespaces of their own, each with a hostpath
//! plugin (node and attaching controller) on one shared base dir, and a
//! 3-member etcd on the bridge. Host A runs a job holding a single-writer
//! volume; its link goes down. After the lease TTL the cluster fences A's
//! claim (the controller leader detaches the volume from A, then the claim
//! is freed) and B claims the volume. At no revision of the volume's claim
//! set do two hosts hold a write claim. When A's link is back, A gives up
//! what the cluster took away: its task is stopped, then its mounts go.
//! With `stop_after_disconnect`, A stops the task while still cut off.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;
use csi_agent::cluster::etcd::Event;
use csi_agent::proto::agent::JobStatus;
use csi_agent::proto::cluster as pb;

use crate::cluster_writers::{Hosts, Settings};
use crate::etcd::{require_etcd, Cluster};
use crate::harness::{text, Agent, WAIT};
use crate::util::{mounts_under, require_root};
use crate::volume_util::{claim_req, connect, spec, wait_volume};

/// Two hosts, A and B, whose plugins run with `flags` (and judge the
/// agents), with leases of 2s.
fn two_hosts(flags: &'static str, stop_after_disconnect: Option<&'static str>) -> Hosts {
    Hosts::start_n(
        2,
        &Settings {
            flags,
            strict: true,
            lease_ttl: Some("2s"),
            stop_after_disconnect,
        },
    )
}

/// A job whose one task sleeps, holding volume `volume` for writing.
fn job(volume: &str) -> String {
    format!(
        r#"
job "app" {{
  group "app" {{
    volume "data" {{
      type            = "csi"
      source          = "{volume}"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "main" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["600"]
      }}
    }}
  }}
}}
"#
    )
}

fn app(agent: &Agent) -> JobStatus {
    let client = AgentClient::connect(&agent.socket).unwrap();
    client.job_status("app").unwrap().jobs.remove(0)
}

#[track_caller]
fn wait_app(agent: &Agent, what: &str, timeout: Duration, check: impl Fn(&JobStatus) -> bool) {
    let start = Instant::now();
    loop {
        let job = app(agent);
        if check(&job) {
            return;
        }
        if start.elapsed() > timeout {
            panic!("{what} did not happen; job:\n{job:#?}\n{}", agent.log());
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Runs the job on `agent` and waits until it holds volume `volume`.
fn run_holding(agent: &Agent, volume: &str) {
    let path = agent.dir.join("app.hcl");
    std::fs::write(&path, job(volume)).unwrap();
    let out = agent.cli(&["job", "run", &path.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    wait_app(agent, "the task to run with its volume", WAIT, |j| {
        j.allocs
            .iter()
            .any(|a| a.status == "running" && a.volumes.iter().all(|v| v.state == "claimed"))
    });
}

/// Claims `volume` for `alloc` from `agent`, again and again until the
/// cluster admits it.
fn claim_when_free(agent: &Agent, volume: &str, alloc: &str, timeout: Duration) {
    let start = Instant::now();
    loop {
        match connect(agent).volume_claim(&claim_req(volume, alloc)) {
            Ok(_) => return,
            Err(err) if start.elapsed() < timeout => {
                let _ = err;
                thread::sleep(Duration::from_millis(250));
            }
            Err(err) => panic!(
                "{volume} was never free for {alloc}: {err}\n{}",
                agent.log()
            ),
        }
    }
}

/// Every value the volume's claim set took after revision `from`.
fn claim_history(cluster: &Cluster, volume: &str, from: i64) -> Vec<Option<pb::ClaimSet>> {
    use protobuf::Message;
    let key = format!("/csi-agent/volumes/{volume}/claims");
    let etcd = cluster.client();
    let watch = etcd.watch_prefix(key.as_bytes(), from + 1).unwrap();
    let mut sets = Vec::new();
    while let Ok(batch) = watch.next(Duration::from_secs(1)) {
        for event in batch.events {
            sets.push(match event {
                Event::Put(kv) => Some(pb::ClaimSet::parse_from_bytes(&kv.value).unwrap()),
                Event::Delete { .. } => None,
            });
        }
    }
    sets
}

/// The nodes with a write claim (wanted or past) in each set.
fn writers(sets: &[Option<pb::ClaimSet>]) -> Vec<Vec<String>> {
    sets.iter()
        .map(|set| {
            let mut nodes: Vec<String> = set
                .iter()
                .flat_map(|s| &s.claims)
                .filter(|c| !c.read_only)
                .map(|c| c.node.clone())
                .collect();
            nodes.dedup();
            nodes
        })
        .collect()
}

fn no_mounts_left(agent: &Agent) {
    let start = Instant::now();
    while !mounts_under(&agent.data_dir).is_empty() {
        assert!(
            start.elapsed() < WAIT,
            "mounts left under {}: {:?}\n{}",
            agent.data_dir.display(),
            mounts_under(&agent.data_dir),
            agent.log()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

fn publish_dirs_of(agent: &Agent) -> Vec<std::path::PathBuf> {
    mounts_under(Path::new(&agent.data_dir))
}

#[test]
fn a_partitioned_host_s_claim_is_fenced_and_freed_and_the_host_gives_it_up_on_return() {
    if !require_root() || !require_etcd() {
        return;
    }
    // Controllers that fence: they detach a lost node that still has the
    // volume staged.
    let hosts = two_hosts("-fence", None);
    let [a, b] = &hosts.agents[..] else {
        unreachable!()
    };
    connect(a)
        .volume_create("f.hcl", &spec("f", &["single-node-writer"], None))
        .unwrap();
    wait_volume(b, "f", "registered", |_| true, WAIT);
    let (_, start) = hosts.etcd.client().get_prefix(b"/csi-agent/").unwrap();
    run_holding(a, "f");
    assert!(!publish_dirs_of(a).is_empty(), "A's claim mounts something");

    hosts.net.partition(0);
    a.wait_for_log(
        "Cluster: node host-a is disconnected",
        Duration::from_secs(30),
    );
    // Fenced by the cluster, then B's.
    claim_when_free(b, "f", "b-1", Duration::from_secs(60));
    wait_volume(
        b,
        "f",
        "B's claim, and A's gone",
        |v| v.claims.iter().all(|c| c.node == "host-b") && v.past_claims.is_empty(),
        WAIT,
    );
    // Cut off, A still runs its task: nothing told it otherwise.
    assert!(app(a).allocs.iter().any(|al| al.status == "running"));

    hosts.net.heal(0);
    wait_app(
        a,
        "A's task stopped for the lost claim",
        Duration::from_secs(60),
        |j| {
            j.allocs.iter().all(|al| {
                al.status != "running"
                    && al
                        .message
                        .contains("the cluster took volume f's claim away")
            })
        },
    );
    no_mounts_left(a);
    wait_volume(
        a,
        "f",
        "A's view: B's claim only",
        |v| v.claims.len() == 1 && v.claims[0].node == "host-b" && v.past_claims.is_empty(),
        WAIT,
    );
    // B's claim stands; never two writers in etcd.
    let history = claim_history(&hosts.etcd, "f", start);
    let writers = writers(&history);
    assert!(
        writers.iter().all(|w| w.len() <= 1),
        "two writers at once: {writers:?}"
    );
    assert!(writers.iter().any(|w| w == &["host-a"]), "{writers:?}");
    assert_eq!(writers.last().unwrap(), &["host-b"]);
}

#[test]
fn with_stop_after_disconnect_a_cut_off_host_stops_the_task_that_holds_a_write_claim() {
    if !require_root() || !require_etcd() {
        return;
    }
    let hosts = two_hosts("-fence", Some("2s"));
    let [a, b] = &hosts.agents[..] else {
        unreachable!()
    };
    connect(a)
        .volume_create("s.hcl", &spec("s", &["single-node-writer"], None))
        .unwrap();
    wait_volume(b, "s", "registered", |_| true, WAIT);
    run_holding(a, "s");

    hosts.net.partition(0);
    // While still cut off, A stops the task and unmounts what it can.
    wait_app(
        a,
        "A's task stopped while cut off",
        Duration::from_secs(30),
        |j| {
            j.allocs
                .iter()
                .all(|al| al.status != "running" && al.message.contains("stop_after_disconnect"))
        },
    );
    // The stop is counted from the last keep-alive; the member's own
    // verdict on the connection may come a moment later under load.
    let start = Instant::now();
    loop {
        let out = a.cli(&["node", "status"]);
        if String::from_utf8_lossy(&out.stderr).contains("disconnected") {
            break;
        }
        assert!(start.elapsed() < WAIT, "{}", text(&out));
        thread::sleep(Duration::from_millis(100));
    }
    claim_when_free(b, "s", "b-1", Duration::from_secs(60));
    hosts.net.heal(0);
    no_mounts_left(a);
    wait_volume(
        a,
        "s",
        "A's claim gone",
        |v| v.claims.iter().all(|c| c.node == "host-b") && v.past_claims.is_empty(),
        WAIT,
    );
}

#[test]
fn without_a_controller_to_fence_a_lost_writer_s_claim_waits_for_an_operator_s_detach() {
    if !require_root() || !require_etcd() {
        return;
    }
    // NFS-like plugins: no controller attaches, so none can fence.
    let hosts = two_hosts("-no-attach", None);
    let [a, b] = &hosts.agents[..] else {
        unreachable!()
    };
    connect(a)
        .volume_create("o.hcl", &spec("o", &["single-node-writer"], None))
        .unwrap();
    wait_volume(b, "o", "registered", |_| true, WAIT);
    crate::volume_util::claimed(a, &claim_req("o", "a-1"));
    // A live node's claims are not an operator's to free.
    let out = b.cli(&["volume", "detach", "-force", "-node", "host-a", "o"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("node host-a is alive in the cluster"),
        "{}",
        text(&out)
    );

    hosts.net.partition(0);
    let advice = "volume detach -force -node host-a o";
    wait_volume(
        b,
        "o",
        "A's claim past, waiting for an operator",
        |v| {
            v.past_claims
                .iter()
                .any(|c| c.node == "host-a" && c.state.contains(advice))
        },
        Duration::from_secs(30),
    );
    let refused = connect(b).volume_claim(&claim_req("o", "b-1")).unwrap_err();
    assert!(
        refused.to_string().contains("claimed on node host-a"),
        "{refused}"
    );
    // Without -force the CLI refuses; with it, the claim is freed.
    let out = b.cli(&["volume", "detach", "-node", "host-a", "o"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs -force"),
        "{}",
        text(&out)
    );
    let out = b.cli(&["volume", "detach", "-force", "-node", "host-a", "o"]);
    assert!(out.status.success(), "{}", text(&out));
    crate::volume_util::claimed(b, &claim_req("o", "b-1"));

    // A, back, gives up the claim the operator took away.
    hosts.net.heal(0);
    wait_volume(
        a,
        "o",
        "A's claim gone",
        |v| v.claims.iter().all(|c| c.node == "host-b") && v.past_claims.is_empty(),
        Duration::from_secs(30),
    );
    no_mounts_left(a);
}
