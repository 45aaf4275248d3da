//! The node's last keep-alive that went through, kept in a file of the
//! data dir for the agent's next process: tasks outlive the agent, and a
//! node's promise to stop its writers (`stop_after_disconnect`) runs from
//! that keep-alive, not from when a new process happens to start.
//!
//! The file holds the host's boot ID, the keep-alive's send time on the
//! monotonic clock (microseconds) and the lease it kept alive. A file from
//! another boot is ignored: the monotonic clock started over, and the
//! tasks are gone. It is replaced at each keep-alive, with the store's
//! atomic write.

use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

/// The file's name in the data dir.
pub const FILE: &str = "cluster-alive";

/// A keep-alive that went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alive {
    /// When it was sent.
    pub sent: Instant,
    /// The lease it kept alive.
    pub lease: i64,
}

/// The host's boot ID: another after every boot.
fn boot_id() -> io::Result<String> {
    Ok(fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_string())
}

impl Alive {
    /// Writes `self` to `path`, replacing what was there at once (the
    /// store's atomic write).
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let age = self.sent.elapsed().as_micros() as u64;
        let sent_us = crate::trace::now_us().saturating_sub(age);
        let text = format!("{} {sent_us} {}\n", boot_id()?, self.lease);
        crate::state::store::write_atomic(path, text.as_bytes())
            .map_err(|err| io::Error::other(crate::error_chain(&err)))
    }

    /// What `path` holds, if it was written since this boot (and can be
    /// read).
    pub fn read(path: &Path) -> Option<Alive> {
        let text = fs::read_to_string(path).ok()?;
        Alive::parse(&text, &boot_id().ok()?, crate::trace::now_us())
    }

    /// `text` as written on the boot `boot`, read at `now_us`.
    fn parse(text: &str, boot: &str, now_us: u64) -> Option<Alive> {
        let mut fields = text.split_whitespace();
        if fields.next()? != boot {
            return None;
        }
        let sent_us: u64 = fields.next()?.parse().ok()?;
        let lease: i64 = fields.next()?.parse().ok()?;
        let age = Duration::from_micros(now_us.checked_sub(sent_us)?);
        Some(Alive {
            sent: Instant::now().checked_sub(age)?,
            lease,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keep_alive_is_read_back_at_its_age_on_the_same_boot_only() {
        let now = 50_000_000;
        let alive = Alive::parse("b1 47000000 77\n", "b1", now).unwrap();
        assert_eq!(alive.lease, 77);
        let age = alive.sent.elapsed();
        assert!(
            age >= Duration::from_secs(3) && age < Duration::from_secs(4),
            "{age:?}"
        );
        assert_eq!(Alive::parse("b0 47000000 77\n", "b1", now), None);
        // A time ahead of the clock is not a keep-alive of this boot.
        assert_eq!(Alive::parse("b1 51000000 77\n", "b1", now), None);
        assert_eq!(Alive::parse("b1 x 77\n", "b1", now), None);
    }

    #[test]
    fn a_written_keep_alive_reads_back() {
        let dir = std::env::temp_dir().join(format!("csi-agent-alive-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE);
        let sent = Instant::now() - Duration::from_secs(2);
        Alive { sent, lease: 9 }.write(&path).unwrap();
        let back = Alive::read(&path).unwrap();
        assert_eq!(back.lease, 9);
        let off = if back.sent > sent {
            back.sent - sent
        } else {
            sent - back.sent
        };
        assert!(off < Duration::from_millis(50), "{off:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
