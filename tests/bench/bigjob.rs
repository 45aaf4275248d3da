//! P9, a big job's start: the control API's latency while a job of
//! `--big-job` raw_exec allocs (default 2,000, each a `sleep`) starts,
//! next to the same calls with the agent idle. The call is `plugin
//! status`, which the main loop answers from memory: its latency is how
//! long a call waits for the loop. Task starts run on the starter's
//! threads (`src/task/starter.rs`), so the loop keeps answering while
//! they fork; before them a `count = 2000` made every call wait for the
//! whole start (12.9 s).
//!
//! Calls are made one after the other with 5 ms between them, idle first
//! (200 calls), then from the `job run` until every task runs; every
//! 250 ms a `job status` (not counted) looks whether they all do. The
//! row also gives how long the start took. The job is then stopped and
//! the benchmark waits for its tasks to end.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;

use crate::rig::{agent_config, wait_until, Agent, BenchDir};
use crate::stats::Samples;
use crate::Options;

/// The idle calls measured.
const IDLE_CALLS: usize = 200;

/// The pause between two measured calls.
const PACE: Duration = Duration::from_millis(5);

/// How often the start's progress is looked at.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// The most a big start may take here before the row gives up.
const START_LIMIT: Duration = Duration::from_secs(600);

pub struct BigJob {
    pub allocs: usize,
    pub idle: Samples,
    pub starting: Samples,
    /// From `job run` until every task runs.
    pub start_time: Duration,
}

pub fn run(opts: &Options, root: &Path) -> BigJob {
    let dir = BenchDir::new(root, "p9", opts.keep);
    let allocs = opts.big_job;
    let mut agent = Agent::new(&opts.agent_bin, &dir.join("agent"), |data| {
        let mut text = agent_config(data, opts.heartbeat, &[]);
        text.push_str(&format!("client {{\n  max_allocs_per_job = {allocs}\n}}\n"));
        text
    });
    agent.start();
    let client = agent.client();
    let call = |client: &AgentClient| {
        let start = Instant::now();
        client.plugin_status("").expect("plugin status");
        start.elapsed()
    };
    let mut idle = Samples::default();
    for _ in 0..IDLE_CALLS {
        idle.push(call(&client));
        thread::sleep(PACE);
    }
    client
        .job_run("big.hcl", &job(allocs), Default::default())
        .expect("job run");
    let start = Instant::now();
    let mut starting = Samples::default();
    let mut looked = start;
    loop {
        starting.push(call(&client));
        if looked.elapsed() >= PROGRESS_EVERY {
            looked = Instant::now();
            let (running, unplaced) = progress(&client);
            if running == allocs {
                break;
            }
            assert!(
                unplaced.is_none(),
                "an alloc of the big job cannot be placed: {unplaced:?}"
            );
            assert!(
                start.elapsed() < START_LIMIT,
                "the big job did not start within {START_LIMIT:?}\n{}",
                agent.log_text()
            );
        }
        thread::sleep(PACE);
    }
    let start_time = start.elapsed();
    client.job_stop("big", false).expect("job stop");
    wait_until("the big job to stop", Duration::from_millis(250), || {
        client
            .job_status("big")
            .is_ok_and(|r| r.jobs.first().is_some_and(|j| j.status == "dead"))
    });
    agent.stop();
    BigJob {
        allocs,
        idle,
        starting,
        start_time,
    }
}

/// How many of the big job's allocs run, and why one cannot be placed,
/// if one cannot.
fn progress(client: &AgentClient) -> (usize, Option<String>) {
    let Ok(status) = client.job_status("big") else {
        return (0, None);
    };
    let allocs: Vec<_> = status.jobs.iter().flat_map(|j| &j.allocs).collect();
    let running = allocs
        .iter()
        .filter(|a| a.tasks.iter().all(|t| t.state == "running"))
        .count();
    let unplaced = allocs
        .iter()
        .find(|a| a.status == "pending" && a.message.contains("exhausted"))
        .map(|a| a.message.clone());
    (running, unplaced)
}

/// `count` raw_exec sleeps that all fit the node (2,000 of 4 MiB fit in
/// 8 GiB; an alloc that does not fit stays pending, and the row fails).
fn job(count: usize) -> String {
    format!(
        r#"job "big" {{
  group "g" {{
    count = {count}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["3600"]
      }}
      resources {{
        cpu    = 1
        memory = 4
      }}
    }}
  }}
}}
"#
    )
}
