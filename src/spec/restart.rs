//! A `restart` block: what happens when a task fails. A group's policy
//! defaults to its job type's, as in Nomad, and a task's own block
//! overrides its group's field by field.

use std::time::Duration;

use super::decode::Fields;
use super::encode::Writer;
use super::job_type::JobType;
use super::{keywords, Kept};

/// Keys of Nomad's `restart` block that csi-agent ignores.
pub(super) const RESTART_IGNORED: &[&str] = &["render_templates"];

/// What to do when a task fails: restart it up to `attempts` times within
/// `interval`, `delay` apart, then `mode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restart {
    pub attempts: u64,
    pub interval: Duration,
    pub delay: Duration,
    pub mode: RestartMode,
    pub ignored: Vec<Kept>,
}

impl Default for Restart {
    /// Nomad's defaults for service jobs.
    fn default() -> Restart {
        Restart::for_type(JobType::Service)
    }
}

impl Restart {
    /// Nomad's default policy for jobs of type `job_type`: batch jobs get
    /// more attempts over a day.
    pub fn for_type(job_type: JobType) -> Restart {
        let (attempts, interval) = if job_type.runs_to_completion() {
            (3, Duration::from_secs(24 * 60 * 60))
        } else {
            (2, Duration::from_secs(30 * 60))
        };
        Restart {
            attempts,
            interval,
            delay: Duration::from_secs(15),
            mode: RestartMode::Fail,
            ignored: Vec::new(),
        }
    }
}

keywords! {
    /// What happens once a task has used up its restart attempts.
    pub enum RestartMode ("restart mode") {
        /// The task, and so the group instance, fails.
        Fail = "fail",
        /// Wait until the interval has passed, then try again.
        Delay = "delay",
    }
}

/// Decodes a `restart` block; what it does not set comes from `defaults`
/// (the job type's policy for a group, the group's for a task).
pub(crate) fn decode_restart(f: &mut Fields<'_>, defaults: &Restart) -> Restart {
    let restart = Restart {
        attempts: f.u64("attempts").unwrap_or(defaults.attempts),
        interval: f.duration("interval").unwrap_or(defaults.interval),
        delay: f.duration("delay").unwrap_or(defaults.delay),
        mode: f.parsed("mode").unwrap_or(defaults.mode),
        ignored: {
            let mut ignored = defaults.ignored.clone();
            ignored.extend(f.ignore(RESTART_IGNORED));
            ignored
        },
    };
    f.finish();
    restart
}

/// Writes a `restart` block back as HCL that decodes to it.
pub(crate) fn write_restart(w: &mut Writer, restart: &Restart) {
    w.open("restart", None);
    w.plain("attempts", restart.attempts);
    w.duration("interval", restart.interval);
    w.duration("delay", restart.delay);
    w.string("mode", restart.mode.as_str());
    w.kept(&restart.ignored);
    w.close();
}
