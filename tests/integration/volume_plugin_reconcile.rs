//! Lost unmounts: the engine's own list of containers and their named
//! volumes, against a real private dockerd ([`Dockerd`]), which is what
//! the volume plugin's reconciler matches its claims against; and the
//! reconciler at work in an agent serving the volume plugin to that
//! dockerd, with the `docker` CLI as the client: a crash of dockerd, a
//! `docker cp`, an engine that does not answer.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::AgentClient;
use csi_agent::docker::{ContainerSpec, ContainerVolumes, Engine, Mount};
use csi_agent::volume_plugin::reconcile::{volumes_in_use, LOST_UNMOUNT_EVENT};

use crate::dockerd::{require_docker, Dockerd};
use crate::harness::{healthy, Agent, WAIT};
use crate::util::Plugin;

const IMAGE: &str = "csi-agent-test/busybox:1";

/// A busybox container running `script`, mounting the `local` volumes
/// `volumes` at `/<name>` and a bind of `bind` at `/bind`.
fn spec(script: &str, volumes: &[&str], bind: &str) -> ContainerSpec {
    let mut mounts: Vec<Mount> = volumes
        .iter()
        .map(|name| Mount::Volume {
            source: name.to_string(),
            target: format!("/{name}"),
            read_only: false,
        })
        .collect();
    mounts.push(Mount::Bind {
        source: bind.to_string(),
        target: "/bind".into(),
        read_only: true,
        propagation: None,
    });
    ContainerSpec {
        image: IMAGE.to_string(),
        cmd: vec!["sh".into(), "-c".into(), script.into()],
        network_mode: Some("none".into()),
        mounts,
        ..ContainerSpec::default()
    }
}

fn listed<'a>(containers: &'a [ContainerVolumes], id: &str) -> &'a ContainerVolumes {
    containers
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("container {id} is not listed: {containers:?}"))
}

fn names(container: &ContainerVolumes) -> Vec<(&str, &str)> {
    let mut names: Vec<_> = container
        .volumes
        .iter()
        .map(|v| (v.name.as_str(), v.driver.as_str()))
        .collect();
    names.sort();
    names
}

#[test]
fn the_engine_lists_each_containers_state_and_named_volumes() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(IMAGE);
    let engine: Engine = dockerd.engine();
    let bind = dockerd.dir.mkdir("bind").display().to_string();

    let runner = engine
        .create(
            "runner",
            &spec("exec sleep 1000", &["alpha", "beta"], &bind),
        )
        .unwrap();
    engine.start(&runner).unwrap();
    let done = engine
        .create("done", &spec("true", &["gamma"], &bind))
        .unwrap();
    engine.start(&done).unwrap();
    assert_eq!(engine.wait(&done).unwrap(), 0);
    let created = engine
        .create("created", &spec("true", &["delta"], &bind))
        .unwrap();

    let containers = engine.volume_mounts().unwrap();
    assert_eq!(containers.len(), 3, "{containers:?}");
    let running = listed(&containers, &runner);
    assert_eq!(running.state, "running");
    // The bind is left out; each volume is named with its driver.
    assert_eq!(names(running), [("alpha", "local"), ("beta", "local")]);
    let exited = listed(&containers, &done);
    assert_eq!(exited.state, "exited");
    assert_eq!(names(exited), [("gamma", "local")]);
    assert_eq!(listed(&containers, &created).state, "created");

    // What the reconciler makes of it: the running and the created
    // containers' volumes are in use, the exited one's is not; another
    // driver's name matches none.
    let in_use: Vec<String> = volumes_in_use(&containers, "local").into_iter().collect();
    assert_eq!(in_use, ["alpha", "beta", "delta"]);
    assert!(volumes_in_use(&containers, "csi").is_empty());

    engine.remove(&runner, true).unwrap();
    let containers = engine.volume_mounts().unwrap();
    assert!(containers.iter().all(|c| c.id != runner), "{containers:?}");
}

#[test]
fn an_engine_that_is_gone_is_an_error_not_an_empty_list() {
    if !require_docker() {
        return;
    }
    let mut dockerd = Dockerd::start();
    let engine = dockerd.engine();
    assert!(engine.volume_mounts().unwrap().is_empty());
    dockerd.stop();
    let err = engine.volume_mounts().unwrap_err();
    assert!(
        csi_agent::error_chain(&err).contains("cannot reach the container engine"),
        "{err:?}"
    );
}

