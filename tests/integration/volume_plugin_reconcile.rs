//! Lost unmounts: the engine's own list of containers and their named
//! volumes, against a real private dockerd ([`Dockerd`]), which is what
//! the volume plugin's reconciler matches its claims against.

use csi_agent::docker::{ContainerSpec, ContainerVolumes, Engine, Mount};
use csi_agent::volume_plugin::reconcile::volumes_in_use;

use crate::dockerd::{require_docker, Dockerd};

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
