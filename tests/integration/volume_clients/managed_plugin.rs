//! The agent as a managed Docker plugin, the way a user installs it, with
//! the docker CLI and Compose against a private dockerd: the plugin
//! directory `scripts/docker-plugin.sh` builds of the binary under test
//! (the dev build, its shared libraries copied in), `docker plugin create`
//! (offline), `set` of its mounts, `enable`, a volume made and written by
//! `docker run -v` and another by Compose, `disable` refused while a
//! container runs, `set` of its log filter and of its args (a config of
//! one's own on the data mount) with their effects seen (the engine's
//! socket reaching the agent: a lost unmount released, a running
//! container's claim kept), then an upgrade as a user does it without a
//! registry (disable, rm, create from
//! a newer directory under the same name, set, enable): the volumes and
//! their data are there again. Every mount the agent makes lies under the
//! plugin's propagated mount on the host, and none is left once the
//! plugin is disabled.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{require_client, require_docker_cli, IMAGE};
use crate::dockerd::Dockerd;
use crate::harness::{text, WAIT};
use crate::util::{bin, mounts_under, TestDir};

/// The plugin's name, and so its volume driver's: the name the agent's
/// config in the plugin serves (`volume_plugin { name = "csi" }`).
const PLUGIN: &str = "csi";

/// What the plugin's config.json says it is, and what the test's "newer
/// build" says instead.
const DESCRIPTION: &str = "csi-agent: CSI volumes for docker run and Compose";
const NEWER: &str = "csi-agent (newer build): CSI volumes for docker run and Compose";

/// A claim named as dockerd's Mounts name theirs, which no container holds.
const LOST: &str = "docker-0123456789abcdef0123456789abcdef";

/// The Compose project and its volume, `<project>_data`.
const PROJECT: &str = "managed";
const COMPOSE_VOLUME: &str = "managed_data";

/// The private engine, the docker CLI's own config dir, and the test's dir
/// (the plugin's host mounts live there).
struct Rig {
    dockerd: Dockerd,
    dir: TestDir,
    cli_config: PathBuf,
}

impl Rig {
    fn docker(&self, args: &[&str]) -> Output {
        Command::new("docker")
            .arg("-H")
            .arg(format!("unix://{}", self.dockerd.socket.display()))
            .args(args)
            .env("DOCKER_CONFIG", &self.cli_config)
            .stdin(Stdio::null())
            .output()
            .expect("run docker")
    }