/// The grace of the tests' agents: short, so that a window longer than
/// it is short too.
const GRACE: Duration = Duration::from_secs(2);

/// A window longer than the grace and a few rounds: what a claim must
/// survive while its container runs, or while its engine is down.
const WINDOW: Duration = Duration::from_secs(5);

/// How long a claim may take to go once its grace has passed (rounds,
/// then the release's NodeUnpublish and NodeUnstage).
const RELEASE_WAIT: Duration = Duration::from_secs(30);

/// A hostpath plugin, a private dockerd and an agent serving the volume
/// plugin to it under a name of the test's own (dockerd looks for
/// `/run/docker/plugins/<name>.sock`, which every dockerd on the host
/// shares), with `unmount_grace` [`GRACE`]. Dropped in field order: the
/// engine (and its containers) first, then the agent, then the plugin.
struct Host {
    dockerd: Dockerd,
    agent: Agent,
    _plugin: Plugin,
    client: AgentClient,
    driver: String,
}

impl Host {
    fn start() -> Host {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let driver = format!("csi-reconcile-{}-{n}", std::process::id());
        let plugin = Plugin::start();
        let dockerd = Dockerd::start();
        dockerd.busybox_image(IMAGE);
        let extra = format!(
            "\nplugin \"hostpath\" {{\n  socket = {:?}\n  type = \"monolith\"\n}}\n\
             docker {{\n  endpoint = \"unix://{}\"\n}}\n\
             volume_plugin {{\n  name = {driver:?}\n  plugin_id = \"hostpath\"\n  unmount_grace = \"{}s\"\n}}\n",
            plugin.socket.display().to_string(),
            dockerd.socket.display(),
            GRACE.as_secs()
        );
        let agent = Agent::start_with_config(&extra);
        agent.wait_for("hostpath", healthy, WAIT);
        let client = AgentClient::connect(&agent.socket).unwrap();
        Host {
            dockerd,
            agent,
            _plugin: plugin,
            client,
            driver,
        }
    }

