//! P8, the docker driver, against a private dockerd the row
//! starts in its dir ([`crate::containers`]), with images made offline:
//! busybox, and the hostpath plugin (this build's `csi-agent` and the
//! libraries it links, on the busybox root).
//!
//! - **Plugin start**: from `job run` of a privileged docker `csi_plugin`
//!   job (monolith) running hostpath from its image to the first `plugin
//!   status` that says it is healthy, polled every 2 ms: P6 for a plugin
//!   that comes as a container (image already present, so the engine's
//!   create and start, the plugin's start-up, and the agent's discovery
//!   of its socket). Between runs the job is stopped and the benchmark
//!   waits until its container is gone.
//! - **Claim to running**: with that plugin healthy and volume `v` of
//!   it, from `job run` of a consumer job with one CSI volume
//!   (`volume_mount`) to the first `job status` whose task says running
//!   and, for docker, until the engine's inspect says its container runs
//!   too; for a docker task (busybox `sleep`) and an exec task (the
//!   host's `sleep` in the exec driver's root), alternating, each job
//!   stopped and its claim released before the next run.

use std::path::Path;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;
use csi_agent::docker::Engine;
use csi_agent::proto::agent::JobInputs;

use crate::containers::Dockerd;
use crate::rig::{agent_config, is_healthy, Agent, BenchDir, SETUP_LIMIT};
use crate::stats::Samples;
use crate::Options;

/// Runs of each kind before measuring: the first container start pays for
/// cold caches (the image's layers, the shim's binary).
const WARMUP: usize = 1;

const POLL: Duration = Duration::from_millis(2);

const BUSYBOX: &str = "csi-bench/busybox:1";
const HOSTPATH: &str = "csi-bench/hostpath:1";

pub struct DockerResult {
    pub plugin_start: Samples,
    pub docker_claim: Samples,
    pub exec_claim: Samples,
}

pub fn run(opts: &Options, root: &Path) -> DockerResult {
    let dir = BenchDir::new(root, "p8", opts.keep);
    let backing = dir.mkdir("backing");
    let dockerd = Dockerd::start(&dir.join("engine"));
    dockerd.import_busybox(BUSYBOX, None);
    dockerd.import_busybox(HOSTPATH, Some(&opts.bin));
    let mut agent = Agent::new(&opts.agent_bin, &dir.join("agent"), |data| {
        format!(
            "{}\ndocker {{\n  endpoint         = \"unix://{}\"\n  allow_privileged = true\n  volumes {{\n    enabled = true\n  }}\n}}\n",
            agent_config(data, opts.heartbeat, &[]),
            dockerd.socket.display()
        )
    });
    agent.start();
    let rig = Rig {
        client: agent.client(),
        engine: dockerd.engine(),
        agent: &agent,
    };
    let result = rig.measure(opts, &backing);
    drop(rig);
    // The jobs are stopped; the agent stops, then any container it left
    // is removed and the engine stops (also on a panic: its shutdown
    // stops them). What they mounted goes with the dir.
    agent.stop();
    dockerd.remove_containers_of(&agent.data_dir);
    drop(dockerd);
    result
}

struct Rig<'a> {
    client: AgentClient,
    engine: Engine,
    agent: &'a Agent,
}

