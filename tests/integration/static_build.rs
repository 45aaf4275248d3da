//! The checks `make static-check` runs on the static binary in CI:
//! `scripts/static.sh -check` (fully static and stripped) and
//! `scripts/size-check.sh` (within its size budget), run as make and CI run
//! them, on files whose answers are known: this test build's own binary,
//! which links glibc and the system's gRPC dynamically, busybox-static's
//! static binary, and files of a known size.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{bin, TestDir};

/// The static busybox that `busybox-static` installs (`make deps`).
const BUSYBOX: &str = "/bin/busybox";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out: Output = cmd.current_dir(repo()).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn size_check(file: &Path, budget: &str) -> (bool, String) {
    run(Command::new("scripts/size-check.sh").arg(file).arg(budget))
}

/// A file of `len` bytes in `dir`.
fn file_of(dir: &TestDir, len: usize) -> PathBuf {
    let path = dir.join("binary");
    std::fs::write(&path, vec![0u8; len]).unwrap();
    path
}

#[test]
fn static_check_refuses_a_dynamically_linked_binary() {
    let (ok, out) = run(Command::new("scripts/static.sh").args(["-check", bin()]));
    assert!(!ok, "a dynamic binary passed: {out}");
    assert!(
        out.contains(&format!("error: {} is not statically linked", bin())),
        "{out}"
    );
}

#[test]
fn make_static_check_refuses_a_dynamically_linked_binary() {
    let (ok, out) = make_static_check(bin(), None);
    assert!(!ok, "a dynamic binary passed: {out}");
    assert!(out.contains("is not statically linked"), "{out}");
    assert!(!out.contains("size budget"), "sized after a refusal: {out}");
}

#[test]
fn size_check_refuses_a_file_over_its_budget_naming_both() {
    let dir = TestDir::new();
    let file = file_of(&dir, 4097);
    let (ok, out) = size_check(&file, "4096");
    assert!(!ok, "4097 bytes passed a budget of 4096: {out}");
    assert!(
        out.contains(&format!(
            "error: {} is 4097 bytes, over its size budget of 4096 bytes by 1",
            file.display()
        )),
        "{out}"
    );
}

#[test]
fn size_check_passes_a_file_of_exactly_its_budget() {
    let dir = TestDir::new();
    let file = file_of(&dir, 4096);
    let (ok, out) = size_check(&file, "4096");
    assert!(ok, "{out}");
    assert!(
        out.contains("4096 bytes, within its size budget of 4096 bytes"),
        "{out}"
    );
}

#[test]
fn size_check_refuses_a_budget_that_is_not_bytes() {
    let dir = TestDir::new();
    let file = file_of(&dir, 10);
    let (ok, out) = size_check(&file, "8M");
    assert!(!ok, "{out}");
    assert!(out.contains("must be a number of bytes, not '8M'"), "{out}");
}

/// A fully static, stripped binary that is not ours, or None (a skip, or
/// under CI a failure) without it.
fn static_binary() -> Option<&'static str> {
    if Path::new(BUSYBOX).exists() {
        return Some(BUSYBOX);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{BUSYBOX} is missing; `make deps` installs busybox-static");
    }
    eprintln!("skipping: {BUSYBOX} is missing (`make deps` installs busybox-static)");
    None
}

fn make_static_check(binary: &str, budget: Option<u64>) -> (bool, String) {
    let mut cmd = Command::new("make");
    cmd.args(["--no-print-directory", "static-check"])
        .arg(format!("STATIC_BIN={binary}"))
        .env_remove("MAKEFLAGS")
        .env_remove("STATIC_BUDGET");
    if let Some(budget) = budget {
        cmd.arg(format!("STATIC_BUDGET={budget}"));
    }
    run(&mut cmd)
}

#[test]
fn make_static_check_fails_a_static_binary_over_a_small_budget() {
    let Some(binary) = static_binary() else {
        return;
    };
    let size = std::fs::metadata(binary).unwrap().len();
    let (ok, out) = make_static_check(binary, Some(size - 1));
    assert!(
        !ok,
        "{binary} passed a budget a byte smaller than it: {out}"
    );
    assert!(out.contains("static and stripped"), "{out}");
    assert!(
        out.contains(&format!(
            "error: {binary} is {size} bytes, over its size budget of {} bytes by 1",
            size - 1
        )),
        "{out}"
    );
}

#[test]
fn make_static_check_passes_a_static_binary_within_its_8_mib_budget() {
    let Some(binary) = static_binary() else {
        return;
    };
    let (ok, out) = make_static_check(binary, None);
    assert!(ok, "{out}");
    assert!(
        out.contains("within its size budget of 8388608 bytes"),
        "{out}"
    );
}