    /// `docker -H <this engine> ARGS`, which must succeed; its stdout.
    fn docker(&self, args: &[&str]) -> String {
        let out = Command::new("docker")
            .arg("-H")
            .arg(format!("unix://{}", self.dockerd.socket.display()))
            .args(args)
            .output()
            .expect("run docker");
        assert!(
            out.status.success(),
            "docker {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.agent.log()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A volume of the plugin, made through docker.
    fn volume(&self, name: &str) {
        self.docker(&["volume", "create", "-d", &self.driver, name]);
    }

    /// The alloc IDs of the claims of `volume`.
    fn claims(&self, volume: &str) -> BTreeSet<String> {
        let status = self.client.volume_status(volume, false).unwrap();
        status
            .volumes
            .iter()
            .flat_map(|v| &v.claims)
            .map(|c| c.alloc_id.clone())
            .collect()
    }

    /// Waits until `volume`'s claims satisfy `done`, and returns them.
    #[track_caller]
    fn wait_claims(
        &self,
        volume: &str,
        limit: Duration,
        done: impl Fn(&BTreeSet<String>) -> bool,
    ) -> BTreeSet<String> {
        let start = Instant::now();
        loop {
            let claims = self.claims(volume);
            if done(&claims) {
                return claims;
            }
            if start.elapsed() > limit {
                panic!(
                    "the claims of {volume} are {claims:?} after {limit:?}\n{}",
                    self.agent.log()
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Checks for `window` that every claim of `held` stays.
    #[track_caller]
    fn hold(&self, volume: &str, held: &BTreeSet<String>, window: Duration, why: &str) {
        let start = Instant::now();
        while start.elapsed() < window {
            let claims = self.claims(volume);
            assert!(
                claims.is_superset(held),
                "{why}: a claim of {held:?} went after {:?}; now {claims:?}\n{}",
                start.elapsed(),
                self.agent.log()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until container `name` is in `state`.
    #[track_caller]
    fn wait_state(&self, name: &str, state: &str) {
        let start = Instant::now();
        loop {
            let now = self.docker(&["inspect", "-f", "{{.State.Status}}", name]);
            if now == state {
                return;
            }
            assert!(
                start.elapsed() < RELEASE_WAIT,
                "container {name} is {now}, not {state}\n{}",
                self.dockerd.log()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The plugin's socket goes with the agent when it stops; one a killed
/// agent left is removed here, so that no other dockerd finds it.
impl Drop for Host {
    fn drop(&mut self) {
        let socket = format!("/run/docker/plugins/{}.sock", self.driver);
        let _ = std::fs::remove_file(socket);
    }
}

#[test]
fn a_claim_is_never_released_while_its_container_runs_across_a_crash_of_dockerd() {
    if !require_docker() {
        return;
    }
    let mut host = Host::start();
    host.volume("lost");
    host.docker(&[
        "run",
        "-d",
        "--name",
        "web",
        "--restart",
        "always",
        "-v",
        "lost:/data",
        IMAGE,
        "sleep",
        "1000",
    ]);
    let first = host.wait_claims("lost", WAIT, |c| !c.is_empty());
    host.hold("lost", &first, WINDOW, "web runs");

    // dockerd crashes and comes back, and restarts web: 20.10 mounts the
    // volume again with the mount ID it kept, the same claim.
    host.dockerd.sigkill();
    host.dockerd.launch();
    host.wait_state("web", "running");
    let again = host.wait_claims("lost", WAIT, |c| !c.is_empty());
    host.hold("lost", &again, WINDOW, "web runs again");

    // Once web has stopped for good, no claim is left, whether dockerd
    // sent its Unmount or the reconciler found the container exited.
    host.docker(&["update", "--restart", "no", "web"]);
    host.docker(&["stop", "-t", "1", "web"]);
    host.wait_claims("lost", RELEASE_WAIT, BTreeSet::is_empty);
}

#[test]
fn docker_cp_out_of_a_running_container_leaves_no_claim_behind() {
    if !require_docker() {
        return;
    }
    let host = Host::start();
    host.volume("copied");
    host.docker(&[
        "run",
        "-d",
        "--name",
        "web",
        "-v",
        "copied:/data",
        IMAGE,
        "sh",
        "-c",
        "echo kept > /data/file; exec sleep 1000",
    ]);
    let running = host.wait_claims("copied", WAIT, |c| !c.is_empty());
    let out = host.dockerd.dir.join("out");
    host.docker(&["cp", "web:/data/file", &out.display().to_string()]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "kept\n");
    // No claim but the container's is left once the copy is done, over
    // more than a grace.
    let start = Instant::now();
    while start.elapsed() < WINDOW {
        let claims = host.claims("copied");
        assert!(claims.is_subset(&running), "{claims:?} after docker cp");
        thread::sleep(Duration::from_millis(100));
    }
    // dockerd 20.10 mounts the volumes of a running container for `docker
    // cp` with the container's own mount ID (moby/moby#47964): the copy's
    // Unmount matches the copy's Mount, and the container keeps its claim.
    assert_eq!(host.claims("copied"), running);
    assert_eq!(host.docker(&["exec", "web", "cat", "/data/file"]), "kept");
    host.docker(&["stop", "-t", "1", "web"]);
    host.wait_claims("copied", RELEASE_WAIT, BTreeSet::is_empty);
}

#[test]
fn an_engine_that_cannot_be_reached_releases_nothing_and_a_crash_lost_unmount_goes_after() {
    if !require_docker() {
        return;
    }
    let mut host = Host::start();
    host.volume("down");
    host.docker(&[
        "run",
        "-d",
        "--name",
        "web",
        "-v",
        "down:/data",
        IMAGE,
        "sleep",
        "1000",
    ]);
    let held = host.wait_claims("down", WAIT, |c| !c.is_empty());
    host.dockerd.sigkill();
    host.agent
        .wait_for_log("Cannot list the containers of dockerd", RELEASE_WAIT);
    host.hold("down", &held, WINDOW, "dockerd is down");
    // The outage is logged once.
    let log = host.agent.log();
    assert_eq!(
        log.matches("Cannot list the containers of dockerd").count(),
        1,
        "{log}"
    );
    // Back, dockerd finds web gone with its crash and sends no Unmount
    // for it: the reconciler releases the claim.
    host.dockerd.launch();
    host.wait_state("web", "exited");
    host.wait_claims("down", RELEASE_WAIT, BTreeSet::is_empty);
    let log = host.agent.log();
    assert!(log.contains("answers again"), "{log}");
    for alloc in &held {
        assert!(
            log.contains(&format!("Releasing claim {alloc} of volume down")),
            "{log}"
        );
    }
    // And tells it as a claim event naming the alloc.
    let events = host
        .client
        .events(0, &["claim".to_string()], Duration::ZERO)
        .unwrap()
        .events;
    let lost: Vec<_> = events
        .iter()
        .filter(|e| e.type_ == LOST_UNMOUNT_EVENT && e.key == "down")
        .collect();
    assert_eq!(lost.len(), held.len(), "{events:#?}");
    for alloc in &held {
        assert!(
            lost.iter().any(|e| e.message.contains(alloc.as_str())),
            "{lost:#?}"
        );
    }
}

/// Podman's API service on a store of the test's own (`--root`,
/// `--runroot`, the `vfs` driver, nothing mounted), killed in `Drop`.
struct PodmanService {
    dir: crate::util::TestDir,
    socket: std::path::PathBuf,
    child: std::process::Child,
}

impl PodmanService {
    /// `None` (a skip) without root or podman; under CI, podman missing
    /// is a failure.
    fn start() -> Option<PodmanService> {
        if !crate::util::require_root() {
            return None;
        }
        let present = Command::new("podman")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !present {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("podman is missing; `make deps` installs it");
            }
            eprintln!("skipping: podman is missing (`make deps` installs it)");
            return None;
        }
        let dir = crate::util::TestDir::new();
        let socket = dir.join("podman.sock");
        let mut service = PodmanService {
            child: Command::new("podman")
                .args(PodmanService::store_args(&dir))
                .args(["system", "service", "--time", "0"])
                .arg(format!("unix://{}", socket.display()))
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(dir.join("service.log")).unwrap())
                .spawn()
                .expect("start podman system service"),
            dir,
            socket,
        };
        let engine = service.engine();
        let start = Instant::now();
        while engine.ping().is_err() {
            let exited = service.child.try_wait().unwrap();
            assert!(
                exited.is_none() && start.elapsed() < Duration::from_secs(60),
                "podman system service did not answer ({exited:?}): {}",
                std::fs::read_to_string(service.dir.join("service.log")).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(50));
        }
        Some(service)
    }

    fn store_args(dir: &crate::util::TestDir) -> Vec<String> {
        vec![
            "--root".into(),
            dir.join("root").display().to_string(),
            "--runroot".into(),
            dir.join("run").display().to_string(),
            "--storage-driver".into(),
            "vfs".into(),
        ]
    }

    /// `podman ARGS` on this store, which must succeed; its stdout.
    fn podman(&self, args: &[&str]) -> String {
        let out = Command::new("podman")
            .args(PodmanService::store_args(&self.dir))
            .args(args)
            .output()
            .expect("run podman");
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn engine(&self) -> Engine {
        Engine::new(&self.socket.display().to_string()).unwrap()
    }
}

impl Drop for PodmanService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn podmans_compat_api_lists_containers_and_volumes_the_same_way() {
    let Some(podman) = PodmanService::start() else {
        return;
    };
    let rootfs = crate::dockerd::busybox_rootfs(&podman.dir.mkdir("rootfs"));
    let tarball = podman.dir.join("rootfs.tar");
    let tar = Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .arg("-cf")
        .arg(&tarball)
        .arg(".")
        .status()
        .unwrap();
    assert!(tar.success());
    podman.podman(&["import", &tarball.display().to_string(), IMAGE]);
    podman.podman(&["volume", "create", "omega"]);
    let id = podman.podman(&[
        "create",
        "--network",
        "none",
        "-v",
        "omega:/data",
        IMAGE,
        "sleep",
        "1000",
    ]);

    let containers = podman.engine().volume_mounts().unwrap();
    let created = listed(&containers, &id);
    assert_eq!(created.state, "created");
    assert_eq!(names(created), [("omega", "local")]);
    let in_use: Vec<String> = volumes_in_use(&containers, "local").into_iter().collect();
    assert_eq!(in_use, ["omega"]);
    podman.podman(&["rm", "-f", &id]);
    assert!(podman.engine().volume_mounts().unwrap().is_empty());
}
