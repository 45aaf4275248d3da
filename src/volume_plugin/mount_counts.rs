//! The Mounts of each claim that no Unmount has matched yet, as this
//! process has answered them: when an Unmount releases its claim.
//!
//! dockerd sends one mount ID for more than one user of a volume: `docker
//! cp` on a running container mounts and unmounts the volume with the
//! container's own mount ID (moby/moby#47964). So an Unmount releases the
//! claim only when it matches the last Mount of its ID and volume (the
//! volume too: Podman sends one fixed ID for the mounts of every volume).
//!
//! The Mounts are counted per engine process, as the kernel names the
//! peer of their connection (`SO_PEERCRED`). A Mount from another process
//! than the one whose Mounts are counted starts the count anew: the
//! engine restarted, and its earlier Mounts' Unmounts will never come
//! (docker/for-linux#404). That is a live restore: a dockerd that comes
//! back to running containers sends each one's Mount again, with the
//! mount ID it had, so that its own count of users is right
//! (moby/moby#45754, 2023, backported to 20.10 and 23.0; Debian's 20.10.24
//! predates it), and the container's one Unmount at its stop must release
//! the claim. A peer the kernel cannot name (an
//! engine outside the agent's PID namespace) is counted as one process.
//!
//! The counts live in memory: after the agent restarts, a claim's count
//! is unknown, and its first Unmount releases it (a `docker cp` that
//! spans an agent restart is the one case that loses a claim still in
//! use; the container's next start claims it again).

use std::collections::HashMap;
use std::sync::Mutex;

/// The outstanding Mounts of each claim, by volume name and alloc ID.
#[derive(Default)]
pub(super) struct MountCounts(Mutex<HashMap<(String, String), Held>>);

/// The outstanding Mounts of one claim.
struct Held {
    count: u32,
    /// The process that sent them, if the kernel named it.
    engine_pid: Option<u32>,
}

impl MountCounts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Held>> {
        // A handler that panicked left the map as it was: still good.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a Mount of `alloc_id` on `volume` is outstanding.
    pub(super) fn held(&self, volume: &str, alloc_id: &str) -> bool {
        self.lock()
            .contains_key(&(volume.to_string(), alloc_id.to_string()))
    }

    /// Counts a Mount of `alloc_id` on `volume` that `engine_pid` sent.
    pub(super) fn mounted(&self, volume: &str, alloc_id: &str, engine_pid: Option<u32>) {
        let mut mounts = self.lock();
        let held = mounts
            .entry((volume.to_string(), alloc_id.to_string()))
            .or_insert(Held {
                count: 0,
                engine_pid,
            });
        match (held.engine_pid, engine_pid) {
            (Some(was), Some(now)) if was != now => {
                log::info!(
                    "Volume plugin: alloc {alloc_id}'s Mount of volume {volume} comes from engine process {now}, its {} earlier ones from process {was}: counted anew, as an engine that restarted mounts its running containers' volumes again",
                    held.count
                );
                held.count = 0;
                held.engine_pid = Some(now);
            }
            (None, Some(now)) => held.engine_pid = Some(now),
            _ => {}
        }
        held.count += 1;
    }

    /// Counts an Unmount: whether it was the last outstanding Mount (or
    /// one the count does not know), which releases the claim.
    pub(super) fn unmounted(&self, volume: &str, alloc_id: &str) -> bool {
        let mut mounts = self.lock();
        let key = (volume.to_string(), alloc_id.to_string());
        match mounts.get_mut(&key) {
            Some(held) if held.count > 1 => {
                held.count -= 1;
                false
            }
            _ => {
                mounts.remove(&key);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_mount_of_an_id_from_the_same_engine_waits_for_both_unmounts() {
        let counts = MountCounts::default();
        counts.mounted("v", "docker-c1", Some(100));
        // docker cp's Mount on the running container.
        counts.mounted("v", "docker-c1", Some(100));
        assert!(!counts.unmounted("v", "docker-c1"));
        assert!(counts.held("v", "docker-c1"));
        assert!(counts.unmounted("v", "docker-c1"));
        assert!(!counts.held("v", "docker-c1"));
    }

    #[test]
    fn a_restarted_engine_s_mount_again_is_counted_anew() {
        let counts = MountCounts::default();
        counts.mounted("v", "docker-c1", Some(100));
        counts.mounted("v", "docker-c1", Some(100));
        // dockerd restarted (live restore): its Mount of the running
        // container comes from a new process.
        counts.mounted("v", "docker-c1", Some(200));
        assert!(counts.unmounted("v", "docker-c1"));
    }

    #[test]
    fn an_engine_the_kernel_cannot_name_is_one_process() {
        let counts = MountCounts::default();
        counts.mounted("v", "docker-c1", None);
        counts.mounted("v", "docker-c1", None);
        assert!(!counts.unmounted("v", "docker-c1"));
        assert!(counts.unmounted("v", "docker-c1"));
        // Named later: the count it had goes on.
        counts.mounted("v", "docker-c2", None);
        counts.mounted("v", "docker-c2", Some(100));
        assert!(!counts.unmounted("v", "docker-c2"));
    }

    #[test]
    fn one_id_on_two_volumes_is_two_claims() {
        let counts = MountCounts::default();
        // Podman's fixed mount ID, for two volumes.
        counts.mounted("a", "podman-fixed", Some(100));
        counts.mounted("b", "podman-fixed", Some(100));
        assert!(counts.unmounted("a", "podman-fixed"));
        assert!(counts.held("b", "podman-fixed"));
        assert!(counts.unmounted("b", "podman-fixed"));
    }

    #[test]
    fn an_unmount_the_count_does_not_know_releases() {
        let counts = MountCounts::default();
        assert!(counts.unmounted("v", "docker-c1"));
    }
}
