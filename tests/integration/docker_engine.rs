//! The container engine client (`csi_agent::docker`) against a real,
//! private dockerd per test ([`Dockerd`]): what the `docker` task driver
//! builds on. Images are busybox roots imported offline; nothing is
//! pulled from a registry, and a pull on this offline host must fail with
//! an error that names the image.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::docker::{Auth, ContainerSpec, Engine, Error, Mount};
use csi_agent::error_chain;

use crate::dockerd::{require_docker, Dockerd};

const IMAGE: &str = "csi-agent-test/busybox:1";

/// A busybox container running `script` with `sh -c`, labelled for `test`.
fn spec(test: &str, script: &str) -> ContainerSpec {
    ContainerSpec {
        image: IMAGE.to_string(),
        cmd: vec!["sh".into(), "-c".into(), script.into()],
        labels: [("csi-agent.test".to_string(), test.to_string())].into(),
        network_mode: Some("none".into()),
        ..ContainerSpec::default()
    }
}

/// Kills container `id` with SIGKILL if it still runs after 60 s, so
/// that a blocking `wait` or `logs` of a test gone wrong fails instead of
/// hanging the suite; dropping it says the test is done with the container.
struct Watchdog {
    done: Option<mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<bool>>,
}

impl Watchdog {
    fn new(engine: &Engine, id: &str) -> Watchdog {
        let (done, rx) = mpsc::channel::<()>();
        let (engine, id) = (engine.clone(), id.to_string());
        let thread = thread::spawn(move || {
            let fired = rx.recv_timeout(Duration::from_secs(60)) == Err(RecvTimeoutError::Timeout);
            if fired {
                let _ = engine.kill(&id, "SIGKILL");
            }
            fired
        });
        Watchdog {
            done: Some(done),
            thread: Some(thread),
        }
    }

    /// Ends the watch; panics if it had to kill the container.
    fn check(mut self) {
        self.done.take();
        let fired = self
            .thread
            .take()
            .map(|t| t.join().unwrap())
            .unwrap_or(false);
        assert!(!fired, "the container ran 60 s: the watchdog killed it");
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.take();
    }
}

/// The engine with the busybox image imported.
fn engine_with_image() -> (Dockerd, Engine) {
    let dockerd = Dockerd::start();
    dockerd.busybox_image(IMAGE);
    let engine = dockerd.engine();
    (dockerd, engine)
}

#[test]
fn version_and_an_imported_image() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    let engine = dockerd.engine();
    let version = engine.version().unwrap();
    assert_eq!(version.api_version, "1.41", "{version:?}");
    assert!(version.version.starts_with("20.10"), "{version:?}");
    assert!(!engine.image_present(IMAGE).unwrap());
    dockerd.busybox_image(IMAGE);
    assert!(engine.image_present(IMAGE).unwrap());
    assert!(!engine.image_present("csi-agent-test/busybox:2").unwrap());
}

#[test]
fn a_pull_on_an_offline_host_fails_naming_the_image() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    let image = "csi-agent-test/absent:1";
    let err = dockerd.engine().pull(image, None, &mut |_| {}).unwrap_err();
    assert!(
        matches!(&err, Error::Pull { image: i, .. } if i == image),
        "{err:?}"
    );
    let text = error_chain(&err);
    assert!(
        text.starts_with(&format!(
            "image {image} is not present and cannot be pulled: "
        )),
        "{text}"
    );
    assert!(text.len() > 60, "no engine message: {text}");
    let auth = Auth {
        username: "user".into(),
        password: "secret".into(),
        server_address: "registry.invalid".into(),
    };
    let image = "registry.invalid/team/app:2";
    let err = dockerd
        .engine()
        .pull(image, Some(&auth), &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(&err, Error::Pull { image: i, .. } if i == image),
        "{err:?}"
    );
    assert!(!format!("{err:?} {auth:?}").contains("secret"));
}

#[test]
fn an_engine_at_a_missing_socket_names_its_endpoint() {
    let engine = Engine::new("unix:///tmp/csi-agent-it/no-such-dir/docker.sock").unwrap();
    let err = engine.inspect("x").unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert_eq!(
        error_chain(&err),
        "cannot reach the container engine at unix:///tmp/csi-agent-it/no-such-dir/docker.sock: \
         No such file or directory (os error 2)"
    );
    let err = Engine::new("tcp://127.0.0.1:2375").unwrap_err();
    assert!(err.to_string().contains("not a unix socket"), "{err}");
}

