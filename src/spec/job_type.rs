//! A job's `type`, Nomad's job types: what a task's exit means and how
//! many instances of a group run. The job, the default restart policy and
//! the `periodic` and `parameterized` blocks each follow it.

use super::keywords;

keywords! {
    /// Nomad's job types: what a task's exit means, and how many
    /// instances of a group run.
    pub enum JobType ("job type") {
        /// Long-running: a task is restarted on any exit, per its policy.
        Service = "service",
        /// Run to completion: a task that exits 0 is done.
        Batch = "batch",
        /// A batch job with one instance on every node: here, one.
        Sysbatch = "sysbatch",
        /// A service with one instance on every node: here, one.
        System = "system",
    }
}

impl JobType {
    /// Whether a task that exits 0 is done rather than restarted.
    pub fn runs_to_completion(self) -> bool {
        matches!(self, JobType::Batch | JobType::Sysbatch)
    }
}
