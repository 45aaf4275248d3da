//! The writers' guard: a small process of its own (`csi-agent guard`)
//! that keeps a node's promise to stop its writers
//! (`stop_after_disconnect`) when the agent cannot: it was killed, or it
//! hangs. Tasks outlive the agent by design (a restarted agent adopts
//! them), so without the guard a dead agent's writers would write on
//! after the fencer, counting on the promise, gave their volumes away.
//!
//! The guard holds no state of its own. It reads two files of the data
//! dir every [`POLL`]: the node's last keep-alive that went through
//! ([`crate::cluster::alive`]), and the writers ([`WRITERS_FILE`]: the promise's
//! `stop_after_disconnect` and each task holding a write claim, by pid and
//! start time, with its kill timeout), both rewritten by the agent as they
//! change. Once the keep-alive is `stop_after_disconnect` plus [`GRACE`]
//! old, it sends each live writer's process group SIGTERM, and SIGKILL
//! after its kill timeout: the same stop the agent makes itself at
//! `stop_after_disconnect`, a little later, so a live agent's stop comes
//! first. The promise's budget counts the grace and the poll.
//!
//! Each agent process starts a guard; the newest writes its pid to
//! [`PID_FILE`]. A guard whose agent is gone exits once no writer it
//! knows of lives, or once a newer guard has taken over.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::cluster::alive::{self, Alive};
use crate::task::exec::{signal_group, start_ticks};

/// The writers' file in the data dir.
pub const WRITERS_FILE: &str = "cluster-writers";

/// The newest guard's pid, in the data dir.
pub const PID_FILE: &str = "cluster-guard.pid";

/// How long after the agent's own stop the guard stops the writers.
pub const GRACE: Duration = Duration::from_secs(1);

/// How often the guard reads the files.
pub const POLL: Duration = Duration::from_millis(100);

/// A task holding a write claim: its process (the leader of its process
/// group), and how long it gets between SIGTERM and SIGKILL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    pub pid: u32,
    pub start_ticks: u64,
    pub kill_timeout: Duration,
}

/// What the guard must stop, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writers {
    pub stop_after: Duration,
    pub tasks: Vec<Writer>,
}

impl Writers {
    /// The file's text: `stop_after_ms N`, then `task PID TICKS KILL_MS`
    /// a line.
    pub fn render(&self) -> String {
        let mut text = format!("stop_after_ms {}\n", self.stop_after.as_millis());
        for w in &self.tasks {
            text.push_str(&format!(
                "task {} {} {}\n",
                w.pid,
                w.start_ticks,
                w.kill_timeout.as_millis()
            ));
        }
        text
    }

    /// [`Writers::render`]'s text back; `None` if it is not one.
    pub fn parse(text: &str) -> Option<Writers> {
        let mut lines = text.lines();
        let stop_after = lines.next()?.strip_prefix("stop_after_ms ")?.parse().ok()?;
        let mut tasks = Vec::new();
        for line in lines {
            let mut f = line.strip_prefix("task ")?.split(' ');
            tasks.push(Writer {
                pid: f.next()?.parse().ok()?,
                start_ticks: f.next()?.parse().ok()?,
                kill_timeout: Duration::from_millis(f.next()?.parse().ok()?),
            });
        }
        Some(Writers {
            stop_after: Duration::from_millis(stop_after),
            tasks,
        })
    }
}

/// Whether the writers are due to stop: the last keep-alive was sent
/// `stop_after` plus [`GRACE`] ago.
pub fn due(alive: &Alive, writers: &Writers) -> bool {
    alive.sent.elapsed() >= writers.stop_after + GRACE
}

/// The guard of the agent `agent` (pid and start time) on `data_dir`,
/// until that agent is gone and nothing is left to guard.
pub fn run(data_dir: &Path, agent: (u32, u64)) -> io::Result<()> {
    let me = std::process::id();
    crate::state::store::write_atomic(&data_dir.join(PID_FILE), format!("{me}\n").as_bytes())
        .map_err(|err| io::Error::other(crate::error_chain(&err)))?;
    log::info!(
        "Guard: keeping the writers' stop of the agent (pid {}) in {}",
        agent.0,
        data_dir.display()
    );
    // Writers signalled, with when SIGKILL is due (`None`: sent).
    let mut signalled: BTreeMap<(u32, u64), Option<Instant>> = BTreeMap::new();
    loop {
        thread::sleep(POLL);
        let writers = fs::read_to_string(data_dir.join(WRITERS_FILE))
            .ok()
            .and_then(|text| Writers::parse(&text));
        let live: Vec<Writer> = writers
            .iter()
            .flat_map(|w| &w.tasks)
            .filter(|w| start_ticks(w.pid) == Some(w.start_ticks))
            .cloned()
            .collect();
        if start_ticks(agent.0) != Some(agent.1) {
            let newest = fs::read_to_string(data_dir.join(PID_FILE)).ok();
            let replaced = newest.is_some_and(|pid| pid.trim() != me.to_string());
            if live.is_empty() || replaced {
                log::info!("Guard: the agent is gone and nothing is left to guard");
                return Ok(());
            }
        }
        let alive = Alive::read(&data_dir.join(alive::FILE));
        let (Some(writers), Some(alive)) = (writers, alive) else {
            continue;
        };
        if !due(&alive, &writers) {
            continue;
        }
        let now = Instant::now();
        for w in &live {
            match signalled.get(&(w.pid, w.start_ticks)).copied() {
                None => {
                    log::warn!(
                        "Guard: no keep-alive went through for {}: stopping writer pid {} (SIGTERM)",
                        crate::units::format_duration(alive.sent.elapsed()),
                        w.pid
                    );
                    let _ = signal_group(w.pid, libc::SIGTERM);
                    signalled.insert((w.pid, w.start_ticks), Some(now + w.kill_timeout));
                }
                Some(Some(at)) if at <= now => {
                    log::warn!(
                        "Guard: writer pid {} outlived its kill timeout (SIGKILL)",
                        w.pid
                    );
                    let _ = signal_group(w.pid, libc::SIGKILL);
                    signalled.insert((w.pid, w.start_ticks), None);
                }
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writers_file_reads_back_and_refuses_what_is_not_one() {
        let writers = Writers {
            stop_after: Duration::from_millis(9000),
            tasks: vec![
                Writer {
                    pid: 42,
                    start_ticks: 7,
                    kill_timeout: Duration::from_secs(5),
                },
                Writer {
                    pid: 43,
                    start_ticks: 8,
                    kill_timeout: Duration::from_millis(1500),
                },
            ],
        };
        let text = writers.render();
        assert_eq!(text, "stop_after_ms 9000\ntask 42 7 5000\ntask 43 8 1500\n");
        assert_eq!(Writers::parse(&text), Some(writers));
        assert_eq!(Writers::parse("task 42 7 5000\n"), None);
        assert_eq!(Writers::parse("stop_after_ms 9000\ntask 42 x 5000\n"), None);
    }

    #[test]
    fn writers_are_due_a_grace_after_the_agent_s_own_stop() {
        let writers = Writers {
            stop_after: Duration::from_secs(2),
            tasks: Vec::new(),
        };
        let at = |ago: Duration| Alive {
            sent: Instant::now() - ago,
            lease: 1,
        };
        assert!(!due(&at(Duration::from_millis(2500)), &writers));
        assert!(due(&at(Duration::from_millis(3100)), &writers));
    }
}
