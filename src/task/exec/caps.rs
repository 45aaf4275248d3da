//! An `exec` task's capabilities, as Nomad's exec driver sets them: Nomad's
//! default set ([`crate::spec::NOMAD_EXEC_CAPS`]) within the agent's
//! `allow_caps`, less the task's `cap_drop` (`all`: every one), plus its
//! `cap_add`. The child drops every other capability from its bounding
//! set before it becomes the task's user; a task running as root then gets
//! the set as its effective, permitted, inheritable and ambient sets, and
//! a task of another user only the bounding set (as Nomad's executor
//! does). `no_new_privs` is set last, so that no setuid binary or file
//! capability gives the task more.
//!
//! The mask is computed in the parent; the child's side (`drop_bounding`,
//! `set`) is system calls only, through the start's `Syscall`
//! (`syscall/`).

use std::fs;
use std::io;

use super::syscall::Syscall;

/// The capabilities by number, without their `CAP_` prefix.
pub const BY_NUMBER: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The highest capability this kernel knows.
pub fn last_cap() -> u32 {
    fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(BY_NUMBER.len() as u32 - 1)
        .min(63)
}

/// The bits of `names` (normalized: upper case, no `CAP_`; `ALL` is every
/// one up to `last`).
fn mask_of<S: AsRef<str>>(names: &[S], last: u32) -> u64 {
    let all = if last >= 63 {
        u64::MAX
    } else {
        (1u64 << (last + 1)) - 1
    };
    names.iter().fold(0, |mask, name| {
        let name = name.as_ref();
        if name == "ALL" {
            return all;
        }
        match BY_NUMBER.iter().position(|c| *c == name) {
            Some(bit) => mask | (1u64 << bit),
            None => mask,
        }
    }) & all
}

/// The task's capabilities: Nomad's defaults within `allow`, less `drop`,
/// plus `add`.
pub fn task_caps(allow: &[String], add: &[String], drop: &[String], last: u32) -> u64 {
    let mut caps = mask_of(crate::spec::NOMAD_EXEC_CAPS, last) & mask_of(allow, last);
    caps &= !mask_of(drop, last);
    caps | mask_of(add, last)
}

/// Drops from the bounding set every capability up to `last` not in
/// `keep` (needs `CAP_SETPCAP`: before the task's user).
pub(super) fn drop_bounding(sys: &dyn Syscall, keep: u64, last: u32) -> io::Result<()> {
    for cap in 0..=last {
        if keep & (1u64 << cap) == 0 {
            sys.drop_bounding(cap)?;
        }
    }
    Ok(())
}

/// Makes `caps` the effective, permitted, inheritable and ambient sets.
pub(super) fn set(sys: &dyn Syscall, caps: u64, last: u32) -> io::Result<()> {
    sys.capset(caps)?;
    for cap in 0..=last {
        if caps & (1u64 << cap) != 0 {
            sys.raise_ambient(cap)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_task_set_is_nomads_defaults_within_allow_less_drop_plus_add() {
        let allow: Vec<String> = names(crate::spec::NOMAD_EXEC_CAPS);
        // Docker's default 0xa80425fb without NET_RAW (bit 13).
        assert_eq!(task_caps(&allow, &[], &[], 40), 0xa804_05fb);
        assert_eq!(task_caps(&allow, &[], &names(&["ALL"]), 40), 0);
        assert_eq!(
            task_caps(&allow, &names(&["SYS_ADMIN"]), &names(&["ALL"]), 40),
            1 << 21
        );
        assert_eq!(
            task_caps(&allow, &names(&["NET_RAW"]), &names(&["KILL"]), 40),
            (0xa804_05fb & !(1 << 5)) | (1 << 13)
        );
        assert_eq!(task_caps(&names(&["CHOWN"]), &[], &[], 40), 1);
        assert_eq!(mask_of(&names(&["ALL"]), 40), (1 << 41) - 1);
        assert_eq!(mask_of(&names(&["CHECKPOINT_RESTORE"]), 39), 0);
    }
}