/// One container's life: created with env, labels, binds with slave and
/// shared propagation, a tmpfs and a memory limit; started and inspected
/// while it runs; its stdout and stderr apart in the logs; its exit code
/// from wait.
#[test]
fn a_container_runs_logs_to_both_streams_and_exits_with_its_code() {
    if !require_docker() {
        return;
    }
    let (dockerd, engine) = engine_with_image();
    // A bind with slave or shared propagation needs a source on a mount
    // that propagates.
    let shared = dockerd.dir.mkdir("shared");
    for args in [&["--bind"][..], &["--make-rshared"][..]] {
        let status = Command::new("mount")
            .args(args)
            .args(if args[0] == "--bind" {
                vec![&shared, &shared]
            } else {
                vec![&shared]
            })
            .status()
            .unwrap();
        assert!(status.success(), "mount {args:?}");
    }
    let slave = dockerd.dir.mkdir("shared/slave");
    let shared_dir = dockerd.dir.mkdir("shared/shared");
    let script = "while [ ! -e /slave/go ]; do sleep 0.05; done; \
                  echo out $GREETING; echo err >&2; \
                  grep -E ' /(slave|shared|scratch) ' /proc/self/mountinfo; \
                  cat /sys/fs/cgroup/memory/memory.limit_in_bytes; exit 3";
    let mut spec = spec("life", script);
    spec.env = BTreeMap::from([("GREETING".to_string(), "hello world".to_string())]);
    spec.labels.insert("app".into(), "web".into());
    spec.memory = Some(64 << 20);
    spec.mounts = vec![
        Mount::Bind {
            source: slave.display().to_string(),
            target: "/slave".into(),
            read_only: false,
            propagation: Some("rslave".into()),
        },
        Mount::Bind {
            source: shared_dir.display().to_string(),
            target: "/shared".into(),
            read_only: true,
            propagation: Some("rshared".into()),
        },
        Mount::Tmpfs {
            target: "/scratch".into(),
            size: Some(1 << 20),
            mode: Some(0o1777),
        },
    ];
    let id = engine.create("life", &spec).unwrap();
    engine.start(&id).unwrap();
    engine.start(&id).unwrap();
    let running = engine.inspect("life").unwrap().unwrap();
    assert_eq!(running.id, id);
    assert_eq!(running.name, "life");
    assert_eq!(running.image, IMAGE);
    assert!(running.running, "{running:?}");
    assert_eq!(running.status, "running");
    assert!(running.pid > 0, "{running:?}");
    assert_eq!(running.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        running.labels.get("csi-agent.test").map(String::as_str),
        Some("life")
    );

    let watchdog = Watchdog::new(&engine, &id);
    std::fs::write(slave.join("go"), "").unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    engine.logs(&id, 0, &mut out, &mut err).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert_eq!(String::from_utf8(err).unwrap(), "err\n");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "out hello world", "{out}");
    let line = |target: &str| {
        lines
            .iter()
            .find(|l| l.split(' ').nth(4) == Some(target))
            .unwrap_or_else(|| panic!("no {target} in {out}"))
    };
    assert!(line("/slave").contains(" master:"), "{out}");
    assert!(line("/shared").contains(" shared:"), "{out}");
    assert!(line("/shared").contains(" ro,"), "{out}");
    assert!(line("/scratch").contains(" - tmpfs "), "{out}");
    assert!(line("/scratch").contains("size=1024k"), "{out}");
    assert_eq!(lines.last(), Some(&"67108864"), "{out}");

    assert_eq!(engine.wait(&id).unwrap(), 3);
    watchdog.check();
    let exited = engine.inspect(&id).unwrap().unwrap();
    assert!(!exited.running);
    assert_eq!((exited.status.as_str(), exited.exit_code), ("exited", 3));
    assert!(!exited.oom_killed);
    assert_eq!(exited.pid, 0);
    assert!(exited.started_at.starts_with("20"), "{exited:?}");
    assert!(exited.finished_at.starts_with("20"), "{exited:?}");
}

