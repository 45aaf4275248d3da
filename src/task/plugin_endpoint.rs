//! A `csi_plugin` task's endpoint, Nomad's contract: the `CSI_ENDPOINT`
//! it gets, in its own view of paths; the socket the agent watches for it
//! on the host (in its socket dir, `data_dir/plugins/<alloc>/`, which an
//! exec or docker task sees at `mount_dir`); and the spec the agent
//! registers it with, once healthy.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::Alloc;
use crate::csi::Endpoint;
use crate::plugin::{PluginSpec, Source};
use crate::spec::{CsiPlugin, Driver, Task};

/// The `CSI_ENDPOINT` a plugin task gets, as it sees it: the socket in its
/// `mount_dir` (an exec or docker task), or in its socket dir `socket_dir`
/// on the host (a raw_exec task).
pub(super) fn task_endpoint(task: &Task, csi: &CsiPlugin, socket_dir: &Path) -> String {
    let dir = match task.driver {
        Driver::RawExec => socket_dir,
        Driver::Exec | Driver::Docker => &csi.mount_dir,
    };
    format!("unix://{}", dir.join("csi.sock").display())
}

/// The socket the agent watches for a plugin task whose `CSI_ENDPOINT` is
/// `endpoint` (its own default, or its `env`'s): an exec task's socket must
/// be in its `mount_dir`, which is `socket_dir` on the host.
pub(super) fn host_endpoint(
    task: &Task,
    csi: &CsiPlugin,
    endpoint: &str,
    socket_dir: &Path,
) -> Result<Endpoint, String> {
    let endpoint: Endpoint = endpoint.parse().map_err(|e| format!("CSI_ENDPOINT: {e}"))?;
    if task.driver == Driver::RawExec {
        return Ok(endpoint);
    }
    let rest = endpoint.path().strip_prefix(&csi.mount_dir).map_err(|_| {
        format!(
            "CSI_ENDPOINT {} is not in mount_dir {}, where the agent finds the plugin's socket",
            endpoint.path().display(),
            csi.mount_dir.display()
        )
    })?;
    Endpoint::from_path(socket_dir.join(rest)).map_err(|e| format!("CSI_ENDPOINT: {e}"))
}

/// What the agent registers for task `i` of `alloc` if it is a plugin,
/// with its health timeout: the socket of the task's `CSI_ENDPOINT` on the
/// host (its socket dir is `socket_dir`), and for an exec task the base dir
/// of the paths in its RPCs.
pub(super) fn plugin_spec(
    alloc: &Alloc,
    i: usize,
    env: &BTreeMap<String, String>,
    socket_dir: &Path,
) -> Result<Option<(PluginSpec, Duration)>, String> {
    let spec = &alloc.group.tasks[i];
    let Some(csi) = &spec.csi_plugin else {
        return Ok(None);
    };
    let endpoint = host_endpoint(spec, csi, &env["CSI_ENDPOINT"], socket_dir)?;
    let registered = PluginSpec {
        id: csi.id.clone(),
        endpoint,
        plugin_type: csi.plugin_type,
        source: Source::Task {
            alloc: alloc.id.clone(),
            task: spec.name.clone(),
        },
        stage_publish_base_dir: (spec.driver != Driver::RawExec)
            .then(|| csi.stage_publish_base_dir.clone()),
    };
    Ok(Some((registered, csi.health_timeout)))
}
