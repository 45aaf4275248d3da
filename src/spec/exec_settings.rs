//! The agent's settings of the `exec` driver, in Nomad's form
//! `plugin "exec" { config { allow_caps = [...] } }`: which capabilities a
//! task's `cap_add` may ask for. Nomad's other keys of that block
//! (`default_pid_mode`, `default_ipc_mode`, `no_pivot_root`) are accepted
//! with a warning. Also the dirs every exec task's root has.

use crate::spec::decode::Fields;
use crate::spec::encode::Writer;

use super::docker::capability;

/// Nomad's default capabilities of an exec task (Docker's defaults without
/// `NET_RAW`), and its default `allow_caps`.
pub const NOMAD_EXEC_CAPS: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The paths of an exec task's root that the agent makes for every task,
/// with what they are; no `chroot_env` entry or volume may be placed there.
pub const TASK_ROOT_DIRS: &[(&str, &str)] = &[
    ("/dev", "the task's private /dev"),
    ("/proc", "the task's /proc"),
    ("/alloc", "the alloc dir the group's tasks share"),
    ("/local", "the task's local dir"),
    ("/secrets", "the task's secrets dir"),
    ("/tmp", "the task's tmp dir"),
];

const EXEC_SETTINGS_IGNORED: &[&str] = &["default_ipc_mode", "default_pid_mode", "no_pivot_root"];

/// How exec tasks run on this agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSettings {
    /// The capabilities a task's `cap_add` may name, upper case without
    /// `CAP_` (`ALL`: any); Nomad's defaults unless set.
    pub allow_caps: Vec<String>,
}

impl Default for ExecSettings {
    fn default() -> ExecSettings {
        ExecSettings {
            allow_caps: NOMAD_EXEC_CAPS.iter().map(|c| c.to_string()).collect(),
        }
    }
}

impl ExecSettings {
    /// Whether a task's `cap_add` may name `cap` (normalized).
    pub fn allows(&self, cap: &str) -> bool {
        self.allow_caps.iter().any(|a| a == "ALL" || a == cap)
    }

    /// Writes the settings as Nomad's plugin block, unless they are the
    /// defaults.
    pub(crate) fn write(&self, w: &mut Writer) {
        if *self == ExecSettings::default() {
            return;
        }
        w.open("plugin", Some("exec"));
        w.open("config", None);
        w.strings("allow_caps", &self.allow_caps);
        w.close();
        w.close();
    }
}

/// Decodes the `config` block of `plugin "exec"`.
pub(crate) fn decode_exec_settings(f: &mut Fields<'_>) -> ExecSettings {
    let mut settings = ExecSettings::default();
    if let Some(list) = f.strings_at("allow_caps") {
        let mut caps = Vec::new();
        for (name, pos) in list {
            match capability(&name) {
                Some(cap) => caps.push(cap),
                None => f.error(
                    pos,
                    format!(
                        "\"allow_caps\" in {}: {name:?} is not a Linux capability (such as \"SYS_ADMIN\", \"net_admin\" or \"all\")",
                        f.what()
                    ),
                ),
            }
        }
        settings.allow_caps = caps;
    }
    f.ignore(EXEC_SETTINGS_IGNORED);
    f.finish();
    settings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::AgentConfig;

    #[test]
    fn allow_caps_come_from_the_exec_plugin_block_and_round_trip() {
        let config = AgentConfig::decode("", "agent.hcl").unwrap().spec;
        assert_eq!(config.exec, ExecSettings::default());
        assert!(config.exec.allows("CHOWN") && !config.exec.allows("SYS_ADMIN"));

        let text = "plugin \"exec\" {\n  config {\n    allow_caps      = [\"cap_sys_admin\", \"chown\"]\n    no_pivot_root   = false\n  }\n}\n";
        let decoded = AgentConfig::decode(text, "agent.hcl").unwrap();
        assert_eq!(decoded.spec.exec.allow_caps, ["SYS_ADMIN", "CHOWN"]);
        assert!(decoded.spec.plugins.is_empty());
        let warnings: Vec<&str> = decoded
            .warnings
            .iter()
            .map(|w| w.message.as_str())
            .collect();
        assert_eq!(
            warnings,
            ["\"no_pivot_root\" in config in plugin \"exec\" is ignored by csi-agent"]
        );
        let again = AgentConfig::decode(&decoded.spec.to_hcl(), "agent.hcl")
            .unwrap()
            .spec;
        assert_eq!(again.exec, decoded.spec.exec);

        let bad = text.replace("chown", "chwn");
        let err = AgentConfig::decode(&bad, "agent.hcl")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"chwn\" is not a Linux capability"), "{err}");
    }
}