/// SIGTERM reaches a `sleep` through the engine's init (a PID 1 without
/// a handler would ignore it), and a second kill of the stopped container
/// is no error. The kill waits until the script runs: a signal that
/// comes before the init has set up its handlers is lost (seen under
/// load: the container then sleeps on, or the init exits 2).
#[test]
fn sigterm_stops_a_sleeping_container() {
    if !require_docker() {
        return;
    }
    let (dockerd, engine) = engine_with_image();
    let ready = dockerd.dir.mkdir("ready");
    let mut spec = spec("kill", "echo > /ready/now; exec sleep 1000");
    spec.init = true;
    spec.mounts = vec![Mount::Bind {
        source: ready.display().to_string(),
        target: "/ready".into(),
        read_only: false,
        propagation: None,
    }];
    let id = engine.create("sleeper", &spec).unwrap();
    engine.start(&id).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.join("now").exists() {
        assert!(Instant::now() < deadline, "the script did not start");
        thread::sleep(Duration::from_millis(10));
    }
    assert!(engine.inspect(&id).unwrap().unwrap().running);
    engine.kill(&id, "SIGTERM").unwrap();
    let watchdog = Watchdog::new(&engine, &id);
    assert_eq!(engine.wait(&id).unwrap(), 143);
    watchdog.check();
    let stopped = engine.inspect(&id).unwrap().unwrap();
    assert!(!stopped.running, "{stopped:?}");
    engine.kill(&id, "SIGTERM").unwrap();
    let err = engine.kill("no-such-container", "SIGTERM").unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    let err = engine.wait("no-such-container").unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    let err = engine
        .logs("no-such-container", 0, &mut Vec::new(), &mut Vec::new())
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
}

/// The engine watches a container's memory cgroup for OOM events only
/// once its task has started: a container killed within its first
/// milliseconds (before `start` returns) ends with 137 and `oom_killed`
/// false, as seen here under load. So the hog waits a moment before it
/// allocates; and since the OOM event may reach the engine after the
/// exit that ends the wait, the flag is looked at again for a while. The
/// hog is the shell alone (PID 1, a string that doubles), so the process
/// the kernel kills is the container's own.
#[test]
fn a_container_over_its_memory_limit_is_oom_killed() {
    if !require_docker() {
        return;
    }
    let (dockerd, engine) = engine_with_image();
    let mut spec = spec("oom", "sleep 0.5; x=a; while :; do x=$x$x; done");
    spec.memory = Some(8 << 20);
    let id = engine.create("hog", &spec).unwrap();
    engine.start(&id).unwrap();
    let watchdog = Watchdog::new(&engine, &id);
    assert_eq!(engine.wait(&id).unwrap(), 137);
    watchdog.check();
    let deadline = Instant::now() + Duration::from_secs(2);
    let hog = loop {
        let hog = engine.inspect(&id).unwrap().unwrap();
        if hog.oom_killed || Instant::now() > deadline {
            break hog;
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert!(
        hog.oom_killed,
        "{hog:?}; the engine's log:\n{}",
        dockerd.log()
    );
    assert_eq!(hog.exit_code, 137);
}

/// A name in use is a conflict; a label finds the container, with or
/// without its value; a forced removal takes a running one, and removing
/// it again is no error.
#[test]
fn names_conflict_labels_find_and_removal_is_final() {
    if !require_docker() {
        return;
    }
    let (_dockerd, engine) = engine_with_image();
    let id = engine
        .create("web", &spec("names", "exec sleep 1000"))
        .unwrap();
    let err = engine.create("web", &spec("names", "true")).unwrap_err();
    assert!(
        matches!(&err, Error::Conflict(m) if m.contains("already in use")),
        "{err:?}"
    );
    let other = engine.create("other", &spec("other", "true")).unwrap();
    engine.start(&id).unwrap();

    let found = engine.list("csi-agent.test=names").unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].id.as_str(), found[0].name.as_str()),
        (id.as_str(), "web")
    );
    assert!(found[0].running);
    let mut all: Vec<String> = engine
        .list("csi-agent.test")
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    all.sort();
    assert_eq!(all, ["other", "web"]);
    assert!(engine.list("csi-agent.test=none").unwrap().is_empty());

    engine.remove(&id, true).unwrap();
    assert_eq!(engine.inspect(&id).unwrap(), None);
    engine.remove(&id, true).unwrap();
    engine.remove(&other, false).unwrap();
    assert_eq!(engine.inspect("other").unwrap(), None);
    let err = engine.create(
        "x",
        &ContainerSpec {
            image: "csi-agent-test/absent:1".into(),
            ..ContainerSpec::default()
        },
    );
    assert!(matches!(err, Err(Error::NotFound(_))), "{err:?}");
}
