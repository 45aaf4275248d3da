//! How a task ended, whatever its driver ran it with: what the runner,
//! the restart policy and the hooks are told of a task's end, by the
//! `exec` and `raw_exec` drivers' `waitpid` and exit records, by the
//! `docker` driver's threads, and by a start that failed.

use std::process::ExitStatus;

/// How a task ended.
#[derive(Debug)]
pub(super) enum Exit {
    Status(ExitStatus),
    /// An adopted process went away; its status is unknown until its
    /// exit record is read (`Allocs::known_exit`).
    Vanished,
    /// A container's exit code, and whether the OOM killer ended it.
    Container {
        code: i64,
        oom_killed: bool,
    },
    /// A process of the task's control group was killed by the OOM killer
    /// (`exec`, `raw_exec`): the main process's status, unless it was
    /// adopted.
    OomKilled {
        status: Option<ExitStatus>,
    },
    /// The engine could not tell how the task ended.
    Lost(String),
    /// It could not be started.
    StartFailed(String),
    /// Its artifacts could not be fetched, so it was not started.
    ArtifactFailed(String),
}

impl Exit {
    pub(super) fn success(&self) -> bool {
        match self {
            Exit::Status(s) => s.success(),
            Exit::Container { code, oom_killed } => *code == 0 && !oom_killed,
            _ => false,
        }
    }

    pub(super) fn describe(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Exit::Status(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                _ => "exited".to_string(),
            },
            Exit::Container {
                oom_killed: true, ..
            } => "killed by the OOM killer: it reached its memory limit".to_string(),
            Exit::Container { code, .. } => format!("exited with status {code}"),
            Exit::OomKilled { status } => {
                let how = status.map_or_else(
                    || "exited while the agent was not watching".to_string(),
                    |s| Exit::Status(s).describe(),
                );
                format!("OOM Killed: {how}; the task reached its memory limit")
            }
            Exit::Lost(why) => format!("ended, how is unknown: {why}"),
            Exit::Vanished => "exited while the agent was not watching".to_string(),
            Exit::StartFailed(why) => format!("failed to start: {why}"),
            Exit::ArtifactFailed(why) => format!("failed to download an artifact: {why}"),
        }
    }
}
