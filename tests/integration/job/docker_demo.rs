//! Nomad's own CSI demo (`demo/csi/hostpath/` of hashicorp/nomad) run
//! unchanged on csi-agent: its plugin job (`driver = "docker"`,
//! `privileged = true`, `csi_plugin`), its volume file piped through `sed`
//! into `volume create -` as its `run.sh` does, and its redis job claiming
//! a per-alloc volume read-only.
//!
//! The images are stand-ins made offline under the demo's image names,
//! since nothing can be pulled here: `registry.k8s.io/sig-storage/
//! hostpathplugin:v1.9.0` is the built-in hostpath plugin behind an
//! entrypoint that takes the Kubernetes plugin's flags (`--endpoint=`,
//! `--nodeid=`), and `redis:7` is busybox behind an entrypoint that says
//! whether its volume is writable, then sleeps. The job and volume files
//! are the demo's.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use super::containers::{hostpath_rootfs, wait_no_containers};
use super::Rig;
use crate::dockerd::{busybox_rootfs, require_docker, Dockerd};
use crate::harness::{healthy, text, WAIT};

const PLUGIN_JOB: &str = include_str!("../../fixtures/nomad/hostpath-plugin.nomad");
const REDIS_JOB: &str = include_str!("../../fixtures/nomad/hostpath-redis.nomad");

/// The demo's volume file (`hostpath.hcl`), key for key.
const VOLUME: &str = r#"
id        = "VOLUME_NAME"
name      = "VOLUME_NAME"
type      = "csi"
plugin_id = "hostpath-plugin0"

capacity_min = "1MB"
capacity_max = "1GB"

capability {
  access_mode     = "single-node-reader-only"
  attachment_mode = "file-system"
}

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

secrets {
  somesecret = "xyzzy"
}

mount_options {
  mount_flags = ["ro"]
}
"#;

/// The stand-in plugin's entrypoint: the Kubernetes hostpath plugin's
/// flags, as the demo passes them, turned into the built-in plugin's.
const PLUGIN_ENTRYPOINT: &str = r#"#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    --endpoint=*) endpoint="${arg#--endpoint=}" ;;
    --nodeid=*) node="${arg#--nodeid=}" ;;
  esac
done
mkdir -p /csi-data-dir
exec /bin/csi-agent hostpath -endpoint "$endpoint" -node-id "$node" -base-dir /csi-data-dir
"#;

/// The stand-in redis: whether the volume at its destination is there
/// and writable, then a long sleep.
const REDIS_ENTRYPOINT: &str = r#"#!/bin/sh
test -d "$NOMAD_ALLOC_DIR/volume0" && echo "volume0 is there"
if touch "$NOMAD_ALLOC_DIR/volume0/probe" 2>/dev/null; then echo "volume0 is writable"; else echo "volume0 is read-only"; fi
exec sleep 1000
"#;

fn script(dir: &std::path::Path, name: &str, text: &str) {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn nomads_hostpath_demo_runs_unchanged_given_its_images() {
    if !require_docker() {
        return;
    }
    let dockerd = Dockerd::start();
    let plugin_root = hostpath_rootfs(&dockerd, "rootfs-k8s-hostpath");
    script(&plugin_root, "hostpathplugin", PLUGIN_ENTRYPOINT);
    dockerd.import_image_with(
        "registry.k8s.io/sig-storage/hostpathplugin:v1.9.0",
        &plugin_root,
        &[r#"ENTRYPOINT ["/hostpathplugin"]"#],
    );
    let redis_root = busybox_rootfs(&dockerd.dir.mkdir("rootfs-redis"));
    script(&redis_root, "docker-entrypoint.sh", REDIS_ENTRYPOINT);
    dockerd.import_image_with(
        "redis:7",
        &redis_root,
        &[r#"ENTRYPOINT ["/docker-entrypoint.sh"]"#],
    );
    let rig = Rig::bare_with_config(&format!(
        "docker {{\n  endpoint = \"unix://{}\"\n  allow_privileged = true\n}}\n",
        dockerd.socket.display()
    ));
    // run.sh: the plugin job, until the plugin is healthy.
    rig.run_job("plugin.nomad", PLUGIN_JOB);
    rig.agent.wait_for("hostpath-plugin0", healthy, WAIT);
    // run.sh: `sed -e "s/VOLUME_NAME/test-volume[N]/" hostpath.hcl | nomad volume create -`.
    for n in 0..2 {
        let spec = VOLUME.replace("VOLUME_NAME", &format!("test-volume[{n}]"));
        let mut create = Command::new(crate::util::bin())
            .args(["volume", "create", "-"])
            .env("CSI_AGENT_ADDR", rig.agent.socket.display().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        create
            .stdin
            .take()
            .unwrap()
            .write_all(spec.as_bytes())
            .unwrap();
        let out = create.wait_with_output().unwrap();
        assert!(out.status.success(), "volume create -: {}", text(&out));
    }
    // run.sh: the redis job, two allocs, each claiming its own volume.
    let allocs = rig.run_job("redis.nomad", REDIS_JOB);
    assert_eq!(allocs.len(), 2, "{allocs:?}");
    for alloc in &allocs {
        rig.wait_running("example", alloc);
        let start = std::time::Instant::now();
        let logs = loop {
            let logs = rig.ok(&["alloc", "logs", alloc, "redis"]);
            if logs.contains("volume0 is r") || start.elapsed() > WAIT {
                break logs;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert!(logs.contains("volume0 is there"), "{logs}");
        assert!(logs.contains("volume0 is read-only"), "{logs}");
    }
    let volumes = rig.client().volume_status("", false).unwrap().volumes;
    for (n, alloc) in allocs.iter().enumerate() {
        let id = format!("test-volume[{n}]");
        let v = volumes.iter().find(|v| v.id == id).expect("the volume");
        assert_eq!(v.claims.len(), 1, "{v:#?}");
        assert!(allocs.contains(&v.claims[0].alloc_id), "{v:#?} {alloc}");
    }
    rig.stop("example");
    rig.wait_no_mounts_left();
    rig.stop("csi-plugin");
    wait_no_containers(&dockerd, &rig);
}
