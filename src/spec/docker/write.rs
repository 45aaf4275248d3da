//! A docker task's `config` block written back as HCL, for `to_hcl`: what
//! is not set is left out, so that the block decodes to the same config.

use super::{DockerConfig, DockerMount};
use crate::spec::encode::Writer;

/// Writes a docker task's `config` block.
pub(crate) fn write_docker_config(w: &mut Writer, c: &DockerConfig) {
    w.open("config", None);
    w.string("image", &c.image);
    w.opt_string("command", c.command.as_deref());
    for (key, list) in [
        ("entrypoint", &c.entrypoint),
        ("args", &c.args),
        ("cap_add", &c.cap_add),
        ("cap_drop", &c.cap_drop),
        ("ports", &c.ports),
        ("security_opt", &c.security_opt),
        ("extra_hosts", &c.extra_hosts),
        ("dns_servers", &c.dns_servers),
        ("dns_search_domains", &c.dns_search_domains),
        ("dns_options", &c.dns_options),
        ("group_add", &c.group_add),
    ] {
        if !list.is_empty() {
            w.strings(key, list);
        }
    }
    for (key, value) in [
        ("work_dir", &c.work_dir),
        ("ipc_mode", &c.ipc_mode),
        ("pid_mode", &c.pid_mode),
        ("hostname", &c.hostname),
        ("mac_address", &c.mac_address),
        ("userns_mode", &c.userns_mode),
        ("uts_mode", &c.uts_mode),
        ("cpuset_cpus", &c.cpuset_cpus),
        ("runtime", &c.runtime),
    ] {
        w.opt_string(key, value.as_deref());
    }
    if !c.network_mode.is_empty() {
        w.string("network_mode", &c.network_mode);
    }
    for (key, value) in [
        ("privileged", c.privileged),
        ("force_pull", c.force_pull),
        ("init", c.init),
        ("readonly_rootfs", c.readonly_rootfs),
        ("tty", c.tty),
        ("interactive", c.interactive),
        ("cpu_hard_limit", c.cpu_hard_limit),
    ] {
        if value {
            w.plain(key, value);
        }
    }
    if let Some(size) = c.shm_size {
        w.plain("shm_size", size);
    }
    if let Some(score) = c.oom_score_adj {
        w.plain("oom_score_adj", score);
    }
    if let Some(limit) = c.memory_hard_limit {
        w.plain("memory_hard_limit", limit);
    }
    if let Some(limit) = c.pids_limit {
        w.plain("pids_limit", limit);
    }
    if let Some(period) = c.cpu_cfs_period {
        w.plain("cpu_cfs_period", period);
    }
    if let Some(logging) = &c.logging {
        w.open("logging", None);
        if !logging.driver.is_empty() {
            w.string("type", &logging.driver);
        }
        w.map("config", &logging.config);
        w.close();
    }
    for (key, map) in [
        ("labels", &c.labels),
        ("sysctl", &c.sysctl),
        ("ulimit", &c.ulimit),
        ("storage_opt", &c.storage_opt),
    ] {
        w.map(key, map);
    }
    if !c.volumes.is_empty() {
        let volumes: Vec<String> = c.volumes.iter().map(ToString::to_string).collect();
        w.strings("volumes", &volumes);
    }
    for device in &c.devices {
        w.open("devices", None);
        w.string("host_path", &device.host_path);
        w.string("container_path", &device.container_path);
        w.string("cgroup_permissions", &device.cgroup_permissions);
        w.close();
    }
    for mount in &c.mounts {
        write_mount(w, mount);
    }
    if let Some(auth) = &c.auth {
        w.open("auth", None);
        w.opt_string("username", auth.username.as_deref());
        w.opt_string("password", auth.password.as_deref());
        w.opt_string("email", auth.email.as_deref());
        w.opt_string("server_address", auth.server_address.as_deref());
        w.close();
    }
    w.kept(&c.ignored);
    w.close();
}

fn write_mount(w: &mut Writer, mount: &DockerMount) {
    w.open("mount", None);
    w.string("type", mount.mount_type.as_str());
    w.string("target", &mount.target);
    if !mount.source.is_empty() {
        w.string("source", &mount.source);
    }
    w.plain("readonly", mount.readonly);
    if let Some(propagation) = mount.propagation {
        w.open("bind_options", None);
        w.string("propagation", propagation.as_str());
        w.close();
    }
    if mount.tmpfs_size.is_some() || mount.tmpfs_mode.is_some() {
        w.open("tmpfs_options", None);
        if let Some(size) = mount.tmpfs_size {
            w.plain("size", size);
        }
        if let Some(mode) = mount.tmpfs_mode {
            w.plain("mode", mode);
        }
        w.close();
    }
    if let Some(options) = &mount.volume_options {
        w.open("volume_options", None);
        w.plain("no_copy", options.no_copy);
        w.map("labels", &options.labels);
        w.kept(&options.ignored);
        w.close();
    }
    w.close();
}
