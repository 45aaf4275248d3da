//! Whether this process runs under a user-mode emulator, such as
//! qemu-user started by binfmt_misc for a binary of another architecture
//! (how the aarch64 build is tested on an x86_64 host, see
//! docs/install.md). Such an emulator translates the instructions and the
//! system calls, but not all of them in full, and it runs several times
//! slower: a test that relies on what it does not translate, or on a
//! timing bound, asks here and says what it leaves unchecked.
//!
//! The emulator answers uname(2) for the architecture it emulates, but
//! `/proc/sys/kernel/arch` is read from the kernel untouched (Linux 5.13
//! and later), so the two disagree under emulation.

use std::fs;

/// The file in which the running kernel names its own architecture.
pub const KERNEL_ARCH: &str = "/proc/sys/kernel/arch";

/// The kernel's architecture when it differs from the one this binary was
/// built for (`std::env::consts::ARCH`): this process is emulated. `None`
/// on a native run, or when the kernel does not say (before 5.13).
pub fn emulated_on() -> Option<String> {
    let kernel = fs::read_to_string(KERNEL_ARCH).ok()?;
    differs(kernel.trim(), std::env::consts::ARCH)
}

/// `kernel` when a process built for `ours` runs on it only by emulation.
fn differs(kernel: &str, ours: &str) -> Option<String> {
    (!kernel.is_empty() && kernel != ours).then(|| kernel.to_string())
}

/// How much slower than native the tests assume an emulated run is, for
/// their timing bounds: qemu-user runs unoptimised test code 10 to 30
/// times slower, and a bound is a margin, not the expected time.
pub const SLOWDOWN: u32 = 10;

/// A test's timing bound: `native`, or [`SLOWDOWN`] times it under
/// emulation, saying so on stderr with the test's `what`.
pub fn bound(native: std::time::Duration, what: &str) -> std::time::Duration {
    match emulated_on() {
        Some(kernel) => {
            let bound = native * SLOWDOWN;
            eprintln!(
                "emulated on {kernel}: {what} is bounded by {bound:?}, not {native:?} (x{SLOWDOWN})"
            );
            bound
        }
        None => native,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emulated_process_is_one_built_for_another_architecture() {
        assert_eq!(differs("x86_64", "aarch64").as_deref(), Some("x86_64"));
        assert_eq!(differs("x86_64", "x86_64"), None);
        assert_eq!(differs("", "aarch64"), None);
    }
}