impl Rig<'_> {
    fn measure(&self, opts: &Options, backing: &Path) -> DockerResult {
        let plugin = plugin_job(backing);
        let mut plugin_start = Samples::default();
        for run in 0..WARMUP + opts.docker_runs {
            let start = Instant::now();
            let alloc = self.run_job("plugin", &plugin);
            self.wait("the plugin to turn healthy", || self.plugin_healthy());
            if run >= WARMUP {
                plugin_start.push(start.elapsed());
            }
            self.stop("plugin", &alloc);
            self.wait("the agent to see the plugin go", || !self.plugin_healthy());
        }

        self.run_job("plugin", &plugin);
        self.wait("the plugin to turn healthy", || self.plugin_healthy());
        self.client
            .volume_create("v.hcl", &crate::claim::volume_spec("v", "hp"))
            .expect("create the volume");
        let mut docker_claim = Samples::default();
        let mut exec_claim = Samples::default();
        for run in 0..WARMUP + opts.docker_runs {
            for (driver, samples) in [("docker", &mut docker_claim), ("exec", &mut exec_claim)] {
                let job = format!("c-{driver}");
                let start = Instant::now();
                let alloc = self.run_job(&job, &consumer_job(&job, driver));
                self.wait("the consumer to run", || self.task_running(&job, &alloc));
                if driver == "docker" {
                    let name = format!("main-{alloc}");
                    self.wait("its container to run", || {
                        self.engine
                            .inspect(&name)
                            .is_ok_and(|c| c.is_some_and(|c| c.running))
                    });
                }
                if run >= WARMUP {
                    samples.push(start.elapsed());
                }
                self.stop(&job, &alloc);
            }
        }
        let alloc = self.job_allocs("plugin").pop().expect("the plugin's alloc");
        self.stop("plugin", &alloc);
        DockerResult {
            plugin_start,
            docker_claim,
            exec_claim,
        }
    }

    /// `job run`; the job's one alloc.
    fn run_job(&self, name: &str, hcl: &str) -> String {
        let run = self
            .client
            .job_run(&format!("{name}.hcl"), hcl, JobInputs::default())
            .unwrap_or_else(|e| panic!("job run {name}: {e}"));
        assert_eq!(run.alloc_ids.len(), 1, "job {name}: {run:?}");
        run.alloc_ids[0].clone()
    }

    fn job_allocs(&self, name: &str) -> Vec<String> {
        let status = self.client.job_status(name).expect("job status");
        status.jobs[0].allocs.iter().map(|a| a.id.clone()).collect()
    }

    /// Stops job `name` and waits until it is dead, its alloc's
    /// container gone and its claims released.
    fn stop(&self, name: &str, alloc: &str) {
        self.client.job_stop(name, false).expect("job stop");
        self.wait("the job to stop", || {
            self.client
                .job_status(name)
                .is_ok_and(|s| s.jobs.first().is_some_and(|j| j.status == "dead"))
        });
        let label = format!("csi-agent.alloc={alloc}");
        self.wait("the alloc's container to go", || {
            self.engine.list(&label).is_ok_and(|c| c.is_empty())
        });
        self.wait("the claim's release", || {
            self.client.volume_status("", false).is_ok_and(|r| {
                !r.volumes.iter().any(|v| {
                    v.claims
                        .iter()
                        .chain(&v.past_claims)
                        .any(|c| c.alloc_id == alloc)
                })
            })
        });
    }

    fn plugin_healthy(&self) -> bool {
        self.client
            .plugin_status("hp")
            .is_ok_and(|r| r.plugins.first().is_some_and(is_healthy))
    }

    fn task_running(&self, job: &str, alloc: &str) -> bool {
        let Ok(status) = self.client.job_status(job) else {
            return false;
        };
        let alloc = status
            .jobs
            .iter()
            .flat_map(|j| &j.allocs)
            .find(|a| a.id == alloc);
        let task = alloc.and_then(|a| a.tasks.first());
        if let Some(t) = task.filter(|t| t.failed || t.state == "dead") {
            panic!("task of job {job} ended: {t:?}\n{}", self.agent.log_text());
        }
        task.is_some_and(|t| t.state == "running")
    }

    fn wait(&self, what: &str, mut ready: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ready() {
            assert!(
                start.elapsed() < SETUP_LIMIT,
                "gave up waiting for {what}\n{}",
                self.agent.log_text()
            );
            std::thread::sleep(POLL);
        }
    }
}

/// The hostpath plugin as a privileged docker task of Nomad's form
/// (`csi_plugin` with `mount_dir = "/csi"`), monolith, its base dir
/// `backing` bound at `/backing`.
fn plugin_job(backing: &Path) -> String {
    format!(
        r#"
job "plugin" {{
  group "nodes" {{
    task "plugin" {{
      driver = "docker"
      config {{
        image      = "{HOSTPATH}"
        command    = "/bin/csi-agent"
        args       = ["hostpath", "-endpoint", "${{CSI_ENDPOINT}}", "-base-dir", "/backing", "-node-id", "{node}"]
        privileged = true
        volumes    = ["{backing}:/backing"]
      }}
      env {{
        RUST_LOG = "warn"
      }}
      csi_plugin {{
        id             = "hp"
        type           = "monolith"
        mount_dir      = "/csi"
        health_timeout = "30s"
      }}
    }}
  }}
}}
"#,
        node = crate::rig::NODE,
        backing = backing.display(),
    )
}

/// A service of one task `main` running `sleep` with volume `v` at
/// `/data`: busybox's in a container, or the host's under exec.
fn consumer_job(name: &str, driver: &str) -> String {
    let config = match driver {
        "docker" => format!("image = \"{BUSYBOX}\"\n        command = \"sleep\""),
        _ => "command = \"/bin/sleep\"".to_string(),
    };
    format!(
        r#"
job "{name}" {{
  group "app" {{
    volume "data" {{
      type            = "csi"
      source          = "v"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "main" {{
      driver = "{driver}"
      config {{
        {config}
        args    = ["1000"]
      }}
      volume_mount {{
        volume      = "data"
        destination = "/data"
      }}
    }}
  }}
}}
"#
    )
}
