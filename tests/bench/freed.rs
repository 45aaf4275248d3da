//! P7's freed volume: how soon a host waiting for a single-writer volume
//! takes it once the cluster frees it. Two hosts of P7's cluster take
//! turns: one runs a job holding volume `freed` (a raw_exec sleep with a
//! `csi` volume), the other a job on the same volume, whose claim the
//! cluster refuses, so that its volume hook waits. The holder is frozen
//! (SIGSTOP: no keep-alive leaves it, as when its link is cut); at the
//! default lease and without `stop_after_disconnect`, the fencer frees its
//! claim once the controller leader has detached the volume (the plugins
//! run with `-fence`). From a watch of the volume's claim set, kept here:
//! the time from the freeze to the holder's claim leaving etcd, and from
//! there to the waiting host's claim in etcd. The frozen host is then
//! thawed and gives up its job's claim, and runs the next waiting job.

use std::time::{Duration, Instant};

use csi_agent::cluster::etcd::{Etcd, Event};
use csi_agent::proto::cluster as pb;
use protobuf::Message;

use crate::cluster::create_everywhere;
use crate::rig::{wait_until, Agent};
use crate::stats::Samples;

const VOLUME: &str = "freed";

/// What the cuts measured.
pub struct Freed {
    /// From the freeze to the holder's claim leaving etcd.
    pub to_free: Samples,
    /// From there to the waiting host's claim in etcd.
    pub to_take: Samples,
}

/// A job `name` whose task sleeps holding volume [`VOLUME`] for writing.
fn job(name: &str) -> String {
    format!(
        r#"job "{name}" {{
  group "g" {{
    volume "data" {{
      type            = "csi"
      source          = "{VOLUME}"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["3600"]
      }}
    }}
  }}
}}
"#
    )
}

/// Job `name`'s alloc on `agent`: its status, its volume's state and why
/// its last claim was refused.
fn alloc(agent: &Agent, name: &str) -> Option<(String, String, String)> {
    let status = agent.client().job_status(name).ok()?;
    let alloc = status.jobs.into_iter().next()?.allocs.into_iter().next()?;
    let volume = alloc.volumes.into_iter().next()?;
    Some((alloc.status, volume.state, volume.message))
}

fn run(agent: &Agent, name: &str) {
    agent
        .client()
        .job_run(&format!("{name}.hcl"), &job(name), Default::default())
        .unwrap_or_else(|err| panic!("job run {name}: {err}"));
}

/// The nodes holding a claim in each claim set of the watch's next batch,
/// with when it was heard.
fn next_sets(watch: &csi_agent::cluster::etcd::Watch) -> Vec<(Instant, Vec<String>)> {
    let Ok(batch) = watch.next(Duration::from_secs(1)) else {
        return Vec::new();
    };
    let heard = Instant::now();
    batch
        .events
        .into_iter()
        .map(|event| match event {
            Event::Put(kv) => pb::ClaimSet::parse_from_bytes(&kv.value)
                .map(|set| set.claims.into_iter().map(|c| c.node).collect())
                .unwrap_or_default(),
            Event::Delete { .. } => Vec::new(),
        })
        .map(|nodes| (heard, nodes))
        .collect()
}

/// `cuts` cuts between `hosts` (agents with their node names), on the
/// cluster of `endpoints`.
pub fn run_cuts(hosts: [(&Agent, &str); 2], endpoints: &[String], cuts: usize) -> Freed {
    let etcd = Etcd::new(endpoints, None).expect("an etcd client");
    create_everywhere(&[hosts[0].0, hosts[1].0], VOLUME);
    let key = format!("/csi-agent/volumes/{VOLUME}/claims");
    run(hosts[0].0, "f0");
    wait_until(
        "the first holder's claim",
        Duration::from_millis(50),
        || alloc(hosts[0].0, "f0").is_some_and(|(s, v, _)| s == "running" && v == "claimed"),
    );
    let mut freed = Freed {
        to_free: Samples::default(),
        to_take: Samples::default(),
    };
    for k in 0..cuts {
        let ((holder, holder_node), (waiter, waiter_node)) = (hosts[k % 2], hosts[(k + 1) % 2]);
        let waiting = format!("f{}", k + 1);
        run(waiter, &waiting);
        wait_until(
            "the waiting claim refused",
            Duration::from_millis(50),
            || {
                alloc(waiter, &waiting)
                    .is_some_and(|(s, v, why)| s == "pending" && v == "claiming" && !why.is_empty())
            },
        );
        // Both hosts alive in the cluster: a host thawed from the cut
        // before registers again, and a cut of a node the cluster already
        // counts as gone would not be a cut.
        wait_until("both hosts registered", Duration::from_millis(50), || {
            etcd.get_prefix(b"/csi-agent/nodes/")
                .is_ok_and(|(nodes, _)| {
                    [holder_node, waiter_node].iter().all(|n| {
                        nodes
                            .iter()
                            .any(|kv| kv.key == format!("/csi-agent/nodes/{n}").as_bytes())
                    })
                })
        });
        let (_, revision) = etcd.get_prefix(key.as_bytes()).expect("etcd get");
        let watch = etcd
            .watch_prefix(key.as_bytes(), revision + 1)
            .expect("a watch");
        holder.signal(libc::SIGSTOP);
        let cut = Instant::now();
        let (mut gone, mut taken) = (None, None);
        while taken.is_none() {
            assert!(
                cut.elapsed() < Duration::from_secs(120),
                "{waiter_node} never took volume {VOLUME} from {holder_node}"
            );
            for (heard, nodes) in next_sets(&watch) {
                if gone.is_none() && !nodes.iter().any(|n| n == holder_node) {
                    gone = Some(heard);
                }
                if gone.is_some() && nodes.iter().any(|n| n == waiter_node) {
                    taken = Some(heard);
                    break;
                }
            }
        }
        let (gone, taken) = (gone.unwrap(), taken.unwrap());
        freed.to_free.push(gone - cut);
        freed.to_take.push(taken - gone);
        holder.signal(libc::SIGCONT);
        let held = format!("f{k}");
        wait_until(
            "the thawed host to give up its claim",
            Duration::from_millis(100),
            || {
                alloc(holder, &held).is_some_and(|(s, _, _)| {
                    !matches!(s.as_str(), "pending" | "running" | "stopping")
                })
            },
        );
        wait_until("the waiting job to run", Duration::from_millis(50), || {
            alloc(waiter, &waiting).is_some_and(|(s, v, _)| s == "running" && v == "claimed")
        });
    }
    // Tasks outlive their agent: the last holder's goes before the row
    // ends.
    let (last, name) = (hosts[cuts % 2].0, format!("f{cuts}"));
    last.client()
        .job_stop(&name, false)
        .unwrap_or_else(|err| panic!("job stop {name}: {err}"));
    wait_until(
        "the last holder's job to stop",
        Duration::from_millis(50),
        || {
            alloc(last, &name)
                .is_some_and(|(s, _, _)| !matches!(s.as_str(), "pending" | "running" | "stopping"))
        },
    );
    freed
}
