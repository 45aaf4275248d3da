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

use std::fs::{self, OpenOptions};
use std::io::Write as _;

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

/// The environment variable naming a file to which [`note`] also appends,
/// one line a note: `make test-arm64` prints it after the tests, since
/// the test harness shows a passing test's stderr to no one.
pub const NOTES_ENV: &str = "CSI_AGENT_EMULATION_NOTES";

/// Says what an emulated test left unchecked or checked more loosely: on
/// stderr, and in the file [`NOTES_ENV`] names, after the name of the
/// running test (the harness names each test's thread after it).
pub fn note(what: &str) {
    let thread = std::thread::current();
    let line = format!("{}: {what}", thread.name().unwrap_or("?"));
    eprintln!("{line}");
    if let Some(path) = std::env::var_os(NOTES_ENV) {
        let appended = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| writeln!(file, "{line}"));
        if let Err(err) = appended {
            eprintln!("cannot append to {}: {err}", path.to_string_lossy());
        }
    }
}

/// A test's timing bound: `native`, or [`SLOWDOWN`] times it under
/// emulation, which it [`note`]s with the test's `what`.
pub fn bound(native: std::time::Duration, what: &str) -> std::time::Duration {
    match emulated_on() {
        Some(kernel) => {
            let bound = native * SLOWDOWN;
            note(&format!(
                "emulated on {kernel}: {what} is bounded by {bound:?}, not {native:?} (x{SLOWDOWN})"
            ));
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