    #[track_caller]
    fn docker_ok(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        assert!(
            out.status.success(),
            "docker {args:?}: {}\n--- engine log ---\n{}",
            text(&out),
            self.dockerd.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `docker ARGS`, which the engine must refuse; its stderr.
    #[track_caller]
    fn docker_refused(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        assert!(
            !out.status.success(),
            "docker {args:?} succeeded: {}",
            text(&out)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// The plugin directory of the binary under test, at `name` in the
    /// test's dir, built by the script `make docker-plugin` runs.
    fn build_plugin_dir(&self, name: &str) -> PathBuf {
        let dest = self.dir.join(name);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/docker-plugin.sh");
        let out = Command::new(&script)
            .env("BIN", bin())
            .env("DEST", &dest)
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/docker-plugin.sh");
        assert!(out.status.success(), "docker-plugin.sh: {}", text(&out));
        dest
    }

    /// `docker plugin create` of `dir`, then `set` of its host mounts to
    /// the test's dirs and the private engine's socket, as a user does
    /// after every create (a plugin's settings go with it at `rm`).
    fn create_plugin(&self, dir: &Path) {
        self.docker_ok(&["plugin", "create", PLUGIN, &dir.display().to_string()]);
        self.docker_ok(&[
            "plugin",
            "set",
            PLUGIN,
            &format!("data.source={}", self.data().display()),
            &format!(
                "csi-sockets.source={}",
                self.dir.join("csi-sockets").display()
            ),
            &format!("docker-socket.source={}", self.dockerd.socket.display()),
        ]);
    }

    /// The host dir of the plugin's "data" mount: the agent's data dir.
    fn data(&self) -> PathBuf {
        self.dir.join("plugin-data")
    }

    /// Where dockerd keeps its managed plugins.
    fn plugins_root(&self) -> PathBuf {
        self.dockerd.dir.join("data/plugins")
    }

    /// The plugin's propagated mount on the host.
    fn propagated_mount(&self) -> PathBuf {
        let id = self.docker_ok(&["plugin", "inspect", "-f", "{{.Id}}", PLUGIN]);
        self.plugins_root().join(id.trim()).join("propagated-mount")
    }

    /// The csi-agent CLI on the host, on the agent's control socket, which
    /// the data mount puts on the host too.
    fn cli(&self, args: &[&str]) -> String {
        let socket = self.data().join("control.sock");
        let out = Command::new(bin())
            .args(args)
            .env("CSI_AGENT_ADDR", format!("unix://{}", socket.display()))
            .stdin(Stdio::null())
            .output()
            .expect("run csi-agent");
        assert!(
            out.status.success(),
            "csi-agent {args:?}: {}\n--- engine log ---\n{}",
            text(&out),
            self.dockerd.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn compose(&self, project: &Path, args: &[&str]) {
        let out = Command::new("docker-compose")
            .current_dir(project)
            .args(["-p", PROJECT])
            .args(args)
            .env(
                "DOCKER_HOST",
                format!("unix://{}", self.dockerd.socket.display()),
            )
            .env("DOCKER_CONFIG", &self.cli_config)
            .env_remove("COMPOSE_FILE")
            .env_remove("COMPOSE_PROJECT_NAME")
            .stdin(Stdio::null())
            .output()
            .expect("run docker-compose");
        assert!(
            out.status.success(),
            "docker-compose {args:?}: {}\n--- engine log ---\n{}",
            text(&out),
            self.dockerd.log()
        );
    }

    /// `cat FILE` in a fresh container with `volume` at /data.
    fn read(&self, volume: &str, file: &str) -> String {
        let mount = format!("{volume}:/data");
        self.docker_ok(&[
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            &mount,
            IMAGE,
            "cat",
            &format!("/data/{file}"),
        ])
    }
}

/// A compose file whose service writes `text` to the volume of the
/// plugin's driver and exits.
fn compose_file(text: &str) -> String {
    format!(
        r#"version: "2.4"
services:
  app:
    image: {IMAGE}
    network_mode: none
    command: ["sh", "-c", "echo {text} > /data/from-compose"]
    volumes:
      - data:/data
volumes:
  data:
    driver: {PLUGIN}
    driver_opts:
      size: 16MiB
"#
    )
}

#[test]
fn the_managed_plugin_serves_docker_and_compose_and_keeps_its_volumes_through_an_upgrade() {
    if !(require_docker_cli() && require_client("docker-compose", "docker-compose")) {
        return;
    }
    let dockerd = Dockerd::start();
    dockerd.busybox_image(IMAGE);
    let dir = TestDir::new();
    let rig = Rig {
        cli_config: dir.mkdir("docker-cli"),
        dockerd,
        dir,
    };
    // The host dirs the plugin's mounts bind must exist, as the docs say.
    fs::create_dir_all(rig.data()).unwrap();
    fs::create_dir_all(rig.dir.join("csi-sockets")).unwrap();

    // Built, created offline and enabled.
    let v1 = rig.build_plugin_dir("plugin-v1");
    rig.create_plugin(&v1);
    rig.docker_ok(&["plugin", "enable", PLUGIN]);
    let ls = rig.docker_ok(&["plugin", "ls", "--format", "{{.Name}} {{.Enabled}}"]);
    assert_eq!(ls.trim(), format!("{PLUGIN}:latest true"));

    // A volume of its driver, written by a container that keeps running.
    rig.docker_ok(&["volume", "create", "-d", PLUGIN, "-o", "size=16MiB", "web"]);
    rig.docker_ok(&[
        "run",
        "-d",
        "--name",
        "writer",
        "--network",
        "none",
        "-v",
        "web:/data",
        IMAGE,
        "sh",
        "-c",
        "echo written-by-run > /data/f; exec sleep 1000",
    ]);
    wait_for(|| rig.cli(&["volume", "status", "web"]).contains("docker-"));

    // Its mounts (the staging and the container's publish) reach the
    // host under the propagated mount, and nowhere else in dockerd's
    // plugin dirs.
    let propagated = rig.propagated_mount();
    let mounts = mounts_under(&rig.plugins_root());
    let agents: Vec<_> = mounts.iter().filter(|m| **m != propagated).collect();
    assert!(
        agents.len() >= 2,
        "the staging and the publish are mounted on the host: {mounts:?}"
    );
    for mount in &agents {
        assert!(
            mount.starts_with(&propagated),
            "{} is not under the propagated mount {}",
            mount.display(),
            propagated.display()
        );
    }
    // The claim's publish path is the agent's, under its csi_dir.
    let status = rig.cli(&["volume", "status", "web"]);
    assert!(
        status.contains("/mnt/csi-agent/hostpath/per-alloc/docker-"),
        "{status}"
    );

    // Disable is refused while the container runs.
    let refused = rig.docker_refused(&["plugin", "disable", PLUGIN]);
    assert!(refused.contains("in use"), "{refused}");

    // Compose makes a volume of the driver and writes it.
    let project = rig.dir.mkdir("project");
    fs::write(
        project.join("docker-compose.yml"),
        compose_file("written-by-compose"),
    )
    .unwrap();
    rig.compose(&project, &["up"]);
    rig.compose(&project, &["down"]);
    assert_eq!(
        rig.read(COMPOSE_VOLUME, "from-compose"),
        "written-by-compose\n"
    );

    // Its config changes with `plugin set`, only while it is disabled:
    // dockerd refuses a disable while any volume of the driver exists, so
    // `-f`, once no container uses the volumes.
    let refused = rig.docker_refused(&["plugin", "set", PLUGIN, "RUST_LOG=debug"]);
    assert!(refused.contains("active plugin"), "{refused}");
    rig.docker_ok(&["rm", "-f", "writer"]);
    wait_for(|| !rig.cli(&["volume", "status", "web"]).contains("docker-"));
    rig.docker_ok(&["plugin", "disable", "-f", PLUGIN]);
    assert_eq!(mounts_under(&rig.plugins_root()), Vec::<PathBuf>::new());
    // A log filter, and a config of one's own on the data mount through
    // `args`: the default one with a short unmount_grace.
    let config = fs::read_to_string(v1.join("rootfs/etc/csi-agent/agent.hcl")).unwrap();
    let own = config.replace(
        "  plugin_id = \"hostpath\"\n",
        "  plugin_id = \"hostpath\"\n  unmount_grace = \"2s\"\n",
    );
    assert_ne!(own, config);
    fs::write(rig.data().join("agent.hcl"), own).unwrap();
    let debug_lines = |log: &str| log.lines().filter(|l| l.contains(" DEBUG ")).count();
    let before = debug_lines(&rig.dockerd.log());
    rig.docker_ok(&[
        "plugin",
        "set",
        PLUGIN,
        "RUST_LOG=debug",
        "args=-config /var/lib/csi-agent/agent.hcl -hostpath",
    ]);
    rig.docker_ok(&["plugin", "enable", PLUGIN]);
    assert_eq!(rig.read("web", "f"), "written-by-run\n");
    let after = debug_lines(&rig.dockerd.log());
    assert!(
        after > before,
        "RUST_LOG=debug shows the agent's debug lines in the engine's log"
    );

    // The engine's socket reaches the agent, and its driver is known by
    // the plugin's reference: a claim that no container uses is released
    // as a lost unmount after the 2 s grace, while the older claim of a
    // running container is kept.
    rig.docker_ok(&[
        "run",
        "-d",
        "--name",
        "holder",
        "--network",
        "none",
        "-v",
        "web:/data",
        IMAGE,
        "sleep",
        "1000",
    ]);
    wait_for(|| rig.cli(&["volume", "status", "web"]).contains("docker-"));
    rig.cli(&["volume", "claim", "-alloc", LOST, COMPOSE_VOLUME]);
    wait_for(|| {
        !rig.cli(&["volume", "status", COMPOSE_VOLUME])
            .contains(LOST)
    });
    let released = format!("Releasing claim {LOST} of volume {COMPOSE_VOLUME}");
    assert!(
        rig.dockerd.log().contains(&released),
        "{}",
        rig.dockerd.log()
    );
    assert!(
        rig.cli(&["volume", "status", "web"]).contains("docker-"),
        "the running container's claim is kept"
    );
    rig.docker_ok(&["rm", "-f", "holder"]);
    wait_for(|| !rig.cli(&["volume", "status", "web"]).contains("docker-"));

    // The upgrade without a registry: disable, rm, create from the newer
    // directory under the same name, set the mounts again, enable.
    let v2 = rig.build_plugin_dir("plugin-v2");
    let config = fs::read_to_string(v2.join("config.json")).unwrap();
    assert!(config.contains(DESCRIPTION), "{config}");
    fs::write(v2.join("config.json"), config.replace(DESCRIPTION, NEWER)).unwrap();
    let old_id = rig.docker_ok(&["plugin", "inspect", "-f", "{{.Id}}", PLUGIN]);
    rig.docker_ok(&["plugin", "disable", "-f", PLUGIN]);
    rig.docker_ok(&["plugin", "rm", "-f", PLUGIN]);
    rig.create_plugin(&v2);
    rig.docker_ok(&["plugin", "enable", PLUGIN]);
    let new_id = rig.docker_ok(&["plugin", "inspect", "-f", "{{.Id}}", PLUGIN]);
    assert_ne!(old_id, new_id, "a new plugin");
    let description =
        rig.docker_ok(&["plugin", "inspect", "-f", "{{.Config.Description}}", PLUGIN]);
    assert_eq!(description.trim(), NEWER);

    // Both volumes and their data are there, in dockerd and in the agent.
    // The plugin's own: dockerd also lists the volumes of every plugin
    // socket in the host's shared /run/docker/plugins, other tests' too.
    let volumes = rig.docker_ok(&["volume", "ls", "--format", "{{.Name}} {{.Driver}}"]);
    let ours = format!(" {PLUGIN}:latest");
    let mut volumes: Vec<&str> = volumes.lines().filter(|l| l.ends_with(&ours)).collect();
    volumes.sort();
    assert_eq!(
        volumes,
        [
            format!("{COMPOSE_VOLUME} {PLUGIN}:latest"),
            format!("web {PLUGIN}:latest")
        ]
    );
    assert_eq!(rig.read("web", "f"), "written-by-run\n");
    assert_eq!(
        rig.read(COMPOSE_VOLUME, "from-compose"),
        "written-by-compose\n"
    );
    let listed = rig.cli(&["volume", "status"]);
    assert!(
        listed.contains("web") && listed.contains(COMPOSE_VOLUME),
        "{listed}"
    );

    // Disabled and removed for good: nothing stays mounted.
    rig.docker_ok(&["plugin", "disable", "-f", PLUGIN]);
    rig.docker_ok(&["plugin", "rm", "-f", PLUGIN]);
    assert_eq!(mounts_under(&rig.plugins_root()), Vec::<PathBuf>::new());
    assert_eq!(mounts_under(&rig.data()), Vec::<PathBuf>::new());
}

/// Waits until `done` holds, at most [`WAIT`].
#[track_caller]
fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "not within {WAIT:?}");
        thread::sleep(Duration::from_millis(50));
    }
}
